package fusefs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// openFile is the state one mount keeps for an inode with open handles:
// the shared client.File and what this mount knows that the island does
// not yet (unflushed writes, a silly-renamed name).
type openFile struct {
	ino  uint64
	cred metawire.Cred // the first opener's: used for the data path

	// mu orders reads and writes (shared) against replacing the File
	// (exclusive: truncation, attribute and policy changes, close-to-open
	// refresh).
	mu   lockcheck.RWMutex
	file atomic.Pointer[client.File]
	err  error // set (under mu) when the first open failed

	pages *pageVersions // the adapter's: commits move the kernel's page version
	fs    *client.FS    // the adapter's: lock checks

	writes  atomic.Uint64 // writes accepted
	flushed atomic.Uint64 // writes known to be committed
	mtime   atomic.Int64  // time of the last local write (ns)

	// held: the FS holds the inode open for this mount's users
	// (client.FS.HoldOpen), so another client's unlink keeps it (set
	// under mu at the first open, taken under adapter.mu by the last
	// release).
	held atomic.Bool

	// appendMu orders this mount's appends (O_APPEND writes); appended:
	// appends not yet written back may be held here (append.go).
	appendMu sync.Mutex
	appended atomic.Bool

	// Guarded by adapter.mu.
	refs   int
	orphan *orphanName
}

// orphanName is where an unlinked open file was renamed aside.
type orphanName struct {
	dir  uint64
	name string
}

func (of *openFile) dirty() bool { return of.writes.Load() != of.flushed.Load() }

// flush writes back and commits the File's dirty data; durable (fsync)
// also waits for the commit to be synced (client.File.Fsync), else it is
// close-to-open only (client.File.Flush).
func (of *openFile) flush(ctx context.Context, durable bool) error {
	of.mu.RLock()
	defer of.mu.RUnlock()
	return of.flushShared(ctx, durable)
}

// flushShared flushes with of.mu held (either way).
func (of *openFile) flushShared(ctx context.Context, durable bool) error {
	f := of.file.Load()
	if f == nil {
		return nil
	}
	// Writes made under a lock this mount may no longer hold never
	// reach the cluster (client.FS.LockCheck).
	if err := of.lockCheck(); err != nil {
		return err
	}
	w := of.writes.Load()
	flush := f.Flush
	if durable {
		flush = f.Fsync
	}
	before := f.Attr().Version
	if err := flush(ctx); err != nil {
		// The kernel's pages may hold writes the island never got.
		of.pages.forget(of.ino)
		return err
	}
	of.pages.committed(of.ino, before, f.Attr().Version)
	// Only move forward: a concurrent flush may have recorded more.
	for {
		old := of.flushed.Load()
		if old >= w || of.flushed.CompareAndSwap(old, w) {
			return nil
		}
	}
}

// lockCheck is the File's FS's LockCheck of the inode.
func (of *openFile) lockCheck() error {
	if of.fs == nil {
		return nil
	}
	return of.fs.LockCheck(of.ino)
}

// handle is one FUSE file handle (one open(2)).
type handle struct {
	of    *openFile
	flags uint32
	cred  metawire.Cred
	// lockOwners are the owners that locked through this handle
	// (guarded by adapter.mu): its release drops their locks.
	lockOwners map[uint64]bool
}

func (h *handle) writable() bool {
	acc := h.flags & 3
	return acc == 1 || acc == 2 // O_WRONLY, O_RDWR
}

