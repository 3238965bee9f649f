package cleaner

import (
	"sort"
	"time"

	"github.com/atoll-fs/atoll/internal/fragment"
)

// Stripe is what a pass knows of one stripe.
type Stripe struct {
	ID      fragment.StripeID
	Bytes   int64     // bytes on disk, all fragments found (data, parity, trailers)
	Live    int64     // live bytes summed over the islands
	Created time.Time // the oldest fragment's creation time
	Frags   []Frag    // fragments found
	// K and M are the stripe's geometry when known (from a pointer into
	// it); 0 when not.
	K, M int
}

// Frag is one fragment of a stripe found on a slot.
type Frag struct {
	Slot    uint16
	Index   uint16
	Length  int64
	Suspect bool // its server found it corrupt and it was not repaired since
	unseen  bool // not in the inventory; deleted in case a repair made it
}

// PlanConfig tunes Plan.
type PlanConfig struct {
	Now   time.Time
	Grace time.Duration
	// MaxLive is the highest live fraction worth copying; fuller stripes
	// give back too little for the bytes moved.
	MaxLive float64
	// CopyBudget bounds the live bytes chosen for copying (0: none).
	CopyBudget int64
}

// Plan splits stripes into those to delete (no live bytes, older than
// Grace) and those to copy, best first by LFS cost-benefit
// (1-u)·age/(1+u), until CopyBudget live bytes are chosen.
func Plan(stripes []Stripe, c PlanConfig) (dead, copy []fragment.StripeID) {
	type cand struct {
		id    fragment.StripeID
		score float64
		live  int64
	}
	var cands []cand
	for _, s := range stripes {
		if c.Now.Sub(s.Created) < c.Grace {
			continue
		}
		if s.Live <= 0 {
			dead = append(dead, s.ID)
			continue
		}
		u := Utilization(s)
		if u > c.MaxLive {
			continue
		}
		age := c.Now.Sub(s.Created).Seconds()
		cands = append(cands, cand{s.ID, (1 - u) * age / (1 + u), s.Live})
	}
	sort.Slice(dead, func(i, j int) bool { return less(dead[i], dead[j]) })
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].score != cands[j].score {
			return cands[i].score > cands[j].score
		}
		return less(cands[i].id, cands[j].id)
	})
	var budget int64
	for _, x := range cands {
		if budget >= c.CopyBudget {
			break
		}
		copy = append(copy, x.id)
		budget += x.live
	}
	return dead, copy
}

// Utilization is the useful fraction of a stripe's disk bytes: its live
// bytes with their share of redundancy ((K+M)/K) over every byte it
// holds. A short stripe (written by a flush before it filled) pays full
// parity for little data and so counts as sparse, and copying its blocks
// into full stripes gives that space back. Without the geometry, parity
// is assumed to be one fragment as large as the largest found.
func Utilization(s Stripe) float64 {
	if s.Bytes <= 0 {
		return 1
	}
	if s.K > 0 {
		return min(1, float64(s.Live)*float64(s.K+s.M)/float64(s.K)/float64(s.Bytes))
	}
	data := s.Bytes
	if len(s.Frags) > 1 {
		var big int64
		for _, f := range s.Frags {
			big = max(big, f.Length)
		}
		data -= big
	}
	return min(1, float64(s.Live)/float64(max(data, 1)))
}

func less(a, b fragment.StripeID) bool {
	if a.Log != b.Log {
		return a.Log < b.Log
	}
	return a.Seq < b.Seq
}
