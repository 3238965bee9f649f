package test

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFUSEFallocateModes: fallocate's modes on the mount answer as
// Linux's local file systems do (xfstests and fsx use them): KEEP_SIZE
// changes nothing visible, PUNCH_HOLE (with KEEP_SIZE) and ZERO_RANGE
// make the range read as zeros, ZERO_RANGE without KEEP_SIZE grows the
// file; what they change is read through another mount too; the modes
// not supported answer EOPNOTSUPP, as the kernel does for a file system
// without them.
func TestFUSEFallocateModes(t *testing.T) {
	_, _, _, ma, mb := twoMounts(t)
	p := filepath.Join(ma, "f")
	want := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	zeroAt := func(off, n int) {
		for i := off; i < off+n && i < len(want); i++ {
			want[i] = 0
		}
	}
	steps := []struct {
		name      string
		mode      uint32
		off, n    int64
		errno     syscall.Errno
		applyWant func()
	}{
		{"keep size past the end", unix.FALLOC_FL_KEEP_SIZE, 60000, 100000, 0, func() {}},
		{"punch a hole", unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, 1000, 4000, 0, func() { zeroAt(1000, 4000) }},
		{"punch across the end", unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, 65000, 10000, 0, func() { zeroAt(65000, 10000) }},
		{"zero a range inside", unix.FALLOC_FL_ZERO_RANGE, 20000, 3000, 0, func() { zeroAt(20000, 3000) }},
		{"zero a range that grows the file", unix.FALLOC_FL_ZERO_RANGE, 60000, 20000, 0, func() {
			zeroAt(60000, 20000)
			want = append(want, make([]byte, 80000-len(want))...)
		}},
		{"zero a range past the end, keep size", unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE, 79000, 5000, 0, func() { zeroAt(79000, 5000) }},
		{"punch without keep size", unix.FALLOC_FL_PUNCH_HOLE, 0, 10, syscall.EOPNOTSUPP, func() {}},
		{"collapse", unix.FALLOC_FL_COLLAPSE_RANGE, 0, 4096, syscall.EOPNOTSUPP, func() {}},
		{"insert", unix.FALLOC_FL_INSERT_RANGE, 0, 4096, syscall.EOPNOTSUPP, func() {}},
		{"posix_fallocate grows", 0, 80000, 1000, 0, func() { want = append(want, make([]byte, 1000)...) }},
	}
	for _, s := range steps {
		err := unix.Fallocate(fd, s.mode, s.off, s.n)
		if s.errno != 0 {
			wantErrno(t, s.name, err, s.errno)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		s.applyWant()
		got := make([]byte, len(want)+10)
		n, err := f.ReadAt(got, 0)
		if n != len(want) || !bytes.Equal(got[:n], want) {
			t.Fatalf("%s: read %d bytes (%v), want %d; first difference at %d", s.name, n, err, len(want), firstDiff(got[:n], want))
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(mb, "f"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("through the other mount: %d bytes (%v), want %d; first difference at %d", len(got), err, len(want), firstDiff(got, want))
	}
	// A terabyte zeroed past the end: the file grows, nothing is written.
	start := time.Now()
	if err := unix.Fallocate(fd, unix.FALLOC_FL_ZERO_RANGE, int64(len(want)), 1<<40); err != nil {
		t.Fatal(err)
	}
	if st, err := f.Stat(); err != nil || st.Size() != int64(len(want))+1<<40 {
		t.Fatalf("after zeroing a terabyte past the end: %v %v", st.Size(), err)
	}
	tail := make([]byte, 10)
	if n, err := f.ReadAt(tail, int64(len(want))+1<<40-10); n != 10 || !bytes.Equal(tail, make([]byte, 10)) {
		t.Fatalf("the last bytes: %q %v", tail[:n], err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("zeroing a terabyte past the end took %v: it wrote", d)
	}
}

// firstDiff is the first offset where a and b differ (the shorter
// length if one is a prefix of the other).
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
