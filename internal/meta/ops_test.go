package meta

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/cockroachdb/pebble/v2"
)

func TestRootAndBasics(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	ra := must(r.getattr(rootIno()))
	if !ra.IsDir() || ra.Nlink != 2 || ra.Mode&0o7777 != 0o755 || ra.UID != 0 {
		t.Fatalf("root attr %+v", ra)
	}
	d := must(r.mkdir(rootIno(), "d", 0o750))
	if !d.IsDir() || d.Nlink != 2 || d.Mode&0o7777 != 0o750 {
		t.Fatalf("mkdir attr %+v", d)
	}
	if ra2 := must(r.getattr(rootIno())); ra2.Nlink != 3 || ra2.Mtime <= ra.Mtime {
		t.Fatalf("root after mkdir: nlink %d mtime %d->%d", ra2.Nlink, ra.Mtime, ra2.Mtime)
	}
	f := must(r.create(d.Ino, "f", metawire.ModeFile|0o640))
	if !f.IsRegular() || f.Nlink != 1 || !f.Inline || f.BlockSize != 65536 || f.Size != 0 {
		t.Fatalf("create attr %+v", f)
	}
	if namespace.Ino(f.Ino).Bucket() != namespace.Ino(d.Ino).Bucket() {
		t.Fatal("file not in its directory's bucket")
	}
	l := must(r.symlink(d.Ino, "l", "../target"))
	if !l.IsSymlink() || l.Size != 9 || l.Mode&0o777 != 0o777 {
		t.Fatalf("symlink attr %+v", l)
	}
	var rl metawire.ReadlinkResp
	if err := c.call(metawire.OpReadlink, l.Ino, &metawire.InoReq{Ino: l.Ino}, &rl); err != nil || rl.Target != "../target" {
		t.Fatalf("readlink = %q, %v", rl.Target, err)
	}
	err := c.call(metawire.OpReadlink, f.Ino, &metawire.InoReq{Ino: f.Ino}, &rl)
	wantErr(t, err, metawire.ErrInvalid, "readlink of a file")
	if got := must(r.lookup(d.Ino, "f")); got.Ino != f.Ino {
		t.Fatalf("lookup f = %v", got.Ino)
	}
	if got := must(r.lookup(d.Ino, ".")); got.Ino != d.Ino {
		t.Fatal("lookup .")
	}
	if got := must(r.lookup(d.Ino, "..")); got.Ino != rootIno() {
		t.Fatal("lookup ..")
	}
	if got := must(r.lookup(rootIno(), "..")); got.Ino != rootIno() {
		t.Fatal("lookup .. of root")
	}
	fifo := must(r.create(d.Ino, "p", metawire.ModeFIFO|0o600))
	if fifo.Mode&metawire.ModeType != metawire.ModeFIFO {
		t.Fatalf("fifo mode %o", fifo.Mode)
	}
	dev, err := r.createReq(metawire.OpCreate, metawire.CreateReq{Dir: d.Ino, Name: "c", Mode: metawire.ModeChar | 0o600, Rdev: 0x0501, Exclusive: true})
	if err != nil || dev.Attr.Rdev != 0x0501 {
		t.Fatalf("mknod: %+v %v", dev.Attr, err)
	}
	_, err = r.create(d.Ino, "x", metawire.ModeDir|0o755)
	wantErr(t, err, metawire.ErrInvalid, "create with directory type")
	st := metawire.StatFSResp{}
	if err := c.call(metawire.OpStatFS, rootIno(), &metawire.Empty{}, &st); err != nil || st.Inodes != 6 {
		t.Fatalf("statfs %+v %v", st, err)
	}
	c.mustFsck()
}

