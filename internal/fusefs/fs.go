package fusefs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// blockSize is st_blksize: the preferred I/O size.
const blockSize = 64 << 10

// PolicyXattr is the extended attribute holding a redundancy policy.
const PolicyXattr = "user.atoll.policy"

// sillyPrefix starts the names unlinked open files are renamed to.
const sillyPrefix = ".atoll-open-"

// adapter implements fuse.RawFileSystem over client.FS.
type adapter struct {
	fuse.RawFileSystem // ENOSYS for what is not implemented below

	cfg    *Config
	fs     *client.FS
	root   uint64 // the Atoll directory that is the mount's root (FUSE node 1)
	log    *slog.Logger
	creds  *credCache
	pages  *pageVersions
	server *fuse.Server
	silly  atomic.Uint64
	killed atomic.Bool // Mount.Kill: write nothing back any more
	// readdirs counts the listing requests the kernel sent (Readdirs),
	// lookups its LOOKUP and GETATTR requests (Lookups).
	readdirs, lookups atomic.Uint64
	// staleReopens counts Files opened again for a read that ended short
	// of the size the kernel was given (staleEnd); told is the newest
	// data version of each regular file the kernel was given.
	staleReopens atomic.Uint64
	told         toldVersions

	muts struct { // changing requests in flight (mutCtx)
		lockcheck.Mutex
		m map[*mutation]struct{}
	}

	// kern: what the kernel caches under leases (leases.go); notifies:
	// its invalidations still running.
	kern     kernelLeases
	notifies sync.WaitGroup

	mu      lockcheck.Mutex
	files   map[uint64]*openFile  // by inode
	handles map[uint64]*handle    // by FUSE file handle
	dirs    map[uint64]*dirStream // by FUSE directory handle
	nextFh  uint64
}

func newAdapter(cfg *Config) *adapter {
	a := &adapter{
		RawFileSystem: fuse.NewDefaultRawFileSystem(),
		cfg:           cfg,
		fs:            cfg.FS,
		root:          cmp.Or(cfg.Root, cfg.FS.Root()),
		log:           cfg.Logger,
		creds:         newCredCache(),
		pages:         newPageVersions(),
		files:         map[uint64]*openFile{},
		handles:       map[uint64]*handle{},
		dirs:          map[uint64]*dirStream{},
	}
	a.muts.m = map[*mutation]struct{}{}
	cfg.FS.OnLeaseBreak(a.leaseBroken)
	return a
}

// String is the mount's subtype (type fuse.atoll); none with PlainType.
func (a *adapter) String() string {
	if a.cfg.PlainType {
		return ""
	}
	return "atoll"
}
func (a *adapter) SetDebug(bool)           {}
func (a *adapter) Init(*fuse.Server)       {}
func (a *adapter) OnUnmount()              {}
func (a *adapter) Forget(nodeid, n uint64) {}

// ino maps a FUSE node id to an Atoll inode id (node 1 is the root).
func (a *adapter) ino(node uint64) uint64 {
	if node == fuse.FUSE_ROOT_ID {
		return a.root
	}
	return node
}

// nodeID maps an Atoll inode id to a FUSE node id.
func (a *adapter) nodeID(ino uint64) uint64 {
	if ino == a.root {
		return fuse.FUSE_ROOT_ID
	}
	return ino
}

// status maps an error to a FUSE status through metawire.Errno.
func status(err error) fuse.Status {
	if err == nil {
		return fuse.OK
	}
	if errors.Is(err, context.Canceled) {
		return fuse.EINTR
	}
	return fuse.Status(metawire.Errno(err))
}

// ioError logs a data-path failure the application sees as EIO (or a
// short count): the errno alone does not say which server or stripe.
func (a *adapter) ioError(op string, ino uint64, err error) {
	if err == nil || errors.Is(err, context.Canceled) || metawire.Errno(err) != syscall.EIO {
		return
	}
	a.log.Warn("fusefs: "+op+" failed", "ino", fmt.Sprintf("%x", ino), "err", err)
}

func reqCtx(cancel <-chan struct{}, h *fuse.InHeader) *fuse.Context {
	return &fuse.Context{Caller: h.Caller, Cancel: cancel}
}

// mutCtx is the context of a request that changes something; done must
// be called when the request ends. It ignores interrupts for
// Config.InterruptGrace: a change the island has applied must not be
// answered EINTR, or the caller retries it (Go's runtime retries open,
// mkdir, unlink... on EINTR, and its preemption signals interrupt syscalls
// all the time): open(O_EXCL) would then fail with EEXIST, unlink with
// ENOENT. A request still waiting that long after its interrupt is on a
// hung server: giving up lets a killed process exit (the kernel holds it
// until the request is answered).
func (a *adapter) mutCtx(cancel <-chan struct{}) (ctx context.Context, done func()) {
	if cancel == nil || a.cfg.InterruptGrace < 0 {
		return context.Background(), func() {}
	}
	ctx, stop := context.WithCancel(context.Background())
	m := &mutation{cancel: cancel, stop: stop}
	a.muts.Lock()
	a.muts.m[m] = struct{}{}
	a.muts.Unlock()
	return ctx, func() {
		a.muts.Lock()
		delete(a.muts.m, m)
		a.muts.Unlock()
		stop()
	}
}

// mutation is a changing request in flight (mutCtx).
type mutation struct {
	cancel      <-chan struct{} // closed by go-fuse when the kernel interrupts the request
	stop        context.CancelFunc
	interrupted time.Time // when the watcher first saw cancel closed
}

// watch runs the mount's periodic checks until done is closed: the
// interrupted requests (checkInterrupts) and the kernel's copies under
// leases about to end (leases.go). One goroutine polling a few times a
// second costs less than one per request.
func (a *adapter) watch(done <-chan struct{}) {
	every := kernelWatchEvery
	if g := a.cfg.InterruptGrace; g >= 0 {
		every = max(min(g/4, every), time.Millisecond)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-tick.C:
			if a.cfg.InterruptGrace >= 0 {
				a.checkInterrupts(now)
			}
			if ending := a.kernelLeasesEnding(now); len(ending) > 0 {
				a.kernelBreak(ending)
			}
		}
	}
}

// checkInterrupts gives up the changing requests interrupted more than
// Config.InterruptGrace ago.
func (a *adapter) checkInterrupts(now time.Time) {
	a.muts.Lock()
	defer a.muts.Unlock()
	for m := range a.muts.m {
		select {
		case <-m.cancel:
		default:
			continue
		}
		if m.interrupted.IsZero() {
			m.interrupted = now
		} else if now.Sub(m.interrupted) >= a.cfg.InterruptGrace {
			m.stop()
			delete(a.muts.m, m)
		}
	}
}

func (a *adapter) cred(h *fuse.InHeader) metawire.Cred { return a.creds.cred(&h.Caller) }

