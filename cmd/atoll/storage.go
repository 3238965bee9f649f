package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/storage"
	"github.com/atoll-fs/atoll/internal/web"
)

func newStorageCmd(g *globalFlags) *cobra.Command {
	var cfg storage.ServerConfig
	var slot uint16
	var capacity, scrubRate, addrFile, managers, metricsListen string
	cmd := &cobra.Command{
		Use:   "storage --dir DIR --listen ADDR --slot N",
		Short: "Run a storage server (fragment store) holding one storage slot",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Logger, cfg.Slot = log, slot
			if cfg.Key, err = g.clusterKey("storage"); err != nil {
				return err
			}
			if cfg.CapacityBytes, err = parseSize64(capacity, "--capacity"); err != nil {
				return err
			}
			if cfg.ScrubBytesPerSec, err = parseSize64(scrubRate, "--scrub-rate"); err != nil {
				return err
			}
			if cfg.Faults, err = faults.FromEnv(); err != nil {
				return err
			}
			if managers != "" {
				if err := checkAdvertised("--listen", cfg.Listen); err != nil {
					return err
				}
			}
			reg := web.NewRegistry()
			cfg.Registerer = reg
			ms, err := metricsServer(metricsListen, reg, log)
			if err != nil {
				return err
			}
			revocations := cluster.FollowRevocations(cfg.Key)
			srv, err := storage.NewServer(cfg)
			if err != nil {
				closeServer(ms)
				return err
			}
			if err := writeAddrFile(addrFile, srv.Addr()); err != nil {
				closeServer(ms)
				return err
			}
			run := srv.Run
			if managers != "" {
				run = func(ctx context.Context) error {
					return runWithMember(ctx, srv.Run, cluster.MemberConfig{
						Managers: splitList(managers), Kind: cluster.KindStorage, ID: uint32(slot),
						Addr: srv.Addr(), PID: os.Getpid(), Logger: log, Key: cfg.Key,
						OnMap: func(m *cluster.Map) { revocations(m); srv.SetDown(downSlots(m)) },
						Stats: func() cluster.MemberStats { return storageStats(srv, ms) },
					})
				}
			}
			return web.RunWith(cmd.Context(), ms, run)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "data directory (created if absent)")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7400", "address to serve on")
	f.Uint16Var(&slot, "slot", 0, "storage slot this server holds (stable identity)")
	f.StringVar(&capacity, "capacity", "0", "cap on stored bytes, e.g. 10GiB (0: filesystem free space)")
	f.StringVar(&scrubRate, "scrub-rate", "16MiB", "scrubber verification rate per second (0: off)")
	f.DurationVar(&cfg.ScrubPause, "scrub-pause", 0, "pause between scrub passes (default 1m)")
	f.StringVar(&addrFile, "addr-file", "", "write the listening address to this file once serving")
	f.StringVar(&managers, "manager", "", "manager address(es), comma-separated: register and heartbeat (empty: standalone)")
	f.StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus /metrics here, e.g. 127.0.0.1:7600 (empty: off)")
	return cmd
}

// downSlots lists the storage slots m marks down or out.
func downSlots(m *cluster.Map) []uint16 {
	var out []uint16
	for _, st := range m.Storage {
		if st.State == cluster.StateDown || st.State == cluster.StateOut {
			out = append(out, st.Slot)
		}
	}
	return out
}

// storageStats is what a storage server reports with each heartbeat.
func storageStats(srv *storage.Server, ms *web.Server) cluster.MemberStats {
	st := srv.Store().Stat()
	io := srv.IOStats()
	return cluster.MemberStats{
		CapacityBytes: uint64(st.CapacityBytes), UsedBytes: uint64(st.UsedBytes),
		BytesRead: io.BytesRead, BytesWritten: io.BytesWritten, Ops: io.Requests,
		ScrubPassBytes: uint64(st.Scrub.PassBytes), ScrubPasses: uint64(st.Scrub.Passes),
		Corrupt: uint64(st.CorruptDetected), Repairs: uint64(st.Repairs),
		MetricsAddr: advertisedMetrics(ms, srv.Addr()),
	}
}

func parseSize64(s, flag string) (int64, error) {
	n, err := layout.ParseSize(s)
	if err != nil {
		return 0, usageErr(flag, err)
	}
	return int64(n), nil
}
