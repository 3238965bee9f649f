package client

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
	"time"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Log is one client's append-only log for one policy class. Blocks of many
// files are packed into its stripes; a stripe is written when it is full or
// when Flush seals it short. Up to Config.Pipeline stripes are written at
// once, so the next stripe fills while earlier ones travel.
type Log struct {
	c   *Client
	pol layout.Policy
	id  uint64
	sem chan struct{} // one token per stripe being written

	mu struct {
		lockcheck.Mutex
		seq   uint64 // sequence number of the open stripe
		open  bool
		buf   []byte // data of the open stripe; cap K*F
		sums  []blockSum
		place layout.Placement
		// inflight holds a channel per stripe being written, closed when
		// it is done. (fusefs fix: a sync.WaitGroup here raced when one
		// File's Flush waited while another File sharing the log sealed a
		// stripe: Add from zero concurrent with Wait, flagged by -race.)
		inflight []chan struct{}
	}
	errMu lockcheck.Mutex
	errs  []error // stripes that failed since the last Flush
	// failed remembers recently failed stripes by sequence number, so each
	// writer sharing the log learns about its own stripes (Sync) whoever
	// called Flush first. Bounded: the oldest entries are dropped.
	failed map[uint64]error
}

// Log returns this client's log for the policy class of pol, opening it on
// first use. A log continues after the newest stripe any server holds for
// it (a restarted client with the same ClientID never reuses a stripe id).
func (c *Client) Log(ctx context.Context, pol layout.Policy) (*Log, error) {
	if err := pol.Validate(len(c.slots.Load().list)); err != nil {
		return nil, err
	}
	key := pol.String()
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if l, ok := c.mu.logs[key]; ok {
		c.mu.Unlock()
		return l, nil
	}
	c.mu.Unlock()

	id := logID(c.cfg.ClientID, pol, c.cfg.Key)
	next, err := c.resumeSeq(ctx, id)
	if err != nil {
		return nil, err
	}
	l := &Log{c: c, pol: pol, id: id, sem: make(chan struct{}, c.cfg.Pipeline)}
	l.mu.seq = next
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.mu.logs[key]; ok {
		return prev, nil
	}
	c.mu.logs[key] = l
	return l, nil
}

// resumeSeq finds the first unused stripe sequence number of a log by
// asking every reachable server for its newest fragment of it.
func (c *Client) resumeSeq(ctx context.Context, log uint64) (uint64, error) {
	type res struct {
		seq   uint64
		found bool
		err   error
	}
	slots := c.slots.Load().list
	ch := make(chan res, len(slots))
	for _, s := range slots {
		go func(slot uint16) {
			seq, found, err := c.newestSeq(ctx, slot, log)
			ch <- res{seq, found, err}
		}(s.ID)
	}
	var next uint64
	reached := 0
	for range slots {
		r := <-ch
		if r.err != nil {
			continue
		}
		reached++
		if r.found && r.seq+1 > next {
			next = r.seq + 1
		}
	}
	if reached == 0 {
		return 0, fmt.Errorf("client: open log %016x: no storage server reachable: %w", log, fragment.ErrUnavailable)
	}
	// A server that was unreachable may hold a newer stripe of this log;
	// skipping ahead keeps ids unique in that case too.
	if reached < len(slots) {
		next += 1 << 20
	}
	return next, nil
}

// Policy returns the log's policy.
func (l *Log) Policy() layout.Policy { return l.pol }

// ID returns the log id.
func (l *Log) ID() uint64 { return l.id }

// Append copies data into the log as blocks of at most the policy's block
// size and returns their pointers. The blocks are durable only once Flush
// returns nil (or their stripe filled and was written).
func (l *Log) Append(ctx context.Context, data []byte) ([]layout.Pointer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.appendLocked(ctx, data)
}

func (l *Log) appendLocked(ctx context.Context, data []byte) ([]layout.Pointer, error) {
	ptrs := make([]layout.Pointer, 0, len(data)/l.pol.BlockSize+1)
	for len(data) > 0 {
		if !l.mu.open {
			if err := l.openLocked(); err != nil {
				return ptrs, err
			}
		}
		buf, full := l.mu.buf, l.pol.StripeData()
		n := min(len(data), l.pol.BlockSize, full-len(buf))
		off := len(buf)
		buf = append(buf, data[:n]...)
		l.mu.buf = buf
		sum := crc32.Checksum(buf[off:off+n], castagnoli)
		l.mu.sums = append(l.mu.sums, blockSum{off: off, n: n, crc: sum})
		ptrs = append(ptrs, layout.Pointer{
			Kind: l.pol.Kind, K: uint8(l.pol.K), M: uint8(l.pol.M),
			Stripe: fragment.StripeID{Log: l.id, Seq: l.mu.seq},
			Shard:  uint32(l.pol.FragmentSize),
			Offset: uint32(off), Length: uint32(n),
			CRC:   sum,
			Slots: l.mu.place.Slots,
		})
		data = data[n:]
		if len(buf) == full {
			if err := l.sealLocked(ctx); err != nil {
				return ptrs, err
			}
		}
	}
	return ptrs, nil
}

