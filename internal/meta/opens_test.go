package meta

import (
	"bytes"
	"slices"
	"testing"

	"github.com/atoll-fs/atoll/internal/filelock"
	"github.com/atoll-fs/atoll/internal/metawire"
)

func (k *client) holdReq(ino, session uint64, cmd uint8) (metawire.LockResp, error) {
	var r metawire.LockResp
	req := metawire.LockReq{Cred: k.cred, Ino: ino, Cmd: cmd}
	req.Lock.Owner.Session = session
	err := k.c.call(metawire.OpLock, ino, &req, &r)
	return r, err
}

// An inode unlinked or renamed over while a session holds it open keeps
// its attributes and data, with no name, until the last hold goes (an
// unhold, or the end of the holding session); fsck calls it no orphan
// meanwhile and finds nothing left after.
func TestHeldInodeOutlivesItsLastLink(t *testing.T) {
	c := newCluster(t, 2)
	k := c.root()
	dir := must(k.mkdir(rootIno(), c.nameOn("/", "d", 2), 0o755))
	data := []byte("kept while open")
	file := func(name string) metawire.Attr {
		a := must(k.create(dir.Ino, name, 0o644))
		if _, err := k.commit(metawire.FileWrite{Ino: a.Ino, Size: uint64(len(data)), SetInline: true, Inline: data}); err != nil {
			t.Fatal(err)
		}
		return a
	}
	readable := func(ino uint64) {
		t.Helper()
		a, err := k.getattr(ino)
		if err != nil {
			t.Fatalf("getattr of held unlinked %x: %v", ino, err)
		}
		if a.Nlink != 0 || a.Size != uint64(len(data)) {
			t.Fatalf("held unlinked %x: nlink %d size %d", ino, a.Nlink, a.Size)
		}
		m, err := k.readmap(ino, 0, 1)
		if err != nil || !bytes.Equal(m.Inline, data) {
			t.Fatalf("readmap of held unlinked %x: %q, %v", ino, m.Inline, err)
		}
	}
	const sa, sb = 0xa1, 0xb2

	// Unlink: two holders, the inode goes with the second unhold.
	f := file("f")
	for _, s := range []uint64{sa, sb} {
		if _, err := k.holdReq(f.Ino, s, metawire.LockHold); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := k.holdReq(f.Ino, sa, metawire.LockList); err != nil || !slices.Equal(r.Holders, []uint64{sa, sb}) {
		t.Fatalf("list: holders %x, %v", r.Holders, err)
	}
	wantErr(t, k.unlink(dir.Ino, "f"), nil, "unlink of a held file")
	_, err := k.lookup(dir.Ino, "f")
	wantErr(t, err, metawire.ErrNotFound, "lookup of the unlinked name")
	readable(f.Ino)
	c.mustFsck()
	// Writes through the handle still land.
	if _, err := k.commit(metawire.FileWrite{Ino: f.Ino, Size: uint64(len(data)), SetInline: true, Inline: data}); err != nil {
		t.Fatalf("write to held unlinked: %v", err)
	}
	if _, err := k.holdReq(f.Ino, sa, metawire.LockUnhold); err != nil {
		t.Fatal(err)
	}
	readable(f.Ino)
	if _, err := k.holdReq(f.Ino, sb, metawire.LockUnhold); err != nil {
		t.Fatal(err)
	}
	_, err = k.getattr(f.Ino)
	wantErr(t, err, metawire.ErrStale, "getattr after the last unhold")
	_, err = k.holdReq(f.Ino, sa, metawire.LockHold)
	wantErr(t, err, metawire.ErrStale, "hold of a reclaimed inode")
	c.mustFsck()

	// Rename over, then the holding session ends: reclaimed.
	g, h := file("g"), file("h")
	if _, err := k.holdReq(h.Ino, sa, metawire.LockHold); err != nil {
		t.Fatal(err)
	}
	wantErr(t, k.rename(dir.Ino, "g", dir.Ino, "h", 0), nil, "rename over a held file")
	readable(h.Ino)
	if a := must(k.lookup(dir.Ino, "h")); a.Ino != g.Ino {
		t.Fatalf("h is %x after the rename, want %x", a.Ino, g.Ino)
	}
	c.mustFsck()
	var end metawire.LockSessionResp
	if err := c.call(metawire.OpLockEnd, h.Ino, &metawire.LockSessionReq{Session: sa}, &end); err != nil || !end.Ended {
		t.Fatalf("ending the session: %+v, %v", end, err)
	}
	_, err = k.getattr(h.Ino)
	wantErr(t, err, metawire.ErrStale, "getattr after the holding session ended")
	c.mustFsck()

	// A held file that keeps a link is not touched by the unhold; a
	// directory cannot be held.
	if _, err := k.holdReq(g.Ino, sb, metawire.LockHold); err != nil {
		t.Fatal(err)
	}
	if _, err := k.holdReq(g.Ino, sb, metawire.LockUnhold); err != nil {
		t.Fatal(err)
	}
	if a, err := k.getattr(g.Ino); err != nil || a.Nlink != 1 {
		t.Fatalf("unheld linked file: %+v, %v", a, err)
	}
	_, err = k.holdReq(dir.Ino, sb, metawire.LockHold)
	wantErr(t, err, metawire.ErrInvalid, "hold of a directory")
	c.mustFsck()
}

// A session's renewal counts its locks and holds as they are, not as the
// last sweep (up to a second old) saw them: a gateway restarted right
// after granting locks resumes its session where it holds them
// (client.FS.ResumeLockSession), and "none" would make its clients'
// unlocks no-ops.
func TestLockSessionCountsWhatItHoldsNow(t *testing.T) {
	c := newCluster(t, 1)
	k := c.root()
	f := must(k.create(rootIno(), "f", 0o644))
	g := must(k.create(rootIno(), "g", 0o644))
	const s = 0x5e55
	var lr metawire.LockResp
	req := metawire.LockReq{Cred: k.cred, Ino: f.Ino, Cmd: metawire.LockSet,
		Lock: filelock.Lock{Owner: filelock.Owner{Session: s, ID: 1}, Kind: filelock.POSIX, Type: filelock.Write, End: 9}}
	if err := c.call(metawire.OpLock, f.Ino, &req, &lr); err != nil {
		t.Fatal(err)
	}
	if _, err := k.holdReq(g.Ino, s, metawire.LockHold); err != nil {
		t.Fatal(err)
	}
	var resp metawire.LockSessionResp
	if err := c.call(metawire.OpLockSession, f.Ino, &metawire.LockSessionReq{Session: s}, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Ended || resp.Locks != 2 {
		t.Fatalf("renewal right after a lock and a hold: %+v, want 2 held", resp)
	}
}
