package cleaner

import (
	"fmt"
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
	frag := live / int64(s.pol.K)
	for i, sl := range pl.Slots {
		st.Frags = append(st.Frags, Frag{Slot: sl, Index: uint16(i), Length: frag})
		st.Bytes += frag
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