// merge adds what this mount knows and the island does not yet: the size
// and mtime of unflushed writes, and nlink 0 of an unlinked open file.
func (a *adapter) merge(at metawire.Attr) metawire.Attr {
	a.mu.Lock()
	of := a.files[at.Ino]
	orphan := of != nil && of.orphan != nil
	a.mu.Unlock()
	if of == nil {
		return a.told.tell(at)
	}
	if orphan && at.Nlink <= 1 {
		at.Nlink = 0
	}
	if !of.dirty() {
		if f := of.file.Load(); f != nil {
			if fa := f.Attr(); fa.Gen == at.Gen && fa.Version > at.Version {
				at = withData(at, fa)
			}
		}
		at = a.told.tell(at)
	} else {
		if f := of.file.Load(); f != nil {
			at.Size = f.Size()
			if mt := of.mtime.Load(); mt > at.Mtime {
				at.Mtime, at.Ctime = mt, max(at.Ctime, mt)
			}
		}
	}
	return at
}

func splitNs(ns int64) (uint64, uint32) {
	sec, nsec := ns/1e9, ns%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	return uint64(sec), uint32(nsec)
}

func fillAttr(out *fuse.Attr, at *metawire.Attr) {
	out.Ino = at.Ino
	out.Size = at.Size
	out.Blocks = at.Blocks
	out.Atime, out.Atimensec = splitNs(at.Atime)
	out.Mtime, out.Mtimensec = splitNs(at.Mtime)
	out.Ctime, out.Ctimensec = splitNs(at.Ctime)
	out.Mode = at.Mode
	out.Nlink = at.Nlink
	out.Uid, out.Gid = at.UID, at.GID
	out.Rdev = at.Rdev
	out.Blksize = blockSize
}

// fillEntry answers name in parent (a FUSE node id) with at, for as long
// as the leases covering them allow (entryTTLs).
func (a *adapter) fillEntry(out *fuse.EntryOut, parent uint64, name string, at metawire.Attr) {
	at = a.merge(at)
	out.NodeId = a.nodeID(at.Ino)
	out.Generation = uint64(at.Gen)
	entry, attr := a.entryTTLs(parent, name, at)
	out.SetEntryTimeout(entry)
	out.SetAttrTimeout(attr)
	fillAttr(&out.Attr, &at)
}

func (a *adapter) fillAttrOut(out *fuse.AttrOut, at metawire.Attr) {
	at = a.merge(at)
	out.SetTimeout(a.attrTTL(at.Ino))
	fillAttr(&out.Attr, &at)
}

// ---- names and attributes

func (a *adapter) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	a.lookups.Add(1)
	at, err := a.fs.Lookup(reqCtx(cancel, h), a.cred(h), a.ino(h.NodeId), name)
	if err != nil {
		if errors.Is(err, metawire.ErrNotFound) && a.negativeEntry(h.NodeId, name, out) {
			return fuse.OK
		}
		return status(err)
	}
	a.fillEntry(out, h.NodeId, name, at)
	return fuse.OK
}

func (a *adapter) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	// The kernel asks only when its own copy expired or was invalidated:
	// answer from the island, not from client.FS's cache.
	a.lookups.Add(1)
	at, err := a.fs.GetAttrFresh(reqCtx(cancel, &in.InHeader), a.cred(&in.InHeader), a.ino(in.NodeId))
	if err != nil {
		return status(err)
	}
	a.fillAttrOut(out, at)
	return fuse.OK
}

func (a *adapter) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	ctx, done := a.mutCtx(cancel)
	defer done()
	req := metawire.SetAttrReq{Cred: a.cred(&in.InHeader), Ino: a.ino(in.NodeId)}
	v := in.Valid
	if v&fuse.FATTR_MODE != 0 {
		req.Valid |= metawire.SetMode
		req.Mode = in.Mode & metawire.ModePerm
	}
	if v&fuse.FATTR_UID != 0 {
		req.Valid |= metawire.SetUID
		req.UID = in.Uid
	}
	if v&fuse.FATTR_GID != 0 {
		req.Valid |= metawire.SetGID
		req.GID = in.Gid
	}
	if v&fuse.FATTR_SIZE != 0 {
		req.Valid |= metawire.SetSize
		req.Size = in.Size
	}
	if v&fuse.FATTR_ATIME_NOW != 0 {
		req.Valid |= metawire.SetAtimeNow
	} else if v&fuse.FATTR_ATIME != 0 {
		req.Valid |= metawire.SetAtime
		req.Atime = int64(in.Atime)*1e9 + int64(in.Atimensec)
	}
	if v&fuse.FATTR_MTIME_NOW != 0 {
		req.Valid |= metawire.SetMtimeNow
	} else if v&fuse.FATTR_MTIME != 0 {
		req.Valid |= metawire.SetMtime
		req.Mtime = int64(in.Mtime)*1e9 + int64(in.Mtimensec)
	}
	if v&fuse.FATTR_CTIME != 0 {
		req.Valid |= metawire.SetCtime
		req.Ctime = int64(in.Ctime)*1e9 + int64(in.Ctimensec)
	}
	if v&fuse.FATTR_KILL_SUIDGID != 0 {
		// HANDLE_KILLPRIV_V2: the kernel leaves clearing set-id bits
		// (chown, truncation by the unprivileged) to us.
		req.Valid |= metawire.SetKillSUID
	}
	var fh *handle
	if v&fuse.FATTR_FH != 0 {
		fh = a.getHandle(in.Fh)
	}
	var at metawire.Attr
	do := func() error {
		var err error
		at, err = a.fs.SetAttr(ctx, req)
		// ftruncate(2) on a descriptor open for writing is allowed
		// whatever the file's mode now says: the check was made at open.
		if errors.Is(err, metawire.ErrAccess) && fh != nil && fh.writable() && req.Valid&^metawire.SetKillSUID == metawire.SetSize {
			r := req
			r.Cred = metawire.Root
			at, err = a.fs.SetAttr(ctx, r)
		}
		return err
	}
	var err error
	if req.Valid&metawire.SetSize != 0 {
		err = a.truncate(ctx, req.Cred, req.Ino, req.Size, do)
	} else if of := a.lookupOpen(req.Ino); of != nil {
		err = a.modifyOpenAttr(ctx, of, func() (*metawire.Attr, error) {
			err := do()
			return &at, err
		})
	} else {
		err = do()
	}
	if err != nil {
		return status(err)
	}
	a.fillAttrOut(out, at)
	return fuse.OK
}

