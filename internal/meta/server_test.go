package meta

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestEpochsAndRouting(t *testing.T) {
	c := newCluster(t, 2)
	isl := c.isl[c.owner(rootIno())]
	other := c.isl[3-c.owner(rootIno())]
	get := func(epoch uint64, ino uint64) error {
		_, err := isl.Handle(bg, metawire.OpGetAttr, epoch, metawire.Marshal(&metawire.InoReq{Ino: ino}))
		return err
	}
	wantErr(t, get(0, rootIno()), metawire.ErrStaleEpoch, "epoch 0")
	wantErr(t, get(1, rootIno()), nil, "current epoch")
	wantErr(t, get(2, rootIno()), nil, "newer epoch (refresh, then serve)")
	tab := c.m.Table()
	tab.Epoch = 5
	c.m.Set(tab)
	wantErr(t, get(4, rootIno()), metawire.ErrStaleEpoch, "older epoch")
	c.epoch = 5
	wantErr(t, get(5, rootIno()), nil, "epoch 5")
	_, err := other.Handle(bg, metawire.OpGetAttr, 5, metawire.Marshal(&metawire.InoReq{Ino: rootIno()}))
	wantErr(t, err, metawire.ErrWrongIsland, "inode of another island")
	_, err = isl.Handle(bg, metawire.OpStatFS, 0, nil)
	wantErr(t, err, nil, "statfs ignores epochs")
	wantErr(t, get(5, uint64(namespace.MakeIno(namespace.RootBucket, 12345))), metawire.ErrStale, "unknown inode")
	_, err = isl.Handle(bg, metawire.OpGetAttr, 5, []byte{1, 2, 3})
	wantErr(t, err, metawire.ErrBadRequest, "short message")
	msg := append(metawire.Marshal(&metawire.InoReq{Ino: rootIno()}), 0)
	_, err = isl.Handle(bg, metawire.OpGetAttr, 5, msg)
	wantErr(t, err, metawire.ErrBadRequest, "trailing bytes")
	_, err = isl.Handle(bg, 999, 5, nil)
	wantErr(t, err, metawire.ErrBadRequest, "unknown op")
	// Participant-side validation of prepared actions.
	bad := metawire.PrepareReq{Coordinator: 9, Actions: []metawire.Action{{Kind: 77, Ino: rootIno()}}}
	_, err = isl.Handle(bg, metawire.OpPrepare, 5, metawire.Marshal(&bad))
	wantErr(t, err, metawire.ErrBadRequest, "unknown action kind")
	bad.Actions = []metawire.Action{{Kind: metawire.ActTouch, Ino: rootIno(), Flags: 1 << 30}}
	_, err = isl.Handle(bg, metawire.OpPrepare, 5, metawire.Marshal(&bad))
	wantErr(t, err, metawire.ErrBadRequest, "unknown action flags")
	_, err = other.Handle(bg, metawire.OpPrepare, 5, metawire.Marshal(&metawire.PrepareReq{Coordinator: 9,
		Actions: []metawire.Action{{Kind: metawire.ActTouch, Ino: rootIno()}}}))
	wantErr(t, err, metawire.ErrWrongIsland, "prepare on the wrong island")
	// A made-up inode id beyond what the bucket allocated would use up
	// its numbers: refused, and the next allocation is as before.
	alloc := func() namespace.Ino {
		t.Helper()
		b, err := isl.Handle(bg, metawire.OpAllocIno, 5, metawire.Marshal(&metawire.AllocInoReq{Bucket: namespace.RootBucket}))
		var r metawire.AllocInoResp
		if err == nil {
			err = metawire.Unmarshal(b, &r)
		}
		if err != nil {
			t.Fatalf("allocino: %v", err)
		}
		return namespace.Ino(r.Ino)
	}
	first := alloc()
	forged := metawire.PrepareReq{TxID: metawire.TxID{7, 7}, Coordinator: 9, Actions: []metawire.Action{{
		Kind: metawire.ActCreateInode, Ino: uint64(namespace.MakeIno(namespace.RootBucket, ^uint32(0))),
		Init: metawire.InodeInit{Mode: metawire.ModeFile | 0o644, Nlink: 1},
	}}}
	_, err = isl.Handle(bg, metawire.OpPrepare, 5, metawire.Marshal(&forged))
	wantErr(t, err, metawire.ErrBadRequest, "prepare creating an inode id never allocated")
	if next := alloc(); next.Seq() != first.Seq()+1 {
		t.Fatalf("after a forged prepare the bucket allocates %v, want sequence %d", next, first.Seq()+1)
	}
	isl.Close()
	wantErr(t, get(5, rootIno()), metawire.ErrUnavailable, "closed island")
}

