package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/torture"
)

// errTortureFailed makes the command exit 1 after its report.
var errTortureFailed = errors.New("torture: invariants violated (see the report)")

func newTortureCmd(g *globalFlags) *cobra.Command {
	var cfg torture.Config
	var asJSON, keep bool
	cmd := &cobra.Command{
		Use:   "torture --seed S --duration D [--json]",
		Short: "Run a cluster on simulated hosts under a seeded random schedule of crashes, hangs, partitions, corruption and full disks, and check every invariant",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Exe, err = os.Executable(); err != nil {
				return err
			}
			if cfg.Failpoints && !faults.Enabled {
				return errors.New("torture: --failpoints needs a binary built with -tags failpoints (make torture-bin)")
			}
			if cfg.Dir == "" {
				if cfg.Dir, err = os.MkdirTemp("", fmt.Sprintf("atoll-torture-%d-", cfg.Seed)); err != nil {
					return err
				}
				defer func() {
					if !keep {
						os.RemoveAll(cfg.Dir)
					}
				}()
			}
			cfg.Out = os.Stdout
			if asJSON {
				cfg.Out = os.Stderr
			}
			rep, err := torture.Run(cmd.Context(), cfg)
			if rep != nil {
				writeTortureReport(cfg.Out, rep)
				if asJSON {
					b, _ := json.Marshal(rep)
					fmt.Println(string(b))
				} else {
					fmt.Println(rep.Summary())
				}
			}
			if err != nil {
				return err
			}
			if !rep.Passed {
				fmt.Fprintf(os.Stderr, "replay: %s --seed %d (logs kept in %s)\n", strings.Join(os.Args, " "), cfg.Seed, cfg.Dir)
				keep = true
				return errTortureFailed
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()%1_000_000), "seed of the fault schedule and the workload")
	f.DurationVar(&cfg.Duration, "duration", time.Minute, "how long the workload runs under faults (healing and checks come after)")
	f.IntVar(&cfg.Clients, "clients", 3, "client-library clients")
	f.BoolVar(&cfg.Mount, "mount", true, "also run a client through a FUSE mount")
	f.BoolVar(&cfg.NFS, "nfs", true, "also run a client through an NFS gateway")
	f.IntVar(&cfg.Storage, "storage", 5, "storage servers")
	f.IntVar(&cfg.Islands, "islands", 3, "metadata islands")
	f.DurationVar(&cfg.FaultEvery, "fault-every", 4*time.Second, "mean time between faults")
	f.DurationVar(&cfg.AttrTTL, "client-attr-ttl", time.Nanosecond, "library clients' name and attribute cache (1s, the product default, is not linearizable: the history check fails, which shows it works)")
	f.BoolVar(&cfg.Failpoints, "failpoints", faults.Enabled, "also restart roles with one of their failpoints armed to crash them (needs a -tags failpoints build, as make torture's)")
	f.BoolVar(&cfg.Loopback, "loopback", false, "run on 127.99.x.x without network namespaces (no partitions)")
	f.StringVar(&cfg.Dir, "dir", "", "scratch directory (default: a temporary one, removed unless the run fails or --keep)")
	f.BoolVar(&keep, "keep", false, "keep the scratch directory")
	f.BoolVar(&asJSON, "json", false, "print one JSON object with the figures")
	return cmd
}

// writeTortureReport prints what a failure needs to be understood and
// replayed: the violations, the schedule and the shortest failing history.
func writeTortureReport(w io.Writer, rep *torture.Report) {
	for _, v := range rep.Violations {
		fmt.Fprintln(w, "violation:", v)
	}
	for _, e := range rep.Errors {
		fmt.Fprintln(w, "error:", e)
	}
	for _, p := range rep.FsckProblems {
		fmt.Fprintln(w, "fsck:", p)
	}
	// Many unknown outcomes make the history check time out: say why.
	for _, k := range slices.Sorted(maps.Keys(rep.UnknownWhy)) {
		fmt.Fprintf(w, "unknown outcomes: %d %s (first: %s)\n", rep.UnknownWhy[k], k, rep.UnknownExample[k])
	}
	if rep.Passed {
		return
	}
	if len(rep.Schedule) > 0 {
		fmt.Fprintf(w, "fault schedule of seed %d:\n", rep.Seed)
		for _, f := range rep.Schedule {
			fmt.Fprintln(w, "  "+f.String())
		}
	}
	if len(rep.FailingHistory) > 0 {
		fmt.Fprintf(w, "shortest non-linearizable history found (%d operations):\n%s\n", len(rep.FailingHistory), strings.Join(rep.FailingHistory, "\n"))
	}
}