// truncate runs setattr (which sets the size to size) on a regular file
// through its shared File. client.FS.SetAttr rewrites the block holding a
// new end inside it (islands keep that block's bytes past the new size,
// which must not reappear when the file grows again); the File is then
// re-opened so its cached block map follows.
func (a *adapter) truncate(ctx context.Context, cred metawire.Cred, i, size uint64, setattr func() error) error {
	of := a.lookupOpen(i)
	if of != nil {
		a.mu.Lock()
		of.refs++
		a.mu.Unlock()
	} else {
		var err error
		if of, err = a.acquire(ctx, cred, i, nil); err != nil {
			return setattr() // not a regular file (or gone): the island says why
		}
	}
	defer a.release(of)
	return a.modifyOpen(ctx, of, func() error {
		old := of.file.Load().Size()
		if err := setattr(); err != nil {
			return err
		}
		if size >= old {
			return nil
		}
		// client.FS.SetAttr has rewritten the cut block; the shared File
		// must see the new block map.
		return a.reopenLocked(ctx, of)
	})
}

func (a *adapter) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	return status(a.fs.Access(reqCtx(cancel, &in.InHeader), a.cred(&in.InHeader), a.ino(in.NodeId), in.Mask&7))
}

func (a *adapter) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	t, err := a.fs.Readlink(reqCtx(cancel, h), a.cred(h), a.ino(h.NodeId))
	if err != nil {
		return nil, status(err)
	}
	return []byte(t), fuse.OK
}

// ---- creating and removing names

func (a *adapter) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	mode := in.Mode
	if mode&metawire.ModeType == 0 {
		mode |= metawire.ModeFile
	}
	ctx, done := a.mutCtx(cancel)
	defer done()
	defer a.dirChanged(in.NodeId)
	r, err := a.fs.Create(ctx, metawire.CreateReq{
		Cred: a.cred(&in.InHeader), Dir: a.ino(in.NodeId), Name: name, Mode: mode, Rdev: in.Rdev, Exclusive: true,
	})
	if err != nil {
		return status(err)
	}
	a.fillEntry(out, in.NodeId, name, r.Attr)
	return fuse.OK
}

func (a *adapter) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	ctx, done := a.mutCtx(cancel)
	defer done()
	defer a.dirChanged(in.NodeId)
	r, err := a.fs.Mkdir(ctx, metawire.CreateReq{
		Cred: a.cred(&in.InHeader), Dir: a.ino(in.NodeId), Name: name, Mode: in.Mode & metawire.ModePerm,
	})
	if err != nil {
		return status(err)
	}
	a.fillEntry(out, in.NodeId, name, r.Attr)
	return fuse.OK
}

func (a *adapter) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	ctx, done := a.mutCtx(cancel)
	defer done()
	defer a.dirChanged(h.NodeId)
	r, err := a.fs.Symlink(ctx, metawire.CreateReq{
		Cred: a.cred(h), Dir: a.ino(h.NodeId), Name: name, Target: target, Exclusive: true,
	})
	if err != nil {
		return status(err)
	}
	a.fillEntry(out, h.NodeId, name, r.Attr)
	return fuse.OK
}

func (a *adapter) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	ctx, done := a.mutCtx(cancel)
	defer done()
	defer a.dirChanged(in.NodeId)
	cred := a.cred(&in.InHeader)
	at, err := a.fs.Link(ctx, metawire.LinkReq{
		Cred: cred, Ino: a.ino(in.Oldnodeid), Dir: a.ino(in.NodeId), Name: name,
	})
	if err != nil {
		return status(err)
	}
	if a.adoptTmpfile(ctx, cred, at.Ino) {
		at.Nlink--
	}
	a.fillEntry(out, in.NodeId, name, at)
	return fuse.OK
}

// victim looks up dir/name before it is removed or replaced: its inode
// (ok false if there is none) and, if removing the name would delete a
// regular file that is open in this mount (its last link), the open state.
func (a *adapter) victim(ctx context.Context, cred metawire.Cred, dir uint64, name string) (uint64, *openFile, bool) {
	at, err := a.fs.Lookup(ctx, cred, dir, name)
	if err != nil {
		return 0, nil, false
	}
	if !at.IsRegular() || at.Nlink > 1 {
		return at.Ino, nil, true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	of := a.files[at.Ino]
	if of == nil || of.orphan != nil || of.refs == 0 {
		return at.Ino, nil, true
	}
	return at.Ino, of, true
}

// releasedSoon waits briefly (tries times 200 µs) for the last handle
// of of to be released and reports whether it was: the kernel sends
// RELEASE after close(2) has returned, so an unlink right after a close
// can find the file still open.
func (a *adapter) releasedSoon(of *openFile, tries int) bool {
	for i := 0; i < tries; i++ {
		a.mu.Lock()
		refs := of.refs
		a.mu.Unlock()
		if refs == 0 {
			return true
		}
		time.Sleep(200 * time.Microsecond)
	}
	return false
}

// closedJustNow is how long (in releasedSoon's tries) an unlink or a
// rename over waits for the release of a file it finds open, before
// asking its island to keep it (KeepOpen, a round trip): an application
// that closes then removes (SQLite's journal, about one transaction in
// twenty here) usually sees the release within it; one that removes
// what it keeps open pays at most this.
const closedJustNow = 5 // 1 ms

// renameAside renames dir/name of an open file to a hidden name so its
// inode survives until the last handle is released.
func (a *adapter) renameAside(ctx context.Context, cred metawire.Cred, of *openFile, dir uint64, name string) error {
	hidden := fmt.Sprintf("%s%x-%d", sillyPrefix, of.ino, a.silly.Add(1))
	err := a.fs.Rename(ctx, metawire.RenameReq{
		Cred: cred, SrcDir: dir, SrcName: name, DstDir: dir, DstName: hidden, Flags: metawire.RenameNoReplace,
	})
	if err != nil {
		return err
	}
	a.mu.Lock()
	of.orphan = &orphanName{dir: dir, name: hidden}
	a.mu.Unlock()
	a.fs.Invalidate(of.ino)
	return nil
}

func (a *adapter) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	ctx, done := a.mutCtx(cancel)
	defer done()
	defer a.dirChanged(h.NodeId)
	cred, dir := a.cred(h), a.ino(h.NodeId)
	vino, of, ok := a.victim(ctx, cred, dir, name)
	if of != nil && a.fs.CreatePending(vino) && a.releasedSoon(of, 50) {
		// Closed just now (the kernel releases after close returns):
		// its kept-back create may be dropped (client.FS.Unlink).
		of = nil
	}
	if of != nil && a.releasedSoon(of, closedJustNow) {
		of = nil // closed just now: nothing to keep
	}
	if of != nil && !a.fs.KeepOpen(ctx, vino) {
		// The island could not be told that this mount has it open.
		return status(a.renameAside(ctx, cred, of, dir, name))
	}
	err := a.fs.Unlink(ctx, cred, dir, name)
	if ok {
		// Its link count and ctime changed (the name cache of client.FS
		// may not connect this name to it).
		a.fs.Invalidate(vino)
	}
	return status(err)
}

