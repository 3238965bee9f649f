package simcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/simnet"
	"github.com/atoll-fs/atoll/internal/testenv"
)

func buildAtoll(t *testing.T) string { return testenv.Atoll(t, "failpoints", "deadlock") }

// testKey is the cluster key of every cluster the tests start (also in
// $ATOLL_KEY, for the processes they start).
var testKey, testKeyPath = testenv.ClusterKey()

// TestMain removes what the tests built.
func TestMain(m *testing.M) { testenv.Main(m) }

// atoll format waits for the islands and storage servers it is told to,
// names what is missing when it gives up, formats once they are up, and
// on a formatted cluster says so and exits 0. (One manager, storage server
// and island as local processes: no simulated hosts needed.)
func TestFormat(t *testing.T) {
	exe := buildAtoll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	out := &logBuf{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("roles' output:\n%s", out.String())
		}
	})
	start := func(name string, args ...string) *devcluster.Child {
		t.Helper()
		c, err := devcluster.Start(ctx, devcluster.ChildSpec{Name: name, Exe: exe, Args: args,
			AddrFile: filepath.Join(dir, name+".addr"), Output: out, NoWait: args[0] == "meta"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Stop(StopGrace) })
		return c
	}
	format := func(args ...string) (string, error) {
		b, err := exec.CommandContext(ctx, exe, append([]string{"format"}, args...)...).CombinedOutput()
		return string(b), err
	}
	mgr := start("manager", "manager", "--dir", filepath.Join(dir, "manager"), "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0", "--down-after", "2s")
	mc := cluster.NewClient([]string{mgr.Addr}, testKey, slog.New(slog.DiscardHandler))
	defer mc.Close()
	// The manager listens before it has elected itself (up to a second on a
	// busy machine); the 1 s waits below are for the roles, not for that.
	if _, err := mc.Map(ctx, 0); err != nil {
		t.Fatal(err)
	}

	// Nothing registered: it gives up, exit 1, naming what it waited for.
	got, err := format("--cluster", mgr.Addr, "--islands", "1", "--timeout", "1s")
	if err == nil || !strings.Contains(got, "0 of 1 islands registered, 0 of 1 storage servers up") || !strings.Contains(got, "no island registered") {
		t.Fatalf("format with nothing registered: %v: %s", err, got)
	}
	if got, err := format("--cluster", mgr.Addr, "--islands", "0"); err == nil || !strings.Contains(got, "--islands") {
		t.Fatalf("format --islands 0: %v: %s", err, got)
	}

	start("storage0", "storage", "--dir", filepath.Join(dir, "storage0"), "--slot", "0", "--listen", "127.0.0.1:0", "--manager", mgr.Addr)
	// An island needs a fixed port to register.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	islandAddr := ln.Addr().String()
	ln.Close()
	island := start("island1", "meta", "--dir", filepath.Join(dir, "island1"), "--id", "1", "--listen", islandAddr, "--manager", mgr.Addr)
	// Two islands wanted, one there: still waiting, and it says which.
	got, err = format("--cluster", mgr.Addr, "--islands", "2", "--timeout", "1s")
	if err == nil || !strings.Contains(got, "1 of 2 islands registered") || !strings.Contains(got, "island 1 registered at "+islandAddr) {
		t.Fatalf("format waiting for 2 islands with 1: %v: %s", err, got)
	}
	// An island waiting for the namespace heartbeats: it stays up however
	// long the operator takes to format (here three times --down-after,
	// long enough to have been marked down twice over without heartbeats).
	var since time.Time
	for since.IsZero() || time.Since(since) < 6*time.Second {
		m, err := mc.Map(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if is, ok := m.Island(1); ok {
			if is.State != cluster.StateUp {
				t.Fatalf("island 1 is %s while it waits for the namespace", is.State)
			}
			if since.IsZero() {
				since = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("island 1 never registered")
		case <-time.After(200 * time.Millisecond):
		}
	}
	got, err = format("--cluster", mgr.Addr, "--islands", "1", "--timeout", "30s")
	if err != nil || !strings.HasPrefix(got, "formatted: 1 islands") {
		t.Fatalf("format: %v: %s", err, got)
	}
	if err := island.WaitReady(ctx); err != nil {
		t.Fatalf("island after format: %v", err)
	}
	got, err = format("--cluster", mgr.Addr, "--islands", "1")
	if err != nil || !strings.HasPrefix(got, "already formatted") {
		t.Fatalf("format again: %v: %s", err, got)
	}
}

// logBuf collects the roles' output; the test prints it when it fails.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// statusJSON is the part of `atoll status --json` the test reads.
type statusJSON struct {
	Leader        string `json:"leader"`
	DefaultPolicy string `json:"default_policy"`
	Formatted     bool   `json:"formatted"`
	Voters        []struct {
		RaftAddr string `json:"raft_addr"`
		Addr     string `json:"addr"`
	} `json:"voters"`
	Members []struct {
		Kind        string `json:"kind"`
		ID          uint32 `json:"id"`
		Addr        string `json:"addr"`
		State       string `json:"state"`
		MetricsAddr string `json:"metrics_addr"`
	} `json:"members"`
	Islands []struct {
		ID   uint32 `json:"id"`
		Addr string `json:"addr"`
	} `json:"islands"`
}

// A cluster started by the steps of docs/deploy.md on simulated hosts:
// a file written through the FUSE mount reads back byte-equal through the
// library client from the test process; with a storage server killed it
// still reads (ec:2+1), and again once that server is restarted; every
// member, island, manager and metrics address is its own host's 10.99
// address; `atoll format` is idempotent and says what it waits for.
func TestClusterOnSimulatedHosts(t *testing.T) {
	needSimHostsAndFUSE(t)
	exe := buildAtoll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	root := t.TempDir()
	cfg := Config{
		Exe: exe, Dir: filepath.Join(root, "data"),
		Storage: 3, Islands: 2, NFS: true, Mount: filepath.Join(root, "mnt"),
		ManagerArgs: []string{"--down-after", "2s"},
		Out:         &logBuf{},
	}
	cl, sn := startOnSimHosts(ctx, t, "sc", &cfg)

	subnet := netip.PrefixFrom(sn.Local(), 24).Masked()
	onOwnHost := func(what, addr string, r *Role) {
		t.Helper()
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			t.Errorf("%s: address %q: %v", what, addr, err)
			return
		}
		if !subnet.Contains(ap.Addr()) || ap.Addr().IsLoopback() {
			t.Errorf("%s: address %s is not on the simulated net %s", what, addr, subnet)
		}
		if r != nil && ap.Addr() != r.Host.Addr {
			t.Errorf("%s: address %s, but %s runs on %s (%s)", what, addr, r.Name, r.Host.Name, r.Host.Addr)
		}
	}

	// Every member registered with its own host's address. The metrics
	// addresses come with the heartbeats after registering: wait for them.
	var st statusJSON
	for deadline := time.Now().Add(time.Minute); ; {
		st = atollStatus(ctx, t, exe, cl.Manager, cfg.ClusterKeyPath())
		all := len(st.Members) > 0
		for _, m := range st.Members {
			all = all && m.MetricsAddr != ""
		}
		if all || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling for the heartbeats, not synchronising
	}
	if !st.Formatted || st.DefaultPolicy != "ec:2+1" {
		t.Errorf("status: formatted %v, default policy %q; want formatted, ec:2+1", st.Formatted, st.DefaultPolicy)
	}
	mgr := cl.Role("manager")
	onOwnHost("leader", st.Leader, mgr)
	if len(st.Voters) != 1 {
		t.Errorf("status: %d voters, want 1", len(st.Voters))
	}
	for _, v := range st.Voters {
		onOwnHost("manager", v.Addr, mgr)
		onOwnHost("manager raft", v.RaftAddr, mgr)
	}
	byAddr := map[string]*Role{}
	for _, r := range cl.Roles {
		byAddr[r.Addr] = r
	}
	kinds := map[string]int{}
	for _, m := range st.Members {
		kinds[m.Kind]++
		what := fmt.Sprintf("%s %d", m.Kind, m.ID)
		r := byAddr[m.Addr]
		if r == nil {
			t.Errorf("%s registered as %s: no role has that address", what, m.Addr)
		}
		onOwnHost(what, m.Addr, r)
		onOwnHost(what+" metrics", m.MetricsAddr, r)
		if m.State != "up" {
			t.Errorf("%s is %s", what, m.State)
		}
	}
	if kinds["storage"] != 3 || kinds["island"] != 2 || kinds["gateway"] != 2 {
		t.Errorf("members by kind %v; want 3 storage, 2 island, 2 gateway (nfs, mount)", kinds)
	}
	for _, is := range st.Islands {
		onOwnHost(fmt.Sprintf("island %d", is.ID), is.Addr, cl.Role(fmt.Sprintf("island%d", is.ID)))
	}

	// Every role's /metrics on its host's port 9100, the manager's too.
	for _, r := range cl.Roles {
		resp, err := http.Get("http://" + r.Metrics + "/metrics")
		if err != nil {
			t.Errorf("%s metrics: %v", r.Name, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("go_goroutines")) ||
			(r.Kind == KindManager && !bytes.Contains(body, []byte("atoll_manager_"))) {
			t.Errorf("%s metrics at %s: %s, %d bytes", r.Name, r.Metrics, resp.Status, len(body))
		}
	}

	// `atoll format` again: already formatted, exit 0.
	if out, err := exec.CommandContext(ctx, exe, "format", "--cluster", cl.Manager, "--key", cfg.ClusterKeyPath(), "--islands", "2").CombinedOutput(); err != nil || !strings.Contains(string(out), "already formatted") {
		t.Errorf("format on a formatted cluster: %v: %s", err, out)
	}

	// Write through FUSE, read through the library from the test process.
	data := make([]byte, 3<<20+12345)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	f, err := os.Create(filepath.Join(cfg.Mount, "simhosts.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	readBack := func(when string) {
		t.Helper()
		key, err := cl.Key()
		if err != nil {
			t.Fatal(err)
		}
		conn, err := connect.Dial(ctx, []string{cl.Manager}, key, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("%s: dial the manager at %s: %v", when, cl.Manager, err)
		}
		defer conn.Close()
		got, err := conn.FS.ReadFile(ctx, metawire.Cred{}, "/simhosts.bin")
		if err != nil {
			t.Fatalf("%s: read: %v", when, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: read %d bytes, not the %d written through the mount", when, len(got), len(data))
		}
	}
	readBack("all up")

	// Kill a storage server: gone for real, and the file still reads.
	s1 := cl.Role("storage1")
	s1.Kill()
	if code, exited := s1.ExitCode(); !exited || code != 137 || s1.Running() {
		t.Fatalf("storage1 after Kill: exit code %d, exited %v, running %v; want 137 (SIGKILL)", code, exited, s1.Running())
	}
	if c, err := net.DialTimeout("tcp", s1.Addr, 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("storage1 killed, but %s still accepts connections", s1.Addr)
	}
	readBack("storage1 killed")
	oldPID := s1.PID()
	if err := s1.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if !s1.Running() || s1.PID() == oldPID {
		t.Fatalf("storage1 after Restart: running %v, pid %d (was %d)", s1.Running(), s1.PID(), oldPID)
	}
	wctx, wcancel := context.WithTimeout(ctx, ReadyTimeout)
	defer wcancel()
	if err := cl.WaitMembers(wctx); err != nil {
		t.Fatal(err)
	}
	readBack("storage1 restarted")

	// Pause and resume: the process stops answering, then answers again.
	if err := s1.Pause(); err != nil {
		t.Fatal(err)
	}
	if !procState(t, s1.PID(), "T") {
		t.Errorf("storage1 paused, but its state is not T (stopped)")
	}
	if err := s1.Resume(); err != nil {
		t.Fatal(err)
	}
	if procState(t, s1.PID(), "T") {
		t.Errorf("storage1 resumed, but still stopped")
	}
}

// needSimHostsAndFUSE stops a test that needs simulated hosts and a FUSE
// mount where they are missing (testenv.Missing: a failure under CI).
func needSimHostsAndFUSE(t *testing.T) {
	t.Helper()
	if why := simnet.Available(); why != "" {
		testenv.Missing(t, "simulated hosts: %s", why)
	}
	if ok, why := devcluster.FuseUsable(); !ok {
		testenv.Missing(t, "FUSE: %s", why)
	}
}

// startOnSimHosts starts cfg's cluster on simulated hosts of a net named
// prefix plus this process's id, torn down with the test; cfg.Out (a
// *logBuf, set here when nil) is logged when the test fails.
func startOnSimHosts(ctx context.Context, t *testing.T, prefix string, cfg *Config) (*Cluster, *simnet.Net) {
	t.Helper()
	if cfg.Out == nil {
		cfg.Out = &logBuf{}
	}
	sn, err := simnet.New(ctx, simnet.Config{Name: fmt.Sprintf("%s%d", prefix, os.Getpid()%10000), Hosts: HostNames(*cfg)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sn.Close(); err != nil {
			t.Error(err)
		}
	})
	if !sn.Isolated() {
		testenv.Missing(t, "simulated hosts fell back to loopback: %s", sn.Reason())
	}
	cfg.Net = sn
	out := cfg.Out.(*logBuf)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("roles' output:\n%s", out.String())
		}
	})
	cl, err := Start(ctx, *cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop) // before the temporary directories go (LIFO)
	return cl, sn
}

