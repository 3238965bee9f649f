// Package faults holds named failpoints for recovery tests.
//
// A failpoint is a call to Set.Hit("component.step") placed at an
// interesting instant of a multi-step operation (after a fragment's bytes
// are written but before its metadata commits, between the prepare and the
// commit of a cross-island operation, ...). In production the Set is nil or
// empty and Hit costs one nil check or one atomic load.
//
// Tests arm failpoints either in-process (Set.Enable) or in a child process
// through the environment variable ATOLL_FAILPOINTS, whose format is
//
//	name=action[;name=action...]
//
// with action one of
//
//	error        Hit returns ErrInjected
//	crash        the process kills itself with SIGKILL (no deferred code runs)
//	sleep(DUR)   Hit sleeps for a time.ParseDuration duration, then returns nil
//	N*action     the action fires on the N-th hit only (1-based); earlier
//	             and later hits pass
//
// In-process tests may also arm a Call action, which runs a function of
// theirs at the failpoint (to park the code there until the test has acted).
//
// # Registered names
//
// Every package that hits failpoints registers their names (Register, from
// an init function next to the constants naming them), and Parse rejects a
// name no linked package registered, listing it. A failpoint renamed in the
// product therefore breaks the tests that arm the old name instead of
// silently turning them into no-ops. A binary that parses ATOLL_FAILPOINTS
// must link every package whose failpoints it is meant to honour
// (cmd/atoll links them all). Enable, used by in-process tests, does not
// check names.
//
// # Build tag
//
// Reading the environment is gated behind the build tag "failpoints": only
// a binary built with -tags failpoints honours ATOLL_FAILPOINTS (Enabled is
// true). In any other build (a release binary) FromEnv returns an error
// when ATOLL_FAILPOINTS is set and non-empty, so every role that reads it
// (atoll storage, atoll meta, atoll clean, and atoll dev before it starts
// its children) refuses to start with that error; nothing is armed
// silently, and nothing silently is not. The integration tests in test/
// build their atoll binary with -tags failpoints.
//
// The gate is on the environment only: in-process tests that build a Set
// themselves (New, Enable, Parse; see internal/meta/crash_test.go) work in
// every build, and an empty Set costs the same in every build.
//
// Invariant: an unarmed failpoint never changes behaviour.
package faults
