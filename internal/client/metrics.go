package client

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Client metrics, exported by RegisterMetrics from the counters the client
// keeps anyway (Stats, CacheStats), read once per scrape:
//
//	atoll_client_read_bytes_total              counter  file bytes handed to readers (FS)
//	atoll_client_written_bytes_total           counter  file data bytes made durable in stripes
//	atoll_client_stripes_written_total         counter
//	atoll_client_degraded_stripes_written_total counter stripes written with fragments missing
//	atoll_client_blocks_read_total             counter
//	atoll_client_degraded_reads_total          counter  block reads that needed reconstruction
//	atoll_client_corrupt_ranges_total          counter  fragment ranges found corrupt
//	atoll_client_repairs_total                 counter  fragments rebuilt or rewritten by on-the-fly repair
//	atoll_client_repair_failures_total         counter
//	atoll_client_degraded_stripes              gauge    stripes known to miss fragments, waiting for repair
//	atoll_client_cache_hits_total              counter  attribute and name cache hits (FS)
//	atoll_client_cache_misses_total            counter
//	atoll_client_leases                        gauge    buckets this client holds a live lease on
//	atoll_client_lease_breaks_total            counter
//	atoll_client_unreachable_fails_total       counter  island requests failed at once: their island was given up on (unreachable.go)
//	atoll_client_range_copy_bytes_total{how}   counter  copy_file_range bytes cloned (pointers shared) or copied
//	atoll_client_open_files{held}              gauge    files held open for the mount's users: held island|local (opens.go)
//	atoll_client_writebehind_total{what,outcome} counter changes kept back under exclusive leases:
//	                                                    what attr|create, outcome kept|sent|failed|cancelled|short_lease
//	                                                    (a create removed before it was sent: no island request)

// fsCounters are the FS's own counters (the data client keeps the rest).
type fsCounters struct {
	bytesRead        atomic.Uint64
	clonedBytes      atomic.Uint64 // file bytes cloned by sharing block pointers (CloneRange)
	copiedBytes      atomic.Uint64 // file bytes a range copy had to copy (CountCopied)
	lockRequests     atomic.Uint64 // locks asked for (SetLock)
	lockSessionsLost atomic.Uint64 // lock sessions an island ended
	localLocks       atomic.Uint64 // locks granted under an exclusive lease, without a request
	lockHandOvers    atomic.Uint64 // local lock copies handed to their island
}

// LocalLocks returns how many locks this FS granted itself under
// exclusive leases, and how many local copies it handed over.
func (f *FS) LocalLocks() (granted, handedOver uint64) {
	return f.ctr.localLocks.Load(), f.ctr.lockHandOvers.Load()
}

// LockSessionsLost returns how many of this FS's lock sessions an
// island ended (their locks and open-file holds went with them).
func (f *FS) LockSessionsLost() uint64 { return f.ctr.lockSessionsLost.Load() }

// ClonedBytes returns the bytes CloneRange shared instead of copying,
// and CopiedBytes those range copies copied (CountCopied).
func (f *FS) ClonedBytes() (cloned, copied uint64) {
	return f.ctr.clonedBytes.Load(), f.ctr.copiedBytes.Load()
}

// CountCopied counts n bytes a range copy (copy_file_range) copied
// because they could not be cloned.
func (f *FS) CountCopied(n uint64) { f.ctr.copiedBytes.Add(n) }

// BytesRead returns the file bytes handed to readers since the FS was made.
func (f *FS) BytesRead() uint64 { return f.ctr.bytesRead.Load() }

// RegisterMetrics exports c's counters and, when fs is not nil, the naming
// layer's, on reg. The client keeps no metric state of its own: a process
// that never calls this pays nothing.
func RegisterMetrics(reg prometheus.Registerer, c *Client, fs *FS) error {
	return reg.Register(&clientCollector{c: c, fs: fs, descs: newClientDescs()})
}

type clientDescs struct {
	readBytes, writtenBytes, stripes, degradedWritten, blocksRead, degradedReads,
	corrupt, repairs, repairFailures, degraded, cacheHits, cacheMisses, readAhead, dirty,
	leases, leaseBreaks, fastFails, leaderHints, writeBehind,
	lockRequests, lockedInodes, lockSessionsLost, openFiles, rangeCopy *prometheus.Desc
}

