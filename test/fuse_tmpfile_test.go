package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFUSETmpfile: open(dir, O_TMPFILE) gives a file with no name (nlink
// 0, absent from the listing, on this mount and another) that takes
// writes and reads; linkat through /proc/self/fd names it, with its data,
// seen through the other mount; with O_EXCL the kernel refuses the link;
// a tmpfile closed unlinked leaves nothing behind.
func TestFUSETmpfile(t *testing.T) {
	_, _, _, ma, mb := twoMounts(t)
	d := filepath.Join(ma, "t")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	names := func(dir string) []string {
		t.Helper()
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	fd, err := unix.Open(d, unix.O_TMPFILE|unix.O_RDWR, 0o640)
	if err != nil {
		t.Fatal("open O_TMPFILE:", err)
	}
	data := bytes.Repeat([]byte("tmpfile "), 5000)
	if n, err := unix.Write(fd, data); err != nil || n != len(data) {
		t.Fatalf("write: %d %v", n, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Nlink != 0 || st.Size != int64(len(data)) || st.Mode&0o777 != 0o640 {
		t.Fatalf("fstat: nlink %d size %d mode %o (%v), want 0, %d, 640", st.Nlink, st.Size, st.Mode&0o777, err, len(data))
	}
	if n := names(d); len(n) != 0 {
		t.Fatalf("the directory lists %v while the tmpfile has no name", n)
	}
	if n := names(filepath.Join(mb, "t")); len(n) != 0 {
		t.Fatalf("the other mount lists %v", n)
	}
	got := make([]byte, len(data))
	if n, err := unix.Pread(fd, got, 0); err != nil || n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("read back: %d %v", n, err)
	}
	if err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, filepath.Join(d, "named"), unix.AT_SYMLINK_FOLLOW); err != nil {
		t.Fatal("linkat:", err)
	}
	if err := unix.Fsync(fd); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if n := names(d); len(n) != 1 || n[0] != "named" {
		t.Fatalf("after the link the directory lists %v, want [named]", n)
	}
	waitEvent(t, "the other mount reads the linked tmpfile", func() error {
		b, err := os.ReadFile(filepath.Join(mb, "t", "named"))
		if err != nil {
			return err
		}
		if !bytes.Equal(b, data) {
			return fmt.Errorf("%d bytes, want %d", len(b), len(data))
		}
		return nil
	})
	if st, err := os.Stat(filepath.Join(mb, "t", "named")); err != nil || st.Sys().(*syscall.Stat_t).Nlink != 1 {
		t.Fatalf("linked tmpfile: %v %v, want nlink 1", st, err)
	}
	// O_EXCL: never linkable.
	fd, err = unix.Open(d, unix.O_TMPFILE|unix.O_RDWR|unix.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "linkat of an O_TMPFILE|O_EXCL file", unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, filepath.Join(d, "never"), unix.AT_SYMLINK_FOLLOW), syscall.ENOENT)
	unix.Close(fd)
	// Closed without a name: nothing stays.
	fd, err = unix.Open(d, unix.O_TMPFILE|unix.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(fd, []byte("gone")); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if n := names(d); len(n) != 1 {
		t.Fatalf("after closing unnamed tmpfiles the directory lists %v", n)
	}
}
