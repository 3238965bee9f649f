package meta

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/atoll-fs/atoll/internal/metawire"
)

func TestReaddirBasics(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	d := must(r.mkdir(rootIno(), "d", 0o755))
	for k := range 5 {
		must(r.create(d.Ino, fmt.Sprintf("f%d", k), 0o644))
	}
	resp := must(r.readdir(d.Ino, 0, 0, true))
	if !resp.EOF || len(resp.Entries) != 7 || resp.DirAttr.Ino != d.Ino {
		t.Fatalf("readdir: eof %v, %d entries", resp.EOF, len(resp.Entries))
	}
	if e := resp.Entries[0]; e.Name != "." || e.Cookie != 1 || e.Ino != d.Ino || !e.HasAttr {
		t.Fatalf("first entry %+v", e)
	}
	if e := resp.Entries[1]; e.Name != ".." || e.Cookie != 2 || e.Ino != rootIno() {
		t.Fatalf("second entry %+v", e)
	}
	for k, e := range resp.Entries[2:] {
		if e.Name != fmt.Sprintf("f%d", k) || e.Cookie != uint64(3+k) || e.Type != metawire.ModeFile ||
			!e.HasAttr || e.Attr.Ino != e.Ino {
			t.Fatalf("entry %d: %+v", k, e)
		}
	}
	// Page by page, one entry at a time.
	var got []string
	cookie := uint64(0)
	for {
		p := must(r.readdir(d.Ino, cookie, 1, false))
		for _, e := range p.Entries {
			got = append(got, e.Name)
			cookie = e.Cookie
			if e.HasAttr {
				t.Fatal("attributes without Plus")
			}
		}
		if p.EOF {
			break
		}
	}
	if len(got) != 7 {
		t.Fatalf("paged listing %v", got)
	}
	_, err := r.readdir(must(r.lookup(d.Ino, "f0")).Ino, 0, 0, false)
	wantErr(t, err, metawire.ErrNotDir, "readdir of a file")
	empty := must(r.readdir(d.Ino, 1<<40, 0, false))
	if !empty.EOF || len(empty.Entries) != 0 {
		t.Fatal("readdir past the end")
	}

	// Attributes with Plus are the inode's own, whatever the order of
	// inodes against cookies (a file renamed within the directory keeps
	// its old inode under a new cookie), for files with inline data and
	// for a subdirectory (its own bucket) and a file linked in from
	// another directory.
	must(r.commit(metawire.FileWrite{Ino: must(r.lookup(d.Ino, "f3")).Ino, Size: 5, SetInline: true, Inline: []byte("three")}))
	if err := r.rename(d.Ino, "f0", d.Ino, "g0", 0); err != nil {
		t.Fatal(err)
	}
	sub := must(r.mkdir(d.Ino, "sub", 0o700))
	other := must(r.mkdir(rootIno(), "other", 0o755))
	far := must(r.create(other.Ino, "far", 0o600))
	must(r.link(far.Ino, d.Ino, "linked"))
	resp = must(r.readdir(d.Ino, 0, 0, true))
	names := map[string]bool{}
	for _, e := range resp.Entries {
		names[e.Name] = true
		if e.Name == ".." {
			continue
		}
		want := must(r.getattr(e.Ino))
		if !e.HasAttr || e.Attr != want {
			t.Fatalf("entry %q: attributes %+v (has %v), getattr says %+v", e.Name, e.Attr, e.HasAttr, want)
		}
	}
	for _, n := range []string{"g0", "f3", "sub", "linked"} {
		if !names[n] {
			t.Fatalf("listing lacks %q: %v", n, names)
		}
	}
	if a := must(r.getattr(sub.Ino)); a.Mode&0o777 != 0o700 {
		t.Fatalf("subdirectory mode %o", a.Mode)
	}
}

// TestReaddirCookiesStable lists a directory page by page while other
// goroutines insert and delete entries: a listing resumed from a cookie
// must neither repeat nor skip an entry that existed throughout.
func TestReaddirCookiesStable(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	d := must(r.mkdir(rootIno(), "d", 0o755))
	stable := map[string]bool{}
	for k := range 200 {
		name := fmt.Sprintf("s%03d", k)
		must(r.create(d.Ino, name, 0o644))
		stable[name] = true
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("t%d-%d", w, rng.IntN(50))
				if rng.IntN(2) == 0 {
					_, _ = r.create(d.Ino, name, 0o644)
				} else {
					_ = r.unlink(d.Ino, name)
				}
			}
		}()
	}
	for round := range 5 {
		seen := map[string]int{}
		cookie := uint64(0)
		for {
			p := must(r.readdir(d.Ino, cookie, uint32(7+round), false))
			for _, e := range p.Entries {
				seen[e.Name]++
				cookie = e.Cookie
			}
			if p.EOF {
				break
			}
		}
		for name := range stable {
			if seen[name] != 1 {
				t.Fatalf("round %d: stable entry %s seen %d times", round, name, seen[name])
			}
		}
		// A churned name may show up twice: removed behind the cursor and
		// created again ahead of it is a new entry (POSIX leaves entries
		// added or removed during a listing unspecified).
		for name, n := range seen {
			if !strings.HasPrefix(name, "t") && n != 1 {
				t.Fatalf("round %d: %s seen %d times", round, name, n)
			}
		}
	}
	close(stop)
	wg.Wait()
	c.mustFsck()
}

