package meta

import "github.com/atoll-fs/atoll/internal/faults"

// The failpoints of tx.go and move.go, registered so that ATOLL_FAILPOINTS may arm
// them (faults.Parse rejects names nobody registered).
func init() {
	faults.Register(FailTxAfterIntent, FailTxAfterPrepare, FailTxAfterDecision, FailTxAfterDecide,
		FailParticipantAfterPrepare, FailParticipantBeforeApply, FailParticipantAfterApply, FailLocalBeforeCommit,
		FailMoveAfterBase, FailMoveAfterFreeze, FailMoveAfterCopy, FailMoveAfterFlip, FailMoveAfterImport,
		FailMoveAfterChunk)
}
