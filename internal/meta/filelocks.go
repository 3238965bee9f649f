package meta

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/atoll-fs/atoll/internal/filelock"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// File locks (metawire.OpLock; the package doc's "File locks"). The
// locks of an inode are one record under its bucket (tagLock), so they
// are replicated with every other change, survive a change of leader and
// move with the inode's table entry (a range copy). An island-wide index
// (gLockIndex) names the inodes with a record, so the session sweep
// finds them without scanning the namespace; account keeps it with
// moves. Waiters and session renewals live in the leader's memory only:
// a waiter whose leader goes asks the new one again, and a new leader
// counts every session's term from when it first sees its locks.

const (
	tagLock    = 'k'
	gLockIndex = 'k' // FF..'k' ino(8): the inode has a lock record
	gLockEnded = 'K' // FF..'K' session(8): i64 ns when the island ended it
)

// DefaultLockTerm is Config.LockTerm's default: how long a lock session
// lives without a renewal (the client renews about four times a term).
const DefaultLockTerm = 30 * time.Second

// lockEndedKeep is how long the record of an ended session is kept, so
// that a client cut off for that long still learns its locks are gone.
const lockEndedKeep = 24 * time.Hour

func lockKey(ino namespace.Ino) []byte {
	return binary.BigEndian.AppendUint64(bucketPrefix(ino.Bucket(), tagLock), uint64(ino))
}

func lockIndexKey(ino namespace.Ino) []byte {
	return binary.BigEndian.AppendUint64(globalKey(gLockIndex), uint64(ino))
}

func lockEndedKey(session uint64) []byte {
	return binary.BigEndian.AppendUint64(globalKey(gLockEnded), session)
}

// fileLocks is an island's in-memory lock state (the leader's).
type fileLocks struct {
	mu struct {
		lockcheck.Mutex
		// seen is when each session last renewed or asked for a lock
		// (first seen: when the sweep found its locks).
		seen map[uint64]time.Time
		// held counts each session's locks at the last sweep.
		held    map[uint64]int
		waits   *filelock.Waits
		waiters map[uint64]*lockWaiter // by LockReq.Waiter
		// wake has a channel per inode someone waits on, closed (and
		// removed) at the inode's next lock change.
		wake  map[namespace.Ino]chan struct{}
		ended map[uint64]bool // sessions known ended (cache of gLockEnded)
	}
	lastSweep time.Time // touched by the background loop only
	// Figures of the last sweep and counters, for member reports
	// (LockStats).
	stats struct {
		locks, waiters, sessions, openHeld, openUnlinked atomic.Uint64
		sessionsEnded, openReclaimed                     atomic.Uint64
	}
}

type lockWaiter struct {
	ino    namespace.Ino
	lock   filelock.Lock
	cancel chan struct{}
}

func (fl *fileLocks) init() {
	fl.mu.seen = map[uint64]time.Time{}
	fl.mu.held = map[uint64]int{}
	fl.mu.waits = filelock.NewWaits()
	fl.mu.waiters = map[uint64]*lockWaiter{}
	fl.mu.wake = map[namespace.Ino]chan struct{}{}
	fl.mu.ended = map[uint64]bool{}
}

func (i *Island) lockTerm() time.Duration {
	if i.cfg.LockTerm > 0 {
		return i.cfg.LockTerm
	}
	return DefaultLockTerm
}

// touchSession records that session s is alive now.
func (fl *fileLocks) touch(s uint64) {
	fl.mu.Lock()
	fl.mu.seen[s] = time.Now()
	fl.mu.Unlock()
}

// wakeCh returns the channel closed at ino's next lock change.
func (fl *fileLocks) wakeCh(ino namespace.Ino) chan struct{} {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	ch := fl.mu.wake[ino]
	if ch == nil {
		ch = make(chan struct{})
		fl.mu.wake[ino] = ch
	}
	return ch
}

// changed wakes the waiters of ino.
func (fl *fileLocks) changed(ino namespace.Ino) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if ch := fl.mu.wake[ino]; ch != nil {
		close(ch)
		delete(fl.mu.wake, ino)
	}
}

// readLocks returns the lock set of ino as r holds it.
func readLocks(r reader, ino namespace.Ino) (filelock.Set, error) {
	v, ok, err := get(r, lockKey(ino))
	if err != nil || !ok {
		return nil, err
	}
	p, err := decodeBytes(v)
	if err != nil {
		return nil, err
	}
	s, err := filelock.Decode(p)
	if err != nil {
		return nil, fmt.Errorf("%w: locks of %v: %v", metawire.ErrIO, ino, err)
	}
	return s, nil
}

