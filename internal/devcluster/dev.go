package devcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/fusefs"
	"github.com/atoll-fs/atoll/internal/smb"
)

// Config configures a local development cluster.
type Config struct {
	DataDir       string
	Storage       int      // storage servers
	Islands       int      // metadata islands (0: data plane only)
	ManagerListen string   // host:port of the manager
	StorageListen string   // host:port of slot 0; slot i listens on port+i
	IslandListen  string   // host:port of island 1; island i on port+i-1
	NFSListen     string   // NFS gateway address ("" = no gateway)
	SMBListen     string   // SMB gateway address ("" = no gateway; needs root and Samba)
	Mount         string   // FUSE mountpoint ("" = no mount)
	MountArgs     []string // more flags for `atoll mount` (benchmarks: --write-behind=false)
	// WebListen is the manager's dashboard, /api/cluster and /metrics
	// address ("" = none; `atoll dev` defaults to 127.0.0.1:7380).
	WebListen string
	// MetricsListen is the first of the children's /metrics addresses
	// ("" = none): storage server i on port+i, then the islands, the NFS
	// gateway and the mount on the next ports (see MetricsAddrs).
	MetricsListen string
	// DownAfter is the manager's --down-after (default 3s).
	DownAfter time.Duration
	// The manager's background cleaner: time between passes (negative:
	// none), the age below which no stripe is deleted, and how long a
	// storage server stays unreachable before its data is rebuilt onto the
	// others. Zero keeps the manager's defaults.
	CleanInterval time.Duration
	CleanGrace    time.Duration
	RebuildAfter  time.Duration
	// LazySync is the islands' --lazy-sync (zero: their default).
	LazySync time.Duration
	// MoveDuty is the islands' --move-duty (zero: their default).
	MoveDuty float64
	// LockTerm is the islands' --lock-term (zero: their default).
	LockTerm time.Duration
	// LeadBackAfter is the island servers' --lead-back-after (zero:
	// their default).
	LeadBackAfter time.Duration
	// IslandReplicas is the number of replicas of each island (1, 3 or
	// 5; 0 means 1). Above 1 the island processes are island servers
	// (atoll meta --server-id i, as many as Islands, at the same
	// addresses), each hosting replicas of several islands, with their
	// raft ports at IslandRaftListen's port + i - 1.
	IslandReplicas int
	// IslandRaftListen is island server 1's raft address (replicated
	// islands); default IslandListen's port + 50.
	IslandRaftListen string
	// UserKey: also write the cluster key to the user's
	// ~/.config/atoll/admin.key, where the CLI finds it (`atoll dev` sets
	// it; tests do not).
	UserKey  bool
	Exe      string // the atoll binary
	LogLevel string
	Out      io.Writer
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("dev: --data is required")
	}
	if c.Storage < 1 || c.Storage > 64 {
		return errors.New("dev: --storage must be 1..64")
	}
	if c.Islands < 0 || c.Islands > 32 {
		return errors.New("dev: --islands must be 0..32")
	}
	if r := c.IslandReplicas; r != 0 && r != 1 && r != 3 && r != 5 {
		return fmt.Errorf("dev: --island-replicas %d: want 1, 3 or 5", r)
	}
	for flag, a := range map[string]string{"--manager-listen": c.ManagerListen, "--storage-listen": c.StorageListen, "--island-listen": c.IslandListen} {
		if _, _, err := splitPort(a); err != nil {
			return fmt.Errorf("dev: %s: %w", flag, err)
		}
	}
	for flag, a := range map[string]string{"--web-listen": c.WebListen, "--metrics-listen": c.MetricsListen} {
		if a == "" {
			continue
		}
		if _, port, err := splitPort(a); err != nil {
			return fmt.Errorf("dev: %s: %w", flag, err)
		} else if flag == "--metrics-listen" && port+c.Storage+c.IslandServers()+2 > 65535 {
			return fmt.Errorf("dev: %s %s: not enough ports above it", flag, a)
		}
	}
	if c.DownAfter < 0 {
		return errors.New("dev: negative --down-after")
	}
	if c.Exe == "" {
		return errors.New("dev: no atoll binary")
	}
	return nil
}

func splitPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	return host, port, nil
}

// MinFreeBytes is the free space `atoll dev` wants in its data directory
// before it starts (logs, pebble stores and a little data).
const MinFreeBytes = 256 << 20

