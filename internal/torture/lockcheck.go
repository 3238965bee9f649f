package torture

import (
	"cmp"
	"fmt"
	"slices"
)

// incOutcome is what became of one increment of a counter file.
type incOutcome uint8

const (
	incNoLock  incOutcome = iota // the lock was not granted: nothing happened
	incNoWrite                   // held, given up before the write started: no effect
	incUnknown                   // the write started and was not confirmed: it may land, at any time
	incAcked                     // durable while the lock was certainly held
)

func (o incOutcome) String() string {
	return [...]string{"no lock", "no write", "unknown", "acked"}[o]
}

// lockHold is one increment: a lock taken on a counter file, the value
// read under it, value+1 written, the lock released. Times are
// nanoseconds since the run's start (the history's clock; every client
// runs in the engine's process, so they compare). A zero time was not
// reached.
type lockHold struct {
	Client, File     int
	Owner            string // who held it (the island's owner: holds of one owner never overlap)
	AcqStart, AcqEnd int64  // the lock request's call and its grant's return
	// HeldUntil: the lock was certainly held over [AcqEnd, HeldUntil]:
	// a lock check that passed at HeldUntil (the client's session was
	// still alive then, so nothing released the lock since the grant).
	// 0: never confirmed (the hold proves nothing).
	HeldUntil        int64
	RelStart, RelEnd int64 // the unlock's call and return (RelEnd 0: it failed)
	Waited           bool  // another owner held the lock when it was asked for
	Lost             bool  // the client's lock check said its session may have ended
	Read             int64 // the value read (-1: none)
	Outcome          incOutcome
	Why              string // the error that decided the outcome, if any
	cause            error  // that error (unknown outcomes are counted by it)
	finished         bool   // false: the step that failed was abandoned (opTimeout)
}

// failed records the error that decides h's outcome (nil: none).
func (h *lockHold) failed(err error, finished bool) {
	h.cause, h.finished, h.Why = err, finished, ""
	if err != nil || !finished {
		h.Why = why(err, finished)
	}
}

func (h lockHold) String() string {
	return fmt.Sprintf("client %d (%s) counter %d [acquire %.3fs..%.3fs, held until %.3fs, release %.3fs..%.3fs] read %d: %s",
		h.Client, h.Owner, h.File, sec(h.AcqStart), sec(h.AcqEnd), sec(h.HeldUntil), sec(h.RelStart), sec(h.RelEnd), h.Read, h.Outcome)
}

func sec(ns int64) float64 { return float64(ns) / 1e9 }

// maxLockViolations bounds the violations reported per check (a broken
// lock breaks thousands of holds).
const maxLockViolations = 10

// checkLocks checks the lock workload's history against the counters'
// final values (final[i] of counter file i; -1: unreadable):
//
//  1. every counter counts each acknowledged increment and at most the
//     unknown ones besides (an acknowledged write is never lost, and no
//     increment lands twice), and is at least what any acknowledged
//     increment wrote;
//  2. no two holds of one file overlap where both were certainly held
//     (a double grant);
//  3. no two acknowledged increments of a file read the same value (a
//     lost update), and an acknowledged increment reads at least what
//     every acknowledged increment that finished before its grant wrote
//     (a rolled-back write).
//
// It returns what it found wrong, at most maxLockViolations per check.
func checkLocks(holds []lockHold, final []int64) []string {
	var out []string
	for file, fin := range final {
		var mine []lockHold
		for _, h := range holds {
			if h.File == file {
				mine = append(mine, h)
			}
		}
		out = append(out, checkCount(file, fin, mine)...)
		out = append(out, checkOverlaps(file, mine)...)
		out = append(out, checkValues(file, mine)...)
	}
	return out
}

// checkCount is check 1 for one file.
func checkCount(file int, final int64, holds []lockHold) []string {
	var acked, unknown, wrote int64
	for _, h := range holds {
		switch h.Outcome {
		case incAcked:
			acked++
			wrote = max(wrote, h.Read+1)
		case incUnknown:
			unknown++
		}
	}
	switch {
	case final < 0:
		return []string{fmt.Sprintf("counter %d: unreadable after the heal (%d increments acknowledged)", file, acked)}
	case final < acked:
		return []string{fmt.Sprintf("counter %d: final value %d, but %d increments were acknowledged (%d unknown): acknowledged increments lost", file, final, acked, unknown)}
	case final > acked+unknown:
		return []string{fmt.Sprintf("counter %d: final value %d, but only %d increments were acknowledged and %d unknown: an increment landed twice", file, final, acked, unknown)}
	case final < wrote:
		return []string{fmt.Sprintf("counter %d: final value %d, below the %d an acknowledged increment wrote: a write under a lock was rolled back", file, final, wrote)}
	}
	return nil
}

