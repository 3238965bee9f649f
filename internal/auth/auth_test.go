package auth

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func mustCluster(t *testing.T) *Key {
	t.Helper()
	k, err := NewClusterKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// handshake runs both sides over loopback TCP and returns their results.
func handshake(t *testing.T, v *Verifier, k *Key) (Peer, error, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		p   Peer
		err error
	}
	done := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- res{err: err}
			return
		}
		defer c.Close()
		p, err := v.Server(c, 2*time.Second)
		done <- res{p, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cerr := Client(c, k, 2*time.Second)
	c.Close()
	r := <-done
	return r.p, r.err, cerr
}

func TestHandshake(t *testing.T) {
	ck := mustCluster(t)
	v, err := NewVerifier(ck)
	if err != nil {
		t.Fatal(err)
	}
	mount, _ := ck.Derive("mount-1", CapRead|CapWrite)
	ro, _ := ck.Derive("reader", CapRead)
	other := mustCluster(t)
	otherMount, _ := other.Derive("mount-1", CapRead|CapWrite)

	for _, k := range []*Key{ck, mount, ro} {
		p, serr, cerr := handshake(t, v, k)
		if serr != nil || cerr != nil || p.Name != k.Name || p.Caps != k.Caps {
			t.Errorf("key %s: peer %v, server %v, client %v", k.Name, p, serr, cerr)
		}
	}
	// Keys of another cluster, and a read-only key claiming more.
	elevated := *ro
	elevated.Caps = CapRead | CapWrite | CapAdmin
	forgedMember := *ro
	forgedMember.Caps = AllCaps
	for name, k := range map[string]*Key{"other cluster": other, "other mount": otherMount, "elevated": &elevated, "forged member": &forgedMember} {
		_, serr, cerr := handshake(t, v, k)
		if !errors.Is(serr, ErrRefused) || !errors.Is(cerr, ErrRefused) {
			t.Errorf("%s: server %v, client %v; want both refused", name, serr, cerr)
		}
	}
	// A forged server (another cluster's key) is found out by the client
	// before it proves anything.
	fv, _ := NewVerifier(other)
	_, _, cerr := handshake(t, fv, mount)
	if !errors.Is(cerr, ErrRefused) || !strings.Contains(cerr.Error(), "disagree") {
		t.Errorf("forged server: client %v", cerr)
	}
	// Only the cluster key verifies.
	if _, err := NewVerifier(mount); !errors.Is(err, ErrBadKey) {
		t.Errorf("verifier from a mount key: %v", err)
	}
}

