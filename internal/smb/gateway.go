package smb

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/fusefs"
)

// Config configures a gateway.
type Config struct {
	// Managers are the cluster's manager addresses.
	Managers []string
	// Key is what the gateway's mount authenticates with: a key that may
	// act for the SMB users' uids (a `user` key, or one limited to them),
	// and root, which reads UsersPath.
	Key *auth.Key
	// Listen is the address smbd serves SMB on (host:port; an
	// unprivileged port works).
	Listen string
	// Dir holds the gateway's state: its mount, smb.conf, Samba's
	// directories, the nss_wrapper files. Created if absent.
	Dir string
	// Share is the share's name (default "atoll"); Path the directory of
	// the namespace it serves (default "/").
	Share, Path string
	// Atoll is the atoll binary that runs the mount (default: this
	// process's executable); Smbd and Pdbedit Samba's (default: from
	// PATH); NSSWrapper the nss_wrapper library (default: found in the
	// usual library directories).
	Atoll, Smbd, Pdbedit, NSSWrapper string
	// CaseSensitive makes the share's names case-sensitive, as on Linux.
	// The default is Samba's: names compare case-blind for clients that
	// expect it (Windows, macOS), which costs a scan of the directory for
	// every name that does not exist yet (each create); through a mount
	// that is a listing from the island every time (package doc, "Cost").
	CaseSensitive bool
	// MountArgs are extra flags for the gateway's `atoll mount`.
	MountArgs []string
	// AddrFile, if set, gets Listen and a newline once smbd serves (what
	// atoll dev waits for).
	AddrFile string
	// UserSync is how often the users file is read again (default 5s).
	UserSync time.Duration
	Logger   *slog.Logger
}

// ErrConfig marks an invalid Config.
var ErrConfig = errors.New("smb: bad configuration")

// Validate checks cfg and fills defaults; a missing Samba part is named
// with the package that has it.
func (c *Config) Validate() error {
	if len(c.Managers) == 0 {
		return fmt.Errorf("%w: no manager address", ErrConfig)
	}
	if c.Key == nil {
		return fmt.Errorf("%w: no key", ErrConfig)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("%w: --listen %q: %v", ErrConfig, c.Listen, err)
	}
	if c.Dir == "" {
		return fmt.Errorf("%w: no state directory", ErrConfig)
	}
	if c.Share == "" {
		c.Share = "atoll"
	}
	if strings.ContainsAny(c.Share, "[]\n\\/") || len(c.Share) > 64 {
		return fmt.Errorf("%w: share name %q", ErrConfig, c.Share)
	}
	if c.Path == "" {
		c.Path = "/"
	}
	if !strings.HasPrefix(c.Path, "/") || strings.Contains(c.Path, "\n") || strings.Contains("/"+c.Path+"/", "/../") {
		return fmt.Errorf("%w: share path %q must be absolute, without ..", ErrConfig, c.Path)
	}
	if c.UserSync <= 0 {
		c.UserSync = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Atoll == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("%w: finding the atoll binary: %v", ErrConfig, err)
		}
		c.Atoll = exe
	}
	for _, b := range []struct {
		p        *string
		name, pk string
	}{{&c.Smbd, "smbd", "samba"}, {&c.Pdbedit, "pdbedit", "samba-common-bin"}} {
		if *b.p == "" {
			p, err := exec.LookPath(b.name)
			if err != nil {
				return fmt.Errorf("%w: %s not found (Debian package %s)", ErrConfig, b.name, b.pk)
			}
			*b.p = p
		}
	}
	if c.NSSWrapper == "" {
		p, err := FindNSSWrapper()
		if err != nil {
			return err
		}
		c.NSSWrapper = p
	}
	return nil
}

// FindNSSWrapper returns the nss_wrapper library's path, looked for in
// the usual library directories.
func FindNSSWrapper() (string, error) {
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libnss_wrapper.so", "/usr/lib/aarch64-linux-gnu/libnss_wrapper.so", "/usr/lib64/libnss_wrapper.so", "/usr/lib/libnss_wrapper.so"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: libnss_wrapper.so not found (Debian package libnss-wrapper)", ErrConfig)
}

// CheckReachable reports (ErrConfig) the first directory above dir that
// other users cannot search: smbd reaches the gateway's mount in dir as
// each SMB user, so every directory above it needs o+x.
func CheckReachable(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("smb: %w", err)
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%w: %s is not searchable by other users (mode %o), and smbd reaches the mount in --dir as each user: choose a --dir whose parents all have o+x", ErrConfig, d, fi.Mode().Perm())
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}

// Gateway serves one share of the cluster over SMB: an `atoll mount` it
// runs on Dir/mnt, and smbd over that mount with the cluster's SMB users.
type Gateway struct {
	cfg Config
	l   layout
	log *slog.Logger

	mu struct {
		sync.Mutex
		users []byte // the users file last imported
	}
}

// New checks cfg; Run starts serving.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Gateway{cfg: cfg, l: layout{cfg.Dir}, log: cfg.Logger.With("smb", cfg.Listen)}, nil
}

