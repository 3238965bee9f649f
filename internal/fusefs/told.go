package fusefs

import (
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// maxTold bounds toldVersions; past it the record starts again (the
// files in use are told again at once).
const maxTold = 1 << 16

// toldVersions is the newest data version (with its size and times) of
// each regular file the kernel was given attributes of. The kernel takes
// a smaller size than it has for a truncation: it cuts reads at it and
// ends a mapping under its reader with SIGBUS. Attributes of an older
// version reach it when a reply was answered from the cache, or when
// replies computed concurrently are sent in another order (it drops a
// stale reply only if its request was sent before the newer one was
// applied), while another client grows the file.
type toldVersions struct {
	mu struct {
		lockcheck.Mutex
		m map[uint64]metawire.Attr
	}
}

// tell returns at to give the kernel, or, when the kernel was given a
// newer data version of the file already, at with that version's size
// and times; it records at when it is newer.
func (t *toldVersions) tell(at metawire.Attr) metawire.Attr {
	if !at.IsRegular() {
		return at
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, ok := t.mu.m[at.Ino]
	switch {
	case ok && cur.Gen == at.Gen && cur.Version > at.Version:
		return withData(at, cur)
	case ok && cur.Gen == at.Gen && cur.Version == at.Version:
		return at
	}
	if t.mu.m == nil || len(t.mu.m) >= maxTold {
		t.mu.m = map[uint64]metawire.Attr{}
	}
	t.mu.m[at.Ino] = at
	return at
}

// size returns the size of the newest version of ino the kernel was
// given, if known.
func (t *toldVersions) size(ino uint64) (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.mu.m[ino]
	return at.Size, ok
}

// withData is at with the data version, size and times of newer.
func withData(at, newer metawire.Attr) metawire.Attr {
	at.Size, at.Blocks, at.Version, at.Mtime, at.Ctime = newer.Size, newer.Blocks, newer.Version, newer.Mtime, newer.Ctime
	return at
}
