package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// Open files that stay open (meta's "Open files"). An adapter that keeps
// files open for its users (the FUSE mount) tells the FS with HoldOpen
// and ReleaseOpen; the FS holds each such inode at its island under its
// lock session, so another client's unlink or rename over keeps the
// inode, with no name, until this FS lets go, and reads and writes
// through the open descriptor go on as on a local disk. The session's
// renewals keep the holds; a client that dies loses them a session term
// later and the islands reclaim what only it held.
//
// A file opened under this FS's exclusive lease on its bucket (a file
// it just created, under write-behind) is held here only: nobody else
// can reach the bucket without recalling the lease first, and the
// recall tells the island of every such hold before it is acknowledged
// (holdBuckets), as it sends the changes kept back. The watch tells the
// island before such a lease can end unrecalled, retries what failed
// and holds again under a new session what an ended one held. So an
// SQLite writer's journal, created, opened and removed in one
// transaction, costs no island round trip.

// openWatchEvery is how often the watch looks at untold holds.
const openWatchEvery = 200 * time.Millisecond

type openState struct {
	mu struct {
		lockcheck.Mutex
		files    map[uint64]*openHold
		watching bool
	}
}

// openHold is one inode this FS has open, or had open and has not yet
// released at its island.
type openHold struct {
	// send orders this inode's hold and unhold messages (held across
	// them: a hold overtaken by the unhold of an earlier close would be
	// undone); taken before opens.mu.
	send sync.Mutex
	// The fields below are guarded by opens.mu.
	count int // HoldOpen calls not yet released
	// told is the lock session the island holds the inode under (0:
	// none); kept the exclusive lease generation under which it is held
	// here only (0: none).
	told, kept uint64
	// gone: the island answered that the inode is gone; nothing to hold.
	gone bool
}

func (st *openState) init() {
	st.mu.files = map[uint64]*openHold{}
}

// HoldOpen notes that the caller opened ino (call ReleaseOpen at its
// close). It fails with ErrStale when the island says the inode is
// gone; other failures to reach the island are retried in the
// background (the file is held as soon as the island answers).
func (f *FS) HoldOpen(ctx context.Context, ino uint64) error {
	f.opens.mu.Lock()
	h := f.opens.mu.files[ino]
	if h == nil {
		h = &openHold{}
		f.opens.mu.files[ino] = h
		f.startOpenWatchLocked() // holds under an ended session are told again
	}
	h.count++
	if h.count > 1 {
		f.opens.mu.Unlock()
		return nil
	}
	// Even when told: the last close's unhold may be on its way, and
	// settleHold holds it again after it.
	f.opens.mu.Unlock()
	// Under h.send: a recall that starts after the lease check waits
	// for the kept mark, and then tells the island (holdBuckets).
	h.send.Lock()
	gen, ok := f.exclusiveLease(namespace.Ino(ino).Bucket(), 0)
	if ok {
		f.opens.mu.Lock()
		h.kept = gen
		f.opens.mu.Unlock()
	}
	h.send.Unlock()
	if ok {
		return nil
	}
	err := f.settleHold(ctx, ino, h, false)
	if errors.Is(err, metawire.ErrStale) {
		f.ReleaseOpen(ino)
		return err
	}
	if err != nil {
		f.log.Debug("client: holding an open file at its island; retrying", "ino", fmt.Sprintf("%x", ino), "err", err)
		f.opens.mu.Lock()
		f.startOpenWatchLocked()
		f.opens.mu.Unlock()
	}
	return nil
}

// ReleaseOpen undoes one HoldOpen of ino; the last one lets the island
// reclaim the inode if it has no name left and nobody else holds it.
func (f *FS) ReleaseOpen(ino uint64) {
	f.opens.mu.Lock()
	h := f.opens.mu.files[ino]
	if h == nil || h.count == 0 {
		f.opens.mu.Unlock()
		return
	}
	h.count--
	if h.count > 0 {
		f.opens.mu.Unlock()
		return
	}
	f.opens.mu.Unlock()
	ctx, cancel := context.WithTimeout(f.pollCtx, 10*time.Second)
	defer cancel()
	if err := f.settleHold(ctx, ino, h, false); err != nil {
		f.log.Debug("client: releasing an open file at its island; retrying", "ino", fmt.Sprintf("%x", ino), "err", err)
		f.opens.mu.Lock()
		f.startOpenWatchLocked()
		f.opens.mu.Unlock()
	}
}

