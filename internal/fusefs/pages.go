package fusefs

import "github.com/atoll-fs/atoll/internal/lockcheck"

// pageVersions remembers, per inode, which data version of the island the
// kernel's page cache of that inode holds, so that an OPEN of a file
// nobody changed since keeps the cache (FOPEN_KEEP_CACHE) instead of
// reading everything again.
//
// The rule that makes it safe: an entry says "every cached page the kernel
// has of this inode is the island's content at version v". It is set when
// an OPEN drops the kernel's pages (the reply without FOPEN_KEEP_CACHE),
// after the open revalidated the File, so everything cached afterwards was
// read at v or written through this mount. A commit of this mount's own
// writes moves v to the commit's version only when that is exactly one
// step on (nobody else committed in between: the kernel's pages hold our
// writes and the rest at v); anything else, or a failed write-back (the
// kernel holds bytes the island does not), forgets the entry. A forgotten
// entry only costs a re-read at the next open. Truncation and attribute
// changes bump the version (or change nothing cached), so they need no
// hook: the next open sees another version and drops the pages.
//
// The kernel also drops pages on its own when attributes it fetches show
// another size or mtime (CAP_AUTO_INVAL_DATA, which go-fuse negotiates).
type pageVersions struct {
	mu lockcheck.Mutex
	m  map[uint64]pageVer
}

// pageVer is an inode's cached data version; gen tells a reused inode
// number from the inode the pages belonged to.
type pageVer struct {
	gen uint32
	ver uint64
}

// maxPageVersions bounds the map (the kernel forgets inodes without
// telling this adapter: FORGET is a no-op). When full it starts over,
// which only makes the next opens re-read.
const maxPageVersions = 1 << 16

func newPageVersions() *pageVersions { return &pageVersions{m: map[uint64]pageVer{}} }

// open records that an open of ino at (gen, ver) is being answered and
// reports whether the kernel's pages may be kept (they hold exactly that
// version). When not, the reply drops them, and from then on they hold
// that version.
func (p *pageVersions) open(ino uint64, gen uint32, ver uint64) (keep bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.m[ino]; ok && old == (pageVer{gen, ver}) {
		return true
	}
	if len(p.m) >= maxPageVersions {
		clear(p.m)
	}
	p.m[ino] = pageVer{gen, ver}
	return false
}

// committed records a commit of this mount's writes that took ino from
// version from to version to.
func (p *pageVersions) committed(ino uint64, from, to uint64) {
	if from == to {
		return // nothing was committed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old, ok := p.m[ino]
	switch {
	case !ok:
	case old.ver == from && to == from+1:
		p.m[ino] = pageVer{old.gen, to}
	default:
		delete(p.m, ino)
	}
}

// forget drops what is known of ino: its pages may hold anything.
func (p *pageVersions) forget(ino uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, ino)
}
