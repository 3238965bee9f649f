package meta

import (
	"bytes"
	"fmt"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/cockroachdb/pebble/v2"
)

// firstCookie is the first readdir cookie of a real entry ("." is 1 and
// ".." is 2).
const firstCookie = 3

// errConflict: a fact an operation read (an entry, a parent, an inode's
// existence) no longer holds when its actions run. The operation starts
// over; a client sees ErrBusy only if that keeps happening.
var errConflict = fmt.Errorf("%w: namespace changed during the operation", metawire.ErrBusy)

func conflict(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errConflict}, args...)...)
}

// deltas accumulates counter changes of one batch.
type deltas struct {
	live   map[fragment.StripeID]int64
	inodes int64
	bytes  int64
}

func (d *deltas) addLive(s fragment.StripeID, n int64) {
	if d.live == nil {
		d.live = map[fragment.StripeID]int64{}
	}
	d.live[s] += n
}

// write merges the accumulated counters into b.
func (d *deltas) write(b *pebble.Batch) error {
	for s, n := range d.live {
		if n == 0 {
			continue
		}
		if err := b.Merge(liveKey(s), encodeCounters(n), nil); err != nil {
			return err
		}
	}
	if d.inodes != 0 || d.bytes != 0 {
		if err := b.Merge(globalKey(gStats), encodeCounters(d.inodes, d.bytes), nil); err != nil {
			return err
		}
	}
	*d = deltas{}
	return nil
}

// lockReqs returns the locks a list of actions needs: shared for checks,
// exclusive for everything else.
func lockReqs(as []metawire.Action) []lockReq {
	reqs := make([]lockReq, 0, len(as))
	for _, a := range as {
		m := lockExcl
		if a.Kind == metawire.ActCheck || a.Kind == metawire.ActCheckEntry {
			m = lockShared
		}
		reqs = append(reqs, lockReq{namespace.Ino(a.Ino), m})
	}
	return reqs
}

// validType reports whether t is a file type an inode or entry may have.
func validType(t uint32) bool {
	switch t {
	case metawire.ModeDir, metawire.ModeFile, metawire.ModeLink, metawire.ModeFIFO,
		metawire.ModeSock, metawire.ModeChar, metawire.ModeBlock:
		return true
	}
	return false
}

// checkActions validates the shape of actions received from another
// island: kinds, flags, inode ids, names and ownership.
func (i *Island) checkActions(as []metawire.Action) error {
	if len(as) == 0 {
		return fmt.Errorf("%w: empty action list", metawire.ErrBadRequest)
	}
	for k, a := range as {
		bad := func(why string) error {
			return fmt.Errorf("%w: action %d (kind %d): %s", metawire.ErrBadRequest, k, a.Kind, why)
		}
		ino := namespace.Ino(a.Ino)
		if !ino.Valid() {
			return bad("invalid inode id")
		}
		if !i.owns(ino) {
			return fmt.Errorf("action %d on %v: %w", k, ino, metawire.ErrWrongIsland)
		}
		if a.Flags&^metawire.ActAllFlags != 0 {
			return bad("unknown flags")
		}
		if a.Type != 0 && !validType(a.Type) {
			return bad("bad type")
		}
		switch a.Kind {
		case metawire.ActCreateInode:
			t := a.Init.Mode & metawire.ModeType
			if !validType(t) || a.Init.Nlink == 0 {
				return bad("bad inode")
			}
			if t == metawire.ModeDir && (!namespace.Ino(a.Init.Parent).Valid() || !namespace.IsClean(a.Init.Path)) {
				return bad("bad directory parent or path")
			}
		case metawire.ActAddEntry, metawire.ActRemoveEntry, metawire.ActCheckEntry:
			if namespace.ValidName(a.Name) != nil || !namespace.Ino(a.Target).Valid() {
				return bad("bad entry")
			}
			if a.Kind == metawire.ActAddEntry && !validType(a.Type) {
				return bad("bad entry type")
			}
		case metawire.ActSetParent:
			if !namespace.Ino(a.Target).Valid() || !namespace.Ino(a.Expect).Valid() {
				return bad("bad parent")
			}
		case metawire.ActTouch:
			if a.Flags&metawire.ActTouchParent != 0 && (!namespace.Ino(a.Target).Valid() || !namespace.Ino(a.Expect).Valid()) {
				return bad("bad parent")
			}
		case metawire.ActDeleteInode, metawire.ActAdjustNlink, metawire.ActCheck:
		default:
			return bad("unknown kind")
		}
	}
	return nil
}

