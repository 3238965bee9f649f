package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/cleaner"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/islandload"
	"github.com/atoll-fs/atoll/internal/manager"
	"github.com/atoll-fs/atoll/internal/web"
	"github.com/atoll-fs/atoll/internal/web/dashboard"
)

func newManagerCmd(g *globalFlags) *cobra.Command {
	var cfg manager.Config
	var addrFile, webListen, metricsListen string
	var bc backgroundFlags
	var balance islandload.BalancerConfig
	cmd := &cobra.Command{
		Use:   "manager --dir DIR --listen ADDR [--raft-listen ADDR] [--join ADDR] [--web-listen ADDR]",
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

A restart with the same --dir recovers the map (--join is then ignored).

--web-listen serves the dashboard (/), its JSON (/api/cluster) and the
manager's Prometheus metrics (/metrics); the leader's dashboard has the
heartbeat figures, a follower's only the map. --metrics-listen serves the
same /metrics alone (as every other role's --metrics-listen does).

--listen and --raft-listen are what the other managers, the members and
the clients dial: name this machine's address on the cluster network (a
wildcard is refused).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			reg := web.NewRegistry()
			cfg.Logger, cfg.Registerer = log, reg
			if cfg.Key, err = g.clusterKey("manager"); err != nil {
				return err
			}
			if err := cleaner.CheckGrace(bc.flags.grace, false); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			m, err := manager.New(cfg)
			if err != nil {
				return err
			}
			// The cleaner runs beside the manager, in the leader only.
			bg, err := cleaner.NewBackground(bc.config(m, cfg.Key, log))
			if err == nil {
				err = cleaner.RegisterMetrics(reg, bg.Status)
			}
			var ws, ms *web.Server
			if err == nil && webListen != "" {
				ws, err = web.NewServer(webListen, dashboard.Handler(m, reg), log)
			}
			if err == nil {
				ms, err = metricsServer(metricsListen, reg, log)
			}
			if err == nil {
				err = writeAddrFile(addrFile, m.Addr())
			}
			if err != nil {
				// Run with a done context only shuts raft down cleanly.
				ctx, cancel := context.WithCancel(cmd.Context())
				cancel()
				_ = m.Run(ctx)
				if ws != nil {
					ws.Close()
				}
				closeServer(ms)
				return err
			}
			if ws != nil {
				log.Info("manager: dashboard", "url", "http://"+ws.Addr()+"/")
			}
			m.SetJobs(bg.Jobs)
			return web.RunWith(cmd.Context(), ms, func(ctx context.Context) error {
				return web.RunWith(ctx, ws, func(ctx context.Context) error {
					ctx, cancel := context.WithCancel(ctx)
					defer cancel()
					cleanDone := make(chan error, 1)
					go func() { cleanDone <- bg.Run(ctx) }()
					// So does the island balancer.
					mc := cluster.NewClient([]string{m.Addr()}, cfg.Key, log)
					defer mc.Close()
					balance.Client, balance.Key, balance.Leader, balance.Logger = mc, cfg.Key, m.IsLeader, log.With("role", "island-balancer")
					bal, err := islandload.NewBalancer(balance)
					if err != nil {
						cancel()
						<-cleanDone
						return err
					}
					balDone := make(chan error, 1)
					go func() { balDone <- bal.Run(ctx) }()
					err = m.Run(ctx)
					cancel()
					if cerr := <-cleanDone; err == nil {
						err = cerr
					}
					if berr := <-balDone; err == nil {
						err = berr
					}
					return err
				})
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "data directory: raft log, snapshots, node id (created if absent)")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7300", "client-facing address (members, CLI)")
	f.StringVar(&cfg.RaftListen, "raft-listen", "", "raft transport address (default: --listen port + 1)")
	f.StringVar(&cfg.Join, "join", "", "address of a running manager whose group to join (first start only)")
	f.DurationVar(&cfg.DownAfter, "down-after", manager.DefaultDownAfter, "mark a member down after this long without a heartbeat")
	f.StringVar(&addrFile, "addr-file", "", "write the listening address to this file once serving")
	bc.register(cmd)
	f.Float64Var(&balance.Threshold, "island-balance-threshold", islandload.DefaultThreshold,
		"move table entries between islands when the spread of their load (standard deviation over mean) stays above this (0: never)")
	f.DurationVar(&balance.Every, "island-balance-every", islandload.DefaultEvery, "how often the islands' load is measured")
	f.IntVar(&balance.Sustain, "island-balance-sustain", islandload.DefaultSustain, "measures in a row above the threshold before entries move")
	f.Float64Var(&balance.MinOps, "island-balance-min-ops", islandload.DefaultMinOps, "operations per second below which load is not balanced")
	f.StringVar(&webListen, "web-listen", "", "serve the dashboard, /api/cluster and /metrics here, e.g. 127.0.0.1:7380 (empty: off)")
	f.StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus /metrics (only) here, e.g. 127.0.0.1:9100 (empty: off)")
	return cmd
}
