package fusefs

import (
	"context"
	"fmt"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/atoll-fs/atoll/internal/metawire"
)

// tmpfilePrefix starts the name an O_TMPFILE file has for the moment
// between its create and its unlink.
const tmpfilePrefix = ".atoll-tmpfile-"

// Tmpfile serves open(dir, O_TMPFILE): a regular file with no name,
// which linkat(2) may give one later (unless O_EXCL) and which goes with
// its last close otherwise. The island has no nameless create: the file
// is created under a hidden name, opened (the island holds it for this
// mount), and its name removed, which the island's hold outlives (nlink
// 0, as an unlinked open file). Should the island not take the hold, the
// hidden name stays until the last close removes it, as for an unlinked
// open file (renameAside).
func (a *adapter) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	ctx, done := a.mutCtx(cancel)
	defer done()
	cred, dir := a.cred(&in.InHeader), a.ino(in.NodeId)
	name := fmt.Sprintf("%s%d-%d", tmpfilePrefix, in.Pid, a.silly.Add(1))
	r, err := a.fs.Create(ctx, metawire.CreateReq{
		Cred: cred, Dir: dir, Name: name, Mode: in.Mode&metawire.ModePerm | metawire.ModeFile, Exclusive: true,
	})
	if err != nil {
		return status(err)
	}
	i := r.Attr.Ino
	// The island must know the inode: it holds it, and a link names it.
	if a.fs.CreatePending(i) {
		if err := a.fs.SendCreate(ctx, i); err != nil {
			a.fs.Unlink(ctx, cred, dir, name) //nolint:errcheck // the create failed anyway
			return status(err)
		}
	}
	if st := a.openHandle(ctx, cred, i, in.Flags&^syscall.O_TRUNC, &r.Attr, &out.Fh); !st.Ok() {
		a.fs.Unlink(ctx, cred, dir, name) //nolint:errcheck // answered with the open's error
		return st
	}
	aside := !a.fs.KeepOpen(ctx, i)
	if !aside {
		if err := a.fs.Unlink(ctx, cred, dir, name); err != nil {
			a.log.Warn("fusefs: removing the name of an O_TMPFILE file", "ino", fmt.Sprintf("%x", i), "err", err)
			aside = true
		}
	}
	a.fs.Invalidate(i)
	a.setKeepCache(&out.OpenOut)
	a.appendOpenFlags(in.Flags, &out.OpenOut)
	at := r.Attr
	// No name: the kernel takes the count as told (it does not drop one
	// itself), and refuses linkat of an O_EXCL tmpfile only at 0.
	at.Nlink = 0
	a.fillEntry(&out.EntryOut, in.NodeId, name, at)
	if aside {
		a.mu.Lock()
		a.getHandleLocked(out.Fh).of.orphan = &orphanName{dir: dir, name: name}
		a.mu.Unlock()
	}
	return fuse.OK
}

// adoptTmpfile is called after ino got a name by link: an O_TMPFILE file
// that kept its hidden name (Tmpfile) loses it now, and its last release
// writes it back as any named file's.
func (a *adapter) adoptTmpfile(ctx context.Context, cred metawire.Cred, ino uint64) (adopted bool) {
	a.mu.Lock()
	of := a.files[ino]
	var hidden *orphanName
	if of != nil && of.orphan != nil && strings.HasPrefix(of.orphan.name, tmpfilePrefix) {
		hidden, of.orphan = of.orphan, nil
	}
	a.mu.Unlock()
	if hidden == nil {
		return false
	}
	if err := a.fs.Unlink(ctx, cred, hidden.dir, hidden.name); err != nil {
		a.log.Warn("fusefs: removing the hidden name of a linked O_TMPFILE file", "ino", fmt.Sprintf("%x", ino), "err", err)
		return false
	}
	a.fs.Invalidate(ino)
	return true
}
