package meta

import (
	"context"
	"errors"
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
	isl.Close()
	wantErr(t, get(5, rootIno()), metawire.ErrUnavailable, "closed island")
}

// FuzzHandle feeds arbitrary ops and messages to an island: every answer
// is a response or an error, never a panic, and the namespace stays
// consistent.
func FuzzHandle(f *testing.F) {
	seeds := []struct {
		op  uint16
		msg metawire.Message
	}{
		{metawire.OpLookup, &metawire.NameReq{Dir: rootIno(), Name: "a"}},
		{metawire.OpCreate, &metawire.CreateReq{Dir: rootIno(), Name: "a", Mode: 0o644}},
		{metawire.OpMkdir, &metawire.CreateReq{Dir: rootIno(), Name: "d", Mode: 0o755}},
		{metawire.OpRename, &metawire.RenameReq{SrcDir: rootIno(), SrcName: "a", DstDir: rootIno(), DstName: "b"}},
		{metawire.OpSetAttr, &metawire.SetAttrReq{Ino: rootIno(), Valid: metawire.SetMode, Mode: 0o777}},
		{metawire.OpCommit, &metawire.CommitReq{Writes: []metawire.FileWrite{{Ino: rootIno(), Size: 1}}}},
		{metawire.OpReaddir, &metawire.ReaddirReq{Dir: rootIno(), Plus: true}},
		{metawire.OpPrepare, &metawire.PrepareReq{Coordinator: 2, Actions: []metawire.Action{{Kind: metawire.ActTouch, Ino: rootIno()}}}},
		{metawire.OpDecide, &metawire.DecideReq{Commit: true}},
		{metawire.OpFsck, &metawire.FsckReq{}},
		{metawire.OpClean, &metawire.CleanReq{Deltas: []metawire.CleanDelta{{Ino: rootIno(), Old: []byte{1}, New: ptr(1, 1, 0, 1)}}}},
		{metawire.OpSetXattr, &metawire.XattrReq{Ino: rootIno(), Name: "user.x", Value: []byte("v")}},
	}
	for _, s := range seeds {
		f.Add(s.op, metawire.Marshal(s.msg))
	}
	tab, _ := namespace.NewTable([]namespace.IslandID{1}, 0)
	tab.Epoch = 1
	tm := testTiming()
	tm.lockWait, tm.prepareWait, tm.maxAttempts = 10*time.Millisecond, 0, 2
	isl, err := newIsland(Config{Dir: "/fuzz", FS: vfs.NewMem(), ID: 1, Map: NewStaticMap(tab, nil),
		Peer: NewLocalNet().Peer(1), Logger: quiet}, tm)
	if err != nil {
		f.Fatal(err)
	}
	defer isl.Close()
	f.Fuzz(func(t *testing.T, op uint16, msg []byte) {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		op = op%70 + 1
		if op == metawire.OpPrepare {
			// A prepared transaction would hold its locks until its
			// (unreachable) coordinator answers; that is not a bug.
			return
		}
		_, err := isl.Handle(ctx, op, 1, msg)
		if err != nil && metawire.StatusOf(err) == 1 && !errors.Is(err, metawire.ErrInternal) {
			t.Fatalf("op %d: untyped error %v", op, err)
		}
	})
}

// TestWireCluster runs two islands over real TCP connections: a
// cross-island mkdir and rmdir, and fsck through wire sources.
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
	if tab.Lookup(namespace.Ino(cr.Attr.Ino).Bucket()) == rootOwner {
		t.Fatal("directory landed on the parent's island")
	}
	var ar metawire.AttrResp
	if err := call(metawire.OpLookup, rootIno(), &metawire.NameReq{Dir: rootIno(), Name: name}, &ar); err != nil || ar.Attr.Ino != cr.Attr.Ino {
		t.Fatalf("lookup over the wire: %+v %v", ar.Attr, err)
	}
	if err := call(metawire.OpCreate, cr.Attr.Ino, &metawire.CreateReq{Dir: cr.Attr.Ino, Name: "f", Mode: 0o644}, nil); err != nil {
		t.Fatal(err)
	}
	err := call(metawire.OpRmdir, rootIno(), &metawire.NameReq{Dir: rootIno(), Name: name}, nil)
	wantErr(t, err, metawire.ErrNotEmpty, "rmdir of a non-empty remote directory")
	var srcs []FsckSource
	for _, id := range ids {
		srcs = append(srcs, WireFsckSource(pool, isls[id].Addr()))
	}
	rep, err := Fsck(bg, srcs)
	if err != nil || !rep.Clean() || rep.Inodes != 3 {
		t.Fatalf("fsck: %+v %v", rep, err)
	}
}
