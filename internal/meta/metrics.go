package meta

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	member "github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/lease"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Island metrics (label island on every one):
//
//	atoll_meta_ops_total{op,result}          counter  requests served over the wire, by operation and result
//	                                                  (ok, an errno name such as ENOENT, or stale_epoch,
//	                                                  wrong_island, busy, unavailable, internal, bad_request)
//	atoll_meta_op_duration_seconds{op}       histogram handler time per operation
//	atoll_meta_tx_started_total              counter  cross-island transactions this island coordinated
//	atoll_meta_tx_committed_total            counter  ... whose commit decision was made durable
//	atoll_meta_tx_aborted_total              counter  ... that were aborted
//	atoll_meta_replayed_total                counter  retried changes answered without applying them again
//	atoll_meta_op_islands_total{islands}     counter  client requests by how many islands their work
//	                                                  involved: this one plus every other it called
//	                                                  ("1", "2", "3", "4+"; Archipelago's one-island
//	                                                  measure; peer and cleaner requests not counted)
//	atoll_meta_moves_total{role}             counter  table entries moved away (role="source", flipped) or
//	                                                  received (role="destination", applied)
//	atoll_meta_move_frozen_seconds           histogram how long a moving entry's changes waited: freeze to flip
//	atoll_meta_block_cache_hits_total        counter  pebble block cache hits (the island's record cache)
//	atoll_meta_block_cache_misses_total      counter
//	atoll_meta_block_cache_bytes             gauge
//
// The "ok" child and the histogram of every known operation are resolved
// at construction: the common path costs no label lookup. Failures look
// their child up by label values (no allocation once it exists).

// maxMetaOp bounds the op codes with their own label: codes without a
// name in metawire.Schema are "op_N", those above maxMetaOp (only malformed
// requests send them) share "op_other".
const maxMetaOp = 127

// resultLabel names an error by its errno where that is unambiguous, and
// by the sentinel where several share one (EAGAIN, EIO, EINVAL).
func resultLabel(e error, errno syscall.Errno) string {
	switch e {
	case metawire.ErrStaleEpoch:
		return "stale_epoch"
	case metawire.ErrWrongIsland:
		return "wrong_island"
	case metawire.ErrBusy:
		return "busy"
	case metawire.ErrWouldBlock:
		return "would_block"
	case metawire.ErrUnavailable:
		return "unavailable"
	case metawire.ErrInternal:
		return "internal"
	case metawire.ErrBadRequest:
		return "bad_request"
	}
	if name := errnoNames[errno]; name != "" {
		return name
	}
	return "errno_" + strconv.Itoa(int(errno))
}

var errnoNames = map[syscall.Errno]string{
	syscall.ENOENT: "ENOENT", syscall.EEXIST: "EEXIST", syscall.ENOTDIR: "ENOTDIR", syscall.EISDIR: "EISDIR",
	syscall.ENOTEMPTY: "ENOTEMPTY", syscall.EACCES: "EACCES", syscall.EPERM: "EPERM", syscall.EINVAL: "EINVAL",
	syscall.ENAMETOOLONG: "ENAMETOOLONG", syscall.ESTALE: "ESTALE", syscall.ENOSPC: "ENOSPC", syscall.EIO: "EIO",
	syscall.ELOOP: "ELOOP", syscall.EMLINK: "EMLINK", syscall.ENODATA: "ENODATA", syscall.ERANGE: "ERANGE",
	syscall.EROFS: "EROFS", syscall.ENOTSUP: "ENOTSUP", syscall.EFBIG: "EFBIG",
	syscall.EDEADLK: "EDEADLK", syscall.ENOLCK: "ENOLCK", syscall.EINTR: "EINTR",
}

