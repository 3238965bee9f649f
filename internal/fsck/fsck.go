// Package fsck checks a whole running cluster: the namespace across every
// island (meta.Fsck: no dangling entries, no orphan inodes, link counts,
// open intents) and, on the storage servers, that every stripe a block
// pointer references still has fragments.
package fsck

import (
	"context"
	"fmt"
	"github.com/atoll-fs/atoll/internal/auth"
	"sort"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/meta"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Report is a cluster check's result.
type Report struct {
	Namespace      meta.Report
	StripesChecked int
	// MissingStripes are referenced stripes with no fragment on any
	// reachable storage server.
	MissingStripes []fragment.StripeID
	// Unreachable lists members that could not be asked.
	Unreachable []string
}

// Clean reports whether nothing is wrong.
func (r *Report) Clean() bool {
	return r.Namespace.Clean() && len(r.MissingStripes) == 0 && len(r.Unreachable) == 0
}

// Problems lists every problem as text.
func (r *Report) Problems() []string {
	out := append([]string(nil), r.Namespace.Problems...)
	for _, s := range r.MissingStripes {
		out = append(out, fmt.Sprintf("stripe %s is referenced by a block pointer but has no fragment on any storage server", s))
	}
	for _, u := range r.Unreachable {
		out = append(out, "unreachable: "+u)
	}
	return out
}

// Run checks the cluster described by m, authenticating with key (an
// admin key; nil only for in-process tests).
func Run(ctx context.Context, m *cluster.Map, key *auth.Key) (*Report, error) {
	if !m.Formatted {
		return nil, fmt.Errorf("fsck: the namespace is not formatted yet")
	}
	pool := wire.NewPool(wire.ClientConfig{Key: key}, 1)
	defer pool.Close()
	rep := &Report{}
	var srcs []meta.FsckSource
	for _, is := range m.Islands {
		if is.State == cluster.StateOut {
			continue
		}
		srcs = append(srcs, meta.WireFsckSource(pool, namespace.IslandID(is.ID), is.Addr))
	}
	nr, err := meta.Fsck(ctx, srcs)
	if err != nil {
		return nil, fmt.Errorf("fsck: namespace: %w", err)
	}
	rep.Namespace = nr

	// Which stripes exist: list each referenced log on every server.
	want := map[fragment.StripeID]bool{}
	minSeq := map[uint64]uint64{}
	for _, s := range nr.Stripes {
		want[s] = false
		if v, ok := minSeq[s.Log]; !ok || s.Seq < v {
			minSeq[s.Log] = s.Seq
		}
	}
	rep.StripesChecked = len(want)
	for _, st := range m.Storage {
		if st.State == cluster.StateOut {
			continue
		}
		for log, from := range minSeq {
			if err := listLog(ctx, pool, st.Addr, log, from, want); err != nil {
				rep.Unreachable = append(rep.Unreachable, fmt.Sprintf("storage slot %d (%s): %v", st.Slot, st.Addr, err))
				break
			}
		}
	}
	for s, found := range want {
		if !found {
			rep.MissingStripes = append(rep.MissingStripes, s)
		}
	}
	sort.Slice(rep.MissingStripes, func(i, j int) bool {
		a, b := rep.MissingStripes[i], rep.MissingStripes[j]
		return a.Log < b.Log || a.Log == b.Log && a.Seq < b.Seq
	})
	return rep, nil
}

// listLog pages through one log's fragments on one server, marking the
// stripes found.
func listLog(ctx context.Context, pool *wire.Pool, addr string, log, from uint64, want map[fragment.StripeID]bool) error {
	for {
		rep, err := pool.Call(ctx, addr, fragment.OpList, 0, fragment.Marshal(&fragment.ListReq{Log: log, FromSeq: from, Limit: 10000}), nil, nil)
		if err != nil {
			return fragment.RemoteErr(err)
		}
		var lr fragment.ListResp
		if err := fragment.Unmarshal(rep.Msg, &lr); err != nil {
			return err
		}
		for _, id := range lr.IDs {
			if _, ok := want[id.Stripe()]; ok {
				want[id.Stripe()] = true
			}
		}
		if len(lr.IDs) < 10000 {
			return nil
		}
		last := lr.IDs[len(lr.IDs)-1]
		if last.Seq == ^uint64(0) {
			return nil
		}
		from = last.Seq + 1
	}
}
