package meta

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/atoll-fs/atoll/internal/auth"
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

// TestOneIslandMeasure: a create counts one island; a mkdir whose new
// directory lives on another island counts two (its inode is allocated
// and created there), as does a rename into a directory of another
// island; the peer requests they cause are not counted.
func TestOneIslandMeasure(t *testing.T) {
	w := newThreeWay(t)
	id := w.ids[0]
	a, b := w.others(id)
	isl := w.isl[id]
	counts := func() [4]float64 {
		var out [4]float64
		for k, c := range isl.met.islands {
			out[k] = counterValue(t, c)
		}
		return out
	}
	serve := func(op uint16, req metawire.Message) {
		t.Helper()
		r := &wire.Request{Op: op, Epoch: w.epoch, Msg: metawire.Marshal(req), Peer: auth.Peer{Name: "client", Caps: auth.CapRead | auth.CapWrite}}
		if _, err := isl.Serve(bg, r); err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
	}
	before := counts()
	dir := w.dirs[id]
	serve(metawire.OpCreate, &metawire.CreateReq{Cred: metawire.Root, Dir: dir.Ino, Name: "f", Mode: 0o644})
	serve(metawire.OpMkdir, &metawire.CreateReq{Cred: metawire.Root, Dir: dir.Ino, Name: w.nameOn(w.paths[id], "c", a), Mode: 0o755})
	// A file in /dA renamed into /dB, asked of the source's island (id).
	serve(metawire.OpRename, &metawire.RenameReq{Cred: metawire.Root, SrcDir: dir.Ino, SrcName: "f", DstDir: w.dirs[b].Ino, DstName: "g"})
	after := counts()
	got := [4]float64{after[0] - before[0], after[1] - before[1], after[2] - before[2], after[3] - before[3]}
	if got != [4]float64{1, 2, 0, 0} {
		t.Fatalf("requests by islands involved (1, 2, 3, 4+): %v, want the create on 1, the mkdir and the rename on 2", got)
	}
}
