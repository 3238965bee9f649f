package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// Creates kept back (see "Write-behind" in the package doc): while this
// FS holds a directory's bucket exclusively and knows the name is
// missing, a create of a regular file there is answered here, with an
// inode id reserved from the island beforehand (OpAllocIno with a
// Count), and sent later as one request that also carries what the file
// got meanwhile: its data once flushed while small enough to be inline
// (Flush hands it over, SendCreate sends it: close(2) in the mount), and
// its kept-back attribute changes (CreateReq.Set). `tar x` then costs one
// island request per small file instead of a create, a commit and a
// setattr.
//
// Nobody else can tell: another session's request on the bucket recalls
// the lease, and the break is acknowledged only after the creates are
// sent; every other request of this FS sends them first.

// pendingCreate is a create answered here and not yet sent.
type pendingCreate struct {
	req  metawire.CreateReq // Ino set; Set and Data gather what came after
	attr metawire.Attr      // the file as its island will make it
	seq  uint64             // creation order
	at   time.Time          // when it was answered
}

// inoRun is a run of inode ids reserved in one bucket: next..end.
type inoRun struct {
	next, end uint32
	size      uint32 // the last reservation's size (doubles up to maxInoRun)
}

const (
	minInoRun = 32
	maxInoRun = 1024
)

// createBehind answers a create of a regular file here when it may be
// kept back (see above); ok false: send it now.
func (f *FS) createBehind(ctx context.Context, req metawire.CreateReq) (metawire.CreateResp, bool) {
	if !f.wb.on.Load() || len(req.Data) > 0 || req.Ino != 0 || req.Mode&metawire.ModeType != metawire.ModeFile ||
		namespace.ValidName(req.Name) != nil {
		return metawire.CreateResp{}, false
	}
	bucket := namespace.Ino(req.Dir).Bucket()
	// Parallel creates may use up a run before this one gets an id.
	for attempt := 0; attempt < 4; attempt++ {
		resp, why := f.createBehindOnce(req, bucket)
		switch {
		case why == behindOK:
			return resp, true
		case why == behindNoIDs && f.reserveInos(ctx, req.Dir, bucket):
		case why == behindDirAttr && attempt == 0:
			// The directory's attributes were cached before its lease
			// (a directory just made, say): read them under it, once.
			if _, err := f.GetAttrFresh(ctx, metawire.Root, req.Dir); err != nil {
				return metawire.CreateResp{}, false
			}
		default:
			return metawire.CreateResp{}, false
		}
	}
	return metawire.CreateResp{}, false
}

// Why createBehindOnce did not answer a create (removeBehind an unlink).
const (
	behindOK      = iota
	behindNo      // it must be sent
	behindNoIDs   // no inode id reserved in the bucket
	behindDirAttr // the directory's attributes are not cached under the lease
	behindName    // the name, or the attributes of its inode, are not cached under a lease
)