// writeLocks puts s as ino's lock set in b (none: the record and its
// index entry go).
func writeLocks(b *pebble.Batch, ino namespace.Ino, s filelock.Set) error {
	if len(s) == 0 {
		if err := b.Delete(lockKey(ino), nil); err != nil {
			return err
		}
		return b.Delete(lockIndexKey(ino), nil)
	}
	if err := b.Set(lockKey(ino), encodeBytes(s.Encode()), nil); err != nil {
		return err
	}
	return b.Set(lockIndexKey(ino), nil, nil)
}

// sessionEnded reports whether the island ended session s.
func (i *Island) sessionEnded(s uint64) (bool, error) {
	i.flocks.mu.Lock()
	ended := i.flocks.mu.ended[s]
	i.flocks.mu.Unlock()
	if ended {
		return true, nil
	}
	_, ok, err := get(i.db, lockEndedKey(s))
	if ok {
		i.flocks.mu.Lock()
		i.flocks.mu.ended[s] = true
		i.flocks.mu.Unlock()
	}
	return ok, err
}

// lock serves OpLock.
func (i *Island) lock(ctx context.Context, r *metawire.LockReq) (*metawire.LockResp, error) {
	ino := namespace.Ino(r.Ino)
	if err := i.checkIno("lock", ino); err != nil {
		return nil, err
	}
	s := r.Lock.Owner.Session
	if s == 0 {
		return nil, fmt.Errorf("%w: lock without a session", metawire.ErrInvalid)
	}
	switch r.Cmd {
	case metawire.LockGet, metawire.LockSet, metawire.LockWait, metawire.LockUnlock:
		if err := r.Lock.Valid(); err != nil {
			return nil, fmt.Errorf("%w: %v", metawire.ErrInvalid, err)
		}
	case metawire.LockUnlockOwner, metawire.LockCancel, metawire.LockList, metawire.LockHold, metawire.LockUnhold:
	case metawire.LockReplace:
		if len(r.Locks) > metawire.MaxReplaceLocks {
			return nil, fmt.Errorf("%w: %d locks to replace", metawire.ErrInvalid, len(r.Locks))
		}
		for _, l := range r.Locks {
			if err := l.Valid(); err != nil || l.Owner.Session != s {
				return nil, fmt.Errorf("%w: a replacing lock of another session or invalid (%v)", metawire.ErrInvalid, err)
			}
		}
	default:
		return nil, fmt.Errorf("%w: lock command %d", metawire.ErrInvalid, r.Cmd)
	}
	switch r.Cmd {
	case metawire.LockCancel:
		i.flocks.mu.Lock()
		if w := i.flocks.mu.waiters[r.Waiter]; w != nil && w.lock.Owner == r.Lock.Owner {
			close(w.cancel)
			delete(i.flocks.mu.waiters, r.Waiter)
		}
		i.flocks.mu.Unlock()
		return &metawire.LockResp{}, nil
	case metawire.LockList:
		return i.listLocks(ino)
	}
	if ended, err := i.sessionEnded(s); err != nil {
		return nil, err
	} else if ended {
		return nil, fmt.Errorf("%w: session %016x", metawire.ErrSessionEnded, s)
	}
	i.flocks.touch(s)
	switch r.Cmd {
	case metawire.LockHold, metawire.LockUnhold:
		return i.hold(ctx, ino, s, r.Cmd == metawire.LockHold)
	case metawire.LockGet:
		set, err := readLocks(i.db, ino)
		if err != nil {
			return nil, err
		}
		resp := &metawire.LockResp{}
		resp.Conflict, resp.Found = set.Conflict(r.Lock)
		return resp, nil
	case metawire.LockUnlock, metawire.LockUnlockOwner:
		return i.changeLocks(ctx, ino, r.Lock.Owner, func(set filelock.Set) (filelock.Set, error) {
			if r.Cmd == metawire.LockUnlockOwner {
				return set.UnlockOwner(r.Lock.Owner), nil
			}
			return set.Unlock(r.Lock.Owner, r.Lock.Kind, r.Lock.Start, r.Lock.End), nil
		})
	case metawire.LockSet:
		return i.setLock(ctx, ino, r.Lock)
	case metawire.LockReplace:
		return i.changeLocks(ctx, ino, r.Lock.Owner, func(set filelock.Set) (filelock.Set, error) {
			next, _ := set.DropSession(s)
			for _, l := range r.Locks {
				if c, ok := next.Conflict(l); ok {
					return nil, &errBlocked{with: c}
				}
				next = next.Apply(l)
			}
			return next, nil
		})
	}
	return i.waitLock(ctx, ino, r)
}