// OpenHolds returns how many inodes this FS holds open and how many of
// them the islands know of.
func (f *FS) OpenHolds() (open, told int) {
	f.opens.mu.Lock()
	defer f.opens.mu.Unlock()
	for _, h := range f.opens.mu.files {
		if h.count > 0 {
			open++
			if h.told != 0 {
				told++
			}
		}
	}
	return open, told
}

// settleHold brings the island's hold of ino in line with h: held under the
// current lock session while open (unless kept here under a lease, or
// gone), not held once closed; an entry closed and not held is
// forgotten; tell drops a mark of being kept here first. A failure is
// left for the watch; ErrStale says the inode is gone.
func (f *FS) settleHold(ctx context.Context, ino uint64, h *openHold, tell bool) error {
	h.send.Lock()
	defer h.send.Unlock()
	if tell {
		f.opens.mu.Lock()
		h.kept = 0
		f.opens.mu.Unlock()
	}
	flushed := false
	for attempt := 0; attempt < 4; attempt++ {
		s := f.LockSession()
		f.opens.mu.Lock()
		open, told := h.count > 0, h.told
		switch {
		case !open && told == 0:
			if f.opens.mu.files[ino] == h {
				delete(f.opens.mu.files, ino)
			}
			f.opens.mu.Unlock()
			return nil
		case open && (h.gone || h.kept != 0 || told == s):
			f.opens.mu.Unlock()
			return nil
		}
		f.opens.mu.Unlock()
		if !open {
			err := f.sendHold(ctx, ino, told, false)
			if err != nil && !errors.Is(err, metawire.ErrStale) && !errors.Is(err, metawire.ErrSessionEnded) {
				return err
			}
			f.opens.mu.Lock()
			h.told = 0
			f.opens.mu.Unlock()
			continue
		}
		if err := f.joinIsland(ctx, ino); err != nil {
			return err
		}
		err := f.sendHold(ctx, ino, s, true)
		switch {
		case errors.Is(err, metawire.ErrSessionEnded):
			f.sessionEnded(s)
			continue
		case errors.Is(err, metawire.ErrStale) && !flushed && f.wb.on.Load():
			// Made here and its create still kept back: the island has
			// it once that is sent.
			flushed = true
			f.flushKept(ctx, []uint32{namespace.Ino(ino).Bucket()})
			continue
		case errors.Is(err, metawire.ErrStale):
			f.opens.mu.Lock()
			h.gone = true
			f.opens.mu.Unlock()
			return err
		case err != nil:
			return err
		}
		// A hold told under an earlier session went with that session.
		f.opens.mu.Lock()
		h.told = s
		f.opens.mu.Unlock()
	}
	return fmt.Errorf("%w: holding %x: the lock session keeps ending", metawire.ErrUnavailable, ino)
}

// sendHold sends LockHold (on) or LockUnhold for session s. An unhold
// of an inode with no name left forgets what is cached of it: the
// island reclaims it unless another session holds it.
func (f *FS) sendHold(ctx context.Context, ino, s uint64, on bool) error {
	req := metawire.LockReq{Cred: metawire.Root, Ino: ino, Cmd: metawire.LockUnhold}
	if on {
		req.Cmd = metawire.LockHold
	}
	req.Lock.Owner.Session = s
	var resp metawire.LockResp
	err := f.call(ctx, ino, metawire.OpLock, &req, &resp)
	if err == nil && !on && resp.Attr.Ino == ino && resp.Attr.Nlink == 0 {
		f.Invalidate(ino)
	}
	return err
}

