package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/meta"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// fsCluster is storage servers plus islands, all in-process on 127.0.0.1.
type fsCluster struct {
	t       testing.TB
	storage []*server
	islands []*meta.Island
	regs    []*prometheus.Registry // each island's metrics
	faults  []*faults.Set          // each island's failpoints
	smap    *meta.StaticMap
	view    *client.StaticMapView
}

func startFSCluster(t testing.TB, nStorage, nIslands int) *fsCluster {
	t.Helper()
	fc := &fsCluster{t: t, storage: startServers(t, nStorage)}
	var ids []namespace.IslandID
	for i := 1; i <= nIslands; i++ {
		ids = append(ids, namespace.IslandID(i))
	}
	tab, err := namespace.NewTable(ids, namespace.DepthFor(len(ids)))
	if err != nil {
		t.Fatal(err)
	}
	tab.Epoch = 1
	fc.smap = meta.NewStaticMap(tab, nil)
	addrs := map[namespace.IslandID]string{}
	for _, id := range ids {
		reg := prometheus.NewRegistry()
		fp := faults.New()
		is, err := meta.New(meta.Config{Key: testKey, Dir: t.TempDir(), Listen: "127.0.0.1:0", ID: uint32(id), Map: fc.smap, Logger: quietLogger(), Registerer: reg, Faults: fp})
		if err != nil {
			t.Fatal(err)
		}
		fc.smap.SetAddr(id, is.Addr())
		addrs[id] = is.Addr()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- is.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("island: %v", err)
			}
		})
		fc.islands = append(fc.islands, is)
		fc.regs = append(fc.regs, reg)
		fc.faults = append(fc.faults, fp)
	}
	fc.view = &client.StaticMapView{MapEpoch: 1, Table: tab, Addrs: addrs, Policy: "ec:4+1"}
	return fc
}

