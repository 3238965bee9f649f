package namespace

import (
	"container/heap"
	"fmt"
	"math"
	"slices"
)

// Move reassigns table entry Entry of a table at depth Depth from island
// From to island To. A table shallower than Depth is split first (see
// Apply); at a greater depth the move covers every entry Entry splits into.
type Move struct {
	Depth    uint8
	Entry    uint32
	From, To IslandID
}

func (m Move) String() string {
	return fmt.Sprintf("entry %d/%d: island %d -> %d", m.Entry, m.Depth, m.From, m.To)
}

// PlanRebalance plans moves of table entries that even out the load of
// the islands (Archipelago §5.2). islands is the set the table should be
// shared among: an island in it that owns no entry is being added, an
// owner missing from it is being removed and all its entries move off it.
//
// load gives each island's measured load in any unit (operations per
// second, inodes, ...); a missing island counts as 0. Each entry of an
// island is estimated to carry an equal part of the island's load. If load
// is nil or sums to 0 over the owners and islands, every entry counts as
// one unit, which balances entry counts.
//
// The mean M is the total load over len(islands). An island of the list
// is a source if its load is above M and a destination if below; roles are
// fixed for the whole plan, so every entry moves at most once, only from a
// removed island or a source, only to a destination, and never back (no
// ping-pong). A source gives entries to the least loaded destination while
// it is still above M, the destination still below M, and the move lowers
// the sum of squared deviations from M (the entry's load is less than the
// gap between them). Removed islands' entries fill the least loaded
// destinations up to M first, in runs of consecutive entries; only if no
// island is below M (possible when the removed islands carry no load) do
// they go to the least loaded island. With equal load per entry the result
// gives every island floor or ceil of its fair share of entries.
//
// The plan works at a depth of its choosing, at least t.Depth: the table is
// split until it has MinEntriesPerIsland entries per island and until no
// entry that may move carries more than 2/MinEntriesPerIsland of M (or
// MaxDepth is reached). All moves carry that depth; Apply splits the table
// to it. PlanRebalance returns no moves when nothing can be improved.
func PlanRebalance(t Table, load map[IslandID]float64, islands []IslandID) ([]Move, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	keep, err := sortedIslands(islands)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRebalance, err)
	}
	if len(keep) > 1<<MaxDepth {
		return nil, fmt.Errorf("%w: %d islands for at most %d entries", ErrBadRebalance, len(keep), 1<<MaxDepth)
	}
	for id, v := range load {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%w: island %d has load %v", ErrBadRebalance, id, v)
		}
	}

	p := newPlanner(t, load, keep)
	depth := p.planDepth()
	if depth > t.Depth {
		t = t.splitTo(depth)
	}
	p.assign(t)
	p.drainRemoved()
	p.balance()
	return p.moves, nil
}

// planIsland is the planner's view of one island.
type planIsland struct {
	id      IslandID
	keep    bool     // in the target list
	src     bool     // a target island above the mean at the start
	dst     bool     // a target island below the mean at the start
	count   int      // entries owned in the original table
	load    float64  // projected load
	perEnt  float64  // estimated load of one entry at the plan's depth
	entries []uint32 // entries owned at the plan's depth, ascending
}

type planner struct {
	orig  uint8
	isl   []*planIsland // sorted by id: owners and target islands
	keep  []*planIsland // target islands
	mean  float64
	eps   float64
	depth uint8
	moves []Move
}

func newPlanner(t Table, load map[IslandID]float64, keep []IslandID) *planner {
	counts := t.Counts()
	ids := slices.Concat(keep, t.Islands())
	slices.Sort(ids)
	ids = slices.Compact(ids)
	p := &planner{orig: t.Depth}
	total := 0.0
	for _, id := range ids {
		total += load[id]
	}
	for _, id := range ids {
		is := &planIsland{id: id, count: counts[id], load: load[id]}
		if total == 0 {
			is.load = float64(is.count)
		}
		_, is.keep = slices.BinarySearch(keep, id)
		p.isl = append(p.isl, is)
		if is.keep {
			p.keep = append(p.keep, is)
		}
	}
	if total == 0 {
		total = float64(len(t.Entries))
	}
	p.mean = total / float64(len(keep))
	p.eps = 1e-9 * p.mean
	for _, is := range p.keep {
		is.src = is.count > 0 && is.load > p.mean+p.eps
		is.dst = is.load < p.mean-p.eps
	}
	return p
}

