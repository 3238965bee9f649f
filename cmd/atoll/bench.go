package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/bench"
	"github.com/atoll-fs/atoll/internal/auth"
)

func newBenchCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Run benchmarks side by side with the local filesystem"}
	cmd.AddCommand(newBenchDataCmd(g), newBenchMetaCmd(g), newBenchFSCmd(), newBenchCleanCmd(g), newBenchRebalanceCmd(g), newBenchScaleCmd(g), newBenchScaleWorkerCmd(g), newBenchCalibrateCmd())
	return cmd
}

func newBenchDataCmd(g *globalFlags) *cobra.Command {
	var cfg bench.DataConfig
	var size, cluster string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "data [--servers 5] [--policy ec:4+1] [--size 1GiB] [--json]",
		Short: "Data path: write, read, degraded read, small blocks, vs a local file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Logger = log
			if cfg.Size, err = parseSize64(size, "--size"); err != nil {
				return err
			}
			if cluster != "" {
				cfg.Cluster = strings.Split(cluster, ",")
				if cfg.Key, err = g.key(); err != nil {
					return err
				}
			}
			if cfg.Exe, err = os.Executable(); err != nil {
				return err
			}
			return report(asJSON, func(progress io.Writer) (any, error) { return bench.RunData(cmd.Context(), cfg, progress) })
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Servers, "servers", 5, "storage servers to start in temporary directories")
	f.StringVar(&cfg.Policy, "policy", "ec:4+1", "redundancy policy")
	f.StringVar(&size, "size", "1GiB", "bytes to write and read")
	f.IntVar(&cfg.SmallBlocks, "small-blocks", 100000, "4 KiB blocks in the small-block phase")
	f.IntVar(&cfg.ReadWorkers, "read-workers", 4, "4 MiB read-ahead windows in flight")
	f.StringVar(&cluster, "cluster", "", "use a running cluster: manager address(es), comma-separated")
	f.StringVar(&cfg.Dir, "dir", "", "scratch directory (default: a temporary directory)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object with the figures")
	return cmd
}

func newBenchMetaCmd(g *globalFlags) *cobra.Command {
	var cfg bench.MetaConfig
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "meta [--islands 1|3] [--replicas 1|3] [--json]",
		Short: "Metadata: mkdir, create, stat, readdir, small files, unlink; imbalance and cross-island share",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Logger = log
			if cfg.Exe, err = os.Executable(); err != nil {
				return err
			}
			return report(asJSON, func(progress io.Writer) (any, error) { return bench.RunMeta(cmd.Context(), cfg, progress) })
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Islands, "islands", 1, "metadata islands")
	f.IntVar(&cfg.Replicas, "replicas", 1, "replicas of each island (1, 3 or 5; above 1 needs as many --islands: one island server each)")
	f.IntVar(&cfg.Failovers, "failovers", 0, "with --replicas 3 or 5: kill island 1's leader this many times and time the first create after each")
	f.IntVar(&cfg.Storage, "storage", 3, "storage servers")
	f.IntVar(&cfg.Dirs, "dirs", 2000, "directories in the generated tree")
	f.IntVar(&cfg.Files, "files", 20000, "empty files in the tree")
	f.IntVar(&cfg.SmallFiles, "small-files", 10000, "4 KiB files created, written and closed")
	f.IntVar(&cfg.Clients, "clients", 16, "concurrent clients")
	f.IntVar(&cfg.BasePort, "base-port", 17300, "first port of the benchmark cluster")
	f.StringVar(&cfg.Dir, "dir", "", "scratch directory (default: a temporary directory)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object with the figures")
	return cmd
}

// report runs a benchmark with its progress on stdout, or on stderr with
// the figures printed as one JSON object on stdout.
func report(asJSON bool, run func(progress io.Writer) (any, error)) error {
	progress := io.Writer(os.Stdout)
	if asJSON {
		progress = os.Stderr
	}
	res, err := run(progress)
	if err != nil {
		return err
	}
	if asJSON {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Println(string(b))
	}
	return nil
}

