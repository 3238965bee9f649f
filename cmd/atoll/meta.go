package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/meta"
	"github.com/atoll-fs/atoll/internal/metaserver"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/web"
)

func newMetaCmd(g *globalFlags) *cobra.Command {
	var cfg meta.Config
	var id uint32
	var mapFile, addrFile, inlineMax, managers, metricsListen string
	var srv metaserver.Config
	var servers string
	cmd := &cobra.Command{
		Use:   "meta --dir DIR --listen ADDR --id N --static-map FILE",
		Short: "Run a metadata island (directories, inodes, block maps, intents)",
		Long: `Run a metadata island.

Until the manager serves the cluster map, the map comes from a JSON file
(--static-map):

  {"epoch": 1, "depth": 2, "entries": [1, 1, 2, 3],
   "islands": {"1": "127.0.0.1:7500", "2": "127.0.0.1:7501", "3": "127.0.0.1:7502"}}

entries has 1<<depth island ids: entry i owns the buckets whose top depth
bits are i. Without --static-map the island is alone: it owns every bucket
at epoch 1.

With --server-id the process is an island server of replicated islands
instead: it hosts a replica of each of the --islands islands that the
placement puts on it (island k on the --replicas servers following the
(k-1) mod n-th of the --island-servers, in id order), and serves every
island whose replica leads. Every island server is given the same
--island-servers, --islands and --replicas, and --manager:

  atoll meta --server-id 1 --listen 127.0.0.1:7500 --raft-listen 127.0.0.1:7510 \
    --island-servers 1=127.0.0.1:7510,2=127.0.0.1:7511,3=127.0.0.1:7512 \
    --islands 3 --replicas 3 --manager 127.0.0.1:7400 --dir /var/lib/atoll/meta1

That placement is recorded in the cluster map when the first island server
starts; from then on the map decides. A server added later starts with
--join instead of --island-servers, --islands and --replicas, and
` + "`atoll island server add ID`" + ` moves a share of the replicas onto it:

  atoll meta --server-id 4 --join --listen 127.0.0.1:7503 --raft-listen 127.0.0.1:7513 \
    --manager 127.0.0.1:7400 --dir /var/lib/atoll/meta4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Logger, cfg.ID = log, id
			if cfg.Key, err = g.clusterKey("meta"); err != nil {
				return err
			}
			n, err := layout.ParseSize(inlineMax)
			if err != nil {
				return usageErr("--inline-max", err)
			}
			cfg.InlineMax = n
			if srv.ID != 0 {
				if id != 0 || mapFile != "" {
					return usageErr("--server-id", errors.New("an island server takes neither --id nor --static-map"))
				}
				if srv.Join {
					if servers != "" {
						return usageErr("--join", errors.New("a joining island server takes no --island-servers (its replicas come from the map)"))
					}
					srv.Servers = map[uint32]string{srv.ID: srv.RaftListen}
				} else if srv.Servers, err = parseServers(servers); err != nil {
					return usageErr("--island-servers", err)
				}
				srv.Listen, srv.Dir, srv.Managers, srv.Key, srv.Logger, srv.InlineMax = cfg.Listen, cfg.Dir, splitList(managers), cfg.Key, log, n
				srv.MoveDuty, srv.LockTerm = cfg.MoveDuty, cfg.LockTerm
				return runIslandServer(cmd.Context(), srv, addrFile, metricsListen)
			}
			if id == 0 {
				return usageErr("--id", errors.New("must be a nonzero island id"))
			}
			var view *cluster.View
			switch {
			case managers != "" && mapFile != "":
				return usageErr("--manager", errors.New("use either --manager or --static-map"))
			case managers != "":
				if view, err = islandView(cmd.Context(), splitList(managers), id, cfg.Listen, cfg.Key, log); err != nil {
					return err
				}
				cfg.Map = cluster.NewIslandMap(view)
				follow := cluster.FollowRevocations(cfg.Key)
				follow(view.Map())
				view.OnChange(follow)
			case mapFile != "":
				m, err := meta.LoadMapFile(mapFile)
				if err != nil {
					return usageErr("--static-map", err)
				}
				cfg.Map = m
			default:
				t, err := namespace.NewTable([]namespace.IslandID{namespace.IslandID(id)}, 0)
				if err != nil {
					return err
				}
				t.Epoch = 1
				cfg.Map = meta.NewStaticMap(t, nil)
			}
			if cfg.Faults, err = faults.FromEnv(); err != nil {
				return err
			}
			reg := web.NewRegistry()
			cfg.Registerer = reg
			ms, err := metricsServer(metricsListen, reg, log)
			if err != nil {
				return err
			}
			isl, err := meta.New(cfg)
			if err != nil {
				closeServer(ms)
				return err
			}
			if err := writeAddrFile(addrFile, isl.Addr()); err != nil {
				isl.Close()
				closeServer(ms)
				return err
			}
			run := isl.Run
			if view != nil {
				run = func(ctx context.Context) error {
					return runWithMember(ctx, isl.Run, cluster.MemberConfig{
						Managers: splitList(managers), Kind: cluster.KindIsland, ID: id,
						Addr: isl.Addr(), PID: os.Getpid(), Logger: log, OnMap: view.Update, Key: cfg.Key,
						Stats: func() cluster.MemberStats {
							return cluster.MemberStats{Ops: isl.Ops(), MetricsAddr: advertisedMetrics(ms, isl.Addr()), Leases: isl.LeaseStats(), Locks: isl.LockStats()}
						},
					})
				}
			}
			return web.RunWith(cmd.Context(), ms, run)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "data directory (created if absent)")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7500", "address to serve on")
	f.Uint32Var(&id, "id", 0, "island id in the cluster map")
	f.StringVar(&mapFile, "static-map", "", "JSON cluster map file (see --help)")
	f.StringVar(&managers, "manager", "", "manager address(es): register, wait for the namespace to be formatted, follow the map")
	f.StringVar(&addrFile, "addr-file", "", "write the listening address to this file once serving")
	f.StringVar(&inlineMax, "inline-max", "16KiB", "largest file kept inline in its inode")
	f.DurationVar(&cfg.LazySync, "lazy-sync", meta.DefaultLazySync, "longest wait of a lazily committed change (mount creates and closes) for the log sync, unless an fsync syncs first")
	f.StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus /metrics here, e.g. 127.0.0.1:7605 (empty: off)")
	f.DurationVar(&cfg.LockTerm, "lock-term", meta.DefaultLockTerm, "how long a client's lock session lives without a renewal: then its locks are released")
	f.Float64Var(&cfg.MoveDuty, "move-duty", meta.DefaultMoveDuty, "share of time spent moving table entries away (atoll island); 1: as fast as they go")
	f.Uint32Var(&srv.ID, "server-id", 0, "run as island server N of replicated islands (see --help)")
	f.StringVar(&srv.RaftListen, "raft-listen", "127.0.0.1:7510", "island server: raft port shared by its replicas")
	f.StringVar(&servers, "island-servers", "", "island server: every island server as id=raft-address, comma-separated")
	f.IntVar(&srv.Islands, "islands", 3, "island server: number of islands (ids 1..N)")
	f.IntVar(&srv.Replicas, "replicas", 3, "island server: replicas of each island (1, 3 or 5)")
	f.DurationVar(&srv.LeadBackAfter, "lead-back-after", metaserver.DefaultLeadBackAfter, "island server: how long another replica leads an island before offering its preferred server the lead back")
	f.BoolVar(&srv.Join, "join", false, "island server: join a running cluster; replicas come from the map (`atoll island server add`)")
	return cmd
}

// parseServers parses "1=host:port,2=host:port".
func parseServers(s string) (map[uint32]string, error) {
	out := map[uint32]string{}
	for _, p := range splitList(s) {
		k, v, ok := strings.Cut(p, "=")
		id, err := strconv.ParseUint(k, 10, 32)
		if !ok || err != nil || id == 0 || v == "" {
			return nil, fmt.Errorf("%q: want id=host:port with a nonzero id", p)
		}
		if _, dup := out[uint32(id)]; dup {
			return nil, fmt.Errorf("island server %d given twice", id)
		}
		out[uint32(id)] = v
	}
	if len(out) == 0 {
		return nil, errors.New("no island servers")
	}
	return out, nil
}

// runIslandServer runs an island server of replicated islands.
func runIslandServer(ctx context.Context, cfg metaserver.Config, addrFile, metricsListen string) error {
	if len(cfg.Managers) == 0 {
		return usageErr("--manager", errors.New("an island server needs the managers"))
	}
	if err := checkAdvertised("--listen", cfg.Listen); err != nil {
		return err
	}
	var err error
	if cfg.Faults, err = faults.FromEnv(); err != nil {
		return err
	}
	reg := web.NewRegistry()
	cfg.Registerer = reg
	ms, err := metricsServer(metricsListen, reg, cfg.Logger)
	if err != nil {
		return err
	}
	cfg.MetricsAddr = advertisedMetrics(ms, cfg.Listen)
	s, err := metaserver.New(cfg)
	if err != nil {
		closeServer(ms)
		return err
	}
	if err := writeAddrFile(addrFile, s.Addr()); err != nil {
		closeServer(ms)
		return err
	}
	return web.RunWith(ctx, ms, s.Run)
}

// islandView registers the island with the managers (so that formatting
// the namespace includes it) and waits until the map has a namespace table.
func islandView(ctx context.Context, managers []string, id uint32, listen string, key *auth.Key, log *slog.Logger) (*cluster.View, error) {
	if _, port, err := net.SplitHostPort(listen); err != nil || port == "0" {
		return nil, usageErr("--listen", fmt.Errorf("%q: --manager needs a fixed host:port to register", listen))
	}
	if err := checkAdvertised("--listen", listen); err != nil {
		return nil, err
	}
	// Register the address the island will be bound to (a host name
	// resolved as net.Listen resolves it), the same one its heartbeats
	// register later (Island.Addr), not the flag's text.
	ta, err := net.ResolveTCPAddr("tcp", listen)
	if err != nil {
		return nil, usageErr("--listen", err)
	}
	mc := cluster.NewClient(managers, key, log)
	view, err := cluster.WaitView(ctx, mc, log, "meta")
	if err != nil {
		return nil, err
	}
	// Registered and heartbeating while it waits, so that the manager
	// shows it up (not down after --down-after) until `atoll format`.
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	hbDone := make(chan error, 1)
	go func() {
		hbDone <- cluster.RunMember(hbCtx, cluster.MemberConfig{Managers: managers, Kind: cluster.KindIsland, ID: id,
			Addr: ta.String(), PID: os.Getpid(), Logger: log, Key: key})
	}()
	waitCtx, stopWait := context.WithCancel(ctx)
	defer stopWait()
	waitDone := make(chan error, 1)
	go func() { waitDone <- view.WaitFormatted(waitCtx, log, "meta") }()
	select {
	case err := <-waitDone:
		stopHB()
		<-hbDone
		if err != nil {
			return nil, err
		}
		return view, nil
	case err := <-hbDone:
		stopWait()
		<-waitDone
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("meta: register with the manager at %v: %w", managers, err)
	}
}
