package fusefs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/lockcheck"
)

// StatFS is what statfs(2) reports for the mount.
type StatFS struct {
	TotalBytes, FreeBytes uint64
	Files, FreeFiles      uint64
}

// Config configures a mount.
type Config struct {
	FS         *client.FS
	Mountpoint string
	// EntryTTL and AttrTTL are the kernel's cache timeouts for names and
	// attributes. Default 1s; negative means 0 (no kernel caching).
	EntryTTL, AttrTTL time.Duration
	// StatFS reports capacity (nil: a large nominal size).
	StatFS func(ctx context.Context) (StatFS, error)
	// Private mounts without allow_other (only the mounting user may
	// enter). The default, allow_other, is what multi-user use and
	// pjdfstest need; permissions are checked by the islands either way.
	Private bool
	// LocalLocks keeps fcntl and flock locks in this host's kernel, as
	// before locks reached the islands: they conflict only between
	// processes of this mount, never with other hosts or gateways
	// (single-host use, and benchmarks of what cluster locks cost).
	LocalLocks bool
	// FsName is the "device" column of mount(8) and df. Default "atoll".
	FsName string
	// Root is the directory mounted (0: the FS's root, which is the
	// namespace's, or the top of a confined key's subtree). A mount of a
	// subdirectory is a view, not a boundary: its key reaches what it
	// reaches (a confined key is the boundary).
	Root uint64
	// PlainType mounts with type "fuse" instead of "fuse.atoll" (what
	// xfstests' FSTYP=fuse checks for).
	PlainType bool
	// InterruptGrace is how long a request that changes something keeps
	// waiting for its island or storage servers once the caller is
	// interrupted (a signal: SIGKILL, Ctrl-C) before it gives up with
	// EINTR. Such requests ignore interrupts otherwise (a change the
	// cluster applied must not be answered EINTR), so without a limit a
	// process blocked on a hung server could not be killed. Default 5s,
	// more than a client spends retrying a server that is down; negative:
	// wait as long as the server takes.
	InterruptGrace time.Duration
	// ReadAhead is the kernel's read-ahead for this mount (its bdi's
	// read_ahead_kb), set after mounting when the process may (root).
	// The kernel starts FUSE mounts at 128 KiB, which cuts a sequential
	// read into 128 KiB requests, one or two in flight; a few MiB make
	// them 1 MiB (MaxWrite) and several in flight. Default 8 MiB;
	// negative leaves the kernel's value.
	ReadAhead int
	// WriteCache is when what a file got reaches the cluster (Sigma's
	// write caching modes): WriteClose (the default) at close(2);
	// WriteSync at every write(2), each one made durable before it
	// returns (as with O_SYNC); WritePreborn keeps a closed file's create
	// with its data back, up to the FS's preborn window (client.FS.
	// SetPreborn; needs write-behind), so a file created and removed in
	// it never reaches an island.
	WriteCache string
	// Atime is when a read updates a file's access time: AtimeNoatime
	// (the default: never; a network file system's reads stay reads),
	// AtimeRelatime (Linux's default for local disks: the first read
	// after the file changed, or a day after the last update) or
	// AtimeStrict (every read). A read counts at the open for reading
	// (the kernel serves cached pages without asking). The kernel does not keep
	// atime for FUSE mounts; the mount sends a read's update to the
	// island (metawire.SetAccessed: ctime stays). Directories' atimes
	// are not updated (nodiratime).
	Atime string
	// Debug logs every FUSE request (go-fuse's debug output).
	Debug  bool
	Logger *slog.Logger
}

// Write caching modes (Config.WriteCache).
const (
	WriteClose   = "close"
	WriteSync    = "sync"
	WritePreborn = "preborn"
)

// Access time modes (Config.Atime).
const (
	AtimeNoatime  = "noatime"
	AtimeRelatime = "relatime"
	AtimeStrict   = "strictatime"
)

// CheckAtime refuses an access time mode other than the three above.
func CheckAtime(mode string) error {
	switch mode {
	case AtimeNoatime, AtimeRelatime, AtimeStrict:
		return nil
	}
	return fmt.Errorf("atime %q: want %s, %s or %s", mode, AtimeNoatime, AtimeRelatime, AtimeStrict)
}