func newBenchFSCmd() *cobra.Command {
	var cfg bench.FSConfig
	var size string
	var asJSON, dropCaches bool
	cmd := &cobra.Command{
		Use:   "fs --dir DIR [--size 1GiB] [--small-files 10000] [--jobs 8] [--drop-caches=false] [--json]",
		Short: "File system workloads on a directory: an Atoll mount, or a local directory to compare",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Size, err = parseSize64(size, "--size"); err != nil {
				return err
			}
			cfg.KeepCache = !dropCaches
			return report(asJSON, func(progress io.Writer) (any, error) { return bench.RunFS(cmd.Context(), cfg, progress) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "directory to run in (a FUSE mount of Atoll, or a local directory)")
	f.StringVar(&size, "size", "1GiB", "sequential file size")
	f.IntVar(&cfg.SmallFiles, "small-files", 10000, "4 KiB files to create, then list and stat")
	f.IntVar(&cfg.Jobs, "jobs", 8, "concurrent writers of the parallel small-file phase")
	f.BoolVar(&dropCaches, "drop-caches", true, "drop the machine's caches before the cold read and the cold stat (needs root; affects everything running)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object with the figures")
	return cmd
}

func newBenchScaleCmd(g *globalFlags) *cobra.Command {
	var cfg bench.ScaleConfig
	var size, experiments string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "scale [--small] [--experiments storage,metadata,replicas,clients,failover,growth,mount] [--json]",
		Short: "The scale model: simulated hosts with their own CPU, disk and link; throughput as servers and islands are added (root)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Logger = log
			if size != "" {
				if cfg.Size, err = parseSize64(size, "--size"); err != nil {
					return err
				}
			}
			if experiments != "" {
				cfg.Experiments = strings.Split(experiments, ",")
			}
			if cfg.Exe, err = os.Executable(); err != nil {
				return err
			}
			return report(asJSON, func(progress io.Writer) (any, error) { return bench.RunScale(cmd.Context(), cfg, progress) })
		},
	}
	f := cmd.Flags()
	f.BoolVar(&cfg.Small, "small", false, "two points per experiment at a small size (what CI runs)")
	f.StringVar(&experiments, "experiments", "", "comma-separated: storage, metadata, replicas, clients, failover, growth, mount (default all)")
	f.StringVar(&size, "size", "", "storage: bytes written and read per point (default 1GiB, 32MiB with --small)")
	f.IntVar(&cfg.Files, "files", 0, "metadata: files per client (default 3000, 300 with --small)")
	f.StringVar(&cfg.Dir, "dir", "", "scratch directory (default: a temporary directory)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object with the figures")
	return cmd
}

// newBenchScaleWorkerCmd is the load generator `bench scale` starts on
// each simulated client host; it prints its phases as JSON.
func newBenchScaleWorkerCmd(g *globalFlags) *cobra.Command {
	var cfg bench.WorkerConfig
	var cluster, keyFile string
	cmd := &cobra.Command{
		Use:    "scale-worker",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Logger = log
			cfg.Cluster = strings.Split(cluster, ",")
			if cfg.Key, err = auth.Load(keyFile); err != nil {
				return err
			}
			phases, err := bench.RunWorker(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			return json.NewEncoder(os.Stdout).Encode(phases)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cluster, "cluster", "", "manager address(es)")
	f.StringVar(&keyFile, "key", "", "key file")
	f.StringVar(&cfg.Kind, "kind", "data", "data or meta")
	f.IntVar(&cfg.ID, "id", 0, "worker number")
	f.Int64Var(&cfg.Size, "size", 0, "data: bytes")
	f.StringVar(&cfg.Policy, "policy", "ec:4+1", "data: policy")
	f.IntVar(&cfg.Files, "files", 0, "meta: files")
	f.IntVar(&cfg.Threads, "threads", 16, "meta: requests in flight")
	f.IntVar(&cfg.Pipeline, "pipeline", 0, "data: stripes in flight (0: the client's default)")
	f.StringVar(&cfg.Sync, "sync", "", "barrier directory")
	f.DurationVar(&cfg.Duration, "duration", 0, "data-run, meta-run, files-run: how long the run lasts at most")
	f.StringVar(&cfg.Dir, "dir", "", "mount: the directory on a FUSE mount to write in")
	return cmd
}

// newBenchCalibrateCmd is `bench scale`'s CPU speed probe.
func newBenchCalibrateCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:    "scale-calibrate --out FILE",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.RunCalibrator(cmd.Context(), out)
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "where the count goes")
	return cmd
}
