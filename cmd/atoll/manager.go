package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/cluster"
)

func newManagerCmd(g *globalFlags) *cobra.Command {
	var cfg cluster.Config
	var addrFile string
	cmd := &cobra.Command{
		Use:   "manager --dir DIR --listen ADDR [--raft-listen ADDR] [--join ADDR]",
		Short: "Run a cluster manager (a raft voter holding the cluster map)",
		Long: `Run a cluster manager: a voter of the raft group that holds the cluster map
(members, islands, namespace hash table, default policy) and watches member
heartbeats.

The first start on an empty --dir without --join bootstraps a new group of
one voter. To grow it to three, start two more managers, each with its own
--dir and --join pointing at any running manager:

  atoll manager --dir m1 --listen 127.0.0.1:7300
  atoll manager --dir m2 --listen 127.0.0.1:7310 --join 127.0.0.1:7300
  atoll manager --dir m3 --listen 127.0.0.1:7320 --join 127.0.0.1:7300

A restart with the same --dir recovers the map (--join is then ignored).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Logger = log
			if err := cfg.Validate(); err != nil {
				return err
			}
			m, err := cluster.New(cfg)
			if err != nil {
				return err
			}
			if err := writeAddrFile(addrFile, m.Addr()); err != nil {
				// Run with a done context only shuts raft down cleanly.
				ctx, cancel := context.WithCancel(cmd.Context())
				cancel()
				_ = m.Run(ctx)
				return err
			}
			return m.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "data directory: raft log, snapshots, node id (created if absent)")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7300", "client-facing address (members, CLI)")
	f.StringVar(&cfg.RaftListen, "raft-listen", "", "raft transport address (default: --listen port + 1)")
	f.StringVar(&cfg.Join, "join", "", "address of a running manager whose group to join (first start only)")
	f.DurationVar(&cfg.DownAfter, "down-after", cluster.DefaultDownAfter, "mark a member down after this long without a heartbeat")
	f.StringVar(&addrFile, "addr-file", "", "write the listening address to this file once serving")
	return cmd
}
