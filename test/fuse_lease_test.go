package test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/fusefs"
	"github.com/atoll-fs/atoll/internal/lease"
)

// TestFUSETwoMountsSeeEachOtherUnderLeases: two mounts of one cluster,
// each holding leases (so the kernel keeps names, missing names and
// attributes for as long as a lease lasts, seconds, not the 1 s default).
// Every change one mount makes is visible through the other as soon as
// it returned: the island breaks the watcher's lease first, and its mount
// invalidates what the kernel cached.
func TestFUSETwoMountsSeeEachOtherUnderLeases(t *testing.T) {
	fsa, fsb, _, ma, mb := twoMounts(t)
	if err := os.Mkdir(filepath.Join(ma, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"keep", "gone", "moved"} {
		if err := os.WriteFile(filepath.Join(ma, "d", n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The watcher (b) reads everything, and a few names that do not exist,
	// twice: from the second time on its kernel answers.
	watch := func() {
		t.Helper()
		for range 2 {
			if _, err := os.ReadDir(filepath.Join(mb, "d")); err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{"keep", "gone", "moved"} {
				if _, err := os.Lstat(filepath.Join(mb, "d", n)); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range []string{"new", "renamed"} {
				if _, err := os.Lstat(filepath.Join(mb, "d", n)); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("%s: %v, want it missing", n, err)
				}
			}
		}
	}
	watch()
	if err := os.Chmod(filepath.Join(ma, "d", "keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(filepath.Join(mb, "d", "keep")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode through the other mount right after chmod: %v, %v (breaks a %d b %d, leases a %d b %d)", st.Mode(), err, fsa.LeaseBreaks(), fsb.LeaseBreaks(), fsa.LeasesHeld(), fsb.LeasesHeld())
	}
	watch2 := func() {
		t.Helper()
		if err := os.WriteFile(filepath.Join(ma, "d", "new"), []byte("new"), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(mb, "d", "new")); err != nil || string(b) != "new" {
			t.Fatalf("a file the other mount created: %q, %v", b, err)
		}
		if err := os.Remove(filepath.Join(ma, "d", "gone")); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(mb, "d", "gone")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a file the other mount removed: %v", err)
		}
		if err := os.Rename(filepath.Join(ma, "d", "moved"), filepath.Join(ma, "d", "renamed")); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(mb, "d", "moved")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the old name of a file the other mount renamed: %v", err)
		}
		if b, err := os.ReadFile(filepath.Join(mb, "d", "renamed")); err != nil || string(b) != "moved" {
			t.Fatalf("the new name of a file the other mount renamed: %q, %v", b, err)
		}
		names := dirNames(t, filepath.Join(mb, "d"))
		slices.Sort(names)
		if fmt.Sprint(names) != "[keep new renamed]" {
			t.Fatalf("listing through the other mount: %v", names)
		}
	}
	start := time.Now()
	watch()
	watch2()
	if time.Since(start) > time.Second {
		// Not a failure (this machine can be slow), but then the kernel's
		// 1 s default timeouts may have expired and hidden a stale cache.
		t.Logf("the checks took %v: longer than the default timeouts", time.Since(start))
	}
}

// TestFUSEListingCachedUntilAnotherMountChanges: a listing the mount holds
// under a lease is cached by the kernel (FOPEN_CACHE_DIR: a repeated
// listing costs the mount no request). Another mount's create in that
// directory is listed at once, even when it puts the directory's mtime
// back afterwards and the watcher has taken a new lease and listing. The
// lease break drops the kernel's copy (kernelBreak); this kernel was also
// seen to drop it by itself with only the attributes invalidated, so the
// test does not single out that guard.
func TestFUSEListingCachedUntilAnotherMountChanges(t *testing.T) {
	_, _, mountB, ma, mb := twoMounts(t)
	d := filepath.Join(ma, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for k := range 40 {
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%02d", k)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	list := func() []string {
		t.Helper()
		return dirNames(t, filepath.Join(mb, "d"))
	}
	for range 3 { // leased, then cached by the kernel
		if n := len(list()); n != 40 {
			t.Fatalf("listed %d names, want 40", n)
		}
	}
	before := mountB.Readdirs()
	if n := len(list()); n != 40 {
		t.Fatalf("listed %d names, want 40", n)
	}
	if n := mountB.Readdirs() - before; n != 0 {
		t.Fatalf("a listing held under a lease cost %d listing requests: the kernel does not cache it", n)
	}
	st, err := os.Stat(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "late"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(d, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if st2, err := os.Stat(filepath.Join(mb, "d")); err != nil || !st2.ModTime().Equal(st.ModTime()) {
		t.Fatalf("the directory's mtime through the other mount: %v %v, want it put back to %v", st2.ModTime(), err, st.ModTime())
	}
	// The mount takes a lease on d again and learns its listing (a second
	// missing name lists it), so the kernel's next open may use a cached
	// listing again: it must not be the one from before the break.
	for _, n := range []string{"nope1", "nope2"} {
		if _, err := os.Lstat(filepath.Join(mb, "d", n)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: %v, want it missing", n, err)
		}
	}
	if names := list(); len(names) != 41 || !slices.Contains(names, "late") {
		t.Fatalf("after another mount's create, the listing has %d names (late listed: %v), want 41", len(names), slices.Contains(names, "late"))
	}
}

// TestFUSEKernelKeepsLeasedNamesPastTheTerm: names and attributes a
// mount holds under leases that its polls renew stay in the kernel past
// the lease's term (client.FS.EntryHold), so a tree stat-ed again after
// twice the term costs the mount no LOOKUP or GETATTR, where before the
// kernel asked again for every name once its copy outlived the term.
// Another mount's change is still seen at once: the break invalidates.
// (That the kernel's copies go when the lease ends unrenewed is
// internal/simcluster's TestPartitionedMountServesNoStaleName.)
func TestFUSEKernelKeepsLeasedNamesPastTheTerm(t *testing.T) {
	_, _, mountB, ma, mb := twoMounts(t)
	if err := os.Mkdir(filepath.Join(ma, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	var names []string
	for k := range 30 {
		names = append(names, fmt.Sprintf("f%02d", k))
		if err := os.WriteFile(filepath.Join(ma, "d", names[k]), []byte{byte(k)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	walk := func() {
		t.Helper()
		for _, n := range names {
			if _, err := os.Lstat(filepath.Join(mb, "d", n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The first walk takes the leases (the island's hold is learnt from
	// the polls that follow); after a term the kernel asks again and
	// keeps the answers as long as the polls renew the leases.
	walk()
	time.Sleep(lease.DefaultTerm + 500*time.Millisecond)
	walk()
	time.Sleep(2*lease.DefaultTerm + 500*time.Millisecond)
	before := mountB.Lookups()
	walk()
	if n := mountB.Lookups() - before; n != 0 {
		t.Fatalf("stat of %d leased names %v after their first term cost %d lookups: the kernel did not keep them", len(names), 2*lease.DefaultTerm, n)
	}
	if err := os.Chmod(filepath.Join(ma, "d", "f00"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(filepath.Join(mb, "d", "f00")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode through the other mount right after chmod: %v, %v", st.Mode(), err)
	}
	if err := os.Rename(filepath.Join(ma, "d", "f01"), filepath.Join(ma, "d", "f01x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(mb, "d", "f01")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the old name of a file the other mount renamed: %v", err)
	}
}

// twoMounts mounts two clients of one new cluster (5 storage servers, one
// island): their FSs, the second Mount, and both mountpoints.
func twoMounts(t *testing.T) (fsa, fsb *client.FS, mountB *fusefs.Mount, ma, mb string) {
	t.Helper()
	fuseUsable(t)
	fc := startFSCluster(t, 5, 1)
	fsa, fsb = fc.newFS(t), fc.newFS(t)
	_, ma = mountFS(t, fsa)
	mountB, mb = mountFS(t, fsb)
	return fsa, fsb, mountB, ma, mb
}

// dirNames lists dir's names in the order readdir returns them.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestFUSERemovalsKeptBackSeenByAnotherMount: `rm -rf` and unlinks
// through a mount holding its directories exclusively are answered by
// the mount (kept back, client.FS.UnlinksBehind) and still seen by another
// mount at once: its listing recalls the lease, which sends them first. A
// name removed and written again reads back with its new bytes.
func TestFUSERemovalsKeptBackSeenByAnotherMount(t *testing.T) {
	fsa, _, _, ma, mb := twoMounts(t)
	d := filepath.Join(ma, "d")
	for s := range 4 {
		sub := filepath.Join(d, fmt.Sprintf("sub%d", s))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		for k := range 30 {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%02d", k)), []byte{byte(s), byte(k)}, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if out, err := exec.Command("rm", "-rf", filepath.Join(d, "sub0"), filepath.Join(d, "sub1")).CombinedOutput(); err != nil {
		t.Fatalf("rm -rf: %v: %s", err, out)
	}
	// Removed and written again: the close sends the unlink, then the
	// create.
	if err := os.Remove(filepath.Join(d, "sub3", "f07")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "sub3", "f07"), []byte("again"), 0o644); err != nil {
		t.Fatal(err)
	}
	for k := range 30 {
		if err := os.Remove(filepath.Join(d, "sub2", fmt.Sprintf("f%02d", k))); err != nil {
			t.Fatal(err)
		}
	}
	if kept, _, _ := fsa.UnlinksBehind(); kept < 60 {
		t.Fatalf("%d unlinks kept back, want most of the 91", kept)
	}
	if names := dirNames(t, filepath.Join(mb, "d")); !slices.Equal(names, []string{"sub2", "sub3"}) {
		t.Fatalf("the other mount lists %q, want sub2 and sub3", names)
	}
	// Only the recall of the lease on sub2 sends its unlinks.
	if names := dirNames(t, filepath.Join(mb, "d", "sub2")); len(names) != 0 {
		t.Fatalf("the other mount lists %q in sub2, want nothing", names)
	}
	if n := len(dirNames(t, filepath.Join(mb, "d", "sub3"))); n != 30 {
		t.Fatalf("the other mount lists %d names in sub3, want 30", n)
	}
	if data, err := os.ReadFile(filepath.Join(mb, "d", "sub3", "f07")); err != nil || string(data) != "again" {
		t.Fatalf("sub3/f07 through the other mount: %q, %v", data, err)
	}
	if _, _, failed := fsa.UnlinksBehind(); failed != 0 {
		t.Fatalf("%d kept-back unlinks failed", failed)
	}
}

// TestFUSEWriteTimesAgreeBeforeAndAfterClose: the mtime and ctime a
// stat shows between a write and close (git's checkout records them so)
// are the file's for good: another mount sees the same after close, for
// a small file (its create kept back with its data) and a large one
// (committed at close). They differed by microseconds (the mount's
// write handler, the create and the commit each took the time), so git
// read every file of a fresh clone again and rewrote its index at every
// status.
func TestFUSEWriteTimesAgreeBeforeAndAfterClose(t *testing.T) {
	_, _, _, ma, mb := twoMounts(t)
	for _, size := range []int{9679, 3<<20 + 5} {
		name := fmt.Sprintf("f%d", size)
		f, err := os.OpenFile(filepath.Join(ma, name), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(bytes.Repeat([]byte{'x'}, size)); err != nil {
			t.Fatal(err)
		}
		before, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		after, err := os.Lstat(filepath.Join(mb, name))
		if err != nil {
			t.Fatal(err)
		}
		bs, as := before.Sys().(*syscall.Stat_t), after.Sys().(*syscall.Stat_t)
		if bs.Mtim != as.Mtim || bs.Ctim != as.Ctim || as.Size != int64(size) {
			t.Fatalf("%d-byte file: mtime %v ctime %v before close, %v and %v (size %d) through the other mount after",
				size, bs.Mtim, bs.Ctim, as.Mtim, as.Ctim, as.Size)
		}
	}
}

// TestFUSESecondWalkOfATreeCostsNoRequest: a tree walked once through a
// mount (ls -lR: every listing, every name's attributes) is walked again
// without a request to an island and without a listing request to the
// mount: the kernel lists every directory from its cache. Each
// subdirectory's names sit in a bucket of their own, on which the mount
// held no lease when the first walk opened it: that open reads the
// listing (leased) so the kernel caches it as well. (The kernel still
// asks the mount for each directory's attributes once: a listing it read
// from the mount marks the directory's atime stale. The mount answers
// from its cache.)
func TestFUSESecondWalkOfATreeCostsNoRequest(t *testing.T) {
	_, fsb, mountB, ma, mb := twoMounts(t)
	want, dirs := 0, 1
	for d := range 4 {
		for s := range 3 {
			dir := filepath.Join(ma, "t", fmt.Sprintf("d%d", d), fmt.Sprintf("s%d", s))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if s == 0 {
				dirs++
			}
			dirs++
			for f := range 8 {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", f)), []byte{byte(f)}, 0o644); err != nil {
					t.Fatal(err)
				}
				want++
			}
		}
	}
	walk := func() {
		t.Helper()
		files := 0
		err := filepath.WalkDir(filepath.Join(mb, "t"), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			st, err := os.Lstat(p)
			if err != nil {
				return err
			}
			if st.Mode().IsRegular() {
				files++
			}
			return nil
		})
		if err != nil || files != want {
			t.Fatalf("walk: %d files, %v; want %d", files, err, want)
		}
	}
	walk()
	readdirs, lookups := mountB.Readdirs(), mountB.Lookups()
	_, misses := fsb.CacheStats()
	walk()
	_, misses2 := fsb.CacheStats()
	r, l := mountB.Readdirs()-readdirs, mountB.Lookups()-lookups
	if r != 0 || misses2 != misses || l > uint64(dirs) {
		t.Fatalf("the second walk of a tree of %d directories cost %d listing requests, %d lookups and %d island requests (cache misses): the kernel or the mount did not keep what the first one read",
			dirs, r, l, misses2-misses)
	}
}

// TestFUSEOpenOfALeasedFileKeepsItsAttributes: opening a file whose
// attributes the kernel holds under a live lease does not make the kernel
// ask for them again (an OPEN used to invalidate them every time: git
// status re-reading a fresh checkout asked for every file's attributes
// at each open). Another mount growing the file breaks the lease, so the
// next open still reads all of it (close-to-open).
func TestFUSEOpenOfALeasedFileKeepsItsAttributes(t *testing.T) {
	_, _, mountB, ma, mb := twoMounts(t)
	if err := os.Mkdir(filepath.Join(ma, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := []byte("first version\n")
	if err := os.WriteFile(filepath.Join(ma, "d", "f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	read := func() {
		t.Helper()
		if b, err := os.ReadFile(filepath.Join(mb, "d", "f")); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("read through the other mount: %q, %v; want %q", b, err, want)
		}
	}
	read()
	if _, err := os.Stat(filepath.Join(mb, "d", "f")); err != nil { // after the open: leased
		t.Fatal(err)
	}
	before := mountB.Lookups()
	for range 10 {
		read()
	}
	if n := mountB.Lookups() - before; n != 0 {
		t.Fatalf("10 opens and reads of a file held under a lease cost %d lookups or getattrs", n)
	}
	f, err := os.OpenFile(filepath.Join(ma, "d", "f"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	more := bytes.Repeat([]byte("grown by the other mount\n"), 200)
	if _, err := f.Write(more); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want = append(want, more...)
	read()
}

// TestFUSEMissingNamesOfAListedDirectoryStayInTheKernel: a name missing
// from a directory the mount knows whole under a lease is answered as a
// negative entry the kernel keeps (git looks up .gitattributes in every
// directory at every status: each was a LOOKUP), and another mount's
// create of that name is still seen at once.
func TestFUSEMissingNamesOfAListedDirectoryStayInTheKernel(t *testing.T) {
	_, _, mountB, ma, mb := twoMounts(t)
	if err := os.Mkdir(filepath.Join(ma, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for k := range 5 {
		if err := os.WriteFile(filepath.Join(ma, "d", fmt.Sprintf("f%d", k)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	missing := func(n string) {
		t.Helper()
		if _, err := os.Lstat(filepath.Join(mb, "d", n)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: %v, want it missing", n, err)
		}
	}
	// Two missing names under one lease: the mount lists d whole.
	missing("nope1")
	missing("nope2")
	missing(".gitattributes")
	before := mountB.Lookups()
	for range 5 {
		missing(".gitattributes")
	}
	if n := mountB.Lookups() - before; n != 0 {
		t.Fatalf("5 lookups of a name missing from a directory known whole under a lease reached the mount %d times", n)
	}
	if err := os.WriteFile(filepath.Join(ma, "d", ".gitattributes"), []byte("* text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(mb, "d", ".gitattributes")); err != nil || string(b) != "* text\n" {
		t.Fatalf("a name another mount created after it was missing here: %q, %v", b, err)
	}
}