func TestNamesAndLimits(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	long := strings.Repeat("n", 255)
	cases := []struct {
		name string
		op   func() error
		want error
	}{
		{"empty name", func() error { _, err := r.create(rootIno(), "", 0o644); return err }, metawire.ErrInvalid},
		{"slash", func() error { _, err := r.create(rootIno(), "a/b", 0o644); return err }, metawire.ErrInvalid},
		{"nul", func() error { _, err := r.mkdir(rootIno(), "a\x00", 0o755); return err }, metawire.ErrInvalid},
		{"256 bytes", func() error { _, err := r.create(rootIno(), long+"x", 0o644); return err }, metawire.ErrNameTooLong},
		{"255 bytes", func() error { _, err := r.create(rootIno(), long, 0o644); return err }, nil},
		{"mkdir .", func() error { _, err := r.mkdir(rootIno(), ".", 0o755); return err }, metawire.ErrExists},
		{"mkdir ..", func() error { _, err := r.mkdir(rootIno(), "..", 0o755); return err }, metawire.ErrExists},
		{"create .", func() error {
			_, err := r.createReq(metawire.OpCreate, metawire.CreateReq{Dir: rootIno(), Name: ".", Mode: 0o644})
			return err
		}, metawire.ErrIsDir},
		{"symlink ..", func() error { _, err := r.symlink(rootIno(), "..", "x"); return err }, metawire.ErrExists},
		{"symlink target too long", func() error { _, err := r.symlink(rootIno(), "s", strings.Repeat("t", 4097)); return err }, metawire.ErrNameTooLong},
		{"symlink target 4096", func() error { _, err := r.symlink(rootIno(), "s", strings.Repeat("t", 4096)); return err }, nil},
		{"symlink empty target", func() error { _, err := r.symlink(rootIno(), "s2", ""); return err }, metawire.ErrNotFound},
		{"lookup long", func() error { _, err := r.lookup(rootIno(), long+"x"); return err }, metawire.ErrNameTooLong},
		{"lookup missing", func() error { _, err := r.lookup(rootIno(), "missing"); return err }, metawire.ErrNotFound},
		{"exists", func() error { _, err := r.mkdir(rootIno(), long, 0o755); return err }, metawire.ErrExists},
		{"rename to ..", func() error { return r.rename(rootIno(), long, rootIno(), "..", 0) }, metawire.ErrInvalid},
		{"rename from .", func() error { return r.rename(rootIno(), ".", rootIno(), "x", 0) }, metawire.ErrInvalid},
		{"link as .", func() error { _, err := r.link(rootIno(), rootIno(), "."); return err }, metawire.ErrExists},
	}
	for _, tc := range cases {
		wantErr(t, tc.op(), tc.want, tc.name)
	}
	// Path length: directories nest until their creation path would pass
	// 4096 bytes.
	dirName := strings.Repeat("m", 255)
	dir := rootIno()
	for range 15 {
		dir = must(r.mkdir(dir, dirName, 0o755)).Ino // path grows by 256 each level
	}
	last := must(r.mkdir(dir, dirName, 0o755)) // 16*256 = 4096 bytes: fits
	_, err := r.mkdir(last.Ino, "x", 0o755)
	wantErr(t, err, metawire.ErrNameTooLong, "mkdir past 4096 bytes of path")
	must(r.create(last.Ino, "file", 0o644)) // files do not hash their path
	c.mustFsck()
}

func TestRemoveErrors(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	d := must(r.mkdir(rootIno(), "d", 0o755))
	f := must(r.create(d.Ino, "f", 0o644))
	must(r.mkdir(d.Ino, "sub", 0o755))
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"unlink missing", r.unlink(d.Ino, "nope"), metawire.ErrNotFound},
		{"unlink dir", r.unlink(d.Ino, "sub"), metawire.ErrIsDir},
		{"unlink .", r.unlink(d.Ino, "."), metawire.ErrIsDir},
		{"rmdir file", r.rmdir(d.Ino, "f"), metawire.ErrNotDir},
		{"rmdir non-empty", r.rmdir(rootIno(), "d"), metawire.ErrNotEmpty},
		{"rmdir .", r.rmdir(d.Ino, "."), metawire.ErrInvalid},
		{"rmdir ..", r.rmdir(d.Ino, ".."), metawire.ErrNotEmpty},
		{"rmdir in a file", r.rmdir(f.Ino, "x"), metawire.ErrNotDir},
		{"unknown dir", r.unlink(uint64(namespace.MakeIno(namespace.RootBucket, 999)), "x"), metawire.ErrStale},
	}
	for _, tc := range cases {
		wantErr(t, tc.err, tc.want, tc.name)
	}
	_, err := r.lookup(f.Ino, "x")
	wantErr(t, err, metawire.ErrNotDir, "lookup in a file")
	_, err = r.getattr(uint64(namespace.MakeIno(namespace.RootBucket, 999)))
	wantErr(t, err, metawire.ErrStale, "getattr unknown")
	_, err = r.getattr(uint64(namespace.MakeIno(namespace.RootBucket, 0)))
	wantErr(t, err, metawire.ErrStale, "getattr seq 0")

	wantErr(t, r.unlink(d.Ino, "f"), nil, "unlink")
	_, err = r.getattr(f.Ino)
	wantErr(t, err, metawire.ErrStale, "unlinked inode is deleted")
	wantErr(t, r.rmdir(d.Ino, "sub"), nil, "rmdir")
	if a := must(r.getattr(d.Ino)); a.Nlink != 2 {
		t.Fatalf("nlink after rmdir %d", a.Nlink)
	}
	wantErr(t, r.rmdir(rootIno(), "d"), nil, "rmdir emptied")
	if a := must(r.getattr(rootIno())); a.Nlink != 2 {
		t.Fatalf("root nlink %d", a.Nlink)
	}
	c.mustFsck()
}

