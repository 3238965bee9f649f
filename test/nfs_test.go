package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	nfsrpc "github.com/willscott/go-nfs-client/nfs/rpc"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/nfs"
	"github.com/atoll-fs/atoll/internal/nfs/xdr"
	"github.com/atoll-fs/atoll/internal/testenv"
)

// ---------------------------------------------------------------------
// Gateway helpers

type nfsGateway struct {
	t      *testing.T
	srv    *nfs.Server
	cancel context.CancelFunc
	done   chan error
	addr   string
}

// startGateway serves fs over NFS on 127.0.0.1 (listen "" = any port).
func startGateway(t *testing.T, fs *client.FS, listen string, mod func(*nfs.Config)) *nfsGateway {
	t.Helper()
	if listen == "" {
		// Below the ephemeral range, so a restart can bind it again.
		listen = addrAt(freeBase(t, 1))
	}
	// As atoll nfs does: handles tagged under the gateway's key.
	cfg := nfs.Config{FS: fs, Listen: listen, Logger: quietLogger(), FlushIdle: 300 * time.Millisecond,
		Export: nfs.Export{HandleKey: testKey.Handle("nfs-handles")}}
	if mod != nil {
		mod(&cfg)
	}
	var srv *nfs.Server
	var err error
	for i := 0; i < 50; i++ { // a just-closed port can linger
		if srv, err = nfs.New(cfg); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &nfsGateway{t: t, srv: srv, cancel: cancel, done: make(chan error, 1), addr: srv.Addr()}
	go func() { g.done <- srv.Run(ctx) }()
	t.Cleanup(g.stop)
	return g
}

func (g *nfsGateway) stop() {
	if g.cancel == nil {
		return
	}
	g.cancel()
	if err := <-g.done; err != nil {
		g.t.Errorf("gateway run: %v", err)
	}
	g.cancel = nil
}

func (g *nfsGateway) port() int { return g.srv.Port() }

// ---------------------------------------------------------------------
// A small raw ONC RPC client, to assert bytes and exact status codes.

type rpcConn struct {
	t    *testing.T
	c    net.Conn
	br   *bufio.Reader
	xid  uint32
	cred []byte // credential: flavor + body
}

func dialRPC(t *testing.T, addr string) *rpcConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := &rpcConn{t: t, c: c, br: bufio.NewReader(c), xid: 0x1000}
	r.asUser(0, 0)
	return r
}

// authSys builds an AUTH_SYS credential.
func authSys(uid, gid uint32, gids ...uint32) []byte {
	var body xdr.Writer
	body.Uint32(12345)
	body.String("testhost")
	body.Uint32(uid)
	body.Uint32(gid)
	body.Uint32(uint32(len(gids)))
	for _, g := range gids {
		body.Uint32(g)
	}
	var w xdr.Writer
	w.Uint32(1)
	w.Opaque(body.B)
	return w.B
}

func (r *rpcConn) asUser(uid, gid uint32, gids ...uint32) { r.cred = authSys(uid, gid, gids...) }

func (r *rpcConn) asNone() { r.cred = []byte{0, 0, 0, 0, 0, 0, 0, 0} }

// callMsg builds a call record body (without the record mark).
func (r *rpcConn) callMsg(xid, prog, vers, proc uint32, args []byte) []byte {
	var w xdr.Writer
	w.Uint32(xid)
	w.Uint32(0) // CALL
	w.Uint32(2)
	w.Uint32(prog)
	w.Uint32(vers)
	w.Uint32(proc)
	w.B = append(w.B, r.cred...)
	w.Uint32(0) // verifier AUTH_NONE
	w.Uint32(0)
	w.B = append(w.B, args...)
	return w.B
}

func (r *rpcConn) sendRecord(body []byte) {
	r.t.Helper()
	rec := binary.BigEndian.AppendUint32(nil, 1<<31|uint32(len(body)))
	if _, err := r.c.Write(append(rec, body...)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rpcConn) readReply() (uint32, []byte, error) {
	r.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var rec []byte
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r.br, hdr[:]); err != nil {
			return 0, nil, err
		}
		v := binary.BigEndian.Uint32(hdr[:])
		b := make([]byte, v&^(1<<31))
		if _, err := io.ReadFull(r.br, b); err != nil {
			return 0, nil, err
		}
		rec = append(rec, b...)
		if v&(1<<31) != 0 {
			break
		}
	}
	if len(rec) < 8 {
		return 0, nil, fmt.Errorf("short reply")
	}
	return binary.BigEndian.Uint32(rec), rec[8:], nil
}

// rpcReply is a decoded reply header.
type rpcReply struct {
	denied     bool
	stat       uint32 // accept_stat, or reject_stat when denied
	authStat   uint32
	low, high  uint32
	body       *xdr.Reader // results after SUCCESS
	bodyOffset int
}

func parseReply(t *testing.T, b []byte) rpcReply {
	t.Helper()
	r := xdr.NewReader(b)
	var rep rpcReply
	if r.Uint32() == 1 {
		rep.denied = true
		rep.stat = r.Uint32()
		if rep.stat == 0 {
			rep.low, rep.high = r.Uint32(), r.Uint32()
		} else {
			rep.authStat = r.Uint32()
		}
		return rep
	}
	r.Uint32() // verifier
	r.Opaque(400)
	rep.stat = r.Uint32()
	if rep.stat == 2 {
		rep.low, rep.high = r.Uint32(), r.Uint32()
	}
	if r.Err() != nil {
		t.Fatalf("bad reply header: %v", r.Err())
	}
	rep.body = r
	return rep
}

// call sends one call and returns its reply.
func (r *rpcConn) call(prog, vers, proc uint32, args []byte) rpcReply {
	r.t.Helper()
	r.xid++
	r.sendRecord(r.callMsg(r.xid, prog, vers, proc, args))
	xid, b, err := r.readReply()
	if err != nil {
		r.t.Fatalf("rpc %d/%d/%d: %v", prog, vers, proc, err)
	}
	if xid != r.xid {
		r.t.Fatalf("reply xid %x, want %x", xid, r.xid)
	}
	return parseReply(r.t, b)
}

const (
	progNFS   = 100003
	progMount = 100005
	progPmap  = 100000
)

// nfs calls an NFSv3 procedure and returns its status and results.
func (r *rpcConn) nfs(proc uint32, args []byte) (uint32, *xdr.Reader) {
	r.t.Helper()
	rep := r.call(progNFS, 3, proc, args)
	if rep.denied || rep.stat != 0 {
		r.t.Fatalf("nfs proc %d: denied=%v stat=%d auth=%d", proc, rep.denied, rep.stat, rep.authStat)
	}
	return rep.body.Uint32(), rep.body
}

// mount returns the handle of path.
func (r *rpcConn) mount(path string) []byte {
	r.t.Helper()
	var a xdr.Writer
	a.String(path)
	rep := r.call(progMount, 3, 1, a.B)
	if rep.stat != 0 {
		r.t.Fatalf("mount: stat %d", rep.stat)
	}
	if st := rep.body.Uint32(); st != 0 {
		r.t.Fatalf("mount %s: mountstat %d", path, st)
	}
	return append([]byte(nil), rep.body.Opaque(64)...)
}

// args builds XDR arguments from values: uint32, uint64, []byte (opaque),
// string, bool, fixed8 (8 raw bytes), and nested []any.
type fixed8 [8]byte

func args(vals ...any) []byte {
	var w xdr.Writer
	var put func(v any)
	put = func(v any) {
		switch v := v.(type) {
		case uint32:
			w.Uint32(v)
		case int:
			w.Uint32(uint32(v))
		case uint64:
			w.Uint64(v)
		case []byte:
			w.Opaque(v)
		case string:
			w.String(v)
		case bool:
			w.Bool(v)
		case fixed8:
			w.Fixed(v[:])
		case []any:
			for _, x := range v {
				put(x)
			}
		default:
			panic(fmt.Sprintf("args: %T", v))
		}
	}
	for _, v := range vals {
		put(v)
	}
	return w.B
}

// noAttrs is a sattr3 that sets nothing.
var noAttrs = []any{false, false, false, false, 0, 0}

func modeAttrs(mode uint32) []any { return []any{true, mode, false, false, false, 0, 0} }

// fattr is the part of fattr3 the tests look at.
type fattr struct {
	typ, mode, nlink, uid, gid uint32
	size, fileid               uint64
	mtime, ctime               [2]uint32
}

func readFattr(r *xdr.Reader) fattr {
	var a fattr
	a.typ, a.mode, a.nlink, a.uid, a.gid = r.Uint32(), r.Uint32(), r.Uint32(), r.Uint32(), r.Uint32()
	a.size = r.Uint64()
	r.Uint64()            // used
	r.Uint32()            // rdev
	r.Uint32()            //
	r.Uint64()            // fsid
	a.fileid = r.Uint64() // fileid
	r.Uint32()            // atime
	r.Uint32()            //
	a.mtime = [2]uint32{r.Uint32(), r.Uint32()}
	a.ctime = [2]uint32{r.Uint32(), r.Uint32()}
	return a
}