// Validate checks the configuration (not the mountpoint: see CheckMountpoint).
func (c *Config) Validate() error {
	if c.FS == nil {
		return errors.New("fusefs: config: FS is required")
	}
	if c.Mountpoint == "" {
		return errors.New("fusefs: config: a mountpoint is required")
	}
	if c.Atime != "" {
		if err := CheckAtime(c.Atime); err != nil {
			return fmt.Errorf("fusefs: config: %w", err)
		}
	}
	switch c.WriteCache {
	case "", WriteClose, WriteSync:
	case WritePreborn:
		if c.FS.Preborn() <= 0 {
			return errors.New("fusefs: config: write cache preborn needs write-behind with a preborn window (client.FS.SetPreborn)")
		}
	default:
		return fmt.Errorf("fusefs: config: write cache %q: want %s, %s or %s", c.WriteCache, WriteSync, WriteClose, WritePreborn)
	}
	return nil
}

// Mount is a FUSE mount of an Atoll cluster.
type Mount struct {
	cfg    Config
	log    *slog.Logger
	ad     *adapter
	mp     string
	mu     lockcheck.Mutex
	server *fuse.Server
	done   chan struct{}
	// watched is closed when the watcher (adapter.watch, started by
	// Mount) has returned, after the server stopped.
	watched chan struct{}
}

// New checks the configuration and the environment (/dev/fuse, the
// mountpoint) and returns an unmounted Mount.
func New(cfg Config) (*Mount, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.EntryTTL == 0 {
		cfg.EntryTTL = time.Second
	}
	if cfg.AttrTTL == 0 {
		cfg.AttrTTL = time.Second
	}
	cfg.EntryTTL, cfg.AttrTTL = max(cfg.EntryTTL, 0), max(cfg.AttrTTL, 0)
	if cfg.FsName == "" {
		cfg.FsName = "atoll"
	}
	if cfg.InterruptGrace == 0 {
		cfg.InterruptGrace = 5 * time.Second
	}
	if cfg.ReadAhead == 0 {
		cfg.ReadAhead = DefaultReadAhead
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	mp, err := filepath.Abs(cfg.Mountpoint)
	if err != nil {
		return nil, fmt.Errorf("fusefs: mountpoint %s: %w", cfg.Mountpoint, err)
	}
	if err := CheckFuseDevice(); err != nil {
		return nil, err
	}
	if err := CheckMountpoint(mp); err != nil {
		return nil, err
	}
	return &Mount{cfg: cfg, log: cfg.Logger, ad: newAdapter(&cfg), mp: mp, done: make(chan struct{}), watched: make(chan struct{})}, nil
}

// Mountpoint returns the absolute mountpoint.
func (m *Mount) Mountpoint() string { return m.mp }

// Readdirs returns how many listing requests (READDIR, READDIRPLUS) the
// kernel sent this mount: a listing the kernel caches costs none.
func (m *Mount) Readdirs() uint64 { return m.ad.readdirs.Load() }

// Lookups returns how many LOOKUP and GETATTR requests the kernel sent
// this mount: names and attributes the kernel keeps cost none.
func (m *Mount) Lookups() uint64 { return m.ad.lookups.Load() }

// StaleReopens returns how many times a read that ended short of the
// size the kernel was given opened its file again (another client had
// grown it since the open).
func (m *Mount) StaleReopens() uint64 { return m.ad.staleReopens.Load() }

// CheckFuseDevice reports a clear error when /dev/fuse is missing or
// cannot be opened.
func CheckFuseDevice() error {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return errors.New("fusefs: /dev/fuse does not exist: load the fuse module (modprobe fuse) or, in a container, pass the device (--device /dev/fuse --cap-add SYS_ADMIN)")
		}
		return fmt.Errorf("fusefs: cannot open /dev/fuse: %w (run as root, or install fuse3 for the fusermount3 helper)", err)
	}
	f.Close()
	return nil
}

// CheckMountpoint reports a clear error when mp does not exist, is not a
// directory, is already a mountpoint, or is a stale FUSE mount.
func CheckMountpoint(mp string) error {
	st, err := os.Stat(mp)
	if err != nil {
		if errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) {
			return fmt.Errorf("fusefs: %s is a stale mount (its FUSE server died): unmount it with `fusermount3 -u %s` or `umount -l %s`, then mount again", mp, mp, mp)
		}
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("fusefs: mountpoint %s does not exist (mkdir -p %s)", mp, mp)
		}
		return fmt.Errorf("fusefs: mountpoint %s: %w", mp, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("fusefs: mountpoint %s is not a directory", mp)
	}
	if IsMountpoint(mp) {
		return fmt.Errorf("fusefs: %s is already a mountpoint (busy): unmount it first (`fusermount3 -u %s` or `umount %s`; `umount -l %s` if it is stale)", mp, mp, mp, mp)
	}
	return nil
}

