package client

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/filelock"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// File locks (DESIGN.md "Sessions, locks and open files"). The islands
// hold every lock, so a lock taken through one client conflicts with
// every other client's; this FS holds a lock session (one random id for
// all islands) and renews it about four times a term at each island
// where it holds locks. It remembers which owners hold locks on which
// inodes (what the island answered), so a close asks the island only
// when the closing owner holds something.
//
// A session the island may have ended (no renewal answered for 90% of
// its term, counted from when the renewal was sent) or did end puts the
// inodes locked under it in doubt: writes and flushes of them fail with
// ErrIO (LockCheck), so a client cut off from its island never lands a
// change it made under a lock someone else may hold by now. An ended
// session is replaced by a new one; its inodes stay "lost" (ErrIO) until
// they are locked again or their last handle goes (ForgetLost).

// lockWaitMs is how long one blocking request waits at the island
// before asking again.
const lockWaitMs = 5000

// maxLockWaiters bounds this FS's blocking requests waiting at islands
// at once: each holds one of a connection's handlers there.
const maxLockWaiters = 16

type lockState struct {
	mu struct {
		lockcheck.Mutex
		session uint64
		held    map[uint64]*heldLocks // by inode
		islands map[namespace.IslandID]*lockIsland
		// resumed: islands where a resumed session holds locks this FS
		// did not take (ResumeLockSession), by a route to each.
		resumed map[namespace.IslandID]uint64
		// resuming: a session was set (SetLockSession) and
		// ResumeLockSession has not yet found where it holds locks:
		// unlocks are sent wherever.
		resuming bool
		renewer  bool
		// local: lock copies of files this FS decides itself under an
		// exclusive lease; noLocal: files kept at the island for a
		// while (locallocks.go).
		local    map[uint64]*localLocks
		noLocal  map[uint64]time.Time
		watching bool
	}
	waiters chan struct{}
	// held is whether mu.held has any inode: the write path's LockCheck
	// and close's Locked need no mutex on a mount that locks nothing.
	held atomic.Bool
}

// heldChangedLocked notes a change of mu.held (mu held).
func (ls *lockState) heldChangedLocked() { ls.held.Store(len(ls.mu.held) > 0) }

// heldLocks is what this FS holds on one inode: locks per owner.
type heldLocks struct {
	owners map[uint64]int
	lost   bool // the session they were held under ended
}

// lockIsland is the session's standing at one island.
type lockIsland struct {
	term       time.Duration
	validUntil time.Time
}

// init makes the lock state of a new FS, with a fresh session.
func (ls *lockState) init() {
	ls.mu.held = map[uint64]*heldLocks{}
	ls.mu.islands = map[namespace.IslandID]*lockIsland{}
	ls.mu.resumed = map[namespace.IslandID]uint64{}
	ls.mu.local = map[uint64]*localLocks{}
	ls.mu.noLocal = map[uint64]time.Time{}
	ls.mu.session = randomID()
	ls.waiters = make(chan struct{}, maxLockWaiters)
}

// newSession is a fresh lock or lease session id. A tenant's key
// (auth.Scope.Tenant) must name sessions that start with its log prefix
// (auth.LogPrefix), so islands can refuse it another client's session.
func (f *FS) newSession() uint64 {
	id := randomID()
	if k := f.data.cfg.Key; k != nil && k.Scope.Tenant() {
		id = auth.TenantID(k.Name, max(id&0xffffffff, 1)) // never 0: "no session"
	}
	return id
}

