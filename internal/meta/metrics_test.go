package meta

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/wire"
)

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func TestIslandMetricsWrap(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newIslandMetrics(reg, 3)
	for _, c := range m.collected {
		reg.MustRegister(c)
	}
	h := m.wrap(func(_ context.Context, req *wire.Request) (wire.Response, error) {
		switch req.Op {
		case metawire.OpLookup:
			return wire.Response{}, fmt.Errorf("lookup: %w", metawire.ErrNotFound)
		case metawire.OpMkdir:
			return wire.Response{}, fmt.Errorf("mkdir: %w", metawire.ErrBusy)
		}
		return wire.Response{}, nil
	})
	for _, op := range []uint16{metawire.OpLookup, metawire.OpLookup, metawire.OpMkdir, metawire.OpGetAttr, 100, 60000} {
		_, _ = h(bg, &wire.Request{Op: op})
	}
	want := map[[2]string]float64{
		{"lookup", "ENOENT"}: 2, {"mkdir", "busy"}: 1, {"getattr", "ok"}: 1, {"op_100", "ok"}: 1, {"op_other", "ok"}: 1,
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[[2]string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "atoll_meta_ops_total" {
			continue
		}
		for _, x := range mf.GetMetric() {
			var op, res string
			for _, l := range x.GetLabel() {
				switch l.GetName() {
				case "op":
					op = l.GetValue()
				case "result":
					res = l.GetValue()
				case "island":
					if l.GetValue() != "3" {
						t.Errorf("island label %q", l.GetValue())
					}
				}
			}
			if v := x.GetCounter().GetValue(); v != 0 {
				got[[2]string{op, res}] = v
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ops: %v, want %v", got, want)
	}
	if m.requests.Load() != 6 {
		t.Errorf("requests %d", m.requests.Load())
	}
	// Every status of the errno table has a label.
	for _, e := range metawire.Table {
		if m.results[e.Status] == "" {
			t.Errorf("status %d (%v) has no result label", e.Status, e.Err)
		}
	}
}

func TestIslandTxMetrics(t *testing.T) {
	w := newThreeWay(t)
	id := w.ids[0]
	a, _ := w.others(id)
	name := w.nameOn(w.paths[id], "m", a)
	must(w.r.mkdir(w.dirs[id].Ino, name, 0o755))
	var started, committed, aborted float64
	for _, isl := range w.isl {
		started += counterValue(t, isl.met.txStarted)
		committed += counterValue(t, isl.met.txCommitted)
		aborted += counterValue(t, isl.met.txAborted)
	}
	if started < 1 || committed < 1 || started != committed+aborted {
		t.Fatalf("transactions: %v started, %v committed, %v aborted", started, committed, aborted)
	}
}
