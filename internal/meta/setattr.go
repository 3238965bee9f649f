package meta

import (
	"context"
	"fmt"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/cockroachdb/pebble/v2"
)

// MaxFileSize is the largest file size an island accepts.
const MaxFileSize = 1 << 62

const allSetAttr = metawire.SetMode | metawire.SetUID | metawire.SetGID | metawire.SetSize |
	metawire.SetAtime | metawire.SetAtimeNow | metawire.SetMtime | metawire.SetMtimeNow | metawire.SetCtime | metawire.SetKillSUID | metawire.SetAccessed

// withInodes runs f on an indexed batch with the inodes locked
// exclusively, and commits the batch (synced) if f succeeds.
func (i *Island) withInodes(ctx context.Context, inos []namespace.Ino, f func(b *pebble.Batch) error) error {
	return i.withInodesOpt(ctx, inos, false, f)
}

// withInodesOpt is withInodes; lazy commits without waiting for the log
// sync and kicks the syncer instead.
func (i *Island) withInodesOpt(ctx context.Context, inos []namespace.Ino, lazy bool, f func(b *pebble.Batch) error) error {
	owner := i.newTxID()
	reqs := make([]lockReq, len(inos))
	for k, ino := range inos {
		reqs[k] = lockReq{ino, lockExcl}
	}
	if err := i.locks.acquire(ctx, owner, reqs, i.timing.lockWait); err != nil {
		return err
	}
	defer i.locks.release(owner)
	b := i.db.NewIndexedBatch()
	defer b.Close()
	if err := f(b); err != nil {
		return err
	}
	if b.Empty() {
		return nil
	}
	if err := i.markDone(ctx, b); err != nil {
		return err
	}
	return i.write(ctx, b, lazy)
}

// killSUID clears the set-user-id bit, and the set-group-id bit when
// group execute is set, as Linux does on chown and on writes and
// truncation by unprivileged users.
func killSUID(n *inode) { n.mode = metawire.KillSetID(n.mode) }

