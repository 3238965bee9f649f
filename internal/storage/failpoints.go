package storage

import "github.com/atoll-fs/atoll/internal/faults"

// The failpoints of store.go, registered so that ATOLL_FAILPOINTS may arm
// them (faults.Parse rejects names nobody registered).
func init() {
	faults.Register(FailPutBeforeData, FailPutAfterData, FailPutAfterMeta,
		FailAppendBeforeData, FailAppendAfterData, FailAppendAfterMeta,
		FailRepairBeforeRename, FailDeleteAfterMeta)
}
