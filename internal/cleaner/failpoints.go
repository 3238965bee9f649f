package cleaner

import "github.com/atoll-fs/atoll/internal/faults"

// The failpoints of cleaner.go, registered so that ATOLL_FAILPOINTS may
// arm them (faults.Parse rejects names nobody registered).
func init() { faults.Register(FailAfterCopy, FailAfterDeltas, FailMidDelete) }
