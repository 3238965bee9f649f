package meta

import (
	"context"
	"fmt"
	"strings"

	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/cockroachdb/pebble/v2"
)

// PolicyXattr is the extended attribute holding a file's (or a
// directory's default) redundancy policy. It lives in the inode record
// (Attr.Policy), not as an xattr record.
const PolicyXattr = "user.atoll.policy"

const userPrefix = "user."

// checkXattrName validates an attribute name: only "user." names are
// stored.
func checkXattrName(name string) error {
	switch {
	case name == "" || len(name) > metawire.MaxXattrName:
		return fmt.Errorf("xattr name of %d bytes: %w", len(name), metawire.ErrRange)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("xattr name with NUL: %w", metawire.ErrInvalid)
	case !strings.HasPrefix(name, userPrefix):
		return fmt.Errorf("xattr %.64q: only the user namespace is stored: %w", name, metawire.ErrNotSupported)
	case name == userPrefix:
		return fmt.Errorf("xattr %q: %w", name, metawire.ErrInvalid)
	}
	return nil
}

func (i *Island) getXattr(ctx context.Context, r *metawire.XattrReq) (*metawire.XattrResp, error) {
	ino := namespace.Ino(r.Ino)
	if err := i.checkIno("getxattr", ino); err != nil {
		return nil, err
	}
	if err := checkXattrName(r.Name); err != nil {
		return nil, fmt.Errorf("getxattr %v: %w", ino, err)
	}
	n, err := i.localInode(ctx, ino)
	if err != nil {
		return nil, fmt.Errorf("getxattr: %w", err)
	}
	a := n.attr()
	if !mayAccess(&a, &r.Cred, accR) {
		return nil, fmt.Errorf("getxattr %v: %w", ino, metawire.ErrAccess)
	}
	if r.Name == PolicyXattr {
		if n.policy == "" {
			return nil, fmt.Errorf("getxattr %v %q: %w", ino, r.Name, metawire.ErrNoData)
		}
		return &metawire.XattrResp{Value: []byte(n.policy)}, nil
	}
	v, ok, err := get(i.db, xattrKey(ino, r.Name))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("getxattr %v %q: %w", ino, r.Name, metawire.ErrNoData)
	}
	val, err := decodeBytes(v)
	if err != nil {
		return nil, fmt.Errorf("getxattr %v %q: %w", ino, r.Name, err)
	}
	return &metawire.XattrResp{Value: val}, nil
}

func (i *Island) listXattr(ctx context.Context, r *metawire.InoReq) (*metawire.XattrResp, error) {
	ino := namespace.Ino(r.Ino)
	if err := i.checkIno("listxattr", ino); err != nil {
		return nil, err
	}
	n, err := i.localInode(ctx, ino)
	if err != nil {
		return nil, fmt.Errorf("listxattr: %w", err)
	}
	a := n.attr()
	if !mayAccess(&a, &r.Cred, accR) {
		return nil, fmt.Errorf("listxattr %v: %w", ino, metawire.ErrAccess)
	}
	resp := &metawire.XattrResp{Names: []string{}}
	if n.policy != "" {
		resp.Names = append(resp.Names, PolicyXattr)
	}
	p := xattrPrefix(ino)
	it, err := i.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		resp.Names = append(resp.Names, string(it.Key()[len(p):]))
	}
	return resp, it.Error()
}

// xattrWriteCheck applies Linux's rules for changing user attributes:
// only regular files and directories carry them, a sticky directory's
// only by its owner, and the caller needs write permission.
func xattrWriteCheck(n *inode, c *metawire.Cred) error {
	a := n.attr()
	switch {
	case !n.isReg() && !n.isDir():
		return fmt.Errorf("user xattrs on a %o file: %w", n.typ(), metawire.ErrPerm)
	case n.isDir() && n.mode&modeSticky != 0 && !isOwner(&a, c):
		return fmt.Errorf("user xattrs of a sticky directory: %w", metawire.ErrPerm)
	case !mayAccess(&a, c, accW):
		return metawire.ErrAccess
	}
	return nil
}

