package nfs

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestGatewayMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newGatewayMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	status := func(st uint32) []byte { return binary.BigEndian.AppendUint32(nil, st) }
	now := time.Now()
	m.observe(&callHeader{prog: progNFS, proc: nfsProcGetattr}, status(0), nil, now)
	m.observe(&callHeader{prog: progNFS, proc: nfsProcLookup}, status(2), nil, now)
	m.observe(&callHeader{prog: progNFS, proc: nfsProcLookup}, status(2), nil, now)
	m.observe(&callHeader{prog: progNFS, proc: nfsProcRead}, status(70), nil, now)
	m.observe(&callHeader{prog: progNFS, proc: nfsProcWrite}, nil, errGarbage, now)
	m.observe(&callHeader{prog: progNFS, proc: nfsProcNull}, nil, nil, now)
	m.observe(&callHeader{prog: progMount, proc: mountProcMnt}, status(13), nil, now)
	m.observe(&callHeader{prog: progMount, proc: mountProcExport}, status(99), nil, now) // not a status: EXPORT's list
	m.observe(&callHeader{prog: progPortmap, proc: 3}, status(2049), nil, now)
	m.observe(&callHeader{prog: progNFS, proc: 99}, nil, fmt.Errorf("boom"), now)

	want := map[string]float64{
		"nfs/getattr/ok": 1, "nfs/lookup/noent": 2, "nfs/read/stale": 1, "nfs/write/garbage_args": 1, "nfs/null/ok": 1,
		"mount/mnt/acces": 1, "mount/export/ok": 1, "portmap/getport/ok": 1, "nfs/other/system_err": 1,
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "atoll_nfs_requests_total" {
			continue
		}
		for _, x := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range x.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if v := x.GetCounter().GetValue(); v != 0 {
				got[l["program"]+"/"+l["proc"]+"/"+l["status"]] = v
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests:\n got %v\nwant %v", got, want)
	}
	if m.requests.Load() != 10 {
		t.Errorf("requests total %d", m.requests.Load())
	}
}
