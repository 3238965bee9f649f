package client

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"sort"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Leases (see "Leases" in the package doc and internal/lease): with
// EnableLeases, lookups, getattrs and readdirs that miss the cache ask for
// a lease on the bucket they read, and what a leased reply carries stays
// valid past AttrTTL until the lease ends or its island breaks it. Every
// cached record carries the generation of the lease it was read under
// (stamp 0: none, AttrTTL only).

// leaseMargin is taken off a lease's term on this side: the island counts
// it from the grant, this client from before it sent the request, so the
// client's lease ends first unless the clocks' rates differ by more.
const leaseMargin = 10 // percent

// pollWait is how long one poll waits at the island for a break while
// this FS holds no lease renewed by polls there; with such leases a poll
// answers within a sixth of their term (renewPolls), since each poll
// renews them as it arrives.
const pollWait = 20 * time.Second

// heldLease is a lease this FS holds on one bucket.
type heldLease struct {
	island  namespace.IslandID
	gen     uint64
	epoch   uint64 // f.cache.epoch when it was acquired: marks taken before it stamp nothing with it
	expires time.Time
	// exclusive: no other session reads the bucket without recalling
	// the lease first, so attribute changes may be kept back
	// (writebehind.go).
	exclusive bool
	term      time.Duration // as granted, less the margin
	// granted is when the request that last granted it was sent, table
	// the island lease table that granted it: polls to that table renew
	// it until granted plus hold (PollResp.HoldMs; 0 until a poll says).
	granted  time.Time
	table    uint64
	hold     time.Duration
	renewing bool // a renewal is on its way (renewLocked)
	// polled: a poll sent after the grant renewed it, so the polls to its
	// island now come often enough to keep it (renewByPoll); until then
	// reads renew it (hitLocked). A poll parked for pollWait before the
	// grant renews nothing in time.
	polled   bool
	complete map[uint64]bool // directories of the bucket whose every name is cached under the lease
	misses   int             // names looked up and not found under the lease
	// listing holds directories listed whole under the lease (pages
	// read in order from cookie 0 to EOF, gathered in partial), in
	// cookie order with "." and "..", without attributes; dropped by
	// this FS's own changes of names in them.
	listing map[uint64][]metawire.Dirent
	partial map[uint64][]metawire.Dirent
}

// cachedReaddir serves a page of dir's listing from the cache: only for
// root (the island checks read permission for everyone else), only from
// a listing held under a live lease, and for plus only when every
// entry's attributes in dir's own bucket are cached too (the others the
// caller fetches, as from an island page without them).
func (f *FS) cachedReaddir(cred metawire.Cred, dir, cookie uint64, max uint32, plus bool) (metawire.ReaddirResp, bool) {
	if cred.UID != 0 {
		return metawire.ReaddirResp{}, false
	}
	bucket := namespace.Ino(dir).Bucket()
	now := time.Now()
	f.cache.Lock()
	defer f.cache.Unlock()
	l := f.liveLeaseLocked(bucket, now)
	if l == nil || l.listing[dir] == nil {
		return metawire.ReaddirResp{}, false
	}
	da, ok := f.cache.attrs[dir]
	if !ok || !f.validLocked(bucket, da.lease, da.expires, now) {
		return metawire.ReaddirResp{}, false
	}
	if max == 0 {
		max = completeDirMax
	}
	resp := metawire.ReaddirResp{DirAttr: da.attr, EOF: true}
	ents := l.listing[dir]
	from := sort.Search(len(ents), func(k int) bool { return ents[k].Cookie > cookie })
	for _, e := range ents[from:] {
		if len(resp.Entries) == int(max) {
			resp.EOF = false
			break
		}
		if plus && e.Name != "." && e.Name != ".." {
			eb := namespace.Ino(e.Ino).Bucket()
			if a, ok := f.cache.attrs[e.Ino]; ok && f.validLocked(eb, a.lease, a.expires, now) {
				e.Attr, e.HasAttr = a.attr, true
			} else if eb == bucket {
				return metawire.ReaddirResp{}, false
			}
		}
		resp.Entries = append(resp.Entries, e)
	}
	f.cache.hits++
	return resp, true
}

