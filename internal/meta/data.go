package meta

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/cockroachdb/pebble/v2"
)

// MaxMapBlocks bounds the blocks one ReadMap answer carries; a client
// asks again from the next index for more.
const MaxMapBlocks = 8192

// decodePointer decodes an encoded layout.Pointer that must fill p.
func decodePointer(p []byte) (layout.Pointer, []byte, error) {
	ptr, rest, err := layout.DecodePointer(p)
	if err != nil {
		return ptr, nil, err
	}
	if len(rest) != 0 {
		return ptr, nil, fmt.Errorf("%w: %d trailing bytes", layout.ErrBadPointer, len(rest))
	}
	return ptr, nil, nil
}

func (i *Island) readMap(ctx context.Context, r *metawire.ReadMapReq) (*metawire.ReadMapResp, error) {
	ino := namespace.Ino(r.Ino)
	if err := i.checkIno("readmap", ino); err != nil {
		return nil, err
	}
	if err := i.locks.waitReadable(ctx, ino, i.timing.readWait); err != nil {
		return nil, err
	}
	snap := i.db.NewSnapshot()
	defer snap.Close()
	n, err := readInode(snap, ino)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, fmt.Errorf("readmap %v: %w", ino, metawire.ErrStale)
	}
	switch {
	case n.isDir():
		return nil, fmt.Errorf("readmap %v: %w", ino, metawire.ErrIsDir)
	case !n.isReg():
		return nil, fmt.Errorf("readmap %v: not a regular file: %w", ino, metawire.ErrInvalid)
	}
	resp := &metawire.ReadMapResp{Attr: n.attr()}
	if _, scoped := scopeOf(ctx); scoped && !isOwner(&resp.Attr, &r.Cred) && !mayAccess(&resp.Attr, &r.Cred, accR) {
		// A scoped key's users read what POSIX lets them: a trusted
		// mount's key checks at open (a descriptor outlives a chmod), a
		// tenant's key is held to the bits on every block map.
		return nil, fmt.Errorf("readmap %v: %w: uid %d may not read it", ino, metawire.ErrAccess, r.Cred.UID)
	}
	if n.inline {
		resp.Inline = n.data
		return resp, nil
	}
	// fusefs fix: MaxMapBlocks bounds the number of blocks in one answer
	// (as documented), not the index range: bounding the range to
	// [First, First+8192) made every block past 512 MiB (64 KiB blocks)
	// invisible to readers asking from 0 with Count 0 ("all").
	lo := blockKey(ino, r.First)
	hi := prefixEnd(blockPrefix(ino))
	if r.Count > 0 && r.First+r.Count > r.First {
		hi = blockKey(ino, r.First+r.Count)
	}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	// fusefs fix (performance): step with SeekGE past each key, not Next.
	// A file rewritten again and again (fsx) leaves many versions of its
	// block keys in the memtables and Next steps over every one of them:
	// each ReadMap got slower with every commit until a memtable flush
	// (fsx fell to a few operations per second). A seek lands on the
	// newest version of the next key directly.
	var next []byte
	for ok := it.First(); ok && len(resp.Blocks) < MaxMapBlocks; ok = it.SeekGE(next) {
		p, err := decodeBytes(it.Value())
		if err != nil {
			return nil, fmt.Errorf("readmap %v: %w", ino, err)
		}
		k := it.Key()
		resp.Blocks = append(resp.Blocks, metawire.Block{
			Index: binary.BigEndian.Uint64(k[len(k)-8:]),
			Ptr:   append([]byte(nil), p...),
		})
		next = append(append(next[:0], k...), 0) // the smallest key after k
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	i.addReadTokens(ctx, resp)
	return resp, nil
}

// addReadTokens gives a key limited to identities, which has passed the
// read check above, the read token of every block the map points to
// outside its own logs (storage servers refuse it those fragments
// without one; auth.ReadToken, fragment.Grant). Other keys get none: storage trusts
// them with every log.
func (i *Island) addReadTokens(ctx context.Context, resp *metawire.ReadMapResp) {
	p, ok := scopedPeer(ctx)
	if !ok || i.cfg.Key == nil || len(resp.Blocks) == 0 {
		return
	}
	resp.Tokens = make([][]byte, len(resp.Blocks))
	for k, b := range resp.Blocks {
		if len(b.Ptr) == 0 {
			continue
		}
		ptr, _, err := decodePointer(b.Ptr)
		if err != nil || auth.OwnsLog(p.Name, ptr.Stripe.Log) {
			continue
		}
		resp.Tokens[k] = i.cfg.Key.ReadToken(p.Name, ptr.Grant().Canonical(ptr.Stripe))
	}
}

