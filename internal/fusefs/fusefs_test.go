package fusefs

import (
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

func TestParseGroups(t *testing.T) {
	st := []byte("Name:\tbash\nUmask:\t0022\nGid:\t1001\t1001\t1001\t1001\nGroups:\t4 24 1001 \nNStgid:\t1\n")
	if got := parseGroups(st); !slices.Equal(got, []uint32{4, 24, 1001}) {
		t.Fatalf("groups %v", got)
	}
	if got := parseGroups([]byte("Groups:\t\n")); len(got) != 0 {
		t.Fatalf("no groups: %v", got)
	}
	if got := parseGroups([]byte("garbage")); got != nil {
		t.Fatalf("no line: %v", got)
	}
}

func TestCredCache(t *testing.T) {
	c := newCredCache()
	reads := 0
	c.readFile = func(string) ([]byte, error) {
		reads++
		return []byte("Groups:\t7 8\n"), nil
	}
	caller := &fuse.Caller{Owner: fuse.Owner{Uid: 5, Gid: 6}, Pid: 42}
	for i := 0; i < 3; i++ {
		cr := c.cred(caller)
		if cr.UID != 5 || cr.GID != 6 || !slices.Equal(cr.Groups, []uint32{7, 8}) {
			t.Fatalf("cred %+v", cr)
		}
	}
	if reads != 1 {
		t.Fatalf("%d reads of /proc for one thread within the TTL", reads)
	}
	c.readFile = func(string) ([]byte, error) { return nil, errors.New("gone") }
	if cr := c.cred(&fuse.Caller{Owner: fuse.Owner{Uid: 1}, Pid: 43}); cr.Groups != nil {
		t.Fatalf("process gone: %+v", cr)
	}
	if cr := c.cred(&fuse.Caller{Owner: fuse.Owner{Uid: 9}}); cr.UID != 9 || cr.Groups != nil {
		t.Fatalf("kernel request: %+v", cr)
	}
}

func TestNodeIDs(t *testing.T) {
	a := &adapter{root: uint64(namespace.RootIno)}
	if a.ino(fuse.FUSE_ROOT_ID) != uint64(namespace.RootIno) || a.nodeID(uint64(namespace.RootIno)) != fuse.FUSE_ROOT_ID {
		t.Fatal("root mapping")
	}
	x := uint64(namespace.MakeIno(0x1234, 7))
	if a.ino(x) != x || a.nodeID(x) != x {
		t.Fatal("identity for other inodes")
	}
	// A mount of a subtree (a confined key's): its top is node 1.
	sub := &adapter{root: x}
	if sub.ino(fuse.FUSE_ROOT_ID) != x || sub.nodeID(x) != fuse.FUSE_ROOT_ID {
		t.Fatal("subtree root mapping")
	}
}

func TestStatusUsesErrnoTable(t *testing.T) {
	for _, e := range metawire.Table {
		if got := status(e.Err); got != fuse.Status(metawire.Errno(e.Err)) {
			t.Errorf("%v: %v", e.Err, got)
		}
	}
	if status(nil) != fuse.OK || status(errors.New("x")) != fuse.EIO {
		t.Fatal("nil or unknown")
	}
}

func TestSplitNs(t *testing.T) {
	for _, c := range []struct {
		ns   int64
		sec  int64
		nsec uint32
	}{{1500000000987654321, 1500000000, 987654321}, {-1, -1, 999999999}, {0, 0, 0}} {
		s, n := splitNs(c.ns)
		if int64(s) != c.sec || n != c.nsec {
			t.Errorf("%d: %d %d", c.ns, int64(s), n)
		}
	}
}

func TestAccessMask(t *testing.T) {
	for _, c := range []struct {
		flags uint32
		want  uint32
	}{{syscall.O_RDONLY, 4}, {syscall.O_WRONLY, 2}, {syscall.O_RDWR, 6}, {syscall.O_RDONLY | syscall.O_TRUNC, 6}} {
		if got := accessMask(c.flags); got != c.want {
			t.Errorf("%#x: %d", c.flags, got)
		}
	}
}

// TestHoldNotedInTime: a record given past its lease's end is noted for
// the watch (kernelBucket.beyond); one noted too late after its lease was
// read is given only what the lease has left; one no longer than the
// lease's left or the configured timeout is not noted (the watch would
// drop it at every lookup in the lease's last second).
func TestHoldNotedInTime(t *testing.T) {
	const ttl = time.Second
	now := time.Now()
	for _, c := range []struct {
		name        string
		hold, left  time.Duration
		asked       time.Time
		want        time.Duration
		wantNoted   bool
		wantAtLeast time.Duration // for a late one: given no more than left
	}{
		{"within the lease", 2 * time.Second, 2 * time.Second, now, 2 * time.Second, false, 0},
		{"configured timeout", 800 * time.Millisecond, 800 * time.Millisecond, now, ttl, false, 0},
		{"held past the lease", 20 * time.Second, 2 * time.Second, now, 20 * time.Second, true, 0},
		{"held, noted late", 20 * time.Second, 2 * time.Second, now.Add(-400 * time.Millisecond), 0, false, 1500 * time.Millisecond},
	} {
		kb := &kernelBucket{}
		got := kb.holdLocked(c.hold, c.left, ttl, c.asked)
		if c.wantAtLeast == 0 && got != c.want {
			t.Errorf("%s: gave %v, want %v", c.name, got, c.want)
		}
		if c.wantAtLeast > 0 && (got > c.left-400*time.Millisecond || got < ttl) {
			t.Errorf("%s: gave %v, want at most what the lease had left then (%v) and at least %v", c.name, got, c.left-400*time.Millisecond, ttl)
		}
		if noted := !kb.beyond.IsZero(); noted != c.wantNoted {
			t.Errorf("%s: noted %v, want %v", c.name, noted, c.wantNoted)
		}
		if c.wantNoted && kb.beyond.Before(now.Add(c.hold)) {
			t.Errorf("%s: noted until %v, before the hold's end", c.name, kb.beyond)
		}
	}
}