// Dev runs a local cluster.
type Dev struct {
	cfg     Config
	lock    *os.File
	key     *auth.Key
	keyPath string
}

// KeyFile is the cluster key's file in the data directory: made on the
// first start, reused after. Every role is started with it.
const KeyFile = "admin.key"

// Key is the cluster key and the file it is in.
func (d *Dev) Key() (*auth.Key, string) { return d.key, d.keyPath }

// loadOrMakeKey reads DATA/admin.key, making a fresh cluster key there
// (mode 0600) on the first start.
func loadOrMakeKey(dir string) (*auth.Key, string, error) {
	p := filepath.Join(dir, KeyFile)
	if _, err := os.Stat(p); err == nil {
		k, err := auth.Load(p)
		if err != nil {
			return nil, "", fmt.Errorf("dev: %w", err)
		}
		if !k.IsCluster() {
			return nil, "", fmt.Errorf("dev: %s is not a cluster key", p)
		}
		return k, p, nil
	}
	// The admin's own cluster key ($ATOLL_KEY, ~/.config/atoll/admin.key)
	// if there is one, so one key reaches all of their dev clusters; else
	// a fresh one.
	k, err := auth.Resolve("")
	if err != nil || !k.IsCluster() {
		k, err = auth.NewClusterKey()
	}
	if err == nil {
		err = auth.Save(p, k)
	}
	if err != nil {
		return nil, "", fmt.Errorf("dev: making the cluster key: %w", err)
	}
	return k, p, nil
}

// New checks the data directory and takes its lock, so two `atoll dev`
// never share one directory.
func New(cfg Config) (*Dev, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	// 0700: the directory holds the cluster key and every byte stored.
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("dev: data directory %s: %w", cfg.DataDir, err)
	}
	// A full disk would otherwise surface later as a storage server or an
	// island failing to start with an ENOSPC deep in its log.
	var fsst syscall.Statfs_t
	if err := syscall.Statfs(cfg.DataDir, &fsst); err == nil {
		if free := int64(fsst.Bavail) * int64(fsst.Bsize); free < MinFreeBytes {
			return nil, fmt.Errorf("dev: data directory %s is full: %d MiB free, at least %d MiB needed", cfg.DataDir, free>>20, MinFreeBytes>>20)
		}
	}
	f, err := os.OpenFile(filepath.Join(cfg.DataDir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("dev: data directory %s is not writable: %w", cfg.DataDir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("dev: another atoll dev is using %s (lock held)", cfg.DataDir)
	}
	key, keyPath, err := loadOrMakeKey(cfg.DataDir)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Dev{cfg: cfg, lock: f, key: key, keyPath: keyPath}, nil
}

func portFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ln.Close()
}

func nthAddr(base string, i int) string {
	host, port, _ := splitPort(base)
	return net.JoinHostPort(host, strconv.Itoa(port+i))
}

// islandRaftAddr is island server i's raft address (replicated islands).
func (c *Config) islandRaftAddr(i int) string {
	if c.IslandRaftListen != "" {
		return nthAddr(c.IslandRaftListen, i-1)
	}
	return nthAddr(c.IslandListen, 50+i-1)
}

// MetricsAddrs are the children's /metrics addresses, derived from
// MetricsListen (all empty when it is).
type MetricsAddrs struct {
	Storage []string // by slot
	Islands []string // island i at index i-1
	NFS     string
	Mount   string
}

// IslandServers is how many island processes run: one per island, and
// with replicated islands at least as many as the replicas of one (two
// islands with three replicas each run on three island servers: a user
// asking for two islands gets two).
func (c *Config) IslandServers() int {
	if c.Islands > 0 && c.IslandReplicas > 1 {
		return max(c.Islands, c.IslandReplicas)
	}
	return c.Islands
}

// MetricsAddrs returns where each child serves /metrics: consecutive
// ports from MetricsListen in the order storage, island processes, NFS,
// mount.
func (c *Config) MetricsAddrs() MetricsAddrs {
	var m MetricsAddrs
	n := c.IslandServers()
	if c.MetricsListen == "" {
		m.Storage, m.Islands = make([]string, c.Storage), make([]string, n)
		return m
	}
	for i := 0; i < c.Storage; i++ {
		m.Storage = append(m.Storage, nthAddr(c.MetricsListen, i))
	}
	for i := 0; i < n; i++ {
		m.Islands = append(m.Islands, nthAddr(c.MetricsListen, c.Storage+i))
	}
	m.NFS = nthAddr(c.MetricsListen, c.Storage+n)
	m.Mount = nthAddr(c.MetricsListen, c.Storage+n+1)
	return m
}