// commit applies a batch of file deltas atomically. For a trusted mount's
// key islands do not check permissions on commits (the client checked them
// at open, and a descriptor outlives a chmod); a scoped (tenant's) key
// commits only to files its identity owns or may write.
func (i *Island) commit(ctx context.Context, r *metawire.CommitReq) (*metawire.CommitResp, error) {
	_, scoped := scopeOf(ctx)
	var inos []namespace.Ino
	written := make([]uint64, len(r.Writes)) // file bytes each write brings (load)
	for k := range r.Writes {
		w := &r.Writes[k]
		ino := namespace.Ino(w.Ino)
		written[k] = uint64(len(w.Inline))
		if err := i.checkIno("commit", ino); err != nil {
			return nil, err
		}
		inos = append(inos, ino)
		bad := func(format string, args ...any) error {
			return fmt.Errorf("commit %v: "+format+": %w", append(append([]any{ino}, args...), metawire.ErrInvalid)...)
		}
		switch {
		case w.SetInline && len(w.Blocks) > 0:
			return nil, bad("inline data and blocks together")
		case w.SetInline && len(w.Inline) > i.cfg.InlineMax:
			return nil, fmt.Errorf("commit %v: %d inline bytes (max %d): %w", ino, len(w.Inline), i.cfg.InlineMax, metawire.ErrFileTooBig)
		case !w.SetInline && len(w.Inline) > 0:
			return nil, bad("inline bytes without SetInline")
		case w.SetInline && w.Size < uint64(len(w.Inline)):
			return nil, bad("size %d below inline data of %d bytes", w.Size, len(w.Inline))
		case w.Size > MaxFileSize:
			return nil, fmt.Errorf("commit %v: size %d: %w", ino, w.Size, metawire.ErrFileTooBig)
		}
		for _, blk := range w.Blocks {
			if len(blk.Ptr) == 0 {
				continue
			}
			ptr, _, err := decodePointer(blk.Ptr)
			if err != nil {
				return nil, bad("block %d: %v", blk.Index, err)
			}
			written[k] += uint64(ptr.Length)
		}
	}
	slices.Sort(inos)
	inos = slices.Compact(inos)
	var resp metawire.CommitResp
	err := i.retry(ctx, func() error {
		resp.Attrs = resp.Attrs[:0]
		return i.withInodesOpt(ctx, inos, r.Lazy, func(b *pebble.Batch) error {
			var d deltas
			for k := range r.Writes {
				a, err := i.applyWrite(b, &r.Cred, &r.Writes[k], &d, scoped)
				if err != nil {
					return err
				}
				resp.Attrs = append(resp.Attrs, a)
			}
			return d.write(b)
		})
	})
	if err != nil {
		return nil, err
	}
	for k := range r.Writes {
		i.countBytes(namespace.Ino(r.Writes[k].Ino).Bucket(), written[k])
	}
	resp.Boot = i.boot
	return &resp, nil
}

