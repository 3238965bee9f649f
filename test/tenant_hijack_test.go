package test

import (
	"context"
	"encoding/binary"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/filelock"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// TestInjectedFrameRefused is issue #43's on-path attacker: a relay
// between an admin's client and an island lets the handshake through,
// then slips a frame of its own (a mkdir as root, with a correct CRC32C:
// the header checksum needs no secret) into the client's stream. Before
// connections were sealed the island served it with the admin's key; now
// the record fails its check, the island closes the connection, and
// nothing is made. The same relay without the injection passes requests
// through, so it is the injection that is refused.
func TestInjectedFrameRefused(t *testing.T) {
	cl, _ := startDev(t, 3, 1, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := dialDev(t, cl)
	island := admin.View.Map().Islands[0].Addr
	epoch := admin.View.Map().Epoch

	forged := metawire.Marshal(&metawire.CreateReq{Cred: metawire.Root, Dir: uint64(namespace.RootIno), Name: "pwned", Mode: 0o777})
	b := make([]byte, wire.HeaderSize, wire.HeaderSize+len(forged))
	wire.PutHeader(b, &wire.Header{Kind: wire.KindRequest, Op: metawire.OpMkdir, ID: 1 << 40, Epoch: epoch}, forged)
	frame := append(b, forged...)

	getattr := metawire.Marshal(&metawire.InoReq{Cred: metawire.Root, Ino: uint64(namespace.RootIno)})
	for _, inject := range []bool{false, true} {
		addr, injected := hijackRelay(t, island, frame, inject)
		c, err := wire.Dial(ctx, addr, wire.ClientConfig{Key: testKey, IOTimeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("inject %v: dial through the relay: %v", inject, err)
		}
		_, err = c.Call(ctx, metawire.OpGetAttr, epoch, getattr, nil, nil)
		c.Close()
		switch {
		case !inject && err != nil:
			t.Fatalf("the relay without injection: getattr: %v", err)
		case inject && !injected.Load():
			t.Fatal("the relay injected nothing")
		case inject && err == nil:
			t.Errorf("the connection carried on after an injected frame")
		}
	}
	time.Sleep(500 * time.Millisecond) // a served mkdir would be visible by now
	if _, err := admin.FS.Resolve(ctx, metawire.Root, "/pwned"); metawire.Errno(err) != 2 {
		t.Fatalf("the injected mkdir: /pwned resolves (%v); want ENOENT", err)
	}
}

// hijackRelay relays one connection to target and, with inject, writes
// frame into the client-to-server stream once the handshake is over (the
// server has sent its challenge and verdict, 71 bytes), ahead of the
// client's next bytes.
func hijackRelay(t *testing.T, target string, frame []byte, inject bool) (string, *atomic.Bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var fromServer atomic.Int64
	injected := &atomic.Bool{}
	go func() {
		a, err := ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", target)
		if err != nil {
			a.Close()
			return
		}
		// pump copies src to dst; ahead of each chunk of n bytes it writes
		// what before returns (nil: nothing).
		pump := func(dst, src net.Conn, before func(n int) []byte) {
			defer dst.Close()
			defer src.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := src.Read(buf)
				if n > 0 {
					if extra := before(n); extra != nil {
						if _, werr := dst.Write(extra); werr != nil {
							return
						}
					}
					if _, werr := dst.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}
		go pump(a, b, func(n int) []byte { fromServer.Add(int64(n)); return nil })
		go pump(b, a, func(int) []byte {
			if inject && !injected.Load() && fromServer.Load() >= 71 {
				injected.Store(true)
				return frame
			}
			return nil
		})
	}()
	return ln.Addr().String(), injected
}

// TestTenantCannotTouchAnothersLocks: before sessions were bound to keys,
// any key that could lock could name any session, and `atoll locks`
// shows them: a tenant unlocked a mount host's lock on a shared database
// file by naming the host's session. Now a tenant names only sessions
// (and request ids) with its key's prefix; the host's lock stays.
func TestTenantCannotTouchAnothersLocks(t *testing.T) {
	cl, _ := startDev(t, 3, 1, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := dialDev(t, cl)
	if err := admin.FS.WriteFile(ctx, metawire.Root, "/db", []byte("shared database\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	f, err := admin.FS.Resolve(ctx, metawire.Root, "/db")
	if err != nil {
		t.Fatal(err)
	}
	island := admin.View.Map().Islands[0].Addr
	epoch := admin.View.Map().Epoch
	call := func(key *auth.Key, id wire.ReqID, cmd uint8, session uint64) error {
		c, err := wire.Dial(ctx, island, wire.ClientConfig{Key: key, IOTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		req := metawire.LockReq{Cred: metawire.Cred{UID: 1000, GID: 1000}, Ino: f.Ino, Cmd: cmd}
		req.Lock = filelock.Lock{Owner: filelock.Owner{Session: session, ID: 1}, Kind: filelock.POSIX, Type: filelock.Write, End: 99}
		_, err = c.CallRoute(ctx, 0, id, metawire.OpLock, epoch, metawire.Marshal(&req), nil, nil)
		return metawire.RemoteErr(err)
	}
	host, _ := testKey.Derive("host", auth.CapRead|auth.CapWrite)
	const hostSession = 0x0123456789abcdef
	if err := call(host, wire.ReqID{}, metawire.LockSet, hostSession); err != nil {
		t.Fatalf("the host's lock: %v", err)
	}
	tenant, err := testKey.DeriveScoped("mallory", auth.CapRead|auth.CapWrite, auth.Scope{UIDs: []uint32{1000}, GIDs: []uint32{1000}})
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []uint8{metawire.LockUnlock, metawire.LockUnlockOwner} {
		if err := call(tenant, wire.ReqID{}, cmd, hostSession); metawire.Errno(err) != syscall.EPERM {
			t.Errorf("the tenant naming the host's session (cmd %d): %v, want EPERM", cmd, err)
		}
	}
	// A request id carries a session too (dedup, lease recalls).
	var id wire.ReqID
	binary.BigEndian.PutUint64(id[:8], hostSession)
	own := uint64(auth.LogPrefix("mallory"))<<32 | 1
	if err := call(tenant, id, metawire.LockGet, own); metawire.Errno(err) != syscall.EPERM {
		t.Errorf("the tenant sending the host's request id: %v, want EPERM", err)
	}
	// The host's lock is still there: another session's set conflicts.
	if err := call(host, wire.ReqID{}, metawire.LockSet, 0x0fedcba987654321); err == nil {
		t.Fatal("the host's lock is gone")
	}
	// The tenant's own session works.
	if err := call(tenant, wire.ReqID{}, metawire.LockGet, own); err != nil {
		t.Errorf("the tenant's own session: %v", err)
	}
}
