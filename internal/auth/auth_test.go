package auth

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
		_, p, err := v.Server(c, 2*time.Second)
		done <- res{p, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_, cerr := Client(c, k, 2*time.Second)
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
			_, _, err = v.Server(c, 300*time.Millisecond)
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

// A key scoped to protocols carries them through derivation, the key
// file and the handshake (a holder cannot drop them), and says which
// gateways it may serve.
func TestProtocolScope(t *testing.T) {
	ck := mustCluster(t)
	v, _ := NewVerifier(ck)
	ps, err := ParseProtocols("smb, nfs,smb")
	if err != nil || !slices.Equal(ps, []string{"nfs", "smb"}) {
		t.Fatalf("ParseProtocols: %v %v", ps, err)
	}
	gw, err := ck.DeriveScoped("gw", CapRead|CapWrite, Scope{Protocols: ps})
	if err != nil {
		t.Fatal(err)
	}
	if gw.Scope.Tenant() || !gw.Scope.Serves(ProtoNFS) || gw.Scope.Serves(ProtoMount) || !(Scope{}).Serves(ProtoMount) {
		t.Fatalf("Serves/Tenant of %v", gw.Scope)
	}
	if err := gw.Scope.ServesErr("gw", ProtoMount); !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "nfs, smb") {
		t.Fatalf("ServesErr: %v", err)
	}
	p, serr, cerr := handshake(t, v, gw)
	if serr != nil || cerr != nil || !slices.Equal(p.Scope.Protocols, ps) {
		t.Fatalf("handshake: %+v %v %v", p.Scope, serr, cerr)
	}
	back, err := Parse(gw.Marshal())
	if err != nil || !slices.Equal(back.Scope.Protocols, ps) || back.Secret != gw.Secret {
		t.Fatalf("key file round trip: %v %q", err, gw.Marshal())
	}
	for name, s := range map[string]Scope{"protocols dropped": {}, "protocol added": {Protocols: []string{"mount", "nfs", "smb"}}} {
		k := *gw
		k.Scope = s
		if _, serr, cerr := handshake(t, v, &k); !errors.Is(serr, ErrRefused) || !errors.Is(cerr, ErrRefused) {
			t.Errorf("%s: server %v, client %v; want refused", name, serr, cerr)
		}
	}
	for _, bad := range []string{"protocols=ftp", "protocols=nfs;protocols=smb", "protocols="} {
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

// sealedPair is a handshake over a TCP connection through relay, which
// sees every byte each way (client to server first) and may change them:
// it returns the two sides' connections.
func sealedPair(t *testing.T, ck, k *Key, relay func(toServer bool, b []byte) []byte) (client, server net.Conn) {
	t.Helper()
	if ck == nil {
		ck = mustCluster(t)
	}
	if k == nil {
		k = ck
	}
	v, _ := NewVerifier(ck)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mid, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); mid.Close() })
	go func() {
		a, err := mid.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			a.Close()
			return
		}
		pump := func(dst, src net.Conn, toServer bool) {
			buf := make([]byte, 1<<16)
			for {
				n, err := src.Read(buf)
				if n > 0 {
					out := buf[:n]
					if relay != nil {
						out = relay(toServer, append([]byte(nil), out...))
					}
					if _, werr := dst.Write(out); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			dst.Close()
			src.Close()
		}
		go pump(b, a, true)
		go pump(a, b, false)
	}()
	type res struct {
		c   net.Conn
		err error
	}
	done := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- res{err: err}
			return
		}
		sc, _, err := v.Server(c, 2*time.Second)
		done <- res{sc, err}
	}()
	raw, err := net.Dial("tcp", mid.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc, err := Client(raw, k, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { cc.Close(); r.c.Close() })
	return cc, r.c
}

