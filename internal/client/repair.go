package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/wire"
)

type repairMode int

const (
	// repairRewrite rewrites a corrupt fragment in place with identical
	// bytes; the server checks them against its recorded checksums.
	repairRewrite repairMode = iota
	// repairRecreate puts a fragment that is missing from a live server.
	repairRecreate
)

type repairJob struct {
	stripe fragment.StripeID
	slots  []uint16
	frag   int
	mode   repairMode
}

func (c *Client) enqueueRepair(j repairJob) {
	if j.mode == repairRewrite && !c.mayRewrite() || !c.mayRepairLog(j.stripe.Log) {
		// The server marked the fragment corrupt (its repair queue) and
		// the cleaner rewrites it, or the stripe is another log's that a
		// tenant's key may not rebuild: it is reported degraded meanwhile.
		c.recordDegraded(j.stripe, j.slots, []int{j.frag})
		return
	}
	id := j.stripe.Fragment(j.frag)
	c.repairMu.Lock()
	if c.repairSeen[id] {
		c.repairMu.Unlock()
		return
	}
	c.repairSeen[id] = true
	c.repairMu.Unlock()
	select {
	case c.repairQ <- j:
	default: // queue full: the stripe stays degraded for the repair service
		c.recordDegraded(j.stripe, j.slots, []int{j.frag})
		c.forget(id)
	}
}

func (c *Client) forget(id fragment.ID) {
	c.repairMu.Lock()
	delete(c.repairSeen, id)
	c.repairMu.Unlock()
}

func (c *Client) repairLoop() {
	for {
		select {
		case <-c.ctx.Done():
			return
		case j := <-c.repairQ:
			err := c.repairFragment(c.ctx, j.stripe, j.slots, j.frag, j.mode)
			if err != nil {
				c.stats.repairFail.Add(1)
				c.recordDegraded(j.stripe, j.slots, []int{j.frag})
				c.log.Warn("client: repair failed", "fragment", j.stripe.Fragment(j.frag).String(), "err", err)
			}
			c.forget(j.stripe.Fragment(j.frag))
		}
	}
}

