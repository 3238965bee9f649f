package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/wire"
)

// TestTenantReadsOnlyBlocksItWasGiven is the hole issue #43's last note
// left open: storage servers served any fragment to any key with read, so
// a tenant's key (limited to uid 1000) that learned or guessed the ids of
// bob's stripes read bob's 0600 file past the islands' checks. Now such a
// key reads, without a token, only its own logs, and another log's
// fragments only with the read token an island gave it for one block
// after its permission checks; the token covers that block's piece (and
// the parity over its rows), not its neighbours in the stripe. What the
// tenant may read it still reads: bob's 0644 file, its own files, and
// bob's file again while a storage server holding it is down (degraded).
func TestTenantReadsOnlyBlocksItWasGiven(t *testing.T) {
	cl, _ := startDev(t, 3, 1, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	admin := dialDev(t, cl)
	bob := metawire.Cred{UID: 2000, GID: 2000}
	alice := metawire.Cred{UID: 1000, GID: 1000}
	if _, err := admin.FS.MkdirAll(ctx, metawire.Root, "/shared", 0o777); err != nil {
		t.Fatal(err)
	}
	// Bob's files, written by one trusted client (a mount acting for many
	// users) in one go: their blocks share its log, and stripes.
	pub := bytes.Repeat([]byte("bob's public text. "), 6000)
	sec := bytes.Repeat([]byte("BOB'S SECRET TEXT! "), 6000)
	var pubIno, secIno uint64
	{
		fp, err := admin.FS.CreateFile(ctx, bob, "/shared/pub", 0o644)
		if err != nil {
			t.Fatal(err)
		}
		fs, err := admin.FS.CreateFile(ctx, bob, "/shared/secret", 0o600)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []struct {
			f interface {
				WriteAt(context.Context, []byte, int64) (int, error)
			}
			b []byte
		}{{fp, pub}, {fs, sec}} {
			if _, err := w.f.WriteAt(ctx, w.b, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := fp.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := fs.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		pubIno, secIno = fp.Ino(), fs.Ino()
		fp.Release()
		fs.Release()
	}

	key, err := testKey.DeriveScoped("alice", auth.CapRead|auth.CapWrite, auth.Scope{UIDs: []uint32{1000}, GIDs: []uint32{1000}})
	if err != nil {
		t.Fatal(err)
	}
	dialAlice := func() *connect.Conn {
		t.Helper()
		c, err := connect.Dial(ctx, []string{cl.Manager}, key, quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	readAll := func(c *connect.Conn, path string, want []byte) error {
		f, err := c.FS.OpenPath(ctx, alice, path)
		if err != nil {
			return err
		}
		defer f.Release()
		got := make([]byte, len(want)+1)
		n, err := f.ReadAt(ctx, got, 0)
		if n != len(want) || !bytes.Equal(got[:n], want) {
			return fmt.Errorf("read %s: %d of %d bytes right (%v)", path, n, len(want), err)
		}
		return nil
	}

	// What alice may read, she reads: bob's 0644 file, and her own.
	ac := dialAlice()
	if err := readAll(ac, "/shared/pub", pub); err != nil {
		t.Fatal(err)
	}
	mine := bytes.Repeat([]byte("alice's own. "), 9000)
	if err := ac.FS.WriteFile(ctx, alice, "/shared/alice", mine, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := readAll(dialAlice(), "/shared/alice", mine); err != nil {
		t.Fatalf("alice's own file through a fresh client: %v", err)
	}
	if _, err := ac.FS.BlockPointers(ctx, alice, secIno); metawire.Errno(err) != syscall.EACCES {
		t.Fatalf("alice asking for the secret's block map: %v, want EACCES", err)
	}

	// The ids of bob's blocks, as a tenant who guessed them would use them.
	secPtrs, err := admin.FS.BlockPointers(ctx, metawire.Root, secIno)
	if err != nil || len(secPtrs) == 0 {
		t.Fatalf("secret's pointers: %v", err)
	}
	pubPtrs, err := ac.FS.BlockPointers(ctx, alice, pubIno)
	if err != nil || len(pubPtrs) == 0 {
		t.Fatalf("pub's pointers for alice: %v", err)
	}
	pp := pubPtrs[0]
	if len(pp.Token) != auth.TokenSize {
		t.Fatalf("alice's pointer to bob's block came without a read token (%d bytes)", len(pp.Token))
	}
	storageAddr := func(slot uint16) string {
		for _, s := range admin.View.Map().Storage {
			if s.Slot == slot {
				return s.Addr
			}
		}
		t.Fatalf("no storage slot %d", slot)
		return ""
	}
	conns := map[uint16]*wire.Client{}
	raw := func(slot uint16, op uint16, m fragment.Message) (wire.Reply, error) {
		t.Helper()
		c := conns[slot]
		if c == nil {
			var err error
			if c, err = wire.Dial(ctx, storageAddr(slot), wire.ClientConfig{Key: key, IOTimeout: 10 * time.Second}); err != nil {
				t.Fatal(err)
			}
			conns[slot] = c
			t.Cleanup(func() { c.Close() })
		}
		rep, err := c.Call(ctx, op, admin.View.Map().Epoch, fragment.Marshal(m), nil, nil)
		return rep, fragment.RemoteErr(err)
	}
	forbidden := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, fragment.ErrForbidden) {
			t.Errorf("%s: %v, want forbidden", what, err)
		}
	}
	sp := secPtrs[0]
	piece := layout.Spans(int(sp.Shard), int(sp.Offset), int(sp.Length))[0]
	secFrag, secSlot := sp.Fragment(piece.Frag), sp.Slots[piece.Frag]
	secRead := fragment.ReadReq{ID: secFrag, Off: uint64(piece.Off), Len: uint32(piece.Len)}
	_, err = raw(secSlot, fragment.OpRead, &secRead)
	forbidden("reading the secret's fragment without a token", err)
	withPub := secRead
	withPub.Token, withPub.Grant = pp.Token, pp.Grant()
	_, err = raw(secSlot, fragment.OpRead, &withPub)
	forbidden("reading the secret's fragment with the public block's token", err)
	claimed := secRead
	claimed.Token, claimed.Grant = pp.Token, sp.Grant()
	_, err = raw(secSlot, fragment.OpRead, &claimed)
	forbidden("reading the secret's fragment with the public block's token, claiming the secret's grant", err)
	_, err = raw(secSlot, fragment.OpInfo, &fragment.IDReq{ID: secFrag})
	forbidden("the secret's fragment's info", err)
	_, err = raw(secSlot, fragment.OpNewest, &fragment.LogReq{Log: sp.Stripe.Log})
	forbidden("the newest stripe of bob's log", err)
	_, err = raw(secSlot, fragment.OpAppend, &fragment.IDReq{ID: fragment.ID{Log: sp.Stripe.Log, Seq: sp.Stripe.Seq + 1000}})
	forbidden("appending to bob's log", err)
	if pp.Stripe != sp.Stripe {
		// The case that matters: neighbours in one stripe, where a token
		// per stripe would have shown alice the secret.
		t.Fatalf("the two files' first blocks are in stripes %s and %s; the test wants one", pp.Stripe, sp.Stripe)
	}
	// The public block's own piece reads with its token.
	ppiece := layout.Spans(int(pp.Shard), int(pp.Offset), int(pp.Length))[0]
	ok := fragment.ReadReq{ID: pp.Fragment(ppiece.Frag), Off: uint64(ppiece.Off), Len: uint32(ppiece.Len), Token: pp.Token, Grant: pp.Grant()}
	rep, err := raw(pp.Slots[ppiece.Frag], fragment.OpRead, &ok)
	if err != nil || !bytes.Equal(rep.Payload, pub[:ppiece.Len]) {
		t.Fatalf("the public block's piece with its token: %d bytes, %v", len(rep.Payload), err)
	}
	// Bob's bytes never reached alice: the secret still reads whole.
	if err := func() error {
		f, err := admin.FS.OpenPath(ctx, metawire.Root, "/shared/secret")
		if err != nil {
			return err
		}
		defer f.Release()
		got := make([]byte, len(sec))
		if n, err := f.ReadAt(ctx, got, 0); n != len(sec) || !bytes.Equal(got, sec) {
			return fmt.Errorf("%d bytes, %v", n, err)
		}
		return nil
	}(); err != nil {
		t.Fatalf("the secret after the attempts: %v", err)
	}

	// Degraded: the slot holding the public block's piece goes down; once
	// the map says so, alice's token covers its rows elsewhere and she
	// reads the file again through a fresh client.
	if pp.K < 2 {
		t.Logf("policy %s keeps copies: a degraded read is a copy's read", pp.Policy())
	}
	down := pp.Slots[ppiece.Frag]
	cl.Child(fmt.Sprintf("storage%d", down)).Kill()
	waitEvent(t, fmt.Sprintf("slot %d marked down", down), func() error {
		if err := admin.View.Refresh(ctx); err != nil {
			return err
		}
		if s, ok := admin.View.Map().StorageSlot(down); !ok || s.State != cluster.StateDown {
			return fmt.Errorf("slot %d is %v", down, s.State)
		}
		return nil
	})
	waitEvent(t, "alice reads bob's public file degraded", func() error {
		c, err := connect.Dial(ctx, []string{cl.Manager}, key, quietLogger())
		if err != nil {
			return err
		}
		defer c.Close()
		return readAll(c, "/shared/pub", pub)
	})
}

// BenchmarkTenantReadTokens reads 64 MiB files through a fresh client
// each round, alternating: one written by another client, with the
// cluster key (no tokens) and with a tenant's key (a token per block,
// checked at the storage servers), and the same bytes written by the
// tenant itself (its own log, no tokens); go test -bench
// TenantReadTokens ./test.
func BenchmarkTenantReadTokens(b *testing.B) {
	cl, _ := startDev(b, 5, 1, 0, nil)
	ctx := context.Background()
	admin := dialDev(b, cl)
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20) // 64 MiB
	if err := admin.FS.WriteFile(ctx, metawire.Root, "/big", data, 0o644); err != nil {
		b.Fatal(err)
	}
	tenant, err := testKey.DeriveScoped("alice", auth.CapRead|auth.CapWrite, auth.Scope{UIDs: []uint32{1000}, GIDs: []uint32{1000}})
	if err != nil {
		b.Fatal(err)
	}
	cred := metawire.Cred{UID: 1000, GID: 1000}
	// The same bytes in the tenant's own log: read without tokens.
	if _, err := admin.FS.MkdirAll(ctx, metawire.Root, "/alice", 0o777); err != nil {
		b.Fatal(err)
	}
	{
		tc, err := connect.Dial(ctx, []string{cl.Manager}, tenant, quietLogger())
		if err != nil {
			b.Fatal(err)
		}
		err = tc.FS.WriteFile(ctx, cred, "/alice/big", data, 0o644)
		tc.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	read := func(key *auth.Key, path string) time.Duration {
		c, err := connect.Dial(ctx, []string{cl.Manager}, key, quietLogger())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		rf, err := c.FS.OpenPath(ctx, cred, path)
		if err != nil {
			b.Fatal(err)
		}
		defer rf.Release()
		buf := make([]byte, 1<<20)
		for off := int64(0); off < int64(len(data)); off += int64(len(buf)) {
			if n, err := rf.ReadAt(ctx, buf, off); n != len(buf) || !bytes.Equal(buf, data[off:off+int64(n)]) {
				b.Fatalf("read at %d: %d bytes, %v", off, n, err)
			}
		}
		return time.Since(start)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, k := range []struct {
			name, path string
			key        *auth.Key
		}{{"cluster key, another's log", "/big", testKey}, {"tenant key, another's log (tokens)", "/big", tenant}, {"tenant key, its own log", "/alice/big", tenant}} {
			d := read(k.key, k.path)
			b.Logf("round %d %s: %.0f MB/s", i, k.name, float64(len(data))/d.Seconds()/1e6)
		}
	}
}
