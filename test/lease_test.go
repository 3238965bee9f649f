package test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// newLeasedFS is a client FS with leases whose records without a lease
// expire at once: whatever it answers without asking an island, it
// answers under a lease.
func (fc *fsCluster) newLeasedFS(t testing.TB) *client.FS {
	t.Helper()
	data := newClient(t, fc.storage, nil)
	fs, err := client.NewFS(client.FSConfig{Data: data, Map: fc.view, Logger: quietLogger(), AttrTTL: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	fs.EnableLeases()
	t.Cleanup(func() { fs.Close() })
	return fs
}

// leasePair starts a one-island cluster with a client holding leases
// (a), one without (b), and the directory path, made by b.
func leasePair(t *testing.T, path string) (fc *fsCluster, a, b *client.FS, d metawire.Attr) {
	t.Helper()
	fc = startFSCluster(t, 5, 1)
	a, b = fc.newLeasedFS(t), fc.newFS(t)
	d, err := b.MkdirAll(context.Background(), metawire.Cred{}, path, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	return fc, a, b, d
}

// islandMetric sums island 0's metric name.
func (fc *fsCluster) islandMetric(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := fc.regs[0].Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// TestLeasesCacheUntilAnotherClientChanges: a client holding leases
// answers repeated lookups (found and missing names) and getattrs without
// asking its island, and still sees every change another client makes as
// soon as that change returns: the island breaks the lease first.
func TestLeasesCacheUntilAnotherClientChanges(t *testing.T) {
	fc, a, b, d := leasePair(t, "/d")
	ctx := context.Background()
	cred := metawire.Cred{}
	// gone and there check a name through the lease holder.
	gone := func(name, what string) {
		t.Helper()
		if _, err := a.Lookup(ctx, cred, d.Ino, name); !errors.Is(err, metawire.ErrNotFound) {
			t.Fatalf("%s %q: %v, want it missing", what, name, err)
		}
	}
	there := func(name, what string) {
		t.Helper()
		if _, err := a.Lookup(ctx, cred, d.Ino, name); err != nil {
			t.Fatalf("%s %q: %v", what, name, err)
		}
	}
	x, err := b.Create(ctx, metawire.CreateReq{Dir: d.Ino, Name: "x", Mode: 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lookup(ctx, cred, d.Ino, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetAttr(ctx, cred, x.Attr.Ino); err != nil {
		t.Fatal(err)
	}
	since := fc.islandOpsSince(t, "lease", "lookup", "getattr", "readdir")
	for k := range 10 {
		if at, err := a.Lookup(ctx, cred, d.Ino, "x"); err != nil || at.Ino != x.Attr.Ino {
			t.Fatalf("lookup x: %v %v", at.Ino, err)
		}
		if _, err := a.GetAttr(ctx, cred, x.Attr.Ino); err != nil {
			t.Fatal(err)
		}
		if _, err := a.GetAttrFresh(ctx, cred, x.Attr.Ino); err != nil {
			t.Fatal(err)
		}
		gone("nope", "lookup of")
		gone(fmt.Sprintf("new%d", k), "lookup of")
	}
	// The first missing name is a leased lookup, the second lists the
	// directory (then every name is known); nothing else reaches the
	// island.
	got := since()
	if got["lease"] != 2 || got["lookup"]+got["getattr"]+got["readdir"] != 0 {
		t.Fatalf("island requests for 50 answers: %v, want 2 leased reads", got)
	}
	if a.LeasesHeld() == 0 {
		t.Fatal("no lease held")
	}
	// A listing read under the lease is served again from the cache.
	names := func() []string {
		t.Helper()
		r, err := a.Readdir(ctx, cred, d.Ino, 0, 0, true)
		if err != nil || !r.EOF {
			t.Fatalf("readdir: %v (eof %v)", err, r.EOF)
		}
		var out []string
		for _, e := range r.Entries {
			if !e.HasAttr && e.Name != "." && e.Name != ".." {
				t.Fatalf("readdir plus: %q without attributes", e.Name)
			}
			out = append(out, e.Name)
		}
		return out
	}
	since = fc.islandOpsSince(t, "lease", "readdir")
	first := names()
	if again := names(); fmt.Sprint(again) != fmt.Sprint(first) || fmt.Sprint(first) != "[. .. x]" {
		t.Fatalf("listings %v then %v, want [. .. x]", first, again)
	}
	if got := since(); got["lease"]+got["readdir"] != 1 {
		t.Fatalf("two listings cost %v island requests, want 1", got)
	}

	// Another client's changes are seen at once.
	if _, err := b.SetAttr(ctx, metawire.SetAttrReq{Ino: x.Attr.Ino, Valid: metawire.SetMode, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	if at, err := a.GetAttr(ctx, cred, x.Attr.Ino); err != nil || at.Mode&0o777 != 0o600 {
		t.Fatalf("mode after another client's chmod: %o, %v", at.Mode&0o777, err)
	}
	if _, err := b.Create(ctx, metawire.CreateReq{Dir: d.Ino, Name: "nope", Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	there("nope", "a name another client created")
	if got := names(); fmt.Sprint(got) != "[. .. x nope]" {
		t.Fatalf("listing after another client's create: %v", got)
	}
	if err := b.Unlink(ctx, cred, d.Ino, "x"); err != nil {
		t.Fatal(err)
	}
	gone("x", "a name another client removed")
	if err := b.Rename(ctx, metawire.RenameReq{SrcDir: d.Ino, SrcName: "nope", DstDir: d.Ino, DstName: "y"}); err != nil {
		t.Fatal(err)
	}
	gone("nope", "a name another client renamed away")
	there("y", "a name another client renamed to")
	if a.LeaseBreaks() == 0 || fc.islandMetric(t, "atoll_meta_lease_breaks_total") == 0 {
		t.Fatalf("no lease break counted (client %d)", a.LeaseBreaks())
	}

	// The holder's own changes keep its lease and its cache right (a
	// listing it holds included).
	if got := names(); fmt.Sprint(got) != "[. .. y]" {
		t.Fatalf("listing: %v, want [. .. y]", got)
	}
	if _, err := a.Create(ctx, metawire.CreateReq{Dir: d.Ino, Name: "mine", Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if got := names(); fmt.Sprint(got) != "[. .. y mine]" {
		t.Fatalf("listing after the holder's own create: %v, want [. .. y mine]", got)
	}
	if err := a.Rename(ctx, metawire.RenameReq{SrcDir: d.Ino, SrcName: "mine", DstDir: d.Ino, DstName: "mine2"}); err != nil {
		t.Fatal(err)
	}
	gone("mine", "own rename's old name")
	there("mine2", "own rename's new name")
	if got := names(); !slices.Contains(got, "mine2") || !slices.Contains(got, "y") || len(got) != 4 {
		t.Fatalf("listing after the holder's own create and rename: %v, want . .. y mine2", got)
	}
	if _, err := b.Lookup(ctx, cred, d.Ino, "mine2"); err != nil {
		t.Fatalf("the other client does not see the holder's rename: %v", err)
	}
}

// TestLeaseHolderThatStopsListening: a client that holds a lease and
// stops answering (its process gone) delays another client's change by
// at most the lease's term; the island counts the lease waited out.
func TestLeaseHolderThatStopsListening(t *testing.T) {
	fc, a, b, d := leasePair(t, "/d")
	ctx := context.Background()
	cred := metawire.Cred{}
	if _, err := a.Lookup(ctx, cred, d.Ino, "x"); !errors.Is(err, metawire.ErrNotFound) {
		t.Fatal(err)
	}
	if a.LeasesHeld() == 0 {
		t.Fatal("no lease held")
	}
	a.Close() // stops polling; the island still counts the lease held
	if _, err := b.Create(ctx, metawire.CreateReq{Dir: d.Ino, Name: "x", Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if n := fc.islandMetric(t, "atoll_meta_lease_expired_total"); n != 1 {
		t.Fatalf("%v leases waited out, want 1", n)
	}
	// A client that stopped listening gets no new lease.
	c := fc.newLeasedFS(t)
	if _, err := c.Lookup(ctx, cred, d.Ino, "x"); err != nil {
		t.Fatal(err)
	}
	if c.LeasesHeld() != 1 {
		t.Fatalf("a listening client holds %d leases, want 1", c.LeasesHeld())
	}
}

// TestOwnCrossIslandChangesKeepLeases: a change a client makes that
// another island applies for it (rmdir of a directory on another island,
// a rename into one) does not break that client's own leases: the
// transaction carries its session. (Breaking them made every rmdir of
// `rm -rf` through the mount wait for its own kernel invalidation.)
func TestOwnCrossIslandChangesKeepLeases(t *testing.T) {
	fc := startFSCluster(t, 5, 3)
	a := fc.newLeasedFS(t)
	ctx := context.Background()
	cred := metawire.Cred{}
	top, err := a.MkdirAll(ctx, cred, "/top", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	var subs []metawire.Attr
	for k := range 8 {
		r, err := a.Mkdir(ctx, metawire.CreateReq{Dir: top.Ino, Name: fmt.Sprintf("s%d", k), Mode: 0o755})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, r.Attr)
		// A lease on the new directory's bucket (on its own island).
		if _, err := a.Lookup(ctx, cred, r.Attr.Ino, "nothing"); !errors.Is(err, metawire.ErrNotFound) {
			t.Fatal(err)
		}
		if _, err := a.Create(ctx, metawire.CreateReq{Dir: top.Ino, Name: fmt.Sprintf("f%d", k), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	if a.LeasesHeld() < 8 {
		t.Fatalf("%d leases held, want at least 8", a.LeasesHeld())
	}
	for k := range 8 {
		// Into another island's directory, and back out of it.
		if err := a.Rename(ctx, metawire.RenameReq{SrcDir: top.Ino, SrcName: fmt.Sprintf("f%d", k), DstDir: subs[k].Ino, DstName: "f"}); err != nil {
			t.Fatal(err)
		}
		if err := a.Unlink(ctx, cred, subs[k].Ino, "f"); err != nil {
			t.Fatal(err)
		}
		if err := a.Rmdir(ctx, cred, top.Ino, fmt.Sprintf("s%d", k)); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.LeaseBreaks(); n != 0 {
		t.Fatalf("the client's own changes broke %d of its leases", n)
	}
}

// TestLeasedListingOfALargeDirectory: a directory listed page by page
// under one lease is listed again from the cache, whole and in order,
// until another client changes it.
func TestLeasedListingOfALargeDirectory(t *testing.T) {
	fc, a, b, d := leasePair(t, "/big")
	ctx := context.Background()
	cred := metawire.Cred{}
	const n = 1200
	for k := range n {
		if _, err := b.Create(ctx, metawire.CreateReq{Dir: d.Ino, Name: fmt.Sprintf("f%04d", k), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	list := func() []string {
		t.Helper()
		var names []string
		cookie := uint64(0)
		for {
			r, err := a.Readdir(ctx, cred, d.Ino, cookie, 500, true)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range r.Entries {
				if !e.HasAttr && e.Name != "." && e.Name != ".." {
					t.Fatalf("%q without attributes", e.Name)
				}
				names = append(names, e.Name)
				cookie = e.Cookie
			}
			if r.EOF {
				return names
			}
		}
	}
	first := list()
	since := fc.islandOpsSince(t, "lease", "readdir", "getattr")
	again := list()
	if got := since(); got["lease"]+got["readdir"]+got["getattr"] != 0 {
		t.Fatalf("listing %d entries again cost %v island requests, want none", len(again), got)
	}
	if len(first) != n+2 || !slices.Equal(first, again) {
		t.Fatalf("listings of %d and %d entries differ", len(first), len(again))
	}
	if err := b.Unlink(ctx, cred, d.Ino, "f0600"); err != nil {
		t.Fatal(err)
	}
	if after := list(); len(after) != n+1 || slices.Contains(after, "f0600") {
		t.Fatalf("listing after another client's unlink: %d entries", len(after))
	}
}
