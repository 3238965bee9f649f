package test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/nfs"
	"github.com/atoll-fs/atoll/internal/nfs/xdr"
)

// NLM v4 through the NFS gateway, beside a FUSE mount of the same
// cluster: an NFS client's locks (this test speaks NLM itself: no kernel
// NFS client runs here) and the mount's conflict both ways, through the
// islands' lock table.

const (
	progNLM       = 100021
	progNSM       = 100024
	nlmTest       = 1
	nlmLock       = 2
	nlmUnlock     = 4
	nlmFreeAll    = 23
	nsmNotify     = 6
	nlm4Granted   = 0
	nlm4Denied    = 1
	nlm4Grace     = 4
	nlm4Deadlock  = 5
	nlmTestSvid   = 4242
	nlmTestCaller = "nfsclient1"
)

// nlmLockArgs encodes nlm4_lock.
func nlmLockArgs(w *xdr.Writer, caller string, fh []byte, svid int32, off, n uint64) {
	w.String(caller)
	w.Opaque(fh)
	w.Opaque([]byte("owner-" + caller))
	w.Int32(svid)
	w.Uint64(off)
	w.Uint64(n)
}

// nlmCall sends an NLM4 call and returns the reply's nlm4_stat (after
// the cookie) and the reader positioned after it.
func nlmCall(t *testing.T, c *rpcConn, proc uint32, args []byte) (uint32, *xdr.Reader) {
	t.Helper()
	rep := c.call(progNLM, 4, proc, args)
	if rep.denied || rep.stat != 0 {
		t.Fatalf("NLM proc %d: denied %v stat %d auth %d", proc, rep.denied, rep.stat, rep.authStat)
	}
	if string(rep.body.Opaque(1024)) != "ck" {
		t.Fatalf("NLM proc %d: cookie not echoed", proc)
	}
	return rep.body.Uint32(), rep.body
}

func nlmLockCall(t *testing.T, c *rpcConn, fh []byte, caller string, block, excl, reclaim bool, off, n uint64) uint32 {
	t.Helper()
	var w xdr.Writer
	w.Opaque([]byte("ck"))
	w.Bool(block)
	w.Bool(excl)
	nlmLockArgs(&w, caller, fh, nlmTestSvid, off, n)
	w.Bool(reclaim)
	w.Int32(1)
	st, _ := nlmCall(t, c, nlmLock, w.B)
	return st
}

func nlmUnlockCall(t *testing.T, c *rpcConn, fh []byte, caller string, off, n uint64) uint32 {
	t.Helper()
	var w xdr.Writer
	w.Opaque([]byte("ck"))
	nlmLockArgs(&w, caller, fh, nlmTestSvid, off, n)
	st, _ := nlmCall(t, c, nlmUnlock, w.B)
	return st
}