func TestRenameSemantics(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	R := rootIno()
	a := must(r.mkdir(R, "a", 0o755))
	b := must(r.mkdir(R, "b", 0o755))
	f1 := must(r.create(a.Ino, "f1", 0o644))
	f2 := must(r.create(a.Ino, "f2", 0o644))
	d1 := must(r.mkdir(a.Ino, "d1", 0o755))
	d2 := must(r.mkdir(b.Ino, "d2", 0o755))
	full := must(r.mkdir(b.Ino, "full", 0o755))
	must(r.create(full.Ino, "x", 0o644))

	// Plain rename in one directory; ctime of the file moves.
	wantErr(t, r.rename(a.Ino, "f1", a.Ino, "g1", 0), nil, "rename")
	if _, err := r.lookup(a.Ino, "f1"); err == nil {
		t.Fatal("old name still there")
	}
	if g := must(r.lookup(a.Ino, "g1")); g.Ino != f1.Ino || g.Ctime <= f1.Ctime {
		t.Fatalf("renamed: %+v", g)
	}
	// A file over a file: the target goes.
	wantErr(t, r.rename(a.Ino, "g1", a.Ino, "f2", 0), nil, "replace file")
	_, err := r.getattr(f2.Ino)
	wantErr(t, err, metawire.ErrStale, "replaced file deleted")
	// Hard link of the same inode: no-op.
	must(r.link(f1.Ino, a.Ino, "h"))
	wantErr(t, r.rename(a.Ino, "f2", a.Ino, "h", 0), nil, "rename onto hard link")
	must(r.lookup(a.Ino, "f2"))
	must(r.lookup(a.Ino, "h"))
	wantErr(t, r.rename(a.Ino, "f2", a.Ino, "f2", 0), nil, "rename onto itself")
	// Replacing one of two links drops the count.
	f3 := must(r.create(a.Ino, "f3", 0o644))
	wantErr(t, r.rename(a.Ino, "f3", a.Ino, "h", 0), nil, "replace a link")
	if x := must(r.getattr(f1.Ino)); x.Nlink != 1 {
		t.Fatalf("nlink of replaced link's inode: %d", x.Nlink)
	}
	_ = f3

	cases := []struct {
		name  string
		sd    uint64
		sn    string
		dd    uint64
		dn    string
		flags uint32
		want  error
	}{
		{"file over dir", a.Ino, "f2", b.Ino, "d2", 0, metawire.ErrIsDir},
		{"dir over file", a.Ino, "d1", a.Ino, "f2", 0, metawire.ErrNotDir},
		{"dir over non-empty dir", a.Ino, "d1", b.Ino, "full", 0, metawire.ErrNotEmpty},
		{"dir into itself", R, "a", a.Ino, "x", 0, metawire.ErrInvalid},
		{"dir into its subtree", R, "a", d1.Ino, "x", 0, metawire.ErrInvalid},
		{"ancestor over descendant", a.Ino, "d1", R, "a", 0, metawire.ErrNotEmpty},
		{"noreplace", a.Ino, "f2", a.Ino, "h", metawire.RenameNoReplace, metawire.ErrExists},
		{"exchange with a missing name", a.Ino, "f2", a.Ino, "nope", metawire.RenameExchange, metawire.ErrNotFound},
		{"exchange noreplace", a.Ino, "f2", a.Ino, "h", metawire.RenameExchange | metawire.RenameNoReplace, metawire.ErrInvalid},
		{"bad flags", a.Ino, "f2", a.Ino, "h", 8, metawire.ErrInvalid},
		{"missing source", a.Ino, "nope", a.Ino, "x", 0, metawire.ErrNotFound},
		{"dst not a dir", a.Ino, "f2", f1.Ino, "x", 0, metawire.ErrNotDir},
		{"dst unknown", a.Ino, "f2", uint64(namespace.MakeIno(namespace.RootBucket, 4000)), "x", 0, metawire.ErrStale},
	}
	for _, tc := range cases {
		wantErr(t, r.rename(tc.sd, tc.sn, tc.dd, tc.dn, tc.flags), tc.want, tc.name)
	}
	// A directory over an empty directory, across parents: link counts.
	wantErr(t, r.rename(a.Ino, "d1", b.Ino, "d2", 0), nil, "dir over empty dir")
	_, err = r.getattr(d2.Ino)
	wantErr(t, err, metawire.ErrStale, "replaced dir deleted")
	if x := must(r.getattr(a.Ino)); x.Nlink != 2 {
		t.Fatalf("source parent nlink %d", x.Nlink)
	}
	if x := must(r.getattr(b.Ino)); x.Nlink != 4 {
		t.Fatalf("target parent nlink %d", x.Nlink)
	}
	if x := must(r.lookup(d1.Ino, "..")); x.Ino != b.Ino {
		t.Fatal(".. not updated")
	}
	// Move a directory to a new name in another parent.
	wantErr(t, r.rename(b.Ino, "d2", a.Ino, "back", 0), nil, "dir move")
	if x := must(r.getattr(a.Ino)); x.Nlink != 3 {
		t.Fatalf("nlink after move back %d", x.Nlink)
	}
	c.mustFsck()
}

