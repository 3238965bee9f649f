package layout

import (
	"errors"
	"reflect"
	"testing"

	"github.com/atoll-fs/atoll/internal/fragment"
)

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // canonical, "" = error
	}{
		{"none", "none"},
		{"  EC:4+1 ", "ec:4+1"},
		{"ec:4+2", "ec:4+2"},
		{"mirror:3", "mirror:3"},
		{"ec:4+1,frag=4MiB", "ec:4+1,frag=4MiB"},
		{"ec:4+1,frag=1MiB,block=4KiB", "ec:4+1,block=4KiB"},
		{"ec:2+1,frag=64k,block=64k", "ec:2+1,frag=64KiB"},
		{"", ""},
		{"raid5", ""},
		{"ec:4", ""},
		{"ec:0+1", ""},
		{"ec:4+0", ""},
		{"ec:33+1", ""},
		{"ec:4+9", ""},
		{"ec:a+b", ""},
		{"mirror:1", ""},
		{"mirror:9", ""},
		{"mirror:x", ""},
		{"ec:4+1,frag=1KiB", ""},
		{"ec:4+1,frag=128MiB", ""},
		{"ec:4+1,block=2MiB", ""},
		{"ec:4+1,block=100", ""},
		{"ec:4+1,color=red", ""},
		{"ec:4+1,frag", ""},
		{"ec:4+1,frag=-5", ""},
	} {
		p, err := Parse(tc.in)
		if tc.want == "" {
			if !errors.Is(err, ErrBadPolicy) {
				t.Errorf("Parse(%q) = %v, %v; want ErrBadPolicy", tc.in, p, err)
			}
			continue
		}
		if err != nil || p.String() != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.in, p.String(), err, tc.want)
			continue
		}
		if q, err := Parse(p.String()); err != nil || !reflect.DeepEqual(p, q) {
			t.Errorf("round trip %q: %+v vs %+v (%v)", tc.in, p, q, err)
		}
	}
}

func TestValidateSlots(t *testing.T) {
	p, _ := Parse("ec:4+2")
	if err := p.Validate(5); !errors.Is(err, ErrBadPolicy) {
		t.Fatalf("ec:4+2 on 5 slots: %v", err)
	}
	if err := p.Validate(6); err != nil {
		t.Fatal(err)
	}
}

func TestSpans(t *testing.T) {
	for _, tc := range []struct {
		shard, off, n int
		want          []Span
	}{
		{10, 0, 0, nil},
		{10, 3, 4, []Span{{0, 3, 4, 0}}},
		{10, 8, 4, []Span{{0, 8, 2, 0}, {1, 0, 2, 2}}},
		{10, 10, 25, []Span{{1, 0, 10, 0}, {2, 0, 10, 10}, {3, 0, 5, 20}}},
	} {
		if got := Spans(tc.shard, tc.off, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Spans(%d,%d,%d) = %v want %v", tc.shard, tc.off, tc.n, got, tc.want)
		}
	}
}

func slots(n int, down ...uint16) []Slot {
	var s []Slot
	for i := 0; i < n; i++ {
		s = append(s, Slot{ID: uint16(i), Up: true})
	}
	for _, d := range down {
		s[d].Up = false
	}
	return s
}

func TestPlaceRotatesAndAvoidsDown(t *testing.T) {
	p, _ := Parse("ec:4+1")
	seen := map[uint16]int{} // slot -> times holding parity
	for seq := uint64(0); seq < 50; seq++ {
		pl, err := Place(p, 7, seq, slots(5))
		if err != nil || pl.Degraded() || len(pl.Slots) != 5 {
			t.Fatalf("seq %d: %+v %v", seq, pl, err)
		}
		seen[pl.Slots[4]]++
		uniq := map[uint16]bool{}
		for _, s := range pl.Slots {
			uniq[s] = true
		}
		if len(uniq) != 5 {
			t.Fatalf("duplicate slot in %v", pl.Slots)
		}
	}
	for s := uint16(0); s < 5; s++ {
		if seen[s] != 10 {
			t.Fatalf("parity not rotated evenly: %v", seen)
		}
	}
	// 10 slots: consecutive stripes of a log share at most 2 slots, and
	// over 10 stripes every slot holds parity once.
	parity := map[uint16]int{}
	var prev []uint16
	for seq := uint64(0); seq < 10; seq++ {
		pl, err := Place(p, 7, seq, slots(10))
		if err != nil {
			t.Fatal(err)
		}
		parity[pl.Slots[4]]++
		shared := 0
		for _, a := range pl.Slots {
			for _, b := range prev {
				if a == b {
					shared++
				}
			}
		}
		if shared > 2 {
			t.Fatalf("stripes %d and %d share %d slots: %v, %v", seq-1, seq, shared, prev, pl.Slots)
		}
		prev = pl.Slots
	}
	if len(parity) != 10 {
		t.Fatalf("parity over 10 stripes of 10 slots: %v", parity)
	}
	// 7 slots, 2 down: enough up slots, so no fragment lands on a down one.
	for seq := uint64(0); seq < 20; seq++ {
		pl, err := Place(p, 1, seq, slots(7, 2, 5))
		if err != nil || pl.Degraded() {
			t.Fatalf("%+v %v", pl, err)
		}
		for _, s := range pl.Slots {
			if s == 2 || s == 5 {
				t.Fatalf("placed on down slot: %v", pl.Slots)
			}
		}
	}
	// 5 slots, 1 down: degraded, and the missing fragment is parity.
	pl, err := Place(p, 1, 3, slots(5, 1))
	if err != nil || !reflect.DeepEqual(pl.Missing, []int{4}) || pl.Slots[4] != 1 {
		t.Fatalf("degraded: %+v %v", pl, err)
	}
	// 5 slots, 2 down: only 3 up < K.
	if _, err := Place(p, 1, 3, slots(5, 1, 2)); !errors.Is(err, ErrNoPlacement) {
		t.Fatalf("want ErrNoPlacement, got %v", err)
	}
	if _, err := Place(p, 1, 3, slots(4)); !errors.Is(err, ErrBadPolicy) {
		t.Fatalf("want ErrBadPolicy, got %v", err)
	}
}

func TestPointerRoundTrip(t *testing.T) {
	p := Pointer{Kind: EC, K: 4, M: 2, Stripe: fragment.StripeID{Log: 1 << 60, Seq: 99}, Shard: 1 << 20,
		Offset: 12345, Length: 65536, CRC: 0xdeadbeef, Slots: []uint16{5, 0, 1, 2, 3, 4}}
	b := p.AppendBinary([]byte("x"))
	q, rest, err := DecodePointer(b[1:])
	if err != nil || len(rest) != 0 || !reflect.DeepEqual(p, q) {
		t.Fatalf("%+v %v %v", q, rest, err)
	}
	for i := 0; i < len(b)-1; i++ {
		if _, _, err := DecodePointer(b[1 : 1+i]); err == nil {
			t.Fatalf("truncated at %d decoded", i)
		}
	}
	bad := p
	bad.Offset = 4<<20 - 10
	if _, _, err := DecodePointer(bad.AppendBinary(nil)); !errors.Is(err, ErrBadPointer) {
		t.Fatalf("out-of-stripe block accepted: %v", err)
	}
}
