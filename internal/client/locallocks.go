package client

import (
	"context"
	"fmt"
	"time"

	"github.com/atoll-fs/atoll/internal/filelock"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// Locks this FS grants itself (a lock without an island round trip).
//
// While this FS holds the exclusive lease on a file's bucket
// (write-behind), no other session reads or changes the bucket without
// recalling the lease first, and a lock request is such an access
// (meta's recall covers OpLock). So the FS may decide the file's locks
// itself: the first lock of the file under the lease reads the island's
// lock set (one round trip, which also revalidates the file); later
// ones apply to that copy only. Before the lease ends (broken by another
// session's access, found near its end by the watch, or at a failed
// poll) the copy's locks of this session replace the session's locks at
// the island (LockReplace), and only then is the break acknowledged: the
// other session's request sees them. A conflict that would make a
// caller wait hands the file back to the island at once (it queues,
// wakes and finds deadlocks) and keeps it there for localLockPause. A
// hand-over that fails ends this FS's lock session: the locks granted
// under it are lost (LockCheck), and the island's stale copy ends with
// the session's term.
//
// Single-writer SQLite took 9 island round trips per transaction for its
// locks without this.

// localLockPause is how long a file handed back to the island for a
// conflict stays there.
const localLockPause = 5 * time.Second

// localWatchEvery is how often the watch looks for leases near their end.
const localWatchEvery = 200 * time.Millisecond

type localLocks struct {
	bucket uint32
	gen    uint64       // the lease it is held under
	set    filelock.Set // every lock of the inode
}

// exclusiveLease returns the generation of this FS's exclusive lease on
// bucket if it has at least wbMinLease left. use (a lock of a file of the
// bucket) counts as using the lease: one in use is renewed before it
// ends (hitLocked), as reads from the cache renew theirs.
func (f *FS) exclusiveLease(bucket uint32, use uint64) (uint64, bool) {
	if !f.wb.on.Load() {
		return 0, false
	}
	now := time.Now()
	f.cache.Lock()
	defer f.cache.Unlock()
	l := f.liveLeaseLocked(bucket, now)
	if l == nil || !l.exclusive || l.expires.Sub(now) < wbMinLease {
		return 0, false
	}
	if use != 0 {
		f.hitLocked(use, now)
	}
	return l.gen, true
}

// localLock takes l on ino locally when it may (handled reports it);
// entered reports that the copy was just taken from the island, whose
// attributes at reads at (for the caller's revalidation).
func (f *FS) localLock(ctx context.Context, cred metawire.Cred, ino uint64, l filelock.Lock, wait bool) (at metawire.Attr, handled bool, err error) {
	bucket := namespace.Ino(ino).Bucket()
	gen, ok := f.exclusiveLease(bucket, ino)
	if !ok {
		return at, false, nil
	}
	f.locks.mu.Lock()
	loc := f.locks.mu.local[ino]
	if loc == nil {
		if until, ok := f.locks.mu.noLocal[ino]; ok && time.Now().Before(until) {
			f.locks.mu.Unlock()
			return at, false, nil
		}
		f.locks.mu.Unlock()
		req := metawire.LockReq{Cred: cred, Ino: ino, Cmd: metawire.LockList, Lock: filelock.Lock{Owner: f.lockOwner(0)}}
		var resp metawire.LockResp
		if err := f.call(ctx, ino, metawire.OpLock, &req, &resp); err != nil || resp.Attr.Ino == 0 {
			return at, false, nil // the island decides
		}
		at = resp.Attr
		f.locks.mu.Lock()
		// The lease is checked again with f.locks.mu held: a break
		// clears the lease's exclusive mark before its hand-over
		// (handOverBuckets) looks for copies under f.locks.mu, so
		// either this copy is made before that look, which hands it
		// over, or the check sees the lease gone. Checked before
		// taking the mutex, a break could end the lease and hand over
		// nothing in between: the copy, installed after the island
		// had let another session's lock through, granted a
		// conflicting lock here, and its hand-over by the watch then
		// failed, ending the lock session (SQLite on three mounts:
		// EIO from pwrite and fdatasync of the database).
		if g, ok := f.exclusiveLease(bucket, 0); !ok || g != gen {
			f.locks.mu.Unlock()
			return at, false, nil
		}
		if f.locks.mu.local[ino] == nil {
			f.locks.mu.local[ino] = &localLocks{bucket: bucket, gen: gen, set: resp.Locks}
			f.startLocalWatch()
		}
		loc = f.locks.mu.local[ino]
	}
	l.Owner.Session = f.locks.mu.session
	if c, conflict := loc.set.Conflict(l); conflict {
		if !wait {
			f.locks.mu.Unlock()
			return at, true, fmt.Errorf("%w: held by owner %016x/%016x %d..%d", metawire.ErrWouldBlock, c.Owner.Session, c.Owner.ID, c.Start, c.End)
		}
		// A wait: the island queues it.
		f.locks.mu.noLocal[ino] = time.Now().Add(localLockPause)
		f.locks.mu.Unlock()
		f.handOver(ctx, []uint64{ino})
		return at, false, nil
	}
	loc.set = loc.set.Apply(l)
	n := len(loc.set.Held(l.Owner))
	f.locks.mu.Unlock()
	f.noteHeld(ino, l.Owner.ID, n, true)
	f.ctr.localLocks.Add(1)
	return at, true, nil
}

// localUnlock applies an unlock (or, with all, every lock of the owner)
// to ino's local copy, if it has one.
func (f *FS) localUnlock(ino uint64, l filelock.Lock, all bool) bool {
	f.locks.mu.Lock()
	loc := f.locks.mu.local[ino]
	if loc == nil {
		f.locks.mu.Unlock()
		return false
	}
	o := filelock.Owner{Session: f.locks.mu.session, ID: l.Owner.ID}
	if all {
		loc.set = loc.set.UnlockOwner(o)
	} else {
		loc.set = loc.set.Unlock(o, l.Kind, l.Start, l.End)
	}
	n := len(loc.set.Held(o))
	f.locks.mu.Unlock()
	f.noteHeld(ino, l.Owner.ID, n, false)
	return true
}

// localGet answers F_GETLK from ino's local copy, if it has one.
func (f *FS) localGet(ino uint64, l filelock.Lock) (filelock.Lock, bool, bool) {
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	loc := f.locks.mu.local[ino]
	if loc == nil {
		return filelock.Lock{}, false, false
	}
	l.Owner.Session = f.locks.mu.session
	c, found := loc.set.Conflict(l)
	return c, found, true
}

// handOverBuckets hands the local copies of buckets' files to the
// island (their lease is ending).
func (f *FS) handOverBuckets(ctx context.Context, buckets []uint32) {
	f.locks.mu.Lock()
	var inos []uint64
	for ino, loc := range f.locks.mu.local {
		for _, b := range buckets {
			if loc.bucket == b {
				inos = append(inos, ino)
				break
			}
		}
	}
	f.locks.mu.Unlock()
	if len(inos) > 0 {
		f.handOver(ctx, inos)
	}
}

// handOver replaces this session's locks at the island by the local
// copies of inos, and forgets the copies. A failure ends the session.
func (f *FS) handOver(ctx context.Context, inos []uint64) {
	for _, ino := range inos {
		f.locks.mu.Lock()
		loc := f.locks.mu.local[ino]
		delete(f.locks.mu.local, ino)
		// No new copy while this one travels: one read from the island
		// before the replacement lands would lack its locks.
		f.locks.mu.noLocal[ino] = time.Now().Add(localLockPause)
		s := f.locks.mu.session
		f.locks.mu.Unlock()
		if loc == nil {
			continue
		}
		var own []filelock.Lock
		for _, l := range loc.set {
			if l.Owner.Session == s {
				own = append(own, l)
			}
		}
		if len(own) > 0 {
			// The island renews what it holds for this session from now.
			if err := f.joinIsland(ctx, ino); err != nil {
				f.log.Debug("client: lock session at an island", "ino", fmt.Sprintf("%x", ino), "err", err)
			}
		}
		req := metawire.LockReq{Cred: metawire.Root, Ino: ino, Cmd: metawire.LockReplace, Lock: filelock.Lock{Owner: filelock.Owner{Session: s}}, Locks: own}
		var resp metawire.LockResp
		err := f.call(ctx, ino, metawire.OpLock, &req, &resp)
		if err == nil {
			f.ctr.lockHandOvers.Add(1)
			continue
		}
		if metawire.Errno(err) == metawire.Errno(metawire.ErrStale) && len(own) == 0 {
			continue // the file is gone, and nothing was held
		}
		f.log.Error("client: handing locks granted under an exclusive lease to the island failed; ending the lock session",
			"ino", fmt.Sprintf("%x", ino), "locks", len(own), "err", err)
		f.sessionEnded(s)
		return
	}
}

// startLocalWatch starts, once, the goroutine that hands local copies
// over before their lease can end (f.locks.mu held).
func (f *FS) startLocalWatch() {
	if f.locks.mu.watching || f.closing.Load() {
		return
	}
	f.locks.mu.watching = true
	f.every(localWatchEvery, f.watchLocal)
}

// watchLocal is one look of the local-lock watch: copies whose lease is
// ending go to the island.
func (f *FS) watchLocal() {
	type copyOf struct {
		ino, gen uint64
		bucket   uint32
	}
	var copies []copyOf
	f.locks.mu.Lock()
	for ino, loc := range f.locks.mu.local {
		copies = append(copies, copyOf{ino, loc.gen, loc.bucket})
	}
	f.locks.mu.Unlock()
	var ending []uint64
	for _, c := range copies {
		if g, ok := f.exclusiveLease(c.bucket, 0); !ok || g != c.gen {
			ending = append(ending, c.ino)
		}
	}
	if len(ending) > 0 {
		// The island's copy of the lease outlasts this side's by its
		// margin: a hand-over begun with wbMinLease left ends within
		// the lease.
		ctx, cancel := context.WithTimeout(f.pollCtx, wbMinLease)
		f.handOver(ctx, ending)
		cancel()
	}
}

// every runs fn every d on a goroutine the FS owns (waited for by
// Close), until Close.
func (f *FS) every(d time.Duration, fn func()) {
	f.pollers.Add(1)
	go func() {
		defer f.pollers.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-f.pollCtx.Done():
				return
			case <-t.C:
			}
			fn()
		}
	}()
}