func (a *adapter) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	ctx, done := a.mutCtx(cancel)
	defer done()
	defer a.dirChanged(h.NodeId)
	return status(a.fs.Rmdir(ctx, a.cred(h), a.ino(h.NodeId), name))
}

// Linux renameat2 flags.
const (
	renameNoReplace = 1
	renameExchange  = 2
	renameWhiteout  = 4
)

func (a *adapter) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	ctx, done := a.mutCtx(cancel)
	defer done()
	defer a.dirChanged(in.NodeId, in.Newdir)
	cred := a.cred(&in.InHeader)
	req := metawire.RenameReq{Cred: cred, SrcDir: a.ino(in.NodeId), SrcName: oldName, DstDir: a.ino(in.Newdir), DstName: newName}
	if in.Flags&^(renameNoReplace|renameExchange|renameWhiteout) != 0 {
		return fuse.EINVAL
	}
	if in.Flags&renameWhiteout != 0 {
		// rename(2): EINVAL for a flag the file system does not support
		// (what xfstests and overlayfs probe for).
		return fuse.EINVAL
	}
	if in.Flags&renameNoReplace != 0 {
		req.Flags |= metawire.RenameNoReplace
	}
	if in.Flags&renameExchange != 0 {
		req.Flags |= metawire.RenameExchange
	}
	// A destination that is open here and would lose its last link is
	// renamed aside first (and back if the rename fails).
	var victim *openFile
	src, srcErr := a.fs.Lookup(ctx, cred, req.SrcDir, oldName)
	dino, of, dok := a.victim(ctx, cred, req.DstDir, newName)
	if of != nil && a.releasedSoon(of, closedJustNow) {
		of = nil
	}
	if req.Flags == 0 && srcErr == nil && of != nil && of.ino != src.Ino && !a.fs.KeepOpen(ctx, of.ino) {
		if err := a.renameAside(ctx, cred, of, req.DstDir, newName); err != nil {
			return status(err)
		}
		victim = of
	}
	err := a.fs.Rename(ctx, req)
	if srcErr == nil {
		a.fs.Invalidate(src.Ino) // ctime (and ".." of a directory)
	}
	if dok {
		a.fs.Invalidate(dino) // replaced: link count
	}
	if err != nil && victim != nil {
		a.mu.Lock()
		o := victim.orphan
		a.mu.Unlock()
		if o != nil && a.fs.Rename(context.Background(), metawire.RenameReq{
			Cred: metawire.Root, SrcDir: o.dir, SrcName: o.name, DstDir: req.DstDir, DstName: newName, Flags: metawire.RenameNoReplace,
		}) == nil {
			a.mu.Lock()
			victim.orphan = nil
			a.mu.Unlock()
		}
	}
	return status(err)
}

// ---- extended attributes

// storedXattr reports whether name is in a namespace the islands store.
func storedXattr(name string) bool { return strings.HasPrefix(name, "user.") }

func (a *adapter) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, name string, dest []byte) (uint32, fuse.Status) {
	if !storedXattr(name) {
		// Nothing is stored outside "user.": answer without a round
		// trip that the namespace is not supported, as setxattr does.
		// EOPNOTSUPP rather than ENODATA also tells ls -l, cp -a and
		// the like to stop asking for SELinux labels and POSIX ACLs on
		// this file system (coreutils remembers it per device): each
		// asked costs a FUSE round trip (75 us here), two or three per
		// file of an ls -l. The kernel takes EOPNOTSUPP as "none" where
		// it asks itself (security.capability at exec).
		return 0, fuse.Status(syscall.EOPNOTSUPP)
	}
	v, err := a.fs.GetXattr(reqCtx(cancel, h), a.cred(h), a.ino(h.NodeId), name)
	if err != nil {
		return 0, status(err)
	}
	if len(v) > len(dest) {
		return uint32(len(v)), fuse.ERANGE // len(dest) 0 is a size probe
	}
	copy(dest, v)
	return uint32(len(v)), fuse.OK
}

func (a *adapter) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	names, err := a.fs.ListXattr(reqCtx(cancel, h), a.cred(h), a.ino(h.NodeId))
	if err != nil {
		return 0, status(err)
	}
	n := 0
	for _, nm := range names {
		n += len(nm) + 1
	}
	if n > len(dest) {
		return uint32(n), fuse.ERANGE
	}
	p := dest[:0]
	for _, nm := range names {
		p = append(p, nm...)
		p = append(p, 0)
	}
	return uint32(n), fuse.OK
}

func (a *adapter) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, name string, data []byte) fuse.Status {
	ctx, done := a.mutCtx(cancel)
	defer done()
	cred, i := a.cred(&in.InHeader), a.ino(in.NodeId)
	if in.Flags&^uint32(metawire.XattrCreate|metawire.XattrReplace) != 0 {
		return fuse.EINVAL
	}
	do := func() error {
		return a.fs.SetXattr(ctx, cred, i, name, append([]byte(nil), data...), in.Flags)
	}
	if name == PolicyXattr {
		// Data written from now on follows the new policy: write back what
		// is buffered under the old one and re-open.
		if of := a.lookupOpen(i); of != nil {
			return status(a.modifyOpen(ctx, of, do))
		}
	}
	return status(do())
}

func (a *adapter) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	ctx, done := a.mutCtx(cancel)
	defer done()
	cred, i := a.cred(h), a.ino(h.NodeId)
	do := func() error { return a.fs.RemoveXattr(ctx, cred, i, name) }
	if name == PolicyXattr {
		if of := a.lookupOpen(i); of != nil {
			return status(a.modifyOpen(ctx, of, do))
		}
	}
	return status(do())
}

// ---- files

// accessMask is the permission an open with flags needs (4 r, 2 w).
func accessMask(flags uint32) uint32 {
	var m uint32
	switch flags & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		m = 4
	case syscall.O_WRONLY:
		m = 2
	default:
		m = 6
	}
	if flags&syscall.O_TRUNC != 0 {
		m |= 2
	}
	return m
}

func (a *adapter) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	ctx, done := a.mutCtx(cancel)
	defer done()
	cred, i := a.cred(&in.InHeader), a.ino(in.NodeId)
	if cred.UID != 0 {
		if err := a.fs.Access(ctx, cred, i, accessMask(in.Flags)); err != nil {
			return status(err)
		}
	}
	st := a.openHandle(ctx, cred, i, in.Flags, nil, &out.Fh)
	if st.Ok() && in.Flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		// At the open, not the first read: the kernel serves reads of
		// pages it keeps (FOPEN_KEEP_CACHE) without asking.
		a.accessed(ctx, in.NodeId, cred, i)
	}
	if st.Ok() {
		if !a.kernelAttrLeased(i) {
			a.dropKernelAttr(in.NodeId)
		}
		a.setKeepCache(out)
		a.appendOpenFlags(in.Flags, out)
	}
	return st
}