func randomID() uint64 {
	var b [8]byte
	for {
		_, _ = crand.Read(b[:])
		if v := binary.BigEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// LockSession is this FS's lock session.
func (f *FS) LockSession() uint64 {
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	return f.locks.mu.session
}

// lockOwner fills in the session of this FS.
func (f *FS) lockOwner(owner uint64) filelock.Owner {
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	return filelock.Owner{Session: f.locks.mu.session, ID: owner}
}

// joinIsland makes sure the session is known valid at ino's island
// (renewing it there once, which also tells its term) and that the
// renewer runs.
func (f *FS) joinIsland(ctx context.Context, ino uint64) error {
	isl := f.islandOf(ino)
	f.locks.mu.Lock()
	_, ok := f.locks.mu.islands[isl]
	start := !f.locks.mu.renewer
	f.locks.mu.renewer = true
	f.locks.mu.Unlock()
	if start && !f.closing.Load() {
		f.pollers.Add(1)
		go f.renewLocks()
	}
	if ok {
		return nil
	}
	_, err := f.renewAt(ctx, ino)
	return err
}

// renewAt renews the session at ino's island; ended reports that the
// island had ended it (this FS then starts a new one).
func (f *FS) renewAt(ctx context.Context, ino uint64) (ended bool, err error) {
	isl := f.islandOf(ino)
	f.locks.mu.Lock()
	s := f.locks.mu.session
	f.locks.mu.Unlock()
	sent := time.Now()
	var resp metawire.LockSessionResp
	// A renewal touches no record: nothing kept back need go first.
	ctx = context.WithValue(ctx, renewalKey{}, true)
	if err := f.call(ctx, ino, metawire.OpLockSession, &metawire.LockSessionReq{Session: s}, &resp); err != nil {
		return false, err
	}
	if resp.Ended {
		f.sessionEnded(s)
		return true, nil
	}
	if resp.Locks == 0 {
		f.locks.mu.Lock()
		delete(f.locks.mu.resumed, isl)
		f.locks.mu.Unlock()
	}
	f.sessionAlive(isl, s, sent, time.Duration(resp.TermMs)*time.Millisecond)
	return false, nil
}

// sessionAlive records that island isl answered a request of session s
// sent at sent: the session lives there until at least a term after
// (term 0: the one known).
func (f *FS) sessionAlive(isl namespace.IslandID, s uint64, sent time.Time, term time.Duration) {
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	if f.locks.mu.session != s {
		return
	}
	li := f.locks.mu.islands[isl]
	if li == nil {
		if term == 0 {
			return
		}
		li = &lockIsland{}
		f.locks.mu.islands[isl] = li
	}
	if term != 0 {
		li.term = term
	}
	if until := sent.Add(li.term * 9 / 10); until.After(li.validUntil) {
		li.validUntil = until
	}
}

// sessionEnded replaces session s (an island ended it): every lock held
// under it is lost.
func (f *FS) sessionEnded(s uint64) {
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	if f.locks.mu.session != s {
		return
	}
	n := 0
	for _, h := range f.locks.mu.held {
		if len(h.owners) > 0 {
			h.lost = true
			clear(h.owners)
			n++
		}
	}
	for ino := range f.locks.mu.local {
		if h := f.locks.mu.held[ino]; h != nil {
			h.lost = true
		}
	}
	clear(f.locks.mu.local)
	f.locks.mu.session = f.newSession()
	clear(f.locks.mu.islands)
	clear(f.locks.mu.resumed)
	f.ctr.lockSessionsLost.Add(1)
	f.log.Error("client: lock session ended by an island (not renewed within its term); the locks held under it are lost, writes under them fail",
		"session", fmt.Sprintf("%016x", s), "inodes", n)
}

// renewLocks renews the session at every island where this FS holds
// locks, about four times per term, until Close.
func (f *FS) renewLocks() {
	defer f.pollers.Done()
	every := 2 * time.Second
	for {
		select {
		case <-f.pollCtx.Done():
			return
		case <-time.After(every):
		}
		// One inode per island reaches it.
		route := map[namespace.IslandID]uint64{}
		f.openRoutes(route)
		f.locks.mu.Lock()
		for ino, h := range f.locks.mu.held {
			if len(h.owners) > 0 {
				route[f.islandOf(ino)] = ino
			}
		}
		for isl, r := range f.locks.mu.resumed {
			if _, ok := route[isl]; !ok {
				route[isl] = r
			}
		}
		every = 0
		for _, li := range f.locks.mu.islands {
			if every == 0 || li.term/4 < every {
				every = li.term / 4
			}
		}
		f.locks.mu.Unlock()
		if every <= 0 {
			every = 2 * time.Second
		}
		every = max(every, 100*time.Millisecond)
		for _, ino := range route {
			ctx, cancel := context.WithTimeout(f.pollCtx, every)
			if _, err := f.renewAt(ctx, ino); err != nil && f.pollCtx.Err() == nil {
				f.log.Debug("client: renewing the lock session", "island", f.islandOf(ino), "err", err)
			}
			cancel()
		}
	}
}

// definiteRefusal reports whether a lock request's error says it was
// not granted (rather than that its outcome is unknown).
func definiteRefusal(err error) bool {
	for _, e := range []error{metawire.ErrWouldBlock, metawire.ErrDeadlock, metawire.ErrInterrupted, metawire.ErrInvalid,
		metawire.ErrStale, metawire.ErrSessionEnded, metawire.ErrBadRequest, metawire.ErrPerm, metawire.ErrReadOnly} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// noteMaybeHeld records that owner may hold a lock on ino.
func (f *FS) noteMaybeHeld(ino, owner uint64) {
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	defer f.locks.heldChangedLocked()
	h := f.locks.mu.held[ino]
	if h == nil {
		h = &heldLocks{owners: map[uint64]int{}}
		f.locks.mu.held[ino] = h
	}
	if h.owners[owner] == 0 {
		h.owners[owner] = 1
	}
}

// noteHeld records what the island answered owner holds on ino.
func (f *FS) noteHeld(ino, owner uint64, n int, granted bool) {
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	defer f.locks.heldChangedLocked()
	h := f.locks.mu.held[ino]
	if h == nil {
		if n == 0 {
			return
		}
		h = &heldLocks{owners: map[uint64]int{}}
		f.locks.mu.held[ino] = h
	}
	if granted {
		h.lost = false
	}
	if n == 0 {
		delete(h.owners, owner)
	} else {
		h.owners[owner] = n
	}
	if len(h.owners) == 0 && !h.lost {
		delete(f.locks.mu.held, ino)
	}
}

// lockCall sends one lock request, in a new session if the island ended
// this one (the request is this FS's first under the new session).
func (f *FS) lockCall(ctx context.Context, req *metawire.LockReq, resp *metawire.LockResp) error {
	for attempt := 0; ; attempt++ {
		if err := f.joinIsland(ctx, req.Ino); err != nil {
			return err
		}
		req.Lock.Owner = f.lockOwner(req.Lock.Owner.ID)
		sent := time.Now()
		err := f.call(ctx, req.Ino, metawire.OpLock, req, resp)
		if errors.Is(err, metawire.ErrSessionEnded) && attempt == 0 {
			f.sessionEnded(req.Lock.Owner.Session)
			continue
		}
		if err == nil {
			// The island saw the session alive when it answered (a
			// request renews it there).
			f.sessionAlive(f.islandOf(req.Ino), req.Lock.Owner.Session, sent, 0)
		}
		return err
	}
}

// GetLock answers F_GETLK: the first lock of another owner that
// conflicts with l, if any (l.Owner.ID names the asking owner).
func (f *FS) GetLock(ctx context.Context, cred metawire.Cred, ino uint64, l filelock.Lock) (filelock.Lock, bool, error) {
	if c, found, ok := f.localGet(ino, l); ok {
		return c, found, nil
	}
	f.flushCreate(ctx, ino)
	req := metawire.LockReq{Cred: cred, Ino: ino, Cmd: metawire.LockGet, Lock: l}
	var resp metawire.LockResp
	if err := f.lockCall(ctx, &req, &resp); err != nil {
		return filelock.Lock{}, false, err
	}
	return resp.Conflict, resp.Found, nil
}

// SetLock takes lock l for owner l.Owner.ID on ino: at once or
// ErrWouldBlock, or with wait until it is granted (ErrDeadlock when the
// wait would close a cycle of waiting owners). A closed interrupt ends
// the wait with ErrInterrupted, unless the island granted the lock
// first. It returns the inode's attributes at the grant, for the caller
// to revalidate what it cached of the file's data (another client may
// have written it under the lock it held before).
func (f *FS) SetLock(ctx context.Context, cred metawire.Cred, ino uint64, l filelock.Lock, wait bool, interrupt <-chan struct{}) (metawire.Attr, error) {
	if err := l.Valid(); err != nil {
		return metawire.Attr{}, fmt.Errorf("%w: %v", metawire.ErrInvalid, err)
	}
	f.ctr.lockRequests.Add(1)
	if at, ok, err := f.localLock(ctx, cred, ino, l, wait); ok {
		return at, err
	}
	f.flushCreate(ctx, ino)
	req := metawire.LockReq{Cred: cred, Ino: ino, Cmd: metawire.LockSet, Lock: l}
	var resp metawire.LockResp
	var err error
	if !wait {
		err = f.lockCall(ctx, &req, &resp)
	} else {
		err = f.waitLock(ctx, &req, &resp, interrupt)
	}
	if err != nil {
		if !definiteRefusal(err) {
			// The island may have granted it with the answer lost: the
			// owner's close asks it to release whatever it holds.
			f.noteMaybeHeld(ino, l.Owner.ID)
		}
		return metawire.Attr{}, err
	}
	f.noteHeld(ino, l.Owner.ID, len(resp.Locks), true)
	f.cacheAttr(resp.Attr)
	return resp.Attr, nil
}

// waitLock sends LockWait requests until one is granted. Each waits at
// the island for at most lockWaitMs. An interrupt cancels the wait at
// the island, then takes the request's answer: a lock granted just
// before the cancel is kept (and reported granted), never left behind
// unknown to its owner.
func (f *FS) waitLock(ctx context.Context, req *metawire.LockReq, resp *metawire.LockResp, interrupt <-chan struct{}) error {
	select {
	case f.locks.waiters <- struct{}{}:
	case <-interrupt:
		return metawire.ErrInterrupted
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-f.locks.waiters }()
	req.Cmd, req.WaitMs = metawire.LockWait, lockWaitMs
	f.locks.mu.Lock()
	if li := f.locks.mu.islands[f.islandOf(req.Ino)]; li != nil && li.term > 0 {
		// A grant renews the session only as of when its request was
		// sent: a wait of a quarter term leaves most of the term to the
		// lock it grants (a longer one was in doubt as soon as granted).
		req.WaitMs = uint32(min(lockWaitMs, max(li.term/4, 50*time.Millisecond).Milliseconds()))
	}
	f.locks.mu.Unlock()
	for {
		req.Waiter = randomID()
		*resp = metawire.LockResp{}
		done := make(chan error, 1)
		go func() { done <- f.lockCall(ctx, req, resp) }()
		var err error
		select {
		case err = <-done:
		case <-interrupt:
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			creq := metawire.LockReq{Cred: req.Cred, Ino: req.Ino, Cmd: metawire.LockCancel, Lock: req.Lock, Waiter: req.Waiter}
			if cerr := f.call(cctx, req.Ino, metawire.OpLock, &creq, nil); cerr != nil {
				f.log.Debug("client: cancelling a lock wait", "ino", fmt.Sprintf("%x", req.Ino), "err", cerr)
			}
			cancel()
			err = <-done
			if err == nil && !resp.Granted {
				return metawire.ErrInterrupted
			}
		}
		if err != nil {
			return err
		}
		if resp.Granted {
			return nil
		}
		// Waiting: the island's wait ran out; ask again.
		select {
		case <-interrupt:
			return metawire.ErrInterrupted
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
	}
}

// Unlock releases owner's locks of kind l.Kind in l's range on ino (the
// caller wrote back what the owner wrote under them first).
func (f *FS) Unlock(ctx context.Context, cred metawire.Cred, ino uint64, l filelock.Lock) error {
	if f.localUnlock(ino, l, false) {
		return nil
	}
	if !f.mayHold(ino, l.Owner.ID) {
		return nil // nothing held here: nothing to release
	}
	req := metawire.LockReq{Cred: cred, Ino: ino, Cmd: metawire.LockUnlock, Lock: l}
	var resp metawire.LockResp
	if err := f.lockCall(ctx, &req, &resp); err != nil {
		return err
	}
	f.noteHeld(ino, l.Owner.ID, len(resp.Locks), false)
	return nil
}

// UnlockWritten releases l as Unlock does, after writeBack has sent
// what its owner wrote under it; writeBack is skipped when l was granted
// here under an exclusive lease that still stands (no other client can
// take a lock or read the file before this FS acknowledges the lease's
// break, and the OnLeaseBreak hook writes back first). Used for the
// append lock, whose every write would otherwise be a commit. The
// write-back's error is returned first; the lock goes either way.
func (f *FS) UnlockWritten(ctx context.Context, cred metawire.Cred, ino uint64, l filelock.Lock, writeBack func(context.Context) error) error {
	if f.localUnlock(ino, l, false) {
		return nil
	}
	werr := writeBack(ctx)
	if err := f.Unlock(ctx, cred, ino, l); err != nil && werr == nil {
		return err
	}
	return werr
}

// UnlockOwner releases every lock owner holds on ino (a close of the
// owner's descriptor, the release of an open file description). It asks
// the island only when this FS knows the owner holds something there.
func (f *FS) UnlockOwner(ctx context.Context, ino, owner uint64) error {
	if f.localUnlock(ino, filelock.Lock{Owner: filelock.Owner{ID: owner}}, true) {
		return nil
	}
	if !f.mayHold(ino, owner) {
		return nil
	}
	req := metawire.LockReq{Cred: metawire.Root, Ino: ino, Cmd: metawire.LockUnlockOwner, Lock: filelock.Lock{Owner: filelock.Owner{ID: owner}}}
	var resp metawire.LockResp
	if err := f.lockCall(ctx, &req, &resp); err != nil {
		return err
	}
	f.noteHeld(ino, owner, len(resp.Locks), false)
	return nil
}

// mayHold reports whether owner holds locks on ino that this FS knows.
func (f *FS) mayHold(ino, owner uint64) bool {
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	h := f.locks.mu.held[ino]
	if h != nil && h.owners[owner] > 0 {
		return true
	}
	_, resumed := f.locks.mu.resumed[f.islandOf(ino)]
	return resumed || f.locks.mu.resuming
}

// Locked reports whether this FS holds locks on ino.
func (f *FS) Locked(ino uint64) bool {
	if !f.locks.held.Load() {
		return false
	}
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	h := f.locks.mu.held[ino]
	return h != nil && (len(h.owners) > 0 || h.lost)
}

// LockCheck answers whether writes to ino may go on: ErrIO when this FS
// holds (or held) locks on it under a session that ended, or that its
// island may have ended (no renewal answered within 90% of a term).
func (f *FS) LockCheck(ino uint64) error {
	if !f.locks.held.Load() {
		return nil
	}
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	h := f.locks.mu.held[ino]
	if h == nil {
		return nil
	}
	if h.lost {
		return fmt.Errorf("%w: the lock session this file was locked under ended: its locks are lost", metawire.ErrIO)
	}
	li := f.locks.mu.islands[f.islandOf(ino)]
	if li != nil && len(h.owners) > 0 && time.Now().After(li.validUntil) {
		return fmt.Errorf("%w: the lock session has not been renewed for %v: its locks may be lost", metawire.ErrIO, li.term*9/10)
	}
	return nil
}

// LockedInodes is how many files this FS holds locks on.
func (f *FS) LockedInodes() int {
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	return len(f.locks.mu.held)
}

// ForgetLost forgets that ino's locks were lost (its last handle went).
func (f *FS) ForgetLost(ino uint64) {
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	defer f.locks.heldChangedLocked()
	if h := f.locks.mu.held[ino]; h != nil {
		h.lost = false
		if len(h.owners) == 0 {
			delete(f.locks.mu.held, ino)
		}
	}
}

// ListLocks lists the locks held and waited for on ino (atoll locks).
func (f *FS) ListLocks(ctx context.Context, cred metawire.Cred, ino uint64) (LockList, error) {
	req := metawire.LockReq{Cred: cred, Ino: ino, Cmd: metawire.LockList, Lock: filelock.Lock{Owner: f.lockOwner(0)}}
	var resp metawire.LockResp
	if err := f.call(ctx, ino, metawire.OpLock, &req, &resp); err != nil {
		return LockList{}, err
	}
	return LockList{Held: resp.Locks, Waiting: resp.Waiters, OpenBy: resp.Holders}, nil
}

// LockList is what an island knows of one inode's locks: the locks
// held, the requests waiting, and the lock sessions holding it open.
type LockList struct {
	Held, Waiting []filelock.Lock
	OpenBy        []uint64
}

// SetLockSession makes s this FS's lock session, before its first lock:
// a gateway restarted within the islands' lock term takes back the
// session its clients' locks are held under (ResumeLockSession then
// renews it where it holds locks).
func (f *FS) SetLockSession(s uint64) error {
	if s == 0 {
		return fmt.Errorf("%w: lock session 0", metawire.ErrInvalid)
	}
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	if len(f.locks.mu.held) > 0 {
		return fmt.Errorf("%w: this FS holds locks already", metawire.ErrInvalid)
	}
	f.locks.mu.session = s
	f.locks.mu.resuming = true
	return nil
}

// ResumeLockSession asks every island once about this FS's lock session
// (SetLockSession): where it holds locks this FS did not take, it is
// renewed from then on as if this FS had taken them, and unlocks there
// are sent even for owners this FS does not know. It returns how many
// locks the session holds.
func (f *FS) ResumeLockSession(ctx context.Context) (int, error) {
	f.locks.mu.Lock()
	s := f.locks.mu.session
	start := !f.locks.mu.renewer
	f.locks.mu.renewer = true
	f.locks.mu.Unlock()
	if start && !f.closing.Load() {
		f.pollers.Add(1)
		go f.renewLocks()
	}
	total, ended := 0, false
	err := f.eachIsland(ctx, metawire.OpLockSession, &metawire.LockSessionReq{Session: s},
		func(id namespace.IslandID, route uint64, sent time.Time, resp *metawire.LockSessionResp) bool {
			if resp.Ended {
				ended = true
				return true
			}
			f.sessionAlive(id, s, sent, time.Duration(resp.TermMs)*time.Millisecond)
			if resp.Locks > 0 {
				f.locks.mu.Lock()
				f.locks.mu.resumed[id] = route
				f.locks.mu.Unlock()
				total += int(resp.Locks)
			}
			return false
		})
	if ended {
		f.sessionEnded(s)
		f.locks.mu.Lock()
		f.locks.mu.resuming = false
		f.locks.mu.Unlock()
		return 0, nil
	}
	if err == nil {
		f.locks.mu.Lock()
		f.locks.mu.resuming = false
		f.locks.mu.Unlock()
	}
	return total, err
}

// eachIsland sends req as op (OpLockSession, OpLockEnd) to every island
// and hands each answer, with when its request was sent, to fn until fn
// says stop; it returns the islands' failures.
func (f *FS) eachIsland(ctx context.Context, op uint16, req *metawire.LockSessionReq,
	fn func(id namespace.IslandID, route uint64, sent time.Time, resp *metawire.LockSessionResp) (stop bool)) error {
	// These touch no record of this FS: nothing kept back need go first.
	ctx = context.WithValue(ctx, renewalKey{}, true)
	var errs []error
	for id, route := range f.islandRoutes() {
		sent := time.Now()
		var resp metawire.LockSessionResp
		if err := f.call(ctx, route, op, req, &resp); err != nil {
			errs = append(errs, fmt.Errorf("island %d: %w", id, err))
			continue
		}
		if fn(id, route, sent, &resp) {
			break
		}
	}
	return errors.Join(errs...)
}

// islandRoutes returns a route (an inode of a bucket it owns) to each
// island. The map's table is not enumerable here, so 4096 buckets spread
// evenly stand for it (every island owns at least one entry of depth 12
// or less in any table this side of a few thousand islands).
func (f *FS) islandRoutes() map[namespace.IslandID]uint64 {
	routes := map[namespace.IslandID]uint64{}
	for k := range uint64(4096) {
		if id, _, ok := f.cfg.Map.IslandFor(uint32(k << 20)); ok {
			if _, seen := routes[id]; !seen {
				routes[id] = k << 52
			}
		}
	}
	return routes
}

// ReleaseOwners releases, at every island, the locks of this FS's owners
// whose id ANDed with mask is bits (a gateway freeing the locks of one
// client host, whose id is in its owners' top bits, including locks an
// earlier run of the gateway took). It returns how many were released.
func (f *FS) ReleaseOwners(ctx context.Context, mask, bits uint64) (int, error) {
	if mask == 0 {
		return 0, fmt.Errorf("%w: release without a mask", metawire.ErrInvalid)
	}
	total := 0
	req := metawire.LockSessionReq{Session: f.LockSession(), ReleaseMask: mask, ReleaseBits: bits}
	err := f.eachIsland(ctx, metawire.OpLockSession, &req, func(_ namespace.IslandID, _ uint64, _ time.Time, resp *metawire.LockSessionResp) bool {
		total += int(resp.Released)
		return false
	})
	f.locks.mu.Lock()
	for ino, h := range f.locks.mu.held {
		for o := range h.owners {
			if o&mask == bits {
				delete(h.owners, o)
			}
		}
		if len(h.owners) == 0 && !h.lost {
			delete(f.locks.mu.held, ino)
		}
	}
	f.locks.heldChangedLocked()
	f.locks.mu.Unlock()
	return total, err
}

// EndLockSession ends lock session s at every island (an operator
// breaking a dead client's session): its locks are released now. It
// returns how many were released.
func (f *FS) EndLockSession(ctx context.Context, s uint64) (int, error) {
	total := 0
	err := f.eachIsland(ctx, metawire.OpLockEnd, &metawire.LockSessionReq{Session: s}, func(_ namespace.IslandID, _ uint64, _ time.Time, resp *metawire.LockSessionResp) bool {
		total += int(resp.Released)
		return false
	})
	return total, err
}

// flushCreate sends a create of ino this FS kept back (write-behind):
// the island must know the inode it is asked to lock.
func (f *FS) flushCreate(ctx context.Context, ino uint64) {
	if f.CreatePending(ino) {
		if err := f.SendCreate(ctx, ino); err != nil {
			f.log.Debug("client: sending a kept-back create before a lock", "ino", fmt.Sprintf("%x", ino), "err", err)
		}
	}
}

// IslandWait is how long a request keeps trying an island that does not
// answer (FSConfig.IslandWait).
func (f *FS) IslandWait() time.Duration { return f.cfg.IslandWait }
