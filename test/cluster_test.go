package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/storage"
	"github.com/atoll-fs/atoll/internal/testenv"
)

// atoll is the atoll binary the multi-process tests start roles from,
// built once per run with -tags failpoints,deadlock: only such a build
// honours ATOLL_FAILPOINTS, and its mutexes report lock-order inversions
// (test/doc.go).
func atoll(t testing.TB) string { return testenv.Atoll(t, "failpoints", "deadlock") }

// testKey is the cluster key of every cluster the tests start (also in
// $ATOLL_KEY, for the processes they start).
var testKey, testKeyPath = testenv.ClusterKey()

// TestMain removes what the tests built.
func TestMain(m *testing.M) { testenv.Main(m) }

func quietLogger() *slog.Logger {
	if os.Getenv("ATOLL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// server is an in-process storage server that can be stopped and
// restarted on the same directory and address.
type server struct {
	t      testing.TB
	slot   uint16
	dir    string
	addr   string
	cap    int64
	srv    *storage.Server
	cancel context.CancelFunc
	done   chan error
}

func (s *server) start() {
	s.t.Helper()
	listen := s.addr
	if listen == "" {
		// Below the ephemeral range, so a restart can bind it again.
		listen = addrAt(freeBase(s.t, 1))
	}
	var srv *storage.Server
	var err error
	// A just-closed port can linger briefly; retry the bind.
	for i := 0; i < 50; i++ {
		srv, err = storage.NewServer(storage.ServerConfig{Key: testKey, Dir: s.dir, Listen: listen, Slot: s.slot, CapacityBytes: s.cap, Logger: quietLogger()})
		if err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	s.srv, s.addr = srv, srv.Addr()
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan error, 1)
	go func() { s.done <- srv.Run(ctx) }()
}

// stop shuts the server down (connections are closed, like a crash as far
// as clients can tell; the store is closed cleanly).
func (s *server) stop() {
	s.t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel()
	if err := <-s.done; err != nil {
		s.t.Errorf("slot %d: run: %v", s.slot, err)
	}
	s.cancel = nil
}

func startServers(t testing.TB, n int) []*server {
	t.Helper()
	var out []*server
	for i := 0; i < n; i++ {
		// A port below the ephemeral range: a restarted server gets its
		// address back (no outgoing connection can take it meanwhile).
		s := &server{t: t, slot: uint16(i), dir: t.TempDir(), addr: fmt.Sprintf("127.0.0.1:%d", freeBase(t, 1))}
		s.start()
		out = append(out, s)
		t.Cleanup(s.stop)
	}
	return out
}

func slotsOf(servers []*server) []client.SlotAddr {
	var out []client.SlotAddr
	for _, s := range servers {
		out = append(out, client.SlotAddr{ID: s.slot, Addr: s.addr})
	}
	return out
}

func newClient(t testing.TB, servers []*server, mod func(*client.Config)) *client.Client {
	t.Helper()
	cfg := client.Config{Key: testKey, Slots: slotsOf(servers), Logger: quietLogger(), ReadTimeout: time.Second, DownFor: 200 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// childServer runs `atoll storage` as a child process.
type childServer struct {
	t    *testing.T
	slot int
	dir  string
	addr string
	c    *devcluster.Child
}

func (s *childServer) start(env ...string) {
	s.t.Helper()
	listen := s.addr
	if listen == "" {
		// Below the ephemeral range, so a restart can bind it again.
		listen = addrAt(freeBase(s.t, 1))
	}
	var c *devcluster.Child
	var err error
	for i := 0; i < 20; i++ {
		c, err = devcluster.Start(context.Background(), devcluster.ChildSpec{
			Name: "storage" + strconv.Itoa(s.slot), Exe: atoll(s.t),
			Args:     []string{"storage", "--dir", s.dir, "--listen", listen, "--slot", strconv.Itoa(s.slot), "--log-level", "warn"},
			AddrFile: filepath.Join(s.dir + ".addr"),
			Env:      env,
			Output:   os.Stderr,
		})
		if err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	s.c, s.addr = c, c.Addr
}

func startChild(t *testing.T, slot int, env ...string) *childServer {
	s := &childServer{t: t, slot: slot, dir: filepath.Join(t.TempDir(), "s")}
	s.start(env...)
	t.Cleanup(func() {
		if s.c != nil {
			s.c.Kill()
		}
	})
	return s
}

// startDev starts a child-process cluster of the atoll binary (a manager,
// storage storage servers, islands islands) on free ports below the
// ephemeral range, keeping extra ports after them free for the caller; it
// returns the cluster and its first port. tune may adjust the config.
// Everything stops at the end of the test.
func startDev(t testing.TB, storage, islands, extra int, tune func(*devcluster.Config)) (*devcluster.Cluster, int) {
	t.Helper()
	base := freeBase(t, storage+islands+2+extra) // manager, its raft port, storage, islands
	cfg := devcluster.Config{
		DataDir: filepath.Join(t.TempDir(), "cluster"), Storage: storage, Islands: islands, Exe: atoll(t), LogLevel: "warn",
		ManagerListen: fmt.Sprintf("127.0.0.1:%d", base),
		StorageListen: fmt.Sprintf("127.0.0.1:%d", base+2),
		IslandListen:  fmt.Sprintf("127.0.0.1:%d", base+2+storage),
		Out:           os.Stderr,
	}
	if tune != nil {
		tune(&cfg)
	}
	dev, err := devcluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	cl, err := dev.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	return cl, base
}

// dialDev connects a client to a startDev cluster, closed at the end of
// the test.
func dialDev(t testing.TB, cl *devcluster.Cluster) *connect.Conn {
	t.Helper()
	conn, err := connect.Dial(context.Background(), []string{cl.Manager}, testKey, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// atoll cp copies files into and out of a cluster: a small file (sent
// with its create) and a large one, byte for byte, and overwrites.
func TestCLICopyRoundTrip(t *testing.T) {
	cl, _ := startDev(t, 5, 1, 0, nil)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		name string
		size int
	}{{"small", 3000}, {"large", 3<<20 + 17}, {"small", 10}, {"empty", 0}} {
		want := make([]byte, c.size)
		for i := range want {
			want[i] = byte(rng.Uint32())
		}
		src, back := filepath.Join(dir, c.name), filepath.Join(dir, c.name+".back")
		if err := os.WriteFile(src, want, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"cp", "-q", "--cluster", cl.Manager, src, "atoll:/" + c.name},
			{"cp", "-q", "--cluster", cl.Manager, "atoll:/" + c.name, back},
		} {
			if out, err := exec.Command(atoll(t), args...).CombinedOutput(); err != nil {
				t.Fatalf("atoll %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		got, err := os.ReadFile(back)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s (%d bytes) copied in and out: %d bytes back (%v)", c.name, c.size, len(got), err)
		}
	}
}

// TestCLICopyQuietWhenNotATerminal (issue #42): overwriting a file after
// a storage server was killed printed one warning per stripe through
// atoll cp's progress bar ("errors=<nil>"), and the bar's carriage
// returns landed in log files. Now the bar shows only on a terminal and
// degraded writes are one line every 10 s with a count and a reason.
func TestCLICopyQuietWhenNotATerminal(t *testing.T) {
	cl, _ := startDev(t, 5, 1, 0, nil)
	src := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(src, randBytes(newRand(9), 40<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(cl.Child("storage0").PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(atoll(t), "cp", src, "atoll:/big", "--cluster", cl.Manager)
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("cp with a server down: %v: %s %s", err, out, stderr.String())
	}
	e := stderr.String()
	if strings.Contains(e, "\r") {
		t.Errorf("a progress bar on a pipe: %q", e)
	}
	if n := strings.Count(e, "written degraded"); n == 0 || n > 2 || strings.Contains(e, "<nil>") {
		t.Errorf("%d degraded-write warnings for one copy:\n%s", n, e)
	}
}

// TestDfCountsASharedDiskOnce (issue #42): atoll df summed the capacity of
// five servers on one file system five times, and a down server's row
// was a long repeated error chain. Servers now report their disk, df
// counts it once and marks the others, and a down server's row says
// "unreachable".
func TestDfCountsASharedDiskOnce(t *testing.T) {
	cl, _ := startDev(t, 5, 1, 0, nil)
	if err := syscall.Kill(cl.Child("storage4").PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(atoll(t), "df", "--json", "--cluster", cl.Manager).Output()
	if err != nil {
		t.Fatalf("df: %v: %s", err, out)
	}
	var df struct {
		Servers []struct {
			Slot           uint16  `json:"slot"`
			Capacity       uint64  `json:"capacity_bytes"`
			SharesDiskWith *uint16 `json:"shares_disk_with"`
			Error          string  `json:"error"`
		} `json:"servers"`
		Capacity uint64 `json:"capacity_bytes"`
	}
	if err := json.Unmarshal(out, &df); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(df.Servers) != 5 {
		t.Fatalf("df: %s", out)
	}
	for _, s := range df.Servers[1:4] {
		if s.SharesDiskWith == nil || *s.SharesDiskWith != 0 {
			t.Errorf("slot %d on the same disk as slot 0 is not marked: %s", s.Slot, out)
		}
	}
	c0 := df.Servers[0].Capacity
	if df.Capacity < c0*9/10 || df.Capacity > c0*11/10 {
		t.Errorf("total capacity %d, one disk's %d: %s", df.Capacity, c0, out)
	}
	if e := df.Servers[4].Error; !strings.Contains(e, "unreachable") || len(e) > 80 {
		t.Errorf("the down server's row: %q", e)
	}
}
