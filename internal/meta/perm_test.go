package meta

import (
	"testing"

	"github.com/atoll-fs/atoll/internal/metawire"
)

func TestMayAccessMatrix(t *testing.T) {
	file := metawire.Attr{Mode: metawire.ModeFile | 0o640, UID: 10, GID: 20}
	exe := metawire.Attr{Mode: metawire.ModeFile | 0o100, UID: 10, GID: 20}
	dir := metawire.Attr{Mode: metawire.ModeDir | 0o000, UID: 10, GID: 20}
	owner := &metawire.Cred{UID: 10, GID: 99}
	member := &metawire.Cred{UID: 11, GID: 99, Groups: []uint32{20}}
	other := &metawire.Cred{UID: 12, GID: 99}
	rootc := &metawire.Cred{}
	cases := []struct {
		a    *metawire.Attr
		c    *metawire.Cred
		mask uint32
		want bool
	}{
		{&file, owner, accR | accW, true},
		{&file, owner, accX, false},
		{&file, member, accR, true},
		{&file, member, accW, false},
		{&file, other, accR, false},
		{&file, other, 0, true},
		{&file, rootc, accR | accW, true},
		{&file, rootc, accX, false},
		{&exe, rootc, accX, true},
		{&dir, rootc, accX | accW | accR, true},
		{&dir, owner, accX, false},
		// The owner class decides even when group bits would allow.
		{&metawire.Attr{Mode: metawire.ModeFile | 0o070, UID: 10, GID: 20}, &metawire.Cred{UID: 10, GID: 20}, accR, false},
	}
	for k, tc := range cases {
		if got := mayAccess(tc.a, tc.c, tc.mask); got != tc.want {
			t.Errorf("case %d: mayAccess(%o uid %d, uid %d, %o) = %v", k, tc.a.Mode, tc.a.UID, tc.c.UID, tc.mask, got)
		}
	}
}