// keepListing gathers a page of dir's listing after cookie read with
// marks m: pages that follow on from cookie 0 under one lease
// make the whole listing at EOF.
func (f *FS) keepListing(dir, cookie uint64, m leaseMarks, entries []metawire.Dirent, eof bool) {
	f.cache.Lock()
	defer f.cache.Unlock()
	bucket := namespace.Ino(dir).Bucket()
	l := f.cache.leases[bucket]
	if l == nil || l.gen != m.stamp || f.stampLocked(bucket, dir, m.route, time.Now()) != l.gen {
		return
	}
	keepListingLocked(l, dir, cookie, entries, eof)
}

// keepListingLocked adds a page of dir's listing to lease l (keepListing).
func keepListingLocked(l *heldLease, dir, cookie uint64, entries []metawire.Dirent, eof bool) {
	if l.partial == nil {
		l.partial = map[uint64][]metawire.Dirent{}
	}
	have, ok := l.partial[dir]
	switch {
	case cookie == 0:
		have = nil
	case !ok || len(have) == 0 || have[len(have)-1].Cookie != cookie:
		return // not the page after the last one gathered
	}
	for _, e := range entries {
		have = append(have, metawire.Dirent{Name: e.Name, Ino: e.Ino, Type: e.Type, Cookie: e.Cookie})
	}
	if !eof {
		l.partial[dir] = have
		return
	}
	delete(l.partial, dir)
	if l.listing == nil {
		l.listing = map[uint64][]metawire.Dirent{}
	}
	l.listing[dir] = have
}

// namesChangedLocked drops dir's cached listing: this FS changes its
// names.
func (f *FS) namesChangedLocked(dir uint64) {
	if l := f.cache.leases[namespace.Ino(dir).Bucket()]; l != nil {
		delete(l.listing, dir)
		delete(l.partial, dir)
	}
}

// EnableLeases makes this FS ask islands for leases (the FUSE mount);
// what it cached before carries no lease. Close stops the pollers.
func (f *FS) EnableLeases() {
	session := f.newSession()
	f.cache.Lock()
	defer f.cache.Unlock()
	f.cache.session = session
	f.cache.leases = map[uint32]*heldLease{}
	f.cache.maxBreak = map[namespace.IslandID]uint64{}
	f.cache.pollers = map[namespace.IslandID]bool{}
	f.cache.hold = map[namespace.IslandID]time.Duration{}
	f.cache.made = map[uint64]bool{}
}

// LeasesOn reports whether EnableLeases was called.
func (f *FS) LeasesOn() bool {
	f.cache.Lock()
	defer f.cache.Unlock()
	return f.cache.session != 0
}

// LeasesHeld returns how many buckets this FS holds a live lease on.
func (f *FS) LeasesHeld() int {
	f.cache.Lock()
	defer f.cache.Unlock()
	n, now := 0, time.Now()
	for _, l := range f.cache.leases {
		if now.Before(l.expires) {
			n++
		}
	}
	return n
}

// DirLease returns how much longer this FS holds a live lease on dir's
// names (0: it does not). The FUSE mount lets the kernel cache the
// listing meanwhile: the lease's break tells it to drop it.
func (f *FS) DirLease(dir uint64) time.Duration {
	f.cache.Lock()
	defer f.cache.Unlock()
	now := time.Now()
	if l := f.liveLeaseLocked(namespace.Ino(dir).Bucket(), now); l != nil {
		return l.expires.Sub(now)
	}
	return 0
}

// reqIDFor returns a change's request id: random, but starting with the
// lease session so the island does not break this FS's own leases.
func (f *FS) reqIDFor() wire.ReqID {
	var id wire.ReqID
	_, _ = crand.Read(id[:])
	f.cache.Lock()
	s := f.cache.session
	f.cache.Unlock()
	if s != 0 {
		binary.BigEndian.PutUint64(id[:8], s)
	} else if k := f.data.cfg.Key; k != nil && k.Scope.Tenant() {
		// A tenant's request ids start with its prefix too (the islands
		// keep answers by id: no other client may name this one's).
		binary.BigEndian.PutUint32(id[:4], auth.LogPrefix(k.Name))
	}
	return id
}

