package cluster

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

func sampleMap() *Map {
	hb := time.Unix(0, 1_700_000_000_123_456_789)
	m := &Map{
		Epoch: 42,
		Storage: []Storage{
			{Slot: 0, Addr: "127.0.0.1:7400", State: StateUp, PID: 100, LastHeartbeat: hb, CapacityBytes: 1 << 40, UsedBytes: 12345, Degraded: 3},
			{Slot: 1, Addr: "127.0.0.1:7401", State: StateDown, PID: 101},
			{Slot: 7, Addr: "10.0.0.7:7400", State: StateDraining, PID: 0},
		},
		Islands: []Island{
			{ID: 1, Addr: "127.0.0.1:7500", State: StateUp, PID: 200, LastHeartbeat: hb},
			{ID: 2, Addr: "127.0.0.1:7501", State: StateOut, PID: 201},
		},
		Gateways:      []Gateway{{ID: 9, Addr: "127.0.0.1:2049", State: StateUp, PID: 300, LastHeartbeat: hb}},
		Managers:      []ManagerNode{{RaftID: "m-a", RaftAddr: "127.0.0.1:7301", ClientAddr: "127.0.0.1:7300"}},
		Table:         InitialTable([]uint32{1, 2}),
		DefaultPolicy: "ec:2+1",
		Formatted:     true,
	}
	return m
}

func TestMapRoundTrip(t *testing.T) {
	for _, m := range []*Map{{}, {DefaultPolicy: "none"}, sampleMap()} {
		b := EncodeMap(m)
		got, err := DecodeMap(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
		}
		if !bytes.Equal(EncodeMap(got), b) {
			t.Fatal("re-encoding differs")
		}
		c := m.Clone()
		if !reflect.DeepEqual(c, m) || !c.SameContent(m) {
			t.Fatal("clone differs")
		}
	}
	// SameContent ignores heartbeat data.
	a, b := sampleMap(), sampleMap()
	b.Storage[0].LastHeartbeat, b.Storage[0].UsedBytes = time.Time{}, 0
	if !a.SameContent(b) {
		t.Fatal("SameContent compares heartbeat data")
	}
	b.Epoch++
	if a.SameContent(b) {
		t.Fatal("SameContent ignores the epoch")
	}
}

func TestMapGarbageRejected(t *testing.T) {
	good := EncodeMap(sampleMap())
	check := func(name string, b []byte) {
		t.Helper()
		if _, err := DecodeMap(b); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: got %v, want ErrBadRequest", name, err)
		}
	}
	check("empty", nil)
	check("short", good[:3])
	for i := 0; i < len(good); i += 7 {
		check("truncated", good[:i])
	}
	for i := range good {
		b := slices.Clone(good)
		b[i] ^= 0x10
		check("bit flip", b)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		b := make([]byte, rng.IntN(200))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		check("random", b)
	}
	// Valid checksums over invalid content.
	bad := []func(m *Map){
		func(m *Map) { m.Storage[0], m.Storage[1] = m.Storage[1], m.Storage[0] },
		func(m *Map) { m.Islands = append(m.Islands, m.Islands[1]) },
		func(m *Map) { m.Storage[0].State = 0 },
		func(m *Map) { m.Gateways[0].State = 9 },
		func(m *Map) { m.Islands[0].PID = -1 },
		func(m *Map) { m.Table.Entries[3] = 77 },
		func(m *Map) { m.Table.Depth++ },
		func(m *Map) { m.Table.Depth = 17 },
		func(m *Map) { m.Formatted = false },
		func(m *Map) { m.Managers = append(m.Managers, m.Managers[0]) },
		func(m *Map) { m.Managers[0].RaftID = "" },
	}
	for i, f := range bad {
		m := sampleMap()
		f(m)
		check("invalid content "+string(rune('a'+i)), EncodeMap(m))
	}
}

func TestCheckEpoch(t *testing.T) {
	for _, tc := range []struct {
		mine, theirs uint64
		want         error
	}{
		{5, 5, nil},
		{0, 0, nil},
		{5, 4, ErrStaleEpoch},
		{5, 0, ErrStaleEpoch},
		{5, 6, ErrNeedRefresh},
		{0, 1, ErrNeedRefresh},
		{1 << 62, 1<<62 + 1, ErrNeedRefresh},
	} {
		err := CheckEpoch(tc.mine, tc.theirs)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("CheckEpoch(mine %d, theirs %d) = %v, want %v", tc.mine, tc.theirs, err, tc.want)
		}
	}
}

