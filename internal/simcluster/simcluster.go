package simcluster

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/simnet"
)

// Kinds of roles (Role.Kind).
const (
	KindManager = "manager"
	KindStorage = "storage"
	KindIsland  = "island"
	KindNFS     = "nfs"
	KindMount   = "mount"
)

// kindFormat is the one-off `atoll format` step of the plan (not a role).
const kindFormat = "format"

// Ports every host uses for its role (docs/deploy.md lists the same).
const (
	ManagerPort   = 7300
	RaftPort      = 7301
	DashboardPort = 7380
	StoragePort   = 7400
	IslandPort    = 7500
	IslandRaft    = 7510 // an island server's raft port
	NFSPort       = 2049
	MetricsPort   = 9100
)

// ManagerHost is the manager's simnet host.
const ManagerHost = "m0"

// ReadyTimeout bounds waiting for one role to serve (its addr file, or the
// mountpoint) and for every member to be up in the map.
const ReadyTimeout = 90 * time.Second

// StopGrace is how long Stop waits for a role to exit after SIGTERM.
const StopGrace = 10 * time.Second

// Config describes a cluster.
type Config struct {
	Net     *simnet.Net
	Exe     string // the atoll binary
	Dir     string // data root: each role's data dir is Dir/<role name>
	Storage int    // storage servers, roles "storage0".."storageN-1" on hosts "s0".."sN-1", slot i
	Islands int    // islands, roles "island1".."islandN" on hosts "i1".."iN": island servers
	// IslandReplicas is the replicas of each island (1, 3 or 5; 0: 3
	// with 3 islands or more, else 1), as docs/deploy.md deploys them:
	// island server i leads island i while it can.
	IslandReplicas int
	NFS            bool // NFS gateway role "nfs" on host "gw" (port 2049)
	// Mount is the FUSE mountpoint of role "mount" on host "cl" ("" =
	// none); the caller sees the mount there.
	Mount string
	// Env is extra environment for every role (e.g. ATOLL_FAILPOINTS=...).
	Env []string
	// ManagerArgs are extra manager flags, e.g. --down-after 2s
	// --rebuild-after 20s --clean-interval 5s.
	ManagerArgs []string
	// IslandArgs are extra flags of every island server, e.g.
	// --lock-term 5s.
	IslandArgs []string
	// Budgets makes each host a small machine (simnet.Budget) by the kind
	// of role it runs (KindStorage, ...): its CPU, its data directory's
	// disk, its link. Kinds not in it are unlimited.
	Budgets map[string]simnet.Budget
	// OwnDisks, when above 0, gives every role with a data directory a
	// disk of its own of this many bytes (simnet.GiveDisk): roles on one
	// filesystem share its journal, and their fsyncs wait for each other.
	OwnDisks int64
	LogLevel string    // every role's --log-level (default info)
	Out      io.Writer // roles' output, each line prefixed with the role name (nil: discarded)
	// SpareStorage and SpareIslandServers are hosts made for machines
	// added while the cluster serves (Cluster.AddStorage,
	// Cluster.AddIslandServer): storage hosts "s<Storage>".., island
	// server hosts "i<Islands+1>"... Start leaves them idle.
	SpareStorage       int
	SpareIslandServers int
}

