package meta

import (
	"testing"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// threeWay sets up three islands and, under the root, one directory on
// each island, with the root's own island known.
type threeWay struct {
	*cluster
	r     *client
	home  namespace.IslandID                   // the root's island
	dirs  map[namespace.IslandID]metawire.Attr // /dN on island N
	paths map[namespace.IslandID]string
}

func newThreeWay(t *testing.T) *threeWay {
	c := newCluster(t, 3)
	w := &threeWay{cluster: c, r: c.root(), home: c.owner(rootIno()),
		dirs: map[namespace.IslandID]metawire.Attr{}, paths: map[namespace.IslandID]string{}}
	for _, id := range c.ids {
		name := c.nameOn("/", "d", id)
		w.dirs[id] = must(w.r.mkdir(rootIno(), name, 0o777))
		w.paths[id] = "/" + name
		if got := c.owner(w.dirs[id].Ino); got != id {
			t.Fatalf("%s on island %d, want %d", name, got, id)
		}
	}
	c.mustFsck()
	return w
}

// others returns the two islands that are not id.
func (w *threeWay) others(id namespace.IslandID) (namespace.IslandID, namespace.IslandID) {
	var out []namespace.IslandID
	for _, x := range w.ids {
		if x != id {
			out = append(out, x)
		}
	}
	return out[0], out[1]
}

func TestCrossIslandMkdirRmdir(t *testing.T) {
	w := newThreeWay(t)
	r := w.r
	for _, id := range w.ids {
		a, b := w.others(id)
		parent := w.dirs[id]
		// A child on each other island.
		for _, target := range []namespace.IslandID{a, b, id} {
			name := w.nameOn(w.paths[id], "c", target)
			child := must(r.mkdir(parent.Ino, name, 0o755))
			if w.owner(child.Ino) != target {
				t.Fatalf("child %s on island %d, want %d", name, w.owner(child.Ino), target)
			}
			if got := must(r.lookup(parent.Ino, name)); got.Ino != child.Ino || !got.IsDir() {
				t.Fatalf("lookup %s: %+v", name, got)
			}
			if got := must(r.lookup(child.Ino, "..")); got.Ino != parent.Ino {
				t.Fatalf(".. of %s: %v", name, got.Ino)
			}
			f := must(r.create(child.Ino, "f", 0o644))
			if w.owner(f.Ino) != target {
				t.Fatal("file not on its directory's island")
			}
			w.mustFsck()
			wantErr(t, r.rmdir(parent.Ino, name), metawire.ErrNotEmpty, "rmdir non-empty remote dir")
			wantErr(t, r.unlink(child.Ino, "f"), nil, "unlink")
			wantErr(t, r.rmdir(parent.Ino, name), nil, "rmdir remote dir")
			_, err := r.getattr(child.Ino)
			wantErr(t, err, metawire.ErrStale, "removed directory")
			if got := must(r.getattr(parent.Ino)); got.Nlink != 2 {
				t.Fatalf("parent nlink %d", got.Nlink)
			}
			w.mustFsck()
		}
	}
}

func TestCrossIslandRenameLinkUnlink(t *testing.T) {
	w := newThreeWay(t)
	r := w.r
	ids := w.ids
	d1, d2, d3 := w.dirs[ids[0]], w.dirs[ids[1]], w.dirs[ids[2]]
	// A file moves from island 1's directory to island 2's: the inode
	// stays where it was created.
	f := must(r.create(d1.Ino, "f", 0o644))
	wantErr(t, r.rename(d1.Ino, "f", d2.Ino, "g", 0), nil, "cross-island file rename")
	if got := must(r.lookup(d2.Ino, "g")); got.Ino != f.Ino || got.Ctime <= f.Ctime {
		t.Fatalf("moved file %+v", got)
	}
	_, err := r.lookup(d1.Ino, "f")
	wantErr(t, err, metawire.ErrNotFound, "old name")
	w.mustFsck()
	// Replace a file on island 3 with the remote inode.
	victim := must(r.create(d3.Ino, "v", 0o644))
	wantErr(t, r.rename(d2.Ino, "g", d3.Ino, "v", 0), nil, "replace across islands")
	_, err = r.getattr(victim.Ino)
	wantErr(t, err, metawire.ErrStale, "replaced file")
	w.mustFsck()
	// Hard link from island 1's directory to the inode on island 1, entry
	// in island 2's directory; then unlink the remote entry.
	l := must(r.link(f.Ino, d2.Ino, "link"))
	if l.Nlink != 2 {
		t.Fatalf("nlink after remote link %d", l.Nlink)
	}
	w.mustFsck()
	wantErr(t, r.unlink(d3.Ino, "v"), nil, "unlink one name")
	if got := must(r.getattr(f.Ino)); got.Nlink != 1 {
		t.Fatalf("nlink %d", got.Nlink)
	}
	wantErr(t, r.unlink(d2.Ino, "link"), nil, "unlink the last remote name")
	_, err = r.getattr(f.Ino)
	wantErr(t, err, metawire.ErrStale, "inode deleted with its last link")
	w.mustFsck()

	// Directories: move /d1/x (on island 3) into /d2, over an empty dir on
	// island 1; parents' link counts and ".." follow.
	xName := w.nameOn(w.paths[ids[0]], "x", ids[2])
	x := must(r.mkdir(d1.Ino, xName, 0o755))
	yName := w.nameOn(w.paths[ids[1]], "y", ids[0])
	y := must(r.mkdir(d2.Ino, yName, 0o755))
	must(r.create(x.Ino, "inside", 0o644))
	wantErr(t, r.rename(d2.Ino, yName, d1.Ino, xName, 0), metawire.ErrNotEmpty, "dir over non-empty remote dir")
	wantErr(t, r.rename(d1.Ino, xName, d2.Ino, yName, 0), nil, "dir over empty dir across islands")
	_, err = r.getattr(y.Ino)
	wantErr(t, err, metawire.ErrStale, "replaced directory")
	if got := must(r.lookup(x.Ino, "..")); got.Ino != d2.Ino {
		t.Fatalf(".. after move: %v", got.Ino)
	}
	if a, b := must(r.getattr(d1.Ino)), must(r.getattr(d2.Ino)); a.Nlink != 2 || b.Nlink != 3 {
		t.Fatalf("nlinks %d %d", a.Nlink, b.Nlink)
	}
	w.mustFsck()
	// Loops through other islands: /d2/yName (x) cannot move into its own
	// child, which lives on island 3 like x itself; nor can /d2 move into
	// x.
	zName := w.nameOn(w.paths[ids[2]]+"/"+xName, "z", ids[1])
	z := must(r.mkdir(x.Ino, zName, 0o755))
	_ = z
	wantErr(t, r.rename(d2.Ino, yName, z.Ino, "loop", 0), metawire.ErrInvalid, "dir into its own subtree")
	wantErr(t, r.rename(rootIno(), w.paths[ids[1]][1:], z.Ino, "loop", 0), metawire.ErrInvalid, "ancestor into descendant")
	// Same-directory rename of a remote subdirectory.
	wantErr(t, r.rename(d2.Ino, yName, d2.Ino, "renamed", 0), nil, "rename remote dir in place")
	must(r.lookup(d2.Ino, "renamed"))
	// Moving a whole subtree across the root.
	wantErr(t, r.rename(d2.Ino, "renamed", d3.Ino, "moved", 0), nil, "move subtree")
	if got := must(r.lookup(must(r.lookup(d3.Ino, "moved")).Ino, zName)); got.Ino != z.Ino {
		t.Fatal("subtree lost")
	}
	w.mustFsck()
	// Readdir of a directory with remote subdirectories: attrs only for
	// local entries.
	rd := must(r.readdir(d3.Ino, 0, 0, true))
	for _, e := range rd.Entries {
		if e.HasAttr != (w.owner(e.Ino) == ids[2]) {
			t.Fatalf("entry %s: HasAttr %v on island %d", e.Name, e.HasAttr, w.owner(e.Ino))
		}
	}
}
