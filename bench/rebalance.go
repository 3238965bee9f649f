package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/cleaner"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// RebalanceConfig configures the storage rebalance benchmark.
type RebalanceConfig struct {
	Storage    int   // servers before one is added
	Data       int64 // bytes written before the server is added
	Foreground int64 // bytes of each foreground write
	// Every is the pace of the foreground writes (one starts every Every
	// at most), so that the writer measures what a client sees without
	// flooding the disks with garbage the cleaner must delete too.
	Every     time.Duration
	Rate      int64   // the cleaner's copy rate limit (bytes/s)
	Share     float64 // its share of the measured capacity
	Tolerance float64 // balanced when every server is within this of the mean
	Dir       string
	Exe       string
	BasePort  int
	Logger    *slog.Logger
	// Islands configures the island half (RunIslandGrow); its Dir, Exe,
	// BasePort and Logger default to this benchmark's.
	Islands IslandGrowConfig
	// Only runs one half: "storage" or "islands" ("": both).
	Only string
}

// Validate checks the configuration and fills defaults.
func (c *RebalanceConfig) Validate() error {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Storage == 0 {
		c.Storage = 5
	}
	def(&c.Data, 512<<20)
	def(&c.Foreground, 64<<20)
	if c.Every == 0 {
		c.Every = time.Second
	}
	def(&c.Rate, cleaner.DefaultRate)
	if c.Share == 0 {
		c.Share = cleaner.DefaultShare
	}
	if c.Tolerance == 0 {
		c.Tolerance = cleaner.DefaultTolerance
	}
	if c.BasePort == 0 {
		c.BasePort = 17800
	}
	switch {
	case c.Storage < 5:
		return fmt.Errorf("bench: rebalance needs at least 5 storage servers (ec:4+1)")
	case c.Data < 64<<20 || c.Foreground < 16<<20:
		return fmt.Errorf("bench: --size must be at least 64 MiB and --foreground 16 MiB")
	case c.Exe == "":
		return fmt.Errorf("bench: no atoll binary")
	}
	return nil
}

// RebalanceResult holds the figures; JSON names are stable.
type RebalanceResult struct {
	ImbalanceBefore float64 `json:"imbalance_before"` // right after the server joined
	ImbalanceAfter  float64 `json:"imbalance_after"`
	Passes          int     `json:"passes"`
	MovedBytes      int64   `json:"moved_bytes"` // live bytes the passes copied
	BalanceSeconds  float64 `json:"balance_seconds"`
	// Foreground write throughput alone before the server joined, while
	// the passes ran, and after; DuringRatio is during / before.
	BeforeMBps  float64 `json:"write_before_mbps"`
	DuringMBps  float64 `json:"write_during_mbps"`
	AfterMBps   float64 `json:"write_after_mbps"`
	DuringRatio float64 `json:"write_during_ratio"`
	// Islands: adding an island (moving table entries) under a metadata
	// workload; nil when not run.
	Islands *IslandGrowResult `json:"islands,omitempty"`
}

// RunRebalance starts a cluster of Storage servers (child processes,
// ec:4+1), writes Data, measures a foreground writer, adds one server and
// runs rebalancing passes until every server's used bytes are within
// Tolerance of the mean, with the writer running throughout, then
// measures it again.
func RunRebalance(ctx context.Context, cfg RebalanceConfig, progress io.Writer) (RebalanceResult, error) {
	var res RebalanceResult
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	switch cfg.Only {
	case "islands":
		var err error
		res.Islands, err = runIslandHalf(ctx, cfg, progress)
		return res, err
	case "", "storage":
	default:
		return res, fmt.Errorf("bench: --only %q: want storage or islands", cfg.Only)
	}
	res, err := runStorageHalf(ctx, cfg, progress)
	if err != nil || cfg.Only == "storage" {
		return res, err
	}
	res.Islands, err = runIslandHalf(ctx, cfg, progress)
	return res, err
}

