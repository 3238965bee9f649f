package client

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// IslandLister is implemented by map views that can name every island;
// the cleaner's calls (LiveBytes, StripeRefs) go to all of them.
type IslandLister interface {
	IslandAddrs() []string
}

// ErrNoIslandList is returned by the cleaner's calls when the FS's map
// view cannot enumerate islands.
var ErrNoIslandList = errors.New("client: map view cannot list islands")

func (f *FS) islandAddrs() ([]string, error) {
	l, ok := f.cfg.Map.(IslandLister)
	if !ok {
		return nil, ErrNoIslandList
	}
	addrs := l.IslandAddrs()
	if len(addrs) == 0 {
		return nil, fmt.Errorf("client: no islands in the map: %w", metawire.ErrUnavailable)
	}
	return addrs, nil
}

// callAddr sends one request to the island at addr (no rerouting: the
// cleaner asks every island for its own records).
func (f *FS) callAddr(ctx context.Context, addr string, op uint16, req, resp metawire.Message) error {
	rep, err := f.pool.Call(ctx, addr, op, f.cfg.Map.Epoch(), metawire.Marshal(req), nil, nil)
	if err != nil {
		if err = metawire.RemoteErr(err); errors.Is(err, metawire.ErrStaleEpoch) {
			if rerr := f.cfg.Map.Refresh(ctx); rerr == nil {
				rep, err = f.pool.Call(ctx, addr, op, f.cfg.Map.Epoch(), metawire.Marshal(req), nil, nil)
				if err != nil {
					err = metawire.RemoteErr(err)
				}
			}
		}
		if err != nil {
			return fmt.Errorf("client: island %s: %w", addr, err)
		}
	}
	return metawire.Unmarshal(rep.Msg, resp)
}

// LiveBytes sums every island's per-stripe live bytes. Stripes that no
// committed block ever pointed into are absent (their live bytes are 0).
func (f *FS) LiveBytes(ctx context.Context) (map[fragment.StripeID]int64, error) {
	addrs, err := f.islandAddrs()
	if err != nil {
		return nil, err
	}
	out := map[fragment.StripeID]int64{}
	for _, addr := range addrs {
		req := metawire.LiveReq{First: true, Limit: 5000}
		for {
			var resp metawire.LiveResp
			if err := f.callAddr(ctx, addr, metawire.OpLiveBytes, &req, &resp); err != nil {
				return nil, fmt.Errorf("live bytes: %w", err)
			}
			for _, s := range resp.Stripes {
				out[fragment.StripeID{Log: s.Log, Seq: s.Seq}] += s.Live
			}
			if !resp.More || len(resp.Stripes) == 0 {
				break
			}
			last := resp.Stripes[len(resp.Stripes)-1]
			req = metawire.LiveReq{AfterLog: last.Log, AfterSeq: last.Seq, Limit: 5000}
		}
	}
	return out, nil
}

// StripeRefs lists every block, in every island, that points into s.
func (f *FS) StripeRefs(ctx context.Context, s fragment.StripeID) ([]metawire.BlockRef, error) {
	addrs, err := f.islandAddrs()
	if err != nil {
		return nil, err
	}
	var out []metawire.BlockRef
	for _, addr := range addrs {
		var resp metawire.RefsResp
		if err := f.callAddr(ctx, addr, metawire.OpStripeRefs, &metawire.RefsReq{Log: s.Log, Seq: s.Seq}, &resp); err != nil {
			return nil, fmt.Errorf("stripe refs %s: %w", s, err)
		}
		out = append(out, resp.Refs...)
	}
	return out, nil
}

// Clean sends cleaner deltas to the islands owning their inodes and
// reports, in order, which were applied (false: the block had moved on,
// so the copy is dead). Cached block maps of moved files are dropped.
func (f *FS) Clean(ctx context.Context, deltas []metawire.CleanDelta) ([]bool, error) {
	byIno := map[uint64][]int{}
	for i, d := range deltas {
		byIno[d.Ino] = append(byIno[d.Ino], i)
	}
	inos := make([]uint64, 0, len(byIno))
	for ino := range byIno {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(a, b int) bool { return inos[a] < inos[b] })
	applied := make([]bool, len(deltas))
	for _, ino := range inos {
		idx := byIno[ino]
		req := metawire.CleanReq{Deltas: make([]metawire.CleanDelta, len(idx))}
		for k, i := range idx {
			req.Deltas[k] = deltas[i]
		}
		var resp metawire.CleanResp
		if err := f.call(ctx, ino, metawire.OpClean, &req, &resp); err != nil {
			return applied, fmt.Errorf("clean %s: %w", namespace.Ino(ino), err)
		}
		if len(resp.Applied) != len(idx) {
			return applied, fmt.Errorf("clean %s: %d answers for %d deltas: %w", namespace.Ino(ino), len(resp.Applied), len(idx), metawire.ErrIO)
		}
		for k, i := range idx {
			applied[i] = resp.Applied[k]
		}
		f.forgetBlocks(ino)
	}
	return applied, nil
}
