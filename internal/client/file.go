package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/wire"
)

// blockMap is a cached copy of a file's block map at one data version.
type blockMap struct {
	version uint64
	inline  []byte
	ptrs    map[uint64]layout.Pointer
}

// mapPage is the most blocks an island returns in one ReadMap answer
// (meta.MaxMapBlocks).
const mapPage = 8192

// readMap returns the block map of ino at its current version.
func (f *FS) readMap(ctx context.Context, cred metawire.Cred, ino uint64, version uint64) (*blockMap, error) {
	f.cache.Lock()
	if bm := f.cache.blocks[ino]; bm != nil && bm.version == version {
		f.cache.hits++
		f.cache.Unlock()
		return bm, nil
	}
	f.cache.misses++
	f.cache.Unlock()
	// fusefs fix: an island answers at most mapPage blocks at once; ask
	// again from the next index until a short answer (files past 512 MiB
	// read as zeros before). A version change between pages starts over.
	var resp metawire.ReadMapResp
	var blocks []metawire.Block
	var tokens [][]byte // read tokens for a tenant's key, by block (nil: none)
	var mark cacheMark  // of the first page's request: its attributes are cached
	for first, tries := uint64(0), 0; ; {
		var page metawire.ReadMapResp
		f.cache.Lock()
		m := f.readMarkLocked(time.Now())
		f.cache.Unlock()
		if err := f.call(ctx, ino, metawire.OpReadMap, &metawire.ReadMapReq{Cred: cred, Ino: ino, First: first}, &page); err != nil {
			return nil, err
		}
		if first > 0 && page.Attr.Version != resp.Attr.Version {
			if tries++; tries > 10 {
				return nil, fmt.Errorf("client: inode %x: block map keeps changing: %w", ino, metawire.ErrBusy)
			}
			first, blocks, tokens = 0, nil, nil
			continue
		}
		if first == 0 {
			resp, mark = page, m
		}
		blocks = append(blocks, page.Blocks...)
		if len(page.Tokens) == len(page.Blocks) {
			tokens = append(tokens, page.Tokens...)
		} else {
			tokens = append(tokens, make([][]byte, len(page.Blocks))...)
		}
		if len(page.Blocks) < mapPage || page.Attr.Inline {
			break
		}
		first = page.Blocks[len(page.Blocks)-1].Index + 1
	}
	resp.Blocks = blocks
	bm := &blockMap{version: resp.Attr.Version, inline: resp.Inline, ptrs: make(map[uint64]layout.Pointer, len(resp.Blocks))}
	for k, b := range resp.Blocks {
		if len(b.Ptr) == 0 {
			continue
		}
		p, rest, err := layout.DecodePointer(b.Ptr)
		if err != nil || len(rest) != 0 {
			return nil, fmt.Errorf("client: inode %x block %d: %w", ino, b.Index, metawire.ErrIO)
		}
		p.Token = tokens[k]
		bm.ptrs[b.Index] = p
	}
	// Under the file's lease (held when the request was sent) the
	// attributes stay valid as long as it: a read after the map needs no
	// round trip, as after a leased getattr.
	f.cacheAttrAt(resp.Attr, mark)
	f.cache.Lock()
	f.setBlocksLocked(ino, bm)
	f.cache.Unlock()
	return bm, nil
}

// MaxCommitDelay bounds the time between writing a block to the log and
// sending the commit that points at it. The cleaner deletes unreferenced
// stripes only when they are older than its Grace, which is far longer.
const MaxCommitDelay = 2 * time.Minute

