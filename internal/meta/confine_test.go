package meta

import (
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/filelock"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// A key confined to /home/alice reaches what lies under it, on any
// island, and nothing else: other directories and files are stale to
// it (a forged inode id gives nothing), ".." of its top is refused, and
// a directory moved out of the subtree is out of reach once the
// islands' memory of it (confineTTL) runs out.
func TestConfinedKey(t *testing.T) {
	c := newCluster(t, 2)
	r := c.root()
	R := rootIno()
	home := must(r.mkdir(R, "home", 0o755))
	aliceDir := must(r.mkdir(home.Ino, "alice", 0o777))
	bobDir := must(r.mkdir(home.Ino, "bob", 0o777))
	secret := must(r.create(bobDir.Ino, "secret", 0o644))
	// d1 on the other island than alice's directory, so walks cross.
	other := namespace.IslandID(1)
	if c.owner(aliceDir.Ino) == 1 {
		other = 2
	}
	d1Name := c.nameOn("/home/alice", "d", other)
	d1 := must(r.mkdir(aliceDir.Ino, d1Name, 0o777))
	if c.owner(d1.Ino) == c.owner(aliceDir.Ino) {
		t.Fatal("d1 on alice's island")
	}

	peer := &auth.Peer{Name: "alice", Caps: auth.CapRead | auth.CapWrite, Scope: auth.Scope{Root: aliceDir.Ino, Path: "/home/alice"}}
	alice := &client{c: c, cred: metawire.Cred{UID: 1000, GID: 1000}, peer: peer}

	// Inside: its own directory, files and subdirectories on both islands.
	notes := must(alice.create(aliceDir.Ino, "notes", 0o644))
	must(alice.getattr(aliceDir.Ino))
	must(alice.lookup(aliceDir.Ino, "notes"))
	must(alice.readdir(aliceDir.Ino, 0, 100, true))
	d2 := must(alice.mkdir(d1.Ino, "d2", 0o755))
	deep := must(alice.create(d2.Ino, "deep", 0o644))
	must(alice.getattr(deep.Ino))
	must(alice.setattr(metawire.SetAttrReq{Ino: deep.Ino, Valid: metawire.SetMode, Mode: 0o600}))
	// A rename inside moves the file's recorded parent to d2 (on the
	// other island); it stays reachable.
	if err := alice.rename(aliceDir.Ino, "notes", d2.Ino, "notes", 0); err != nil {
		t.Fatal(err)
	}
	must(alice.getattr(notes.Ino))
	// A hard link inside, sent to the file's island (as the client does
	// for a confined key): the directory's parent is asked of its island.
	var lr metawire.AttrResp
	if err := alice.c.callAs(peer, metawire.OpLink, deep.Ino, &metawire.LinkReq{Cred: alice.cred, Ino: deep.Ino, Dir: aliceDir.Ino, Name: "deep-link"}, &lr); err != nil {
		t.Fatalf("link inside the subtree: %v", err)
	}

	// Outside: stale, whatever the permission bits say.
	_, err := alice.getattr(secret.Ino)
	wantErr(t, err, metawire.ErrStale, "getattr of bob's file")
	_, err = alice.lookup(bobDir.Ino, "secret")
	wantErr(t, err, metawire.ErrStale, "lookup in bob's directory")
	_, err = alice.readdir(home.Ino, 0, 100, false)
	wantErr(t, err, metawire.ErrStale, "readdir of /home")
	_, err = alice.getattr(R)
	wantErr(t, err, metawire.ErrStale, "getattr of /")
	_, err = alice.create(bobDir.Ino, "planted", 0o644)
	wantErr(t, err, metawire.ErrStale, "create in bob's directory")
	wantErr(t, alice.rename(d2.Ino, "deep", bobDir.Ino, "stolen", 0), metawire.ErrStale, "rename out of the subtree")
	wantErr(t, alice.rename(bobDir.Ino, "secret", aliceDir.Ino, "mine", 0), metawire.ErrStale, "rename into the subtree")
	_, err = alice.link(secret.Ino, aliceDir.Ino, "mine")
	wantErr(t, err, metawire.ErrStale, "hard link of bob's file into the subtree")
	_, err = alice.lookup(aliceDir.Ino, "..")
	wantErr(t, err, metawire.ErrAccess, `lookup ".." of the subtree's top`)
	for _, e := range must(alice.readdir(aliceDir.Ino, 0, 100, true)).Entries {
		if e.Name == ".." && e.Ino != aliceDir.Ino {
			t.Errorf(`readdir of the subtree's top: ".." is %x, want itself`, e.Ino)
		}
	}
	wantErr(t, alice.setxattr(secret.Ino, "user.x", []byte("1"), 0), metawire.ErrStale, "setxattr on bob's file")
	_, err = alice.readmap(secret.Ino, 0, 1)
	wantErr(t, err, metawire.ErrStale, "block map of bob's file")
	_, err = alice.commit(metawire.FileWrite{Ino: secret.Ino, Size: 1, SetInline: true, Inline: []byte("x")})
	wantErr(t, err, metawire.ErrStale, "commit to bob's file")
	if a := must(r.getattr(secret.Ino)); a.Size != 0 {
		t.Fatalf("bob's file changed: %+v", a)
	}
	if _, err := r.lookup(bobDir.Ino, "planted"); err == nil {
		t.Fatal("a file was planted in bob's directory")
	}

	// The operator moves d1 out of alice's subtree: within confineTTL
	// the islands may still remember it inside; after, it is out.
	if err := r.rename(aliceDir.Ino, d1Name, bobDir.Ino, "taken", 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(confineTTL + 100*time.Millisecond)
	_, err = alice.getattr(deep.Ino)
	wantErr(t, err, metawire.ErrStale, "getattr of a file whose directory was moved out")
	_, err = alice.readdir(d2.Ino, 0, 100, false)
	wantErr(t, err, metawire.ErrStale, "readdir of a directory moved out")
	_, err = alice.getattr(notes.Ino)
	wantErr(t, err, metawire.ErrStale, "getattr of a file renamed into a directory later moved out")
	// The link alice made inside still looks up (the directory is
	// inside), but the file's recorded parent is d2, now outside, so by
	// its inode id the file is refused: the safe side.
	must(alice.lookup(aliceDir.Ino, "deep-link"))

	// An unconfined tenant key (uids only) is not held to a subtree.
	uidOnly := &client{c: c, cred: metawire.Cred{UID: 1000, GID: 1000}, peer: &auth.Peer{Name: "u", Caps: auth.CapRead | auth.CapWrite, Scope: auth.Scope{UIDs: []uint32{1000}}}}
	must(uidOnly.getattr(secret.Ino))
	c.mustFsck()
}

// A tenant's key names only its own lock and lease sessions (those with
// its log prefix): it cannot unlock, replace, renew or end another
// client's locks, nor poll its lease breaks. A trusted key names any.
func TestTenantSessionsAreItsOwn(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	f := must(r.create(rootIno(), "db", 0o666))
	victim := uint64(0x1234567800000001) // a mount host's session
	lock := func(k *client, cmd uint8, session uint64) error {
		req := metawire.LockReq{Cred: k.cred, Ino: f.Ino, Cmd: cmd}
		req.Lock = filelock.Lock{Owner: filelock.Owner{Session: session, ID: 7}, Kind: filelock.POSIX, Type: filelock.Write, Start: 0, End: 99}
		var resp metawire.LockResp
		return k.call(metawire.OpLock, f.Ino, &req, &resp)
	}
	if err := lock(r, metawire.LockSet, victim); err != nil {
		t.Fatal(err)
	}
	peer := &auth.Peer{Name: "mallory", Caps: auth.CapRead | auth.CapWrite, Scope: auth.Scope{UIDs: []uint32{1000}}}
	mallory := &client{c: c, cred: metawire.Cred{UID: 1000, GID: 1000}, peer: peer}
	for _, cmd := range []uint8{metawire.LockUnlock, metawire.LockUnlockOwner, metawire.LockSet} {
		wantErr(t, lock(mallory, cmd, victim), metawire.ErrPerm, "a tenant naming another's lock session")
	}
	var sr metawire.LockSessionResp
	wantErr(t, mallory.call(metawire.OpLockSession, f.Ino, &metawire.LockSessionReq{Session: victim, ReleaseMask: 0, ReleaseBits: 0}, &sr), metawire.ErrPerm, "renewing another's session")
	wantErr(t, mallory.call(metawire.OpLeasePoll, f.Ino, &metawire.PollReq{Session: victim}, nil), metawire.ErrPerm, "polling another's lease breaks")
	// The victim's lock is still there: a conflicting set by another
	// trusted session fails.
	if err := lock(r, metawire.LockSet, 0x9999999900000001); err == nil {
		t.Fatal("the victim's lock went")
	}
	// Its own session (its prefix) works.
	own := uint64(auth.LogPrefix("mallory"))<<32 | 5
	if err := lock(mallory, metawire.LockGet, own); err != nil {
		t.Fatalf("a tenant's own session: %v", err)
	}
}