// Garbage, a silent client and a replayed proof are all refused without
// hanging the server past its deadline.
func TestHandshakeBadInput(t *testing.T) {
	ck := mustCluster(t)
	v, _ := NewVerifier(ck)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serve := func() chan error {
		out := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				out <- err
				return
			}
			defer c.Close()
			_, err = v.Server(c, 300*time.Millisecond)
			out <- err
		}()
		return out
	}
	for name, send := range map[string][]byte{
		"garbage":      []byte("GET / HTTP/1.1\r\n\r\n"),
		"silent":       nil,
		"bad name":     append(append([]byte{'A', 't', 'A', 'u', 1, byte(CapRead), 3}, "a b"...), make([]byte, 32)...),
		"unknown caps": append(append([]byte{'A', 't', 'A', 'u', 1, 0x80, 1}, "a"...), make([]byte, 32)...),
		"wire frame":   {0xA7, 0x70, 1, 1, 0, 1, 0, 0},
	} {
		done := serve()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(send)
		select {
		case err := <-done:
			if !errors.Is(err, ErrRefused) {
				t.Errorf("%s: %v, want refused", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: server still waiting after its deadline", name)
		}
		c.Close()
	}
}

func TestKeyFile(t *testing.T) {
	ck := mustCluster(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "k", "admin.key")
	if err := Save(p, ck); err != nil {
		t.Fatal(err)
	}
	got, err := Load(p)
	if err != nil || string(got.Marshal()) != string(ck.Marshal()) {
		t.Fatalf("load: %v %v", got, err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); !errors.Is(err, ErrBadKey) {
		t.Errorf("world-readable key loaded: %v", err)
	}
	os.Chmod(p, 0o600)
	t.Setenv(EnvVar, strings.TrimSpace(string(ck.Marshal())))
	if k, err := Resolve(""); err != nil || string(k.Marshal()) != string(ck.Marshal()) {
		t.Errorf("resolve from env line: %v", err)
	}
	t.Setenv(EnvVar, p)
	if k, err := Resolve(""); err != nil || string(k.Marshal()) != string(ck.Marshal()) {
		t.Errorf("resolve from env path: %v", err)
	}
	t.Setenv(EnvVar, "")
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", "")
	if _, err := Resolve(""); !errors.Is(err, ErrNoKey) {
		t.Errorf("resolve with nothing: %v", err)
	}
	for _, bad := range []string{"", "atoll-key 2 a read AAAA", "atoll-key 1 a read short", "atoll-key 1 a sudo " + strings.Repeat("A", 43), "atoll-key 1 a/b read " + strings.Repeat("A", 43)} {
		if _, err := Parse([]byte(bad)); !errors.Is(err, ErrBadKey) {
			t.Errorf("parse %q: %v", bad, err)
		}
	}
	if _, err := ck.Derive("m", AllCaps); err == nil {
		t.Error("derived a member key")
	}
	m, _ := ck.Derive("m", CapRead)
	if _, err := m.Derive("n", CapRead); err == nil {
		t.Error("a derived key derived another")
	}
}

// TestScopedKeys: a scoped key authenticates with its scope, survives its
// file, and cannot be widened: the same secret with the scope removed or
// changed, or a scope written another way, is refused.
func TestScopedKeys(t *testing.T) {
	ck := mustCluster(t)
	v, _ := NewVerifier(ck)
	sc := Scope{UIDs: []uint32{1000, 1001}, GIDs: []uint32{1000}}
	alice, err := ck.DeriveScoped("alice", CapRead|CapWrite, sc)
	if err != nil {
		t.Fatal(err)
	}
	p, serr, cerr := handshake(t, v, alice)
	if serr != nil || cerr != nil || p.Scope.String() != "uids=1000,1001;gids=1000" {
		t.Fatalf("scoped handshake: peer %v scope %q, server %v, client %v", p, p.Scope, serr, cerr)
	}
	back, err := Parse(alice.Marshal())
	if err != nil || string(back.Marshal()) != string(alice.Marshal()) || back.Scope.String() != sc.String() {
		t.Fatalf("key file round trip: %v %q", err, back.Marshal())
	}
	unscoped := *alice
	unscoped.Scope = Scope{}
	wider := *alice
	wider.Scope = Scope{UIDs: []uint32{0, 1000, 1001}, GIDs: []uint32{1000}}
	for name, k := range map[string]*Key{"scope removed": &unscoped, "scope widened": &wider} {
		if _, serr, cerr := handshake(t, v, k); !errors.Is(serr, ErrRefused) || !errors.Is(cerr, ErrRefused) {
			t.Errorf("%s: server %v, client %v; want refused", name, serr, cerr)
		}
	}
	if _, err := ck.DeriveScoped("ops", CapRead|CapWrite|CapAdmin, sc); !errors.Is(err, ErrBadKey) {
		t.Errorf("scoped admin key: %v", err)
	}
	for _, bad := range []string{"uids=", "uids=1;uids=2", "uid=1", "uids=x", "gids=1,99999999999"} {
		if _, err := ParseScope(bad); err == nil {
			t.Errorf("ParseScope(%q) accepted", bad)
		}
	}
	if s, err := ParseScope("gids=7,3,3;uids=5"); err != nil || s.String() != "uids=5;gids=3,7" {
		t.Errorf("ParseScope canonical: %q %v", s, err)
	}
}

// TestConfinedScope: a key confined to a subtree carries its top's inode
// and path through the handshake and its file; the subtree cannot be
// moved or dropped, an admin key cannot be confined, and paths that could
// break the key file's fields are refused.
func TestConfinedScope(t *testing.T) {
	ck := mustCluster(t)
	v, _ := NewVerifier(ck)
	sc := Scope{UIDs: []uint32{1000}, Root: 0x961e849c00000007, Path: "/home/alice"}
	if !sc.Confined() || !sc.Tenant() || (Scope{Root: 9}).LimitsIDs() || !(Scope{Root: 9}).Tenant() {
		t.Fatal("Confined/Tenant")
	}
	alice, err := ck.DeriveScoped("alice", CapRead|CapWrite, sc)
	if err != nil {
		t.Fatal(err)
	}
	p, serr, cerr := handshake(t, v, alice)
	if serr != nil || cerr != nil || p.Scope.Root != sc.Root || p.Scope.Path != sc.Path {
		t.Fatalf("confined handshake: %+v %v %v", p.Scope, serr, cerr)
	}
	back, err := Parse(alice.Marshal())
	if err != nil || back.Scope.Root != sc.Root || back.Scope.Path != sc.Path || back.Secret != alice.Secret {
		t.Fatalf("key file round trip: %v %q", err, alice.Marshal())
	}
	for name, s := range map[string]Scope{
		"subtree moved":   {UIDs: sc.UIDs, Root: sc.Root + 1, Path: sc.Path},
		"subtree dropped": {UIDs: sc.UIDs},
		"path renamed":    {UIDs: sc.UIDs, Root: sc.Root, Path: "/home/bob"},
	} {
		k := *alice
		k.Scope = s
		if _, serr, cerr := handshake(t, v, &k); !errors.Is(serr, ErrRefused) || !errors.Is(cerr, ErrRefused) {
			t.Errorf("%s: server %v, client %v; want refused", name, serr, cerr)
		}
	}
	if _, err := ck.DeriveScoped("ops", CapRead|CapWrite|CapAdmin, Scope{Root: 5}); !errors.Is(err, ErrBadKey) {
		t.Errorf("confined admin key: %v", err)
	}
	for _, path := range []string{"home/alice", "/home/al ice", "/a;uids=0", "/" + strings.Repeat("x", 200)} {
		if _, err := ck.DeriveScoped("alice", CapRead|CapWrite, Scope{Root: 5, Path: path}); !errors.Is(err, ErrBadKey) {
			t.Errorf("path %.20q: %v", path, err)
		}
	}
	for _, bad := range []string{"root=0", "root=x", "path=/a", "root=1;root=2", "root=1;path=a"} {
		if _, err := ParseScope(bad); err == nil {
			t.Errorf("ParseScope(%q) accepted", bad)
		}
	}
}

// TestRevokedGeneration: a verifier whose cluster key follows revocations
// refuses keys of a revoked name below its generation, at the handshake,
// and accepts the next generation; member keys are never revoked.
func TestRevokedGeneration(t *testing.T) {
	ck := mustCluster(t)
	ck.Revocations = &Revocations{}
	v, _ := NewVerifier(ck)
	g0, _ := ck.Derive("tenant", CapRead|CapWrite)
	g1, err := ck.DeriveScoped("tenant", CapRead|CapWrite, Scope{Gen: 1})
	if err != nil {
		t.Fatal(err)
	}
	adm1, err := ck.DeriveScoped("ops", CapRead|CapWrite|CapAdmin, Scope{Gen: 1})
	if err != nil {
		t.Fatalf("admin key with a generation: %v", err)
	}
	if p, serr, cerr := handshake(t, v, g0); serr != nil || cerr != nil || v.Revoked(p) {
		t.Fatalf("before revocation: %v %v", serr, cerr)
	}
	ck.Revocations.Set(map[string]uint32{"tenant": 1, "cluster": 5})
	if _, serr, cerr := handshake(t, v, g0); !errors.Is(serr, ErrRefused) || !errors.Is(cerr, ErrRefused) || !strings.Contains(cerr.Error(), "revoked") {
		t.Errorf("revoked generation 0: server %v, client %v", serr, cerr)
	}
	for _, k := range []*Key{g1, adm1, ck} {
		if p, serr, cerr := handshake(t, v, k); serr != nil || cerr != nil || p.Scope.Gen != k.Scope.Gen {
			t.Errorf("%s generation %d: server %v, client %v", k.Name, k.Scope.Gen, serr, cerr)
		}
	}
	if !v.Revoked(Peer{Name: "tenant", Caps: CapRead}) || v.Revoked(Peer{Name: "tenant", Caps: CapRead, Scope: Scope{Gen: 1}}) {
		t.Error("Revoked disagrees with the generations")
	}
	if b, err := Parse(g1.Marshal()); err != nil || b.Scope.Gen != 1 {
		t.Errorf("generation through the key file: %v %+v", err, b)
	}
}

func TestReadTokenBoundToNameAndGrant(t *testing.T) {
	ck, err := NewClusterKey()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewClusterKey()
	grant := []byte("stripe 1, block [0,100)")
	tok := ck.ReadToken("alice", grant)
	if len(tok) != TokenSize || !ck.CheckReadToken("alice", grant, tok) {
		t.Fatalf("token %x does not check", tok)
	}
	for what, ok := range map[string]bool{
		"another key's name":  ck.CheckReadToken("bob", grant, tok),
		"another grant":       ck.CheckReadToken("alice", []byte("stripe 1, block [0,101)"), tok),
		"another cluster":     other.CheckReadToken("alice", grant, tok),
		"a truncated token":   ck.CheckReadToken("alice", grant, tok[:15]),
		"no token":            ck.CheckReadToken("alice", grant, nil),
		"name/grant boundary": ck.CheckReadToken("alic", append([]byte("e\x00"), grant...), tok),
	} {
		if ok {
			t.Errorf("the token checks for %s", what)
		}
	}
	if OwnsLog("alice", uint64(LogPrefix("bob"))<<32|7) || !OwnsLog("alice", uint64(LogPrefix("alice"))<<32|7) {
		t.Error("log prefixes do not tell alice's logs from bob's")
	}
}

// BenchmarkReadToken is the cost of one read token: paid by an island per
// block map entry it answers a tenant's key, and by a storage server per
// read such a key makes outside its own logs.
func BenchmarkReadToken(b *testing.B) {
	ck, err := NewClusterKey()
	if err != nil {
		b.Fatal(err)
	}
	grant := make([]byte, 8+8+13+1+2*5) // a 4+1 stripe's fragment.Grant
	tok := ck.ReadToken("alice", grant)
	b.ReportAllocs()
	for b.Loop() {
		if !ck.CheckReadToken("alice", grant, tok) {
			b.Fatal("token does not check")
		}
	}
}