// islandMetrics counts an island's work. With a nil Registerer the
// counters still count; nothing exports them.
type islandMetrics struct {
	reg       prometheus.Registerer
	opsVec    *prometheus.CounterVec
	latVec    *prometheus.HistogramVec
	opLabel   [maxMetaOp + 1]string
	ok        [maxMetaOp + 1]prometheus.Counter  // nil for unnamed ops
	latency   [maxMetaOp + 1]prometheus.Observer // nil for unnamed ops
	results   map[uint32]string                  // status code -> result label (read-only after construction)
	collected []prometheus.Collector

	txStarted, txCommitted, txAborted prometheus.Counter
	replayed                          prometheus.Counter
	leaseGrants                       prometheus.Counter
	locksHeld, lockWaiters            prometheus.Gauge
	lockSessions                      prometheus.Gauge
	lockSessionsEnded                 prometheus.Counter
	openHeld, openUnlinked            prometheus.Gauge
	openReclaimed                     prometheus.Counter
	islands                           [4]prometheus.Counter // client requests involving 1, 2, 3, 4+ islands
	movedAway, movedIn                prometheus.Counter
	frozen                            prometheus.Observer
	requests                          atomic.Uint64 // plain total, for heartbeats
}

func newIslandMetrics(reg prometheus.Registerer, id uint32) *islandMetrics {
	labels := prometheus.Labels{"island": strconv.FormatUint(uint64(id), 10)}
	m := &islandMetrics{reg: reg, results: map[uint32]string{}}
	m.opsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "atoll_meta_ops_total", Help: "Island requests served over the wire, by operation and result.", ConstLabels: labels,
	}, []string{"op", "result"})
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "atoll_meta_op_duration_seconds", Help: "Time to serve an island request, by operation.", ConstLabels: labels,
		Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10), // 50µs .. 13s
	}, []string{"op"})
	m.latVec = lat
	for i := range m.opLabel {
		m.opLabel[i] = "op_" + strconv.Itoa(i)
	}
	m.opLabel[maxMetaOp] = "op_other"
	for _, o := range metawire.Schema.Ops() {
		m.opLabel[o.Op] = o.Name
		m.ok[o.Op], m.latency[o.Op] = m.opsVec.WithLabelValues(o.Name, "ok"), lat.WithLabelValues(o.Name)
	}
	for _, e := range metawire.Table {
		m.results[e.Status] = resultLabel(e.Err, e.Errno)
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	m.txStarted = counter("atoll_meta_tx_started_total", "Cross-island transactions coordinated by this island.")
	m.txCommitted = counter("atoll_meta_tx_committed_total", "Coordinated transactions whose commit decision was made durable.")
	m.txAborted = counter("atoll_meta_tx_aborted_total", "Coordinated transactions aborted.")
	m.replayed = counter("atoll_meta_replayed_total", "Retried changes answered without applying them again (their request id was recorded).")
	m.leaseGrants = counter("atoll_meta_lease_grants_total", "Leases granted or renewed on buckets (leased lookups, getattrs and readdirs).")
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
	}
	m.locksHeld = gauge("atoll_meta_locks_held", "File locks (byte ranges and flocks) held on this island's inodes, at the last session sweep.")
	m.lockWaiters = gauge("atoll_meta_lock_waiters", "Blocking lock requests waiting on this island.")
	m.lockSessions = gauge("atoll_meta_lock_sessions", "Client lock sessions holding locks on this island.")
	m.lockSessionsEnded = counter("atoll_meta_lock_sessions_ended_total", "Lock sessions this island ended (not renewed for a term, or by an operator), releasing their locks.")
	m.openHeld = gauge("atoll_meta_open_held_inodes", "Inodes of this island some client session holds open (told the island), at the last session sweep.")
	m.openUnlinked = gauge("atoll_meta_open_unlinked_inodes", "Inodes with no name kept because a client session holds them open, at the last session sweep.")
	m.openReclaimed = counter("atoll_meta_open_reclaimed_total", "Unlinked inodes reclaimed when the last session holding them open let go.")
	islands := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "atoll_meta_op_islands_total", Help: "Client requests by how many islands their work involved (this one and every other it called).",
		ConstLabels: labels,
	}, []string{"islands"})
	for k, l := range []string{"1", "2", "3", "4+"} {
		m.islands[k] = islands.WithLabelValues(l)
	}
	moves := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "atoll_meta_moves_total", Help: "Namespace table entries moved away from (source) or received by (destination) this island.",
		ConstLabels: labels,
	}, []string{"role"})
	m.movedAway, m.movedIn = moves.WithLabelValues("source"), moves.WithLabelValues("destination")
	frozen := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "atoll_meta_move_frozen_seconds", Help: "How long a moving table entry refused changes: from its freeze to its flip.",
		ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(1e-3, 4, 9), // 1ms .. 65s
	})
	m.frozen = frozen
	m.collected = []prometheus.Collector{m.opsVec, lat, m.txStarted, m.txCommitted, m.txAborted, m.replayed, m.leaseGrants, islands, moves, frozen,
		m.locksHeld, m.lockWaiters, m.lockSessions, m.lockSessionsEnded, m.openHeld, m.openUnlinked, m.openReclaimed}
	return m
}

