package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/fusefs"
	"github.com/atoll-fs/atoll/internal/web"
)

func newMountCmd(g *globalFlags) *cobra.Command {
	var addr, metricsListen, rootPath, options, readyFile, serves string
	var leases, writeBehind, abort bool
	var prebornDelay time.Duration
	var cfg fusefs.Config
	cmd := &cobra.Command{
		Use:   "mount [--cluster ADDR] [--root DIR] MOUNTPOINT",
		Short: "Mount the cluster's namespace with FUSE (until Ctrl-C or fusermount3 -u)",
		Long: `Mount the Atoll namespace (or the directory --root names; a key confined
to a subtree mounts its subtree) on MOUNTPOINT through FUSE and serve it
until interrupted (SIGINT/SIGTERM unmount cleanly, writing back open files).

The manager address is --cluster, else $ATOLL_CLUSTER, else ` + defaultCluster + `.
The mount uses allow_other; permissions are checked by the metadata islands
with each caller's uid, gid and groups. If the process is killed, the
mountpoint stays "stale": run fusermount3 -u MOUNTPOINT (or umount -l).
A killed mount process that does not exit (it stays a zombie, and the
mountpoint hangs: one of its threads waits in the kernel for the mount
itself) ends with atoll mount --abort MOUNTPOINT, which aborts its FUSE
connection (/sys/fs/fuse/connections/N/abort); then unmount it.

With --metrics-listen the mount serves its client's Prometheus metrics and
registers with the managers as a gateway (its metrics address as its
address), so status and the dashboard list it with the degraded stripes
and repairs its reads found.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Mountpoint, cfg.Logger = args[0], log
			if abort {
				return fusefs.Abort(cfg.Mountpoint)
			}
			if err := mountOptions(&cfg, options); err != nil {
				return err
			}
			// Environment problems first: they need no cluster.
			if err := fusefs.CheckFuseDevice(); err != nil {
				return err
			}
			if err := fusefs.CheckMountpoint(cfg.Mountpoint); err != nil {
				return err
			}
			if metricsListen != "" {
				// The metrics address is what the mount registers.
				if err := checkAdvertised("--metrics-listen", metricsListen); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			addrs := clusterAddrs(addr)
			key, err := g.key()
			if err != nil {
				return err
			}
			if serves != auth.ProtoMount && serves != auth.ProtoSMB {
				return usageErr("--serves", fmt.Errorf("%q: want mount or smb", serves))
			}
			if err := key.Scope.ServesErr(key.Name, serves); err != nil {
				return fmt.Errorf("atoll mount: %w", err)
			}
			conn, statfs, closeFS, err := connectFS(ctx, addrs, key, log)
			if err != nil {
				return err
			}
			defer closeFS()
			reg := web.NewRegistry()
			if err := client.RegisterMetrics(reg, conn.Data, conn.FS); err != nil {
				return err
			}
			// Neither a POSIX create nor close promises durability; fsync
			// and fsyncdir do (and unmount makes everything durable).
			conn.FS.SetLazyCreate(true)
			conn.FS.SetLazyClose(true)
			if leases {
				conn.FS.EnableLeases()
				if writeBehind {
					conn.FS.EnableWriteBehind()
				}
			}
			if cfg.WriteCache == fusefs.WritePreborn {
				if !leases || !writeBehind || prebornDelay <= 0 {
					return errors.New("atoll mount: --write-cache preborn needs --leases, --write-behind and a positive --preborn-delay")
				}
				conn.FS.SetPreborn(prebornDelay)
			}
			cfg.FS, cfg.StatFS = conn.FS, statfs
			if rootPath != "" {
				if cfg.Root, err = resolveDir(ctx, conn.FS, "--root", rootPath); err != nil {
					return fmt.Errorf("atoll mount: %w", err)
				}
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			ms, err := metricsServer(metricsListen, reg, log)
			if err != nil {
				return err
			}
			m, err := fusefs.New(cfg)
			if err == nil {
				err = m.Mount()
			}
			if err != nil {
				closeServer(ms)
				return err
			}
			fmt.Fprintf(os.Stderr, "atoll: cluster %s mounted on %s (Ctrl-C or `fusermount3 -u %s` to unmount)\n", strings.Join(addrs, ","), m.Mountpoint(), m.Mountpoint())
			if err := writeAddrFile(readyFile, m.Mountpoint()); err != nil {
				return errors.Join(fmt.Errorf("atoll mount: --ready-file: %w", err), m.Unmount())
			}
			// Serve until interrupted or unmounted from outside.
			run := func(ctx context.Context) error {
				select {
				case <-ctx.Done():
				case <-m.Done():
				}
				return nil
			}
			if ms != nil {
				serve := run
				run = func(ctx context.Context) error {
					return runWithMember(ctx, serve, cluster.MemberConfig{
						Managers: addrs, Kind: cluster.KindGateway, ID: gatewayID("mount:" + ms.Addr() + ":" + m.Mountpoint()),
						Addr: ms.Addr(), PID: os.Getpid(), Logger: log, OnMap: conn.View.Update, Key: key,
						Stats: func() cluster.MemberStats {
							return clientStats(conn.Data, conn.FS, 0, ms.Addr(), "mount at "+m.Mountpoint()+" on "+hostname())
						},
					})
				}
			}
			err = web.RunWith(ctx, ms, run)
			return errors.Join(err, m.Unmount())
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "cluster", "", "manager address(es) (default $ATOLL_CLUSTER, else "+defaultCluster+")")
	f.DurationVar(&cfg.AttrTTL, "attr-timeout", time.Second, "kernel attribute cache timeout")
	f.DurationVar(&cfg.EntryTTL, "entry-timeout", time.Second, "kernel name cache timeout")
	f.DurationVar(&cfg.InterruptGrace, "interrupt-grace", 5*time.Second, "how long a change keeps waiting for a hung server after its process is interrupted or killed (negative: until the server answers)")
	f.BoolVar(&cfg.Private, "private", false, "mount without allow_other (only the mounting user may enter)")
	f.BoolVar(&cfg.LocalLocks, "local-locks", false, "keep fcntl and flock locks in this host's kernel: they no longer conflict with other hosts' (unsafe for shared files; single-host use)")
	f.IntVar(&cfg.ReadAhead, "read-ahead", fusefs.DefaultReadAhead, "the kernel's read-ahead for the mount in bytes, set when running as root (negative: the kernel's default, 128 KiB)")
	f.BoolVar(&cfg.Debug, "debug", false, "log every FUSE request")
	f.BoolVar(&cfg.PlainType, "plain-type", false, "mount with type fuse instead of fuse.atoll (xfstests' FSTYP=fuse wants it)")
	f.StringVar(&rootPath, "root", "", "mount this directory of the namespace instead of its root (a view: the key still reaches what it reaches; confine a key with atoll key new --path)")
	f.StringVar(&cfg.FsName, "fsname", "atoll", "the mount's source as mount(8), df and findmnt show it (e.g. a name per cluster; xfstests' mount helper passes its device name)")
	f.BoolVar(&leases, "leases", true, "hold leases on directories: names and attributes stay cached until another client changes them (false: cached for the timeouts only)")
	f.BoolVar(&writeBehind, "write-behind", true, "with --leases: while no other client uses a directory, keep chown/chmod/utimes of its files back (up to 1 s) and send each file's as one change; another client's access, fsync and unmount send them first")
	f.BoolVar(&abort, "abort", false, "abort the FUSE connection of the mount at MOUNTPOINT (its process killed but still there, the mountpoint hanging), then exit")
	f.StringVar(&cfg.WriteCache, "write-cache", fusefs.WriteClose, "when a file's changes reach the cluster: close (at close(2); a mount killed with -9 loses only files still open), sync (every write durable before it returns), preborn (with --write-behind: a closed file's create and data stay in the mount up to --preborn-delay, so a file removed by then never reaches the cluster; fsync, another client's access and unmount send them first; a mount killed with -9 loses what it holds)")
	f.DurationVar(&prebornDelay, "preborn-delay", 10*time.Second, "with --write-cache preborn: how long a closed file may stay in the mount (the directory's lease bounds it too)")
	f.StringVar(&cfg.Atime, "atime", fusefs.AtimeNoatime, "when reads update access times: noatime (never), relatime (the first read after a change, or a day later), strictatime (every open's first read)")
	f.StringVarP(&options, "options", "o", "", "mount(8) options, comma-separated, as mount helpers pass them: noatime, relatime and strictatime set --atime; nodiratime, rw and the generic ones (dev, suid, exec, auto, ...) are accepted; others are refused")
	// The SMB gateway's own mount serves SMB: its key may be one for smb.
	f.StringVar(&serves, "serves", auth.ProtoMount, "the protocol this mount serves, as a key's --protocols names it")
	_ = f.MarkHidden("serves")
	f.StringVar(&readyFile, "ready-file", "", "write the mountpoint to this file once the mount is ready: the mount appears a moment before, while its own setup still holds it (an umount then is EBUSY); mount helpers wait for this file")
	f.StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus /metrics here and register with the managers, e.g. 127.0.0.1:7609 (empty: off)")
	return cmd
}

// connectFS connects the client stack of a mount (connect.Dial: the
// data client's slots follow the cluster map, refreshed every 5s) and
// returns a statfs function over the storage servers' usage.
func connectFS(ctx context.Context, addrs []string, key *auth.Key, log *slog.Logger) (*connect.Conn, func(context.Context) (fusefs.StatFS, error), func(), error) {
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	c, err := connect.Dial(dctx, addrs, key, log)
	cancel()
	if err != nil {
		return nil, nil, nil, err
	}
	wctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.Watch(wctx, 5*time.Second)
	}()
	var mu sync.Mutex
	var last fusefs.StatFS
	var lastAt time.Time
	statfs := func(ctx context.Context) (fusefs.StatFS, error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(lastAt) < 2*time.Second {
			return last, nil
		}
		var st fusefs.StatFS
		var firstErr error
		for _, s := range c.View.Map().Storage {
			if s.State == cluster.StateOut {
				continue
			}
			ss, err := c.Data.ServerStats(ctx, s.Slot)
			if err != nil {
				firstErr = cmp.Or(firstErr, err)
				continue
			}
			st.TotalBytes += ss.CapacityBytes
			st.FreeBytes += ss.FreeBytes
		}
		if st.TotalBytes == 0 {
			return last, cmp.Or(firstErr, errors.New("no storage server answered"))
		}
		st.Files, st.FreeFiles = 1<<40, 1<<40
		last, lastAt = st, time.Now()
		return st, nil
	}
	closeAll := func() {
		stop()
		wg.Wait()
		c.Close()
	}
	return c, statfs, closeAll, nil
}

// hostname is this machine's name ("?" when unknown).
func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "?"
	}
	return h
}

// mountOptions applies mount(8)-style options (-o) to cfg, and checks
// --atime before the cluster is dialed.
func mountOptions(cfg *fusefs.Config, opts string) error {
	if err := fusefs.CheckAtime(cfg.Atime); err != nil {
		return fmt.Errorf("--%w", err)
	}
	for _, o := range strings.Split(opts, ",") {
		switch o {
		case "":
		case fusefs.AtimeNoatime, fusefs.AtimeRelatime, fusefs.AtimeStrict:
			cfg.Atime = o
		case "atime":
			cfg.Atime = fusefs.AtimeRelatime // mount(8)'s atime is the kernel default
		case "nodiratime", "diratime", "rw", "defaults", "dev", "nodev", "suid", "nosuid", "exec", "noexec",
			"auto", "noauto", "nouser", "async", "lazytime", "nolazytime", "_netdev", "nofail", "silent", "loud",
			"allow_other", "default_permissions":
			// Directories' atimes are never updated (nodiratime), and
			// the rest are the kernel's or mount(8)'s own business.
		case "ro":
			return fmt.Errorf("mount option ro: read-only mounts are not supported (mount with a read-only key: atoll key new --caps read)")
		default:
			return fmt.Errorf("mount option %q is not supported", o)
		}
	}
	return nil
}