// createBehindOnce is createBehind with what it needs in hand; why says
// what is missing (behindOK: answered).
func (f *FS) createBehindOnce(req metawire.CreateReq, bucket uint32) (_ metawire.CreateResp, why int) {
	now := time.Now()
	f.cache.Lock()
	defer f.cache.Unlock()
	l := f.liveLeaseLocked(bucket, now)
	if l == nil || !l.exclusive || l.expires.Sub(now) < wbMinLease {
		if l != nil && l.exclusive {
			f.wb.shortLease.Add(1)
		}
		return metawire.CreateResp{}, behindNo
	}
	// The name must be known missing under this lease.
	if d, found := f.cache.dentry[dentryKey{req.Dir, req.Name}]; found {
		if d.ino != 0 || d.lease != l.gen {
			return metawire.CreateResp{}, behindNo
		}
	} else if !l.complete[req.Dir] {
		return metawire.CreateResp{}, behindNo
	}
	da, found := f.cache.attrs[req.Dir]
	if !found || da.lease != l.gen {
		return metawire.CreateResp{}, behindDirAttr
	}
	if !da.attr.IsDir() || !metawire.MayAccess(&da.attr, &req.Cred, 3) {
		return metawire.CreateResp{}, behindNo // the island answers EACCES
	}
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	run := f.wb.mu.inos[bucket]
	if run == nil || run.next > run.end || run.next == 0 {
		return metawire.CreateResp{}, behindNoIDs
	}
	ino := namespace.MakeIno(bucket, run.next)
	run.next++

	// The island's create (meta.createOnce), done here.
	c, dir := &req.Cred, da.attr
	gid := metawire.NewGID(dir.Mode, dir.GID, c)
	perm := metawire.NewFilePerm(req.Mode&metawire.ModePerm, dir.Mode, gid, c)
	bs := uint32(layout.DefaultBlockSize)
	if dir.Policy != "" {
		if p, err := layout.Parse(dir.Policy); err == nil {
			bs = uint32(p.BlockSize)
		}
	}
	t := now.UnixNano()
	a := metawire.Attr{Ino: uint64(ino), Gen: 1, Mode: metawire.ModeFile | perm, Nlink: 1, UID: c.UID, GID: gid,
		Atime: t, Mtime: t, Ctime: t, Version: 1, BlockSize: bs, Policy: dir.Policy, Inline: true}
	r := req
	r.Ino = uint64(ino)
	// The times this answer gives are the file's: the island takes
	// them rather than its clock when the create is sent.
	r.Set = metawire.SetAttrReq{Valid: metawire.SetAtime | metawire.SetMtime | metawire.SetCtime, Atime: t, Mtime: t, Ctime: t}
	if r.Exclusive {
		r.Verf = rand.Uint64() | 1 // a retry is answered with this file (see create)
	}
	f.wb.mu.nextSeq++
	f.wb.mu.creates[uint64(ino)] = &pendingCreate{req: r, attr: a, seq: f.wb.mu.nextSeq, at: now}
	f.wb.mu.createDirs[req.Dir]++
	f.wb.mu.createsKept++
	f.armFlushLocked(now, uint64(ino), true)

	dir.Mtime, dir.Ctime = t, t
	f.touchLocked(now, req.Dir, uint64(ino))
	f.cache.attrs[req.Dir] = cachedAttr{dir, now.Add(f.cfg.AttrTTL), l.gen}
	f.cache.attrs[uint64(ino)] = cachedAttr{a, now.Add(f.cfg.AttrTTL), l.gen}
	f.cache.dentry[dentryKey{req.Dir, req.Name}] = cachedDentry{uint64(ino), now.Add(f.cfg.AttrTTL), l.gen}
	f.namesChangedLocked(req.Dir)
	return metawire.CreateResp{Attr: a, DirAttr: dir}, behindOK
}

// touchLocked records an own change of keys made here, so that no answer
// of a read sent before it is cached under a lease (see cacheMark).
func (f *FS) touchLocked(now time.Time, keys ...uint64) {
	f.cache.seq++
	for _, k := range keys {
		t := f.cache.touched[k]
		f.cache.touched[k] = touch{seq: f.cache.seq, inflight: t.inflight, at: now}
	}
}

// reserveInos reserves a run of inode ids in bucket (the bucket of dir)
// for createBehind. It reports success.
func (f *FS) reserveInos(ctx context.Context, dir uint64, bucket uint32) bool {
	f.wb.mu.Lock()
	n := uint32(minInoRun)
	if run := f.wb.mu.inos[bucket]; run != nil {
		n = min(2*run.size, maxInoRun)
	}
	f.wb.mu.Unlock()
	var resp metawire.AllocInoResp
	if err := f.call(ctx, dir, metawire.OpAllocIno, &metawire.AllocInoReq{Bucket: bucket, Count: n}, &resp); err != nil {
		f.log.Debug("client: reserving inode ids", "bucket", fmt.Sprintf("%08x", bucket), "err", err)
		return false
	}
	first := namespace.Ino(resp.Ino)
	if first.Bucket() != bucket || !first.Valid() || uint64(first.Seq())+uint64(n)-1 > uint64(^uint32(0)) {
		return false
	}
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	if len(f.wb.mu.inos) >= 4096 { // buckets not written lately
		clear(f.wb.mu.inos)
	}
	f.wb.mu.inos[bucket] = &inoRun{next: first.Seq(), end: first.Seq() + n - 1, size: n}
	return true
}