// IsMountpoint reports whether mp is listed in /proc/self/mountinfo
// (a mountpoint of this process's mount namespace).
func IsMountpoint(mp string) bool {
	ms, err := mountsAt(mp)
	return err == nil && len(ms) > 0
}

// mountAt is one mount listed in /proc/self/mountinfo.
type mountAt struct {
	dev    string // major:minor
	fstype string
}

// mountsAt returns the mounts at the absolute path mp, in the order
// mountinfo lists them (a later one hides an earlier one).
func mountsAt(mp string) ([]mountAt, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountAt
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source options
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) <= 4 || unescapeMountinfo(fields[4]) != mp {
			continue
		}
		m := mountAt{dev: fields[2]}
		if _, rest, ok := strings.Cut(line, " - "); ok {
			if ft := strings.Fields(rest); len(ft) > 0 {
				m.fstype = ft[0]
			}
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// unescapeMountinfo undoes the octal escapes (\040 for space) of mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOct(s[i+1]) && isOct(s[i+2]) && isOct(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOct(c byte) bool { return c >= '0' && c <= '7' }

// Mount mounts the file system and starts serving; it returns once the
// kernel has the mount.
func (m *Mount) Mount() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.server != nil {
		return errors.New("fusefs: already mounted")
	}
	opts := &fuse.MountOptions{
		AllowOther: !m.cfg.Private,
		FsName:     m.cfg.FsName,
		Name:       "atoll",
		// 1 MiB requests where the kernel allows them.
		MaxWrite:      1 << 20,
		MaxReadAhead:  1 << 20,
		MaxBackground: 64,
		// Root mounts without the fusermount helper; others fall back to it.
		DirectMount: true,
		Debug:       m.cfg.Debug,
		// A bug must never take the mount down: log it and answer EIO.
		PanicHandler: func(v any) fuse.Status {
			m.log.Error("fusefs: panic in request handler", "panic", v)
			return fuse.EIO
		},
		// default_permissions: the kernel checks the mode bits of every
		// path component and of the file from its cached attributes
		// before any request; the islands check again with the caller's
		// credentials. Without it a name in the kernel's cache skipped
		// the search permission of its directories: after bob used his
		// files, another user read, appended to and hard-linked them in
		// his 0700 directory (issue #43). The mount has no ACLs
		// (system.posix_acl_* is EOPNOTSUPP), so mode bits are the whole
		// check.
		Options: []string{"default_permissions"},
		//
		// HANDLE_KILLPRIV_V2: the islands clear set-id bits on chown
		// (SETATTR's FATTR_KILL_SUIDGID, metawire.SetKillSUID), on
		// truncation and on writes by the unprivileged. Without it the
		// kernel asks GETATTR before every chown to compute the mode
		// itself, and getxattr(security.capability) before a first
		// write.
		ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV_V2,
		// fcntl, OFD and flock locks come here and go to the islands,
		// so they conflict across mounts (locks.go).
		EnableLocks: !m.cfg.LocalLocks,
	}
	if m.cfg.PlainType {
		opts.Name = "" // go-fuse then asks the adapter's String, also ""
	}
	srv, err := fuse.NewServer(m.ad, m.mp, opts)
	if err != nil {
		if strings.Contains(err.Error(), "fusermount") {
			return fmt.Errorf("fusefs: mount %s: %w (as non-root, install fuse3 and enable user_allow_other in /etc/fuse.conf)", m.mp, err)
		}
		return fmt.Errorf("fusefs: mount %s: %w", m.mp, err)
	}
	m.ad.server = srv
	go func() {
		srv.Serve()
		close(m.done)
	}()
	go func() {
		defer close(m.watched)
		m.ad.watch(m.done)
	}()
	if err := srv.WaitMount(); err != nil {
		_ = srv.Unmount()
		return fmt.Errorf("fusefs: mount %s: %w", m.mp, err)
	}
	m.server = srv
	if m.cfg.ReadAhead > 0 {
		if err := setReadAhead(m.mp, m.cfg.ReadAhead); err != nil {
			// Only speed is at stake (and non-root cannot).
			m.log.Info("fusefs: kernel read-ahead left as it is", "mountpoint", m.mp, "err", err)
		}
	}
	m.log.Info("fusefs: mounted", "mountpoint", m.mp)
	return nil
}

