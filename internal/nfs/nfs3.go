package nfs

import (
	"errors"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/nfs/xdr"
)

// NFSv3 procedures (RFC 1813 §3.3).
const (
	nfsProcNull        = 0
	nfsProcGetattr     = 1
	nfsProcSetattr     = 2
	nfsProcLookup      = 3
	nfsProcAccess      = 4
	nfsProcReadlink    = 5
	nfsProcRead        = 6
	nfsProcWrite       = 7
	nfsProcCreate      = 8
	nfsProcMkdir       = 9
	nfsProcSymlink     = 10
	nfsProcMknod       = 11
	nfsProcRemove      = 12
	nfsProcRmdir       = 13
	nfsProcRename      = 14
	nfsProcLink        = 15
	nfsProcReaddir     = 16
	nfsProcReaddirplus = 17
	nfsProcFsstat      = 18
	nfsProcFsinfo      = 19
	nfsProcPathconf    = 20
	nfsProcCommit      = 21
)

var nfsProcs = [...]procFunc{
	nfsProcNull:        procNull,
	nfsProcGetattr:     nfsGetattr,
	nfsProcSetattr:     nfsSetattr,
	nfsProcLookup:      nfsLookup,
	nfsProcAccess:      nfsAccess,
	nfsProcReadlink:    nfsReadlink,
	nfsProcRead:        nfsRead,
	nfsProcWrite:       nfsWrite,
	nfsProcCreate:      nfsCreate,
	nfsProcMkdir:       nfsMkdir,
	nfsProcSymlink:     nfsSymlink,
	nfsProcMknod:       nfsMknod,
	nfsProcRemove:      nfsRemove,
	nfsProcRmdir:       nfsRmdir,
	nfsProcRename:      nfsRename,
	nfsProcLink:        nfsLink,
	nfsProcReaddir:     nfsReaddir,
	nfsProcReaddirplus: nfsReaddirplus,
	nfsProcFsstat:      nfsFsstat,
	nfsProcFsinfo:      nfsFsinfo,
	nfsProcPathconf:    nfsPathconf,
	nfsProcCommit:      nfsCommit,
}

// Transfer sizes and limits.
const (
	maxData       = 1 << 20 // rtmax, wtmax, rtpref, wtpref
	dtPref        = 64 << 10
	maxFileSize   = 1 << 50 // what client.File accepts
	maxNameDecode = 4096    // names are checked against 255 after decoding
	maxPathDecode = 8192
)

// stable_how.
const (
	unstable = 0
	dataSync = 1
	fileSync = 2
)

// ACCESS bits.
const (
	access3Read    = 0x01
	access3Lookup  = 0x02
	access3Modify  = 0x04
	access3Extend  = 0x08
	access3Delete  = 0x10
	access3Execute = 0x20
)

// FSINFO properties.
const (
	fsf3Link        = 0x01
	fsf3Symlink     = 0x02
	fsf3Homogeneous = 0x08
	fsf3CanSetTime  = 0x10
)

func (c *call) cred() metawire.Cred { return c.s.exp.cred(&c.hdr) }

func (c *call) readOnly() bool { return c.s.exp.ReadOnly }

// attr returns fresh attributes of f's inode (NFS3ERR_STALE for another
// generation), with the size of writes buffered here.
func (c *call) attr(f fh) (metawire.Attr, error) {
	if f.err != nil {
		return metawire.Attr{}, f.err
	}
	a, err := c.s.fs.GetAttrFresh(c.ctx, c.cred(), f.ino())
	if err != nil {
		return metawire.Attr{}, err
	}
	if a.Gen != f.h.Gen {
		return metawire.Attr{}, metawire.ErrStale
	}
	c.s.files.noteAttr(&a)
	c.s.overlay(&a)
	return a, nil
}

// cachedAttr returns attributes of ino from the client cache (for
// directories' wcc data); nil if they cannot be had.
func (c *call) cachedAttr(ino uint64) *metawire.Attr {
	a, err := c.s.fs.GetAttr(c.ctx, c.cred(), ino)
	if err != nil {
		return nil
	}
	return &a
}