// File is an open regular file with a write-back cache: writes collect in
// memory (at most FSConfig.DirtyMax bytes) and reach the cluster on Flush,
// Fsync or Close, which return only once the data is on the storage servers
// and committed to the island (close-to-open consistency); see Flush and
// Fsync for when the commit itself is durable. Reads see this File's own
// unflushed writes. It is safe for concurrent use.
type File struct {
	fs    *FS
	ino   uint64
	cred  metawire.Cred
	dacct *dirtyAcct // set (under mu) with the first dirty block

	mu struct {
		lockcheck.Mutex
		attr metawire.Attr // as of open or the last commit
		// wroteAt is when the last write since the last commit was
		// made (ns): the file's mtime and ctime from then on, reported
		// before the commit and committed with it (a stat between a
		// write and close, as git's checkout does, saw the open's
		// mtime and a stat after close the close's, so git took every
		// file checked out as changed and read it again).
		wroteAt  int64
		pol      layout.Policy
		bs       int
		size     uint64
		inline   bool
		inl      []byte            // whole content while inline
		dirty    map[uint64][]byte // block index -> block buffer (len bs)
		dirtyN   int
		modified bool
		// streamed holds dirty blocks already appended to the log (written
		// back in the background as their stripes fill), with their
		// pointers: the next flush commits them without appending again.
		// A block written to after streaming leaves this map. streamedAt
		// is when the oldest of them was appended (MaxCommitDelay).
		streamed   map[uint64]layout.Pointer
		streamedAt time.Time
		// read-ahead window of clean data (nil when there is none), whose
		// bytes start at file offset raOff
		ra     *window
		raOff  uint64
		raNext uint64 // where the last read ended, to detect sequential reads
		// pf is the next window, being fetched in the background while a
		// sequential reader consumes this one.
		pf *prefetch
	}
}

// prefetch is a read-ahead window fetched by a background goroutine;
// done closes when w's bytes and err are set.
type prefetch struct {
	off  uint64
	w    *window // one reference for the File, one for the goroutine
	err  error
	done chan struct{}
}

// Open opens a regular file. Attributes are fetched fresh (close-to-open).
func (f *FS) Open(ctx context.Context, cred metawire.Cred, ino uint64) (*File, error) {
	a, err := f.GetAttrFresh(ctx, cred, ino)
	if err != nil {
		return nil, err
	}
	return f.OpenWithAttr(ctx, cred, a)
}

// OpenWithAttr opens a regular file whose attributes the caller just got
// from the island (a create's reply), saving the round trip of Open.
func (f *FS) OpenWithAttr(ctx context.Context, cred metawire.Cred, a metawire.Attr) (*File, error) {
	ino := a.Ino
	if a.IsDir() {
		return nil, fmt.Errorf("client: open %x: %w", ino, metawire.ErrIsDir)
	}
	if !a.IsRegular() {
		return nil, fmt.Errorf("client: open %x: %w", ino, metawire.ErrInvalid)
	}
	ps := a.Policy
	if ps == "" {
		ps = f.cfg.Map.DefaultPolicy()
	}
	pol, err := layout.Parse(ps)
	if err != nil {
		return nil, fmt.Errorf("client: open %x: policy %q: %w", ino, ps, metawire.ErrIO)
	}
	fh := &File{fs: f, ino: ino, cred: cred}
	fh.mu.attr, fh.mu.pol, fh.mu.size = a, pol, a.Size
	fh.mu.bs = int(a.BlockSize)
	if fh.mu.bs == 0 {
		fh.mu.bs = pol.BlockSize
	}
	fh.mu.dirty = map[uint64][]byte{}
	if a.Inline || a.Size == 0 {
		fh.mu.inline = true
		if a.Size > 0 {
			bm, err := f.readMap(ctx, cred, ino, a.Version)
			if err != nil {
				return nil, err
			}
			fh.mu.inl = append([]byte(nil), bm.inline...)
		}
	}
	return fh, nil
}

// Ino returns the file's inode id.
func (h *File) Ino() uint64 { return h.ino }

// TakeAttr makes a, the attributes the island answered a change that left
// the data alone with (mode, owner, times), the File's own, so that the
// File needs no re-open to follow it. It refuses (false: re-open) unless
// the File is clean and a is of the very data version, size and policy
// the File holds, so nothing the File caches beside attributes is stale.
func (h *File) TakeAttr(a metawire.Attr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	cur := h.mu.attr
	if h.mu.modified || a.Ino != h.ino || a.Gen != cur.Gen || a.Version != cur.Version || a.Size != h.mu.size || a.Policy != cur.Policy || a.Inline != cur.Inline {
		return false
	}
	h.mu.attr = a
	return true
}

// Size returns the file's size including unflushed writes.
func (h *File) Size() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.size
}

// Attr returns the attributes as of the last open or commit, with the
// size of unflushed writes.
func (h *File) Attr() metawire.Attr {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.mu.attr
	a.Size = h.mu.size
	if h.mu.modified && h.mu.wroteAt != 0 {
		a.Mtime, a.Ctime = h.mu.wroteAt, h.mu.wroteAt
	}
	return a
}

