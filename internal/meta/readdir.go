package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/cockroachdb/pebble/v2"
)

// Readdir page limits.
const (
	DefaultReaddirEntries = 512
	MaxReaddirEntries     = 4096
	maxReaddirBytes       = 512 << 10
)

// readdir lists a directory in cookie order. Cookies come from a
// per-directory counter and never change for an entry, so a listing
// resumed from any cookie sees every entry that survived, once.
func (i *Island) readdir(ctx context.Context, r *metawire.ReaddirReq) (*metawire.ReaddirResp, error) {
	dirIno := namespace.Ino(r.Dir)
	if err := i.checkIno("readdir", dirIno); err != nil {
		return nil, err
	}
	if err := i.locks.waitReadable(ctx, dirIno, i.timing.readWait); err != nil {
		return nil, err
	}
	snap := i.db.NewSnapshot()
	defer snap.Close()
	dir, err := readInode(snap, dirIno)
	if err != nil {
		return nil, err
	}
	if dir == nil {
		return nil, fmt.Errorf("readdir %v: %w", dirIno, metawire.ErrStale)
	}
	da := dir.attr()
	if !dir.isDir() {
		return nil, fmt.Errorf("readdir %v: %w", dirIno, metawire.ErrNotDir)
	}
	if !mayAccess(&da, &r.Cred, accR) {
		return nil, fmt.Errorf("readdir %v: %w", dirIno, metawire.ErrAccess)
	}
	limit := int(r.MaxEntries)
	if limit == 0 {
		limit = DefaultReaddirEntries
	}
	limit = min(limit, MaxReaddirEntries)
	resp := &metawire.ReaddirResp{DirAttr: da}
	size := 0
	// Files live in their directory's bucket, next to each other in inode
	// order, which mostly follows cookie order: one iterator seeking
	// forward reads their inodes far cheaper than a point lookup each.
	var inodes *pebble.Iterator
	if r.Plus {
		p := bucketPrefix(dirIno.Bucket(), tagInode)
		if inodes, err = snap.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)}); err != nil {
			return nil, err
		}
		defer inodes.Close()
	}
	attrOf := func(ino namespace.Ino) (metawire.Attr, bool) {
		if ino.Bucket() != dirIno.Bucket() {
			n, err := readInode(snap, ino)
			if err != nil || n == nil {
				return metawire.Attr{}, false
			}
			return n.attr(), true
		}
		k := inodeKey(ino)
		if !inodes.SeekGE(k) || !bytes.Equal(inodes.Key(), k) {
			return metawire.Attr{}, false
		}
		v, err := inodes.ValueAndErr()
		if err != nil {
			return metawire.Attr{}, false
		}
		n, err := decodeInode(ino, v) // aliases v: take the attributes now
		if err != nil {
			return metawire.Attr{}, false
		}
		return n.attr(), true
	}
	add := func(name string, ino namespace.Ino, typ uint32, cookie uint64) {
		de := metawire.Dirent{Name: name, Ino: uint64(ino), Type: typ, Cookie: cookie}
		if r.Plus && i.owns(ino) {
			de.Attr, de.HasAttr = attrOf(ino)
		}
		size += 40 + len(name) + 100
		resp.Entries = append(resp.Entries, de)
	}
	if r.Cookie == 0 {
		add(".", dirIno, metawire.ModeDir, 1)
	}
	if r.Cookie <= 1 {
		if len(resp.Entries) == limit {
			return resp, nil // ".." comes with the next page
		}
		parent := dir.parent
		if root, ok := confinedRoot(ctx); ok && root == dirIno {
			// The top of a confined key's subtree is its "/": its ".."
			// is itself, as the namespace root's is.
			parent = dirIno
		}
		add("..", parent, metawire.ModeDir, 2)
	}
	start := max64(r.Cookie+1, firstCookie)
	if r.Cookie == ^uint64(0) {
		resp.EOF = true
		return resp, nil
	}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: cookieKey(dirIno, start), UpperBound: prefixEnd(cookiePrefix(dirIno))})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	ok := it.First()
	for ; ok && len(resp.Entries) < limit && size < maxReaddirBytes; ok = it.Next() {
		k := it.Key()
		name, ino, typ, err := decodeCookie(it.Value())
		if err != nil {
			return nil, fmt.Errorf("readdir %v: %w", dirIno, err)
		}
		add(name, ino, typ, binary.BigEndian.Uint64(k[len(k)-8:]))
	}
	resp.EOF = !ok
	return resp, it.Error()
}

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