// errBlocked is a grant refused for a conflict (setLock's caller decides
// whether to wait).
type errBlocked struct{ with filelock.Lock }

func (e *errBlocked) Error() string {
	return fmt.Sprintf("held by owner %016x/%016x (pid %d) %d..%d", e.with.Owner.Session, e.with.Owner.ID, e.with.Pid, e.with.Start, e.with.End)
}
func (e *errBlocked) Unwrap() error { return metawire.ErrWouldBlock }

func (i *Island) setLock(ctx context.Context, ino namespace.Ino, l filelock.Lock) (*metawire.LockResp, error) {
	resp, err := i.changeLocks(ctx, ino, l.Owner, func(set filelock.Set) (filelock.Set, error) {
		if c, ok := set.Conflict(l); ok {
			return nil, &errBlocked{with: c}
		}
		return set.Apply(l), nil
	})
	if err != nil {
		return nil, err
	}
	resp.Granted = true
	return resp, nil
}

// changeLocks applies f to ino's lock set under the inode's lock, and
// answers with the inode's attributes and what owner holds afterwards.
func (i *Island) changeLocks(ctx context.Context, ino namespace.Ino, owner filelock.Owner, f func(filelock.Set) (filelock.Set, error)) (*metawire.LockResp, error) {
	resp := &metawire.LockResp{}
	changed := false
	err := i.withInodes(ctx, []namespace.Ino{ino}, func(b *pebble.Batch) error {
		n, err := readInode(b, ino)
		if err != nil {
			return err
		}
		if n == nil {
			return fmt.Errorf("%w: lock on %v", metawire.ErrStale, ino)
		}
		set, err := readLocks(b, ino)
		if err != nil {
			return err
		}
		next, err := f(set)
		if err != nil {
			return err
		}
		resp.Attr = n.attr()
		resp.Locks = next.Held(owner)
		if slices.Equal(set, next) {
			return nil
		}
		changed = true
		return writeLocks(b, ino, next)
	})
	if changed {
		// Also after a failed write: it may have applied.
		i.flocks.changed(ino)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// waitLock serves LockWait: the lock is granted when no conflicting lock
// is left, or the request answers Waiting after WaitMs (the client asks
// again), EDEADLK when the wait would close a cycle of waiting owners
// (POSIX locks), or ErrInterrupted when the client cancels it.
func (i *Island) waitLock(ctx context.Context, ino namespace.Ino, r *metawire.LockReq) (*metawire.LockResp, error) {
	l := r.Lock
	wait := time.Duration(min(r.WaitMs, metawire.MaxLockWaitMs)) * time.Millisecond
	timer := time.NewTimer(wait)
	defer timer.Stop()
	ctx, stop := i.untilClose(ctx)
	defer stop()
	w := &lockWaiter{ino: ino, lock: l, cancel: make(chan struct{})}
	if r.Waiter != 0 {
		i.flocks.mu.Lock()
		i.flocks.mu.waiters[r.Waiter] = w
		i.flocks.mu.Unlock()
	}
	defer func() {
		i.flocks.mu.Lock()
		if i.flocks.mu.waiters[r.Waiter] == w {
			delete(i.flocks.mu.waiters, r.Waiter)
		}
		i.flocks.mu.waits.Done(l.Owner)
		i.flocks.mu.Unlock()
	}()
	for {
		wake := i.flocks.wakeCh(ino)
		resp, err := i.setLock(ctx, ino, l)
		var blocked *errBlocked
		if !errors.As(err, &blocked) {
			// No longer waiting: a deadlock check another waiter makes
			// from now on must not see this owner's old edges.
			i.flocks.mu.Lock()
			i.flocks.mu.waits.Done(l.Owner)
			i.flocks.mu.Unlock()
			return resp, err
		}
		if l.Kind == filelock.POSIX {
			set, err := readLocks(i.db, ino)
			if err != nil {
				return nil, err
			}
			blockers := set.Blockers(l)
			i.flocks.mu.Lock()
			dead := i.flocks.mu.waits.WouldDeadlock(l.Owner, blockers)
			if !dead {
				i.flocks.mu.waits.Wait(l.Owner, blockers)
			}
			i.flocks.mu.Unlock()
			if dead {
				return nil, fmt.Errorf("%w: waiting for %v", metawire.ErrDeadlock, blocked)
			}
		}
		select {
		case <-wake:
		case <-w.cancel:
			return nil, fmt.Errorf("%w: lock wait cancelled", metawire.ErrInterrupted)
		case <-timer.C:
			return &metawire.LockResp{Waiting: true, Conflict: blocked.with, Found: true}, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v", metawire.ErrUnavailable, ctx.Err())
		}
		i.flocks.touch(l.Owner.Session)
		if err := i.checkIno("lock", ino); err != nil {
			return nil, err // moved away meanwhile
		}
	}
}

// listLocks serves LockList.
func (i *Island) listLocks(ino namespace.Ino) (*metawire.LockResp, error) {
	snap := i.db.NewSnapshot()
	defer snap.Close()
	set, err := readLocks(snap, ino)
	if err != nil {
		return nil, err
	}
	n, err := readInode(snap, ino)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, fmt.Errorf("%w: locks of %v", metawire.ErrStale, ino)
	}
	resp := &metawire.LockResp{Locks: set, Attr: n.attr()}
	if err := listHolds(snap, ino, resp); err != nil {
		return nil, err
	}
	i.flocks.mu.Lock()
	for _, w := range i.flocks.mu.waiters {
		if w.ino == ino {
			resp.Waiters = append(resp.Waiters, w.lock)
		}
	}
	i.flocks.mu.Unlock()
	slices.SortFunc(resp.Waiters, func(a, b filelock.Lock) int {
		return cmp.Or(cmp.Compare(a.Owner.Session, b.Owner.Session), cmp.Compare(a.Owner.ID, b.Owner.ID))
	})
	return resp, nil
}

// lockSession serves OpLockSession (renew) and OpLockEnd (end now).
func (i *Island) lockSession(ctx context.Context, r *metawire.LockSessionReq, end bool) (*metawire.LockSessionResp, error) {
	if r.Session == 0 {
		return nil, fmt.Errorf("%w: no session", metawire.ErrInvalid)
	}
	resp := &metawire.LockSessionResp{TermMs: uint32(i.lockTerm() / time.Millisecond)}
	ended, err := i.sessionEnded(r.Session)
	if err != nil {
		return nil, err
	}
	if ended {
		resp.Ended = true
		return resp, nil
	}
	if end {
		n, err := i.endSession(ctx, r.Session, "ended by an operator")
		resp.Ended, resp.Released = err == nil, uint32(n)
		return resp, err
	}
	i.flocks.touch(r.Session)
	if r.ReleaseMask != 0 {
		n, err := i.releaseOwners(ctx, r.Session, func(o filelock.Owner) bool { return o.ID&r.ReleaseMask == r.ReleaseBits })
		resp.Released = uint32(n)
		if err != nil {
			return nil, err
		}
	}
	i.flocks.mu.Lock()
	n, counted := i.flocks.mu.held[r.Session]
	i.flocks.mu.Unlock()
	if !counted {
		// Not counted by the last sweep (up to a second old): a gateway
		// restarted right after granting locks asks where its session
		// holds them, and must not be told "nowhere".
		n = i.countSession(r.Session)
	}
	resp.Locks = uint32(n)
	return resp, nil
}

// countSession counts session s's locks and open-file holds on this
// island now.
func (i *Island) countSession(s uint64) int {
	held := map[uint64]int{}
	_ = i.countLocks(held)
	i.countHolds(held)
	return held[s]
}

// releaseOwners releases, on every locked inode of the island, the locks
// of session s's owners that match.
func (i *Island) releaseOwners(ctx context.Context, s uint64, match func(filelock.Owner) bool) (int, error) {
	inos, err := i.indexedInodes(gLockIndex)
	if err != nil {
		return 0, err
	}
	released := 0
	for _, ino := range inos {
		if !i.owns(ino) {
			continue
		}
		n := 0
		_, err := i.changeLocks(ctx, ino, filelock.Owner{Session: s}, func(set filelock.Set) (filelock.Set, error) {
			var next filelock.Set
			for _, l := range set {
				if l.Owner.Session == s && match(l.Owner) {
					n++
					continue
				}
				next = append(next, l)
			}
			return next, nil
		})
		if err != nil && !errors.Is(err, metawire.ErrStale) {
			return released, err
		}
		released += n
	}
	return released, nil
}

// indexedInodes lists the inodes of an island-wide index of inodes
// (gLockIndex: with lock records; gHoldIndex: with hold records).
func (i *Island) indexedInodes(index byte) ([]namespace.Ino, error) {
	p := globalKey(index)
	it, err := i.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var inos []namespace.Ino
	for it.First(); it.Valid(); it.Next() {
		if k := it.Key(); len(k) == len(p)+8 {
			inos = append(inos, namespace.Ino(binary.BigEndian.Uint64(k[len(p):])))
		}
	}
	return inos, it.Error()
}

// endSession releases every lock of session s on this island and
// records that it ended, in one replicated batch per locked inode (the
// record last, so a client told "ended" finds its locks gone).
func (i *Island) endSession(ctx context.Context, s uint64, why string) (int, error) {
	released, err := i.releaseOwners(ctx, s, func(filelock.Owner) bool { return true })
	if err != nil {
		return released, err
	}
	if err := i.releaseHolds(ctx, s); err != nil {
		return released, err
	}
	b := i.db.NewBatch()
	defer b.Close()
	if err := b.Set(lockEndedKey(s), binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano())), nil); err != nil {
		return released, err
	}
	if err := i.write(ctx, b, false); err != nil {
		return released, err
	}
	i.flocks.mu.Lock()
	i.flocks.mu.ended[s] = true
	delete(i.flocks.mu.seen, s)
	delete(i.flocks.mu.held, s)
	i.flocks.mu.Unlock()
	i.met.lockSessionsEnded.Inc()
	i.flocks.stats.sessionsEnded.Add(1)
	i.log.Warn("meta: lock session ended; its locks are released", "session", fmt.Sprintf("%016x", s), "locks", released, "why", why)
	return released, nil
}