func (i *Island) setXattr(ctx context.Context, r *metawire.XattrReq) error {
	ino := namespace.Ino(r.Ino)
	if err := i.checkIno("setxattr", ino); err != nil {
		return err
	}
	if err := checkXattrName(r.Name); err != nil {
		return fmt.Errorf("setxattr %v: %w", ino, err)
	}
	if r.Flags&^(metawire.XattrCreate|metawire.XattrReplace) != 0 || r.Flags == metawire.XattrCreate|metawire.XattrReplace {
		return fmt.Errorf("setxattr %v: flags %#x: %w", ino, r.Flags, metawire.ErrInvalid)
	}
	if len(r.Value) > metawire.MaxXattrValue {
		return fmt.Errorf("setxattr %v: value of %d bytes (max %d): %w", ino, len(r.Value), metawire.MaxXattrValue, metawire.ErrNoSpace)
	}
	var policy layout.Policy
	if r.Name == PolicyXattr {
		p, err := layout.Parse(string(r.Value))
		if err != nil {
			return fmt.Errorf("setxattr %v %s: %v: %w", ino, PolicyXattr, err, metawire.ErrInvalid)
		}
		policy = p
	}
	err := i.retry(ctx, func() error {
		return i.withInodes(ctx, []namespace.Ino{ino}, func(b *pebble.Batch) error {
			n, err := readInode(b, ino)
			if err != nil {
				return err
			}
			if n == nil {
				return metawire.ErrStale
			}
			if err := xattrWriteCheck(n, &r.Cred); err != nil {
				return err
			}
			var exists bool
			if r.Name == PolicyXattr {
				exists = n.policy != ""
			} else if _, exists, err = get(b, xattrKey(ino, r.Name)); err != nil {
				return err
			}
			switch {
			case r.Flags == metawire.XattrCreate && exists:
				return metawire.ErrExists
			case r.Flags == metawire.XattrReplace && !exists:
				return metawire.ErrNoData
			}
			if r.Name == PolicyXattr {
				n.policy = policy.String()
				if n.isReg() && n.size == 0 && n.alloc == 0 {
					n.blockSize = uint32(policy.BlockSize)
				}
			} else if err := b.Set(xattrKey(ino, r.Name), encodeBytes(r.Value), nil); err != nil {
				return err
			}
			n.ctime = i.now()
			return putInode(b, n)
		})
	})
	if err != nil {
		return fmt.Errorf("setxattr %v %q: %w", ino, r.Name, err)
	}
	return nil
}

func (i *Island) removeXattr(ctx context.Context, r *metawire.XattrReq) error {
	ino := namespace.Ino(r.Ino)
	if err := i.checkIno("removexattr", ino); err != nil {
		return err
	}
	if err := checkXattrName(r.Name); err != nil {
		return fmt.Errorf("removexattr %v: %w", ino, err)
	}
	err := i.retry(ctx, func() error {
		return i.withInodes(ctx, []namespace.Ino{ino}, func(b *pebble.Batch) error {
			n, err := readInode(b, ino)
			if err != nil {
				return err
			}
			if n == nil {
				return metawire.ErrStale
			}
			if err := xattrWriteCheck(n, &r.Cred); err != nil {
				return err
			}
			if r.Name == PolicyXattr {
				if n.policy == "" {
					return metawire.ErrNoData
				}
				n.policy = ""
			} else {
				_, exists, err := get(b, xattrKey(ino, r.Name))
				if err != nil {
					return err
				}
				if !exists {
					return metawire.ErrNoData
				}
				if err := b.Delete(xattrKey(ino, r.Name), nil); err != nil {
					return err
				}
			}
			n.ctime = i.now()
			return putInode(b, n)
		})
	})
	if err != nil {
		return fmt.Errorf("removexattr %v %q: %w", ino, r.Name, err)
	}
	return nil
}
