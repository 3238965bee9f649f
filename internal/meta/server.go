package meta

import (
	"context"
	"encoding/binary"
	"fmt"
	"github.com/atoll-fs/atoll/internal/auth"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/wire"
)

// serveWire adapts Handle to internal/wire. The capability each
// operation needs is in metawire.Schema.
func (i *Island) serveWire(ctx context.Context, req *wire.Request) (wire.Response, error) {
	if need := metawire.Schema.Needs(req.Op); !req.Peer.Caps.Has(need) {
		err := req.Peer.Allow(need, fmt.Sprintf("island %d op %d", i.id, req.Op))
		if need == auth.CapWrite {
			return wire.Response{}, fmt.Errorf("%w: %w", metawire.ErrReadOnly, err)
		}
		return wire.Response{}, fmt.Errorf("%w: %w", metawire.ErrPerm, err)
	}
	if len(req.Payload) != 0 {
		return wire.Response{}, fmt.Errorf("%w: unexpected payload", metawire.ErrBadRequest)
	}
	if req.Route != 0 && req.Route != uint32(i.id) {
		// Sent to this address for another island (whose leader moved).
		return wire.Response{}, fmt.Errorf("%w: request for island %d reached island %d", metawire.ErrWrongIsland, req.Route, i.id)
	}
	if req.Peer.Scope.Tenant() {
		ctx = withScope(ctx, req.Peer, i)
		// Before dedup and lease recalls read the id's session.
		if err := checkSessions(req.Peer, nil, req.ReqID); err != nil {
			return wire.Response{}, err
		}
	}
	out, err := i.handle(ctx, req.Op, req.Epoch, req.ReqID, req.Msg)
	if err != nil {
		return wire.Response{}, err
	}
	return wire.Response{Msg: out}, nil
}

// checkEpoch applies the epoch rule: a request with an older map (or no
// epoch, 0) is refused; a newer one makes the island refresh first.
func (i *Island) checkEpoch(ctx context.Context, epoch uint64) error {
	cur := i.cfg.Map.Epoch()
	switch {
	case epoch == 0 || epoch < cur:
		return fmt.Errorf("%w: request epoch %d, island has %d", metawire.ErrStaleEpoch, epoch, cur)
	case epoch > cur:
		if wire.IsInline(ctx) {
			return wire.ErrWouldBlock // refreshing asks the manager
		}
		if err := i.cfg.Map.Refresh(ctx); err != nil {
			return fmt.Errorf("%w: refreshing the cluster map to epoch %d: %v", metawire.ErrUnavailable, epoch, err)
		}
	}
	return nil
}

// Handle serves one request: op and the encoded request msg, as carried
// by a wire frame with the sender's map epoch. It returns the encoded
// response. Errors wrap the metawire sentinels.
func (i *Island) Handle(ctx context.Context, op uint16, epoch uint64, msg []byte) ([]byte, error) {
	return i.handle(ctx, op, epoch, wire.ReqID{}, msg)
}

// HandleReq is Handle for a request with id (wire.ReqID): a change
// (metawire.Schema.Dedup) already applied under id is answered, not
// applied again.
func (i *Island) HandleReq(ctx context.Context, op uint16, epoch uint64, id wire.ReqID, msg []byte) ([]byte, error) {
	return i.handle(ctx, op, epoch, id, msg)
}

func (i *Island) handle(ctx context.Context, op uint16, epoch uint64, id wire.ReqID, msg []byte) ([]byte, error) {
	if err := i.enter(); err != nil {
		return nil, err
	}
	defer i.leave()
	if !metawire.Schema.AnyEpoch(op) {
		if err := i.checkEpoch(ctx, epoch); err != nil {
			return nil, err
		}
	}
	if id != (wire.ReqID{}) {
		// Reads carry the session too, so its own do not recall its
		// exclusive leases.
		ctx = withSession(ctx, binary.BigEndian.Uint64(id[:8]))
	}
	// Before the recall: no other session becomes the exclusive holder
	// of a file's bucket while a lock request on it runs (lockInFlight).
	if done := i.lockInFlight(ctx, op, msg); done != nil {
		defer done()
	}
	if err := i.recall(ctx, op, msg); err != nil {
		return nil, err
	}
	if id != (wire.ReqID{}) && metawire.Schema.Dedup(op) {
		return i.dedup(ctx, op, id, msg, func(ctx context.Context) ([]byte, error) { return i.dispatch(ctx, op, msg) })
	}
	return i.dispatch(ctx, op, msg)
}

