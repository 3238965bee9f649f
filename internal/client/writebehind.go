package client

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// Metadata write-behind (see "Write-behind" in the package doc): while
// this FS holds a bucket's lease exclusively, an attribute change of one
// of its inodes (chown, chmod, utimes: what `tar x` sends three of per
// file) is answered at once from the cached attributes and kept back;
// the changes of one inode merge into one setattr, sent before any other
// request of this FS, before a break of the lease is acknowledged, before
// the lease could end, and by SyncLazy.

// wbMaxDelay bounds how long a change is kept back.
const wbMaxDelay = time.Second

// wbMinLease is the lease left that a change needs to be kept back: it is
// sent wbMinLease/2 before the lease ends at the latest.
const wbMinLease = time.Second

// wbSettable are the attribute changes that may be kept back.
const wbSettable = metawire.SetMode | metawire.SetUID | metawire.SetGID | metawire.SetAtime |
	metawire.SetMtime | metawire.SetAtimeNow | metawire.SetMtimeNow | metawire.SetKillSUID

// pendingAttr is one inode's kept-back change.
type pendingAttr struct {
	req  metawire.SetAttrReq // the merged change: final values of what changed
	attr metawire.Attr       // the attributes once it is applied
	at   time.Time           // when it was first kept back
}

// writeBehind holds the kept-back changes.
type writeBehind struct {
	on    atomic.Bool
	flush sync.Mutex // one flush at a time, so an inode's changes stay in order
	// sending is held shared by a create sent alone (SendCreate); a
	// flush takes it exclusively to wait for those.
	sending sync.RWMutex
	async   sync.WaitGroup // flushes started beside a change (flushBeforeChange)
	// shortLease counts creates sent at once because the exclusive
	// lease of their directory had less than wbMinLease left (its
	// renewal by polls was late, as on a loaded machine).
	shortLease atomic.Uint64
	mu         struct {
		lockcheck.Mutex
		m        map[uint64]*pendingAttr
		deadline time.Time
		timer    *time.Timer
		inflight int   // changes taken by a flush and not yet answered
		err      error // a flush that failed, reported by the next SyncLazy
		kept     uint64
		sent     uint64
		failed   uint64
		// Creates kept back (createbehind.go).
		creates       map[uint64]*pendingCreate // by ino
		createDirs    map[uint64]int            // directories of creates kept back: how many
		alone         map[uint64]chan struct{}  // creates being sent alone (sendAlone): closed when answered
		nextSeq       uint64
		inos          map[uint32]*inoRun // ids reserved, by bucket
		createErrs    map[uint64]error   // sent and refused, for SendCreate
		createsKept   uint64
		createsSent   uint64
		createsFailed uint64
		cancelled     uint64        // creates kept back and then removed: never sent
		preborn       time.Duration // SetPreborn: how long a closed file's create may stay
		// Unlinks kept back (unlinkbehind.go).
		unlinks       map[dentryKey]*pendingUnlink
		unlinkDirs    map[uint64]int // directories of unlinks kept back or being sent: how many
		unlinkInos    map[uint64]int // their victims: how many
		unlinksKept   uint64
		unlinksSent   uint64
		unlinksFailed uint64
	}
}

type flushingKey struct{}

// renewalKey marks a read that does not send what is kept back first: a
// lease renewal (hitLocked), an unlink's lookup of its name
// (unlinkBehind). What they answer is cached only where nothing kept
// back changes it.
type renewalKey struct{}

// keptIn reports whether ino has a change kept back or is a directory
// with creates kept back.
func (f *FS) keptIn(ino uint64) bool {
	if !f.wb.on.Load() {
		return false
	}
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	return f.keptInLocked(ino)
}

// keptInLocked is keptIn with f.wb.mu held.
func (f *FS) keptInLocked(ino uint64) bool {
	return f.wb.mu.m[ino] != nil || f.wb.mu.creates[ino] != nil || f.wb.mu.createDirs[ino] > 0 ||
		f.wb.mu.unlinkDirs[ino] > 0 || f.wb.mu.unlinkInos[ino] > 0
}

// EnableWriteBehind makes this FS ask for exclusive leases and keep
// attribute changes back under them. It needs EnableLeases.
func (f *FS) EnableWriteBehind() {
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	f.wb.mu.m = map[uint64]*pendingAttr{}
	f.wb.mu.creates = map[uint64]*pendingCreate{}
	f.wb.mu.createDirs = map[uint64]int{}
	f.wb.mu.alone = map[uint64]chan struct{}{}
	f.wb.mu.inos = map[uint32]*inoRun{}
	f.wb.mu.createErrs = map[uint64]error{}
	f.wb.mu.unlinks = map[dentryKey]*pendingUnlink{}
	f.wb.mu.unlinkDirs = map[uint64]int{}
	f.wb.mu.unlinkInos = map[uint64]int{}
	f.wb.on.Store(true)
}

