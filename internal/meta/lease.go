package meta

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/atoll-fs/atoll/internal/lease"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// maxPollWait bounds a lease poll's wait.
const maxPollWait = 30 * time.Second

// openLeases makes the island's lease table: fenced (no change for one
// term) when an earlier incarnation may have granted leases.
func (i *Island) openLeases() error {
	v, marked, err := get(i.db, globalKey(gLeases))
	if err != nil {
		return err
	}
	excl := marked && len(v) > 0 && v[0] >= leaseMarkExclusive
	i.leases = lease.New(lease.Config{Term: i.cfg.LeaseTerm, Fenced: marked, FencedReads: excl})
	if excl {
		i.leaseMarked.Store(leaseMarkExclusive)
	} else if marked {
		i.leaseMarked.Store(leaseMarkShared)
	}
	return nil
}

// HandOver prepares a planned change of leader (a replicated island
// handing the lead to its preferred server): every lease is broken and
// waited for (their holders flush what they kept back), none is granted
// any more, and the lease record goes, so the next leader serves at once
// instead of waiting a lease term for leases nobody holds. resume gives
// grants back if this island stays leader (the transfer failed); the
// next grant writes the record again first.
func (i *Island) HandOver(ctx context.Context) (resume func(), err error) {
	if err := i.enter(); err != nil {
		return nil, err
	}
	defer i.leave()
	give, err := i.leases.Withdraw(ctx, 0, ^uint32(0))
	if err != nil {
		return nil, fmt.Errorf("%w: breaking leases: %v", metawire.ErrUnavailable, err)
	}
	// A lease request that saw no record writes one only if its bucket is
	// not withdrawn, under this lock: none writes it after the delete.
	i.leaseRecord.Lock()
	defer i.leaseRecord.Unlock()
	if i.leaseMarked.Load() != 0 {
		if err := i.del(ctx, globalKey(gLeases), false); err != nil {
			give()
			return nil, err
		}
		i.leaseMarked.Store(0)
	}
	return give, nil
}

// The lease record's value (globalKey(gLeases)): the strongest lease an
// incarnation of the island ever granted. Its next incarnation delays
// changes by a term after shared ones, and reads too after exclusive
// ones (their holders may keep changes back).
const (
	leaseMarkShared    = 1
	leaseMarkExclusive = 2
)

type sessionKey struct{}

// withSession marks ctx as applying a change for lease session s (a
// participant applying a transaction a client's request started).
func withSession(ctx context.Context, s uint64) context.Context {
	return context.WithValue(ctx, sessionKey{}, s)
}

// sessionOf is the lease session of the client whose change ctx serves:
// the first 8 bytes of its request id (see metawire.LeaseReq), or the
// session a transaction carried; 0 for none.
func sessionOf(ctx context.Context) uint64 {
	if s, ok := ctx.Value(sessionKey{}).(uint64); ok {
		return s
	}
	id, ok := ctx.Value(reqIDKey{}).(wire.ReqID)
	if !ok {
		return 0
	}
	return binary.BigEndian.Uint64(id[:8])
}

// breakLeases breaks the leases on the buckets b changes (every namespace
// key names its bucket), but the changing session's own, before b is
// applied; done ends the change.
func (i *Island) breakLeases(ctx context.Context, b *pebble.Batch) (done func(), err error) {
	var buckets []uint32
	r := b.Reader()
	for {
		_, key, _, ok, err := r.Next()
		if err != nil {
			return nil, fmt.Errorf("%w: reading a batch: %v", metawire.ErrIO, err)
		}
		if !ok {
			break
		}
		if len(key) < 5 || key[4] >= 0x80 || key[4] == tagSeq || key[4] == tagLock || key[4] == tagHold {
			// Island-wide records, a bucket's id counter and file locks,
			// which no lease covers (no read answers with them):
			// reserving ids (OpAllocIno) or taking a lock breaks nobody's
			// lease.
			continue
		}
		bk := binary.BigEndian.Uint32(key)
		if n := len(buckets); n == 0 || buckets[n-1] != bk {
			buckets = append(buckets, bk)
		}
	}
	if len(buckets) == 0 {
		return func() {}, nil
	}
	brk := i.leases.BreakUnfenced // recovery at start (see lease.Table)
	if i.bgCtx != nil {
		// An island closing (a replica that stopped leading) stops waiting
		// for breaks and its fence: the client retries at the new leader.
		brk = i.leases.Break
		var stop func()
		ctx, stop = i.untilClose(ctx)
		defer stop()
	}
	done, err = brk(ctx, buckets, sessionOf(ctx))
	if err != nil {
		return nil, fmt.Errorf("%w: breaking leases: %v", metawire.ErrUnavailable, err)
	}
	return done, nil
}

// untilClose returns ctx ended also when the island begins to close
// (before start has finished, ctx itself); stop releases it.
func (i *Island) untilClose(ctx context.Context) (context.Context, func()) {
	if i.bgCtx == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(i.bgCtx, cancel)
	return ctx, func() { unhook(); cancel() }
}

