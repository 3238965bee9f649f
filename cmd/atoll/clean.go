package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/atoll-fs/atoll/bench"
	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cleaner"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/manager"
)

// cleanFlags are the cleaner settings shared by `atoll clean`, `atoll
// drain` and the manager's background cleaner.
type cleanFlags struct {
	grace    time.Duration
	unsafe   bool
	rate     int64
	maxLive  float64
	budget   int64
	parallel int
	// tolerance of the storage rebalancer (0: off)
	tolerance float64
}

func (f *cleanFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.DurationVar(&f.grace, "grace", cleaner.DefaultGrace, fmt.Sprintf("never delete stripes younger than this (writers may not have committed yet; at least %v)", cleaner.MinGrace))
	fl.BoolVar(&f.unsafe, "unsafe-grace", false, "accept a --grace below the clients' commit window: only when no client is writing, or acknowledged data is lost")
	fl.Int64Var(&f.rate, "rate", cleaner.DefaultRate, "bytes copied per second at most")
	fl.Float64Var(&f.maxLive, "max-live", cleaner.DefaultMaxLive, "copy stripes whose useful fraction is at most this")
	fl.Int64Var(&f.budget, "budget", cleaner.DefaultCopyBudget, "live bytes to copy in one pass at most")
	fl.IntVar(&f.parallel, "parallel", 8, "fragments repaired at once")
	fl.Float64Var(&f.tolerance, "rebalance-tolerance", cleaner.DefaultTolerance,
		"move old data until every storage server's used bytes are within this fraction of the mean (0: never)")
}

func (f *cleanFlags) config(conn *connect.Conn, g *globalFlags) (cleaner.Config, error) {
	log, err := g.logger()
	if err != nil {
		return cleaner.Config{}, err
	}
	fs, err := faults.FromEnv()
	if err != nil {
		return cleaner.Config{}, err
	}
	return cleaner.Config{Data: conn.Data, FS: conn.FS, Grace: f.grace, UnsafeGrace: f.unsafe, Rate: f.rate, MaxLive: f.maxLive,
		CopyBudget: f.budget, Parallel: f.parallel, Rebalance: f.rebalance(), Faults: fs, Logger: log}, nil
}

// rebalance is the cleaner's Config.Rebalance for the flag (0: off).
func (f *cleanFlags) rebalance() float64 {
	if f.tolerance <= 0 {
		return -1
	}
	return f.tolerance
}

// passProgress draws a progress bar per phase of a pass on stderr when
// it is a terminal.
func passProgress(quiet bool) func(string, int, int) {
	if quiet || !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	var bar *progressbar.ProgressBar
	var cur string
	return func(phase string, done, total int) {
		if total <= 0 {
			return
		}
		if phase != cur || bar == nil {
			if bar != nil {
				_ = bar.Finish()
			}
			cur = phase
			bar = progressbar.NewOptions(total, progressbar.OptionSetDescription(phase),
				progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
		}
		_ = bar.Set(done)
	}
}

func printReport(rep cleaner.Report, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(rep)
		fmt.Println(string(b))
		return
	}
	if rep.DryRun {
		fmt.Printf("dry run: stripes %d (%s on disk, %s live); would delete %d dead stripes\n",
			rep.Stripes, hsize(uint64(rep.Bytes)), hsize(uint64(rep.LiveBytes)), rep.PlannedDeletes)
		if rep.StorageImbalance > 0 {
			fmt.Printf("storage imbalance %.3f: would move %d stripes (%s live) with new stripes avoiding slots %v; imbalance after about %.3f, about %s left for later passes\n",
				rep.StorageImbalance, rep.PlannedMoves, hsize(uint64(rep.PlannedBytes)), rep.PlannedAvoid, rep.PlannedImbalance, hsize(uint64(rep.RebalanceRemaining)))
		}
		return
	}
	fmt.Printf("stripes %d (%s on disk, %s live) in %.1fs\n", rep.Stripes, hsize(uint64(rep.Bytes)), hsize(uint64(rep.LiveBytes)), rep.Seconds)
	fmt.Printf("deleted %d stripes (%s); copied %d stripes (%s, %d blocks moved, %d rejected: a writer won)\n",
		rep.DeletedStripes, hsize(uint64(rep.DeletedBytes)), rep.CopiedStripes, hsize(uint64(rep.CopiedBytes)), rep.MovedBlocks, rep.RejectedBlocks)
	if rep.Waiting > 0 {
		// Dead stripes younger than the grace period stay: their writers
		// may still commit to them. Say so, and when, rather than leave
		// "deleted 0 stripes" unexplained.
		fmt.Printf("waiting: %d dead stripes (%s) are younger than the grace period (%v) and are kept for now; the first can be deleted in %v (the manager's cleaner does it then; --grace shortens the period, never below %v)\n",
			rep.Waiting, hsize(uint64(rep.WaitingBytes)), time.Duration(rep.Grace*float64(time.Second)).Round(time.Second),
			time.Duration(rep.WaitingSeconds*float64(time.Second)).Round(time.Second), cleaner.MinGrace)
	}
	fmt.Printf("repaired %d fragments (%d failed, %d waiting for unreachable slots %v)\n", rep.Repaired, rep.RepairFailed, rep.RepairPending, rep.Unreachable)
	if rep.StorageImbalance > 0 {
		fmt.Printf("storage imbalance %.3f: rebalanced %d stripes (%s moved), %s estimated still to move\n",
			rep.StorageImbalance, rep.RebalancedStripes, hsize(uint64(rep.RebalancedBytes)), hsize(uint64(rep.RebalanceRemaining)))
	}
	if rep.DrainRemaining > 0 {
		fmt.Printf("drain: %d stripes could not be moved yet\n", rep.DrainRemaining)
	}
	for _, e := range rep.Errors {
		fmt.Println("  error:", e)
	}
}