// peerOp marks, by op code (clamped to maxMetaOp), the requests islands,
// the cleaner and fsck send, not clients' namespace operations: the
// one-island measure leaves them out. An array: it is read on every
// request.
var peerOp = func() (p [maxMetaOp + 1]bool) {
	for _, op := range []uint16{metawire.OpPrepare, metawire.OpDecide, metawire.OpOutcome, metawire.OpAllocIno,
		metawire.OpClean, metawire.OpLiveBytes, metawire.OpStripeRefs, metawire.OpForget, metawire.OpFsck, metawire.OpLeasePoll,
		metawire.OpImportEntry, metawire.OpEntryLoad} {
		p[op] = true
	}
	return p
}()

// touched collects the other islands one request's work called (the
// one-island measure), carried in the request's context.
type touched struct {
	mu  sync.Mutex
	ids []namespace.IslandID
}

type touchedKey struct{}

// noteIsland records that the request of ctx called island id.
func noteIsland(ctx context.Context, id namespace.IslandID) {
	t, _ := ctx.Value(touchedKey{}).(*touched)
	if t == nil {
		return
	}
	t.mu.Lock()
	if !slices.Contains(t.ids, id) {
		t.ids = append(t.ids, id)
	}
	t.mu.Unlock()
}

// register exports the metrics, with the island's pebble cache figures.
func (m *islandMetrics) register(i *Island) error {
	if m.reg == nil {
		return nil
	}
	refused := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "atoll_meta_refused_connections_total", Help: "Connections closed because they did not authenticate with a key of this cluster.",
		ConstLabels: prometheus.Labels{"island": strconv.Itoa(int(i.id))},
	}, func() float64 {
		if i.srv == nil {
			return 0
		}
		return float64(i.srv.Refused())
	})
	islandLabel := prometheus.Labels{"island": strconv.Itoa(int(i.id))}
	leaseFunc := func(name, help string, f func(st lease.Stats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: islandLabel},
			func() float64 { return f(i.leases.Stats()) })
	}
	holders := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "atoll_meta_lease_holders", Help: "Leases on buckets held by client sessions now.", ConstLabels: islandLabel,
	}, func() float64 { return float64(i.leases.Stats().Holders) })
	m.collected = append(m.collected, newCacheCollector(i), refused, holders,
		leaseFunc("atoll_meta_lease_breaks_total", "Leases broken before a change and acknowledged by their holder.",
			func(st lease.Stats) float64 { return float64(st.Broken) }),
		leaseFunc("atoll_meta_lease_expired_total", "Leases a change waited out because their holder did not acknowledge the break.",
			func(st lease.Stats) float64 { return float64(st.Expired) }),
		leaseFunc("atoll_meta_lease_exclusive_total", "Exclusive leases granted (their holders may keep attribute changes back).",
			func(st lease.Stats) float64 { return float64(st.Exclusive) }),
		leaseFunc("atoll_meta_lease_recalls_total", "Exclusive leases recalled before another session's request.",
			func(st lease.Stats) float64 { return float64(st.Recalled) }),
		leaseFunc("atoll_meta_lease_renewals_total", "Lease terms extended by their session's polls (lease.Hold).",
			func(st lease.Stats) float64 { return float64(st.Renewed) }))
	for k, c := range m.collected {
		if err := m.reg.Register(c); err != nil {
			m.collected = m.collected[:k]
			m.unregister()
			return err
		}
	}
	return nil
}