// Validate checks the configuration against its net.
func (c *Config) Validate() error {
	switch {
	case c.Net == nil:
		return errors.New("simcluster: no net")
	case c.Exe == "":
		return errors.New("simcluster: no atoll binary")
	case c.Dir == "":
		return errors.New("simcluster: no data directory")
	case c.Storage < 1 || c.Storage > 64:
		return fmt.Errorf("simcluster: %d storage servers (1..64)", c.Storage)
	case c.Islands < 0 || c.Islands > 32:
		return fmt.Errorf("simcluster: %d islands (0..32)", c.Islands)
	case c.IslandReplicas != 0 && c.IslandReplicas != 1 && c.IslandReplicas != 3 && c.IslandReplicas != 5,
		c.IslandReplicas > c.Islands:
		return fmt.Errorf("simcluster: %d replicas of %d islands (1, 3 or 5, at most the islands)", c.IslandReplicas, c.Islands)
	case c.Islands == 0 && (c.NFS || c.Mount != ""):
		return errors.New("simcluster: an NFS gateway or a mount needs at least one island")
	case c.SpareStorage < 0 || c.Storage+c.SpareStorage > 64 || c.SpareIslandServers < 0 || c.Islands+c.SpareIslandServers > 32:
		return fmt.Errorf("simcluster: %d spare storage servers and %d spare island servers (at most 64 and 32 in all)", c.SpareStorage, c.SpareIslandServers)
	case c.SpareIslandServers > 0 && c.Islands == 0:
		return errors.New("simcluster: a spare island server needs a cluster with islands to join")
	}
	for k, b := range c.Budgets {
		if !slices.Contains([]string{KindManager, KindStorage, KindIsland, KindNFS, KindMount}, k) {
			return fmt.Errorf("simcluster: a budget for %q, not a kind of role", k)
		}
		if err := b.Validate(); err != nil {
			return err
		}
	}
	for _, h := range HostNames(*c) {
		if c.Net.Host(h) == nil {
			return fmt.Errorf("simcluster: the net has no host %q (make it with HostNames(cfg))", h)
		}
	}
	return nil
}

// islandReplicas is IslandReplicas with its default.
func (c *Config) islandReplicas() int {
	switch {
	case c.IslandReplicas != 0:
		return c.IslandReplicas
	case c.Islands >= 3:
		return 3
	}
	return 1
}

// HostNames lists the simnet hosts cfg needs: "m0", "s0".., "i1"..,
// "gw" with NFS, "cl" with a mount.
func HostNames(cfg Config) []string {
	var hosts []string
	for _, h := range hostRoles(cfg) {
		hosts = append(hosts, h[0])
	}
	return hosts
}

// HostKinds maps each host of HostNames to the kind of role it runs
// (KindManager, KindStorage, ...).
func HostKinds(cfg Config) map[string]string {
	kinds := map[string]string{}
	for _, h := range hostRoles(cfg) {
		kinds[h[0]] = h[1]
	}
	return kinds
}

// hostRoles is each host cfg needs and its role's kind, in start order.
func hostRoles(cfg Config) [][2]string {
	hosts := [][2]string{{ManagerHost, KindManager}}
	for i := 0; i < cfg.Storage+cfg.SpareStorage; i++ {
		hosts = append(hosts, [2]string{fmt.Sprintf("s%d", i), KindStorage})
	}
	for i := 1; i <= cfg.Islands+cfg.SpareIslandServers; i++ {
		hosts = append(hosts, [2]string{fmt.Sprintf("i%d", i), KindIsland})
	}
	if cfg.NFS {
		hosts = append(hosts, [2]string{"gw", KindNFS})
	}
	if cfg.Mount != "" {
		hosts = append(hosts, [2]string{"cl", KindMount})
	}
	return hosts
}

// ClusterKeyPath is where the cluster's key is (docs/deploy.md's
// /etc/atoll/cluster.key): held by every server role and by admins.
func (c *Config) ClusterKeyPath() string { return filepath.Join(c.Dir, "keys", "cluster.key") }

// ClientKeyPath is the gateway's and the mount's key (deploy.md's
// /etc/atoll/client.key): derived from the cluster key with the user
// capabilities (read, write), limited to uid and gid 0, so it can neither
// serve nor administer.
func (c *Config) ClientKeyPath() string { return filepath.Join(c.Dir, "keys", "client.key") }

// makeKeys runs deploy.md's step 0 on the manager's host: `atoll key init`
// once, then `atoll key new` for the clients' key. Keys already there (a
// restarted harness on the same directory) are kept.
func makeKeys(ctx context.Context, cfg Config) error {
	ck, uk := cfg.ClusterKeyPath(), cfg.ClientKeyPath()
	if err := os.MkdirAll(filepath.Dir(ck), 0o700); err != nil {
		return fmt.Errorf("simcluster: keys: %w", err)
	}
	run := func(args ...string) error {
		out, err := exec.CommandContext(ctx, cfg.Exe, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("simcluster: atoll %v: %v: %s", args, err, bytes.TrimSpace(out))
		}
		return nil
	}
	if _, err := os.Stat(ck); err != nil {
		if err := run("key", "init", "--out", ck); err != nil {
			return err
		}
	}
	if _, err := os.Stat(uk); err != nil {
		// Limited to root, as the mount and gateway act here: every
		// request of the fault engine's clients goes through the islands'
		// scope checks (internal/meta applyScope) under its faults.
		return run("key", "new", "--key", ck, "--name", "client", "--caps", "user", "--uids", "0", "--gids", "0", "--out", uk)
	}
	return nil
}

