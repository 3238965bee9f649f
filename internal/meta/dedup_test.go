package meta

import (
	"errors"
	"testing"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/wire"
)

// callID sends req with request id to the island owning ino.
func (c *cluster) callID(id wire.ReqID, op uint16, ino uint64, req, resp metawire.Message) error {
	out, err := c.isl[c.owner(ino)].HandleReq(bg, op, max(c.epoch, c.m.Epoch()), id, metawire.Marshal(req))
	if err != nil {
		return err
	}
	if resp != nil {
		return metawire.Unmarshal(out, resp)
	}
	return nil
}

// TestRetriedChangesApplyOnce: a change retried with its request id (its
// first answer lost) is answered as the first attempt was, not applied
// again, also after the island restarts; the same change under a new id
// is a new request.
func TestRetriedChangesApplyOnce(t *testing.T) {
	c := newCluster(t, 3)
	k := c.root()
	cred := k.cred
	root := rootIno()
	id := func(n byte) wire.ReqID { return wire.ReqID{n, 0xA7} }

	// mkdir (cross-island: a 2PC) and create, each sent twice.
	var d1, d2 metawire.CreateResp
	mk := &metawire.CreateReq{Cred: cred, Dir: root, Name: "d", Mode: 0o755}
	if err := c.callID(id(1), metawire.OpMkdir, root, mk, &d1); err != nil {
		t.Fatal(err)
	}
	if err := c.callID(id(1), metawire.OpMkdir, root, mk, &d2); err != nil || d2.Attr.Ino != d1.Attr.Ino {
		t.Fatalf("retried mkdir: %v, ino %x want %x", err, d2.Attr.Ino, d1.Attr.Ino)
	}
	if err := c.callID(id(2), metawire.OpMkdir, root, mk, nil); !errors.Is(err, metawire.ErrExists) {
		t.Fatalf("mkdir of an existing name under a new id: %v, want EEXIST", err)
	}
	dir := d1.Attr.Ino
	var f1, f2 metawire.CreateResp
	cr := &metawire.CreateReq{Cred: cred, Dir: dir, Name: "f", Mode: metawire.ModeFile | 0o644, Data: []byte("hello")}
	if err := c.callID(id(3), metawire.OpCreate, dir, cr, &f1); err != nil {
		t.Fatal(err)
	}
	// A restart in between: the id is durable with the change.
	owner := c.owner(dir)
	c.restart(owner, c.fs[owner])
	if err := c.callID(id(3), metawire.OpCreate, dir, cr, &f2); err != nil || f2.Attr.Ino != f1.Attr.Ino || f2.Existed {
		t.Fatalf("retried create after a restart: %v, ino %x want %x, existed %v", err, f2.Attr.Ino, f1.Attr.Ino, f2.Existed)
	}

	// rename and unlink, each sent twice: the retry succeeds too.
	rn := &metawire.RenameReq{Cred: cred, SrcDir: dir, SrcName: "f", DstDir: root, DstName: "g"}
	for try := range 2 {
		if err := c.callID(id(4), metawire.OpRename, dir, rn, nil); err != nil {
			t.Fatalf("rename attempt %d: %v", try+1, err)
		}
	}
	if a, err := k.lookup(root, "g"); err != nil || a.Ino != f1.Attr.Ino {
		t.Fatalf("after the renames: %v, %x", err, a.Ino)
	}
	ul := &metawire.NameReq{Cred: cred, Dir: root, Name: "g"}
	for try := range 2 {
		if err := c.callID(id(5), metawire.OpUnlink, root, ul, nil); err != nil {
			t.Fatalf("unlink attempt %d: %v", try+1, err)
		}
	}
	if err := c.callID(id(6), metawire.OpUnlink, root, ul, nil); !errors.Is(err, metawire.ErrNotFound) {
		t.Fatalf("unlink of a gone name under a new id: %v, want ENOENT", err)
	}
	c.mustFsck()
}

// TestRenameOfTwoLinksToOneInode: renaming one name of an inode onto
// another name of the same inode changes nothing, across islands too (its
// two entries are checked together under shared locks).
func TestRenameOfTwoLinksToOneInode(t *testing.T) {
	c := newCluster(t, 3)
	k := c.root()
	root := rootIno()
	var dirs []uint64
	for n := 0; len(dirs) < 2 && n < 64; n++ {
		d, err := k.mkdir(root, "d"+string(rune('a'+n%26))+string(rune('a'+n/26)), 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if len(dirs) == 0 || c.owner(d.Ino) != c.owner(dirs[0]) {
			dirs = append(dirs, d.Ino)
		}
	}
	if len(dirs) < 2 {
		t.Fatal("no two directories on different islands")
	}
	f, err := k.create(dirs[0], "f", metawire.ModeFile|0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.link(f.Ino, dirs[1], "g"); err != nil {
		t.Fatal(err)
	}
	if err := k.rename(dirs[0], "f", dirs[1], "g", 0); err != nil {
		t.Fatalf("rename between two links of one inode: %v", err)
	}
	for _, e := range []struct {
		dir  uint64
		name string
	}{{dirs[0], "f"}, {dirs[1], "g"}} {
		if a, err := k.lookup(e.dir, e.name); err != nil || a.Ino != f.Ino {
			t.Fatalf("%s after the rename: %v %x", e.name, err, a.Ino)
		}
	}
	c.mustFsck()
}
