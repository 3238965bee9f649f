package fusefs

import (
	"context"
	"fmt"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// notifyWait bounds how long a lease break waits for the kernel to drop
// what it cached (see kernelBreak).
const notifyWait = 200 * time.Millisecond

// kernelLeases records what the mount gave the kernel for longer than
// the configured timeouts because a lease covered it, by the lease's
// bucket, so that a lease ending early (broken by another client's
// change) invalidates it.
type kernelLeases struct {
	mu      lockcheck.Mutex
	buckets map[uint32]*kernelBucket
	added   int
}

type kernelBucket struct {
	names map[kernelName]struct{}
	nodes map[uint64]struct{}
	dirs  map[uint64]struct{} // directories whose listing the kernel may cache
	until time.Time           // the longest timeout given
	// beyond is the latest time the kernel was given a record of the
	// bucket for past its lease's end as known then (a hold: the watch
	// drops such records if the lease is about to end unrenewed).
	beyond time.Time
}

type kernelName struct {
	parent uint64 // FUSE node id
	name   string
}

func (k *kernelLeases) bucketLocked(b uint32, until time.Time) *kernelBucket {
	if k.buckets == nil {
		k.buckets = map[uint32]*kernelBucket{}
	}
	now := time.Now()
	if k.added++; k.added%4096 == 0 {
		for id, kb := range k.buckets {
			if kb.until.Before(now) && len(kb.dirs) == 0 {
				delete(k.buckets, id)
			}
		}
	}
	kb := k.buckets[b]
	if kb == nil || kb.until.Before(now) {
		// Listings the kernel caches stay recorded: they do not expire.
		dirs := map[uint64]struct{}{}
		if kb != nil {
			dirs = kb.dirs
		}
		kb = &kernelBucket{names: map[kernelName]struct{}{}, nodes: map[uint64]struct{}{}, dirs: dirs}
		k.buckets[b] = kb
	}
	if until.After(kb.until) {
		kb.until = until
	}
	return kb
}

// holdNoteBound is how late after its lease was read a hold may still be
// noted for the watch: half the time between the latest a hold is given
// (client.HoldMinLeft before the lease's end) and the earliest the watch
// drops it (client.HoldEndMargin before), so a hold noted in time is
// never missed by a drop.
const holdNoteBound = (client.HoldMinLeft - client.HoldEndMargin) / 2

// holdLocked returns the timeout to give the kernel for a record of kb
// whose lease was read at asked (hold and left from client.FS.EntryHold,
// ttl the configured timeout) and notes a hold past the lease's end for
// the watch (kernelLeasesEnding). A record given no longer than its lease
// has left, or than ttl, is safe as before: noting it would make the
// watch drop the bucket at every lookup in its lease's last second (a
// measured 2x slower cold grep -r of a tree). A hold noted later than
// holdNoteBound (this goroutine was not run meanwhile) is not given: the
// watch may have dropped the bucket in between.
func (kb *kernelBucket) holdLocked(hold, left, ttl time.Duration, asked time.Time) time.Duration {
	if hold <= left || hold <= ttl {
		return max(hold, ttl)
	}
	now := time.Now()
	if late := now.Sub(asked); late > holdNoteBound {
		return max(left-late, ttl)
	}
	if t := now.Add(hold); t.After(kb.beyond) {
		kb.beyond = t
	}
	return hold
}

// entryTTLs returns the kernel's timeouts for name in parent (FUSE node
// ids) naming at: the configured ones, or as long as the leases covering
// the cached name and attributes may be held (client.FS.EntryHold: while
// polls renew them, up to client.KernelHoldMax) if that is longer. The
// attributes of a file open here keep the configured timeout (they follow
// its unflushed writes). Whatever a lease covers is recorded for
// kernelBreak, so that another client's change is seen at once, not after
// a timeout, and so that the mount's watch drops it if the lease is about
// to end unrenewed.
func (a *adapter) entryTTLs(parent uint64, name string, at metawire.Attr) (entry, attr time.Duration) {
	entry, attr = a.cfg.EntryTTL, a.cfg.AttrTTL
	if a.cfg.EntryTTL <= 0 && a.cfg.AttrTTL <= 0 {
		return // the kernel caches nothing
	}
	dir := a.ino(parent)
	asked := time.Now()
	if d, left := a.fs.EntryHold(dir, name, at.Ino); d > 0 && a.cfg.EntryTTL > 0 {
		a.kern.mu.Lock()
		kb := a.kern.bucketLocked(namespace.Ino(dir).Bucket(), time.Now().Add(max(entry, d)))
		kb.names[kernelName{parent, name}] = struct{}{}
		entry = kb.holdLocked(d, left, a.cfg.EntryTTL, asked)
		a.kern.mu.Unlock()
	}
	if at.Ino != 0 {
		attr = a.attrTTL(at.Ino)
	}
	return entry, attr
}

// attrTTL is the kernel's attribute timeout for ino (see entryTTLs).
func (a *adapter) attrTTL(i uint64) time.Duration {
	ttl := a.cfg.AttrTTL
	if ttl <= 0 {
		return ttl
	}
	a.mu.Lock()
	open := a.files[i] != nil
	a.mu.Unlock()
	if open {
		return ttl
	}
	asked := time.Now()
	if d, left := a.fs.AttrHold(i); d > 0 {
		a.kern.mu.Lock()
		kb := a.kern.bucketLocked(namespace.Ino(i).Bucket(), time.Now().Add(max(ttl, d)))
		kb.nodes[a.nodeID(i)] = struct{}{}
		ttl = kb.holdLocked(d, left, a.cfg.AttrTTL, asked)
		a.kern.mu.Unlock()
	}
	return ttl
}

// kernelAttrLeased reports whether the attributes the kernel holds of
// inode i, if any, were given under a lease this mount still holds (they
// are recorded for kernelBreak, and the mount's own copy is stamped with
// the live lease). Then nobody else changed the inode since: its island
// breaks the lease before it applies another client's change, and the
// break invalidates them. An OPEN need not drop them (dropKernelAttr);
// it did for every open, so a tool opening many files it had just
// stat-ed (git status re-reading the files of a fresh checkout) made the
// kernel ask for each file's attributes again.
func (a *adapter) kernelAttrLeased(i uint64) bool {
	a.kern.mu.Lock()
	kb := a.kern.buckets[namespace.Ino(i).Bucket()]
	recorded := false
	if kb != nil && kb.until.After(time.Now()) {
		_, recorded = kb.nodes[a.nodeID(i)]
	}
	a.kern.mu.Unlock()
	if !recorded {
		return false
	}
	_, left := a.fs.AttrHold(i)
	return left > 0
}

// cacheListing lets the kernel keep directory i's listing in its page
// cache (FOPEN_CACHE_DIR, and FOPEN_KEEP_CACHE so this open does not drop
// what an earlier one filled) while the mount holds a lease on the
// directory's names, so a warm readdir costs no request. The kernel drops
// the cache itself when this mount changes the directory, and when the
// directory's attributes moved at the start of a later listing; a lease
// break drops it here (kernelBreak).
//
// Without a lease, the listing's first page is read now (leased) into
// the open's stream ds, where the first READDIR finds it: the same one
// request, made before the open's answer, so that the kernel caches this
// listing too (FOPEN_CACHE_DIR without FOPEN_KEEP_CACHE: what it held
// from before the lease is dropped). Otherwise the first listing of a
// directory in a bucket the mount held no lease on (each subdirectory of
// a tree walked for the first time) was never cached, and a second walk
// read every listing through the mount again.
func (a *adapter) cacheListing(ctx context.Context, cred metawire.Cred, i uint64, ds *dirStream, out *fuse.OpenOut) {
	if a.cfg.AttrTTL <= 0 || a.server == nil {
		return
	}
	keep := uint32(fuse.FOPEN_KEEP_CACHE)
	d := a.fs.DirLease(i)
	if d <= 0 && a.fs.LeasesOn() {
		resp, err := a.fs.Readdir(ctx, cred, i, 0, dirPage, true)
		if err != nil {
			return // the READDIR answers the error
		}
		ds.mu.Lock()
		ds.plus, ds.at, ds.next, ds.entries, ds.eof, ds.valid = true, time.Now(), 0, resp.Entries, resp.EOF, true
		ds.mu.Unlock()
		d, keep = a.fs.DirLease(i), 0
	}
	if d <= 0 {
		return
	}
	a.kern.mu.Lock()
	a.kern.bucketLocked(namespace.Ino(i).Bucket(), time.Now().Add(d)).dirs[a.nodeID(i)] = struct{}{}
	a.kern.mu.Unlock()
	out.OpenFlags |= fuse.FOPEN_CACHE_DIR | keep
}

// negativeEntry answers a lookup of a name known missing under a lease
// with a negative entry the kernel keeps as long as the lease (a create
// of that name then needs no LOOKUP); false when no lease covers it.
func (a *adapter) negativeEntry(parent uint64, name string, out *fuse.EntryOut) bool {
	if a.cfg.EntryTTL <= 0 {
		return false
	}
	d, _ := a.entryTTLs(parent, name, metawire.Attr{})
	if d <= a.cfg.EntryTTL {
		return false
	}
	*out = fuse.EntryOut{}
	out.SetEntryTimeout(d)
	return true
}

// kernelBreak invalidates what the kernel holds under the leases of
// buckets, which just ended early (client.FS.OnLeaseBreak). The kernel
// serialises a name's invalidation with lookups in its directory (it
// takes the directory's lock) and drops attributes replies that raced
// with an invalidation, so nothing read before the break survives it.
// An invalidation waits for the directory's lock: when a change of this
// mount in that directory is itself waiting at the island behind the
// change that broke the lease, the break is acknowledged after
// notifyWait anyway (the invalidation completes with that change).
func (a *adapter) kernelBreak(buckets []uint32) {
	if a.server == nil {
		return
	}
	var names []kernelName
	var nodes, dirs []uint64
	a.kern.mu.Lock()
	for _, b := range buckets {
		kb := a.kern.buckets[b]
		if kb == nil {
			continue
		}
		delete(a.kern.buckets, b)
		for n := range kb.dirs {
			dirs = append(dirs, n) // a cached listing does not expire
		}
		if kb.until.Before(time.Now()) {
			continue // the kernel's copies expired already
		}
		for n := range kb.names {
			names = append(names, n)
		}
		for n := range kb.nodes {
			nodes = append(nodes, n)
		}
	}
	a.kern.mu.Unlock()
	if len(names)+len(nodes)+len(dirs) == 0 {
		return
	}
	done := make(chan struct{})
	a.notifies.Add(1)
	go func() {
		defer a.notifies.Done()
		defer close(done)
		for _, n := range nodes {
			if st := a.server.InodeNotify(n, -1, 0); !st.Ok() && st != fuse.ENOENT {
				a.log.Debug("fusefs: invalidating attributes after a lease break", "node", fmt.Sprintf("%x", n), "status", st)
			}
		}
		for _, n := range dirs { // offset 0: the cached listing too
			if st := a.server.InodeNotify(n, 0, 0); !st.Ok() && st != fuse.ENOENT {
				a.log.Debug("fusefs: invalidating a listing after a lease break", "node", fmt.Sprintf("%x", n), "status", st)
			}
		}
		for _, n := range names {
			if st := a.server.EntryNotify(n.parent, n.name); !st.Ok() && st != fuse.ENOENT {
				a.log.Debug("fusefs: invalidating a name after a lease break", "name", n.name, "status", st)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(notifyWait):
		a.log.Debug("fusefs: kernel invalidation still waiting after a lease break", "names", len(names), "nodes", len(nodes))
	}
}

// kernelWatchEvery is how often the mount's watch looks for leases about
// to end (kernelLeasesEnding).
const kernelWatchEvery = 200 * time.Millisecond

// kernelLeasesEnding returns, for the mount's watch, the buckets whose
// records the kernel must drop now: it may keep them past the current end
// of a lease that is about to end unrenewed (within client.HoldEndMargin
// of it), because its island's polls stopped answering (a partition, a
// dead or deposed leader) or the table the polls renew did not grant it.
// The island lets another client change the bucket once the lease ended
// there, which is after its end here; the kernel must not answer from its
// copy by then. A lease renewed later is taken up again at the next
// lookup.
func (a *adapter) kernelLeasesEnding(now time.Time) []uint32 {
	var ids []uint32
	var until []time.Time
	a.kern.mu.Lock()
	for b, kb := range a.kern.buckets {
		if kb.beyond.After(now) {
			ids = append(ids, b)
			until = append(until, kb.beyond)
		}
	}
	a.kern.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	ends := a.fs.LeaseEnds(ids)
	var ending []uint32
	for k, b := range ids {
		if until[k].After(ends[k]) && ends[k].Sub(now) < client.HoldEndMargin {
			ending = append(ending, b)
		}
	}
	return ending
}