// holdBuckets tells the islands of the holds kept here under the
// exclusive leases on buckets (their lease is being recalled or ends).
func (f *FS) holdBuckets(ctx context.Context, buckets []uint32) {
	in := func(b uint32) bool {
		for _, x := range buckets {
			if b == x {
				return true
			}
		}
		return false
	}
	// Every open untold entry of the buckets: one whose HoldOpen is
	// deciding now is settled after it (h.send).
	f.settleWhere(ctx, func(ino uint64, h *openHold) bool {
		return h.count > 0 && h.told == 0 && !h.gone && in(namespace.Ino(ino).Bucket())
	})
}

// settleWhere settles the entries that match (called under opens.mu),
// telling the island of those kept here.
func (f *FS) settleWhere(ctx context.Context, match func(ino uint64, h *openHold) bool) {
	todo := map[uint64]*openHold{}
	f.opens.mu.Lock()
	for ino, h := range f.opens.mu.files {
		if match(ino, h) {
			todo[ino] = h
		}
	}
	f.opens.mu.Unlock()
	for ino, h := range todo {
		if err := f.settleHold(ctx, ino, h, true); err != nil && !errors.Is(err, metawire.ErrStale) {
			f.log.Debug("client: holding an open file at its island; retrying", "ino", fmt.Sprintf("%x", ino), "err", err)
		}
	}
}

// KeepOpen makes sure the island holds ino for this FS, which has it
// open (HoldOpen) and is about to remove its last name: the island keeps
// an inode whose last name goes only for the holds it knows, not for
// one kept here under a lease. It reports whether the island holds it
// (false: not open here, or the island could not be told; the caller
// keeps the file another way).
func (f *FS) KeepOpen(ctx context.Context, ino uint64) bool {
	f.opens.mu.Lock()
	h := f.opens.mu.files[ino]
	open := h != nil && h.count > 0 && !h.gone
	f.opens.mu.Unlock()
	if !open {
		return false
	}
	if err := f.settleHold(ctx, ino, h, true); err != nil {
		f.log.Debug("client: holding an open file before its last name goes", "ino", fmt.Sprintf("%x", ino), "err", err)
		return false
	}
	s := f.LockSession()
	f.opens.mu.Lock()
	defer f.opens.mu.Unlock()
	return h.count > 0 && h.told == s
}

// openRoutes adds an inode held at each island to route (the session
// renewer's islands).
func (f *FS) openRoutes(route map[namespace.IslandID]uint64) {
	f.opens.mu.Lock()
	defer f.opens.mu.Unlock()
	for ino, h := range f.opens.mu.files {
		if h.told != 0 {
			if isl := f.islandOf(ino); route[isl] == 0 {
				route[isl] = ino
			}
		}
	}
}

// startOpenWatchLocked starts, once, the goroutine that tells the
// islands of holds whose lease is ending, retries failed tells and
// releases, and holds again under a new session (f.opens.mu held).
func (f *FS) startOpenWatchLocked() {
	if f.opens.mu.watching || f.closing.Load() {
		return
	}
	f.opens.mu.watching = true
	f.every(openWatchEvery, f.watchOpens)
}

// watchOpens is one look of the watch: holds kept here whose lease is
// ending go to the island, and every entry out of line with the island
// (a failed tell or release, a hold under an ended session) is settled.
func (f *FS) watchOpens() {
	s := f.LockSession()
	type keptHold struct{ ino, gen uint64 }
	var kept []keptHold
	f.opens.mu.Lock()
	for ino, h := range f.opens.mu.files {
		if h.count > 0 && h.told == 0 && h.kept != 0 {
			kept = append(kept, keptHold{ino, h.kept})
		}
	}
	f.opens.mu.Unlock()
	ending := map[uint64]bool{}
	for _, k := range kept {
		// The island's copy of the lease outlasts this side's by its
		// margin: a tell begun with wbMinLease left lands within it.
		if g, ok := f.exclusiveLease(namespace.Ino(k.ino).Bucket(), 0); !ok || g != k.gen {
			ending[k.ino] = true
		}
	}
	ctx, cancel := context.WithTimeout(f.pollCtx, wbMinLease)
	defer cancel()
	f.settleWhere(ctx, func(ino uint64, h *openHold) bool {
		if h.count == 0 {
			return h.told != 0
		}
		if h.gone {
			return false
		}
		if h.kept != 0 {
			return ending[ino]
		}
		return h.told != s
	})
}
