package test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

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
	// Client A: the client library, attributes never cached (as the fault
	// engine's DialTuned with AttrTTL 1ns).
	data := newClient(t, fc.storage, nil)
	lib, err := client.NewFS(client.FSConfig{Data: data, Map: fc.view, Logger: quietLogger(), AttrTTL: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lib.Close() })
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