// WroteAt returns when the last write since the last commit was made
// (ns), 0 if none: the mtime and ctime the commit will give the file.
func (h *File) WroteAt() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.mu.modified {
		return 0
	}
	return h.mu.wroteAt
}

// WriteAt writes p at off into the cache.
func (h *File) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("client: write %x: %w: negative offset", h.ino, metawire.ErrInvalid)
	}
	if uint64(off)+uint64(len(p)) > 1<<50 {
		return 0, fmt.Errorf("client: write %x: %w", h.ino, metawire.ErrFileTooBig)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	end := uint64(off) + uint64(len(p))
	h.mu.modified = true
	h.mu.wroteAt = time.Now().UnixNano()
	h.dropReadAheadLocked()
	if h.mu.inline {
		if end <= uint64(h.fs.cfg.InlineMax) {
			if uint64(len(h.mu.inl)) < end {
				h.mu.inl = append(h.mu.inl, make([]byte, end-uint64(len(h.mu.inl)))...)
			}
			copy(h.mu.inl[off:], p)
			h.mu.size = max(h.mu.size, end)
			return len(p), nil
		}
		h.leaveInlineLocked()
		h.fs.sendCreateSoon(h.ino)
	}
	bs := uint64(h.mu.bs)
	pos := uint64(off)
	for len(p) > 0 {
		idx, in := pos/bs, pos%bs
		n := min(uint64(len(p)), bs-in)
		buf, err := h.blockForWriteLocked(ctx, idx, in == 0 && (n == bs || pos+n >= h.mu.size), n)
		if err != nil {
			return int(pos - uint64(off)), err
		}
		delete(h.mu.streamed, idx)
		copy(buf[in:], p[:n])
		p, pos = p[n:], pos+n
		if in+n == bs {
			h.streamLocked(ctx, idx, buf)
		}
	}
	h.mu.size = max(h.mu.size, end)
	// Past the FS-wide limit a writer holding a fair share writes back
	// its own file (so a busy writer is not flushed at every write while
	// idle files hold the total up).
	over := h.fs.dirtyTotal.Load() > h.fs.cfg.DirtyTotalMax && h.mu.dirtyN >= min(h.fs.cfg.DirtyMax, 8<<20)
	if h.mu.dirtyN >= h.fs.cfg.DirtyMax || over {
		if err := h.flushLocked(ctx, h.fs.lazyClose.Load()); err != nil {
			return len(p), err
		}
	}
	return int(end - uint64(off)), nil
}

// streamLocked appends dirty block idx, whose last byte was just written,
// to the log now rather than at the next flush. A sequential writer's
// stripes then travel while it writes on: flushing only at DirtyMax
// stopped the writer while 64 MiB were written, then left the servers
// without work while the next 64 MiB were buffered, and made close wait
// for everything since the last flush. The block stays dirty until a
// commit names it; the log's
// pipeline slots hold the writer back when the servers fall behind. A
// failed append is left for the flush, which reports it.
func (h *File) streamLocked(ctx context.Context, idx uint64, buf []byte) {
	if len(buf) != h.mu.bs {
		return
	}
	log, err := h.fs.data.Log(ctx, h.mu.pol)
	if err != nil {
		return
	}
	ptr, err := log.AppendBlock(ctx, buf)
	if err != nil {
		return
	}
	if len(h.mu.streamed) == 0 {
		h.mu.streamed = map[uint64]layout.Pointer{}
		h.mu.streamedAt = time.Now()
	}
	h.mu.streamed[idx] = ptr
}

// addDirtyLocked changes the File's dirty byte count, and the FS-wide
// total with it (FSConfig.DirtyTotalMax).
func (h *File) addDirtyLocked(d int) {
	if d == 0 {
		return
	}
	h.mu.dirtyN += d
	if h.dacct == nil {
		h.dacct = &dirtyAcct{fs: h.fs}
		// A File dropped with dirty blocks (a failed write-back, an owner
		// that never flushed) gives its share back when collected.
		runtime.AddCleanup(h, (*dirtyAcct).settle, h.dacct)
	}
	h.dacct.n.Add(int64(d))
	h.fs.dirtyTotal.Add(int64(d))
}

// dirtyAcct is a File's share of the FS-wide dirty total.
type dirtyAcct struct {
	fs *FS
	n  atomic.Int64
}

