package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// IslandGrowConfig configures the island half of `atoll bench
// rebalance`: a metadata workload runs while a new island takes its share
// of the namespace table.
type IslandGrowConfig struct {
	Islands  int           // single-copy islands before one is added (default 2)
	Workers  int           // metadata workers (default 8), each in its own directory
	Phase    time.Duration // length of the before and after measures (default 10s)
	MoveDuty float64       // the islands' --move-duty (0: their default)
	Dir      string
	Exe      string
	BasePort int
	Logger   *slog.Logger
}

// IslandGrowResult holds the figures; JSON names are stable.
type IslandGrowResult struct {
	IslandsBefore int     `json:"islands_before"`
	MoveDuty      float64 `json:"move_duty"` // 0: the islands' default
	EntriesMoved  int     `json:"entries_moved"`
	// Metadata operations per second (create of a small file, and an
	// unlink of every second one) before, while entries moved, after.
	BeforeOps   float64 `json:"ops_before"`
	DuringOps   float64 `json:"ops_during"`
	AfterOps    float64 `json:"ops_after"`
	DuringRatio float64 `json:"ops_during_ratio"`
	// BaselineRatio is during over the mean of before and after: on a
	// small machine the extra island process itself costs throughput
	// (after < before), which is not the moves' cost.
	BaselineRatio float64 `json:"ops_during_baseline_ratio"`
	// AfterRatio is during over after (the same islands as at the end).
	AfterRatio     float64 `json:"ops_during_after_ratio"`
	BalanceSeconds float64 `json:"balance_seconds"`
	// Imbalance of the table (standard deviation over mean of the
	// entries per island) right after the island joined, and after.
	ImbalanceBefore float64 `json:"imbalance_before"`
	ImbalanceAfter  float64 `json:"imbalance_after"`
}