// armFlushLocked makes sure the timer runs by the time the change just
// kept back at now, of ino, is due (dueOfLocked); the timer itself
// (flushDue) looks at everything. f.cache and f.wb.mu held.
func (f *FS) armFlushLocked(now time.Time, ino uint64, create bool) {
	keep := wbMaxDelay
	if create {
		keep = f.keepCreateLocked()
	}
	due := f.dueOfLocked(now, now.Add(keep), ino)
	if f.wb.mu.timer != nil && !due.Before(f.wb.mu.deadline) {
		return
	}
	if f.wb.mu.timer != nil {
		f.wb.mu.timer.Stop()
	}
	f.wb.mu.deadline = due
	f.wb.mu.timer = time.AfterFunc(max(due.Sub(now), 0), f.flushDue)
}

// keepCreateLocked is how long a create may stay kept back (f.wb.mu held).
func (f *FS) keepCreateLocked() time.Duration {
	if f.wb.mu.preborn > 0 {
		return f.wb.mu.preborn
	}
	return wbMaxDelay
}

// dueOfLocked is when a change of ino that could wait until t must be
// sent: wbMinLease/2 before its lease could end if that is earlier, at
// once if the lease ended or is no longer exclusive (f.cache held).
func (f *FS) dueOfLocked(now, t time.Time, ino uint64) time.Time {
	l := f.cache.leases[namespace.Ino(ino).Bucket()]
	if l == nil || !l.exclusive {
		return now
	}
	if end := l.expires.Add(-wbMinLease / 2); end.Before(t) {
		return end
	}
	return t
}

// dueLocked is when the first thing kept back must be sent: an attribute
// change or unlink wbMaxDelay after it was kept, a create wbMaxDelay after it was
// answered (SetPreborn: that long), each bounded by its lease
// (dueOfLocked). any is false when nothing is kept back. f.cache and
// f.wb.mu held.
func (f *FS) dueLocked(now time.Time) (due time.Time, any bool) {
	consider := func(t time.Time, ino uint64) {
		if t = f.dueOfLocked(now, t, ino); !any || t.Before(due) {
			due, any = t, true
		}
	}
	for ino, p := range f.wb.mu.m {
		consider(p.at.Add(wbMaxDelay), ino)
	}
	keep := f.keepCreateLocked()
	for ino, p := range f.wb.mu.creates {
		consider(p.at.Add(keep), ino)
	}
	for _, p := range f.wb.mu.unlinks {
		consider(p.at.Add(wbMaxDelay), p.req.Dir)
	}
	return due, any
}

// flushDue is the timer's: it sends what is kept back once something is
// due, and otherwise sets itself for then (a lease renewed meanwhile
// moves the end of the window).
func (f *FS) flushDue() {
	now := time.Now()
	f.cache.Lock()
	f.wb.mu.Lock()
	f.wb.mu.timer = nil
	due, any := f.dueLocked(now)
	if any && due.After(now.Add(5*time.Millisecond)) {
		f.wb.mu.deadline = due
		f.wb.mu.timer = time.AfterFunc(due.Sub(now), f.flushDue)
		any = false
	}
	f.wb.mu.Unlock()
	f.cache.Unlock()
	if !any {
		return
	}
	// Not the pollers' context: Close waits for this flush instead of
	// cutting it off.
	ctx, cancel := context.WithTimeout(context.Background(), 2*f.cfg.IslandWait)
	defer cancel()
	f.flushKept(ctx, nil)
}

// SetPreborn keeps the creates of files this FS closed back for up to d
// (Sigma's preborn caching; the mount's --write-cache preborn): a file
// created and removed within it never reaches an island (removeBehind).
// The lease still bounds it, and fsync, another client's access and
// unmount still send it first. 0: creates wait only for their file's
// close (SendCreate) or wbMaxDelay.
func (f *FS) SetPreborn(d time.Duration) {
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	f.wb.mu.preborn = d
}

