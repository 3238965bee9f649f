package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/nfs"
	"github.com/atoll-fs/atoll/internal/web"
)

func newNFSCmd(g *globalFlags) *cobra.Command {
	var cfg nfs.Config
	var managers, allow, addrFile, metricsListen string
	var id uint32
	var leases bool
	cmd := &cobra.Command{
		Use:   "nfs --cluster ADDR [--listen ADDR] [--portmap ADDR] [--export-allow CIDR,...] [--read-only] [--root-squash=false]",
		Short: "Run an NFSv3 + MOUNT gateway over the cluster",
		Long: `Run an NFSv3 (RFC 1813) + MOUNT v3 gateway. NFS and MOUNT share --listen;
--portmap adds a minimal portmapper (rpcbind v2 GETPORT, v3/v4 GETADDR) for
clients that ask it where MOUNT and NFS are (port 111 needs root).

Any directory of the namespace can be mounted. File handles carry only the
inode id and generation, so they stay valid across gateways and restarts;
any number of gateways may serve the namespace at once.

libnfs clients (nfs-cp, nfs-ls, nfs-cat) can skip the portmapper by naming
the ports in the URL:

  nfs-ls 'nfs://127.0.0.1/?nfsport=2049&mountport=2049'
  nfs-cp big.iso 'nfs://127.0.0.1/dir/big.iso?nfsport=2049&mountport=2049'

or ask it (atoll nfs --portmap 127.0.0.1:111):

  nfs-ls nfs://127.0.0.1/dir

libnfs mounts the URL's directory part as the export and refuses an empty
one: a file in the root directory is nfs://127.0.0.1//file.

The manager address is --cluster, else $ATOLL_CLUSTER, else ` + defaultCluster + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if cfg.Export.Allow, err = nfs.ParseAllow(splitList(allow)); err != nil {
				return usageErr("--export-allow", err)
			}
			if err := checkAdvertised("--listen", cfg.Listen); err != nil {
				return err
			}
			addrs := clusterAddrs(managers)
			if id == 0 {
				id = gatewayID(cfg.Listen)
			}
			key, err := g.key()
			if err != nil {
				return err
			}
			if err := key.Scope.ServesErr(key.Name, auth.ProtoNFS); err != nil {
				return fmt.Errorf("atoll nfs: %w", err)
			}
			// Gateways with the same key and --export accept each
			// other's handles.
			cfg.Export.HandleKey = key.Handle("nfs-handles")
			conn, err := connect.DialWhenFormatted(ctx, addrs, key, log)
			if err != nil {
				return err
			}
			defer conn.Close()
			if leases {
				// Names and attributes stay cached until another client
				// changes them. No write-behind: an NFS SETATTR is stable
				// when it returns.
				conn.FS.EnableLeases()
			}
			reg := web.NewRegistry()
			if err := client.RegisterMetrics(reg, conn.Data, conn.FS); err != nil {
				return err
			}
			cfg.FS, cfg.Logger, cfg.Registerer = conn.FS, log, reg
			cfg.StatFS = statFS(conn.Cluster)
			ms, err := metricsServer(metricsListen, reg, log)
			if err != nil {
				return err
			}
			srv, err := nfs.New(cfg)
			if err != nil {
				closeServer(ms)
				return err
			}
			if err := writeAddrFile(addrFile, srv.Addr()); err != nil {
				srv.Close()
				closeServer(ms)
				return err
			}
			return web.RunWith(ctx, ms, func(ctx context.Context) error {
				return runWithMember(ctx, srv.Run, cluster.MemberConfig{
					Managers: addrs, Kind: cluster.KindGateway, ID: id,
					Addr: srv.Addr(), PID: os.Getpid(), Logger: log, OnMap: conn.View.Update, Key: key,
					Stats: func() cluster.MemberStats {
						return clientStats(conn.Data, conn.FS, srv.Requests(), advertisedMetrics(ms, srv.Addr()), "NFS gateway at "+srv.Addr())
					},
				})
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&managers, "cluster", "", "manager address(es), comma-separated (default $ATOLL_CLUSTER, else "+defaultCluster+")")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:2049", "NFS and MOUNT address")
	f.StringVar(&cfg.PortmapListen, "portmap", "", "serve a minimal portmapper here too, e.g. 127.0.0.1:111 (NFS clients find the lock manager, NLM, through it)")
	f.DurationVar(&cfg.NLMGrace, "nlm-grace", 10*time.Second, "after a start, refuse new NLM locks for this long and serve only clients' reclaims")
	f.StringVar(&allow, "export-allow", "", "client addresses or CIDR prefixes allowed to mount, comma-separated (empty: all)")
	f.BoolVar(&cfg.Export.ReadOnly, "read-only", false, "refuse every change (NFS3ERR_ROFS)")
	f.BoolVar(&leases, "leases", true, "hold leases on directories: the gateway answers names and attributes from its cache until another client changes them (false: cached for one second)")
	f.StringVar(&cfg.Export.Path, "export", "/", "the directory clients may mount; below /, clients are confined to it (handles are tagged with this gateway's key)")
	f.BoolVar(&cfg.Export.RootSquash, "root-squash", true, "map uid/gid 0 of NFS clients to the anonymous ids (--root-squash=false trusts clients' root)")
	f.BoolVar(&cfg.Export.SecurePort, "secure-port", false, "answer NFS and MOUNT calls only from client source ports below 1024 (root's), as knfsd's \"secure\" option")
	f.Uint32Var(&cfg.Export.AnonUID, "anonuid", 65534, "uid of AUTH_NONE and squashed callers")
	f.Uint32Var(&cfg.Export.AnonGID, "anongid", 65534, "gid of AUTH_NONE and squashed callers")
	f.StringVar(&addrFile, "addr-file", "", "write the listening address to this file once serving")
	f.Uint32Var(&id, "id", 0, "gateway id in the cluster map (default: derived from the host name and --listen)")
	f.StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus /metrics here, e.g. 127.0.0.1:7608 (empty: off)")
	return cmd
}

// clientStats is what a client-side member (gateway, mount) reports with
// each heartbeat: its data path's counters and the stripes it knows to be
// degraded.
func clientStats(data *client.Client, fs *client.FS, ops uint64, metricsAddr, role string) cluster.MemberStats {
	st := data.Stats()
	ms := cluster.MemberStats{
		Role:      role,
		Degraded:  uint64(len(data.DegradedStripes())),
		BytesRead: fs.BytesRead(), BytesWritten: st.BytesWritten, Ops: ops,
		Corrupt: st.CorruptDetected, Repairs: st.Repairs,
		MetricsAddr: metricsAddr,
	}
	if fs.LeasesOn() {
		kept, sent, _ := fs.WriteBehindStats()
		ms.Leases = &cluster.LeaseStats{Held: uint64(fs.LeasesHeld()), Broken: fs.LeaseBreaks(), Kept: kept, Sent: sent}
	}
	open, told := fs.OpenHolds()
	ms.Locks = &cluster.LockStats{Locks: uint64(fs.LockedInodes()), SessionsEnded: fs.LockSessionsLost(),
		OpenHeld: uint64(told), OpenLocal: uint64(open - told)}
	return ms
}

// gatewayID derives a stable member id from the host name and listen
// address (the address alone tells apart machines that share a host name,
// as containers and simulated hosts do).
func gatewayID(listen string) uint32 {
	h := fnv.New32a()
	host, _ := os.Hostname()
	h.Write([]byte(host + "|" + listen))
	return h.Sum32()
}

// statFS reports the storage servers' capacity and use (as the leading
// manager last heard them), cached for a few seconds.
func statFS(mc *cluster.Client) func(context.Context) (nfs.FSStat, error) {
	var mu sync.Mutex
	var last nfs.FSStat
	var at time.Time
	return func(ctx context.Context) (nfs.FSStat, error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) < 5*time.Second {
			return last, nil
		}
		st := nfs.FSStat{TotalFiles: 1 << 40, FreeFiles: 1 << 40}
		if m, err := mc.Map(ctx, 0); err == nil {
			for _, s := range m.Storage {
				st.TotalBytes += s.CapacityBytes
				if s.CapacityBytes > s.UsedBytes {
					st.FreeBytes += s.CapacityBytes - s.UsedBytes
				}
			}
		}
		if st.TotalBytes == 0 {
			st.TotalBytes, st.FreeBytes = 1<<50, 1<<50 // unknown
		}
		last, at = st, time.Now()
		return st, nil
	}
}