// applyActions runs actions, in order, against b (an indexed batch, so
// later actions see earlier ones). Any error leaves b to be discarded:
// an errConflict means a fact the caller relied on changed; other errors
// are final answers (ErrNotEmpty, ErrTooManyLinks, I/O).
func (i *Island) applyActions(b *pebble.Batch, as []metawire.Action) error {
	return i.applyActionsOpt(b, as, nil)
}

// applyActionsOpt is applyActions with the options of a local execution
// (o may be nil).
func (i *Island) applyActionsOpt(b *pebble.Batch, as []metawire.Action, o *execOpts) error {
	var d deltas
	for k := range as {
		if err := i.applyAction(b, &as[k], &d, o); err != nil {
			return err
		}
	}
	return d.write(b)
}

func (i *Island) applyAction(b *pebble.Batch, a *metawire.Action, d *deltas, o *execOpts) (err error) {
	ino := namespace.Ino(a.Ino)
	if a.Kind == metawire.ActCreateInode {
		if o == nil || ino != o.fresh || o.preset { // a number just allocated here is unused
			n, err := readInode(b, ino)
			if err != nil {
				return err
			}
			if n != nil {
				return conflict("inode %v exists", ino)
			}
		}
		var data []byte
		if o != nil && ino == o.fresh {
			data = o.data
		}
		n, err := i.createInode(b, ino, &a.Init, data, d)
		if err != nil {
			return err
		}
		if o != nil && ino == o.fresh && o.set != nil {
			if err := i.applySetAttr(b, n, o.set); err != nil {
				return err
			}
			*o.setAfter = n.attr()
		}
		return nil
	}
	n, err := readInode(b, ino)
	if err != nil {
		return err
	}
	if n == nil {
		return conflict("inode %v is gone", ino)
	}
	if o != nil && o.after != nil && ino == o.watch {
		// The actions below change n in place before writing it.
		defer func() {
			if err == nil {
				*o.after = n.attr()
			}
		}()
	}
	if a.Type != 0 && a.Kind != metawire.ActAddEntry && n.typ() != a.Type {
		return conflict("inode %v has type %o, not %o", ino, n.typ(), a.Type)
	}
	switch a.Kind {
	case metawire.ActDeleteInode:
		if a.Flags&metawire.ActRequireEmpty != 0 {
			if !n.isDir() {
				return conflict("inode %v is not a directory", ino)
			}
			empty, err := dirEmpty(b, ino)
			if err != nil {
				return err
			}
			if !empty {
				return fmt.Errorf("directory %v: %w", ino, metawire.ErrNotEmpty)
			}
		}
		return deleteInode(b, n, d)

	case metawire.ActAdjustNlink:
		nl := int64(n.nlink) + int64(a.Delta)
		switch {
		case a.Delta > 0 && nl > metawire.MaxLinks:
			return fmt.Errorf("inode %v: %w", ino, metawire.ErrTooManyLinks)
		case nl < 0:
			return fmt.Errorf("%w: inode %v: link count below zero", metawire.ErrIO, ino)
		}
		n.nlink = uint32(nl)
		n.ctime = a.Time
		if n.nlink == 0 && a.Flags&metawire.ActDeleteAtZero != 0 {
			return unlinkedOrDeleted(b, n, d)
		}
		return putInode(b, n)

	case metawire.ActAddEntry:
		if !n.isDir() {
			return conflict("%v is not a directory", ino)
		}
		old, exists, err := readDirent(b, ino, a.Name)
		if err != nil {
			return err
		}
		switch {
		case a.Expect == 0 && exists:
			return conflict("entry %q of %v exists", a.Name, ino)
		case a.Expect != 0 && (!exists || old.ino != namespace.Ino(a.Expect)):
			return conflict("entry %q of %v changed", a.Name, ino)
		}
		if exists {
			if err := b.Delete(cookieKey(ino, old.cookie), nil); err != nil {
				return err
			}
		}
		de := dirent{ino: namespace.Ino(a.Target), typ: a.Type, cookie: n.nextCookie}
		n.nextCookie++
		n.mtime, n.ctime = a.Time, a.Time
		if err := b.Set(direntKey(ino, a.Name), de.encode(), nil); err != nil {
			return err
		}
		if err := b.Set(cookieKey(ino, de.cookie), encodeCookie(a.Name, de.ino, de.typ), nil); err != nil {
			return err
		}
		return putInode(b, n)

	case metawire.ActRemoveEntry:
		if !n.isDir() {
			return conflict("%v is not a directory", ino)
		}
		old, exists, err := readDirent(b, ino, a.Name)
		if err != nil {
			return err
		}
		if !exists || old.ino != namespace.Ino(a.Target) {
			return conflict("entry %q of %v changed", a.Name, ino)
		}
		if err := b.Delete(direntKey(ino, a.Name), nil); err != nil {
			return err
		}
		if err := b.Delete(cookieKey(ino, old.cookie), nil); err != nil {
			return err
		}
		n.mtime, n.ctime = a.Time, a.Time
		return putInode(b, n)

	case metawire.ActSetParent:
		if !n.isDir() || n.parent != namespace.Ino(a.Expect) {
			return conflict("parent of %v changed", ino)
		}
		n.parent = namespace.Ino(a.Target)
		n.ctime = a.Time
		return putInode(b, n)

	case metawire.ActTouch:
		nl := int64(n.nlink) + int64(a.Delta)
		switch {
		case a.Delta > 0 && nl > metawire.MaxLinks:
			return fmt.Errorf("directory %v: %w", ino, metawire.ErrTooManyLinks)
		case nl < 1:
			return fmt.Errorf("%w: inode %v: link count below one", metawire.ErrIO, ino)
		}
		n.nlink = uint32(nl)
		n.ctime = a.Time
		if a.Flags&metawire.ActTouchMtime != 0 {
			n.mtime = a.Time
		}
		if a.Flags&metawire.ActTouchParent != 0 && !n.isDir() && n.parent == namespace.Ino(a.Expect) {
			n.parent = namespace.Ino(a.Target)
		}
		return putInode(b, n)

	case metawire.ActCheck:
		if a.Flags&metawire.ActCheckParent != 0 && n.parent != namespace.Ino(a.Target) {
			return conflict("parent of %v changed", ino)
		}
		return nil

	case metawire.ActCheckEntry:
		if !n.isDir() {
			return conflict("%v is not a directory", ino)
		}
		e, exists, err := readDirent(b, ino, a.Name)
		if err != nil {
			return err
		}
		if !exists || e.ino != namespace.Ino(a.Target) {
			return conflict("entry %q of %v changed", a.Name, ino)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown action kind %d", metawire.ErrBadRequest, a.Kind)
}

// createInode writes a new inode record from init and returns it.
func (i *Island) createInode(b *pebble.Batch, ino namespace.Ino, init *metawire.InodeInit, data []byte, d *deltas) (*inode, error) {
	if err := i.noteSeq(ino); err != nil {
		return nil, err
	}
	n := newInode(ino, init)
	n.setData(data)
	d.inodes++
	if n.isReg() { // created with data (CreateReq.Data)
		d.bytes += int64(n.size)
	}
	return n, putInode(b, n)
}

// newInode builds the record of a new inode.
func newInode(ino namespace.Ino, init *metawire.InodeInit) *inode {
	n := &inode{
		ino: ino, gen: 1, mode: init.Mode, nlink: init.Nlink,
		uid: init.UID, gid: init.GID, rdev: init.Rdev,
		atime: init.Time, mtime: init.Time, ctime: init.Time, version: 1,
		policy: init.Policy, verf: init.Verf,
	}
	n.parent = namespace.Ino(init.Parent)
	switch n.typ() {
	case metawire.ModeDir:
		n.path, n.nextCookie = init.Path, firstCookie
	case metawire.ModeLink:
		n.target = init.Target
		n.size = uint64(len(init.Target))
	case metawire.ModeFile:
		n.inline = true
		n.blockSize = init.BlockSize
	}
	return n
}

// setData makes data the contents of a new regular file (inline).
func (n *inode) setData(data []byte) {
	if len(data) > 0 && n.typ() == metawire.ModeFile {
		n.data, n.size = data, uint64(len(data))
	}
}

// dirEmpty reports whether directory dir has no entries.
func dirEmpty(r reader, dir namespace.Ino) (bool, error) {
	p := direntPrefix(dir)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return false, err
	}
	defer it.Close()
	return !it.First(), it.Error()
}

// deleteInode removes n with its blocks, xattrs and (empty) directory
// records, and accounts for the released blocks and bytes.
func deleteInode(b *pebble.Batch, n *inode, d *deltas) error {
	if err := releaseBlocks(b, n, 0, d); err != nil {
		return err
	}
	if err := b.Delete(inodeKey(n.ino), nil); err != nil {
		return err
	}
	for _, p := range [][]byte{xattrPrefix(n.ino), direntPrefix(n.ino), cookiePrefix(n.ino)} {
		if err := deletePrefix(b, p); err != nil {
			return err
		}
	}
	// Locks end with their inode (an open file's hold keeps it alive
	// while anyone has it open).
	if err := writeLocks(b, n.ino, nil); err != nil {
		return err
	}
	if err := writeHolds(b, n.ino, nil); err != nil {
		return err
	}
	d.inodes--
	if n.isReg() {
		d.bytes -= int64(n.size)
	}
	return nil
}

// releaseBlocks deletes the blocks of n from index first on, taking their
// bytes off their stripes' live counts and off n.alloc (the caller writes
// n back if it keeps it).
func releaseBlocks(b *pebble.Batch, n *inode, first uint64, d *deltas) error {
	lo, hi := blockKey(n.ino, first), prefixEnd(blockPrefix(n.ino))
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	var keys [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		p, err := decodeBytes(it.Value())
		if err != nil {
			it.Close()
			return fmt.Errorf("block of %v: %w", n.ino, err)
		}
		if s, l, err := pointerStripe(p); err == nil {
			d.addLive(s, -int64(l))
			n.alloc -= min(n.alloc, uint64(l))
			keys = append(keys, refKey(s, n.ino, blockIndex(it.Key())))
		}
		keys = append(keys, append([]byte(nil), it.Key()...))
	}
	if err := it.Close(); err != nil {
		return err
	}
	return deleteKeys(b, keys)
}

// deletePrefix deletes every key under prefix p, one point delete each.
// Range tombstones would be simpler, but every one left in the memtable
// makes later reads fragment spans; an unlink-heavy workload then slows to
// a crawl. Most prefixes here hold no key at all.
func deletePrefix(b *pebble.Batch, p []byte) error {
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return err
	}
	var keys [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		keys = append(keys, append([]byte(nil), it.Key()...))
	}
	if err := it.Close(); err != nil {
		return err
	}
	return deleteKeys(b, keys)
}

