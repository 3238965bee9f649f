package islandload

import (
	"context"
	"fmt"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Load is one sample: operations per second by table entry (at the
// table's depth) and by island, over Window, and the file bytes per
// second committed by the same (Archipelago's two measures; plans
// balance operations).
type Load struct {
	Depth        uint8
	Window       time.Duration
	Entries      map[uint32]float64
	Islands      map[namespace.IslandID]float64
	EntryBytes   map[uint32]float64
	IslandsBytes map[namespace.IslandID]float64
}

// Spread is the standard deviation of the islands' loads over their mean.
func (l Load) Spread() float64 { return namespace.Spread(l.Islands) }

// Plan is the entry moves that bring the measured islands' load within
// tolerance (namespace.PlanByLoad over m's table and the islands l
// measured, every one not out).
func Plan(m *cluster.Map, l Load, tolerance float64) ([]cluster.EntryMove, error) {
	keep := make([]namespace.IslandID, 0, len(l.Islands))
	for id := range l.Islands {
		keep = append(keep, id)
	}
	plan, err := namespace.PlanByLoad(m.NamespaceTable(), l.Entries, keep, tolerance)
	if err != nil {
		return nil, err
	}
	moves := make([]cluster.EntryMove, len(plan))
	for k, mv := range plan {
		moves[k] = cluster.EntryMove{Entry: mv.Entry, From: uint32(mv.From), To: uint32(mv.To)}
	}
	return moves, nil
}

// since is a counter's growth from was to now (all of now if the counter
// went back, which a new incarnation's does).
func since(now, was uint64) uint64 {
	if was <= now {
		return now - was
	}
	return now
}

// Sample measures the load of every island of m that is not out over
// window (the table must not change depth meanwhile).
func Sample(ctx context.Context, m *cluster.Map, key *auth.Key, window time.Duration) (Load, error) {
	if !m.Formatted {
		return Load{}, fmt.Errorf("islandload: the namespace is not formatted")
	}
	pool := wire.NewPool(wire.ClientConfig{Key: key}, 1)
	defer pool.Close()
	depth := m.Table.Depth
	read := func() (map[uint32]metawire.EntryLoadResp, error) {
		out := map[uint32]metawire.EntryLoadResp{}
		for _, is := range m.Islands {
			if is.State == cluster.StateOut {
				continue
			}
			rep, err := pool.CallRoute(ctx, is.Addr, is.ID, wire.ReqID{}, metawire.OpEntryLoad, m.Epoch,
				metawire.Marshal(&metawire.EntryLoadReq{Depth: depth}), nil, nil)
			if err != nil {
				return nil, fmt.Errorf("islandload: island %d (%s): %w", is.ID, is.Addr, metawire.RemoteErr(err))
			}
			var r metawire.EntryLoadResp
			if err := metawire.Unmarshal(rep.Msg, &r); err != nil {
				return nil, fmt.Errorf("islandload: island %d: %w", is.ID, err)
			}
			out[is.ID] = r
		}
		return out, nil
	}
	first, err := read()
	if err != nil {
		return Load{}, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return Load{}, ctx.Err()
	case <-time.After(window):
	}
	second, err := read()
	if err != nil {
		return Load{}, err
	}
	secs := time.Since(start).Seconds()
	l := Load{Depth: depth, Window: time.Since(start), Entries: map[uint32]float64{}, Islands: map[namespace.IslandID]float64{},
		EntryBytes: map[uint32]float64{}, IslandsBytes: map[namespace.IslandID]float64{}}
	for id, r := range second {
		is := namespace.IslandID(id)
		l.Islands[is], l.IslandsBytes[is] = 0, 0
		was := map[uint32]metawire.EntryLoad{}
		if p, ok := first[id]; ok && p.Boot == r.Boot {
			for _, x := range p.Entries {
				was[x.Entry] = x
			}
		}
		for _, x := range r.Entries {
			w := was[x.Entry]
			rate, brate := float64(since(x.Ops, w.Ops))/secs, float64(since(x.Bytes, w.Bytes))/secs
			l.Entries[x.Entry] += rate
			l.Islands[is] += rate
			l.EntryBytes[x.Entry] += brate
			l.IslandsBytes[is] += brate
		}
	}
	return l, nil
}