// A cacheMark says when a request was sent, for caching its answer's
// records: the lease epoch (moved by every lease acquired, broken or
// dropped) and the own-change sequence (moved by every begin and end of
// one of this FS's changes). A record of key (an inode: its attributes;
// a directory: its names and listing) carries a lease only when its
// bucket's lease was acquired before the mark (and not broken or dropped
// since: that removes it) and no own change touching that key
// began, ended or is in flight since it (for the answer of an own change:
// none but that change itself). Changes of other keys do not matter, so
// concurrent creates in one directory leave each other's answers leased.
type cacheMark struct {
	epoch, seq uint64
	own        bool // the answer of the own change that began at seq
	valid      bool // the zero mark (noMark) stamps nothing
	at         time.Time
}

// unknownKey stands for inodes a change touches that this FS cannot name
// before it is answered (the victim of a removal whose name it has not
// cached): while such a change is in flight, and after it for reads sent
// before it ended, no record of any key is leased.
const unknownKey = 0

// touchKeep is how long the last change of a key is remembered: a mark
// older than it stamps nothing.
const touchKeep = 30 * time.Second

// touch is the last own change of a key.
type touch struct {
	seq      uint64 // its begin or end
	inflight int    // own changes of the key in flight
	at       time.Time
}

// ownChange is one of this FS's changes in flight (beginChange).
type ownChange struct {
	mark cacheMark
	keys []uint64
}

// readMarkLocked is the mark of a read sent now.
func (f *FS) readMarkLocked(now time.Time) cacheMark {
	return cacheMark{epoch: f.cache.epoch, seq: f.cache.seq, valid: true, at: now}
}

// beginChange starts one of this FS's changes, of the records of keys
// (the inodes whose attributes, names or listing it changes, as far as
// they are known before): until endChange no answer that may predate it
// caches those keys under a lease (it could land after the change's own
// answer). The change's own answer is cached with ch.mark.
func (f *FS) beginChange(ctx context.Context, keys ...uint64) ownChange {
	// What is kept back goes first, or beside it when of other keys.
	f.flushBeforeChange(ctx, keys)
	f.cache.Lock()
	defer f.cache.Unlock()
	now := time.Now()
	f.cache.seq++
	for _, k := range keys {
		t := f.cache.touched[k]
		f.cache.touched[k] = touch{seq: f.cache.seq, inflight: t.inflight + 1, at: now}
	}
	return ownChange{mark: cacheMark{epoch: f.cache.epoch, seq: f.cache.seq, own: true, valid: true, at: now}, keys: keys}
}

// endChange ends ch, once its answer is cached.
func (f *FS) endChange(ch ownChange) {
	f.cache.Lock()
	defer f.cache.Unlock()
	now := time.Now()
	f.cache.seq++
	for _, k := range ch.keys {
		t := f.cache.touched[k]
		f.cache.touched[k] = touch{seq: f.cache.seq, inflight: t.inflight - 1, at: now}
	}
	if f.cache.seq%1024 == 0 {
		for k, t := range f.cache.touched {
			if t.inflight == 0 && now.Sub(t.at) > touchKeep {
				delete(f.cache.touched, k)
			}
		}
	}
}

// stampLocked is the lease generation a record of key (in bucket) read
// with mark may carry: that of the live lease on bucket when that lease
// was acquired before mark and no own change of key began, ended or is in
// flight since (see cacheMark); 0 otherwise.
func (f *FS) stampLocked(bucket uint32, key uint64, mark cacheMark, now time.Time) uint64 {
	if f.cache.leases == nil || !mark.valid || now.Sub(mark.at) > touchKeep {
		return 0
	}
	for _, k := range []uint64{key, unknownKey} {
		t := f.cache.touched[k]
		quiet := t.seq <= mark.seq && t.inflight == 0
		if !quiet && !(mark.own && t.seq == mark.seq && t.inflight == 1) {
			return 0
		}
	}
	// The lease must have been held when the request was sent: one
	// acquired since may postdate another client's change the answer
	// does not show. A break or drop removes the lease, so its successor
	// is younger than any mark taken before.
	if l := f.cache.leases[bucket]; l != nil && now.Before(l.expires) && l.epoch <= mark.epoch {
		return l.gen
	}
	return 0
}

// validLocked reports whether a record of bucket cached until expires
// with lease stamp may be used at now.
func (f *FS) validLocked(bucket uint32, stamp uint64, expires, now time.Time) bool {
	return now.Before(expires) || f.leaseLeftLocked(bucket, stamp, now) > 0
}

// liveLeaseLocked returns the live lease on bucket, if any.
func (f *FS) liveLeaseLocked(bucket uint32, now time.Time) *heldLease {
	if l := f.cache.leases[bucket]; l != nil && now.Before(l.expires) {
		return l
	}
	return nil
}

