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
// Invariant: an unarmed failpoint never changes behaviour.
package faults
