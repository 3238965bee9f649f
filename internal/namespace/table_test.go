package namespace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestNewTableShares(t *testing.T) {
	for _, tc := range []struct {
		n     int
		depth uint8
	}{{1, 0}, {1, 4}, {2, 1}, {3, 2}, {3, 6}, {5, 3}, {7, 10}, {16, 4}, {100, 16}} {
		ids := make([]IslandID, tc.n)
		for i := range ids {
			ids[i] = IslandID(1000 - 7*i) // descending: order must not matter
		}
		tab, err := NewTable(ids, tc.depth)
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if err := tab.Validate(); err != nil {
			t.Fatal(err)
		}
		counts := tab.Counts()
		lo, hi := len(tab.Entries), 0
		for _, id := range ids {
			lo, hi = min(lo, counts[id]), max(hi, counts[id])
		}
		if hi-lo > 1 || len(counts) != tc.n {
			t.Errorf("%+v: shares %d..%d over %d islands", tc, lo, hi, len(counts))
		}
		// Contiguous: one run per island, in ascending id order.
		if runs := len(slices.Compact(slices.Clone(tab.Entries))); runs != tc.n {
			t.Errorf("%+v: %d runs", tc, runs)
		}
		if !slices.IsSorted(tab.Entries) {
			t.Errorf("%+v: runs not in island order", tc)
		}
	}
	for _, tc := range []struct {
		ids   []IslandID
		depth uint8
	}{{nil, 3}, {[]IslandID{1, 0}, 3}, {[]IslandID{1, 2, 1}, 3}, {[]IslandID{1}, MaxDepth + 1}, {[]IslandID{1, 2, 3}, 1}} {
		if _, err := NewTable(tc.ids, tc.depth); !errors.Is(err, ErrBadTable) {
			t.Errorf("NewTable(%v, %d): %v", tc.ids, tc.depth, err)
		}
	}
	if d := DepthFor(3); d != 6 {
		t.Errorf("DepthFor(3) = %d", d)
	}
	if d := DepthFor(1); d != 4 {
		t.Errorf("DepthFor(1) = %d", d)
	}
	if d := DepthFor(1 << 20); d != MaxDepth {
		t.Errorf("DepthFor(huge) = %d", d)
	}
}

func TestLookupAndRanges(t *testing.T) {
	tab := Table{Depth: 2, Entries: []IslandID{10, 20, 30, 40}}
	for _, tc := range []struct {
		bucket uint32
		want   IslandID
	}{{0, 10}, {0x3fffffff, 10}, {0x40000000, 20}, {0x80000000, 30}, {0xbfffffff, 30}, {0xffffffff, 40}} {
		if got := tab.Lookup(tc.bucket); got != tc.want {
			t.Errorf("Lookup(%#x) = %d, want %d", tc.bucket, got, tc.want)
		}
	}
	if got := (Table{Entries: []IslandID{5}}).Lookup(0xffffffff); got != 5 {
		t.Errorf("depth 0 lookup = %d", got)
	}
	for _, bad := range []Table{{}, {Depth: 3, Entries: []IslandID{1}}, {Depth: 200, Entries: []IslandID{1}}} {
		if got := bad.Lookup(0xffffffff); got != NoIsland {
			t.Errorf("Lookup on %+v = %d", bad, got)
		}
	}
	for _, d := range []uint8{0, 1, 5, 16} {
		next := uint64(0)
		for i := uint32(0); i < 1<<d; i++ {
			first, last := EntryRange(d, i)
			if uint64(first) != next || last < first {
				t.Fatalf("depth %d entry %d: [%#x, %#x] after %#x", d, i, first, last, next)
			}
			next = uint64(last) + 1
		}
		if next != 1<<32 {
			t.Errorf("depth %d: ranges end at %#x", d, next)
		}
	}
	tab = Table{Depth: 3, Entries: []IslandID{1, 2, 3, 4, 5, 6, 7, 8}}
	for i := range uint32(8) {
		f, l := EntryRange(3, i)
		if tab.Lookup(f) != tab.Entries[i] || tab.Lookup(l) != tab.Entries[i] {
			t.Errorf("entry %d range [%#x,%#x] does not look up to it", i, f, l)
		}
	}
}

func TestSplitMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	tab, _ := NewTable([]IslandID{1, 2, 3}, 2)
	tab.Epoch = 9
	buckets := make([]uint32, 1000)
	for i := range buckets {
		buckets[i] = r.Uint32()
	}
	cur := tab
	for d := tab.Depth; d < MaxDepth; d++ {
		next, err := cur.Split()
		if err != nil || next.Depth != d+1 || next.Epoch != 9 {
			t.Fatalf("Split at %d: %v", d, err)
		}
		for _, b := range buckets {
			if next.Lookup(b) != tab.Lookup(b) {
				t.Fatalf("Split to %d moved bucket %#x", d+1, b)
			}
		}
		cur = next
	}
	if _, err := cur.Split(); !errors.Is(err, ErrBadTable) {
		t.Errorf("Split past MaxDepth: %v", err)
	}
	for cur.Depth > tab.Depth {
		var ok bool
		if cur, ok = cur.Merge(); !ok {
			t.Fatalf("Merge at %d failed", cur.Depth)
		}
	}
	if !slices.Equal(cur.Entries, tab.Entries) {
		t.Errorf("Split then Merge: %v, want %v", cur.Entries, tab.Entries)
	}
	if _, ok := cur.Merge(); ok { // 1,1,2,3 cannot merge
		t.Error("merged entries of different islands")
	}
	if _, ok := (Table{Entries: []IslandID{1}}).Merge(); ok {
		t.Error("merged depth 0")
	}
	if u, ok := (Table{Depth: 1, Entries: []IslandID{4, 4}}).Merge(); !ok || u.Depth != 0 || u.Entries[0] != 4 {
		t.Errorf("Merge 4,4 = %+v, %v", u, ok)
	}
	c := tab.Clone()
	c.Entries[0] = 99
	if tab.Entries[0] == 99 {
		t.Error("Clone shares entries")
	}
}

func TestValidate(t *testing.T) {
	for _, bad := range []Table{
		{},
		{Depth: 1, Entries: []IslandID{1}},
		{Depth: 0, Entries: []IslandID{1, 1}},
		{Depth: 1, Entries: []IslandID{1, NoIsland}},
		{Depth: MaxDepth + 1, Entries: make([]IslandID, 1<<(MaxDepth+1))},
	} {
		if err := bad.Validate(); !errors.Is(err, ErrBadTable) {
			t.Errorf("Validate(depth %d, %d entries) = %v", bad.Depth, len(bad.Entries), err)
		}
	}
}

func fragmentedTable(r *rand.Rand, depth uint8, islands int) Table {
	tab := Table{Depth: depth, Entries: make([]IslandID, 1<<depth), Epoch: r.Uint64()}
	for i := range tab.Entries {
		tab.Entries[i] = IslandID(1 + r.IntN(islands))
	}
	return tab
}

func TestTableCodec(t *testing.T) {
	// Golden: the format is shared by every node of a cluster.
	tab := Table{Depth: 2, Entries: []IslandID{7, 7, 7, 9}, Epoch: 5}
	b := tab.AppendBinary(nil)
	want := []byte{'A', 'X', 'H', 'T', 1, 2, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 2,
		0, 0, 0, 7, 0, 2, 0, 0, 0, 9, 0, 0}
	want = binary.BigEndian.AppendUint32(want, crc32.Checksum(want, castagnoli))
	if !bytes.Equal(b, want) {
		t.Fatalf("encoding\n% x\nwant\n% x", b, want)
	}

	r := rand.New(rand.NewPCG(9, 10))
	one, _ := NewTable([]IslandID{0xffffffff}, MaxDepth)
	tables := []Table{tab, {Entries: []IslandID{1}}, one, fragmentedTable(r, MaxDepth, 3), fragmentedTable(r, 9, 40)}
	for _, tab := range tables {
		b := tab.AppendBinary([]byte("head"))
		got, rest, err := DecodeTable(append(b[4:], "tail"...))
		if err != nil || string(rest) != "tail" || got.Depth != tab.Depth || got.Epoch != tab.Epoch || !slices.Equal(got.Entries, tab.Entries) {
			t.Fatalf("round trip depth %d: %v, rest %q", tab.Depth, err, rest)
		}
	}

	// Every truncation and every single-byte corruption is rejected.
	for i := range b {
		if _, _, err := DecodeTable(b[:i]); !errors.Is(err, ErrBadTable) {
			t.Errorf("truncated to %d: %v", i, err)
		}
		c := slices.Clone(b)
		c[i] ^= 0x41
		if _, _, err := DecodeTable(c); !errors.Is(err, ErrBadTable) {
			t.Errorf("byte %d corrupted: %v", i, err)
		}
	}

	// Well-checksummed but invalid contents are rejected too.
	reseal := func(body []byte) []byte {
		return binary.BigEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
	}
	hdr := func(depth byte, runs uint32) []byte {
		h := append([]byte("AXHT"), 1, depth, 0, 0, 0, 0, 0, 0, 0, 1)
		return binary.BigEndian.AppendUint32(h, runs)
	}
	run := func(b []byte, id uint32, n uint16) []byte {
		return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint32(b, id), n-1)
	}
	for name, body := range map[string][]byte{
		"split run":     run(run(hdr(2, 2), 7, 2), 7, 2),
		"no island":     run(run(hdr(1, 2), 7, 1), 0, 1),
		"short runs":    run(hdr(2, 1), 7, 3),
		"long runs":     run(run(hdr(1, 2), 7, 1), 8, 2),
		"zero runs":     hdr(1, 0),
		"too many runs": run(run(run(hdr(1, 3), 7, 1), 8, 1), 7, 1),
		"depth 17":      run(hdr(17, 1), 7, 1),
	} {
		if _, _, err := DecodeTable(reseal(body)); !errors.Is(err, ErrBadTable) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
