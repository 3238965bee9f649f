package fragment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/wire"
)

// kindEC is layout.EC (fragment cannot import layout: layout imports it).
const kindEC = 2

var sampleIDs = []ID{
	{},
	{Log: 1, Seq: 2, Index: 3},
	{Log: 0xdeadbeefcafef00d, Seq: 0x0123456789abcdef, Index: 0xabcd},
	{Log: math.MaxUint64, Seq: math.MaxUint64, Index: math.MaxUint16},
	{Log: 1 << 63, Seq: 0, Index: 1},
	{Log: 0, Seq: 1 << 32, Index: 0x8000},
}

func TestIDStringRoundTrip(t *testing.T) {
	for _, id := range sampleIDs {
		s := id.String()
		if len(s) != 38 {
			t.Errorf("%#v.String() = %q: %d chars, want 38", id, s, len(s))
		}
		if s != strings.ToLower(s) {
			t.Errorf("%#v.String() = %q is not lower-case", id, s)
		}
		got, err := ParseID(s)
		if err != nil {
			t.Errorf("ParseID(%q): %v", s, err)
			continue
		}
		if got != id {
			t.Errorf("ParseID(%q) = %#v, want %#v", s, got, id)
		}
	}
	if got, want := (ID{Log: 0x1f, Seq: 0x2e, Index: 0x3d}).String(), "000000000000001f-000000000000002e-003d"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	sid := StripeID{Log: 7, Seq: 9}
	if got, want := sid.String(), "0000000000000007-0000000000000009"; got != want {
		t.Errorf("StripeID.String() = %q, want %q", got, want)
	}
	for i := range 5 {
		id := sid.Fragment(i)
		if id != (ID{Log: 7, Seq: 9, Index: uint16(i)}) || id.Stripe() != sid {
			t.Errorf("Fragment(%d) = %#v, Stripe() = %#v", i, id, id.Stripe())
		}
	}
}

func TestParseIDRejectsMalformed(t *testing.T) {
	valid := "0123456789abcdef-fedcba9876543210-0a0b"
	if _, err := ParseID(valid); err != nil {
		t.Fatalf("ParseID(%q): %v", valid, err)
	}
	bad := []string{
		"",
		"0",
		valid[:len(valid)-1],                     // short
		valid + "0",                              // long
		" " + valid[1:],                          // leading space
		valid[:len(valid)-1] + " ",               // trailing space
		strings.ToUpper(valid),                   // not canonical (upper-case hex)
		"0123456789ABCDEF-fedcba9876543210-0a0b", // partly upper-case
		"0123456789abcdef_fedcba9876543210-0a0b", // wrong separator
		"0123456789abcdef-fedcba9876543210_0a0b",
		"0123456789abcdef-fedcba9876543210-0a0g", // not hex
		"g123456789abcdef-fedcba9876543210-0a0b",
		"0123456789abcdef-fedcba98765432x0-0a0b",
		"+123456789abcdef-fedcba9876543210-0a0b", // sign
		"-123456789abcdef-fedcba9876543210-0a0b",
		"0x23456789abcdef-fedcba9876543210-0a0b", // prefix
		"0123456789abcdef--edcba9876543210-0a0b", // dash inside a field
		"0123456789abcdef-fedcba9876543210--a0b",
		"0123456789abcdef0fedcba9876543210-0a0b", // dash moved
		"0123456789abcde-ffedcba9876543210-0a0b",
		"0123456789abcdef-fedcba9876543210-0a0b.tmp",
		"0123456789abcdef-fedcba9876543210-0a\x00b",
		"0123456789abcdéf-fedcba9876543210-0a0",
	}
	for _, s := range bad {
		id, err := ParseID(s)
		if !errors.Is(err, ErrBadID) {
			t.Errorf("ParseID(%q) = %#v, %v; want ErrBadID", s, id, err)
		}
	}
}

