package namespace

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestPlansDatadriven runs testdata/plan: the two table planners on
// tables written out entry by entry, printing their moves and the table
// and loads they leave.
//
//	table
//	1 1 2 2            (the owner of each entry; the depth follows)
//	----
//	plan-by-load islands=1,2,3 tolerance=0.1
//	0:5 1:1            (entry:load; others 0)
//	----
//	plan-rebalance islands=1,2,3
//	1:10 2:3           (island:load)
//	----
//
// Each plan applies its moves to the table for the next command.
func TestPlansDatadriven(t *testing.T) {
	var tab Table
	datadriven.RunTest(t, "testdata/plan", func(t *testing.T, d *datadriven.TestData) string {
		islands := func() []IslandID {
			var ids []IslandID
			var s string
			d.ScanArgs(t, "islands", &s)
			for _, f := range strings.Split(s, ",") {
				n, err := strconv.Atoi(f)
				if err != nil {
					d.Fatalf(t, "islands: %v", err)
				}
				ids = append(ids, IslandID(n))
			}
			return ids
		}
		pairs := func() map[uint32]float64 {
			m := map[uint32]float64{}
			for _, f := range strings.Fields(d.Input) {
				k, v, ok := strings.Cut(f, ":")
				a, err1 := strconv.Atoi(k)
				b, err2 := strconv.ParseFloat(v, 64)
				if !ok || err1 != nil || err2 != nil {
					d.Fatalf(t, "bad pair %q", f)
				}
				m[uint32(a)] = b
			}
			return m
		}
		result := func(moves []Move, err error, entryLoad func(Table) map[IslandID]float64) string {
			if err != nil {
				return "error: " + err.Error()
			}
			var b strings.Builder
			for _, m := range moves {
				fmt.Fprintln(&b, m)
			}
			if len(moves) == 0 {
				fmt.Fprintln(&b, "no moves")
			}
			if tab, err = Apply(tab, moves); err != nil {
				return "apply: " + err.Error()
			}
			fmt.Fprint(&b, show(tab, entryLoad(tab)))
			return b.String()
		}
		switch d.Cmd {
		case "table":
			var owners []IslandID
			for _, f := range strings.Fields(d.Input) {
				n, err := strconv.Atoi(f)
				if err != nil {
					d.Fatalf(t, "table: %v", err)
				}
				owners = append(owners, IslandID(n))
			}
			depth := uint8(0)
			for 1<<depth < len(owners) {
				depth++
			}
			tab = Table{Depth: depth, Entries: owners, Epoch: 1}
			if err := tab.Validate(); err != nil {
				return "error: " + err.Error()
			}
			return show(tab, nil)
		case "plan-by-load":
			var tol float64
			d.ScanArgs(t, "tolerance", &tol)
			loads := pairs()
			moves, err := PlanByLoad(tab, loads, islands(), tol)
			return result(moves, err, func(nt Table) map[IslandID]float64 {
				// Entry loads at the plan's depth (it does not split).
				per := map[IslandID]float64{}
				for e, id := range nt.Entries {
					per[id] += loads[uint32(e)]
				}
				return per
			})
		case "plan-rebalance":
			load := map[IslandID]float64{}
			for k, v := range pairs() {
				load[IslandID(k)] = v
			}
			old := tab
			moves, err := PlanRebalance(tab, load, islands())
			return result(moves, err, func(nt Table) map[IslandID]float64 {
				// An island's load spread evenly over its entries, as
				// the planner assumes; moved entries take theirs along.
				per := map[IslandID]float64{}
				count := map[IslandID]int{}
				for _, id := range old.Entries {
					count[id]++
				}
				scale := 1 << (nt.Depth - old.Depth)
				for e, id := range nt.Entries {
					from := old.Entries[e/scale]
					per[id] += load[from] / float64(count[from]*scale)
				}
				return per
			})
		}
		d.Fatalf(t, "unknown command %s", d.Cmd)
		return ""
	})
}

// show prints a table's owners and, with loads, each island's load and
// the spread.
func show(t Table, load map[IslandID]float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "depth %d:", t.Depth)
	for _, id := range t.Entries {
		fmt.Fprintf(&b, " %d", id)
	}
	b.WriteString("\n")
	if load != nil {
		var ids []IslandID
		for id := range load {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		var vals []float64
		for _, id := range ids {
			fmt.Fprintf(&b, "island %d: %.1f\n", id, load[id])
			vals = append(vals, load[id])
		}
		fmt.Fprintf(&b, "spread %.2f\n", Imbalance(vals))
	}
	return b.String()
}
