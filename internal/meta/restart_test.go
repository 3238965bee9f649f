package meta

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

func TestRestartKeepsStateAndNeverReusesInodes(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	d := must(r.mkdir(rootIno(), "d", 0o755))
	f := must(r.create(d.Ino, "f", 0o644))
	wantErr(t, r.unlink(d.Ino, "f"), nil, "unlink")
	c.restart(1, c.fs[1])
	if got := must(r.lookup(rootIno(), "d")); got.Ino != d.Ino {
		t.Fatal("directory lost across restart")
	}
	g := must(r.create(d.Ino, "g", 0o644))
	if namespace.Ino(g.Ino).Seq() <= namespace.Ino(f.Ino).Seq() {
		t.Fatalf("inode number reused: %v after %v", namespace.Ino(g.Ino), namespace.Ino(f.Ino))
	}
	// The directory belongs to island 1: another id refuses it.
	c.isl[1].Close()
	_, err := newIsland(Config{Dir: "/island", FS: c.fs[1], ID: 7, Map: c.m, Peer: c.net.Peer(7), Logger: quiet}, testTiming())
	if err == nil {
		t.Fatal("opened island 1's directory as island 7")
	}
	c.open(1)
	c.mustFsck()
}

func TestLocalFailpointChangesNothing(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	c.fp[1].Enable(FailLocalBeforeCommit, faults.Action{Kind: faults.Error})
	_, err := r.create(rootIno(), "f", 0o644)
	wantErr(t, err, faults.ErrInjected, "create at failpoint")
	c.fp[1].Disable(FailLocalBeforeCommit)
	_, err = r.lookup(rootIno(), "f")
	wantErr(t, err, metawire.ErrNotFound, "failed create left an entry")
	c.mustFsck()
}

func TestCommitWrongIslandAppliesNothing(t *testing.T) {
	w := newThreeWay(t)
	r := w.r
	a, b := w.ids[0], w.ids[1]
	fa := must(r.create(w.dirs[a].Ino, "f", 0o644))
	fb := must(r.create(w.dirs[b].Ino, "f", 0o644))
	req := metawire.CommitReq{Writes: []metawire.FileWrite{
		{Ino: fa.Ino, Size: 1, SetInline: true, Inline: []byte("a")},
		{Ino: fb.Ino, Size: 1, SetInline: true, Inline: []byte("b")},
	}}
	_, err := w.isl[a].Handle(bg, metawire.OpCommit, 1, metawire.Marshal(&req))
	wantErr(t, err, metawire.ErrWrongIsland, "commit naming another island's inode")
	if m := must(r.readmap(fa.Ino, 0, 0)); m.Attr.Size != 0 || len(m.Inline) != 0 {
		t.Fatal("part of a refused batch applied")
	}
}

