package devcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/atoll-fs/atoll/internal/fusefs"
)

// Child is one role running as a child process of this one.
type Child struct {
	Name        string
	Addr        string // the address the child reported in its addr file
	MetricsAddr string // where it serves /metrics ("" = nowhere)
	cmd         *exec.Cmd
	done        chan struct{}
	exitErr     error
	mu          sync.Mutex
	peakRSS     int64 // bytes, sampled from /proc/PID/status VmHWM
	aborts      atomic.Int32
	spec        ChildSpec
}

// ChildSpec describes how to start a child.
type ChildSpec struct {
	Name     string
	Exe      string   // the atoll binary
	Args     []string // subcommand and flags; "--addr-file" is appended
	AddrFile string   // where the child writes its listening address
	// Env is extra environment, e.g. ATOLL_FAILPOINTS=... (honoured only
	// by an Exe built with -tags failpoints; any other refuses to start
	// with it set). The child also inherits this process's environment.
	Env    []string
	Output io.Writer
	// ReadyTimeout bounds waiting for the addr file (default 30s).
	ReadyTimeout time.Duration
	// NoWait returns as soon as the process started; call WaitReady later
	// (for roles that serve only once other roles are up).
	NoWait bool
	// Ready, when set, replaces the addr file as the readiness check (for
	// roles that do not listen, like a FUSE mount); AddrFile is then unused.
	Ready func() bool
	// FUSEMount is the mountpoint of a FUSE mount role: Kill aborts its
	// FUSE connection when the killed process does not exit (see
	// fusefs.Abort).
	FUSEMount string
	// Command, when set, builds the process instead of exec.Command(exe,
	// args...), e.g. to run it inside a simulated host's network namespace
	// (simnet.Host.Command). Start still sets its environment, process
	// attributes and output. The process it starts must be the role itself
	// (an exec wrapper such as nsenter, not a shell that forks it), so that
	// signals reach the role.
	Command func(exe string, args ...string) *exec.Cmd
}

// Start runs the child and waits until it has written its address.
func Start(ctx context.Context, spec ChildSpec) (*Child, error) {
	if spec.ReadyTimeout == 0 {
		spec.ReadyTimeout = 30 * time.Second
	}
	args := append([]string(nil), spec.Args...)
	if spec.Ready == nil {
		_ = os.Remove(spec.AddrFile)
		args = append(args, "--addr-file", spec.AddrFile)
	}
	var cmd *exec.Cmd
	if spec.Command != nil {
		cmd = spec.Command(spec.Exe, args...)
	} else {
		cmd = exec.Command(spec.Exe, args...)
	}
	cmd.Env = append(os.Environ(), spec.Env...)
	// Own process group: a Ctrl-C to the parent's terminal reaches the
	// parent only, which then stops children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if spec.Output != nil {
		pr, pw := io.Pipe()
		cmd.Stdout, cmd.Stderr = pw, pw
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			prefixLines(pr, spec.Output, spec.Name)
		}()
		// Done is closed only once every line the child wrote is in
		// Output: a test may look there for what the child said last.
		return startCmd(ctx, cmd, spec, func() { pw.Close(); <-drained })
	}
	return startCmd(ctx, cmd, spec, func() {})
}

