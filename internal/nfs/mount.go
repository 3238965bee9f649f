package nfs

import (
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	pathpkg "path"
)

// MOUNT v3 (RFC 1813 Appendix I).
const (
	mountProcNull    = 0
	mountProcMnt     = 1
	mountProcDump    = 2
	mountProcUmnt    = 3
	mountProcUmntAll = 4
	mountProcExport  = 5

	mnt3OK             = 0
	mnt3ErrPerm        = 1
	mnt3ErrNoEnt       = 2
	mnt3ErrIO          = 5
	mnt3ErrAcces       = 13
	mnt3ErrNotDir      = 20
	mnt3ErrInval       = 22
	mnt3ErrNameTooLong = 63
	mnt3ErrNotSupp     = 10004
	mnt3ErrServerFault = 10006

	mntPathLen = 1024
	mntNameLen = 255
)

var mountProcs = [...]procFunc{
	mountProcNull:    procNull,
	mountProcMnt:     mountMnt,
	mountProcDump:    mountDump,
	mountProcUmnt:    mountUmnt,
	mountProcUmntAll: mountUmntAll,
	mountProcExport:  mountExport,
}

func procNull(c *call) error {
	if c.args.Finish() != nil {
		return errGarbage
	}
	return nil
}

// mountTable is the (advisory) list DUMP reports: who mounted what.
type mountTable struct {
	mu lockcheck.Mutex
	m  map[mountEntry]struct{}
}

type mountEntry struct{ host, dir string }

const maxMountEntries = 4096

func newMountTable() *mountTable { return &mountTable{m: map[mountEntry]struct{}{}} }

func (t *mountTable) add(e mountEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.m) < maxMountEntries {
		t.m[e] = struct{}{}
	}
}

func (t *mountTable) remove(e mountEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, e)
}

func (t *mountTable) removeHost(host string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for e := range t.m {
		if e.host == host {
			delete(t.m, e)
		}
	}
}

func (t *mountTable) list() []mountEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]mountEntry, 0, len(t.m))
	for e := range t.m {
		out = append(out, e)
	}
	return out
}

// host names the caller in the mount table: its address.
func (c *call) host() string { return c.conn.remote.String() }

func mountStatus(err error) uint32 {
	switch statusOf(err) {
	case nfs3ErrNoEnt, nfs3ErrStale:
		return mnt3ErrNoEnt
	case nfs3ErrAcces:
		return mnt3ErrAcces
	case nfs3ErrPerm:
		return mnt3ErrPerm
	case nfs3ErrNotDir:
		return mnt3ErrNotDir
	case nfs3ErrNameTooLong:
		return mnt3ErrNameTooLong
	case nfs3ErrInval:
		return mnt3ErrInval
	case nfs3ErrServerFault:
		return mnt3ErrServerFault
	}
	return mnt3ErrIO
}

// MNT: any directory of the namespace is mountable; the handle is the
// directory's.
func mountMnt(c *call) error {
	path := c.args.String(mntPathLen)
	if c.args.Finish() != nil {
		return errGarbage
	}
	w := c.res
	if !c.conn.allowed {
		w.Uint32(mnt3ErrAcces)
		return nil
	}
	if path == "" {
		path = "/"
	}
	if c.s.rootIno != 0 && pathpkg.Clean("/"+path) != c.s.exp.Path {
		// A confined export mounts its own root only: a path below it
		// could pass through a symlink leading out of it.
		w.Uint32(mnt3ErrAcces)
		return nil
	}
	cred := c.cred()
	a, err := c.s.fs.Resolve(c.ctx, cred, path)
	if err == nil && a.IsSymlink() {
		err = metawire.ErrNotDir // a mount point must be a directory
	}
	if err == nil && !a.IsDir() {
		err = metawire.ErrNotDir
	}
	if err == nil && !mayAccess(&a, &cred, accX) {
		err = metawire.ErrAccess
	}
	if err != nil {
		c.s.log.Debug("nfs: mount refused", "path", path, "remote", c.conn.remote, "err", err)
		w.Uint32(mountStatus(err))
		return nil
	}
	c.s.mnt.add(mountEntry{c.host(), path})
	w.Uint32(mnt3OK)
	w.Opaque(c.s.handleOf(&a))
	w.Uint32(1) // auth flavors
	w.Uint32(authSys)
	return nil
}

func mountDump(c *call) error {
	if c.args.Finish() != nil {
		return errGarbage
	}
	for _, e := range c.s.mnt.list() {
		c.res.Bool(true)
		c.res.String(e.host)
		c.res.String(e.dir)
	}
	c.res.Bool(false)
	return nil
}

func mountUmnt(c *call) error {
	path := c.args.String(mntPathLen)
	if c.args.Finish() != nil {
		return errGarbage
	}
	if path == "" {
		path = "/"
	}
	c.s.mnt.remove(mountEntry{c.host(), path})
	return nil
}

func mountUmntAll(c *call) error {
	if c.args.Finish() != nil {
		return errGarbage
	}
	c.s.mnt.removeHost(c.host())
	return nil
}

// EXPORT lists "/" (every directory below it is mountable too) with the
// allowed client groups (empty: everyone).
func mountExport(c *call) error {
	if c.args.Finish() != nil {
		return errGarbage
	}
	w := c.res
	w.Bool(true)
	w.String("/")
	for _, p := range c.s.exp.Allow {
		w.Bool(true)
		w.String(p.String())
	}
	w.Bool(false) // groups
	w.Bool(false) // exports
	return nil
}
