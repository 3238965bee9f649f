package fusefs

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/atoll-fs/atoll/internal/filelock"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// Appends (O_APPEND) that several hosts make to one file. The kernel
// writes an O_APPEND write at the end it caches, which another mount's
// appends have moved: two hosts appending to one log overwrote each
// other's records. So a write through a descriptor with O_APPEND ignores
// the kernel's offset: under the file's append lock (filelock.Append,
// taken at the island, or here under this mount's exclusive lease), it
// reads the file's end as the island has it, writes there, and writes
// back before the lock goes (client.FS.UnlockWritten; under the lease,
// at the lease's break instead). Descriptors opened with O_APPEND use
// direct I/O, so the kernel's pages never hold the bytes at the offset
// it guessed.

// appendOwner is the owner of this mount's append locks. The kernel's
// lock owners are kernel addresses, never this.
const appendOwner = 0x6170_7065_6e64 // "append"

// appendFlushWait bounds the write-back of appends at a lease break,
// which the break's acknowledgement waits for.
const appendFlushWait = 30 * time.Second

// appends reports whether a write with flags (the descriptor's, which
// fcntl may have changed since the open) appends.
func (a *adapter) appends(h *handle, flags uint32) bool {
	return !a.cfg.LocalLocks && (flags|h.flags)&syscall.O_APPEND != 0
}

// appendOpenFlags sets direct I/O on the reply to an open with O_APPEND
// (see appends).
func (a *adapter) appendOpenFlags(flags uint32, out *fuse.OpenOut) {
	if !a.cfg.LocalLocks && flags&syscall.O_APPEND != 0 {
		out.OpenFlags |= fuse.FOPEN_DIRECT_IO
		out.OpenFlags &^= fuse.FOPEN_KEEP_CACHE
	}
}

func appendLock() filelock.Lock {
	return filelock.Lock{Owner: filelock.Owner{ID: appendOwner}, Kind: filelock.Append, Type: filelock.Write, End: filelock.MaxEnd}
}

// appendWrite writes data at the end of h's file under its append lock
// and returns how much it wrote.
func (a *adapter) appendWrite(cancel <-chan struct{}, h *handle, data []byte) (uint32, fuse.Status) {
	of := h.of
	of.appendMu.Lock()
	defer of.appendMu.Unlock()
	ctx, done := a.mutCtx(cancel)
	defer done()
	// O_APPEND set by fcntl after the open: the kernel's pages, not
	// direct, hold the bytes at the offset it guessed.
	dropPages := h.flags&syscall.O_APPEND == 0
	l := appendLock()
	at, err := a.fs.SetLock(ctx, h.cred, of.ino, l, true, cancel)
	if err != nil {
		a.lockError("append lock", of.ino, err)
		return 0, status(err)
	}
	if at.Ino != 0 {
		// Granted at the island (or this mount's copy of the locks just
		// taken from it): another client may have appended, so the
		// island's end is taken. What this mount wrote and has not
		// written back goes first (revalidate keeps a dirty File as it
		// is). Under the lease (no attributes) the File's end is the
		// file's, and what it holds unwritten goes at the lease's break.
		if of.dirty() {
			if err := of.flush(ctx, false); err != nil {
				a.ioError("write-back before an append", of.ino, err)
				if uerr := a.fs.Unlock(ctx, h.cred, of.ino, l); uerr != nil {
					a.noteLockOwner(h, appendOwner)
				}
				return 0, status(err)
			}
		}
		// The descriptor's I/O is direct; the kernel's pages for other
		// descriptors go, as at a lock (revalidate), unless they hold
		// the island's version: after the reply (inside a WRITE the
		// kernel may hold what an invalidation waits for).
		if !a.revalidateFile(ctx, of, at) && !a.pages.open(of.ino, at.Gen, at.Version) {
			dropPages = true
		}
	}
	of.mu.RLock()
	f := of.file.Load()
	n, werr := a.writeAt(ctx, of, f, data, int64(f.Size()))
	// Before the unlock: a break after it writes these back (leaseBroken).
	of.appended.Store(true)
	of.mu.RUnlock()
	uerr := a.fs.UnlockWritten(ctx, h.cred, of.ino, l, func(ctx context.Context) error { return of.flush(ctx, false) })
	if uerr != nil {
		// The release of the descriptor drops it if the island still
		// holds it: another client's append would wait for it.
		a.noteLockOwner(h, appendOwner)
	}
	if dropPages {
		a.dropPagesLater(of.ino)
	}
	if werr == nil {
		werr = uerr
	}
	if werr != nil {
		a.ioError("append", of.ino, werr)
		if n == 0 || uerr != nil {
			return 0, status(werr)
		}
	}
	return uint32(n), fuse.OK
}

// dropPagesLater drops the kernel's pages and attributes of ino from
// outside the request being served.
func (a *adapter) dropPagesLater(ino uint64) {
	if a.server == nil {
		return
	}
	a.notifies.Add(1)
	go func() {
		defer a.notifies.Done()
		node := a.nodeID(ino)
		if st := a.server.InodeNotify(node, 0, 0); !st.Ok() && st != fuse.ENOENT {
			a.log.Debug("fusefs: invalidating the pages of an appended file", "node", fmt.Sprintf("%x", node), "status", st)
		}
	}()
}

// leaseBroken runs when leases of buckets ended early, before the breaks
// are acknowledged (client.FS.OnLeaseBreak): appends made under them
// without a write-back are written back, so that the client whose
// request broke them finds them at the island; then the kernel's copies
// are invalidated.
func (a *adapter) leaseBroken(buckets []uint32) {
	a.mu.Lock()
	var ofs []*openFile
	for ino, of := range a.files {
		if of.appended.Load() && slices.Contains(buckets, namespace.Ino(ino).Bucket()) {
			ofs = append(ofs, of)
		}
	}
	a.mu.Unlock()
	for _, of := range ofs {
		if !of.appended.Swap(false) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), appendFlushWait)
		if err := of.flush(ctx, false); err != nil {
			a.ioError("write-back of appends at a lease break", of.ino, err)
		}
		cancel()
	}
	a.kernelBreak(buckets)
}