// checkOverlaps is check 2 for one file. A hold confirmed at HeldUntil
// was held throughout [AcqEnd, HeldUntil]; any granted hold was held at
// least at one instant between AcqStart and AcqEnd (its grant). So two
// holds prove a double grant when their confirmed intervals overlap, or
// when one's whole acquisition lies inside the other's confirmed
// interval. Holds of one owner never overlap (a client holds one lock
// at a time), so any two that do had the lock granted to two owners at
// once.
func checkOverlaps(file int, holds []lockHold) []string {
	var certain, granted []lockHold
	for _, h := range holds {
		switch {
		case h.AcqEnd > 0 && h.HeldUntil > h.AcqEnd:
			certain = append(certain, h)
		case h.AcqEnd > 0:
			granted = append(granted, h)
		}
	}
	slices.SortFunc(certain, func(a, b lockHold) int { return cmp.Compare(a.AcqEnd, b.AcqEnd) })
	slices.SortFunc(granted, func(a, b lockHold) int { return cmp.Compare(a.AcqStart, b.AcqStart) })
	var out []string
	report := func(a, b *lockHold) {
		if len(out) < maxLockViolations {
			out = append(out, fmt.Sprintf("counter %d: two holds at once (double grant): %v and %v", file, *a, *b))
		}
	}
	// Confirmed against confirmed: each against the earlier one held
	// longest.
	var longest *lockHold
	for k := range certain {
		h := &certain[k]
		if longest != nil && h.AcqEnd < longest.HeldUntil {
			report(longest, h)
		}
		if longest == nil || h.HeldUntil > longest.HeldUntil {
			longest = h
		}
	}
	// Unconfirmed grants against the confirmed holds granted before
	// they were asked for.
	longest = nil
	k := 0
	for g := range granted {
		h := &granted[g]
		for ; k < len(certain) && certain[k].AcqEnd < h.AcqStart; k++ {
			if longest == nil || certain[k].HeldUntil > longest.HeldUntil {
				longest = &certain[k]
			}
		}
		if longest != nil && h.AcqEnd < longest.HeldUntil {
			report(longest, h)
		}
	}
	return out
}

// checkValues is check 3 for one file.
func checkValues(file int, holds []lockHold) []string {
	var acked []lockHold
	for _, h := range holds {
		if h.Outcome == incAcked {
			acked = append(acked, h)
		}
	}
	var out []string
	byRead := map[int64]lockHold{}
	for _, h := range acked {
		if o, dup := byRead[h.Read]; dup && len(out) < maxLockViolations {
			out = append(out, fmt.Sprintf("counter %d: lost update: two acknowledged increments read %d: %v and %v", file, h.Read, o, h))
		}
		byRead[h.Read] = h
	}
	// Each acknowledged increment against those confirmed done before
	// its grant (HeldUntil: its write was durable by then).
	done := slices.Clone(acked)
	slices.SortFunc(done, func(a, b lockHold) int { return cmp.Compare(a.HeldUntil, b.HeldUntil) })
	slices.SortFunc(acked, func(a, b lockHold) int { return cmp.Compare(a.AcqEnd, b.AcqEnd) })
	var before *lockHold // the one that wrote most of those done so far
	k, n := 0, 0
	for _, h := range acked {
		for ; k < len(done) && done[k].HeldUntil <= h.AcqEnd; k++ {
			if before == nil || done[k].Read > before.Read {
				before = &done[k]
			}
		}
		// (An equal read is the lost update reported above.)
		if before != nil && h.Read < before.Read && n < maxLockViolations {
			out = append(out, fmt.Sprintf("counter %d: read %d after an acknowledged increment wrote %d: %v after %v", file, h.Read, before.Read+1, h, *before))
			n++
		}
	}
	return out
}
