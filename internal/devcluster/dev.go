package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Config configures a local development cluster.
type Config struct {
	DataDir       string
	Storage       int    // number of storage servers
	StorageListen string // host:port of slot 0; slot i listens on port+i
	Exe           string // the atoll binary
	LogLevel      string
	Out           io.Writer
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("dev: --data is required")
	}
	if c.Storage < 1 || c.Storage > 64 {
		return errors.New("dev: --storage must be 1..64")
	}
	if _, _, err := splitPort(c.StorageListen); err != nil {
		return fmt.Errorf("dev: --storage-listen: %w", err)
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

// Dev runs a local cluster.
type Dev struct {
	cfg  Config
	lock *os.File
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
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("dev: data directory %s: %w", cfg.DataDir, err)
	}
	f, err := os.OpenFile(filepath.Join(cfg.DataDir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("dev: data directory %s is not writable: %w", cfg.DataDir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("dev: another atoll dev is using %s (lock held)", cfg.DataDir)
	}
	return &Dev{cfg: cfg, lock: f}, nil
}

// Run starts every role, prints the endpoints, and stops them all when ctx
// is done. A role that dies is reported; the others keep serving.
func (d *Dev) Run(ctx context.Context) error {
	defer d.lock.Close()
	host, port, _ := splitPort(d.cfg.StorageListen)
	var children []*Child
	defer func() {
		for i := len(children) - 1; i >= 0; i-- {
			_ = children[i].Stop(10 * time.Second)
		}
	}()
	var addrs []string
	for i := 0; i < d.cfg.Storage; i++ {
		listen := net.JoinHostPort(host, strconv.Itoa(port+i))
		if ln, err := net.Listen("tcp", listen); err != nil {
			return fmt.Errorf("dev: storage slot %d: port in use: %w", i, err)
		} else {
			ln.Close()
		}
		dir := filepath.Join(d.cfg.DataDir, "storage", strconv.Itoa(i))
		c, err := Start(ctx, ChildSpec{
			Name: fmt.Sprintf("storage%d", i), Exe: d.cfg.Exe,
			Args:     []string{"storage", "--dir", dir, "--listen", listen, "--slot", strconv.Itoa(i), "--log-level", d.cfg.LogLevel},
			AddrFile: filepath.Join(d.cfg.DataDir, "storage", strconv.Itoa(i)+".addr"),
			Output:   d.cfg.Out,
		})
		if err != nil {
			return err
		}
		children = append(children, c)
		addrs = append(addrs, c.Addr)
	}
	fmt.Fprintf(d.cfg.Out, "atoll dev ready: %d storage servers\n", len(children))
	for i, c := range children {
		fmt.Fprintf(d.cfg.Out, "  storage slot %d  %s  pid %d\n", i, c.Addr, c.PID())
	}
	fmt.Fprintf(d.cfg.Out, "  try: atoll bench data --cluster %s --size 256MiB\n", strings.Join(addrs, ","))
	fmt.Fprintln(d.cfg.Out, "  (metadata islands, manager, NFS gateway, FUSE mount and dashboard arrive with the namespace and access tiers)")
	reported := map[*Child]bool{}
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(d.cfg.Out, "atoll dev: stopping")
			return nil
		case <-time.After(500 * time.Millisecond):
		}
		for _, c := range children {
			select {
			case <-c.Done():
				// Report once; keep serving with the others.
				if !reported[c] {
					reported[c] = true
					fmt.Fprintf(d.cfg.Out, "atoll dev: %s (pid %d) exited\n", c.Name, c.PID())
				}
			default:
			}
		}
	}
}
