package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// Unlinks kept back (see "Write-behind" in the package doc): while this
// FS holds a directory's bucket exclusively, knows the name's inode under
// that lease and its attributes, and the cached directory attributes let
// the caller remove it, the unlink of a file there is answered here and
// sent later; a flush sends the kept-back unlinks of a directory in one
// request (OpUnlinkMany: one change on the island). `rm -rf` then waits
// for its island once per directory (the rmdir, which sends its
// entries' unlinks first) instead of once per file.
//
// Nobody else can tell: another session's request on the bucket recalls
// the lease, and the break is acknowledged only after the unlinks are
// sent; every other request of this FS sends them first, except an own
// change of records none of them touches.

// pendingUnlink is an unlink answered here and not yet sent.
type pendingUnlink struct {
	req    metawire.NameReq
	victim uint64 // the inode the name led to
	seq    uint64 // order kept back
	at     time.Time
}

// wbMaxUnlinks bounds the unlinks kept back: past it an unlink is sent at
// once, which sends the others first.
const wbMaxUnlinks = 4096

// unlinkBehindLocked keeps back the unlink of dir/name, which leads to
// ino, under the exclusive lease l; why as removeBehind's (f.cache and
// f.wb.mu held; da is dir's cached attributes, leased under l).
func (f *FS) unlinkBehindLocked(cred metawire.Cred, dir uint64, name string, ino uint64, da cachedAttr, l *heldLease, now time.Time) (why int) {
	if l.expires.Sub(now) < wbMinLease || len(f.wb.mu.unlinks) >= wbMaxUnlinks || f.wb.mu.creates[ino] != nil {
		return behindNo
	}
	// The victim must be known not to be a directory, and its owner for
	// the sticky bit: its attributes cached under its own bucket's lease.
	va, ok := f.cache.attrs[ino]
	if ok && va.attr.IsDir() {
		return behindNo
	}
	if vl := f.liveLeaseLocked(namespace.Ino(ino).Bucket(), now); !ok || vl == nil || va.lease != vl.gen {
		return behindName
	}
	// The island's unlink checks (meta.removeOnce), on what the cache
	// knows.
	if !metawire.MayAccess(&da.attr, &cred, 3) || metawire.StickyDenies(&da.attr, &cred, va.attr.UID) {
		return behindNo
	}
	key := dentryKey{dir, name}
	if f.wb.mu.unlinks[key] != nil {
		return behindNo // cannot be: the name is missing once kept back
	}
	f.wb.mu.nextSeq++
	f.wb.mu.unlinks[key] = &pendingUnlink{req: metawire.NameReq{Cred: cred, Dir: dir, Name: name}, victim: ino, seq: f.wb.mu.nextSeq, at: now}
	f.wb.mu.unlinkDirs[dir]++
	f.wb.mu.unlinkInos[ino]++
	f.wb.mu.unlinksKept++
	f.armFlushLocked(now, dir, false)
	f.removedHereLocked(now, dir, name, ino, da, l)
	return behindOK
}

// removedHereLocked updates the cache for the removal of dir/name (which
// led to ino) answered here under the lease l (removeBehind): the name is
// known missing, the directory's times are now, and ino's attributes are
// dropped (its link count and ctime change; another name may still lead
// to it). f.cache held; da is dir's cached attributes.
func (f *FS) removedHereLocked(now time.Time, dir uint64, name string, ino uint64, da cachedAttr, l *heldLease) {
	t := now.UnixNano()
	da.attr.Mtime, da.attr.Ctime = t, t
	f.touchLocked(now, dir, ino)
	f.cache.attrs[dir] = da
	delete(f.cache.attrs, ino)
	f.dropBlocksLocked(ino)
	f.cache.dentry[dentryKey{dir, name}] = cachedDentry{0, time.Time{}, l.gen}
	f.namesChangedLocked(dir)
}

// unlinkBehind is removeBehind, after fresh reads of what it lacked (the
// directory's attributes, once per directory; the name):
// one read costs its island less than the unlink, and the caller waits
// for a read instead of a consensus round. It reports whether the unlink
// was answered here.
func (f *FS) unlinkBehind(ctx context.Context, cred metawire.Cred, dir uint64, name string) bool {
	last := -1
	for range 3 {
		why := f.removeBehind(cred, dir, name)
		if why == last {
			return false // the read did not help
		}
		last = why
		switch why {
		case behindOK:
			return true
		case behindDirAttr:
			if _, err := f.GetAttrFresh(ctx, metawire.Root, dir); err != nil {
				return false
			}
		case behindName:
			// Not a reason to send what is kept back: the answer is of
			// this name, which nothing kept back changes (it would be
			// known missing), and of its inode, cached only if nothing
			// kept back changes it (keptBackLocked).
			if _, err := f.lookupIsland(context.WithValue(ctx, renewalKey{}, true), cred, dir, name); err != nil {
				return false // the unlink says why
			}
		default:
			return false
		}
	}
	return false
}

// takeUnlinksLocked removes and returns the kept-back unlinks in the
// directories of buckets (nil: all), in the order they were kept back
// (f.wb.mu held). They stay counted in unlinkDirs and unlinkInos until
// answered (unlinkDone).
func (f *FS) takeUnlinksLocked(buckets []uint32) []*pendingUnlink {
	var batch []*pendingUnlink
	for k, p := range f.wb.mu.unlinks {
		if buckets == nil || slices.Contains(buckets, namespace.Ino(k.dir).Bucket()) {
			batch = append(batch, p)
			delete(f.wb.mu.unlinks, k)
		}
	}
	sort.Slice(batch, func(i, j int) bool { return batch[i].seq < batch[j].seq })
	return batch
}