func (a *dirtyAcct) settle() { a.fs.dirtyTotal.Add(-a.n.Swap(0)) }

// leaveInlineLocked turns inline content into dirty blocks.
func (h *File) leaveInlineLocked() {
	bs := h.mu.bs
	for i := 0; i < len(h.mu.inl); i += bs {
		b := wire.GetBuf(bs)
		clear(b[copy(b, h.mu.inl[i:min(i+bs, len(h.mu.inl))]):])
		h.mu.dirty[uint64(i/bs)] = b
		h.addDirtyLocked(bs)
	}
	h.mu.inline, h.mu.inl = false, nil
}

// blockForWriteLocked returns the dirty buffer of block idx, reading the
// old contents first unless the write replaces everything that matters
// (whole: the write fills its first n bytes and the rest is past the end).
// Buffers come from the wire pool and go back when a flush commits them:
// a fresh zeroed 1 MiB per block was a page-faulting memclr per block.
func (h *File) blockForWriteLocked(ctx context.Context, idx uint64, whole bool, n uint64) ([]byte, error) {
	if b, ok := h.mu.dirty[idx]; ok {
		return b, nil
	}
	b := wire.GetBuf(h.mu.bs)
	switch {
	case whole:
		clear(b[min(n, uint64(len(b))):])
	case idx*uint64(h.mu.bs) < h.mu.attr.Size:
		if err := h.readCleanLocked(ctx, b, idx*uint64(h.mu.bs)); err != nil {
			wire.PutBuf(b)
			return nil, err
		}
	default:
		clear(b)
	}
	h.mu.dirty[idx] = b
	h.addDirtyLocked(len(b))
	return b, nil
}

// ReadAt reads into p at off; it returns io.EOF-free short counts at the
// end of the file (n < len(p) only at EOF).
func (h *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("client: read %x: %w: negative offset", h.ino, metawire.ErrInvalid)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if uint64(off) >= h.mu.size {
		return 0, nil
	}
	n := min(uint64(len(p)), h.mu.size-uint64(off))
	p = p[:n]
	h.fs.ctr.bytesRead.Add(n)
	if h.mu.inline {
		clear(p)
		if uint64(off) < uint64(len(h.mu.inl)) {
			copy(p, h.mu.inl[off:])
		}
		return int(n), nil
	}
	bs := uint64(h.mu.bs)
	pos := uint64(off)
	for len(p) > 0 {
		idx, in := pos/bs, pos%bs
		k := min(uint64(len(p)), bs-in)
		if b, ok := h.mu.dirty[idx]; ok {
			copy(p[:k], b[in:])
		} else if err := h.readCleanLocked(ctx, p[:k], pos); err != nil {
			return int(pos - uint64(off)), err
		}
		p, pos = p[k:], pos+k
	}
	return int(n), nil
}

// ReadView is ReadAt without the copy where it can be avoided: when the
// bytes at off are clean data inside the read-ahead window, it returns a
// slice of the window itself, which stays valid and unchanged until
// release is called (release must be called exactly once, and is never
// nil). Otherwise it reads into p and returns p's prefix. A FUSE read
// reply is written straight from the window this way (a copy of every
// byte read was about an eighth of the mount's CPU on a cold read).
func (h *File) ReadView(ctx context.Context, p []byte, off int64) (data []byte, release func(), err error) {
	if off >= 0 {
		h.mu.Lock()
		if v, w := h.viewLocked(len(p), uint64(off)); w != nil {
			h.mu.Unlock()
			return v, w.release, nil
		}
		h.mu.Unlock()
	}
	n, err := h.ReadAt(ctx, p, off)
	return p[:n], func() {}, err
}

// viewLocked returns the window's bytes for a read of n bytes at off, with
// a reference taken, or nil when the read is not wholly clean data in the
// window. It also does ReadAt's bookkeeping (counters, sequential read
// detection and the next prefetch).
func (h *File) viewLocked(n int, off uint64) ([]byte, *window) {
	w := h.mu.ra
	if w == nil || h.mu.inline || off >= h.mu.size || n == 0 {
		return nil, nil
	}
	end := min(off+uint64(n), h.mu.size)
	if off < h.mu.raOff || end > h.mu.raOff+uint64(len(w.buf)) {
		return nil, nil
	}
	if len(h.mu.dirty) > 0 {
		bs := uint64(h.mu.bs)
		for idx := off / bs; idx*bs < end; idx++ {
			if _, ok := h.mu.dirty[idx]; ok {
				return nil, nil
			}
		}
	}
	h.fs.ctr.bytesRead.Add(end - off)
	seq := off == h.mu.raNext || off == 0
	h.mu.raNext = end
	w.refs.Add(1)
	v := w.buf[off-h.mu.raOff : end-h.mu.raOff]
	if seq {
		h.prefetchLocked() // may not replace the window: that takes a read
	}
	return v, w
}

