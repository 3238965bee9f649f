package client

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
	"time"

	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/lockcheck"
)

// ReadBlocks reads the blocks of ptrs, in order, into dst (which must be
// exactly as long as their lengths added up), verifying every block's
// CRC32C. Blocks that follow each other in one stripe are fetched as one
// range per fragment, and all ranges go out at once, so a sequential
// reader keeps every server busy with large reads. A lost range is rebuilt
// once for the whole run, reusing the ranges already read. Blocks that
// still fail their checksum go through Read's exhaustive path.
func (c *Client) ReadBlocks(ctx context.Context, ptrs []layout.Pointer, dst []byte) error {
	total := 0
	for i := range ptrs {
		total += int(ptrs[i].Length)
	}
	if total != len(dst) {
		return fmt.Errorf("client: read blocks: buffer of %d bytes for %d", len(dst), total)
	}
	runs := splitRuns(ptrs)
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	off := 0
	for i, r := range runs {
		n := r.length(ptrs)
		wg.Add(1)
		go func(i int, r run, out []byte) {
			defer wg.Done()
			errs[i] = c.readRun(ctx, ptrs[r.lo:r.hi], out)
		}(i, r, dst[off:off+n])
		off += n
	}
	wg.Wait()
	return errors.Join(errs...)
}

// run is ptrs[lo:hi], blocks contiguous within one stripe.
type run struct{ lo, hi int }

func (r run) length(ptrs []layout.Pointer) int {
	n := 0
	for i := r.lo; i < r.hi; i++ {
		n += int(ptrs[i].Length)
	}
	return n
}

func splitRuns(ptrs []layout.Pointer) []run {
	var out []run
	for i := 0; i < len(ptrs); {
		j := i + 1
		for j < len(ptrs) && sameStripe(&ptrs[j-1], &ptrs[j]) && ptrs[j].Offset == ptrs[j-1].Offset+ptrs[j-1].Length {
			j++
		}
		out = append(out, run{i, j})
		i = j
	}
	return out
}

func sameStripe(a, b *layout.Pointer) bool {
	if a.Stripe != b.Stripe || a.Kind != b.Kind || a.K != b.K || a.M != b.M || a.Shard != b.Shard || len(a.Slots) != len(b.Slots) {
		return false
	}
	for i := range a.Slots {
		if a.Slots[i] != b.Slots[i] {
			return false
		}
	}
	return true
}

// readRun reads one run of contiguous blocks of a stripe into out.
func (c *Client) readRun(ctx context.Context, ptrs []layout.Pointer, out []byte) error {
	p0 := &ptrs[0]
	if len(p0.Slots) != int(p0.K)+int(p0.M) || p0.K == 0 {
		return fmt.Errorf("client: read %s: %w", p0.Stripe, layout.ErrBadPointer)
	}
	start := int(p0.Offset)
	spans := layout.Spans(int(p0.Shard), start, len(out))
	type result struct {
		s   layout.Span
		err error
	}
	res := make([]result, len(spans))
	// verified[i] is set when block i, lying wholly inside one span, was
	// checked right after its span arrived (while its bytes are still in
	// the CPU cache: checking a whole window afterwards went to memory).
	verified := make([]bool, len(ptrs))
	var wg sync.WaitGroup
	// Spans on a slot known to be down are rebuilt, so the redundant
	// fragments' same ranges are fetched in the same wave as the data.
	var pmu lockcheck.Mutex
	prefetched := map[rangeKey][]byte{}
	nextRedundant := int(p0.K)
	for i, s := range spans {
		if s.Frag >= int(p0.K) {
			return fmt.Errorf("client: read %s: %w", p0.Stripe, layout.ErrBadPointer)
		}
		res[i].s = s
		if c.isDown(p0.Slots[s.Frag]) {
			// Known down: rebuild instead of waiting on a dead server.
			res[i].err = fmt.Errorf("slot %d is down", p0.Slots[s.Frag])
			for nextRedundant < len(p0.Slots) && c.isDown(p0.Slots[nextRedundant]) {
				nextRedundant++
			}
			if p0.Kind == layout.EC && nextRedundant < len(p0.Slots) {
				f := nextRedundant
				nextRedundant++
				wg.Add(1)
				go func() {
					defer wg.Done()
					b := make([]byte, s.Len)
					if c.readSpan(ctx, p0, f, s.Off, b) == nil {
						pmu.Lock()
						prefetched[rangeKey{f, s.Off, s.Len}] = b
						pmu.Unlock()
					}
				}()
			}
			continue
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res[i].err = c.readSpan(ctx, p0, s.Frag, s.Off, out[s.Dst:s.Dst+s.Len])
			if res[i].err == nil {
				checkInSpan(ptrs, out, s, verified)
			}
		}(i)
	}
	wg.Wait()
	c.stats.blocksRead.Add(uint64(len(ptrs)))

	// Rebuild the spans that failed, reusing the spans that arrived.
	var failed []layout.Span
	have := prefetched
	excluded := map[int]bool{}
	for _, r := range res {
		if r.err != nil {
			failed = append(failed, r.s)
			excluded[r.s.Frag] = true
			c.noteBad(p0, r.s.Frag, r.err)
		} else {
			have[rangeKey{r.s.Frag, r.s.Off, r.s.Len}] = out[r.s.Dst : r.s.Dst+r.s.Len]
		}
	}
	if len(failed) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.stats.degradedReads.Add(1)
		fetch := func(frag, off, n int) ([]byte, error) {
			if b, ok := have[rangeKey{frag, off, n}]; ok {
				return b, nil
			}
			b := make([]byte, n)
			if c.isDown(p0.Slots[frag]) {
				return nil, fmt.Errorf("slot %d is down", p0.Slots[frag])
			}
			if err := c.readSpan(ctx, p0, frag, off, b); err != nil {
				return nil, err
			}
			have[rangeKey{frag, off, n}] = b
			return b, nil
		}
		for _, s := range failed {
			// Failures here leave the span wrong; the checksums below send
			// its blocks to the exhaustive path.
			_ = c.rebuildRange(p0, s, out[s.Dst:s.Dst+s.Len], excluded, fetch)
		}
	}
	// Verify every block; retry the bad ones one by one.
	pos := 0
	var errs []error
	for i := range ptrs {
		b := out[pos : pos+int(ptrs[i].Length)]
		pos += len(b)
		if verified[i] || crc32.Checksum(b, castagnoli) == ptrs[i].CRC {
			continue
		}
		if err := c.Read(ctx, &ptrs[i], b); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkInSpan sets verified[i] for each block i (laid out back to back in
// out) that lies wholly inside span s and matches its checksum. Blocks
// are disjoint, so concurrent calls for different spans write different
// elements.
func checkInSpan(ptrs []layout.Pointer, out []byte, s layout.Span, verified []bool) {
	pos := 0
	for i := range ptrs {
		lo, hi := pos, pos+int(ptrs[i].Length)
		pos = hi
		if hi <= s.Dst {
			continue
		}
		if lo >= s.Dst+s.Len {
			return
		}
		if lo >= s.Dst && hi <= s.Dst+s.Len && crc32.Checksum(out[lo:hi], castagnoli) == ptrs[i].CRC {
			verified[i] = true
		}
	}
}

func (c *Client) isDown(slot uint16) bool {
	d, ok := c.slots.Load().down[slot]
	return ok && d.Load() > time.Now().UnixNano()
}
