package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/lease"
	"github.com/atoll-fs/atoll/internal/meta"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
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
	// The first may come from the listing the lookups made complete.
	if got := since(); got["lease"]+got["readdir"] > 1 {
		t.Fatalf("two listings cost %v island requests, want at most 1", got)
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

// TestWriteBehindUnderAnExclusiveLease: a client whose lease on a
// directory is exclusive answers chown, chmod and utimes of a file there
// itself and sends them later as one setattr; another client's read
// recalls the lease, which sends them first, so that read sees all three.
// After the recall the directory is shared and changes go straight to
// the island again.
func TestWriteBehindUnderAnExclusiveLease(t *testing.T) {
	fc, a, b, d := leasePair(t, "/wb")
	a.EnableWriteBehind()
	ctx := context.Background()
	root := metawire.Cred{}
	if _, err := a.Lookup(ctx, root, d.Ino, "f"); !errors.Is(err, metawire.ErrNotFound) {
		t.Fatalf("lookup of a missing name: %v", err)
	}
	f, err := a.Create(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: "f", Mode: 0o4755})
	if err != nil {
		t.Fatal(err)
	}
	ino := f.Attr.Ino
	// The create itself may be kept back (TestCreatesKeptBack); sent,
	// the changes below are kept back on their own.
	if err := a.SendCreate(ctx, ino); err != nil {
		t.Fatal(err)
	}
	since := fc.islandOpsSince(t, "setattr")
	const when = int64(1_500_000_000_123_456_789)
	var last metawire.Attr
	for _, req := range []metawire.SetAttrReq{
		{Cred: root, Ino: ino, Valid: metawire.SetUID | metawire.SetGID, UID: 1000, GID: 100}, // clears set-user-id
		{Cred: root, Ino: ino, Valid: metawire.SetMode, Mode: 0o4750},
		{Cred: root, Ino: ino, Valid: metawire.SetAtime | metawire.SetMtime, Atime: when, Mtime: when},
	} {
		if last, err = a.SetAttr(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if n := since()["setattr"]; n != 0 {
		t.Fatalf("the island saw %v setattrs, want them kept back", n)
	}
	if kept, sent, _ := a.WriteBehindStats(); kept != 3 || sent != 0 {
		t.Fatalf("kept %d sent %d, want 3 and 0", kept, sent)
	}
	want := func(at metawire.Attr, who string) {
		t.Helper()
		if at.UID != 1000 || at.GID != 100 || at.Mode&metawire.ModePerm != 0o4750 || at.Mtime != when || at.Atime != when {
			t.Fatalf("%s: uid %d gid %d mode %o atime %d mtime %d", who, at.UID, at.GID, at.Mode&metawire.ModePerm, at.Atime, at.Mtime)
		}
	}
	want(last, "the holder's answer")
	if at, err := a.GetAttr(ctx, root, ino); err != nil {
		t.Fatal(err)
	} else {
		want(at, "the holder's getattr")
	}
	// Another client's read: recalled, flushed, then answered.
	at, err := b.GetAttr(ctx, root, ino)
	if err != nil {
		t.Fatal(err)
	}
	want(at, "the other client's getattr")
	if n := since()["setattr"]; n != 1 {
		t.Fatalf("the island saw %v setattrs, want one merged", n)
	}
	if _, sent, failed := a.WriteBehindStats(); sent != 1 || failed != 0 {
		t.Fatalf("sent %d failed %d", sent, failed)
	}
	if n := fc.islandMetric(t, "atoll_meta_lease_recalls_total"); n != 1 {
		t.Fatalf("%v recalls, want 1", n)
	}
	// Contended now: the next change is the island's at once.
	if _, err := a.SetAttr(ctx, metawire.SetAttrReq{Cred: root, Ino: ino, Valid: metawire.SetMode, Mode: 0o700}); err != nil {
		t.Fatal(err)
	}
	b.Invalidate(ino)
	if at, err := b.GetAttr(ctx, root, ino); err != nil || at.Mode&metawire.ModePerm != 0o700 {
		t.Fatalf("after a change of a shared directory: mode %o, %v", at.Mode&metawire.ModePerm, err)
	}
	if kept, _, _ := a.WriteBehindStats(); kept != 3 {
		t.Fatalf("kept %d changes back on a shared directory", kept)
	}
}

// TestWriteBehindSyncSends: a change kept back is sent by SyncLazy (the
// mount's fsync and unmount) and by the holder's next request of any
// kind, so the holder's own later changes apply after it.
func TestWriteBehindSyncSends(t *testing.T) {
	fc, a, b, d := leasePair(t, "/wbs")
	a.EnableWriteBehind()
	ctx := context.Background()
	root := metawire.Cred{}
	if _, err := a.Lookup(ctx, root, d.Ino, "f"); !errors.Is(err, metawire.ErrNotFound) {
		t.Fatalf("lookup of a missing name: %v", err)
	}
	var inos []uint64
	for _, name := range []string{"f", "g"} {
		f, err := a.Create(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: name, Mode: 0o644})
		if err != nil {
			t.Fatal(err)
		}
		inos = append(inos, f.Attr.Ino)
	}
	since := fc.islandOpsSince(t, "setattr", "create")
	chmod := func(ino uint64, mode uint32) {
		t.Helper()
		if _, err := a.SetAttr(ctx, metawire.SetAttrReq{Cred: root, Ino: ino, Valid: metawire.SetMode, Mode: mode}); err != nil {
			t.Fatal(err)
		}
	}
	chmod(inos[0], 0o600)
	if err := a.SyncLazy(ctx); err != nil {
		t.Fatal(err)
	}
	if got := since(); got["setattr"] != 1 {
		t.Fatalf("after SyncLazy: %v, want one setattr", got)
	}
	// A change of other records (a create in the directory) sends what
	// is kept back beside it; any other request waits until it is sent.
	chmod(inos[1], 0o640)
	if _, err := a.Create(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: "h", Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if err := a.Access(ctx, root, d.Ino, 1); err != nil {
		t.Fatal(err)
	}
	if got := since(); got["setattr"] != 2 || got["create"] != 1 {
		t.Fatalf("after a create and a read: %v, want two setattrs and the create", got)
	}
	// A request interrupted (its context canceled) still sends what it
	// found kept back: those changes were answered already.
	chmod(inos[0], 0o604)
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = a.GetAttr(canceled, root, uint64(namespace.RootIno)) // not cached by a
	if got := since(); got["setattr"] != 3 {
		t.Fatalf("after an interrupted request: %v, want three setattrs", got)
	}
	if _, _, failed := a.WriteBehindStats(); failed != 0 {
		t.Fatalf("%d kept-back changes failed", failed)
	}
	// A change of the very inode kept back waits for it.
	chmod(inos[1], 0o641)
	if _, err := a.SetAttr(ctx, metawire.SetAttrReq{Cred: root, Ino: inos[1], Valid: metawire.SetSize, Size: 10}); err != nil {
		t.Fatal(err)
	}
	if at, err := b.GetAttr(ctx, root, inos[1]); err != nil || at.Mode&metawire.ModePerm != 0o641 || at.Size != 10 {
		t.Fatalf("after a kept-back chmod and a truncation: mode %o size %d, %v", at.Mode&metawire.ModePerm, at.Size, err)
	}
	chmod(inos[1], 0o640)
	if err := a.SyncLazy(ctx); err != nil {
		t.Fatal(err)
	}
	if got := since(); got["setattr"] != 6 {
		t.Fatalf("%v setattrs, want 6", got["setattr"])
	}
	for k, mode := range []uint32{0o604, 0o640} {
		b.Invalidate(inos[k])
		if at, err := b.GetAttr(ctx, root, inos[k]); err != nil || at.Mode&metawire.ModePerm != mode {
			t.Fatalf("file %d: mode %o, %v; want %o", k, at.Mode&metawire.ModePerm, err, mode)
		}
	}
}

// TestLeaseInUseIsRenewed: a client answering from a lease past half its
// term renews it in the background, so a directory it uses longer than
// the term stays known whole: every lookup of a new name in 4 s (the
// term is 3 s) is answered without a cache miss.
func TestLeaseInUseIsRenewed(t *testing.T) {
	_, a, b, d := leasePair(t, "/renew")
	ctx := context.Background()
	if _, err := b.Create(ctx, metawire.CreateReq{Dir: d.Ino, Name: "x", Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"x", "missing-1", "missing-2", "missing-3"} {
		_, _ = a.Lookup(ctx, root, d.Ino, name) // the second miss lists d whole
	}
	_, before := a.CacheStats()
	start := time.Now()
	for k := 0; time.Since(start) < 4*time.Second; k++ {
		if _, err := a.Lookup(ctx, root, d.Ino, fmt.Sprintf("new-%d", k)); !errors.Is(err, metawire.ErrNotFound) {
			t.Fatalf("lookup new-%d: %v", k, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, after := a.CacheStats(); after != before {
		t.Fatalf("%d cache misses while the directory was in use past its lease term", after-before)
	}
}

// TestIdleLeaseRenewedByPolls: a directory read under a lease and then
// left alone for more than two lease terms is still answered from the
// cache (names, missing names, attributes, the listing): the session's
// polls renewed the lease. Another client's change is still seen as soon
// as it returns, and the island counted the renewals.
func TestIdleLeaseRenewedByPolls(t *testing.T) {
	fc, a, b, d := leasePair(t, "/idle")
	ctx := context.Background()
	x, err := b.Create(ctx, metawire.CreateReq{Dir: d.Ino, Name: "x", Mode: 0o644})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"x", "missing-1", "missing-2"} {
		_, _ = a.Lookup(ctx, root, d.Ino, name) // the second miss lists d whole
	}
	if _, err := a.GetAttr(ctx, root, x.Attr.Ino); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Readdir(ctx, root, d.Ino, 0, 0, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lease.DefaultTerm*2 + lease.DefaultTerm/2)
	since := fc.islandOpsSince(t, "lease", "lookup", "getattr", "readdir")
	_, missesBefore := a.CacheStats()
	if at, err := a.Lookup(ctx, root, d.Ino, "x"); err != nil || at.Ino != x.Attr.Ino {
		t.Fatalf("lookup x: %v %v", at.Ino, err)
	}
	if _, err := a.Lookup(ctx, root, d.Ino, "never"); !errors.Is(err, metawire.ErrNotFound) {
		t.Fatalf("lookup of a missing name: %v", err)
	}
	if _, err := a.GetAttr(ctx, root, x.Attr.Ino); err != nil {
		t.Fatal(err)
	}
	if r, err := a.Readdir(ctx, root, d.Ino, 0, 0, true); err != nil || len(r.Entries) != 3 {
		t.Fatalf("readdir: %v %v", r.Entries, err)
	}
	if got := since(); got["lease"]+got["lookup"]+got["getattr"]+got["readdir"] != 0 {
		t.Fatalf("island requests after %v idle: %v, want none (the polls renew the lease)", lease.DefaultTerm*5/2, got)
	}
	if _, misses := a.CacheStats(); misses != missesBefore {
		t.Fatalf("%d cache misses after the idle time", misses-missesBefore)
	}
	if n := fc.islandMetric(t, "atoll_meta_lease_renewals_total"); n == 0 {
		t.Fatal("the island counted no renewal")
	}
	// Renewed leases still break at another client's change.
	if _, err := b.Create(ctx, metawire.CreateReq{Dir: d.Ino, Name: "never", Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lookup(ctx, root, d.Ino, "never"); err != nil {
		t.Fatalf("a name another client created, looked up through the renewed lease: %v", err)
	}
}

// TestReadMapKeepsAttrsLeased: a file's block map read under its
// directory's lease leaves the attributes it carries leased, so the
// kernel's getattr after the read (and the next open) costs no island
// request. Before, the map's attributes replaced the leased ones with a
// copy good for AttrTTL only.
func TestReadMapKeepsAttrsLeased(t *testing.T) {
	fc, a, b, d := leasePair(t, "/maps")
	ctx := context.Background()
	data := bytes.Repeat([]byte("atoll map "), 100_000) // 1 MB: not inline
	if err := b.WriteFile(ctx, root, "/maps/f", data, 0o644); err != nil {
		t.Fatal(err)
	}
	at, err := a.Lookup(ctx, root, d.Ino, "f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetAttrFresh(ctx, root, at.Ino); err != nil { // leased
		t.Fatal(err)
	}
	fh, err := a.Open(ctx, root, at.Ino)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if n, err := fh.ReadAt(ctx, got, 0); n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes (%v), want the file", n, err)
	}
	fh.Release()
	since := fc.islandOpsSince(t, "lease", "getattr", "readmap")
	for range 3 {
		if _, err := a.GetAttrFresh(ctx, root, at.Ino); err != nil {
			t.Fatal(err)
		}
	}
	if got := since(); got["lease"]+got["getattr"]+got["readmap"] != 0 {
		t.Fatalf("getattrs after reading the map cost %v island requests, want none", got)
	}
}

// TestOwnInlineWriteReadsBackWithoutMap: a file whose whole content this
// client just committed inline is read back (a new open) from the block
// map its commit left cached, without a ReadMap round trip; another
// client's later write is still read, not the cached copy.
func TestOwnInlineWriteReadsBackWithoutMap(t *testing.T) {
	fc, a, b, d := leasePair(t, "/inl")
	ctx := context.Background()
	made, err := b.Create(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: "f", Mode: 0o644})
	if err != nil {
		t.Fatal(err)
	}
	write := func(c *client.FS, data []byte) {
		t.Helper()
		fh, err := c.Open(ctx, root, made.Attr.Ino)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.WriteAt(ctx, data, 0); err != nil {
			t.Fatal(err)
		}
		if err := fh.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		fh.Release()
	}
	read := func(c *client.FS) []byte {
		t.Helper()
		fh, err := c.Open(ctx, root, made.Attr.Ino)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Release()
		got := make([]byte, 256)
		n, err := fh.ReadAt(ctx, got, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		return got[:n]
	}
	mine := []byte("written inline by the reader itself")
	write(a, mine)
	since := fc.islandOpsSince(t, "readmap")
	if got := read(a); !bytes.Equal(got, mine) {
		t.Fatalf("read back %q, want %q", got, mine)
	}
	if got := since(); got["readmap"] != 0 {
		t.Fatalf("reading back an own inline write cost %v island requests", got)
	}
	theirs := bytes.ToUpper(mine) // as long: the whole content changes
	write(b, theirs)
	if got := read(a); !bytes.Equal(got, theirs) {
		t.Fatalf("after another client's write, read %q, want %q", got, theirs)
	}
}

// TestCreatesKeptBack: under an exclusive lease on a directory whose
// names and attributes the holder has cached, a create is answered by the
// holder itself with an inode id it reserved, and sent later with what
// the file got meanwhile (its data once flushed, its attribute changes)
// as one island request: by SendCreate (the mount's close), or before
// another client's request is served (the recall). The other client sees
// every file whole, with its data and attributes; its create of a name
// kept back fails with EEXIST, as it would have had the create been sent.
func TestCreatesKeptBack(t *testing.T) {
	fc, a, b, d := leasePair(t, "/cb")
	a.EnableWriteBehind()
	a.SetLazyCreate(true) // as the mount: Flush is not Fsync
	a.SetLazyClose(true)
	ctx := context.Background()
	root := metawire.Cred{}
	if _, err := a.Lookup(ctx, root, d.Ino, "missing"); !errors.Is(err, metawire.ErrNotFound) {
		t.Fatalf("lookup of a missing name: %v", err)
	}
	if _, err := a.GetAttr(ctx, root, d.Ino); err != nil { // the directory's attributes, leased
		t.Fatal(err)
	}
	since := fc.islandOpsSince(t, "create", "commit", "setattr", "allocino", "lookup", "lease")
	const n = 30
	const when = int64(1_600_000_000_000_000_007)
	var inos []uint64
	for i := 0; i < n; i++ {
		// As the kernel does before a create: the name is known missing
		// (the second miss lists the directory under the lease).
		if _, err := a.Lookup(ctx, root, d.Ino, fmt.Sprintf("f%02d", i)); !errors.Is(err, metawire.ErrNotFound) {
			t.Fatalf("lookup: %v", err)
		}
		r, err := a.Create(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: fmt.Sprintf("f%02d", i), Mode: 0o600, Exclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		inos = append(inos, r.Attr.Ino)
		fh, err := a.OpenWithAttr(ctx, root, r.Attr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.WriteAt(ctx, bytes.Repeat([]byte{byte(i)}, 100*i), 0); err != nil {
			t.Fatal(err)
		}
		if err := fh.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := a.SetAttr(ctx, metawire.SetAttrReq{Cred: root, Ino: r.Attr.Ino, Valid: metawire.SetUID | metawire.SetMode | metawire.SetMtime,
			UID: 1000 + uint32(i), Mode: 0o640, Mtime: when}); err != nil {
			t.Fatal(err)
		}
	}
	if got := since(); got["create"]+got["commit"]+got["setattr"]+got["lookup"] != 0 || got["allocino"] != 1 || got["lease"] != 1 {
		t.Fatalf("island requests while creates are kept back: %v, want only one reservation (32 ids) and the listing", got)
	}
	if kept, sent, _ := a.CreatesBehind(); kept != n || sent != 0 {
		t.Fatalf("creates kept %d sent %d, want %d and 0", kept, sent, n)
	}
	if at, err := a.GetAttr(ctx, root, inos[3]); err != nil || at.Size != 300 || at.UID != 1003 || at.Mode&metawire.ModePerm != 0o640 || at.Mtime != when {
		t.Fatalf("the holder's view of a kept-back file: %+v %v", at, err)
	}
	if err := a.SendCreate(ctx, inos[0]); err != nil {
		t.Fatal(err)
	}
	if got := since()["create"]; got != 1 {
		t.Fatalf("SendCreate of one file: %v island creates", got)
	}
	// Another client: recalled, the holder sends the rest, then it is
	// answered.
	list, err := b.Readdir(ctx, root, d.Ino, 0, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Entries) != n+2 || !list.EOF { // with . and ..
		t.Fatalf("the other client lists %d names (eof %v), want %d", len(list.Entries)-2, list.EOF, n)
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("/cb/f%02d", i)
		data, err := b.ReadFile(ctx, root, name)
		if err != nil || !bytes.Equal(data, bytes.Repeat([]byte{byte(i)}, 100*i)) {
			t.Fatalf("%s: %d bytes, %v", name, len(data), err)
		}
		at, err := b.GetAttrFresh(ctx, root, inos[i])
		if err != nil || at.UID != 1000+uint32(i) || at.Mode&metawire.ModePerm != 0o640 || at.Mtime != when {
			t.Fatalf("%s: %+v %v", name, at, err)
		}
	}
	if got := since(); got["create"] != n || got["commit"]+got["setattr"] != 0 {
		t.Fatalf("island requests: %v, want %d creates carrying everything", got, n)
	}
	if _, err := b.Create(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: "f05", Mode: 0o644, Exclusive: true}); !errors.Is(err, metawire.ErrExists) {
		t.Fatalf("the other client's exclusive create of a name kept back: %v, want EEXIST", err)
	}
	if _, sent, failed := a.CreatesBehind(); sent != n || failed != 0 {
		t.Fatalf("creates sent %d failed %d", sent, failed)
	}
}

// TestManyKeptBackCreatesInOneFlush: a flush that takes the client past
// the lazily created files it tracks (4096) syncs their islands from
// inside the flush; that used to wait for the flush itself (a hang of
// the mount under 8 parallel writers).
func TestManyKeptBackCreatesInOneFlush(t *testing.T) {
	_, a, b, d := leasePair(t, "/many")
	a.SetLazyCreate(true)
	a.SetLazyClose(true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := metawire.Cred{}
	// Lazy creates sent at once (no write-behind yet): tracked, unsynced.
	const sent = 4000
	for i := 0; i < sent; i++ {
		if _, err := a.Create(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: fmt.Sprintf("s%05d", i), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	a.EnableWriteBehind()
	d2, err := b.MkdirAll(ctx, root, "/many2", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"x", "y"} { // the second miss lists it
		if _, err := a.Lookup(ctx, root, d2.Ino, name); !errors.Is(err, metawire.ErrNotFound) {
			t.Fatalf("lookup: %v", err)
		}
	}
	if _, err := a.GetAttr(ctx, root, d2.Ino); err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := 0; i < n; i++ {
		if _, err := a.Create(ctx, metawire.CreateReq{Cred: root, Dir: d2.Ino, Name: fmt.Sprintf("f%05d", i), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	if kept, _, _ := a.CreatesBehind(); kept != n {
		t.Fatalf("creates kept %d, want %d", kept, n)
	}
	done := make(chan error, 1)
	go func() { done <- a.SyncLazy(ctx) }() // one flush sends all n
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("SyncLazy of many kept-back creates did not return")
	}
	if _, sent, failed := a.CreatesBehind(); sent != n || failed != 0 {
		t.Fatalf("creates sent %d failed %d", sent, failed)
	}
}

// TestUnlinksKeptBack: under an exclusive lease the holder answers the
// unlink of a file whose name and attributes it knows, and sends it
// later; its own lookups see the name gone, a create of the same name
// reaches the island after the unlink, an rmdir sends the directory's
// unlinks first, an unlink the cached directory attributes forbid is
// sent and refused, and another client's listing recalls the lease and
// sees every unlink.
func TestUnlinksKeptBack(t *testing.T) {
	fc, a, b, d := leasePair(t, "/ub")
	a.EnableWriteBehind()
	a.SetLazyCreate(true)
	a.SetLazyClose(true)
	ctx := context.Background()
	root := metawire.Cred{}
	sub, err := a.Mkdir(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: "sub", Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	name := func(i int) string { return fmt.Sprintf("f%02d", i) }
	dirOf := func(i int) uint64 {
		if i%4 == 0 {
			return sub.Attr.Ino
		}
		return d.Ino
	}
	// As the mount makes them (tar x): each name known missing under the
	// lease, its create kept back, then sent.
	for _, dir := range []uint64{d.Ino, sub.Attr.Ino} {
		for _, miss := range []string{"x", "y"} { // the second miss lists it
			if _, err := a.Lookup(ctx, root, dir, miss); !errors.Is(err, metawire.ErrNotFound) {
				t.Fatalf("lookup: %v", err)
			}
		}
		if _, err := a.GetAttr(ctx, root, dir); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if _, err := a.Create(ctx, metawire.CreateReq{Cred: root, Dir: dirOf(i), Name: name(i), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.SyncLazy(ctx); err != nil { // every create on the island
		t.Fatal(err)
	}
	if kept, sent, _ := a.CreatesBehind(); kept != n || sent != n {
		t.Fatalf("creates kept %d sent %d, want %d", kept, sent, n)
	}
	since := fc.islandOpsSince(t, "unlink", "unlinkmany", "rmdir", "create", "lookup")
	// Not allowed by the directory's attributes: sent, refused.
	if err := a.Unlink(ctx, metawire.Cred{UID: 1000, GID: 1000}, d.Ino, name(1)); !errors.Is(err, metawire.ErrAccess) {
		t.Fatalf("unlink by a user who may not write the directory: %v, want EACCES", err)
	}
	if got := since()["unlink"]; got != 1 {
		t.Fatalf("%v island unlinks for a refused unlink, want 1", got)
	}
	// Forgotten with the refusal; read again (as the kernel would).
	if _, err := a.GetAttr(ctx, root, d.Ino); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lookup(ctx, root, d.Ino, name(1)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if i == 3 {
			continue // below
		}
		if err := a.Unlink(ctx, root, dirOf(i), name(i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := since(); got["unlink"] != 1 || got["unlinkmany"] != 0 || got["rmdir"] != 0 {
		t.Fatalf("island requests while unlinks are kept back: %v", got)
	}
	if kept, sent, _ := a.UnlinksBehind(); kept != n-1 || sent != 0 {
		t.Fatalf("unlinks kept %d sent %d, want %d and 0", kept, sent, n-1)
	}
	if _, err := a.Lookup(ctx, root, d.Ino, name(5)); !errors.Is(err, metawire.ErrNotFound) {
		t.Fatalf("the holder's lookup of a name it removed: %v", err)
	}
	// An rmdir sends the kept-back unlinks first (nothing else is kept
	// back to make it flush).
	if err := a.Rmdir(ctx, root, d.Ino, "sub"); err != nil {
		t.Fatalf("rmdir of a directory whose unlinks were kept back: %v", err)
	}
	// One request per directory: 29 names in d, 10 in sub.
	if got := since(); got["unlink"] != 1 || got["unlinkmany"] != 2 || got["rmdir"] != 1 || got["lookup"] != 0 {
		t.Fatalf("island requests after the rmdir: %v, want the refused unlink and 2 of several names", got)
	}

	// A name removed and made again, both kept back: one flush sends the
	// unlink first.
	if err := a.Unlink(ctx, root, d.Ino, name(3)); err != nil {
		t.Fatal(err)
	}
	again, err := a.Create(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: name(3), Mode: 0o600})
	if err != nil {
		t.Fatal(err)
	}
	if kept, _, _ := a.CreatesBehind(); kept != n+1 {
		t.Fatalf("the create of a name unlinked here was not kept back (%d kept)", kept)
	}
	if kept, _, _ := a.UnlinksBehind(); kept != n {
		t.Fatalf("unlinks kept %d, want %d", kept, n)
	}
	// Another client sees every change.
	list, err := b.Readdir(ctx, root, d.Ino, 0, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list.Entries {
		if e.Name != "." && e.Name != ".." {
			names = append(names, e.Name)
		}
	}
	if !slices.Equal(names, []string{name(3)}) {
		t.Fatalf("the other client lists %q, want only %q", names, name(3))
	}
	if at, err := b.Lookup(ctx, root, d.Ino, name(3)); err != nil || at.Ino != again.Attr.Ino || at.Mode&metawire.ModePerm != 0o600 {
		t.Fatalf("the name created again: %+v, %v", at, err)
	}
	if got := since(); got["unlink"] != 2 || got["unlinkmany"] != 2 || got["create"] != 1 {
		t.Fatalf("island requests after the recall: %v, want 2 unlinks, 2 of several names and 1 create", got)
	}
	if _, sent, failed := a.UnlinksBehind(); sent != n || failed != 0 {
		t.Fatalf("unlinks sent %d failed %d", sent, failed)
	}
	if err := a.SyncLazy(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestUnlinksKeptBackSentAgainOneByOne: kept-back unlinks of one
// directory go to the island in one request; when the island refuses that
// request as a whole, each is sent again alone and gets its own answer.
func TestUnlinksKeptBackSentAgainOneByOne(t *testing.T) {
	fc, a, b, d := leasePair(t, "/ua")
	a.EnableWriteBehind()
	ctx := context.Background()
	root := metawire.Cred{}
	const n = 6
	name := func(i int) string { return fmt.Sprintf("g%d", i) }
	for i := 0; i < n; i++ {
		if _, err := a.Create(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: name(i), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.SyncLazy(ctx); err != nil {
		t.Fatal(err)
	}
	// Under the lease with the names and attributes at hand (a listing).
	if _, err := a.Readdir(ctx, root, d.Ino, 0, 0, true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetAttr(ctx, root, d.Ino); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := a.Unlink(ctx, root, d.Ino, name(i)); err != nil {
			t.Fatal(err)
		}
	}
	if kept, _, _ := a.UnlinksBehind(); kept != n {
		t.Fatalf("%d unlinks kept back, want %d", kept, n)
	}
	since := fc.islandOpsSince(t, "unlink", "unlinkmany")
	// The first change the island is about to commit fails: the request
	// of all six.
	fc.faults[0].Enable(meta.FailLocalBeforeCommit, faults.Action{Kind: faults.Error, Nth: 1})
	if err := a.SyncLazy(ctx); err != nil {
		t.Fatalf("sync after the unlinks were sent again: %v", err)
	}
	if got := since(); got["unlinkmany"] != 1 || got["unlink"] != n {
		t.Fatalf("island requests %v, want 1 of several names, then %d alone", got, n)
	}
	if _, sent, failed := a.UnlinksBehind(); sent != n || failed != 0 {
		t.Fatalf("unlinks sent %d failed %d, want %d and 0", sent, failed, n)
	}
	for i := 0; i < n; i++ {
		if _, err := b.Lookup(ctx, root, d.Ino, name(i)); !errors.Is(err, metawire.ErrNotFound) {
			t.Fatalf("another client's lookup of %s: %v, want ENOENT", name(i), err)
		}
	}
}