func TestLink(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	d := must(r.mkdir(rootIno(), "d", 0o755))
	f := must(r.create(d.Ino, "f", 0o644))
	l := must(r.link(f.Ino, rootIno(), "l"))
	if l.Nlink != 2 || l.Ino != f.Ino || l.Ctime <= f.Ctime {
		t.Fatalf("link attr %+v", l)
	}
	_, err := r.link(d.Ino, rootIno(), "dl")
	wantErr(t, err, metawire.ErrPerm, "link to a directory")
	_, err = r.link(f.Ino, rootIno(), "l")
	wantErr(t, err, metawire.ErrExists, "link over existing")
	_, err = r.link(f.Ino, f.Ino, "x")
	wantErr(t, err, metawire.ErrNotDir, "link into a file")
	// At MaxLinks: EMLINK.
	isl := c.isl[1]
	n := must(readInode(isl.db, namespace.Ino(f.Ino)))
	n.nlink = metawire.MaxLinks
	if err := isl.db.Set(inodeKey(n.ino), n.encode(), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	_, err = r.link(f.Ino, rootIno(), "l2")
	wantErr(t, err, metawire.ErrTooManyLinks, "link at MaxLinks")
	n.nlink = 2
	_ = isl.db.Set(inodeKey(n.ino), n.encode(), pebble.Sync)
	wantErr(t, r.unlink(d.Ino, "f"), nil, "unlink one link")
	if x := must(r.getattr(f.Ino)); x.Nlink != 1 {
		t.Fatalf("nlink %d", x.Nlink)
	}
	wantErr(t, r.unlink(rootIno(), "l"), nil, "unlink last link")
	_, err = r.getattr(f.Ino)
	wantErr(t, err, metawire.ErrStale, "inode gone with its last link")
	c.mustFsck()
}

func TestExclusiveCreateVerifier(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	req := metawire.CreateReq{Dir: rootIno(), Name: "f", Mode: 0o644, Exclusive: true, Verf: 0xfeed}
	first := must(r.createReq(metawire.OpCreate, req))
	again, err := r.createReq(metawire.OpCreate, req)
	if err != nil || !again.Existed || again.Attr.Ino != first.Attr.Ino {
		t.Fatalf("retried exclusive create: %+v %v", again, err)
	}
	req.Verf = 0xbeef
	_, err = r.createReq(metawire.OpCreate, req)
	wantErr(t, err, metawire.ErrExists, "exclusive create, other verifier")
	req.Verf = 0
	_, err = r.createReq(metawire.OpCreate, req)
	wantErr(t, err, metawire.ErrExists, "exclusive create without verifier")
	req.Exclusive = false
	got := must(r.createReq(metawire.OpCreate, req))
	if !got.Existed || got.Attr.Ino != first.Attr.Ino || got.DirAttr.Ino != rootIno() {
		t.Fatalf("non-exclusive create of existing: %+v", got)
	}
	must(r.mkdir(rootIno(), "d", 0o755))
	_, err = r.createReq(metawire.OpCreate, metawire.CreateReq{Dir: rootIno(), Name: "d", Mode: 0o644})
	wantErr(t, err, metawire.ErrIsDir, "create over a directory")
	_, err = r.createReq(metawire.OpMkdir, metawire.CreateReq{Dir: rootIno(), Name: "f", Mode: 0o755})
	wantErr(t, err, metawire.ErrExists, "mkdir over a file")
}

// A create's answer carries the directory's attributes as the create left
// them (mtime, ctime, link count of a mkdir), on one island and when the
// new directory lives on another.
func TestCreateReturnsDirAttrAfter(t *testing.T) {
	for _, islands := range []int{1, 3} {
		c := newCluster(t, islands)
		r := c.root()
		d := must(r.mkdir(rootIno(), "d", 0o755))
		for k, op := range []uint16{metawire.OpCreate, metawire.OpMkdir, metawire.OpCreate, metawire.OpMkdir} {
			req := metawire.CreateReq{Dir: d.Ino, Name: fmt.Sprintf("e%d", k), Mode: 0o644, Lazy: k == 2}
			if op == metawire.OpMkdir {
				req.Mode = metawire.ModeDir | 0o755
			}
			resp, err := r.createReq(op, req)
			if err != nil {
				t.Fatal(err)
			}
			if want := must(r.getattr(d.Ino)); resp.DirAttr != want {
				t.Fatalf("%d islands, op %d: DirAttr %+v, getattr %+v", islands, op, resp.DirAttr, want)
			}
		}
		if got := must(r.getattr(d.Ino)).Nlink; got != 4 {
			t.Fatalf("%d islands: directory nlink %d after two mkdirs", islands, got)
		}
	}
}

// TestRenameKeepsDirectoryIsland: a directory's bucket is embedded in its
// inode id at mkdir (the hash of its pathname then) and does not change
// when the directory is renamed, even to a name whose hash is another
// island's: the id, the record, the island serving it and the files in
// it all stay where they were; only the name entries move.
func TestRenameKeepsDirectoryIsland(t *testing.T) {
	c := newCluster(t, 3)
	r := c.root()
	src := must(r.mkdir(rootIno(), "projects", 0o755))
	dst := must(r.mkdir(rootIno(), "archive", 0o755))
	d := must(r.mkdir(src.Ino, "atoll", 0o755))
	bucket := namespace.Ino(d.Ino).Bucket()
	if bucket != namespace.Bucket("/projects/atoll") {
		t.Fatalf("mkdir /projects/atoll: bucket %08x, want the path's %08x", bucket, namespace.Bucket("/projects/atoll"))
	}
	home := c.owner(d.Ino)
	f := must(r.create(d.Ino, "README", 0o644))
	if namespace.Ino(f.Ino).Bucket() != bucket {
		t.Fatalf("file in %v got bucket %08x", namespace.Ino(d.Ino), namespace.Ino(f.Ino).Bucket())
	}
	// A new name whose path hashes to another island.
	elsewhere := c.ids[0]
	if elsewhere == home {
		elsewhere = c.ids[1]
	}
	newName := c.nameOn("/archive", "old-atoll-", elsewhere)
	newBucket := namespace.Bucket("/archive/" + newName)
	if newBucket == bucket || c.m.Table().Lookup(newBucket) == home {
		t.Fatalf("new name %q hashes to %08x on island %d: not elsewhere", newName, newBucket, c.m.Table().Lookup(newBucket))
	}

	wantErr(t, r.rename(src.Ino, "atoll", dst.Ino, newName, 0), nil, "rename /projects/atoll to /archive/"+newName)

	_, err := r.lookup(src.Ino, "atoll")
	wantErr(t, err, metawire.ErrNotFound, "old name after rename")
	a, err := r.lookup(dst.Ino, newName)
	wantErr(t, err, nil, "new name after rename")
	if a.Ino != d.Ino || namespace.Ino(a.Ino).Bucket() != bucket {
		t.Fatalf("renamed directory is %v (bucket %08x), want %v (bucket %08x)", namespace.Ino(a.Ino), namespace.Ino(a.Ino).Bucket(), namespace.Ino(d.Ino), bucket)
	}
	// Its record is still on its island, which serves it; the island of
	// the new name's hash does not hold it.
	if got := c.owner(a.Ino); got != home {
		t.Fatalf("renamed directory routed to island %d, want %d", got, home)
	}
	out, err := c.isl[home].Handle(bg, metawire.OpGetAttr, c.epoch, metawire.Marshal(&metawire.InoReq{Ino: d.Ino}))
	wantErr(t, err, nil, "getattr of the renamed directory on its own island")
	var ar metawire.AttrResp
	if err := metawire.Unmarshal(out, &ar); err != nil || !ar.Attr.IsDir() || ar.Attr.Ino != d.Ino {
		t.Fatalf("getattr of the renamed directory: %+v %v", ar.Attr, err)
	}
	_, err = c.isl[elsewhere].Handle(bg, metawire.OpGetAttr, c.epoch, metawire.Marshal(&metawire.InoReq{Ino: d.Ino}))
	wantErr(t, err, metawire.ErrWrongIsland, "getattr of the renamed directory on its new name's island")
	// Its file did not move either.
	g, err := r.lookup(d.Ino, "README")
	wantErr(t, err, nil, "file in the renamed directory")
	if g.Ino != f.Ino || c.owner(g.Ino) != home {
		t.Fatalf("file after rename: %v on island %d, want %v on %d", namespace.Ino(g.Ino), c.owner(g.Ino), namespace.Ino(f.Ino), home)
	}
	c.mustFsck()
}

// TestUnlinkMany: OpUnlinkMany removes every name of one directory in one
// change, or none of them with the error of the first that cannot go;
// links and the statistics come out as for one unlink each.
func TestUnlinkMany(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	d := must(r.mkdir(rootIno(), "d", 0o777))
	must(r.mkdir(d.Ino, "sub", 0o755))
	var names []string
	for k := range 6 {
		names = append(names, fmt.Sprintf("f%d", k))
		must(r.create(d.Ino, names[k], 0o644))
	}
	kept := must(r.link(must(r.lookup(d.Ino, "f5")).Ino, rootIno(), "f5-link"))
	many := func(k *client, names ...string) error {
		return c.call(metawire.OpUnlinkMany, d.Ino, &metawire.UnlinkManyReq{Cred: k.cred, Dir: d.Ino, Names: names}, nil)
	}
	before := must(r.names(d.Ino))
	stats0 := must(c.isl[1].statFS())
	// None goes when one cannot: missing, a directory, named twice, dots.
	for _, tc := range []struct {
		names []string
		want  error
	}{
		{[]string{"f0", "nope", "f1"}, metawire.ErrNotFound},
		{[]string{"f0", "sub"}, metawire.ErrIsDir},
		{[]string{"f0", "f1", "f0"}, metawire.ErrInvalid},
		{[]string{"f0", ".."}, metawire.ErrIsDir},
		{[]string{"f0", "a/b"}, metawire.ErrInvalid},
	} {
		wantErr(t, many(r, tc.names...), tc.want, fmt.Sprintf("unlink of %q", tc.names))
		if got := must(r.names(d.Ino)); !maps.Equal(got, before) {
			t.Fatalf("after a refused unlink of %q the directory holds %v, want %v", tc.names, got, before)
		}
	}
	// A user the sticky bit keeps out of others' files removes none.
	must(r.setattr(metawire.SetAttrReq{Ino: d.Ino, Valid: metawire.SetMode, Mode: 0o1777}))
	wantErr(t, many(c.as(1000, 1000), "f0", "f1"), metawire.ErrPerm, "unlink of root's files in a sticky directory")
	wantErr(t, c.call(metawire.OpUnlinkMany, d.Ino, &metawire.UnlinkManyReq{Cred: r.cred, Dir: d.Ino, Names: make([]string, metawire.MaxUnlinkMany+1)}, nil),
		metawire.ErrInvalid, "unlink of too many names")
	if got := must(r.names(d.Ino)); !maps.Equal(got, before) {
		t.Fatalf("after refused unlinks the directory holds %v, want %v", got, before)
	}
	wantErr(t, many(r, names...), nil, "unlink of every file")
	if got := must(r.names(d.Ino)); len(got) != 1 || got["sub"] == 0 {
		t.Fatalf("after the unlink the directory holds %v, want only sub", got)
	}
	if a := must(r.getattr(kept.Ino)); a.Nlink != 1 {
		t.Fatalf("a file with another link has nlink %d after the unlink, want 1", a.Nlink)
	}
	if stats := must(c.isl[1].statFS()); stats.Inodes != stats0.Inodes-5 {
		t.Fatalf("inodes %d after removing 5 files (one more is still linked), want %d", stats.Inodes, stats0.Inodes-5)
	}
	c.mustFsck()
}