// leaseMarks say how the records of a leased read's answer are cached
// (see leasedCall).
type leaseMarks struct {
	before cacheMark // when the request was sent
	route  cacheMark // for records of the route's bucket: before, or its epoch moved past the answer's lease
	stamp  uint64    // the generation of that lease (0: none granted)
	bucket uint32    // the route's bucket
}

// forIno is the mark a record of ino from the answer is cached with: a
// record of the route's bucket is covered by the lease the request
// acquired, any other only by what was held before it was sent.
func (m leaseMarks) forIno(ino uint64) cacheMark {
	if namespace.Ino(ino).Bucket() == m.bucket {
		return m.route
	}
	return m.before
}

// leasedCall sends read op (routed by route, whose bucket is leased) as
// an OpLease when leases are on, and returns the read's answer and the
// marks to cache its records with. A lookup of a missing name is
// answered ErrNotFound, with the marks of its lease.
func (f *FS) leasedCall(ctx context.Context, route uint64, op uint16, req, resp metawire.Message) (leaseMarks, error) {
	bucket := namespace.Ino(route).Bucket()
	f.flushBeforeCall(ctx, metawire.OpLease) // before the mark (see beginChange)
	f.cache.Lock()
	session, mark := f.cache.session, f.readMarkLocked(time.Now())
	var heldGen uint64 // the lease held when sent: a renewal extends it
	if l := f.liveLeaseLocked(bucket, mark.at); l != nil {
		heldGen = l.gen
	}
	f.cache.Unlock()
	m := leaseMarks{before: mark, route: mark, bucket: bucket}
	if session == 0 {
		return m, f.call(ctx, route, op, req, resp)
	}
	isl := f.islandOf(route)
	f.startPoller(isl, route)
	sent := time.Now()
	var lr metawire.LeaseResp
	lreq := metawire.LeaseReq{Session: session, Op: op, Msg: metawire.Marshal(req), Exclusive: f.wb.on.Load()}
	if err := f.call(ctx, route, metawire.OpLease, &lreq, &lr); err != nil {
		return m, err
	}
	rerr := lr.Err()
	if rerr == nil {
		if err := metawire.Unmarshal(lr.Msg, resp); err != nil {
			return m, err
		}
	}
	if !lr.Granted {
		return m, rerr
	}
	term := time.Duration(lr.Term)
	expires := sent.Add(term - term*leaseMargin/100)
	f.cache.Lock()
	defer f.cache.Unlock()
	if f.cache.maxBreak[isl] > lr.Seq {
		return m, rerr // a break sent after the grant was received already
	}
	// A renewal: the lease held when the request was sent still is (a
	// break or drop would have removed it; other buckets' lease events
	// since do not matter), so the records under it stay.
	if l := f.liveLeaseLocked(bucket, time.Now()); l != nil && l.island == isl && (mark.epoch == f.cache.epoch || l.gen == heldGen) {
		if expires.After(l.expires) {
			l.expires, l.term = expires, term-term*leaseMargin/100
		}
		l.exclusive, l.granted, l.table = lr.Exclusive, sent, lr.Table
		m.stamp = l.gen
		return m, rerr
	}
	f.cache.nextGen++
	f.cache.epoch++
	f.cache.leases[bucket] = &heldLease{island: isl, gen: f.cache.nextGen, epoch: f.cache.epoch, expires: expires, exclusive: lr.Exclusive,
		term: term - term*leaseMargin/100, granted: sent, table: lr.Table, hold: f.cache.hold[isl]}
	m.route.epoch, m.stamp = f.cache.epoch, f.cache.nextGen
	return m, rerr
}

// renewsByRead reports whether a read of l's bucket should renew l now:
// it is past half its term and the polls are not known to keep it (a
// poll sent after the grant renewed it, within half the time they renew
// for).
func (l *heldLease) renewsByRead(now time.Time) bool {
	byPolls := l.polled && l.hold > 0 && now.Sub(l.granted) < l.hold/2
	return !byPolls && l.expires.Sub(now) <= l.term/2
}

