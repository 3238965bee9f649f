package client

import "testing"

// TestLazyChangeIncarnations: a file's lazy changes settle on a sync
// answer from the incarnation that acknowledged them, or from one that
// adopted it (the file's table entry moved there); changes acknowledged
// by two incarnations need both; three make them suspect.
func TestLazyChangeIncarnations(t *testing.T) {
	const a, b, c = 0xa, 0xb, 0xc
	one := lazyChange{gen: 1, boot: a}
	for _, tc := range []struct {
		name    string
		ch      lazyChange
		boot    uint64
		adopted []uint64
		want    bool
	}{
		{"same incarnation", one, a, nil, true},
		{"restarted after a crash", one, b, nil, false},
		{"moved, adopted", one, b, []uint64{c, a}, true},
		{"moved, not adopted", one, b, []uint64{c}, false},
		{"two incarnations, both known", one.then(2, b), b, []uint64{a}, true},
		{"two incarnations, one unknown", one.then(2, b), b, nil, false},
		{"back to the first", one.then(2, b).then(3, a), a, []uint64{b}, true},
		{"back to the first, the other unknown", one.then(2, b).then(3, a), a, nil, false},
		{"three incarnations", one.then(2, b).then(3, c), c, []uint64{a, b}, false},
		{"same again", one.then(2, a).then(3, a), a, nil, true},
	} {
		if got := tc.ch.durableAt(tc.boot, tc.adopted); got != tc.want {
			t.Errorf("%s: %+v at %x adopting %x: durable %v, want %v", tc.name, tc.ch, tc.boot, tc.adopted, got, tc.want)
		}
	}
}
