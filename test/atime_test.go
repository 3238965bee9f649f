package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/atoll-fs/atoll/internal/fusefs"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// times are a file's access, modification and change times (ns).
type times struct{ a, m, c int64 }

func statTimes(t *testing.T, p string) times {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return times{st.Atim.Nano(), st.Mtim.Nano(), st.Ctim.Nano()}
}

// expect compares two stats as xfstests' generic/003 does: Y, the time
// moved; N, it did not (atime, mtime, ctime).
func expect(t *testing.T, what, yn string, before, after times) {
	t.Helper()
	for i, moved := range []bool{after.a != before.a, after.m != before.m, after.c != before.c} {
		if want := yn[i] == 'Y'; moved != want {
			t.Errorf("%s: %s time moved=%v, want %v (before %+v, after %+v)", what, [3]string{"access", "modify", "change"}[i], moved, want, before, after)
		}
	}
}

// Access times as generic/003 checks them, on three mounts of one
// cluster: relatime updates at the first read after a change (by a
// reader without write permission too) and not at the next; strictatime
// at every read; noatime (the default) never. A read changes neither
// mtime nor ctime, and the island keeps what the mount set.
func TestAccessTimes(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 3, 1)
	_, rel := mountFSWith(t, fc.newFS(t), func(c *fusefs.Config) { c.Atime = fusefs.AtimeRelatime })
	_, strict := mountFSWith(t, fc.newFS(t), func(c *fusefs.Config) { c.Atime = fusefs.AtimeStrict })
	_, none := mountFSWith(t, fc.newFS(t), nil)
	read := func(p string) {
		t.Helper()
		if _, err := os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	// Times are compared at nanoseconds, but a second apart, as the
	// suite does (and past the kernel's attribute cache).
	tick := func() { time.Sleep(1100 * time.Millisecond) }

	f := filepath.Join(rel, "file1")
	if err := os.WriteFile(f, []byte("aaa\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s0 := statTimes(t, f)
	tick()
	read(f)
	s1 := statTimes(t, f)
	expect(t, "relatime, first read", "YNN", s0, s1)
	tick()
	read(f)
	s2 := statTimes(t, f)
	expect(t, "relatime, second read", "NNN", s1, s2)

	// Changed, then read by uid 1000, who may read but not write it
	// (through the test's own temporary directories).
	for d := filepath.Dir(rel); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tick()
	if err := os.WriteFile(f, []byte("bbb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s3 := statTimes(t, f)
	tick()
	cat := exec.Command("cat", f)
	cat.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	if out, err := cat.CombinedOutput(); err != nil || string(out) != "bbb\n" {
		t.Fatalf("cat as uid 1000: %q %v", out, err)
	}
	s4 := statTimes(t, f)
	expect(t, "relatime, a reader's first read after a change", "YNN", s3, s4)

	// The island has it: a fresh client sees the mount's atime.
	a, err := fc.newFS(t).GetAttrFresh(context.Background(), metawire.Root, func() uint64 {
		var st unix.Stat_t
		if err := unix.Stat(f, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}())
	if err != nil || a.Atime != s4.a {
		t.Fatalf("the island's atime %d (%v), the mount's %d", a.Atime, err, s4.a)
	}

	// strictatime: every read.
	g := filepath.Join(strict, "file2")
	if err := os.WriteFile(g, []byte("ccc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tick()
	read(g)
	g1 := statTimes(t, g)
	tick()
	read(g)
	g2 := statTimes(t, g)
	expect(t, "strictatime, second read", "YNN", g1, g2)

	// noatime: never, not even the first read after a change.
	h := filepath.Join(none, "file3")
	if err := os.WriteFile(h, []byte("ddd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h0 := statTimes(t, h)
	tick()
	read(h)
	expect(t, "noatime, first read", "NNN", h0, statTimes(t, h))
}