// Preborn returns SetPreborn's window (0: off).
func (f *FS) Preborn() time.Duration {
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	return f.wb.mu.preborn
}

// removeBehind answers the unlink of dir/name here when the name is a
// file whose create is kept back: the create is dropped and nothing is
// ever sent; or else keeps the unlink back when it may
// (unlinkBehindLocked). why says what is missing (behindOK: answered;
// behindDirAttr, behindName: a fresh read of the directory's attributes
// or of the name may let it). The caller (the mount) makes sure no
// descriptor has the file open.
func (f *FS) removeBehind(cred metawire.Cred, dir uint64, name string) (why int) {
	if !f.wb.on.Load() {
		return behindNo
	}
	bucket := namespace.Ino(dir).Bucket()
	now := time.Now()
	f.cache.Lock()
	defer f.cache.Unlock()
	l := f.liveLeaseLocked(bucket, now)
	if l == nil || !l.exclusive {
		return behindNo
	}
	d, found := f.cache.dentry[dentryKey{dir, name}]
	da, haveDir := f.cache.attrs[dir]
	switch {
	case found && d.ino == 0 && d.lease == l.gen:
		return behindNo // known missing: the island answers ENOENT
	case !haveDir || da.lease != l.gen:
		return behindDirAttr
	case !found || d.ino == 0 || d.lease != l.gen:
		return behindName
	}
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	p := f.wb.mu.creates[d.ino]
	if p == nil || p.req.Dir != dir || p.req.Name != name {
		return f.unlinkBehindLocked(cred, dir, name, d.ino, da, l, now)
	}
	// The island's unlink checks, on what the cache knows (the
	// island's own rules: metawire.MayAccess, and the sticky bit).
	if !metawire.MayAccess(&da.attr, &cred, 3) || metawire.StickyDenies(&da.attr, &cred, p.attr.UID) {
		return behindNo
	}
	f.dropCreateLocked(p)
	f.wb.mu.cancelled++
	f.removedHereLocked(now, dir, name, d.ino, da, l)
	return behindOK
}

// CreatesCancelled returns how many kept-back creates were removed before
// they were sent, costing no island request at all.
func (f *FS) CreatesCancelled() uint64 {
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	return f.wb.mu.cancelled
}

// CreatesShortLease returns how many creates were sent at once, though
// their directory's lease was exclusive, because it had less than
// wbMinLease left: its renewal (by polls) was late.
func (f *FS) CreatesShortLease() uint64 { return f.wb.shortLease.Load() }

// CreatePending reports whether ino's create is kept back.
func (f *FS) CreatePending(ino uint64) bool {
	if !f.wb.on.Load() {
		return false
	}
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	return f.wb.mu.creates[ino] != nil
}

// absorbData hands an inline file's flushed contents, written by writer,
// to its kept-back create, which will carry them (CreateReq.Data): the file's attributes
// after that, and ok false when its create was sent already (commit
// instead).
func (f *FS) absorbData(ino uint64, writer metawire.Cred, data []byte, now time.Time) (metawire.Attr, bool) {
	if !f.wb.on.Load() || len(data) > f.cfg.InlineMax {
		return metawire.Attr{}, false
	}
	f.cache.Lock()
	defer f.cache.Unlock()
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	p := f.wb.mu.creates[ino]
	if p == nil {
		return metawire.Attr{}, false
	}
	p.req.Data = slices.Clone(data)
	// Written now: a kept-back utimes before this write no longer holds.
	t := now.UnixNano()
	p.req.Set.Mtime, p.req.Set.Ctime = t, t
	if writer.UID != 0 && metawire.KillSetID(p.attr.Mode) != p.attr.Mode {
		// A write by anyone but root clears set-id bits, as the
		// island's commit would.
		p.attr.Mode = metawire.KillSetID(p.attr.Mode)
		p.req.Set.Valid |= metawire.SetMode
		p.req.Set.Mode = p.attr.Mode & metawire.ModePerm
	}
	p.attr.Size, p.attr.Blocks = uint64(len(data)), (uint64(len(data))+511)/512
	p.attr.Mtime, p.attr.Ctime = t, t
	if c, ok := f.cache.attrs[ino]; ok {
		c.attr = p.attr
		f.cache.attrs[ino] = c
	}
	return p.attr, true
}