// step is one step of docs/deploy.md: a role to start, or `atoll format`.
type step struct {
	name, kind, host string
	id               int
	// args are the subcommand and its flags exactly as the unit under
	// deploy/ gives them; extra are the harness's own (Config.ManagerArgs,
	// Config.IslandArgs).
	args, extra []string
	addr        string // what the role registers (Role.Addr)
	joined      bool   // an island server added later (Role.Joined)
	metrics     string
	dir         string
}

// plan is the deployment, in order: the one place simcluster's command
// lines are made (TestDeployUnitsMatch compares them with deploy/).
// addrOf gives a host's address.
func plan(cfg Config, addrOf func(host string) string) []step {
	hp := func(host string, port int) string { return net.JoinHostPort(addrOf(host), strconv.Itoa(port)) }
	dir := func(name string) string { return filepath.Join(cfg.Dir, name) }
	// docs/deploy.md: servers and admins hold the cluster key, the
	// gateway and the mount a derived key with the user capabilities.
	ck, uk := cfg.ClusterKeyPath(), cfg.ClientKeyPath()
	lvl := cfg.logLevel()
	mgr := hp(ManagerHost, ManagerPort)
	steps := []step{{
		name: "manager", kind: KindManager, host: ManagerHost, addr: mgr, metrics: hp(ManagerHost, MetricsPort), dir: dir("manager"),
		args: []string{"manager", "--dir", dir("manager"), "--listen", mgr, "--raft-listen", hp(ManagerHost, RaftPort),
			"--web-listen", hp(ManagerHost, DashboardPort), "--metrics-listen", hp(ManagerHost, MetricsPort), "--key", ck, "--log-level", lvl},
		extra: cfg.ManagerArgs,
	}}
	for i := 0; i < cfg.Storage; i++ {
		steps = append(steps, storageStep(cfg, addrOf, i))
	}
	var servers []string
	for i := 1; i <= cfg.Islands; i++ {
		servers = append(servers, fmt.Sprintf("%d=%s", i, hp(fmt.Sprintf("i%d", i), IslandRaft)))
	}
	for i := 1; i <= cfg.Islands; i++ {
		h, n := fmt.Sprintf("i%d", i), fmt.Sprintf("island%d", i)
		steps = append(steps, step{
			name: n, kind: KindIsland, host: h, id: i, addr: hp(h, IslandPort), metrics: hp(h, MetricsPort), dir: dir(n),
			args: []string{"meta", "--dir", dir(n), "--server-id", strconv.Itoa(i), "--listen", hp(h, IslandPort),
				"--raft-listen", hp(h, IslandRaft), "--island-servers", strings.Join(servers, ","),
				"--islands", strconv.Itoa(cfg.Islands), "--replicas", strconv.Itoa(cfg.islandReplicas()),
				"--manager", mgr, "--metrics-listen", hp(h, MetricsPort), "--key", ck, "--log-level", lvl},
			extra: cfg.IslandArgs,
		})
	}
	if cfg.Islands > 0 {
		steps = append(steps, step{
			name: "format", kind: kindFormat, host: ManagerHost,
			args: []string{"format", "--cluster", mgr, "--key", ck, "--islands", strconv.Itoa(cfg.Islands), "--storage", strconv.Itoa(cfg.Storage)},
		})
	}
	if cfg.NFS {
		steps = append(steps, step{
			name: "nfs", kind: KindNFS, host: "gw", addr: hp("gw", NFSPort), metrics: hp("gw", MetricsPort),
			args: []string{"nfs", "--cluster", mgr, "--listen", hp("gw", NFSPort), "--metrics-listen", hp("gw", MetricsPort), "--key", uk, "--log-level", lvl},
		})
	}
	if cfg.Mount != "" {
		// A mount registers its metrics address (it listens nowhere else).
		steps = append(steps, step{
			name: "mount", kind: KindMount, host: "cl", addr: hp("cl", MetricsPort), metrics: hp("cl", MetricsPort),
			args: []string{"mount", "--cluster", mgr, "--metrics-listen", hp("cl", MetricsPort), "--key", uk, "--log-level", lvl, cfg.Mount},
		})
	}
	return steps
}