func (i *Island) setAttr(ctx context.Context, r *metawire.SetAttrReq) (*metawire.AttrResp, error) {
	ino := namespace.Ino(r.Ino)
	if err := i.checkIno("setattr", ino); err != nil {
		return nil, err
	}
	if r.Valid&^allSetAttr != 0 {
		return nil, fmt.Errorf("setattr %v: valid bits %#x: %w", ino, r.Valid, metawire.ErrInvalid)
	}
	var out metawire.Attr
	err := i.retry(ctx, func() error {
		return i.withInodes(ctx, []namespace.Ino{ino}, func(b *pebble.Batch) error {
			n, err := readInode(b, ino)
			if err != nil {
				return err
			}
			if n == nil {
				return metawire.ErrStale
			}
			if err := i.applySetAttr(b, n, r); err != nil {
				return err
			}
			out = n.attr()
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("setattr %v: %w", ino, err)
	}
	return &metawire.AttrResp{Attr: out}, nil
}

// applySetAttr checks and applies r to n (Linux semantics), writing n and
// any released blocks into b.
func (i *Island) applySetAttr(b *pebble.Batch, n *inode, r *metawire.SetAttrReq) error {
	c := &r.Cred
	a := n.attr()
	v := r.Valid
	if v == 0 {
		return nil
	}
	now := i.now()
	// Ownership first, then mode, size and times, as Linux checks them.
	if v&metawire.SetUID != 0 && r.UID != n.uid && !isRoot(c) {
		return fmt.Errorf("chown: %w", metawire.ErrPerm)
	}
	if v&metawire.SetUID != 0 && r.UID == n.uid && !isOwner(&a, c) {
		return fmt.Errorf("chown: %w", metawire.ErrPerm)
	}
	if v&metawire.SetGID != 0 && !isRoot(c) && (c.UID != n.uid || (r.GID != n.gid && !inGroup(c, r.GID))) {
		return fmt.Errorf("chgrp: %w", metawire.ErrPerm)
	}
	if v&metawire.SetMode != 0 && !isOwner(&a, c) {
		return fmt.Errorf("chmod: %w", metawire.ErrPerm)
	}
	if v&metawire.SetSize != 0 {
		switch {
		case n.isDir():
			return fmt.Errorf("truncate: %w", metawire.ErrIsDir)
		case !n.isReg():
			return fmt.Errorf("truncate: not a regular file: %w", metawire.ErrInvalid)
		case !mayAccess(&a, c, accW):
			return fmt.Errorf("truncate: %w", metawire.ErrAccess)
		case r.Size > MaxFileSize:
			return fmt.Errorf("truncate to %d: %w", r.Size, metawire.ErrFileTooBig)
		}
	}
	if v&(metawire.SetAtime|metawire.SetMtime) != 0 && !isOwner(&a, c) {
		return fmt.Errorf("utimes: %w", metawire.ErrPerm)
	}
	if v&(metawire.SetAtimeNow|metawire.SetMtimeNow) != 0 && !isOwner(&a, c) && !mayAccess(&a, c, accW) {
		return fmt.Errorf("utimes: %w", metawire.ErrAccess)
	}
	if v&metawire.SetAccessed != 0 && !mayAccess(&a, c, accR) {
		return fmt.Errorf("access time: %w", metawire.ErrAccess)
	}

	if v&(metawire.SetUID|metawire.SetGID) != 0 {
		if v&metawire.SetUID != 0 {
			n.uid = r.UID
		}
		if v&metawire.SetGID != 0 {
			n.gid = r.GID
		}
		if !n.isDir() && v&metawire.SetMode == 0 {
			killSUID(n)
		}
	}
	if v&metawire.SetKillSUID != 0 && !n.isDir() && v&metawire.SetMode == 0 {
		killSUID(n)
	}
	if v&metawire.SetMode != 0 {
		mode := r.Mode & metawire.ModePerm
		if !isRoot(c) && !inGroup(c, n.gid) {
			mode &^= modeSGID
		}
		n.mode = n.typ() | mode
	}
	if v&metawire.SetSize != 0 {
		var d deltas
		if err := i.truncate(b, n, r.Size, &d); err != nil {
			return err
		}
		if err := d.write(b); err != nil {
			return err
		}
		if !isRoot(c) {
			killSUID(n)
		}
		if v&(metawire.SetMtime|metawire.SetMtimeNow) == 0 {
			n.mtime = now
		}
	}
	switch {
	case v&(metawire.SetAtimeNow|metawire.SetAccessed) != 0:
		n.atime = now
	case v&metawire.SetAtime != 0:
		n.atime = r.Atime
	}
	switch {
	case v&metawire.SetMtimeNow != 0:
		n.mtime = now
	case v&metawire.SetMtime != 0:
		n.mtime = r.Mtime
	}
	if v&^metawire.SetAccessed != 0 {
		n.ctime = now // a read alone changes nothing
	}
	if v&metawire.SetCtime != 0 {
		n.ctime = r.Ctime
	}
	return putInode(b, n)
}

// truncate sets the size of regular file n, releasing the blocks wholly
// past the new size. An inline file stays inline up to InlineMax (grown
// with zeros); an empty inline file grown past it becomes a block file of
// holes, and a non-empty one stays inline with its data shorter than its
// size (the rest reads as zeros; see the package doc).
func (i *Island) truncate(b *pebble.Batch, n *inode, size uint64, d *deltas) error {
	if size != n.size {
		n.version++
	}
	d.bytes += int64(size) - int64(n.size)
	switch {
	case n.inline && size <= uint64(len(n.data)):
		n.data = n.data[:size:size]
	case n.inline && size <= uint64(i.cfg.InlineMax):
		n.data = append(n.data, make([]byte, int(size)-len(n.data))...)
	case n.inline && len(n.data) == 0:
		n.inline = false
	case n.inline:
		// Keep the data; it is shorter than the file.
	default:
		bs := uint64(n.blockSize)
		if bs == 0 {
			bs = 64 << 10
		}
		first := size / bs
		if size%bs != 0 {
			first++
		}
		if err := releaseBlocks(b, n, first, d); err != nil {
			return err
		}
	}
	if len(n.data) == 0 {
		n.data = nil
	}
	n.size = size
	return nil
}