// setKeepCache sets FOPEN_KEEP_CACHE in an open's reply when the kernel's
// pages of the file opened hold the version the island has (keepPages).
func (a *adapter) setKeepCache(out *fuse.OpenOut) {
	if h := a.getHandle(out.Fh); h != nil && a.keepPages(h.of) {
		out.OpenFlags |= fuse.FOPEN_KEEP_CACHE
	}
}

// dropKernelAttr invalidates the kernel's cached attributes of node (not
// its page cache: OPEN without FOPEN_KEEP_CACHE drops that), so that they
// are asked for again (GETATTR, answered from the island) before they are
// used. OPEN fetches fresh attributes (close-to-open) but its reply cannot
// carry them, and the kernel reads only up to the size it has cached,
// asking again only when its copy expires (AttrTTL after the last LOOKUP
// or GETATTR): a file another client grew since then read short, cut at
// the old size (a fault run read 3451 of 5463 acknowledged bytes).
// Invalidating attributes takes no inode lock in the kernel, so it is safe
// from inside a request.
func (a *adapter) dropKernelAttr(node uint64) {
	if a.server == nil || a.cfg.AttrTTL <= 0 {
		return // no kernel, or it caches no attributes
	}
	if st := a.server.InodeNotify(node, -1, 0); !st.Ok() && st != fuse.ENOENT {
		a.log.Debug("fusefs: invalidating cached attributes", "node", fmt.Sprintf("%x", node), "status", st)
	}
}

// openHandle opens ino for a new handle (O_TRUNC truncates).
// openHandle opens a handle on i; created holds the attributes of a file
// this request just created (nil otherwise).
func (a *adapter) openHandle(ctx context.Context, cred metawire.Cred, i uint64, flags uint32, created *metawire.Attr, fh *uint64) fuse.Status {
	of, err := a.acquire(ctx, cred, i, created)
	if err != nil {
		if errors.Is(err, metawire.ErrStale) {
			// Removed by another client: the kernel looks the name up
			// again, which must not find this inode in the cache.
			a.fs.ForgetStale(i)
		}
		return status(err)
	}
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		if f := of.file.Load(); f != nil && f.Size() > 0 {
			err := a.modifyOpen(ctx, of, func() error {
				_, err := a.fs.SetAttr(ctx, metawire.SetAttrReq{Cred: cred, Ino: i, Valid: metawire.SetSize, Size: 0})
				return err
			})
			if err != nil {
				a.release(of)
				return status(err)
			}
		}
	}
	*fh = a.newHandle(&handle{of: of, flags: flags, cred: cred})
	return fuse.OK
}

func (a *adapter) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	ctx, done := a.mutCtx(cancel)
	defer done()
	defer a.dirChanged(in.NodeId)
	cred, dir := a.cred(&in.InHeader), a.ino(in.NodeId)
	mode := in.Mode&metawire.ModePerm | metawire.ModeFile
	r, err := a.fs.Create(ctx, metawire.CreateReq{
		Cred: cred, Dir: dir, Name: name, Mode: mode, Exclusive: in.Flags&syscall.O_EXCL != 0,
	})
	if err != nil {
		return status(err)
	}
	flags := in.Flags
	if r.Existed {
		// Raced with another client's create: an ordinary open.
		if !r.Attr.IsRegular() {
			return status(metawire.ErrExists)
		}
		if cred.UID != 0 {
			if err := a.fs.Access(ctx, cred, r.Attr.Ino, accessMask(flags)); err != nil {
				return status(err)
			}
		}
	} else {
		flags &^= syscall.O_TRUNC
	}
	var created *metawire.Attr
	if !r.Existed {
		created = &r.Attr
	}
	if st := a.openHandle(ctx, cred, r.Attr.Ino, flags, created, &out.Fh); !st.Ok() {
		return st
	}
	a.setKeepCache(&out.OpenOut)
	a.appendOpenFlags(flags, &out.OpenOut)
	at := r.Attr
	if r.Existed {
		if f := a.lookupOpen(at.Ino); f != nil {
			if fl := f.file.Load(); fl != nil {
				at = fl.Attr()
			}
		}
	}
	a.fillEntry(&out.EntryOut, in.NodeId, name, at)
	return fuse.OK
}

func (a *adapter) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	h := a.getHandle(in.Fh)
	if h == nil {
		return nil, fuse.EBADF
	}
	if int64(in.Offset) < 0 {
		return nil, fuse.EINVAL
	}
	if int(in.Size) < len(buf) {
		buf = buf[:in.Size]
	}
	of := h.of
	ctx := reqCtx(cancel, &in.InHeader)
	of.mu.RLock()
	f := of.file.Load()
	data, release, err := f.ReadView(ctx, buf, int64(in.Offset))
	of.mu.RUnlock()
	if err == nil && len(data) < len(buf) && a.staleEnd(ctx, of, f, in.Offset+uint64(len(data))) {
		// The kernel was told a larger size than this File has: another
		// client grew the file since the open. A short read would make
		// the kernel shrink the file (and fault a mapping of it).
		release()
		of.mu.RLock()
		f = of.file.Load()
		data, release, err = f.ReadView(ctx, buf, int64(in.Offset))
		of.mu.RUnlock()
	}
	if err != nil {
		a.ioError("read", of.ino, err)
		if len(data) == 0 {
			release()
			return nil, status(err)
		}
	}
	return &viewResult{data: data, release: release}, fuse.OK
}

// relatimeAge is how old an access time relatime updates anyway.
const relatimeAge = 24 * time.Hour

// accessed updates the access time of file ino, opened for reading by
// cred, as Config.Atime says: at the open, so a file opened to be read
// counts as read. It waits for the island (a stat right after the read
// must see the new time) and drops the kernel's cached attributes; a
// failure (a read-only key, an older island) is only logged: the open
// itself succeeded.
func (a *adapter) accessed(ctx context.Context, node uint64, cred metawire.Cred, ino uint64) {
	mode := a.cfg.Atime
	if mode == "" || mode == AtimeNoatime {
		return
	}
	if mode == AtimeRelatime {
		at, err := a.fs.GetAttr(ctx, cred, ino)
		if err != nil {
			return
		}
		if at.Atime > at.Mtime && at.Atime > at.Ctime && time.Since(time.Unix(0, at.Atime)) < relatimeAge {
			return
		}
	}
	if _, err := a.fs.SetAttr(ctx, metawire.SetAttrReq{Cred: cred, Ino: ino, Valid: metawire.SetAccessed}); err != nil {
		a.log.Debug("fusefs: access time not updated", "ino", fmt.Sprintf("%x", ino), "err", err)
		return
	}
	a.dropKernelAttr(node)
}

