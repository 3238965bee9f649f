package namespace

import (
	"math/rand/v2"
	"testing"
)

// TestPlanByLoad: hot entries on one island spread out until the spread
// is within the tolerance; every move goes from the loaded to the less
// loaded, no entry moves twice; a removed island gives everything away;
// balanced islands move nothing.
func TestPlanByLoad(t *testing.T) {
	tab, err := NewTable([]IslandID{1, 2, 3}, 6)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	load := map[uint32]float64{}
	for e, id := range tab.Entries {
		load[uint32(e)] = 1 + r.Float64()
		if id == 1 {
			load[uint32(e)] *= 6 // island 1 serves the hot directories
		}
	}
	after := func(moves []Move, keep []IslandID) map[IslandID]float64 {
		owner := append([]IslandID(nil), tab.Entries...)
		seen := map[uint32]bool{}
		for _, m := range moves {
			if owner[m.Entry] != m.From || seen[m.Entry] || m.Depth != tab.Depth {
				t.Fatalf("bad move %v", m)
			}
			seen[m.Entry] = true
			owner[m.Entry] = m.To
		}
		l := map[IslandID]float64{}
		for _, id := range keep {
			l[id] = 0
		}
		for e, id := range owner {
			if _, ok := l[id]; !ok {
				t.Fatalf("entry %d left on island %d", e, id)
			}
			l[id] += load[uint32(e)]
		}
		return l
	}
	before := after(nil, []IslandID{1, 2, 3})
	moves, err := PlanByLoad(tab, load, []IslandID{1, 2, 3}, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	got := after(moves, []IslandID{1, 2, 3})
	if Spread(before) < 0.5 || Spread(got) > 0.05 {
		t.Fatalf("spread %.3f -> %.3f with %d moves", Spread(before), Spread(got), len(moves))
	}
	t.Logf("spread %.3f -> %.3f with %d moves of %d entries", Spread(before), Spread(got), len(moves), len(tab.Entries))
	// Removing island 2: all its entries go, the rest stay even.
	moves, err = PlanByLoad(tab, load, []IslandID{1, 3}, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	if got := after(moves, []IslandID{1, 3}); Spread(got) > 0.05 {
		t.Fatalf("without island 2: %v", got)
	}
	// Even load: nothing to do.
	flat := map[uint32]float64{}
	for e := range tab.Entries {
		flat[uint32(e)] = 1
	}
	if moves, err := PlanByLoad(tab, flat, []IslandID{1, 2, 3}, 0.05); err != nil || len(moves) != 0 {
		t.Fatalf("even load: %v, %v", moves, err)
	}
	if _, err := PlanByLoad(tab, map[uint32]float64{0: -1}, []IslandID{1, 2, 3}, 0.05); err == nil {
		t.Fatal("negative load accepted")
	}
}