// readAhead is the window a sequential reader prefetches (many blocks read
// as one range per storage server). 16 MiB (four stripes of ec:4+1) kept
// every server's disk busier than 8 MiB did: cold reads about 6% faster.
const readAhead = 16 << 20

// readCleanLocked fills p with committed data at off (not dirty blocks),
// through the read-ahead window. A sequential reader gets the next window
// fetched in the background while it consumes this one.
func (h *File) readCleanLocked(ctx context.Context, p []byte, off uint64) error {
	end := off + uint64(len(p))
	seq := off == h.mu.raNext || off == 0
	if ra := h.mu.ra; ra != nil && off >= h.mu.raOff && end <= h.mu.raOff+uint64(len(ra.buf)) {
		copy(p, ra.buf[off-h.mu.raOff:])
		h.mu.raNext = end
		if seq {
			h.prefetchLocked()
		}
		return nil
	}
	if pf := h.mu.pf; pf != nil && off >= pf.off && end <= pf.off+uint64(len(pf.w.buf)) {
		select {
		case <-pf.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		h.mu.pf = nil
		if pf.err == nil {
			h.setWindowLocked(pf.off, pf.w) // the File's reference moves to the window
			copy(p, pf.w.buf[off-pf.off:])
			h.mu.raNext = end
			h.prefetchLocked()
			return nil
		}
		pf.w.release()
		// A failed prefetch is redone in the foreground, which reports.
	}
	bs := uint64(h.mu.bs)
	lo := off / bs * bs
	hi := (end + bs - 1) / bs * bs
	fileEnd := (h.mu.attr.Size + bs - 1) / bs * bs
	hi = min(hi, fileEnd)
	if hi <= lo {
		clear(p)
		return nil
	}
	var w *window
	if ahead := min(max(hi, lo+readAhead), fileEnd); seq && ahead > hi {
		// A whole window if the FS's read-ahead budget allows it.
		if w = h.fs.newWindow(int(ahead-lo), false); w != nil {
			hi = ahead
		}
	}
	if w == nil {
		w = h.fs.newWindow(int(hi-lo), true)
	}
	buf := w.buf
	if err := h.fetchLocked(ctx, buf, lo); err != nil {
		w.release()
		return err
	}
	h.setWindowLocked(lo, w)
	if off >= lo && end <= hi {
		copy(p, buf[off-lo:])
	} else {
		clear(p)
		copy(p, buf[off-lo:])
	}
	h.mu.raNext = end
	if seq {
		h.prefetchLocked()
	}
	return nil
}

// window is a read-ahead window (or a prefetch filling one): a wire pool
// buffer held by its File, by the prefetch goroutine filling it, and by
// every ReadView still being sent from it. It goes back to the pool, and
// its bytes to the FS's read-ahead budget, when the last holder lets go,
// so a view stays valid (and unchanged: windows are never written once
// filled) after the File moves on.
type window struct {
	acct *raAcct
	buf  []byte
	refs atomic.Int32
}

// raAcct is a window's share of the read-ahead budget, given back once:
// by the last release, or by a cleanup when a File that was dropped
// without Release is collected with its window.
type raAcct struct {
	fs   *FS
	n    int64
	done atomic.Bool
}

func (a *raAcct) settle() {
	if a.done.CompareAndSwap(false, true) {
		a.fs.raUsed.Add(-a.n)
	}
}

// newWindow returns a window of n bytes with one reference, counted in
// the read-ahead budget (FSConfig.ReadAheadMax); nil if that would exceed
// the budget, unless force (a read that must be served now).
func (f *FS) newWindow(n int, force bool) *window {
	for {
		used := f.raUsed.Load()
		if !force && used+int64(n) > f.cfg.ReadAheadMax {
			return nil
		}
		if f.raUsed.CompareAndSwap(used, used+int64(n)) {
			break
		}
	}
	acct := &raAcct{fs: f, n: int64(n)}
	w := &window{acct: acct, buf: wire.GetBuf(n)}
	w.refs.Store(1)
	runtime.AddCleanup(w, (*raAcct).settle, acct)
	return w
}

func (w *window) release() {
	if w.refs.Add(-1) == 0 {
		w.acct.settle()
		wire.PutBuf(w.buf)
	}
}

// DirtyBytes is the size of the dirty blocks of all the FS's files (see
// FSConfig.DirtyTotalMax).
func (f *FS) DirtyBytes() int64 { return f.dirtyTotal.Load() }

// ReadAheadBytes is the size of the read-ahead windows and prefetches
// alive now, across the FS's files (at most FSConfig.ReadAheadMax, except
// for windows of reads served in the foreground past it).
func (f *FS) ReadAheadBytes() int64 { return f.raUsed.Load() }

// Release lets go of the File's read-ahead (windows and any prefetch) at
// once rather than when the File is collected; the File stays usable.
// Owners call it when they drop a File.
func (h *File) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropReadAheadLocked()
}

