package namespace

import (
	"fmt"
	"math"
	"slices"
)

// PlanByLoad plans moves of table entries that even out the islands'
// load when each entry's own load is known (entryLoad, by entry at t's
// depth, in any unit; a missing entry counts 0): Archipelago's rebalance
// with its per-entry measure. islands is the set to share the table
// among: an owner missing from it gives every entry away (heaviest
// first, each to the least loaded island), an island of it without
// entries is being added. Then, while it lowers the sum of squared
// deviations from the mean, the most loaded island gives the least
// loaded one the entry whose load is nearest half the gap between them
// (lighter than the gap: the two end closer). No entry moves twice, and
// the plan stops once the spread (standard deviation over mean) is at
// most tolerance. It works at t's depth: an entry heavier than the gap
// stays (split the table first to move finer pieces).
func PlanByLoad(t Table, entryLoad map[uint32]float64, islands []IslandID, tolerance float64) ([]Move, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	keep, err := sortedIslands(islands)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRebalance, err)
	}
	for e, v := range entryLoad {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || int(e) >= len(t.Entries) {
			return nil, fmt.Errorf("%w: entry %d has load %v", ErrBadRebalance, e, v)
		}
	}
	owner := slices.Clone(t.Entries)
	load := map[IslandID]float64{}
	for _, id := range keep {
		load[id] = 0
	}
	for e, id := range owner {
		if _, ok := load[id]; ok {
			load[id] += entryLoad[uint32(e)]
		}
	}
	var moves []Move
	moved := map[uint32]bool{}
	move := func(e uint32, to IslandID) {
		from := owner[e]
		if _, ok := load[from]; ok {
			load[from] -= entryLoad[e]
		}
		load[to] += entryLoad[e]
		owner[e] = to
		moved[e] = true
		moves = append(moves, Move{Depth: t.Depth, Entry: e, From: from, To: to})
	}
	lightest := func() IslandID {
		best := keep[0]
		for _, id := range keep[1:] {
			if load[id] < load[best] {
				best = id
			}
		}
		return best
	}
	// Removed islands' entries first, heaviest first.
	var gone []uint32
	for e, id := range owner {
		if _, ok := load[id]; !ok {
			gone = append(gone, uint32(e))
		}
	}
	slices.SortStableFunc(gone, func(a, b uint32) int { return cmpFloat(entryLoad[b], entryLoad[a]) })
	for _, e := range gone {
		move(e, lightest())
	}
	// Then the most loaded island gives to the least loaded.
	for range len(owner) {
		if spreadOf(load) <= tolerance {
			break
		}
		hi, lo := keep[0], keep[0]
		for _, id := range keep {
			if load[id] > load[hi] {
				hi = id
			}
			if load[id] < load[lo] {
				lo = id
			}
		}
		gap := load[hi] - load[lo]
		best, bestDist := -1, math.Inf(1)
		for e, id := range owner {
			l := entryLoad[uint32(e)]
			if id != hi || moved[uint32(e)] || l <= 0 || l >= gap {
				continue
			}
			if d := math.Abs(l - gap/2); d < bestDist {
				best, bestDist = e, d
			}
		}
		if best < 0 {
			break
		}
		move(uint32(best), lo)
	}
	return moves, nil
}

// Spread is the standard deviation of the islands' loads over their mean
// (0 for no load): how unevenly they are loaded.
func Spread(load map[IslandID]float64) float64 { return spreadOf(load) }

func spreadOf(load map[IslandID]float64) float64 {
	if len(load) == 0 {
		return 0
	}
	var sum, sq float64
	for _, v := range load {
		sum += v
	}
	mean := sum / float64(len(load))
	if mean <= 0 {
		return 0
	}
	for _, v := range load {
		sq += (v - mean) * (v - mean)
	}
	return math.Sqrt(sq/float64(len(load))) / mean
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
