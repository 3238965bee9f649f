//go:build deadlock

package lockcheck

import (
	"fmt"
	"os"
	"time"

	deadlock "github.com/sasha-s/go-deadlock"
)

// Mutex reports recursive locking, order inversions and long waits.
type Mutex = deadlock.Mutex

// RWMutex reports recursive locking, order inversions and long waits.
type RWMutex = deadlock.RWMutex

// Enabled reports whether this build checks locks.
const Enabled = true

func init() {
	deadlock.Opts.DeadlockTimeout = 3 * time.Minute
	if v := os.Getenv("ATOLL_LOCKCHECK_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "lockcheck: ATOLL_LOCKCHECK_TIMEOUT=%q: %v\n", v, err)
			os.Exit(2)
		}
		deadlock.Opts.DeadlockTimeout = d
	}
	deadlock.Opts.OnPotentialDeadlock = func() {
		fmt.Fprintf(os.Stderr, "%s (pid %d): see the report above\n", ReportPrefix, os.Getpid())
		os.Exit(ExitCode)
	}
}