// SendCreate sends ino's create if it is kept back (close(2) in the
// mount: what was closed is on its island, as without write-behind), and
// returns its failure. It sends that create alone, so parallel writers'
// closes do not wait for each other; a flush of everything waits for it.
func (f *FS) SendCreate(ctx context.Context, ino uint64) error {
	return f.sendAlone(ctx, ino, false)
}

// sendCreateSoon starts sending ino's kept-back create in the background:
// the file left inline, so its commit will need the create, which is then
// on its way while the data streams to the storage servers.
func (f *FS) sendCreateSoon(ino uint64) {
	if !f.CreatePending(ino) || f.closing.Load() {
		return
	}
	f.wb.async.Add(1)
	go func() {
		defer f.wb.async.Done()
		_ = f.sendAlone(context.Background(), ino, true) // SendCreate reports it
	}()
}

// createUnsettled reports whether ino's create is kept back or being sent
// alone.
func (f *FS) createUnsettled(ino uint64) bool {
	if !f.wb.on.Load() {
		return false
	}
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	return f.wb.mu.creates[ino] != nil || f.wb.mu.alone[ino] != nil
}

// sendAlone sends ino's kept-back create by itself (SendCreate); keepErr
// keeps its failure for the next SendCreate of ino.
func (f *FS) sendAlone(ctx context.Context, ino uint64, keepErr bool) error {
	if !f.wb.on.Load() {
		return nil
	}
	f.wb.sending.RLock()
	f.wb.mu.Lock()
	p := f.wb.mu.creates[ino]
	if p == nil {
		done := f.wb.mu.alone[ino]
		f.wb.mu.Unlock()
		f.wb.sending.RUnlock()
		if done != nil {
			<-done // sent alone (sendCreateSoon): its answer comes first
		} else {
			// A flush may be sending it: close returns after it did.
			f.wb.flush.Lock()
			f.wb.flush.Unlock() //nolint:staticcheck // waiting for the flush under way
		}
		f.wb.mu.Lock()
		defer f.wb.mu.Unlock()
		err := f.wb.mu.createErrs[ino]
		delete(f.wb.mu.createErrs, ino)
		if err != nil && errors.Is(f.wb.mu.err, err) {
			f.wb.mu.err = nil // reported here: not again by SyncLazy
		}
		return err
	}
	if f.wb.mu.m[p.req.Dir] != nil || f.wb.mu.unlinkDirs[p.req.Dir] > 0 {
		// A change of its directory is kept back or being sent, which
		// the create may need first (a chmod that lets the creator
		// write there, the unlink of an earlier file of that name).
		f.wb.mu.Unlock()
		f.wb.sending.RUnlock()
		f.flushKept(ctx, nil)
		return f.sendAlone(ctx, ino, keepErr)
	}
	f.dropCreateLocked(p)
	f.wb.mu.inflight++
	done := make(chan struct{})
	f.wb.mu.alone[ino] = done
	f.wb.mu.Unlock()
	defer f.wb.sending.RUnlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*f.cfg.IslandWait)
	defer cancel()
	err := f.sendCreate(context.WithValue(ctx, flushingKey{}, true), p)
	f.createDone(p, err, keepErr)
	f.wb.mu.Lock()
	delete(f.wb.mu.alone, ino)
	f.wb.mu.Unlock()
	close(done)
	return err
}