func TestBinaryID(t *testing.T) {
	for _, id := range sampleIDs {
		prefix := []byte("xyz")
		b := id.AppendBinary(slices.Clone(prefix))
		if len(b) != len(prefix)+EncodedLen || !bytes.Equal(b[:3], prefix) {
			t.Fatalf("AppendBinary(%#v) = %x", id, b)
		}
		want := make([]byte, 0, EncodedLen)
		want = binary.BigEndian.AppendUint64(want, id.Log)
		want = binary.BigEndian.AppendUint64(want, id.Seq)
		want = binary.BigEndian.AppendUint16(want, id.Index)
		if !bytes.Equal(b[3:], want) {
			t.Errorf("AppendBinary(%#v) = %x, want %x", id, b[3:], want)
		}
		got, err := DecodeID(b[3:])
		if err != nil || got != id {
			t.Errorf("DecodeID(%x) = %#v, %v; want %#v", b[3:], got, err, id)
		}
	}
	for _, n := range []int{0, 1, EncodedLen - 1, EncodedLen + 1, 2 * EncodedLen} {
		if id, err := DecodeID(make([]byte, n)); !errors.Is(err, ErrBadID) {
			t.Errorf("DecodeID(%d bytes) = %#v, %v; want ErrBadID", n, id, err)
		}
	}
	// The binary form sorts like (Log, Seq, Index).
	ids := []ID{
		{0, 0, 0}, {0, 0, 1}, {0, 0, 0xffff}, {0, 1, 0}, {0, 0xff, 0}, {0, 0x100, 0},
		{0, math.MaxUint64, math.MaxUint16}, {1, 0, 0}, {0x100, 0, 0}, {math.MaxUint64, 0, 0},
	}
	for i := 1; i < len(ids); i++ {
		a, b := ids[i-1].AppendBinary(nil), ids[i].AppendBinary(nil)
		if bytes.Compare(a, b) >= 0 {
			t.Errorf("binary %#v (%x) does not sort before %#v (%x)", ids[i-1], a, ids[i], b)
		}
	}
}

// newOf returns a fresh zero value of m's type.
func newOf(m Message) Message {
	return reflect.New(reflect.TypeOf(m).Elem()).Interface().(Message)
}

// protoCases holds one or more instances of every message. Empty lists are
// non-nil because Decode makes them so.
func protoCases() []Message {
	return []Message{
		&PutReq{ID: sampleIDs[2], Repair: false, ChunkSize: 65536, CRCs: []uint32{1, 0xffffffff, 3}},
		&PutReq{ID: sampleIDs[3], Repair: true, ChunkSize: 0, CRCs: []uint32{}},
		&PutReq{ID: sampleIDs[0], Repair: true, ChunkSize: math.MaxUint32, CRCs: make([]uint32, 300)},
		&IDReq{ID: sampleIDs[1]},
		&IDReq{ID: sampleIDs[3]},
		&AppendResp{Length: 0},
		&AppendResp{Length: math.MaxUint64},
		&ReadReq{ID: sampleIDs[2], Off: 1 << 40, Len: math.MaxUint32},
		&ReadReq{},
		&ReadResp{Length: 12345},
		&Info{ID: sampleIDs[2], Length: 1 << 26, ChunkSize: 4096, Created: time.Unix(0, 1700000000123456789), CRCs: []uint32{9, 8, 7}},
		&Info{ID: sampleIDs[0], Length: 0, ChunkSize: 0, Created: time.Unix(0, -5), CRCs: []uint32{}},
		&ListReq{Log: 5, FromSeq: 6, Limit: 7},
		&ListReq{Log: math.MaxUint64, FromSeq: math.MaxUint64, Limit: math.MaxUint32},
		&ListResp{IDs: []ID{sampleIDs[1], sampleIDs[2], sampleIDs[3]}, Lengths: []uint64{0, 1, math.MaxUint64}},
		&ListResp{IDs: []ID{}, Lengths: []uint64{}},
		&LogReq{Log: 0xfeedface},
		&NewestResp{Found: true, Seq: 42},
		&NewestResp{Found: false, Seq: 0},
		&VerifyResp{Sick: []Range{{0, 65536}, {1 << 20, 100}}},
		&VerifyResp{Sick: []Range{}},
		&Stats{Slot: 65535, CapacityBytes: 1, UsedBytes: 2, FreeBytes: 3, Fragments: 4, ScrubPasses: 5, ScrubBytes: 6, CorruptFound: 7, Repairs: 8},
		&Stats{},
	}
}

func TestProtoRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for i, m := range protoCases() {
		name := fmt.Sprintf("%d-%T", i, m)
		seen[fmt.Sprintf("%T", m)] = true
		b := Marshal(m)
		got := newOf(m)
		if err := Unmarshal(b, got); err != nil {
			t.Errorf("%s: Unmarshal(Marshal) = %v", name, err)
			continue
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s: round trip\n got %#v\nwant %#v", name, got, m)
		}
		if again := Marshal(got); !bytes.Equal(again, b) {
			t.Errorf("%s: re-encoding differs: %x vs %x", name, again, b)
		}
	}
	// Every message type of the protocol is covered.
	for _, typ := range []string{"*fragment.PutReq", "*fragment.IDReq", "*fragment.AppendResp", "*fragment.ReadReq",
		"*fragment.ReadResp", "*fragment.Info", "*fragment.ListReq", "*fragment.ListResp", "*fragment.LogReq",
		"*fragment.NewestResp", "*fragment.VerifyResp", "*fragment.Stats"} {
		if !seen[typ] {
			t.Errorf("no round-trip case for %s", typ)
		}
	}
}