// runStorageHalf: a storage server joins a full-ish cluster (see
// RunRebalance).
func runStorageHalf(ctx context.Context, cfg RebalanceConfig, progress io.Writer) (RebalanceResult, error) {
	var res RebalanceResult
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	say := sayer(progress)
	dir, done, err := scratch(cfg.Dir, "rebalance")
	if err != nil {
		return res, err
	}
	defer done()
	storageBase := cfg.BasePort + 100
	cl, conn, stop, err := startWatched(ctx, dir, cfg.Exe, cfg.BasePort, cfg.Storage, 1, cfg.Logger, func(c *devcluster.Config) {
		c.CleanInterval = -1 // this benchmark runs its own passes
	})
	if err != nil {
		return res, err
	}
	defer stop()
	fs, cred := conn.FS, metawire.Root

	const fileSize = 4 << 20
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, fileSize)
	say("writing %s in 4 MiB files on %d servers", human(cfg.Data), cfg.Storage)
	for i := 0; int64(i)*fileSize < cfg.Data; i++ {
		fillRand(r, buf)
		if err := fs.WriteFile(ctx, cred, fmt.Sprintf("/old%05d", i), buf, 0o644); err != nil {
			return res, err
		}
	}
	var fgN atomic.Int64
	var next time.Time
	fg := func() (float64, error) {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		next = time.Now().Add(cfg.Every)
		name := fmt.Sprintf("fg%05d", fgN.Add(1))
		fh, err := fs.CreateFile(ctx, cred, "/"+name, 0o644)
		if err != nil {
			return 0, err
		}
		chunk := make([]byte, 4<<20)
		fillRand(r, chunk)
		start := time.Now()
		for off := int64(0); off < cfg.Foreground; off += int64(len(chunk)) {
			if _, err := fh.WriteAt(ctx, chunk, off); err != nil {
				return 0, err
			}
		}
		if err := fh.Close(ctx); err != nil {
			return 0, err
		}
		d := time.Since(start)
		// The written data is not kept: the cluster's size stays what the
		// rebalancer works on.
		if err := fs.Unlink(ctx, cred, uint64(namespace.RootIno), name); err != nil {
			return 0, err
		}
		return mbps(cfg.Foreground, d), nil
	}
	median3 := func() (float64, error) {
		var v []float64
		for range 3 {
			x, err := fg()
			if err != nil {
				return 0, err
			}
			v = append(v, x)
		}
		return max(min(v[0], v[1]), min(max(v[0], v[1]), v[2])), nil
	}
	if res.BeforeMBps, err = median3(); err != nil {
		return res, err
	}
	say("foreground writer alone: %.0f MB/s (median of 3 writes of %s, one every %v at most)", res.BeforeMBps, human(cfg.Foreground), cfg.Every)

	// The new server joins on the next slot.
	slot := cfg.Storage
	addDir := filepath.Join(dir, "added")
	added, err := devcluster.Start(ctx, devcluster.ChildSpec{
		Name: "added", Exe: cfg.Exe,
		Args: []string{"storage", "--dir", addDir, "--slot", strconv.Itoa(slot), "--manager", cl.Manager,
			"--key", cl.KeyPath, "--listen", fmt.Sprintf("127.0.0.1:%d", storageBase+slot), "--log-level", "warn"},
		AddrFile: addDir + ".addr",
		Output:   os.Stderr,
	})
	if err != nil {
		return res, err
	}
	defer func() { _ = added.Stop(10 * time.Second) }()
	for deadline := time.Now().Add(30 * time.Second); len(conn.Data.Slots()) <= cfg.Storage; {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("bench: the client never saw slot %d", slot)
		}
		time.Sleep(50 * time.Millisecond)
	}
	spread := func() (float64, error) {
		used := map[uint16]int64{}
		for _, s := range conn.Data.Slots() {
			st, err := conn.Data.ServerStats(ctx, s.ID)
			if err != nil {
				return 0, err
			}
			used[s.ID] = int64(st.UsedBytes)
		}
		return cleaner.Spread(used), nil
	}
	if res.ImbalanceBefore, err = spread(); err != nil {
		return res, err
	}
	say("storage server %d joined: imbalance %.2f", slot, res.ImbalanceBefore)

	// Rebalancing passes, the writer running throughout. The cleaner's
	// capacity is what the writer alone made the servers write.
	capacity := res.BeforeMBps * 1e6 * 5 / 4
	c, err := cleaner.New(cleaner.Config{Data: conn.Data, FS: fs, Grace: time.Nanosecond, UnsafeGrace: true, Rate: cfg.Rate, Share: cfg.Share,
		Capacity: func() float64 { return capacity }, Parallel: 16, Logger: cfg.Logger})
	if err != nil {
		return res, err
	}
	passes := make(chan error, 1)
	start := time.Now()
	go func() {
		for {
			rep, err := c.Pass(ctx, cleaner.PassOptions{Rebalance: cfg.Tolerance})
			if err != nil {
				passes <- err
				return
			}
			res.Passes++
			res.MovedBytes += rep.RebalancedBytes
			s, err := spread()
			if err != nil {
				passes <- err
				return
			}
			say("  pass %d: %.1fs, moved %s, imbalance now %.3f", res.Passes, time.Since(start).Seconds(), human(rep.RebalancedBytes), s)
			if s <= cfg.Tolerance {
				res.ImbalanceAfter = s
				passes <- nil
				return
			}
			if res.Passes == 30 {
				passes <- fmt.Errorf("bench: not balanced after %d passes (imbalance %.3f)", res.Passes, s)
				return
			}
		}
	}()
	var during []float64
	var passErr error
writing:
	for {
		x, err := fg()
		if err != nil {
			return res, err
		}
		select {
		case passErr = <-passes:
			break writing
		default:
			during = append(during, x) // a write that ended while passes ran
		}
	}
	if passErr != nil {
		return res, passErr
	}
	res.BalanceSeconds = time.Since(start).Seconds()
	for _, x := range during {
		res.DuringMBps += x / float64(len(during))
	}
	if res.AfterMBps, err = median3(); err != nil {
		return res, err
	}
	if res.BeforeMBps > 0 {
		res.DuringRatio = res.DuringMBps / res.BeforeMBps
	}
	say("balanced (imbalance %.3f) in %.1fs over %d passes, %s moved; writer %.0f MB/s before, %.0f during (%.0f%%, %d writes), %.0f after",
		res.ImbalanceAfter, res.BalanceSeconds, res.Passes, human(res.MovedBytes), res.BeforeMBps, res.DuringMBps, 100*res.DuringRatio, len(during), res.AfterMBps)
	return res, nil
}

// runIslandHalf runs RunIslandGrow with the storage half's defaults.
func runIslandHalf(ctx context.Context, cfg RebalanceConfig, progress io.Writer) (*IslandGrowResult, error) {
	ic := cfg.Islands
	if ic.Dir == "" {
		ic.Dir = cfg.Dir
	}
	if ic.Exe == "" {
		ic.Exe = cfg.Exe
	}
	if ic.BasePort == 0 {
		ic.BasePort = cfg.BasePort + 1000
	}
	if ic.Logger == nil {
		ic.Logger = cfg.Logger
	}
	r, err := RunIslandGrow(ctx, ic, progress)
	if err != nil {
		return nil, fmt.Errorf("bench: islands: %w", err)
	}
	return &r, nil
}