// createDone accounts for a kept-back create sent with outcome err;
// keepErr keeps a failure to report later (by SendCreate of the file, or
// else the next Fsync, SyncDir or SyncLazy); otherwise the caller
// returns it.
func (f *FS) createDone(p *pendingCreate, err error, keepErr bool) {
	f.wb.mu.Lock()
	f.wb.mu.inflight--
	if err != nil {
		f.wb.mu.createsFailed++
		if keepErr && len(f.wb.mu.createErrs) < 4096 {
			f.wb.mu.createErrs[p.req.Ino] = err
		}
		if keepErr && f.wb.mu.err == nil {
			f.wb.mu.err = fmt.Errorf("client: create %q kept back: %w", p.req.Name, err)
		}
	} else {
		f.wb.mu.createsSent++
	}
	f.wb.mu.Unlock()
	if err != nil {
		f.log.Warn("client: a kept-back create failed", "dir", fmt.Sprintf("%x", p.req.Dir), "name", p.req.Name, "err", err)
		f.Invalidate(p.req.Ino)
		// The kernel holds the name it was told exists.
		f.forgetKernelBucket(p.req.Dir)
	}
}

// dropCreateLocked removes p from the creates kept back (f.wb.mu held).
func (f *FS) dropCreateLocked(p *pendingCreate) {
	delete(f.wb.mu.creates, p.req.Ino)
	if f.wb.mu.createDirs[p.req.Dir]--; f.wb.mu.createDirs[p.req.Dir] <= 0 {
		delete(f.wb.mu.createDirs, p.req.Dir)
	}
}

// takeCreatesLocked removes and returns the kept-back creates of buckets
// (nil: all), in creation order (f.wb.mu held).
func (f *FS) takeCreatesLocked(buckets []uint32) []*pendingCreate {
	var batch []*pendingCreate
	for ino, p := range f.wb.mu.creates {
		if buckets == nil || slices.Contains(buckets, namespace.Ino(ino).Bucket()) {
			batch = append(batch, p)
			f.dropCreateLocked(p)
		}
	}
	sort.Slice(batch, func(i, j int) bool { return batch[i].seq < batch[j].seq })
	return batch
}

// sendCreate sends one kept-back create (flushKept) and reports its
// failure.
func (f *FS) sendCreate(ctx context.Context, p *pendingCreate) error {
	req := p.req
	req.Lazy = !req.Exclusive && f.lazyCreate.Load() && (len(req.Data) == 0 || f.lazyClose.Load())
	var resp metawire.CreateResp
	mark := f.lazyMark()
	ch := f.beginChange(ctx, req.Dir, req.Ino)
	defer f.endChange(ch)
	err := f.call(ctx, req.Dir, metawire.OpCreate, &req, &resp)
	if err == nil && resp.Attr.Ino != req.Ino {
		// The name was made by someone else meanwhile: this FS's lease
		// did not hold (its island restarted, say).
		err = fmt.Errorf("client: kept-back create of %q in %x: the name is another file's now: %w", req.Name, req.Dir, metawire.ErrExists)
	}
	if err != nil {
		f.invalidateDentry(req.Dir, req.Name)
		return err
	}
	switch {
	case req.Lazy:
		f.addLazy(ctx, req.Ino, resp.Boot)
	case resp.Boot != 0:
		f.settleIsland(f.islandOf(req.Dir), mark, resp.Boot, nil, false)
	}
	// The name is cached already (createBehind), under the lease that
	// kept it back; the attributes are the island's now.
	f.cacheSentAttr(resp.Attr, ch.mark)
	f.cacheSentAttr(resp.DirAttr, ch.mark)
	f.cacheInline(resp.Attr, req.Data)
	return nil
}

// cacheSentAttr caches the attributes a kept-back create was answered
// with, unless they cannot carry the lease (other own changes of the key
// ran beside it) while what is cached does: that is this FS's own view
// under the lease, and a leased directory stays usable for creates kept
// back (createBehindOnce wants its attributes leased).
func (f *FS) cacheSentAttr(a metawire.Attr, mark cacheMark) {
	f.cache.Lock()
	defer f.cache.Unlock()
	f.cacheAttrLocked(a, mark, true)
}

// CreatesBehind are the counts of kept-back creates: kept (answered
// without a request), sent, and failed (sent and refused).
func (f *FS) CreatesBehind() (kept, sent, failed uint64) {
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	return f.wb.mu.createsKept, f.wb.mu.createsSent, f.wb.mu.createsFailed
}
