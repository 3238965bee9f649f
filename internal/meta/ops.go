package meta

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// retry runs f until it succeeds or fails with something other than a
// conflict (ErrBusy) or a stale map, pacing attempts with jittered
// backoff. Each attempt re-reads everything it decides on.
func (i *Island) retry(ctx context.Context, f func() error) error {
	backoff := time.Millisecond
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || attempt >= i.timing.maxAttempts || ctx.Err() != nil ||
			!(errors.Is(err, metawire.ErrBusy) || errors.Is(err, metawire.ErrStaleEpoch)) {
			return err
		}
		d := backoff + time.Duration(rand.Int64N(int64(backoff)))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return err
		}
		backoff = min(2*backoff, 64*time.Millisecond)
	}
}

// localInode reads inode ino of this island, waiting while an undecided
// transaction holds it; a missing inode is ErrStale.
func (i *Island) localInode(ctx context.Context, ino namespace.Ino) (*inode, error) {
	if err := i.locks.waitReadable(ctx, ino, i.timing.readWait); err != nil {
		return nil, err
	}
	n, err := readInode(i.db, ino)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, fmt.Errorf("inode %v: %w", ino, metawire.ErrStale)
	}
	return n, nil
}

// attrOf returns the attributes of any inode: read here or asked of its
// island.
func (i *Island) attrOf(ctx context.Context, ino namespace.Ino) (metawire.Attr, error) {
	if !ino.Valid() {
		return metawire.Attr{}, fmt.Errorf("inode %v: %w", ino, metawire.ErrStale)
	}
	if i.owns(ino) {
		n, err := i.localInode(ctx, ino)
		if err != nil {
			return metawire.Attr{}, err
		}
		return n.attr(), nil
	}
	var resp metawire.AttrResp
	_, err := i.call(ctx, i.islandOf(ino), metawire.OpGetAttr, &metawire.InoReq{Cred: metawire.Root, Ino: uint64(ino)}, &resp)
	return resp.Attr, err
}

// entryOf returns entry name of directory dir (any island).
func (i *Island) entryOf(ctx context.Context, dir namespace.Ino, name string) (dirent, bool, error) {
	if i.owns(dir) {
		if err := i.locks.waitReadable(ctx, dir, i.timing.readWait); err != nil {
			return dirent{}, false, err
		}
		return readDirent(i.db, dir, name)
	}
	var resp metawire.AttrResp
	_, err := i.call(ctx, i.islandOf(dir), metawire.OpLookup, &metawire.NameReq{Cred: metawire.Root, Dir: uint64(dir), Name: name}, &resp)
	switch {
	case errors.Is(err, metawire.ErrNotFound):
		return dirent{}, false, nil
	case errors.Is(err, metawire.ErrStale):
		// The entry points at an inode being removed concurrently.
		return dirent{}, false, conflict("entry %q of %v: %v", name, dir, err)
	case err != nil:
		return dirent{}, false, err
	}
	return dirent{ino: namespace.Ino(resp.Attr.Ino), typ: resp.Attr.Mode & metawire.ModeType}, true, nil
}

// parentOf returns the parent of directory dir (any island).
func (i *Island) parentOf(ctx context.Context, dir namespace.Ino) (namespace.Ino, error) {
	if i.owns(dir) {
		n, err := i.localInode(ctx, dir)
		if err != nil {
			return 0, err
		}
		return n.parent, nil
	}
	var resp metawire.AttrResp
	_, err := i.call(ctx, i.islandOf(dir), metawire.OpLookup, &metawire.NameReq{Cred: metawire.Root, Dir: uint64(dir), Name: ".."}, &resp)
	return namespace.Ino(resp.Attr.Ino), err
}

// checkName validates an entry name for creation and lookup.
func checkName(name string) error {
	switch {
	case name == "" || strings.IndexByte(name, '/') >= 0 || strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("name %.64q: %w", name, metawire.ErrInvalid)
	case len(name) > metawire.MaxNameLen:
		return fmt.Errorf("name of %d bytes: %w", len(name), metawire.ErrNameTooLong)
	}
	return nil
}

func isDots(name string) bool { return name == "." || name == ".." }