// setWindowLocked makes w the read-ahead window; the File's reference to
// w becomes the window's.
func (h *File) setWindowLocked(off uint64, w *window) {
	if h.mu.ra != nil {
		h.mu.ra.release()
	}
	h.mu.ra, h.mu.raOff = w, off
}

// dropReadAheadLocked forgets the window and any prefetch (the data
// changed). A prefetch still running finishes into a window only its
// goroutine holds, which then goes back to the pool.
func (h *File) dropReadAheadLocked() {
	if h.mu.ra != nil {
		h.mu.ra.release()
	}
	if h.mu.pf != nil {
		h.mu.pf.w.release()
	}
	h.mu.ra, h.mu.pf = nil, nil
}

// prefetchLocked starts fetching the window after the current one unless
// one is under way, the file ends within the current window, or the FS's
// read-ahead budget is spent (then the reader fetches in the foreground).
func (h *File) prefetchLocked() {
	if h.mu.pf != nil || h.mu.ra == nil || len(h.mu.ra.buf) < readAhead {
		return
	}
	bs := uint64(h.mu.bs)
	lo := h.mu.raOff + uint64(len(h.mu.ra.buf))
	hi := min(lo+readAhead, (h.mu.attr.Size+bs-1)/bs*bs)
	if hi <= lo {
		return
	}
	w := h.fs.newWindow(int(hi-lo), false)
	if w == nil {
		return
	}
	w.refs.Add(1) // the goroutine's
	pf := &prefetch{off: lo, w: w, done: make(chan struct{})}
	h.mu.pf = pf
	ver := h.mu.attr.Version
	h.fs.prefetches.Add(1)
	go func() {
		defer h.fs.prefetches.Done()
		defer w.release()
		defer close(pf.done)
		ctx, cancel := context.WithTimeout(h.fs.data.ctx, 2*time.Minute)
		defer cancel()
		pf.err = h.fetch(ctx, w.buf, lo, ver, bs)
	}()
}

// fetchLocked reads committed blocks covering [lo, lo+len(buf)) (lo block
// aligned); holes and bytes past a short block read as zeros.
//
// A cached block map may point into a stripe the cleaner has since moved
// and deleted (the cleaner does not change the data version): on a failed
// read the map is fetched again from the island and the read retried once.
func (h *File) fetchLocked(ctx context.Context, buf []byte, lo uint64) error {
	return h.fetch(ctx, buf, lo, h.mu.attr.Version, uint64(h.mu.bs))
}

// fetch is fetchLocked for a given data version and block size; it does
// not touch h.mu (prefetches run it unlocked).
func (h *File) fetch(ctx context.Context, buf []byte, lo, ver, bs uint64) error {
	err := h.fetchOnce(ctx, buf, lo, ver, bs)
	if err == nil || ctx.Err() != nil {
		return err
	}
	h.fs.forgetBlocks(h.ino)
	if err2 := h.fetchOnce(ctx, buf, lo, ver, bs); err2 != nil {
		return err
	}
	return nil
}

