package meta

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

type scopeKey struct{}

// scoped is what a tenant's request carries in its context: the
// connection's key, and the island that checks its subtree.
type scoped struct {
	peer   auth.Peer
	island *Island
}

// withScope marks ctx as serving a connection whose key (p) is a
// tenant's (auth.Scope.Tenant), served by i.
func withScope(ctx context.Context, p auth.Peer, i *Island) context.Context {
	return context.WithValue(ctx, scopeKey{}, scoped{peer: p, island: i})
}

// scopedOf is what withScope put in ctx, if anything.
func scopedOf(ctx context.Context) (scoped, bool) {
	s, ok := ctx.Value(scopeKey{}).(scoped)
	return s, ok
}

func scopeOf(ctx context.Context) (auth.Scope, bool) {
	s, ok := scopedOf(ctx)
	return s.peer.Scope, ok
}

// scopedPeer is the key of a scoped request (scopeOf), for its name.
func scopedPeer(ctx context.Context) (auth.Peer, bool) {
	s, ok := scopedOf(ctx)
	return s.peer, ok
}

// checkSessions refuses a tenant's request (auth.Scope.Tenant) that
// names a lock or lease session, or carries a request id, of another key:
// a tenant's clients make them with the key's log prefix in their top 32
// bits (client newSession), so a tenant cannot release, renew or end
// another client's locks, take its lease breaks, or be answered with its
// kept replies. Trusted keys (a mount host's, members) name any session.
func checkSessions(p auth.Peer, req any, id wire.ReqID) error {
	if !p.Scope.Tenant() {
		return nil
	}
	own := func(session uint64) bool { return session == 0 || auth.OwnsID(p.Name, session) }
	bad := func(what string, session uint64) error {
		return fmt.Errorf("%w: %s %016x is not key %s's", metawire.ErrPerm, what, session, p.Name)
	}
	if id != (wire.ReqID{}) && !auth.OwnsID(p.Name, binary.BigEndian.Uint64(id[:8])) {
		return fmt.Errorf("%w: request id of another key than %s", metawire.ErrPerm, p.Name)
	}
	switch r := req.(type) {
	case *metawire.LockReq:
		if !own(r.Lock.Owner.Session) {
			return bad("lock session", r.Lock.Owner.Session)
		}
		for _, l := range r.Locks {
			if !own(l.Owner.Session) {
				return bad("lock session", l.Owner.Session)
			}
		}
	case *metawire.LockSessionReq:
		if !own(r.Session) {
			return bad("lock session", r.Session)
		}
	case *metawire.LeaseReq:
		if !own(r.Session) {
			return bad("lease session", r.Session)
		}
	case *metawire.PollReq:
		if !own(r.Session) {
			return bad("lease session", r.Session)
		}
	}
	return nil
}

// confinedRoot is the top of the subtree the request's key is confined
// to, if it is.
func confinedRoot(ctx context.Context) (namespace.Ino, bool) {
	s, ok := scopedOf(ctx)
	if !ok || !s.peer.Scope.Confined() {
		return 0, false
	}
	return namespace.Ino(s.peer.Scope.Root), true
}

// checkConfined refuses req when its key is confined to a subtree and
// req names an inode outside it (or looks up ".." of the subtree's top,
// whose answer lies outside). Requests that carry no credential pass
// (serve lets a tenant send only the lease and lock-session ones besides;
// a leased read's wrapped request is checked when it is dispatched).
func checkConfined(ctx context.Context, req any) error {
	s, ok := scopedOf(ctx)
	if !ok || !s.peer.Scope.Confined() {
		return nil
	}
	n, ok := req.(metawire.InodeNamer)
	if !ok {
		if _, acts := req.(metawire.Credentialed); acts {
			// A request that acts on files but cannot say which: refused
			// rather than let through unchecked.
			return fmt.Errorf("%w: a key confined to a subtree has no use for this operation", metawire.ErrPerm)
		}
		return nil
	}
	root := namespace.Ino(s.peer.Scope.Root)
	if r, ok := req.(*metawire.NameReq); ok && r.Name == ".." && namespace.Ino(r.Dir) == root {
		return fmt.Errorf("%w: \"..\" of the top of key %s's subtree lies outside it", metawire.ErrAccess, s.peer.Name)
	}
	for _, ino := range n.NamedInodes() {
		if err := s.island.within(ctx, root, namespace.Ino(ino)); err != nil {
			if errors.Is(err, wire.ErrWouldBlock) {
				return err
			}
			return fmt.Errorf("%w: inode %v is not inside key %s's subtree (%s): %v", metawire.ErrStale, namespace.Ino(ino), s.peer.Name, s.peer.Scope.Path, err)
		}
	}
	return nil
}

// confineTTL is how long an island trusts that an inode lies inside a
// subtree: a directory moved out of a confined key's subtree stays
// reachable through inode ids that key already holds for this long.
const confineTTL = 2 * time.Second