// overlay shows a regular file's size with the writes buffered here.
func (s *Server) overlay(a *metawire.Attr) {
	if !a.IsRegular() {
		return
	}
	s.files.mu.Lock()
	o := s.files.m[a.Ino]
	s.files.mu.Unlock()
	if o == nil || !o.dirty() {
		return
	}
	if o.mu.TryRLock() {
		if o.fh != nil {
			a.Size = max(a.Size, o.fh.Size())
		}
		o.mu.RUnlock()
	}
}

func getName(r *xdr.Reader) string { return r.String(maxNameDecode) }

func checkName(name string) error {
	if len(name) > metawire.MaxNameLen {
		return metawire.ErrNameTooLong
	}
	return nil
}

func done(r *xdr.Reader) error {
	if r.Finish() != nil {
		return errGarbage
	}
	return nil
}

// --- GETATTR ---

func nfsGetattr(c *call) error {
	f := c.s.getFH(c.args)
	if err := done(c.args); err != nil {
		return err
	}
	a, err := c.attr(f)
	if err != nil {
		c.res.Uint32(statusOf(err))
		return nil
	}
	c.res.Uint32(nfs3OK)
	c.s.putFattr(c.res, &a)
	return nil
}

// --- SETATTR ---

func sameTime(a, b int64) bool { return max(a, 0) == max(b, 0) }

func nfsSetattr(c *call) error {
	f := c.s.getFH(c.args)
	sa := getSattr(c.args)
	var guard bool
	var gctime int64
	if guard = c.args.Bool(); guard {
		gctime = getTime(c.args)
	}
	if err := done(c.args); err != nil {
		return err
	}
	w := c.res
	pre, err := c.attr(f)
	if err != nil {
		w.Uint32(statusOf(err))
		c.s.putWcc(w, nil, nil)
		return nil
	}
	switch {
	case c.readOnly():
		err = metawire.ErrReadOnly
	case guard && !sameTime(gctime, pre.Ctime):
		err = errNotSync
	}
	if err != nil {
		w.Uint32(statusOf(err))
		c.s.putWcc(w, &pre, &pre)
		return nil
	}
	post, err := c.setattr(pre, sa, ^uint32(0))
	if err != nil {
		w.Uint32(statusOf(err))
		c.s.putWcc(w, &pre, c.cachedAttr(pre.Ino))
		return nil
	}
	w.Uint32(nfs3OK)
	c.s.putWcc(w, &pre, &post)
	return nil
}

// setattr applies the bits of sa in mask to the inode whose current
// attributes are cur. Buffered writes of a regular file are flushed
// first (and its open File closed, so the next request sees the change).
func (c *call) setattr(cur metawire.Attr, sa sattr, mask uint32) (metawire.Attr, error) {
	req := sa.request(c.cred(), cur.Ino, mask)
	if req.Valid == 0 {
		return cur, nil
	}
	if cur.IsRegular() {
		if err := c.s.files.dropIno(c.ctx, cur.Ino); err != nil {
			return cur, err
		}
	}
	// client.FS.SetAttr also rewrites a block cut by truncation.
	a, err := c.s.fs.SetAttr(c.ctx, req)
	if err != nil {
		return cur, err
	}
	return a, nil
}

// --- LOOKUP ---

func nfsLookup(c *call) error {
	dir := c.s.getFH(c.args)
	name := getName(c.args)
	if err := done(c.args); err != nil {
		return err
	}
	w := c.res
	if dir.err != nil {
		w.Uint32(statusOf(dir.err))
		c.s.putPostAttr(w, nil)
		return nil
	}
	err := checkName(name)
	if name == ".." && c.s.rootIno != 0 && dir.ino() == c.s.rootIno {
		name = "." // a confined export's root is its own parent
	}
	var a metawire.Attr
	if err == nil {
		a, err = c.s.fs.Lookup(c.ctx, c.cred(), dir.ino(), name)
	}
	dirAttr := c.cachedAttr(dir.ino())
	if err == nil && dirAttr != nil && dirAttr.Gen != dir.h.Gen {
		err = metawire.ErrStale
	}
	if err != nil {
		w.Uint32(statusOf(err))
		c.s.putPostAttr(w, dirAttr)
		return nil
	}
	c.s.files.noteAttr(&a)
	c.s.overlay(&a)
	w.Uint32(nfs3OK)
	w.Opaque(c.s.handleOf(&a))
	c.s.putPostAttr(w, &a)
	c.s.putPostAttr(w, dirAttr)
	return nil
}

