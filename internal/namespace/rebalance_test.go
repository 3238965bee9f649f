package namespace

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// planAndApply plans, checks the plan's invariants and returns the new
// table.
func planAndApply(t *testing.T, tab Table, load map[IslandID]float64, islands []IslandID) (Table, []Move) {
	t.Helper()
	moves, err := PlanRebalance(tab, load, islands)
	if err != nil {
		t.Fatalf("PlanRebalance: %v", err)
	}
	checkPlan(t, tab, load, islands, moves)
	if len(moves) == 0 {
		return tab, nil
	}
	u, err := Apply(tab, moves)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := u.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, id := range u.Entries {
		if !slices.Contains(islands, id) {
			t.Fatalf("island %d still owns entries", id)
		}
	}
	return u, moves
}

// checkPlan replays moves against the estimated loads PlanRebalance
// documents and checks that every move goes from a removed island or one
// above the mean (at the start and at the time of the move) to an island
// below the mean at the start, that roles never swap and that each entry
// moves once.
func checkPlan(t *testing.T, tab Table, load map[IslandID]float64, islands []IslandID, moves []Move) {
	t.Helper()
	if len(moves) == 0 {
		return
	}
	d := moves[0].Depth
	split := tab.splitTo(d)
	counts := split.Counts()
	total := 0.0
	all := slices.Concat(islands, tab.Islands())
	slices.Sort(all)
	all = slices.Compact(all)
	for _, id := range all {
		total += load[id]
	}
	cur := map[IslandID]float64{}
	for _, id := range all {
		if total == 0 {
			cur[id] = float64(counts[id])
		} else {
			cur[id] = load[id]
		}
	}
	if total == 0 {
		total = float64(len(split.Entries))
	}
	mean := total / float64(len(islands))
	eps := 1e-6 * mean
	start := maps(cur)
	per := map[IslandID]float64{}
	for id, c := range counts {
		per[id] = cur[id] / float64(c)
	}
	moved := map[uint32]bool{}
	gave, got := map[IslandID]bool{}, map[IslandID]bool{}
	for _, m := range moves {
		if m.Depth != d {
			t.Fatalf("moves at depths %d and %d", d, m.Depth)
		}
		if moved[m.Entry] {
			t.Fatalf("%v: entry moved twice", m)
		}
		moved[m.Entry] = true
		if split.Entries[m.Entry] != m.From {
			t.Fatalf("%v: entry belongs to %d", m, split.Entries[m.Entry])
		}
		removed := !slices.Contains(islands, m.From)
		if !removed && (start[m.From] <= mean+eps || cur[m.From] <= mean+eps) {
			t.Fatalf("%v: takes from island at %.4g (started %.4g), mean %.4g", m, cur[m.From], start[m.From], mean)
		}
		if !slices.Contains(islands, m.To) {
			t.Fatalf("%v: to an island being removed", m)
		}
		if start[m.To] >= mean-eps && !(removed && per[m.From] == 0) {
			t.Fatalf("%v: gives to island that started at %.4g, mean %.4g", m, start[m.To], mean)
		}
		gave[m.From], got[m.To] = true, true
		if gave[m.To] || got[m.From] {
			t.Fatalf("%v: ping-pong", m)
		}
		cur[m.From] -= per[m.From]
		cur[m.To] += per[m.From]
	}
}

