package filelock

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func roundTripSets() []Set {
	many := make(Set, 0, 300)
	for i := range uint64(300) {
		many = append(many, px(A, Read, 2*i, 2*i))
	}
	return []Set{
		nil,
		{px(A, Write, 0, M)},
		testSet(),
		{pxp(Owner{M, M}, Read, M, M, ^uint32(0))},
		{px(A, Read, 0, 9), px(A, Write, 10, 19), px(B, Write, 5, 15), flp(A, Read, 1), flp(B, Read, 2)},
		many,
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for i, s := range roundTripSets() {
		checkSet(t, s)
		b := s.Encode()
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("set %d: Decode: %v", i, err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Fatalf("set %d: round trip\n got %+v\nwant %+v", i, got, s)
		}
		if !bytes.Equal(got.Encode(), b) {
			t.Fatalf("set %d: encoding not stable", i)
		}
		if want := 1 + len(binary.AppendUvarint(nil, uint64(len(s)))) + 38*len(s); len(b) != want {
			t.Fatalf("set %d: %d bytes, want %d", i, len(b), want)
		}
	}
}

func TestEncodeFormat(t *testing.T) {
	s := Set{pxp(Owner{0x0102030405060708, 0x1112131415161718}, Write, 0x21, 0x2122232425262728, 0x31323334)}
	want := "01" + "01" +
		"0102030405060708" + "1112131415161718" +
		"01" + "02" +
		"0000000000000021" + "2122232425262728" +
		"31323334"
	if got := hex.EncodeToString(s.Encode()); got != want {
		t.Fatalf("Encode\n got %s\nwant %s", got, want)
	}
	if got := hex.EncodeToString(Set(nil).Encode()); got != "0100" {
		t.Fatalf("empty set encodes as %s", got)
	}
	flk := Set{fl(Owner{0, 0}, Read)}.Encode()
	if flk[18] != 2 || flk[19] != 1 {
		t.Fatalf("flock kind/type bytes %x", flk[18:20])
	}
	// Counts of 128 and more take more than one varint byte.
	many := roundTripSets()[5].Encode()
	if many[1] != 0xac || many[2] != 0x02 {
		t.Fatalf("count 300 encoded as %x", many[1:3])
	}
}

// enc encodes locks without checking them, to make corrupt inputs.
func enc(locks ...Lock) []byte { return Set(locks).Encode() }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestDecodeCorrupt(t *testing.T) {
	one := enc(px(A, Read, 0, 9))
	for _, tc := range []struct {
		name string
		b    []byte
		want string // part of the error message
	}{
		{"empty", nil, "empty"},
		{"version 0", cat([]byte{0}, one[1:]), "version"},
		{"version 2", cat([]byte{2}, one[1:]), "version"},
		{"no count", []byte{1}, "count"},
		{"truncated count", []byte{1, 0x80}, "count"},
		{"count overflows", []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "count"},
		{"count not minimal", []byte{1, 0x80, 0x00}, "minimal"},
		{"count not minimal with lock", cat([]byte{1, 0x81, 0x00}, one[2:]), "minimal"},
		{"count 1 no lock", []byte{1, 1}, "count"},
		{"truncated lock", one[:len(one)-1], "count"},
		{"truncated second lock", enc(px(A, Read, 0, 9), px(B, Read, 0, 9))[:2+38+20], "count"},
		{"trailing byte", cat(one, []byte{0}), "after"},
		{"trailing after empty", []byte{1, 0, 0}, "after"},
		// 2^63 locks of 38 bytes is 0 mod 2^64: only checking the count
		// against what remains before multiplying catches it.
		{"huge count wraps", binary.AppendUvarint([]byte{1}, 1<<63), "count"},
		{"huge count", cat(binary.AppendUvarint([]byte{1}, 1<<40), one[2:]), "count"},
		{"max count", binary.AppendUvarint([]byte{1}, M), "count"},
		{"kind 0", enc(Lock{Owner: A, Kind: 0, Type: Read}), "kind"},
		{"kind 4", enc(Lock{Owner: A, Kind: 4, Type: Read, End: MaxEnd}), "kind"},
		{"append not whole", enc(Lock{Owner: A, Kind: Append, Type: Write}), "append"},
		{"type 0", enc(Lock{Owner: A, Kind: POSIX, Type: 0}), "type"},
		{"type 3", enc(Lock{Owner: A, Kind: POSIX, Type: 3}), "type"},
		{"start after end", enc(px(A, Read, 10, 9)), "start"},
		{"flock not whole", enc(Lock{Owner: A, Kind: Flock, Type: Read, Start: 0, End: 9}), "flock"},
		{"owners unsorted", enc(px(B, Read, 0, 9), px(A, Read, 0, 9)), "order"},
		{"sessions unsorted", enc(px(C, Read, 0, 9), px(A, Read, 0, 9)), "order"},
		{"kinds unsorted", enc(fl(A, Read), px(A, Read, 0, 9)), "order"},
		{"starts unsorted", enc(px(A, Read, 20, 29), px(A, Read, 0, 9)), "order"},
		{"duplicate", enc(px(A, Read, 0, 9), px(A, Read, 0, 9)), "order"},
		{"duplicate flock", enc(fl(A, Read), fl(A, Write)), "order"},
		{"overlap same owner", enc(px(A, Read, 0, 9), px(A, Write, 9, 19)), "overlap"},
		{"overlap to MaxEnd", enc(px(A, Read, 0, M), px(A, Write, M, M)), "overlap"},
		{"unmerged same type", enc(px(A, Read, 0, 9), px(A, Read, 10, 19)), "merged"},
		{"bad lock after good", enc(px(A, Read, 0, 9), Lock{Owner: B, Kind: POSIX, Type: 7}), "lock 1"},
	} {
		s, err := Decode(tc.b)
		if err == nil || s != nil {
			t.Errorf("%s: Decode(%x) = %+v, %v; want error", tc.name, tc.b, s, err)
			continue
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v does not wrap ErrCorrupt", tc.name, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not mention %q", tc.name, err, tc.want)
		}
	}
}