// RepairDegraded tries to rebuild every missing fragment of the stripes
// listed by DegradedStripes (after their servers returned). It returns how
// many fragments it restored.
func (c *Client) RepairDegraded(ctx context.Context) (int, error) {
	var errs []error
	n := 0
	for _, d := range c.DegradedStripes() {
		for _, f := range d.Missing {
			if err := c.repairFragment(ctx, d.Stripe, d.Slots, f, repairRecreate); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}

// repairFragment rebuilds fragment f of a stripe from the others and
// writes it back to its slot (slot identity is stable, so no pointer
// changes).
func (c *Client) repairFragment(ctx context.Context, sid fragment.StripeID, slots []uint16, f int, mode repairMode) error {
	id := sid.Fragment(f)
	w := len(slots)
	tr, err := c.stripeTrailer(ctx, sid, slots, f)
	if err != nil {
		return fmt.Errorf("client: repair %s: %w", id, err)
	}
	if int(tr.K)+int(tr.M) != w {
		return fmt.Errorf("client: repair %s: trailer says %d+%d, stripe has %d slots", id, tr.K, tr.M, w)
	}
	ec := uint8(layout.EC)
	var content []byte
	if tr.Kind != ec {
		content, err = c.readContentFromAny(ctx, sid, slots, f, tr)
		if err != nil {
			return fmt.Errorf("client: repair %s: %w", id, err)
		}
	} else {
		plen := int(min(int64(tr.DataLen), int64(tr.FragSize)))
		shards := make([][]byte, w)
		// Survivors are read straight into pooled shard buffers, and the
		// rebuilt shard gets room for its trailer: a rebuild moves (w-1)
		// fragments per fragment written, so copies are its main cost.
		var bufs [][]byte
		defer func() {
			for _, b := range bufs {
				wire.PutBuf(b)
			}
		}()
		out := wire.GetBuf(plen + fragment.TrailerSize)
		bufs = append(bufs, out)
		// The other fragments are read in parallel: a rebuild is bound by
		// the slowest of them, not their sum.
		var wg sync.WaitGroup
		for j := 0; j < w; j++ {
			if j == f {
				continue
			}
			b := wire.GetBuf(plen)
			bufs = append(bufs, b)
			wg.Add(1)
			go func(j int, b []byte) {
				defer wg.Done()
				n := tr.ContentLen(j, ec)
				got, err := 0, error(nil)
				if n > 0 {
					got, _, err = c.readFragment(ctx, slots[j], sid.Fragment(j), 0, b[:n], nil)
				}
				if err == nil && int64(got) == n {
					clear(b[n:])
					shards[j] = b
				}
			}(j, b)
		}
		wg.Wait()
		have := 0
		for _, sh := range shards {
			if sh != nil {
				have++
			}
		}
		if have < int(tr.K) {
			return fmt.Errorf("client: repair %s: %w: %d of %d fragments readable", id, ErrUnrecoverable, have, tr.K)
		}
		enc, err := c.encoder(int(tr.K), int(tr.M))
		if err != nil {
			return err
		}
		shards[f] = out[:0] // Reconstruct fills it in place (capacity suffices)
		if err := enc.Reconstruct(shards); err != nil {
			return fmt.Errorf("client: repair %s: %w: %v", id, ErrUnrecoverable, err)
		}
		// With exactly K survivors the rebuilt stripe is consistent by
		// construction (each survivor was checked against its chunk CRCs
		// by its server); with more, parity cross-checks them.
		if have > int(tr.K) {
			if ok, err := enc.Verify(shards); err != nil || !ok {
				return fmt.Errorf("client: repair %s: %w: surviving fragments disagree", id, ErrUnrecoverable)
			}
		}
		content = shards[f][:tr.ContentLen(f, ec)]
	}
	// A rebuilt shard has room for the trailer after its content (out's
	// capacity); otherwise Append copies.
	data := tr.Append(content)
	if err := c.putFragment(ctx, slots[f], id, data, mode == repairRewrite); err != nil {
		if mode == repairRecreate && errors.Is(err, fragment.ErrExists) && c.mayRewrite() {
			// It was there after all (a server that came back): rewrite it
			// in place in case it is damaged, which checks identity too.
			err = c.putFragment(ctx, slots[f], id, data, true)
		}
		if err != nil {
			return fmt.Errorf("client: repair %s: %w", id, err)
		}
	}
	c.stats.repairs.Add(1)
	c.clearDegraded(sid, f)
	c.log.Debug("client: fragment repaired", "fragment", id.String(), "slot", slots[f])
	return nil
}

// mayRewrite reports whether this client's key may rewrite stored
// fragments in place: storage servers accept repairs from admin keys only
// (a tenant's key could otherwise replace bytes with a forged CRC32C).
// mayRepairLog: a tenant's key (limited to identities) can neither read
// the rest of another log's stripe nor put into it (storage/doc.go,
// "Tenants' keys"), so such stripes are left to the repair service.
func (c *Client) mayRepairLog(log uint64) bool {
	k := c.cfg.Key
	return k == nil || !auth.WritesOwnLogs(k.Name, k.Caps) || auth.OwnsLog(k.Name, log)
}

func (c *Client) mayRewrite() bool { return c.cfg.Key == nil || c.cfg.Key.Caps.Has(auth.CapAdmin) }

// stripeTrailer reads the trailer from any fragment other than skip.
func (c *Client) stripeTrailer(ctx context.Context, sid fragment.StripeID, slots []uint16, skip int) (fragment.Trailer, error) {
	var errs []error
	for j := range slots {
		if j == skip {
			continue
		}
		id := sid.Fragment(j)
		info, err := c.infoFragment(ctx, slots[j], id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if info.Length < fragment.TrailerSize {
			errs = append(errs, fmt.Errorf("%s: %d bytes", id, info.Length))
			continue
		}
		b := make([]byte, fragment.TrailerSize)
		n, _, err := c.readFragment(ctx, slots[j], id, int64(info.Length)-fragment.TrailerSize, b, nil)
		if err != nil || n != len(b) {
			errs = append(errs, fmt.Errorf("%s: trailer read: %v", id, err))
			continue
		}
		tr, err := fragment.DecodeTrailer(b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return tr, nil
	}
	return fragment.Trailer{}, fmt.Errorf("%w: no fragment with a readable trailer: %w", ErrUnrecoverable, errors.Join(errs...))
}

// readContent reads a fragment's whole content (n bytes).
func (c *Client) readContent(ctx context.Context, slot uint16, id fragment.ID, n int64) ([]byte, error) {
	b := make([]byte, n)
	if n == 0 {
		return b, nil
	}
	buf := wire.GetBuf(int(n))
	defer wire.PutBuf(buf)
	got, _, err := c.readFragment(ctx, slot, id, 0, buf, nil)
	if err != nil {
		return nil, err
	}
	if got != int(n) {
		return nil, fmt.Errorf("%s: %w: %d of %d bytes", id, fragment.ErrCorrupt, got, n)
	}
	copy(b, buf)
	return b, nil
}

func (c *Client) readContentFromAny(ctx context.Context, sid fragment.StripeID, slots []uint16, skip int, tr fragment.Trailer) ([]byte, error) {
	var errs []error
	for j := range slots {
		if j == skip {
			continue
		}
		b, err := c.readContent(ctx, slots[j], sid.Fragment(j), int64(tr.DataLen))
		if err == nil {
			return b, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("%w: no readable copy: %w", ErrUnrecoverable, errors.Join(errs...))
}

// RecreateFragment rebuilds fragment f of stripe sid (placed on slots)
// from the others and writes it to its slot: a returning server's missing
// fragment, or a replacement server taking over the slot.
func (c *Client) RecreateFragment(ctx context.Context, sid fragment.StripeID, slots []uint16, f int) error {
	return c.repairFragment(ctx, sid, slots, f, repairRecreate)
}

// RewriteFragment rebuilds fragment f of stripe sid from the others and
// rewrites it in place on its slot: a fragment its server found corrupt
// (the server checks the bytes against the fragment's recorded checksums).
func (c *Client) RewriteFragment(ctx context.Context, sid fragment.StripeID, slots []uint16, f int) error {
	return c.repairFragment(ctx, sid, slots, f, repairRewrite)
}