func readPostAttr(r *xdr.Reader) (fattr, bool) {
	if !r.Bool() {
		return fattr{}, false
	}
	return readFattr(r), true
}

func skipWcc(r *xdr.Reader) {
	if r.Bool() {
		r.Uint64()
		r.Uint64()
		r.Uint64()
	}
	readPostAttr(r)
}

// NFS procedure numbers and statuses used by the tests.
const (
	pGetattr, pSetattr, pLookup, pAccess, pReadlink, pRead, pWrite, pCreate = 1, 2, 3, 4, 5, 6, 7, 8
	pMkdir, pSymlink, pMknod, pRemove, pRmdir, pRename, pLink, pReaddir     = 9, 10, 11, 12, 13, 14, 15, 16
	pReaddirplus, pFsstat, pFsinfo, pPathconf, pCommit                      = 17, 18, 19, 20, 21

	sOK, sPerm, sNoEnt, sIO, sAcces, sExist = 0, 1, 2, 5, 13, 17
	sNotDir, sIsDir, sInval, sROFS          = 20, 21, 22, 30
	sNameTooLong, sNotEmpty, sStale         = 63, 66, 70
	sBadHandle, sNotSync, sBadCookie        = 10001, 10002, 10003
	sBadType                                = 10007
)

// create makes a file with how (0 unchecked, 1 guarded, 2 exclusive with
// verf) and returns the status and handle.
func (r *rpcConn) create(dir []byte, name string, how uint32, verf uint64) (uint32, []byte) {
	r.t.Helper()
	var a []byte
	switch how {
	case 2:
		var v fixed8
		binary.BigEndian.PutUint64(v[:], verf)
		a = args(dir, name, how, v)
	default:
		a = args(dir, name, how, modeAttrs(0o644))
	}
	st, res := r.nfs(pCreate, a)
	if st != sOK {
		return st, nil
	}
	if !res.Bool() {
		r.t.Fatal("create: no handle")
	}
	return st, append([]byte(nil), res.Opaque(64)...)
}

func (r *rpcConn) lookup(dir []byte, name string) (uint32, []byte) {
	r.t.Helper()
	st, res := r.nfs(pLookup, args(dir, name))
	if st != sOK {
		return st, nil
	}
	return st, append([]byte(nil), res.Opaque(64)...)
}

func (r *rpcConn) getattr(h []byte) (uint32, fattr) {
	r.t.Helper()
	st, res := r.nfs(pGetattr, args(h))
	if st != sOK {
		return st, fattr{}
	}
	return st, readFattr(res)
}

// write writes data at off with stable (0 unstable, 2 file sync) and
// returns the status, the committed level and the verifier.
func (r *rpcConn) write(h []byte, off uint64, data []byte, stable uint32) (uint32, uint32, uint64) {
	r.t.Helper()
	st, res := r.nfs(pWrite, args(h, off, uint32(len(data)), stable, data))
	skipWcc(res)
	if st != sOK {
		return st, 0, 0
	}
	if n := res.Uint32(); int(n) != len(data) {
		r.t.Fatalf("write: %d of %d bytes", n, len(data))
	}
	committed := res.Uint32()
	return st, committed, binary.BigEndian.Uint64(res.Fixed(8))
}

func (r *rpcConn) read(h []byte, off uint64, n uint32) (uint32, []byte, bool) {
	r.t.Helper()
	st, res := r.nfs(pRead, args(h, off, n))
	readPostAttr(res)
	if st != sOK {
		return st, nil, false
	}
	count := res.Uint32()
	eof := res.Bool()
	data := res.Opaque(1 << 21)
	if res.Err() != nil || int(count) != len(data) {
		r.t.Fatalf("read: bad reply (count %d, data %d, err %v)", count, len(data), res.Err())
	}
	return st, append([]byte(nil), data...), eof
}

func (r *rpcConn) commit(h []byte) (uint32, uint64) {
	r.t.Helper()
	st, res := r.nfs(pCommit, args(h, uint64(0), uint32(0)))
	skipWcc(res)
	if st != sOK {
		return st, 0
	}
	return st, binary.BigEndian.Uint64(res.Fixed(8))
}

func (r *rpcConn) mkdir(dir []byte, name string) (uint32, []byte) {
	r.t.Helper()
	st, res := r.nfs(pMkdir, args(dir, name, modeAttrs(0o755)))
	if st != sOK {
		return st, nil
	}
	res.Bool()
	return st, append([]byte(nil), res.Opaque(64)...)
}

type dirent struct {
	name   string
	fileid uint64
	cookie uint64
	hasFH  bool
}

// readdir reads one page; returns status, entries, verifier and eof.
func (r *rpcConn) readdir(dir []byte, cookie, verf uint64, count uint32, plus bool) (uint32, []dirent, uint64, bool) {
	r.t.Helper()
	var v fixed8
	binary.BigEndian.PutUint64(v[:], verf)
	var a []byte
	proc := uint32(pReaddir)
	if plus {
		proc = pReaddirplus
		a = args(dir, cookie, v, count, count)
	} else {
		a = args(dir, cookie, v, count)
	}
	st, res := r.nfs(proc, a)
	readPostAttr(res)
	if st != sOK {
		return st, nil, 0, false
	}
	newVerf := binary.BigEndian.Uint64(res.Fixed(8))
	var out []dirent
	for res.Bool() {
		e := dirent{fileid: res.Uint64(), name: res.String(255), cookie: res.Uint64()}
		if plus {
			readPostAttr(res)
			if e.hasFH = res.Bool(); e.hasFH {
				res.Opaque(64)
			}
		}
		out = append(out, e)
	}
	eof := res.Bool()
	if err := res.Finish(); err != nil {
		r.t.Fatalf("readdir reply: %v", err)
	}
	return st, out, newVerf, eof
}

// ---------------------------------------------------------------------

func nfsCluster(t *testing.T) (*fsCluster, *client.FS) {
	fc := startFSCluster(t, 5, 3)
	return fc, fc.newFS(t)
}

// retryAddrInUse runs one go-nfs-client dial step until it does not fail
// with EADDRINUSE: the client binds a random source port of its own
// choosing (49152-65535, or below 1024 as root through the portmapper),
// and one still held by a socket of this package's many connections (in
// TIME_WAIT, say) fails the dial. It fails the test on any other error or
// after 20 retries.
func retryAddrInUse(t *testing.T, step func() error) {
	t.Helper()
	var err error
	for try := 0; try <= 20; try++ {
		if err = step(); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// goNFSTarget mounts path through go-nfs-client without a portmapper.
func goNFSTarget(t *testing.T, addr, path string) *nfsc.Target {
	t.Helper()
	var rc *nfsrpc.Client
	retryAddrInUse(t, func() (err error) {
		rc, err = nfsrpc.DialTCP("tcp", addr, false)
		return err
	})
	m := &nfsc.Mount{Client: rc}
	tgt, err := m.Mount(path, nfsrpc.NewAuthUnix("atoll-test", 0, 0).Auth())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmount(); rc.Close() })
	return tgt
}

