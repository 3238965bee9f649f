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
	modeSUID   = 0o4000
	modeSGID   = 0o2000
	modeSticky = 0o1000
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

// stickyDenies reports whether the sticky bit of dir forbids c to remove
// or rename an entry whose inode is owned by victimUID.
func stickyDenies(dir *metawire.Attr, c *metawire.Cred, victimUID uint32) bool {
	return stickyApplies(dir, c) && c.UID != victimUID
}

// stickyApplies reports whether removing entries of dir by c depends on
// who owns them (sticky directory, c neither root nor its owner).
func stickyApplies(dir *metawire.Attr, c *metawire.Cred) bool {
	return dir.Mode&modeSticky != 0 && !isRoot(c) && c.UID != dir.UID
}