func newCleanCmd(g *globalFlags) *cobra.Command {
	var addr string
	var asJSON, copyToo, noRepair, rebalance, dryRun bool
	var cf cleanFlags
	cmd := &cobra.Command{
		Use:   "clean [--cluster ADDR] [--copy] [--json]",
		Short: "Run one cleaner pass now: delete dead stripes, repair missing fragments, and with --copy move live data out of sparse stripes",
		Long: `Run one pass of the stripe cleaner from this process (the manager also runs
passes in the background). A pass lists every fragment on every storage
server and every island's live-byte counters, deletes stripes nothing points
into (older than --grace), rebuilds fragments missing from reachable servers,
and with --copy moves the live blocks of sparse stripes into full ones
(copy, then a conditional pointer update that a concurrent writer wins).
A pass killed at any point is finished by the next one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cleaner.CheckGrace(cf.grace, cf.unsafe); err != nil {
				return err
			}
			conn, err := dialFS(cmd, g, addr)
			if err != nil {
				return err
			}
			defer conn.Close()
			cfg, err := cf.config(conn, g)
			if err != nil {
				return err
			}
			c, err := cleaner.New(cfg)
			if err != nil {
				return err
			}
			opts := cleaner.PassOptions{Copy: copyToo, Repair: !noRepair, DryRun: dryRun, Progress: passProgress(asJSON)}
			if rebalance {
				if cf.tolerance <= 0 {
					return fmt.Errorf("clean: --rebalance needs a --rebalance-tolerance above 0")
				}
				opts.Rebalance = cf.tolerance
			}
			rep, err := c.Pass(cmd.Context(), opts)
			if err != nil {
				return err
			}
			printReport(rep, asJSON)
			if len(rep.Errors) > 0 {
				cmd.SilenceErrors, cmd.SilenceUsage = true, true
				return fmt.Errorf("clean: %d errors", len(rep.Errors))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "cluster", "", "manager address (default $ATOLL_CLUSTER or 127.0.0.1:7300)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&copyToo, "copy", false, "also copy live data out of sparse stripes (cost-benefit)")
	cmd.Flags().BoolVar(&noRepair, "no-repair", false, "do not rebuild missing fragments")
	cmd.Flags().BoolVar(&rebalance, "rebalance", false, "also move old data off the fullest storage servers (e.g. onto a new one)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only survey and plan: print what the pass would delete and (with --rebalance) move, and change nothing")
	cf.register(cmd)
	return cmd
}

func newDrainCmd(g *globalFlags) *cobra.Command {
	var addr string
	var asJSON bool
	var cf cleanFlags
	cmd := &cobra.Command{
		Use:   "drain SLOT [--cluster ADDR]",
		Short: "Move all live data off a storage server, then mark it out",
		Long: `Mark storage slot SLOT draining (new stripes avoid it; reads still use it),
copy every live block with a fragment on it into stripes on the other
servers (a conditional pointer update, so concurrent writes are never lost),
delete the old stripes, and mark the slot out once nothing is left on it.
Run it again if it reports stripes it could not move yet.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.ParseUint(args[0], 10, 16)
			if err != nil {
				return fmt.Errorf("drain: bad slot %q", args[0])
			}
			slot := uint16(n)
			if err := cleaner.CheckGrace(cf.grace, cf.unsafe); err != nil {
				return err
			}
			conn, err := dialFS(cmd, g, addr)
			if err != nil {
				return err
			}
			defer conn.Close()
			found := false
			for _, s := range conn.View.Map().Storage {
				found = found || s.Slot == slot
			}
			if !found {
				return fmt.Errorf("drain: no storage slot %d in the cluster map", slot)
			}
			ctx := cmd.Context()
			if _, err := conn.Cluster.SetState(ctx, cluster.KindStorage, uint32(slot), cluster.StateDraining); err != nil {
				return fmt.Errorf("drain: marking slot %d draining: %w", slot, err)
			}
			cfg, err := cf.config(conn, g)
			if err != nil {
				return err
			}
			c, err := cleaner.New(cfg)
			if err != nil {
				return err
			}
			rep, err := c.Pass(ctx, cleaner.PassOptions{Drain: []uint16{slot}, Repair: true, Progress: passProgress(asJSON)})
			if err != nil {
				return err
			}
			printReport(rep, asJSON)
			left, err := conn.Data.ScanSlot(ctx, slot, nil, 1)
			if err != nil {
				return fmt.Errorf("drain: checking slot %d: %w", slot, err)
			}
			if rep.DrainRemaining > 0 || len(left.Entries) > 0 {
				cmd.SilenceErrors, cmd.SilenceUsage = true, true
				return fmt.Errorf("drain: slot %d still holds fragments (young stripes wait for --grace %v); run drain again", slot, cf.grace)
			}
			if _, err := conn.Cluster.SetState(ctx, cluster.KindStorage, uint32(slot), cluster.StateOut); err != nil {
				return fmt.Errorf("drain: marking slot %d out: %w", slot, err)
			}
			if !asJSON {
				fmt.Printf("slot %d drained and marked out\n", slot)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "cluster", "", "manager address (default $ATOLL_CLUSTER or 127.0.0.1:7300)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cf.register(cmd)
	return cmd
}

// backgroundFlags are the manager's flags for its background cleaner
// (cleaner.Background).
type backgroundFlags struct {
	flags        cleanFlags
	interval     time.Duration
	rebuildAfter time.Duration
	share        float64
}

func (b *backgroundFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.DurationVar(&b.flags.grace, "clean-grace", cleaner.DefaultGrace, fmt.Sprintf("cleaner: never delete stripes younger than this (at least %v)", cleaner.MinGrace))
	fl.Int64Var(&b.flags.rate, "clean-rate", cleaner.DefaultRate, "cleaner: bytes copied per second at most")
	fl.Float64Var(&b.share, "clean-share", cleaner.DefaultShare, "cleaner: copy at most this share of the storage servers' peak observed throughput (read plus written)")
	fl.DurationVar(&b.interval, "clean-interval", cleaner.DefaultInterval, "cleaner: time between passes (0: no background cleaner)")
	fl.DurationVar(&b.rebuildAfter, "rebuild-after", 30*time.Minute, "rebuild the data of a storage server unreachable this long onto the others (0: never)")
	fl.Float64Var(&b.flags.tolerance, "rebalance-tolerance", cleaner.DefaultTolerance,
		"cleaner: move old data until every storage server's used bytes are within this fraction of the mean, e.g. onto a server just added (0: never)")
}

// config is the background cleaner of manager m.
func (b *backgroundFlags) config(m *manager.Manager, key *auth.Key, log *slog.Logger) cleaner.BackgroundConfig {
	return cleaner.BackgroundConfig{
		Managers: []string{m.Addr()}, Key: key, IsLeader: m.IsLeader, Interval: b.interval, Logger: log,
		Cleaner: cleaner.Config{Grace: b.flags.grace, Rate: b.flags.rate, Share: b.share, Capacity: m.PeakThroughput,
			RebuildAfter: b.rebuildAfter, Rebalance: b.flags.rebalance(), Logger: log.With("role", "cleaner")},
	}
}

func newBenchCleanCmd(g *globalFlags) *cobra.Command {
	var cfg bench.CleanConfig
	var size, fg, rate, rebuild string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "clean [--size 256MiB] [--foreground 256MiB] [--rebuild-size 1GiB] [--rebuild-only] [--json]",
		Short: "Cleaner: write amplification on an overwrite-heavy workload, foreground throughput while cleaning, rebuild rate of a replaced server",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Logger = log
			if cfg.WorkingSet, err = parseSize64(size, "--size"); err != nil {
				return err
			}
			if cfg.Foreground, err = parseSize64(fg, "--foreground"); err != nil {
				return err
			}
			if cfg.Rate, err = parseSize64(rate, "--rate"); err != nil {
				return err
			}
			if cfg.RebuildData, err = parseSize64(rebuild, "--rebuild-size"); err != nil {
				return err
			}
			if cfg.Exe, err = os.Executable(); err != nil {
				return err
			}
			return report(asJSON, func(progress io.Writer) (any, error) { return bench.RunClean(cmd.Context(), cfg, progress) })
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Storage, "servers", 5, "storage servers")
	f.StringVar(&size, "size", "256MiB", "working set overwritten at random")
	f.IntVar(&cfg.Rounds, "rounds", 2, "overwrite rounds (each rewrites half the blocks)")
	f.StringVar(&fg, "foreground", "256MiB", "bytes the foreground writer writes, alone and while cleaning")
	f.StringVar(&rate, "rate", "64MiB", "cleaner copy rate limit per second")
	f.Float64Var(&cfg.Share, "share", cleaner.DefaultShare, "cleaner copies at most this share of the disk throughput the writer alone reached")
	f.StringVar(&rebuild, "rebuild-size", "1GiB", "data written just before a server is killed, for the rebuild to restore")
	f.BoolVar(&cfg.RebuildOnly, "rebuild-only", false, "skip the overwrite and cleaning phases; measure the rebuild only")
	f.StringVar(&cfg.Dir, "dir", "", "scratch directory (default: a temporary directory)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object with the figures")
	return cmd
}

func newBenchRebalanceCmd(g *globalFlags) *cobra.Command {
	var cfg bench.RebalanceConfig
	var size, fg, rate string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rebalance [--size 512MiB] [--foreground 64MiB] [--rate 64MiB] [--only storage|islands] [--json]",
		Short: "Growth: a storage server joins a full-ish cluster (write throughput before, while old data spreads onto it, after), then an island joins (metadata throughput before, while table entries move to it, after); time until balanced",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Logger = log
			if cfg.Data, err = parseSize64(size, "--size"); err != nil {
				return err
			}
			if cfg.Foreground, err = parseSize64(fg, "--foreground"); err != nil {
				return err
			}
			if cfg.Rate, err = parseSize64(rate, "--rate"); err != nil {
				return err
			}
			if cfg.Exe, err = os.Executable(); err != nil {
				return err
			}
			return report(asJSON, func(progress io.Writer) (any, error) { return bench.RunRebalance(cmd.Context(), cfg, progress) })
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Storage, "servers", 5, "storage servers before one joins")
	f.StringVar(&size, "size", "512MiB", "data written before the server joins")
	f.StringVar(&fg, "foreground", "64MiB", "bytes of each foreground write (measured alone, during and after)")
	f.DurationVar(&cfg.Every, "every", time.Second, "start a foreground write at most this often")
	f.StringVar(&rate, "rate", "64MiB", "the cleaner's copy rate limit per second")
	f.Float64Var(&cfg.Share, "share", cleaner.DefaultShare, "the cleaner copies at most this share of the disk throughput the writer alone reached")
	f.Float64Var(&cfg.Tolerance, "tolerance", cleaner.DefaultTolerance, "balanced when every server's used bytes are within this fraction of the mean")
	f.StringVar(&cfg.Dir, "dir", "", "scratch directory (default: a temporary directory)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object with the figures")
	f.StringVar(&cfg.Only, "only", "", "run only the storage or the islands half")
	f.IntVar(&cfg.Islands.Islands, "islands", 2, "islands: single-copy islands before one joins")
	f.IntVar(&cfg.Islands.Workers, "island-workers", 8, "islands: metadata workers")
	f.DurationVar(&cfg.Islands.Phase, "island-phase", 10*time.Second, "islands: length of the measure before and after")
	f.Float64Var(&cfg.Islands.MoveDuty, "move-duty", 0, "islands: the islands' --move-duty (0: their default)")
	return cmd
}