func TestPermissionsNonRoot(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	alice := c.as(1000, 1000)
	bob := c.as(1001, 1001, 50)
	R := rootIno()

	_, err := alice.create(R, "f", 0o644)
	wantErr(t, err, metawire.ErrAccess, "create in root's 0755 directory")
	_, err = alice.mkdir(R, "d", 0o755)
	wantErr(t, err, metawire.ErrAccess, "mkdir in root's 0755 directory")

	pub := must(r.mkdir(R, "pub", 0o777))
	af := must(alice.create(pub.Ino, "af", 0o4755))
	if af.UID != 1000 || af.GID != 1000 || af.Mode&0o7777 != 0o4755 {
		t.Fatalf("alice's file %+v", af)
	}
	// setgid directory: gid and setgid inheritance.
	sg := must(r.mkdir(R, "sg", 0o777))
	must(r.setattr(metawire.SetAttrReq{Ino: sg.Ino, Valid: metawire.SetMode | metawire.SetGID, Mode: 0o2777, GID: 50}))
	sf := must(alice.create(sg.Ino, "f", 0o2755))
	if sf.GID != 50 || sf.Mode&modeSGID != 0 {
		t.Fatalf("file in setgid dir by non-member: gid %d mode %o", sf.GID, sf.Mode)
	}
	bf := must(bob.create(sg.Ino, "g", 0o2755))
	if bf.GID != 50 || bf.Mode&modeSGID == 0 {
		t.Fatalf("file in setgid dir by member: gid %d mode %o", bf.GID, bf.Mode)
	}
	sd := must(alice.mkdir(sg.Ino, "sub", 0o755))
	if sd.GID != 50 || sd.Mode&modeSGID == 0 {
		t.Fatalf("subdir of setgid dir: gid %d mode %o", sd.GID, sd.Mode)
	}

	// Search permission.
	priv := must(r.mkdir(R, "priv", 0o700))
	must(r.create(priv.Ino, "x", 0o644))
	_, err = alice.lookup(priv.Ino, "x")
	wantErr(t, err, metawire.ErrAccess, "lookup without search permission")
	_, err = alice.readdir(priv.Ino, 0, 0, false)
	wantErr(t, err, metawire.ErrAccess, "readdir without read permission")

	// Sticky directory.
	tmp := must(r.mkdir(R, "tmp", 0o777))
	must(r.setattr(metawire.SetAttrReq{Ino: tmp.Ino, Valid: metawire.SetMode, Mode: 0o1777}))
	must(alice.create(tmp.Ino, "a1", 0o666))
	must(alice.create(tmp.Ino, "a2", 0o666))
	wantErr(t, bob.unlink(tmp.Ino, "a1"), metawire.ErrPerm, "sticky: other user unlinks")
	wantErr(t, bob.rename(tmp.Ino, "a1", tmp.Ino, "b1", 0), metawire.ErrPerm, "sticky: other user renames")
	must(bob.create(tmp.Ino, "b2", 0o666))
	wantErr(t, alice.rename(tmp.Ino, "a1", tmp.Ino, "b2", 0), metawire.ErrPerm, "sticky: replace other user's file")
	wantErr(t, alice.unlink(tmp.Ino, "a1"), nil, "sticky: owner unlinks")
	wantErr(t, r.unlink(tmp.Ino, "a2"), nil, "sticky: root unlinks")

	// Special files need root.
	_, err = alice.createReq(metawire.OpCreate, metawire.CreateReq{Dir: pub.Ino, Name: "dev", Mode: metawire.ModeBlock | 0o600, Exclusive: true})
	wantErr(t, err, metawire.ErrPerm, "mknod block device as user")

	// Moving a directory to another parent needs write permission on it.
	ad := must(alice.mkdir(pub.Ino, "ad", 0o555))
	wantErr(t, alice.rename(pub.Ino, "ad", tmp.Ino, "ad", 0), metawire.ErrAccess, "move a read-only directory")
	wantErr(t, alice.rename(pub.Ino, "ad", pub.Ino, "ad2", 0), nil, "rename a read-only directory in place")
	_ = ad

	// Access.
	wantErr(t, alice.access(af.Ino, accR|accX), nil, "access owner rx")
	wantErr(t, bob.access(af.Ino, accW), metawire.ErrAccess, "access other w")
	wantErr(t, bob.access(af.Ino, 8), metawire.ErrInvalid, "access bad mask")
	c.mustFsck()
}