func TestInitialTable(t *testing.T) {
	if tb := InitialTable(nil); tb.Depth != 0 || len(tb.Entries) != 0 {
		t.Fatalf("no islands: %+v", tb)
	}
	for n := 1; n <= 8; n++ {
		ids := make([]uint32, n)
		for i := range ids {
			ids[i] = uint32(100 + 3*i)
		}
		rev := slices.Clone(ids)
		slices.Reverse(rev)
		tb := InitialTable(rev)
		if !tb.Equal(InitialTable(ids)) || !tb.Equal(InitialTable(append(slices.Clone(ids), ids...))) {
			t.Fatalf("n=%d: table depends on order or duplicates", n)
		}
		if len(tb.Entries) != 1<<tb.Depth || 1<<tb.Depth < 16*n || (tb.Depth > 0 && 1<<(tb.Depth-1) >= 16*n) {
			t.Fatalf("n=%d: depth %d, %d entries", n, tb.Depth, len(tb.Entries))
		}
		if err := ValidateTable(tb); err != nil {
			t.Fatal(err)
		}
		shares := tb.Shares()
		lo, hi := len(tb.Entries), 0
		for _, id := range ids {
			lo, hi = min(lo, shares[id]), max(hi, shares[id])
		}
		if len(shares) != n || hi-lo > 1 {
			t.Fatalf("n=%d: shares %v", n, shares)
		}
		// Round-robin: an island's entries are spread, never adjacent.
		for i := 1; n > 1 && i < len(tb.Entries); i++ {
			if tb.Entries[i] == tb.Entries[i-1] {
				t.Fatalf("n=%d: entries %d and %d both island %d", n, i-1, i, tb.Entries[i])
			}
		}
		// Owner uses the top Depth bits.
		if o, ok := tb.Owner(0xFFFFFFFF); !ok || o != tb.Entries[len(tb.Entries)-1] {
			t.Fatalf("n=%d: owner of the last bucket %d", n, o)
		}
		if o, _ := tb.Owner(0); o != tb.Entries[0] {
			t.Fatalf("n=%d: owner of bucket 0 %d", n, o)
		}
	}
	// Depth is capped.
	many := make([]uint32, 5000)
	for i := range many {
		many[i] = uint32(i)
	}
	if tb := InitialTable(many); tb.Depth != MaxTableDepth {
		t.Fatalf("5000 islands: depth %d", tb.Depth)
	}
}

func TestDefaultPolicyFor(t *testing.T) {
	want := []string{"none", "none", "mirror:2", "ec:2+1", "ec:3+1", "ec:4+1", "ec:4+1"}
	for n, w := range want {
		if got := DefaultPolicyFor(n); got != w {
			t.Errorf("DefaultPolicyFor(%d) = %q, want %q", n, got, w)
		}
	}
}

func TestStateKindStrings(t *testing.T) {
	for _, s := range []State{StateUp, StateDown, StateDraining, StateOut} {
		if p, err := ParseState(s.String()); err != nil || p != s {
			t.Errorf("ParseState(%q) = %v, %v", s, p, err)
		}
	}
	for _, k := range []Kind{KindStorage, KindIsland, KindGateway} {
		if p, err := ParseKind(k.String()); err != nil || p != k {
			t.Errorf("ParseKind(%q) = %v, %v", k, p, err)
		}
	}
	if _, err := ParseState("sideways"); !errors.Is(err, ErrBadRequest) {
		t.Error("ParseState accepted garbage")
	}
	if State(0).Valid() || State(5).Valid() || Kind(0).Valid() || Kind(4).Valid() {
		t.Error("invalid values reported valid")
	}
}

// An IslandMap converts each map's table once and follows map updates.
func TestIslandMapTableFollowsUpdates(t *testing.T) {
	v := &View{}
	v.mu.m = &Map{Epoch: 3, Table: Table{Depth: 1, Entries: []uint32{1, 2}}}
	im := NewIslandMap(v)
	a, b := im.Table(), im.Table()
	if a.Epoch != 3 || a.Depth != 1 || len(a.Entries) != 2 || a.Entries[1] != 2 {
		t.Fatalf("table %+v", a)
	}
	if &a.Entries[0] != &b.Entries[0] {
		t.Error("the table of an unchanged map was converted again")
	}
	v.Update(&Map{Epoch: 4, Table: Table{Depth: 1, Entries: []uint32{1, 3}}})
	if c := im.Table(); c.Epoch != 4 || c.Entries[1] != 3 {
		t.Fatalf("after an update: %+v", c)
	}
	if z := (IslandMap{View: v}).Table(); z.Epoch != 4 || z.Entries[1] != 3 {
		t.Fatalf("without a memo: %+v", z)
	}
}