// --- ACCESS ---

func nfsAccess(c *call) error {
	f := c.s.getFH(c.args)
	want := c.args.Uint32()
	if err := done(c.args); err != nil {
		return err
	}
	w := c.res
	a, err := c.attr(f)
	if err != nil {
		w.Uint32(statusOf(err))
		c.s.putPostAttr(w, nil)
		return nil
	}
	cred := c.cred()
	r, wr, x := mayAccess(&a, &cred, accR), mayAccess(&a, &cred, accW), mayAccess(&a, &cred, accX)
	var got uint32
	if r {
		got |= access3Read
	}
	if a.IsDir() {
		if x {
			got |= access3Lookup
			if wr {
				got |= access3Modify | access3Extend | access3Delete
			}
		}
	} else {
		if wr {
			got |= access3Modify | access3Extend
		}
		if x {
			got |= access3Execute
		}
	}
	if c.readOnly() {
		got &^= access3Modify | access3Extend | access3Delete
	}
	w.Uint32(nfs3OK)
	c.s.putPostAttr(w, &a)
	w.Uint32(got & want)
	return nil
}

// --- READLINK ---

func nfsReadlink(c *call) error {
	f := c.s.getFH(c.args)
	if err := done(c.args); err != nil {
		return err
	}
	w := c.res
	a, err := c.attr(f)
	var target string
	if err == nil && !a.IsSymlink() {
		err = metawire.ErrInvalid
	}
	if err == nil {
		target, err = c.s.fs.Readlink(c.ctx, c.cred(), a.Ino)
	}
	if err != nil {
		w.Uint32(statusOf(err))
		if a.Ino != 0 {
			c.s.putPostAttr(w, &a)
		} else {
			c.s.putPostAttr(w, nil)
		}
		return nil
	}
	w.Uint32(nfs3OK)
	c.s.putPostAttr(w, &a)
	w.String(target)
	return nil
}

// --- READ ---

// openRegular opens f's file for I/O (lock held shared on success).
func (c *call) openRegular(f fh) (*openFile, metawire.Attr, error) {
	if f.err != nil {
		return nil, metawire.Attr{}, f.err
	}
	o, err := c.s.files.acquire(c.ctx, c.cred(), f.ino())
	if err != nil {
		return nil, metawire.Attr{}, err
	}
	a := o.fh.Attr()
	if a.Gen != f.h.Gen {
		o.mu.RUnlock()
		return nil, metawire.Attr{}, metawire.ErrStale
	}
	return o, a, nil
}

func nfsRead(c *call) error {
	f := c.s.getFH(c.args)
	off := c.args.Uint64()
	count := c.args.Uint32()
	if err := done(c.args); err != nil {
		return err
	}
	w := c.res
	start := w.Len()
	o, a, err := c.openRegular(f)
	if err == nil {
		cred := c.cred()
		// The owner may always read (as knfsd allows), and so may anyone
		// who may execute the file (a client needs to page it in).
		if cred.UID != a.UID && !mayAccess(&a, &cred, accR) && !mayAccess(&a, &cred, accX) {
			o.mu.RUnlock()
			err = metawire.ErrAccess
		}
	}
	if err != nil {
		w.Uint32(statusOf(err))
		c.s.putPostAttr(w, nil)
		return nil
	}
	defer o.mu.RUnlock()
	n := int(min(count, maxData))
	if off >= a.Size {
		n = 0
	} else {
		n = int(min(uint64(n), a.Size-off))
	}
	w.Uint32(nfs3OK)
	c.s.putPostAttr(w, &a)
	countAt := w.Len()
	w.Uint32(0) // count
	w.Uint32(0) // eof
	w.Uint32(0) // data length
	buf := w.Grow(n)
	got, err := o.fh.ReadAt(c.ctx, buf, int64(off))
	if err != nil {
		w.Truncate(start)
		w.Uint32(statusOf(err))
		c.s.putPostAttr(w, &a)
		return nil
	}
	w.Truncate(countAt + 12 + got)
	w.B = append(w.B, make([]byte, (4-got%4)%4)...) // padding
	eof := off+uint64(got) >= o.fh.Size()
	w.PutUint32(countAt, uint32(got))
	if eof {
		w.PutUint32(countAt+4, 1)
	}
	w.PutUint32(countAt+8, uint32(got))
	return nil
}

