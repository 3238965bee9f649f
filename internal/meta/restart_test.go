package meta

import (
	"testing"

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