func TestProtoEncodedSizes(t *testing.T) {
	for _, tc := range []struct {
		m    Message
		size int
	}{
		{&IDReq{}, EncodedLen},
		{&AppendResp{}, 8},
		{&ReadReq{}, EncodedLen + 12},
		{&ReadResp{}, 8},
		{&ListReq{}, 20},
		{&LogReq{}, 8},
		{&NewestResp{}, 9},
		{&Stats{}, 2 + 8*8},
		{&PutReq{CRCs: []uint32{1, 2}}, EncodedLen + 1 + 4 + 1 + 8},
		{&ListResp{IDs: []ID{{}}, Lengths: []uint64{0}}, 1 + EncodedLen + 8},
	} {
		if got := len(Marshal(tc.m)); got != tc.size {
			t.Errorf("%T: %d bytes, want %d", tc.m, got, tc.size)
		}
	}
}

func TestProtoTruncatedAndTrailing(t *testing.T) {
	for i, m := range protoCases() {
		b := Marshal(m)
		for n := 0; n < len(b); n++ {
			got := newOf(m)
			err := Unmarshal(slices.Clone(b[:n]), got)
			if !errors.Is(err, ErrBadRequest) {
				t.Errorf("case %d %T: Unmarshal of %d of %d bytes = %v; want ErrBadRequest", i, m, n, len(b), err)
			}
		}
		for _, extra := range [][]byte{{0}, {0xff}, make([]byte, 64)} {
			err := Unmarshal(append(slices.Clone(b), extra...), newOf(m))
			if !errors.Is(err, ErrBadRequest) {
				t.Errorf("case %d %T: Unmarshal with %d trailing bytes = %v; want ErrBadRequest", i, m, len(extra), err)
			}
		}
	}
}

func TestProtoBadBool(t *testing.T) {
	b := Marshal(&PutReq{ID: sampleIDs[1], Repair: true})
	b[EncodedLen] = 2 // the Repair flag
	if err := Unmarshal(b, &PutReq{}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("PutReq with Repair byte 2: %v; want ErrBadRequest", err)
	}
	b = Marshal(&NewestResp{Found: true, Seq: 1})
	b[0] = 0xff
	if err := Unmarshal(b, &NewestResp{}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("NewestResp with Found byte 0xff: %v; want ErrBadRequest", err)
	}
}

// bytesAllocated runs f n times and returns the average bytes it allocated.
func bytesAllocated(n int, f func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(n)
}

func TestProtoHostileCounts(t *testing.T) {
	id := sampleIDs[2].AppendBinary(nil)
	putHead := append(slices.Clone(id), 0, 0, 1, 0, 0) // ID, Repair=false, ChunkSize=65536
	infoHead := binary.BigEndian.AppendUint64(slices.Clone(id), 100)
	infoHead = binary.BigEndian.AppendUint32(infoHead, 4096)
	infoHead = binary.BigEndian.AppendUint64(infoHead, 0)
	counts := []uint64{
		1, // one element, no bytes for it
		1 << 20, 1 << 31, 1 << 32, 1<<62 + 1, math.MaxUint64,
	}
	type target struct {
		name string
		head []byte
		m    func() Message
		size int // bytes per element
	}
	targets := []target{
		{"PutReq", putHead, func() Message { return &PutReq{} }, 4},
		{"Info", infoHead, func() Message { return &Info{} }, 4},
		{"ListResp", nil, func() Message { return &ListResp{} }, EncodedLen + 8},
		{"VerifyResp", nil, func() Message { return &VerifyResp{} }, 16},
	}
	for _, tg := range targets {
		for _, n := range counts {
			for _, tail := range []int{0, tg.size - 1, 3*tg.size - 1} {
				if tail < 0 || uint64(tail/tg.size) >= n {
					continue
				}
				msg := binary.AppendUvarint(slices.Clone(tg.head), n)
				msg = append(msg, make([]byte, tail)...)
				var err error
				avg := bytesAllocated(20, func() { err = Unmarshal(msg, tg.m()) })
				if !errors.Is(err, ErrBadRequest) {
					t.Errorf("%s count %d with %d element bytes: %v; want ErrBadRequest", tg.name, n, tail, err)
				}
				if avg > 64<<10 {
					t.Errorf("%s count %d: %d bytes allocated per Unmarshal", tg.name, n, avg)
				}
			}
		}
		// A uvarint longer than 64 bits is malformed too.
		msg := append(slices.Clone(tg.head), bytes.Repeat([]byte{0xff}, 11)...)
		msg = append(msg, 0x01)
		if err := Unmarshal(msg, tg.m()); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s with an overlong uvarint count: %v; want ErrBadRequest", tg.name, err)
		}
	}
	// A count that exactly fits decodes.
	msg := binary.AppendUvarint(slices.Clone(putHead), 2)
	msg = append(msg, 0, 0, 0, 1, 0, 0, 0, 2)
	var p PutReq
	if err := Unmarshal(msg, &p); err != nil || !reflect.DeepEqual(p.CRCs, []uint32{1, 2}) {
		t.Errorf("PutReq with 2 CRCs: %+v, %v", p, err)
	}
}

