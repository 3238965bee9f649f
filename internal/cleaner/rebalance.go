package cleaner

import (
	"math"
	"sort"
	"time"

	"github.com/atoll-fs/atoll/internal/fragment"
)

// DefaultTolerance is how far (a fraction of the mean) a storage slot's
// used bytes may stray from the mean before the rebalancer moves data.
const DefaultTolerance = 0.10

// RebalanceConfig tunes PlanRebalance.
type RebalanceConfig struct {
	Now   time.Time
	Grace time.Duration // younger stripes stay (their writers may still commit into them)
	// Tolerance: a slot within Tolerance·mean of the mean is balanced.
	Tolerance float64
	// Budget bounds the live bytes the plan copies (0: no bound).
	Budget int64
}

// RebalancePlan is what a pass does to even out the slots' used bytes.
type RebalancePlan struct {
	// Imbalance is max |used − mean| / mean over the slots before the
	// moves; Estimated is the same after them, as planned.
	Imbalance, Estimated float64
	// Move are the stripes to copy (their live blocks, into new stripes)
	// and then delete; their copies avoid the slots in Avoid.
	Move  []fragment.StripeID
	Avoid []uint16
	// Remaining estimates the bytes still above the tolerance band after
	// the moves (later passes' work; 0 when these moves suffice).
	Remaining int64
}