// dirFor reads directory ino of this island and checks search permission.
func (i *Island) dirFor(ctx context.Context, ino namespace.Ino, c *metawire.Cred) (*inode, metawire.Attr, error) {
	n, err := i.localInode(ctx, ino)
	if err != nil {
		return nil, metawire.Attr{}, err
	}
	a := n.attr()
	if !n.isDir() {
		return nil, a, fmt.Errorf("%v: %w", ino, metawire.ErrNotDir)
	}
	if !mayAccess(&a, c, accX) {
		return nil, a, fmt.Errorf("search %v: %w", ino, metawire.ErrAccess)
	}
	return n, a, nil
}

func (i *Island) lookup(ctx context.Context, r *metawire.NameReq) (*metawire.AttrResp, error) {
	dir := namespace.Ino(r.Dir)
	if err := i.checkIno("lookup", dir); err != nil {
		return nil, err
	}
	n, a, err := i.dirFor(ctx, dir, &r.Cred)
	if err != nil {
		return nil, fmt.Errorf("lookup %q: %w", r.Name, err)
	}
	var target namespace.Ino
	switch r.Name {
	case ".":
		return &metawire.AttrResp{Attr: a}, nil
	case "..":
		target = n.parent
	default:
		if err := checkName(r.Name); err != nil {
			return nil, fmt.Errorf("lookup: %w", err)
		}
		de, ok, err := readDirent(i.db, dir, r.Name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("lookup %q in %v: %w", r.Name, dir, metawire.ErrNotFound)
		}
		target = de.ino
	}
	ta, err := i.attrOf(ctx, target)
	if err != nil {
		return nil, fmt.Errorf("lookup %q in %v: %w", r.Name, dir, err)
	}
	return &metawire.AttrResp{Attr: ta}, nil
}

func (i *Island) getAttr(ctx context.Context, r *metawire.InoReq) (*metawire.AttrResp, error) {
	ino := namespace.Ino(r.Ino)
	if err := i.checkIno("getattr", ino); err != nil {
		return nil, err
	}
	n, err := i.localInode(ctx, ino)
	if err != nil {
		return nil, fmt.Errorf("getattr: %w", err)
	}
	return &metawire.AttrResp{Attr: n.attr()}, nil
}

func (i *Island) readlink(ctx context.Context, r *metawire.InoReq) (*metawire.ReadlinkResp, error) {
	ino := namespace.Ino(r.Ino)
	if err := i.checkIno("readlink", ino); err != nil {
		return nil, err
	}
	n, err := i.localInode(ctx, ino)
	if err != nil {
		return nil, fmt.Errorf("readlink: %w", err)
	}
	if !n.isLink() {
		return nil, fmt.Errorf("readlink %v: not a symbolic link: %w", ino, metawire.ErrInvalid)
	}
	return &metawire.ReadlinkResp{Target: n.target}, nil
}

func (i *Island) access(ctx context.Context, r *metawire.AccessReq) error {
	ino := namespace.Ino(r.Ino)
	if err := i.checkIno("access", ino); err != nil {
		return err
	}
	if r.Mask&^7 != 0 {
		return fmt.Errorf("access %v: mask %#o: %w", ino, r.Mask, metawire.ErrInvalid)
	}
	n, err := i.localInode(ctx, ino)
	if err != nil {
		return fmt.Errorf("access: %w", err)
	}
	a := n.attr()
	if !mayAccess(&a, &r.Cred, r.Mask) {
		return fmt.Errorf("access %v mask %o: %w", ino, r.Mask, metawire.ErrAccess)
	}
	return nil
}

