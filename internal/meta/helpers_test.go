package meta

import (
	"context"
	"errors"
	"fmt"
	"github.com/atoll-fs/atoll/internal/auth"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/cockroachdb/pebble/v2/vfs"
)

var bg = context.Background()

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testTiming() timing {
	return timing{
		lockWait:     300 * time.Millisecond,
		prepareWait:  50 * time.Millisecond,
		readWait:     time.Second,
		callTimeout:  2 * time.Second,
		resolveAfter: 100 * time.Millisecond,
		resolveEvery: 50 * time.Millisecond,
		maxAttempts:  30,
	}
}

// cluster is a set of in-process islands on MemFSs, and a client that
// routes requests the way the real client does.
type cluster struct {
	t     testing.TB
	m     *StaticMap
	net   *LocalNet
	isl   map[namespace.IslandID]*Island
	fs    map[namespace.IslandID]*vfs.MemFS
	fp    map[namespace.IslandID]*faults.Set
	ids   []namespace.IslandID
	epoch uint64
}

func newCluster(t testing.TB, n int) *cluster {
	t.Helper()
	var ids []namespace.IslandID
	for k := 1; k <= n; k++ {
		ids = append(ids, namespace.IslandID(k))
	}
	depth := uint8(0)
	if n > 1 {
		depth = 4
	}
	tab, err := namespace.NewTable(ids, depth)
	if err != nil {
		t.Fatal(err)
	}
	tab.Epoch = 1
	c := &cluster{t: t, m: NewStaticMap(tab, nil), net: NewLocalNet(), ids: ids, epoch: 1,
		isl: map[namespace.IslandID]*Island{}, fs: map[namespace.IslandID]*vfs.MemFS{},
		fp: map[namespace.IslandID]*faults.Set{}}
	for _, id := range ids {
		c.fs[id] = vfs.NewCrashableMem()
		c.open(id)
	}
	t.Cleanup(func() {
		for _, isl := range c.isl {
			isl.Close()
		}
	})
	return c
}

// open (re)opens island id from its current MemFS.
func (c *cluster) open(id namespace.IslandID) *Island {
	c.t.Helper()
	fp := faults.New()
	c.fp[id] = fp
	isl, err := newIsland(Config{Dir: "/island", FS: c.fs[id], ID: uint32(id), Map: c.m,
		Peer: c.net.Peer(id), Faults: fp, Logger: quiet}, testTiming())
	if err != nil {
		c.t.Fatalf("open island %d: %v", id, err)
	}
	c.isl[id] = isl
	c.net.Attach(isl)
	return isl
}

// crashAt arms failpoint name on island id so that hitting it snapshots
// the island's FS as a crash would leave it and takes the island off the
// network. It returns a function giving the snapshot (nil if not hit).
func (c *cluster) crashAt(id namespace.IslandID, name string) func() *vfs.MemFS {
	// Atomic: a background step (a move) may crash while the test polls.
	var clone atomic.Pointer[vfs.MemFS]
	fs := c.fs[id]
	c.fp[id].OnCrash = func(string) {
		if clone.Load() == nil {
			clone.Store(fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(1, 2))}))
			c.net.SetDown(id, true)
		}
	}
	c.fp[id].Enable(name, faults.Action{Kind: faults.Crash})
	return clone.Load
}

// restart replaces island id by one opened from fs.
func (c *cluster) restart(id namespace.IslandID, fs *vfs.MemFS) {
	c.t.Helper()
	c.isl[id].Close()
	c.fs[id] = fs
	c.open(id)
}

