package nfs

import (
	"context"
	"errors"
	"sort"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// The gateway keeps regular files open (a client.File each) between
// requests, for three reasons: UNSTABLE writes are buffered in the File's
// write-back cache until COMMIT (or the background flusher) makes them
// durable; sequential READs hit the File's read-ahead; and the block map
// is fetched once per data version rather than per request.
//
// An openFile's lock orders I/O against replacement: READ, WRITE, COMMIT
// and the flusher hold it shared while they use the File; SETATTR,
// revalidation and eviction hold it exclusively to flush, close or
// replace the File. A dropped openFile (fh == nil) is out of the map;
// whoever finds one looks again.
type openFile struct {
	ino uint64
	mu  lockcheck.RWMutex
	fh  *client.File

	// written counts writes into fh; flushed is the count covered by the
	// last successful flush. written != flushed means dirty.
	written, flushed atomic.Uint64
	pending          atomic.Int64 // bytes written since the last flush (approximate)
	dirtySince       atomic.Int64 // unix ns of the first unflushed write
	lastWrite        atomic.Int64 // unix ns
	lastUse          atomic.Int64 // unix ns
	validated        atomic.Int64 // unix ns the File's version was last checked
	stale            atomic.Bool  // the island has a newer version; reopen when clean
	validating       atomic.Bool
	retryAt          atomic.Int64 // unix ns before which the flusher does not retry a failed flush
}

func (o *openFile) dirty() bool { return o.written.Load() != o.flushed.Load() }

type fileCache struct {
	s  *Server
	mu lockcheck.Mutex
	m  map[uint64]*openFile

	pending atomic.Int64 // sum of openFile.pending
}

func newFileCache(s *Server) *fileCache { return &fileCache{s: s, m: map[uint64]*openFile{}} }

// revalidateAfter is how old a clean File's view may get before a READ
// checks the island for a newer version (other gateways' writes).
const revalidateAfter = time.Second

// acquire returns ino's open file with its lock held shared (release with
// o.mu.RUnlock), opening it with cred if needed.
func (fc *fileCache) acquire(ctx context.Context, cred metawire.Cred, ino uint64) (*openFile, error) {
	for {
		fc.mu.Lock()
		o := fc.m[ino]
		if o == nil {
			fc.mu.Unlock()
			// Locked before it is published, and fc.mu taken after o.mu as
			// drop and remove do: one lock order everywhere (o.mu, then
			// fc.mu), which the lock checker holds us to.
			o = &openFile{ino: ino}
			o.mu.Lock()
			fc.mu.Lock()
			if fc.m[ino] != nil {
				fc.mu.Unlock()
				o.mu.Unlock()
				continue // another request opened it meanwhile
			}
			fc.m[ino] = o
			fc.mu.Unlock()
			fh, err := fc.s.fs.Open(ctx, cred, ino)
			if err != nil {
				fc.remove(o)
				o.mu.Unlock()
				return nil, err
			}
			now := time.Now().UnixNano()
			o.fh = fh
			o.validated.Store(now)
			o.lastUse.Store(now)
			o.mu.Unlock()
			fc.evictIfFull()
			continue
		}
		fc.mu.Unlock()
		o.lastUse.Store(time.Now().UnixNano())
		if o.stale.Load() && !o.dirty() {
			if err := fc.reopen(ctx, cred, o); err != nil {
				return nil, err
			}
			continue
		}
		if time.Since(time.Unix(0, o.validated.Load())) > revalidateAfter && !o.dirty() && o.validating.CompareAndSwap(false, true) {
			fc.revalidate(ctx, cred, o)
			o.validating.Store(false)
			continue
		}
		o.mu.RLock()
		if o.fh == nil {
			o.mu.RUnlock()
			continue
		}
		return o, nil
	}
}

// peek returns ino's open file, if any, with its lock held shared.
func (fc *fileCache) peek(ino uint64) *openFile {
	for {
		fc.mu.Lock()
		o := fc.m[ino]
		fc.mu.Unlock()
		if o == nil {
			return nil
		}
		o.mu.RLock()
		if o.fh != nil {
			return o
		}
		o.mu.RUnlock()
	}
}

func (fc *fileCache) remove(o *openFile) {
	fc.mu.Lock()
	if fc.m[o.ino] == o {
		delete(fc.m, o.ino)
	}
	fc.mu.Unlock()
}

// revalidate compares a clean File's version with the island's and marks
// it stale when they differ.
func (fc *fileCache) revalidate(ctx context.Context, cred metawire.Cred, o *openFile) {
	a, err := fc.s.fs.GetAttrFresh(ctx, cred, o.ino)
	if err != nil {
		// A removed file is reopened, which reports ESTALE; on any error
		// the request goes on with what it has rather than asking again
		// at once (acquire loops until the file is valid).
		if errors.Is(err, metawire.ErrStale) || errors.Is(err, metawire.ErrNotFound) {
			o.stale.Store(true)
		}
		o.validated.Store(time.Now().UnixNano())
		return
	}
	fc.noteAttr(&a)
	o.validated.Store(time.Now().UnixNano())
}

// noteAttr marks a clean open file stale when fresh attributes show a
// version it does not have (another gateway or client wrote the file).
func (fc *fileCache) noteAttr(a *metawire.Attr) {
	fc.mu.Lock()
	o := fc.m[a.Ino]
	fc.mu.Unlock()
	if o == nil || o.dirty() {
		return
	}
	if o.mu.TryRLock() {
		if o.fh != nil && o.fh.Attr().Version != a.Version {
			o.stale.Store(true)
		}
		o.mu.RUnlock()
	}
}

// reopen replaces a stale clean File with a freshly opened one.
func (fc *fileCache) reopen(ctx context.Context, cred metawire.Cred, o *openFile) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fh == nil || !o.stale.Load() || o.dirty() {
		return nil
	}
	fh, err := fc.s.fs.Open(ctx, cred, o.ino)
	o.fh.Release()
	if err != nil {
		o.fh = nil
		fc.remove(o)
		return err
	}
	o.fh = fh
	o.stale.Store(false)
	o.validated.Store(time.Now().UnixNano())
	return nil
}

