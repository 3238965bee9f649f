package meta

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

type lockMode uint8

const (
	lockShared lockMode = 1
	lockExcl   lockMode = 2
)

type lockReq struct {
	ino  namespace.Ino
	mode lockMode
}

type lockEntry struct {
	excl   metawire.TxID // zero: no exclusive holder
	shared map[metawire.TxID]struct{}
}

var noOwner metawire.TxID

// lockTable holds the in-memory inode locks of operations and prepared
// transactions. Acquisition is all-or-nothing with a bounded wait, so
// waits never deadlock: a caller that cannot get every lock in time gets
// ErrBusy and retries from the start. Locks held by prepared participant
// transactions also make readers of those inodes wait (waitReadable), so
// no reader sees one island's half of a decided transaction before the
// other half is applied.
type lockTable struct {
	mu struct {
		lockcheck.Mutex
		m        map[namespace.Ino]*lockEntry
		held     map[metawire.TxID][]namespace.Ino
		prepared map[metawire.TxID]bool
		changed  chan struct{}
		// frozen are the bucket ranges of entries moving away (by move
		// id): no lock is granted in them (move.go).
		frozen map[uint64]bucketRange
	}
}

// bucketRange is buckets first..last.
type bucketRange struct{ first, last uint32 }

func (r bucketRange) has(b uint32) bool { return r.first <= b && b <= r.last }

// errMoving refuses a change of a bucket whose table entry is moving to
// another island. Unavailable, not busy: the client retries it for as
// long as it waits for an island to come back (the move may wait for a
// new leader to resume it), and finds the entry at its new island.
var errMoving = fmt.Errorf("%w: the inode's table entry is moving to another island", metawire.ErrUnavailable)

func newLockTable() *lockTable {
	t := &lockTable{}
	t.mu.m = map[namespace.Ino]*lockEntry{}
	t.mu.held = map[metawire.TxID][]namespace.Ino{}
	t.mu.prepared = map[metawire.TxID]bool{}
	t.mu.changed = make(chan struct{})
	t.mu.frozen = map[uint64]bucketRange{}
	return t
}

// freeze refuses locks in r from now on (move id).
func (t *lockTable) freeze(id uint64, r bucketRange) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.frozen[id] = r
}

// thaw gives up freeze(id).
func (t *lockTable) thaw(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.mu.frozen, id)
}

// isFrozen reports whether bucket b is in a frozen range.
func (t *lockTable) isFrozen(b uint32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.frozenLocked(b)
}

func (t *lockTable) frozenLocked(b uint32) bool {
	for _, r := range t.mu.frozen {
		if r.has(b) {
			return true
		}
	}
	return false
}

