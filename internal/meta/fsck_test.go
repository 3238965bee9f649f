package meta

import (
	"strings"
	"testing"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/cockroachdb/pebble/v2"
)

// TestFsckFindsDamage breaks the namespace behind the island's back and
// checks that Fsck names each kind of damage.
func TestFsckFindsDamage(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	isl := c.isl[1]
	d := must(r.mkdir(rootIno(), "d", 0o755))
	e := must(r.mkdir(d.Ino, "e", 0o755))
	f := must(r.create(d.Ino, "f", 0o644))
	must(r.commit(metawire.FileWrite{Ino: f.Ino, Size: 10, Blocks: []metawire.Block{{Index: 0, Ptr: ptr(3, 4, 0, 10)}}}))
	rep := c.fsck()
	if !rep.Clean() || len(rep.Stripes) != 1 || rep.Stripes[0].Log != 3 || rep.Stripes[0].Seq != 4 {
		t.Fatalf("clean fsck: %+v", rep)
	}
	set := func(n *inode) {
		if err := isl.db.Set(inodeKey(n.ino), n.encode(), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	// Wrong link count.
	fn := must(readInode(isl.db, namespace.Ino(f.Ino)))
	fn.nlink = 3
	set(fn)
	// An orphan inode.
	orphan := newInode(namespace.MakeIno(namespace.RootBucket, 999), &metawire.InodeInit{Mode: metawire.ModeFile | 0o644, Nlink: 1})
	set(orphan)
	// A dangling entry.
	ghost := dirent{ino: namespace.MakeIno(namespace.RootBucket, 998), typ: metawire.ModeFile, cookie: 50}
	_ = isl.db.Set(direntKey(namespace.Ino(d.Ino), "ghost"), ghost.encode(), pebble.Sync)
	_ = isl.db.Set(cookieKey(namespace.Ino(d.Ino), 50), encodeCookie("ghost", ghost.ino, ghost.typ), pebble.Sync)
	// A cycle: e becomes its own parent's parent (d named inside e, and
	// d's entry in the root gone).
	_ = isl.db.Delete(direntKey(namespace.RootIno, "d"), pebble.Sync)
	_ = isl.db.Set(direntKey(namespace.Ino(e.Ino), "loop"), dirent{ino: namespace.Ino(d.Ino), typ: metawire.ModeDir, cookie: 60}.encode(), pebble.Sync)
	// A corrupt record.
	_ = isl.db.Set(xattrKey(namespace.Ino(f.Ino), "user.bad"), []byte{1, 2}, pebble.Sync)

	rep = c.fsck()
	all := strings.Join(rep.Problems, "\n")
	for _, want := range []string{"has nlink 3 but 1 entries", "orphan inode", "dangling entry \"ghost\"",
		"not reachable from the root", "cookie 60", "xattr \"user.bad\""} {
		if !strings.Contains(all, want) {
			t.Errorf("fsck did not report %q; got:\n%s", want, all)
		}
	}
}