// storageStep is storage server i on host "si" (slot i).
func storageStep(cfg Config, addrOf func(host string) string, i int) step {
	hp := func(host string, port int) string { return net.JoinHostPort(addrOf(host), strconv.Itoa(port)) }
	h, n := fmt.Sprintf("s%d", i), fmt.Sprintf("storage%d", i)
	d := filepath.Join(cfg.Dir, n)
	return step{
		name: n, kind: KindStorage, host: h, id: i, addr: hp(h, StoragePort), metrics: hp(h, MetricsPort), dir: d,
		args: []string{"storage", "--dir", d, "--slot", strconv.Itoa(i), "--listen", hp(h, StoragePort),
			"--manager", hp(ManagerHost, ManagerPort), "--metrics-listen", hp(h, MetricsPort), "--key", cfg.ClusterKeyPath(), "--log-level", cfg.logLevel()},
	}
}

// joinStep is island server id on host "i<id>" joining a running
// cluster, as docs/deploy.md adds one: --join instead of the placement
// flags; its replicas come from the map (atoll island create, atoll
// island server add).
func joinStep(cfg Config, addrOf func(host string) string, id int) step {
	hp := func(host string, port int) string { return net.JoinHostPort(addrOf(host), strconv.Itoa(port)) }
	h, n := fmt.Sprintf("i%d", id), fmt.Sprintf("island%d", id)
	d := filepath.Join(cfg.Dir, n)
	return step{
		name: n, kind: KindIsland, host: h, id: id, addr: hp(h, IslandPort), metrics: hp(h, MetricsPort), dir: d, joined: true,
		args: []string{"meta", "--dir", d, "--server-id", strconv.Itoa(id), "--join", "--listen", hp(h, IslandPort),
			"--raft-listen", hp(h, IslandRaft), "--manager", hp(ManagerHost, ManagerPort), "--metrics-listen", hp(h, MetricsPort),
			"--key", cfg.ClusterKeyPath(), "--log-level", cfg.logLevel()},
		extra: cfg.IslandArgs,
	}
}

func (c *Config) logLevel() string { return cmp.Or(c.LogLevel, "info") }

// Cluster is a started cluster.
type Cluster struct {
	Manager   string // the manager's address, host:port
	Dashboard string // the manager's dashboard, host:port
	Roles     []*Role
	cfg       Config

	grow                       sync.Mutex // serialises AddStorage, AddIslandServer
	addedStorage, addedIslands int
}

// Key loads the cluster key the roles were started with (for admin
// clients: checkers, fsck).
func (c *Cluster) Key() (*auth.Key, error) { return auth.Load(c.cfg.ClusterKeyPath()) }

// Role returns the named role, or nil.
func (c *Cluster) Role(name string) *Role {
	for _, r := range c.Roles {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// Role is one role's process on its host.
type Role struct {
	Name, Kind string
	Host       *simnet.Host
	// ID is a storage server's slot or an island's id (0 otherwise).
	ID int
	// Addr is what the role registers with the manager, host:port (the
	// mount's is its metrics address); the manager's client address.
	Addr    string
	Metrics string // where it serves /metrics (the manager: also on its dashboard)
	Dir     string // data directory ("" for the NFS gateway and the mount)
	// Mountpoint is the mount role's mountpoint ("" for the others).
	Mountpoint string
	// Joined is an island server added while the cluster served
	// (AddIslandServer): it leads an island only once one is placed on it.
	Joined bool

	op    sync.Mutex // serialises Restart
	mu    sync.Mutex
	child *devcluster.Child
}

func (r *Role) current() *devcluster.Child {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.child
}

// Kill sends SIGKILL and waits for the exit (a mount's mountpoint stays,
// stale, as after a crash).
func (r *Role) Kill() { r.current().Kill() }

// Pause stops the process (SIGSTOP): it holds its sockets but answers
// nothing, as a hung machine.
func (r *Role) Pause() error {
	if !r.Running() {
		return fmt.Errorf("simcluster: pause %s: not running", r.Name)
	}
	return r.current().Signal(syscall.SIGSTOP)
}

// Resume continues a paused process (SIGCONT).
func (r *Role) Resume() error {
	if !r.Running() {
		return fmt.Errorf("simcluster: resume %s: not running", r.Name)
	}
	return r.current().Signal(syscall.SIGCONT)
}

// Running reports whether the process has not exited.
func (r *Role) Running() bool {
	select {
	case <-r.current().Done():
		return false
	default:
		return true
	}
}

// PID is the process id (of the last start).
func (r *Role) PID() int { return r.current().PID() }

// ExitCode returns how the process exited, and false while it runs: its
// exit status, or 128+N when signal N killed it (137 for SIGKILL).
func (r *Role) ExitCode() (int, bool) {
	if r.Running() {
		return 0, false
	}
	err := r.current().ExitErr()
	if err == nil {
		return 0, true
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), true
		}
		return ee.ExitCode(), true
	}
	return -1, true
}