// leasedRead serves OpLease: the wrapped read, and a lease on its bucket
// when the session listens for breaks and nothing changed the bucket
// while it was read. A missing name is an answer, leased like any other.
func (i *Island) leasedRead(ctx context.Context, r *metawire.LeaseReq) (*metawire.LeaseResp, error) {
	route, err := leaseRoute(r.Op, r.Msg)
	if err != nil {
		return nil, err
	}
	if err := i.checkIno("lease", namespace.Ino(route)); err != nil {
		return nil, err
	}
	bucket := namespace.Ino(route).Bucket()
	mark := i.leases.Begin(bucket)
	out, err := i.dispatch(ctx, r.Op, r.Msg)
	resp := &metawire.LeaseResp{Msg: out}
	if err != nil {
		if !errors.Is(err, metawire.ErrNotFound) || r.Op != metawire.OpLookup {
			return nil, err
		}
		resp.Status, resp.Error = metawire.StatusOf(err), err.Error()
	}
	if r.Session == 0 {
		return resp, nil
	}
	want := int32(leaseMarkShared)
	if r.Exclusive {
		want = leaseMarkExclusive
	}
	if i.leaseMarked.Load() < want {
		// Record that leases exist before the first is granted: the next
		// incarnation (a restart, a new leader) must wait them out. Not
		// while leases are withdrawn (a hand-over dropped the record).
		i.leaseRecord.Lock()
		if i.leases.Withdrawn(bucket) {
			i.leaseRecord.Unlock()
			return resp, nil
		}
		if i.leaseMarked.Load() < want {
			if err := i.put(ctx, globalKey(gLeases), []byte{byte(want)}); err != nil {
				i.leaseRecord.Unlock()
				return resp, nil // no lease, the read stands
			}
			i.leaseMarked.Store(want)
		}
		i.leaseRecord.Unlock()
	}
	var seq uint64
	var excl, ok bool
	if r.Exclusive {
		seq, excl, ok = i.leases.GrantExclusive(r.Session, bucket, mark)
	} else {
		seq, ok = i.leases.Grant(r.Session, bucket, mark)
	}
	if ok {
		resp.Granted, resp.Seq, resp.Term, resp.Exclusive, resp.Table = true, seq, int64(i.leases.Term()), excl, i.leases.ID()
		i.met.leaseGrants.Inc()
	}
	return resp, nil
}

// recall serves a request's first step: an exclusive lease another
// session holds on a bucket the request reads or changes is recalled
// (its holder flushes what it kept back) before the request runs, and
// before it takes any lock, so the holder's flush cannot wait for it.
func (i *Island) recall(ctx context.Context, op uint16, msg []byte) error {
	if !i.leases.Exclusive() && !i.leases.ReadFenced() {
		return nil
	}
	session := sessionOf(ctx)
	if op == metawire.OpLease {
		var r metawire.LeaseReq
		if err := metawire.Unmarshal(msg, &r); err != nil {
			return err
		}
		op, msg, session = r.Op, r.Msg, r.Session
	}
	inos, err := routeInos(op, msg)
	if err != nil || len(inos) == 0 {
		return nil // the op itself answers a malformed request
	}
	buckets := make([]uint32, len(inos))
	for k, ino := range inos {
		buckets[k] = namespace.Ino(ino).Bucket()
	}
	if !i.leases.MustRecall(buckets, session) {
		return nil
	}
	if wire.IsInline(ctx) {
		return wire.ErrWouldBlock // a recall waits for another client
	}
	ctx, stop := i.untilClose(ctx)
	defer stop()
	if err := i.leases.Recall(ctx, buckets, session); err != nil {
		return fmt.Errorf("%w: recalling a lease: %v", metawire.ErrUnavailable, err)
	}
	return nil
}

// lockInFlight marks a file-lock request that reads or changes a file's
// locks (not a list, a cancel, or an open-file hold) as in flight on the
// file's bucket until done (lease.Table.Locking): the exclusive lease of
// the bucket is recalled first (recall), and no other session may be
// granted it until the change is applied. Without this, a lease granted
// between the recall and the change let its holder copy the file's lock
// set without the change (LockList) and grant itself a conflicting lock
// from the copy: SQLite on three mounts, under load, saw the hand-over of
// such a PENDING-byte lock refused, the session ended, and its next
// write to the database fail EIO.
func (i *Island) lockInFlight(ctx context.Context, op uint16, msg []byte) (done func()) {
	if op != metawire.OpLock {
		return nil
	}
	var r metawire.LockReq
	if err := metawire.Unmarshal(msg, &r); err != nil {
		return nil // the op itself answers a malformed request
	}
	switch r.Cmd {
	case metawire.LockList, metawire.LockCancel, metawire.LockHold, metawire.LockUnhold:
		return nil
	}
	return i.leases.Locking(namespace.Ino(r.Ino).Bucket(), sessionOf(ctx))
}