func (h *File) fetchOnce(ctx context.Context, buf []byte, lo, ver, bs uint64) error {
	bm, err := h.fs.readMap(ctx, h.cred, h.ino, ver)
	if err != nil {
		return err
	}
	var ptrs []layout.Pointer
	var starts []int
	for pos := uint64(0); pos < uint64(len(buf)); pos += bs {
		end := min(pos+bs, uint64(len(buf)))
		p, ok := bm.ptrs[(lo+pos)/bs]
		if !ok {
			clear(buf[pos:end]) // a hole
			continue
		}
		if uint64(p.Length) > bs {
			return fmt.Errorf("client: inode %x: block longer than the block size: %w", h.ino, metawire.ErrIO)
		}
		// Only what the block does not cover is zeroed (a short block's
		// tail): buf may be a reused buffer, and clearing whole windows
		// cost more than any other step of a cached read.
		clear(buf[min(pos+uint64(p.Length), end):end])
		ptrs = append(ptrs, p)
		starts = append(starts, int(pos))
	}
	// Blocks that sit back to back in buf are read together, as one range
	// per storage server where they also follow each other in a stripe.
	for i := 0; i < len(ptrs); {
		j, total := i+1, int(ptrs[i].Length)
		for j < len(ptrs) && starts[j] == starts[i]+total {
			total += int(ptrs[j].Length)
			j++
		}
		start := starts[i]
		var err error
		if start+total <= len(buf) {
			err = h.fs.data.ReadBlocks(ctx, ptrs[i:j], buf[start:start+total])
		} else {
			tmp := make([]byte, total)
			if err = h.fs.data.ReadBlocks(ctx, ptrs[i:j], tmp); err == nil {
				copy(buf[start:], tmp)
			}
		}
		if err != nil {
			return fmt.Errorf("client: read %x: %w: %v", h.ino, metawire.ErrIO, err)
		}
		i = j
	}
	return nil
}