// hitLocked counts an answer from the cache of a record of route's
// bucket and, when the bucket's lease is in use and past half its term
// (or half the time polls renew it), renews it in the background (a
// leased getattr of route): a lease in use is not left to end, which
// would cost the records it covers (a directory known complete, say)
// while this FS keeps changing it.
func (f *FS) hitLocked(route uint64, now time.Time) {
	f.cache.hits++
	bucket := namespace.Ino(route).Bucket()
	l := f.cache.leases[bucket]
	if l == nil || l.renewing || !now.Before(l.expires) || f.closing.Load() {
		return
	}
	if !l.renewsByRead(now) {
		return
	}
	l.renewing = true
	f.renewals.Add(1)
	term := l.term
	go func() {
		defer f.renewals.Done()
		ctx, cancel := context.WithTimeout(f.pollCtx, term)
		defer cancel()
		var resp metawire.AttrResp
		// Not a reason to send what is kept back (a preborn window
		// would end at every renewal): its answer is cached only when
		// nothing of route is.
		ctx = context.WithValue(ctx, renewalKey{}, true)
		if m, err := f.leasedCall(ctx, route, metawire.OpGetAttr, &metawire.InoReq{Cred: metawire.Root, Ino: route}, &resp); err == nil && !f.keptIn(route) {
			f.cacheAttrAt(resp.Attr, m.forIno(resp.Attr.Ino))
		}
		f.cache.Lock()
		l.renewing = false
		f.cache.Unlock()
	}()
}

// startPoller starts the goroutine that listens for isl's breaks, once.
func (f *FS) startPoller(isl namespace.IslandID, route uint64) {
	f.cache.Lock()
	if f.cache.pollers[isl] || f.closing.Load() {
		f.cache.Unlock()
		return
	}
	f.cache.pollers[isl] = true
	f.pollers.Add(1)
	session := f.cache.session
	f.cache.Unlock()
	// One poll that answers at once makes the island count this session
	// as listening before the read that follows asks for a lease.
	ctx, cancel := context.WithTimeout(f.pollCtx, 2*time.Second)
	var resp metawire.PollResp
	if err := f.call(ctx, route, metawire.OpLeasePoll, &metawire.PollReq{Session: session}, &resp); err != nil {
		f.log.Debug("client: first lease poll", "island", isl, "err", err)
	}
	cancel()
	go f.poll(isl, route)
}

// poll listens for breaks of this FS's leases at island isl (reached by
// route's bucket) until Close. A poll that fails drops every lease held
// there: breaks may have been missed.
func (f *FS) poll(isl namespace.IslandID, route uint64) {
	defer f.pollers.Done()
	ctx := f.pollCtx
	var ack uint64
	backoff := 50 * time.Millisecond
	wait := pollWait
	for ctx.Err() == nil {
		f.cache.Lock()
		session := f.cache.session
		f.cache.Unlock()
		var resp metawire.PollResp
		sent := time.Now()
		err := f.call(ctx, route, metawire.OpLeasePoll, &metawire.PollReq{Session: session, Ack: ack, WaitMs: uint32(wait / time.Millisecond)}, &resp)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.dropIsland(isl)
			f.log.Debug("client: lease poll", "island", isl, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			if errors.Is(err, metawire.ErrInvalid) {
				ack = 0
			}
			continue
		}
		backoff = 50 * time.Millisecond
		if len(resp.Breaks) > 0 {
			f.cache.Lock()
			buckets := make([]uint32, 0, len(resp.Breaks))
			for _, b := range resp.Breaks {
				f.cache.maxBreak[isl] = max(f.cache.maxBreak[isl], b.Seq)
				ack = max(ack, b.Seq)
				buckets = append(buckets, b.Bucket)
			}
			f.cache.breaks += uint64(len(resp.Breaks))
			f.endLeasesAndUnlock(ctx, buckets) // before the next poll acknowledges the breaks
		}
		wait = f.renewByPoll(isl, &resp, sent)
	}
}

// renewPolls is how many polls a client holding leases at an island
// sends there per lease term. This side learns of a renewal (made as the
// poll arrives) only from the answer, up to two waits later, so the lease
// left dips to about term*(1-2/renewPolls) between renewals: it must stay
// well above what keeps changes back (wbMinLease, and half of it for the
// flush). Measured: at 3 per term, 10,000 preborn creates fell from
// 2,500/s to 300-700/s after the first 2,000-4,000, sent early as their
// lease seemed to end.
const renewPolls = 6