// WriteBehindStats are the counts of kept-back attribute changes: kept
// (answered without a request), sent (merged setattrs that carried
// them) and failed (sent and refused, or never sent).
func (f *FS) WriteBehindStats() (kept, sent, failed uint64) {
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	return f.wb.mu.kept, f.wb.mu.sent, f.wb.mu.failed
}

// keepBack answers req from the cache and keeps it back when it may be:
// ok false means req must be sent now.
func (f *FS) keepBack(req metawire.SetAttrReq) (metawire.Attr, bool) {
	if !f.wb.on.Load() || req.Valid == 0 || req.Valid&^wbSettable != 0 {
		return metawire.Attr{}, false
	}
	bucket := namespace.Ino(req.Ino).Bucket()
	now := time.Now()
	f.cache.Lock()
	defer f.cache.Unlock()
	l := f.liveLeaseLocked(bucket, now)
	if l == nil || !l.exclusive || l.expires.Sub(now) < wbMinLease {
		return metawire.Attr{}, false
	}
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	if f.wb.mu.createDirs[req.Ino] > 0 || f.wb.mu.unlinkDirs[req.Ino] > 0 {
		// Creates or unlinks kept back in this directory were allowed
		// by its attributes as they are: the change goes after them
		// (sent now, flushing them first).
		return metawire.Attr{}, false
	}
	if pc := f.wb.mu.creates[req.Ino]; pc != nil {
		// The file's create is kept back too: the change goes with it.
		if !sameCred(pc.req.Cred, req.Cred) {
			return metawire.Attr{}, false
		}
		next, ok := applyLocally(pc.attr, &req, now)
		if !ok {
			return metawire.Attr{}, false
		}
		mergeSet(&pc.req.Set, &req, pc.attr, next)
		pc.attr = next
		f.wb.mu.kept++
		f.cache.attrs[req.Ino] = cachedAttr{next, now.Add(f.cfg.AttrTTL), l.gen}
		return next, true
	}
	p := f.wb.mu.m[req.Ino]
	var cur metawire.Attr
	if p != nil {
		cur = p.attr
	} else if a, ok := f.cache.attrs[req.Ino]; ok && a.lease == l.gen {
		cur = a.attr
	} else {
		return metawire.Attr{}, false
	}
	next, ok := applyLocally(cur, &req, now)
	if !ok {
		return metawire.Attr{}, false
	}
	if p == nil {
		p = &pendingAttr{req: metawire.SetAttrReq{Cred: req.Cred, Ino: req.Ino}, at: now}
		f.wb.mu.m[req.Ino] = p
	} else if !sameCred(p.req.Cred, req.Cred) {
		return metawire.Attr{}, false
	}
	p.attr = next
	mergeSet(&p.req, &req, cur, next)
	f.wb.mu.kept++
	f.cache.attrs[req.Ino] = cachedAttr{next, now.Add(f.cfg.AttrTTL), l.gen}
	f.armFlushLocked(now, req.Ino, false)
	return next, true
}

// mergeSet folds req, which took an inode's attributes from cur to next,
// into the merged change dst: it sets final values, so a later chmod
// after a chown (which clears set-id bits) sends the mode it computed.
func mergeSet(dst, req *metawire.SetAttrReq, cur, next metawire.Attr) {
	v := req.Valid &^ (metawire.SetKillSUID | metawire.SetAtimeNow | metawire.SetMtimeNow)
	if req.Valid&(metawire.SetUID|metawire.SetGID|metawire.SetKillSUID) != 0 && next.Mode != cur.Mode {
		v |= metawire.SetMode
	}
	if req.Valid&metawire.SetAtimeNow != 0 {
		v |= metawire.SetAtime
	}
	if req.Valid&metawire.SetMtimeNow != 0 {
		v |= metawire.SetMtime
	}
	dst.Valid |= v
	dst.Mode, dst.UID, dst.GID = next.Mode&metawire.ModePerm, next.UID, next.GID
	dst.Atime, dst.Mtime = next.Atime, next.Mtime
	if dst.Valid&metawire.SetCtime != 0 { // a kept-back create's: the time answered
		dst.Ctime = next.Ctime
	}
}

