package client

import (
	"context"
	"testing"
	"time"
)

// TestCacheMarksPerKey: a record read or changed while another of this
// FS's changes of the same key is in flight, or ended after the read was
// sent, carries no lease; changes of other keys do not matter; a change
// of unknown inodes spoils every key; a lease acquired after the read was
// sent does not cover it, another bucket's lease event does not matter.
func TestCacheMarksPerKey(t *testing.T) {
	const bucket = 7
	x, y := uint64(bucket)<<32|1, uint64(bucket)<<32|2
	f := &FS{}
	f.cache.touched = map[uint64]touch{}
	f.cache.leases = map[uint32]*heldLease{bucket: {gen: 5, expires: time.Now().Add(time.Hour)}}
	ctx := context.Background()
	stamp := func(key uint64, m cacheMark) uint64 {
		f.cache.Lock()
		defer f.cache.Unlock()
		return f.stampLocked(bucket, key, m, time.Now())
	}
	read := func() cacheMark {
		f.cache.Lock()
		defer f.cache.Unlock()
		return f.readMarkLocked(time.Now())
	}
	r := read()
	if stamp(x, r) != 5 || stamp(y, r) != 5 {
		t.Fatal("a quiet read is not leased")
	}
	cx := f.beginChange(ctx, x)
	if stamp(x, r) != 0 {
		t.Fatal("a read overlapping a change of its key is leased")
	}
	if stamp(y, r) != 5 {
		t.Fatal("a change of another key spoiled a read")
	}
	if stamp(x, cx.mark) != 5 {
		t.Fatal("a change's own answer is not leased")
	}
	cx2 := f.beginChange(ctx, x)
	if stamp(x, cx.mark) != 0 || stamp(x, cx2.mark) != 0 {
		t.Fatal("two changes of one key in flight: an answer is leased")
	}
	f.endChange(cx2)
	f.endChange(cx)
	if stamp(x, r) != 0 {
		t.Fatal("a read sent before a change of its key ended is leased")
	}
	if r2 := read(); stamp(x, r2) != 5 {
		t.Fatal("a read after the changes is not leased")
	}
	r3 := read()
	cu := f.beginChange(ctx, y, unknownKey)
	f.endChange(cu)
	if stamp(x, r3) != 0 {
		t.Fatal("a change of unknown inodes left a read of another key leased")
	}
	r4 := read()
	f.cache.Lock()
	f.cache.epoch++ // another bucket's lease acquired or broken
	f.cache.Unlock()
	if stamp(x, r4) != 5 {
		t.Fatal("another bucket's lease event spoiled a read")
	}
	f.cache.Lock()
	f.cache.epoch++ // the bucket's lease broken, and acquired again
	f.cache.leases[bucket] = &heldLease{gen: 6, epoch: f.cache.epoch, expires: time.Now().Add(time.Hour)}
	f.cache.Unlock()
	if stamp(x, r4) != 0 {
		t.Fatal("a read sent before its bucket's lease was acquired is leased")
	}
	if r5 := read(); stamp(x, r5) != 6 {
		t.Fatal("a read under the new lease is not leased")
	}
}