// A lazy create is durable once the island's log is synced: by an OpSync
// or by a commit to the file. One that was not synced may be lost in a
// crash, but its inode number is never handed out again.
func TestLazyCreateDurability(t *testing.T) {
	c := newCluster(t, 1)
	c.isl[1].Close()
	isl, err := newIsland(Config{Dir: "/island", FS: c.fs[1], ID: 1, Map: c.m, Peer: c.net.Peer(1), Faults: c.fp[1], Logger: quiet},
		func() timing { tm := testTiming(); tm.noSyncer = true; return tm }())
	if err != nil {
		t.Fatal(err)
	}
	c.isl[1] = isl
	r := c.root()
	d := must(r.mkdir(rootIno(), "d", 0o755))
	lazy := func(name string) metawire.Attr {
		t.Helper()
		resp, err := r.createReq(metawire.OpCreate, metawire.CreateReq{Dir: d.Ino, Name: name, Mode: metawire.ModeFile | 0o644, Lazy: true})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Attr
	}
	crash := func() {
		c.restart(1, c.fs[1].CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(1, 2))}))
		c.isl[1].timing.noSyncer = true
	}
	a := lazy("a")
	if err := c.call(metawire.OpSync, d.Ino, metawire.Empty{}, nil); err != nil {
		t.Fatal(err)
	}
	crash()
	if got := must(r.lookup(d.Ino, "a")); got.Ino != a.Ino {
		t.Fatal("lazy create synced by OpSync lost in a crash")
	}
	b := lazy("b")
	must(r.commit(metawire.FileWrite{Ino: b.Ino, Size: 5, SetInline: true, Inline: []byte("hello")}))
	crash()
	if m := must(r.readmap(b.Ino, 0, 0)); string(m.Inline) != "hello" {
		t.Fatalf("lazy create committed to lost in a crash: %q", m.Inline)
	}
	lost := lazy("c")
	if got := must(r.lookup(d.Ino, "c")); got.Ino != lost.Ino {
		t.Fatal("a lazy create is not visible at once")
	}
	crash()
	_, err = r.lookup(d.Ino, "c")
	wantErr(t, err, metawire.ErrNotFound, "unsynced lazy create after a crash (nothing synced it)")
	e := must(r.create(d.Ino, "e", 0o644))
	if namespace.Ino(e.Ino).Seq() <= namespace.Ino(lost.Ino).Seq() {
		t.Fatalf("inode number of a lost create reused: %v after %v", namespace.Ino(e.Ino), namespace.Ino(lost.Ino))
	}

	// Lazy commits (close on the mount): visible at once, durable after
	// an OpSync or any synced write, and lost by a crash before either;
	// the file then keeps its last durable contents.
	write := func(data string) metawire.FileWrite {
		return metawire.FileWrite{Ino: e.Ino, Size: uint64(len(data)), SetInline: true, Inline: []byte(data)}
	}
	content := func() string {
		t.Helper()
		return string(must(r.readmap(e.Ino, 0, 0)).Inline)
	}
	must(r.commit(write("durable")))
	must(r.lazyCommit(write("lazy-1")))
	if got := content(); got != "lazy-1" {
		t.Fatalf("lazy commit not visible at once: %q", got)
	}
	crash()
	if got := content(); got != "durable" {
		t.Fatalf("after a crash before any sync: %q, want the last synced contents", got)
	}
	must(r.lazyCommit(write("lazy-2")))
	if err := c.call(metawire.OpSync, e.Ino, metawire.Empty{}, nil); err != nil {
		t.Fatal(err)
	}
	crash()
	if got := content(); got != "lazy-2" {
		t.Fatalf("lazy commit synced by OpSync lost in a crash: %q", got)
	}
	must(r.lazyCommit(write("lazy-3")))
	must(r.create(d.Ino, "f", 0o644)) // a synced write covers it
	crash()
	if got := content(); got != "lazy-3" {
		t.Fatalf("lazy commit followed by a synced create lost in a crash: %q", got)
	}
	c.mustFsck()
}

