package meta

import (
	"context"
	"errors"
	"fmt"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// rename serves OpRename, coordinated by the source directory's island.
func (i *Island) rename(ctx context.Context, r *metawire.RenameReq) error {
	src := namespace.Ino(r.SrcDir)
	if err := i.checkIno("rename", src); err != nil {
		return err
	}
	switch {
	case r.Flags&^(metawire.RenameNoReplace|metawire.RenameExchange) != 0,
		r.Flags == metawire.RenameNoReplace|metawire.RenameExchange:
		return fmt.Errorf("rename: flags %#x: %w", r.Flags, metawire.ErrInvalid)
	}
	if !namespace.Ino(r.DstDir).Valid() {
		return fmt.Errorf("rename: destination %v: %w", namespace.Ino(r.DstDir), metawire.ErrStale)
	}
	once := i.renameOnce
	if r.Flags&metawire.RenameExchange != 0 {
		once = i.exchangeOnce
	}
	err := i.retry(ctx, func() error { return once(ctx, r) })
	if err != nil {
		return fmt.Errorf("rename %v/%q to %v/%q: %w", src, r.SrcName, namespace.Ino(r.DstDir), r.DstName, err)
	}
	return nil
}

// vanished turns ErrStale of an inode an entry pointed at into a
// conflict: the entry is being removed concurrently.
func vanished(err error) error {
	if errors.Is(err, metawire.ErrStale) {
		return conflict("%v", err)
	}
	return err
}

// renameStart reads and checks what a rename and an exchange both need,
// in Linux's order: both directories (search permission), both names,
// and the source entry x, which must exist.
func (i *Island) renameStart(ctx context.Context, r *metawire.RenameReq) (sAttr, tAttr metawire.Attr, x dirent, err error) {
	S, T := namespace.Ino(r.SrcDir), namespace.Ino(r.DstDir)
	c := &r.Cred
	if sAttr, err = i.attrOf(ctx, S); err != nil {
		return
	}
	tAttr = sAttr
	if T != S {
		if tAttr, err = i.attrOf(ctx, T); err != nil {
			return
		}
	}
	if !sAttr.IsDir() || !tAttr.IsDir() {
		err = metawire.ErrNotDir
		return
	}
	if !mayAccess(&sAttr, c, accX) || !mayAccess(&tAttr, c, accX) {
		err = metawire.ErrAccess
		return
	}
	if isDots(r.SrcName) || isDots(r.DstName) {
		err = fmt.Errorf("renaming . or ..: %w", metawire.ErrInvalid)
		return
	}
	if err = checkName(r.SrcName); err != nil {
		return
	}
	if err = checkName(r.DstName); err != nil {
		return
	}
	x, ok, err := i.entryOf(ctx, S, r.SrcName)
	if err == nil && !ok {
		err = metawire.ErrNotFound
	}
	return sAttr, tAttr, x, err
}

func (i *Island) renameOnce(ctx context.Context, r *metawire.RenameReq) error {
	S, T := namespace.Ino(r.SrcDir), namespace.Ino(r.DstDir)
	c := &r.Cred
	sAttr, tAttr, x, err := i.renameStart(ctx, r)
	if err != nil {
		return err
	}
	y, yok, err := i.entryOf(ctx, T, r.DstName)
	if err != nil {
		return err
	}
	if yok && r.Flags&metawire.RenameNoReplace != 0 {
		return metawire.ErrExists
	}
	xDir := x.typ == metawire.ModeDir
	move := xDir && S != T // the directory changes parent
	var chain []ancestor
	if move {
		if chain, err = i.ancestors(ctx, T, x.ino); err != nil {
			return err
		}
	}
	if yok && y.ino == x.ino {
		return i.checkSameInode(ctx, r, x.ino)
	}
	if !mayAccess(&sAttr, c, accW|accX) {
		return metawire.ErrAccess
	}
	var xAttr metawire.Attr
	if stickyApplies(&sAttr, c) || move {
		if xAttr, err = i.attrOf(ctx, x.ino); err != nil {
			return vanished(err)
		}
		if stickyDenies(&sAttr, c, xAttr.UID) {
			return fmt.Errorf("sticky source directory: %w", metawire.ErrPerm)
		}
	}
	if yok {
		switch {
		case xDir && y.typ != metawire.ModeDir:
			return metawire.ErrNotDir
		case !xDir && y.typ == metawire.ModeDir:
			return metawire.ErrIsDir
		}
	}
	if !mayAccess(&tAttr, c, accW|accX) {
		return metawire.ErrAccess
	}
	if yok && stickyApplies(&tAttr, c) {
		yAttr, err := i.attrOf(ctx, y.ino)
		if err != nil {
			return vanished(err)
		}
		if stickyDenies(&tAttr, c, yAttr.UID) {
			return fmt.Errorf("sticky destination directory: %w", metawire.ErrPerm)
		}
	}
	if move && !mayAccess(&xAttr, c, accW) {
		return fmt.Errorf("moving a directory needs write permission on it: %w", metawire.ErrAccess)
	}

	now := i.now()
	as := []metawire.Action{
		{Kind: metawire.ActRemoveEntry, Ino: uint64(S), Name: r.SrcName, Target: uint64(x.ino), Time: now},
		{Kind: metawire.ActAddEntry, Ino: uint64(T), Name: r.DstName, Target: uint64(x.ino), Type: x.typ,
			Expect: uint64(y.ino), Time: now},
	}
	if move {
		as = append(as, metawire.Action{Kind: metawire.ActSetParent, Ino: uint64(x.ino), Target: uint64(T), Expect: uint64(S), Time: now})
	} else {
		as = append(as, metawire.Action{Kind: metawire.ActTouch, Ino: uint64(x.ino), Type: x.typ, Time: now,
			Flags: metawire.ActTouchParent, Target: uint64(T), Expect: uint64(S)})
	}
	deltaS, deltaT := int32(0), int32(0)
	if move {
		deltaS, deltaT = -1, 1
	}
	if yok {
		if y.typ == metawire.ModeDir {
			as = append(as, metawire.Action{Kind: metawire.ActDeleteInode, Ino: uint64(y.ino), Type: metawire.ModeDir,
				Flags: metawire.ActRequireEmpty})
			deltaT--
		} else {
			as = append(as, metawire.Action{Kind: metawire.ActAdjustNlink, Ino: uint64(y.ino), Type: y.typ, Delta: -1,
				Flags: metawire.ActDeleteAtZero, Time: now})
		}
	}
	if S == T {
		deltaS, deltaT = deltaS+deltaT, 0
	}
	if deltaS != 0 {
		as = append(as, metawire.Action{Kind: metawire.ActTouch, Ino: uint64(S), Delta: deltaS, Time: now})
	}
	if deltaT != 0 {
		as = append(as, metawire.Action{Kind: metawire.ActTouch, Ino: uint64(T), Delta: deltaT, Time: now})
	}
	return i.execute(ctx, appendChainChecks(as, chain))
}

// checkSameInode is a rename or exchange of two names of one inode:
// nothing to do, if that held at one instant. The two reads that found it
// took no lock, and may straddle another rename of the same name (the
// source read before it, the destination after): both entries are checked
// together under shared locks, and the operation starts over if either
// moved.
func (i *Island) checkSameInode(ctx context.Context, r *metawire.RenameReq, ino namespace.Ino) error {
	return i.execute(ctx, []metawire.Action{
		{Kind: metawire.ActCheckEntry, Ino: r.SrcDir, Name: r.SrcName, Target: uint64(ino)},
		{Kind: metawire.ActCheckEntry, Ino: r.DstDir, Name: r.DstName, Target: uint64(ino)},
	})
}

// appendChainChecks holds the ancestry of a directory's new parent still
// until the decision, so no concurrent rename can make the moved
// directory its own ancestor.
func appendChainChecks(as []metawire.Action, chain []ancestor) []metawire.Action {
	for _, a := range chain {
		as = append(as, metawire.Action{Kind: metawire.ActCheck, Ino: uint64(a.dir), Type: metawire.ModeDir,
			Flags: metawire.ActCheckParent, Target: uint64(a.parent)})
	}
	return as
}

// exchangeOnce swaps two names (RENAME_EXCHANGE): SrcName then names
// what DstName named and the other way round, atomically, both existing
// and of any types; a directory that changes parent gets its ".." and
// the parents' link counts follow. As rename(2): write and search
// permission on both directories, the sticky bit on each for the entry
// leaving it, write permission on a directory that changes parent, and
// neither directory may end up inside itself.
func (i *Island) exchangeOnce(ctx context.Context, r *metawire.RenameReq) error {
	S, T := namespace.Ino(r.SrcDir), namespace.Ino(r.DstDir)
	c := &r.Cred
	sAttr, tAttr, x, err := i.renameStart(ctx, r)
	if err != nil {
		return err
	}
	y, ok, err := i.entryOf(ctx, T, r.DstName)
	if err != nil {
		return err
	}
	if !ok {
		return metawire.ErrNotFound
	}
	if x.ino == y.ino {
		return i.checkSameInode(ctx, r, x.ino)
	}
	if !mayAccess(&sAttr, c, accW|accX) || !mayAccess(&tAttr, c, accW|accX) {
		return metawire.ErrAccess
	}
	xDir, yDir := x.typ == metawire.ModeDir, y.typ == metawire.ModeDir
	moveX, moveY := xDir && S != T, yDir && S != T
	var chain []ancestor
	if moveX {
		c, err := i.ancestors(ctx, T, x.ino)
		if err != nil {
			return err
		}
		chain = append(chain, c...)
	}
	if moveY {
		c, err := i.ancestors(ctx, S, y.ino)
		if err != nil {
			return err
		}
		chain = append(chain, c...)
	}
	for _, e := range []struct {
		dir   *metawire.Attr
		ino   namespace.Ino
		moved bool
	}{{&sAttr, x.ino, moveX}, {&tAttr, y.ino, moveY}} {
		if !stickyApplies(e.dir, c) && !e.moved {
			continue
		}
		at, err := i.attrOf(ctx, e.ino)
		if err != nil {
			return vanished(err)
		}
		if stickyDenies(e.dir, c, at.UID) {
			return fmt.Errorf("sticky directory: %w", metawire.ErrPerm)
		}
		if e.moved && !mayAccess(&at, c, accW) {
			return fmt.Errorf("moving a directory needs write permission on it: %w", metawire.ErrAccess)
		}
	}
	now := i.now()
	as := []metawire.Action{
		{Kind: metawire.ActAddEntry, Ino: uint64(S), Name: r.SrcName, Target: uint64(y.ino), Type: y.typ, Expect: uint64(x.ino), Time: now},
		{Kind: metawire.ActAddEntry, Ino: uint64(T), Name: r.DstName, Target: uint64(x.ino), Type: x.typ, Expect: uint64(y.ino), Time: now},
	}
	for _, e := range []struct {
		ino      namespace.Ino
		typ      uint32
		moved    bool
		from, to namespace.Ino
	}{{x.ino, x.typ, moveX, S, T}, {y.ino, y.typ, moveY, T, S}} {
		if e.moved {
			as = append(as, metawire.Action{Kind: metawire.ActSetParent, Ino: uint64(e.ino), Target: uint64(e.to), Expect: uint64(e.from), Time: now})
		} else {
			as = append(as, metawire.Action{Kind: metawire.ActTouch, Ino: uint64(e.ino), Type: e.typ, Time: now,
				Flags: metawire.ActTouchParent, Target: uint64(e.to), Expect: uint64(e.from)})
		}
	}
	// A directory changing parent takes its ".." link along.
	deltaS := int32(0)
	if moveX {
		deltaS--
	}
	if moveY {
		deltaS++
	}
	if deltaS != 0 {
		as = append(as,
			metawire.Action{Kind: metawire.ActTouch, Ino: uint64(S), Delta: deltaS, Time: now},
			metawire.Action{Kind: metawire.ActTouch, Ino: uint64(T), Delta: -deltaS, Time: now})
	}
	return i.execute(ctx, appendChainChecks(as, chain))
}

type ancestor struct{ dir, parent namespace.Ino }

// ancestors walks the ".." chain from dir up to the root, through other
// islands as needed. Meeting moved (the directory being renamed) means
// the rename would put a directory inside itself: ErrInvalid.
func (i *Island) ancestors(ctx context.Context, dir, moved namespace.Ino) ([]ancestor, error) {
	var chain []ancestor
	seen := map[namespace.Ino]bool{}
	for cur := dir; ; {
		if cur == moved {
			return nil, fmt.Errorf("moving %v into its own subtree: %w", moved, metawire.ErrInvalid)
		}
		if cur == namespace.RootIno {
			return chain, nil
		}
		if seen[cur] || len(chain) > metawire.MaxPathLen {
			return nil, fmt.Errorf("%w: directory %v: loop in the parent chain", metawire.ErrIO, cur)
		}
		seen[cur] = true
		p, err := i.parentOf(ctx, cur)
		if err != nil {
			return nil, vanished(err)
		}
		chain = append(chain, ancestor{cur, p})
		cur = p
	}
}