// --- WRITE ---

func nfsWrite(c *call) error {
	f := c.s.getFH(c.args)
	off := c.args.Uint64()
	count := c.args.Uint32()
	stable := c.args.Uint32()
	data := c.args.Opaque(maxData)
	if err := done(c.args); err != nil || stable > fileSync {
		return errGarbage
	}
	w := c.res
	var err error
	switch {
	case c.readOnly():
		err = metawire.ErrReadOnly
	case int(count) > len(data):
		err = metawire.ErrInvalid
	case off+uint64(count) > maxFileSize || off+uint64(count) < off:
		err = metawire.ErrFileTooBig
	}
	if f.err != nil {
		err = f.err
	}
	if err != nil {
		w.Uint32(statusOf(err))
		c.s.putWcc(w, nil, nil)
		return nil
	}
	data = data[:count]
	o, pre, err := c.openRegular(f)
	if err == nil {
		cred := c.cred()
		// The owner may always write (a file created read-only by an
		// open(O_CREAT) may still be written through that open).
		if cred.UID != pre.UID && !mayAccess(&pre, &cred, accW) {
			o.mu.RUnlock()
			err = metawire.ErrAccess
		}
	}
	if err != nil {
		w.Uint32(statusOf(err))
		c.s.putWcc(w, nil, nil)
		return nil
	}
	defer o.mu.RUnlock()
	var n int
	if len(data) > 0 { // a WRITE of nothing changes nothing, not even the size
		n, err = o.fh.WriteAt(c.ctx, data, int64(off))
	}
	if n > 0 {
		c.s.files.wrote(o, n)
	}
	committed := uint32(unstable)
	if err == nil && (stable != unstable || c.s.files.pending.Load() > c.s.cfg.MaxDirtyBytes) {
		err = c.s.files.flush(c.ctx, o)
		committed = fileSync
	}
	post := o.fh.Attr()
	if err != nil {
		w.Uint32(statusOf(err))
		c.s.putWcc(w, &pre, &post)
		return nil
	}
	w.Uint32(nfs3OK)
	c.s.putWcc(w, &pre, &post)
	w.Uint32(uint32(n))
	w.Uint32(committed)
	w.Fixed(c.s.verf[:])
	return nil
}

// --- CREATE, MKDIR, SYMLINK, MKNOD ---

const (
	createUnchecked = 0
	createGuarded   = 1
	createExclusive = 2
)

// exclusiveVerf0 stands for a zero createverf3 (0 means "none" to islands).
const exclusiveVerf0 = 0x8000_0000_0000_0001

// created answers a successful CREATE, MKDIR, SYMLINK or MKNOD.
func (c *call) created(obj *metawire.Attr, pre, post *metawire.Attr) {
	w := c.res
	w.Uint32(nfs3OK)
	c.s.putPostFH(w, obj)
	c.s.putPostAttr(w, obj)
	c.s.putWcc(w, pre, post)
}

// createFailed answers a failed CREATE, MKDIR, SYMLINK or MKNOD.
func (c *call) createFailed(err error, dir fh, pre *metawire.Attr) {
	c.res.Uint32(statusOf(err))
	var post *metawire.Attr
	if dir.err == nil && pre != nil {
		post = c.cachedAttr(dir.ino())
	}
	c.s.putWcc(c.res, pre, post)
}

// createPre checks what every create checks and returns the directory's
// attributes before the change.
func (c *call) createPre(dir fh, name string) (*metawire.Attr, error) {
	if dir.err != nil {
		return nil, dir.err
	}
	pre := c.cachedAttr(dir.ino())
	if pre != nil && pre.Gen != dir.h.Gen {
		return nil, metawire.ErrStale
	}
	if c.readOnly() {
		return pre, metawire.ErrReadOnly
	}
	return pre, checkName(name)
}

// withoutMode: attributes applied after creation (the mode is given at
// creation).
const withoutMode = ^metawire.SetMode