// Restart starts the role again after it exited, with the same command
// line, and waits until it serves (its addr file; a mount: its
// mountpoint, after detaching the stale one). It does not wait for the
// manager to see it up again (Cluster.WaitMembers does).
func (r *Role) Restart(ctx context.Context) error { return r.RestartWith(ctx) }

// RestartWith is Restart with env added for this start only (e.g.
// ATOLL_FAILPOINTS=name=crash: the role runs until the point fires).
func (r *Role) RestartWith(ctx context.Context, env ...string) error {
	r.op.Lock()
	defer r.op.Unlock()
	if r.Running() {
		return fmt.Errorf("simcluster: restart %s: still running (pid %d)", r.Name, r.PID())
	}
	if r.Mountpoint != "" {
		if err := detachMount(r.Mountpoint); err != nil {
			return fmt.Errorf("simcluster: restart %s: %w", r.Name, err)
		}
	}
	n, err := r.current().RespawnWith(ctx, env...)
	if err != nil {
		return fmt.Errorf("simcluster: %w", err)
	}
	r.mu.Lock()
	r.child = n
	r.mu.Unlock()
	return nil
}

// stop ends the process: SIGCONT (a paused process would not see the
// SIGTERM), SIGTERM, SIGKILL after StopGrace.
func (r *Role) stop() {
	ch := r.current()
	if ch == nil || !r.Running() {
		return
	}
	_ = ch.Signal(syscall.SIGCONT)
	_ = ch.Stop(StopGrace)
}

// detachMount lazily unmounts path when it is a mountpoint (a stale FUSE
// mount whose process died).
func detachMount(path string) error {
	if !devcluster.IsMountpoint(path) {
		return nil
	}
	if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("detach stale mount %s: %w", path, err)
	}
	return nil
}

// Start starts every role by the steps of docs/deploy.md and returns once
// each serves, the namespace is formatted and every member is up in the
// map with its own address. On error whatever started is stopped.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Mount != "" {
		if cfg.Mount, err = filepath.Abs(cfg.Mount); err != nil {
			return nil, err
		}
		if err := detachMount(cfg.Mount); err != nil {
			return nil, fmt.Errorf("simcluster: %w", err)
		}
		if err := os.MkdirAll(cfg.Mount, 0o755); err != nil {
			return nil, fmt.Errorf("simcluster: mountpoint: %w", err)
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("simcluster: data directory: %w", err)
	}
	if err := makeKeys(ctx, cfg); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	addrOf := func(h string) string { return cfg.Net.Host(h).Addr.String() }
	for _, st := range plan(cfg, addrOf) {
		if st.kind == kindFormat {
			if err := c.format(ctx, st); err != nil {
				return nil, err
			}
			// The islands serve once the namespace exists.
			for _, r := range c.Roles {
				if r.Kind == KindIsland {
					if err := r.current().WaitReady(ctx); err != nil {
						return nil, fmt.Errorf("simcluster: %w", err)
					}
				}
			}
			continue
		}
		r, err := c.launch(ctx, st)
		if err != nil {
			return nil, err
		}
		if st.kind == KindManager {
			c.Manager, c.Dashboard = r.current().Addr, net.JoinHostPort(addrOf(ManagerHost), strconv.Itoa(DashboardPort))
		}
	}
	wctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	if err := c.WaitMembers(wctx); err != nil {
		return nil, err
	}
	return c, nil
}

