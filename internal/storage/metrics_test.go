package storage

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/wire"
)

func TestServerMetrics(t *testing.T) {
	st, err := Open(Config{Dir: "/m", FS: vfs.NewMem(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reg := prometheus.NewRegistry()
	m, err := newServerMetrics(reg, 4, st, func() uint64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3000)
	if err := st.Put(bg, fid(1, 1, 0), data, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.ScrubOnce(bg, 0); err != nil {
		t.Fatal(err)
	}

	// The wrapper counts by op and result, bytes on success only.
	h := m.wrap(func(_ context.Context, req *wire.Request) (wire.Response, error) {
		switch req.Op {
		case fragment.OpRead:
			return wire.Response{Payload: make([]byte, 100)}, nil
		case fragment.OpDelete:
			return wire.Response{}, fmt.Errorf("delete: %w", ErrNotFound)
		}
		return wire.Response{}, nil
	})
	for _, req := range []wire.Request{
		{Op: fragment.OpPut, Payload: make([]byte, 1000)},
		{Op: fragment.OpAppend, Payload: make([]byte, 24)},
		{Op: fragment.OpRead}, {Op: fragment.OpRead},
		{Op: fragment.OpDelete, Payload: make([]byte, 5)},
		{Op: 30}, {Op: 9999},
	} {
		if _, err := h(bg, &req); (err != nil) != (req.Op == fragment.OpDelete) {
			t.Fatalf("op %d: %v", req.Op, err)
		}
	}
	if io := (&Server{met: m}).IOStats(); io != (IOStats{BytesRead: 200, BytesWritten: 1024, Requests: 7}) {
		t.Fatalf("IOStats %+v", io)
	}
	got := gatherStorage(t, reg)
	for name, want := range map[string]float64{
		`atoll_storage_ops_total{op="put",result="ok",slot="4"}`:           1,
		`atoll_storage_ops_total{op="read",result="ok",slot="4"}`:          2,
		`atoll_storage_ops_total{op="delete",result="not_found",slot="4"}`: 1,
		`atoll_storage_ops_total{op="op_30",result="ok",slot="4"}`:         1,
		`atoll_storage_ops_total{op="op_other",result="ok",slot="4"}`:      1,
		`atoll_storage_op_duration_seconds{op="read",slot="4"}`:            2, // sample count
		`atoll_storage_read_bytes_total{slot="4"}`:                         200,
		`atoll_storage_written_bytes_total{slot="4"}`:                      1024,
		`atoll_storage_used_bytes{slot="4"}`:                               3000,
		`atoll_storage_fragments{slot="4"}`:                                1,
		`atoll_storage_scrub_passes_total{slot="4"}`:                       1,
		`atoll_storage_scrub_bytes_total{slot="4"}`:                        3000,
		`atoll_storage_scrub_pass_fragments{slot="4"}`:                     1,
		`atoll_storage_scrub_progress_ratio{slot="4"}`:                     1,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}

	// Without a registerer the counters still work.
	m2, err := newServerMetrics(nil, 0, st, func() uint64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m2.wrap(func(context.Context, *wire.Request) (wire.Response, error) { return wire.Response{}, nil })(bg, &wire.Request{Op: fragment.OpPut, Payload: []byte{1}}); err != nil {
		t.Fatal(err)
	}
	if m2.bytesWritten.Load() != 1 {
		t.Fatal("unregistered metrics do not count")
	}
}

func gatherStorage(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName() + "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())
			}
			out[key+"}"] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
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
