package client

import (
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterMetrics(t *testing.T) {
	c, err := New(Config{Slots: []SlotAddr{{ID: 0, Addr: "127.0.0.1:1"}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fs, err := NewFS(FSConfig{Data: c, Map: &StaticMapView{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	c.stats.repairs.Add(2)
	fs.raUsed.Add(3 << 20)
	c.stats.bytes.Add(4096)
	fs.ctr.bytesRead.Add(100)
	reg := prometheus.NewRegistry()
	if err := RegisterMetrics(reg, c, fs); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		if m.Counter != nil {
			got[mf.GetName()] = m.GetCounter().GetValue()
		} else {
			got[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"atoll_client_repairs_total": 2, "atoll_client_written_bytes_total": 4096, "atoll_client_read_bytes_total": 100,
		"atoll_client_degraded_stripes": 0, "atoll_client_cache_hits_total": 0, "atoll_client_degraded_reads_total": 0,
		"atoll_client_readahead_bytes": 3 << 20, "atoll_client_dirty_bytes": 0,
		"atoll_client_leases": 0, "atoll_client_lease_breaks_total": 0, "atoll_client_writebehind_total": 0,
		"atoll_client_unreachable_fails_total": 0, "atoll_client_unregistered_leaders_found_total": 0,
		"atoll_client_open_files": 0, "atoll_client_range_copy_bytes_total": 0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if len(got) != 24 {
		t.Errorf("%d metrics, want 24: %v", len(got), got)
	}
	// Registering twice on one registry is refused, not a panic.
	if err := RegisterMetrics(reg, c, fs); err == nil {
		t.Error("a second registration succeeded")
	}
}
