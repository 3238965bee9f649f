package manager

import (
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestSampleRingRatesAndThroughput(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var r sampleRing
	for i := 0; i <= 2*HistoryLen; i++ {
		// 1000 bytes read and 3 ops per second, a heartbeat a second.
		r.add(sample{at: t0.Add(time.Duration(i) * time.Second).UnixNano(), read: uint64(1000 * i), written: 7, ops: uint64(3 * i)})
	}
	if r.len() != HistoryLen || r.get(0).read != 1000*(HistoryLen+1) {
		t.Fatalf("ring holds %d samples from %d, want %d from %d", r.len(), r.get(0).read, HistoryLen, 1000*(HistoryLen+1))
	}
	now := t0.Add(2*HistoryLen*time.Second + 300*time.Millisecond)
	rd, wr, ops := r.rates(now)
	if rd != 1000 || wr != 0 || ops != 3 {
		t.Fatalf("rates %g %g %g, want 1000 0 3", rd, wr, ops)
	}
	if rd, _, _ := r.rates(now.Add(time.Minute)); rd != 0 {
		t.Fatalf("a silent member has rate %g", rd)
	}
	pts := throughput([]*sampleRing{&r, &r}, now)
	if want := int(ThroughputWindow / ThroughputStep); len(pts) != want {
		t.Fatalf("%d points, want %d", len(pts), want)
	}
	for i, p := range pts[1:] {
		// Two members each reading 1000 B/s.
		if p.ReadBytesPerSec != 2000 || p.WriteBytesPerSec != 0 || p.OpsPerSec != 6 {
			t.Fatalf("point %d: %+v", i+1, p)
		}
		if !p.Time.After(pts[i].Time) || p.Time.Sub(pts[i].Time) != ThroughputStep {
			t.Fatalf("points not one step apart: %v then %v", pts[i].Time, p.Time)
		}
	}
	if last := pts[len(pts)-1].Time; last.After(now) {
		t.Fatalf("a point ends in the future: %v > %v", last, now)
	}

	// A restarted member counts from zero: no negative spike.
	var q sampleRing
	q.add(sample{at: t0.UnixNano(), read: 5000})
	q.add(sample{at: t0.Add(time.Second).UnixNano(), read: 6000})
	q.add(sample{at: t0.Add(2 * time.Second).UnixNano(), read: 100})
	if rd, _, _ := q.rates(t0.Add(2 * time.Second)); rd != 550 {
		t.Fatalf("rate across a restart %g, want (1000+100)/2", rd)
	}
	// Samples younger than the window only: the series starts at the oldest.
	pts = throughput([]*sampleRing{&q}, t0.Add(10*time.Second))
	if len(pts) == 0 || len(pts) > 6 {
		t.Fatalf("%d points for 10s of history", len(pts))
	}
	if pts := throughput(nil, now); len(pts) != 0 {
		t.Fatalf("points without samples: %v", pts)
	}
}

func TestManagerMetricsAndSnapshot(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	n := startNode(t, cfg)
	waitLeader(t, n)
	ctx := ctxT(t, 30*time.Second)
	cl := cluster.NewClient([]string{n.Addr()}, nil, testLogger(t))
	defer cl.Close()
	if _, err := cl.Register(ctx, cluster.KindStorage, 0, "127.0.0.1:7400", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Register(ctx, cluster.KindIsland, 1, "127.0.0.1:7500", 11); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		st := cluster.MemberStats{CapacityBytes: 100, UsedBytes: 10, BytesWritten: uint64(i) << 20, Ops: uint64(i), MetricsAddr: "127.0.0.1:7600"}
		if _, err := cl.Heartbeat(ctx, cluster.KindStorage, 0, 0, st); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sn := n.Snapshot()
	if len(sn.Live) != 2 || sn.Live[0].Key != (cluster.MemberKey{Kind: cluster.KindStorage, ID: 0}) || sn.Live[0].Stats.MetricsAddr != "127.0.0.1:7600" {
		t.Fatalf("snapshot heartbeat table: %+v", sn.Live)
	}
	if r := sn.Rates[cluster.MemberKey{Kind: cluster.KindStorage, ID: 0}]; r.WriteBytesPerSec <= 0 {
		t.Fatalf("no write rate from growing counters: %+v", sn.Rates)
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Live) != 2 || st.Live[0].Stats.BytesWritten != 3<<20 || st.Live[0].LastHeartbeat.IsZero() {
		t.Fatalf("status heartbeat table: %+v", st.Live)
	}

	got := gather(t, reg)
	for name, want := range map[string]float64{
		"atoll_manager_leader":                           1,
		"atoll_manager_members{kind=storage,state=up}":   1,
		"atoll_manager_members{kind=island,state=up}":    1,
		"atoll_manager_members{kind=storage,state=down}": 0,
		"atoll_manager_raft_state{state=Leader}":         1,
		"atoll_manager_raft_state{state=Follower}":       0,
		"atoll_manager_map_epoch":                        float64(n.Map().Epoch),
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if _, ok := got["atoll_manager_heartbeat_age_seconds{id=0,kind=storage}"]; !ok {
		t.Errorf("no heartbeat age for storage 0: %v", got)
	}
}

// gather collects reg into "name{l1=v1,l2=v2}" -> value (labels sorted by
// name, as the registry gives them).
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			if len(m.GetLabel()) > 0 {
				key += "{"
				for i, l := range m.GetLabel() {
					if i > 0 {
						key += ","
					}
					key += l.GetName() + "=" + l.GetValue()
				}
				key += "}"
			}
			out[key] = metricValue(m)
		}
	}
	return out
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}