// TestNLMLocksConflictWithTheMount: TEST names the mount's holder; LOCK
// is denied while the mount holds the range and a blocking LOCK is
// granted when the mount unlocks; the mount is refused (and F_GETLK
// names the NFS client's svid) while NLM holds it; UNLOCK and an NSM
// NOTIFY of the client host's restart let the mount in again.
func TestNLMLocksConflictWithTheMount(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 1)
	_, mnt := mountFS(t, fc.newFS(t))
	g := startGateway(t, fc.newFS(t), "", func(c *nfs.Config) { c.NLMGrace = -1 })
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := dialRPC(t, g.addr)
	root := c.mount("/")
	st, fh := c.lookup(root, "f")
	if st != 0 {
		t.Fatalf("lookup: %d", st)
	}
	ff := openRW(t, filepath.Join(mnt, "f"))
	if _, err := posixLock(ff, unix.F_SETLK, unix.F_WRLCK, 0, 100); err != nil {
		t.Fatal(err)
	}

	// TEST names the holder.
	var w xdr.Writer
	w.Opaque([]byte("ck"))
	w.Bool(false) // shared is enough to conflict with a write lock
	nlmLockArgs(&w, nlmTestCaller, fh, nlmTestSvid, 10, 1)
	st, r := nlmCall(t, c, nlmTest, w.B)
	if st != nlm4Denied {
		t.Fatalf("TEST against the mount's lock: %d, want DENIED", st)
	}
	excl, svid := r.Bool(), r.Int32()
	r.Opaque(1024)
	off, n := r.Uint64(), r.Uint64()
	if !excl || svid != int32(os.Getpid()) || off != 0 || n != 100 {
		t.Fatalf("TEST holder: exclusive %v svid %d range %d+%d, want the mount's write lock 0+100 of pid %d", excl, svid, off, n, os.Getpid())
	}
	if st := nlmLockCall(t, c, fh, nlmTestCaller, false, true, false, 50, 10); st != nlm4Denied {
		t.Fatalf("LOCK against the mount's lock: %d, want DENIED", st)
	}

	// A blocking LOCK is granted once the mount unlocks.
	c2 := dialRPC(t, g.addr)
	got := make(chan uint32, 1)
	go func() { got <- nlmLockCall(t, c2, fh, nlmTestCaller, true, true, false, 50, 10) }()
	time.Sleep(500 * time.Millisecond)
	select {
	case st := <-got:
		t.Fatalf("blocking LOCK answered %d while the mount held the range", st)
	default:
	}
	if _, err := posixLock(ff, unix.F_SETLK, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-got:
		if st != nlm4Granted {
			t.Fatalf("blocking LOCK after the mount's unlock: %d", st)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("blocking LOCK not answered 20 s after the mount's unlock")
	}
	_, err := posixLock(ff, unix.F_SETLK, unix.F_WRLCK, 55, 1)
	wantErrno(t, "the mount against the NFS client's lock", err, syscall.EAGAIN)
	lk, err := posixLock(ff, unix.F_GETLK, unix.F_WRLCK, 0, 0)
	// (The kernel shows a holder's pid only if that pid exists here:
	// the NFS client's svid does not, so l_pid is 0.)
	if err != nil || lk.Type != unix.F_WRLCK || lk.Start != 50 || lk.Len != 10 || lk.Pid != 0 && lk.Pid != nlmTestSvid {
		t.Fatalf("F_GETLK on the mount: %+v, %v; want the NFS client's 50+10", lk, err)
	}
	if st := nlmUnlockCall(t, c, fh, nlmTestCaller, 50, 10); st != nlm4Granted {
		t.Fatalf("UNLOCK: %d", st)
	}
	if _, err := posixLock(ff, unix.F_SETLK, unix.F_WRLCK, 55, 1); err != nil {
		t.Fatalf("the mount after the NFS client's UNLOCK: %v", err)
	}
	if _, err := posixLock(ff, unix.F_SETLK, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}

	// The client host restarts: its status monitor's NOTIFY frees its
	// locks.
	if st := nlmLockCall(t, c, fh, nlmTestCaller, false, true, false, 0, 0); st != nlm4Granted {
		t.Fatalf("LOCK: %d", st)
	}
	_, err = posixLock(ff, unix.F_SETLK, unix.F_RDLCK, 7, 1)
	wantErrno(t, "the mount against the NFS client's whole-file lock", err, syscall.EAGAIN)
	var nw xdr.Writer
	nw.String(nlmTestCaller)
	nw.Int32(3)
	if rep := c.call(progNSM, 1, nsmNotify, nw.B); rep.denied || rep.stat != 0 {
		t.Fatalf("NSM NOTIFY: %+v", rep)
	}
	if _, err := posixLock(ff, unix.F_SETLK, unix.F_RDLCK, 7, 1); err != nil {
		t.Fatalf("the mount after the NFS client host's NOTIFY: %v", err)
	}
}