// launch gives a role's host its disk and budget, then starts the role.
func (c *Cluster) launch(ctx context.Context, st step) (*Role, error) {
	cfg := c.cfg
	if cfg.OwnDisks > 0 && st.dir != "" {
		if err := cfg.Net.GiveDisk(ctx, st.host, st.dir, cfg.OwnDisks); err != nil {
			return nil, fmt.Errorf("simcluster: disk of %s: %w", st.host, err)
		}
	}
	if b, ok := cfg.Budgets[st.kind]; ok {
		d := st.dir
		if d == "" {
			d = cfg.Dir
		}
		if err := cfg.Net.SetBudget(ctx, st.host, b, d); err != nil {
			return nil, fmt.Errorf("simcluster: budget of %s: %w", st.host, err)
		}
	}
	return c.start(ctx, st)
}

// AddStorage starts the next spare storage server (Config.SpareStorage)
// on the next slot, as a machine added to a serving cluster, and returns
// once it is up in the map. The data already stored stays where it is
// until a rebalancing pass moves some onto it (atoll clean --rebalance,
// the manager's cleaner). It appends to Roles: call it from the goroutine
// that reads them.
func (c *Cluster) AddStorage(ctx context.Context) (*Role, error) {
	c.grow.Lock()
	defer c.grow.Unlock()
	if c.addedStorage >= c.cfg.SpareStorage {
		return nil, fmt.Errorf("simcluster: no spare storage host left (%d)", c.cfg.SpareStorage)
	}
	st := storageStep(c.cfg, c.addrOf, c.cfg.Storage+c.addedStorage)
	r, err := c.launch(ctx, st)
	if err != nil {
		return nil, err
	}
	c.addedStorage++
	wctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	return r, c.WaitMembers(wctx)
}

// AddIslandServer starts the next spare island server
// (Config.SpareIslandServers) with --join and returns once it serves.
// It holds no replica until the map places one on it: `atoll island
// create` (a new island on the servers holding fewest) or `atoll island
// server add ID`. It returns once the map lists the server. It appends to
// Roles, as AddStorage.
func (c *Cluster) AddIslandServer(ctx context.Context) (*Role, error) {
	c.grow.Lock()
	defer c.grow.Unlock()
	if c.addedIslands >= c.cfg.SpareIslandServers {
		return nil, fmt.Errorf("simcluster: no spare island server host left (%d)", c.cfg.SpareIslandServers)
	}
	st := joinStep(c.cfg, c.addrOf, c.cfg.Islands+c.addedIslands+1)
	r, err := c.launch(ctx, st)
	if err != nil {
		return nil, err
	}
	c.addedIslands++
	if err := r.current().WaitReady(ctx); err != nil {
		return r, err
	}
	// Placement plans only with the island servers the map lists: wait
	// for this one's registration (a rebalance planned before it would
	// leave it empty).
	wctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	return r, c.waitMap(wctx, "island server "+strconv.Itoa(st.id)+" not in the map", func(m *cluster.Map) string {
		if _, ok := m.IslandServer(uint32(st.id)); ok {
			return ""
		}
		return "not listed"
	})
}

func (c *Cluster) addrOf(host string) string { return c.cfg.Net.Host(host).Addr.String() }

// start starts one role on its host (an island without waiting: it serves
// only once formatted).
func (c *Cluster) start(ctx context.Context, st step) (*Role, error) {
	host := c.cfg.Net.Host(st.host)
	r := &Role{Name: st.name, Kind: st.kind, Host: host, ID: st.id, Addr: st.addr, Metrics: st.metrics, Dir: st.dir, Joined: st.joined}
	spec := devcluster.ChildSpec{
		Name: st.name, Exe: c.cfg.Exe,
		Args:         append(append([]string(nil), st.args...), st.extra...),
		AddrFile:     filepath.Join(c.cfg.Dir, st.name+".addr"),
		Env:          c.cfg.Env,
		Output:       c.cfg.Out,
		ReadyTimeout: ReadyTimeout,
		NoWait:       st.kind == KindIsland,
		// Every process lives until Stop or Kill, not until ctx is done.
		Command: func(exe string, args ...string) *exec.Cmd {
			return host.Command(context.Background(), exe, args...)
		},
	}
	if st.kind == KindMount {
		mnt := c.cfg.Mount
		r.Mountpoint = mnt
		spec.Ready = func() bool { return devcluster.IsMountpoint(mnt) }
		spec.FUSEMount = mnt
	}
	ch, err := devcluster.Start(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("simcluster: %s on %s (%s): %w", st.name, st.host, host.Addr, err)
	}
	r.child = ch
	c.Roles = append(c.Roles, r)
	return r, nil
}

