// Package test holds Atoll's multi-server tests: real storage servers on
// 127.0.0.1 (in-process, or child processes of a freshly built atoll binary
// where a test must kill -9 one), driven through the client library, the
// raw storage protocol, a real FUSE mount and real NFS clients. Every test
// asserts on bytes and errors.
//
// # What a test here must do to count
//
//   - Assert outcomes: bytes equal, the right errno, the invariant after
//     the crash. A log line is not an assertion; a test that cannot fail
//     is deleted, not kept.
//   - Prove its fault happened. A failpoint that never fires fails its
//     test (a crash case checks that the process died at that failpoint),
//     and an unknown failpoint name is an error (faults.Parse), so a renamed failpoint cannot turn a crash test into
//     a no-op. A race a test is named after is made to happen (a failpoint
//     that pauses one side), not hoped for.
//   - Fail rather than skip under CI. A missing prerequisite (FUSE,
//     chromium, nfs-cp, jq, pjdfstest) skips with its reason on a
//     developer's machine and fails when $CI is set
//     (testenv.Missing); `make setup`
//     installs all of them, and `make test` runs it first.
//   - No wall-clock assertions and no sleeps as synchronisation: wait for
//     the event (poll the condition, a channel) with a generous deadline
//     that only a hang reaches. Speed is measured by benchmarks beside a
//     reference, never asserted here.
//   - Break what it guards once, before it is called done: revert the fix
//     or disable the behaviour and watch the test fail.
//
// # The binary the tests run
//
// Multi-process tests build cmd/atoll once per run (atoll in
// cluster_test.go) with `-tags failpoints,deadlock`:
//
//   - failpoints: only such a build honours ATOLL_FAILPOINTS; a release
//     build refuses to start with it set (internal/faults).
//   - deadlock: every server's and client's mutex is go-deadlock's
//     (internal/lockcheck), which reports recursive locking, lock-order
//     inversions and waits longer than ATOLL_LOCKCHECK_TIMEOUT, prints
//     both stacks and exits 66. That is the guard for invariant 7's class
//     of bug (issue 13: the cleaner held its mutex across a callback into
//     the manager, which called back into the cleaner): such a server
//     dies with "POTENTIAL DEADLOCK: Recursive locking" in the test's log
//     instead of hanging. TestManagerAnswersWhileRebuildCopies reproduces
//     that hang; TestReadmeTour runs the README's tour command by command.
package test
