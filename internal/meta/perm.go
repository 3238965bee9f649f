package meta

import (
	"slices"

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
func inGroup(c *metawire.Cred, gid uint32) bool {
	return c.GID == gid || slices.Contains(c.Groups, gid)
}

// mayAccess applies the POSIX permission bits of a to c for mask (R=4,
// W=2, X=1). Root passes read and write always, and execute on
// directories or when any execute bit is set.
func mayAccess(a *metawire.Attr, c *metawire.Cred, mask uint32) bool {
	if mask == 0 {
		return true
	}
	if isRoot(c) {
		if mask&accX == 0 || a.IsDir() {
			return true
		}
		return a.Mode&0o111 != 0
	}
	var bits uint32
	switch {
	case c.UID == a.UID:
		bits = a.Mode >> 6 & 7
	case inGroup(c, a.GID):
		bits = a.Mode >> 3 & 7
	default:
		bits = a.Mode & 7
	}
	return bits&mask == mask
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
