package test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/fusefs"
	"github.com/atoll-fs/atoll/internal/lease"
)

// TestKilledMountStuckInTheKernelIsAborted: a mount process killed while
// one of its threads waits in the kernel for its own mount never exits:
// here the mount's lease watch invalidates names of a directory whose
// lock a mkdir holds, and that mkdir waits for the mount, which waits for
// its stopped island. (The fault engine found it: `atoll torture --seed
// 31337` hung for good on killing the mount.) devcluster.Child.Kill
// aborts the mount's FUSE connection: the process ends, the mkdir fails
// and the mountpoint answers ENOTCONN instead of hanging.
func TestKilledMountStuckInTheKernelIsAborted(t *testing.T) {
	fuseUsable(t)
	mnt := filepath.Join(t.TempDir(), "mnt")
	cl, _ := startDev(t, 3, 1, 0, func(c *devcluster.Config) { c.Mount = mnt })
	mount, island := cl.Child("mount"), cl.Child("island1")
	d := filepath.Join(mnt, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	var names []string
	for k := range 20 {
		names = append(names, filepath.Join(d, fmt.Sprintf("f%02d", k)))
		if err := os.WriteFile(names[k], []byte{byte(k)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The kernel keeps the names past the lease's term once the polls
	// renew it (TestFUSEKernelKeepsLeasedNamesPastTheTerm); the mount's
	// watch invalidates them when the lease nears its end unrenewed.
	walk := func() {
		t.Helper()
		for _, n := range names {
			if _, err := os.Lstat(n); err != nil {
				t.Fatal(err)
			}
		}
	}
	walk()
	time.Sleep(lease.DefaultTerm + 500*time.Millisecond)
	walk()

	if err := island.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer island.Signal(syscall.SIGCONT)
	mkdirErr := make(chan error, 1)
	go func() { mkdirErr <- os.Mkdir(filepath.Join(d, "x"), 0o755) }()
	// The lease ends unrenewed within a term: the watch's invalidation
	// then waits for d's lock, held by the mkdir.
	deadline := time.Now().Add(4 * lease.DefaultTerm)
	for !threadWaitsIn(mount.PID(), "fuse_reverse_inval_entry") {
		if time.Now().After(deadline) {
			t.Fatalf("no thread of the mount waits to invalidate a name after %v: the case is not reached", 4*lease.DefaultTerm)
		}
		time.Sleep(50 * time.Millisecond)
	}

	killed := make(chan struct{})
	go func() { mount.Kill(); close(killed) }()
	// An aborted mount stays mounted (ENOTCONN) until unmounted.
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	select {
	case <-killed:
	case <-time.After(devcluster.KillAbortAfter + 20*time.Second):
		// Leave the machine usable, then fail.
		_ = fusefs.Abort(mnt)
		<-killed
		t.Fatal("the killed mount did not exit: Kill did not abort its FUSE connection")
	}
	if mount.Aborts() != 1 {
		t.Fatalf("the mount exited with %d aborts; the case needs the abort", mount.Aborts())
	}
	select {
	case err := <-mkdirErr:
		if !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ECONNABORTED) {
			t.Fatalf("mkdir through the aborted mount: %v, want ENOTCONN", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the mkdir still waits after the abort")
	}
	if _, err := os.Stat(d); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("stat through the aborted mount: %v, want ENOTCONN", err)
	}
}

// threadWaitsIn reports whether a thread of process pid sleeps in the
// kernel function fn (its wchan).
func threadWaitsIn(pid int, fn string) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", pid))
	for _, w := range tasks {
		if b, err := os.ReadFile(w); err == nil && strings.TrimSpace(string(b)) == fn {
			return true
		}
	}
	return false
}
