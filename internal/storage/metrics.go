package storage

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Storage server metrics (label slot on every one, so several servers can
// share a registry in tests):
//
//	atoll_storage_ops_total{op,result}            counter  requests by operation and result (ok, not_found, corrupt, ...)
//	atoll_storage_op_duration_seconds{op}         histogram handler time per operation
//	atoll_storage_read_bytes_total                counter  fragment bytes returned by reads
//	atoll_storage_written_bytes_total             counter  fragment bytes stored by puts (repairs included) and appends
//	atoll_storage_capacity_bytes, _used_bytes, _free_bytes, _fragments   gauges
//	atoll_storage_corrupt_ranges_total            counter  sick ranges found by any path
//	atoll_storage_repairs_total                   counter  fragments repaired in place
//	atoll_storage_scrub_passes_total              counter  complete scrub passes
//	atoll_storage_scrub_bytes_total               counter  bytes verified by the scrubber
//	atoll_storage_scrub_pass_bytes                gauge    bytes verified in the current pass
//	atoll_storage_scrub_pass_fragments            gauge    fragments verified in the current pass
//	atoll_storage_scrub_progress_ratio            gauge    current pass bytes / used bytes (0..1)
//	atoll_storage_scrub_corrupt_ranges_total      counter  sick ranges found by the scrubber
//
// The store's figures are read once per scrape (storeCollector); the
// request counters are updated per request with label children resolved
// in advance, so serving costs no map lookups or allocations.

// maxOpLabel bounds the op codes with their own label; higher ones (only
// malformed requests send them) share "op_other".
const maxOpLabel = 63

// resultNames names the protocol's status codes; 0 is success.
var resultNames = [...]string{
	0:                             "ok",
	fragment.StatusInternal:       "internal",
	fragment.StatusNotFound:       "not_found",
	fragment.StatusExists:         "exists",
	fragment.StatusCorrupt:        "corrupt",
	fragment.StatusOutOfRange:     "out_of_range",
	fragment.StatusNoSpace:        "no_space",
	fragment.StatusBadData:        "bad_data",
	fragment.StatusRepairMismatch: "repair_mismatch",
	fragment.StatusBadRequest:     "bad_request",
	fragment.StatusUnavailable:    "unavailable",
	fragment.StatusForbidden:      "forbidden",
}

// serverMetrics counts a server's requests. Without a registerer it
// still counts: the counters exist, nobody scrapes them. The "ok" child and
// the histogram of every named operation are resolved at construction, so
// the common path costs no label lookup; failures and unnamed operations
// look their child up by (precomputed) label values, which does not
// allocate once the child exists.
type serverMetrics struct {
	opsVec  *prometheus.CounterVec
	latVec  *prometheus.HistogramVec
	opLabel [maxOpLabel + 1]string
	ok      [maxOpLabel + 1]prometheus.Counter // nil for unnamed ops
	latency [maxOpLabel + 1]prometheus.Observer

	// Plain atomics as well, so heartbeats read totals without going
	// through the prometheus client.
	bytesRead, bytesWritten, requests atomic.Uint64
}

func newServerMetrics(reg prometheus.Registerer, slot uint16, st *Store, refused func() uint64) (*serverMetrics, error) {
	labels := prometheus.Labels{"slot": strconv.Itoa(int(slot))}
	opsVec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "atoll_storage_ops_total", Help: "Storage requests by operation and result.", ConstLabels: labels,
	}, []string{"op", "result"})
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "atoll_storage_op_duration_seconds", Help: "Time to serve a storage request, by operation.", ConstLabels: labels,
		Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10), // 50µs .. 13s
	}, []string{"op"})
	m := &serverMetrics{opsVec: opsVec, latVec: lat}
	for op := range m.opLabel {
		m.opLabel[op] = "op_" + strconv.Itoa(op)
	}
	m.opLabel[maxOpLabel] = "op_other"
	for _, o := range fragment.Schema.Ops() {
		m.opLabel[o.Op] = o.Name
		m.ok[o.Op], m.latency[o.Op] = opsVec.WithLabelValues(o.Name, "ok"), lat.WithLabelValues(o.Name)
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{
		opsVec, lat,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "atoll_storage_read_bytes_total", Help: "Fragment bytes returned by reads.", ConstLabels: labels,
		}, func() float64 { return float64(m.bytesRead.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "atoll_storage_written_bytes_total", Help: "Fragment bytes stored by puts (repairs included) and appends.", ConstLabels: labels,
		}, func() float64 { return float64(m.bytesWritten.Load()) }),
		newStoreCollector(st, labels),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "atoll_storage_refused_connections_total", Help: "Connections closed because they did not authenticate with a key of this cluster.", ConstLabels: labels,
		}, func() float64 { return float64(refused()) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// wrap counts every request h serves: operation, result, time and bytes.
func (m *serverMetrics) wrap(h wire.Handler) wire.Handler {
	return func(ctx context.Context, req *wire.Request) (wire.Response, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		op := min(int(req.Op), maxOpLabel)
		switch {
		case err != nil:
			res := int(statusOf(err))
			if res >= len(resultNames) || resultNames[res] == "" {
				res = int(fragment.StatusInternal)
			}
			m.opsVec.WithLabelValues(m.opLabel[op], resultNames[res]).Inc()
		case m.ok[op] != nil:
			m.ok[op].Inc()
		default:
			m.opsVec.WithLabelValues(m.opLabel[op], "ok").Inc()
		}
		if err == nil {
			switch req.Op {
			case fragment.OpPut, fragment.OpAppend:
				m.bytesWritten.Add(uint64(len(req.Payload)))
			case fragment.OpRead:
				m.bytesRead.Add(uint64(len(resp.Payload)))
			}
		}
		if l := m.latency[op]; l != nil {
			l.Observe(time.Since(start).Seconds())
		} else {
			m.latVec.WithLabelValues(m.opLabel[op]).Observe(time.Since(start).Seconds())
		}
		m.requests.Add(1)
		return resp, err
	}
}

// IOStats are a server's request totals since it started.
type IOStats struct {
	BytesRead    uint64 // fragment bytes returned by reads
	BytesWritten uint64 // fragment bytes stored by puts and appends
	Requests     uint64 // requests served, failed ones included
}

// IOStats returns the server's request totals (for heartbeats).
func (s *Server) IOStats() IOStats {
	return IOStats{BytesRead: s.met.bytesRead.Load(), BytesWritten: s.met.bytesWritten.Load(), Requests: s.met.requests.Load()}
}

// storeCollector exports Store.Stat, read once per scrape (Stat may ask
// the filesystem for its free space).
type storeCollector struct {
	st                                                               *Store
	capacity, used, free, fragments, corrupt, repairs                *prometheus.Desc
	passes, scrubBytes, passBytes, passFrags, progress, scrubCorrupt *prometheus.Desc
}

func newStoreCollector(st *Store, labels prometheus.Labels) *storeCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("atoll_storage_"+name, help, nil, labels)
	}
	return &storeCollector{
		st:           st,
		capacity:     d("capacity_bytes", "Bytes this server may store (configured cap, else used plus free space)."),
		used:         d("used_bytes", "Sum of the committed fragment lengths."),
		free:         d("free_bytes", "How many more fragment bytes fit."),
		fragments:    d("fragments", "Fragments stored."),
		corrupt:      d("corrupt_ranges_total", "Sick (checksum-failing) ranges found by reads, verifies, appends and the scrubber."),
		repairs:      d("repairs_total", "Fragments repaired in place."),
		passes:       d("scrub_passes_total", "Complete scrub passes over all fragments."),
		scrubBytes:   d("scrub_bytes_total", "Bytes verified by the scrubber, all passes."),
		passBytes:    d("scrub_pass_bytes", "Bytes verified in the current scrub pass."),
		passFrags:    d("scrub_pass_fragments", "Fragments verified in the current scrub pass."),
		progress:     d("scrub_progress_ratio", "Progress of the current scrub pass: its bytes over the used bytes (0..1)."),
		scrubCorrupt: d("scrub_corrupt_ranges_total", "Sick ranges found by the scrubber."),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.capacity, c.used, c.free, c.fragments, c.corrupt, c.repairs,
		c.passes, c.scrubBytes, c.passBytes, c.passFrags, c.progress, c.scrubCorrupt} {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.st.Stat()
	g := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	n := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	g(c.capacity, s.CapacityBytes)
	g(c.used, s.UsedBytes)
	g(c.free, s.FreeBytes)
	g(c.fragments, s.Fragments)
	n(c.corrupt, s.CorruptDetected)
	n(c.repairs, s.Repairs)
	n(c.passes, s.Scrub.Passes)
	n(c.scrubBytes, s.Scrub.Bytes)
	g(c.passBytes, s.Scrub.PassBytes)
	g(c.passFrags, s.Scrub.PassFragments)
	ch <- prometheus.MustNewConstMetric(c.progress, prometheus.GaugeValue, ScrubProgress(s))
	n(c.scrubCorrupt, s.Scrub.CorruptFound)
}

// ScrubProgress is the current scrub pass's progress, 0..1: the bytes it
// verified over the bytes stored (1 when nothing is stored).
func ScrubProgress(s Stats) float64 {
	if s.UsedBytes <= 0 {
		return 1
	}
	return min(float64(s.Scrub.PassBytes)/float64(s.UsedBytes), 1)
}