// RunIslandGrow starts a cluster of Islands single-copy islands and 5
// storage servers, runs Workers metadata workers, measures them for Phase,
// starts one more island and moves its share of table entries to it (the
// islands' duty cycle throttles the moves), measures the workers
// throughout, then for Phase again.
func RunIslandGrow(ctx context.Context, cfg IslandGrowConfig, progress io.Writer) (IslandGrowResult, error) {
	if cfg.Islands == 0 {
		cfg.Islands = 2
	}
	if cfg.Workers == 0 {
		cfg.Workers = 8
	}
	if cfg.Phase == 0 {
		cfg.Phase = 10 * time.Second
	}
	if cfg.BasePort == 0 {
		cfg.BasePort = 17600
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	res := IslandGrowResult{IslandsBefore: cfg.Islands, MoveDuty: cfg.MoveDuty}
	if cfg.Exe == "" {
		return res, fmt.Errorf("bench: no atoll binary")
	}
	say := sayer(progress)
	dir, done, err := scratch(cfg.Dir, "islandgrow")
	if err != nil {
		return res, err
	}
	defer done()
	cl, conn, stop, err := startWatched(ctx, dir, cfg.Exe, cfg.BasePort, 5, cfg.Islands, cfg.Logger, func(c *devcluster.Config) {
		c.IslandReplicas, c.CleanInterval, c.MoveDuty = 1, -1, cfg.MoveDuty
	})
	if err != nil {
		return res, err
	}
	defer stop()
	fs, cred := conn.FS, metawire.Root

	// The workers: each creates small files in its own directory and
	// removes every second one, until the end.
	var ops atomic.Int64
	var werr atomic.Pointer[error]
	stopWork := make(chan struct{})
	var wg sync.WaitGroup
	data := make([]byte, 512)
	for w := range cfg.Workers {
		name := fmt.Sprintf("md%02d", w)
		a, err := fs.MkdirAll(ctx, cred, "/"+name, 0o755)
		if err != nil {
			return res, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stopWork:
					return
				default:
				}
				f := fmt.Sprintf("f%07d", i)
				err := fs.WriteFile(ctx, cred, "/"+name+"/"+f, data, 0o644)
				if err == nil && i%2 == 1 {
					ops.Add(1)
					err = fs.Unlink(ctx, cred, a.Ino, f)
				}
				if err != nil {
					werr.CompareAndSwap(nil, &err)
					return
				}
				ops.Add(1)
			}
		}()
	}
	defer func() { close(stopWork); wg.Wait() }()
	measure := func(d time.Duration) (float64, error) {
		n0, t0 := ops.Load(), time.Now()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(d):
		}
		if p := werr.Load(); p != nil {
			return 0, fmt.Errorf("bench: metadata worker: %w", *p)
		}
		return float64(ops.Load()-n0) / time.Since(t0).Seconds(), nil
	}
	if _, err := measure(2 * time.Second); err != nil { // warm-up
		return res, err
	}
	if res.BeforeOps, err = measure(cfg.Phase); err != nil {
		return res, err
	}
	say("metadata workload on %d islands: %.0f operations/s (%d workers: small-file creates, every second one unlinked)", cfg.Islands, res.BeforeOps, cfg.Workers)

	// The new island starts and registers; then it gets its share.
	id := uint32(cfg.Islands + 1)
	idir := filepath.Join(dir, "island-new")
	child, err := devcluster.Start(ctx, devcluster.ChildSpec{
		Name: "island-new", Exe: cfg.Exe,
		Args: append([]string{"meta", "--dir", idir, "--id", strconv.Itoa(int(id)), "--listen", fmt.Sprintf("127.0.0.1:%d", cfg.BasePort+200+cfg.Islands),
			"--manager", cl.Manager, "--key", cl.KeyPath, "--log-level", "warn"}, dutyArgs(cfg.MoveDuty)...),
		AddrFile: idir + ".addr", Output: os.Stderr, NoWait: true,
	})
	if err != nil {
		return res, err
	}
	defer func() { _ = child.Stop(10 * time.Second) }()
	var m *cluster.Map
	for deadline := time.Now().Add(30 * time.Second); ; {
		if m, err = conn.Cluster.Map(ctx, 0); err == nil {
			if is, ok := m.Island(id); ok && is.State == cluster.StateUp {
				break
			}
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("bench: island %d never registered: %v", id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var all []uint32
	for k := uint32(1); k <= id; k++ {
		all = append(all, k)
	}
	res.ImbalanceBefore = tableSpread(m, all)
	split, moves, err := cluster.PlanIslandMoves(m, all)
	if err != nil {
		return res, err
	}
	res.EntriesMoved = len(moves)
	say("island %d joined (table imbalance %.2f); moving %d entries to it", id, res.ImbalanceBefore, len(moves))
	n0, start := ops.Load(), time.Now()
	if err := cluster.RunIslandMoves(ctx, conn.Cluster, split, moves, nil); err != nil {
		return res, err
	}
	res.BalanceSeconds = time.Since(start).Seconds()
	res.DuringOps = float64(ops.Load()-n0) / res.BalanceSeconds
	if p := werr.Load(); p != nil {
		return res, fmt.Errorf("bench: metadata worker during the moves: %w", *p)
	}
	if m, err = conn.Cluster.Map(ctx, 0); err != nil {
		return res, err
	}
	res.ImbalanceAfter = tableSpread(m, all)
	if res.AfterOps, err = measure(cfg.Phase); err != nil {
		return res, err
	}
	if res.BeforeOps > 0 {
		res.DuringRatio = res.DuringOps / res.BeforeOps
		res.BaselineRatio = 2 * res.DuringOps / (res.BeforeOps + res.AfterOps)
	}
	if res.AfterOps > 0 {
		res.AfterRatio = res.DuringOps / res.AfterOps
	}
	say("balanced (table imbalance %.3f) in %.1fs; metadata workload %.0f ops/s before, %.0f during (%.0f%% of before, %.0f%% of the mean of before and after), %.0f after on %d islands",
		res.ImbalanceAfter, res.BalanceSeconds, res.BeforeOps, res.DuringOps, 100*res.DuringRatio, 100*res.BaselineRatio, res.AfterOps, id)
	return res, nil
}

func dutyArgs(duty float64) []string {
	if duty <= 0 {
		return nil
	}
	return []string{"--move-duty", strconv.FormatFloat(duty, 'g', -1, 64)}
}

// tableSpread is the standard deviation over the mean of the table
// entries each of islands owns.
func tableSpread(m *cluster.Map, islands []uint32) float64 {
	shares := m.Table.Shares()
	load := map[namespace.IslandID]float64{}
	for _, id := range islands {
		load[namespace.IslandID(id)] = float64(shares[id])
	}
	s := namespace.Spread(load)
	if math.IsNaN(s) {
		return 0
	}
	return s
}