// unregister withdraws the metrics (the island closed: a replica's next
// Island, when it leads again, registers its own).
func (m *islandMetrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collected {
		m.reg.Unregister(c)
	}
	m.collected = nil
}

// wrap counts every request h serves.
func (m *islandMetrics) wrap(h wire.Handler) wire.Handler {
	return func(ctx context.Context, req *wire.Request) (wire.Response, error) {
		start := time.Now()
		op := min(int(req.Op), maxMetaOp)
		client := !peerOp[op]
		var t *touched
		// Served on a connection's reader (inline), a request cannot call
		// another island (it would be served again on a worker instead).
		if client && !wire.IsInline(ctx) {
			t = &touched{}
			ctx = context.WithValue(ctx, touchedKey{}, t)
		}
		resp, err := h(ctx, req)
		if errors.Is(err, wire.ErrWouldBlock) {
			return resp, err // served again on a worker, and counted then
		}
		switch {
		case t != nil:
			t.mu.Lock()
			m.islands[min(len(t.ids), 3)].Inc()
			t.mu.Unlock()
		case client:
			m.islands[0].Inc()
		}
		switch {
		case err == nil && m.ok[op] != nil:
			m.ok[op].Inc()
		case err == nil:
			m.opsVec.WithLabelValues(m.opLabel[op], "ok").Inc()
		default:
			res, ok := m.results[metawire.StatusOf(err)]
			if !ok {
				res = "internal"
			}
			m.opsVec.WithLabelValues(m.opLabel[op], res).Inc()
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

// Ops returns the requests this island served over the wire (for
// heartbeats).
func (i *Island) Ops() uint64 { return i.met.requests.Load() }

// LeaseStats returns the island's lease figures for its member reports.
func (i *Island) LeaseStats() *member.LeaseStats {
	if i.leases == nil {
		return nil
	}
	st := i.leases.Stats()
	return &member.LeaseStats{Held: uint64(st.Holders), Granted: st.Granted, Broken: st.Broken, Expired: st.Expired,
		Exclusive: st.Exclusive, Recalled: st.Recalled}
}

// LockStats returns the island's lock and open-file figures for its
// member reports (the last session sweep's, and counters).
func (i *Island) LockStats() *member.LockStats {
	st := &i.flocks.stats
	return &member.LockStats{Locks: st.locks.Load(), Waiters: st.waiters.Load(), Sessions: st.sessions.Load(),
		SessionsEnded: st.sessionsEnded.Load(), OpenHeld: st.openHeld.Load(), OpenUnlinked: st.openUnlinked.Load(),
		OpenReclaimed: st.openReclaimed.Load()}
}

// cacheCollector exports the pebble block cache figures, read at scrape
// time (nothing once the island is closed).
type cacheCollector struct {
	i                   *Island
	hits, misses, bytes *prometheus.Desc
}

func newCacheCollector(i *Island) *cacheCollector {
	labels := prometheus.Labels{"island": strconv.FormatUint(uint64(i.cfg.ID), 10)}
	return &cacheCollector{
		i:      i,
		hits:   prometheus.NewDesc("atoll_meta_block_cache_hits_total", "Pebble block cache hits.", nil, labels),
		misses: prometheus.NewDesc("atoll_meta_block_cache_misses_total", "Pebble block cache misses.", nil, labels),
		bytes:  prometheus.NewDesc("atoll_meta_block_cache_bytes", "Bytes held by the pebble block cache.", nil, labels),
	}
}

func (c *cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.hits
	ch <- c.misses
	ch <- c.bytes
}

func (c *cacheCollector) Collect(ch chan<- prometheus.Metric) {
	if c.i.enter() != nil {
		return
	}
	bc := c.i.db.Metrics().BlockCache
	c.i.leave()
	ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(bc.Hits))
	ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(bc.Misses))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(bc.Size))
}