// finishCreate applies the attributes the island did not set at
// creation, skipping what already holds.
func (c *call) finishCreate(obj metawire.Attr, sa sattr, mask uint32) (metawire.Attr, error) {
	if sa.valid&metawire.SetUID != 0 && sa.uid == obj.UID {
		mask &^= metawire.SetUID
	}
	if sa.valid&metawire.SetGID != 0 && sa.gid == obj.GID {
		mask &^= metawire.SetGID
	}
	if sa.valid&metawire.SetSize != 0 && sa.size == obj.Size {
		mask &^= metawire.SetSize
	}
	return c.setattr(obj, sa, mask)
}

func nfsCreate(c *call) error {
	dir := c.s.getFH(c.args)
	name := getName(c.args)
	how := c.args.Uint32()
	var sa sattr
	var verf uint64
	switch how {
	case createUnchecked, createGuarded:
		sa = getSattr(c.args)
	case createExclusive:
		verf = c.args.Uint64() // createverf3: 8 opaque bytes
	default:
		c.args.Fail(xdr.ErrGarbage)
	}
	if err := done(c.args); err != nil {
		return err
	}
	pre, err := c.createPre(dir, name)
	if err != nil {
		c.createFailed(err, dir, pre)
		return nil
	}
	req := metawire.CreateReq{Cred: c.cred(), Dir: dir.ino(), Name: name, Mode: metawire.ModeFile | 0o644}
	if sa.valid&metawire.SetMode != 0 {
		req.Mode = metawire.ModeFile | sa.mode
	}
	switch how {
	case createGuarded:
		req.Exclusive = true
	case createExclusive:
		// The client sets the attributes with a SETATTR afterwards.
		req.Exclusive, req.Verf, req.Mode = true, verf, metawire.ModeFile|0o600
		if req.Verf == 0 {
			req.Verf = exclusiveVerf0
		}
	}
	resp, err := c.s.fs.Create(c.ctx, req)
	if err != nil {
		c.createFailed(err, dir, pre)
		return nil
	}
	obj := resp.Attr
	if how != createExclusive {
		mask := uint32(withoutMode)
		if resp.Existed && !obj.IsRegular() {
			mask &^= metawire.SetSize
		}
		if obj, err = c.finishCreate(obj, sa, mask); err != nil {
			c.createFailed(err, dir, pre)
			return nil
		}
	}
	c.s.overlay(&obj)
	post := &resp.DirAttr
	if post.Ino == 0 {
		post = c.cachedAttr(dir.ino())
	}
	c.created(&obj, pre, post)
	return nil
}

func nfsMkdir(c *call) error {
	dir := c.s.getFH(c.args)
	name := getName(c.args)
	sa := getSattr(c.args)
	if err := done(c.args); err != nil {
		return err
	}
	pre, err := c.createPre(dir, name)
	if err != nil {
		c.createFailed(err, dir, pre)
		return nil
	}
	req := metawire.CreateReq{Cred: c.cred(), Dir: dir.ino(), Name: name, Mode: 0o755}
	if sa.valid&metawire.SetMode != 0 {
		req.Mode = sa.mode
	}
	resp, err := c.s.fs.Mkdir(c.ctx, req)
	if err != nil {
		c.createFailed(err, dir, pre)
		return nil
	}
	obj, err := c.finishCreate(resp.Attr, sa, withoutMode&^metawire.SetSize)
	if err != nil {
		c.createFailed(err, dir, pre)
		return nil
	}
	c.created(&obj, pre, &resp.DirAttr)
	return nil
}

func nfsSymlink(c *call) error {
	dir := c.s.getFH(c.args)
	name := getName(c.args)
	sa := getSattr(c.args)
	target := c.args.String(maxPathDecode)
	if err := done(c.args); err != nil {
		return err
	}
	pre, err := c.createPre(dir, name)
	if err != nil {
		c.createFailed(err, dir, pre)
		return nil
	}
	resp, err := c.s.fs.Symlink(c.ctx, metawire.CreateReq{Cred: c.cred(), Dir: dir.ino(), Name: name, Target: target})
	if err != nil {
		c.createFailed(err, dir, pre)
		return nil
	}
	// A symlink's mode is always 0777; owner and times may be set.
	obj, err := c.finishCreate(resp.Attr, sa, withoutMode&^metawire.SetSize)
	if err != nil {
		c.createFailed(err, dir, pre)
		return nil
	}
	c.created(&obj, pre, &resp.DirAttr)
	return nil
}