// renewByPoll extends the leases at isl that the poll sent at sent and
// answered with resp renewed (PollResp.HoldMs), and returns how long the
// next poll may wait: the shortest term it keeps alive over renewPolls,
// so a lease in cache never runs out between two polls.
//
// The island renewed, when the poll arrived (after sent), every lease of
// this session its table granted within hold and still held. A lease
// still live here now was live there then (the island's ends come later
// than this side's), and one granted here (sent) within hold of now was
// granted there within hold of the poll's arrival: so each such lease now
// runs to at least sent plus its term at the island. Breaks sent with
// the answer were handled already (their leases are gone).
func (f *FS) renewByPoll(isl namespace.IslandID, resp *metawire.PollResp, sent time.Time) time.Duration {
	hold := time.Duration(resp.HoldMs) * time.Millisecond
	f.cache.Lock()
	defer f.cache.Unlock()
	f.cache.hold[isl] = hold
	if hold <= 0 || resp.Table == 0 {
		return pollWait
	}
	now := time.Now()
	wait := pollWait
	for _, l := range f.cache.leases {
		if l.island != isl || l.table != resp.Table || !now.Before(l.expires) {
			continue
		}
		l.hold = hold
		if now.Sub(l.granted) >= hold {
			continue // ends with its term unless a read renews it
		}
		if end := sent.Add(l.term); end.After(l.expires) {
			l.expires = end
		}
		if l.granted.Before(sent) {
			l.polled = true
		}
		wait = min(wait, l.term/renewPolls)
	}
	return max(wait, 50*time.Millisecond)
}

// endLeasesAndUnlock ends this FS's leases on buckets early (broken, or
// their island's poll failed): it sends the changes kept back under them,
// forgets them and every record cached of their buckets, releases
// f.cache and runs the OnLeaseBreak hook.
func (f *FS) endLeasesAndUnlock(ctx context.Context, buckets []uint32) {
	if f.wb.on.Load() {
		// Nothing more is kept back under them; what was is sent while
		// they still stand, so the break is acknowledged after it.
		var excl []uint32
		for _, b := range buckets {
			if l := f.cache.leases[b]; l != nil {
				if l.exclusive {
					excl = append(excl, b)
				}
				l.exclusive = false
			}
		}
		f.cache.Unlock()
		f.flushKept(ctx, buckets)
		// Locks granted here under them go to the island first too,
		// and the files held open here under the exclusive ones (a
		// shared lease's break comes from inside another client's
		// change, which holds the inode locks a hold would wait for:
		// untold holds there are the watch's).
		f.handOverBuckets(ctx, buckets)
		f.holdBuckets(ctx, excl)
		f.cache.Lock()
	}
	for _, b := range buckets {
		delete(f.cache.leases, b)
	}
	f.cache.epoch++
	f.forgetBucketsLocked(buckets)
	fn := f.cache.onBreak
	f.cache.Unlock()
	if fn != nil && len(buckets) > 0 {
		fn(buckets)
	}
}

// forgetBucketsLocked drops every record cached of buckets, those read
// without a lease (for AttrTTL) too: a break means another client is
// changing them now, and a holder sees that change as soon as it is made.
func (f *FS) forgetBucketsLocked(buckets []uint32) {
	if len(buckets) == 0 {
		return
	}
	in := func(b uint32) bool {
		for _, x := range buckets {
			if x == b {
				return true
			}
		}
		return false
	}
	for ino := range f.cache.attrs {
		if in(namespace.Ino(ino).Bucket()) {
			delete(f.cache.attrs, ino)
		}
	}
	for k := range f.cache.dentry {
		if in(namespace.Ino(k.dir).Bucket()) {
			delete(f.cache.dentry, k)
		}
	}
}

// dropIsland forgets every lease held at isl.
func (f *FS) dropIsland(isl namespace.IslandID) {
	f.cache.Lock()
	var buckets []uint32
	for b, l := range f.cache.leases {
		if l.island == isl {
			buckets = append(buckets, b)
		}
	}
	f.endLeasesAndUnlock(f.pollCtx, buckets)
}

// LeaseBreaks returns how many lease breaks this FS received.
func (f *FS) LeaseBreaks() uint64 {
	f.cache.Lock()
	defer f.cache.Unlock()
	return f.cache.breaks
}

// KernelHoldMax bounds how long past its lease's current end the FUSE
// mount lets the kernel keep a record (EntryHold, AttrHold).
const KernelHoldMax = 30 * time.Second