// applyLocally is req applied to a as its island would apply it, for the
// changes whose outcome the client can know: anything by root, and by
// the owner a chmod or new times. ok false: send req instead.
func applyLocally(a metawire.Attr, req *metawire.SetAttrReq, now time.Time) (metawire.Attr, bool) {
	c, v := &req.Cred, req.Valid
	root := c.UID == 0
	if !root && (c.UID != a.UID || v&(metawire.SetUID|metawire.SetGID|metawire.SetKillSUID) != 0) {
		return a, false
	}
	dir := a.IsDir()
	if v&(metawire.SetUID|metawire.SetGID) != 0 {
		if v&metawire.SetUID != 0 {
			a.UID = req.UID
		}
		if v&metawire.SetGID != 0 {
			a.GID = req.GID
		}
		if !dir && v&metawire.SetMode == 0 {
			a.Mode = metawire.KillSetID(a.Mode)
		}
	}
	if v&metawire.SetKillSUID != 0 && !dir && v&metawire.SetMode == 0 {
		a.Mode = metawire.KillSetID(a.Mode)
	}
	if v&metawire.SetMode != 0 {
		mode := req.Mode & metawire.ModePerm
		if !root && !c.InGroup(a.GID) {
			mode &^= metawire.ModeSetGID
		}
		a.Mode = a.Mode&metawire.ModeType | mode
	}
	ns := now.UnixNano()
	switch {
	case v&metawire.SetAtimeNow != 0:
		a.Atime = ns
	case v&metawire.SetAtime != 0:
		a.Atime = req.Atime
	}
	switch {
	case v&metawire.SetMtimeNow != 0:
		a.Mtime = ns
	case v&metawire.SetMtime != 0:
		a.Mtime = req.Mtime
	}
	a.Ctime = ns
	return a, true
}

func sameCred(a, b metawire.Cred) bool {
	return a.UID == b.UID && a.GID == b.GID && slices.Equal(a.Groups, b.Groups)
}

// keptBackLocked reports whether ino has a change kept back (f.cache
// held).
func (f *FS) keptBackLocked(ino uint64) bool {
	if !f.wb.on.Load() {
		return false
	}
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	return f.wb.mu.m[ino] != nil || f.wb.mu.creates[ino] != nil || f.wb.mu.unlinkDirs[ino] > 0 || f.wb.mu.unlinkInos[ino] > 0
}

// keptBack reports whether changes are kept back or being sent (cheap:
// every request asks). A request waits for a flush under way too: it
// must not overtake it.
func (f *FS) keptBack() bool {
	if !f.wb.on.Load() {
		return false
	}
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	return len(f.wb.mu.m) > 0 || len(f.wb.mu.creates) > 0 || len(f.wb.mu.unlinks) > 0 || f.wb.mu.inflight > 0
}

// flushKept sends the kept-back changes of buckets (nil: all), one
// merged setattr per inode, in inode order. A change its island refuses
// is dropped (its inode's cache with it) and reported by the next
// SyncLazy.
func (f *FS) flushKept(ctx context.Context, buckets []uint32) {
	f.flushKeptOpt(ctx, buckets, false)
}