// handleSeed is one request of the seed corpus of FuzzHandle.
type handleSeed struct {
	op   uint16
	msg  metawire.Message
	want error // on a fresh island, after the seeds before it (nil: success)
}

// handleSeeds returns well-formed requests of every op, each under its
// own op code, so that the fuzzer starts from inputs that reach the
// handlers. Run in order on a fresh one-island cluster they build a small
// namespace (a file "a", renamed "b", with a hard link, xattrs and a
// block; a directory "d" with a symlink) and take most of it down again;
// want is each one's outcome there.
func handleSeeds() []handleSeed {
	root := rootIno()
	// The ids a fresh island allocates: files in their parent's bucket,
	// directories in the bucket of their pathname.
	a := uint64(namespace.MakeIno(namespace.RootBucket, namespace.FirstSeq))
	d := uint64(namespace.MakeIno(namespace.Bucket("/d"), namespace.FirstSeq))
	s := uint64(namespace.MakeIno(namespace.Bucket("/d"), namespace.FirstSeq+1))
	tx := metawire.TxID{1, 2, 3}
	return []handleSeed{
		{metawire.OpLookup, &metawire.NameReq{Dir: root, Name: "a"}, metawire.ErrNotFound},
		{metawire.OpCreate, &metawire.CreateReq{Dir: root, Name: "a", Mode: metawire.ModeFile | 0o644}, nil},
		{metawire.OpLookup, &metawire.NameReq{Dir: root, Name: "a"}, nil},
		{metawire.OpGetAttr, &metawire.InoReq{Ino: a}, nil},
		{metawire.OpMkdir, &metawire.CreateReq{Dir: root, Name: "d", Mode: 0o755}, nil},
		{metawire.OpSymlink, &metawire.CreateReq{Dir: d, Name: "s", Target: "../a"}, nil},
		{metawire.OpReadlink, &metawire.InoReq{Ino: s}, nil},
		{metawire.OpLink, &metawire.LinkReq{Ino: a, Dir: d, Name: "h"}, nil},
		{metawire.OpRename, &metawire.RenameReq{SrcDir: root, SrcName: "a", DstDir: root, DstName: "b"}, nil},
		{metawire.OpSetAttr, &metawire.SetAttrReq{Ino: a, Valid: metawire.SetMode, Mode: 0o600}, nil},
		{metawire.OpAccess, &metawire.AccessReq{Ino: a, Mask: 4}, nil},
		{metawire.OpSetXattr, &metawire.XattrReq{Ino: a, Name: "user.x", Value: []byte("v")}, nil},
		{metawire.OpGetXattr, &metawire.XattrReq{Ino: a, Name: "user.x"}, nil},
		{metawire.OpListXattr, &metawire.InoReq{Ino: a}, nil},
		{metawire.OpRemoveXattr, &metawire.XattrReq{Ino: a, Name: "user.x"}, nil},
		{metawire.OpCommit, &metawire.CommitReq{Writes: []metawire.FileWrite{{Ino: a, Size: 10,
			Blocks: []metawire.Block{{Index: 0, Ptr: ptr(1, 1, 0, 10)}}}}}, nil},
		{metawire.OpCommit, &metawire.CommitReq{Writes: []metawire.FileWrite{{Ino: root, Size: 1}}}, metawire.ErrIsDir},
		{metawire.OpReadMap, &metawire.ReadMapReq{Ino: a, First: 0, Count: 4}, nil},
		{metawire.OpClean, &metawire.CleanReq{Deltas: []metawire.CleanDelta{{Ino: a, Index: 0, Old: ptr(1, 1, 0, 10), New: ptr(2, 1, 0, 10)}}}, nil},
		{metawire.OpStripeRefs, &metawire.RefsReq{Log: 2, Seq: 1}, nil},
		{metawire.OpLiveBytes, &metawire.LiveReq{First: true, Limit: 10}, nil},
		{metawire.OpForget, &metawire.ForgetReq{Stripes: []metawire.StripeLive{{Log: 1, Seq: 1}}}, nil},
		{metawire.OpReaddir, &metawire.ReaddirReq{Dir: root, Plus: true}, nil},
		{metawire.OpLease, &metawire.LeaseReq{Session: 5, Op: metawire.OpLookup, Msg: metawire.Marshal(&metawire.NameReq{Dir: root, Name: "zz"})}, nil},
		{metawire.OpLease, &metawire.LeaseReq{Session: 5, Op: metawire.OpSetAttr, Msg: metawire.Marshal(&metawire.InoReq{Ino: root})}, metawire.ErrBadRequest},
		{metawire.OpLeasePoll, &metawire.PollReq{Session: 5}, nil},
		{metawire.OpLeasePoll, &metawire.PollReq{}, metawire.ErrInvalid},
		{metawire.OpStatFS, &metawire.Empty{}, nil},
		{metawire.OpSync, &metawire.Empty{}, nil},
		{metawire.OpPrepare, &metawire.PrepareReq{TxID: tx, Coordinator: 2,
			Actions: []metawire.Action{{Kind: metawire.ActTouch, Ino: root}}}, nil},
		{metawire.OpDecide, &metawire.DecideReq{TxID: tx, Commit: true}, nil},
		{metawire.OpOutcome, &metawire.TxReq{TxID: tx}, nil},
		{metawire.OpAllocIno, &metawire.AllocInoReq{Bucket: namespace.Bucket("/e")}, nil},
		{metawire.OpFsck, &metawire.FsckReq{}, nil},
		{metawire.OpRmdir, &metawire.NameReq{Dir: root, Name: "d"}, metawire.ErrNotEmpty},
		{metawire.OpUnlink, &metawire.NameReq{Dir: d, Name: "h"}, nil},
		{metawire.OpUnlink, &metawire.NameReq{Dir: d, Name: "s"}, nil},
		{metawire.OpRmdir, &metawire.NameReq{Dir: root, Name: "d"}, nil},
	}
}

