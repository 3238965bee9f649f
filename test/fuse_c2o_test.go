package test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/fusefs"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// TestFUSECloseToOpenSizeAfterOtherClientGrew: a mount that looked at a
// file (read it, so the kernel caches its attributes for AttrTTL) must
// show all of it when it opens the file again after another client grew
// it and fsynced. The kernel's FUSE client reads only up to the size it
// has cached and asks again only once that copy expires, so the open
// must drop the kernel's copy: before the fix the mount read the first
// (old size) bytes of the new content and stopped there. A fault run
// read 3451 of 5463 acknowledged bytes that way: the engine's
// acknowledged bytes include its owner's overwrites, so the file was
// 3451 bytes when the mount last read it and grew past that since (a new
// file the mount has never seen reads whole, fix or not: the first read
// of every case below).
//
// The mount's attribute and entry timeouts are a minute here, so the
// kernel's cached copy certainly outlives the sequence (the default 1s
// makes the outcome depend on timing; the "defaultTTL" case checks that
// too when the steps take less than a second, which they do).
func TestFUSECloseToOpenSizeAfterOtherClientGrew(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 1)
	ctx := context.Background()
	// Client A: the client library, attributes never cached.
	lib := uncachedFS(t, fc)
	if _, err := lib.MkdirAll(ctx, root, "/data/c0", 0o755); err != nil {
		t.Fatal(err)
	}
	// Client B: FUSE mounts with their own client.FS.
	_, longMnt := mountFSWith(t, fc.newFS(t), func(c *fusefs.Config) { c.AttrTTL, c.EntryTTL = time.Minute, time.Minute })
	_, defMnt := mountFS(t, fc.newFS(t))
	r := newRand(3451)

	// create as the engine's library client does: exclusive create,
	// write at 0, fsync, release.
	create := func(t *testing.T, path string, b []byte) {
		t.Helper()
		dir, name, err := lib.ResolveParent(ctx, root, path)
		if err != nil {
			t.Fatal(err)
		}
		cr, err := lib.Create(ctx, metawire.CreateReq{Cred: root, Dir: dir.Ino, Name: name, Mode: metawire.ModeFile | 0o644, Exclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		fh, err := lib.OpenWithAttr(ctx, root, cr.Attr)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Release()
		if _, err := fh.WriteAt(ctx, b, 0); err != nil {
			t.Fatal(err)
		}
		if err := fh.Fsync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// overwrite as the engine's owner does: open, WriteAt, fsync, release.
	overwrite := func(t *testing.T, path string, off int64, b []byte) {
		t.Helper()
		fh, err := lib.OpenPath(ctx, root, path)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Release()
		if _, err := fh.WriteAt(ctx, b, off); err != nil {
			t.Fatal(err)
		}
		if err := fh.Fsync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// read as the engine's FUSE client does: os.Open and io.ReadAll; then
	// it checks what fstat of the descriptor says.
	read := func(t *testing.T, p string, want []byte) {
		t.Helper()
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		// No fstat before reading: it would make the kernel ask for the
		// attributes (the earlier read invalidated its cached atime),
		// which hid the bug (os.ReadFile does that; io.ReadAll does not).
		got, err := io.ReadAll(f)
		if err != nil {
			t.Fatalf("%s: read after open: %v", p, err)
		}
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: read %d bytes (a prefix: %v), want the %d acknowledged", p, len(got), bytes.HasPrefix(want, got), len(want))
		}
		if st.Size() != int64(len(want)) {
			t.Errorf("%s: fstat after open says %d bytes, want %d", p, st.Size(), len(want))
		}
	}

	cases := []struct {
		name       string
		size       int   // at creation
		off        int64 // of the overwrite
		patch, end int   // overwrite length; size after it
	}{
		{name: "inline", size: 3451, off: 1000, patch: 4463, end: 5463},
		{name: "inlineToStriped", size: 3451, off: 3451, patch: 40000, end: 43451},
		{name: "striped", size: 100 << 10, off: 90 << 10, patch: 200 << 10, end: 290 << 10},
		{name: "stripes", size: 1<<20 + 7, off: 1 << 20, patch: 2 << 20, end: 3 << 20},
	}
	for _, mc := range []struct {
		name, mnt string
	}{{"longTTL", longMnt}, {"defaultTTL", defMnt}} {
		for _, c := range cases {
			t.Run(mc.name+"/"+c.name, func(t *testing.T) {
				path := "/data/c0/" + mc.name + "-" + c.name
				want := randBytes(r, c.size)
				create(t, path, want)
				start := time.Now()
				read(t, filepath.Join(mc.mnt, path), want)
				patch := randBytes(r, c.patch)
				overwrite(t, path, c.off, patch)
				want = append(want[:c.off], patch...)
				if len(want) != c.end {
					t.Fatalf("test case: %d bytes after the overwrite, want %d", len(want), c.end)
				}
				// The island has every byte (the writer is not at fault)...
				if got, err := lib.ReadFile(ctx, root, path); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("the writer reads %d bytes back (%v), want %d", len(got), err, len(want))
				}
				// ...and the mount must show them all.
				read(t, filepath.Join(mc.mnt, path), want)
				if el := time.Since(start); mc.name == "defaultTTL" && el >= time.Second {
					t.Logf("the sequence took %v, longer than the mount's attribute timeout: this case checked nothing", el)
				}
			})
		}
	}
}

// TestFUSEKeepsPageCacheWhileUnchanged: an open of a file whose data
// version is the one the kernel's pages hold keeps those pages (a second
// read is served by the kernel), and an open after another client changed
// the file drops them (close-to-open). Residency is read with mincore(2)
// on a read-only mapping, which faults nothing in.
func TestFUSEKeepsPageCacheWhileUnchanged(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 1)
	ctx := context.Background()
	lib := uncachedFS(t, fc)
	_, mnt := mountFS(t, fc.newFS(t))
	r := newRand(7)
	const path = "/keep"
	want := randBytes(r, 3<<20+123)
	if err := lib.WriteFile(ctx, root, path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(mnt, path)
	readAll := func(what string) {
		t.Helper()
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: read %d bytes (%v), want the %d written", what, len(got), err, len(want))
		}
	}
	pages := (len(want) + os.Getpagesize() - 1) / os.Getpagesize()

	readAll("first read")
	if n := residentPages(t, p); n < pages/2 {
		t.Errorf("unchanged file: %d of %d pages cached after a new open, want them kept", n, pages)
	}
	readAll("second read")

	// Another client changes it and puts the mtime back (as rsync -t or
	// tar do), so size and mtime are as the kernel has them: the next
	// open must still drop the pages (the data version says so).
	patch := randBytes(r, 5000)
	fh, err := lib.OpenPath(ctx, root, path)
	if err != nil {
		t.Fatal(err)
	}
	before := fh.Attr()
	if _, err := fh.WriteAt(ctx, patch, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := fh.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	fh.Release()
	if _, err := lib.SetAttr(ctx, metawire.SetAttrReq{Cred: root, Ino: before.Ino, Valid: metawire.SetMtime, Mtime: before.Mtime}); err != nil {
		t.Fatal(err)
	}
	copy(want[1<<20:], patch)
	if n := residentPages(t, p); n != 0 {
		t.Errorf("file changed by another client: %d of %d pages still cached after open, want none", n, pages)
	}
	readAll("read after another client's change")

	// This mount's own write: what it reads back is the new bytes.
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	patch = randBytes(r, 7000)
	if _, err := f.WriteAt(patch, 2<<20+11); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	copy(want[2<<20+11:], patch)
	readAll("read after this mount's write")
	if got, err := lib.ReadFile(ctx, root, path); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the library reads %d bytes (%v) after the mount's write, want %d", len(got), err, len(want))
	}
}

