package meta

import (
	"context"
	"fmt"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/metawire"
)

type scopeKey struct{}

// withScope marks ctx as serving a connection whose key (p) is limited to
// identities.
func withScope(ctx context.Context, p auth.Peer) context.Context {
	return context.WithValue(ctx, scopeKey{}, p)
}

func scopeOf(ctx context.Context) (auth.Scope, bool) {
	p, ok := ctx.Value(scopeKey{}).(auth.Peer)
	return p.Scope, ok
}

// scopedPeer is the key of a scoped request (scopeOf), for its name.
func scopedPeer(ctx context.Context) (auth.Peer, bool) {
	p, ok := ctx.Value(scopeKey{}).(auth.Peer)
	return p, ok
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