// procState reports whether pid's state letter (/proc/PID/stat) is want.
func procState(t *testing.T, pid int, want string) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) S ...: comm may hold spaces; the state follows ") ".
		s := string(b)
		state := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
		if state == want || time.Now().After(deadline) {
			return state == want
		}
		time.Sleep(10 * time.Millisecond) // signal delivery is asynchronous
	}
}

func atollStatus(ctx context.Context, t *testing.T, exe, mgr, key string) statusJSON {
	t.Helper()
	out, err := exec.CommandContext(ctx, exe, "status", "--json", "--cluster", mgr, "--key", key).Output()
	if err != nil {
		t.Fatalf("atoll status --json: %v: %s", err, out)
	}
	var st statusJSON
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("atoll status --json: %v\n%s", err, out)
	}
	return st
}

// A role refuses a wildcard for an address it registers with the manager
// (the others would dial their own machine), and a wildcard metrics
// address is reported with the role's own host. (Local processes.)
func TestWildcardAddresses(t *testing.T) {
	exe := buildAtoll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	out := &logBuf{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("roles' output:\n%s", out.String())
		}
	})
	mgr, err := devcluster.Start(ctx, devcluster.ChildSpec{Name: "manager", Exe: exe, Output: out,
		Args:     []string{"manager", "--dir", filepath.Join(dir, "manager"), "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0"},
		AddrFile: filepath.Join(dir, "manager.addr")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Stop(StopGrace) })

	refused := [][]string{
		{"manager", "--dir", filepath.Join(dir, "m2"), "--listen", "0.0.0.0:0"},
		{"storage", "--dir", filepath.Join(dir, "s1"), "--slot", "1", "--listen", "0.0.0.0:0", "--manager", mgr.Addr},
		{"storage", "--dir", filepath.Join(dir, "s1"), "--slot", "1", "--listen", ":0", "--manager", mgr.Addr},
		{"meta", "--dir", filepath.Join(dir, "i1"), "--id", "1", "--listen", "[::]:17501", "--manager", mgr.Addr},
		{"nfs", "--cluster", mgr.Addr, "--listen", "0.0.0.0:0"},
	}
	if ok, _ := devcluster.FuseUsable(); ok && os.Geteuid() == 0 {
		mnt := filepath.Join(dir, "mnt")
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		refused = append(refused, []string{"mount", "--cluster", mgr.Addr, "--metrics-listen", "0.0.0.0:0", mnt})
	}
	for _, args := range refused {
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		b, err := exec.CommandContext(cctx, exe, args...).CombinedOutput()
		ccancel()
		if err == nil || !strings.Contains(string(b), "not a wildcard") {
			t.Errorf("atoll %s: %v: %s; want refused, not a wildcard", strings.Join(args, " "), err, b)
		}
	}

	// Serving /metrics on every interface: reported with the role's host.
	s0, err := devcluster.Start(ctx, devcluster.ChildSpec{Name: "storage0", Exe: exe, Output: out,
		Args: []string{"storage", "--dir", filepath.Join(dir, "s0"), "--slot", "0", "--listen", "127.0.0.1:0",
			"--manager", mgr.Addr, "--metrics-listen", "0.0.0.0:0"},
		AddrFile: filepath.Join(dir, "storage0.addr")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s0.Stop(StopGrace) })
	for deadline := time.Now().Add(time.Minute); ; {
		st := atollStatus(ctx, t, exe, mgr.Addr, testKeyPath)
		var got string
		for _, m := range st.Members {
			if m.Kind == "storage" && m.ID == 0 {
				got = m.MetricsAddr
			}
		}
		if got != "" {
			if !strings.HasPrefix(got, "127.0.0.1:") {
				t.Errorf("storage 0 serves /metrics on 0.0.0.0 and reports %q; want its own host 127.0.0.1", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("storage 0's metrics address never reported")
		}
		time.Sleep(200 * time.Millisecond) // polling for the heartbeats
	}
}
