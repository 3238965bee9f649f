package fragment

import (
	"bytes"
	"reflect"
	"testing"
)

// A 2+1 stripe of 100-byte shards on slots 7, 8, 9: data fragment 0 holds
// stripe bytes [0,100), fragment 1 [100,200), fragment 2 is parity. The
// block [80,130) has two pieces: rows [80,100) of fragment 0 and rows
// [0,30) of fragment 1.
func TestGrantAllows(t *testing.T) {
	g := Grant{K: 2, Shard: 100, Offset: 80, Length: 50, Slots: []uint16{7, 8, 9}}
	none := func(uint16) bool { return false }
	down7 := func(s uint16) bool { return s == 7 }
	down8 := func(s uint16) bool { return s == 8 }
	for _, c := range []struct {
		index uint16
		off   uint64
		n     uint32
		down  func(uint16) bool
		want  bool
	}{
		{0, 80, 20, none, true},  // the first piece, whole
		{0, 85, 5, none, true},   // inside it
		{1, 0, 30, none, true},   // the second piece
		{0, 79, 21, none, false}, // one byte before the block
		{1, 0, 31, none, false},  // one byte after it
		{1, 80, 20, none, false}, // another block's bytes in the first piece's rows
		{0, 0, 30, none, false},  // another block's bytes in the second piece's rows
		{2, 80, 20, none, true},  // parity over the first piece's rows
		{2, 0, 30, none, true},   // and over the second's
		{2, 30, 10, none, false}, // parity over rows the block does not use
		{1, 80, 20, down7, true}, // fragment 0's slot is down: its piece's rows elsewhere
		{0, 0, 30, down7, false}, // but not the rows of the piece on a live slot
		{0, 0, 30, down8, true},  // whose slot, once down, opens them
		{3, 80, 20, none, false}, // no such fragment
		{0, 80, 20, nil, true},   // no map: exact pieces still read
		{1, 80, 20, nil, false},  //   and rows elsewhere do not
		{0, 1 << 40, 1, none, false},
	} {
		if got := g.Allows(c.index, c.off, c.n, c.down); got != c.want {
			t.Errorf("fragment %d [%d,+%d): allowed %v, want %v", c.index, c.off, c.n, got, c.want)
		}
	}
	for _, bad := range []Grant{
		{K: 2, Shard: 100, Offset: 150, Length: 60, Slots: []uint16{7, 8, 9}}, // past the stripe's data
		{K: 0, Shard: 100, Offset: 0, Length: 10, Slots: []uint16{7}},
		{K: 2, Shard: 0, Offset: 0, Length: 10, Slots: []uint16{7, 8, 9}},
		{K: 3, Shard: 100, Offset: 0, Length: 10, Slots: []uint16{7, 8}}, // fewer slots than data fragments
	} {
		if bad.Allows(0, 0, 1, none) {
			t.Errorf("malformed grant %+v allows a read", bad)
		}
	}
}

func TestReadReqTokenRoundTrip(t *testing.T) {
	plain := ReadReq{ID: ID{Log: 1, Seq: 2, Index: 3}, Off: 4, Len: 5}
	var got ReadReq
	if err := Unmarshal(Marshal(&plain), &got); err != nil || !reflect.DeepEqual(got, plain) {
		t.Fatalf("without a token: %+v, %v", got, err)
	}
	withTok := plain
	withTok.Token = bytes.Repeat([]byte{0xab}, 16)
	withTok.Grant = Grant{K: 4, Shard: 1 << 20, Offset: 12345, Length: 65536, Slots: []uint16{1, 2, 3, 4, 5}}
	got = ReadReq{}
	if err := Unmarshal(Marshal(&withTok), &got); err != nil || !reflect.DeepEqual(got, withTok) {
		t.Fatalf("with a token: %+v, %v", got, err)
	}
	// The form a token signs names the stripe: the same grant on another
	// stripe signs differently.
	if bytes.Equal(withTok.Grant.Canonical(StripeID{1, 2}), withTok.Grant.Canonical(StripeID{1, 3})) {
		t.Fatal("canonical form ignores the stripe")
	}
	// A truncated grant is a malformed request, not a panic.
	b := Marshal(&withTok)
	for n := len(Marshal(&plain)) + 1; n < len(b); n++ {
		if err := Unmarshal(b[:n], &ReadReq{}); err == nil {
			t.Fatalf("%d of %d bytes decoded", n, len(b))
		}
	}
}