// countLocks adds each session's locks on this island to held.
func (i *Island) countLocks(held map[uint64]int) error {
	inos, err := i.indexedInodes(gLockIndex)
	if err != nil {
		return err
	}
	for _, ino := range inos {
		if !i.owns(ino) {
			continue
		}
		set, err := readLocks(i.db, ino)
		if err != nil {
			continue
		}
		for _, l := range set {
			held[l.Owner.Session]++
		}
	}
	return nil
}

// sweepLocks (the background loop, about once a second) counts the
// locks of every session and ends the sessions not renewed for a term:
// a session first seen by this incarnation counts from then, so no
// session ends earlier than a term after its last renewal anywhere.
func (i *Island) sweepLocks(ctx context.Context) {
	now := time.Now()
	if now.Sub(i.flocks.lastSweep) < time.Second {
		return
	}
	i.flocks.lastSweep = now
	held := map[uint64]int{}
	if err := i.countLocks(held); err != nil {
		return
	}
	waiting := 0
	locks := 0
	for _, n := range held {
		locks += n
	}
	heldOpen, unlinked := i.countHolds(held)
	i.met.openHeld.Set(float64(heldOpen))
	i.met.openUnlinked.Set(float64(unlinked))
	term := i.lockTerm()
	var expired []uint64
	i.flocks.mu.Lock()
	for s := range held {
		seen, ok := i.flocks.mu.seen[s]
		if !ok {
			i.flocks.mu.seen[s] = now
		} else if now.Sub(seen) > term {
			expired = append(expired, s)
		}
	}
	for s, seen := range i.flocks.mu.seen {
		if held[s] == 0 && now.Sub(seen) > 2*term {
			delete(i.flocks.mu.seen, s)
		}
	}
	i.flocks.mu.held = held
	waiting = len(i.flocks.mu.waiters)
	i.flocks.mu.Unlock()
	i.met.locksHeld.Set(float64(locks))
	i.met.lockWaiters.Set(float64(waiting))
	i.met.lockSessions.Set(float64(len(held)))
	st := &i.flocks.stats
	st.locks.Store(uint64(locks))
	st.waiters.Store(uint64(waiting))
	st.sessions.Store(uint64(len(held)))
	st.openHeld.Store(uint64(heldOpen))
	st.openUnlinked.Store(uint64(unlinked))
	for _, s := range expired {
		if _, err := i.endSession(ctx, s, fmt.Sprintf("not renewed for %v", term)); err != nil {
			i.log.Info("meta: ending a lock session", "session", fmt.Sprintf("%016x", s), "err", err)
		}
	}
	i.sweepEndedSessions(ctx, now)
}

// sweepEndedSessions deletes the records of sessions ended more than
// lockEndedKeep ago.
func (i *Island) sweepEndedSessions(ctx context.Context, now time.Time) {
	p := globalKey(gLockEnded)
	it, err := i.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return
	}
	b := i.db.NewBatch()
	defer b.Close()
	for it.First(); it.Valid(); it.Next() {
		if v := it.Value(); len(v) == 8 && now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(v)))) > lockEndedKeep {
			_ = b.Delete(slices.Clone(it.Key()), nil)
		}
	}
	it.Close()
	if !b.Empty() {
		_ = i.write(ctx, b, false)
	}
}