// A create with data (CreateReq.Data) makes the file and its contents in
// one batch: synced, it survives a crash whole; lazy, a crash before any
// sync leaves no trace of it (never an empty file); the island refuses
// data over its inline maximum or for anything but a regular file, and an
// existing name keeps its contents.
func TestCreateWithDataAtomic(t *testing.T) {
	c := newCluster(t, 1)
	c.isl[1].timing.noSyncer = true
	r := c.root()
	d := must(r.mkdir(rootIno(), "d", 0o755))
	create := func(name, data string, lazy bool) (metawire.CreateResp, error) {
		return r.createReq(metawire.OpCreate, metawire.CreateReq{Dir: d.Ino, Name: name, Mode: metawire.ModeFile | 0o644, Lazy: lazy, Data: []byte(data)})
	}
	crash := func() {
		c.restart(1, c.fs[1].CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(3, 4))}))
		c.isl[1].timing.noSyncer = true
	}
	content := func(name string) (metawire.Attr, string) {
		t.Helper()
		a := must(r.lookup(d.Ino, name))
		return a, string(must(r.readmap(a.Ino, 0, 0)).Inline)
	}
	statfs := func() metawire.StatFSResp {
		t.Helper()
		var r metawire.StatFSResp
		if err := c.call(metawire.OpStatFS, d.Ino, metawire.Empty{}, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	before := statfs()
	resp, err := create("synced", "synced contents", false)
	if err != nil || resp.Existed || resp.Attr.Size != 15 || !resp.Attr.Inline {
		t.Fatalf("create with data: %+v %v", resp.Attr, err)
	}
	if a, got := content("synced"); got != "synced contents" || a.Size != 15 || a != resp.Attr {
		t.Fatalf("after create with data: %q, %+v; reply said %+v", got, a, resp.Attr)
	}
	if after := statfs(); after.Bytes != before.Bytes+15 || after.Inodes != before.Inodes+1 {
		t.Fatalf("statfs after a create with 15 bytes: %+v, before %+v", after, before)
	}
	if err := r.unlink(d.Ino, "synced"); err != nil {
		t.Fatal(err)
	}
	if after := statfs(); after != before {
		t.Fatalf("statfs after the file is unlinked: %+v, before %+v", after, before)
	}
	if _, err := create("synced", "synced contents", false); err != nil {
		t.Fatal(err)
	}
	if _, err := create("lazy", "lazy contents", true); err != nil {
		t.Fatal(err)
	}
	if _, got := content("lazy"); got != "lazy contents" {
		t.Fatalf("lazy create with data not visible at once: %q", got)
	}
	crash()
	if _, got := content("synced"); got != "synced contents" {
		t.Fatalf("synced create with data after a crash: %q", got)
	}
	_, err = r.lookup(d.Ino, "lazy")
	wantErr(t, err, metawire.ErrNotFound, "unsynced lazy create with data after a crash")

	resp, err = create("synced", "other", false)
	if err != nil || !resp.Existed {
		t.Fatalf("create with data over an existing name: %+v %v", resp, err)
	}
	if _, got := content("synced"); got != "synced contents" {
		t.Fatalf("create with data over an existing name changed it: %q", got)
	}
	_, err = create("big", strings.Repeat("x", c.isl[1].cfg.InlineMax+1), false)
	wantErr(t, err, metawire.ErrFileTooBig, "data over the inline maximum")
	_, err = r.createReq(metawire.OpCreate, metawire.CreateReq{Dir: d.Ino, Name: "fifo", Mode: metawire.ModeFIFO | 0o644, Data: []byte("x")})
	wantErr(t, err, metawire.ErrInvalid, "data for a FIFO")
	_, err = r.createReq(metawire.OpMkdir, metawire.CreateReq{Dir: d.Ino, Name: "dir", Mode: 0o755, Data: []byte("x")})
	wantErr(t, err, metawire.ErrInvalid, "data for a directory")
	for _, name := range []string{"big", "fifo", "dir"} {
		_, err = r.lookup(d.Ino, name)
		wantErr(t, err, metawire.ErrNotFound, "refused create "+name)
	}
	c.mustFsck()
}

// An island's incarnation (SyncResp.Boot, also in create and commit
// replies) survives a clean restart, which syncs every lazy change, and
// changes after a crash, which may lose some: that is how a client holding
// lazily acknowledged changes learns they may be gone.
func TestIslandBootChangesOnlyAfterCrash(t *testing.T) {
	c := newCluster(t, 1)
	boot := func() uint64 {
		t.Helper()
		var r metawire.SyncResp
		if err := c.call(metawire.OpSync, rootIno(), metawire.Empty{}, &r); err != nil {
			t.Fatal(err)
		}
		if r.Boot == 0 {
			t.Fatal("zero incarnation")
		}
		return r.Boot
	}
	r := c.root()
	first := boot()
	d := must(r.mkdir(rootIno(), "d", 0o755))
	resp, err := r.createReq(metawire.OpCreate, metawire.CreateReq{Dir: d.Ino, Name: "f", Mode: metawire.ModeFile | 0o644, Lazy: true})
	if err != nil || resp.Boot != first {
		t.Fatalf("create reply incarnation %x (%v), sync says %x", resp.Boot, err, first)
	}
	if cr := must(r.lazyCommit(metawire.FileWrite{Ino: resp.Attr.Ino, Size: 1, SetInline: true, Inline: []byte("x")})); cr.Boot != first {
		t.Fatalf("commit reply incarnation %x, sync says %x", cr.Boot, first)
	}
	c.restart(1, c.fs[1]) // clean: Close syncs
	if got := boot(); got != first {
		t.Fatalf("incarnation after a clean restart %x, want %x", got, first)
	}
	c.restart(1, c.fs[1].CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(5, 6))}))
	second := boot()
	if second == first {
		t.Fatal("incarnation unchanged after a crash")
	}
	c.restart(1, c.fs[1].CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(7, 8))}))
	if got := boot(); got == second || got == first {
		t.Fatalf("incarnation %x after a second crash (before: %x, %x)", got, first, second)
	}
	c.mustFsck()
}