// staleEnd reports whether f, of's File, ends at end though the kernel
// was given a larger size for the file (a.told), and if so opens the
// File again (unless it has unflushed writes, or another read did so
// already).
func (a *adapter) staleEnd(ctx context.Context, of *openFile, f *client.File, end uint64) bool {
	told, ok := a.told.size(of.ino)
	if !ok || told <= end || f.Size() >= told || of.dirty() {
		return false
	}
	of.mu.Lock()
	defer of.mu.Unlock()
	if of.file.Load() != f {
		return true // opened again meanwhile
	}
	if of.dirty() {
		return false
	}
	if err := a.reopenLocked(ctx, of); err != nil {
		a.log.Debug("fusefs: reopening a file read short of its size", "ino", fmt.Sprintf("%x", of.ino), "err", err)
		return false
	}
	a.staleReopens.Add(1)
	return true
}

// viewResult is a read reply sent straight from the client's read-ahead
// window (File.ReadView); go-fuse calls Done once the reply is written,
// which lets the window go. Slices makes go-fuse write it with one writev
// after the header, and call Done only after that write: without it,
// go-fuse (v2.12) first tries a splice that sets up a pipe for every
// reply and then gives up on a result that is not a file descriptor, and
// with splice disabled it calls Done before writing.
type viewResult struct {
	data    []byte
	release func()
}

func (r *viewResult) Bytes([]byte) ([]byte, fuse.Status) { return r.data, fuse.OK }
func (r *viewResult) Slices() ([][]byte, fuse.Status)    { return [][]byte{r.data}, fuse.OK }
func (r *viewResult) Size() int                          { return len(r.data) }
func (r *viewResult) Done()                              { r.release() }

func (a *adapter) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	h := a.getHandle(in.Fh)
	if h == nil {
		return 0, fuse.EBADF
	}
	if int64(in.Offset) < 0 {
		return 0, fuse.EINVAL
	}
	if a.killed.Load() {
		return 0, fuse.EIO
	}
	of := h.of
	if err := of.lockCheck(); err != nil {
		a.ioError("write", of.ino, err)
		return 0, status(err)
	}
	if a.appends(h, in.Flags) {
		return a.appendWrite(cancel, h, data)
	}
	of.mu.RLock()
	ctx, done := a.mutCtx(cancel)
	n, err := a.writeAt(ctx, of, of.file.Load(), data, int64(in.Offset))
	done()
	of.mu.RUnlock()
	if err != nil {
		a.ioError("write", of.ino, err)
		if n == 0 {
			return 0, status(err)
		}
	}
	return uint32(n), fuse.OK
}

// writeAt writes data at off into f, of's File (of.mu held shared), and
// with WriteSync makes it durable before returning (n is 0 if that
// fails).
func (a *adapter) writeAt(ctx context.Context, of *openFile, f *client.File, data []byte, off int64) (n int, err error) {
	n, err = f.WriteAt(ctx, data, off)
	// The File's time of the write, which its commit gives the file:
	// the kernel gets the same mtime now as every stat after close.
	if t := f.WroteAt(); t != 0 {
		of.mtime.Store(t)
	} else {
		of.mtime.Store(time.Now().UnixNano())
	}
	// Counted after the File has the data: a flush that read the count
	// before cannot mark this write as committed.
	of.writes.Add(1)
	if err == nil && a.cfg.WriteCache == WriteSync {
		// Durable before write(2) returns: data, commit and create.
		if err = of.flushShared(ctx, true); err != nil {
			n = 0
		}
	}
	return n, err
}

// writeShared is writeAt for a write that must be whole: an error (a
// short write too) is logged and returned.
func (a *adapter) writeShared(ctx context.Context, of *openFile, f *client.File, data []byte, off int64) error {
	n, err := a.writeAt(ctx, of, f, data, off)
	if err == nil && n < len(data) {
		err = fmt.Errorf("fusefs: short write of zeros: %d of %d bytes at %d", n, len(data), off)
	}
	if err != nil {
		a.ioError("fallocate", of.ino, err)
	}
	return err
}

func (a *adapter) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	h := a.getHandle(in.Fh)
	if h == nil {
		return fuse.EBADF
	}
	pending := a.fs.CreatePending(h.of.ino)
	if !h.of.dirty() && !pending {
		// close(2) drops the closing process's POSIX locks on the file.
		return a.closeLocks(cancel, h, in.LockOwner, nil)
	}
	if a.killed.Load() {
		return fuse.EIO
	}
	// Not interruptible: a Go program's runtime signals (preemption)
	// interrupt close(2) all the time, and an interrupted flush would turn
	// into EINTR from close, which must not be retried. The data has to
	// reach the cluster anyway.
	ctx, done := a.mutCtx(cancel)
	defer done()
	err := h.of.flush(ctx, false)
	if err == nil && pending && a.cfg.WriteCache != WritePreborn {
		// A create kept back (with the data the flush handed it) is sent
		// by close, as an unkept one would have been.
		err = a.fs.SendCreate(ctx, h.of.ino)
	}
	a.ioError("fsync", h.of.ino, err)
	return a.closeLocks(cancel, h, in.LockOwner, err)
}

// closeLocks drops owner's POSIX locks on h's file at a close (after
// its write-back, whose error flushErr is answered first).
func (a *adapter) closeLocks(cancel <-chan struct{}, h *handle, owner uint64, flushErr error) fuse.Status {
	if !a.fs.Locked(h.of.ino) || a.killed.Load() {
		return status(flushErr)
	}
	ctx, done := a.mutCtx(cancel)
	defer done()
	if err := a.unlockOwners(ctx, h.of, owner); err != nil && flushErr == nil {
		a.ioError("unlock at close", h.of.ino, err)
		return status(err)
	}
	return status(flushErr)
}

func (a *adapter) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	h := a.getHandle(in.Fh)
	if h == nil {
		return fuse.EBADF
	}
	if a.killed.Load() {
		return fuse.EIO
	}
	// Not interruptible: a Go program's runtime signals (preemption)
	// interrupt close(2) all the time, and an interrupted flush would turn
	// into EINTR from close, which must not be retried. The data has to
	// reach the cluster anyway.
	ctx, done := a.mutCtx(cancel)
	defer done()
	err := h.of.flush(ctx, true)
	a.ioError("fsync", h.of.ino, err)
	return status(err)
}

func (a *adapter) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	if h := a.dropHandle(in.Fh); h != nil {
		a.releaseLocks(h, in)
		a.release(h.of)
	}
}