func (i *Island) applyWrite(b *pebble.Batch, c *metawire.Cred, w *metawire.FileWrite, d *deltas, scoped bool) (metawire.Attr, error) {
	ino := namespace.Ino(w.Ino)
	n, err := readInode(b, ino)
	if err != nil {
		return metawire.Attr{}, err
	}
	switch {
	case n == nil:
		return metawire.Attr{}, fmt.Errorf("commit %v: %w", ino, metawire.ErrStale)
	case n.isDir():
		return metawire.Attr{}, fmt.Errorf("commit %v: %w", ino, metawire.ErrIsDir)
	case !n.isReg():
		return metawire.Attr{}, fmt.Errorf("commit %v: not a regular file: %w", ino, metawire.ErrInvalid)
	}
	if scoped {
		if a := n.attr(); !isOwner(&a, c) && !mayAccess(&a, c, accW) {
			return metawire.Attr{}, fmt.Errorf("commit %v: %w: uid %d may not write it", ino, metawire.ErrAccess, c.UID)
		}
	}
	for _, blk := range w.Blocks {
		if len(blk.Ptr) == 0 {
			continue
		}
		ptr, _, _ := decodePointer(blk.Ptr)
		if n.blockSize != 0 && ptr.Length > n.blockSize {
			return metawire.Attr{}, fmt.Errorf("commit %v: block %d of %d bytes (block size %d): %w",
				ino, blk.Index, ptr.Length, n.blockSize, metawire.ErrInvalid)
		}
	}
	now := i.now()
	if w.SetInline {
		if err := releaseBlocks(b, n, 0, d); err != nil {
			return metawire.Attr{}, err
		}
		n.inline = true
		n.data = append([]byte(nil), w.Inline...)
		if len(n.data) == 0 {
			n.data = nil
		}
	}
	if len(w.Blocks) > 0 && n.inline {
		n.inline, n.data = false, nil
	}
	for _, blk := range w.Blocks {
		if _, err := setBlock(b, n, blk.Index, blk.Ptr, d); err != nil {
			return metawire.Attr{}, err
		}
	}
	d.bytes += int64(w.Size) - int64(n.size)
	n.size = w.Size
	n.mtime = w.Mtime
	if n.mtime == 0 {
		n.mtime = now
	}
	// The change time of a write is the writer's, as its mtime: the
	// client reported both between the write and this commit
	// (client.File.Attr). A later change of the inode keeps its own.
	n.ctime = max(n.ctime, n.mtime)
	if w.Mtime == 0 {
		n.ctime = now
	}
	n.version++
	if !isRoot(c) {
		killSUID(n)
	}
	if err := putInode(b, n); err != nil {
		return metawire.Attr{}, err
	}
	return n.attr(), nil
}