// dispatch decodes and serves one request.
func (i *Island) dispatch(ctx context.Context, op uint16, msg []byte) ([]byte, error) {
	switch op {
	case metawire.OpLookup:
		return serve(ctx, msg, &metawire.NameReq{}, func(r *metawire.NameReq) (metawire.Message, error) { return i.lookup(ctx, r) })
	case metawire.OpGetAttr:
		return serve(ctx, msg, &metawire.InoReq{}, func(r *metawire.InoReq) (metawire.Message, error) { return i.getAttr(ctx, r) })
	case metawire.OpSetAttr:
		return serve(ctx, msg, &metawire.SetAttrReq{}, func(r *metawire.SetAttrReq) (metawire.Message, error) { return i.setAttr(ctx, r) })
	case metawire.OpCreate, metawire.OpMkdir, metawire.OpSymlink:
		return serve(ctx, msg, &metawire.CreateReq{}, func(r *metawire.CreateReq) (metawire.Message, error) { return i.create(ctx, op, r) })
	case metawire.OpReadlink:
		return serve(ctx, msg, &metawire.InoReq{}, func(r *metawire.InoReq) (metawire.Message, error) { return i.readlink(ctx, r) })
	case metawire.OpUnlink, metawire.OpRmdir:
		return serve(ctx, msg, &metawire.NameReq{}, func(r *metawire.NameReq) (metawire.Message, error) {
			return metawire.Empty{}, i.remove(ctx, op == metawire.OpRmdir, r)
		})
	case metawire.OpUnlinkMany:
		return serve(ctx, msg, &metawire.UnlinkManyReq{}, func(r *metawire.UnlinkManyReq) (metawire.Message, error) {
			return metawire.Empty{}, i.removeMany(ctx, r)
		})
	case metawire.OpRename:
		return serve(ctx, msg, &metawire.RenameReq{}, func(r *metawire.RenameReq) (metawire.Message, error) {
			return metawire.Empty{}, i.rename(ctx, r)
		})
	case metawire.OpLink:
		return serve(ctx, msg, &metawire.LinkReq{}, func(r *metawire.LinkReq) (metawire.Message, error) { return i.link(ctx, r) })
	case metawire.OpReaddir:
		return serve(ctx, msg, &metawire.ReaddirReq{}, func(r *metawire.ReaddirReq) (metawire.Message, error) { return i.readdir(ctx, r) })
	case metawire.OpGetXattr:
		return serve(ctx, msg, &metawire.XattrReq{}, func(r *metawire.XattrReq) (metawire.Message, error) { return i.getXattr(ctx, r) })
	case metawire.OpSetXattr:
		return serve(ctx, msg, &metawire.XattrReq{}, func(r *metawire.XattrReq) (metawire.Message, error) {
			return metawire.Empty{}, i.setXattr(ctx, r)
		})
	case metawire.OpListXattr:
		return serve(ctx, msg, &metawire.InoReq{}, func(r *metawire.InoReq) (metawire.Message, error) { return i.listXattr(ctx, r) })
	case metawire.OpRemoveXattr:
		return serve(ctx, msg, &metawire.XattrReq{}, func(r *metawire.XattrReq) (metawire.Message, error) {
			return metawire.Empty{}, i.removeXattr(ctx, r)
		})
	case metawire.OpReadMap:
		return serve(ctx, msg, &metawire.ReadMapReq{}, func(r *metawire.ReadMapReq) (metawire.Message, error) { return i.readMap(ctx, r) })
	case metawire.OpCommit:
		return serve(ctx, msg, &metawire.CommitReq{}, func(r *metawire.CommitReq) (metawire.Message, error) { return i.commit(ctx, r) })
	case metawire.OpClean:
		return serve(ctx, msg, &metawire.CleanReq{}, func(r *metawire.CleanReq) (metawire.Message, error) { return i.clean(ctx, r) })
	case metawire.OpLiveBytes:
		return serve(ctx, msg, &metawire.LiveReq{}, func(r *metawire.LiveReq) (metawire.Message, error) { return i.liveBytes(r) })
	case metawire.OpStripeRefs:
		return serve(ctx, msg, &metawire.RefsReq{}, func(r *metawire.RefsReq) (metawire.Message, error) { return i.stripeRefs(r) })
	case metawire.OpStatFS:
		return serve(ctx, msg, &metawire.Empty{}, func(*metawire.Empty) (metawire.Message, error) { return i.statFS() })
	case metawire.OpForget:
		return serve(ctx, msg, &metawire.ForgetReq{}, func(r *metawire.ForgetReq) (metawire.Message, error) { return i.forget(r) })
	case metawire.OpLease:
		return serve(ctx, msg, &metawire.LeaseReq{}, func(r *metawire.LeaseReq) (metawire.Message, error) { return i.leasedRead(ctx, r) })
	case metawire.OpLeasePoll:
		return serve(ctx, msg, &metawire.PollReq{}, func(r *metawire.PollReq) (metawire.Message, error) { return i.pollLeases(ctx, r) })
	case metawire.OpLock:
		return serve(ctx, msg, &metawire.LockReq{}, func(r *metawire.LockReq) (metawire.Message, error) { return i.lock(ctx, r) })
	case metawire.OpLockSession, metawire.OpLockEnd:
		return serve(ctx, msg, &metawire.LockSessionReq{}, func(r *metawire.LockSessionReq) (metawire.Message, error) {
			return i.lockSession(ctx, r, op == metawire.OpLockEnd)
		})
	case metawire.OpSync:
		return serve(ctx, msg, &metawire.Empty{}, func(*metawire.Empty) (metawire.Message, error) {
			adopted, err := i.adopted()
			if err != nil {
				return nil, err
			}
			return &metawire.SyncResp{Boot: i.boot, Adopted: adopted}, i.syncLog()
		})
	case metawire.OpAccess:
		return serve(ctx, msg, &metawire.AccessReq{}, func(r *metawire.AccessReq) (metawire.Message, error) {
			return metawire.Empty{}, i.access(ctx, r)
		})
	case metawire.OpPrepare:
		return serve(ctx, msg, &metawire.PrepareReq{}, func(r *metawire.PrepareReq) (metawire.Message, error) {
			return metawire.Empty{}, i.prepare(ctx, r)
		})
	case metawire.OpDecide:
		return serve(ctx, msg, &metawire.DecideReq{}, func(r *metawire.DecideReq) (metawire.Message, error) {
			return metawire.Empty{}, i.decide(r.TxID, r.Commit)
		})
	case metawire.OpOutcome:
		return serve(ctx, msg, &metawire.TxReq{}, func(r *metawire.TxReq) (metawire.Message, error) {
			st, err := i.outcome(r.TxID)
			return &metawire.OutcomeResp{State: st}, err
		})
	case metawire.OpAllocIno:
		return serve(ctx, msg, &metawire.AllocInoReq{}, func(r *metawire.AllocInoReq) (metawire.Message, error) {
			return i.allocRemote(r)
		})
	case metawire.OpFsck:
		return serve(ctx, msg, &metawire.FsckReq{}, func(r *metawire.FsckReq) (metawire.Message, error) { return i.fsckPage(r) })
	case metawire.OpEntryLoad:
		return serve(ctx, msg, &metawire.EntryLoadReq{}, func(r *metawire.EntryLoadReq) (metawire.Message, error) {
			return i.entryLoad(r)
		})
	case metawire.OpImportEntry:
		return serve(ctx, msg, &metawire.ImportReq{}, func(r *metawire.ImportReq) (metawire.Message, error) {
			return metawire.Empty{}, i.importEntry(ctx, r)
		})
	}
	return nil, fmt.Errorf("%w: unknown op %d", metawire.ErrBadRequest, op)
}