// routeInos are the inodes whose buckets a client request reads or
// changes directly (a transaction's other buckets are reached through
// its participants, whose changes break leases as any change does).
func routeInos(op uint16, msg []byte) ([]uint64, error) {
	one := func(m metawire.Message, ino func() uint64) ([]uint64, error) {
		if err := metawire.Unmarshal(msg, m); err != nil {
			return nil, err
		}
		return []uint64{ino()}, nil
	}
	switch op {
	case metawire.OpLookup, metawire.OpUnlink, metawire.OpRmdir:
		var r metawire.NameReq
		return one(&r, func() uint64 { return r.Dir })
	case metawire.OpGetAttr, metawire.OpReadlink, metawire.OpListXattr:
		var r metawire.InoReq
		return one(&r, func() uint64 { return r.Ino })
	case metawire.OpSetAttr:
		var r metawire.SetAttrReq
		return one(&r, func() uint64 { return r.Ino })
	case metawire.OpCreate, metawire.OpMkdir, metawire.OpSymlink:
		var r metawire.CreateReq
		return one(&r, func() uint64 { return r.Dir })
	case metawire.OpUnlinkMany:
		var r metawire.UnlinkManyReq
		return one(&r, func() uint64 { return r.Dir })
	case metawire.OpReaddir:
		var r metawire.ReaddirReq
		return one(&r, func() uint64 { return r.Dir })
	case metawire.OpGetXattr, metawire.OpSetXattr, metawire.OpRemoveXattr:
		var r metawire.XattrReq
		return one(&r, func() uint64 { return r.Ino })
	case metawire.OpReadMap:
		var r metawire.ReadMapReq
		return one(&r, func() uint64 { return r.Ino })
	case metawire.OpAccess:
		var r metawire.AccessReq
		return one(&r, func() uint64 { return r.Ino })
	case metawire.OpLock:
		// A lock on a file another session holds exclusively (created
		// there and kept back) waits for it to be sent.
		var r metawire.LockReq
		return one(&r, func() uint64 { return r.Ino })
	case metawire.OpRename:
		var r metawire.RenameReq
		if err := metawire.Unmarshal(msg, &r); err != nil {
			return nil, err
		}
		return []uint64{r.SrcDir, r.DstDir}, nil
	case metawire.OpLink:
		var r metawire.LinkReq
		if err := metawire.Unmarshal(msg, &r); err != nil {
			return nil, err
		}
		return []uint64{r.Ino, r.Dir}, nil
	case metawire.OpCommit:
		var r metawire.CommitReq
		if err := metawire.Unmarshal(msg, &r); err != nil {
			return nil, err
		}
		inos := make([]uint64, len(r.Writes))
		for k, w := range r.Writes {
			inos[k] = w.Ino
		}
		return inos, nil
	case metawire.OpClean:
		var r metawire.CleanReq
		if err := metawire.Unmarshal(msg, &r); err != nil {
			return nil, err
		}
		inos := make([]uint64, len(r.Deltas))
		for k, d := range r.Deltas {
			inos[k] = d.Ino
		}
		return inos, nil
	}
	return nil, nil
}

// leaseRoute is the inode a leasable read names (its bucket is leased).
func leaseRoute(op uint16, msg []byte) (uint64, error) {
	switch op {
	case metawire.OpLookup:
		var r metawire.NameReq
		if err := metawire.Unmarshal(msg, &r); err != nil {
			return 0, err
		}
		return r.Dir, nil
	case metawire.OpGetAttr:
		var r metawire.InoReq
		if err := metawire.Unmarshal(msg, &r); err != nil {
			return 0, err
		}
		return r.Ino, nil
	case metawire.OpReaddir:
		var r metawire.ReaddirReq
		if err := metawire.Unmarshal(msg, &r); err != nil {
			return 0, err
		}
		return r.Dir, nil
	}
	return 0, fmt.Errorf("%w: op %d cannot be leased", metawire.ErrBadRequest, op)
}

// pollLeases serves OpLeasePoll.
func (i *Island) pollLeases(ctx context.Context, r *metawire.PollReq) (*metawire.PollResp, error) {
	wait := min(time.Duration(r.WaitMs)*time.Millisecond, maxPollWait)
	// A poll waits holding the island open: Close (a replica that stopped
	// leading) must not wait for it.
	ctx, stop := i.untilClose(ctx)
	defer stop()
	bs, err := i.leases.Poll(ctx, r.Session, r.Ack, wait)
	if err != nil {
		if errors.Is(err, lease.ErrNoSession) {
			return nil, fmt.Errorf("%w: %v", metawire.ErrInvalid, err)
		}
		return nil, fmt.Errorf("%w: %v", metawire.ErrUnavailable, err)
	}
	resp := &metawire.PollResp{Breaks: make([]metawire.LeaseBreak, len(bs))}
	if h := i.leases.Hold(); h > 0 {
		resp.HoldMs, resp.Table = uint32(h/time.Millisecond), i.leases.ID()
	}
	for k, b := range bs {
		resp.Breaks[k] = metawire.LeaseBreak{Bucket: b.Bucket, Seq: b.Seq}
	}
	return resp, nil
}
