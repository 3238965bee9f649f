package nfs

import (
	"encoding/binary"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Gateway metrics:
//
//	atoll_nfs_requests_total{program,proc,status}       counter  calls that ran a procedure, by program
//	                                                              (nfs, mount, portmap), procedure and status:
//	                                                              the NFS3/MOUNT3 status in the reply ("ok",
//	                                                              "noent", "stale", ...) or the RPC failure
//	                                                              ("garbage_args", "system_err")
//	atoll_nfs_request_duration_seconds{program,proc}    histogram time to run a procedure
//
// The "ok" child and the histogram of every NFS and MOUNT procedure are
// resolved at construction; other outcomes look their child up by
// precomputed label values (no allocation once the child exists). The
// client library's metrics (bytes, degraded reads, caches) are registered
// by the command next to these (client.RegisterMetrics).

// procNames label the procedures of each program by number.
var (
	nfsProcNames = [...]string{"null", "getattr", "setattr", "lookup", "access", "readlink", "read", "write",
		"create", "mkdir", "symlink", "mknod", "remove", "rmdir", "rename", "link", "readdir", "readdirplus",
		"fsstat", "fsinfo", "pathconf", "commit"}
	mountProcNames = [...]string{"null", "mnt", "dump", "umnt", "umntall", "export"}
	pmapProcNames  = [...]string{"null", "set", "unset", "getport", "dump", "callit", "gettime", "uaddr2taddr", "taddr2uaddr"}
)

// statusNames names nfsstat3 values (MOUNT3's share the numbering).
var statusNames = map[uint32]string{
	0: "ok", 1: "perm", 2: "noent", 5: "io", 6: "nxio", 13: "acces", 17: "exist", 18: "xdev", 19: "nodev",
	20: "notdir", 21: "isdir", 22: "inval", 27: "fbig", 28: "nospc", 30: "rofs", 31: "mlink",
	63: "nametoolong", 66: "notempty", 69: "dquot", 70: "stale", 71: "remote", 10001: "badhandle",
	10002: "not_sync", 10003: "bad_cookie", 10004: "notsupp", 10005: "toosmall", 10006: "serverfault",
	10007: "badtype", 10008: "jukebox",
}

// progMetrics are one program's pre-resolved children.
type progMetrics struct {
	name    string
	procs   []string // label per procedure number
	ok      []prometheus.Counter
	latency []prometheus.Observer
}

// gatewayMetrics counts a gateway's calls. Without a registerer it still
// counts; nothing exports it.
type gatewayMetrics struct {
	reqs     *prometheus.CounterVec
	lat      *prometheus.HistogramVec
	nfs, mnt progMetrics
	pmap     progMetrics // not pre-resolved: rare calls
	requests atomic.Uint64
}

func newGatewayMetrics(reg prometheus.Registerer) (*gatewayMetrics, error) {
	m := &gatewayMetrics{
		reqs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atoll_nfs_requests_total", Help: "NFS, MOUNT and portmapper calls by procedure and status.",
		}, []string{"program", "proc", "status"}),
		lat: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "atoll_nfs_request_duration_seconds", Help: "Time to run an NFS, MOUNT or portmapper procedure.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10), // 50µs .. 13s
		}, []string{"program", "proc"}),
	}
	resolve := func(name string, procs []string) progMetrics {
		p := progMetrics{name: name, procs: procs}
		for _, proc := range procs {
			p.ok = append(p.ok, m.reqs.WithLabelValues(name, proc, "ok"))
			p.latency = append(p.latency, m.lat.WithLabelValues(name, proc))
		}
		return p
	}
	m.nfs = resolve("nfs", nfsProcNames[:])
	m.mnt = resolve("mount", mountProcNames[:])
	m.pmap = progMetrics{name: "portmap", procs: pmapProcNames[:]}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.reqs, m.lat} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// observe counts one call that ran procedure hdr.proc; res is the
// procedure's results (after the accepted-reply header) and err what the
// procedure returned.
func (m *gatewayMetrics) observe(hdr *callHeader, res []byte, err error, start time.Time) {
	m.requests.Add(1)
	var p *progMetrics
	switch hdr.prog {
	case progNFS:
		p = &m.nfs
	case progMount:
		p = &m.mnt
	case progPortmap:
		p = &m.pmap
	default:
		return
	}
	proc := "other"
	if int(hdr.proc) < len(p.procs) {
		proc = p.procs[hdr.proc]
	}
	status := "ok"
	switch {
	case errors.Is(err, errGarbage):
		status = "garbage_args"
	case err != nil:
		status = "system_err"
	case hdr.proc != 0 && len(res) >= 4 && (hdr.prog == progNFS || hdr.prog == progMount && hdr.proc == mountProcMnt):
		// Every NFSv3 result and MNT's begin with their status.
		st := binary.BigEndian.Uint32(res)
		if status = statusNames[st]; status == "" {
			status = "status_" + strconv.FormatUint(uint64(st), 10)
		}
	}
	d := time.Since(start).Seconds()
	if status == "ok" && int(hdr.proc) < len(p.ok) {
		p.ok[hdr.proc].Inc()
		p.latency[hdr.proc].Observe(d)
		return
	}
	m.reqs.WithLabelValues(p.name, proc, status).Inc()
	if int(hdr.proc) < len(p.latency) {
		p.latency[hdr.proc].Observe(d)
	} else {
		m.lat.WithLabelValues(p.name, proc).Observe(d)
	}
}

// Requests returns the calls the gateway has run (for heartbeats).
func (s *Server) Requests() uint64 { return s.met.requests.Load() }