// Cluster is a started local cluster.
type Cluster struct {
	Manager  string // manager address
	Web      string // the manager's dashboard address ("" = none)
	Map      *cluster.Map
	Children []*Child
	// Key is the cluster key every role was started with, in KeyPath.
	Key     *auth.Key
	KeyPath string
}

// Stop stops every role: the clients (mount, NFS gateway) first, one at a
// time in reverse start order, since they write back to the servers; then
// every server at once, so that no island replica or manager watches its
// peers go one by one and logs each as a failure (a clean stop looked
// like a crash).
func (c *Cluster) Stop() {
	var servers []*Child
	for i := len(c.Children) - 1; i >= 0; i-- {
		switch ch := c.Children[i]; ch.Name {
		case "mount", "nfs", "smb":
			_ = ch.Stop(10 * time.Second)
		default:
			servers = append(servers, ch)
		}
	}
	for _, ch := range servers {
		_ = ch.Signal(syscall.SIGTERM)
	}
	for _, ch := range servers {
		_ = ch.Stop(10 * time.Second)
	}
}

// Child returns the child with the given name, or nil.
func (c *Cluster) Child(name string) *Child {
	for _, ch := range c.Children {
		if ch.Name == name {
			return ch
		}
	}
	return nil
}

// Restart starts the named child again with its original command line
// (same directory and address) after it has exited, for crash tests, and
// waits until it is ready.
func (c *Cluster) Restart(ctx context.Context, name string) (*Child, error) {
	return c.restart(ctx, name, false, nil)
}

// RestartWith is Restart with env as the child's extra environment
// (replacing what it had), e.g. ATOLL_FAILPOINTS for this run only.
func (c *Cluster) RestartWith(ctx context.Context, name string, env ...string) (*Child, error) {
	return c.restart(ctx, name, true, env)
}

func (c *Cluster) restart(ctx context.Context, name string, setEnv bool, env []string) (*Child, error) {
	for i, ch := range c.Children {
		if ch.Name != name {
			continue
		}
		select {
		case <-ch.Done():
		default:
			return nil, fmt.Errorf("devcluster: restart %s: still running", name)
		}
		spec := ch.spec
		spec.NoWait = false
		if setEnv {
			spec.Env = env
		}
		n, err := Start(ctx, spec)
		if err != nil {
			return nil, fmt.Errorf("devcluster: restart %s: %w", name, err)
		}
		n.MetricsAddr = ch.MetricsAddr
		c.Children[i] = n
		return n, nil
	}
	return nil, fmt.Errorf("devcluster: restart: no child %q", name)
}

