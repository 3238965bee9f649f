package client

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/layout"
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

// PolicyXattr is the extended attribute holding a file's or directory's
// redundancy policy.
const PolicyXattr = "user.atoll.policy"

// BlockPointers returns the block pointers of a regular file by block
// index (none for inline files), fresh from its island.
func (f *FS) BlockPointers(ctx context.Context, cred metawire.Cred, ino uint64) (map[uint64]layout.Pointer, error) {
	a, err := f.GetAttrFresh(ctx, cred, ino)
	if err != nil {
		return nil, err
	}
	if !a.IsRegular() {
		return nil, fmt.Errorf("client: block pointers of %s: %w", namespace.Ino(ino), metawire.ErrInvalid)
	}
	f.forgetBlocks(ino)
	bm, err := f.readMap(ctx, cred, ino, a.Version)
	if err != nil {
		return nil, err
	}
	return bm.ptrs, nil
}

// Restripe rewrites a regular file's blocks that are not stored under its
// current policy: each block is copied into a stripe of the new policy
// and its pointer replaced by a conditional (cleaner) delta, so a
// concurrent writer's newer block always wins. It returns how many
// blocks moved. Directories and inline files have nothing to move. The
// old stripes are left to the cleaner.
func (f *FS) Restripe(ctx context.Context, cred metawire.Cred, ino uint64) (int, error) {
	a, err := f.GetAttrFresh(ctx, cred, ino)
	if err != nil {
		return 0, err
	}
	if !a.IsRegular() || a.Inline {
		return 0, nil
	}
	ps := a.Policy
	if ps == "" {
		ps = f.cfg.Map.DefaultPolicy()
	}
	pol, err := layout.Parse(ps)
	if err != nil {
		return 0, fmt.Errorf("client: restripe %s: policy %q: %w", namespace.Ino(ino), ps, metawire.ErrInvalid)
	}
	pol.BlockSize = pol.FragmentSize // every block stays one pointer
	ptrs, err := f.BlockPointers(ctx, cred, ino)
	if err != nil {
		return 0, err
	}
	idxs := make([]uint64, 0, len(ptrs))
	for idx, p := range ptrs {
		if p.Kind != pol.Kind || int(p.K) != pol.K || int(p.M) != pol.M {
			idxs = append(idxs, idx)
		}
	}
	if len(idxs) == 0 {
		return 0, nil
	}
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	log, err := f.data.Log(ctx, pol)
	if err != nil {
		return 0, fmt.Errorf("client: restripe %s: %w", namespace.Ino(ino), err)
	}
	moved := 0
	// Batches bound the memory held and the work lost to a failure.
	const batch = 256
	for len(idxs) > 0 {
		n := min(batch, len(idxs))
		var deltas []metawire.CleanDelta
		var written []layout.Pointer
		for _, idx := range idxs[:n] {
			old := ptrs[idx]
			buf := make([]byte, old.Length)
			if err := f.data.Read(ctx, &old, buf); err != nil {
				return moved, fmt.Errorf("client: restripe %s block %d: %w: %v", namespace.Ino(ino), idx, metawire.ErrIO, err)
			}
			np, err := log.AppendBlock(ctx, buf)
			if err != nil {
				return moved, fmt.Errorf("client: restripe %s block %d: %w: %v", namespace.Ino(ino), idx, metawire.ErrIO, err)
			}
			written = append(written, np)
			deltas = append(deltas, metawire.CleanDelta{Ino: ino, Index: idx, Old: old.AppendBinary(nil), New: np.AppendBinary(nil)})
		}
		if err := log.Sync(ctx, written); err != nil {
			return moved, fmt.Errorf("client: restripe %s: %w: %v", namespace.Ino(ino), metawire.ErrIO, err)
		}
		applied, err := f.Clean(ctx, deltas)
		if err != nil {
			return moved, err
		}
		for _, ok := range applied {
			if ok {
				moved++
			}
		}
		idxs = idxs[n:]
	}
	return moved, nil
}
