package cleaner

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/layout"
)

// simCluster is a toy striped log: stripes placed by layout.Place over
// numbered slots, each fragment 1 MiB, fully live unless said otherwise.
type simCluster struct {
	t       *testing.T
	slots   []uint16
	stripes map[fragment.StripeID]*Stripe
	seq     uint64
	pol     layout.Policy
	now     time.Time
	copies  uint64 // the log moved stripes are rewritten into
}

func newSim(t *testing.T, slots int, policy string) *simCluster {
	pol, err := layout.Parse(policy)
	if err != nil {
		t.Fatal(err)
	}
	s := &simCluster{t: t, stripes: map[fragment.StripeID]*Stripe{}, pol: pol, now: time.Unix(1_000_000, 0), copies: 99}
	for i := range slots {
		s.slots = append(s.slots, uint16(i))
	}
	return s
}

// write adds a stripe of log, placed avoiding avoid (when enough other
// slots remain, as client.placementSlots does).
func (s *simCluster) write(log uint64, live int64, avoid map[uint16]bool) {
	var view []layout.Slot
	up := 0
	for _, id := range s.slots {
		if !avoid[id] {
			up++
		}
	}
	for _, id := range s.slots {
		view = append(view, layout.Slot{ID: id, Up: !avoid[id] || up < s.pol.Width()})
	}
	s.seq++
	pl, err := layout.Place(s.pol, log, s.seq, view)
	if err != nil {
		s.t.Fatal(err)
	}
	st := &Stripe{ID: fragment.StripeID{Log: log, Seq: s.seq}, Live: live, K: s.pol.K, M: s.pol.M, Created: s.now.Add(-time.Hour)}
	// As the client lays a stripe out: data fills fragment 0 first, then
	// 1, …, (1 MiB each); parity is as long as fragment 0.
	const F = 1 << 20
	for i, sl := range pl.Slots {
		n := live // a mirror copy is all the data
		switch {
		case s.pol.Kind == layout.EC && i < s.pol.K:
			n = min(max(live-int64(i)*F, 0), F)
		case s.pol.Kind == layout.EC:
			n = min(live, F)
		}
		st.Frags = append(st.Frags, Frag{Slot: sl, Index: uint16(i), Length: n})
		st.Bytes += n
	}
	s.stripes[st.ID] = st
}

func (s *simCluster) list() []Stripe {
	var out []Stripe
	for _, st := range s.stripes {
		out = append(out, *st)
	}
	return out
}

func (s *simCluster) used() map[uint16]int64 {
	u := map[uint16]int64{}
	for _, id := range s.slots {
		u[id] = 0
	}
	for _, st := range s.stripes {
		for _, f := range st.Frags {
			u[f.Slot] += f.Length
		}
	}
	return u
}

// pass plans and applies one rebalance: each moved stripe's live bytes
// are rewritten into a new stripe of the cleaner's log, then it goes.
func (s *simCluster) pass(cfg RebalanceConfig) RebalancePlan {
	plan := PlanRebalance(s.list(), s.used(), cfg)
	avoid := map[uint16]bool{}
	for _, a := range plan.Avoid {
		avoid[a] = true
	}
	for _, id := range plan.Move {
		st := s.stripes[id]
		delete(s.stripes, id)
		s.write(s.copies, st.Live, avoid)
	}
	return plan
}

// TestRebalanceFillsANewSlot: slots full of stripes, one more added
// empty: passes (with the real placement) bring every slot within the
// tolerance of the mean, rewriting not many more stripes than the new
// slot's share of fragments (the least any rewrite can do).
func TestRebalanceFillsANewSlot(t *testing.T) {
	for _, tc := range []struct {
		policy string
		slots  int
		// copies is the log the moved data is rewritten into: its stripes
		// sort before or after the originals (they must not be moved
		// back and forth).
		copies uint64
	}{{"ec:4+1", 5, 99}, {"ec:4+1", 5, 0}, {"ec:4+2", 6, 0}, {"mirror:2", 3, 99}, {"ec:2+1", 7, 0}} {
		t.Run(fmt.Sprintf("%s on %d+1, copies in log %d", tc.policy, tc.slots, tc.copies), func(t *testing.T) {
			s := newSim(t, tc.slots, tc.policy)
			s.copies = tc.copies
			for log := uint64(1); log <= 8; log++ {
				for range 40 {
					s.write(log, 4<<20, nil)
				}
			}
			s.slots = append(s.slots, uint16(tc.slots)) // the new server
			before := s.used()
			if got := Spread(before); got < 0.9 {
				t.Fatalf("imbalance with an empty slot %.2f", got)
			}
			cfg := RebalanceConfig{Now: s.now, Grace: time.Minute, Tolerance: 0.10}
			var moved int
			for pass := 1; ; pass++ {
				plan := s.pass(cfg)
				moved += len(plan.Move)
				if Spread(s.used()) <= cfg.Tolerance {
					break
				}
				if pass == 10 || len(plan.Move) == 0 {
					t.Fatalf("after %d passes: imbalance %.3f, used %v (plan %+v)", pass, Spread(s.used()), s.used(), plan)
				}
			}
			// A rewritten stripe puts at most one fragment on the new slot,
			// so filling it takes at least its share of all fragments in
			// moves; the plan should not need many more.
			share := 320 * s.pol.Width() / (tc.slots + 1)
			if moved > share*3/2 {
				t.Errorf("moved %d stripes to fill a slot whose share is %d fragments", moved, share)
			}
			t.Logf("moved %d stripes; used %v", moved, s.used())
		})
	}
}

