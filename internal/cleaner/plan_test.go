package cleaner

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"time"

	"github.com/atoll-fs/atoll/internal/fragment"
)

func TestUtilization(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Stripe
		want float64
	}{
		{"empty", Stripe{}, 1},
		{"full ec:4+1", Stripe{Bytes: 5 << 20, Live: 4 << 20, K: 4, M: 1}, 1},
		{"half ec:4+1", Stripe{Bytes: 5 << 20, Live: 2 << 20, K: 4, M: 1}, 0.5},
		// A short stripe: 1 MiB of data in fragment 0, parity 1 MiB.
		{"short ec:4+1", Stripe{Bytes: 2 << 20, Live: 1 << 20, K: 4, M: 1}, 0.625},
		{"dead", Stripe{Bytes: 5 << 20, Live: 0, K: 4, M: 1}, 0},
		{"geometry unknown", Stripe{Bytes: 4 << 20, Live: 1 << 20, Frags: []Frag{{Length: 2 << 20}, {Length: 2 << 20}}}, 0.5},
		{"over-counted live clamps", Stripe{Bytes: 1 << 20, Live: 2 << 20, K: 1, M: 1}, 1},
	} {
		if got := Utilization(tc.s); got != tc.want {
			t.Errorf("%s: utilization %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPlan(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	id := func(seq uint64) fragment.StripeID { return fragment.StripeID{Log: 7, Seq: seq} }
	st := func(seq uint64, age time.Duration, live int64) Stripe {
		return Stripe{ID: id(seq), Bytes: 5 << 20, Live: live, K: 4, M: 1, Created: now.Add(-age)}
	}
	stripes := []Stripe{
		st(1, time.Hour, 0),                // dead, old: delete
		st(2, time.Second, 0),              // dead but young: the writer may not have committed
		st(3, time.Hour, 4<<20),            // full: never copied
		st(4, time.Hour, 1<<20),            // 25% live, old: best
		st(5, 2*time.Hour, 2<<20),          // 50% live, older
		st(6, time.Second, 1<<20),          // sparse but young: left alone
		st(7, 10*time.Hour, 3<<20+512<<10), // 87.5% live: above MaxLive
	}
	for _, tc := range []struct {
		name     string
		budget   int64
		wantDead []uint64
		wantCopy []uint64
	}{
		{"no copying", 0, []uint64{1}, nil},
		// cost-benefit (1-u)·age/(1+u): #5 (0.5·7200/1.5 = 2400) before #4 (0.75·3600/1.25 = 2160)
		{"budget for one", 1, []uint64{1}, []uint64{5}},
		{"budget for all", 1 << 40, []uint64{1}, []uint64{5, 4}},
	} {
		dead, cp := Plan(stripes, PlanConfig{Now: now, Grace: time.Minute, MaxLive: 0.75, CopyBudget: tc.budget})
		seqs := func(ids []fragment.StripeID) []uint64 {
			var out []uint64
			for _, x := range ids {
				out = append(out, x.Seq)
			}
			return out
		}
		if !slices.Equal(seqs(dead), tc.wantDead) || !slices.Equal(seqs(cp), tc.wantCopy) {
			t.Errorf("%s: dead %v copy %v, want %v and %v", tc.name, seqs(dead), seqs(cp), tc.wantDead, tc.wantCopy)
		}
	}
}

func TestMetricsRegister(t *testing.T) {
	c := &Cleaner{}
	reg := prometheus.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	c.mu.totals = Report{DeletedStripes: 3, Repaired: 2}
	c.mu.passes = 4
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		if m.Counter != nil {
			got[mf.GetName()] = m.Counter.GetValue()
		} else {
			got[mf.GetName()] = m.Gauge.GetValue()
		}
	}
	if len(got) != len(metricNames) || got["atoll_cleaner_passes_total"] != 4 || got["atoll_cleaner_deleted_stripes_total"] != 3 || got["atoll_cleaner_repaired_fragments_total"] != 2 {
		t.Fatalf("metrics: %v", got)
	}
}

// The copy rate is Rate, lowered to Share of the observed capacity when
// that is known, but never below MinRate.
func TestRateFollowsShareOfCapacity(t *testing.T) {
	const mb = 1e6
	for _, tc := range []struct {
		name     string
		capacity float64 // 0: unknown
		noCap    bool    // no Capacity function at all
		want     float64
	}{
		{"no capacity function", 0, true, DefaultRate},
		{"capacity unknown", 0, false, DefaultRate},
		{"fast cluster: Rate caps", 1000 * mb, false, DefaultRate},
		{"slow cluster: share", 100 * mb, false, 20 * mb},
		{"quiet cluster: floor", 10 * mb, false, MinRate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Cleaner{cfg: Config{Rate: DefaultRate, Share: DefaultShare}}
			if !tc.noCap {
				c.cfg.Capacity = func() float64 { return tc.capacity }
			}
			if got := c.rate(); got != tc.want {
				t.Fatalf("rate %v, want %v", got, tc.want)
			}
		})
	}
}