// acquire returns the shared open state of ino with a new reference,
// opening the File if this is the first handle. A File that has no
// unflushed writes is replaced when the island has a newer version
// (close-to-open: another client committed since). created, when set,
// holds the attributes of a file the caller has just created, which open
// it without asking the island again.
func (a *adapter) acquire(ctx context.Context, cred metawire.Cred, ino uint64, created *metawire.Attr) (*openFile, error) {
	a.mu.Lock()
	of := a.files[ino]
	if of != nil {
		of.refs++
		a.mu.Unlock()
		of.mu.Lock()
		err := a.refreshLocked(ctx, cred, of)
		of.mu.Unlock()
		if err != nil {
			a.release(of)
			return nil, err
		}
		return of, nil
	}
	of = &openFile{ino: ino, cred: cred, refs: 1, pages: a.pages, fs: a.fs}
	of.mu.Lock()
	a.files[ino] = of
	a.mu.Unlock()
	var f *client.File
	// Held first: from the hold on, another client's unlink leaves the
	// inode to this mount's descriptors.
	err := a.fs.HoldOpen(ctx, ino)
	if err == nil {
		of.held.Store(true)
		if created != nil {
			f, err = a.fs.OpenWithAttr(ctx, cred, *created)
		} else {
			f, err = a.fs.Open(ctx, cred, ino)
		}
	}
	if err != nil {
		of.err = err
		of.mu.Unlock()
		a.release(of)
		return nil, err
	}
	of.file.Store(f)
	of.mu.Unlock()
	return of, nil
}

// refreshLocked checks a shared File at a new open (of.mu held
// exclusively): one without unflushed writes is replaced when the island
// has a newer version.
func (a *adapter) refreshLocked(ctx context.Context, cred metawire.Cred, of *openFile) error {
	f := of.file.Load()
	if of.err != nil || f == nil {
		if of.err != nil {
			return of.err
		}
		return metawire.ErrStale
	}
	if of.dirty() {
		return nil
	}
	fresh, err := a.fs.GetAttrFresh(ctx, cred, of.ino)
	if err != nil {
		return err
	}
	cur := f.Attr()
	if fresh.Version != cur.Version || fresh.Size != cur.Size || fresh.Policy != cur.Policy {
		return a.reopenLocked(ctx, of)
	}
	return nil
}

// reopenLocked replaces of's File by a fresh one (of.mu held exclusively;
// the old File must have no unflushed writes).
func (a *adapter) reopenLocked(ctx context.Context, of *openFile) error {
	f, err := a.fs.Open(ctx, of.cred, of.ino)
	if err != nil {
		return err
	}
	of.file.Store(f)
	return nil
}

// release drops one reference; the last one writes the File back and
// forgets it (or removes the silly-renamed name of an unlinked file).
// It must not be called with of.mu held.
func (a *adapter) release(of *openFile) {
	a.mu.Lock()
	of.refs--
	if of.refs > 0 {
		a.mu.Unlock()
		return
	}
	orphan := of.orphan
	unhold := of.held.Swap(false)
	// The read-ahead goes back to the shared budget now, not when the
	// File is collected (it stays usable if the file is opened again).
	defer func() {
		if f := of.file.Load(); f != nil {
			f.Release()
		}
	}()
	if orphan != nil || of.file.Load() == nil {
		// Nothing worth writing: the name is gone (or nothing was opened).
		if a.files[of.ino] == of {
			delete(a.files, of.ino)
		}
		a.mu.Unlock()
		if unhold {
			a.fs.ReleaseOpen(of.ino)
		}
		if orphan != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// Gone already if someone removed the hidden name (rm -rf).
			if err := a.fs.Unlink(ctx, metawire.Root, orphan.dir, orphan.name); err != nil && !errors.Is(err, metawire.ErrNotFound) && !errors.Is(err, metawire.ErrStale) {
				a.log.Warn("fusefs: removing unlinked open file", "ino", fmt.Sprintf("%x", of.ino), "name", orphan.name, "err", err)
			}
		}
		return
	}
	a.mu.Unlock()
	if of.dirty() && !a.killed.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		if err := of.flush(ctx, false); err != nil {
			a.log.Error("fusefs: write-back at release failed; unflushed data of this file is lost", "ino", fmt.Sprintf("%x", of.ino), "err", err)
		}
		cancel()
	}
	a.mu.Lock()
	last := of.refs == 0 && a.files[of.ino] == of
	if last {
		delete(a.files, of.ino)
	}
	if of.refs > 0 {
		// Opened again while its writes went back: the new handle keeps
		// the hold.
		if unhold {
			of.held.Store(true)
			unhold = false
		}
	}
	a.mu.Unlock()
	if unhold {
		a.fs.ReleaseOpen(of.ino)
	}
	if last {
		// Locks lost under an ended session stop failing writes once
		// nobody has the file open here.
		a.fs.ForgetLost(of.ino)
	}
}