// waitQuiet waits (at most wait) until no lock is held on an inode of
// r: every change of r's records begun before a freeze has ended.
func (t *lockTable) waitQuiet(ctx context.Context, r bucketRange, wait time.Duration) error {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		t.mu.Lock()
		busy := false
		for ino := range t.mu.m {
			if r.has(ino.Bucket()) {
				busy = true
				break
			}
		}
		ch := t.mu.changed
		t.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-ch:
		case <-timer.C:
			return fmt.Errorf("%w: changes of buckets %08x..%08x still running", metawire.ErrBusy, r.first, r.last)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// normalize merges duplicate requests (exclusive wins) and sorts them.
func normalize(reqs []lockReq) []lockReq {
	out := slices.Clone(reqs)
	slices.SortFunc(out, func(a, b lockReq) int {
		switch {
		case a.ino < b.ino:
			return -1
		case a.ino > b.ino:
			return 1
		}
		return int(b.mode) - int(a.mode)
	})
	return slices.CompactFunc(out, func(a, b lockReq) bool { return a.ino == b.ino })
}

func (t *lockTable) grantableLocked(owner metawire.TxID, reqs []lockReq) bool {
	for _, r := range reqs {
		e := t.mu.m[r.ino]
		if e == nil {
			continue
		}
		if e.excl != noOwner && e.excl != owner {
			return false
		}
		if r.mode == lockExcl {
			for o := range e.shared {
				if o != owner {
					return false
				}
			}
		}
	}
	return true
}

func (t *lockTable) grantLocked(owner metawire.TxID, reqs []lockReq) {
	for _, r := range reqs {
		e := t.mu.m[r.ino]
		if e == nil {
			e = &lockEntry{}
			t.mu.m[r.ino] = e
		}
		_, hadShared := e.shared[owner]
		had := e.excl == owner || hadShared
		if r.mode == lockExcl {
			e.excl = owner
			delete(e.shared, owner)
		} else if e.excl != owner {
			if e.shared == nil {
				e.shared = map[metawire.TxID]struct{}{}
			}
			e.shared[owner] = struct{}{}
		}
		if !had {
			t.mu.held[owner] = append(t.mu.held[owner], r.ino)
		}
	}
}

// acquire takes every lock of reqs for owner, waiting at most wait for
// conflicting holders to go; it returns ErrBusy when they do not.
func (t *lockTable) acquire(ctx context.Context, owner metawire.TxID, reqs []lockReq, wait time.Duration) error {
	reqs = normalize(reqs)
	var timer *time.Timer
	for {
		t.mu.Lock()
		if len(t.mu.frozen) > 0 {
			for _, r := range reqs {
				if t.frozenLocked(r.ino.Bucket()) {
					t.mu.Unlock()
					return fmt.Errorf("inode %v: %w", r.ino, errMoving)
				}
			}
		}
		if t.grantableLocked(owner, reqs) {
			t.grantLocked(owner, reqs)
			t.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			return nil
		}
		ch := t.mu.changed
		t.mu.Unlock()
		if timer == nil {
			if wait <= 0 {
				return fmt.Errorf("%w: inode locked by another operation", metawire.ErrBusy)
			}
			timer = time.NewTimer(wait)
		}
		select {
		case <-ch:
		case <-timer.C:
			return fmt.Errorf("%w: inode locked by another operation", metawire.ErrBusy)
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w: %v", metawire.ErrBusy, ctx.Err())
		}
	}
}

// release drops every lock owner holds.
func (t *lockTable) release(owner metawire.TxID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ino := range t.mu.held[owner] {
		e := t.mu.m[ino]
		if e == nil {
			continue
		}
		if e.excl == owner {
			e.excl = noOwner
		}
		delete(e.shared, owner)
		if e.excl == noOwner && len(e.shared) == 0 {
			delete(t.mu.m, ino)
		}
	}
	delete(t.mu.held, owner)
	delete(t.mu.prepared, owner)
	close(t.mu.changed)
	t.mu.changed = make(chan struct{})
}

// setPrepared marks owner as a prepared participant: readers of inodes it
// holds exclusively wait until it is decided.
func (t *lockTable) setPrepared(owner metawire.TxID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.prepared[owner] = true
}

// waitReadable waits (at most wait) while ino is held exclusively by a
// prepared transaction.
func (t *lockTable) waitReadable(ctx context.Context, ino namespace.Ino, wait time.Duration) error {
	var timer *time.Timer
	for {
		t.mu.Lock()
		e := t.mu.m[ino]
		blocked := e != nil && e.excl != noOwner && t.mu.prepared[e.excl]
		ch := t.mu.changed
		t.mu.Unlock()
		if !blocked {
			if timer != nil {
				timer.Stop()
			}
			return nil
		}
		if wire.IsInline(ctx) {
			return wire.ErrWouldBlock
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		}
		select {
		case <-ch:
		case <-timer.C:
			return fmt.Errorf("%w: inode %v is part of an undecided cross-island operation", metawire.ErrBusy, ino)
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w: %v", metawire.ErrBusy, ctx.Err())
		}
	}
}