func maps(m map[IslandID]float64) map[IslandID]float64 {
	c := make(map[IslandID]float64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func spread(tab Table, islands []IslandID) (lo, hi int) {
	c := tab.Counts()
	lo, hi = len(tab.Entries), 0
	for _, id := range islands {
		lo, hi = min(lo, c[id]), max(hi, c[id])
	}
	return lo, hi
}

func TestRebalanceAddIsland(t *testing.T) {
	tab, _ := NewTable([]IslandID{1, 2, 3}, DepthFor(3)) // 64 entries: 21, 21, 22
	islands := []IslandID{1, 2, 3, 4}
	u, moves := planAndApply(t, tab, map[IslandID]float64{1: 210, 2: 210, 3: 220}, islands)
	if len(moves) != 16 || u.Depth != 6 {
		t.Fatalf("%d moves at depth %d: %v", len(moves), u.Depth, moves)
	}
	for _, m := range moves {
		if m.To != 4 {
			t.Errorf("%v: new island should get everything", m)
		}
	}
	if lo, hi := spread(u, islands); lo != 16 || hi != 16 {
		t.Errorf("after adding: %d..%d entries", lo, hi)
	}
	// Each old island gives from the end of its run: island 4 gets three
	// runs, the others keep one each.
	if runs := len(slices.Compact(slices.Clone(u.Entries))); runs != 6 {
		t.Errorf("%d runs: %v", runs, u.Entries)
	}
	// The same plan with no load measured.
	if u2, _ := planAndApply(t, tab, nil, islands); !slices.Equal(u2.Entries, u.Entries) {
		t.Errorf("nil load planned differently")
	}
}

func TestRebalanceRemoveIsland(t *testing.T) {
	tab, _ := NewTable([]IslandID{1, 2, 3, 4}, DepthFor(4))
	islands := []IslandID{1, 2, 3}
	u, moves := planAndApply(t, tab, nil, islands)
	if len(moves) != 16 {
		t.Errorf("%d moves, want the 16 entries of island 4", len(moves))
	}
	for _, m := range moves {
		if m.From != 4 {
			t.Errorf("%v: only island 4 should give", m)
		}
	}
	if lo, hi := spread(u, islands); lo != 21 || hi != 22 {
		t.Errorf("after removing: %d..%d entries", lo, hi)
	}
	// Island 4's entries leave in runs, not one by one round robin.
	if runs := len(slices.Compact(slices.Clone(u.Entries))); runs > 7 {
		t.Errorf("%d runs: %v", runs, u.Entries)
	}
}

func TestRebalanceRemoveIdleIsland(t *testing.T) {
	// The removed island carries no load and the others are balanced: its
	// entries must still go, to the least loaded islands.
	tab, _ := NewTable([]IslandID{1, 2, 3}, 6)
	u, moves := planAndApply(t, tab, map[IslandID]float64{1: 10, 2: 10, 3: 0}, []IslandID{1, 2})
	if len(moves) != 22 || slices.Contains(u.Entries, 3) {
		t.Errorf("%d moves", len(moves))
	}
}

func TestRebalanceSkewedLoad(t *testing.T) {
	tab, _ := NewTable([]IslandID{1, 2, 3, 4}, 6) // 16 entries each
	load := map[IslandID]float64{1: 400, 2: 100, 3: 100, 4: 100}
	u, moves := planAndApply(t, tab, load, []IslandID{1, 2, 3, 4})
	// Island 1's entries carry 25, more than 1/8 of the mean of 175, so the
	// table splits once; then 18 entries of 12.5 bring island 1 to the
	// mean and each other island gets 6 (75).
	got := map[IslandID]int{}
	for _, m := range moves {
		if m.From != 1 {
			t.Errorf("%v: only the hot island gives", m)
		}
		got[m.To]++
	}
	if u.Depth != 7 || len(moves) != 18 || got[2] != 6 || got[3] != 6 || got[4] != 6 {
		t.Errorf("depth %d, moves %v", u.Depth, got)
	}
	if c := u.Counts(); c[1] != 14 {
		t.Errorf("hot island keeps %d entries", c[1])
	}

	// Milder skew: no split. Entries of island 1 carry 15.625; it gives
	// until it is below the mean (175) or a move would not help.
	load = map[IslandID]float64{1: 250, 2: 150, 3: 150, 4: 150}
	u, moves = planAndApply(t, tab, load, []IslandID{1, 2, 3, 4})
	if u.Depth != 6 || len(moves) != 5 {
		t.Errorf("depth %d, moves %v", u.Depth, moves)
	}
	est := estimate(u, tab, load)
	for id, v := range est {
		if math.Abs(v-175) > 15.625 {
			t.Errorf("island %d estimated at %.2f after", id, v)
		}
	}

	// A hot island with few entries: the table is split so it can give
	// away part of what it holds.
	tab = Table{Depth: 2, Entries: []IslandID{1, 2, 2, 2}}
	u, moves = planAndApply(t, tab, map[IslandID]float64{1: 90, 2: 30}, []IslandID{1, 2})
	if len(moves) == 0 || u.Depth <= DepthFor(2) {
		t.Fatalf("depth %d, %d moves", u.Depth, len(moves))
	}
	est = estimate(u, tab, map[IslandID]float64{1: 90, 2: 30})
	if math.Abs(est[1]-est[2]) > 120.0/8 {
		t.Errorf("estimated loads after: %v", est)
	}
}

// estimate returns each island's load after the change from old to u,
// spreading each island's old load evenly over its old entries.
func estimate(u, old Table, load map[IslandID]float64) map[IslandID]float64 {
	old = old.splitTo(u.Depth)
	c := old.Counts()
	est := map[IslandID]float64{}
	for i, id := range u.Entries {
		est[id] += load[old.Entries[i]] / float64(c[old.Entries[i]])
	}
	return est
}

func TestRebalanceBalancedNoMoves(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		ids := make([]IslandID, n)
		for i := range ids {
			ids[i] = IslandID(i + 1)
		}
		tab, _ := NewTable(ids, DepthFor(n))
		for _, load := range []map[IslandID]float64{nil, {}} {
			if moves, err := PlanRebalance(tab, load, ids); err != nil || len(moves) != 0 {
				t.Errorf("%d islands: %v, %v", n, moves, err)
			}
		}
		// Loads proportional to entry counts.
		load := map[IslandID]float64{}
		for id, c := range tab.Counts() {
			load[id] = 3.5 * float64(c)
		}
		if moves, err := PlanRebalance(tab, load, ids); err != nil || len(moves) != 0 {
			t.Errorf("%d islands, proportional load: %v, %v", n, moves, err)
		}
		// Small noise below one entry's load moves nothing.
		load[ids[0]] += 1
		if moves, _ := PlanRebalance(tab, load, ids); len(moves) != 0 {
			t.Errorf("%d islands, noise: %v", n, moves)
		}
	}
}

func TestRebalanceSingleIsland(t *testing.T) {
	one := Table{Entries: []IslandID{1}}
	if moves, err := PlanRebalance(one, map[IslandID]float64{1: 1e6}, []IslandID{1}); err != nil || len(moves) != 0 {
		t.Errorf("single island: %v, %v", moves, err)
	}
	// Growing from a single island at depth 0 splits the table.
	u, _ := planAndApply(t, one, nil, []IslandID{1, 2, 3})
	if u.Depth != DepthFor(3) {
		t.Errorf("depth %d", u.Depth)
	}
	if lo, hi := spread(u, []IslandID{1, 2, 3}); hi-lo > 1 {
		t.Errorf("%d..%d", lo, hi)
	}
	// Shrinking to a single island moves everything onto it.
	tab, _ := NewTable([]IslandID{1, 2, 3}, 4)
	u, _ = planAndApply(t, tab, map[IslandID]float64{1: 5, 2: 5, 3: 5}, []IslandID{2})
	if c := u.Counts(); c[2] != len(u.Entries) {
		t.Errorf("counts %v", c)
	}
	// Replacing every island.
	u, _ = planAndApply(t, tab, nil, []IslandID{4, 5})
	if lo, hi := spread(u, []IslandID{4, 5}); hi-lo > 1 {
		t.Errorf("replace all: %d..%d", lo, hi)
	}
}

func TestRebalanceErrors(t *testing.T) {
	tab, _ := NewTable([]IslandID{1, 2}, 4)
	for name, tc := range map[string]struct {
		tab     Table
		load    map[IslandID]float64
		islands []IslandID
		err     error
	}{
		"no islands": {tab, nil, nil, ErrBadRebalance},
		"NoIsland":   {tab, nil, []IslandID{1, 0}, ErrBadRebalance},
		"duplicate":  {tab, nil, []IslandID{1, 2, 2}, ErrBadRebalance},
		"negative":   {tab, map[IslandID]float64{1: -1}, []IslandID{1, 2}, ErrBadRebalance},
		"NaN":        {tab, map[IslandID]float64{1: math.NaN()}, []IslandID{1, 2}, ErrBadRebalance},
		"Inf":        {tab, map[IslandID]float64{2: math.Inf(1)}, []IslandID{1, 2}, ErrBadRebalance},
		"bad table":  {Table{Depth: 1}, nil, []IslandID{1}, ErrBadTable},
	} {
		if _, err := PlanRebalance(tc.tab, tc.load, tc.islands); !errors.Is(err, tc.err) {
			t.Errorf("%s: %v", name, err)
		}
	}
	many := make([]IslandID, 1<<MaxDepth+1)
	for i := range many {
		many[i] = IslandID(i + 1)
	}
	if _, err := PlanRebalance(tab, nil, many); !errors.Is(err, ErrBadRebalance) {
		t.Errorf("too many islands: %v", err)
	}
}

func TestApply(t *testing.T) {
	tab := Table{Depth: 1, Entries: []IslandID{1, 2}, Epoch: 3}
	u, err := Apply(tab, []Move{{Depth: 2, Entry: 1, From: 1, To: 3}, {Depth: 1, Entry: 1, From: 2, To: 4}})
	if err != nil || u.Depth != 2 || !slices.Equal(u.Entries, []IslandID{1, 3, 4, 4}) || u.Epoch != 3 {
		t.Fatalf("Apply = %+v, %v", u, err)
	}
	if !slices.Equal(tab.Entries, []IslandID{1, 2}) {
		t.Error("Apply changed its input")
	}
	for name, m := range map[string]Move{
		"wrong owner":  {Depth: 1, Entry: 0, From: 2, To: 3},
		"mixed owners": {Depth: 0, Entry: 0, From: 1, To: 3},
		"out of range": {Depth: 1, Entry: 2, From: 1, To: 3},
		"huge entry":   {Depth: 16, Entry: 0xffffffff, From: 1, To: 3},
		"to nothing":   {Depth: 1, Entry: 0, From: 1, To: NoIsland},
		"to itself":    {Depth: 1, Entry: 0, From: 1, To: 1},
		"too deep":     {Depth: MaxDepth + 1, Entry: 0, From: 1, To: 3},
	} {
		if _, err := Apply(tab, []Move{m}); !errors.Is(err, ErrBadMove) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Apply(Table{}, nil); !errors.Is(err, ErrBadTable) {
		t.Errorf("bad table: %v", err)
	}
}

func TestDiff(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for range 50 {
		a, b := fragmentedTable(r, uint8(r.IntN(8)), 5), fragmentedTable(r, uint8(r.IntN(8)), 5)
		moves, err := Diff(a, b)
		if err != nil {
			t.Fatal(err)
		}
		u, err := Apply(a, moves)
		if err != nil {
			t.Fatal(err)
		}
		d := max(a.Depth, b.Depth)
		if !slices.Equal(u.Entries, b.splitTo(d).Entries) {
			t.Fatalf("Apply(a, Diff(a, b)) != b")
		}
	}
	if _, err := Diff(Table{}, Table{}); !errors.Is(err, ErrBadTable) {
		t.Error(err)
	}
}

// TestRebalanceProperties plans random changes: random tables, islands kept,
// removed and added. With equal load per entry the result's shares differ
// by at most one entry; with random loads the estimated imbalance never
// grows. checkPlan verifies the move rules for every plan.
func TestRebalanceProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for iter := range 2000 {
		owners := 1 + r.IntN(12)
		tab := fragmentedTable(r, uint8(r.IntN(10)), owners)
		if iter%3 == 0 {
			ids := make([]IslandID, owners)
			for i := range ids {
				ids[i] = IslandID(i + 1)
			}
			tab, _ = NewTable(ids, uint8(4+r.IntN(6)))
		}
		var islands []IslandID
		for id := IslandID(1); id <= IslandID(owners+r.IntN(5)); id++ {
			if r.IntN(4) != 0 {
				islands = append(islands, id)
			}
		}
		if len(islands) == 0 {
			islands = []IslandID{IslandID(1 + r.IntN(20))}
		}

		// Equal load per entry: nil, or proportional to entry counts.
		var load map[IslandID]float64
		if iter%2 == 1 {
			load = map[IslandID]float64{}
			for id, c := range tab.Counts() {
				load[id] = 0.25 * float64(c)
			}
		}
		u, moves := planAndApply(t, tab, load, islands)
		if again, _ := PlanRebalance(tab, load, islands); !slices.Equal(again, moves) {
			t.Fatalf("iter %d: plans differ", iter)
		}
		if lo, hi := spread(u, islands); hi-lo > 1 {
			t.Fatalf("iter %d: %d..%d entries for %v from %v", iter, lo, hi, islands, tab.Counts())
		}
		if len(moves) > 0 && len(u.Entries) < MinEntriesPerIsland*len(islands) && u.Depth < MaxDepth {
			t.Fatalf("iter %d: %d entries for %d islands", iter, len(u.Entries), len(islands))
		}

		// Random loads.
		load = map[IslandID]float64{}
		for _, id := range tab.Islands() {
			load[id] = r.Float64() * 1000
		}
		u, moves = planAndApply(t, tab, load, islands)
		if len(moves) == 0 {
			continue
		}
		before := []float64{}
		for _, id := range islands {
			before = append(before, load[id])
		}
		est := estimate(u, tab, load)
		after := []float64{}
		for _, id := range islands {
			after = append(after, est[id])
		}
		removedLoad := false
		for _, id := range tab.Islands() {
			removedLoad = removedLoad || !slices.Contains(islands, id) && load[id] > 0
		}
		if !removedLoad && Imbalance(after) > Imbalance(before)+1e-9 {
			t.Fatalf("iter %d: imbalance %.4f -> %.4f", iter, Imbalance(before), Imbalance(after))
		}
	}
}

func TestImbalance(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{0, 0, 0}, 0},
		{[]float64{5}, 0},
		{[]float64{3, 3, 3}, 0},
		{[]float64{1, 3}, 0.5},
		{[]float64{2, 4, 4, 4, 5, 5, 7, 9}, 0.4},
	} {
		if got := Imbalance(tc.in); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Imbalance(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
