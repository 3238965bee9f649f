package fusefs

import (
	"context"
	"fmt"
	"math"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/atoll-fs/atoll/internal/filelock"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// File locks (see the package doc's "Locks"): the kernel forwards
// fcntl (POSIX and OFD) and flock locks (Config.Locks, MountOptions.
// EnableLocks), and every one is taken at the inode's island through
// client.FS, so locks conflict across mounts and gateways.

// kernelMaxEnd is the kernel's "to the end of the file" (OFFSET_MAX).
const kernelMaxEnd = math.MaxInt64

// lockOf turns a FUSE lock request into the island's form.
func lockOf(in *fuse.LkIn) (filelock.Lock, bool, fuse.Status) {
	l := filelock.Lock{Owner: filelock.Owner{ID: in.Owner}, Kind: filelock.POSIX, Start: in.Lk.Start, End: in.Lk.End, Pid: in.Lk.Pid}
	if l.End >= kernelMaxEnd {
		l.End = filelock.MaxEnd
	}
	if in.LkFlags&fuse.FUSE_LK_FLOCK != 0 {
		l.Kind, l.Start, l.End = filelock.Flock, 0, filelock.MaxEnd
	}
	unlock := false
	switch in.Lk.Typ {
	case syscall.F_RDLCK:
		l.Type = filelock.Read
	case syscall.F_WRLCK:
		l.Type = filelock.Write
	case syscall.F_UNLCK:
		unlock = true
		l.Type = filelock.Write // a valid type; an unlock ignores it
	default:
		return l, false, fuse.EINVAL
	}
	if l.Start > l.End {
		return l, false, fuse.EINVAL
	}
	return l, unlock, fuse.OK
}

func (a *adapter) GetLk(cancel <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	h := a.getHandle(in.Fh)
	if h == nil {
		return fuse.EBADF
	}
	l, unlock, st := lockOf(in)
	if !st.Ok() || unlock {
		return fuse.EINVAL
	}
	ctx, done := a.mutCtx(cancel)
	defer done()
	c, found, err := a.fs.GetLock(ctx, a.cred(&in.InHeader), h.of.ino, l)
	if err != nil {
		return status(err)
	}
	if !found {
		out.Lk = fuse.FileLock{Start: in.Lk.Start, End: in.Lk.End, Typ: syscall.F_UNLCK, Pid: in.Lk.Pid}
		return fuse.OK
	}
	out.Lk = fuse.FileLock{Start: c.Start, End: c.End, Typ: syscall.F_RDLCK, Pid: c.Pid}
	if c.Type == filelock.Write {
		out.Lk.Typ = syscall.F_WRLCK
	}
	if c.End == filelock.MaxEnd {
		out.Lk.End = kernelMaxEnd
	}
	return fuse.OK
}

func (a *adapter) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	return a.setLk(cancel, in, false)
}

func (a *adapter) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	return a.setLk(cancel, in, true)
}

func (a *adapter) setLk(cancel <-chan struct{}, in *fuse.LkIn, wait bool) fuse.Status {
	h := a.getHandle(in.Fh)
	if h == nil {
		return fuse.EBADF
	}
	l, unlock, st := lockOf(in)
	if !st.Ok() {
		return st
	}
	// A change the island applied must not be answered EINTR (mutCtx);
	// a wait is interrupted through its own channel instead.
	ctx, done := a.mutCtx(cancel)
	defer done()
	cred, of := a.cred(&in.InHeader), h.of
	if unlock {
		// What the owner wrote under the lock reaches the cluster before
		// anyone else can take it (as NFS clients do at unlock).
		if of.dirty() {
			if err := of.flush(ctx, false); err != nil {
				a.ioError("write-back before unlock", of.ino, err)
				return status(err)
			}
		}
		err := a.fs.Unlock(ctx, cred, of.ino, l)
		a.lockError("unlock", of.ino, err)
		return status(err)
	}
	a.noteLockOwner(h, l.Owner.ID)
	var interrupt <-chan struct{}
	if wait {
		interrupt = cancel
	}
	at, err := a.fs.SetLock(ctx, cred, of.ino, l, wait, interrupt)
	if err != nil {
		a.lockError("lock", of.ino, err)
		return status(err)
	}
	if at.Ino != 0 {
		// (No attributes: granted under this mount's exclusive lease,
		// which nobody else's change outlives: nothing to revalidate.)
		a.revalidate(ctx, of, at)
	}
	return fuse.OK
}

// lockError logs a lock request's failure other than a conflict, an
// interrupted wait or a deadlock the caller is told about.
func (a *adapter) lockError(op string, ino uint64, err error) {
	switch metawire.Errno(err) {
	case 0, syscall.EAGAIN, syscall.EINTR, syscall.EDEADLK:
		return
	}
	a.log.Warn("fusefs: "+op+" failed", "ino", fmt.Sprintf("%x", ino), "err", err)
}

// noteLockOwner records that owner locked through h: the release of h
// (the last close of its open file description) drops the owner's
// locks, which is what OFD locks need (the kernel names them by the
// description and sends no unlock for them).
func (a *adapter) noteLockOwner(h *handle, owner uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h.lockOwners == nil {
		h.lockOwners = map[uint64]bool{}
	}
	h.lockOwners[owner] = true
}

// revalidate makes what this mount caches of a file just locked follow
// the island (at: its attributes at the grant): another client may have
// written it under the lock it held before. The shared File is opened
// again when it has no unflushed writes and the island's version or size
// differ; the kernel's attributes are dropped, and its pages unless they
// hold the version the island has (pageVersions).
func (a *adapter) revalidate(ctx context.Context, of *openFile, at metawire.Attr) {
	dirty := a.revalidateFile(ctx, of, at)
	if a.server == nil {
		return
	}
	node := a.nodeID(of.ino)
	if !dirty && !a.pages.open(of.ino, at.Gen, at.Version) {
		// Pages (from offset 0 on) and attributes.
		if st := a.server.InodeNotify(node, 0, 0); !st.Ok() && st != fuse.ENOENT {
			a.log.Debug("fusefs: invalidating the pages of a file just locked", "node", fmt.Sprintf("%x", node), "status", st)
		}
		return
	}
	a.dropKernelAttr(node)
}

// revalidateFile is revalidate's part in this mount: the shared File is
// opened again unless it has unflushed writes (reported: dirty).
func (a *adapter) revalidateFile(ctx context.Context, of *openFile, at metawire.Attr) (dirty bool) {
	of.mu.Lock()
	defer of.mu.Unlock()
	if f := of.file.Load(); f != nil && !of.dirty() {
		cur := f.Attr()
		if at.Version != cur.Version || at.Size != cur.Size || at.Policy != cur.Policy {
			if err := a.reopenLocked(ctx, of); err != nil {
				a.log.Debug("fusefs: reopening a file just locked", "ino", fmt.Sprintf("%x", of.ino), "err", err)
			}
		}
	}
	return of.dirty()
}

// unlockOwners drops the locks the owners hold on of's inode (a close
// by a process: its POSIX locks; a release: every owner that locked
// through the description).
func (a *adapter) unlockOwners(ctx context.Context, of *openFile, owners ...uint64) error {
	for _, o := range owners {
		if err := a.fs.UnlockOwner(ctx, of.ino, o); err != nil {
			return err
		}
	}
	return nil
}