// serve decodes msg into req, holds the identity it asserts to the
// connection key's scope, runs f and encodes its response.
func serve[R metawire.Message](ctx context.Context, msg []byte, req R, f func(R) (metawire.Message, error)) ([]byte, error) {
	if err := metawire.Unmarshal(msg, req); err != nil {
		return nil, err
	}
	if sc, ok := scopeOf(ctx); ok {
		switch r := any(req).(type) {
		case metawire.Credentialed:
			if err := applyScope(sc, r.Credential()); err != nil {
				return nil, err
			}
		case *metawire.LeaseReq, *metawire.PollReq, *metawire.LockSessionReq, *metawire.Empty:
			// A leased read's request is served (and checked) by
			// dispatch; the others name no file and assert nobody.
		default:
			return nil, fmt.Errorf("%w: a scoped key has no use for this operation", metawire.ErrPerm)
		}
		if err := checkConfined(ctx, req); err != nil {
			return nil, err
		}
		p, _ := scopedPeer(ctx)
		if err := checkSessions(p, req, wire.ReqID{}); err != nil {
			return nil, err
		}
	}
	resp, err := f(req)
	if err != nil {
		return nil, err
	}
	return metawire.Marshal(resp), nil
}

// allocRemote serves OpAllocIno: a durable fresh inode id in a bucket
// this island owns.
func (i *Island) allocRemote(r *metawire.AllocInoReq) (*metawire.AllocInoResp, error) {
	if i.cfg.Map.Table().Lookup(r.Bucket) != i.id {
		return nil, fmt.Errorf("alloc ino in bucket %08x: %w", r.Bucket, metawire.ErrWrongIsland)
	}
	n := max(r.Count, 1)
	if n > metawire.MaxAllocInos {
		return nil, fmt.Errorf("alloc %d inos in bucket %08x (max %d): %w", n, r.Bucket, metawire.MaxAllocInos, metawire.ErrInvalid)
	}
	ino, err := i.allocInos(r.Bucket, n)
	if err != nil {
		return nil, err
	}
	return &metawire.AllocInoResp{Ino: uint64(ino)}, nil
}
