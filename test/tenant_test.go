package test

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/wire"
)

// TestForgedRepairRefused is issue #43's attack 2, as the intruder made
// it: with a tenant's `user` key, read a fragment of another user's file,
// change its first 16 bytes and four more so that its CRC32C stays the
// same, and send it as a repair. The storage server accepted it before
// (it checked the CRC only) and every read returned the forged bytes; now
// a repair needs the admin capability and the bytes stay right.
func TestForgedRepairRefused(t *testing.T) {
	cl, _ := startDev(t, 3, 1, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := dialDev(t, cl)
	want := bytes.Repeat([]byte("victim's bytes. "), 2560) // 40 KiB: in a stripe, not inline
	f, err := admin.FS.CreateFile(ctx, metawire.Root, "/victim", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ino := f.Ino()
	f.Release()
	ptrs, err := admin.FS.BlockPointers(ctx, metawire.Root, ino)
	if err != nil || len(ptrs) == 0 {
		t.Fatalf("block pointers: %v %v", ptrs, err)
	}
	p := ptrs[0]
	id := p.Fragment(0)
	addr := ""
	for _, s := range admin.View.Map().Storage {
		if s.Slot == p.Slots[0] {
			addr = s.Addr
		}
	}

	user, _ := testKey.Derive("tenant", auth.CapRead|auth.CapWrite)
	c, err := wire.Dial(ctx, addr, wire.ClientConfig{Key: user, IOTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	epoch := admin.View.Map().Epoch
	rep, err := c.Call(ctx, fragment.OpInfo, epoch, fragment.Marshal(&fragment.IDReq{ID: id}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var info fragment.Info
	if err := fragment.Unmarshal(rep.Msg, &info); err != nil {
		t.Fatal(err)
	}
	if info.Length > uint64(info.ChunkSize) || len(info.CRCs) != 1 {
		t.Fatalf("fragment of %d bytes, chunk %d: the test wants one chunk", info.Length, info.ChunkSize)
	}
	rep, err = c.Call(ctx, fragment.OpRead, epoch, fragment.Marshal(&fragment.ReadReq{ID: id, Len: uint32(info.Length)}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	orig := append([]byte(nil), rep.Payload...)
	forged := forgeCRC32C(t, orig, []byte("EVIL EVIL EVIL!!"))
	crc := crc32.Checksum(forged, crc32.MakeTable(crc32.Castagnoli))
	if crc != info.CRCs[0] || bytes.Equal(forged, orig) {
		t.Fatalf("forgery did not keep the checksum: %08x vs %08x", crc, info.CRCs[0])
	}
	_, err = c.Call(ctx, fragment.OpPut, epoch, fragment.Marshal(&fragment.PutReq{ID: id, Repair: true, ChunkSize: info.ChunkSize, CRCs: []uint32{crc}}), forged, nil)
	if !errors.Is(fragment.RemoteErr(err), fragment.ErrForbidden) {
		t.Errorf("a forged repair with a user key: %v, want forbidden", err)
	}
	// The bytes stayed: on the server and through a fresh client.
	rep, err = c.Call(ctx, fragment.OpRead, epoch, fragment.Marshal(&fragment.ReadReq{ID: id, Len: uint32(info.Length)}), nil, nil)
	if err != nil || !bytes.Equal(rep.Payload, orig) {
		t.Fatalf("fragment after the repair attempt: %v, changed %v", err, !bytes.Equal(rep.Payload, orig))
	}
	rf, err := dialDev(t, cl).FS.OpenPath(ctx, metawire.Root, "/victim")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	n, err := rf.ReadAt(ctx, got, 0)
	rf.Release()
	if n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("victim reads %q... (%d bytes, %v)", got[:16], n, err)
	}
}

// forgeCRC32C returns b with its start replaced by head and the four
// bytes after head chosen so that the CRC32C of the whole is unchanged.
// CRC32C is affine over GF(2): for messages of one length,
// crc(a^d) = crc(a) ^ lin(d), so the four bytes solve a 32×32 system.
func forgeCRC32C(t *testing.T, b, head []byte) []byte {
	t.Helper()
	tab := crc32.MakeTable(crc32.Castagnoli)
	sum := func(x []byte) uint32 { return crc32.Checksum(x, tab) }
	out := append([]byte(nil), b...)
	copy(out, head)
	target := sum(b) ^ sum(out) // what the four bytes must add
	at := len(head)
	// Column i: what flipping bit i of the four bytes does to the CRC.
	var cols [32]uint32
	for i := range 32 {
		x := append([]byte(nil), out...)
		x[at+i/8] ^= 1 << (i % 8)
		cols[i] = sum(x) ^ sum(out)
	}
	// Gauss-Jordan over GF(2): rows are CRC bits, unknowns the 32 bits.
	var rows [32]uint64 // low 32 bits: coefficients; bit 32: right side
	for r := range 32 {
		for i := range 32 {
			if cols[i]>>r&1 == 1 {
				rows[r] |= 1 << i
			}
		}
		if target>>r&1 == 1 {
			rows[r] |= 1 << 32
		}
	}
	for c := range 32 {
		piv := -1
		for r := c; r < 32; r++ {
			if rows[r]>>c&1 == 1 {
				piv = r
				break
			}
		}
		if piv < 0 {
			t.Fatal("forgeCRC32C: singular system")
		}
		rows[c], rows[piv] = rows[piv], rows[c]
		for r := range 32 {
			if r != c && rows[r]>>c&1 == 1 {
				rows[r] ^= rows[c]
			}
		}
	}
	for i := range 32 {
		if rows[i]>>32&1 == 1 {
			out[at+i/8] ^= 1 << (i % 8)
		}
	}
	return out
}