func nfsMknod(c *call) error {
	dir := c.s.getFH(c.args)
	name := getName(c.args)
	typ := c.args.Uint32()
	var sa sattr
	var major, minor uint32
	switch typ {
	case nf3Chr, nf3Blk:
		sa = getSattr(c.args)
		major, minor = c.args.Uint32(), c.args.Uint32()
	case nf3Sock, nf3FIFO:
		sa = getSattr(c.args)
	}
	if err := done(c.args); err != nil {
		return err
	}
	pre, err := c.createPre(dir, name)
	if err == nil {
		switch typ {
		case nf3Chr, nf3Blk, nf3Sock, nf3FIFO:
		default:
			err = errBadType
		}
	}
	if err != nil {
		c.createFailed(err, dir, pre)
		return nil
	}
	mode := uint32(0o644)
	if sa.valid&metawire.SetMode != 0 {
		mode = sa.mode
	}
	req := metawire.CreateReq{Cred: c.cred(), Dir: dir.ino(), Name: name, Exclusive: true}
	switch typ {
	case nf3Chr:
		req.Mode, req.Rdev = metawire.ModeChar|mode, makedev(major, minor)
	case nf3Blk:
		req.Mode, req.Rdev = metawire.ModeBlock|mode, makedev(major, minor)
	case nf3Sock:
		req.Mode = metawire.ModeSock | mode
	case nf3FIFO:
		req.Mode = metawire.ModeFIFO | mode
	}
	resp, err := c.s.fs.Create(c.ctx, req)
	if err != nil {
		c.createFailed(err, dir, pre)
		return nil
	}
	obj, err := c.finishCreate(resp.Attr, sa, withoutMode&^metawire.SetSize)
	if err != nil {
		c.createFailed(err, dir, pre)
		return nil
	}
	c.created(&obj, pre, &resp.DirAttr)
	return nil
}

// --- REMOVE, RMDIR ---

func nfsRemove(c *call) error { return remove(c, false) }
func nfsRmdir(c *call) error  { return remove(c, true) }

func remove(c *call, dirOnly bool) error {
	dir := c.s.getFH(c.args)
	name := getName(c.args)
	if err := done(c.args); err != nil {
		return err
	}
	w := c.res
	pre, err := c.createPre(dir, name)
	if err == nil {
		if dirOnly {
			err = c.s.fs.Rmdir(c.ctx, c.cred(), dir.ino(), name)
		} else {
			err = c.s.fs.Unlink(c.ctx, c.cred(), dir.ino(), name)
		}
	}
	var post *metawire.Attr
	if dir.err == nil {
		post = c.cachedAttr(dir.ino())
	}
	w.Uint32(statusOf(err))
	c.s.putWcc(w, pre, post)
	return nil
}

// --- RENAME ---

func nfsRename(c *call) error {
	from := c.s.getFH(c.args)
	fromName := getName(c.args)
	to := c.s.getFH(c.args)
	toName := getName(c.args)
	if err := done(c.args); err != nil {
		return err
	}
	w := c.res
	fromPre, err := c.createPre(from, fromName)
	var toPre *metawire.Attr
	if err == nil {
		toPre, err = c.createPre(to, toName)
	}
	if err == nil {
		err = c.s.fs.Rename(c.ctx, metawire.RenameReq{Cred: c.cred(), SrcDir: from.ino(), SrcName: fromName, DstDir: to.ino(), DstName: toName})
	}
	var fromPost, toPost *metawire.Attr
	if from.err == nil {
		fromPost = c.cachedAttr(from.ino())
	}
	if to.err == nil {
		toPost = c.cachedAttr(to.ino())
	}
	w.Uint32(statusOf(err))
	c.s.putWcc(w, fromPre, fromPost)
	c.s.putWcc(w, toPre, toPost)
	return nil
}

// --- LINK ---

func nfsLink(c *call) error {
	file := c.s.getFH(c.args)
	dir := c.s.getFH(c.args)
	name := getName(c.args)
	if err := done(c.args); err != nil {
		return err
	}
	w := c.res
	pre, err := c.createPre(dir, name)
	var a metawire.Attr
	if err == nil && file.err != nil {
		err = file.err
	}
	if err == nil {
		a, err = c.s.fs.Link(c.ctx, metawire.LinkReq{Cred: c.cred(), Ino: file.ino(), Dir: dir.ino(), Name: name})
	}
	var post *metawire.Attr
	if dir.err == nil {
		post = c.cachedAttr(dir.ino())
	}
	w.Uint32(statusOf(err))
	if err == nil {
		c.s.overlay(&a)
		c.s.putPostAttr(w, &a)
	} else {
		c.s.putPostAttr(w, nil)
	}
	c.s.putWcc(w, pre, post)
	return nil
}