// maxConfineDepth bounds the walk to a subtree's top (a path of 4096
// bytes has at most 2048 components).
const maxConfineDepth = 2048

// confineCache remembers (root, inode) pairs found inside the subtree of
// root, until a time.
type confineCache struct {
	mu struct {
		lockcheck.Mutex
		m map[[2]namespace.Ino]time.Time
	}
}

func (c *confineCache) inside(root, ino namespace.Ino, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.mu.m[[2]namespace.Ino{root, ino}]
	return ok && now.Before(until)
}

func (c *confineCache) add(root namespace.Ino, inos []namespace.Ino, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.m == nil || len(c.mu.m) > 1<<16 {
		c.mu.m = make(map[[2]namespace.Ino]time.Time)
	}
	for _, ino := range inos {
		c.mu.m[[2]namespace.Ino{root, ino}] = until
	}
}

// within reports (nil) whether ino lies inside the subtree whose top is
// root, walking recorded parents up to root or the namespace's root.
// Directories record their parent; other inodes the directory of the
// name they were created or last renamed under (a hard link elsewhere
// does not move it). Parents on other islands are asked of them, so a
// request served inline returns wire.ErrWouldBlock for those.
func (i *Island) within(ctx context.Context, root, ino namespace.Ino) error {
	if ino == root {
		return nil
	}
	now := time.Now()
	if i.confined.inside(root, ino, now) {
		return nil
	}
	var seen []namespace.Ino
	cur := ino
	for range maxConfineDepth {
		if cur == root || i.confined.inside(root, cur, now) {
			i.confined.add(root, seen, now.Add(confineTTL))
			return nil
		}
		if cur == namespace.RootIno || !cur.Valid() {
			return errors.New("its ancestors do not include the subtree's top")
		}
		seen = append(seen, cur)
		var parent namespace.Ino
		if i.owns(cur) {
			n, err := readInode(i.db, cur)
			switch {
			case err != nil:
				return err
			case n == nil:
				return fmt.Errorf("inode %v does not exist", cur)
			case n.parent == 0:
				return fmt.Errorf("inode %v records no parent (made before files recorded theirs)", cur)
			}
			parent = n.parent
		} else {
			if wire.IsInline(ctx) {
				return wire.ErrWouldBlock
			}
			p, err := i.parentOf(ctx, cur)
			if err != nil {
				return err
			}
			parent = p
		}
		cur = parent
	}
	return errors.New("too deep")
}

// applyScope holds a request's identity to its key's scope: a uid the
// key may not use is refused, except root, which is squashed to nobody
// (as NFS root_squash); a primary gid it may not use is refused, and
// supplementary groups it may not use are dropped (that only takes rights
// away). The request then goes through the ordinary permission checks as
// that identity.
func applyScope(s auth.Scope, c *metawire.Cred) error {
	if !s.AllowsUID(c.UID) {
		if c.UID != 0 {
			return fmt.Errorf("%w: this key may not act as uid %d (scope %s)", metawire.ErrPerm, c.UID, s)
		}
		*c = metawire.Cred{UID: auth.NobodyID, GID: auth.NobodyID}
		return nil
	}
	if !s.AllowsGID(c.GID) {
		return fmt.Errorf("%w: this key may not act as gid %d (scope %s)", metawire.ErrPerm, c.GID, s)
	}
	kept := c.Groups[:0:0]
	for _, g := range c.Groups {
		if s.AllowsGID(g) {
			kept = append(kept, g)
		}
	}
	c.Groups = kept
	return nil
}

// Access mask bits (AccessReq.Mask).
const (
	accR = 4
	accW = 2
	accX = 1
)

const (
	modeSUID   = metawire.ModeSetUID
	modeSGID   = metawire.ModeSetGID
	modeSticky = metawire.ModeSticky
)

func isRoot(c *metawire.Cred) bool { return c.UID == 0 }

// inGroup reports whether c's primary or supplementary groups hold gid.
func inGroup(c *metawire.Cred, gid uint32) bool { return c.InGroup(gid) }

// mayAccess applies the POSIX permission bits of a to c for mask
// (metawire.MayAccess).
func mayAccess(a *metawire.Attr, c *metawire.Cred, mask uint32) bool {
	return metawire.MayAccess(a, c, mask)
}

// isOwner reports whether c owns a or is root.
func isOwner(a *metawire.Attr, c *metawire.Cred) bool { return isRoot(c) || c.UID == a.UID }

// stickyDenies is metawire.StickyDenies.
func stickyDenies(dir *metawire.Attr, c *metawire.Cred, victimUID uint32) bool {
	return metawire.StickyDenies(dir, c, victimUID)
}

// stickyApplies is metawire.StickyApplies.
func stickyApplies(dir *metawire.Attr, c *metawire.Cred) bool {
	return metawire.StickyApplies(dir, c)
}