func TestXattrs(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	alice := c.as(1000, 1000)
	bob := c.as(1001, 1001)
	pub := must(r.mkdir(rootIno(), "pub", 0o777))
	f := must(alice.create(pub.Ino, "f", 0o644))
	wantErr(t, alice.setxattr(f.Ino, "user.a", []byte("1"), 0), nil, "set")
	wantErr(t, alice.setxattr(f.Ino, "user.a", []byte("2"), metawire.XattrCreate), metawire.ErrExists, "create existing")
	wantErr(t, alice.setxattr(f.Ino, "user.b", []byte("2"), metawire.XattrReplace), metawire.ErrNoData, "replace missing")
	wantErr(t, alice.setxattr(f.Ino, "user.a", []byte("22"), metawire.XattrReplace), nil, "replace")
	wantErr(t, alice.setxattr(f.Ino, "user.a", nil, 3), metawire.ErrInvalid, "both flags")
	wantErr(t, alice.setxattr(f.Ino, "trusted.x", []byte("1"), 0), metawire.ErrNotSupported, "other namespace")
	wantErr(t, alice.setxattr(f.Ino, "security.selinux", []byte("1"), 0), metawire.ErrNotSupported, "security namespace")
	wantErr(t, alice.setxattr(f.Ino, "user."+string(make([]byte, 251)), nil, 0), metawire.ErrRange, "name too long")
	wantErr(t, alice.setxattr(f.Ino, "user.big", make([]byte, metawire.MaxXattrValue+1), 0), metawire.ErrNoSpace, "value too big")
	wantErr(t, bob.setxattr(f.Ino, "user.b", nil, 0), metawire.ErrAccess, "set without write permission")
	if v := must(bob.getxattr(f.Ino, "user.a")); string(v) != "22" {
		t.Fatalf("get %q", v)
	}
	_, err := alice.getxattr(f.Ino, "user.none")
	wantErr(t, err, metawire.ErrNoData, "get missing")
	wantErr(t, alice.setxattr(f.Ino, PolicyXattr, []byte("raid7"), 0), metawire.ErrInvalid, "bad policy")
	wantErr(t, alice.setxattr(f.Ino, PolicyXattr, []byte("mirror:2,block=16KiB"), 0), nil, "policy")
	a := must(alice.getattr(f.Ino))
	if a.Policy != "mirror:2,block=16KiB" || a.BlockSize != 16<<10 {
		t.Fatalf("policy attr %q block %d", a.Policy, a.BlockSize)
	}
	names := must(alice.listxattr(f.Ino))
	if len(names) != 2 || names[0] != PolicyXattr || names[1] != "user.a" {
		t.Fatalf("list %v", names)
	}
	wantErr(t, alice.removexattr(f.Ino, "user.a"), nil, "remove")
	wantErr(t, alice.removexattr(f.Ino, "user.a"), metawire.ErrNoData, "remove missing")

	// Directories pass their policy to new files.
	must(r.setattr(metawire.SetAttrReq{Ino: pub.Ino, Valid: metawire.SetMode, Mode: 0o777}))
	wantErr(t, r.setxattr(pub.Ino, PolicyXattr, []byte("ec:2+1,block=32KiB"), 0), nil, "dir policy")
	g := must(alice.create(pub.Ino, "g", 0o644))
	if g.Policy != "ec:2+1,block=32KiB" || g.BlockSize != 32<<10 {
		t.Fatalf("inherited policy %q block %d", g.Policy, g.BlockSize)
	}
	sub := must(alice.mkdir(pub.Ino, "sub", 0o755))
	if sub.Policy != "ec:2+1,block=32KiB" {
		t.Fatalf("subdirectory policy %q", sub.Policy)
	}
	// Symlinks and special files carry no user attributes.
	l := must(alice.symlink(pub.Ino, "l", "x"))
	wantErr(t, alice.setxattr(l.Ino, "user.a", nil, 0), metawire.ErrPerm, "xattr on a symlink")
	// A sticky directory's attributes belong to its owner.
	must(r.setattr(metawire.SetAttrReq{Ino: pub.Ino, Valid: metawire.SetMode, Mode: 0o1777}))
	wantErr(t, alice.setxattr(pub.Ino, "user.x", nil, 0), metawire.ErrPerm, "xattr on another's sticky directory")
	// Unlinking drops the attributes with the inode.
	wantErr(t, alice.setxattr(g.Ino, "user.keep", []byte("v"), 0), nil, "set on g")
	wantErr(t, alice.unlink(pub.Ino, "g"), nil, "unlink g")
	c.mustFsck()
}