// clean applies cleaner deltas: each moves a block only if it still
// points at the old pointer (Zebra's conditional update).
func (i *Island) clean(ctx context.Context, r *metawire.CleanReq) (*metawire.CleanResp, error) {
	var inos []namespace.Ino
	for _, c := range r.Deltas {
		ino := namespace.Ino(c.Ino)
		if err := i.checkIno("clean", ino); err != nil {
			return nil, err
		}
		if len(c.Old) == 0 {
			return nil, fmt.Errorf("clean %v block %d: empty old pointer: %w", ino, c.Index, metawire.ErrInvalid)
		}
		if _, _, err := decodePointer(c.New); err != nil {
			return nil, fmt.Errorf("clean %v block %d: %v: %w", ino, c.Index, err, metawire.ErrInvalid)
		}
		inos = append(inos, ino)
	}
	slices.Sort(inos)
	inos = slices.Compact(inos)
	resp := &metawire.CleanResp{Applied: make([]bool, len(r.Deltas))}
	err := i.retry(ctx, func() error {
		clear(resp.Applied)
		return i.withInodes(ctx, inos, func(b *pebble.Batch) error {
			var d deltas
			for k, c := range r.Deltas {
				ino := namespace.Ino(c.Ino)
				n, err := readInode(b, ino)
				if err != nil {
					return err
				}
				if n == nil || !n.isReg() || n.inline {
					continue
				}
				v, ok, err := get(b, blockKey(ino, c.Index))
				if err != nil {
					return err
				}
				if !ok {
					continue
				}
				cur, err := decodeBytes(v)
				if err != nil {
					return fmt.Errorf("clean %v block %d: %w", ino, c.Index, err)
				}
				if !sameBytes(cur, c.Old) {
					continue
				}
				if _, err := setBlock(b, n, c.Index, c.New, &d); err != nil {
					return err
				}
				if err := putInode(b, n); err != nil {
					return err
				}
				resp.Applied[k] = true
			}
			return d.write(b)
		})
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (i *Island) statFS() (*metawire.StatFSResp, error) {
	v, ok, err := get(i.db, globalKey(gStats))
	if err != nil || !ok {
		return &metawire.StatFSResp{}, err
	}
	xs, err := decodeCounters(v)
	if err != nil || len(xs) < 2 {
		return nil, fmt.Errorf("statfs: %w", errCorrupt)
	}
	return &metawire.StatFSResp{Inodes: uint64(max(xs[0], 0)), Bytes: uint64(max(xs[1], 0))}, nil
}

// liveBytes returns one page of per-stripe live-byte counters.
func (i *Island) liveBytes(r *metawire.LiveReq) (*metawire.LiveResp, error) {
	p := globalKey(gLive)
	lower := p
	if !r.First {
		lower = append(liveKey(fragment.StripeID{Log: r.AfterLog, Seq: r.AfterSeq}), 0)
	}
	limit := int(min(max(r.Limit, 1), 10000))
	it, err := i.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	resp := &metawire.LiveResp{}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != len(p)+16 {
			continue
		}
		if len(resp.Stripes) == limit {
			resp.More = true
			break
		}
		xs, err := decodeCounters(it.Value())
		if err != nil || len(xs) != 1 {
			return nil, fmt.Errorf("live bytes: %w", errCorrupt)
		}
		resp.Stripes = append(resp.Stripes, metawire.StripeLive{
			Log: binary.BigEndian.Uint64(k[len(p):]), Seq: binary.BigEndian.Uint64(k[len(p)+8:]), Live: xs[0]})
	}
	return resp, it.Error()
}

// forget drops the live counters of stripes the cleaner deleted, where
// they are zero. The cleaner deletes a stripe only when no block points
// into it and after the commit deadline of any writer, and stripe ids are
// never reused, so no delta can still move such a counter; a nonzero one
// means something is off and is kept (and counted) for the cleaner to see.
func (i *Island) forget(r *metawire.ForgetReq) (*metawire.ForgetResp, error) {
	if len(r.Stripes) > metawire.MaxForget {
		return nil, fmt.Errorf("%w: forget %d stripes (at most %d)", metawire.ErrBadRequest, len(r.Stripes), metawire.MaxForget)
	}
	b := i.db.NewBatch()
	defer b.Close()
	resp := &metawire.ForgetResp{}
	for _, s := range r.Stripes {
		k := liveKey(fragment.StripeID{Log: s.Log, Seq: s.Seq})
		v, ok, err := get(i.db, k)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if xs, err := decodeCounters(v); err != nil || len(xs) != 1 || xs[0] != 0 {
			resp.Kept++
			continue
		}
		if err := b.Delete(k, nil); err != nil {
			return nil, err
		}
		resp.Dropped++
	}
	if resp.Dropped > 0 {
		// Not synced: a crash may bring some back, which only costs a
		// zero key each (zero and absent mean the same to the cleaner).
		if err := i.write(context.Background(), b, true); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// stripeRefs lists the blocks of this island pointing into a stripe, from
// the reverse index kept beside the block records.
func (i *Island) stripeRefs(r *metawire.RefsReq) (*metawire.RefsResp, error) {
	p := stripeRefPrefix(fragment.StripeID{Log: r.Log, Seq: r.Seq})
	it, err := i.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	resp := &metawire.RefsResp{}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != len(p)+16 {
			continue
		}
		ino := namespace.Ino(binary.BigEndian.Uint64(k[len(p):]))
		index := binary.BigEndian.Uint64(k[len(p)+8:])
		v, ok, err := get(i.db, blockKey(ino, index))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // a stale index entry never hides a block; skip it
		}
		ptr, err := decodeBytes(v)
		if err != nil {
			return nil, fmt.Errorf("stripe refs: block %d of %v: %w", index, ino, err)
		}
		resp.Refs = append(resp.Refs, metawire.BlockRef{Ino: uint64(ino), Index: index, Ptr: ptr})
		if len(resp.Refs) >= 1<<16 {
			break // a stripe of up to 32 MiB shards holds far fewer blocks
		}
	}
	return resp, it.Error()
}

// LiveBytes returns the live-byte count of every stripe this island's
// block pointers reference (zero counts included), for the cleaner.
func (i *Island) LiveBytes() (map[fragment.StripeID]int64, error) {
	if err := i.enter(); err != nil {
		return nil, err
	}
	defer i.leave()
	p := globalKey(gLive)
	it, err := i.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := map[fragment.StripeID]int64{}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != len(p)+16 {
			continue
		}
		xs, err := decodeCounters(it.Value())
		if err != nil || len(xs) != 1 {
			return nil, fmt.Errorf("live bytes: %w", errCorrupt)
		}
		out[fragment.StripeID{Log: binary.BigEndian.Uint64(k[len(p):]), Seq: binary.BigEndian.Uint64(k[len(p)+8:])}] = xs[0]
	}
	return out, it.Error()
}