func (fc *fsCluster) newFS(t testing.TB) *client.FS {
	t.Helper()
	data := newClient(t, fc.storage, nil)
	fs, err := client.NewFS(client.FSConfig{Data: data, Map: fc.view, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	return fs
}

var root = metawire.Root

func TestFSCloseToOpenAcrossClients(t *testing.T) {
	fc := startFSCluster(t, 5, 3)
	a, b := fc.newFS(t), fc.newFS(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(20, 20))
	if _, err := a.MkdirAll(ctx, root, "/projects/alpha/data", 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"/projects/alpha/empty":       {},
		"/projects/alpha/small.txt":   []byte("hello, atoll\n"),
		"/projects/alpha/inline-edge": randBytes(r, 16<<10),
		"/projects/alpha/data/blocks": randBytes(r, 16<<10+1),
		"/projects/alpha/data/big":    randBytes(r, 9<<20+12345),
	}
	for p, d := range files {
		if err := a.WriteFile(ctx, root, p, d, 0o644); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	for p, d := range files {
		got, err := b.ReadFile(ctx, root, p)
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		if !bytes.Equal(got, d) {
			t.Fatalf("%s: %d bytes read, %d written, equal=%v", p, len(got), len(d), bytes.Equal(got, d))
		}
	}
	// Overwrite a middle range of the big file through one client; the
	// other sees it after close (read-modify-write of partial blocks).
	big := files["/projects/alpha/data/big"]
	fh, err := a.OpenPath(ctx, root, "/projects/alpha/data/big")
	if err != nil {
		t.Fatal(err)
	}
	patch := randBytes(r, 100000)
	if _, err := fh.WriteAt(ctx, patch, 3<<20+777); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(ctx); err != nil {
		t.Fatal(err)
	}
	copy(big[3<<20+777:], patch)
	got, err := b.ReadFile(ctx, root, "/projects/alpha/data/big")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("after patch: err=%v equal=%v", err, bytes.Equal(got, big))
	}
	// Grow an inline file past the threshold, then truncate it.
	fh, err = a.OpenPath(ctx, root, "/projects/alpha/small.txt")
	if err != nil {
		t.Fatal(err)
	}
	tail := randBytes(r, 70000)
	if _, err := fh.WriteAt(ctx, tail, 13); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want := append([]byte("hello, atoll\n"), tail...)
	if got, err := b.ReadFile(ctx, root, "/projects/alpha/small.txt"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("grown inline file: err=%v equal=%v len=%d", err, bytes.Equal(got, want), len(got))
	}
	fh, err = b.OpenPath(ctx, root, "/projects/alpha/small.txt")
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if got, err := a.ReadFile(ctx, root, "/projects/alpha/small.txt"); err != nil || string(got) != "hello" {
		t.Fatalf("truncated: %q %v", got, err)
	}
	// A sparse file: holes read as zeros.
	fh, err = a.CreateFile(ctx, root, "/projects/alpha/sparse", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt(ctx, []byte("end"), 5<<20); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, err = b.ReadFile(ctx, root, "/projects/alpha/sparse")
	if err != nil || len(got) != 5<<20+3 || string(got[5<<20:]) != "end" || !bytes.Equal(got[:5<<20], make([]byte, 5<<20)) {
		t.Fatalf("sparse: len %d err %v", len(got), err)
	}
}

func TestFSErrnos(t *testing.T) {
	fc := startFSCluster(t, 3, 3)
	fs := fc.newFS(t)
	ctx := context.Background()
	if err := fs.WriteFile(ctx, root, "/f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.MkdirAll(ctx, root, "/d/e", 0o755); err != nil {
		t.Fatal(err)
	}
	rootIno := uint64(namespace.RootIno)
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"lookup missing", func() error { _, err := fs.Lookup(ctx, root, rootIno, "nope"); return err }(), metawire.ErrNotFound},
		{"rmdir non-empty", fs.Rmdir(ctx, root, rootIno, "d"), metawire.ErrNotEmpty},
		{"unlink dir", fs.Unlink(ctx, root, rootIno, "d"), metawire.ErrIsDir},
		{"rmdir file", fs.Rmdir(ctx, root, rootIno, "f"), metawire.ErrNotDir},
		{"create exclusive existing", func() error {
			_, err := fs.Create(ctx, metawire.CreateReq{Cred: root, Dir: rootIno, Name: "f", Mode: 0o644, Exclusive: true})
			return err
		}(), metawire.ErrExists},
		{"long name", func() error {
			_, err := fs.Create(ctx, metawire.CreateReq{Cred: root, Dir: rootIno, Name: string(bytes.Repeat([]byte("n"), 256)), Mode: 0o644})
			return err
		}(), metawire.ErrNameTooLong},
		{"slash in name", func() error {
			_, err := fs.Create(ctx, metawire.CreateReq{Cred: root, Dir: rootIno, Name: "a/b", Mode: 0o644})
			return err
		}(), metawire.ErrInvalid},
		{"rename dir into itself", func() error {
			d, _ := fs.Resolve(ctx, root, "/d/e")
			return fs.Rename(ctx, metawire.RenameReq{Cred: root, SrcDir: rootIno, SrcName: "d", DstDir: d.Ino, DstName: "x"})
		}(), metawire.ErrInvalid},
		{"unknown inode", func() error {
			_, err := fs.GetAttrFresh(ctx, root, uint64(namespace.MakeIno(namespace.RootIno.Bucket(), 999999)))
			return err
		}(), metawire.ErrStale},
		{"non-root write into root", func() error {
			_, err := fs.Create(ctx, metawire.CreateReq{Cred: metawire.Cred{UID: 1000, GID: 1000}, Dir: rootIno, Name: "g", Mode: 0o644})
			return err
		}(), metawire.ErrAccess},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, tc.err, tc.want)
		}
	}
}

