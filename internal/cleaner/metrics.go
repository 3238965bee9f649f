package cleaner

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Cleaner metrics, read from Status at each scrape:
//
//	atoll_cleaner_passes_total                 counter  passes finished
//	atoll_cleaner_deleted_stripes_total        counter  stripes deleted (nothing pointed into them)
//	atoll_cleaner_deleted_bytes_total          counter  fragment bytes deleted
//	atoll_cleaner_copied_bytes_total           counter  live bytes copied out of sparse or drained stripes
//	atoll_cleaner_moved_blocks_total           counter  cleaner deltas applied
//	atoll_cleaner_rejected_blocks_total        counter  cleaner deltas rejected (a writer won)
//	atoll_cleaner_repaired_fragments_total     counter  fragments rebuilt (missing or corrupt)
//	atoll_cleaner_repair_failures_total        counter  rebuilds that failed
//	atoll_cleaner_repair_pending               gauge    fragments waiting for an unreachable server
//	atoll_cleaner_disk_bytes, _live_bytes      gauge    the last inventory: bytes stored, bytes live
//	atoll_cleaner_phase_done, _phase_total     gauge    progress of the running phase (0 when idle)
//	atoll_cleaner_phase_eta_seconds            gauge    estimated time left in the running phase
//	atoll_cleaner_storage_imbalance            gauge    max |used − mean| / mean over storage slots, last pass
//	atoll_cleaner_rebalanced_bytes_total       counter  live bytes moved to even out storage slots
//	atoll_cleaner_rebalance_remaining_bytes    gauge    bytes estimated still to move after the last pass
type collector struct {
	status func() Status
	descs  []*prometheus.Desc
}

var metricNames = []struct{ name, help string }{
	{"atoll_cleaner_passes_total", "Cleaner passes finished."},
	{"atoll_cleaner_deleted_stripes_total", "Stripes deleted because nothing pointed into them."},
	{"atoll_cleaner_deleted_bytes_total", "Fragment bytes deleted."},
	{"atoll_cleaner_copied_bytes_total", "Live bytes copied out of sparse or drained stripes."},
	{"atoll_cleaner_moved_blocks_total", "Cleaner deltas applied."},
	{"atoll_cleaner_rejected_blocks_total", "Cleaner deltas rejected because a writer got there first."},
	{"atoll_cleaner_repaired_fragments_total", "Fragments rebuilt (missing or corrupt)."},
	{"atoll_cleaner_repair_failures_total", "Fragment rebuilds that failed."},
	{"atoll_cleaner_repair_pending", "Fragments waiting for an unreachable storage server."},
	{"atoll_cleaner_disk_bytes", "Fragment bytes stored, as of the last inventory."},
	{"atoll_cleaner_live_bytes", "Live bytes, as of the last inventory."},
	{"atoll_cleaner_phase_done", "Work items done in the running phase (0 when idle)."},
	{"atoll_cleaner_phase_total", "Work items of the running phase (0 when idle)."},
	{"atoll_cleaner_phase_eta_seconds", "Estimated seconds left in the running phase."},
	{"atoll_cleaner_storage_imbalance", "Max |used - mean| / mean of the storage slots' used bytes at the last pass."},
	{"atoll_cleaner_rebalanced_bytes_total", "Live bytes moved to even out the storage slots."},
	{"atoll_cleaner_rebalance_remaining_bytes", "Bytes estimated still to move to even out the storage slots."},
}

// Register adds the cleaner's metrics to reg.
func (c *Cleaner) Register(reg prometheus.Registerer) error { return RegisterMetrics(reg, c.Status) }

// RegisterMetrics adds cleaner metrics read from status to reg (for an
// owner whose Cleaner comes and goes, like a manager's while it leads).
func RegisterMetrics(reg prometheus.Registerer, status func() Status) error {
	col := &collector{status: status}
	for _, m := range metricNames {
		col.descs = append(col.descs, prometheus.NewDesc(m.name, m.help, nil, nil))
	}
	return reg.Register(col)
}

func (col *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range col.descs {
		ch <- d
	}
}

func (col *collector) Collect(ch chan<- prometheus.Metric) {
	st := col.status()
	t := &st.Totals
	vals := []float64{float64(st.Passes), float64(t.DeletedStripes), float64(t.DeletedBytes), float64(t.CopiedBytes),
		float64(t.MovedBlocks), float64(t.RejectedBlocks), float64(t.Repaired), float64(t.RepairFailed),
		float64(t.RepairPending), float64(t.Bytes), float64(t.LiveBytes), float64(st.Done), float64(st.Total), st.ETASeconds,
		t.StorageImbalance, float64(t.RebalancedBytes), float64(t.RebalanceRemaining)}
	for i, d := range col.descs {
		kind := prometheus.GaugeValue
		if i <= 7 || i == 15 {
			kind = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(d, kind, vals[i])
	}
}
