package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/auth"
)

// globalFlags are the flags every subcommand shares.
type globalFlags struct {
	keyFile    string
	logLevel   string
	cpuProfile string
	profFile   *os.File
	encrypt    bool
}

func (g *globalFlags) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})), nil
}

// key is the key this command authenticates with: --key FILE, else
// $ATOLL_KEY, else ~/.config/atoll/admin.key.
func (g *globalFlags) key() (*auth.Key, error) {
	return auth.Resolve(g.keyFile)
}

// clusterKey is key for a serving role, which needs the cluster key
// itself (it verifies every other key).
func (g *globalFlags) clusterKey(role string) (*auth.Key, error) {
	k, err := g.key()
	if err != nil {
		return nil, err
	}
	if !k.IsCluster() {
		return nil, fmt.Errorf("atoll %s serves other roles and needs the cluster key (the admin.key that `atoll dev` or `atoll key init` wrote), not key %q (%s)", role, k.Name, k.Caps)
	}
	return k, nil
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "atoll",
		Short:         "Atoll: a distributed network file system",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.keyFile, "key", "", "key file to authenticate with (default $ATOLL_KEY, a key or a path, then ~/.config/atoll/admin.key)")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&g.cpuProfile, "cpuprofile", "", "write a CPU profile of this process to FILE (for performance work)")
	root.PersistentFlags().BoolVar(&g.encrypt, "encrypt", false, "encrypt every connection this command makes; a server (and every role `atoll dev` starts) accepts only encrypted ones (same as $"+auth.EnvEncrypt+"=1; default: authenticated, not encrypted)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if g.encrypt {
			// Keys read from files take it from the environment, and the
			// roles a command starts inherit it.
			os.Setenv(auth.EnvEncrypt, "1")
		}
		if d := os.Getenv("ATOLL_CPUPROFILE_DIR"); g.cpuProfile == "" && d != "" {
			// Profiles every role a dev cluster or benchmark starts.
			g.cpuProfile = filepath.Join(d, fmt.Sprintf("%s-%d.prof", cmd.Name(), os.Getpid()))
		}
		if g.cpuProfile == "" {
			return nil
		}
		f, err := os.Create(g.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		g.profFile = f
		return pprof.StartCPUProfile(f)
	}
	// Not PersistentPostRun: cobra skips it when a command returns an
	// error, and a role stopped by SIGTERM may return one.
	cobra.OnFinalize(func() {
		if g.profFile != nil {
			pprof.StopCPUProfile()
			g.profFile.Close()
			g.profFile = nil
		}
	})
	root.AddCommand(newStorageCmd(g), newDevCmd(g), newBenchCmd(g))
	root.AddCommand(newMetaCmd(g), newTortureCmd(g))
	root.AddCommand(newManagerCmd(g), newStatusCmd(g), newFormatCmd(g))
	root.AddCommand(newNFSCmd(g), newSMBCmd(g))
	root.AddCommand(newMountCmd(g))
	root.AddCommand(newFsckCmd(g), newLsCmd(g), newCpCmd(g), newPolicyCmd(g), newDfCmd(g), newLocksCmd(g))
	root.AddCommand(newCleanCmd(g), newDrainCmd(g), newKeyCmd(g), newIslandCmd(g), newMemberCmd(g))
	return root
}

// writeAddrFile publishes a listening address for a supervising parent:
// written to a temporary name and renamed, so a reader never sees half.
func writeAddrFile(path, addr string) error {
	if path == "" {
		return nil
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(addr+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