// DefaultReadAhead is Config.ReadAhead's default.
const DefaultReadAhead = 8 << 20

// setReadAhead sets the read-ahead of the mount at mp.
func setReadAhead(mp string, bytes int) error {
	p, err := readAheadFile(mp)
	if err != nil {
		return err
	}
	return os.WriteFile(p, []byte(strconv.Itoa(max(bytes>>10, 4))), 0)
}

// ReadAheadOf reports the kernel's read-ahead of the mount at mp, in
// bytes (for tests and diagnostics).
func ReadAheadOf(mp string) (int, error) {
	p, err := readAheadFile(mp)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	kb, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return kb << 10, err
}

// readAheadFile is the read_ahead_kb file of the mount at mp: its backing
// device info, /sys/class/bdi/MAJOR:MINOR, named by the mount's device.
// The device comes from mountinfo, not a stat of mp: a stat holds the
// mount while the kernel asks this very server, and an umount then
// fails with EBUSY.
func readAheadFile(mp string) (string, error) {
	if ms, err := mountsAt(mp); err == nil && len(ms) > 0 {
		return "/sys/class/bdi/" + ms[len(ms)-1].dev + "/read_ahead_kb", nil
	}
	var st syscall.Stat_t
	if err := syscall.Stat(mp, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)), nil
}

// Done is closed when the FUSE server stops (unmounted by Unmount or from
// outside, e.g. fusermount -u).
func (m *Mount) Done() <-chan struct{} { return m.done }

// Unmount unmounts (lazily if the mount is busy), waits for the server to
// stop and writes back every file still open.
func (m *Mount) Unmount() error {
	m.mu.Lock()
	srv := m.server
	m.server = nil
	m.mu.Unlock()
	if srv == nil {
		return nil
	}
	var uerr error
	stopped := false
	select {
	case <-m.done:
		stopped = true // unmounted from outside
	default:
	}
	if !stopped {
		if err := srv.Unmount(); err != nil {
			// Busy (a process has a file open or its cwd inside): detach it
			// so it disappears from the namespace now and goes when unused.
			if derr := syscall.Unmount(m.mp, syscall.MNT_DETACH); derr != nil {
				uerr = fmt.Errorf("fusefs: unmount %s: %v (then lazy: %v); run `umount -l %s`", m.mp, err, derr, m.mp)
			} else {
				m.log.Warn("fusefs: mount was busy; detached lazily", "mountpoint", m.mp)
			}
		}
	}
	select {
	case <-m.done:
		<-m.watched
	case <-time.After(10 * time.Second):
		if uerr == nil {
			uerr = fmt.Errorf("fusefs: server of %s did not stop", m.mp)
		}
	}
	// Kernel invalidations after lease breaks end with the connection.
	notified := make(chan struct{})
	go func() { m.ad.notifies.Wait(); close(notified) }()
	select {
	case <-notified:
	case <-time.After(5 * time.Second):
		m.log.Warn("fusefs: kernel invalidations still running at unmount", "mountpoint", m.mp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.ad.closeAll(ctx); err != nil && uerr == nil {
		uerr = err
	}
	m.log.Info("fusefs: unmounted", "mountpoint", m.mp)
	return uerr
}

// Kill simulates a crash of the mount's client side, for tests: every
// unflushed write is dropped (nothing is written back from now on: flush
// and fsync fail with EIO, release writes nothing) and the mountpoint is
// detached at once. Files open through it fail with EIO or ENOTCONN.
func (m *Mount) Kill() error {
	m.ad.killed.Store(true)
	m.mu.Lock()
	srv := m.server
	m.server = nil
	m.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := syscall.Unmount(m.mp, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("fusefs: kill %s: %w", m.mp, err)
	}
	return nil
}

// Run mounts, serves until ctx is done or the file system is unmounted
// from outside, then unmounts cleanly.
func (m *Mount) Run(ctx context.Context) error {
	if err := m.Mount(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-m.done:
	}
	return m.Unmount()
}