// Start starts every role and returns once all have registered with the
// manager and the namespace is formatted. On error, whatever started is
// stopped.
func (d *Dev) Start(ctx context.Context) (_ *Cluster, err error) {
	cl := &Cluster{Key: d.key, KeyPath: d.keyPath}
	defer func() {
		if err != nil {
			cl.Stop()
		}
	}()
	metrics := d.cfg.MetricsAddrs()
	// start starts a role listening on listen and, when metrics is not
	// empty, serving /metrics there.
	start := func(name, listen, metrics string, args ...string) (*Child, error) {
		for _, a := range []string{listen, metrics} {
			if a == "" {
				continue
			}
			if err := portFree(a); err != nil {
				return nil, fmt.Errorf("dev: %s: address %s in use: %w", name, a, err)
			}
		}
		args = append(args, "--listen", listen, "--log-level", d.cfg.LogLevel, "--key", d.keyPath)
		if metrics != "" {
			args = append(args, "--metrics-listen", metrics)
		}
		c, err := Start(ctx, ChildSpec{
			Name: name, Exe: d.cfg.Exe,
			Args:     args,
			AddrFile: filepath.Join(d.cfg.DataDir, name+".addr"),
			Output:   d.cfg.Out,
			// Islands serve only once the namespace is formatted, which
			// needs every island registered: do not wait for them here.
			NoWait: args[0] == "meta",
		})
		if err != nil {
			return nil, err
		}
		c.MetricsAddr = metrics
		cl.Children = append(cl.Children, c)
		return c, nil
	}
	downAfter := d.cfg.DownAfter
	if downAfter == 0 {
		downAfter = 3 * time.Second
	}
	mgrArgs := []string{"manager", "--dir", filepath.Join(d.cfg.DataDir, "manager"), "--down-after", downAfter.String()}
	switch {
	case d.cfg.CleanInterval < 0:
		mgrArgs = append(mgrArgs, "--clean-interval", "0")
	case d.cfg.CleanInterval > 0:
		mgrArgs = append(mgrArgs, "--clean-interval", d.cfg.CleanInterval.String())
	}
	if d.cfg.CleanGrace > 0 {
		mgrArgs = append(mgrArgs, "--clean-grace", d.cfg.CleanGrace.String())
	}
	if d.cfg.RebuildAfter > 0 {
		mgrArgs = append(mgrArgs, "--rebuild-after", d.cfg.RebuildAfter.String())
	}
	if d.cfg.WebListen != "" {
		if err := portFree(d.cfg.WebListen); err != nil {
			return nil, fmt.Errorf("dev: manager: dashboard address %s in use: %w", d.cfg.WebListen, err)
		}
		mgrArgs = append(mgrArgs, "--web-listen", d.cfg.WebListen)
	}
	mgr, err := start("manager", d.cfg.ManagerListen, "", mgrArgs...)
	if err != nil {
		return nil, err
	}
	cl.Manager, cl.Web = mgr.Addr, d.cfg.WebListen
	for i := 0; i < d.cfg.Storage; i++ {
		if _, err := start(fmt.Sprintf("storage%d", i), nthAddr(d.cfg.StorageListen, i), metrics.Storage[i], "storage",
			"--dir", filepath.Join(d.cfg.DataDir, "storage", strconv.Itoa(i)), "--slot", strconv.Itoa(i), "--manager", mgr.Addr); err != nil {
			return nil, err
		}
	}
	var servers []string
	for i := 1; i <= d.cfg.IslandServers(); i++ {
		servers = append(servers, fmt.Sprintf("%d=%s", i, d.cfg.islandRaftAddr(i)))
	}
	for i := 1; i <= d.cfg.IslandServers(); i++ {
		args := []string{"meta", "--dir", filepath.Join(d.cfg.DataDir, "island", strconv.Itoa(i)), "--id", strconv.Itoa(i), "--manager", mgr.Addr}
		if d.cfg.IslandReplicas > 1 {
			args = []string{"meta", "--dir", filepath.Join(d.cfg.DataDir, "island", strconv.Itoa(i)), "--server-id", strconv.Itoa(i),
				"--raft-listen", d.cfg.islandRaftAddr(i), "--island-servers", strings.Join(servers, ","),
				"--islands", strconv.Itoa(d.cfg.Islands), "--replicas", strconv.Itoa(d.cfg.IslandReplicas), "--manager", mgr.Addr}
			if d.cfg.LeadBackAfter > 0 {
				args = append(args, "--lead-back-after", d.cfg.LeadBackAfter.String())
			}
			if err := portFree(d.cfg.islandRaftAddr(i)); err != nil {
				return nil, fmt.Errorf("dev: island server %d: raft address %s in use: %w", i, d.cfg.islandRaftAddr(i), err)
			}
		}
		if d.cfg.LazySync > 0 {
			args = append(args, "--lazy-sync", d.cfg.LazySync.String())
		}
		if d.cfg.LockTerm > 0 {
			args = append(args, "--lock-term", d.cfg.LockTerm.String())
		}
		if d.cfg.MoveDuty > 0 {
			args = append(args, "--move-duty", strconv.FormatFloat(d.cfg.MoveDuty, 'g', -1, 64))
		}
		if _, err := start(fmt.Sprintf("island%d", i), nthAddr(d.cfg.IslandListen, i-1), metrics.Islands[i-1], args...); err != nil {
			return nil, err
		}
	}
	mc := cluster.NewClient([]string{mgr.Addr}, d.key, slog.New(slog.DiscardHandler))
	defer mc.Close()
	if cl.Map, err = d.waitRegistered(ctx, mc); err != nil {
		return nil, err
	}
	for _, c := range cl.Children {
		if c.Addr == "" {
			if err := c.WaitReady(ctx); err != nil {
				return nil, err
			}
		}
	}
	if d.cfg.Islands > 0 && d.cfg.NFSListen != "" {
		if _, err := start("nfs", d.cfg.NFSListen, metrics.NFS, "nfs", "--cluster", mgr.Addr, "--root-squash=false"); err != nil {
			return nil, err
		}
	}
	if d.cfg.Islands > 0 && d.cfg.Mount != "" {
		if err := os.MkdirAll(d.cfg.Mount, 0o755); err != nil {
			return nil, fmt.Errorf("dev: mountpoint %s: %w", d.cfg.Mount, err)
		}
		abs, _ := filepath.Abs(d.cfg.Mount)
		args := []string{"mount", "--cluster", mgr.Addr, "--log-level", d.cfg.LogLevel, "--key", d.keyPath}
		args = append(args, d.cfg.MountArgs...)
		if metrics.Mount != "" {
			if err := portFree(metrics.Mount); err != nil {
				return nil, fmt.Errorf("dev: mount: address %s in use: %w", metrics.Mount, err)
			}
			args = append(args, "--metrics-listen", metrics.Mount)
		}
		c, err := Start(ctx, ChildSpec{
			Name: "mount", Exe: d.cfg.Exe,
			Args:      append(args, abs),
			Output:    d.cfg.Out,
			Ready:     func() bool { return fusefs.IsMountpoint(abs) },
			FUSEMount: abs,
		})
		if err != nil {
			return nil, err
		}
		c.Addr, c.MetricsAddr = abs, metrics.Mount
		cl.Children = append(cl.Children, c)
	}
	if d.cfg.Islands > 0 && d.cfg.SMBListen != "" {
		if _, err := start("smb", d.cfg.SMBListen, "", "smb", "--cluster", mgr.Addr, "--dir", smbDir(d.cfg.DataDir)); err != nil {
			return nil, err
		}
	}
	return cl, nil
}

