package fusefs

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// groupsTTL is how long a thread's supplementary groups are cached.
const groupsTTL = 100 * time.Millisecond

type credKey struct{ pid, uid, gid uint32 }

type credEntry struct {
	groups  []uint32
	expires time.Time
}

// credCache reads supplementary groups from /proc/<tid>/status.
type credCache struct {
	mu lockcheck.Mutex
	m  map[credKey]credEntry
	// readFile is os.ReadFile (replaceable in tests).
	readFile func(string) ([]byte, error)
}

func newCredCache() *credCache {
	return &credCache{m: map[credKey]credEntry{}, readFile: os.ReadFile}
}

// cred returns the caller's credentials.
func (c *credCache) cred(caller *fuse.Caller) metawire.Cred {
	cr := metawire.Cred{UID: caller.Uid, GID: caller.Gid}
	if caller.Pid == 0 {
		return cr
	}
	k := credKey{caller.Pid, caller.Uid, caller.Gid}
	now := time.Now()
	c.mu.Lock()
	if e, ok := c.m[k]; ok && now.Before(e.expires) {
		c.mu.Unlock()
		cr.Groups = e.groups
		return cr
	}
	c.mu.Unlock()
	groups := c.readGroups(caller.Pid)
	c.mu.Lock()
	if len(c.m) > 4096 {
		for key, e := range c.m {
			if now.After(e.expires) {
				delete(c.m, key)
			}
		}
		if len(c.m) > 4096 {
			clear(c.m)
		}
	}
	c.m[k] = credEntry{groups, now.Add(groupsTTL)}
	c.mu.Unlock()
	cr.Groups = groups
	return cr
}

// readGroups parses the "Groups:" line of /proc/<pid>/status; nil when
// the process is gone or /proc is unavailable.
func (c *credCache) readGroups(pid uint32) []uint32 {
	b, err := c.readFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return nil
	}
	return parseGroups(b)
}

func parseGroups(status []byte) []uint32 {
	for _, line := range bytes.Split(status, []byte("\n")) {
		rest, ok := bytes.CutPrefix(line, []byte("Groups:"))
		if !ok {
			continue
		}
		var out []uint32
		for _, f := range bytes.Fields(rest) {
			g, err := strconv.ParseUint(string(f), 10, 32)
			if err != nil {
				continue
			}
			out = append(out, uint32(g))
		}
		return out
	}
	return nil
}