// uncachedFS is a client library FS on fc that caches no names or
// attributes (as the fault engine's library clients, AttrTTL 1ns): what
// it reads is the islands' state now.
func uncachedFS(t *testing.T, fc *fsCluster) *client.FS {
	t.Helper()
	lib, err := client.NewFS(client.FSConfig{Data: newClient(t, fc.storage, nil), Map: fc.view, Logger: quietLogger(), AttrTTL: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lib.Close() })
	return lib
}

// residentPages opens p, maps it read-only and counts the pages of it the
// kernel has cached (mincore).
func residentPages(t *testing.T, p string) int {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore %s: %v", p, e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestFUSEReadAhead: a root mount raises the kernel's read-ahead from the
// 128 KiB FUSE mounts start with (which cut sequential reads into 128 KiB
// requests) to fusefs.DefaultReadAhead, and a big file reads back exact
// through it.
func TestFUSEReadAhead(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 1)
	_, mnt := mountFS(t, fc.newFS(t))
	if ra, err := fusefs.ReadAheadOf(mnt); err != nil || ra != fusefs.DefaultReadAhead {
		t.Fatalf("kernel read-ahead of the mount: %d bytes (%v), want %d", ra, err, fusefs.DefaultReadAhead)
	}
	want := randBytes(newRand(11), 20<<20+5)
	p := filepath.Join(mnt, "ra")
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1\n"), 0); err != nil {
		t.Logf("dropping caches: %v (the read may be warm)", err)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (%v), want the %d written", len(got), err, len(want))
	}
}