// AppendBlock appends one block (at most the policy's block size) and
// returns its single pointer: a block that does not fit in what is left
// of the open stripe starts a new one rather than being split, since one
// file block must stay one pointer (file flushes and the cleaner's
// conditional deltas both rely on it).
func (l *Log) AppendBlock(ctx context.Context, data []byte) (layout.Pointer, error) {
	if len(data) == 0 || len(data) > l.pol.BlockSize {
		return layout.Pointer{}, fmt.Errorf("client: log %016x: block of %d bytes (block size %d)", l.id, len(data), l.pol.BlockSize)
	}
	for {
		ptrs, err := l.appendWhole(ctx, data)
		if err != nil {
			return layout.Pointer{}, err
		}
		if ptrs != nil { // at most one retry: a new stripe always fits a block
			return ptrs[0], nil
		}
	}
}

// appendWhole appends data as one block if it fits the open stripe (or a
// new one), checking and appending under one lock so no other writer's
// block can slip in between; nil pointers with a nil error mean it did not
// fit and the open stripe was sealed.
func (l *Log) appendWhole(ctx context.Context, data []byte) ([]layout.Pointer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.open && len(l.mu.buf)+len(data) > l.pol.StripeData() {
		return nil, l.sealLocked(ctx)
	}
	if !l.mu.open {
		if err := l.openLocked(); err != nil {
			return nil, err
		}
	}
	return l.appendLocked(ctx, data)
}

func (l *Log) openLocked() error {
	pl, err := layout.Place(l.pol, l.id, l.mu.seq, l.c.placementSlots(l.pol.Width()))
	if err != nil {
		return fmt.Errorf("client: log %016x stripe %d: %w", l.id, l.mu.seq, err)
	}
	l.mu.place = pl
	l.mu.buf = wire.GetBuf(l.pol.StripeData())[:0]
	l.mu.sums = nil
	l.mu.open = true
	return nil
}

// sealLocked hands the open stripe to a writer goroutine, waiting for a
// pipeline slot first.
func (l *Log) sealLocked(ctx context.Context) error {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	s := &stripe{
		id:    fragment.StripeID{Log: l.id, Seq: l.mu.seq},
		pol:   l.pol,
		data:  l.mu.buf,
		sums:  l.mu.sums,
		place: l.mu.place,
	}
	l.mu.open = false
	l.mu.buf, l.mu.sums = nil, nil
	l.mu.seq++
	live := l.mu.inflight[:0]
	for _, ch := range l.mu.inflight {
		select {
		case <-ch:
		default:
			live = append(live, ch)
		}
	}
	done := make(chan struct{})
	l.mu.inflight = append(live, done)
	go func() {
		defer close(done)
		defer func() { <-l.sem }()
		if err := l.c.writeStripe(l.c.ctx, s); err != nil {
			l.errMu.Lock()
			l.errs = append(l.errs, err)
			if l.failed == nil {
				l.failed = map[uint64]error{}
			}
			if len(l.failed) >= maxFailedRemembered {
				for seq := range l.failed {
					if seq+maxFailedRemembered < s.id.Seq {
						delete(l.failed, seq)
					}
				}
			}
			l.failed[s.id.Seq] = err
			l.errMu.Unlock()
		}
	}()
	return nil
}

// Flush writes the open stripe (short if need be) and waits until every
// stripe appended so far is durable. It returns the errors of stripes that
// failed since the previous Flush; their blocks must be appended again.
func (l *Log) Flush(ctx context.Context) error {
	if err := l.sealAndWait(ctx); err != nil {
		return err
	}
	l.errMu.Lock()
	defer l.errMu.Unlock()
	err := errors.Join(l.errs...)
	l.errs = nil
	return err
}

// sealAndWait seals the open stripe (short if need be) and waits until
// every stripe sealed so far is written or has failed.
func (l *Log) sealAndWait(ctx context.Context) error {
	l.mu.Lock()
	if l.mu.open && len(l.mu.buf) > 0 {
		if err := l.sealLocked(ctx); err != nil {
			l.mu.Unlock()
			return err
		}
	}
	l.mu.Unlock()
	l.wait()
	return nil
}

// maxFailedRemembered bounds Log.failed.
const maxFailedRemembered = 4096

