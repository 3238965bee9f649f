package test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/fsck"
	"github.com/atoll-fs/atoll/internal/fusefs"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/testenv"
)

// The FUSE mount end to end: an in-process cluster (storage servers and
// islands on 127.0.0.1), mounted in this process with internal/fusefs,
// exercised with the plain os and syscall packages. Needs root and
// /dev/fuse; skipped (with the reason) otherwise, and failed instead when
// $CI is set (testenv.Missing).

// waitEvent polls cond until it returns nil, failing the test with
// cond's last error after a generous deadline (an event that does not
// come, not a slow one, is what fails).
func waitEvent(t testing.TB, what string, cond func() error) {
	t.Helper()
	const deadline = time.Minute
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Since(start) > deadline {
			t.Fatalf("%s: not after %v: %v", what, deadline, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func fuseUsable(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "FUSE tests need root (allow_other mounts without fusermount)")
	}
	if err := fusefs.CheckFuseDevice(); err != nil {
		testenv.Missing(t, "FUSE unusable here: %v", err)
	}
}

// mountFS mounts fs on a new temporary directory; the mount goes at the
// end of the test (before the directory is removed). fs creates and
// closes lazily from then on, as under `atoll mount`.
func mountFS(t testing.TB, fs *client.FS) (*fusefs.Mount, string) {
	t.Helper()
	return mountFSWith(t, fs, nil)
}

// mountFSWith is mountFS with the mount's configuration adjusted by tune.
func mountFSWith(t testing.TB, fs *client.FS, tune func(*fusefs.Config)) (*fusefs.Mount, string) {
	t.Helper()
	fs.SetLazyCreate(true)
	fs.SetLazyClose(true)
	fs.EnableLeases()
	fs.EnableWriteBehind()
	dir := t.TempDir()
	cfg := fusefs.Config{FS: fs, Mountpoint: dir, Logger: quietLogger()}
	if tune != nil {
		tune(&cfg)
	}
	m, err := fusefs.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Mount(); err != nil {
		testenv.Missing(t, "FUSE mount impossible here: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
			abortFUSE(t, st.Dev)
		}
	})
	return m, dir
}