// Run starts every role, prints the endpoints, and stops them all (in
// reverse order) when ctx is done. A role that dies is reported; the
// others keep serving.
func (d *Dev) Run(ctx context.Context) error {
	defer d.lock.Close()
	cl, err := d.Start(ctx)
	if err != nil {
		return err
	}
	defer cl.Stop()
	// Written before "ready" is printed: scripts start clients on it.
	var userKeyMsg string
	if d.cfg.UserKey {
		if p := auth.UserKeyPath(); p != "" {
			old, err := auth.Load(p)
			switch {
			case err == nil && bytes.Equal(old.Marshal(), d.key.Marshal()):
			case err == nil && old.IsCluster():
				userKeyMsg = fmt.Sprintf("  (not replacing %s: it holds another cluster's key; export ATOLL_KEY above)\n", p)
			default:
				if err := auth.Save(p, d.key); err != nil {
					userKeyMsg = fmt.Sprintf("  (could not write %s: %v)\n", p, err)
				} else {
					userKeyMsg = fmt.Sprintf("  key also in %s, where the atoll CLI looks for it\n", p)
				}
			}
		}
	}
	fmt.Fprintf(d.cfg.Out, "atoll dev ready: manager %s, %d storage servers, %d islands (epoch %d)\n", cl.Manager, d.cfg.Storage, d.cfg.Islands, cl.Map.Epoch)
	if n := d.cfg.IslandServers(); n != d.cfg.Islands {
		fmt.Fprintf(d.cfg.Out, "  (the %d islands' %d replicas each run on %d island servers)\n", d.cfg.Islands, d.cfg.IslandReplicas, n)
	}
	for _, c := range cl.Children {
		line := fmt.Sprintf("  %-10s %-21s pid %-8d", c.Name, c.Addr, c.PID())
		if c.MetricsAddr != "" {
			line += " metrics http://" + c.MetricsAddr + "/metrics"
		}
		fmt.Fprintln(d.cfg.Out, strings.TrimRight(line, " "))
	}
	if cl.Web != "" {
		fmt.Fprintf(d.cfg.Out, "  dashboard: http://%s/   (JSON: /api/cluster, manager metrics: /metrics)\n", cl.Web)
	}
	if abs, err := filepath.Abs(d.keyPath); err == nil {
		fmt.Fprintf(d.cfg.Out, "  key:       export ATOLL_KEY=%s   (the admin key: keep it private)\n", abs)
	}
	if userKeyMsg != "" {
		fmt.Fprint(d.cfg.Out, userKeyMsg)
	}
	if os.Getenv(auth.EnvEncrypt) == "1" {
		fmt.Fprintf(d.cfg.Out, "  encrypted: export %s=1   (every role accepts encrypted connections only)\n", auth.EnvEncrypt)
	}
	fmt.Fprintf(d.cfg.Out, "  status:    ATOLL_CLUSTER=%s atoll status\n", cl.Manager)
	if d.cfg.Islands > 0 {
		fmt.Fprintf(d.cfg.Out, "  copy in:   ATOLL_CLUSTER=%s atoll cp FILE atoll:/FILE\n", cl.Manager)
	}
	if c := cl.Child("nfs"); c != nil {
		host, port, _ := net.SplitHostPort(c.Addr)
		fmt.Fprintf(d.cfg.Out, "  NFS:       nfs-ls 'nfs://%s/?nfsport=%s&mountport=%s'\n", host, port, port)
		// libnfs mounts the URL's directory as the export: a file in the
		// root directory takes a double slash.
		fmt.Fprintf(d.cfg.Out, "  NFS copy:  nfs-cp FILE 'nfs://%s//FILE?nfsport=%s&mountport=%s'\n", host, port, port)
	}
	if c := cl.Child("mount"); c != nil {
		fmt.Fprintf(d.cfg.Out, "  FUSE:      ls %s\n", c.Addr)
	}
	if c := cl.Child("smb"); c != nil {
		host, port, _ := net.SplitHostPort(c.Addr)
		fmt.Fprintf(d.cfg.Out, "  SMB:       smbclient //%s/atoll -p %s -U NAME   (first: ATOLL_CLUSTER=%s atoll smb user add NAME --uid UID --gid GID)\n", host, port, cl.Manager)
	}
	fmt.Fprintf(d.cfg.Out, "  benchmark: atoll bench data --cluster %s --size 256MiB\n", cl.Manager)
	reported := map[*Child]bool{}
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(d.cfg.Out, "atoll dev: stopping")
			return nil
		case <-time.After(500 * time.Millisecond):
		}
		for _, c := range cl.Children {
			select {
			case <-c.Done():
				if !reported[c] {
					reported[c] = true
					fmt.Fprintf(d.cfg.Out, "atoll dev: %s (pid %d) exited; the others keep serving\n", c.Name, c.PID())
				}
			default:
			}
		}
	}
}

