package client

import "github.com/atoll-fs/atoll/internal/faults"

// FailPutBefore is hit before a block is written (log.go, physical.go,
// which spell it out).
const FailPutBefore = "client.put.before"

// Registered so that ATOLL_FAILPOINTS may arm it (faults.Parse rejects
// names nobody registered).
func init() { faults.Register(FailPutBefore) }