// wrote records n bytes written into o's File (lock held shared).
func (fc *fileCache) wrote(o *openFile, n int) {
	now := time.Now().UnixNano()
	if !o.dirty() {
		o.dirtySince.Store(now)
	}
	o.lastWrite.Store(now)
	o.pending.Add(int64(n))
	fc.pending.Add(int64(n))
	o.written.Add(1)
}

// flush makes o's buffered writes durable (lock held shared or
// exclusively).
func (fc *fileCache) flush(ctx context.Context, o *openFile) error {
	w := o.written.Load()
	p := o.pending.Load()
	if err := o.fh.Fsync(ctx); err != nil { // COMMIT and stable writes need it durable
		return err
	}
	for {
		f := o.flushed.Load()
		if f >= w || o.flushed.CompareAndSwap(f, w) {
			break
		}
	}
	for {
		cur := o.pending.Load()
		d := min(p, cur)
		if o.pending.CompareAndSwap(cur, cur-d) {
			fc.pending.Add(-d)
			break
		}
	}
	return nil
}

// drop flushes o and closes it (the next request opens the file again).
// With discard, buffered writes are thrown away instead (the file is
// gone).
func (fc *fileCache) drop(ctx context.Context, o *openFile, discard bool) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fh == nil {
		return nil
	}
	if !discard {
		if err := fc.flush(ctx, o); err != nil {
			return err
		}
	} else {
		p := o.pending.Swap(0)
		fc.pending.Add(-p)
	}
	fc.remove(o)
	o.fh.Release()
	o.fh = nil
	return nil
}

// dropIno flushes and closes ino's open file, if any.
func (fc *fileCache) dropIno(ctx context.Context, ino uint64) error {
	fc.mu.Lock()
	o := fc.m[ino]
	fc.mu.Unlock()
	if o == nil {
		return nil
	}
	return fc.drop(ctx, o, false)
}

