package meta

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Requests applied at most once. A change (metawire.Schema.Dedup) sent
// with a request id (wire.ReqID) records the id in the same batch as its
// effect (markDone); a request whose id is recorded is not applied again
// but answered from the current state (replay): the client retried it
// because the first answer was lost (a cut connection, a leader that
// died after the change committed). Records live DedupKeep, then the
// background loop deletes them.

// DedupKeep is how long an applied request id is remembered: longer than
// any client retries one request.
const DedupKeep = 10 * time.Minute

type reqIDKey struct{}

// withReqID marks ctx as serving the request with id.
func withReqID(ctx context.Context, id wire.ReqID) context.Context {
	return context.WithValue(ctx, reqIDKey{}, id)
}

func dedupKey(id wire.ReqID) []byte { return append(globalKey(gDedup), id[:]...) }

// markDone adds ctx's request id, if any, to b: b holds the request's
// effect, and a retry must find it applied exactly when the effect is.
func (i *Island) markDone(ctx context.Context, b *pebble.Batch) error {
	id, ok := ctx.Value(reqIDKey{}).(wire.ReqID)
	if !ok {
		return nil
	}
	return b.Set(dedupKey(id), binary.BigEndian.AppendUint64(nil, uint64(i.now())), nil)
}

// requests tracks the request ids being served, so a retry that arrives
// while its first attempt still runs waits (ErrBusy) instead of running
// beside it.
type requests struct {
	mu struct {
		lockcheck.Mutex
		serving map[wire.ReqID]bool
	}
}

func (r *requests) begin(id wire.ReqID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.serving == nil {
		r.mu.serving = map[wire.ReqID]bool{}
	}
	if r.mu.serving[id] {
		return false
	}
	r.mu.serving[id] = true
	return true
}

func (r *requests) end(id wire.ReqID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.mu.serving, id)
}

// dedup serves a change with request id: a replay if the id is recorded,
// else run under the id (ErrBusy while another attempt runs).
func (i *Island) dedup(ctx context.Context, op uint16, id wire.ReqID, msg []byte, run func(context.Context) ([]byte, error)) ([]byte, error) {
	if wire.IsInline(ctx) {
		return nil, wire.ErrWouldBlock // changes are never served inline; be safe
	}
	if !i.reqs.begin(id) {
		return nil, fmt.Errorf("%w: request %x is being served", metawire.ErrBusy, id[:4])
	}
	defer i.reqs.end(id)
	_, done, err := get(i.db, dedupKey(id))
	if err != nil {
		return nil, err
	}
	if done {
		i.met.replayed.Inc()
		return i.replay(ctx, op, msg)
	}
	return run(withReqID(ctx, id))
}

// replay answers a change already applied: what its first answer said,
// from the state now (the attributes of what it made or changed).
func (i *Island) replay(ctx context.Context, op uint16, msg []byte) ([]byte, error) {
	switch op {
	case metawire.OpCreate, metawire.OpMkdir, metawire.OpSymlink:
		return serve(ctx, msg, &metawire.CreateReq{}, func(r *metawire.CreateReq) (metawire.Message, error) {
			a, err := i.lookup(ctx, &metawire.NameReq{Cred: r.Cred, Dir: r.Dir, Name: r.Name})
			if err != nil {
				return nil, fmt.Errorf("replaying op %d: %w", op, err)
			}
			d, err := i.getAttr(ctx, &metawire.InoReq{Cred: r.Cred, Ino: r.Dir})
			if err != nil {
				return nil, fmt.Errorf("replaying op %d: %w", op, err)
			}
			return &metawire.CreateResp{Attr: a.Attr, DirAttr: d.Attr, Boot: i.boot}, nil
		})
	case metawire.OpLink:
		return serve(ctx, msg, &metawire.LinkReq{}, func(r *metawire.LinkReq) (metawire.Message, error) {
			return i.getAttr(ctx, &metawire.InoReq{Cred: r.Cred, Ino: r.Ino})
		})
	case metawire.OpSetAttr:
		return serve(ctx, msg, &metawire.SetAttrReq{}, func(r *metawire.SetAttrReq) (metawire.Message, error) {
			return i.getAttr(ctx, &metawire.InoReq{Cred: r.Cred, Ino: r.Ino})
		})
	case metawire.OpCommit:
		return serve(ctx, msg, &metawire.CommitReq{}, func(r *metawire.CommitReq) (metawire.Message, error) {
			resp := &metawire.CommitResp{Boot: i.boot}
			for _, w := range r.Writes {
				a, err := i.getAttr(ctx, &metawire.InoReq{Cred: metawire.Cred{}, Ino: w.Ino})
				if err != nil {
					return nil, err
				}
				resp.Attrs = append(resp.Attrs, a.Attr)
			}
			return resp, nil
		})
	}
	return metawire.Marshal(metawire.Empty{}), nil // unlink, rmdir, rename, xattrs
}

// sweepDedup deletes request ids older than DedupKeep (the background
// loop, at most once a minute).
func (i *Island) sweepDedup(ctx context.Context) {
	if time.Since(i.lastSweep) < time.Minute {
		return
	}
	i.lastSweep = time.Now()
	cut := uint64(time.Now().Add(-DedupKeep).UnixNano())
	it, err := i.db.NewIter(&pebble.IterOptions{LowerBound: globalKey(gDedup), UpperBound: prefixEnd(globalKey(gDedup))})
	if err != nil {
		return
	}
	b := i.db.NewBatch()
	defer b.Close()
	for it.First(); it.Valid() && b.Count() < 10000; it.Next() {
		if v := it.Value(); len(v) == 8 && binary.BigEndian.Uint64(v) < cut {
			_ = b.Delete(it.Key(), nil)
		}
	}
	it.Close()
	if b.Count() > 0 {
		if err := i.write(ctx, b, true); err != nil {
			i.log.Debug("meta: sweeping request ids", "err", err)
		}
	}
}
