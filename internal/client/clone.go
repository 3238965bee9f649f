package client

import (
	"context"
	"fmt"
	"time"

	"github.com/atoll-fs/atoll/internal/metawire"
)

// CloneRange makes file dst's bytes [dstOff, dstOff+n) those of file
// src at [srcOff, ...) by sharing src's block pointers: no byte is read
// or written, one commit on dst's island records the pointers. Stripes
// are immutable and every reference is counted by its island (live
// bytes, reverse index), so the two files change independently after it
// (a write replaces a pointer, never a stripe) and the cleaner keeps a
// stripe while either points into it (it copies each reference's block
// when it moves them: sharing ends there, correctness does not).
//
// Only whole blocks clone: both offsets on a block boundary of the same
// block size, neither file inline. It returns how many bytes it cloned
// from the start of the range, a multiple of the block size, possibly 0
// (then nothing changed); the caller copies the rest. Both files'
// committed state is used: the caller flushes them first. A tenant's key
// clones nothing (its islands accept only pointers into its own logs).
// A concurrent writer of dst is close-to-open: the clone's size wins as
// a flush's would.
func (f *FS) CloneRange(ctx context.Context, cred metawire.Cred, src, srcOff, dst, dstOff, n uint64) (uint64, error) {
	if k := f.data.cfg.Key; k != nil && k.Scope.Tenant() {
		return 0, nil
	}
	sa, err := f.GetAttrFresh(ctx, cred, src)
	if err != nil {
		return 0, err
	}
	da, err := f.GetAttrFresh(ctx, cred, dst)
	if err != nil {
		return 0, err
	}
	bs := uint64(sa.BlockSize)
	switch {
	case !sa.IsRegular() || !da.IsRegular():
		return 0, fmt.Errorf("client: clone %x to %x: %w", src, dst, metawire.ErrInvalid)
	case bs == 0 || uint64(da.BlockSize) != bs || srcOff%bs != 0 || dstOff%bs != 0:
		return 0, nil
	case sa.Inline || da.Inline && da.Size > 0:
		return 0, nil
	case srcOff >= sa.Size:
		return 0, nil
	}
	// Whole blocks of src only: a partial last block is copied.
	blocks := min(n, sa.Size-srcOff) / bs
	if blocks == 0 {
		return 0, nil
	}
	if blocks > mapPage {
		blocks = mapPage // one commit's worth; the caller asks again
	}
	bm, err := f.readMap(ctx, cred, src, sa.Version)
	if err != nil {
		return 0, err
	}
	w := metawire.FileWrite{Ino: dst, Size: max(da.Size, dstOff+blocks*bs), Mtime: time.Now().UnixNano()}
	for i := range blocks {
		b := metawire.Block{Index: dstOff/bs + i}
		if p, ok := bm.ptrs[srcOff/bs+i]; ok {
			b.Ptr = p.AppendBinary(nil)
		} // else a hole: an empty pointer removes dst's block
		w.Blocks = append(w.Blocks, b)
	}
	if _, err := f.commitWrite(ctx, time.Time{}, cred, w, false); err != nil {
		return 0, fmt.Errorf("client: clone %x to %x: %w", src, dst, err)
	}
	f.ctr.clonedBytes.Add(blocks * bs)
	return blocks * bs, nil
}

// commitWrite commits w, one file's write, as a change of that file: its
// answer's attributes are cached under the change's mark. by, unless
// zero, bounds the commit call (not what beginChange sends first).
func (f *FS) commitWrite(ctx context.Context, by time.Time, cred metawire.Cred, w metawire.FileWrite, lazy bool) (metawire.CommitResp, error) {
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if !by.IsZero() {
		cctx, cancel = context.WithDeadline(ctx, by)
	}
	defer cancel()
	ch := f.beginChange(ctx, w.Ino)
	defer f.endChange(ch)
	var resp metawire.CommitResp
	err := f.call(cctx, w.Ino, metawire.OpCommit, &metawire.CommitReq{Cred: cred, Writes: []metawire.FileWrite{w}, Lazy: lazy}, &resp)
	if err == nil && len(resp.Attrs) == 1 {
		f.cacheAttrAt(resp.Attrs[0], ch.mark)
	}
	return resp, err
}