// abortFUSE aborts the kernel's FUSE connection of device dev. A failed
// test can leave a file open on this process's own mount; closing it at
// exit would wait forever on the stopped in-process server and hang the
// test binary (and go test) instead of reporting the failure.
func abortFUSE(t testing.TB, dev uint64) {
	const ctl = "/sys/fs/fuse/connections"
	if ents, _ := os.ReadDir(ctl); len(ents) == 0 {
		_ = unix.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	path := fmt.Sprintf("%s/%d/abort", ctl, unix.Minor(dev))
	if err := os.WriteFile(path, []byte("1"), 0); err != nil {
		t.Logf("aborting the FUSE connection: %v", err)
	}
}

func errnoOf(err error) syscall.Errno {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	return 0
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if got := errnoOf(err); got != want {
		t.Errorf("%s: got %v (%d), want %v", what, err, got, want)
	}
}

func TestFUSE(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 3)
	_, mnt := mountFS(t, fc.newFS(t))
	_, mnt2 := mountFS(t, fc.newFS(t)) // a second client of the same cluster
	r := rand.New(rand.NewPCG(7, 7))

	t.Run("sizes", func(t *testing.T) {
		for _, n := range []int{0, 1, 16<<10 - 1, 16 << 10, 16<<10 + 1, 5 << 20, 33 << 20} {
			data := randBytes(r, n)
			p := fmt.Sprintf("size-%d", n)
			if err := os.WriteFile(filepath.Join(mnt, p), data, 0o644); err != nil {
				t.Fatalf("write %d: %v", n, err)
			}
			for _, m := range []string{mnt, mnt2} {
				got, err := os.ReadFile(filepath.Join(m, p))
				if err != nil {
					t.Fatalf("read %d: %v", n, err)
				}
				if !bytes.Equal(got, data) {
					t.Fatalf("size %d: read %d bytes, not the written ones", n, len(got))
				}
			}
			st, err := os.Stat(filepath.Join(mnt2, p))
			if err != nil || st.Size() != int64(n) {
				t.Fatalf("stat %d: %v %v", n, st, err)
			}
		}
	})

	t.Run("sequential64MiB", func(t *testing.T) {
		// Written in 1 MiB writes through one descriptor, read back with
		// 128 KiB reads: the client's read-ahead windows must stitch
		// together exactly, through both mounts.
		const size = 64 << 20
		seed := randBytes(r, 1<<20)
		chunk := func(i int) []byte { // distinct per MiB
			b := slices.Clone(seed)
			b[0], b[1], b[len(b)-1] = byte(i), byte(i>>8), byte(i*7)
			return b
		}
		p := filepath.Join(mnt, "seq64")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		for i := 0; i < size>>20; i++ {
			b := chunk(i)
			h.Write(b)
			if _, err := f.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		want := h.Sum(nil)
		for _, m := range []string{mnt, mnt2} {
			f, err := os.Open(filepath.Join(m, "seq64"))
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.New()
			n, err := io.CopyBuffer(h, f, make([]byte, 128<<10))
			f.Close()
			if err != nil || n != size {
				t.Fatalf("read %d bytes: %v", n, err)
			}
			if !bytes.Equal(h.Sum(nil), want) {
				t.Fatalf("%s: 64 MiB read back differs", m)
			}
		}
		os.Remove(p)
	})

	t.Run("namespace", func(t *testing.T) {
		d := filepath.Join(mnt, "ns")
		if err := os.MkdirAll(filepath.Join(d, "a/b/c/d"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(d, "a/b/c/d"), 0o755); err != nil {
			t.Fatal("mkdir -p twice:", err)
		}
		if err := os.WriteFile(filepath.Join(d, "a/f"), []byte("f"), 0o644); err != nil {
			t.Fatal(err)
		}
		wantErrno(t, "mkdir existing", syscall.Mkdir(filepath.Join(d, "a"), 0o755), syscall.EEXIST)
		wantErrno(t, "rmdir non-empty", syscall.Rmdir(filepath.Join(d, "a/b")), syscall.ENOTEMPTY)
		wantErrno(t, "unlink dir", syscall.Unlink(filepath.Join(d, "a/b")), syscall.EISDIR)
		wantErrno(t, "rmdir file", syscall.Rmdir(filepath.Join(d, "a/f")), syscall.ENOTDIR)
		wantErrno(t, "rename file over dir", syscall.Rename(filepath.Join(d, "a/f"), filepath.Join(d, "a/b")), syscall.EISDIR)
		wantErrno(t, "rename dir over file", syscall.Rename(filepath.Join(d, "a/b"), filepath.Join(d, "a/f")), syscall.ENOTDIR)
		if err := os.Mkdir(filepath.Join(d, "e"), 0o755); err != nil {
			t.Fatal(err)
		}
		wantErrno(t, "rename dir over non-empty dir", syscall.Rename(filepath.Join(d, "e"), filepath.Join(d, "a/b")), syscall.ENOTEMPTY)
		wantErrno(t, "link over existing", syscall.Link(filepath.Join(d, "a/f"), filepath.Join(d, "a/f")), syscall.EEXIST)
		wantErrno(t, "open missing", func() error { _, err := os.Open(filepath.Join(d, "nope")); return err }(), syscall.ENOENT)
		wantErrno(t, "path through a file", os.Mkdir(filepath.Join(d, "a/f/x"), 0o755), syscall.ENOTDIR)
		long := string(bytes.Repeat([]byte("n"), 256))
		wantErrno(t, "name too long", os.WriteFile(filepath.Join(d, long), nil, 0o644), syscall.ENAMETOOLONG)

		// Renames and links across directories (other islands) never
		// answer EXDEV.
		for i := 0; i < 12; i++ {
			src := filepath.Join(d, fmt.Sprintf("dir%d", i))
			if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(src, "file")
			if err := os.WriteFile(f, []byte{byte(i)}, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(f, filepath.Join(d, "a/b/c", fmt.Sprintf("link%d", i))); err != nil {
				t.Fatalf("link across directories: %v", err)
			}
			if err := os.Rename(f, filepath.Join(d, "a/b/c/d", fmt.Sprintf("moved%d", i))); err != nil {
				t.Fatalf("rename across directories: %v", err)
			}
			if err := os.Rename(src, filepath.Join(d, "e", fmt.Sprintf("dir%d", i))); err != nil {
				t.Fatalf("rename a directory across directories: %v", err)
			}
		}
		ents, err := os.ReadDir(filepath.Join(d, "e"))
		if err != nil || len(ents) != 12 {
			t.Fatalf("readdir after renames: %d entries, %v", len(ents), err)
		}
		st, err := os.Stat(filepath.Join(d, "a/b/c/link3"))
		if err != nil || st.Sys().(*syscall.Stat_t).Nlink != 2 {
			t.Fatalf("nlink of a renamed linked file: %v %v", st, err)
		}
		// rename(2) replacing a file; renameat2 flags.
		if err := os.WriteFile(filepath.Join(d, "x"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "y"), []byte("y"), 0o644); err != nil {
			t.Fatal(err)
		}
		wantErrno(t, "RENAME_NOREPLACE", renameat2(filepath.Join(d, "x"), filepath.Join(d, "y"), 1), syscall.EEXIST)
		if err := renameat2(filepath.Join(d, "x"), filepath.Join(d, "y"), 2); err != nil {
			t.Fatal("RENAME_EXCHANGE:", err)
		}
		if err := renameat2(filepath.Join(d, "x"), filepath.Join(d, "y"), 2); err != nil {
			t.Fatal("RENAME_EXCHANGE back:", err)
		}
		if err := os.Rename(filepath.Join(d, "x"), filepath.Join(d, "y")); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(d, "y")); string(b) != "x" {
			t.Fatalf("after rename over: %q", b)
		}
		// The other mount sees the tree once its caches expire.
		waitEvent(t, "the other mount sees the renamed file", func() error {
			_, err := os.Stat(filepath.Join(mnt2, "ns/a/b/c/d/moved11"))
			return err
		})
		if err := os.RemoveAll(d); err != nil {
			t.Fatal("rm -rf:", err)
		}
	})

	t.Run("readdir", func(t *testing.T) {
		d := filepath.Join(mnt, "many")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		var want []string
		for i := 0; i < 600; i++ {
			n := fmt.Sprintf("entry-with-a-longish-name-%04d", i)
			want = append(want, n)
			if err := os.WriteFile(filepath.Join(d, n), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// Small reads: many READDIR(PLUS) requests resumed from cookies.
		f, err := os.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for calls := 0; ; calls++ {
			if calls > 1000 {
				t.Fatalf("readdir never reached EOF: %d names after %d calls", len(got), calls)
			}
			names, err := f.Readdirnames(7)
			got = append(got, names...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Fatalf("readdir: %d names, want %d", len(got), len(want))
		}
		ents, err := os.ReadDir(d)
		if err != nil || len(ents) != 600 || ents[0].Type() != 0 {
			t.Fatalf("ReadDir: %d %v", len(ents), err)
		}
		// rewinddir after a partial read lists everything again (the
		// mount's per-handle buffer must not serve a stale position).
		f, err = os.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if part, err := f.Readdirnames(50); err != nil || len(part) != 50 {
			t.Fatalf("partial read: %d %v", len(part), err)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		again, err := f.Readdirnames(-1)
		sort.Strings(again)
		if err != nil || !slices.Equal(again, want) {
			t.Fatalf("after rewind: %d names, %v", len(again), err)
		}
	})

	t.Run("symlinks", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(mnt, "target"), []byte("through the link"), 0o644); err != nil {
			t.Fatal(err)
		}
		l := filepath.Join(mnt, "link")
		if err := os.Symlink("target", l); err != nil {
			t.Fatal(err)
		}
		if got, err := os.Readlink(l); err != nil || got != "target" {
			t.Fatalf("readlink: %q %v", got, err)
		}
		if st, err := os.Lstat(l); err != nil || st.Mode()&os.ModeSymlink == 0 || st.Size() != 6 {
			t.Fatalf("lstat: %v %v", st, err)
		}
		if b, err := os.ReadFile(l); err != nil || string(b) != "through the link" {
			t.Fatalf("read through the link: %q %v", b, err)
		}
		if err := os.Symlink("loop", filepath.Join(mnt, "loop")); err != nil {
			t.Fatal(err)
		}
		wantErrno(t, "symlink loop", func() error { _, err := os.Stat(filepath.Join(mnt, "loop")); return err }(), syscall.ELOOP)
		wantErrno(t, "symlink exists", os.Symlink("x", l), syscall.EEXIST)
	})

	t.Run("attributes", func(t *testing.T) {
		p := filepath.Join(mnt, "attrs")
		if err := os.WriteFile(p, []byte("attributes"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o4751); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 1234, 5678); err != nil {
			t.Fatal(err)
		}
		st := lstat(t, p)
		// chown clears set-user-id.
		if st.Mode&0o7777 != 0o751 || st.Uid != 1234 || st.Gid != 5678 {
			t.Fatalf("mode %o uid %d gid %d", st.Mode, st.Uid, st.Gid)
		}
		at, mt := time.Unix(1000000000, 123456789), time.Unix(1500000000, 987654321)
		if err := os.Chtimes(p, at, mt); err != nil {
			t.Fatal(err)
		}
		st = lstat(t, p)
		if st.Atim != syscall.NsecToTimespec(at.UnixNano()) || st.Mtim != syscall.NsecToTimespec(mt.UnixNano()) {
			t.Fatalf("times %v %v", st.Atim, st.Mtim)
		}
		// UTIME_OMIT keeps atime; UTIME_NOW sets mtime to now.
		const utimeNow, utimeOmit = unix.UTIME_NOW, unix.UTIME_OMIT
		before := time.Now().Add(-time.Second)
		if err := syscall.UtimesNano(p, []syscall.Timespec{{Nsec: utimeOmit}, {Nsec: utimeNow}}); err != nil {
			t.Fatal(err)
		}
		st = lstat(t, p)
		if st.Atim != syscall.NsecToTimespec(at.UnixNano()) || time.Unix(st.Mtim.Unix()).Before(before) {
			t.Fatalf("after OMIT/NOW: atime %v mtime %v", st.Atim, st.Mtim)
		}
		if st.Blksize != 65536 || st.Blocks == 0 {
			t.Fatalf("blksize %d blocks %d", st.Blksize, st.Blocks)
		}
		// Truncation: down inside a block, then up again, reads zeros past
		// the cut (the island keeps the old bytes of that block).
		big := randBytes(r, 200000)
		if err := os.WriteFile(p, big, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, 70000); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, 150000); err != nil {
			t.Fatal(err)
		}
		want := append(slices.Clone(big[:70000]), make([]byte, 80000)...)
		for _, m := range []string{mnt, mnt2} {
			if got, err := os.ReadFile(filepath.Join(m, "attrs")); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s after truncate down and up: %d bytes, equal %v, %v", m, len(got), bytes.Equal(got, want), err)
			}
		}
		// O_TRUNC truncates.
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if st := lstat(t, p); st.Size != 0 {
			t.Fatalf("size after O_TRUNC: %d", st.Size)
		}
	})

	t.Run("xattrs", func(t *testing.T) {
		p := filepath.Join(mnt, "xa")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		val := []byte("a value of 24 characters")
		if err := syscall.Setxattr(p, "user.test", val, 0); err != nil {
			t.Fatal(err)
		}
		if n, err := syscall.Getxattr(p, "user.test", nil); err != nil || n != len(val) {
			t.Fatalf("size probe: %d %v", n, err)
		}
		_, err := syscall.Getxattr(p, "user.test", make([]byte, 3))
		wantErrno(t, "getxattr small buffer", err, syscall.ERANGE)
		buf := make([]byte, 64)
		if n, err := syscall.Getxattr(p, "user.test", buf); err != nil || !bytes.Equal(buf[:n], val) {
			t.Fatalf("getxattr: %q %v", buf[:n], err)
		}
		wantErrno(t, "XATTR_CREATE existing", syscall.Setxattr(p, "user.test", val, 1), syscall.EEXIST)
		wantErrno(t, "XATTR_REPLACE missing", syscall.Setxattr(p, "user.other", val, 2), syscall.ENODATA)
		n, err := syscall.Listxattr(p, nil)
		if err != nil || n != len("user.test\x00") {
			t.Fatalf("listxattr probe: %d %v", n, err)
		}
		_, err = syscall.Listxattr(p, make([]byte, 2))
		wantErrno(t, "listxattr small buffer", err, syscall.ERANGE)
		if n, err := syscall.Listxattr(p, buf); err != nil || string(buf[:n]) != "user.test\x00" {
			t.Fatalf("listxattr: %q %v", buf[:n], err)
		}
		if err := syscall.Removexattr(p, "user.test"); err != nil {
			t.Fatal(err)
		}
		_, err = syscall.Getxattr(p, "user.test", buf)
		wantErrno(t, "getxattr removed", err, syscall.ENODATA)
		// Namespaces other than user. are not supported, alike for
		// getxattr and setxattr (ls -l then stops asking for labels
		// and ACLs). The kernel checks the values of security.capability
		// and ACLs itself: EINVAL for these before they reach the mount.
		for _, name := range []string{"security.capability", "security.selinux", "system.posix_acl_access", "system.posix_acl_default", "trusted.x"} {
			_, err = syscall.Getxattr(p, name, buf)
			wantErrno(t, "getxattr "+name, err, syscall.EOPNOTSUPP)
		}
		for _, name := range []string{"security.selinux", "trusted.x"} {
			wantErrno(t, "setxattr "+name, syscall.Setxattr(p, name, val, 0), syscall.EOPNOTSUPP)
		}

		// user.atoll.policy: a directory's policy is inherited by new
		// files; set on a file, it governs data written afterwards.
		d := filepath.Join(mnt, "mirrored")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		wantErrno(t, "bad policy", syscall.Setxattr(d, fusefs.PolicyXattr, []byte("raid99"), 0), syscall.EINVAL)
		if err := syscall.Setxattr(d, fusefs.PolicyXattr, []byte("mirror:3"), 0); err != nil {
			t.Fatal(err)
		}
		data := randBytes(r, 300000)
		if err := os.WriteFile(filepath.Join(d, "f"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if got := getxattr(t, filepath.Join(d, "f"), fusefs.PolicyXattr); got != "mirror:3" {
			t.Fatalf("inherited policy %q", got)
		}
		fp := filepath.Join(mnt, "repolicy")
		f, err := os.Create(fp)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data[:100000]); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Setxattr(fp, fusefs.PolicyXattr, []byte("none"), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data[100000:]); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if got := getxattr(t, fp, fusefs.PolicyXattr); got != "none" {
			t.Fatalf("file policy %q", got)
		}
		for _, p := range []string{filepath.Join(mnt2, "mirrored/f"), filepath.Join(mnt2, "repolicy")} {
			if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s: %d bytes, %v", p, len(got), err)
			}
		}
	})

	t.Run("statfs", func(t *testing.T) {
		var st syscall.Statfs_t
		if err := syscall.Statfs(mnt, &st); err != nil {
			t.Fatal(err)
		}
		if st.Bsize != 65536 || st.Namelen != 255 || st.Blocks == 0 || st.Bfree > st.Blocks || st.Files == 0 {
			t.Fatalf("statfs: %+v", st)
		}
	})

	t.Run("openUnlinked", func(t *testing.T) {
		p := filepath.Join(mnt, "doomed")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		data := randBytes(r, 100000)
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stat after unlink: %v", err)
		}
		if _, err := f.WriteAt([]byte("more"), 100000); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 100004)
		if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got[:100000], data) || string(got[100000:]) != "more" {
			t.Fatalf("read unlinked open file: %v", err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 0 {
			t.Fatalf("fstat of unlinked file: nlink %d %v", st.Nlink, err)
		}
		f.Close()
		// RELEASE is asynchronous: the hidden name goes once it is handled.
		waitEvent(t, "the unlinked file's hidden name removed after close", func() error {
			ents, err := os.ReadDir(mnt)
			if err != nil {
				return err
			}
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".atoll-open-") {
					return fmt.Errorf("left behind: %s", e.Name())
				}
			}
			return nil
		})
	})

	t.Run("beyond2GiB", func(t *testing.T) {
		// Regression: blocks past 512 MiB (8192 blocks) were missing from
		// the block map a reader got and read as zeros.
		p := filepath.Join(mnt, "sparse")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		const off = 2<<30 + 1
		if _, err := f.WriteAt([]byte("data"), off); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{mnt, mnt2} {
			f, err := os.Open(filepath.Join(m, "sparse"))
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 4)
			_, err = f.ReadAt(b, off)
			f.Close()
			if err != nil || string(b) != "data" {
				t.Fatalf("%s: read %q at 2 GiB+1: %v", m, b, err)
			}
		}
		os.Remove(p)
	})

	t.Run("closeToOpen", func(t *testing.T) {
		a, b := filepath.Join(mnt, "c2o"), filepath.Join(mnt2, "c2o")
		v1 := randBytes(r, 3<<20)
		if err := os.WriteFile(a, v1, 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(b); err != nil || !bytes.Equal(got, v1) {
			t.Fatalf("other mount after close: %v", err)
		}
		// A reader holding the file open in mount 2 while mount 1 rewrites
		// it sees the new data at its next open.
		hold, err := os.Open(b)
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Close()
		f, err := os.OpenFile(a, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		patch := randBytes(r, 200000)
		if _, err := f.WriteAt(patch, 1<<20+3); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		copy(v1[1<<20+3:], patch)
		if got, err := os.ReadFile(b); err != nil || !bytes.Equal(got, v1) {
			t.Fatalf("other mount after rewrite: equal %v, %v", bytes.Equal(got, v1), err)
		}
		// Two descriptors in one mount share unflushed writes.
		w, err := os.OpenFile(a, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		rd, err := os.Open(a)
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		if _, err := w.WriteAt([]byte("unflushed"), 17); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 9)
		if _, err := rd.ReadAt(got, 17); err != nil || string(got) != "unflushed" {
			t.Fatalf("second descriptor: %q %v", got, err)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rr := rand.New(rand.NewPCG(uint64(w), 99))
				d := filepath.Join(mnt, fmt.Sprintf("conc%d", w))
				if err := os.MkdirAll(d, 0o755); err != nil {
					errs <- err
					return
				}
				for i := 0; i < 20; i++ {
					data := randBytes(rr, rr.IntN(100000))
					p := filepath.Join(d, fmt.Sprintf("f%d", i))
					if err := os.WriteFile(p, data, 0o644); err != nil {
						errs <- err
						return
					}
					if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
						errs <- fmt.Errorf("%s: %v", p, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// TestFUSEFsyncDurable: data fsynced through a mount survives the crash
// of the mount's client side (unflushed writes after it are lost), and a
// new mount reads exactly the fsynced bytes.
func TestFUSEFsyncDurable(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 3)
	m, mnt := mountFS(t, fc.newFS(t))
	r := rand.New(rand.NewPCG(3, 3))
	synced := randBytes(r, 5<<20+12345)
	f, err := os.Create(filepath.Join(mnt, "durable"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(synced); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// Written but never synced: the crash drops it.
	if _, err := f.WriteAt(randBytes(r, 4<<20), 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	f.Close() // fails (the mount is gone); nothing is written back

	_, mnt2 := mountFS(t, fc.newFS(t))
	got, err := os.ReadFile(filepath.Join(mnt2, "durable"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, synced) {
		t.Fatalf("after the crash: %d bytes, want the %d fsynced ones (equal %v)", len(got), len(synced), bytes.Equal(got, synced))
	}
}

// TestFUSEMountErrors: clear errors for a missing mountpoint and for one
// that is already mounted.
func TestFUSEMountErrors(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 1, 1)
	fs := fc.newFS(t)
	_, err := fusefs.New(fusefs.Config{FS: fs, Mountpoint: filepath.Join(t.TempDir(), "missing"), Logger: quietLogger()})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("does not exist")) {
		t.Errorf("missing mountpoint: %v", err)
	}
	m, mnt := mountFS(t, fs)
	_, err = fusefs.New(fusefs.Config{FS: fs, Mountpoint: mnt, Logger: quietLogger()})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("already a mountpoint")) {
		t.Errorf("mounted twice: %v", err)
	}
	// Unmount on context cancel (Run).
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	m2, err := fusefs.New(fusefs.Config{FS: fs, Mountpoint: mnt, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m2.Run(ctx) }()
	waitEvent(t, "Run mounts", func() error {
		select {
		case err := <-done:
			t.Fatalf("Run returned before mounting: %v", err)
		default:
		}
		var st syscall.Statfs_t
		if err := syscall.Statfs(mnt, &st); err != nil {
			return err
		}
		if st.Type != 0x65735546 { // FUSE_SUPER_MAGIC
			return fmt.Errorf("file system type %#x, not FUSE", st.Type)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := fusefs.CheckMountpoint(mnt); err != nil {
		t.Fatalf("still mounted after cancel: %v", err)
	}
}

func lstat(t *testing.T, p string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func getxattr(t *testing.T, p, name string) string {
	t.Helper()
	buf := make([]byte, 256)
	n, err := syscall.Getxattr(p, name, buf)
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", p, name, err)
	}
	return string(buf[:n])
}

func renameat2(from, to string, flags uint) error {
	return unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, flags)
}

// Regression tests for the fixes the FUSE work needed outside fusefs; they
// run without FUSE.

// TestFSReadBeyond512MiB: an island answers at most 8192 blocks per
// ReadMap and the client pages; blocks past 512 MiB used to read as zeros.
func TestFSReadBeyond512MiB(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	fs := fc.newFS(t)
	ctx := context.Background()
	// 4 KiB blocks keep the dense part small.
	d, err := fs.MkdirAll(ctx, root, "/small", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.SetXattr(ctx, root, d.Ino, "user.atoll.policy", []byte("ec:4+1,block=4KiB"), 0); err != nil {
		t.Fatal(err)
	}
	fh, err := fs.CreateFile(ctx, root, "/small/sparse", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// A dense map (more than 8192 blocks) and a far block.
	const bs = 4 << 10
	dense := randBytes(rand.New(rand.NewPCG(1, 2)), 16)
	for i := 0; i < 9000; i++ {
		if _, err := fh.WriteAt(ctx, dense, int64(i)*bs+5); err != nil {
			t.Fatal(err)
		}
	}
	const far = 3<<30 + 7
	if _, err := fh.WriteAt(ctx, []byte("far"), far); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(ctx); err != nil {
		t.Fatal(err)
	}
	other := fc.newFS(t)
	rh, err := other.OpenPath(ctx, root, "/small/sparse")
	if err != nil {
		t.Fatal(err)
	}
	if a := rh.Attr(); a.BlockSize != bs {
		t.Fatalf("block size %d", a.BlockSize)
	}
	b := make([]byte, 16)
	for _, i := range []int{0, 8191, 8192, 8999} {
		if _, err := rh.ReadAt(ctx, b, int64(i)*bs+5); err != nil || !bytes.Equal(b, dense) {
			t.Fatalf("block %d: %q %v", i, b, err)
		}
	}
	if _, err := rh.ReadAt(ctx, b[:3], far); err != nil || string(b[:3]) != "far" {
		t.Fatalf("at 3 GiB: %q %v", b[:3], err)
	}
}

// TestFSConcurrentFlushSharedLog: Files of one client share a log per
// policy; flushing them concurrently must neither race (-race flagged the
// log's WaitGroup) nor lose data.
func TestFSConcurrentFlushSharedLog(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	fs := fc.newFS(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 5))
			for i := 0; i < 8; i++ {
				p := fmt.Sprintf("/w%d-%d", w, i)
				data := randBytes(r, 20000+r.IntN(200000))
				if err := fs.WriteFile(ctx, root, p, data, 0o644); err != nil {
					errs <- err
					return
				}
				got, err := fs.ReadFile(ctx, root, p)
				if err != nil || !bytes.Equal(got, data) {
					errs <- fmt.Errorf("%s: %v", p, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A storage server dies in the middle of a dd onto the mount: dd finishes
// (conv=fsync) and the file reads back exactly, through the mount and
// through a fresh client.
func TestFUSEStorageDiesDuringDD(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 1)
	_, mnt := mountFS(t, fc.newFS(t))
	src := filepath.Join(t.TempDir(), "src")
	data := randBytes(rand.New(rand.NewPCG(9, 9)), 96<<20)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(mnt, "dd-out")
	cmd := exec.Command("dd", "if="+src, "of="+dst, "bs=1M", "conv=fsync")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill slot 2 once dd has written something.
	waitEvent(t, "dd writes 8 MiB", func() error {
		st, err := os.Stat(dst)
		if err != nil {
			return err
		}
		if st.Size() < 8<<20 {
			return fmt.Errorf("%d bytes written", st.Size())
		}
		return nil
	})
	fc.storage[2].stop()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("dd failed with a storage server killed: %v\n%s", err, out.String())
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read through the mount: %d bytes, %v, equal %v", len(got), err, bytes.Equal(got, data))
	}
	got, err = fc.newFS(t).ReadFile(context.Background(), root, "/dd-out")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read through a fresh client: %d bytes, %v, equal %v", len(got), err, bytes.Equal(got, data))
	}
}

// TestFUSELazyCloseSurvivesIslandKill9 kills the island with SIGKILL right
// after files were written through a mount that closes lazily (as `atoll
// mount` does). Every file that was fsynced — before close (its commit is
// synced), or after a lazy close (the island is synced) — reads back
// exactly; a file only closed may be gone but is never torn; fsck is clean.
// A file whose lazily committed data the crash lost fails its next fsync
// with EIO (once), and the unmount's final sync reports such a file too;
// what was closed after the last restart is durable once the unmount
// returns.
func TestFUSELazyCloseSurvivesIslandKill9(t *testing.T) {
	fuseUsable(t)
	// The island's own syncer stays out of the way: what survives is
	// what fsync made durable.
	cl, _ := startDev(t, 5, 1, 0, func(c *devcluster.Config) { c.CleanInterval, c.LazySync = -1, time.Minute })
	ctx := context.Background()
	conn := dialDev(t, cl)
	m, mnt := mountFS(t, conn.FS)

	r := newRand(91)
	durable := map[string][]byte{}
	maybe := map[string][]byte{}
	for i := 0; i < 12; i++ { // ends with files only closed
		size := []int{100, 3000, 20000, 1<<20 + 77}[i%4] // inline and striped
		data := randBytes(r, size)
		name := fmt.Sprintf("/f%02d", i)
		path := filepath.Join(mnt, name)
		switch i % 3 {
		case 0: // fsync before close: a synced commit
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close() // before the mount goes, should the test fail
			if _, err := f.Write(data); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			durable[name] = data
		case 1: // closed lazily, then reopened and fsynced: an island sync
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			f.Close()
			durable[name] = data
		default: // only closed
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			maybe[name] = data
		}
	}
	// Created durably (O_EXCL), then written and closed lazily: the crash
	// takes the data but not the file.
	victim := filepath.Join(mnt, "victim")
	vf, err := os.OpenFile(victim, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// fsync sends the create the mount kept back (write-behind), alone;
	// kept back, it would carry the data and be synced with it.
	if err := vf.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := vf.Write([]byte("lost with the island")); err != nil {
		t.Fatal(err)
	}
	if err := vf.Close(); err != nil {
		t.Fatal(err)
	}
	island := cl.Child("island1")
	if island == nil {
		t.Fatal("no child island1")
	}
	island.Kill()
	<-island.Done()
	if _, err := cl.Restart(ctx, "island1"); err != nil {
		t.Fatal(err)
	}

	fresh, err := connect.Dial(ctx, []string{cl.Manager}, testKey, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	checkFiles(t, fresh.FS, durable)
	lost := 0
	for name, want := range maybe {
		got, err := fresh.FS.ReadFile(ctx, root, name)
		switch {
		case errors.Is(err, metawire.ErrNotFound):
			lost++
		case err != nil:
			t.Fatalf("%s: %v", name, err)
		case !bytes.Equal(got, want) && len(got) != 0:
			// Created but its commit lost: empty is allowed, torn is not.
			t.Fatalf("%s: %d bytes after the crash, neither empty nor the %d written", name, len(got), len(want))
		}
	}
	t.Logf("%d of %d files only closed were lost with the island", lost, len(maybe))
	rep, err := fsck.Run(ctx, fresh.View.Map(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() {
		t.Fatalf("fsck: %v", rep.Problems())
	}
	// The mount goes on working with the restarted island.
	if got, err := os.ReadFile(filepath.Join(mnt, "f00")); err != nil || !bytes.Equal(got, durable["/f00"]) {
		t.Fatalf("read through the mount after the restart: %d bytes, %v", len(got), err)
	}
	// fsync of the file whose close the crash undid reports it, once.
	vf, err = os.OpenFile(victim, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := vf.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync of a file whose lazily committed data an island crash lost: %v, want EIO", err)
	}
	if err := vf.Sync(); err != nil {
		t.Fatalf("second fsync: %v", err)
	}
	vf.Close()

	// A file only closed, then another crash: the unmount reports it.
	if err := os.WriteFile(filepath.Join(mnt, "late"), []byte("late"), 0o644); err != nil {
		t.Fatal(err)
	}
	island = cl.Child("island1")
	island.Kill()
	<-island.Done()
	if _, err := cl.Restart(ctx, "island1"); err != nil {
		t.Fatal(err)
	}
	// The unmount makes everything closed since durable.
	closed := map[string][]byte{}
	for i := 0; i < 5; i++ {
		name := fmt.Sprintf("/u%d", i)
		closed[name] = randBytes(r, 1000+i*7000)
		if err := os.WriteFile(filepath.Join(mnt, name), closed[name], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Unmount(); !errors.Is(err, metawire.ErrIO) || !strings.Contains(err.Error(), "may be lost") {
		t.Fatalf("unmount after the island lost a file only closed: %v, want it reported", err)
	}
	island = cl.Child("island1")
	island.Kill()
	<-island.Done()
	if _, err := cl.Restart(ctx, "island1"); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, fresh.FS, closed)
}

// TestFUSESmallFileIslandRoundTrips counts the island requests a small
// file written through the mount costs (os.WriteFile: the kernel's
// LOOKUP, CREATE, WRITE, FLUSH, RELEASE): one create, sent at close with
// the data (write-behind: the mount answered the create itself under its
// exclusive lease, with an inode id reserved beforehand); no commit, no
// getattr, no sync (close is lazy; fsync is not asked), and no lookup of
// the new name: the mount made the directory, so the first missing name
// lists it (one leased read: the lease, the empty listing and the
// directory's attributes), and the mount answers the others itself. Ids
// come in runs of 32: one reservation for 20 files.
func TestFUSESmallFileIslandRoundTrips(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 1)
	_, mnt := mountFS(t, fc.newFS(t))
	dir := filepath.Join(mnt, "small")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ops := []string{"lookup", "create", "commit", "getattr", "sync", "readmap", "lease", "readdir", "allocino"}
	since := fc.islandOpsSince(t, ops...)
	const n = 20
	for i := 0; i < n; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), bytes.Repeat([]byte{byte(i)}, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]float64{"lease": 1, "create": n, "allocino": 1}
	got := since()
	for _, op := range ops {
		if got := got[op]; got != want[op] {
			t.Errorf("%d small files: %v island %s requests, want %v", n, got, op, want[op])
		}
	}
	for i := 0; i < n; i++ {
		got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("f%d", i)))
		if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte(i)}, 4096)) {
			t.Fatalf("f%d: %d bytes, %v", i, len(got), err)
		}
	}
}

// TestFUSETarLikeAttrsCostNoReopen: a file written and then given its
// owner, mode and times on the open descriptor before close (what tar x
// does for every file) costs one create per file (the mount holds the
// directory's lease exclusively, keeps the create back and sends it at
// close with the data and the three changes merged) and nothing more: no
// re-open of the file behind it (a getattr and, for a small file, a
// readmap per call before), and the attributes and bytes read back are
// the ones set.
func TestFUSETarLikeAttrsCostNoReopen(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 1)
	_, mnt := mountFS(t, fc.newFS(t))
	dir := filepath.Join(mnt, "tar")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	since := fc.islandOpsSince(t, "setattr", "getattr", "readmap", "create", "commit")
	const n = 10
	mtime := time.Date(2020, 2, 29, 12, 0, 0, 123456789, time.UTC)
	for i := 0; i < n; i++ {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(bytes.Repeat([]byte{byte(i)}, 3000)); err != nil {
			t.Fatal(err)
		}
		if err := f.Chown(1000+i, 2000+i); err != nil {
			t.Fatal(err)
		}
		if err := f.Chmod(0o640); err != nil {
			t.Fatal(err)
		}
		ts := []unix.Timespec{unix.NsecToTimespec(mtime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, f.Name(), ts, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// fsync of the directory sends what the mount kept back.
	if d, err := os.Open(dir); err != nil {
		t.Fatal(err)
	} else {
		err := d.Sync()
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	ops := since()
	// Write-behind: each file's create was kept back, and its data and
	// its three attribute changes went with it, as one request.
	if got := ops["setattr"] + ops["commit"]; got != 0 {
		t.Errorf("%d files given owner, mode and times: %v island setattr and commit requests, want none (merged into their creates)", n, got)
	}
	if got := ops["create"]; got != n {
		t.Errorf("%d files: %v island create requests, want %d", n, got, n)
	}
	// The kernel asks for attributes once a file (its write invalidated
	// them); a re-open asked once per setattr on top.
	if got := ops["getattr"]; got > n {
		t.Errorf("%d files: %v island getattr requests, want at most %d (one per file, the kernel's)", n, got, n)
	}
	if got := ops["readmap"]; got != 0 {
		t.Errorf("%d files: %v island readmap requests, want none", n, got)
	}
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, fmt.Sprintf("f%d", i))
		st := lstat(t, p)
		if st.Uid != uint32(1000+i) || st.Gid != uint32(2000+i) || st.Mode&0o7777 != 0o640 || st.Mtim.Nano() != mtime.UnixNano() || st.Size != 3000 {
			t.Errorf("f%d: uid %d gid %d mode %o mtime %d size %d, want %d %d 640 %d 3000", i, st.Uid, st.Gid, st.Mode&0o7777, st.Mtim.Nano(), st.Size, 1000+i, 2000+i, mtime.UnixNano())
		}
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte(i)}, 3000)) {
			t.Errorf("f%d: read %d bytes (%v)", i, len(got), err)
		}
	}
}

// searchableToAll lets other users reach the mountpoint mnt (test
// directories are 0700).
func searchableToAll(t *testing.T, mnt string) {
	t.Helper()
	for d := filepath.Dir(mnt); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFUSEKillsSetIDBits: with FUSE_HANDLE_KILLPRIV_V2 the kernel leaves
// clearing set-user-id and set-group-id bits to the file system: a write
// and a truncation by an unprivileged user and a chown clear them (the
// set-group-id bit because group execute is set), a write by root does
// not, and a chown costs no getattr.
func TestFUSEKillsSetIDBits(t *testing.T) {
	fuseUsable(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testenv.Missing(t, "setpriv (util-linux) runs commands as another user: %v", err)
	}
	fc := startFSCluster(t, 5, 1)
	_, mnt := mountFS(t, fc.newFS(t))
	searchableToAll(t, mnt)
	p := filepath.Join(mnt, "setid")
	if err := os.WriteFile(p, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	setid := func() {
		t.Helper()
		if err := unix.Chmod(p, 0o6777); err != nil { // os.Chmod drops 0o6000
			t.Fatal(err)
		}
		if m := lstat(t, p).Mode & 0o7777; m != 0o6777 {
			t.Fatalf("mode after chmod 6777: %o", m)
		}
	}
	asUser := func(args ...string) {
		t.Helper()
		cmd := exec.Command(setpriv, append([]string{"--reuid=1000", "--regid=1000", "--clear-groups"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v as uid 1000: %v: %s", args, err, out)
		}
	}
	wantMode := func(what string, want uint32) {
		t.Helper()
		if m := lstat(t, p).Mode & 0o7777; m != want {
			t.Errorf("after %s: mode %o, want %o", what, m, want)
		}
	}

	setid()
	asUser("dd", "of="+p, "bs=1", "seek=3", "conv=notrunc", "status=none", "if=/dev/zero", "count=2")
	wantMode("a write by uid 1000", 0o777)

	setid()
	asUser("truncate", "-s", "5", p)
	wantMode("a truncation by uid 1000", 0o777)

	setid()
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("xy"), 1); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	wantMode("a write by root", 0o6777)

	since := fc.islandOpsSince(t, "getattr")
	if err := os.Chown(p, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if got := since()["getattr"]; got != 0 {
		t.Errorf("chown cost %v island getattr requests, want none", got)
	}
	wantMode("chown", 0o777)
	if st := lstat(t, p); st.Uid != 1000 || st.Gid != 1000 {
		t.Errorf("after chown 1000:1000: %d:%d", st.Uid, st.Gid)
	}
}

// A process blocked on the mount in a change (mkdir) whose island hangs
// (SIGSTOP: its connections stay open, nothing answers) can be killed: the
// request gives up InterruptGrace after the kernel interrupts it, instead
// of holding the process until the island answers. A process not
// interrupted keeps waiting and completes once the island resumes, and
// the mount serves on.
func TestFUSEKilledWhileIslandHangs(t *testing.T) {
	fuseUsable(t)
	cl, _ := startDev(t, 5, 1, 0, nil)
	conn := dialDev(t, cl)
	_, mnt := mountFSWith(t, conn.FS, func(c *fusefs.Config) { c.InterruptGrace = time.Second })
	if err := os.Mkdir(filepath.Join(mnt, "before"), 0o755); err != nil {
		t.Fatal(err)
	}
	island := cl.Child("island1")
	if island == nil {
		t.Fatal("no child island1")
	}
	if err := syscall.Kill(island.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(island.PID(), syscall.SIGCONT)
		}
	}
	t.Cleanup(resume) // before the mount and the cluster go

	start := func(name string) (*exec.Cmd, chan error) {
		cmd := exec.Command("mkdir", filepath.Join(mnt, name))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		return cmd, done
	}
	// Different parent directories: mkdir holds its parent's inode lock,
	// which SIGKILL cannot break, so a victim queued behind the patient
	// in one directory would wait for the island however it is killed.
	victim, victimDone := start(filepath.Join("before", "killed"))
	patient, patientDone := start("patient")
	// Both are blocked in mkdir(2) on the mount (waiting for the island)
	// before the victim is killed.
	for _, p := range []struct {
		cmd  *exec.Cmd
		done chan error
	}{{victim, victimDone}, {patient, patientDone}} {
		waitEvent(t, "mkdir blocked on the mount", func() error {
			select {
			case err := <-p.done:
				t.Fatalf("mkdir returned while its island is stopped: %v", err)
			default:
			}
			return inMkdir(p.cmd.Process.Pid)
		})
	}
	if err := victim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-victimDone:
	case <-time.After(30 * time.Second):
		t.Fatal("a process killed while blocked on a hung island did not exit")
	}
	select {
	case err := <-patientDone:
		t.Fatalf("an uninterrupted mkdir returned while its island is stopped: %v", err)
	default:
	}
	resume()
	select {
	case err := <-patientDone:
		if err != nil {
			t.Fatalf("mkdir after the island resumed: %v", err)
		}
	case <-time.After(60 * time.Second):
		_ = patient.Process.Kill()
		t.Fatal("mkdir did not complete after the island resumed")
	}
	if st, err := os.Stat(filepath.Join(mnt, "patient")); err != nil || !st.IsDir() {
		t.Fatalf("patient: %v", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "after"), []byte("served on"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "after")); err != nil || string(b) != "served on" {
		t.Fatalf("after: %q %v", b, err)
	}
}

// A file created with its data in one request (CreateWithData, as atoll cp
// sends small files) is an ordinary file on the mount: it reads back,
// grows past the inline maximum (moving to the storage servers), and the
// writing client then reads what the mount wrote.
func TestFUSECreatedWithDataGrows(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 1)
	ctx := context.Background()
	lib := fc.newFS(t)
	_, mnt := mountFS(t, fc.newFS(t))
	r := newRand(17)
	head := randBytes(r, 3000)
	if err := lib.WriteFile(ctx, root, "/cwd", head, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(mnt, "cwd")
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, head) {
		t.Fatalf("created with data, read through the mount: %d bytes, %v", len(got), err)
	}
	tail := randBytes(r, 40000)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(tail); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte(nil), head...), tail...)
	got, err := lib.ReadFile(ctx, root, "/cwd")
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after an append through the mount: %d bytes (%v), want %d", len(got), err, len(want))
	}
	if a, err := lib.Resolve(ctx, root, "/cwd"); err != nil || a.Inline || a.Size != uint64(len(want)) {
		t.Fatalf("attributes after growing past the inline maximum: %+v %v", a, err)
	}
}

// inMkdir returns nil once process pid is blocked inside mkdir(2) or
// mkdirat(2), as /proc/PID/syscall tells.
func inMkdir(pid int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
	if err != nil {
		return err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return fmt.Errorf("/proc/%d/syscall is empty", pid)
	}
	nrs := []string{strconv.Itoa(unix.SYS_MKDIRAT)}
	if runtime.GOARCH == "amd64" {
		nrs = append(nrs, "83") // mkdir(2), absent on newer architectures
	}
	if !slices.Contains(nrs, f[0]) {
		return fmt.Errorf("process %d is in system call %q, not mkdir", pid, f[0])
	}
	return nil
}

// TestFUSEParallelCreatesKeepTheirLeases: eight writers creating small
// files in one directory cost the islands what one writer does per file
// (a create and a commit): one client's concurrent changes of different
// names do not spoil each other's leased answers, so no writer's new name
// needs a lookup.
func TestFUSEParallelCreatesKeepTheirLeases(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 1)
	_, mnt := mountFS(t, fc.newFS(t))
	dir := filepath.Join(mnt, "par")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ops := []string{"lookup", "create", "commit", "getattr", "readmap", "lease", "readdir"}
	since := fc.islandOpsSince(t, ops...)
	const writers, n = 8, 30
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("w%d-%d", w, i)), bytes.Repeat([]byte{byte(w + i)}, 4096), 0o644); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got := since()
	// Each file's create carries its data (write-behind); a create sent
	// before its file's close (the flush timer) leaves a commit.
	want := map[string]float64{"lease": 2, "create": writers * n, "commit": 0}
	for _, op := range ops {
		// A writer's first lookup can race the listing that completes
		// the directory: a few leased reads more are fine, one per file
		// is what this guards against.
		if g, w := got[op], want[op]; g != w && !(op == "lease" && g <= 2+writers) && !(op == "commit" && g <= writers) {
			t.Errorf("%d writers x %d files: %v island %s requests, want %v", writers, n, g, op, w)
		}
	}
	for w := 0; w < writers; w++ {
		for i := 0; i < n; i += 7 {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("w%d-%d", w, i)))
			if err != nil || !bytes.Equal(b, bytes.Repeat([]byte{byte(w + i)}, 4096)) {
				t.Fatalf("w%d-%d: %d bytes, %v", w, i, len(b), err)
			}
		}
	}
}

// TestFUSEPrebornFiles: with --write-cache preborn a closed file's create
// and data stay in the mount (Sigma's preborn caching): 1,000 files
// created, written, closed and removed cost no island request at all;
// fsync sends a file at once; a second client listing the directory sees
// every file the mount has not removed, whole (the recall sends them
// first).
func TestFUSEPrebornFiles(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 1)
	fs := fc.newFS(t)
	_, mnt := mountFSWith(t, fs, func(c *fusefs.Config) {
		fs.SetPreborn(time.Minute) // the lease bounds it: renewed while in use
		c.WriteCache = fusefs.WritePreborn
	})
	dir := filepath.Join(mnt, "pre")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The first name looked up takes the directory's lease.
	if _, err := os.Stat(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	since := fc.islandOpsSince(t, "create", "commit", "unlink", "setattr")
	short0 := fs.CreatesShortLease()
	const n = 1000
	data := bytes.Repeat([]byte("preborn "), 512)
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, fmt.Sprintf("tmp%04d", i))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	// None goes to the island, but for a create the client sends at once
	// because its exclusive lease had under a second left: a renewal by
	// poll that a loaded machine delays (CI: 1 of 1,000, with its commit
	// and unlink). At most 1 in 20 of those, or the lease is not kept.
	short := fs.CreatesShortLease() - short0
	if got := since(); got["create"] > float64(short) || got["commit"]+got["unlink"]+got["setattr"] > 2*float64(short) || short > n/20 {
		t.Fatalf("%d files created and removed in the window: island requests %v, want none but for the %d creates sent on a lease about to end (at most %d) (recalls %v, exclusive %v, breaks %d)", n, got, short, n/20, fc.islandMetric(t, "atoll_meta_lease_recalls_total"), fc.islandMetric(t, "atoll_meta_lease_exclusive_total"), fs.LeaseBreaks())
	}
	if c := fs.CreatesCancelled(); c != n-short {
		t.Fatalf("%d creates cancelled, want %d (%d sent on a short lease)", c, n-short, short)
	}
	// Files that stay.
	kept := map[string][]byte{}
	for i := 0; i < 20; i++ {
		name := fmt.Sprintf("keep%02d", i)
		kept[name] = bytes.Repeat([]byte{byte(i)}, 100+i*300)
		if err := os.WriteFile(filepath.Join(dir, name), kept[name], 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if got := since()["create"]; got != 0 {
		t.Fatalf("%v creates sent for closed files in the window, want 0", got)
	}
	f, err := os.OpenFile(filepath.Join(dir, "synced"), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("durable")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := since()["create"]; got == 0 {
		t.Fatal("fsync sent no create")
	}
	kept["synced"] = []byte("durable")
	// Another client: the recall sends everything kept first.
	other := fc.newFS(t)
	ctx := context.Background()
	for name, want := range kept {
		got, err := other.ReadFile(ctx, root, "/pre/"+name)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s through another client: %d bytes, %v", name, len(got), err)
		}
	}
	d, err := other.Resolve(ctx, root, "/pre")
	if err != nil {
		t.Fatal(err)
	}
	list, err := other.Readdir(ctx, root, d.Ino, 0, 0, false)
	if err != nil || len(list.Entries) != len(kept)+2 {
		t.Fatalf("another client lists %d entries (%v), want %d", len(list.Entries)-2, err, len(kept))
	}
}

// TestFUSEOpenDirectorySeesItsMountsChanges: a directory opened, then
// changed through the same mount (creates, a mkdir, an unlink, a rename
// in), then read and read again after rewinding, lists the changes as on
// a local disk. The mount had buffered the listing at open for the
// attribute timeout, and smbd, which opens a directory before it creates
// in it, listed 0 of 100 new files (smbtorture's smb2.dir.find).
func TestFUSEOpenDirectorySeesItsMountsChanges(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 3, 1)
	// Long cache timeouts: a stale listing would still be served when
	// the directory is read, however slow the creates.
	_, mnt := mountFSWith(t, fc.newFS(t), func(c *fusefs.Config) { c.AttrTTL, c.EntryTTL = time.Minute, time.Minute })
	dir := filepath.Join(mnt, "d")
	if err := os.Mkdir(filepath.Join(mnt, "elsewhere"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "elsewhere", "moved"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Opened new and empty, as smbd opens a directory it then fills.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.WriteFile(filepath.Join(dir, "old"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 100 {
		n := fmt.Sprintf("f%03d", i)
		nf, err := os.Create(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		nf.Close()
		want = append(want, n)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(mnt, "elsewhere", "moved"), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	want = append(want, "moved", "sub")
	slices.Sort(want)
	for _, when := range []string{"first read", "after rewinding"} {
		names, err := f.Readdirnames(-1)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(names)
		if !slices.Equal(names, want) {
			t.Fatalf("%s of a directory opened before its changes: %d names %v..., want %d", when, len(names), names[:min(5, len(names))], len(want))
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
	}
}