// A lease with less than HoldMinLeft left is not counted on to be
// renewed (its polls are late): EntryHold and AttrHold give the kernel
// only what is left. HoldEndMargin is how long before a lease's end its
// holder drops what the kernel keeps past that end when the lease was not
// renewed (LeaseEnds); it is below HoldMinLeft, so nothing is given a
// long hold once the drop may have begun.
const (
	HoldMinLeft   = 1500 * time.Millisecond
	HoldEndMargin = time.Second
)

// EntryHold returns how long the kernel may keep the cached name
// dir/name (ino 0: known missing), and how long its lease has left: 0, 0
// when no live lease covers it; else hold runs until the polls that renew
// the lease stop renewing it (its grant plus the island's hold), at most
// KernelHoldMax, or is only what is left when that is short or the
// island's hold is not known yet. Past the lease's current end (hold >
// left) the kernel's copy is only as good as the caller's watch: it must
// drop it when LeaseEnds shows the lease within HoldEndMargin of its end
// (the FUSE mount's watch, kernelLeasesEnding), as it does when a lease
// breaks. A kernel that kept names only while the lease ran (seconds)
// asked the mount again for every name of a tree listed a few seconds
// later.
func (f *FS) EntryHold(dir uint64, name string, ino uint64) (hold, left time.Duration) {
	f.cache.Lock()
	defer f.cache.Unlock()
	bucket, now := namespace.Ino(dir).Bucket(), time.Now()
	d, ok := f.cache.dentry[dentryKey{dir, name}]
	if !ok && ino == 0 && namespace.ValidName(name) == nil {
		// Missing from a directory listed whole under the live lease (as
		// Lookup answers it): as good as a leased negative answer.
		if l := f.liveLeaseLocked(bucket, now); l != nil && l.complete[dir] {
			return f.holdLocked(bucket, l.gen, now)
		}
	}
	if !ok || d.ino != ino {
		return 0, 0
	}
	return f.holdLocked(bucket, d.lease, now)
}

// AttrHold returns how long the kernel may keep ino's cached attributes
// and how long their lease has left (see EntryHold; 0, 0: not cached
// under a live lease).
func (f *FS) AttrHold(ino uint64) (hold, left time.Duration) {
	f.cache.Lock()
	defer f.cache.Unlock()
	a, ok := f.cache.attrs[ino]
	if !ok {
		return 0, 0
	}
	return f.holdLocked(namespace.Ino(ino).Bucket(), a.lease, time.Now())
}

// holdLocked is EntryHold's answer for a record of bucket read under the
// lease of generation stamp.
func (f *FS) holdLocked(bucket uint32, stamp uint64, now time.Time) (hold, left time.Duration) {
	left = f.leaseLeftLocked(bucket, stamp, now)
	l := f.cache.leases[bucket]
	if left < HoldMinLeft || l.hold <= 0 {
		return left, left
	}
	return max(left, min(l.granted.Add(l.hold).Sub(now), KernelHoldMax)), left
}

// LeaseEnds returns when this FS's lease on each of buckets ends unless
// renewed (the zero time: no live lease).
func (f *FS) LeaseEnds(buckets []uint32) []time.Time {
	f.cache.Lock()
	defer f.cache.Unlock()
	now := time.Now()
	ends := make([]time.Time, len(buckets))
	for k, b := range buckets {
		if l := f.cache.leases[b]; l != nil && now.Before(l.expires) {
			ends[k] = l.expires
		}
	}
	return ends
}

// leaseLeftLocked is how long the lease of generation stamp on bucket
// still runs (0: ended, broken, or stamp 0, which no lease has).
func (f *FS) leaseLeftLocked(bucket uint32, stamp uint64, now time.Time) time.Duration {
	l := f.cache.leases[bucket]
	if l == nil || l.gen != stamp {
		return 0
	}
	return max(l.expires.Sub(now), 0)
}

// OnLeaseBreak sets fn to run for the buckets whose leases ended early
// (broken, or dropped with their island's poll), after this FS forgot what
// it cached under them and before the break is acknowledged: the FUSE
// mount invalidates the kernel's copies there.
func (f *FS) OnLeaseBreak(fn func(buckets []uint32)) {
	f.cache.Lock()
	defer f.cache.Unlock()
	f.cache.onBreak = fn
}
