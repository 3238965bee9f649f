package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// IslandLister is implemented by map views that can name every island;
// the cleaner's calls (LiveBytes, StripeRefs) go to all of them.
type IslandLister interface {
	Islands() map[namespace.IslandID]string
}

// ErrNoIslandList is returned by the cleaner's calls when the FS's map
// view cannot enumerate islands.
var ErrNoIslandList = errors.New("client: map view cannot list islands")

// islandIDs lists every island of the map, sorted.
func (f *FS) islandIDs() ([]namespace.IslandID, error) {
	l, ok := f.cfg.Map.(IslandLister)
	if !ok {
		return nil, ErrNoIslandList
	}
	ids := slices.Sorted(maps.Keys(l.Islands()))
	if len(ids) == 0 {
		return nil, fmt.Errorf("client: no islands in the map: %w", metawire.ErrUnavailable)
	}
	return ids, nil
}

// callIsland sends one request to island id (no rerouting by inode: the
// cleaner asks every island for its own records). A stale epoch or an
// island that moved (a replicated island's new leader) is retried a few
// times after a map refresh.
func (f *FS) callIsland(ctx context.Context, id namespace.IslandID, op uint16, req, resp metawire.Message) error {
	msg := metawire.Marshal(req)
	backoff := 20 * time.Millisecond
	var err error
	for attempt := 0; attempt < 8; attempt++ {
		addr := f.cfg.Map.(IslandLister).Islands()[id]
		var rep wire.Reply
		if addr == "" {
			err = fmt.Errorf("%w: island %d has no address in the map", metawire.ErrUnavailable, id)
		} else if rep, err = f.callOnce(ctx, addr, id, wire.ReqID{}, op, msg); err == nil {
			return metawire.Unmarshal(rep.Msg, resp)
		}
		if !errors.Is(err, metawire.ErrStaleEpoch) && !errors.Is(err, metawire.ErrUnavailable) {
			break
		}
		f.refreshMap(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
	return fmt.Errorf("client: island %d: %w", id, err)
}

// LiveBytes sums every island's per-stripe live bytes. Stripes that no
// committed block ever pointed into are absent (their live bytes are 0).
func (f *FS) LiveBytes(ctx context.Context) (map[fragment.StripeID]int64, error) {
	ids, err := f.islandIDs()
	if err != nil {
		return nil, err
	}
	out := map[fragment.StripeID]int64{}
	for _, id := range ids {
		req := metawire.LiveReq{First: true, Limit: 5000}
		for {
			var resp metawire.LiveResp
			if err := f.callIsland(ctx, id, metawire.OpLiveBytes, &req, &resp); err != nil {
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

// ForgetStripes tells every island to drop the (zero) live counters of
// stripes the cleaner deleted. It returns how many counters were dropped
// and how many were kept because they were not zero.
func (f *FS) ForgetStripes(ctx context.Context, ids []fragment.StripeID) (dropped, kept int, err error) {
	islands, err := f.islandIDs()
	if err != nil {
		return 0, 0, err
	}
	for len(ids) > 0 {
		n := min(len(ids), metawire.MaxForget)
		req := metawire.ForgetReq{Stripes: make([]metawire.StripeLive, n)}
		for i, id := range ids[:n] {
			req.Stripes[i] = metawire.StripeLive{Log: id.Log, Seq: id.Seq}
		}
		for _, island := range islands {
			var resp metawire.ForgetResp
			if err := f.callIsland(ctx, island, metawire.OpForget, &req, &resp); err != nil {
				return dropped, kept, fmt.Errorf("forget stripes: %w", err)
			}
			dropped, kept = dropped+int(resp.Dropped), kept+int(resp.Kept)
		}
		ids = ids[n:]
	}
	return dropped, kept, nil
}

// StripeRefs lists every block, in every island, that points into s.
func (f *FS) StripeRefs(ctx context.Context, s fragment.StripeID) ([]metawire.BlockRef, error) {
	ids, err := f.islandIDs()
	if err != nil {
		return nil, err
	}
	var out []metawire.BlockRef
	for _, id := range ids {
		var resp metawire.RefsResp
		if err := f.callIsland(ctx, id, metawire.OpStripeRefs, &metawire.RefsReq{Log: s.Log, Seq: s.Seq}, &resp); err != nil {
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

// BlockMove is one block to copy into a stripe of Policy and repoint: the
// cleaner's, a drain's and a re-striping's unit of work.
type BlockMove struct {
	Ino, Index uint64
	Old        []byte // the encoded pointer the island holds for the block
	Policy     layout.Policy
}

// MoveHooks let the caller pace a move and observe its steps.
type MoveHooks struct {
	// Copied is called after each block is copied with its size (the
	// cleaner's throttle).
	Copied func(ctx context.Context, n int64) error
	// BeforeCommit is called once the copies are durable and before the
	// deltas are sent (the cleaner's failpoint).
	BeforeCommit func() error
}

// MoveBlocks copies blocks into logs of their new policies, makes the
// copies durable, then replaces each block's pointer only if the island
// still holds Old (a conditional cleaner delta, so a concurrent writer's
// newer block always wins). It reports, in order, which moves were
// applied, and the bytes copied. Each Policy's BlockSize is raised to its
// FragmentSize so every block stays one pointer.
func (f *FS) MoveBlocks(ctx context.Context, moves []BlockMove, h MoveHooks) ([]bool, int64, error) {
	type pending struct {
		log  *Log
		ptrs []layout.Pointer
	}
	logs := map[*Log]*pending{}
	deltas := make([]metawire.CleanDelta, 0, len(moves))
	var copied int64
	for _, m := range moves {
		old, rest, err := layout.DecodePointer(m.Old)
		if err != nil || len(rest) != 0 {
			return nil, copied, fmt.Errorf("client: move block %d of %s: %w", m.Index, namespace.Ino(m.Ino), layout.ErrBadPointer)
		}
		buf := make([]byte, old.Length)
		if err := f.data.Read(ctx, &old, buf); err != nil {
			return nil, copied, fmt.Errorf("client: move block %d of %s: %w: %v", m.Index, namespace.Ino(m.Ino), metawire.ErrIO, err)
		}
		pol := m.Policy
		pol.BlockSize = pol.FragmentSize
		l, err := f.data.Log(ctx, pol)
		if err != nil {
			return nil, copied, fmt.Errorf("client: move block %d of %s: %w", m.Index, namespace.Ino(m.Ino), err)
		}
		np, err := l.AppendBlock(ctx, buf)
		if err != nil {
			return nil, copied, fmt.Errorf("client: move block %d of %s: %w: %v", m.Index, namespace.Ino(m.Ino), metawire.ErrIO, err)
		}
		pd := logs[l]
		if pd == nil {
			pd = &pending{log: l}
			logs[l] = pd
		}
		pd.ptrs = append(pd.ptrs, np)
		deltas = append(deltas, metawire.CleanDelta{Ino: m.Ino, Index: m.Index, Old: m.Old, New: np.AppendBinary(nil)})
		copied += int64(len(buf))
		if h.Copied != nil {
			if err := h.Copied(ctx, int64(len(buf))); err != nil {
				return nil, copied, err
			}
		}
	}
	for _, pd := range logs {
		if err := pd.log.Sync(ctx, pd.ptrs); err != nil {
			return nil, copied, fmt.Errorf("client: move: %w: %v", metawire.ErrIO, err)
		}
	}
	if h.BeforeCommit != nil {
		if err := h.BeforeCommit(); err != nil {
			return nil, copied, err
		}
	}
	if len(deltas) == 0 {
		return nil, copied, nil
	}
	applied, err := f.Clean(ctx, deltas)
	return applied, copied, err
}

// Restripe rewrites a regular file's blocks that are not stored under its
// current policy, through MoveBlocks: a concurrent writer's newer block
// always wins. It returns how many blocks moved. Directories and inline
// files have nothing to move. The old stripes are left to the cleaner.
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
	ptrs, err := f.BlockPointers(ctx, cred, ino)
	if err != nil {
		return 0, err
	}
	var moves []BlockMove
	for idx, p := range ptrs {
		if p.Kind != pol.Kind || int(p.K) != pol.K || int(p.M) != pol.M {
			moves = append(moves, BlockMove{Ino: ino, Index: idx, Old: p.AppendBinary(nil), Policy: pol})
		}
	}
	sort.Slice(moves, func(i, j int) bool { return moves[i].Index < moves[j].Index })
	moved := 0
	// Batches bound the memory held and the work lost to a failure.
	for len(moves) > 0 {
		n := min(256, len(moves))
		applied, _, err := f.MoveBlocks(ctx, moves[:n], MoveHooks{})
		if err != nil {
			return moved, fmt.Errorf("client: restripe %s: %w", namespace.Ino(ino), err)
		}
		for _, ok := range applied {
			if ok {
				moved++
			}
		}
		moves = moves[n:]
	}
	return moved, nil
}