// fuzzIsland opens the one-island cluster FuzzHandle runs on.
func fuzzIsland(tb testing.TB) *Island {
	tb.Helper()
	tab, err := namespace.NewTable([]namespace.IslandID{1}, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tab.Epoch = 1
	tm := testTiming()
	tm.lockWait, tm.prepareWait, tm.maxAttempts = 10*time.Millisecond, 0, 2
	isl, err := newIsland(Config{Dir: "/fuzz", FS: vfs.NewMem(), ID: 1, Map: NewStaticMap(tab, nil),
		Peer: NewLocalNet().Peer(1), Logger: quiet}, tm)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { isl.Close() })
	return isl
}

// handleOne is one input of FuzzHandle: it sends op and msg to isl as
// they are and returns Handle's error. It fails t on an error that is not
// one of the metawire sentinels, and when the island's namespace is not
// consistent afterwards (fsck). A transaction the input prepared is
// aborted first, as its coordinator (an island that does not exist) would
// have it: otherwise it would hold its locks, and fsck would report it.
func handleOne(t *testing.T, isl *Island, op uint16, msg []byte) error {
	t.Helper()
	wait := 30 * time.Second
	if op == metawire.OpLeasePoll {
		wait = 100 * time.Millisecond // a poll waits for breaks that never come
	}
	ctx, cancel := context.WithTimeout(bg, wait)
	defer cancel()
	_, err := isl.Handle(ctx, op, 1, msg)
	if err != nil && metawire.StatusOf(err) == 1 && !errors.Is(err, metawire.ErrInternal) {
		t.Fatalf("op %d: untyped error %v", op, err)
	}
	if op == metawire.OpPrepare && err == nil {
		var p metawire.PrepareReq
		if uerr := metawire.Unmarshal(msg, &p); uerr != nil {
			t.Fatalf("prepare succeeded on a message that does not decode: %v", uerr)
		}
		if _, derr := isl.Handle(ctx, metawire.OpDecide, 1, metawire.Marshal(&metawire.DecideReq{TxID: p.TxID})); derr != nil {
			t.Fatalf("aborting prepared transaction: %v", derr)
		}
	}
	rep, ferr := Fsck(ctx, []FsckSource{IslandFsckSource(isl)})
	if ferr != nil {
		t.Fatalf("op %d: fsck: %v", op, ferr)
	}
	if !rep.Clean() {
		t.Fatalf("op %d (error %v) left %d problems:\n%s", op, err, rep.ProblemCount, strings.Join(rep.Problems, "\n"))
	}
	return err
}