// --- READDIR, READDIRPLUS ---

func nfsReaddir(c *call) error     { return readdir(c, false) }
func nfsReaddirplus(c *call) error { return readdir(c, true) }

// cookieVerf is a directory's cookie verifier: its modification time.
// Island cookies never move, but the verifier tells a client that the
// directory changed since it started listing.
func cookieVerf(a *metawire.Attr) uint64 { return uint64(a.Mtime) }

func pad4(n int) int { return (n + 3) &^ 3 }

const (
	fattrSize   = 84
	maxEntries  = 4096
	entryFixed  = 4 + 8 + 4 + 8              // value follows, fileid, name length, cookie
	entryPlusEx = 4 + fattrSize + 4 + 4 + 20 // attributes and handle
)

func readdir(c *call, plus bool) error {
	f := c.s.getFH(c.args)
	cookie := c.args.Uint64()
	verf := c.args.Uint64() // cookieverf3: 8 opaque bytes
	var maxcount uint32
	if plus {
		c.args.Uint32() // dircount: a hint, as in knfsd; maxcount bounds the reply
	}
	maxcount = c.args.Uint32()
	if err := done(c.args); err != nil {
		return err
	}
	w := c.res
	start := w.Len()
	if f.err != nil {
		w.Uint32(statusOf(f.err))
		c.s.putPostAttr(w, nil)
		return nil
	}
	per := entryFixed + 12
	if plus {
		per += entryPlusEx
	}
	want := min(int(maxcount)/per+1, maxEntries)
	resp, err := c.s.fs.Readdir(c.ctx, c.cred(), f.ino(), cookie, uint32(want), plus)
	if err == nil && resp.DirAttr.Gen != f.h.Gen {
		err = metawire.ErrStale
	}
	if err == nil && cookie != 0 && verf != 0 && verf != cookieVerf(&resp.DirAttr) {
		err = errBadCookie
	}
	if err != nil {
		w.Uint32(statusOf(err))
		if resp.DirAttr.Ino != 0 && !errors.Is(err, metawire.ErrStale) {
			c.s.putPostAttr(w, &resp.DirAttr)
		} else {
			c.s.putPostAttr(w, nil)
		}
		return nil
	}
	dirAttr := resp.DirAttr
	w.Uint32(nfs3OK)
	c.s.putPostAttr(w, &dirAttr)
	w.Uint64(cookieVerf(&dirAttr))
	limit := start + int(maxcount) - 8 // the list terminator and eof
	n := 0
	truncated := false
	for i := range resp.Entries {
		e := &resp.Entries[i]
		size := entryFixed + pad4(len(e.Name))
		var ea *metawire.Attr
		if plus {
			switch {
			case e.Name == ".":
				ea = &dirAttr
			case e.Name == ".." && c.s.rootIno != 0 && dirAttr.Ino == c.s.rootIno:
				ea = &dirAttr // a confined export's root is its own parent
			case e.Name == "..":
				ea = c.cachedAttr(e.Ino)
			case e.HasAttr:
				ea = &e.Attr
				c.s.overlay(ea)
			}
			size += 8
			if ea != nil {
				size += fattrSize + 4 + c.s.handleLen()
			}
		}
		if w.Len()+size > limit {
			truncated = true
			break
		}
		w.Bool(true)
		w.Uint64(e.Ino)
		w.String(e.Name)
		w.Uint64(e.Cookie)
		if plus {
			c.s.putPostAttr(w, ea)
			c.s.putPostFH(w, ea)
		}
		n++
	}
	if n == 0 && truncated {
		w.Truncate(start)
		w.Uint32(nfs3ErrTooSmall)
		c.s.putPostAttr(w, &dirAttr)
		return nil
	}
	w.Bool(false)
	w.Bool(!truncated && resp.EOF)
	return nil
}

// --- FSSTAT, FSINFO, PATHCONF ---