func TestRebalanceLeavesAlone(t *testing.T) {
	s := newSim(t, 6, "ec:4+1")
	for log := uint64(1); log <= 8; log++ {
		for range 30 {
			s.write(log, 4<<20, nil)
		}
	}
	cfg := RebalanceConfig{Now: s.now, Grace: time.Minute, Tolerance: 0.10}
	if p := PlanRebalance(s.list(), s.used(), cfg); len(p.Move) > 0 || p.Imbalance > 0.10 {
		t.Fatalf("balanced slots: plan %+v", p)
	}
	// An empty seventh slot, but every stripe is young: nothing moves yet.
	s.slots = append(s.slots, 6)
	young := cfg
	young.Grace = 2 * time.Hour
	if p := PlanRebalance(s.list(), s.used(), young); len(p.Move) > 0 || p.Imbalance < 0.9 || p.Remaining == 0 {
		t.Fatalf("young stripes: plan %+v", p)
	}
	// Stripes with a fragment on a slot outside the set (draining) stay.
	used := s.used()
	delete(used, 0)
	for _, id := range PlanRebalance(s.list(), used, cfg).Move {
		for _, f := range s.stripes[id].Frags {
			if f.Slot == 0 {
				t.Fatalf("moved %v, which has a fragment on a slot not taking part", id)
			}
		}
	}
	// The budget bounds the live bytes one plan copies.
	small := cfg
	small.Budget = 10 << 20
	if p := PlanRebalance(s.list(), s.used(), small); len(p.Move) != 3 {
		t.Fatalf("budget of 10 MiB (4 MiB stripes): %d moves", len(p.Move))
	}
	// As wide as the cluster: placement cannot help; nothing moves, the
	// remaining work is reported.
	w := newSim(t, 5, "ec:4+1")
	for range 50 {
		w.write(1, 4<<20, nil)
	}
	u := w.used()
	u[0] += 40 << 20
	if p := PlanRebalance(w.list(), u, cfg); len(p.Move) > 0 || len(p.Avoid) > 0 || p.Remaining == 0 {
		t.Fatalf("stripes as wide as the cluster: plan %+v", p)
	}
}

// passPacked is pass with the cleaner's real packing: the live bytes of
// the moved stripes are written into the copies' log in stripes of up
// to pack live bytes (a copy stripe usually holds several moved ones,
// so later passes see coarser stripes than the first).
func (s *simCluster) passPacked(cfg RebalanceConfig, pack int64) RebalancePlan {
	plan := PlanRebalance(s.list(), s.used(), cfg)
	avoid := map[uint16]bool{}
	for _, a := range plan.Avoid {
		avoid[a] = true
	}
	var pending int64
	for _, id := range plan.Move {
		pending += s.stripes[id].Live
		delete(s.stripes, id)
		for pending >= pack {
			s.write(s.copies, pack, avoid)
			pending -= pack
		}
	}
	if pending > 0 {
		s.write(s.copies, pending, avoid)
	}
	return plan
}

// TestRebalanceConvergesOnUnevenStripes: small clusters like the join
// test's (files of 1–2 MiB on 5 slots, each a stripe laid out as the
// client does, a sixth slot joining, copies packed into stripes of up
// to 4 MiB), where one stripe is a tenth of a slot: for every seed,
// passes bring the slots within the tolerance in a few passes and never
// stop short with moves still possible. (The planner before this test
// left 35 of 200 seeds of 24 files unbalanced after 8 passes: it
// followed the fullest slot alone and overshot with coarse stripes.)
func TestRebalanceConvergesOnUnevenStripes(t *testing.T) {
	for _, files := range []int{24, 48, 96} {
		worst := 0
		hist := map[int]int{}
		for seed := range uint64(200) {
			r := rand.New(rand.NewPCG(seed, 7))
			s := newSim(t, 5, "ec:4+1")
			s.seq = r.Uint64N(5) // where the rotating placement starts
			for range files {
				s.write(1, 1<<20+r.Int64N(1<<20), nil)
			}
			s.slots = append(s.slots, 5)
			for range 6 {
				s.write(2, 1<<20, nil)
			}
			cfg := RebalanceConfig{Now: s.now, Grace: time.Minute, Tolerance: 0.10}
			for pass := 1; ; pass++ {
				plan := s.passPacked(cfg, 4<<20)
				if Spread(s.used()) <= cfg.Tolerance {
					worst = max(worst, pass)
					hist[pass]++
					break
				}
				if pass == 8 || len(plan.Move) == 0 {
					t.Fatalf("%d files, seed %d: after %d passes imbalance %.3f, used %v (last plan %+v)",
						files, seed, pass, Spread(s.used()), s.used(), plan)
				}
			}
		}
		t.Logf("%d files: every seed balanced within %d passes (passes: seeds %v)", files, worst, hist)
	}
}
