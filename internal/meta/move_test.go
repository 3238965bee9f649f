package meta

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

func init() {
	moveEvery, moveGrace, moveRetry, moveGiveUp = 5*time.Millisecond, 20*time.Millisecond, 10*time.Millisecond, 300*time.Millisecond
	// Every move takes many chunks and many clearing writes.
	importChunk, dropBatch = 2<<10, 7
}

// moveSetup makes a tree on a two-island cluster (depth 4: 16 entries)
// with files that have blocks and xattrs, and picks a table entry of
// island 1 holding some of its directories.
func moveSetup(t *testing.T) (c *cluster, entry uint32, dirs map[string]metawire.Attr, live map[fragment.StripeID]int64) {
	c = newCluster(t, 2)
	r := c.root()
	dirs = map[string]metawire.Attr{}
	seq := uint64(0)
	for k := range 40 {
		d := must(r.mkdir(rootIno(), fmt.Sprintf("d%02d", k), 0o755))
		dirs[fmt.Sprintf("d%02d", k)] = d
		for j := range 3 {
			f := must(r.create(d.Ino, fmt.Sprintf("f%d", j), 0o644))
			seq++
			must(r.commit(metawire.FileWrite{Ino: f.Ino, Size: 8192, Blocks: []metawire.Block{{Index: 0, Ptr: ptr(7, seq, 0, 4096)}, {Index: 1, Ptr: ptr(7, seq, 4096, 4096)}}}))
			if err := r.setxattr(f.Ino, "user.k", []byte("v"), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	tab := c.m.Table()
	counts := map[uint32]int{}
	for _, d := range dirs {
		b := namespace.Ino(d.Ino).Bucket()
		if e := b >> (32 - uint(tab.Depth)); tab.Entries[e] == 1 {
			counts[e]++
		}
	}
	best := -1
	for e, n := range counts {
		if n > best {
			entry, best = e, n
		}
	}
	if best < 2 {
		t.Fatalf("no entry of island 1 holds directories: %v", counts)
	}
	return c, entry, dirs, c.liveSum()
}

// waitCrash waits until failpoint name crashed its island (crashAt's
// image is taken), failing the test after 10 s.
func waitCrash(t *testing.T, name string, clone func() *vfs.MemFS) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for clone() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("failpoint %s never fired", name)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// liveSum adds up every island's live-byte counters.
func (c *cluster) liveSum() map[fragment.StripeID]int64 {
	c.t.Helper()
	sum := map[fragment.StripeID]int64{}
	for _, id := range c.ids {
		l, err := c.isl[id].LiveBytes()
		if err != nil {
			c.t.Fatal(err)
		}
		for s, n := range l {
			if n != 0 {
				sum[s] += n
			}
		}
	}
	return sum
}

// startMove records a pending move of entry to island to in the map.
func (c *cluster) startMove(id uint64, entry uint32, to namespace.IslandID) {
	tab := c.m.Table().Clone()
	tab.Moves = append(tab.Moves, namespace.PendingMove{ID: id, Entry: entry, From: tab.Entries[entry], To: to})
	tab.Epoch++
	c.m.Set(tab)
}

// waitMoved waits until entry is to's and no island holds a move record
// (records a move brought are dropped by then).
func (c *cluster) waitMoved(entry uint32, to namespace.IslandID) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tab := c.m.Table()
		left := 0
		for _, id := range c.ids {
			for _, tag := range append([]byte{gMoving}, importTags...) {
				m, err := c.isl[id].marks(tag)
				if err != nil {
					c.t.Fatal(err)
				}
				left += len(m)
			}
		}
		if tab.Entries[entry] == to && len(tab.Moves) == 0 && left == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("entry %d: island %d, moves %v, %d move records left", entry, tab.Entries[entry], tab.Moves, left)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkTree checks that every directory, file, block map and xattr of
// moveSetup is there, served by the island the map names.
func checkTree(t *testing.T, c *cluster, dirs map[string]metawire.Attr) {
	t.Helper()
	r := c.root()
	names, err := r.names(rootIno())
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range dirs {
		if names[name] != d.Ino {
			t.Fatalf("%s: %d in the root, want %d", name, names[name], d.Ino)
		}
		got, err := r.names(d.Ino)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != 3 {
			t.Fatalf("%s: entries %v", name, got)
		}
		for fn, ino := range got {
			a, err := r.getattr(ino)
			if err != nil || a.Size != 8192 {
				t.Fatalf("%s/%s: %+v, %v", name, fn, a, err)
			}
			m, err := r.readmap(ino, 0, 4)
			if err != nil || len(m.Blocks) != 2 {
				t.Fatalf("%s/%s: block map %+v, %v", name, fn, m, err)
			}
			if v, err := r.getxattr(ino, "user.k"); err != nil || string(v) != "v" {
				t.Fatalf("%s/%s: xattr %q, %v", name, fn, v, err)
			}
		}
	}
}

// TestMoveEntry: a table entry moves from island 1 to island 2 while
// the namespace serves: every name, inode, block map and xattr is then
// served by island 2, island 1 refuses its inodes (wrong island), the
// live-byte counters summed over the islands are unchanged (they moved
// with the blocks), the statistics follow, fsck is clean, and changes go
// on in the moved directories.
func TestMoveEntry(t *testing.T) {
	c, entry, dirs, live := moveSetup(t)
	before := map[namespace.IslandID]uint64{}
	for _, id := range c.ids {
		st, err := c.isl[id].statFS()
		if err != nil {
			t.Fatal(err)
		}
		before[id] = st.Inodes
	}
	c.startMove(1, entry, 2)
	c.waitMoved(entry, 2)
	checkTree(t, c, dirs)
	if got := c.liveSum(); !maps.Equal(got, live) {
		t.Fatalf("live bytes after the move: %v, before %v", got, live)
	}
	// Lazy changes island 1 acknowledged are island 2's now: its syncs
	// say so (the clients' incarnation rule).
	out, err := c.isl[2].Handle(bg, metawire.OpSync, c.m.Epoch(), metawire.Marshal(metawire.Empty{}))
	if err != nil {
		t.Fatal(err)
	}
	var sr metawire.SyncResp
	if err := metawire.Unmarshal(out, &sr); err != nil || sr.Boot != c.isl[2].boot || !slices.Contains(sr.Adopted, c.isl[1].boot) {
		t.Fatalf("island 2's sync answer %+v (%v): want its boot %x adopting island 1's %x", sr, err, c.isl[2].boot, c.isl[1].boot)
	}
	if a, b := testutil.ToFloat64(c.isl[1].met.movedAway), testutil.ToFloat64(c.isl[2].met.movedIn); a != 1 || b != 1 {
		t.Fatalf("moves counted: %v away from island 1, %v into island 2", a, b)
	}
	moved := 0
	for _, d := range dirs {
		if namespace.Ino(d.Ino).Bucket()>>(32-uint(c.m.Table().Depth)) != entry {
			continue
		}
		moved++
		_, err := c.isl[1].Handle(bg, metawire.OpGetAttr, c.m.Epoch(), metawire.Marshal(&metawire.InoReq{Ino: d.Ino}))
		wantErr(t, err, metawire.ErrWrongIsland, "getattr at the old island")
		// Changes go on there: a create in a moved directory.
		if _, err := c.root().create(d.Ino, "after", 0o644); err != nil {
			t.Fatalf("create after the move: %v", err)
		}
	}
	var after uint64
	for _, id := range c.ids {
		st, err := c.isl[id].statFS()
		if err != nil {
			t.Fatal(err)
		}
		after += st.Inodes
	}
	if want := before[1] + before[2] + uint64(moved); after != want {
		t.Fatalf("inodes after: %d, want %d (before %v)", after, want, before)
	}
	t.Logf("moved %d directories; inodes before %v, after %d", moved, before, after)
	if st, _ := c.isl[1].statFS(); st.Inodes >= before[1] {
		t.Fatalf("island 1 still counts %d inodes (had %d)", st.Inodes, before[1])
	}
	c.mustFsck()
}

// TestMoveEntryCrashes: the source (or, at its one failpoint, the
// destination) crashes at every step of a move; restarted from what its
// disk held, the move completes with nothing lost: the tree is whole on
// the destination, live bytes summed over the islands unchanged, fsck
// clean.
func TestMoveEntryCrashes(t *testing.T) {
	for _, tc := range []struct {
		fp     string
		island namespace.IslandID
	}{{FailMoveAfterBase, 1}, {FailMoveAfterFreeze, 1}, {FailMoveAfterCopy, 1}, {FailMoveAfterFlip, 1}, {FailMoveAfterImport, 2}} {
		t.Run(tc.fp, func(t *testing.T) {
			c, entry, dirs, live := moveSetup(t)
			clone := c.crashAt(tc.island, tc.fp)
			c.startMove(1, entry, 2)
			waitCrash(t, tc.fp, clone)
			if tc.fp == FailMoveAfterFreeze {
				// Frozen: a change in the moving entry is refused (the
				// client retries), a read is served.
				for _, d := range dirs {
					if namespace.Ino(d.Ino).Bucket()>>(32-uint(c.m.Table().Depth)) == entry {
						_, err := c.isl[1].Handle(bg, metawire.OpCreate, c.m.Epoch(), metawire.Marshal(&metawire.CreateReq{Dir: d.Ino, Name: "frozen", Mode: 0o644}))
						wantErr(t, err, metawire.ErrUnavailable, "create in a frozen entry")
						if _, err := c.root().getattr(d.Ino); err != nil {
							t.Fatalf("getattr in a frozen entry: %v", err)
						}
						break
					}
				}
			}
			if tc.fp == FailMoveAfterCopy {
				c.mustFsck() // both islands hold the entry: counted once
			}
			c.restart(tc.island, clone())
			c.waitMoved(entry, 2)
			checkTree(t, c, dirs)
			if got := c.liveSum(); !maps.Equal(got, live) {
				t.Fatalf("live bytes after the move: %v, before %v", got, live)
			}
			c.mustFsck()
		})
	}
}

// TestMoveEntryCancelled: a move cancelled after the destination got the
// records (the source crashed there and the operator gave up): the entry
// stays the source's and serves changes again, the destination drops
// what it received, counters and fsck agree.
func TestMoveEntryCancelled(t *testing.T) {
	c, entry, dirs, live := moveSetup(t)
	clone := c.crashAt(1, FailMoveAfterCopy)
	c.startMove(1, entry, 2)
	waitCrash(t, FailMoveAfterCopy, clone)
	tab := c.m.Table().Clone()
	tab.Moves, tab.Epoch = nil, tab.Epoch+1
	c.m.Set(tab)
	c.restart(1, clone())
	c.waitMoved(entry, 1)
	checkTree(t, c, dirs)
	if got := c.liveSum(); !maps.Equal(got, live) {
		t.Fatalf("live bytes: %v, before %v", got, live)
	}
	for _, d := range dirs {
		if namespace.Ino(d.Ino).Bucket()>>(32-uint(c.m.Table().Depth)) == entry {
			must(c.root().create(d.Ino, "after", 0o644))
		}
	}
	c.mustFsck()
}

// TestMoveEntryDelta: changes made in the moving entry after its base
// copy (new files with blocks, an unlink, a truncation to nothing, a
// removed xattr, a new subdirectory) reach the destination with the
// delta: the tree there is the tree at the freeze, and the live-byte
// counters summed over the islands match the blocks that are left.
func TestMoveEntryDelta(t *testing.T) {
	c, entry, dirs, _ := moveSetup(t)
	r := c.root()
	var moving []metawire.Attr
	for _, d := range dirs {
		if namespace.Ino(d.Ino).Bucket()>>(32-uint(c.m.Table().Depth)) == entry {
			moving = append(moving, d)
		}
	}
	d := moving[0]
	fired := false
	c.fp[1].Enable(FailMoveAfterBase, faults.Action{Kind: faults.Call, Call: func(string) error {
		if fired {
			return nil
		}
		fired = true
		names := must(r.names(d.Ino))
		must(r.create(d.Ino, "new", 0o644))
		nf := must(r.lookup(d.Ino, "new"))
		must(r.commit(metawire.FileWrite{Ino: nf.Ino, Size: 4096, Blocks: []metawire.Block{{Index: 0, Ptr: ptr(9, 1, 0, 4096)}}}))
		if err := r.unlink(d.Ino, "f0"); err != nil {
			return err
		}
		if _, err := r.setattr(metawire.SetAttrReq{Ino: names["f1"], Valid: metawire.SetSize, Size: 0}); err != nil {
			return err
		}
		if err := r.removexattr(names["f2"], "user.k"); err != nil {
			return err
		}
		must(r.mkdir(d.Ino, "sub", 0o755))
		// A symlink whose answer the client lost: it retries after the
		// move, at the destination.
		return c.callID(wire.ReqID{7, 7}, metawire.OpSymlink, d.Ino, &metawire.CreateReq{Cred: r.cred, Dir: d.Ino, Name: "ln", Target: "t"}, nil)
	}})
	c.startMove(1, entry, 2)
	c.waitMoved(entry, 2)
	if !fired {
		t.Fatal("the failpoint after the base copy never fired")
	}
	var again metawire.CreateResp
	if err := c.callID(wire.ReqID{7, 7}, metawire.OpSymlink, d.Ino, &metawire.CreateReq{Cred: r.cred, Dir: d.Ino, Name: "ln", Target: "t"}, &again); err != nil {
		t.Fatalf("the retried symlink at the destination: %v (applied twice?)", err)
	}
	got := must(r.names(d.Ino))
	if _, ok := got["f0"]; ok || len(got) != 5 || got["new"] == 0 || got["sub"] == 0 || got["ln"] != again.Attr.Ino {
		t.Fatalf("after the move: %v (the retry answered %d)", got, again.Attr.Ino)
	}
	if a := must(r.getattr(got["f1"])); a.Size != 0 {
		t.Fatalf("truncated file: size %d", a.Size)
	}
	if m := must(r.readmap(got["new"], 0, 4)); len(m.Blocks) != 1 {
		t.Fatalf("new file's blocks: %+v", m)
	}
	if _, err := r.getxattr(got["f2"], "user.k"); err == nil {
		t.Fatal("removed xattr came back")
	}
	// Live bytes: every block left, counted once.
	want := map[fragment.StripeID]int64{}
	for _, dd := range dirs {
		for _, ino := range must(r.names(dd.Ino)) {
			m, err := r.readmap(ino, 0, 16)
			if err != nil {
				continue // a directory
			}
			for _, b := range m.Blocks {
				s, l, err := pointerStripe(b.Ptr)
				if err != nil {
					t.Fatal(err)
				}
				want[s] += int64(l)
			}
		}
	}
	if got := c.liveSum(); !maps.Equal(got, want) {
		t.Fatalf("live bytes after the move: %v\nwant %v", got, want)
	}
	c.mustFsck()
}

// TestMoveEntryLostBase: a destination without the base copy (here
// deleted behind the source's back) refuses the delta; the source then
// copies the whole entry, frozen, and the move completes whole.
func TestMoveEntryLostBase(t *testing.T) {
	c, entry, dirs, live := moveSetup(t)
	c.fp[1].Enable(FailMoveAfterBase, faults.Action{Kind: faults.Call, Call: func(string) error {
		return c.isl[2].del(bg, moveKey(gBase, 1), false)
	}})
	c.startMove(1, entry, 2)
	c.waitMoved(entry, 2)
	checkTree(t, c, dirs)
	if got := c.liveSum(); !maps.Equal(got, live) {
		t.Fatalf("live bytes after the move: %v, before %v", got, live)
	}
	c.mustFsck()
}

// TestEntryLoad: client operations count on the table entry of the inode
// they name first; an island reports the entries it owns, at any depth.
func TestEntryLoad(t *testing.T) {
	c := newCluster(t, 2)
	r := c.root()
	tab := c.m.Table()
	d := must(r.mkdir(rootIno(), "hot", 0o755))
	home := tab.Lookup(namespace.Ino(d.Ino).Bucket())
	for k := range 50 {
		f := must(r.create(d.Ino, fmt.Sprintf("f%d", k), 0o644))
		if _, err := r.lookup(d.Ino, fmt.Sprintf("f%d", k)); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 100)
		must(r.commit(metawire.FileWrite{Ino: f.Ino, Size: uint64(len(data)), SetInline: true, Inline: data}))
	}
	entry := namespace.Ino(d.Ino).Bucket() >> (32 - uint(tab.Depth))
	resp, err := c.isl[home].entryLoad(&metawire.EntryLoadReq{Depth: tab.Depth})
	if err != nil {
		t.Fatal(err)
	}
	var total, hot, hotBytes, allBytes uint64
	for _, x := range resp.Entries {
		if tab.Entries[x.Entry] != home {
			t.Fatalf("island %d reports entry %d of island %d", home, x.Entry, tab.Entries[x.Entry])
		}
		total += x.Ops
		allBytes += x.Bytes
		if x.Entry == entry {
			hot, hotBytes = x.Ops, x.Bytes
		}
	}
	if hot < 100 || len(resp.Entries) != tab.Counts()[home] {
		t.Fatalf("entry %d: %d operations (of %d over %d entries)", entry, hot, total, len(resp.Entries))
	}
	// The files' entry may be another than their directory's; every
	// committed byte is counted once, on this island or the other.
	var otherBytes uint64
	for id, isl := range c.isl {
		if id != home {
			o, err := isl.entryLoad(&metawire.EntryLoadReq{Depth: tab.Depth})
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range o.Entries {
				otherBytes += x.Bytes
			}
		}
	}
	if allBytes+otherBytes != 50*100 {
		t.Fatalf("committed bytes counted: %d here (%d in the directory's entry) + %d elsewhere, want %d", allBytes, hotBytes, otherBytes, 50*100)
	}
	// The counts survive the response's encoding (bytes are a tail).
	var back metawire.EntryLoadResp
	if err := metawire.Unmarshal(metawire.Marshal(resp), &back); err != nil || !reflect.DeepEqual(&back, resp) {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, back, resp)
	}
	if _, err := c.isl[home].entryLoad(&metawire.EntryLoadReq{Depth: 17}); err == nil {
		t.Fatal("depth 17 accepted")
	}
}

// TestMoveEntryGivenBack: the destination goes away after the source
// froze the entry; once the copy has failed for moveGiveUp the source
// cancels the move and the entry serves changes again on the source;
// nothing was lost.
func TestMoveEntryGivenBack(t *testing.T) {
	c, entry, dirs, live := moveSetup(t)
	c.fp[1].Enable(FailMoveAfterFreeze, faults.Action{Kind: faults.Call, Call: func(string) error {
		c.net.SetDown(2, true)
		return nil
	}})
	c.startMove(1, entry, 2)
	c.waitMoved(entry, 1)
	c.net.SetDown(2, false)
	checkTree(t, c, dirs)
	if got := c.liveSum(); !maps.Equal(got, live) {
		t.Fatalf("live bytes: %v, before %v", got, live)
	}
	for _, d := range dirs {
		if namespace.Ino(d.Ino).Bucket()>>(32-uint(c.m.Table().Depth)) == entry {
			must(c.root().create(d.Ino, "after", 0o644))
		}
	}
	c.mustFsck()
}

// TestMoveEntryCancelledDuringBaseCopy: the destination is lost after it
// applied part of the base copy and the operator cancels the move: once
// it is back it drops what it received (no marker of a finished copy
// names those records), and counters and fsck agree.
func TestMoveEntryCancelledDuringBaseCopy(t *testing.T) {
	c, entry, dirs, live := moveSetup(t)
	lost := make(chan struct{})
	c.fp[2].Enable(FailMoveAfterChunk, faults.Action{Kind: faults.Call, Nth: 2, Call: func(string) error {
		c.net.SetDown(2, true)
		close(lost)
		return errors.New("the destination is lost")
	}})
	c.startMove(1, entry, 2)
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatalf("failpoint %s never fired", FailMoveAfterChunk)
	}
	tab := c.m.Table().Clone()
	tab.Moves, tab.Epoch = nil, tab.Epoch+1
	c.m.Set(tab)
	c.net.SetDown(2, false)
	c.waitMoved(entry, 1)
	checkTree(t, c, dirs)
	if got := c.liveSum(); !maps.Equal(got, live) {
		t.Fatalf("live bytes: %v, before %v", got, live)
	}
	c.mustFsck()
}
