package meta

import (
	"fmt"
	"sync/atomic"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// bucketCounts counts something per 16-bit bucket prefix; allocated on
// the first count.
type bucketCounts = atomic.Pointer[[1 << namespace.MaxDepth]atomic.Uint64]

// add adds n to bucket's count in c.
func add(c *bucketCounts, bucket uint32, n uint64) {
	l := c.Load()
	if l == nil {
		c.CompareAndSwap(nil, new([1 << namespace.MaxDepth]atomic.Uint64))
		l = c.Load()
	}
	l[bucket>>(32-namespace.MaxDepth)].Add(n)
}

// countLoad counts one client operation on bucket (checkIno).
func (i *Island) countLoad(bucket uint32) { add(&i.load, bucket, 1) }

// countBytes counts n bytes of file data committed to an inode of
// bucket (commit: the bytes its new block pointers and inline data hold).
func (i *Island) countBytes(bucket uint32, n uint64) {
	if n > 0 {
		add(&i.loadBytes, bucket, n)
	}
}

// entryLoad serves OpEntryLoad: the operations counted in each entry, at
// depth r.Depth, of the table this island's map has, that it owns.
func (i *Island) entryLoad(r *metawire.EntryLoadReq) (*metawire.EntryLoadResp, error) {
	if r.Depth > namespace.MaxDepth {
		return nil, fmt.Errorf("%w: depth %d", metawire.ErrInvalid, r.Depth)
	}
	tab := i.cfg.Map.Table()
	resp := &metawire.EntryLoadResp{Boot: i.boot}
	l, lb := i.load.Load(), i.loadBytes.Load()
	shift := namespace.MaxDepth - uint(r.Depth)
	for e := uint32(0); e < 1<<r.Depth; e++ {
		first, _ := namespace.EntryRange(r.Depth, e)
		if tab.Lookup(first) != i.id {
			continue
		}
		var ops, bytes uint64
		for k := e << shift; k < (e+1)<<shift; k++ {
			if l != nil {
				ops += l[k].Load()
			}
			if lb != nil {
				bytes += lb[k].Load()
			}
		}
		resp.Entries = append(resp.Entries, metawire.EntryLoad{Entry: e, Ops: ops, Bytes: bytes})
	}
	return resp, nil
}
