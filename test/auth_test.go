package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/nfs"
	"github.com/atoll-fs/atoll/internal/wire"

	"golang.org/x/sys/unix"
)

// Every port of a running cluster (manager, its raft transport, storage,
// island) refuses a client without a key and one with another cluster's
// key before serving anything; a read-only key changes nothing; a mount's
// user key can neither administer nor pose as a storage server; and after
// all of it the cluster's map and files are as they were, with the refusals
// counted in /metrics.
func TestAuthEveryPort(t *testing.T) {
	var metricsAt int
	cl, base := startDev(t, 1, 1, 6, func(c *devcluster.Config) {
		metricsAt = freeBase(t, 4)
		c.MetricsListen = fmt.Sprintf("127.0.0.1:%d", metricsAt)
		c.NFSListen = ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	storageAddr, islandAddr := cl.Map.Storage[0].Addr, cl.Map.Islands[0].Addr
	raftAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(base+1))

	// The admin writes a file everyone else then fails to change.
	admin := dialDev(t, cl)
	f, err := admin.FS.CreateFile(ctx, metawire.Root, "/kept", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("kept bytes"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f.Release()
	before, err := admin.Cluster.Map(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}

	// 1. No key: a valid request frame on each port gets no answer; the
	// connection is closed.
	for name, addr := range map[string]string{"manager": cl.Manager, "storage": storageAddr, "island": islandAddr} {
		c, err := wire.Dial(ctx, addr, wire.ClientConfig{IOTimeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("%s: dial: %v", name, err)
		}
		_, err = c.Call(ctx, 1, before.Epoch, nil, nil, nil)
		c.Close()
		if err == nil || errors.As(err, new(*wire.RemoteError)) {
			t.Errorf("%s served a request without a key (err %v)", name, err)
		}
	}
	// The raft port: garbage, then silence.
	closesKeyless(t, "raft port", raftAddr, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})

	// 2. Another cluster's key: refused at the handshake, on every port.
	other, _ := auth.NewClusterKey()
	for name, addr := range map[string]string{"manager": cl.Manager, "storage": storageAddr, "island": islandAddr} {
		if _, err := wire.Dial(ctx, addr, wire.ClientConfig{Key: other}); !errors.Is(err, auth.ErrRefused) {
			t.Errorf("%s accepted another cluster's key: %v", name, err)
		}
	}
	if _, err := connect.Dial(ctx, []string{cl.Manager}, other, quietLogger()); !errors.Is(err, auth.ErrRefused) {
		t.Errorf("connect with another cluster's key: %v", err)
	}
	// A derived key whose capabilities were edited (read-only claiming
	// admin) proves nothing.
	ro, _ := testKey.Derive("reader", auth.CapRead)
	forged := *ro
	forged.Caps = auth.CapRead | auth.CapWrite | auth.CapAdmin
	if _, err := wire.Dial(ctx, cl.Manager, wire.ClientConfig{Key: &forged}); !errors.Is(err, auth.ErrRefused) {
		t.Errorf("forged capabilities accepted: %v", err)
	}

	// 3. Read-only: reads work, every change is refused.
	roc, err := connect.Dial(ctx, []string{cl.Manager}, ro, quietLogger())
	if err != nil {
		t.Fatalf("read-only key cannot connect: %v", err)
	}
	defer roc.Close()
	rf, err := roc.FS.OpenPath(ctx, metawire.Root, "/kept")
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	buf := make([]byte, 64)
	n, _ := rf.ReadAt(ctx, buf, 0)
	rf.Release()
	if string(buf[:n]) != "kept bytes" {
		t.Errorf("read-only read %q", buf[:n])
	}
	if _, err := roc.FS.CreateFile(ctx, metawire.Root, "/ro-new", 0o644); metawire.Errno(err) != syscall.EROFS {
		t.Errorf("read-only create: %v (errno %v), want EROFS", err, metawire.Errno(err))
	}
	if _, err := roc.Cluster.SetPolicy(ctx, "mirror:2"); !errors.Is(err, auth.ErrForbidden) && !strings.Contains(fmt.Sprint(err), "not permitted") {
		t.Errorf("read-only set policy: %v", err)
	}

	// 4. A mount's key (user): no admin operation, no posing as a server.
	user, _ := testKey.Derive("mount", auth.CapRead|auth.CapWrite)
	uc, err := connect.Dial(ctx, []string{cl.Manager}, user, quietLogger())
	if err != nil {
		t.Fatalf("user key cannot connect: %v", err)
	}
	defer uc.Close()
	forbidden := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "not permitted") {
			t.Errorf("user key: %s: %v, want not permitted", what, err)
		}
	}
	_, err = uc.Cluster.SetState(ctx, cluster.KindStorage, 0, cluster.StateOut)
	forbidden("mark storage out", err)
	_, err = uc.Cluster.SetPolicy(ctx, "mirror:2")
	forbidden("set policy", err)
	_, err = uc.Cluster.Register(ctx, cluster.KindStorage, 0, "127.0.0.1:1", 1)
	forbidden("register over storage 0", err)
	_, err = uc.Data.ScanSlot(ctx, 0, nil, 10)
	forbidden("scan a storage server", err)
	_, err = uc.FS.LiveBytes(ctx)
	if metawire.Errno(err) != syscall.EPERM {
		t.Errorf("user key: cleaner's live bytes: %v, want EPERM", err)
	}
	if err := uc.Data.DeleteFragment(ctx, 0, fragment.ID{Log: 1, Seq: 1}); err == nil || !errors.Is(err, fragment.ErrForbidden) {
		t.Errorf("user key: delete a fragment: %v", err)
	}
	// Posing as a peer island (2PC) or writing with a read-only key, on
	// the raw protocol.
	raw := func(key *auth.Key, addr string, op uint16) error {
		c, err := wire.Dial(ctx, addr, wire.ClientConfig{Key: key, IOTimeout: 10 * time.Second})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Call(ctx, op, after0(ctx, admin), nil, nil, nil)
		return err
	}
	if err := raw(user, islandAddr, metawire.OpPrepare); metawire.Errno(metawire.RemoteErr(err)) != syscall.EPERM {
		t.Errorf("user key: island prepare (a peer's operation): %v, want EPERM", err)
	}
	if err := raw(ro, storageAddr, fragment.OpPut); !errors.Is(fragment.RemoteErr(err), fragment.ErrForbidden) {
		t.Errorf("read-only key: storage put: %v, want forbidden", err)
	}
	if err := raw(ro, islandAddr, metawire.OpCommit); metawire.Errno(metawire.RemoteErr(err)) != syscall.EROFS {
		t.Errorf("read-only key: island commit: %v, want EROFS", err)
	}

	// What a user key may do, it does.
	if _, err := uc.FS.MkdirAll(ctx, metawire.Root, "/userdir", 0o755); err != nil {
		t.Errorf("user key mkdir: %v", err)
	}

	// Nothing changed: same storage state, policy and file.
	after, err := admin.Cluster.Map(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if after.Storage[0].State != before.Storage[0].State || after.Storage[0].Addr != before.Storage[0].Addr || after.DefaultPolicy != before.DefaultPolicy || after.Epoch != before.Epoch {
		t.Errorf("the map changed: storage %+v -> %+v, policy %q -> %q", before.Storage[0], after.Storage[0], before.DefaultPolicy, after.DefaultPolicy)
	}

	// The CLI without any key says what to do.
	cmd := exec.CommandContext(ctx, atoll(t), "status", "--cluster", cl.Manager)
	cmd.Env = append(cmdEnvWithout("ATOLL_KEY", "XDG_CONFIG_HOME", "HOME"), "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--key") {
		t.Errorf("status without a key: %v: %s", err, out)
	}

	// The storage server counted the keyless and the foreign connections.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsAt))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`atoll_storage_refused_connections_total\{[^}]*\} (\d+)`).FindSubmatch(b)
	if m == nil || string(m[1]) == "0" {
		t.Errorf("storage refusals not counted in /metrics: %q", m)
	}
}

// after0 is the cluster map's epoch now (requests carry it).
func after0(ctx context.Context, c *connect.Conn) uint64 {
	m, err := c.Cluster.Map(ctx, 0)
	if err != nil {
		return 1
	}
	return m.Epoch
}

// cmdEnvWithout is this process's environment without the named variables.
func cmdEnvWithout(names ...string) []string {
	var out []string
next:
	for _, kv := range os.Environ() {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// vmRSS is a process's current resident set in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// Slowloris: 1,000 connections to each server that send 40 bytes of a
// hello and then nothing cost each server less than 64 MiB and do not
// stop it serving keyed clients; and a storage server out of file
// descriptors keeps its accept loop, serving again once they are free.
func TestSlowlorisAndFDExhaustion(t *testing.T) {
	cl, nfsAddr := startDevNFS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// 40 bytes of a hello that announces a 64-byte name: the server
	// waits for the rest until its handshake deadline.
	partial := append([]byte{'A', 't', 'A', 'u', 1, byte(auth.CapRead), 64}, strings.Repeat("x", 33)...)
	serves := func(addr string, op uint16) error {
		c, err := wire.Dial(ctx, addr, wire.ClientConfig{Key: testKey, IOTimeout: 10 * time.Second})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Call(ctx, op, 0, nil, nil, nil)
		var re *wire.RemoteError
		if errors.As(err, &re) {
			return nil // an answer (an error about the empty request) is serving
		}
		return err
	}
	targets := []struct {
		name, child, addr string
		op                uint16
	}{
		{"storage", "storage0", cl.Map.Storage[0].Addr, fragment.OpStat},
		{"island", "island1", cl.Map.Islands[0].Addr, metawire.OpStatFS},
		{"manager", "manager", cl.Manager, 7}, // OpStatus
	}
	for _, tg := range targets {
		pid := cl.Child(tg.child).PID()
		before := vmRSS(t, pid)
		var conns []net.Conn
		for i := 0; i < 1000; i++ {
			// From other addresses than the keyed client's (127.0.0.1):
			// each source gets only its share of handshakes.
			c, err := dialFrom(fmt.Sprintf("127.0.0.%d", 2+i%40), tg.addr)
			if err != nil {
				t.Fatalf("%s: connection %d: %v", tg.name, i, err)
			}
			c.Write(partial)
			conns = append(conns, c)
		}
		time.Sleep(500 * time.Millisecond)
		if err := serves(tg.addr, tg.op); err != nil {
			t.Errorf("%s does not serve a keyed client under 1,000 idle connections: %v", tg.name, err)
		}
		grew := vmRSS(t, pid) - before
		t.Logf("%s: RSS %d MiB -> +%d KiB with 1,000 idle connections", tg.name, before>>20, grew>>10)
		if grew > 64<<20 {
			t.Errorf("%s: 1,000 idle connections grew RSS by %d MiB", tg.name, grew>>20)
		}
		for _, c := range conns {
			c.Close()
		}
	}

	// The NFS gateway: 1,000 connections whose record header announces
	// a megabyte followed by 40 bytes of it.
	{
		pid := cl.Child("nfs").PID()
		before := vmRSS(t, pid)
		rec := binary.BigEndian.AppendUint32(nil, 1<<31|nfs.MaxRecord-8)
		rec = append(rec, make([]byte, 40)...)
		var conns []net.Conn
		for i := 0; i < 1000; i++ {
			c, err := dialFrom(fmt.Sprintf("127.0.0.%d", 2+i%40), nfsAddr)
			if err != nil {
				t.Fatalf("nfs: connection %d: %v", i, err)
			}
			c.Write(rec)
			conns = append(conns, c)
		}
		time.Sleep(500 * time.Millisecond)
		if rep := dialRPC(t, nfsAddr).call(progNFS, 3, 0, nil); rep.denied || rep.stat != 0 {
			t.Errorf("nfs does not answer NULL under 1,000 half records: %+v", rep)
		}
		grew := vmRSS(t, pid) - before
		t.Logf("nfs: RSS %d MiB -> +%d KiB with 1,000 half records", before>>20, grew>>10)
		if grew > 64<<20 {
			t.Errorf("nfs: 1,000 connections announcing 1 MiB records grew RSS by %d MiB", grew>>20)
		}
		for _, c := range conns {
			c.Close()
		}
	}

	// Out of file descriptors: the storage server may open 64 at most.
	st := cl.Child("storage0")
	var old unix.Rlimit
	if err := unix.Prlimit(st.PID(), unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	if err := unix.Prlimit(st.PID(), unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 64, Max: old.Max}, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	var conns []net.Conn
	for i := 0; i < 100; i++ {
		if c, err := net.DialTimeout("tcp", targets[0].addr, 5*time.Second); err == nil {
			c.Write(partial)
			conns = append(conns, c)
		}
	}
	time.Sleep(time.Second) // the server hits EMFILE on accept
	for _, c := range conns {
		c.Close()
	}
	if err := unix.Prlimit(st.PID(), unix.RLIMIT_NOFILE, &old, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.Done():
		t.Fatalf("the storage server exited when out of file descriptors: %v", st.ExitErr())
	default:
	}
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err = serves(targets[0].addr, fragment.OpStat); err == nil {
			break
		}
	}
	if err != nil {
		t.Errorf("the storage server does not serve again after running out of file descriptors: %v", err)
	}
}

// startDevNFS starts a dev cluster of one storage server and one island
// with its NFS gateway, and returns the gateway's address too.
func startDevNFS(t *testing.T) (*devcluster.Cluster, string) {
	var nfsAddr string
	cl, _ := startDev(t, 1, 1, 1, func(c *devcluster.Config) {
		ap := netip.MustParseAddrPort(c.IslandListen)
		nfsAddr = netip.AddrPortFrom(ap.Addr(), ap.Port()+1).String()
		c.NFSListen = nfsAddr
	})
	return cl, nfsAddr
}

// dialFrom connects to addr from the local address src (any 127/8
// address on loopback: a simulated source host).
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return d.Dial("tcp", addr)
}

// closesKeyless sends garbage to a port that admits only cluster members
// and checks that it closes the connection (EOF or a reset) without a
// byte; a timeout would mean it kept the stranger's connection open.
func closesKeyless(t *testing.T, what, addr string, garbage []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	c.Write(garbage)
	if n, err := io.ReadAll(c); len(n) > 0 || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("%s answered or kept a keyless peer: %q %v", what, n, err)
	}
}

// A key made for NFS gateways (--protocols nfs) is refused by atoll
// mount and atoll smb before they dial anything.
func TestKeyProtocolScope(t *testing.T) {
	k := filepath.Join(t.TempDir(), "nfs.key")
	if out, err := exec.Command(atoll(t), "key", "new", "--key", testKeyPath, "--name", "gw", "--protocols", "nfs", "--gen", "0", "--out", k).CombinedOutput(); err != nil {
		t.Fatalf("key new: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"mount", "--key", k, "--cluster", "127.0.0.1:1", t.TempDir()},
		{"smb", "--key", k, "--cluster", "127.0.0.1:1", "--dir", t.TempDir(), "--listen", "127.0.0.1:0"},
	} {
		out, err := exec.Command(atoll(t), args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), `key "gw" may serve only nfs, not `+args[0]) {
			t.Errorf("atoll %s with an nfs key: %v\n%s", args[0], err, out)
		}
	}
}