// format runs `atoll format` on its host and copies its output to Out.
func (c *Cluster) format(ctx context.Context, st step) error {
	cmd := c.cfg.Net.Host(st.host).Command(ctx, c.cfg.Exe, st.args...)
	out, err := cmd.CombinedOutput()
	if c.cfg.Out != nil {
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			fmt.Fprintf(c.cfg.Out, "[%s] %s\n", st.name, sc.Text())
		}
	}
	if err != nil {
		return fmt.Errorf("simcluster: atoll %v on %s: %v: %s", st.args, st.host, err, bytes.TrimSpace(out))
	}
	return nil
}

// WaitMembers waits until every running role but the manager is
// registered and up in the leader's map with its own address, or ctx is
// done.
func (c *Cluster) WaitMembers(ctx context.Context) error {
	return c.waitMap(ctx, "members not all up in the map", c.missing)
}

// waitMap asks the leading manager for its map until wrong finds nothing
// wrong with it ("") or ctx is done; the error says what, with wrong's
// last answer.
func (c *Cluster) waitMap(ctx context.Context, what string, wrong func(*cluster.Map) string) error {
	key, err := auth.Load(c.cfg.ClusterKeyPath())
	if err != nil {
		return err
	}
	mc := cluster.NewClient([]string{c.Manager}, key, slog.New(slog.DiscardHandler))
	defer mc.Close()
	mc.CallTimeout, mc.LeaderWait = 3*time.Second, 3*time.Second
	var why string
	for {
		m, err := mc.Map(ctx, 0)
		if err != nil {
			why = "manager: " + err.Error()
		} else if why = wrong(m); why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("simcluster: %s: %s (%w)", what, why, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// islandAddr reports whether addr is a running island server's.
func (c *Cluster) islandAddr(addr string) bool {
	for _, r := range c.Roles {
		if r.Kind == KindIsland && r.Addr == addr && r.Running() {
			return true
		}
	}
	return false
}

// missing says which running role m does not show up at its address, ""
// when none.
func (c *Cluster) missing(m *cluster.Map) string {
	for _, r := range c.Roles {
		if r.Kind == KindManager || !r.Running() || r.Joined {
			continue // a joined island server registers only an island placed on it
		}
		found := false
		for _, v := range m.Members() {
			var match bool
			switch r.Kind {
			case KindStorage:
				match = v.Kind == cluster.KindStorage && int(v.ID) == r.ID
			case KindIsland:
				// Island r.ID is registered by whichever island server
				// leads it: r's own when it has the lead (its preferred
				// island), another's for a while after a failover.
				match = v.Kind == cluster.KindIsland && int(v.ID) == r.ID && c.islandAddr(v.Addr)
			default:
				match = v.Kind == cluster.KindGateway && v.Addr == r.Addr
			}
			if !match {
				continue
			}
			if v.Addr != r.Addr && r.Kind != KindIsland {
				return fmt.Sprintf("%s registered as %s, not %s", r.Name, v.Addr, r.Addr)
			}
			if v.State == cluster.StateUp {
				found = true
			}
		}
		if !found {
			return r.Name + " not up"
		}
	}
	return ""
}

// Stop stops every role in reverse start order (SIGTERM, SIGKILL after
// StopGrace) and detaches the FUSE mount if it is still there.
func (c *Cluster) Stop() {
	for i := len(c.Roles) - 1; i >= 0; i-- {
		c.Roles[i].stop()
	}
	if c.cfg.Mount != "" {
		_ = detachMount(c.cfg.Mount)
	}
}