// releaseLocks drops, at the last close of an open file description,
// the locks of every owner that locked through it (OFD locks belong to
// the description; POSIX owners that used it dropped theirs at their
// close already) and its flock lock, after writing back what they wrote.
func (a *adapter) releaseLocks(h *handle, in *fuse.ReleaseIn) {
	a.mu.Lock()
	owners := make([]uint64, 0, len(h.lockOwners)+1)
	for o := range h.lockOwners {
		owners = append(owners, o)
	}
	a.mu.Unlock()
	if in.ReleaseFlags&fuse.FUSE_RELEASE_FLOCK_UNLOCK != 0 {
		owners = append(owners, in.LockOwner)
	}
	if len(owners) == 0 || !a.fs.Locked(h.of.ino) || a.killed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*a.fs.IslandWait())
	defer cancel()
	if h.of.dirty() {
		if err := h.of.flush(ctx, false); err != nil {
			a.ioError("write-back before unlock", h.of.ino, err)
		}
	}
	if err := a.unlockOwners(ctx, h.of, owners...); err != nil {
		// The island releases them when this mount's session ends.
		a.log.Warn("fusefs: releasing the locks of a closed file", "ino", fmt.Sprintf("%x", h.of.ino), "err", err)
	}
}

// Fallocate modes the kernel passes on (linux/falloc.h).
const (
	fallocKeepSize  = 0x01
	fallocPunchHole = 0x02
	fallocZeroRange = 0x10
)

// fallocZeros is the most zeros one write of Fallocate carries.
const fallocZeros = 1 << 20

// Fallocate: mode 0 (posix_fallocate) grows the file to cover the range,
// which reads as zeros (holes: Atoll allocates on write); KEEP_SIZE alone
// has nothing to allocate. PUNCH_HOLE (with KEEP_SIZE, as Linux requires)
// and ZERO_RANGE make the range read as zeros by writing zeros inside the
// size (the space is not given back); ZERO_RANGE without KEEP_SIZE then
// grows the file as mode 0 does. COLLAPSE_RANGE, INSERT_RANGE and UNSHARE_RANGE
// answer EOPNOTSUPP.
func (a *adapter) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	h := a.getHandle(in.Fh)
	if h == nil {
		return fuse.EBADF
	}
	keep, punch, zero := in.Mode&fallocKeepSize != 0, in.Mode&fallocPunchHole != 0, in.Mode&fallocZeroRange != 0
	if in.Mode&^(fallocKeepSize|fallocPunchHole|fallocZeroRange) != 0 || punch && (!keep || zero) {
		return fuse.Status(syscall.EOPNOTSUPP)
	}
	if !h.writable() {
		return fuse.EBADF
	}
	end := in.Offset + in.Length
	if end < in.Offset || int64(end) < 0 {
		return fuse.Status(syscall.EFBIG)
	}
	if !punch && !zero && keep {
		return fuse.OK
	}
	ctx, done := a.mutCtx(cancel)
	defer done()
	of := h.of
	if punch || zero {
		if err := of.lockCheck(); err != nil {
			a.ioError("fallocate", of.ino, err)
			return status(err)
		}
		// Zeros are written inside the size only: past it the file
		// reads as zeros already, and grows (without KEEP_SIZE) as for
		// mode 0 below, so a large range past the end costs nothing.
		of.mu.RLock()
		f := of.file.Load()
		zend := min(end, f.Size())
		var zeros []byte
		if zend > in.Offset {
			zeros = make([]byte, min(fallocZeros, zend-in.Offset))
		}
		for off := in.Offset; off < zend; off += uint64(len(zeros)) {
			n := min(uint64(len(zeros)), zend-off)
			if err := a.writeShared(ctx, of, f, zeros[:n], int64(off)); err != nil {
				of.mu.RUnlock()
				return status(err)
			}
		}
		of.mu.RUnlock()
		if keep {
			return fuse.OK
		}
	}
	return status(a.modifyOpen(ctx, of, func() error {
		if f := of.file.Load(); f != nil && f.Size() >= end {
			return nil
		}
		_, err := a.fs.SetAttr(ctx, metawire.SetAttrReq{Cred: metawire.Root, Ino: of.ino, Valid: metawire.SetSize, Size: end})
		return err
	}))
}

// ---- directories

func (a *adapter) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	ctx, cred, i := reqCtx(cancel, &in.InHeader), a.cred(&in.InHeader), a.ino(in.NodeId)
	if cred.UID != 0 {
		if err := a.fs.Access(ctx, cred, i, 4); err != nil {
			return status(err)
		}
	}
	ds := &dirStream{ino: i}
	a.mu.Lock()
	a.nextFh++
	out.Fh = a.nextFh
	a.dirs[out.Fh] = ds
	a.mu.Unlock()
	a.cacheListing(ctx, cred, i, ds, out)
	return fuse.OK
}

// dirChanged marks the buffered listings of the open directories among
// nodes stale: called after every change of names through this mount.
func (a *adapter) dirChanged(nodes ...uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ds := range a.dirs {
		for _, n := range nodes {
			if ds.ino == a.ino(n) {
				ds.stale.Store(true)
			}
		}
	}
}

func (a *adapter) ReleaseDir(in *fuse.ReleaseIn) {
	a.mu.Lock()
	delete(a.dirs, in.Fh)
	a.mu.Unlock()
}

// dirStream buffers an open directory's listing. The kernel asks for a
// page (about 25 entries with attributes) at a time; the island is asked
// for dirPage entries and the following requests are served from the
// buffer while their offsets continue where the last one ended and the
// buffer is younger than the attribute timeout.
type dirStream struct {
	ino uint64 // the directory's inode
	// stale is set when this mount changes the directory (dirChanged):
	// the buffer no longer serves, so a process that opened a directory,
	// created in it and read it (Samba's smbd does) sees what it made.
	stale   atomic.Bool
	mu      lockcheck.Mutex
	plus    bool   // the entries carry attributes
	next    uint64 // the offset the buffer continues from
	at      time.Time
	entries []metawire.Dirent
	eof     bool
	valid   bool
}

// dirPage is how many entries one island request fetches for a stream.
const dirPage = 512

func (a *adapter) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	// Namespace changes are durable when they return, except lazy creates
	// of regular files: the directory's island syncs its log.
	ctx, done := a.mutCtx(cancel)
	defer done()
	return status(a.fs.SyncDir(ctx, a.ino(in.NodeId)))
}

func (a *adapter) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return a.readDir(cancel, in, out, false)
}

func (a *adapter) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return a.readDir(cancel, in, out, true)
}

