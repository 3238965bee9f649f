package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/cleaner"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/faults"
)

func newDevCmd(g *globalFlags) *cobra.Command {
	var cfg devcluster.Config
	var noMount bool
	cmd := &cobra.Command{
		Use:   "dev [--data DIR]",
		Short: "Run a whole local cluster (each role a child process) for a first try",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Every child inherits ATOLL_FAILPOINTS (and runs this same
			// binary): refuse here, once, when this binary was built
			// without -tags failpoints or the variable names an unknown
			// failpoint, rather than start children that each refuse.
			if _, err := faults.FromEnv(); err != nil {
				return fmt.Errorf("dev: %w", err)
			}
			var err error
			if cfg.Exe, err = os.Executable(); err != nil {
				return err
			}
			cfg.Out, cfg.UserKey = os.Stdout, true
			cfg.LogLevel = g.logLevel
			if noMount {
				cfg.Mount = ""
			} else if cfg.Mount == "" {
				cfg.Mount = filepath.Join(cfg.DataDir, "mnt")
			}
			if cfg.Mount != "" {
				if ok, why := devcluster.FuseUsable(); !ok {
					fmt.Fprintf(os.Stdout, "atoll dev: no FUSE mount: %s\n", why)
					cfg.Mount = ""
				}
			}
			// Stop, cleanly, when whatever started us goes: `go run
			// ./cmd/atoll dev` killed with SIGTERM ends go run only, and
			// this process, its roles and its mount stayed up, orphaned.
			if err := stopWithParent(); err != nil {
				return err
			}
			d, err := devcluster.New(cfg)
			if err != nil {
				return err
			}
			return d.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data", "atoll-data", "data directory (kept across restarts)")
	f.IntVar(&cfg.Storage, "storage", 5, "storage servers")
	f.IntVar(&cfg.Islands, "islands", 3, "metadata islands (0: data plane only)")
	f.IntVar(&cfg.IslandReplicas, "island-replicas", 3, "replicas of each island (1, 3 or 5): above 1, the islands run on island servers (as many as islands, at least as many as replicas), each hosting replicas of several islands; 1 keeps one copy of each island (a lost island disk loses its part of the namespace)")
	f.StringVar(&cfg.NFSListen, "nfs-listen", "127.0.0.1:2049", "NFS gateway address (empty: no gateway)")
	f.StringVar(&cfg.SMBListen, "smb-listen", "", "serve the namespace over SMB as share atoll here, e.g. 127.0.0.1:4450 (needs root, samba and libnss-wrapper; empty: no SMB gateway)")
	f.StringVar(&cfg.Mount, "mount", "", "FUSE mountpoint (default DATA/mnt)")
	f.BoolVar(&noMount, "no-mount", false, "do not mount with FUSE")
	f.StringArrayVar(&cfg.MountArgs, "mount-arg", nil, "pass one more flag to the mount (repeatable), e.g. --mount-arg=--write-behind=false")
	f.StringVar(&cfg.ManagerListen, "manager-listen", "127.0.0.1:7300", "manager address")
	f.StringVar(&cfg.StorageListen, "storage-listen", "127.0.0.1:7400", "address of the first storage server; the others take the next ports")
	f.StringVar(&cfg.IslandListen, "island-listen", "127.0.0.1:7500", "address of the first island; the others take the next ports")
	f.StringVar(&cfg.WebListen, "web-listen", "127.0.0.1:7380", "the manager's dashboard, /api/cluster and /metrics (empty: off)")
	f.DurationVar(&cfg.CleanInterval, "clean-interval", 10*time.Second, "the manager's cleaner: time between passes (deletes dead stripes, repairs)")
	f.DurationVar(&cfg.CleanGrace, "clean-grace", cleaner.MinGrace, "the manager's cleaner: never delete stripes younger than this")
	f.DurationVar(&cfg.RebuildAfter, "rebuild-after", time.Minute, "rebuild a storage server's data onto the others once it has been unreachable this long")
	f.StringVar(&cfg.MetricsListen, "metrics-listen", "127.0.0.1:7600", "/metrics of the first storage server; the other storage servers, the islands, the NFS gateway and the mount take the next ports (empty: off)")
	return cmd
}

// stopWithParent asks the kernel for SIGTERM (a clean stop, as Ctrl-C)
// when this process's parent exits, and stops at once if it already has.
func stopWithParent() error {
	parent := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0); err != nil {
		return fmt.Errorf("dev: prctl(PR_SET_PDEATHSIG): %w", err)
	}
	if os.Getppid() != parent {
		return errors.New("dev: the process that started atoll dev is gone")
	}
	return nil
}
