// Package lockcheck is the mutex type of Atoll's servers and clients:
// sync.Mutex and sync.RWMutex in every normal build, and under the build
// tag `deadlock` the mutexes of github.com/sasha-s/go-deadlock, which
// report
//
//   - recursive locking: a goroutine locking a mutex it already holds
//     (the shape of issue 13: a component calling back into itself
//     through another component while it holds its own lock);
//   - lock-order inversions: two mutexes taken in one order somewhere and
//     in the other order elsewhere, even if the two never raced in this
//     run;
//   - a lock waited for longer than ATOLL_LOCKCHECK_TIMEOUT (a Go
//     duration, default 3m; 0 turns this check off).
//
// On a report the process prints both stacks to stderr, a line starting
// with ReportPrefix, and exits with ExitCode, so a multi-process test
// sees its server die instead of hanging. The integration tests build
// their atoll binary with `-tags deadlock,failpoints` (test/doc.go).
//
// Only mutexes that guard a component's state use this type; a release
// build pays nothing (the types are aliases).
package lockcheck

// ExitCode is the exit status of a process that found a potential
// deadlock (deadlock builds only).
const ExitCode = 66

// ReportPrefix starts the line a deadlock build prints before exiting.
const ReportPrefix = "lockcheck: potential deadlock"