// readDir fills out from the island's listing after cookie in.Offset;
// each entry's offset is its cookie.
func (a *adapter) readDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	a.readdirs.Add(1)
	ctx, cred, dir := reqCtx(cancel, &in.InHeader), a.cred(&in.InHeader), a.ino(in.NodeId)
	cookie := in.Offset
	per := uint32(32) // bytes per entry, roughly
	if plus {
		per = 160
	}
	want := max(in.Size/per, 8)
	var ds *dirStream
	if a.cfg.AttrTTL > 0 { // with no attribute caching, no listing is kept either
		a.mu.Lock()
		ds = a.dirs[in.Fh]
		a.mu.Unlock()
	}
	if ds != nil {
		ds.mu.Lock()
		defer ds.mu.Unlock()
		want = dirPage
	}
	for {
		var ents []metawire.Dirent
		var eof bool
		if ds != nil && ds.valid && !ds.stale.Load() && ds.next == cookie && (ds.plus || !plus) && time.Since(ds.at) < a.cfg.AttrTTL {
			ents, eof = ds.entries, ds.eof
		} else {
			if ds != nil {
				ds.stale.Store(false) // a change from now on marks it again
			}
			resp, err := a.fs.Readdir(ctx, cred, dir, cookie, want, plus)
			if err != nil {
				if cookie != in.Offset {
					return fuse.OK // return what was gathered
				}
				return status(err)
			}
			ents, eof = resp.Entries, resp.EOF
			if ds != nil {
				ds.plus, ds.at = plus, time.Now()
			}
		}
		for k := range ents {
			e := &ents[k]
			de := fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: e.Type, Off: e.Cookie}
			full := false
			if !plus {
				full = !out.AddDirEntry(de)
			} else if eo := out.AddDirLookupEntry(de); eo == nil {
				full = true
			} else if e.HasAttr && e.Name != "." && e.Name != ".." {
				a.fillEntry(eo, in.NodeId, e.Name, e.Attr)
			}
			if full {
				if ds != nil { // the rest waits for the next request
					ds.entries, ds.next, ds.eof, ds.valid = ents[k:], cookie, eof, true
				}
				return fuse.OK
			}
			cookie = e.Cookie
		}
		if ds != nil {
			ds.entries, ds.next, ds.eof, ds.valid = nil, cookie, eof, eof
		}
		if eof || len(ents) == 0 {
			return fuse.OK
		}
	}
}

// ---- file system

func (a *adapter) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	st := StatFS{TotalBytes: 1 << 50, FreeBytes: 1 << 50, Files: 1 << 40, FreeFiles: 1 << 40}
	if a.cfg.StatFS != nil {
		s, err := a.cfg.StatFS(reqCtx(cancel, h))
		if err != nil {
			a.log.Debug("fusefs: statfs", "err", err)
		} else {
			st = s
		}
	}
	out.Bsize, out.Frsize, out.NameLen = blockSize, blockSize, metawire.MaxNameLen
	out.Blocks = st.TotalBytes / blockSize
	out.Bfree = min(st.FreeBytes/blockSize, out.Blocks)
	out.Bavail = out.Bfree
	out.Files, out.Ffree = st.Files, min(st.FreeFiles, st.Files)
	return fuse.OK
}

// maxRangeCopy bounds one COPY_FILE_RANGE (its reply counts in 32 bits;
// the kernel asks again for the rest).
const maxRangeCopy = 1 << 30

// copyChunk is how much a copied (not cloned) part moves at a time.
const copyChunk = 1 << 20

// CopyFileRange serves copy_file_range(2) (and cp --reflink=auto): the
// whole blocks of the range that line up in both files are cloned
// (client.FS.CloneRange: the destination shares the source's block
// pointers, nothing is read or written), the unaligned edges and the
// rest are copied through the two Files.
func (a *adapter) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	src, dst := a.getHandle(in.FhIn), a.getHandle(in.FhOut)
	switch {
	case src == nil || dst == nil:
		return 0, fuse.EBADF
	case !dst.writable() || src.flags&syscall.O_ACCMODE == syscall.O_WRONLY:
		return 0, fuse.EBADF
	case int64(in.OffIn) < 0 || int64(in.OffOut) < 0 || int64(in.Len) < 0:
		return 0, fuse.EINVAL
	case a.killed.Load():
		return 0, fuse.EIO
	}
	if err := dst.of.lockCheck(); err != nil {
		return 0, status(err)
	}
	ctx, done := a.mutCtx(cancel)
	defer done()
	n := min(in.Len, maxRangeCopy)
	srcOff, dstOff := in.OffIn, in.OffOut
	var moved uint64
	copyN := func(k uint64) error {
		buf := make([]byte, min(k, copyChunk))
		for k > 0 {
			src.of.mu.RLock()
			r, err := src.of.file.Load().ReadAt(ctx, buf[:min(k, uint64(len(buf)))], int64(srcOff))
			src.of.mu.RUnlock()
			if err != nil {
				return err
			}
			if r == 0 {
				k = 0 // the source ends here
				break
			}
			dst.of.mu.RLock()
			w, err := a.writeAt(ctx, dst.of, dst.of.file.Load(), buf[:r], int64(dstOff))
			dst.of.mu.RUnlock()
			a.fs.CountCopied(uint64(w))
			moved, srcOff, dstOff, k = moved+uint64(w), srcOff+uint64(w), dstOff+uint64(w), k-uint64(w)
			if err != nil {
				return err
			}
		}
		return nil
	}
	src.of.mu.RLock()
	bs := uint64(src.of.file.Load().Attr().BlockSize)
	src.of.mu.RUnlock()
	if bs > 0 && srcOff%bs == dstOff%bs && n >= 2*bs {
		// The head up to a block boundary is copied, then whole blocks
		// cloned, on committed state: the source's writes flushed, and
		// the destination's inside modifyOpen, which opens its File
		// again afterwards.
		if err := copyN(min((bs-srcOff%bs)%bs, n)); err != nil {
			return a.rangeCopied(moved, in.NodeIdOut, err)
		}
		if err := src.of.flush(ctx, false); err != nil {
			return a.rangeCopied(moved, in.NodeIdOut, err)
		}
		var cloned uint64
		err := a.modifyOpen(ctx, dst.of, func() error {
			var err error
			cloned, err = a.fs.CloneRange(ctx, dst.cred, src.of.ino, srcOff, dst.of.ino, dstOff, n-moved)
			return err
		})
		if err != nil {
			return a.rangeCopied(moved, in.NodeIdOut, err)
		}
		moved, srcOff, dstOff = moved+cloned, srcOff+cloned, dstOff+cloned
	}
	return a.rangeCopied(moved, in.NodeIdOut, copyN(n-moved))
}

// rangeCopied answers a COPY_FILE_RANGE that moved n bytes: an error
// only when nothing moved (the caller retries the rest), and the
// destination's cached attributes dropped either way.
func (a *adapter) rangeCopied(n, node uint64, err error) (uint32, fuse.Status) {
	if n > 0 {
		a.dropKernelAttr(node)
	}
	if err != nil && n == 0 {
		a.ioError("copy_file_range", a.ino(node), err)
		return 0, status(err)
	}
	return uint32(n), fuse.OK
}