// FuseUsable reports whether a FUSE mount can be attempted here, and why not.
func FuseUsable() (bool, string) {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return false, fmt.Sprintf("/dev/fuse is not usable (%v)", err)
	}
	f.Close()
	return true, ""
}

// Close releases the data directory lock (Run does it itself).
func (d *Dev) Close() error { return d.lock.Close() }

// waitRegistered waits until every role has registered with the manager
// and formats the namespace on first start.
func (d *Dev) waitRegistered(ctx context.Context, cl *cluster.Client) (*cluster.Map, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		m, err := cl.Map(ctx, 0)
		if err == nil {
			up := 0
			for _, s := range m.Storage {
				if s.State == cluster.StateUp {
					up++
				}
			}
			islands := 0
			for _, is := range m.Islands {
				if is.State == cluster.StateUp {
					islands++
				}
			}
			if up >= d.cfg.Storage && islands >= d.cfg.Islands {
				if d.cfg.Islands > 0 && !m.Formatted {
					if m, err = cl.Format(ctx, nil); err != nil {
						return nil, fmt.Errorf("dev: format namespace: %w", err)
					}
				}
				return m, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("dev: roles did not register with the manager within 60s (last error: %v)", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// smbDir is where dev's SMB gateway keeps its state: DATA/smb, unless a
// directory above it is closed to other users (a data directory in
// root's home), which smbd, acting as each user, could not pass to
// reach the gateway's mount (smb.CheckReachable): then a directory in
// the system's temporary directory named after DATA.
func smbDir(data string) string {
	abs, err := filepath.Abs(data)
	if err != nil {
		return filepath.Join(data, "smb")
	}
	dir := filepath.Join(abs, "smb")
	if smb.CheckReachable(dir) == nil {
		return dir
	}
	h := fnv.New32a()
	h.Write([]byte(abs))
	return filepath.Join(os.TempDir(), fmt.Sprintf("atoll-dev-smb-%08x", h.Sum32()))
}