// Flush writes dirty data back: durable on the storage servers, then
// committed to the island, which every client sees from then on
// (close-to-open). With FS.SetLazyClose the commit may still wait for the
// island's log sync when Flush returns; otherwise Flush is Fsync.
func (h *File) Flush(ctx context.Context) error {
	if !h.fs.lazyClose.Load() {
		return h.Fsync(ctx)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.flushLocked(ctx, true)
}

// Fsync is Flush made durable: it returns once the data and the commit
// (and the file's creation) survive a crash of any process.
func (h *File) Fsync(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.flushLocked(ctx, false); err != nil {
		return err
	}
	// Attribute changes kept back are sent by synced setattrs.
	h.fs.flushKept(ctx, nil)
	if err := h.fs.takeKeptErr(); err != nil {
		return err
	}
	// A lazy create or commit with nothing to commit now is made durable
	// here.
	return h.fs.settle(ctx, h.ino)
}

// Close flushes (Flush).
func (h *File) Close(ctx context.Context) error { return h.Flush(ctx) }

// flushLocked writes back and commits; lazy commits without waiting for
// the island's log sync (CommitReq.Lazy).
func (h *File) flushLocked(ctx context.Context, lazy bool) error {
	if !h.mu.modified {
		return nil
	}
	wrote := h.mu.wroteAt
	if wrote == 0 {
		wrote = time.Now().UnixNano()
	}
	w := metawire.FileWrite{Ino: h.ino, Size: h.mu.size, Mtime: wrote}
	// Blocks must be committed within MaxCommitDelay of being written, or
	// the cleaner may take their (still unreferenced) stripes: past it the
	// commit is not sent and the dirty blocks stay for the next flush.
	// Streamed blocks count from their append; once half the delay has
	// gone they are appended again rather than trusted.
	commitBy := time.Now().Add(MaxCommitDelay)
	if len(h.mu.streamed) > 0 {
		if time.Since(h.mu.streamedAt) > MaxCommitDelay/2 {
			h.mu.streamed = nil
		} else {
			commitBy = h.mu.streamedAt.Add(MaxCommitDelay)
		}
	}
	if h.mu.inline {
		// A kept-back create (createbehind.go) carries the data, sent
		// by SendCreate or the next flush, when it holds the whole file.
		if uint64(len(h.mu.inl)) == h.mu.size {
			if a, ok := h.fs.absorbData(h.ino, h.cred, h.mu.inl, time.Unix(0, wrote)); ok {
				h.mu.attr = a
				h.mu.modified = false
				h.dropReadAheadLocked()
				return nil
			}
		}
		w.SetInline, w.Inline = true, h.mu.inl
	} else if len(h.mu.dirty) > 0 {
		log, err := h.fs.data.Log(ctx, h.mu.pol)
		if err != nil {
			return fmt.Errorf("client: flush %x: %w", h.ino, err)
		}
		idxs := make([]uint64, 0, len(h.mu.dirty))
		for idx := range h.mu.dirty {
			idxs = append(idxs, idx)
		}
		sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
		bs := uint64(h.mu.bs)
		var written []layout.Pointer
		for _, idx := range idxs {
			b := h.mu.dirty[idx]
			if idx*bs >= h.mu.size {
				continue // truncated away
			}
			b = b[:min(bs, h.mu.size-idx*bs)]
			ptr, ok := h.mu.streamed[idx]
			if !ok || int(ptr.Length) != len(b) {
				var err error
				if ptr, err = log.AppendBlock(ctx, b); err != nil {
					return fmt.Errorf("client: flush %x: %w: %v", h.ino, metawire.ErrIO, err)
				}
			}
			w.Blocks = append(w.Blocks, metawire.Block{Index: idx, Ptr: ptr.AppendBinary(nil)})
			written = append(written, ptr)
		}
		if err := log.Sync(ctx, written); err != nil {
			h.mu.streamed = nil // every block is appended again next time
			if errors.Is(err, context.Canceled) {
				return err
			}
			return fmt.Errorf("client: flush %x: %w: %v", h.ino, metawire.ErrIO, err)
		}
	}
	if h.fs.createUnsettled(h.ino) {
		// Its create was kept back and cannot carry these blocks: sent
		// alone first (or already on its way: sendCreateSoon), so the
		// other files' creates stay kept back.
		if err := h.fs.SendCreate(ctx, h.ino); err != nil {
			return fmt.Errorf("client: flush %x: %w", h.ino, err)
		}
	}
	mark := h.fs.lazyMark()
	resp, err := h.fs.commitWrite(ctx, commitBy, h.cred, w, lazy)
	if err != nil {
		h.mu.streamed = nil
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("client: flush %x: commit not done within %v of writing: %w", h.ino, MaxCommitDelay, metawire.ErrIO)
		}
		return err
	}
	if len(resp.Attrs) == 1 {
		h.mu.attr = resp.Attrs[0]
		if w.SetInline {
			h.fs.cacheInline(resp.Attrs[0], w.Inline)
		}
	}
	var lost error
	if lazy {
		h.fs.addLazy(ctx, h.ino, resp.Boot)
	} else {
		// The commit synced the island's log: earlier lazy changes of
		// this file are durable now, unless a crash came between.
		lost = h.fs.durableAfterWrite(ctx, h.ino, mark, resp.Boot)
	}
	for _, b := range h.mu.dirty { // the log copied them
		wire.PutBuf(b)
	}
	h.mu.dirty = map[uint64][]byte{}
	h.addDirtyLocked(-h.mu.dirtyN)
	h.mu.streamed = nil
	h.mu.modified = false
	h.dropReadAheadLocked()
	return lost
}

// Truncate flushes and then sets the size.
func (h *File) Truncate(ctx context.Context, size uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	// SetAttr syncs the island's log after this commit, which covers it.
	if err := h.flushLocked(ctx, h.fs.lazyClose.Load()); err != nil {
		return err
	}
	a, err := h.fs.SetAttr(ctx, metawire.SetAttrReq{Cred: h.cred, Ino: h.ino, Valid: metawire.SetSize, Size: size})
	if err != nil {
		return err
	}
	// SetAttr may have rewritten the block holding the new end: take the
	// attributes (data version) after that.
	if a, err = h.fs.GetAttrFresh(ctx, h.cred, h.ino); err != nil {
		return err
	}
	h.mu.attr, h.mu.size = a, a.Size
	h.dropReadAheadLocked()
	if h.mu.inline {
		if size <= uint64(len(h.mu.inl)) {
			h.mu.inl = h.mu.inl[:size]
		} else {
			h.mu.inl = append(h.mu.inl, make([]byte, size-uint64(len(h.mu.inl)))...)
		}
	}
	if a.Inline != h.mu.inline && !a.Inline {
		h.mu.inline, h.mu.inl = false, nil
	}
	return nil
}