// TestSealedRecords: after the handshake bytes travel in records each
// way, whole and in order, whatever the sizes and however reads are cut
// by deadlines.
func TestSealedRecords(t *testing.T) {
	c, s := sealedPair(t, nil, nil, nil)
	sizes := []int{0, 1, 100, maxRecord - 1, maxRecord, maxRecord + 1, 1 << 20}
	var want []byte
	for i, n := range sizes {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*7 + j)
		}
		want = append(want, b...)
	}
	go func() {
		off := 0
		for _, n := range sizes {
			if _, err := c.Write(want[off : off+n]); err != nil {
				return
			}
			off += n
			time.Sleep(5 * time.Millisecond) // the reader's deadline fires mid-way
		}
	}()
	got := make([]byte, 0, len(want))
	buf := make([]byte, 3000)
	for len(got) < len(want) {
		_ = s.SetReadDeadline(time.Now().Add(time.Millisecond))
		n, err := s.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("sealed stream: %d bytes, not what was sent", len(got))
	}
}

// TestSealedRecordsRefuseTampering is the on-path attacker of issue #43:
// once the handshake is over, a byte changed, a record replayed, or bytes
// injected fail the reader's check, and nothing of them is returned.
func TestSealedRecordsRefuseTampering(t *testing.T) {
	for name, tamper := range map[string]func(b []byte, seen int) []byte{
		"a bit flipped": func(b []byte, seen int) []byte {
			b[len(b)/2] ^= 1
			return b
		},
		"injected": func(b []byte, seen int) []byte {
			return append([]byte{0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o'}, append(make([]byte, tagSize), b...)...)
		},
		"replayed": func(b []byte, seen int) []byte { return append(b, b...) },
	} {
		t.Run(name, func(t *testing.T) {
			var on atomic.Bool
			seen := 0
			c, s := sealedPair(t, nil, nil, func(toServer bool, b []byte) []byte {
				if toServer && on.Load() {
					seen++
					return tamper(b, seen)
				}
				return b
			})
			if _, err := c.Write([]byte("before")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 100)
			if n, err := s.Read(buf); err != nil || string(buf[:n]) != "before" {
				t.Fatalf("untouched record: %q %v", buf[:n], err)
			}
			on.Store(true)
			if _, err := c.Write([]byte("the request: unlink /important")); err != nil {
				t.Fatal(err)
			}
			_ = s.SetReadDeadline(time.Now().Add(2 * time.Second))
			var got []byte
			var err error
			for err == nil {
				var n int
				n, err = s.Read(buf)
				got = append(got, buf[:n]...)
			}
			if !errors.Is(err, ErrTampered) {
				t.Fatalf("after tampering: read %q, %v; want ErrTampered", got, err)
			}
			if name != "replayed" && len(got) > 0 {
				t.Fatalf("tampered bytes reached the reader: %q", got)
			}
		})
	}
}

// TestClientRefusesUnsealedServer: a server that accepts the key but does
// not announce sealed records (a version before them, or a downgrade by
// an attacker) is refused rather than spoken to in the clear.
func TestClientRefusesUnsealedServer(t *testing.T) {
	ck := mustCluster(t)
	v, _ := NewVerifier(ck)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		// The server's side up to its verdict, then the old verdict.
		r := &verdictRewriter{Conn: c}
		_, _, _ = v.Server(r, time.Second)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := Client(c, ck, 2*time.Second); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "does not seal") {
		t.Fatalf("unsealed server: %v, want refused", err)
	}
}

// verdictRewriter turns an accepting sealed verdict into the unsealed one.
type verdictRewriter struct{ net.Conn }

func (w *verdictRewriter) Write(b []byte) (int, error) {
	if len(b) == 2 && b[0] == 0 && b[1] == verdictSealed {
		return w.Conn.Write([]byte{0, 0})
	}
	return w.Conn.Write(b)
}

// TestEncryptedRecords: a client with Encrypt sends nothing an
// eavesdropper can read after the handshake, the records still refuse
// tampering, and a server whose cluster key asks for encryption refuses
// a client that does not, saying how to fix it. The request for
// encryption is in the hello, which both proofs cover: a relay that
// strips it breaks the handshake instead of downgrading it.
func TestEncryptedRecords(t *testing.T) {
	ck := mustCluster(t)
	ck.Encrypt = true
	user, _ := ck.Derive("mount", CapRead|CapWrite)
	user.Encrypt = true
	var mu sync.Mutex
	var seen []byte
	c, s := sealedPair(t, ck, user, func(toServer bool, b []byte) []byte {
		mu.Lock()
		seen = append(seen, b...)
		mu.Unlock()
		return b
	})
	secret := bytes.Repeat([]byte("tenant's secret bytes "), 5000)
	go func() { _, _ = c.Write(secret) }()
	got := make([]byte, len(secret))
	if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("encrypted stream: %v", err)
	}
	if _, err := s.Write([]byte("an answer")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 20)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "an answer" {
		t.Fatalf("answer: %q %v", buf[:n], err)
	}
	mu.Lock()
	leaked := bytes.Contains(seen, []byte("secret bytes"))
	mu.Unlock()
	if leaked {
		t.Fatal("the relay read the tenant's bytes of an encrypted connection")
	}

	// A client that does not ask is refused by an encrypting server.
	v, _ := NewVerifier(ck)
	plain, _ := ck.Derive("mount", CapRead|CapWrite)
	plain.Encrypt = false // a derived key takes its maker's choice
	if _, serr, cerr := handshake(t, v, plain); !errors.Is(cerr, ErrRefused) || !strings.Contains(fmt.Sprint(cerr), EnvEncrypt) || serr == nil {
		t.Errorf("unencrypted client of an encrypting server: server %v, client %v", serr, cerr)
	}

	// Stripping the request from the hello fails the handshake.
	stripped := false
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	soft, _ := NewVerifier(mustCluster(t)) // accepts either
	softKey := *soft.Key()
	softKey.Encrypt = true
	go func() {
		sc, err := ln.Accept()
		if err != nil {
			return
		}
		defer sc.Close()
		_, _, _ = soft.Server(sc, 2*time.Second)
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	strip := &helloStripper{Conn: raw, done: &stripped}
	if _, err := Client(strip, &softKey, 2*time.Second); !errors.Is(err, ErrRefused) || !stripped {
		t.Errorf("a hello with its encryption bit stripped: %v (stripped %v), want refused", err, stripped)
	}
}

// helloStripper clears the encryption bit of the hello it writes.
type helloStripper struct {
	net.Conn
	done *bool
}

func (h *helloStripper) Write(b []byte) (int, error) {
	if !*h.done && len(b) > 5 && b[5]&helloEncrypt != 0 {
		b = append([]byte(nil), b...)
		b[5] &^= helloEncrypt
		*h.done = true
	}
	return h.Conn.Write(b)
}

// TestPlainDataConnections: a client that offers to go unsealed (the
// data path) gets an unsealed connection only from a server that allows
// it, never with encryption; everything else is sealed.
func TestPlainDataConnections(t *testing.T) {
	for _, c := range []struct {
		name                       string
		plainOK, allow, encrypt    bool
		wantPlain, wantClientError bool
	}{
		{name: "offered and allowed", plainOK: true, allow: true, wantPlain: true},
		{name: "offered, not allowed", plainOK: true},
		{name: "allowed, not offered", allow: true},
		{name: "offered and allowed, encrypting", plainOK: true, allow: true, encrypt: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ck := mustCluster(t)
			v, _ := NewVerifier(ck)
			v.AllowPlain = c.allow
			k, _ := ck.Derive("m", CapRead|CapWrite)
			k.Encrypt = c.encrypt
			if c.encrypt {
				ck.Encrypt = true
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			done := make(chan net.Conn, 1)
			go func() {
				sc, err := ln.Accept()
				if err != nil {
					done <- nil
					return
				}
				conn, _, _ := v.Server(sc, 2*time.Second)
				done <- conn
			}()
			raw, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			cc, err := ClientWith(raw, k, 2*time.Second, c.plainOK)
			if err != nil {
				t.Fatal(err)
			}
			sc := <-done
			if sc == nil {
				t.Fatal("server side failed")
			}
			defer sc.Close()
			_, cSealed := cc.(*sealedConn)
			_, sSealed := sc.(*sealedConn)
			if cSealed != sSealed || cSealed == c.wantPlain {
				t.Fatalf("client sealed %v, server sealed %v; want plain %v", cSealed, sSealed, c.wantPlain)
			}
			if _, err := cc.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(sc, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("through the connection: %q %v", buf, err)
			}
		})
	}
}
