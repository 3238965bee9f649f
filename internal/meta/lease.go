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
	_, marked, err := get(i.db, globalKey(gLeases))
	if err != nil {
		return err
	}
	i.leases = lease.New(lease.Config{Term: i.cfg.LeaseTerm, Fenced: marked})
	i.leaseMarked.Store(marked)
	return nil
}

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
		if len(key) < 5 || key[4] >= 0x80 {
			continue // island-wide records
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
	if !i.leaseMarked.Load() {
		// Record that leases exist before the first is granted: the next
		// incarnation (a restart, a new leader) must wait them out.
		if err := i.put(ctx, globalKey(gLeases), []byte{1}); err != nil {
			return resp, nil // no lease, the read stands
		}
		i.leaseMarked.Store(true)
	}
	if seq, ok := i.leases.Grant(r.Session, bucket, mark); ok {
		resp.Granted, resp.Seq, resp.Term = true, seq, int64(i.leases.Term())
		i.met.leaseGrants.Inc()
	}
	return resp, nil
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
	for k, b := range bs {
		resp.Breaks[k] = metawire.LeaseBreak{Bucket: b.Bucket, Seq: b.Seq}
	}
	return resp, nil
}