// evictIfFull closes the least recently used clean files beyond
// MaxOpenFiles.
func (fc *fileCache) evictIfFull() {
	fc.mu.Lock()
	over := len(fc.m) - fc.s.cfg.MaxOpenFiles
	if over <= 0 {
		fc.mu.Unlock()
		return
	}
	var clean []*openFile
	for _, o := range fc.m {
		if !o.dirty() {
			clean = append(clean, o)
		}
	}
	fc.mu.Unlock()
	sort.Slice(clean, func(i, j int) bool { return clean[i].lastUse.Load() < clean[j].lastUse.Load() })
	for _, o := range clean[:min(over, len(clean))] {
		if o.mu.TryLock() {
			if o.fh != nil && !o.dirty() {
				fc.remove(o)
				o.fh.Release()
				o.fh = nil
			}
			o.mu.Unlock()
		}
	}
}

// flushRetry is how long the flusher waits after a failed flush of a file
// (COMMIT still tries at once).
const flushRetry = 5 * time.Second

// idleClose is how long a clean file stays open without use.
const idleClose = 30 * time.Second

// flusher flushes files idle for FlushIdle or dirty for FlushMaxAge, and
// closes clean files unused for a while, until ctx is done.
func (fc *fileCache) flusher(ctx context.Context) {
	tick := time.NewTicker(min(fc.s.cfg.FlushIdle/2, 500*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		fc.mu.Lock()
		var dirty, idle []*openFile
		for _, o := range fc.m {
			switch {
			case o.dirty():
				if now.UnixNano() < o.retryAt.Load() {
					continue
				}
				if now.Sub(time.Unix(0, o.lastWrite.Load())) >= fc.s.cfg.FlushIdle || now.Sub(time.Unix(0, o.dirtySince.Load())) >= fc.s.cfg.FlushMaxAge {
					dirty = append(dirty, o)
				}
			case now.Sub(time.Unix(0, o.lastUse.Load())) >= idleClose:
				idle = append(idle, o)
			}
		}
		fc.mu.Unlock()
		for _, o := range dirty {
			fc.flushOne(ctx, o)
		}
		for _, o := range idle {
			if o.mu.TryLock() {
				if o.fh != nil && !o.dirty() {
					fc.remove(o)
					o.fh.Release()
					o.fh = nil
				}
				o.mu.Unlock()
			}
		}
	}
}

func (fc *fileCache) flushOne(ctx context.Context, o *openFile) {
	o.mu.RLock()
	if o.fh == nil {
		o.mu.RUnlock()
		return
	}
	err := fc.flush(ctx, o)
	o.mu.RUnlock()
	switch {
	case err == nil:
	case errors.Is(err, metawire.ErrStale):
		// The file was removed: its buffered writes have nowhere to go.
		fc.s.log.Debug("nfs: dropping buffered writes of a removed file", "ino", o.ino)
		_ = fc.drop(ctx, o, true)
	case ctx.Err() != nil:
	default:
		fc.s.log.Warn("nfs: background flush failed; will retry", "ino", o.ino, "err", err, "retry_in", flushRetry)
		o.retryAt.Store(time.Now().Add(flushRetry).UnixNano())
	}
}

// closeAll flushes every dirty file and closes them all (at shutdown).
func (fc *fileCache) closeAll(ctx context.Context) error {
	fc.mu.Lock()
	all := make([]*openFile, 0, len(fc.m))
	for _, o := range fc.m {
		all = append(all, o)
	}
	fc.mu.Unlock()
	var errs []error
	for _, o := range all {
		err := fc.drop(ctx, o, false)
		if errors.Is(err, metawire.ErrStale) {
			err = fc.drop(ctx, o, true)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dirtyCount is the number of files with buffered writes (for tests).
func (fc *fileCache) dirtyCount() int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	n := 0
	for _, o := range fc.m {
		if o.dirty() {
			n++
		}
	}
	return n
}