func TestSetAttrRules(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	alice := c.as(1000, 1000, 60)
	bob := c.as(1001, 1001)
	pub := must(r.mkdir(rootIno(), "pub", 0o777))
	f := must(alice.create(pub.Ino, "f", 0o644))
	set := func(k *client, req metawire.SetAttrReq) (metawire.Attr, error) {
		req.Ino = f.Ino
		return k.setattr(req)
	}
	// chmod: owner only; setgid dropped when not in the group.
	_, err := set(bob, metawire.SetAttrReq{Valid: metawire.SetMode, Mode: 0o777})
	wantErr(t, err, metawire.ErrPerm, "chmod by non-owner")
	a := must(set(alice, metawire.SetAttrReq{Valid: metawire.SetMode, Mode: 0o2755}))
	if a.Mode&0o7777 != 0o2755 || a.Ctime <= f.Ctime {
		t.Fatalf("chmod by owner in group: %o", a.Mode)
	}
	must(r.setattr(metawire.SetAttrReq{Ino: f.Ino, Valid: metawire.SetGID, GID: 70}))
	a = must(set(alice, metawire.SetAttrReq{Valid: metawire.SetMode, Mode: 0o2755}))
	if a.Mode&modeSGID != 0 {
		t.Fatalf("setgid kept by non-member: %o", a.Mode)
	}
	a = must(set(alice, metawire.SetAttrReq{Valid: metawire.SetMode, Mode: 0o1644}))
	if a.Mode&0o7777 != 0o1644 {
		t.Fatalf("sticky on a file by its owner: %o", a.Mode)
	}
	// chown: only root changes the owner; the owner may change the group
	// to one of its groups.
	_, err = set(alice, metawire.SetAttrReq{Valid: metawire.SetUID, UID: 1001})
	wantErr(t, err, metawire.ErrPerm, "chown by owner")
	_, err = set(alice, metawire.SetAttrReq{Valid: metawire.SetUID, UID: 1000})
	wantErr(t, err, nil, "chown to self by owner")
	_, err = set(alice, metawire.SetAttrReq{Valid: metawire.SetGID, GID: 99})
	wantErr(t, err, metawire.ErrPerm, "chgrp to a foreign group")
	_, err = set(bob, metawire.SetAttrReq{Valid: metawire.SetGID, GID: 1001})
	wantErr(t, err, metawire.ErrPerm, "chgrp by non-owner")
	must(set(alice, metawire.SetAttrReq{Valid: metawire.SetMode, Mode: 0o6755}))
	a = must(set(alice, metawire.SetAttrReq{Valid: metawire.SetGID, GID: 60}))
	if a.GID != 60 || a.Mode&0o7777 != 0o0755 {
		t.Fatalf("chgrp by owner: gid %d mode %o (suid/sgid must go)", a.GID, a.Mode)
	}
	must(r.setattr(metawire.SetAttrReq{Ino: f.Ino, Valid: metawire.SetMode, Mode: 0o6755}))
	a = must(r.setattr(metawire.SetAttrReq{Ino: f.Ino, Valid: metawire.SetUID | metawire.SetGID, UID: 1001, GID: 1001}))
	if a.UID != 1001 || a.Mode&0o7777 != 0o755 {
		t.Fatalf("chown by root: uid %d mode %o", a.UID, a.Mode)
	}
	must(r.setattr(metawire.SetAttrReq{Ino: f.Ino, Valid: metawire.SetUID | metawire.SetGID | metawire.SetMode, UID: 1000, GID: 1000, Mode: 0o644}))

	// Truncate needs write permission.
	_, err = set(bob, metawire.SetAttrReq{Valid: metawire.SetSize, Size: 10})
	wantErr(t, err, metawire.ErrAccess, "truncate without write permission")
	a = must(set(alice, metawire.SetAttrReq{Valid: metawire.SetSize, Size: 10}))
	if a.Size != 10 || a.Mtime <= f.Mtime || a.Version <= f.Version {
		t.Fatalf("truncate: %+v", a)
	}
	_, err = r.setattr(metawire.SetAttrReq{Ino: pub.Ino, Valid: metawire.SetSize})
	wantErr(t, err, metawire.ErrIsDir, "truncate a directory")

	// utimes: explicit times need the owner; "now" also write permission.
	_, err = set(bob, metawire.SetAttrReq{Valid: metawire.SetMtime, Mtime: 5})
	wantErr(t, err, metawire.ErrPerm, "explicit utimes by non-owner")
	_, err = set(bob, metawire.SetAttrReq{Valid: metawire.SetMtimeNow | metawire.SetAtimeNow})
	wantErr(t, err, metawire.ErrAccess, "utimes now without write permission")
	must(set(alice, metawire.SetAttrReq{Valid: metawire.SetMode, Mode: 0o666}))
	before := must(alice.getattr(f.Ino))
	a = must(set(bob, metawire.SetAttrReq{Valid: metawire.SetMtimeNow | metawire.SetAtimeNow}))
	if a.Mtime <= before.Mtime || a.Ctime <= before.Ctime {
		t.Fatal("utimes now did not move the times")
	}
	a = must(set(alice, metawire.SetAttrReq{Valid: metawire.SetAtime | metawire.SetMtime, Atime: 11, Mtime: 22}))
	if a.Atime != 11 || a.Mtime != 22 || a.Ctime <= before.Ctime {
		t.Fatalf("explicit utimes: %+v", a)
	}
	_, err = set(alice, metawire.SetAttrReq{Valid: 1 << 20})
	wantErr(t, err, metawire.ErrInvalid, "unknown valid bits")
	// Nothing to change: nothing changes.
	b := must(set(alice, metawire.SetAttrReq{}))
	if b.Ctime != a.Ctime {
		t.Fatal("empty setattr moved ctime")
	}
}
