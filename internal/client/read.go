package client

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Read reads the block p points to into dst (len(dst) must be p.Length)
// and verifies it against the pointer's CRC32C. A missing, slow or corrupt
// fragment is rebuilt from the other fragments of the stripe (a degraded
// read); fragments found corrupt or lost on a live server are repaired in
// the background. Read never returns bytes that fail the checksum.
func (c *Client) Read(ctx context.Context, p *layout.Pointer, dst []byte) error {
	if len(dst) != int(p.Length) {
		return fmt.Errorf("client: read %s: buffer of %d bytes for a block of %d", p.Stripe, len(dst), p.Length)
	}
	if len(p.Slots) != int(p.K)+int(p.M) || p.K == 0 {
		return fmt.Errorf("client: read %s: %w", p.Stripe, layout.ErrBadPointer)
	}
	c.stats.blocksRead.Add(1)
	spans := layout.Spans(int(p.Shard), int(p.Offset), int(p.Length))
	bad := map[int]error{}
	var mu lockcheck.Mutex
	var wg sync.WaitGroup
	for _, s := range spans {
		if s.Frag >= int(p.K) {
			return fmt.Errorf("client: read %s: %w", p.Stripe, layout.ErrBadPointer)
		}
		if c.isDown(p.Slots[s.Frag]) {
			bad[s.Frag] = fmt.Errorf("%w: slot %d", errSkippedDown, p.Slots[s.Frag])
			continue
		}
		wg.Add(1)
		go func(s layout.Span) {
			defer wg.Done()
			if err := c.readSpan(ctx, p, s.Frag, s.Off, dst[s.Dst:s.Dst+s.Len]); err != nil {
				mu.Lock()
				bad[s.Frag] = err
				mu.Unlock()
			}
		}(s)
	}
	wg.Wait()
	if len(bad) == 0 && crc32.Checksum(dst, castagnoli) == p.CRC {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.stats.degradedReads.Add(1)
	return c.degradedRead(ctx, p, spans, dst, bad)
}

// readSpan reads a range of one fragment's content within the per-read
// timeout, treating bytes past the content as zeros (short data fragments
// of short stripes).
func (c *Client) readSpan(ctx context.Context, p *layout.Pointer, frag, off int, dst []byte) error {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
	defer cancel()
	n, stored, err := c.readFragment(rctx, p.Slots[frag], p.Fragment(frag), int64(off), dst, p)
	if errors.Is(err, fragment.ErrOutOfRange) {
		clear(dst) // the fragment's content ends before off
		return nil
	}
	if err != nil {
		return err
	}
	content := int(stored) - fragment.TrailerSize
	if content < 0 {
		return fmt.Errorf("read %s: %w: %d bytes is shorter than its trailer", p.Fragment(frag), fragment.ErrCorrupt, stored)
	}
	valid := min(n, max(0, content-off))
	clear(dst[valid:])
	return nil
}

// errSkippedDown marks a fragment not asked for because its slot is
// marked down.
var errSkippedDown = errors.New("slot marked down, not asked")

type rangeKey struct{ frag, off, n int }

type rangeVal struct {
	b   []byte
	err error
}

// degradedRead rebuilds the block from the other fragments. bad holds the
// fragments already known bad. If the rebuilt block still fails its
// checksum, each contributing fragment is suspected in turn (a silently
// wrong fragment is found by which exclusion makes the checksum match).
func (c *Client) degradedRead(ctx context.Context, p *layout.Pointer, spans []layout.Span, dst []byte, bad map[int]error) error {
	cache := map[rangeKey]rangeVal{}
	defer func() {
		for _, v := range cache {
			if v.b != nil {
				wire.PutBuf(v.b)
			}
		}
	}()
	fetch := func(frag, off, n int) ([]byte, error) {
		k := rangeKey{frag, off, n}
		if v, ok := cache[k]; ok {
			return v.b, v.err
		}
		// No down-slot shortcut here: this is the last resort, and a slot
		// marked down (a missed heartbeat on a busy machine) may well answer.
		b := wire.GetBuf(n)
		err := c.readSpan(ctx, p, frag, off, b)
		if err != nil {
			wire.PutBuf(b)
			b = nil
		}
		cache[k] = rangeVal{b, err}
		return b, err
	}
	// Note transport failures and server-reported damage.
	for f, err := range bad {
		if !errors.Is(err, errSkippedDown) {
			c.noteBad(p, f, err)
		}
	}
	attempt := func(excluded map[int]bool) error {
		for _, s := range spans {
			out := dst[s.Dst : s.Dst+s.Len]
			if !excluded[s.Frag] {
				b, err := fetch(s.Frag, s.Off, s.Len)
				if err == nil {
					copy(out, b)
					continue
				}
				excluded[s.Frag] = true
				c.noteBad(p, s.Frag, err)
			}
			if err := c.rebuildRange(p, s, out, excluded, fetch); err != nil {
				return err
			}
		}
		if crc32.Checksum(dst, castagnoli) != p.CRC {
			return fmt.Errorf("%w: %s: checksum mismatch after rebuild", ErrUnrecoverable, p.Stripe)
		}
		return nil
	}
	excluded := map[int]bool{}
	for f := range bad {
		excluded[f] = true
	}
	err := attempt(copyset(excluded))
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	// Slots skipped only because they were marked down may answer after
	// all: try them before suspecting anything.
	retry := false
	for f, e := range bad {
		if errors.Is(e, errSkippedDown) {
			delete(excluded, f)
			retry = true
		}
	}
	if retry {
		if err = attempt(copyset(excluded)); err == nil || errors.Is(err, context.Canceled) {
			return err
		}
	}
	// Suspect each fragment not yet excluded, one at a time.
	for f := 0; f < len(p.Slots); f++ {
		if excluded[f] {
			continue
		}
		ex := copyset(excluded)
		ex[f] = true
		if attempt(ex) == nil {
			c.stats.corrupt.Add(1)
			c.log.Warn("client: fragment returned wrong bytes", "fragment", p.Fragment(f).String(), "slot", p.Slots[f])
			c.enqueueRepair(repairJob{stripe: p.Stripe, slots: p.Slots, frag: f, mode: repairRewrite})
			return nil
		}
	}
	return fmt.Errorf("client: read %s [%d,+%d): %w", p.Stripe, p.Offset, p.Length, err)
}

// rebuildRange rebuilds span s of the block into out from the other
// fragments, skipping excluded ones.
func (c *Client) rebuildRange(p *layout.Pointer, s layout.Span, out []byte, excluded map[int]bool, fetch func(frag, off, n int) ([]byte, error)) error {
	w := len(p.Slots)
	if p.Kind != layout.EC {
		for f := 0; f < w; f++ {
			if excluded[f] {
				continue
			}
			b, err := fetch(f, s.Off, s.Len)
			if err != nil {
				excluded[f] = true
				c.noteBad(p, f, err)
				continue
			}
			copy(out, b)
			return nil
		}
		return fmt.Errorf("%w: %s: no readable copy", ErrUnrecoverable, p.Stripe)
	}
	shards := make([][]byte, w)
	have := 0
	for f := 0; f < w && have < int(p.K); f++ {
		if excluded[f] || f == s.Frag {
			continue
		}
		b, err := fetch(f, s.Off, s.Len)
		if err != nil {
			excluded[f] = true
			c.noteBad(p, f, err)
			continue
		}
		shards[f] = b // present shards are only read by the decoder
		have++
	}
	if have < int(p.K) {
		return fmt.Errorf("%w: %s: %d of %d fragments readable", ErrUnrecoverable, p.Stripe, have, p.K)
	}
	enc, err := c.encoder(int(p.K), int(p.M))
	if err != nil {
		return err
	}
	// A zero-length shard with enough capacity is decoded in place.
	shards[s.Frag] = out[:0:len(out)]
	if err := enc.ReconstructSome(shards, wantOnly(w, s.Frag)); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnrecoverable, p.Stripe, err)
	}
	if got := shards[s.Frag]; len(got) == len(out) && (len(out) == 0 || &got[0] != &out[0]) {
		copy(out, got)
	}
	return nil
}

func wantOnly(w, f int) []bool {
	r := make([]bool, w)
	r[f] = true
	return r
}

func copyset(m map[int]bool) map[int]bool {
	out := make(map[int]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// noteBad records what a failed fragment read means: damage on a live
// server is repaired at once; an unreachable server makes the stripe
// degraded until it returns.
func (c *Client) noteBad(p *layout.Pointer, f int, err error) {
	switch {
	case errors.Is(err, fragment.ErrCorrupt):
		c.stats.corrupt.Add(1)
		c.enqueueRepair(repairJob{stripe: p.Stripe, slots: p.Slots, frag: f, mode: repairRewrite})
	case errors.Is(err, fragment.ErrNotFound):
		c.enqueueRepair(repairJob{stripe: p.Stripe, slots: p.Slots, frag: f, mode: repairRecreate})
	case errors.Is(err, context.Canceled):
	default:
		c.recordDegraded(p.Stripe, p.Slots, []int{f})
	}
}