func TestFSConcurrentClientsCreateAndRename(t *testing.T) {
	fc := startFSCluster(t, 3, 3)
	ctx := context.Background()
	setup := fc.newFS(t)
	for _, d := range []string{"/a", "/b", "/c"} {
		if _, err := setup.MkdirAll(ctx, root, d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const clients, files = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			fs := fc.newFS(t)
			dirs := []string{"/a", "/b", "/c"}
			for i := 0; i < files; i++ {
				name := fmt.Sprintf("c%d-f%d", c, i)
				src := dirs[i%3] + "/" + name
				if err := fs.WriteFile(ctx, root, src, []byte(name), 0o644); err != nil {
					errs <- fmt.Errorf("write %s: %w", src, err)
					return
				}
				sd, _ := fs.Resolve(ctx, root, dirs[i%3])
				dd, _ := fs.Resolve(ctx, root, dirs[(i+1)%3])
				if err := fs.Rename(ctx, metawire.RenameReq{Cred: root, SrcDir: sd.Ino, SrcName: name, DstDir: dd.Ino, DstName: name}); err != nil {
					errs <- fmt.Errorf("rename %s: %w", src, err)
					return
				}
			}
		}(c)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		t.Fatal("deadlock: clients did not finish")
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	check := fc.newFS(t)
	dirs := []string{"/a", "/b", "/c"}
	for c := 0; c < clients; c++ {
		for i := 0; i < files; i++ {
			name := fmt.Sprintf("c%d-f%d", c, i)
			got, err := check.ReadFile(ctx, root, dirs[(i+1)%3]+"/"+name)
			if err != nil || string(got) != name {
				t.Fatalf("%s: %q %v", name, got, err)
			}
		}
	}
}

// A truncate inside a block followed by an extension must read zeros in
// between, not the bytes that were cut off.
func TestFSTruncateThenExtendReadsZeros(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	fs := fc.newFS(t)
	ctx := context.Background()
	data := randBytes(rand.New(rand.NewPCG(40, 40)), 200000)
	if err := fs.WriteFile(ctx, root, "/t", data, 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := fs.Resolve(ctx, root, "/t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.SetAttr(ctx, metawire.SetAttrReq{Cred: root, Ino: a.Ino, Valid: metawire.SetSize, Size: 70000}); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.SetAttr(ctx, metawire.SetAttrReq{Cred: root, Ino: a.Ino, Valid: metawire.SetSize, Size: 150000}); err != nil {
		t.Fatal(err)
	}
	got, err := fs.ReadFile(ctx, root, "/t")
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte(nil), data[:70000]...), make([]byte, 80000)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("after truncate+extend: %d bytes, equal=%v", len(got), bytes.Equal(got, want))
	}
}

// islandOps is how many requests of op (its metrics label) the first
// island answered without error.
func (fc *fsCluster) islandOps(t *testing.T, op string) float64 {
	t.Helper()
	return fc.islandOpsResult(t, op, "ok")
}

// islandOpsSince snapshots island 0's request counts of ops (any result)
// and returns how many of each came since, for a test to count the round
// trips a workload costs.
func (fc *fsCluster) islandOpsSince(t *testing.T, ops ...string) func() map[string]float64 {
	t.Helper()
	before := map[string]float64{}
	for _, op := range ops {
		before[op] = fc.islandOpsResult(t, op, "")
	}
	return func() map[string]float64 {
		t.Helper()
		d := map[string]float64{}
		for _, op := range ops {
			d[op] = fc.islandOpsResult(t, op, "") - before[op]
		}
		return d
	}
}

// islandOpsResult counts island 0's requests of op that ended with result
// ("" for any result).
func (fc *fsCluster) islandOpsResult(t *testing.T, op, result string) float64 {
	t.Helper()
	mfs, err := fc.regs[0].Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "atoll_meta_ops_total" {
			continue
		}
		sum := 0.0
		for _, m := range mf.GetMetric() {
			var gotOp, ok bool
			for _, l := range m.GetLabel() {
				gotOp = gotOp || l.GetName() == "op" && l.GetValue() == op
				ok = ok || l.GetName() == "result" && (result == "" || l.GetValue() == result)
			}
			if gotOp && ok {
				sum += m.GetCounter().GetValue()
			}
		}
		return sum
	}
	return 0
}