func TestTrailerRoundTrip(t *testing.T) {
	for _, tr := range []Trailer{
		{Kind: kindEC, K: 4, M: 1, FragSize: 1 << 20, DataLen: 4 << 20},
		{Kind: kindEC, K: 3, M: 2, FragSize: 65536, DataLen: 12345},
		{Kind: 1, K: 1, M: 2, FragSize: 1 << 20, DataLen: 0},
		{Kind: 0, K: 1, M: 0, FragSize: 4096, DataLen: 1},
		{Kind: 255, K: 255, M: 255, FragSize: math.MaxUint32, DataLen: math.MaxUint64},
	} {
		prefix := []byte("fragment content")
		b := tr.Append(slices.Clone(prefix))
		if len(b) != len(prefix)+TrailerSize || !bytes.Equal(b[:len(prefix)], prefix) {
			t.Fatalf("%+v: Append wrote %d bytes or changed the prefix", tr, len(b)-len(prefix))
		}
		enc := b[len(prefix):]
		if !bytes.Equal(enc, tr.Append(nil)) {
			t.Errorf("%+v: encoding depends on the prefix", tr)
		}
		if string(enc[:4]) != "ATST" || enc[4] != 1 {
			t.Errorf("%+v: header %q v%d", tr, enc[:4], enc[4])
		}
		got, err := DecodeTrailer(enc)
		if err != nil || got != tr {
			t.Errorf("DecodeTrailer(Append(%+v)) = %+v, %v", tr, got, err)
		}
	}
}

func TestTrailerCorruptRejected(t *testing.T) {
	tr := Trailer{Kind: kindEC, K: 4, M: 1, FragSize: 1 << 20, DataLen: 3<<20 + 17}
	good := tr.Append(nil)
	for i := range good {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			b := slices.Clone(good)
			b[i] ^= mask
			if got, err := DecodeTrailer(b); !errors.Is(err, ErrBadTrailer) {
				t.Errorf("byte %d ^ %#x: DecodeTrailer = %+v, %v; want ErrBadTrailer", i, mask, got, err)
			}
		}
	}
	for _, n := range []int{0, 1, TrailerSize - 1, TrailerSize + 1} {
		b := make([]byte, n)
		copy(b, append(slices.Clone(good), 0))
		if _, err := DecodeTrailer(b); !errors.Is(err, ErrBadTrailer) {
			t.Errorf("%d bytes: %v; want ErrBadTrailer", n, err)
		}
	}
	// A future version with a valid checksum is refused too.
	b := slices.Clone(good)
	b[4] = 2
	binary.BigEndian.PutUint32(b[24:], crc32c(b[:24]))
	if _, err := DecodeTrailer(b); !errors.Is(err, ErrBadTrailer) {
		t.Errorf("version 2: %v; want ErrBadTrailer", err)
	}
	// The trailer at the end of a fragment decodes from its last bytes.
	frag := tr.Append(bytes.Repeat([]byte{7}, 1000))
	if got, err := DecodeTrailer(frag[len(frag)-TrailerSize:]); err != nil || got != tr {
		t.Errorf("trailer at the end of a fragment: %+v, %v", got, err)
	}
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