// create serves OpCreate, OpMkdir and OpSymlink.
func (i *Island) create(ctx context.Context, op uint16, r *metawire.CreateReq) (*metawire.CreateResp, error) {
	dir := namespace.Ino(r.Dir)
	opName := map[uint16]string{metawire.OpCreate: "create", metawire.OpMkdir: "mkdir", metawire.OpSymlink: "symlink"}[op]
	if err := i.checkIno(opName, dir); err != nil {
		return nil, err
	}
	var resp *metawire.CreateResp
	err := i.retry(ctx, func() error {
		var err error
		resp, err = i.createOnce(ctx, op, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s %q in %v: %w", opName, r.Name, dir, err)
	}
	resp.Boot = i.boot
	return resp, nil
}

func (i *Island) createOnce(ctx context.Context, op uint16, r *metawire.CreateReq) (*metawire.CreateResp, error) {
	dirIno := namespace.Ino(r.Dir)
	c := &r.Cred
	dir, dirAttr, err := i.dirFor(ctx, dirIno, c)
	if err != nil {
		return nil, err
	}
	if isDots(r.Name) {
		if op == metawire.OpCreate && !r.Exclusive {
			return nil, metawire.ErrIsDir
		}
		return nil, metawire.ErrExists
	}
	if err := checkName(r.Name); err != nil {
		return nil, err
	}
	if r.Set.Valid&^metawire.CreateSettable != 0 || r.Set.Valid != 0 && op != metawire.OpCreate {
		return nil, fmt.Errorf("changes %#x with a create: %w", r.Set.Valid, metawire.ErrInvalid)
	}
	if len(r.Data) > 0 {
		switch {
		case op != metawire.OpCreate || r.Mode&metawire.ModeType != metawire.ModeFile && r.Mode&metawire.ModeType != 0:
			return nil, fmt.Errorf("initial data for a file of type %#o: %w", r.Mode&metawire.ModeType, metawire.ErrInvalid)
		case len(r.Data) > i.cfg.InlineMax:
			return nil, fmt.Errorf("%d bytes of initial data (inline max %d): %w", len(r.Data), i.cfg.InlineMax, metawire.ErrFileTooBig)
		}
	}
	old, exists, err := readDirent(i.db, dirIno, r.Name)
	if err != nil {
		return nil, err
	}
	if exists {
		return i.existing(ctx, op, r, old, dirAttr)
	}
	if !mayAccess(&dirAttr, c, accW|accX) {
		return nil, metawire.ErrAccess
	}

	now := i.now()
	// Every inode records the directory it is created in: a confined
	// key's requests are checked by walking parents (within).
	init := metawire.InodeInit{Nlink: 1, UID: c.UID, GID: metawire.NewGID(dir.mode, dir.gid, c), Time: now, Policy: dir.policy, Parent: uint64(dirIno)}
	var bucket uint32 = dirIno.Bucket()
	switch op {
	case metawire.OpCreate:
		typ := r.Mode & metawire.ModeType
		if typ == 0 {
			typ = metawire.ModeFile
		}
		switch typ {
		case metawire.ModeFile, metawire.ModeFIFO, metawire.ModeSock:
		case metawire.ModeChar, metawire.ModeBlock:
			if !isRoot(c) {
				return nil, fmt.Errorf("device node: %w", metawire.ErrPerm)
			}
			init.Rdev = r.Rdev
		default:
			return nil, fmt.Errorf("type %#o: %w", typ, metawire.ErrInvalid)
		}
		perm := metawire.NewFilePerm(r.Mode&metawire.ModePerm, dir.mode, init.GID, c)
		init.Mode = typ | perm
		if typ == metawire.ModeFile {
			init.BlockSize = layout.DefaultBlockSize
			if dir.policy != "" {
				if p, err := layout.Parse(dir.policy); err == nil {
					init.BlockSize = uint32(p.BlockSize)
				}
			}
			if r.Exclusive {
				init.Verf = r.Verf
			}
		} else {
			init.Policy = ""
		}
	case metawire.OpSymlink:
		switch {
		case r.Target == "":
			return nil, fmt.Errorf("empty symlink target: %w", metawire.ErrNotFound)
		case len(r.Target) > metawire.MaxSymlinkLen:
			return nil, fmt.Errorf("symlink target of %d bytes: %w", len(r.Target), metawire.ErrNameTooLong)
		case strings.IndexByte(r.Target, 0) >= 0:
			return nil, fmt.Errorf("symlink target with NUL: %w", metawire.ErrInvalid)
		}
		init.Mode = metawire.ModeLink | 0o777
		init.Target = r.Target
		init.Policy = ""
	case metawire.OpMkdir:
		path, err := namespace.Join(dir.path, r.Name)
		if err != nil {
			return nil, fmt.Errorf("path %.64q/%.64q: %w", dir.path, r.Name, metawire.ErrNameTooLong)
		}
		if dir.nlink >= metawire.MaxLinks {
			return nil, metawire.ErrTooManyLinks
		}
		perm := r.Mode & (0o777 | modeSticky)
		if dir.mode&modeSGID != 0 {
			perm |= modeSGID
		}
		init.Mode = metawire.ModeDir | perm
		init.Nlink = 2
		init.Parent = uint64(dirIno)
		init.Path = path
		bucket = namespace.Bucket(path)
	}

	var ino namespace.Ino
	if r.Ino != 0 {
		// An id the client reserved (write-behind): createInode checks
		// that this island handed it out (noteSeq), applyAction that it
		// is unused.
		ino = namespace.Ino(r.Ino)
		if op != metawire.OpCreate || init.Mode&metawire.ModeType != metawire.ModeFile || !ino.Valid() || ino.Bucket() != bucket {
			return nil, fmt.Errorf("reserved inode id %v for a %#o in bucket %08x: %w", ino, init.Mode&metawire.ModeType, bucket, metawire.ErrInvalid)
		}
		if n, err := readInode(i.db, ino); err != nil {
			return nil, err
		} else if n != nil {
			return nil, fmt.Errorf("reserved inode id %v is in use: %w", ino, metawire.ErrInvalid)
		}
	} else if ino, err = i.allocFor(ctx, bucket); err != nil {
		return nil, err
	}
	typ := init.Mode & metawire.ModeType
	as := []metawire.Action{
		{Kind: metawire.ActCreateInode, Ino: uint64(ino), Init: init},
		{Kind: metawire.ActAddEntry, Ino: uint64(dirIno), Name: r.Name, Target: uint64(ino), Type: typ, Time: now},
	}
	if op == metawire.OpMkdir {
		as = append(as, metawire.Action{Kind: metawire.ActTouch, Ino: uint64(dirIno), Delta: 1, Time: now})
	}
	var dirAfter, setAfter metawire.Attr
	o := execOpts{lazy: r.Lazy && op == metawire.OpCreate && !r.Exclusive, watch: dirIno, after: &dirAfter}
	if i.owns(ino) {
		o.fresh, o.data, o.preset = ino, r.Data, r.Ino != 0
		if r.Set.Valid != 0 {
			set := r.Set
			set.Cred, set.Ino = r.Cred, uint64(ino)
			o.set, o.setAfter = &set, &setAfter
		}
	} else if len(r.Data) > 0 || r.Set.Valid != 0 {
		return nil, fmt.Errorf("%w: file %v created off its directory's island", metawire.ErrInternal, ino)
	}
	if err := i.executeOpt(ctx, as, o); err != nil {
		return nil, err
	}
	n := newInode(ino, &init)
	n.setData(r.Data)
	resp := &metawire.CreateResp{Attr: n.attr(), DirAttr: dirAfter}
	if o.set != nil {
		resp.Attr = setAfter
	}
	if dirAfter.Ino == 0 {
		if d, err := readInode(i.db, dirIno); err == nil && d != nil {
			resp.DirAttr = d.attr()
		}
	}
	return resp, nil
}

// existing answers a create whose name exists.
func (i *Island) existing(ctx context.Context, op uint16, r *metawire.CreateReq, old dirent, dirAttr metawire.Attr) (*metawire.CreateResp, error) {
	if op != metawire.OpCreate {
		return nil, metawire.ErrExists
	}
	if r.Exclusive {
		// A retried NFS exclusive create carries the same verifier.
		if r.Verf == 0 || old.typ != metawire.ModeFile || !i.owns(old.ino) {
			return nil, metawire.ErrExists
		}
		n, err := readInode(i.db, old.ino)
		if err != nil {
			return nil, err
		}
		if n == nil || n.verf != r.Verf {
			return nil, metawire.ErrExists
		}
		return &metawire.CreateResp{Attr: n.attr(), DirAttr: dirAttr, Existed: true}, nil
	}
	if old.typ == metawire.ModeDir {
		return nil, metawire.ErrIsDir
	}
	a, err := i.attrOf(ctx, old.ino)
	if errors.Is(err, metawire.ErrStale) {
		return nil, conflict("entry %q points at a vanishing inode", r.Name)
	}
	if err != nil {
		return nil, err
	}
	return &metawire.CreateResp{Attr: a, DirAttr: dirAttr, Existed: true}, nil
}

// allocFor allocates an inode id in bucket, here or on its island.
func (i *Island) allocFor(ctx context.Context, bucket uint32) (namespace.Ino, error) {
	owner := i.cfg.Map.Table().Lookup(bucket)
	if owner == i.id {
		return i.allocIno(bucket)
	}
	var resp metawire.AllocInoResp
	if _, err := i.call(ctx, owner, metawire.OpAllocIno, &metawire.AllocInoReq{Bucket: bucket}, &resp); err != nil {
		return 0, err
	}
	ino := namespace.Ino(resp.Ino)
	if ino.Bucket() != bucket || !ino.Valid() {
		return 0, fmt.Errorf("%w: island %d allocated %v for bucket %08x", metawire.ErrInternal, owner, ino, bucket)
	}
	return ino, nil
}

// remove serves OpUnlink and OpRmdir.
func (i *Island) remove(ctx context.Context, rmdir bool, r *metawire.NameReq) error {
	dir := namespace.Ino(r.Dir)
	opName := "unlink"
	if rmdir {
		opName = "rmdir"
	}
	if err := i.checkIno(opName, dir); err != nil {
		return err
	}
	err := i.retry(ctx, func() error { return i.removeOnce(ctx, rmdir, r) })
	if err != nil {
		return fmt.Errorf("%s %q in %v: %w", opName, r.Name, dir, err)
	}
	return nil
}

func (i *Island) removeOnce(ctx context.Context, rmdir bool, r *metawire.NameReq) error {
	dirIno := namespace.Ino(r.Dir)
	c := &r.Cred
	_, dirAttr, err := i.dirFor(ctx, dirIno, c)
	if err != nil {
		return err
	}
	switch {
	case r.Name == "." && rmdir:
		return metawire.ErrInvalid
	case r.Name == ".." && rmdir:
		return metawire.ErrNotEmpty
	case isDots(r.Name):
		return metawire.ErrIsDir
	}
	if err := checkName(r.Name); err != nil {
		return err
	}
	de, ok, err := readDirent(i.db, dirIno, r.Name)
	if err != nil {
		return err
	}
	if !ok {
		return metawire.ErrNotFound
	}
	if !mayAccess(&dirAttr, c, accW|accX) {
		return metawire.ErrAccess
	}
	if err := i.checkSticky(ctx, &dirAttr, c, r.Name, de.ino); err != nil {
		return err
	}
	isDir := de.typ == metawire.ModeDir
	switch {
	case rmdir && !isDir:
		return metawire.ErrNotDir
	case !rmdir && isDir:
		return metawire.ErrIsDir
	}
	now := i.now()
	if !rmdir {
		return i.execute(ctx, unlinkActions(dirIno, r.Name, de, now))
	}
	return i.execute(ctx, []metawire.Action{
		{Kind: metawire.ActRemoveEntry, Ino: uint64(dirIno), Name: r.Name, Target: uint64(de.ino), Time: now},
		{Kind: metawire.ActDeleteInode, Ino: uint64(de.ino), Type: metawire.ModeDir, Flags: metawire.ActRequireEmpty},
		{Kind: metawire.ActTouch, Ino: uint64(dirIno), Delta: -1, Time: now},
	})
}

// checkSticky refuses c the removal of entry name (leading to ino) from a
// directory with attributes dir when its sticky bit keeps c out.
func (i *Island) checkSticky(ctx context.Context, dir *metawire.Attr, c *metawire.Cred, name string, ino namespace.Ino) error {
	if !stickyApplies(dir, c) {
		return nil
	}
	a, err := i.attrOf(ctx, ino)
	if errors.Is(err, metawire.ErrStale) {
		return conflict("entry %q points at a vanishing inode", name)
	}
	if err != nil {
		return err
	}
	if stickyDenies(dir, c, a.UID) {
		return fmt.Errorf("sticky directory: %w", metawire.ErrPerm)
	}
	return nil
}

// unlinkActions removes the entry name of dir, leading to de, and drops
// a link of its inode.
func unlinkActions(dir namespace.Ino, name string, de dirent, now int64) []metawire.Action {
	return []metawire.Action{
		{Kind: metawire.ActRemoveEntry, Ino: uint64(dir), Name: name, Target: uint64(de.ino), Time: now},
		{Kind: metawire.ActAdjustNlink, Ino: uint64(de.ino), Type: de.typ, Delta: -1, Flags: metawire.ActDeleteAtZero, Time: now},
	}
}

// removeMany serves OpUnlinkMany: every name goes, or none.
func (i *Island) removeMany(ctx context.Context, r *metawire.UnlinkManyReq) error {
	dir := namespace.Ino(r.Dir)
	if err := i.checkIno("unlink", dir); err != nil {
		return err
	}
	switch {
	case len(r.Names) == 0:
		return nil
	case len(r.Names) > metawire.MaxUnlinkMany:
		return fmt.Errorf("unlink of %d names in %v (at most %d): %w", len(r.Names), dir, metawire.MaxUnlinkMany, metawire.ErrInvalid)
	}
	var bad string
	err := i.retry(ctx, func() error {
		var err error
		bad, err = i.removeManyOnce(ctx, r)
		return err
	})
	if err != nil {
		return fmt.Errorf("unlink %q (with %d more) in %v: %w", bad, len(r.Names)-1, dir, err)
	}
	return nil
}

// removeManyOnce checks each name as removeOnce would, in Linux's order
// (missing, no write permission, sticky, a directory), and removes them
// all in one change; bad is the name an error is about.
func (i *Island) removeManyOnce(ctx context.Context, r *metawire.UnlinkManyReq) (bad string, _ error) {
	dirIno := namespace.Ino(r.Dir)
	c := &r.Cred
	_, dirAttr, err := i.dirFor(ctx, dirIno, c)
	if err != nil {
		return r.Names[0], err
	}
	now := i.now()
	seen := make(map[string]bool, len(r.Names))
	as := make([]metawire.Action, 0, 2*len(r.Names))
	for _, name := range r.Names {
		if isDots(name) {
			return name, metawire.ErrIsDir
		}
		if err := checkName(name); err != nil {
			return name, err
		}
		if seen[name] {
			return name, fmt.Errorf("named twice: %w", metawire.ErrInvalid)
		}
		seen[name] = true
		de, ok, err := readDirent(i.db, dirIno, name)
		switch {
		case err != nil:
			return name, err
		case !ok:
			return name, metawire.ErrNotFound
		case !mayAccess(&dirAttr, c, accW|accX):
			return name, metawire.ErrAccess // after the name's lookup, as Linux
		}
		if err := i.checkSticky(ctx, &dirAttr, c, name, de.ino); err != nil {
			return name, err
		}
		if de.typ == metawire.ModeDir {
			return name, metawire.ErrIsDir
		}
		as = append(as, unlinkActions(dirIno, name, de, now)...)
	}
	return r.Names[0], i.execute(ctx, as)
}

// link serves OpLink. The island owning the directory or the inode may
// coordinate it.
func (i *Island) link(ctx context.Context, r *metawire.LinkReq) (*metawire.AttrResp, error) {
	dir, ino := namespace.Ino(r.Dir), namespace.Ino(r.Ino)
	if !dir.Valid() || !ino.Valid() {
		return nil, fmt.Errorf("link: %w", metawire.ErrStale)
	}
	if !i.owns(dir) && !i.owns(ino) {
		return nil, i.checkIno("link", dir)
	}
	var out metawire.Attr
	err := i.retry(ctx, func() error {
		var err error
		out, err = i.linkOnce(ctx, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("link %v as %q in %v: %w", ino, r.Name, dir, err)
	}
	return &metawire.AttrResp{Attr: out}, nil
}

func (i *Island) linkOnce(ctx context.Context, r *metawire.LinkReq) (metawire.Attr, error) {
	dirIno, ino := namespace.Ino(r.Dir), namespace.Ino(r.Ino)
	c := &r.Cred
	a, err := i.attrOf(ctx, ino)
	if err != nil {
		return a, err
	}
	dirAttr, err := i.attrOf(ctx, dirIno)
	if err != nil {
		return a, err
	}
	if !dirAttr.IsDir() {
		return a, metawire.ErrNotDir
	}
	if !mayAccess(&dirAttr, c, accX) {
		return a, metawire.ErrAccess
	}
	if isDots(r.Name) {
		return a, metawire.ErrExists
	}
	if err := checkName(r.Name); err != nil {
		return a, err
	}
	if _, exists, err := i.entryOf(ctx, dirIno, r.Name); err != nil {
		return a, err
	} else if exists {
		return a, metawire.ErrExists
	}
	if !mayAccess(&dirAttr, c, accW|accX) {
		return a, metawire.ErrAccess
	}
	if a.IsDir() {
		return a, fmt.Errorf("hard link to a directory: %w", metawire.ErrPerm)
	}
	if a.Nlink >= metawire.MaxLinks {
		return a, metawire.ErrTooManyLinks
	}
	now := i.now()
	typ := a.Mode & metawire.ModeType
	as := []metawire.Action{
		{Kind: metawire.ActAddEntry, Ino: uint64(dirIno), Name: r.Name, Target: uint64(ino), Type: typ, Time: now},
		{Kind: metawire.ActAdjustNlink, Ino: uint64(ino), Type: typ, Delta: 1, Time: now},
	}
	if err := i.execute(ctx, as); err != nil {
		return a, err
	}
	if after, err := i.attrOf(ctx, ino); err == nil {
		return after, nil
	}
	a.Nlink++
	a.Ctime = now
	return a, nil
}