func startCmd(ctx context.Context, cmd *exec.Cmd, spec ChildSpec, onExit func()) (*Child, error) {
	if err := cmd.Start(); err != nil {
		onExit()
		return nil, fmt.Errorf("devcluster: start %s: %w", spec.Name, err)
	}
	c := &Child{Name: spec.Name, cmd: cmd, done: make(chan struct{}), spec: spec}
	go func() {
		c.exitErr = cmd.Wait()
		onExit()
		close(c.done)
	}()
	if spec.NoWait {
		return c, nil
	}
	if err := c.WaitReady(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// WaitReady waits until the child has written its address (ChildSpec.AddrFile).
// On failure the child is killed.
func (c *Child) WaitReady(ctx context.Context) error {
	deadline := time.Now().Add(c.spec.ReadyTimeout)
	for {
		if c.spec.Ready != nil {
			if c.spec.Ready() {
				return nil
			}
		} else if b, err := os.ReadFile(c.spec.AddrFile); err == nil && strings.HasSuffix(string(b), "\n") {
			c.Addr = strings.TrimSpace(string(b))
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("devcluster: %s exited before serving: %v", c.Name, c.exitErr)
		case <-ctx.Done():
			c.Kill()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.Kill()
			return fmt.Errorf("devcluster: %s not serving after %s", c.Name, c.spec.ReadyTimeout)
		}
	}
}

func prefixLines(r io.Reader, w io.Writer, name string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fmt.Fprintf(w, "[%s] %s\n", name, sc.Text())
	}
	_, _ = io.Copy(io.Discard, r)
}

// PID returns the child's process id.
func (c *Child) PID() int { return c.cmd.Process.Pid }

// Done is closed when the child has exited and (with ChildSpec.Output)
// all its output has been written to Output.
func (c *Child) Done() <-chan struct{} { return c.done }

// ExitErr waits until the child has exited and returns how (nil for exit
// status 0; an *exec.ExitError otherwise, e.g. for a SIGKILL).
func (c *Child) ExitErr() error {
	<-c.done
	return c.exitErr
}

// Signal sends sig to the child (an error once it has exited).
func (c *Child) Signal(sig os.Signal) error { return c.cmd.Process.Signal(sig) }

// Respawn starts the child again after it has exited, with its original
// spec (same command line, directory and address), and waits until it is
// ready. The returned Child replaces c.
func (c *Child) Respawn(ctx context.Context) (*Child, error) { return c.RespawnWith(ctx) }

// RespawnWith is Respawn with env added to this start's environment only
// (a failpoint armed for one life: the next Respawn starts without it).
func (c *Child) RespawnWith(ctx context.Context, env ...string) (*Child, error) {
	select {
	case <-c.done:
	default:
		return nil, fmt.Errorf("devcluster: restart %s: still running", c.Name)
	}
	spec := c.spec
	spec.NoWait = false
	spec.Env = append(slices.Clip(c.spec.Env), env...)
	n, err := Start(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("devcluster: restart %s: %w", c.Name, err)
	}
	n.spec.Env = c.spec.Env
	n.MetricsAddr = c.MetricsAddr
	return n, nil
}

// IsMountpoint reports whether path is a mountpoint of this process's
// mount namespace (a FUSE mount made by a child is one once it serves).
func IsMountpoint(path string) bool { return fusefs.IsMountpoint(path) }

// KillAbortAfter is how long Kill waits for a killed FUSE mount to exit
// before it aborts the mount's FUSE connection.
const KillAbortAfter = 3 * time.Second

// Kill sends SIGKILL and waits for the exit. A FUSE mount that has not
// exited after KillAbortAfter has a thread waiting in the kernel for its
// own mount and never would: its connection is aborted (fusefs.Abort).
func (c *Child) Kill() {
	c.SampleRSS()
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	if c.spec.FUSEMount == "" {
		<-c.done
		return
	}
	select {
	case <-c.done:
		return
	case <-time.After(KillAbortAfter):
	}
	c.aborts.Add(1)
	if err := fusefs.Abort(c.spec.FUSEMount); err != nil {
		fmt.Fprintf(os.Stderr, "devcluster: %s killed but still running, and its FUSE connection was not aborted: %v\n", c.Name, err)
	} else {
		fmt.Fprintf(os.Stderr, "devcluster: %s killed but still running after %v: aborted its FUSE connection\n", c.Name, KillAbortAfter)
	}
	<-c.done
}

// Aborts counts the FUSE connections Kill aborted for this child.
func (c *Child) Aborts() int { return int(c.aborts.Load()) }

// Stop sends SIGTERM and waits up to grace for a clean exit, then kills.
func (c *Child) Stop(grace time.Duration) error {
	c.SampleRSS()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		var ee *exec.ExitError
		if errors.As(c.exitErr, &ee) {
			return fmt.Errorf("devcluster: %s: %w", c.Name, c.exitErr)
		}
		return nil
	case <-time.After(grace):
		c.Kill()
		return fmt.Errorf("devcluster: %s did not stop within %s; killed", c.Name, grace)
	}
}

// SampleRSS reads the child's peak resident set (VmHWM) and remembers the
// largest value seen; it returns that value in bytes.
func (c *Child) SampleRSS() int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(c.PID()), "status"))
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil && kb*1024 > c.peakRSS {
					c.peakRSS = kb * 1024
				}
			}
		}
	}
	return c.peakRSS
}