// PlanRebalance plans moves that bring every slot's used bytes within
// Tolerance of the mean (Zebra and Sigma add servers and let old data
// spread onto them; here the cleaner's copy path does the spreading).
// used are the bytes on each slot that takes part (up, not draining);
// stripes with a fragment on any other slot are left alone. A moved
// stripe's fragments leave every slot it was on; its live bytes, with
// their redundancy, land on the slots not avoided, spread evenly by the
// rotating placement. Avoided are the slots above the mean, fullest
// first, as long as the stripes' widest policy still fits on the rest
// (a copy is never placed degraded to avoid a slot). Each move is the
// one that evens the slots out most per byte copied, weighed over every
// slot (not just the fullest and the emptiest: next to a small cluster
// a stripe is coarse, and a move that helps those two can overshoot).
func PlanRebalance(stripes []Stripe, used map[uint16]int64, c RebalanceConfig) RebalancePlan {
	var plan RebalancePlan
	if len(used) < 2 {
		return plan
	}
	var total int64
	slots := make([]uint16, 0, len(used))
	for s, u := range used {
		total += u
		slots = append(slots, s)
	}
	if total <= 0 {
		return plan
	}
	mean := float64(total) / float64(len(used))
	// Estimates are measured against the mean of the slots as they are:
	// the moves' redundancy changes the total a little, not the target.
	imbalance := func(est map[uint16]float64) float64 { return deviation(est, mean) }
	est := make(map[uint16]float64, len(used))
	for s, u := range used {
		est[s] = float64(u)
	}
	plan.Imbalance = imbalance(est)
	plan.Estimated = plan.Imbalance
	if plan.Imbalance <= c.Tolerance {
		return plan
	}
	// Candidates: old enough, live, geometry known, every fragment on a
	// slot that takes part.
	width := 0
	var cands []*Stripe
	for k := range stripes {
		s := &stripes[k]
		if s.Live <= 0 || s.K <= 0 || c.Now.Sub(s.Created) < c.Grace {
			continue
		}
		ok := true
		for _, f := range s.Frags {
			if _, in := used[f.Slot]; !in {
				ok = false
				break
			}
		}
		if ok {
			cands = append(cands, s)
			width = max(width, s.K+s.M)
		}
	}
	// Avoid the fullest slots above the mean while the rest can still
	// hold the widest stripe.
	sort.Slice(slots, func(i, j int) bool {
		if used[slots[i]] != used[slots[j]] {
			return used[slots[i]] > used[slots[j]]
		}
		return slots[i] < slots[j]
	})
	avoid := map[uint16]bool{}
	for _, s := range slots {
		if float64(used[s]) <= mean || len(slots)-len(avoid)-1 < width {
			break
		}
		avoid[s] = true
		plan.Avoid = append(plan.Avoid, s)
	}
	if len(avoid) == 0 {
		// Every stripe is as wide as the cluster (or nothing can move):
		// placement alone cannot even the slots out.
		plan.Remaining = overBand(est, mean, c.Tolerance)
		return plan
	}
	targets := len(used) - len(avoid)
	sort.Slice(cands, func(i, j int) bool {
		ui, uj := Utilization(*cands[i]), Utilization(*cands[j])
		if ui != uj {
			return ui < uj
		}
		return less(cands[i].ID, cands[j].ID)
	})
	// The estimate as a vector over the slots, so weighing a move costs
	// no allocation: a step weighs up to maxScan of them.
	pos := make(map[uint16]int, len(slots))
	vec := make([]float64, len(slots))
	skip := make([]bool, len(slots))
	for i, s := range slots {
		pos[s], vec[i], skip[i] = i, est[s], avoid[s]
	}
	removed := make([]float64, len(slots))
	// weigh returns the sum of squared relative deviations with s moved:
	// its fragments leave their slots, and its live bytes with their
	// redundancy land on the slots not avoided, evenly in expectation
	// (the rotating placement).
	weigh := func(s *Stripe) float64 {
		for _, f := range s.Frags {
			removed[pos[f.Slot]] += float64(f.Length)
		}
		add := float64(s.Live) * float64(s.K+s.M) / float64(s.K) / float64(targets)
		var sq float64
		for i, v := range vec {
			v -= removed[i]
			removed[i] = 0
			if !skip[i] {
				v += add
			}
			d := (v - mean) / mean
			sq += d * d
		}
		return sq
	}
	sqOf := func() float64 {
		var sq float64
		for _, v := range vec {
			d := (v - mean) / mean
			sq += d * d
		}
		return sq
	}
	// Greedy: each step moves the stripe that evens the slots out most
	// per byte copied (the sum of squared deviations falls most), until
	// the spread is within half the tolerance or no move helps. A move
	// must help by the estimate, so a pass never undoes the last one's.
	// Stripes with the least live data per byte held are weighed first
	// (they give back the most for the bytes copied), up to maxScan.
	chosen := map[fragment.StripeID]bool{}
	var copied int64
	for c.Budget <= 0 || copied < c.Budget {
		for i, s := range slots {
			est[s] = vec[i]
		}
		// Done when the spread is within half the tolerance, or when the
		// avoided slots are down to the mean (a copy can only land on
		// the others; the next pass avoids the fullest of those).
		above := false
		for i, v := range vec {
			above = above || skip[i] && v > mean
		}
		if !above || imbalance(est) <= c.Tolerance/2 {
			break
		}
		cur := sqOf()
		var pick *Stripe
		var bestGain float64
		scanned := 0
		for _, s := range cands {
			if chosen[s.ID] {
				continue
			}
			if scanned++; scanned > maxScan {
				break
			}
			if gain := (cur - weigh(s)) / float64(s.Live); gain > bestGain*(1+1e-9) && cur-weigh(s) > cur*1e-9 {
				pick, bestGain = s, gain
			}
		}
		if pick == nil {
			break // no move left that evens the slots out
		}
		for _, f := range pick.Frags {
			vec[pos[f.Slot]] -= float64(f.Length)
		}
		add := float64(pick.Live) * float64(pick.K+pick.M) / float64(pick.K) / float64(targets)
		for i := range vec {
			if !skip[i] {
				vec[i] += add
			}
		}
		chosen[pick.ID] = true
		plan.Move = append(plan.Move, pick.ID)
		copied += pick.Live
	}
	for i, s := range slots {
		est[s] = vec[i]
	}
	plan.Estimated = imbalance(est)
	plan.Remaining = overBand(est, mean, c.Tolerance)
	return plan
}

// maxScan bounds how many candidates one step of the planner weighs when
// no cheap move is left (a huge cluster has millions of stripes; the
// least utilized come first, and they are the ones worth moving).
const maxScan = 4096

// Spread is how unevenly the storage slots are used: max |used − mean| /
// mean over the slots (0 when nothing is used). The rebalancer evens
// slots out until it is at most its tolerance.
func Spread(used map[uint16]int64) float64 {
	var total int64
	vals := make(map[uint16]float64, len(used))
	for s, u := range used {
		total += u
		vals[s] = float64(u)
	}
	if total <= 0 {
		return 0
	}
	return deviation(vals, float64(total)/float64(len(used)))
}

// deviation is max |v − mean| / mean over vals.
func deviation(vals map[uint16]float64, mean float64) float64 {
	var worst float64
	for _, v := range vals {
		worst = max(worst, math.Abs(v-mean)/mean)
	}
	return worst
}

// overBand sums the bytes above mean·(1+tol).
func overBand(est map[uint16]float64, mean, tol float64) int64 {
	var over float64
	for _, u := range est {
		over += max(0, u-mean*(1+tol))
	}
	return int64(over)
}