// Run serves until ctx is done or a part fails for good: the mount
// exiting ends it (with an error); smbd exiting is restarted. On return
// smbd and the mount are stopped.
func (g *Gateway) Run(ctx context.Context) error {
	if err := g.prepare(); err != nil {
		return err
	}
	mount, err := g.startMount(ctx)
	if err != nil {
		return err
	}
	defer mount.stop(g.log)
	if err := g.syncUsers(ctx); err != nil {
		return err
	}
	var smbd *child
	defer func() {
		if smbd != nil {
			smbd.stop(g.log)
		}
	}()
	// Registered as a gateway, so status and the dashboard list it.
	mctx, stopMember := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopMember(); wg.Wait() }()
	wg.Add(1)
	go func() { // owned by Run: ends with mctx
		defer wg.Done()
		host, _ := os.Hostname()
		h := fnv.New32a()
		h.Write([]byte(host + "|smb:" + g.cfg.Listen))
		role := fmt.Sprintf("SMB gateway at %s (share %s = %s) on %s", g.cfg.Listen, g.cfg.Share, g.cfg.Path, host)
		if err := cluster.RunMember(mctx, cluster.MemberConfig{
			Managers: g.cfg.Managers, Kind: cluster.KindGateway, ID: h.Sum32(), Addr: g.cfg.Listen, PID: os.Getpid(),
			Logger: g.log, Key: g.cfg.Key,
			Stats: func() cluster.MemberStats { return cluster.MemberStats{Role: role} },
		}); err != nil {
			g.log.Warn("smb: registering with the managers failed; serving unlisted", "err", err)
		}
	}()
	backoff := time.Second
	tick := time.NewTicker(g.cfg.UserSync)
	defer tick.Stop()
	for {
		if smbd == nil {
			smbd, err = g.startSmbd()
			if err != nil {
				return err
			}
			if err := waitListening(ctx, g.cfg.Listen, smbd.done, 30*time.Second); err != nil {
				return fmt.Errorf("smb: smbd did not serve %s: %w", g.cfg.Listen, err)
			}
			g.log.Info("smb: serving", "share", g.cfg.Share, "path", g.cfg.Path, "listen", g.cfg.Listen)
			if g.cfg.AddrFile != "" {
				if err := writeAtomic(g.cfg.AddrFile, []byte(g.cfg.Listen+"\n"), 0o644); err != nil {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-mount.done:
			return fmt.Errorf("smb: the gateway's mount exited: %v", mount.err)
		case <-smbd.done:
			g.log.Warn("smb: smbd exited; restarting", "err", smbd.err, "in", backoff)
			smbd = nil
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
		case <-tick.C:
			if err := g.syncUsers(ctx); err != nil {
				g.log.Warn("smb: reading the users failed; keeping the last ones", "err", err)
			}
		}
	}
}

// prepare makes Config.Dir's layout and writes smb.conf (which pdbedit
// reads too), once per start.
func (g *Gateway) prepare() error {
	// smbd reaches the mount as each user: the way down to it must be
	// searchable by all (Samba's own directories stay private).
	for _, d := range []string{g.cfg.Dir, g.l.mnt()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("smb: %w", err)
		}
		if !mounted(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				return fmt.Errorf("smb: %w", err)
			}
		}
	}
	if err := CheckReachable(g.cfg.Dir); err != nil {
		return err
	}
	private := []string{filepath.Dir(g.l.passwd())}
	for _, s := range sambaDirs {
		private = append(private, g.l.samba(s))
	}
	for _, d := range private {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("smb: %w", err)
		}
	}
	// A mount left by a gateway killed before: detach it.
	if mounted(g.l.mnt()) {
		_ = exec.Command("fusermount3", "-u", "-z", g.l.mnt()).Run()
	}
	conf, err := renderConf(&g.cfg, g.l)
	if err != nil {
		return err
	}
	if err := os.WriteFile(g.l.conf(), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("smb: %w", err)
	}
	return nil
}

// mounted reports whether path is a mountpoint now.
func mounted(path string) bool {
	abs, err := filepath.Abs(path)
	return err == nil && fusefs.IsMountpoint(abs)
}