// TestNLMGraceAndStrangers: a gateway in its grace period refuses new
// locks and serves reclaims; NLM calls from a host outside the export's
// allow list are refused like NFS calls.
func TestNLMGraceAndStrangers(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	fs := fc.newFS(t)
	if err := fs.WriteFile(t.Context(), root, "/f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, fs, "", func(c *nfs.Config) { c.NLMGrace = time.Hour })
	c := dialRPC(t, g.addr)
	st, fh := c.lookup(c.mount("/"), "f")
	if st != 0 {
		t.Fatal(st)
	}
	if st := nlmLockCall(t, c, fh, nlmTestCaller, false, true, false, 0, 0); st != nlm4Grace {
		t.Fatalf("a new LOCK in the grace period: %d, want DENIED_GRACE_PERIOD", st)
	}
	if st := nlmLockCall(t, c, fh, nlmTestCaller, false, true, true, 0, 0); st != nlm4Granted {
		t.Fatalf("a reclaim in the grace period: %d, want GRANTED", st)
	}

	strict := startGateway(t, fc.newFS(t), "", func(c *nfs.Config) {
		c.NLMGrace = -1
		c.Export.Allow, _ = nfs.ParseAllow([]string{"192.0.2.7"})
	})
	s := dialRPC(t, strict.addr)
	var w xdr.Writer
	w.Opaque([]byte("ck"))
	w.Bool(true)
	w.Bool(true)
	nlmLockArgs(&w, "stranger", fh, 1, 0, 0)
	w.Bool(false)
	w.Int32(1)
	if rep := s.call(progNLM, 4, nlmLock, w.B); !rep.denied || rep.authStat != 5 {
		t.Fatalf("NLM LOCK from a host outside the allow list: %+v, want AUTH_TOOWEAK", rep)
	}
	if rep := s.call(progNSM, 1, nsmNotify, []byte{0, 0, 0, 1, 'x', 0, 0, 0, 0, 0, 0, 1}); !rep.denied {
		t.Fatalf("NSM NOTIFY from a host outside the allow list: %+v, want refused", rep)
	}
}

// TestNLMLocksSurviveGatewayRestart: a gateway stopped and started again
// on its address holds its clients' locks under the same session: the
// lock still conflicts with the mount, the client's UNLOCK through the
// new run releases it, and a client host's NOTIFY to the new run frees
// what the old run granted that host.
func TestNLMLocksSurviveGatewayRestart(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 1)
	_, mnt := mountFS(t, fc.newFS(t))
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, fc.newFS(t), "", func(c *nfs.Config) { c.NLMGrace = -1 })
	addr := g.addr
	c := dialRPC(t, addr)
	st, fh := c.lookup(c.mount("/"), "f")
	if st != 0 {
		t.Fatal(st)
	}
	if st := nlmLockCall(t, c, fh, "hostA", false, true, false, 0, 10); st != nlm4Granted {
		t.Fatalf("LOCK: %d", st)
	}
	if st := nlmLockCall(t, c, fh, "hostB", false, true, false, 20, 10); st != nlm4Granted {
		t.Fatalf("LOCK: %d", st)
	}
	g.stop()
	ff := openRW(t, filepath.Join(mnt, "f"))
	for _, off := range []int64{5, 25} {
		_, err := posixLock(ff, unix.F_SETLK, unix.F_WRLCK, off, 1)
		wantErrno(t, "the mount while the stopped gateway's client holds the range", err, syscall.EAGAIN)
	}
	g2 := startGateway(t, fc.newFS(t), addr, func(c *nfs.Config) { c.NLMGrace = -1 })
	c2 := dialRPC(t, g2.addr)
	if st := nlmUnlockCall(t, c2, fh, "hostA", 0, 10); st != nlm4Granted {
		t.Fatalf("UNLOCK through the restarted gateway: %d", st)
	}
	if _, err := posixLock(ff, unix.F_SETLK, unix.F_WRLCK, 5, 1); err != nil {
		t.Fatalf("the mount after the client's UNLOCK through the restarted gateway: %v", err)
	}
	var nw xdr.Writer
	nw.String("hostB")
	nw.Int32(5)
	if rep := c2.call(progNSM, 1, nsmNotify, nw.B); rep.denied || rep.stat != 0 {
		t.Fatalf("NSM NOTIFY: %+v", rep)
	}
	if _, err := posixLock(ff, unix.F_SETLK, unix.F_WRLCK, 25, 1); err != nil {
		t.Fatalf("the mount after hostB's NOTIFY to the restarted gateway: %v", err)
	}
}

// UNLOCK writes back what the gateway buffered of the file and lets the
// file go: a SETATTR after it (which needs the gateway's open file to
// itself) is answered. It hung for good when UNLOCK kept the open file
// read-locked.
func TestNLMUnlockLetsTheFileGo(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	g := startGateway(t, fc.newFS(t), "", func(c *nfs.Config) { c.NLMGrace = -1 })
	c := dialRPC(t, g.addr)
	root := c.mount("/")
	st, fh := c.create(root, "f", 0, 0)
	if st != sOK {
		t.Fatalf("create: %d", st)
	}
	if st := nlmLockCall(t, c, fh, nlmTestCaller, false, true, false, 0, 0); st != nlm4Granted {
		t.Fatalf("LOCK: %d", st)
	}
	if st, _, _ := c.write(fh, 0, []byte("under the lock"), 0); st != sOK {
		t.Fatalf("unstable WRITE: %d", st)
	}
	if st := nlmUnlockCall(t, c, fh, nlmTestCaller, 0, 0); st != nlm4Granted {
		t.Fatalf("UNLOCK: %d", st)
	}
	c2 := dialRPC(t, g.addr)
	done := make(chan uint32, 1)
	go func() {
		st, _ := c2.nfs(pSetattr, args(fh, []any{false, false, false, true, uint64(5), 0, 0}, false))
		done <- st
	}()
	select {
	case st := <-done:
		if st != sOK {
			t.Fatalf("SETATTR after UNLOCK: %d", st)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("SETATTR after UNLOCK not answered in 20 s: the gateway's open file stayed locked")
	}
	if got, err := fc.newFS(t).ReadFile(context.Background(), metawire.Root, "/f"); err != nil || string(got) != "under" {
		t.Fatalf("read back %q, %v; want the unlocked write cut to 5 bytes", got, err)
	}
}
