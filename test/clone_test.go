package test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/atoll-fs/atoll/internal/cleaner"
	"github.com/atoll-fs/atoll/internal/fsck"
)

// copyRange copies n bytes of src at srcOff to dst at dstOff with
// copy_file_range(2), as cp --reflink=auto does, until done.
func copyRange(t *testing.T, src, dst *os.File, srcOff, dstOff, n int64) {
	t.Helper()
	for n > 0 {
		k, err := unix.CopyFileRange(int(src.Fd()), &srcOff, int(dst.Fd()), &dstOff, int(n), 0)
		if err != nil {
			t.Fatalf("copy_file_range: %v", err)
		}
		if k == 0 {
			t.Fatalf("copy_file_range: 0 bytes with %d to go", n)
		}
		n -= int64(k)
	}
}

// copy_file_range through the mount clones whole blocks (the copy shares
// the source's block pointers: the data path writes almost nothing) and
// copies the edges; then source and copy change independently, through
// cleaner passes that move and delete stripes, with the source removed,
// and fsck stays clean.
func TestCopyFileRangeClones(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 2)
	mfs := fc.newFS(t)
	_, mnt := mountFSWith(t, mfs, nil)
	ctx := context.Background()
	lib := fc.newFS(t)

	orig := randBytes(newRand(70), 9<<20+12345)
	a := filepath.Join(mnt, "a")
	if err := os.WriteFile(a, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	written := mfs.Data().Stats().BytesWritten
	src, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(filepath.Join(mnt, "b"))
	if err != nil {
		t.Fatal(err)
	}
	copyRange(t, src, dst, 0, 0, int64(len(orig)))
	// And a copy whose offsets do not line up: copied, not cloned.
	odd, err := os.Create(filepath.Join(mnt, "odd"))
	if err != nil {
		t.Fatal(err)
	}
	copyRange(t, src, odd, 100, 7, 3<<20)
	for _, f := range []*os.File{dst, odd} {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cloned, copied := mfs.ClonedBytes()
	grew := mfs.Data().Stats().BytesWritten - written
	t.Logf("cloned %d bytes, copied %d; the data path wrote %d bytes meanwhile", cloned, copied, grew)
	if cloned < 8<<20 || copied < 3<<20 || copied > 3<<20+2<<20 {
		t.Fatalf("cloned %d, copied %d: want the 9 MiB file's whole blocks cloned and the odd copy copied", cloned, copied)
	}
	if grew > 6<<20 {
		t.Fatalf("the data path wrote %d bytes for a clone and a 3 MiB copy", grew)
	}
	check := func(what, path string, want []byte) {
		t.Helper()
		got, err := lib.ReadFile(ctx, root, path)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %s read %d bytes (%v), want %d, equal=%v", what, path, len(got), err, len(want), bytes.Equal(got, want))
		}
	}
	check("after the clone", "/b", orig)
	// cp --reflink=auto gets there too (FICLONE is not passed to FUSE
	// mounts; coreutils then uses copy_file_range).
	before, _ := mfs.ClonedBytes()
	if out, err := exec.Command("cp", "--reflink=auto", a, filepath.Join(mnt, "c")).CombinedOutput(); err != nil {
		t.Fatalf("cp --reflink=auto: %v\n%s", err, out)
	}
	if after, _ := mfs.ClonedBytes(); after-before < 8<<20 {
		t.Errorf("cp --reflink=auto cloned %d bytes", after-before)
	}
	check("after cp --reflink=auto", "/c", orig)
	wantOdd := append(make([]byte, 7), orig[100:100+3<<20]...)
	check("after the odd copy", "/odd", wantOdd)

	// Both change, independently.
	patchA, patchB := bytes.Repeat([]byte("A"), 5000), bytes.Repeat([]byte("B"), 3<<20)
	wantA, wantB := bytes.Clone(orig), bytes.Clone(orig)
	copy(wantA[1<<20+10:], patchA)
	copy(wantB[4<<20:], patchB)
	for _, w := range []struct {
		path  string
		patch []byte
		off   int64
	}{{a, patchA, 1<<20 + 10}, {filepath.Join(mnt, "b"), patchB, 4 << 20}} {
		f, err := os.OpenFile(w.path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(w.patch, w.off); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	check("after both changed", "/a", wantA)
	check("after both changed", "/b", wantB)

	pass := func() cleaner.Report {
		t.Helper()
		cr, err := newCleaner(t, lib, func(c *cleaner.Config) { c.MaxLive = 1 }).Pass(ctx, cleaner.PassOptions{Copy: true, Repair: true})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := fsck.Run(ctx, fc.clusterMap(), testKey)
		if err != nil || !rep.Clean() {
			t.Fatalf("fsck: %v %v", err, rep.Problems())
		}
		return cr
	}
	if cr := pass(); cr.MovedBlocks == 0 || cr.DeletedStripes == 0 {
		t.Fatalf("the cleaner moved %d blocks and deleted %d stripes: the shared blocks were not moved", cr.MovedBlocks, cr.DeletedStripes)
	}
	check("after a cleaner pass", "/a", wantA)
	check("after a cleaner pass", "/b", wantB)
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	pass()
	check("with the source removed, after a cleaner pass", "/b", wantB)
	check("with the source removed, after a cleaner pass", "/odd", wantOdd)
}