func deleteKeys(b *pebble.Batch, keys [][]byte) error {
	for _, k := range keys {
		if err := b.Delete(k, nil); err != nil {
			return err
		}
	}
	return nil
}

// setBlock points block index of n at p (empty: a hole), adjusting live
// counts and n.alloc. It returns the previous pointer.
func setBlock(b *pebble.Batch, n *inode, index uint64, p []byte, d *deltas) ([]byte, error) {
	key := blockKey(n.ino, index)
	v, ok, err := get(b, key)
	if err != nil {
		return nil, err
	}
	var old []byte
	if ok {
		if old, err = decodeBytes(v); err != nil {
			return nil, fmt.Errorf("block %d of %v: %w", index, n.ino, err)
		}
		if s, l, err := pointerStripe(old); err == nil {
			d.addLive(s, -int64(l))
			n.alloc -= min(n.alloc, uint64(l))
			if err := b.Delete(refKey(s, n.ino, index), nil); err != nil {
				return nil, err
			}
		}
	}
	if len(p) == 0 {
		if ok {
			return old, b.Delete(key, nil)
		}
		return old, nil
	}
	s, l, err := pointerStripe(p)
	if err != nil {
		return nil, err
	}
	d.addLive(s, int64(l))
	n.alloc += uint64(l)
	if err := b.Set(refKey(s, n.ino, index), nil, nil); err != nil {
		return nil, err
	}
	return old, b.Set(key, encodeBytes(p), nil)
}

func sameBytes(a, b []byte) bool { return bytes.Equal(a, b) }