// FuzzHandle feeds arbitrary ops and messages to an island: every answer
// is a response or an error, never a panic, and the namespace stays
// consistent (fsck is clean after every input). Op codes are used as
// they are: the seeds reach their own handlers, and the fuzzer may still
// try codes no handler has.
func FuzzHandle(f *testing.F) {
	for _, s := range handleSeeds() {
		f.Add(s.op, metawire.Marshal(s.msg))
	}
	isl := fuzzIsland(f)
	f.Fuzz(func(t *testing.T, op uint16, msg []byte) {
		handleOne(t, isl, op, msg)
	})
}

// TestHandleSeeds runs FuzzHandle's seeds through its input function on a
// fresh island: each reaches its handler (it decodes, and the answer is
// the one the op gives on that namespace), and fsck stays clean.
func TestHandleSeeds(t *testing.T) {
	isl := fuzzIsland(t)
	seeds := handleSeeds()
	ops := map[uint16]bool{}
	for k, s := range seeds {
		ops[s.op] = true
		err := handleOne(t, isl, s.op, metawire.Marshal(s.msg))
		if s.want == nil && err != nil || s.want != nil && !errors.Is(err, s.want) {
			t.Fatalf("seed %d (op %d, %T): %v, want %v", k, s.op, s.msg, err, s.want)
		}
	}
	// Every op has a seed.
	for op := metawire.OpLookup; op <= metawire.OpLeasePoll; op++ {
		if !ops[op] {
			t.Errorf("no seed for op %d", op)
		}
	}
	for _, op := range []uint16{metawire.OpPrepare, metawire.OpDecide, metawire.OpOutcome, metawire.OpFsck, metawire.OpAllocIno} {
		if !ops[op] {
			t.Errorf("no seed for op %d", op)
		}
	}
	// What the seeds left: the root holds "b" (the file, 10 bytes in one
	// block that the cleaner moved to stripe 2/1) and nothing else.
	var names metawire.ReaddirResp
	out, err := isl.Handle(bg, metawire.OpReaddir, 1, metawire.Marshal(&metawire.ReaddirReq{Dir: rootIno()}))
	if err != nil {
		t.Fatal(err)
	}
	if err := metawire.Unmarshal(out, &names); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range names.Entries {
		if e.Name != "." && e.Name != ".." {
			got = append(got, e.Name)
		}
	}
	if len(got) != 1 || got[0] != "b" {
		t.Fatalf("root after the seeds: %v, want [b]", got)
	}
	var rm metawire.ReadMapResp
	out, err = isl.Handle(bg, metawire.OpReadMap, 1, metawire.Marshal(&metawire.ReadMapReq{Ino: uint64(namespace.MakeIno(namespace.RootBucket, namespace.FirstSeq)), Count: 4}))
	if err != nil {
		t.Fatal(err)
	}
	if err := metawire.Unmarshal(out, &rm); err != nil {
		t.Fatal(err)
	}
	if rm.Attr.Size != 10 || rm.Attr.Nlink != 1 || rm.Attr.Mode&0o777 != 0o600 || len(rm.Blocks) != 1 || !bytes.Equal(rm.Blocks[0].Ptr, ptr(2, 1, 0, 10)) {
		t.Fatalf("file after the seeds: %+v, blocks %v", rm.Attr, rm.Blocks)
	}
}