func TestNFSGoClient(t *testing.T) {
	_, fs := nfsCluster(t)
	g := startGateway(t, fs, "", nil)
	v := goNFSTarget(t, g.addr, "/")
	r := newRand(7)

	info, err := v.FSInfo()
	if err != nil {
		t.Fatal(err)
	}
	if info.RTMax != 1<<20 || info.WTMax != 1<<20 || info.WTPref != 1<<20 || info.RTPref != 1<<20 || info.Properties != 0x1b {
		t.Fatalf("fsinfo %+v", info)
	}
	if _, err := v.Mkdir("/docs", 0o755); err != nil {
		t.Fatal(err)
	}
	// Files of several sizes, written (FILE_SYNC, the client's way) and
	// read back.
	sizes := []int{0, 1, 4095, 16 << 10, 16<<10 + 1, 1<<20 + 3, 3<<20 + 777}
	for i, n := range sizes {
		data := randBytes(r, n)
		name := fmt.Sprintf("/docs/f%d", i)
		f, err := v.OpenFile(name, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		rf, err := v.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rf)
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		rf.Close()
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: read %d bytes, wrote %d, equal=%v", name, len(got), len(data), bytes.Equal(got, data))
		}
		// The same bytes through the client library directly.
		if direct, err := fs.ReadFile(context.Background(), root, name); err != nil || !bytes.Equal(direct, data) {
			t.Fatalf("%s via client.FS: err=%v equal=%v", name, err, bytes.Equal(direct, data))
		}
	}
	fi, err := v.Getattr("/docs/f5")
	if err != nil || fi.Size() != 1<<20+3 || fi.Mode().Perm() != 0o644 {
		t.Fatalf("getattr: %+v %v", fi, err)
	}
	if err := v.Setattr("/docs/f5", nfsc.Sattr3{Mode: nfsc.SetMode{SetIt: true, Mode: 0o600}}); err != nil {
		t.Fatal(err)
	}
	if fi, err := v.Getattr("/docs/f5"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("after chmod: %v %v", fi.Mode(), err)
	}
	if err := v.Symlink("f1", "/docs/link"); err != nil {
		t.Fatal(err)
	}
	lf, err := v.Open("/docs/link")
	if err != nil {
		t.Fatal(err)
	}
	if target, err := lf.Readlink(); err != nil || target != "f1" {
		t.Fatalf("readlink %q %v", target, err)
	}
	if err := v.Rename("/docs/f1", "/docs/renamed"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.Lookup("/docs/f1"); !os.IsNotExist(err) {
		t.Fatalf("lookup renamed-away: %v", err)
	}
	entries, err := v.ReadDirPlus("/docs")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	want := []string{"f0", "f2", "f3", "f4", "f5", "f6", "link", "renamed"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("readdirplus: %v, want %v", names, want)
	}
	if acc, err := v.Access("/docs/f2", 0x3f); err != nil || acc&0x0d != 0x0d {
		t.Fatalf("access %#x %v", acc, err)
	}
	if err := v.RmDir("/docs"); !nfsc.IsNotEmptyError(err) {
		t.Fatalf("rmdir non-empty: %v", err)
	}
	if err := v.Remove("/docs/f0"); err != nil {
		t.Fatal(err)
	}
	if err := v.RemoveAll("/docs"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.Lookup("/docs"); !os.IsNotExist(err) {
		t.Fatalf("after RemoveAll: %v", err)
	}
}

// TestNFSProcedures drives every NFSv3 procedure with raw calls and checks
// exact statuses and bytes.
func TestNFSProcedures(t *testing.T) {
	_, fs := nfsCluster(t)
	g := startGateway(t, fs, "", nil)
	c := dialRPC(t, g.addr)
	ctx := context.Background()
	rootFH := c.mount("/")

	if rep := c.call(progNFS, 3, 0, nil); rep.denied || rep.stat != 0 || rep.body.Finish() != nil {
		t.Fatalf("NULL: %+v", rep)
	}
	st, ra := c.getattr(rootFH)
	if st != sOK || ra.typ != 2 || ra.fileid != uint64(namespace.RootIno) {
		t.Fatalf("getattr root: %d %+v", st, ra)
	}

	// Handles: malformed -> BADHANDLE; well-formed but unknown -> STALE.
	if st, _ := c.getattr([]byte("not a handle")); st != sBadHandle {
		t.Fatalf("getattr garbage handle: %d", st)
	}
	bad := namespace.Handle{Ino: namespace.MakeIno(namespace.RootBucket, 999999), Gen: 1}.AppendBinary(nil)
	if st, _ := c.getattr(bad); st != sStale {
		t.Fatalf("getattr unknown inode: %d", st)
	}
	corrupt := append([]byte(nil), rootFH...)
	corrupt[10] ^= 1
	if st, _ := c.getattr(corrupt); st != sBadHandle {
		t.Fatalf("getattr corrupt handle: %d", st)
	}
	otherGen := namespace.Handle{Ino: namespace.RootIno, Gen: 77}.AppendBinary(nil)
	if st, _ := c.getattr(otherGen); st != sStale {
		t.Fatalf("getattr other generation: %d", st)
	}

	// MKDIR, LOOKUP, NOENT, NAMETOOLONG, EXIST.
	st, dir := c.mkdir(rootFH, "p")
	if st != sOK {
		t.Fatalf("mkdir: %d", st)
	}
	if st, _ := c.mkdir(rootFH, "p"); st != sExist {
		t.Fatalf("mkdir existing: %d", st)
	}
	if st, h := c.lookup(rootFH, "p"); st != sOK || !bytes.Equal(h, dir) {
		t.Fatalf("lookup p: %d", st)
	}
	if st, _ := c.lookup(dir, "missing"); st != sNoEnt {
		t.Fatalf("lookup missing: %d", st)
	}
	if st, _ := c.lookup(dir, strings.Repeat("n", 256)); st != sNameTooLong {
		t.Fatalf("lookup long name: %d", st)
	}
	if st, h := c.lookup(dir, ".."); st != sOK || !bytes.Equal(h, rootFH) {
		t.Fatalf("lookup ..: %d", st)
	}

	// CREATE: UNCHECKED, GUARDED, EXCLUSIVE with verifier replay.
	st, f := c.create(dir, "a", 0, 0)
	if st != sOK {
		t.Fatalf("create: %d", st)
	}
	if st, h := c.create(dir, "a", 0, 0); st != sOK || !bytes.Equal(h, f) {
		t.Fatalf("unchecked create of an existing file: %d", st)
	}
	if st, _ := c.create(dir, "a", 1, 0); st != sExist {
		t.Fatalf("guarded create of an existing file: %d", st)
	}
	st, ex := c.create(dir, "x", 2, 0xfeedface)
	if st != sOK {
		t.Fatalf("exclusive create: %d", st)
	}
	if st, h := c.create(dir, "x", 2, 0xfeedface); st != sOK || !bytes.Equal(h, ex) {
		t.Fatalf("exclusive create retried with the same verifier: %d", st)
	}
	if st, _ := c.create(dir, "x", 2, 0xbad); st != sExist {
		t.Fatalf("exclusive create with another verifier: %d", st)
	}
	if st, _ := c.create(dir, "a", 2, 0xfeedface); st != sExist {
		t.Fatalf("exclusive create over a file made unchecked: %d", st)
	}

	// WRITE UNSTABLE is readable at once, COMMIT makes it durable with the
	// same verifier; FILE_SYNC answers FILE_SYNC.
	data := randBytes(newRand(3), 200000)
	st, committed, verf := c.write(f, 0, data[:150000], 0)
	if st != sOK || committed != 0 {
		t.Fatalf("unstable write: %d committed %d", st, committed)
	}
	st, committed, verf2 := c.write(f, 150000, data[150000:], 2)
	if st != sOK || committed != 2 || verf2 != verf {
		t.Fatalf("file_sync write: %d committed %d verf %x/%x", st, committed, verf, verf2)
	}
	st, got, eof := c.read(f, 0, 1<<20)
	if st != sOK || !eof || !bytes.Equal(got, data) {
		t.Fatalf("read back: %d eof %v equal %v (%d bytes)", st, eof, bytes.Equal(got, data), len(got))
	}
	st, got, eof = c.read(f, 1000, 100)
	if st != sOK || eof || !bytes.Equal(got, data[1000:1100]) {
		t.Fatalf("read middle: %d eof %v", st, eof)
	}
	if st, got, eof = c.read(f, 500000, 100); st != sOK || !eof || len(got) != 0 {
		t.Fatalf("read past the end: %d eof %v len %d", st, eof, len(got))
	}
	st, _, _ = c.write(f, 200000, []byte("tail"), 0)
	if st != sOK {
		t.Fatal(st)
	}
	if _, a := c.getattr(f); a.size != 200004 {
		t.Fatalf("size with a buffered write: %d", a.size)
	}
	// A WRITE of nothing past the end changes nothing.
	if st, _, _ := c.write(f, 1<<30, nil, 2); st != sOK {
		t.Fatalf("empty write: %d", st)
	}
	if _, a := c.getattr(f); a.size != 200004 {
		t.Fatalf("size after an empty write past the end: %d", a.size)
	}
	st, cverf := c.commit(f)
	if st != sOK || cverf != verf {
		t.Fatalf("commit: %d verf %x want %x", st, cverf, verf)
	}
	direct, err := fs.ReadFile(ctx, root, "/p/a")
	if err != nil || !bytes.Equal(direct, append(data, "tail"...)) {
		t.Fatalf("after commit via client.FS: %v, %d bytes", err, len(direct))
	}
	if st, _ := c.nfs(pRead, args(dir, uint64(0), uint32(10))); st != sIsDir {
		t.Fatalf("read a directory: %d", st)
	}

	// SETATTR: size, mode, guard.
	_, a := c.getattr(f)
	st, res := c.nfs(pSetattr, args(f, []any{false, false, false, true, uint64(1000), 0, 0}, false))
	skipWcc(res)
	if st != sOK {
		t.Fatalf("truncate: %d", st)
	}
	if _, a2 := c.getattr(f); a2.size != 1000 {
		t.Fatalf("size after truncate: %d", a2.size)
	}
	st, res = c.nfs(pSetattr, args(f, modeAttrs(0o640), true, a.ctime[0], a.ctime[1]))
	skipWcc(res)
	if st != sNotSync {
		t.Fatalf("setattr with a stale guard: %d", st)
	}
	_, a = c.getattr(f)
	st, res = c.nfs(pSetattr, args(f, modeAttrs(0o640), true, a.ctime[0], a.ctime[1]))
	skipWcc(res)
	if _, a2 := c.getattr(f); st != sOK || a2.mode != 0o640 {
		t.Fatalf("setattr with the right guard: %d mode %o", st, a2.mode)
	}
	// Truncate inside a block, then grow: the cut-off bytes read as zeros.
	st, res = c.nfs(pSetattr, args(f, []any{false, false, false, true, uint64(600), 0, 0}, false))
	skipWcc(res)
	st2, res2 := c.nfs(pSetattr, args(f, []any{false, false, false, true, uint64(1000), 0, 0}, false))
	skipWcc(res2)
	if st != sOK || st2 != sOK {
		t.Fatal(st, st2)
	}
	if _, got, _ := c.read(f, 0, 2000); len(got) != 1000 || !bytes.Equal(got[:600], data[:600]) || !bytes.Equal(got[600:], make([]byte, 400)) {
		t.Fatalf("truncate down and up: %d bytes, prefix ok %v, zero tail %v", len(got), bytes.Equal(got[:600], data[:600]), bytes.Equal(got[600:], make([]byte, 400)))
	}

	// ACCESS as root and as another user.
	st, res = c.nfs(pAccess, args(f, uint32(0x3f)))
	readPostAttr(res)
	if got := res.Uint32(); st != sOK || got != 0x0d {
		t.Fatalf("access as root: %d %#x", st, got)
	}
	c.asUser(1000, 1000)
	st, res = c.nfs(pAccess, args(f, uint32(0x3f)))
	readPostAttr(res)
	if got := res.Uint32(); st != sOK || got != 0 {
		t.Fatalf("access as a stranger to a 0640 file: %d %#x", st, got)
	}
	if st, _, _ := c.write(f, 0, []byte("x"), 2); st != sAcces {
		t.Fatalf("write as a stranger: %d", st)
	}
	if st, _, _ := c.read(f, 0, 1); st != sAcces {
		t.Fatalf("read as a stranger: %d", st)
	}
	if st, _ := c.create(dir, "nope", 0, 0); st != sAcces {
		t.Fatalf("create in root's 0755 directory as a stranger: %d", st)
	}
	c.asUser(0, 0)

	// SYMLINK, READLINK.
	st, res = c.nfs(pSymlink, args(dir, "ln", noAttrs, "a/../target"))
	if st != sOK {
		t.Fatalf("symlink: %d", st)
	}
	res.Bool()
	ln := append([]byte(nil), res.Opaque(64)...)
	st, res = c.nfs(pReadlink, args(ln))
	readPostAttr(res)
	if target := res.String(4096); st != sOK || target != "a/../target" {
		t.Fatalf("readlink: %d %q", st, target)
	}
	if st, _ := c.nfs(pReadlink, args(f)); st != sInval {
		t.Fatalf("readlink of a file: %d", st)
	}

	// MKNOD: fifo, socket, device (root), and a regular type -> BADTYPE.
	st, res = c.nfs(pMknod, args(dir, "fifo", uint32(7), modeAttrs(0o600)))
	if st != sOK {
		t.Fatalf("mknod fifo: %d", st)
	}
	res.Bool()
	res.Opaque(64)
	if a, ok := readPostAttr(res); !ok || a.typ != 7 || a.mode != 0o600 {
		t.Fatalf("fifo attrs %+v", a)
	}
	if st, _ := c.nfs(pMknod, args(dir, "sock", uint32(6), noAttrs)); st != sOK {
		t.Fatalf("mknod socket: %d", st)
	}
	st, res = c.nfs(pMknod, args(dir, "tty", uint32(4), modeAttrs(0o620), uint32(4), uint32(300)))
	if st != sOK {
		t.Fatalf("mknod chr: %d", st)
	}
	res.Bool()
	res.Opaque(64)
	res.Bool()
	fa := readFattrRdev(res)
	if fa[0] != 4 || fa[1] != 300 {
		t.Fatalf("device numbers %v", fa)
	}
	if st, _ := c.nfs(pMknod, args(dir, "reg", uint32(1))); st != sBadType {
		t.Fatalf("mknod regular: %d", st)
	}

	// LINK, RENAME, REMOVE, RMDIR.
	st, res = c.nfs(pLink, args(f, dir, "hard"))
	if a, _ := readPostAttr(res); st != sOK || a.nlink != 2 {
		t.Fatalf("link: %d nlink %d", st, a.nlink)
	}
	st, res = c.nfs(pRename, args(dir, "hard", rootFH, "moved"))
	skipWcc(res)
	skipWcc(res)
	if st != sOK {
		t.Fatalf("rename: %d", st)
	}
	if st, h := c.lookup(rootFH, "moved"); st != sOK || !bytes.Equal(h, f) {
		t.Fatalf("lookup renamed: %d", st)
	}
	if st, _ := c.nfs(pRmdir, args(rootFH, "p")); st != sNotEmpty {
		t.Fatalf("rmdir non-empty: %d", st)
	}
	if st, _ := c.nfs(pRemove, args(rootFH, "p")); st != sIsDir {
		t.Fatalf("remove a directory: %d", st)
	}
	if st, _ := c.nfs(pRmdir, args(dir, "a")); st != sNotDir {
		t.Fatalf("rmdir a file: %d", st)
	}
	if st, _ := c.nfs(pRemove, args(rootFH, "moved")); st != sOK {
		t.Fatalf("remove: %d", st)
	}
	if _, a := c.getattr(f); a.nlink != 1 {
		t.Fatalf("nlink after removing a link: %d", a.nlink)
	}

	// READDIR / READDIRPLUS: paging with island cookies, verifier.
	for i := 0; i < 40; i++ {
		if st, _ := c.create(dir, fmt.Sprintf("entry-%02d", i), 0, 0); st != sOK {
			t.Fatal(st)
		}
	}
	for _, plus := range []bool{false, true} {
		seen := map[string]bool{}
		var cookie, verf uint64
		for pages := 0; ; pages++ {
			st, ents, v, eof := c.readdir(dir, cookie, verf, 1024, plus)
			if st != sOK {
				t.Fatalf("readdir plus=%v: %d", plus, st)
			}
			for _, e := range ents {
				if seen[e.name] {
					t.Fatalf("readdir repeated %q", e.name)
				}
				seen[e.name] = true
				if plus && !e.hasFH {
					t.Fatalf("readdirplus entry %q without a handle", e.name)
				}
				cookie = e.cookie
			}
			verf = v
			if eof {
				if pages == 0 {
					t.Fatalf("plus=%v: one page for %d entries of 1 KiB", plus, len(seen))
				}
				break
			}
		}
		// ".", "..", a, x, ln, fifo, sock, tty, 40 entries
		if len(seen) != 48 || !seen["."] || !seen[".."] || !seen["entry-39"] {
			t.Fatalf("readdir plus=%v saw %d entries", plus, len(seen))
		}
	}
	st, ents, verf, _ := c.readdir(dir, 0, 0, 1024, false)
	if st != sOK || len(ents) == 0 {
		t.Fatal(st)
	}
	if st, _, _, _ := c.readdir(dir, ents[len(ents)-1].cookie, verf, 1024, false); st != sOK {
		t.Fatalf("readdir with the current verifier: %d", st)
	}
	if st, _ := c.create(dir, "changes-mtime", 0, 0); st != sOK {
		t.Fatal(st)
	}
	if st, _, _, _ := c.readdir(dir, ents[len(ents)-1].cookie, verf, 1024, false); st != sBadCookie {
		t.Fatalf("readdir with a stale verifier: %d", st)
	}
	if st, _, _, _ := c.readdir(f, 0, 0, 1024, false); st != sNotDir {
		t.Fatalf("readdir of a file: %d", st)
	}

	// FSSTAT, FSINFO, PATHCONF.
	st, res = c.nfs(pFsstat, args(rootFH))
	readPostAttr(res)
	if tb, fb := res.Uint64(), res.Uint64(); st != sOK || tb == 0 || fb > tb {
		t.Fatalf("fsstat: %d %d %d", st, tb, fb)
	}
	st, res = c.nfs(pFsinfo, args(rootFH))
	readPostAttr(res)
	rtmax, rtpref, _, wtmax, wtpref, _, dtpref := res.Uint32(), res.Uint32(), res.Uint32(), res.Uint32(), res.Uint32(), res.Uint32(), res.Uint32()
	res.Uint64()
	res.Uint32()
	res.Uint32()
	props := res.Uint32()
	if st != sOK || rtmax != 1<<20 || rtpref != 1<<20 || wtmax != 1<<20 || wtpref != 1<<20 || dtpref < 8192 || props != 0x1b || res.Finish() != nil {
		t.Fatalf("fsinfo: %d %d %d %d %d %#x", st, rtmax, rtpref, wtmax, wtpref, props)
	}
	st, res = c.nfs(pPathconf, args(rootFH))
	readPostAttr(res)
	res.Uint32()
	if nameMax, noTrunc := res.Uint32(), res.Bool(); st != sOK || nameMax != 255 || !noTrunc {
		t.Fatalf("pathconf: %d name_max %d no_trunc %v", st, nameMax, noTrunc)
	}
}

// readFattrRdev reads a fattr3 and returns its device numbers.
func readFattrRdev(r *xdr.Reader) [2]uint32 {
	for i := 0; i < 5; i++ {
		r.Uint32()
	}
	r.Uint64()
	r.Uint64()
	return [2]uint32{r.Uint32(), r.Uint32()}
}

// TestNFSRPCErrors checks RPC-level rejections, malformed input,
// multi-fragment records and out-of-order replies on one connection.
func TestNFSRPCErrors(t *testing.T) {
	_, fs := nfsCluster(t)
	g := startGateway(t, fs, "", nil)
	c := dialRPC(t, g.addr)
	rootFH := c.mount("/")

	if rep := c.call(999999, 1, 0, nil); rep.denied || rep.stat != 1 {
		t.Fatalf("unknown program: %+v", rep)
	}
	if rep := c.call(progNFS, 2, 0, nil); rep.denied || rep.stat != 2 || rep.low != 3 || rep.high != 3 {
		t.Fatalf("NFS v2: %+v", rep)
	}
	if rep := c.call(progMount, 1, 0, nil); rep.denied || rep.stat != 2 || rep.low != 3 || rep.high != 3 {
		t.Fatalf("MOUNT v1: %+v", rep)
	}
	if rep := c.call(progNFS, 3, 22, nil); rep.denied || rep.stat != 3 {
		t.Fatalf("unknown procedure: %+v", rep)
	}
	// Truncated or trailing arguments -> GARBAGE_ARGS.
	for name, a := range map[string][]byte{
		"truncated getattr": {0, 0, 0, 20, 1, 2},
		"trailing bytes":    append(args(rootFH), 0, 0, 0, 0),
		"handle over 64":    args(bytes.Repeat([]byte{1}, 65)),
		"bad bool":          args(rootFH, modeAttrs(0o644)[0:0], uint32(7)),
		"bad padding":       append(args(uint32(1)), 'x', 1, 1, 1),
		"write over 1 MiB":  args(rootFH, uint64(0), uint32(1<<20+1000), uint32(0), make([]byte, 1<<20+1000)),
	} {
		proc := uint32(pGetattr)
		if name == "bad bool" {
			proc = pSetattr
		}
		if name == "write over 1 MiB" {
			proc = pWrite
		}
		if rep := c.call(progNFS, 3, proc, a); rep.denied || rep.stat != 4 {
			t.Fatalf("%s: %+v", name, rep)
		}
	}
	// RPC version 3 -> RPC_MISMATCH (2, 2).
	c.xid++
	msg := c.callMsg(c.xid, progNFS, 3, 0, nil)
	binary.BigEndian.PutUint32(msg[8:], 3)
	c.sendRecord(msg)
	_, b, err := c.readReply()
	if err != nil {
		t.Fatal(err)
	}
	if rep := parseReply(t, b); !rep.denied || rep.stat != 0 || rep.low != 2 || rep.high != 2 {
		t.Fatalf("rpc version 3: %+v", rep)
	}
	// Credentials: an unknown flavor, a malformed AUTH_SYS body.
	c.cred = args(uint32(6), []byte{1, 2, 3, 4})
	if rep := c.call(progNFS, 3, 0, nil); !rep.denied || rep.stat != 1 || rep.authStat != 2 {
		t.Fatalf("RPCSEC_GSS credential: %+v", rep)
	}
	c.cred = args(uint32(1), []byte{0, 0, 0, 1, 0, 0, 0, 200})
	if rep := c.call(progNFS, 3, 0, nil); !rep.denied || rep.stat != 1 || rep.authStat != 1 {
		t.Fatalf("malformed AUTH_SYS: %+v", rep)
	}
	c.asUser(0, 0)

	// A record in three fragments.
	c.xid++
	body := c.callMsg(c.xid, progNFS, 3, pGetattr, args(rootFH))
	var frags []byte
	for i, part := range [][]byte{body[:5], body[5:30], body[30:]} {
		mark := uint32(len(part))
		if i == 2 {
			mark |= 1 << 31
		}
		frags = binary.BigEndian.AppendUint32(frags, mark)
		frags = append(frags, part...)
	}
	if _, err := c.c.Write(frags); err != nil {
		t.Fatal(err)
	}
	xid, b, err := c.readReply()
	if err != nil || xid != c.xid {
		t.Fatalf("fragmented call: xid %x err %v", xid, err)
	}
	if rep := parseReply(t, b); rep.stat != 0 || rep.body.Uint32() != sOK {
		t.Fatalf("fragmented getattr: %+v", rep)
	}

	// Many calls in flight on one connection: every reply comes back,
	// matched by xid, whatever the order.
	st, dir := c.mkdir(rootFH, "inflight")
	if st != sOK {
		t.Fatal(st)
	}
	const n = 64
	var batch []byte
	for i := 0; i < n; i++ {
		m := c.callMsg(uint32(0x9000+i), progNFS, 3, pCreate, args(dir, fmt.Sprintf("f%d", i), uint32(0), modeAttrs(0o644)))
		batch = binary.BigEndian.AppendUint32(batch, 1<<31|uint32(len(m)))
		batch = append(batch, m...)
	}
	if _, err := c.c.Write(batch); err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]bool{}
	for i := 0; i < n; i++ {
		xid, b, err := c.readReply()
		if err != nil {
			t.Fatal(err)
		}
		if rep := parseReply(t, b); rep.stat != 0 || rep.body.Uint32() != sOK {
			t.Fatalf("pipelined create %x failed", xid)
		}
		seen[xid] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct replies for %d calls", len(seen), n)
	}

	// A broken record mark (a fragment over the limit) closes that
	// connection; the gateway keeps serving others.
	bad := dialRPC(t, g.addr)
	bad.c.Write([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	if _, _, err := bad.readReply(); err == nil {
		t.Fatal("connection with a broken record mark still open")
	}
	// Garbage records of every length answer or are dropped, never crash.
	junk := dialRPC(t, g.addr)
	r := newRand(11)
	for i := 0; i < 200; i++ {
		b := randBytes(r, r.IntN(120))
		if len(b) >= 8 {
			binary.BigEndian.PutUint32(b[4:], 0) // CALL, so most get an answer
		}
		junk.sendRecord(b)
	}
	c2 := dialRPC(t, g.addr)
	if st, _ := c2.getattr(rootFH); st != sOK {
		t.Fatalf("gateway after garbage: %d", st)
	}
}

// TestNFSMountAndExportOptions checks MOUNT and the export options.
func TestNFSMountAndExportOptions(t *testing.T) {
	fc, fs := nfsCluster(t)
	ctx := context.Background()
	if _, err := fs.MkdirAll(ctx, root, "/exp/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteFile(ctx, root, "/exp/file", []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, fs, "", nil)
	c := dialRPC(t, g.addr)
	mnt := func(path string) (uint32, []byte) {
		rep := c.call(progMount, 3, 1, args(path))
		st := rep.body.Uint32()
		if st != 0 {
			return st, nil
		}
		h := append([]byte(nil), rep.body.Opaque(64)...)
		if n := rep.body.Uint32(); n != 1 || rep.body.Uint32() != 1 {
			t.Fatalf("auth flavors: %d", n)
		}
		return st, h
	}
	if rep := c.call(progMount, 3, 0, nil); rep.stat != 0 {
		t.Fatalf("MOUNT NULL: %+v", rep)
	}
	st, sub := mnt("/exp/sub")
	if st != 0 {
		t.Fatalf("mount /exp/sub: %d", st)
	}
	if _, a := c.getattr(sub); a.typ != 2 {
		t.Fatalf("mounted handle is not the directory: %+v", a)
	}
	if st, _ := mnt("/exp/missing"); st != 2 {
		t.Fatalf("mount missing: %d", st)
	}
	if st, _ := mnt("/exp/file"); st != 20 {
		t.Fatalf("mount a file: %d", st)
	}
	rep := c.call(progMount, 3, 2, nil) // DUMP
	if !rep.body.Bool() || rep.body.String(255) != "127.0.0.1" || rep.body.String(1024) != "/exp/sub" || rep.body.Bool() {
		t.Fatal("dump after one mount")
	}
	c.call(progMount, 3, 3, args("/exp/sub")) // UMNT
	if rep := c.call(progMount, 3, 2, nil); rep.body.Bool() {
		t.Fatal("dump after umnt")
	}
	mnt("/")
	c.call(progMount, 3, 4, nil) // UMNTALL
	if rep := c.call(progMount, 3, 2, nil); rep.body.Bool() {
		t.Fatal("dump after umntall")
	}
	rep = c.call(progMount, 3, 5, nil) // EXPORT
	if !rep.body.Bool() || rep.body.String(1024) != "/" || rep.body.Bool() || rep.body.Bool() || rep.body.Finish() != nil {
		t.Fatal("export list")
	}

	// AUTH_NONE is nobody: may not create in a 0755 root-owned directory.
	expDir := c.mount("/exp")
	c.asNone()
	if st, _ := c.create(expDir, "anon", 0, 0); st != sAcces {
		t.Fatalf("create as AUTH_NONE: %d", st)
	}
	c.asUser(0, 0)

	// Root squash: root becomes 65534.
	sq := startGateway(t, fc.newFS(t), "", func(cfg *nfs.Config) { cfg.Export.RootSquash = true })
	cs := dialRPC(t, sq.addr)
	if st, _ := cs.create(cs.mount("/exp"), "squashed", 0, 0); st != sAcces {
		t.Fatalf("squashed root creating in a 0755 root directory: %d", st)
	}
	if err := fs.WriteFile(ctx, root, "/exp/sub/.keep", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.SetAttr(ctx, metawire.SetAttrReq{Cred: root, Ino: mustIno(t, fs, "/exp/sub"), Valid: metawire.SetMode, Mode: 0o777}); err != nil {
		t.Fatal(err)
	}
	st, h := cs.create(cs.mount("/exp/sub"), "squashed", 0, 0)
	if st != sOK {
		t.Fatalf("squashed create in a 0777 directory: %d", st)
	}
	if _, a := cs.getattr(h); a.uid != 65534 || a.gid != 65534 {
		t.Fatalf("squashed owner %d:%d", a.uid, a.gid)
	}

	// A confined export of /exp/sub: only it mounts, ".." of its root is
	// itself, and handles from anywhere else (the unconfined gateway's,
	// forged tags) are STALE.
	cf := startGateway(t, fc.newFS(t), "", func(cfg *nfs.Config) {
		cfg.Export.Path, cfg.Export.HandleKey = "/exp/sub", []byte("0123456789abcdef0123")
	})
	cc := dialRPC(t, cf.addr)
	for _, p := range []string{"/", "/exp", "/exp/sub/.keep", "/exp/sub/../"} {
		rep := cc.call(progMount, 3, 1, args(p))
		if rep.stat != 0 || rep.body.Uint32() != 13 {
			t.Fatalf("confined export mounted %s", p)
		}
	}
	subFH := cc.mount("/exp/sub")
	if st, up := cc.lookup(subFH, ".."); st != sOK || !bytes.Equal(up, subFH) {
		t.Fatalf("LOOKUP .. of a confined export's root: %d, %x (root %x)", st, up, subFH)
	}
	if st, kh := cc.lookup(subFH, ".keep"); st != sOK {
		t.Fatalf("lookup inside a confined export: %d", st)
	} else if st, _ := cc.getattr(kh); st != sOK {
		t.Fatalf("getattr inside a confined export: %d", st)
	}
	outside := dialRPC(t, ro0(t, fc)).mount("/exp")
	if st, _ := cc.getattr(outside); st != sStale {
		t.Fatalf("an unconfined gateway's handle of /exp on a confined export: %d, want STALE", st)
	}
	forged := append([]byte(nil), subFH...)
	forged[len(forged)-1] ^= 1
	if st, _ := cc.getattr(forged); st != sStale {
		t.Fatalf("a handle with a forged tag: %d, want STALE", st)
	}
	// A second gateway with the same key and path accepts the handles.
	cf2 := startGateway(t, fc.newFS(t), "", func(cfg *nfs.Config) {
		cfg.Export.Path, cfg.Export.HandleKey = "/exp/sub", []byte("0123456789abcdef0123")
	})
	if st, _ := dialRPC(t, cf2.addr).getattr(subFH); st != sOK {
		t.Fatalf("a confined export's handle at a second gateway: %d", st)
	}

	// Read-only export: every change is ROFS; reads work.
	ro := startGateway(t, fc.newFS(t), "", func(cfg *nfs.Config) { cfg.Export.ReadOnly = true })
	cr := dialRPC(t, ro.addr)
	rh := cr.mount("/exp")
	st, fh := cr.lookup(rh, "file")
	if st != sOK {
		t.Fatal(st)
	}
	if st, got, _ := cr.read(fh, 0, 100); st != sOK || string(got) != "hello" {
		t.Fatalf("read on a read-only export: %d %q", st, got)
	}
	if st, _, _ := cr.write(fh, 0, []byte("x"), 2); st != sROFS {
		t.Fatalf("write on a read-only export: %d", st)
	}
	if st, _ := cr.create(rh, "new", 0, 0); st != sROFS {
		t.Fatalf("create on a read-only export: %d", st)
	}
	if st, _ := cr.nfs(pRemove, args(rh, "file")); st != sROFS {
		t.Fatalf("remove on a read-only export: %d", st)
	}
	st, res := cr.nfs(pSetattr, args(fh, modeAttrs(0o600), false))
	if st != sROFS {
		t.Fatalf("setattr on a read-only export: %d", st)
	}
	skipWcc(res)
	st, res = cr.nfs(pAccess, args(fh, uint32(0x3f)))
	readPostAttr(res)
	if got := res.Uint32(); st != sOK || got != 0x01 {
		t.Fatalf("access on a read-only export: %#x", got)
	}

	// Export allow list without 127.0.0.1: MNT is refused, NFS calls get
	// AUTH_TOOWEAK, NULL still answers.
	deny := startGateway(t, fc.newFS(t), "", func(cfg *nfs.Config) {
		cfg.Export.Allow, _ = nfs.ParseAllow([]string{"10.1.0.0/16", "192.0.2.7"})
	})
	cd := dialRPC(t, deny.addr)
	if rep := cd.call(progMount, 3, 1, args("/")); rep.stat != 0 || rep.body.Uint32() != 13 {
		t.Fatal("mount from a client not allowed")
	}
	if rep := cd.call(progNFS, 3, pGetattr, args(rh)); !rep.denied || rep.stat != 1 || rep.authStat != 5 {
		t.Fatalf("getattr from a client not allowed: %+v", rep)
	}
	if rep := cd.call(progNFS, 3, 0, nil); rep.denied || rep.stat != 0 {
		t.Fatalf("NULL from a client not allowed: %+v", rep)
	}
	// DUMP, UMNT, UMNTALL and EXPORT would tell a stranger who mounts what.
	for _, proc := range []uint32{2, 3, 4, 5} {
		if rep := cd.call(progMount, 3, proc, args("/")); !rep.denied || rep.authStat != 5 {
			t.Fatalf("MOUNT procedure %d from a client not allowed: %+v", proc, rep)
		}
	}
	allow := startGateway(t, fc.newFS(t), "", func(cfg *nfs.Config) {
		cfg.Export.Allow, _ = nfs.ParseAllow([]string{"127.0.0.0/8"})
	})
	if st, _ := dialRPC(t, allow.addr).getattr(rh); st != sOK {
		t.Fatalf("getattr from an allowed client: %d", st)
	}

	// Secure ports: from a port of 1024 or above only NULL answers; from
	// one below (root binds it) everything does.
	sec := startGateway(t, fc.newFS(t), "", func(cfg *nfs.Config) { cfg.Export.SecurePort = true })
	cu := dialRPC(t, sec.addr)
	if rep := cu.call(progNFS, 3, pGetattr, args(rh)); !rep.denied || rep.authStat != 5 {
		t.Fatalf("getattr from an unprivileged port of a secure export: %+v", rep)
	}
	if rep := cu.call(progMount, 3, 1, args("/")); !rep.denied || rep.authStat != 5 {
		t.Fatalf("MNT from an unprivileged port of a secure export: %+v", rep)
	}
	if rep := cu.call(progNFS, 3, 0, nil); rep.denied || rep.stat != 0 {
		t.Fatalf("NULL from an unprivileged port of a secure export: %+v", rep)
	}
	cp := dialRPCFromPrivilegedPort(t, sec.addr)
	if st, _ := cp.getattr(cp.mount("/")); st != sOK {
		t.Fatalf("getattr from a privileged port of a secure export: %d", st)
	}
}

// dialRPCFromPrivilegedPort is dialRPC from a source port below 1024
// (needs root: it fails the test otherwise).
func dialRPCFromPrivilegedPort(t *testing.T, addr string) *rpcConn {
	t.Helper()
	var last error
	for port := 1023; port >= 600; port-- {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			last = err
			continue
		}
		t.Cleanup(func() { c.Close() })
		r := &rpcConn{t: t, c: c, br: bufio.NewReader(c), xid: 0x1000}
		r.asUser(0, 0)
		return r
	}
	t.Fatalf("no privileged source port could be bound (root needed): %v", last)
	return nil
}

// ro0 starts a plain (unconfined) gateway and returns its address.
func ro0(t *testing.T, fc *fsCluster) string {
	return startGateway(t, fc.newFS(t), "", nil).addr
}

func mustIno(t *testing.T, fs *client.FS, path string) uint64 {
	t.Helper()
	a, err := fs.Resolve(context.Background(), root, path)
	if err != nil {
		t.Fatal(err)
	}
	return a.Ino
}

// TestNFSGatewaysAndRestart: handles survive a gateway restart; a write
// committed through one gateway is read through another; a removed file
// is STALE everywhere; buffered writes are flushed when idle and at
// shutdown.
func TestNFSGatewaysAndRestart(t *testing.T) {
	fc, fsA := nfsCluster(t)
	ctx := context.Background()
	a := startGateway(t, fsA, "", nil)
	b := startGateway(t, fc.newFS(t), "", nil)
	ca, cb := dialRPC(t, a.addr), dialRPC(t, b.addr)
	rootA, rootB := ca.mount("/"), cb.mount("/")
	if !bytes.Equal(rootA, rootB) {
		t.Fatal("two gateways give different root handles")
	}
	st, f := ca.create(rootA, "shared", 0, 0)
	if st != sOK {
		t.Fatal(st)
	}
	// B opens (caches) the file before A writes it.
	if st, got, _ := cb.read(f, 0, 10); st != sOK || len(got) != 0 {
		t.Fatalf("read through B: %d %d", st, len(got))
	}
	data := randBytes(newRand(5), 3<<20+99)
	var verf uint64
	for off := 0; off < len(data); off += 1 << 20 {
		st, _, v := ca.write(f, uint64(off), data[off:min(off+1<<20, len(data))], 0)
		if st != sOK {
			t.Fatal(st)
		}
		verf = v
	}
	if st, v := ca.commit(f); st != sOK || v != verf {
		t.Fatalf("commit through A: %d", st)
	}
	// A client revalidates (GETATTR) before reading: B then serves the
	// new data.
	if st, at := cb.getattr(f); st != sOK || at.size != uint64(len(data)) {
		t.Fatalf("getattr through B: %d size %d", st, at.size)
	}
	var got []byte
	for off := 0; off < len(data); off += 1 << 20 {
		st, part, _ := cb.read(f, uint64(off), 1<<20)
		if st != sOK {
			t.Fatal(st)
		}
		got = append(got, part...)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read through B: %d bytes, equal %v", len(got), bytes.Equal(got, data))
	}

	// Restart A on the same port with a new client: old handles work, the
	// write verifier changes.
	port := a.port()
	a.stop()
	a2 := startGateway(t, fc.newFS(t), fmt.Sprintf("127.0.0.1:%d", port), nil)
	ca2 := dialRPC(t, a2.addr)
	if st, at := ca2.getattr(f); st != sOK || at.size != uint64(len(data)) {
		t.Fatalf("old handle after restart: %d", st)
	}
	st, _, v2 := ca2.write(f, 0, []byte("new"), 0)
	if st != sOK || v2 == verf {
		t.Fatalf("write after restart: %d, verifier %x (was %x)", st, v2, verf)
	}
	// Unstable writes are flushed when the file goes idle ...
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := fc.newFS(t).ReadFile(ctx, root, "/shared")
		if err == nil && string(d[:3]) == "new" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("unstable write never flushed by the idle flusher")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// ... and at shutdown.
	a3 := startGateway(t, fc.newFS(t), "", func(cfg *nfs.Config) { cfg.FlushIdle = time.Hour })
	c3 := dialRPC(t, a3.addr)
	if st, _, _ := c3.write(f, 10, []byte("at-shutdown"), 0); st != sOK {
		t.Fatal(st)
	}
	a3.stop()
	if d, err := fc.newFS(t).ReadFile(ctx, root, "/shared"); err != nil || string(d[10:21]) != "at-shutdown" {
		t.Fatalf("buffered write lost at shutdown: %v", err)
	}

	// Removed through B: STALE through A.
	if st, _ := cb.nfs(pRemove, args(rootB, "shared")); st != sOK {
		t.Fatal(st)
	}
	if st, _ := ca2.getattr(f); st != sStale {
		t.Fatalf("getattr of a removed file: %d", st)
	}
	// Once the gateway's revalidation interval has passed, a READ
	// revalidates the open file it caches: that must end in STALE, not
	// loop. (Until then it may still be served from the cache.)
	waitEvent(t, "READ of a removed file revalidates to STALE", func() error {
		switch st, _, _ := ca2.read(f, 0, 1); st {
		case sStale:
			return nil
		case sOK:
			return errors.New("still served from the cache")
		default:
			t.Fatalf("read of a removed file: %d", st)
			return nil
		}
	})
	if st, _, _ := ca2.write(f, 0, []byte("x"), 2); st != sStale {
		t.Fatalf("write to a removed file: %d", st)
	}
}

// libnfsTools returns the libnfs-utils binaries, or skips the test with
// the reason (fails it under CI; see testenv.Missing).
func libnfsTools(t *testing.T) (cp, ls, cat string) {
	t.Helper()
	var missing []string
	find := func(name string) string {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name)
		}
		return p
	}
	cp, ls, cat = find("nfs-cp"), find("nfs-ls"), find("nfs-cat")
	if len(missing) > 0 {
		testenv.Missing(t, "libnfs-utils not installed (%v missing): apt-get install libnfs-utils, or make setup (.ci/setup.sh)", missing)
	}
	return cp, ls, cat
}

func runTool(t *testing.T, name string, arg ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, arg...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\nstdout: %s\nstderr: %s", filepath.Base(name), arg, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
}

// nfsURL is a libnfs URL that names the ports (no portmapper needed).
// libnfs mounts the URL's directory part as the export, which must not be
// empty: a file in the root is nfs://host//file.
func nfsURL(port int, path string) string {
	return fmt.Sprintf("nfs://127.0.0.1%s?nfsport=%d&mountport=%d", path, port, port)
}

// TestNFSLibnfs copies files in and out with libnfs's nfs-cp and checks
// nfs-ls and nfs-cat, through the gateway's port and its portmapper.
func TestNFSLibnfs(t *testing.T) {
	cp, ls, cat := libnfsTools(t)
	fc, fs := nfsCluster(t)
	ctx := context.Background()
	if _, err := fs.MkdirAll(ctx, root, "/lib/dir", 0o777); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, fs, "", nil)
	tmp := t.TempDir()
	r := newRand(9)
	files := map[string][]byte{
		"empty": {},
		"small": []byte("hello from libnfs\n"),
		"mid":   randBytes(r, 100000),
		"big":   randBytes(r, 64<<20),
	}
	for name, data := range files {
		local := filepath.Join(tmp, name)
		if err := os.WriteFile(local, data, 0o644); err != nil {
			t.Fatal(err)
		}
		runTool(t, cp, local, nfsURL(g.port(), "/lib/dir/"+name))
		back := filepath.Join(tmp, name+".back")
		runTool(t, cp, nfsURL(g.port(), "/lib/dir/"+name), back)
		got, err := os.ReadFile(back)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: nfs-cp round trip: %d bytes back of %d, err %v", name, len(got), len(data), err)
		}
		direct, err := fc.newFS(t).ReadFile(ctx, root, "/lib/dir/"+name)
		if err != nil || !bytes.Equal(direct, data) {
			t.Fatalf("%s via client.FS: %d bytes, err %v", name, len(direct), err)
		}
	}
	if got := runTool(t, cat, nfsURL(g.port(), "/lib/dir/small")); !bytes.Equal(got, files["small"]) {
		t.Fatalf("nfs-cat: %q", got)
	}
	out := string(runTool(t, ls, nfsURL(g.port(), "/lib/dir")))
	for name := range files {
		if !strings.Contains(out, name) {
			t.Fatalf("nfs-ls lacks %q:\n%s", name, out)
		}
	}
	if !strings.Contains(out, "67108864") {
		t.Fatalf("nfs-ls does not show the big file's size:\n%s", out)
	}

	// Through the portmapper on 127.0.0.1:111, when that port is free
	// (skipped visibly otherwise; failed under CI).
	t.Run("portmapper", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:111")
		if err != nil {
			testenv.Missing(t, "portmapper check impossible: 127.0.0.1:111 unavailable: %v", err)
		}
		ln.Close()
		startGateway(t, fc.newFS(t), "", func(cfg *nfs.Config) { cfg.PortmapListen = "127.0.0.1:111" })
		if got := runTool(t, cat, "nfs://127.0.0.1/lib/dir/small"); !bytes.Equal(got, files["small"]) {
			t.Fatalf("nfs-cat through the portmapper: %q", got)
		}
		if out := string(runTool(t, ls, "nfs://127.0.0.1/lib")); !strings.Contains(out, "dir") {
			t.Fatalf("nfs-ls through the portmapper:\n%s", out)
		}
		// The portmapper's port serves the portmapper only.
		pm := dialRPC(t, "127.0.0.1:111")
		for _, prog := range []uint32{progNFS, progMount} {
			if rep := pm.call(prog, 3, 0, nil); rep.denied || rep.stat != 1 {
				t.Fatalf("program %d answered on the portmapper's port: %+v", prog, rep)
			}
		}
		// go-nfs-client finds MOUNT and NFS through the portmapper too (in
		// DialMount and again inside Mount).
		var m *nfsc.Mount
		retryAddrInUse(t, func() (err error) {
			m, err = nfsc.DialMount("127.0.0.1", time.Second)
			return err
		})
		defer m.Close()
		var v *nfsc.Target
		retryAddrInUse(t, func() (err error) {
			v, err = m.Mount("/lib/dir", nfsrpc.NewAuthUnix("atoll-test", 0, 0).Auth())
			return err
		})
		defer v.Close()
		if fi, _, err := v.Lookup("small"); err != nil || fi.Size() != int64(len(files["small"])) {
			t.Fatalf("lookup through go-nfs-client via the portmapper: %v", err)
		}
	})
}

