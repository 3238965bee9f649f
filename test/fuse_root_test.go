package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/fusefs"
	"github.com/atoll-fs/atoll/internal/metawire"
	"golang.org/x/sys/unix"
)

// TestMountSubdirectory is issue #44's `atoll mount --root DIR`: the
// mount shows DIR as its root; what it makes lands in DIR; ".." of the
// mount's root is the host's, not DIR's parent.
func TestMountSubdirectory(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 3, 2)
	fs := fc.newFS(t)
	ctx := context.Background()
	root := metawire.Root
	if _, err := fs.MkdirAll(ctx, root, "/proj/a", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteFile(ctx, root, "/proj/a/f", []byte("in a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteFile(ctx, root, "/outside", []byte("not in proj\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	proj, err := fs.Resolve(ctx, root, "/proj")
	if err != nil {
		t.Fatal(err)
	}
	_, mnt := mountFSWith(t, fc.newFS(t), func(c *fusefs.Config) { c.Root = proj.Ino })
	ents, err := os.ReadDir(mnt)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if err != nil || !slices.Equal(names, []string{"a"}) {
		t.Fatalf("the mount of /proj lists %q (%v), want [a]", names, err)
	}
	var st, pst os.FileInfo
	if st, err = os.Stat(mnt); err != nil || !st.IsDir() {
		t.Fatalf("stat of the mount's root: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "a", "f")); err != nil || string(b) != "in a\n" {
		t.Fatalf("a/f through the mount: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "made"), []byte("made here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(mnt, "a", "f"), filepath.Join(mnt, "f2")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"/proj/made": "made here\n", "/proj/f2": "in a\n"} {
		if b, err := fs.ReadFile(ctx, root, p); err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", p, b, err, want)
		}
	}
	// ".." of the mount's root is the mountpoint's parent on this host.
	if pst, err = os.Stat(filepath.Join(mnt, "..")); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Stat(filepath.Dir(mnt))
	if !os.SameFile(pst, host) {
		t.Errorf(`".." of the mount's root is not the host's parent directory`)
	}
	if _, err := os.Stat(filepath.Join(mnt, "..", "outside")); err == nil {
		t.Errorf("the namespace's /outside is reachable from the mount of /proj")
	}
}

// `atoll mount --ready-file` says when the mount is ready: an umount
// right after it succeeds. The mount appears a moment before (go-fuse's
// first requests and the read-ahead setting hold it), and xfstests'
// umount right after its mount helper returned failed with EBUSY.
func TestUmountRightAfterReady(t *testing.T) {
	fuseUsable(t)
	cl, _ := startDev(t, 3, 1, 0, nil)
	for i := range 5 {
		mnt, ready := t.TempDir(), filepath.Join(t.TempDir(), "ready")
		cmd := exec.Command(atoll(t), "mount", "--cluster", cl.Manager, "--key", testKeyPath, "--log-level", "warn", "--ready-file", ready, mnt)
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		deadline := time.Now().Add(time.Minute)
		for {
			if b, err := os.ReadFile(ready); err == nil {
				if strings.TrimSpace(string(b)) != mnt {
					t.Fatalf("ready file says %q, mountpoint %s", b, mnt)
				}
				break
			}
			select {
			case err := <-exited:
				t.Fatalf("atoll mount exited before it was ready: %v", err)
			case <-time.After(5 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatal("no ready file after a minute")
			}
		}
		if err := unix.Unmount(mnt, 0); err != nil {
			// A FUSE server killed while mounted can stay a zombie
			// until its mount goes: detach it, and do not wait.
			cmd.Process.Kill()
			_ = fusefs.Abort(mnt)
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
			t.Fatalf("round %d: umount right after the mount said ready: %v", i, err)
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("round %d: atoll mount after umount: %v", i, err)
			}
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			t.Fatalf("round %d: atoll mount still running a minute after umount", i)
		}
	}
}