// Neighbours of corrupt inputs that are fine: different owners may
// overlap and touch, one owner's locks of different types may touch, and
// one owner's POSIX and flock locks are independent.
func TestDecodeAcceptsNeighbours(t *testing.T) {
	for _, s := range []Set{
		{px(A, Read, 0, 9), px(B, Write, 0, 9)},
		{px(A, Read, 0, 9), px(B, Read, 10, 19)},
		{px(A, Read, 0, 9), px(A, Write, 10, 19), px(A, Read, 20, M)},
		{px(A, Read, 0, 9), px(A, Read, 11, M)},
		{px(A, Write, 0, M), fl(A, Write)},
		{fl(A, Read), fl(B, Write)},
	} {
		got, err := Decode(s.Encode())
		if err != nil || !reflect.DeepEqual(got, s) {
			t.Errorf("Decode(Encode(%+v)) = %+v, %v", s, got, err)
		}
	}
}

// A huge count must be refused before allocating for it: the Set it
// announces would take 48 MiB.
func TestDecodeHugeCountNoAlloc(t *testing.T) {
	b := binary.AppendUvarint([]byte{1}, 1<<20)
	b = append(b, make([]byte, 38)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		if _, err := Decode(b); err == nil {
			t.Fatal("no error")
		}
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("%d bytes allocated", n)
	}
}

// checkDecoded is FuzzDecode's property: Decode never panics; what it
// refuses wraps ErrCorrupt; what it accepts keeps the Set invariants and
// encodes back to the same bytes.
func checkDecoded(t *testing.T, b []byte) {
	t.Helper()
	s, err := Decode(b)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) || s != nil {
			t.Fatalf("Decode(%x) = %+v, %v", b, s, err)
		}
		return
	}
	checkSet(t, s)
	e := s.Encode()
	if !bytes.Equal(e, b) {
		t.Fatalf("Decode(%x) = %+v, encodes as %x", b, s, e)
	}
	s2, err := Decode(e)
	if err != nil || !reflect.DeepEqual(s2, s) {
		t.Fatalf("Decode(Encode(%+v)) = %+v, %v", s, s2, err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range roundTripSets() {
		f.Add(s.Encode())
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0x80, 0x00})
	f.Add(binary.AppendUvarint([]byte{1}, 1<<63))
	f.Add(enc(px(A, Read, 0, 9), px(A, Read, 10, 19)))
	f.Add(enc(px(A, Read, 0, 9), px(A, Write, 5, 19)))
	f.Add(enc(fl(A, Read), px(A, Read, 0, 9)))
	f.Fuzz(func(t *testing.T, b []byte) { checkDecoded(t, b) })
}

// The fuzz property over many mutations of valid encodings, so that the
// ordinary test run explores more than the seeds. Small owner, kind, type
// and range values make mutated inputs decode often enough to matter.
func TestDecodeMutations(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	valid := 0
	for range 20000 {
		var s Set
		for range r.IntN(6) {
			o := Owner{uint64(r.IntN(2)), uint64(r.IntN(2))}
			if r.IntN(4) == 0 {
				s = s.Apply(flp(o, Type(1+r.IntN(2)), r.Uint32N(3)))
				continue
			}
			a, b := uint64(r.IntN(8)), uint64(r.IntN(8))
			if a > b {
				a, b = b, a
			}
			s = s.Apply(pxp(o, Type(1+r.IntN(2)), a, b, r.Uint32N(3)))
		}
		b := s.Encode()
		for range 1 + r.IntN(3) {
			switch r.IntN(5) {
			case 0:
				if len(b) > 0 {
					b = b[:r.IntN(len(b))]
				}
			case 1:
				b = append(b, byte(r.IntN(4)))
			default:
				if len(b) > 0 {
					b[r.IntN(len(b))] ^= byte(1 << r.IntN(8))
				}
			}
		}
		if _, err := Decode(b); err == nil {
			valid++
		}
		checkDecoded(t, b)
	}
	if valid < 1000 {
		t.Errorf("only %d mutated inputs decoded", valid)
	}
}
