package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/atoll-fs/atoll/internal/fsck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// TestFUSERenameExchange: renameat2(RENAME_EXCHANGE) swaps two names
// atomically, as on a local file system: files in one directory, a
// directory and a file across directories (the directory's ".." and the
// parents' link counts follow), seen the same through another mount;
// a missing name is ENOENT, a directory swapped into its own subtree
// EINVAL, NOREPLACE with EXCHANGE EINVAL, WHITEOUT (not supported)
// EINVAL as rename(2) answers an unsupported flag, and a sticky directory
// protects another user's entry.
func TestFUSERenameExchange(t *testing.T) {
	_, _, _, ma, mb := twoMounts(t)
	write := func(p, data string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	nlink := func(p string) uint64 {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return uint64(st.Nlink)
	}
	const exchange, noreplace = 2, 1
	// Two files in one directory.
	if err := os.Mkdir(filepath.Join(ma, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(ma, "x", "a"), "A")
	write(filepath.Join(ma, "x", "b"), "B")
	if err := renameat2(filepath.Join(ma, "x", "a"), filepath.Join(ma, "x", "b"), exchange); err != nil {
		t.Fatal(err)
	}
	if a, b := read(filepath.Join(ma, "x", "a")), read(filepath.Join(ma, "x", "b")); a != "B" || b != "A" {
		t.Fatalf("after the exchange a=%q b=%q, want B and A", a, b)
	}
	// A directory (with a file in it) and a file, across directories.
	if err := os.MkdirAll(filepath.Join(ma, "p", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(ma, "p", "dir", "inner"), "in")
	if err := os.Mkdir(filepath.Join(ma, "q"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(ma, "q", "file"), "F")
	pLinks, qLinks := nlink(filepath.Join(ma, "p")), nlink(filepath.Join(ma, "q"))
	if err := renameat2(filepath.Join(ma, "p", "dir"), filepath.Join(ma, "q", "file"), exchange); err != nil {
		t.Fatal(err)
	}
	if got := read(filepath.Join(ma, "p", "dir")); got != "F" {
		t.Fatalf("p/dir holds %q, want the file", got)
	}
	if got := read(filepath.Join(ma, "q", "file", "inner")); got != "in" {
		t.Fatalf("q/file/inner holds %q", got)
	}
	if got := read(filepath.Join(ma, "q", "file", "..", "file", "inner")); got != "in" {
		t.Fatalf("q/file/../file/inner holds %q: the directory's .. did not follow", got)
	}
	if p, q := nlink(filepath.Join(ma, "p")), nlink(filepath.Join(ma, "q")); p != pLinks-1 || q != qLinks+1 {
		t.Fatalf("links of p %d, q %d; want %d and %d", p, q, pLinks-1, qLinks+1)
	}
	// The other mount sees the same.
	waitEvent(t, "the other mount sees the exchange", func() error {
		if _, err := os.Stat(filepath.Join(mb, "q", "file", "inner")); err != nil {
			return err
		}
		return nil
	})
	if got := read(filepath.Join(mb, "p", "dir")); got != "F" {
		t.Fatalf("through the other mount p/dir holds %q", got)
	}
	// Errors.
	wantErrno(t, "exchange with a missing name", renameat2(filepath.Join(ma, "x", "a"), filepath.Join(ma, "x", "none"), exchange), syscall.ENOENT)
	if err := os.Mkdir(filepath.Join(ma, "q", "file", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "exchange of a directory into its own subtree", renameat2(filepath.Join(ma, "q", "file"), filepath.Join(ma, "q", "file", "sub"), exchange), syscall.EINVAL)
	wantErrno(t, "RENAME_WHITEOUT (not supported)", renameat2(filepath.Join(ma, "x", "a"), filepath.Join(ma, "x", "c"), 4), syscall.EINVAL)
	wantErrno(t, "NOREPLACE with EXCHANGE", renameat2(filepath.Join(ma, "x", "a"), filepath.Join(ma, "x", "b"), exchange|noreplace), syscall.EINVAL)
	// Sticky: another user's entry stays.
	if err := os.Mkdir(filepath.Join(ma, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(filepath.Join(ma, "tmp"), 0o1777); err != nil { // os.Chmod drops 0o1000
		t.Fatal(err)
	}
	write(filepath.Join(ma, "tmp", "roots"), "r")
	searchableToAll(t, ma)
	setpriv, python := lookTool(t, "setpriv"), lookTool(t, "python3")
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		python = "/usr/bin/python3" // one nobody may run (not a shim under /root)
	}
	asNobody := func(script string, args ...string) error {
		cmd := exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", script}, args...)...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() > 0 && ee.ExitCode() < 200 {
			return syscall.Errno(ee.ExitCode())
		}
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return nil
	}
	if err := asNobody(`import sys; open(sys.argv[1], "w").write("m")`, filepath.Join(ma, "tmp", "mine")); err != nil {
		t.Fatal(err)
	}
	const exchangeAs = `import ctypes, sys
l = ctypes.CDLL(None, use_errno=True)
r = l.renameat2(-100, sys.argv[1].encode(), -100, sys.argv[2].encode(), 2)
sys.exit(ctypes.get_errno() if r else 0)`
	wantErrno(t, "exchange with root's entry in a sticky directory", asNobody(exchangeAs, filepath.Join(ma, "tmp", "mine"), filepath.Join(ma, "tmp", "roots")), syscall.EPERM)
	if err := asNobody(exchangeAs, filepath.Join(ma, "tmp", "mine"), filepath.Join(ma, "x", "a")); !errorsIsErrno(err, syscall.EACCES) {
		t.Fatalf("exchange into a directory nobody may write: %v, want EACCES", err)
	}
}

func errorsIsErrno(err error, want syscall.Errno) bool {
	e, ok := err.(syscall.Errno)
	return ok && e == want
}

// TestRenameExchangeAcrossIslands: exchanges between directories of
// three islands (files with files, a directory with a file) leave every
// name holding what the other held, through another client, and fsck
// finds the namespace consistent (entries, parents, link counts).
func TestRenameExchangeAcrossIslands(t *testing.T) {
	fc := startFSCluster(t, 5, 3)
	a, b := fc.newFS(t), fc.newFS(t)
	ctx := context.Background()
	const n = 8
	dirs := make([]metawire.Attr, n)
	for i := range n {
		d, err := a.MkdirAll(ctx, root, fmt.Sprintf("/ex/d%d", i), 0o755)
		if err != nil {
			t.Fatal(err)
		}
		dirs[i] = d
		if err := a.WriteFile(ctx, root, fmt.Sprintf("/ex/d%d/f", i), []byte{byte('0' + i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.MkdirAll(ctx, root, "/ex/d0/sub/deeper", 0o755); err != nil {
		t.Fatal(err)
	}
	islands := map[namespace.IslandID]bool{}
	for _, d := range dirs {
		isl, _, _ := fc.view.IslandFor(namespace.Ino(d.Ino).Bucket())
		islands[isl] = true
	}
	if len(islands) < 2 {
		t.Fatalf("the %d directories landed on %d island(s); the test needs several", n, len(islands))
	}
	want := map[int]byte{}
	for i := range n {
		want[i] = byte('0' + i)
	}
	for i := range n - 1 {
		err := a.Rename(ctx, metawire.RenameReq{Cred: root, SrcDir: dirs[i].Ino, SrcName: "f", DstDir: dirs[i+1].Ino, DstName: "f", Flags: metawire.RenameExchange})
		if err != nil {
			t.Fatalf("exchange d%d/f and d%d/f: %v", i, i+1, err)
		}
		want[i], want[i+1] = want[i+1], want[i]
	}
	// A directory (with a subtree) and a file, across directories.
	if err := a.Rename(ctx, metawire.RenameReq{Cred: root, SrcDir: dirs[0].Ino, SrcName: "sub", DstDir: dirs[n-1].Ino, DstName: "f", Flags: metawire.RenameExchange}); err != nil {
		t.Fatal(err)
	}
	for i := range n - 1 {
		got, err := b.ReadFile(ctx, root, fmt.Sprintf("/ex/d%d/f", i))
		if err != nil || len(got) != 1 || got[0] != want[i] {
			t.Fatalf("d%d/f through another client: %q %v, want %q", i, got, err, want[i])
		}
	}
	if got, err := b.ReadFile(ctx, root, "/ex/d0/sub"); err != nil || len(got) != 1 || got[0] != want[n-1] {
		t.Fatalf("d0/sub: %q %v, want the file %q", got, err, want[n-1])
	}
	if _, err := b.Resolve(ctx, root, fmt.Sprintf("/ex/d%d/f/deeper", n-1)); err != nil {
		t.Fatalf("the directory moved into d%d: %v", n-1, err)
	}
	rep, err := fsck.Run(ctx, fc.clusterMap(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() {
		t.Fatalf("fsck after the exchanges: %v", rep.Problems())
	}
}
