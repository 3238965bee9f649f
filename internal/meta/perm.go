package meta

import (
	"github.com/atoll-fs/atoll/internal/metawire"
)

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