// settle runs resolver passes on every island until nothing is pending.
func (c *cluster) settle() {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		for _, id := range c.ids {
			left += c.isl[id].ResolvePending(bg)
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("transactions still pending after 10s: %d", left)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (c *cluster) fsck() Report {
	c.t.Helper()
	var srcs []FsckSource
	for _, id := range c.ids {
		srcs = append(srcs, IslandFsckSource(c.isl[id]))
	}
	rep, err := Fsck(bg, srcs)
	if err != nil {
		c.t.Fatal(err)
	}
	return rep
}

func (c *cluster) mustFsck() {
	c.t.Helper()
	if rep := c.fsck(); !rep.Clean() {
		c.t.Fatalf("fsck: %d problems:\n%v", rep.ProblemCount, rep.Problems)
	}
}

// owner returns the island owning ino's bucket.
func (c *cluster) owner(ino uint64) namespace.IslandID {
	return c.m.Table().Lookup(namespace.Ino(ino).Bucket())
}

// call sends req to the island owning ino and decodes into resp.
func (c *cluster) call(op uint16, ino uint64, req, resp metawire.Message) error {
	return c.callAs(nil, op, ino, req, resp)
}

// callAs is call over a connection whose key is peer's (nil: a trusted
// key), as serveWire marks a tenant's requests.
func (c *cluster) callAs(peer *auth.Peer, op uint16, ino uint64, req, resp metawire.Message) error {
	isl := c.isl[c.owner(ino)]
	ctx := bg
	if peer != nil && peer.Scope.Tenant() {
		ctx = withScope(ctx, *peer, isl)
	}
	out, err := isl.Handle(ctx, op, max(c.epoch, c.m.Epoch()), metawire.Marshal(req))
	if err != nil {
		return err
	}
	if resp != nil {
		return metawire.Unmarshal(out, resp)
	}
	return nil
}

// client is a cluster seen with one credential (and, with peer, through
// a connection with that key).
type client struct {
	c    *cluster
	cred metawire.Cred
	peer *auth.Peer
}

func (k *client) call(op uint16, ino uint64, req, resp metawire.Message) error {
	return k.c.callAs(k.peer, op, ino, req, resp)
}

func (c *cluster) as(uid, gid uint32, groups ...uint32) *client {
	return &client{c: c, cred: metawire.Cred{UID: uid, GID: gid, Groups: groups}}
}

func (c *cluster) root() *client { return c.as(0, 0) }

func rootIno() uint64 { return uint64(namespace.RootIno) }

func (k *client) lookup(dir uint64, name string) (metawire.Attr, error) {
	var r metawire.AttrResp
	err := k.call(metawire.OpLookup, dir, &metawire.NameReq{Cred: k.cred, Dir: dir, Name: name}, &r)
	return r.Attr, err
}

func (k *client) getattr(ino uint64) (metawire.Attr, error) {
	var r metawire.AttrResp
	err := k.call(metawire.OpGetAttr, ino, &metawire.InoReq{Cred: k.cred, Ino: ino}, &r)
	return r.Attr, err
}

func (k *client) createReq(op uint16, req metawire.CreateReq) (metawire.CreateResp, error) {
	req.Cred = k.cred
	var r metawire.CreateResp
	err := k.call(op, req.Dir, &req, &r)
	return r, err
}

func (k *client) create(dir uint64, name string, mode uint32) (metawire.Attr, error) {
	r, err := k.createReq(metawire.OpCreate, metawire.CreateReq{Dir: dir, Name: name, Mode: mode, Exclusive: true})
	return r.Attr, err
}

func (k *client) mkdir(dir uint64, name string, mode uint32) (metawire.Attr, error) {
	r, err := k.createReq(metawire.OpMkdir, metawire.CreateReq{Dir: dir, Name: name, Mode: mode})
	return r.Attr, err
}

func (k *client) symlink(dir uint64, name, target string) (metawire.Attr, error) {
	r, err := k.createReq(metawire.OpSymlink, metawire.CreateReq{Dir: dir, Name: name, Target: target})
	return r.Attr, err
}

func (k *client) unlink(dir uint64, name string) error {
	return k.call(metawire.OpUnlink, dir, &metawire.NameReq{Cred: k.cred, Dir: dir, Name: name}, nil)
}

func (k *client) rmdir(dir uint64, name string) error {
	return k.call(metawire.OpRmdir, dir, &metawire.NameReq{Cred: k.cred, Dir: dir, Name: name}, nil)
}

func (k *client) rename(sd uint64, sn string, dd uint64, dn string, flags uint32) error {
	return k.call(metawire.OpRename, sd, &metawire.RenameReq{Cred: k.cred, SrcDir: sd, SrcName: sn, DstDir: dd, DstName: dn, Flags: flags}, nil)
}

func (k *client) link(ino, dir uint64, name string) (metawire.Attr, error) {
	var r metawire.AttrResp
	err := k.call(metawire.OpLink, dir, &metawire.LinkReq{Cred: k.cred, Ino: ino, Dir: dir, Name: name}, &r)
	return r.Attr, err
}

func (k *client) setattr(req metawire.SetAttrReq) (metawire.Attr, error) {
	req.Cred = k.cred
	var r metawire.AttrResp
	err := k.call(metawire.OpSetAttr, req.Ino, &req, &r)
	return r.Attr, err
}

func (k *client) readdir(dir, cookie uint64, max uint32, plus bool) (metawire.ReaddirResp, error) {
	var r metawire.ReaddirResp
	err := k.call(metawire.OpReaddir, dir, &metawire.ReaddirReq{Cred: k.cred, Dir: dir, Cookie: cookie, MaxEntries: max, Plus: plus}, &r)
	return r, err
}

// names lists a whole directory (without "." and "..").
func (k *client) names(dir uint64) (map[string]uint64, error) {
	out := map[string]uint64{}
	cookie := uint64(0)
	for {
		r, err := k.readdir(dir, cookie, 100, false)
		if err != nil {
			return nil, err
		}
		for _, e := range r.Entries {
			if e.Name != "." && e.Name != ".." {
				if _, dup := out[e.Name]; dup {
					return nil, fmt.Errorf("readdir repeated %q", e.Name)
				}
				out[e.Name] = e.Ino
			}
			cookie = e.Cookie
		}
		if r.EOF {
			return out, nil
		}
	}
}

func (k *client) commit(ws ...metawire.FileWrite) (metawire.CommitResp, error) {
	var r metawire.CommitResp
	err := k.call(metawire.OpCommit, ws[0].Ino, &metawire.CommitReq{Cred: k.cred, Writes: ws}, &r)
	return r, err
}

// lazyCommit is commit with CommitReq.Lazy (close on the FUSE mount).
func (k *client) lazyCommit(ws ...metawire.FileWrite) (metawire.CommitResp, error) {
	var r metawire.CommitResp
	err := k.call(metawire.OpCommit, ws[0].Ino, &metawire.CommitReq{Cred: k.cred, Writes: ws, Lazy: true}, &r)
	return r, err
}

func (k *client) readmap(ino, first, count uint64) (metawire.ReadMapResp, error) {
	var r metawire.ReadMapResp
	err := k.call(metawire.OpReadMap, ino, &metawire.ReadMapReq{Cred: k.cred, Ino: ino, First: first, Count: count}, &r)
	return r, err
}

func (k *client) setxattr(ino uint64, name string, val []byte, flags uint32) error {
	return k.call(metawire.OpSetXattr, ino, &metawire.XattrReq{Cred: k.cred, Ino: ino, Name: name, Value: val, Flags: flags}, nil)
}

func (k *client) getxattr(ino uint64, name string) ([]byte, error) {
	var r metawire.XattrResp
	err := k.call(metawire.OpGetXattr, ino, &metawire.XattrReq{Cred: k.cred, Ino: ino, Name: name}, &r)
	return r.Value, err
}

func (k *client) listxattr(ino uint64) ([]string, error) {
	var r metawire.XattrResp
	err := k.call(metawire.OpListXattr, ino, &metawire.InoReq{Cred: k.cred, Ino: ino}, &r)
	return r.Names, err
}

func (k *client) removexattr(ino uint64, name string) error {
	return k.call(metawire.OpRemoveXattr, ino, &metawire.XattrReq{Cred: k.cred, Ino: ino, Name: name}, nil)
}

func (k *client) access(ino uint64, mask uint32) error {
	return k.call(metawire.OpAccess, ino, &metawire.AccessReq{Cred: k.cred, Ino: ino, Mask: mask}, nil)
}

// must returns v, panicking (failing the test) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func wantErr(t testing.TB, err, want error, what string) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("%s: %v, want success", what, err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

// nameOn finds a name under the directory with creation path parent
// whose subdirectory path hashes to island id.
func (c *cluster) nameOn(parent, prefix string, id namespace.IslandID) string {
	c.t.Helper()
	for k := 0; k < 10000; k++ {
		name := fmt.Sprintf("%s%d", prefix, k)
		p, err := namespace.Join(parent, name)
		if err != nil {
			c.t.Fatal(err)
		}
		if c.m.Table().Lookup(namespace.Bucket(p)) == id {
			return name
		}
	}
	c.t.Fatalf("no name under %s for island %d", parent, id)
	return ""
}

// ptr returns an encoded pointer to a block of stripe (log, seq).
func ptr(log, seq uint64, off, length uint32) []byte {
	p := layout.Pointer{Kind: layout.EC, K: 2, M: 1, Stripe: fragment.StripeID{Log: log, Seq: seq},
		Shard: 1 << 20, Offset: off, Length: length, CRC: off ^ length, Slots: []uint16{0, 1, 2}}
	return p.AppendBinary(nil)
}