// wbUnlinkMany is how many kept-back unlinks of one directory go in one
// request (metawire.OpUnlinkMany).
const wbUnlinkMany = 256

// sendUnlinks sends kept-back unlinks, up to wbParallel requests at
// once: they are of different names and do not depend on each other.
// Those of one directory by the same caller go together in requests of
// up to wbUnlinkMany (the island removes them in one change, where one
// request each would take the directory's lock one after another); a
// request refused as a whole is sent again name by name, so each name
// gets its own answer.
func (f *FS) sendUnlinks(ctx context.Context, batch []*pendingUnlink) {
	inParallel(groupUnlinks(batch, !f.noUnlinkMany.Load()), func(g []*pendingUnlink) {
		if len(g) > 1 {
			req := metawire.UnlinkManyReq{Cred: g[0].req.Cred, Dir: g[0].req.Dir, Names: make([]string, len(g))}
			keys := make([]uint64, 0, len(g)+1)
			keys = append(keys, req.Dir)
			for k, p := range g {
				req.Names[k] = p.req.Name
				keys = append(keys, p.victim)
			}
			ch := f.beginChange(ctx, keys...)
			err := f.call(ctx, req.Dir, metawire.OpUnlinkMany, &req, nil)
			f.endChange(ch)
			if err == nil {
				for _, p := range g {
					f.unlinkDone(p, nil)
				}
				return
			}
			if errors.Is(err, metawire.ErrBadRequest) {
				f.noUnlinkMany.Store(true) // an island from before OpUnlinkMany
			}
			f.log.Debug("client: kept-back unlinks sent together were refused; sending them one by one",
				"dir", fmt.Sprintf("%x", req.Dir), "names", len(g), "err", err)
		}
		for _, p := range g {
			ch := f.beginChange(ctx, p.req.Dir, p.victim)
			err := f.call(ctx, p.req.Dir, metawire.OpUnlink, &p.req, nil)
			f.endChange(ch)
			f.unlinkDone(p, err)
		}
	})
}

// groupUnlinks splits batch into requests: with together, the unlinks
// of one directory by one caller (in order) in groups of up to
// wbUnlinkMany; otherwise one each.
func groupUnlinks(batch []*pendingUnlink, together bool) [][]*pendingUnlink {
	var out [][]*pendingUnlink
	if !together {
		for _, p := range batch {
			out = append(out, []*pendingUnlink{p})
		}
		return out
	}
	type key struct {
		dir  uint64
		cred string
	}
	at := map[key]int{} // the group of key still taking unlinks
	for _, p := range batch {
		k := key{p.req.Dir, fmt.Sprint(p.req.Cred)}
		if i, ok := at[k]; ok && len(out[i]) < wbUnlinkMany {
			out[i] = append(out[i], p)
			continue
		}
		at[k] = len(out)
		out = append(out, []*pendingUnlink{p})
	}
	return out
}

// unlinkDone accounts for a kept-back unlink sent with outcome err. A
// failure is kept for the next Fsync, SyncDir or SyncLazy, and the name
// is forgotten here and in the kernel (it was told the name is gone).
func (f *FS) unlinkDone(p *pendingUnlink, err error) {
	f.wb.mu.Lock()
	f.wb.mu.inflight--
	if f.wb.mu.unlinkInos[p.victim]--; f.wb.mu.unlinkInos[p.victim] <= 0 {
		delete(f.wb.mu.unlinkInos, p.victim)
	}
	if f.wb.mu.unlinkDirs[p.req.Dir]--; f.wb.mu.unlinkDirs[p.req.Dir] <= 0 {
		delete(f.wb.mu.unlinkDirs, p.req.Dir)
	}
	if err != nil {
		f.wb.mu.unlinksFailed++
		if f.wb.mu.err == nil {
			f.wb.mu.err = fmt.Errorf("client: unlink %q kept back: %w", p.req.Name, err)
		}
	} else {
		f.wb.mu.unlinksSent++
	}
	f.wb.mu.Unlock()
	if err != nil {
		f.log.Warn("client: a kept-back unlink failed", "dir", fmt.Sprintf("%x", p.req.Dir), "name", p.req.Name, "err", err)
		f.invalidateDentry(p.req.Dir, p.req.Name)
		f.Invalidate(p.victim)
		f.forgetKernelBucket(p.req.Dir)
	}
}

// forgetKernelBucket makes the mount drop its copies of dir's bucket
// (the kernel holds what this FS told it about a change that then
// failed); not from the caller's goroutine, which may be serving a
// request on that directory.
func (f *FS) forgetKernelBucket(dir uint64) {
	f.cache.Lock()
	fn := f.cache.onBreak
	f.cache.Unlock()
	if fn == nil {
		return
	}
	f.wb.async.Add(1)
	go func() {
		defer f.wb.async.Done()
		fn([]uint32{namespace.Ino(dir).Bucket()})
	}()
}

// UnlinksBehind are the counts of kept-back unlinks: kept (answered
// without a request), sent, and failed (sent and refused).
func (f *FS) UnlinksBehind() (kept, sent, failed uint64) {
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	return f.wb.mu.unlinksKept, f.wb.mu.unlinksSent, f.wb.mu.unlinksFailed
}