// Sync writes the open stripe and waits until every stripe appended so
// far is durable, then reports whether any stripe holding ptrs failed. It
// is Flush for one writer among many sharing the log: another writer's
// failed stripe is not its error, and its own failure is not consumed by
// another writer's Flush.
func (l *Log) Sync(ctx context.Context, ptrs []layout.Pointer) error {
	if err := l.sealAndWait(ctx); err != nil {
		return err
	}
	l.errMu.Lock()
	defer l.errMu.Unlock()
	var errs []error
	seen := map[uint64]bool{}
	for _, p := range ptrs {
		if p.Stripe.Log != l.id || seen[p.Stripe.Seq] {
			continue
		}
		seen[p.Stripe.Seq] = true
		if err := l.failed[p.Stripe.Seq]; err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// wait waits for every stripe sealed so far.
func (l *Log) wait() {
	l.mu.Lock()
	waits := slices.Clone(l.mu.inflight)
	l.mu.Unlock()
	for _, ch := range waits {
		<-ch
	}
}

// stripe is a sealed stripe on its way to the servers.
type stripe struct {
	id    fragment.StripeID
	pol   layout.Policy
	data  []byte // L bytes of log data, from wire.GetBuf
	sums  []blockSum
	place layout.Placement
}

// blockSum is the checksum of one block appended to a stripe, at offset
// off of the stripe's data. A block that covers exactly one chunk of a
// data fragment gives that chunk's checksum without a second pass over
// its bytes (blocks are chunk-sized by default and packed in order, so a
// sequential writer's stripe is all such blocks).
type blockSum struct {
	off, n int
	crc    uint32
}

// writeStripe computes parity and puts every fragment in parallel. It
// succeeds when the stripe is readable (at least K fragments durable);
// fragments that could not be written are recorded as degraded.
func (c *Client) writeStripe(ctx context.Context, s *stripe) error {
	defer wire.PutBuf(s.data)
	pol, L, F := s.pol, len(s.data), s.pol.FragmentSize
	tr := fragment.Trailer{Kind: uint8(pol.Kind), K: uint8(pol.K), M: uint8(pol.M), FragSize: uint32(F), DataLen: uint64(L)}.Append(nil)

	contents := make([][]byte, pol.Width())
	switch pol.Kind {
	case layout.EC:
		plen := min(L, F)
		shards := make([][]byte, pol.Width())
		var temps [][]byte
		for i := 0; i < pol.K; i++ {
			lo, hi := min(i*F, L), min(i*F+plen, L)
			contents[i] = s.data[lo:hi]
			shards[i] = contents[i]
			if hi-lo < plen { // zero-pad the tail shards for encoding only
				t := wire.GetBuf(plen)
				copy(t, s.data[lo:hi])
				clear(t[hi-lo:])
				shards[i] = t
				temps = append(temps, t)
			}
		}
		for i := pol.K; i < pol.Width(); i++ {
			t := wire.GetBuf(plen)
			shards[i], contents[i] = t, t
			temps = append(temps, t)
		}
		defer func() {
			for _, t := range temps {
				wire.PutBuf(t)
			}
		}()
		if plen > 0 {
			enc, err := c.encoder(pol.K, pol.M)
			if err != nil {
				return err
			}
			if err := enc.Encode(shards); err != nil {
				return fmt.Errorf("%w: stripe %s: encode: %v", ErrStripeFailed, s.id, err)
			}
		}
	default: // mirror copies and the single fragment of "none" are all the data
		for i := range contents {
			contents[i] = s.data
		}
	}

	missing := append([]int(nil), s.place.Missing...)
	skip := map[int]bool{}
	for _, m := range missing {
		skip[m] = true
	}
	errs := make([]error, pol.Width())
	var copies []uint32 // the checksums of every mirror copy (all the data)
	if pol.Kind != layout.EC {
		copies = fragmentCRCs(s.data, 0, s.sums, tr)
	}
	var wg sync.WaitGroup
	for i := range contents {
		if skip[i] {
			continue
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			crcs := copies
			switch {
			case pol.Kind != layout.EC:
			case i < pol.K:
				crcs = fragmentCRCs(contents[i], min(i*pol.FragmentSize, L), s.sums, tr)
			default: // parity: no block checksums to take
				crcs = chunkCRCsV(contents[i], tr)
			}
			errs[i] = c.putFragmentV(ctx, s.place.Slots[i], s.id.Fragment(i), contents[i], tr, crcs)
		}(i)
	}
	wg.Wait()
	var failures []error
	for i, err := range errs {
		if err != nil {
			missing = append(missing, i)
			failures = append(failures, err)
		}
	}
	written := pol.Width() - len(missing)
	if written < pol.K || (pol.Kind == layout.EC && !dataOrEnough(pol, missing)) {
		return fmt.Errorf("%w: stripe %s: %d of %d fragments written: %w", ErrStripeFailed, s.id, written, pol.Width(), errors.Join(failures...))
	}
	c.stats.stripes.Add(1)
	c.stats.bytes.Add(uint64(L))
	if len(missing) > 0 {
		n := c.stats.degradedStripes.Add(1)
		c.recordDegraded(s.id, s.place.Slots, missing)
		// While a server is down every stripe is written degraded: one
		// line every 10 s with the count, not one per stripe (they ran
		// through atoll cp's progress bar).
		if now, last := time.Now().UnixNano(), c.stats.degradedWarned.Load(); now-last >= int64(10*time.Second) && c.stats.degradedWarned.CompareAndSwap(last, now) {
			why := "its slots were down when placed"
			if len(failures) > 0 {
				why = errors.Join(failures...).Error()
			}
			c.log.Warn("client: stripes written degraded (repaired once their servers are back)", "stripe", s.id.String(), "missing", missing, "why", why, "degraded_total", n)
		}
	}
	return nil
}

// dataOrEnough reports whether an erasure-coded stripe with the given
// fragments missing can still be decoded (at least K of K+M present).
func dataOrEnough(pol layout.Policy, missing []int) bool {
	return pol.Width()-len(missing) >= pol.K
}

// fragmentCRCs returns chunkCRCsV(content, trailer) for content found at
// offset base of a stripe whose blocks have the checksums sums (sorted by
// offset): a chunk that is exactly one block takes the block's checksum,
// and only the other chunks are read.
func fragmentCRCs(content []byte, base int, sums []blockSum, trailer []byte) []uint32 {
	out := make([]uint32, 0, (len(content)+len(trailer)+chunkSize-1)/chunkSize)
	k := 0
	for lo := 0; lo < len(content); lo += chunkSize {
		hi := min(lo+chunkSize, len(content))
		for k < len(sums) && sums[k].off < base+lo {
			k++
		}
		if k < len(sums) && sums[k].off == base+lo && sums[k].n == hi-lo {
			out = append(out, sums[k].crc)
		} else {
			out = append(out, crc32.Checksum(content[lo:hi], castagnoli))
		}
	}
	if r := len(content) % chunkSize; r != 0 && len(trailer) > 0 {
		// The trailer's head completes the last, partial chunk.
		n := min(chunkSize-r, len(trailer))
		out[len(out)-1] = crc32.Update(out[len(out)-1], castagnoli, trailer[:n])
		trailer = trailer[n:]
	}
	return append(out, chunkCRCsV(trailer)...)
}

// putFragmentV puts content followed by the trailer without joining them;
// crcs are chunkCRCsV(content, trailer).
func (c *Client) putFragmentV(ctx context.Context, slot uint16, id fragment.ID, content, trailer []byte, crcs []uint32) error {
	if err := c.cfg.Faults.Hit("client.put.before"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.WriteTimeout)
	defer cancel()
	req := &fragment.PutReq{ID: id, ChunkSize: chunkSize, CRCs: crcs}
	addr, ok := c.slots.Load().addr[slot]
	if !ok {
		return fmt.Errorf("put %s: %w: %d", id, ErrUnknownSlot, slot)
	}
	_, err := c.pool.CallV(ctx, addr, fragment.OpPut, 0, fragment.Marshal(req), [][]byte{content, trailer}, nil)
	if err == nil {
		return nil
	}
	var re *wire.RemoteError
	if !errors.As(err, &re) {
		c.markFailed(slot)
		return fmt.Errorf("put %s: slot %d (%s): %w: %v", id, slot, addr, fragment.ErrUnavailable, err)
	}
	err = fragment.RemoteErr(err)
	if errors.Is(err, fragment.ErrExists) {
		// A retried put whose first reply was lost: fine if identical.
		if info, ierr := c.infoFragment(ctx, slot, id); ierr == nil && int(info.Length) == len(content)+len(trailer) && equalCRCs(info, crcs) {
			return nil
		}
	}
	return fmt.Errorf("put %s: slot %d (%s): %w", id, slot, addr, err)
}

// chunkCRCsV computes per-chunk CRCs of the concatenation of parts.
func chunkCRCsV(parts ...[]byte) []uint32 {
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	out := make([]uint32, 0, (total+chunkSize-1)/chunkSize)
	var crc uint32
	fill := 0
	for _, p := range parts {
		for len(p) > 0 {
			n := min(len(p), chunkSize-fill)
			crc = crc32.Update(crc, castagnoli, p[:n])
			fill += n
			p = p[n:]
			if fill == chunkSize {
				out = append(out, crc)
				crc, fill = 0, 0
			}
		}
	}
	if fill > 0 {
		out = append(out, crc)
	}
	return out
}