func nfsFsstat(c *call) error {
	f := c.s.getFH(c.args)
	if err := done(c.args); err != nil {
		return err
	}
	w := c.res
	a, err := c.attr(f)
	st := FSStat{TotalBytes: 1 << 50, FreeBytes: 1 << 50, TotalFiles: 1 << 40, FreeFiles: 1 << 40}
	if err == nil && c.s.cfg.StatFS != nil {
		st, err = c.s.cfg.StatFS(c.ctx)
	}
	if err != nil {
		w.Uint32(statusOf(err))
		if a.Ino != 0 {
			c.s.putPostAttr(w, &a)
		} else {
			c.s.putPostAttr(w, nil)
		}
		return nil
	}
	w.Uint32(nfs3OK)
	c.s.putPostAttr(w, &a)
	w.Uint64(st.TotalBytes)
	w.Uint64(st.FreeBytes)
	w.Uint64(st.FreeBytes) // available to the caller
	w.Uint64(st.TotalFiles)
	w.Uint64(st.FreeFiles)
	w.Uint64(st.FreeFiles)
	w.Uint32(0) // invarsec: may change at any time
	return nil
}

func nfsFsinfo(c *call) error {
	f := c.s.getFH(c.args)
	if err := done(c.args); err != nil {
		return err
	}
	w := c.res
	a, err := c.attr(f)
	if err != nil {
		w.Uint32(statusOf(err))
		c.s.putPostAttr(w, nil)
		return nil
	}
	w.Uint32(nfs3OK)
	c.s.putPostAttr(w, &a)
	w.Uint32(maxData) // rtmax
	w.Uint32(maxData) // rtpref
	w.Uint32(4096)    // rtmult
	w.Uint32(maxData) // wtmax
	w.Uint32(maxData) // wtpref
	w.Uint32(4096)    // wtmult
	w.Uint32(dtPref)  // dtpref
	w.Uint64(maxFileSize)
	w.Uint32(0) // time_delta: 1 ns
	w.Uint32(1)
	w.Uint32(fsf3Link | fsf3Symlink | fsf3Homogeneous | fsf3CanSetTime)
	return nil
}

func nfsPathconf(c *call) error {
	f := c.s.getFH(c.args)
	if err := done(c.args); err != nil {
		return err
	}
	w := c.res
	a, err := c.attr(f)
	if err != nil {
		w.Uint32(statusOf(err))
		c.s.putPostAttr(w, nil)
		return nil
	}
	w.Uint32(nfs3OK)
	c.s.putPostAttr(w, &a)
	w.Uint32(metawire.MaxLinks)   // linkmax
	w.Uint32(metawire.MaxNameLen) // name_max
	w.Bool(true)                  // no_trunc
	w.Bool(true)                  // chown_restricted
	w.Bool(false)                 // case_insensitive
	w.Bool(true)                  // case_preserving
	return nil
}

// --- COMMIT ---

func nfsCommit(c *call) error {
	f := c.s.getFH(c.args)
	c.args.Uint64() // offset and count: the whole file is flushed
	c.args.Uint32()
	if err := done(c.args); err != nil {
		return err
	}
	w := c.res
	if f.err != nil {
		w.Uint32(statusOf(f.err))
		c.s.putWcc(w, nil, nil)
		return nil
	}
	if o := c.s.files.peek(f.ino()); o != nil {
		pre := o.fh.Attr()
		err := c.s.files.flush(c.ctx, o)
		post := o.fh.Attr()
		o.mu.RUnlock()
		if err == nil && pre.Gen != f.h.Gen {
			err = metawire.ErrStale
		}
		if err != nil {
			w.Uint32(statusOf(err))
			c.s.putWcc(w, &pre, &post)
			return nil
		}
		w.Uint32(nfs3OK)
		c.s.putWcc(w, &pre, &post)
		w.Fixed(c.s.verf[:])
		return nil
	}
	// Nothing buffered here: whatever this gateway acknowledged is durable.
	a, err := c.attr(f)
	if err != nil {
		w.Uint32(statusOf(err))
		c.s.putWcc(w, nil, nil)
		return nil
	}
	w.Uint32(nfs3OK)
	c.s.putWcc(w, &a, &a)
	w.Fixed(c.s.verf[:])
	return nil
}
