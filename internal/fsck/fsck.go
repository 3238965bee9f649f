// Package fsck checks a whole running cluster: the namespace across every
// island (meta.Fsck: no dangling entries, no orphan inodes, link counts,
// open intents) and, on the storage servers, that every stripe a block
// pointer references still has fragments.
//
// The cluster keeps serving while it is checked, and its cleaner keeps
// moving live blocks out of sparse stripes and deleting stripes nothing
// points into. The namespace pass comes first and the storage listing
// after it, so a stripe the pass saw referenced may be gone by the
// listing without anything being wrong: its blocks moved (or its file was
// removed) and the cleaner deleted it in between. A stripe the listing
// did not find is therefore reported only if some island still has a
// block pointing into it once the listing is done (metawire.OpStripeRefs);
// one that no island references any more is counted in
// Report.GoneDuringCheck.
package fsck

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/meta"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// FailAfterNamespace fires between the namespace pass and the storage
// listing (tests change the cluster there).
const FailAfterNamespace = "fsck.afterNamespace"

func init() { faults.Register(FailAfterNamespace) }

// Report is a cluster check's result.
type Report struct {
	Namespace      meta.Report
	StripesChecked int
	// MissingStripes are referenced stripes with no fragment on any
	// reachable storage server.
	MissingStripes []fragment.StripeID
	// GoneDuringCheck counts the stripes the namespace pass saw
	// referenced that were deleted before the listing and that no island
	// references any more (the cleaner moved their blocks, or their files
	// went): not a problem.
	GoneDuringCheck int
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
	return Checker{Key: key}.Run(ctx, m)
}

// Checker checks clusters.
type Checker struct {
	// Key authenticates the checker (an admin key; nil only for
	// in-process tests).
	Key *auth.Key
	// Faults arms the package's failpoints (tests); nil in production.
	Faults *faults.Set
	// Refresh, when set, fetches the current cluster map. The re-check of
	// a stripe the listing did not find must ask every island of the
	// current map (islands refuse requests with an older epoch, so that
	// a new island is never left out); without Refresh a map that moved
	// on during the check makes the stripe count as missing and the
	// islands as unreachable.
	Refresh func(ctx context.Context) (*cluster.Map, error)
}

// unavailableFor bounds how long the namespace pass waits for an island
// with no serving leader (an election, a leader still opening its
// island, a restart) before it reports the error.
const unavailableFor = 30 * time.Second

// retrySource reads one island's pages, asking again while the island is
// between leaders: a check started right after the cluster came up, or
// during a failover, should not fail on a pause the clients ride out.
type retrySource struct {
	c    Checker
	pool *wire.Pool
	id   namespace.IslandID
	addr string
}

func (s *retrySource) FsckPage(ctx context.Context, cursor []byte) (page *metawire.FsckResp, err error) {
	err = s.c.untilLed(ctx, func(m *cluster.Map) error {
		if m != nil {
			// The island's address may have moved with its leader.
			for _, is := range m.Islands {
				if namespace.IslandID(is.ID) == s.id && is.Addr != "" {
					s.addr = is.Addr
				}
			}
		}
		page, err = meta.WireFsckSource(s.pool, s.id, s.addr).FsckPage(ctx, cursor)
		return err
	})
	return page, err
}

// untilLed calls try until it succeeds, fails for another reason than an
// island between leaders or an out-of-date map (when c.Refresh can fetch
// a newer one), or unavailableFor has
// passed. After a failure try gets a fresh map (when c.Refresh can
// fetch one), else nil.
func (c Checker) untilLed(ctx context.Context, try func(*cluster.Map) error) error {
	deadline := time.Now().Add(unavailableFor)
	wait := 50 * time.Millisecond
	var m *cluster.Map
	for {
		err := try(m)
		// Without a newer map, asking again with the old one is futile.
		again := errors.Is(err, metawire.ErrUnavailable) || errors.Is(err, metawire.ErrStaleEpoch) && c.Refresh != nil
		if err == nil || !again || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
		m = nil
		if c.Refresh != nil {
			if nm, rerr := c.Refresh(ctx); rerr == nil {
				m = nm
			}
		}
	}
}

// Run checks the cluster described by m.
func (c Checker) Run(ctx context.Context, m *cluster.Map) (*Report, error) {
	key := c.Key
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
		srcs = append(srcs, &retrySource{c: c, pool: pool, id: namespace.IslandID(is.ID), addr: is.Addr})
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
	if err := c.Faults.Hit(FailAfterNamespace); err != nil {
		return nil, fmt.Errorf("fsck: %w", err)
	}
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
			referenced, err := c.stillReferenced(ctx, pool, &m, s)
			switch {
			case err != nil:
				rep.Unreachable = append(rep.Unreachable, err.Error())
				rep.MissingStripes = append(rep.MissingStripes, s)
			case referenced:
				rep.MissingStripes = append(rep.MissingStripes, s)
			default:
				rep.GoneDuringCheck++
			}
		}
	}
	sort.Slice(rep.MissingStripes, func(i, j int) bool {
		a, b := rep.MissingStripes[i], rep.MissingStripes[j]
		return a.Log < b.Log || a.Log == b.Log && a.Seq < b.Seq
	})
	return rep, nil
}

// stillReferenced reports whether some island has a block pointing into
// stripe s now (after the listing that did not find it), asking the
// islands of *m, or of a newer map (which it stores in *m) when an island
// says *m is out of date or is between leaders.
func (c Checker) stillReferenced(ctx context.Context, pool *wire.Pool, m **cluster.Map, s fragment.StripeID) (referenced bool, err error) {
	err = c.untilLed(ctx, func(nm *cluster.Map) error {
		if nm != nil {
			*m = nm
		}
		referenced, err = stillReferencedIn(ctx, pool, *m, s)
		return err
	})
	return referenced, err
}

func stillReferencedIn(ctx context.Context, pool *wire.Pool, m *cluster.Map, s fragment.StripeID) (bool, error) {
	for _, is := range m.Islands {
		if is.State == cluster.StateOut {
			continue
		}
		reply, err := pool.CallRoute(ctx, is.Addr, is.ID, wire.ReqID{}, metawire.OpStripeRefs, m.Epoch, metawire.Marshal(&metawire.RefsReq{Log: s.Log, Seq: s.Seq}), nil, nil)
		if err != nil {
			return false, fmt.Errorf("island %d (%s): blocks of stripe %s: %w", is.ID, is.Addr, s, metawire.RemoteErr(err))
		}
		var resp metawire.RefsResp
		if err := metawire.Unmarshal(reply.Msg, &resp); err != nil {
			return false, fmt.Errorf("island %d (%s): blocks of stripe %s: %v", is.ID, is.Addr, s, err)
		}
		for _, r := range resp.Refs {
			// The reverse index is written with the pointers it
			// describes; the pointer itself decides.
			p, _, err := layout.DecodePointer(r.Ptr)
			if err != nil || p.Stripe == s {
				return true, nil
			}
		}
	}
	return false, nil
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