func TestTrailerContentLen(t *testing.T) {
	const F = 1 << 20
	type want []int64 // per fragment index 0..K+M-1
	for _, tc := range []struct {
		name string
		tr   Trailer
		want want
	}{
		{"ec full", Trailer{Kind: kindEC, K: 4, M: 1, FragSize: F, DataLen: 4 * F}, want{F, F, F, F, F}},
		{"ec partial", Trailer{Kind: kindEC, K: 4, M: 1, FragSize: F, DataLen: 2*F + F/2}, want{F, F, F / 2, 0, F}},
		{"ec fragment boundary", Trailer{Kind: kindEC, K: 4, M: 2, FragSize: F, DataLen: 3 * F}, want{F, F, F, 0, F, F}},
		{"ec one byte", Trailer{Kind: kindEC, K: 4, M: 2, FragSize: F, DataLen: 1}, want{1, 0, 0, 0, 1, 1}},
		{"ec short first", Trailer{Kind: kindEC, K: 3, M: 1, FragSize: F, DataLen: 100}, want{100, 0, 0, 100}},
		{"ec just past first", Trailer{Kind: kindEC, K: 3, M: 1, FragSize: F, DataLen: F + 1}, want{F, 1, 0, F}},
		{"ec empty", Trailer{Kind: kindEC, K: 4, M: 1, FragSize: F, DataLen: 0}, want{0, 0, 0, 0, 0}},
		{"mirror", Trailer{Kind: 1, K: 1, M: 2, FragSize: F, DataLen: 3*F + 5}, want{3*F + 5, 3*F + 5, 3*F + 5}},
		{"mirror empty", Trailer{Kind: 1, K: 1, M: 1, FragSize: F, DataLen: 0}, want{0, 0}},
		{"none", Trailer{Kind: 0, K: 1, M: 0, FragSize: F, DataLen: 777}, want{777}},
	} {
		if len(tc.want) != int(tc.tr.K)+int(tc.tr.M) {
			t.Fatalf("%s: bad case", tc.name)
		}
		var dataSum int64
		for i, w := range tc.want {
			if got := tc.tr.ContentLen(i, kindEC); got != w {
				t.Errorf("%s: ContentLen(%d) = %d, want %d", tc.name, i, got, w)
			}
			if i < int(tc.tr.K) {
				dataSum += w
			}
		}
		if tc.tr.Kind == kindEC && dataSum != int64(tc.tr.DataLen) {
			t.Errorf("%s: data fragments hold %d bytes, stripe has %d", tc.name, dataSum, tc.tr.DataLen)
		}
	}
}

func TestRemoteErr(t *testing.T) {
	table := []struct {
		status   uint32
		sentinel error
	}{
		{StatusInternal, ErrInternal},
		{StatusNotFound, ErrNotFound},
		{StatusExists, ErrExists},
		{StatusCorrupt, ErrCorrupt},
		{StatusOutOfRange, ErrOutOfRange},
		{StatusNoSpace, ErrNoSpace},
		{StatusBadData, ErrBadData},
		{StatusRepairMismatch, ErrRepairMismatch},
		{StatusBadRequest, ErrBadRequest},
		{StatusUnavailable, ErrUnavailable},
		{StatusForbidden, ErrForbidden},
	}
	all := make([]error, 0, len(table))
	for _, tc := range table {
		all = append(all, tc.sentinel)
	}
	for _, tc := range table {
		msg := fmt.Sprintf("server says %d", tc.status)
		for _, in := range []error{
			&wire.RemoteError{Op: OpRead, Status: tc.status, Message: msg},
			fmt.Errorf("call: %w", &wire.RemoteError{Op: OpPut, Status: tc.status, Message: msg}),
		} {
			err := RemoteErr(in)
			if !errors.Is(err, tc.sentinel) {
				t.Errorf("status %d: %v is not %v", tc.status, err, tc.sentinel)
			}
			for _, other := range all {
				if other != tc.sentinel && errors.Is(err, other) {
					t.Errorf("status %d: %v is also %v", tc.status, err, other)
				}
			}
			var se *StatusError
			if !errors.As(err, &se) || se.Message != msg || err.Error() != msg {
				t.Errorf("status %d: %#v does not keep the server's text %q", tc.status, err, msg)
			}
		}
	}
	for _, st := range []uint32{0, 12, 1000, math.MaxUint32} {
		if err := RemoteErr(&wire.RemoteError{Status: st, Message: "?"}); !errors.Is(err, ErrInternal) {
			t.Errorf("unknown status %d: %v; want ErrInternal", st, err)
		}
	}
	// Other errors pass through untouched.
	for _, e := range []error{io.EOF, wire.ErrConnClosed, fmt.Errorf("x: %w", wire.ErrConnClosed)} {
		if got := RemoteErr(e); got != e {
			t.Errorf("RemoteErr(%v) = %v; want it unchanged", e, got)
		}
	}
	if got := RemoteErr(nil); got != nil {
		t.Errorf("RemoteErr(nil) = %v", got)
	}
}