// flushKeptOpt is flushKept; attrsOnly leaves the creates kept back.
func (f *FS) flushKeptOpt(ctx context.Context, buckets []uint32, attrsOnly bool) {
	if !f.wb.on.Load() {
		return
	}
	f.wb.flush.Lock()
	defer f.wb.flush.Unlock()
	// Creates sent alone (SendCreate) are answered before this flush
	// returns, as everything it sends is.
	f.wb.sending.Lock()
	f.wb.sending.Unlock() //nolint:staticcheck // waiting for them
	f.wb.mu.Lock()
	var creates []*pendingCreate
	if !attrsOnly {
		creates = f.takeCreatesLocked(buckets)
	}
	unlinks := f.takeUnlinksLocked(buckets)
	var batch []*pendingAttr
	for ino, p := range f.wb.mu.m {
		if buckets == nil || slices.Contains(buckets, namespace.Ino(ino).Bucket()) {
			batch = append(batch, p)
			delete(f.wb.mu.m, ino)
		}
	}
	if len(f.wb.mu.m) == 0 && len(f.wb.mu.creates) == 0 && len(f.wb.mu.unlinks) == 0 && f.wb.mu.timer != nil {
		f.wb.mu.timer.Stop()
		f.wb.mu.timer = nil
	}
	f.wb.mu.inflight += len(batch) + len(creates) + len(unlinks)
	f.wb.mu.Unlock()
	sort.Slice(batch, func(i, j int) bool { return batch[i].req.Ino < batch[j].req.Ino })
	// The changes were answered already: the request whose turn sent
	// them may be interrupted (its caller killed), they must still go.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*f.cfg.IslandWait)
	defer cancel()
	ctx = context.WithValue(ctx, flushingKey{}, true)
	for _, p := range batch {
		var resp metawire.AttrResp
		ch := f.beginChange(ctx, p.req.Ino)
		err := f.call(ctx, p.req.Ino, metawire.OpSetAttr, &p.req, &resp)
		if err == nil {
			f.cacheAttrAt(resp.Attr, ch.mark)
		}
		f.endChange(ch)
		f.wb.mu.Lock()
		f.wb.mu.inflight--
		if err != nil {
			f.wb.mu.failed++
			if f.wb.mu.err == nil {
				f.wb.mu.err = fmt.Errorf("client: setattr %x kept back: %w", p.req.Ino, err)
			}
		} else {
			f.wb.mu.sent++
		}
		f.wb.mu.Unlock()
		if err != nil {
			f.log.Warn("client: a kept-back attribute change failed", "ino", fmt.Sprintf("%x", p.req.Ino), "err", err)
			f.Invalidate(p.req.Ino)
		}
	}
	// Unlinks after the attribute changes (the kept-back chmod of a
	// directory that let them), before the creates (of a name an unlink
	// freed).
	f.sendUnlinks(ctx, unlinks)
	// Creates after the attribute changes: a create may depend on one
	// (a chmod of its directory that lets the creator write there). No
	// kept-back change is of a file whose create is kept back (it joins
	// the create), and a create sent alone was answered before this
	// flush began (wb.sending). They do not depend on each other (each
	// its own name and inode), so up to wbParallel are in flight: their
	// island commits them in shared rounds instead of one round each.
	inParallel(creates, func(p *pendingCreate) { f.createDone(p, f.sendCreate(ctx, p), true) })
}

// wbParallel is how many kept-back creates (or unlinks) one flush has in
// flight.
const wbParallel = 16

// inParallel calls send for each of items, up to wbParallel at once, and
// returns when all have returned.
func inParallel[T any](items []T, send func(T)) {
	var wg sync.WaitGroup
	next := make(chan T)
	for range min(wbParallel, len(items)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range next {
				send(it)
			}
		}()
	}
	for _, it := range items {
		next <- it
	}
	close(next)
	wg.Wait()
}

// flushBeforeCall sends the kept-back changes before a request of op:
// every request but a lease poll and the flush's own, so no answer an
// island gives this FS predates a change it already answered.
func (f *FS) flushBeforeCall(ctx context.Context, op uint16) {
	// OpAllocIno reserves ids (createBehind) and touches no record.
	if op == metawire.OpLeasePoll || op == metawire.OpAllocIno || ctx.Value(flushingKey{}) != nil || ctx.Value(renewalKey{}) != nil || !f.keptBack() {
		return
	}
	f.flushKept(ctx, nil)
}

// flushBeforeChange sends the kept-back changes before an own change of
// keys. When none of them is of those keys (a create in a directory
// after the chown, chmod and utimes of the previous file, as in tar x)
// the flush runs beside the change instead of before it: the two do not
// touch the same records, and their island can commit them in one round.
// Every other request still waits for that flush (keptBack counts it in
// flight), so only this change overtakes it.
func (f *FS) flushBeforeChange(ctx context.Context, keys []uint64) {
	if ctx.Value(flushingKey{}) != nil || !f.keptBack() {
		return
	}
	if f.keptApart(keys) {
		f.wb.async.Add(1)
		go func() {
			defer f.wb.async.Done()
			// Creates stay: a file's data or attributes may still join
			// its create.
			f.flushKeptOpt(context.WithoutCancel(ctx), nil, true)
		}()
		return
	}
	f.flushKept(ctx, nil)
}

// keptApart reports whether no flush is under way and no kept-back change
// is of keys (none of which stands for unknown inodes).
func (f *FS) keptApart(keys []uint64) bool {
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	if f.wb.mu.inflight > 0 || len(keys) == 0 {
		return false
	}
	for _, k := range keys {
		if k == unknownKey || f.keptInLocked(k) {
			return false
		}
	}
	return true
}

// takeKeptErr returns and clears the error of a failed kept-back change.
func (f *FS) takeKeptErr() error {
	f.wb.mu.Lock()
	defer f.wb.mu.Unlock()
	err := f.wb.mu.err
	f.wb.mu.err = nil
	return err
}