// TestNFSConcurrentWriters: several connections write one shared file
// (disjoint ranges, unstable) and their own files at once, with reads and
// commits in between; everything reads back.
func TestNFSConcurrentWriters(t *testing.T) {
	fc, fs := nfsCluster(t)
	g := startGateway(t, fs, "", func(cfg *nfs.Config) { cfg.FlushIdle = 50 * time.Millisecond })
	c0 := dialRPC(t, g.addr)
	rootFH := c0.mount("/")
	st, shared := c0.create(rootFH, "shared", 0, 0)
	if st != sOK {
		t.Fatal(st)
	}
	const workers, chunk, chunks = 4, 100000, 6
	want := make([]byte, workers*chunk*chunks)
	r := newRand(17)
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	own := make([][]byte, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		own[w] = randBytes(newRand(uint64(100+w)), 300000+w)
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := dialRPC(t, g.addr)
			st, fh := c.create(rootFH, fmt.Sprintf("own%d", w), 0, 0)
			if st != sOK {
				errs <- fmt.Errorf("create: %d", st)
				return
			}
			for k := 0; k < chunks; k++ {
				off := (k*workers + w) * chunk
				if st, _, _ := c.write(shared, uint64(off), want[off:off+chunk], uint32(k%3)); st != sOK {
					errs <- fmt.Errorf("shared write: %d", st)
					return
				}
				part := own[w][k*50000 : min((k+1)*50000, len(own[w]))]
				if st, _, _ := c.write(fh, uint64(k*50000), part, 0); st != sOK {
					errs <- fmt.Errorf("own write: %d", st)
					return
				}
				if st, got, _ := c.read(fh, 0, uint32((k+1)*50000)); st != sOK || !bytes.Equal(got, own[w][:min((k+1)*50000, len(own[w]))]) {
					errs <- fmt.Errorf("read own file back: %d", st)
					return
				}
				if k == chunks/2 {
					if st, _ := c.commit(shared); st != sOK {
						errs <- fmt.Errorf("commit: %d", st)
						return
					}
				}
			}
			part := own[w][chunks*50000:]
			if st, _, _ := c.write(fh, uint64(chunks*50000), part, 0); st != sOK {
				errs <- fmt.Errorf("own tail write: %d", st)
				return
			}
			if st, _ := c.commit(fh); st != sOK {
				errs <- fmt.Errorf("commit own: %d", st)
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st, _ := c0.commit(shared); st != sOK {
		t.Fatal(st)
	}
	ctx := context.Background()
	other := fc.newFS(t)
	if got, err := other.ReadFile(ctx, root, "/shared"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("shared file: %d bytes, err %v, equal %v", len(got), err, bytes.Equal(got, want))
	}
	for w := range own {
		if got, err := other.ReadFile(ctx, root, fmt.Sprintf("/own%d", w)); err != nil || !bytes.Equal(got, own[w]) {
			t.Fatalf("own%d: %d bytes, err %v", w, len(got), err)
		}
	}
}

// freeBase returns a port p such that p..p+n-1 are free on 127.0.0.1.
func freeBase(t testing.TB, n int) int {
	t.Helper()
	r := newRand(uint64(time.Now().UnixNano()))
	for try := 0; try < 200; try++ {
		base := 20000 + r.IntN(12000) // below the ephemeral range
		ok := true
		for i := 0; i < n && ok; i++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				ok = false
				continue
			}
			ln.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

// devGateway starts an `atoll dev`-style cluster (child processes) and
// `atoll nfs` in front of it; it returns the gateway's port.
func devGateway(t *testing.T, storage, islands int) int {
	t.Helper()
	exe := atoll(t)
	dir := t.TempDir()
	cl, base := startDev(t, storage, islands, 1, nil) // one more port: nfs
	ctx := context.Background()
	nfsPort := base + 2 + storage + islands
	gw, err := devcluster.Start(ctx, devcluster.ChildSpec{
		Name: "nfs", Exe: exe,
		// The tests copy in as root (the gateway squashes root by
		// default; TestNFSMountAndExportOptions checks squashing).
		Args:     []string{"nfs", "--cluster", cl.Manager, "--listen", fmt.Sprintf("127.0.0.1:%d", nfsPort), "--root-squash=false", "--log-level", "warn"},
		AddrFile: filepath.Join(dir, "nfs.addr"),
		Output:   os.Stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := gw.Stop(30 * time.Second); err != nil {
			t.Errorf("atoll nfs: %v", err)
		}
	})
	return nfsPort
}

// TestNFSCommand runs `atoll nfs` against a child-process cluster and
// copies a file in and out with nfs-cp.
func TestNFSCommand(t *testing.T) {
	cp, ls, _ := libnfsTools(t)
	port := devGateway(t, 3, 2)
	tmp := t.TempDir()
	data := randBytes(newRand(13), 5<<20+17)
	src := filepath.Join(tmp, "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	runTool(t, cp, src, nfsURL(port, "//copied"))
	runTool(t, cp, nfsURL(port, "//copied"), filepath.Join(tmp, "back"))
	if got, err := os.ReadFile(filepath.Join(tmp, "back")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("round trip through atoll nfs: %d bytes, %v", len(got), err)
	}
	if out := string(runTool(t, ls, nfsURL(port, "/"))); !strings.Contains(out, "copied") {
		t.Fatalf("nfs-ls:\n%s", out)
	}
}

// TestNFSBenchCp is the benchmark figure of the NFS gateway (make
// bench-nfs; skipped unless ATOLL_NFS_BENCH=1): nfs-cp of
// NFS_BENCH_SIZE (default 1 GiB) into and out of `atoll nfs` in front of
// 5 storage servers and 3 islands.
func TestNFSBenchCp(t *testing.T) {
	if os.Getenv("ATOLL_NFS_BENCH") == "" {
		t.Skip("benchmark: set ATOLL_NFS_BENCH=1 (make bench-nfs)")
	}
	cp, _, _ := libnfsTools(t)
	size := int64(1 << 30)
	if s := os.Getenv("NFS_BENCH_SIZE"); s != "" {
		n, err := layout.ParseSize(s)
		if err != nil {
			t.Fatal(err)
		}
		size = int64(n)
	}
	port := devGateway(t, 5, 3)
	tmp := t.TempDir()
	src, back := filepath.Join(tmp, "src"), filepath.Join(tmp, "back")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	r := newRand(21)
	buf := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(buf)) {
		for i := 0; i < len(buf); i += 8 {
			binary.LittleEndian.PutUint64(buf[i:], r.Uint64())
		}
		if _, err := f.Write(buf[:min(int64(len(buf)), left)]); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	mb := float64(size) / 1e6
	start := time.Now()
	runTool(t, cp, src, nfsURL(port, "//bench.bin"))
	in := time.Since(start)
	start = time.Now()
	runTool(t, cp, nfsURL(port, "//bench.bin"), back)
	out := time.Since(start)
	if err := sameFile(src, back); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("nfs-cp %d MiB through atoll nfs (5 storage, 3 islands): in %.1f MB/s (%.1fs), out %.1f MB/s (%.1fs)\n",
		size>>20, mb/in.Seconds(), in.Seconds(), mb/out.Seconds(), out.Seconds())
}

func sameFile(a, b string) error {
	fa, err := os.Open(a)
	if err != nil {
		return err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return err
	}
	defer fb.Close()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); ; off += int64(len(ba)) {
		na, ea := io.ReadFull(fa, ba)
		nb, _ := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return fmt.Errorf("copies differ in the MiB at %d (%d vs %d bytes)", off, na, nb)
		}
		if ea != nil {
			return nil
		}
	}
}

// TestNFSGatewayLeases: a gateway whose client holds leases answers an NFS
// client's repeated lookups and getattrs without asking the island, and
// still shows every change another client makes as soon as it returns.
func TestNFSGatewayLeases(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	g := startGateway(t, fc.newLeasedFS(t), "", nil)
	b := fc.newFS(t)
	ctx := context.Background()
	d, err := b.MkdirAll(ctx, root, "/leased", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	x, err := b.Create(ctx, metawire.CreateReq{Dir: d.Ino, Name: "x", Mode: 0o644})
	if err != nil {
		t.Fatal(err)
	}
	v := goNFSTarget(t, g.addr, "/")
	mode := func(path string) (os.FileMode, error) {
		fi, err := v.Getattr(path)
		if err != nil {
			return 0, err
		}
		return fi.Mode().Perm(), nil
	}
	if m, err := mode("/leased/x"); err != nil || m != 0o644 {
		t.Fatalf("getattr: %v %v", m, err)
	}
	since := fc.islandOpsSince(t, "lease", "lookup", "getattr")
	for range 10 {
		if m, err := mode("/leased/x"); err != nil || m != 0o644 {
			t.Fatalf("getattr: %v %v", m, err)
		}
	}
	if got := since(); got["lease"]+got["lookup"]+got["getattr"] != 0 {
		t.Fatalf("10 NFS getattrs of a leased file cost island requests: %v", got)
	}
	// Another client's changes: seen at once.
	if _, err := b.SetAttr(ctx, metawire.SetAttrReq{Cred: root, Ino: x.Attr.Ino, Valid: metawire.SetMode, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	if m, err := mode("/leased/x"); err != nil || m != 0o600 {
		t.Fatalf("after another client's chmod: %v %v", m, err)
	}
	if _, err := b.Create(ctx, metawire.CreateReq{Dir: d.Ino, Name: "y", Mode: 0o640}); err != nil {
		t.Fatal(err)
	}
	if m, err := mode("/leased/y"); err != nil || m != 0o640 {
		t.Fatalf("a file another client created: %v %v", m, err)
	}
	if err := b.Unlink(ctx, root, d.Ino, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Getattr("/leased/x"); err == nil {
		t.Fatal("a file another client removed is still there")
	}
}