// gives reports whether is may lose entries: it is removed or a source.
func (p *planner) gives(is *planIsland) bool {
	return is.src || (!is.keep && is.count > 0)
}

// depth returns the depth the plan works at (see PlanRebalance).
func (p *planner) planDepth() uint8 {
	d := p.orig
	for d < MaxDepth && 1<<d < MinEntriesPerIsland*len(p.keep) {
		d++
	}
	for ; d < MaxDepth; d++ {
		coarse := false
		for _, is := range p.isl {
			if p.gives(is) && is.load/float64(is.count<<(d-p.orig))*MinEntriesPerIsland > 2*p.mean+p.eps {
				coarse = true
				break
			}
		}
		if !coarse {
			break
		}
	}
	return d
}

// assign records the entries of t (at the plan's depth) per island.
func (p *planner) assign(t Table) {
	p.depth = t.Depth
	byID := make(map[IslandID]*planIsland, len(p.isl))
	for _, is := range p.isl {
		byID[is.id] = is
	}
	for i, id := range t.Entries {
		is := byID[id]
		is.entries = append(is.entries, uint32(i))
	}
	for _, is := range p.isl {
		if n := len(is.entries); n > 0 {
			is.perEnt = is.load / float64(n)
		}
	}
}

func (p *planner) move(from, to *planIsland, entry uint32) {
	p.moves = append(p.moves, Move{Depth: p.depth, Entry: entry, From: from.id, To: to.id})
	from.load -= from.perEnt
	to.load += from.perEnt
	to.entries = append(to.entries, entry)
}

// lighter orders islands by projected load, then entry count, then id.
func lighter(a, b *planIsland) bool {
	if a.load != b.load {
		return a.load < b.load
	}
	if len(a.entries) != len(b.entries) {
		return len(a.entries) < len(b.entries)
	}
	return a.id < b.id
}

// drainRemoved moves every entry of removed islands.
func (p *planner) drainRemoved() {
	var sticky *planIsland
	for _, r := range p.isl {
		if r.keep {
			continue
		}
		for _, e := range r.entries {
			if sticky == nil || r.perEnt == 0 || sticky.load+r.perEnt > p.mean+p.eps {
				if sticky = p.lightest(true); sticky == nil {
					sticky = p.lightest(false)
				}
			}
			p.move(r, sticky, e)
		}
		r.entries = nil
	}
}

// lightest returns the lightest target island, only among those below the
// mean if below is set (nil if there is none).
func (p *planner) lightest(below bool) *planIsland {
	var best *planIsland
	for _, is := range p.keep {
		if below && is.load >= p.mean-p.eps {
			continue
		}
		if best == nil || lighter(is, best) {
			best = is
		}
	}
	return best
}

// balance moves entries from sources to destinations.
func (p *planner) balance() {
	src := &islandHeap{less: func(a, b *planIsland) bool { return lighter(b, a) }}
	dst := &islandHeap{less: lighter}
	for _, is := range p.keep {
		switch {
		case is.src:
			src.s = append(src.s, is)
		case is.dst:
			dst.s = append(dst.s, is)
		}
	}
	heap.Init(src)
	heap.Init(dst)
	for src.Len() > 0 && dst.Len() > 0 {
		s, d := src.s[0], dst.s[0]
		switch {
		case s.load <= p.mean+p.eps || len(s.entries) == 0 || s.perEnt == 0:
			heap.Pop(src)
		case d.load >= p.mean-p.eps:
			heap.Pop(dst)
		case s.perEnt >= s.load-d.load-p.eps:
			// d is the lightest destination, so s helps none; and
			// destinations only get heavier.
			heap.Pop(src)
		default:
			e := s.entries[len(s.entries)-1]
			s.entries = s.entries[:len(s.entries)-1]
			p.move(s, d, e)
			heap.Fix(src, 0)
			heap.Fix(dst, 0)
		}
	}
}

type islandHeap struct {
	s    []*planIsland
	less func(a, b *planIsland) bool
}

func (h *islandHeap) Len() int           { return len(h.s) }
func (h *islandHeap) Less(i, j int) bool { return h.less(h.s[i], h.s[j]) }
func (h *islandHeap) Swap(i, j int)      { h.s[i], h.s[j] = h.s[j], h.s[i] }
func (h *islandHeap) Push(x any)         { h.s = append(h.s, x.(*planIsland)) }
func (h *islandHeap) Pop() any {
	x := h.s[len(h.s)-1]
	h.s = h.s[:len(h.s)-1]
	return x
}