// keepPages reports whether an open of of, revalidated just now, may keep
// the kernel's page cache (FOPEN_KEEP_CACHE): the pages hold the data
// version the island has now (pageVersions).
func (a *adapter) keepPages(of *openFile) bool {
	f := of.file.Load()
	if f == nil {
		return false
	}
	if of.dirty() {
		// Unflushed writes: the version says nothing yet.
		a.pages.forget(of.ino)
		return false
	}
	at := f.Attr()
	return a.pages.open(of.ino, at.Gen, at.Version)
}

// lookupOpen returns the open state of ino, or nil.
func (a *adapter) lookupOpen(ino uint64) *openFile {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.files[ino]
}

// newHandle registers a handle and returns its number.
func (a *adapter) newHandle(h *handle) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nextFh++
	a.handles[a.nextFh] = h
	return a.nextFh
}

func (a *adapter) getHandle(fh uint64) *handle {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.getHandleLocked(fh)
}

func (a *adapter) getHandleLocked(fh uint64) *handle { return a.handles[fh] }

func (a *adapter) dropHandle(fh uint64) *handle {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.handles[fh]
	delete(a.handles, fh)
	return h
}

// closeAll writes back every open file (after unmount).
func (a *adapter) closeAll(ctx context.Context) error {
	if a.killed.Load() {
		return nil
	}
	a.mu.Lock()
	var ofs []*openFile
	for _, of := range a.files {
		if of.orphan == nil {
			ofs = append(ofs, of)
		}
	}
	a.handles = map[uint64]*handle{}
	a.mu.Unlock()
	var first error
	for _, of := range ofs {
		if err := of.flush(ctx, false); err != nil && first == nil {
			first = fmt.Errorf("fusefs: write-back of inode %x at unmount: %w", of.ino, err)
		}
	}
	// Files closed lazily before (and written back just now) become
	// durable before the mount goes away.
	if err := a.fs.SyncLazy(ctx); err != nil && first == nil {
		first = fmt.Errorf("fusefs: sync at unmount: %w", err)
	}
	return first
}

// modifyOpen runs fn with of's File flushed and of.mu held exclusively,
// then re-opens the File so its cached state follows the island. Used for
// changes that go around the File (truncation, policy).
func (a *adapter) modifyOpen(ctx context.Context, of *openFile, fn func() error) error {
	return a.modifyOpenAttr(ctx, of, func() (*metawire.Attr, error) { return nil, fn() })
}

// modifyOpenAttr is modifyOpen for fn that may return the attributes the
// island answered a change that left the data alone with (chmod, chown,
// utimes): the File takes them (client.File.TakeAttr) instead of being
// re-opened, which cost a getattr and, for a small file, a readmap on
// every such call (tar sets three per file).
func (a *adapter) modifyOpenAttr(ctx context.Context, of *openFile, fn func() (*metawire.Attr, error)) error {
	of.mu.Lock()
	defer of.mu.Unlock()
	f := of.file.Load()
	if f == nil {
		_, err := fn()
		return err
	}
	// Flushed first: a commit after the change would set mtime (and
	// clear set-id bits) again. fn is a synced island change: it makes
	// this commit durable too.
	if err := of.flushShared(ctx, false); err != nil {
		return err
	}
	at, ferr := fn()
	if ferr == nil && at != nil && f.TakeAttr(*at) {
		return nil
	}
	if err := a.reopenLocked(ctx, of); err != nil && ferr == nil {
		a.log.Warn("fusefs: re-open after change", "ino", fmt.Sprintf("%x", of.ino), "err", err)
	}
	return ferr
}