func newClientDescs() clientDescs {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("atoll_client_"+name, help, nil, nil)
	}
	return clientDescs{
		readBytes:        d("read_bytes_total", "File bytes handed to readers."),
		writtenBytes:     d("written_bytes_total", "File data bytes made durable in stripes."),
		stripes:          d("stripes_written_total", "Stripes written."),
		degradedWritten:  d("degraded_stripes_written_total", "Stripes written with fragments missing."),
		blocksRead:       d("blocks_read_total", "Blocks read from storage servers."),
		degradedReads:    d("degraded_reads_total", "Block reads that needed reconstruction from parity or mirrors."),
		corrupt:          d("corrupt_ranges_total", "Fragment ranges found corrupt (by servers or by the parental checksum)."),
		repairs:          d("repairs_total", "Fragments rebuilt or rewritten by on-the-fly repair."),
		repairFailures:   d("repair_failures_total", "On-the-fly repairs that failed."),
		degraded:         d("degraded_stripes", "Stripes known to miss fragments, waiting for repair."),
		cacheHits:        d("cache_hits_total", "Attribute and name cache hits."),
		cacheMisses:      d("cache_misses_total", "Attribute and name cache misses."),
		readAhead:        d("readahead_bytes", "Bytes of read-ahead windows and prefetches alive (bounded by the read-ahead budget)."),
		dirty:            d("dirty_bytes", "Bytes of written data buffered and not yet committed, all files together."),
		leases:           d("leases", "Directories (buckets) this client holds a live lease on."),
		leaseBreaks:      d("lease_breaks_total", "Leases its islands broke before another client's change."),
		fastFails:        d("unreachable_fails_total", "Island requests failed at once: a request had given up on their island and no probe reached it since."),
		leaderHints:      d("unregistered_leaders_found_total", "Islands found led at an address the cluster map does not name (the leader could not register: managers away)."),
		lockRequests:     d("lock_requests_total", "File locks asked for (fcntl, OFD, flock), granted or not."),
		lockedInodes:     d("locked_inodes", "Files this client holds locks on."),
		lockSessionsLost: d("lock_sessions_lost_total", "Lock sessions an island ended (not renewed within its term): their locks were lost."),
		rangeCopy: prometheus.NewDesc("atoll_client_range_copy_bytes_total",
			"Bytes of range copies (copy_file_range) by how: cloned (block pointers shared, no data moved) or copied.",
			[]string{"how"}, nil),
		openFiles: prometheus.NewDesc("atoll_client_open_files",
			"Files this client holds open for its users (the mount), by where the hold is: island (another client's unlink keeps the file) or local (under an exclusive lease, told at its recall).",
			[]string{"held"}, nil),
		writeBehind: prometheus.NewDesc("atoll_client_writebehind_total",
			"Changes kept back under exclusive leases (what: attr, create, unlink) by outcome: kept (answered without a request), sent, failed, cancelled (a create removed before it was sent), short_lease (a create sent at once: its exclusive lease had under a second left).",
			[]string{"what", "outcome"}, nil),
	}
}

type clientCollector struct {
	c     *Client
	fs    *FS
	descs clientDescs
}

func (k *clientCollector) Describe(ch chan<- *prometheus.Desc) {
	d := &k.descs
	for _, x := range []*prometheus.Desc{d.readBytes, d.writtenBytes, d.stripes, d.degradedWritten, d.blocksRead,
		d.degradedReads, d.corrupt, d.repairs, d.repairFailures, d.degraded, d.cacheHits, d.cacheMisses, d.readAhead, d.dirty,
		d.leases, d.leaseBreaks, d.fastFails, d.leaderHints, d.writeBehind, d.lockRequests, d.lockedInodes, d.lockSessionsLost, d.openFiles, d.rangeCopy} {
		ch <- x
	}
}

func (k *clientCollector) Collect(ch chan<- prometheus.Metric) {
	d := &k.descs
	counter := func(desc *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v))
	}
	st := k.c.Stats()
	counter(d.writtenBytes, st.BytesWritten)
	counter(d.stripes, st.StripesWritten)
	counter(d.degradedWritten, st.DegradedStripes)
	counter(d.blocksRead, st.BlocksRead)
	counter(d.degradedReads, st.DegradedReads)
	counter(d.corrupt, st.CorruptDetected)
	counter(d.repairs, st.Repairs)
	counter(d.repairFailures, st.RepairFailures)
	ch <- prometheus.MustNewConstMetric(d.degraded, prometheus.GaugeValue, float64(len(k.c.DegradedStripes())))
	if k.fs != nil {
		counter(d.readBytes, k.fs.BytesRead())
		cloned, copied := k.fs.ClonedBytes()
		ch <- prometheus.MustNewConstMetric(d.rangeCopy, prometheus.CounterValue, float64(cloned), "cloned")
		ch <- prometheus.MustNewConstMetric(d.rangeCopy, prometheus.CounterValue, float64(copied), "copied")
		hits, misses := k.fs.CacheStats()
		counter(d.cacheHits, hits)
		counter(d.cacheMisses, misses)
		ch <- prometheus.MustNewConstMetric(d.readAhead, prometheus.GaugeValue, float64(k.fs.ReadAheadBytes()))
		ch <- prometheus.MustNewConstMetric(d.dirty, prometheus.GaugeValue, float64(k.fs.DirtyBytes()))
		ch <- prometheus.MustNewConstMetric(d.leases, prometheus.GaugeValue, float64(k.fs.LeasesHeld()))
		counter(d.leaseBreaks, k.fs.LeaseBreaks())
		counter(d.fastFails, k.fs.FastFails())
		counter(d.leaderHints, k.fs.LeaderHints())
		counter(d.lockRequests, k.fs.ctr.lockRequests.Load())
		counter(d.lockSessionsLost, k.fs.ctr.lockSessionsLost.Load())
		ch <- prometheus.MustNewConstMetric(d.lockedInodes, prometheus.GaugeValue, float64(k.fs.LockedInodes()))
		open, told := k.fs.OpenHolds()
		ch <- prometheus.MustNewConstMetric(d.openFiles, prometheus.GaugeValue, float64(told), "island")
		ch <- prometheus.MustNewConstMetric(d.openFiles, prometheus.GaugeValue, float64(open-told), "local")
		wb := func(what, outcome string, v uint64) {
			ch <- prometheus.MustNewConstMetric(d.writeBehind, prometheus.CounterValue, float64(v), what, outcome)
		}
		kept, sent, failed := k.fs.WriteBehindStats()
		wb("attr", "kept", kept)
		wb("attr", "sent", sent)
		wb("attr", "failed", failed)
		kept, sent, failed = k.fs.CreatesBehind()
		wb("create", "kept", kept)
		wb("create", "sent", sent)
		wb("create", "failed", failed)
		wb("create", "cancelled", k.fs.CreatesCancelled())
		wb("create", "short_lease", k.fs.CreatesShortLease())
		kept, sent, failed = k.fs.UnlinksBehind()
		wb("unlink", "kept", kept)
		wb("unlink", "sent", sent)
		wb("unlink", "failed", failed)
	}
}
