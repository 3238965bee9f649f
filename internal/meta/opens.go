package meta

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// Open-file holds (LockHold, LockUnhold; the package doc's "Open files").
// A client that has a file open holds it under its lock session: one
// record per inode under the inode's bucket (tagHold) lists the holding
// sessions, and an island-wide index (gHoldIndex) names the inodes with
// one, so a session's end finds its holds as it finds its locks. An
// inode whose last link goes while it is held keeps its record, blocks
// and attributes (nlink 0, no name) and is reclaimed when the last hold
// goes: readers and writers on other hosts keep what they opened, as on
// a local disk. A client that holds the bucket's exclusive lease tells
// the island of its opens only when the lease is recalled or ends
// (client/opens.go): nobody else can unlink the file before that.

const (
	tagHold    = 'o'
	gHoldIndex = 'o' // FF..'o' ino(8): the inode has a hold record
)

func holdKey(ino namespace.Ino) []byte {
	return binary.BigEndian.AppendUint64(bucketPrefix(ino.Bucket(), tagHold), uint64(ino))
}

func holdIndexKey(ino namespace.Ino) []byte {
	return binary.BigEndian.AppendUint64(globalKey(gHoldIndex), uint64(ino))
}

// readHolds returns the sessions holding ino open (sorted), as r holds
// them.
func readHolds(r reader, ino namespace.Ino) ([]uint64, error) {
	v, ok, err := get(r, holdKey(ino))
	if err != nil || !ok {
		return nil, err
	}
	return decodeHolds(ino, v)
}

func decodeHolds(ino namespace.Ino, v []byte) ([]uint64, error) {
	p, err := decodeBytes(v)
	if err != nil || len(p)%8 != 0 || len(p) == 0 {
		return nil, fmt.Errorf("%w: holds of %v: %d bytes (%v)", metawire.ErrIO, ino, len(p), err)
	}
	hs := make([]uint64, 0, len(p)/8)
	for k := 0; k < len(p); k += 8 {
		hs = append(hs, binary.BigEndian.Uint64(p[k:]))
	}
	return hs, nil
}

// writeHolds puts hs as ino's holds in b (none: the record and its index
// entry go).
func writeHolds(b *pebble.Batch, ino namespace.Ino, hs []uint64) error {
	if len(hs) == 0 {
		if err := b.Delete(holdKey(ino), nil); err != nil {
			return err
		}
		return b.Delete(holdIndexKey(ino), nil)
	}
	p := make([]byte, 0, 8*len(hs))
	for _, h := range hs {
		p = binary.BigEndian.AppendUint64(p, h)
	}
	if err := b.Set(holdKey(ino), encodeBytes(p), nil); err != nil {
		return err
	}
	return b.Set(holdIndexKey(ino), nil, nil)
}

// unlinkedOrDeleted is ActAdjustNlink's end for an inode whose last link
// went: kept (nlink 0, no name) while a session holds it open, deleted
// otherwise.
func unlinkedOrDeleted(b *pebble.Batch, n *inode, d *deltas) error {
	hs, err := readHolds(b, n.ino)
	if err != nil {
		return err
	}
	if len(hs) > 0 && !n.isDir() {
		return putInode(b, n)
	}
	return deleteInode(b, n, d)
}

// hold serves LockHold and LockUnhold for session s.
func (i *Island) hold(ctx context.Context, ino namespace.Ino, s uint64, on bool) (*metawire.LockResp, error) {
	resp := &metawire.LockResp{}
	err := i.withInodes(ctx, []namespace.Ino{ino}, func(b *pebble.Batch) error {
		n, err := readInode(b, ino)
		if err != nil {
			return err
		}
		hs, err := readHolds(b, ino)
		if err != nil {
			return err
		}
		if n == nil {
			if !on && len(hs) > 0 {
				return writeHolds(b, ino, nil) // left by an older bug: tidy
			}
			return fmt.Errorf("%w: hold of %v", metawire.ErrStale, ino)
		}
		resp.Attr = n.attr()
		k, found := slices.BinarySearch(hs, s)
		switch {
		case on && !found:
			if n.isDir() {
				return fmt.Errorf("%w: hold of directory %v", metawire.ErrInvalid, ino)
			}
			if n.nlink == 0 {
				// Unlinked: only its holders keep it, and a new hold
				// comes from a handle opened before (a session that was
				// replaced reopening what it had open).
				if len(hs) == 0 {
					return fmt.Errorf("%w: hold of unlinked %v", metawire.ErrStale, ino)
				}
			}
			return writeHolds(b, ino, slices.Insert(hs, k, s))
		case !on && found:
			return i.dropHold(b, n, slices.Delete(hs, k, k+1))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// dropHold writes n's remaining holds hs and reclaims n if it has no
// link and no hold left.
func (i *Island) dropHold(b *pebble.Batch, n *inode, hs []uint64) error {
	if err := writeHolds(b, n.ino, hs); err != nil {
		return err
	}
	if len(hs) > 0 || n.nlink > 0 {
		return nil
	}
	var d deltas
	if err := deleteInode(b, n, &d); err != nil {
		return err
	}
	i.met.openReclaimed.Inc()
	i.flocks.stats.openReclaimed.Add(1)
	return d.write(b)
}

// countHolds adds each session's holds on this island to held (the
// session sweep: a session that holds files open must be renewed like
// one that holds locks), and returns how many inodes are held and how
// many of them are unlinked.
func (i *Island) countHolds(held map[uint64]int) (inodes, unlinked int) {
	inos, err := i.indexedInodes(gHoldIndex)
	if err != nil {
		return 0, 0
	}
	for _, ino := range inos {
		if !i.owns(ino) {
			continue
		}
		hs, err := readHolds(i.db, ino)
		if err != nil {
			continue
		}
		for _, s := range hs {
			held[s]++
		}
		inodes++
		if n, err := readInode(i.db, ino); err == nil && n != nil && n.nlink == 0 {
			unlinked++
		}
	}
	return inodes, unlinked
}

// releaseHolds drops session s's holds on every inode of the island (its
// session ended), reclaiming the unlinked inodes nobody else holds.
func (i *Island) releaseHolds(ctx context.Context, s uint64) error {
	inos, err := i.indexedInodes(gHoldIndex)
	if err != nil {
		return err
	}
	for _, ino := range inos {
		if !i.owns(ino) {
			continue
		}
		if _, err := i.hold(ctx, ino, s, false); err != nil && !errors.Is(err, metawire.ErrStale) {
			return err
		}
	}
	return nil
}

// listHolds adds ino's holders to a LockList answer.
func listHolds(r reader, ino namespace.Ino, resp *metawire.LockResp) error {
	hs, err := readHolds(r, ino)
	resp.Holders = hs
	return err
}