// TestWireCluster runs two islands over real TCP connections: a
// cross-island mkdir, a cross-island rmdir refused (the directory is not
// empty) and one done, and fsck through wire sources. The directory's
// record lives on one island, its name entry (in the root) on the other.
func TestWireCluster(t *testing.T) {
	ids := []namespace.IslandID{1, 2}
	tab, _ := namespace.NewTable(ids, 2)
	tab.Epoch = 1
	m := NewStaticMap(tab, nil)
	isls := map[namespace.IslandID]*Island{}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 2)
	for _, id := range ids {
		isl, err := newIsland(Config{Dir: "/i", FS: vfs.NewMem(), Listen: "127.0.0.1:0", ID: uint32(id), Map: m, Logger: quiet}, testTiming())
		if err != nil {
			t.Fatal(err)
		}
		m.SetAddr(id, isl.Addr())
		isls[id] = isl
		go func() { done <- isl.Run(ctx) }()
	}
	defer func() {
		cancel()
		for range ids {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}()
	pool := wire.NewPool(wire.ClientConfig{}, 1)
	defer pool.Close()
	call := func(op uint16, ino uint64, req, resp metawire.Message) error {
		addr, _ := m.IslandAddr(tab.Lookup(namespace.Ino(ino).Bucket()))
		reply, err := pool.Call(bg, addr, op, 1, metawire.Marshal(req), nil, nil)
		if err != nil {
			return metawire.RemoteErr(err)
		}
		if resp != nil {
			return metawire.Unmarshal(reply.Msg, resp)
		}
		return nil
	}
	fsck := func(wantInodes int) {
		t.Helper()
		var srcs []FsckSource
		for _, id := range ids {
			srcs = append(srcs, WireFsckSource(pool, id, isls[id].Addr()))
		}
		rep, err := Fsck(bg, srcs)
		if err != nil || !rep.Clean() || rep.Inodes != wantInodes || len(rep.Islands) != len(ids) {
			t.Fatalf("fsck (want %d inodes): %+v %v", wantInodes, rep, err)
		}
	}
	rootOwner := tab.Lookup(namespace.RootBucket)
	var name string
	for k := 0; ; k++ {
		name = "d" + string(rune('a'+k%26)) + string(rune('a'+k/26))
		p, _ := namespace.Join("/", name)
		if tab.Lookup(namespace.Bucket(p)) != rootOwner {
			break
		}
	}
	var cr metawire.CreateResp
	if err := call(metawire.OpMkdir, rootIno(), &metawire.CreateReq{Dir: rootIno(), Name: name, Mode: 0o755}, &cr); err != nil {
		t.Fatal(err)
	}
	dirOwner := tab.Lookup(namespace.Ino(cr.Attr.Ino).Bucket())
	if dirOwner == rootOwner {
		t.Fatal("directory landed on the parent's island")
	}
	var ar metawire.AttrResp
	if err := call(metawire.OpLookup, rootIno(), &metawire.NameReq{Dir: rootIno(), Name: name}, &ar); err != nil || ar.Attr.Ino != cr.Attr.Ino {
		t.Fatalf("lookup over the wire: %+v %v", ar.Attr, err)
	}
	if err := call(metawire.OpGetAttr, cr.Attr.Ino, &metawire.InoReq{Ino: cr.Attr.Ino}, &ar); err != nil || !ar.Attr.IsDir() {
		t.Fatalf("getattr of the directory on island %d: %+v %v", dirOwner, ar.Attr, err)
	}
	if err := call(metawire.OpCreate, cr.Attr.Ino, &metawire.CreateReq{Dir: cr.Attr.Ino, Name: "f", Mode: 0o644}, nil); err != nil {
		t.Fatal(err)
	}
	err := call(metawire.OpRmdir, rootIno(), &metawire.NameReq{Dir: rootIno(), Name: name}, nil)
	wantErr(t, err, metawire.ErrNotEmpty, "rmdir of a non-empty remote directory")
	// Refused: nothing changed on either island.
	if err := call(metawire.OpLookup, rootIno(), &metawire.NameReq{Dir: rootIno(), Name: name}, &ar); err != nil || ar.Attr.Ino != cr.Attr.Ino {
		t.Fatalf("lookup after the refused rmdir: %+v %v", ar.Attr, err)
	}
	fsck(3)

	// Emptied, the directory goes: its entry from the root's island and
	// its record from its own.
	if err := call(metawire.OpUnlink, cr.Attr.Ino, &metawire.NameReq{Dir: cr.Attr.Ino, Name: "f"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call(metawire.OpRmdir, rootIno(), &metawire.NameReq{Dir: rootIno(), Name: name}, nil); err != nil {
		t.Fatalf("rmdir of an empty remote directory: %v", err)
	}
	err = call(metawire.OpLookup, rootIno(), &metawire.NameReq{Dir: rootIno(), Name: name}, &ar)
	wantErr(t, err, metawire.ErrNotFound, "lookup of the removed directory (root's island)")
	err = call(metawire.OpGetAttr, cr.Attr.Ino, &metawire.InoReq{Ino: cr.Attr.Ino}, &ar)
	wantErr(t, err, metawire.ErrStale, "getattr of the removed directory (its own island)")
	if err := call(metawire.OpGetAttr, rootIno(), &metawire.InoReq{Ino: rootIno()}, &ar); err != nil || ar.Attr.Nlink != 2 {
		t.Fatalf("root after rmdir: %+v %v", ar.Attr, err)
	}
	fsck(1)
}