// A lazily created file (the FUSE mount's creates) is made durable when
// it is closed: by its commit when it has data, else by one OpSync to its
// island. Exclusive creates and an FS that does not create lazily need
// neither.
func TestLazyCreateSettledAtClose(t *testing.T) {
	fc := startFSCluster(t, 3, 1)
	ctx := context.Background()
	lazy := fc.newFS(t)
	lazy.SetLazyCreate(true)
	d, err := lazy.MkdirAll(ctx, root, "/lazy", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	create := func(fs *client.FS, name string, excl bool, data []byte) {
		t.Helper()
		r, err := fs.Create(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: name, Mode: 0o644, Exclusive: excl})
		if err != nil {
			t.Fatal(err)
		}
		fh, err := fs.OpenWithAttr(ctx, root, r.Attr)
		if err != nil {
			t.Fatal(err)
		}
		if data != nil {
			if _, err := fh.WriteAt(ctx, data, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := fh.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := fh.Close(ctx); err != nil { // a second close has nothing to do
			t.Fatal(err)
		}
	}
	steps := []struct {
		name      string
		fs        *client.FS
		excl      bool
		data      []byte
		wantSyncs float64
	}{
		{"empty", lazy, false, nil, 1},
		{"with-data", lazy, false, []byte("inline"), 1},
		{"exclusive", lazy, true, nil, 1},
		{"not-lazy", fc.newFS(t), false, nil, 1},
		{"empty-again", lazy, false, nil, 2},
	}
	for _, s := range steps {
		create(s.fs, s.name, s.excl, s.data)
		if got := fc.islandOps(t, "sync"); got != s.wantSyncs {
			t.Fatalf("after %s: %v island syncs, want %v", s.name, got, s.wantSyncs)
		}
	}
	// Everything is there, with its data, for another client.
	other := fc.newFS(t)
	for _, s := range steps {
		b, err := other.ReadFile(ctx, root, "/lazy/"+s.name)
		if err != nil || string(b) != string(s.data) {
			t.Fatalf("%s: %q %v", s.name, b, err)
		}
	}
	if err := other.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
}

// With SetLazyClose (the FUSE mount) Close commits without an island log
// sync: another client sees the data at once (close-to-open), no OpSync
// is spent, and Fsync afterwards settles it with exactly one OpSync;
// Fsync with data to commit commits synced and needs none. SyncLazy
// settles every lazily closed file with one OpSync per island.
func TestLazyCloseVisibleAndFsyncDurable(t *testing.T) {
	fc := startFSCluster(t, 3, 1)
	ctx := context.Background()
	fs := fc.newFS(t)
	fs.SetLazyCreate(true)
	fs.SetLazyClose(true)
	other := fc.newFS(t)
	d, err := fs.MkdirAll(ctx, root, "/lc", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	syncs := func() float64 { return fc.islandOps(t, "sync") }
	open := func(name string) *client.File {
		t.Helper()
		r, err := fs.Create(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: name, Mode: 0o644})
		if err != nil {
			t.Fatal(err)
		}
		fh, err := fs.OpenWithAttr(ctx, root, r.Attr)
		if err != nil {
			t.Fatal(err)
		}
		return fh
	}
	write := func(fh *client.File, data string) {
		t.Helper()
		if _, err := fh.WriteAt(ctx, []byte(data), 0); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(step string, want float64) {
		t.Helper()
		if got := syncs(); got != want {
			t.Fatalf("after %s: %v island syncs, want %v", step, got, want)
		}
	}
	readBack := func(name, want string) {
		t.Helper()
		b, err := other.ReadFile(ctx, root, "/lc/"+name)
		if err != nil || string(b) != want {
			t.Fatalf("%s through another client: %q %v, want %q", name, b, err, want)
		}
	}

	// Close: visible, not synced by an OpSync.
	fh := open("a")
	write(fh, "alpha")
	if err := fh.Close(ctx); err != nil {
		t.Fatal(err)
	}
	expect("lazy close", 0)
	readBack("a", "alpha")
	// Fsync after a lazy close settles it once; a second Fsync is free.
	if err := fh.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	expect("fsync after lazy close", 1)
	if err := fh.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	expect("second fsync", 1)
	// Fsync with data commits synced: no OpSync.
	fh = open("b")
	write(fh, "beta")
	if err := fh.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	expect("fsync with data", 1)
	readBack("b", "beta")
	// An empty lazily created file closed lazily needs a sync at fsync.
	fh = open("c")
	if err := fh.Close(ctx); err != nil {
		t.Fatal(err)
	}
	expect("close of an empty file", 1)
	if err := fh.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	expect("fsync of an empty file", 2)
	// Many lazily closed files: one OpSync settles them all, and then a
	// fsync of any of them has nothing left to do.
	var fhs []*client.File
	for i := 0; i < 20; i++ {
		fh := open(fmt.Sprintf("m%d", i))
		write(fh, fmt.Sprintf("data %d", i))
		if err := fh.Close(ctx); err != nil {
			t.Fatal(err)
		}
		fhs = append(fhs, fh)
	}
	expect("20 lazy closes", 2)
	if err := fs.SyncLazy(ctx); err != nil {
		t.Fatal(err)
	}
	expect("SyncLazy", 3)
	for _, fh := range fhs {
		if err := fh.Fsync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	expect("fsyncs after SyncLazy", 3)
	for i := 0; i < 20; i++ {
		readBack(fmt.Sprintf("m%d", i), fmt.Sprintf("data %d", i))
	}
}

// A small file written with WriteFile (CreateWithData) costs one island
// request: its create carries the data. Another client reads it back; an
// existing name is overwritten the usual way; data over the inline maximum
// goes the usual way too, and an island refuses more than its own inline
// maximum from a client configured otherwise.
func TestCreateWithDataOneRequest(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	ctx := context.Background()
	fs, other := fc.newFS(t), fc.newFS(t)
	d, err := fs.MkdirAll(ctx, root, "/one", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	data := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	readBack := func(path string, want []byte) {
		t.Helper()
		got, err := other.ReadFile(ctx, root, path)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: read %d bytes (%v), want %d written", path, len(got), err, len(want))
		}
	}
	creates, commits := fc.islandOps(t, "create"), fc.islandOps(t, "commit")
	small := data(4096)
	if err := fs.WriteFile(ctx, root, "/one/small", small, 0o640); err != nil {
		t.Fatal(err)
	}
	if c, m := fc.islandOps(t, "create")-creates, fc.islandOps(t, "commit")-commits; c != 1 || m != 0 {
		t.Fatalf("a 4 KiB WriteFile cost %v creates and %v commits, want 1 and 0", c, m)
	}
	readBack("/one/small", small)
	a, err := other.Lookup(ctx, root, d.Ino, "small")
	if err != nil || a.Size != 4096 || a.Mode&0o777 != 0o640 {
		t.Fatalf("attributes of a file created with data: %+v %v", a, err)
	}
	shorter := data(100)
	if err := fs.WriteFile(ctx, root, "/one/small", shorter, 0o640); err != nil {
		t.Fatal(err)
	}
	readBack("/one/small", shorter)
	large := data(100 << 10)
	if err := fs.WriteFile(ctx, root, "/one/large", large, 0o644); err != nil {
		t.Fatal(err)
	}
	readBack("/one/large", large)

	// A client whose inline maximum exceeds the island's is refused.
	wide, err := client.NewFS(client.FSConfig{Data: newClient(t, fc.storage, nil), Map: fc.view, Logger: quietLogger(), InlineMax: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer wide.Close()
	_, err = wide.CreateWithData(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: "wide", Mode: 0o644}, data(32<<10))
	if metawire.Errno(err) != metawire.Errno(metawire.ErrFileTooBig) {
		t.Fatalf("32 KiB of initial data: %v, want EFBIG", err)
	}
	if _, err := other.Lookup(ctx, root, d.Ino, "wide"); metawire.Errno(err) != metawire.Errno(metawire.ErrNotFound) {
		t.Fatalf("a refused create with data left a file: %v", err)
	}
	if _, err := fs.CreateWithData(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: "dir", Mode: metawire.ModeDir | 0o755}, small); metawire.Errno(err) != metawire.Errno(metawire.ErrInvalid) {
		t.Fatalf("create with data of a directory: %v, want EINVAL", err)
	}

	// Lazy (as the mount): visible at once, no island sync until SyncLazy.
	lazy := fc.newFS(t)
	lazy.SetLazyCreate(true)
	lazy.SetLazyClose(true)
	syncs := fc.islandOps(t, "sync")
	if _, err := lazy.CreateWithData(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: "lazy", Mode: 0o644}, small); err != nil {
		t.Fatal(err)
	}
	readBack("/one/lazy", small)
	if got := fc.islandOps(t, "sync") - syncs; got != 0 {
		t.Fatalf("lazy create with data spent %v island syncs", got)
	}
	if err := lazy.SyncLazy(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fc.islandOps(t, "sync") - syncs; got != 1 {
		t.Fatalf("SyncLazy after a lazy create with data: %v island syncs, want 1", got)
	}
}

// TestFileReadViewOutlivesWindow reads a file through File.ReadView, as
// the FUSE mount does: a view is a slice of the read-ahead window itself,
// and it must keep its bytes after the file has moved on to later windows
// (whose buffers come from the same pool) until it is released. Dirty
// bytes of the file are never served from the window.
func TestFileReadViewOutlivesWindow(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	fs := fc.newFS(t)
	ctx := context.Background()
	data := randBytes(rand.New(rand.NewPCG(41, 41)), 48<<20) // three full windows
	if err := fs.WriteFile(ctx, root, "/v", data, 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := fs.Resolve(ctx, root, "/v")
	if err != nil {
		t.Fatal(err)
	}
	f, err := fs.Open(ctx, root, a.Ino)
	if err != nil {
		t.Fatal(err)
	}
	const n = 128 << 10
	p := make([]byte, n)
	var held []byte
	var release func()
	views := 0
	for off := 0; off < len(data); off += n {
		v, rel, err := f.ReadView(ctx, p, int64(off))
		if err != nil {
			t.Fatalf("ReadView at %d: %v", off, err)
		}
		if !bytes.Equal(v, data[off:min(off+n, len(data))]) {
			t.Fatalf("ReadView at %d: wrong bytes", off)
		}
		if &v[0] != &p[0] {
			views++
		}
		if off == n { // keep the second read's view while reading on
			held, release = v, rel
			continue
		}
		rel()
	}
	if views < len(data)/n/2 {
		t.Fatalf("only %d of %d reads were served from the window", views, len(data)/n)
	}
	if &held[0] == &p[0] {
		t.Fatal("the held read was not a view of the window")
	}
	// Later windows were fetched into pool buffers meanwhile.
	if !bytes.Equal(held, data[n:2*n]) {
		t.Fatal("a view changed after its window was replaced: the window went back to the pool while still held")
	}
	release()

	// A dirty block is read from the file's own writes, not the window.
	patch := bytes.Repeat([]byte{0xAB}, 1000)
	if _, err := f.WriteAt(ctx, patch, 3<<20); err != nil {
		t.Fatal(err)
	}
	v, rel, err := f.ReadView(ctx, p, 3<<20-500)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]byte(nil), data[3<<20-500:3<<20]...), patch...), data[3<<20+1000:3<<20-500+n]...)
	if !bytes.Equal(v, want) {
		t.Fatal("ReadView over a dirty block did not return the unflushed write")
	}
	rel()
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestFileStreamsFullBlocks checks write-back streaming: a block whose last
// byte is written goes to the log at once, so a sequential writer's
// stripes are on the storage servers before it closes; a streamed block
// written again commits its new bytes; and when streamed stripes fail,
// the flush reports EIO and the next flush appends every block again, so
// nothing that reached only a failed stripe is committed.
func TestFileStreamsFullBlocks(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	fset := faults.New()
	data := newClient(t, fc.storage, func(c *client.Config) { c.Faults = fset })
	fs, err := client.NewFS(client.FSConfig{Data: data, Map: fc.view, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	ctx := context.Background()
	const bs = 64 << 10
	want := randBytes(rand.New(rand.NewPCG(42, 42)), 12<<20) // three full stripes
	f, err := fs.CreateFile(ctx, root, "/s", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(want); off += bs {
		if _, err := f.WriteAt(ctx, want[off:off+bs], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	// The first two stripes filled and were sealed while writing.
	deadline := time.Now().Add(10 * time.Second)
	for data.Stats().StripesWritten < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d stripes written before any flush, want the full ones streamed", data.Stats().StripesWritten)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Rewrite part of a streamed block: the commit must carry the new one.
	patch := bytes.Repeat([]byte{0x5A}, 3000)
	if _, err := f.WriteAt(ctx, patch, 5*bs+100); err != nil {
		t.Fatal(err)
	}
	copy(want[5*bs+100:], patch)
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := fc.newFS(t).ReadFile(ctx, root, "/s")
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after streaming and a rewrite: %d bytes, equal=%v, err=%v", len(got), bytes.Equal(got, want), err)
	}

	// Streamed stripes that fail: every put fails while the blocks are
	// written and the flush reports it.
	g, err := fs.CreateFile(ctx, root, "/fail", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fset.Enable("client.put.before", faults.Action{Kind: faults.Error})
	want2 := randBytes(rand.New(rand.NewPCG(43, 43)), 8<<20)
	for off := 0; off < len(want2); off += bs {
		if _, err := g.WriteAt(ctx, want2[off:off+bs], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Fsync(ctx); !errors.Is(err, metawire.ErrIO) {
		t.Fatalf("fsync with every put failing: %v, want EIO", err)
	}
	fset.Disable("client.put.before")
	if err := g.Fsync(ctx); err != nil {
		t.Fatalf("fsync once puts work again: %v", err)
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, err = fc.newFS(t).ReadFile(ctx, root, "/fail")
	if err != nil || !bytes.Equal(got, want2) {
		t.Fatalf("after failed streamed stripes: %d bytes, equal=%v, err=%v", len(got), bytes.Equal(got, want2), err)
	}
}

// TestReadAheadBudget reads files sequentially through an FS whose
// read-ahead budget holds little more than one window: every byte still
// reads back right, the windows alive never exceed the budget by more
// than one foreground fetch, and their bytes go back to the budget when
// the files are released, or when a file dropped without Release is
// collected.
func TestReadAheadBudget(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	ctx := context.Background()
	data := randBytes(rand.New(rand.NewPCG(44, 44)), 40<<20)
	w := fc.newFS(t)
	for _, name := range []string{"/a", "/b"} {
		if err := w.WriteFile(ctx, root, name, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const budget = 20 << 20
	fs, err := client.NewFS(client.FSConfig{Data: newClient(t, fc.storage, nil), Map: fc.view, Logger: quietLogger(), ReadAheadMax: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	open := func(name string) *client.File {
		a, err := fs.Resolve(ctx, root, name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := fs.Open(ctx, root, a.Ino)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	fa, fb := open("/a"), open("/b")
	const n = 1 << 20
	pa, pb := make([]byte, n), make([]byte, n)
	peak := int64(0)
	for off := 0; off < len(data); off += n { // two readers, interleaved
		for _, r := range []struct {
			f *client.File
			p []byte
		}{{fa, pa}, {fb, pb}} {
			got, err := r.f.ReadAt(ctx, r.p, int64(off))
			if err != nil || got != n || !bytes.Equal(r.p, data[off:off+n]) {
				t.Fatalf("read at %d: %d bytes, %v, equal=%v", off, got, err, bytes.Equal(r.p, data[off:off+n]))
			}
			peak = max(peak, fs.ReadAheadBytes())
		}
	}
	if peak > budget+n {
		t.Fatalf("read-ahead peaked at %d bytes with a budget of %d", peak, budget)
	}
	if peak < 16<<20 {
		t.Fatalf("read-ahead peaked at %d bytes: no window was used", peak)
	}
	fa.Release()
	fb.Release()
	if got := fs.ReadAheadBytes(); got != 0 {
		t.Fatalf("after Release: %d read-ahead bytes still counted", got)
	}
	// A File dropped without Release gives its share back when collected.
	fc2 := open("/a")
	if _, err := fc2.ReadAt(ctx, pa, 0); err != nil {
		t.Fatal(err)
	}
	if fs.ReadAheadBytes() == 0 {
		t.Fatal("no read-ahead after a read from offset 0")
	}
	fc2 = nil
	waitCollected(t, "read-ahead", fs.ReadAheadBytes)
}

// waitCollected runs the garbage collector until count (a dropped File's
// share of an FS-wide total) is back to zero, failing after 10 s.
func waitCollected(t *testing.T, what string, count func() int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for count() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a dropped File's %s (%d bytes) was never given back", what, count())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDirtyTotalBound writes four files at once, none reaching its own
// dirty limit, through an FS whose total dirty limit is far below their
// sum: writers holding a share write back early, so the total stays near
// the limit; every byte reads back; the total is zero once the files are
// closed, and a File dropped with dirty data gives its share back when
// collected.
func TestDirtyTotalBound(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	ctx := context.Background()
	const limit, per, n = 16 << 20, 40 << 20, 1 << 20
	fs, err := client.NewFS(client.FSConfig{Data: newClient(t, fc.storage, nil), Map: fc.view, Logger: quietLogger(), DirtyTotalMax: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	data := randBytes(rand.New(rand.NewPCG(45, 45)), per)
	var files []*client.File
	for i := range 4 {
		f, err := fs.CreateFile(ctx, root, fmt.Sprintf("/d%d", i), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	peak := int64(0)
	for off := 0; off < per; off += n {
		for _, f := range files {
			if _, err := f.WriteAt(ctx, data[off:off+n], int64(off)); err != nil {
				t.Fatal(err)
			}
			peak = max(peak, fs.DirtyBytes())
		}
	}
	if bound := int64(limit + 4*(8<<20+n)); peak > bound {
		t.Fatalf("dirty total peaked at %d MiB, want at most %d MiB", peak>>20, bound>>20)
	}
	for _, f := range files {
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := fs.DirtyBytes(); got != 0 {
		t.Fatalf("after closing every file: %d dirty bytes counted", got)
	}
	for i := range 4 {
		got, err := fc.newFS(t).ReadFile(ctx, root, fmt.Sprintf("/d%d", i))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("file %d: %d bytes, %v, equal=%v", i, len(got), err, bytes.Equal(got, data))
		}
	}
	f, err := fs.CreateFile(ctx, root, "/dropped", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, data[:3*n], 0); err != nil {
		t.Fatal(err)
	}
	if fs.DirtyBytes() == 0 {
		t.Fatal("no dirty bytes counted after a write")
	}
	f = nil
	waitCollected(t, "dirty share", fs.DirtyBytes)
}