// child is a supervised process: done closes when it exits, err is why.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (g *Gateway) start(name string, cmd *exec.Cmd) (*child, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("smb: starting %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	logged := make(chan struct{})
	go func() { // owned by c: ends when the process closes its output
		defer close(logged)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if t := strings.TrimSpace(sc.Text()); t != "" {
				g.log.Info("smb: "+name, "line", t)
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() { // owned by c: reaps the process
		<-logged
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// stop ends the child's whole process group (smbd forks one process per
// client): SIGTERM, then SIGKILL after 10s.
func (c *child) stop(log *slog.Logger) {
	select {
	case <-c.done:
		return
	default:
	}
	pg := -c.cmd.Process.Pid
	_ = syscall.Kill(pg, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		log.Warn("smb: " + c.name + " did not stop in 10s; killing it")
		_ = syscall.Kill(pg, syscall.SIGKILL)
		<-c.done
	}
}

func (g *Gateway) startMount(ctx context.Context) (*child, error) {
	args := append([]string{"mount", "--cluster", strings.Join(g.cfg.Managers, ","), "--serves", "smb"}, g.cfg.MountArgs...)
	cmd := exec.Command(g.cfg.Atoll, append(args, g.l.mnt())...)
	cmd.Env = append(os.Environ(), "ATOLL_KEY="+string(bytes.TrimSpace(g.cfg.Key.Marshal())))
	c, err := g.start("mount", cmd)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for !mounted(g.l.mnt()) {
		select {
		case <-ctx.Done():
			c.stop(g.log)
			return nil, ctx.Err()
		case <-c.done:
			return nil, fmt.Errorf("smb: the gateway's mount exited before mounting: %v", c.err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stop(g.log)
			return nil, fmt.Errorf("smb: the gateway's mount did not mount %s in 60s", g.l.mnt())
		}
	}
	return c, nil
}

func (g *Gateway) nssEnv() []string {
	return append(os.Environ(), "LD_PRELOAD="+g.cfg.NSSWrapper, "NSS_WRAPPER_PASSWD="+g.l.passwd(), "NSS_WRAPPER_GROUP="+g.l.group())
}

func (g *Gateway) startSmbd() (*child, error) {
	cmd := exec.Command(g.cfg.Smbd, "-s", g.l.conf(), "--foreground", "--no-process-group", "--debug-stdout", "--debuglevel=1")
	cmd.Env = g.nssEnv()
	return g.start("smbd", cmd)
}

// waitListening waits until addr accepts connections.
func waitListening(ctx context.Context, addr string, exited <-chan struct{}, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errors.New("it exited")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// syncUsers reads the cluster's users file through the mount and, if it
// changed, makes them this host's users for smbd: the nss_wrapper passwd
// and group files smbd resolves them with, and its password database.
func (g *Gateway) syncUsers(ctx context.Context) error {
	b, err := os.ReadFile(filepath.Join(g.l.mnt(), filepath.FromSlash(UsersPath)))
	if errors.Is(err, fs.ErrNotExist) {
		b, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("smb: reading %s: %w", UsersPath, err)
	}
	g.mu.Lock()
	same := g.mu.users != nil && bytes.Equal(g.mu.users, b)
	g.mu.Unlock()
	if same {
		return nil
	}
	users, err := ParseUsers(b)
	if err != nil {
		return err
	}
	var pw, gr, sp bytes.Buffer
	pw.WriteString("root:x:0:0:root:/:/bin/false\nnobody:x:65534:65534:nobody:/:/bin/false\n")
	gr.WriteString("root:x:0:\nnogroup:x:65534:\n")
	groups := map[uint32]bool{0: true, 65534: true}
	lct := fmt.Sprintf("LCT-%08X", time.Now().Unix())
	for _, u := range users {
		fmt.Fprintf(&pw, "%s:x:%d:%d:%s:/:/bin/false\n", u.Name, u.UID, u.GID, u.Name)
		if !groups[u.GID] {
			groups[u.GID] = true
			fmt.Fprintf(&gr, "g%d:x:%d:\n", u.GID, u.GID)
		}
		fmt.Fprintf(&sp, "%s:%d:XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX:%X:[U          ]:%s:\n", u.Name, u.UID, u.NTHash, lct)
	}
	for p, data := range map[string][]byte{g.l.passwd(): pw.Bytes(), g.l.group(): gr.Bytes()} {
		if err := writeAtomic(p, data, 0o644); err != nil {
			return err
		}
	}
	if err := writeAtomic(g.l.smbpasswd(), sp.Bytes(), 0o600); err != nil {
		return err
	}
	defer os.Remove(g.l.smbpasswd())
	if len(users) > 0 {
		if out, err := g.pdbedit(ctx, "-i", "smbpasswd:"+g.l.smbpasswd()); err != nil {
			return fmt.Errorf("smb: importing users: %v: %s", err, out)
		}
	}
	// Users removed from the file leave the password database.
	out, err := g.pdbedit(ctx, "-L")
	if err != nil {
		return fmt.Errorf("smb: listing users: %v: %s", err, out)
	}
	for _, ln := range strings.Split(string(out), "\n") {
		name, _, ok := strings.Cut(ln, ":")
		if !ok || name == "" {
			continue
		}
		if _, kept := RemoveUser(users, name); !kept {
			if out, err := g.pdbedit(ctx, "-x", "-u", name); err != nil {
				g.log.Warn("smb: removing a user failed", "user", name, "err", err, "out", string(out))
			}
		}
	}
	g.mu.Lock()
	g.mu.users = append([]byte{}, b...)
	g.mu.Unlock()
	g.log.Info("smb: users loaded", "users", len(users))
	return nil
}

func (g *Gateway) pdbedit(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, g.cfg.Pdbedit, append([]string{"-s", g.l.conf()}, args...)...)
	cmd.Env = g.nssEnv()
	return cmd.CombinedOutput()
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("smb: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("smb: %w", err)
	}
	return nil
}
