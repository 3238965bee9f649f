package test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/testenv"
)

// `atoll dev` refuses, with a clear message, a data directory another
// `atoll dev` holds, a port in use, a read-only and a full data directory,
// and the CLI says so when it cannot reach a cluster.
func TestDevClearErrors(t *testing.T) {
	exe := atoll(t)
	cfg := func(dir string, base int) devcluster.Config {
		return devcluster.Config{DataDir: dir, Storage: 1, Islands: 1, Exe: exe, LogLevel: "warn",
			ManagerListen: addrAt(base), StorageListen: addrAt(base + 2), IslandListen: addrAt(base + 3)}
	}
	dir := t.TempDir()
	base := freeBase(t, 4)
	d1, err := devcluster.New(cfg(dir, base))
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	if _, err := devcluster.New(cfg(dir, base)); err == nil || !strings.Contains(err.Error(), "another atoll dev") {
		t.Fatalf("second dev on the same directory: %v", err)
	}

	// A port in use.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := cfg(t.TempDir(), base)
	c.ManagerListen = ln.Addr().String()
	d2, err := devcluster.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if _, err := d2.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("manager port in use: %v", err)
	}

	// Read-only and full directories: small tmpfs mounts.
	mnt := func(opts string) string {
		p := t.TempDir()
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", p).CombinedOutput(); err != nil {
			testenv.Missing(t, "cannot mount a tmpfs here (%v: %s): read-only and full directories not checked", err, out)
		}
		t.Cleanup(func() { _ = syscall.Unmount(p, syscall.MNT_DETACH) })
		return p
	}
	ro := mnt("ro,size=64m")
	if _, err := devcluster.New(cfg(filepath.Join(ro, "data"), base)); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("read-only data directory: %v", err)
	}
	full := mnt("size=300m")
	if err := os.WriteFile(filepath.Join(full, "filler"), make([]byte, 280<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.New(cfg(filepath.Join(full, "data"), base)); err == nil || !strings.Contains(err.Error(), "is full") {
		t.Fatalf("full data directory: %v", err)
	}

	// The CLI with nothing listening.
	out, err := exec.Command(exe, "status", "--cluster", addrAt(base)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "atoll dev") {
		t.Fatalf("status against no cluster: %v\n%s", err, out)
	}
}

func addrAt(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// TestDevStopsWithItsParent (issue #42): `go run ./cmd/atoll dev` killed
// with SIGTERM ended go run only, and the `atoll dev` child, its roles
// and its mount stayed up, orphaned. atoll dev now stops cleanly when its
// parent goes: here its parent shell is killed with SIGKILL.
func TestDevStopsWithItsParent(t *testing.T) {
	exe := atoll(t)
	base := freeBase(t, 4)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	script := `"$0" dev --data "$1" --no-mount --storage 1 --islands 1 --island-replicas 1 --nfs-listen "" --web-listen "" --metrics-listen "" ` +
		`--manager-listen "$2" --storage-listen "$3" --island-listen "$4" >"$5" 2>&1 & echo $! >"$5.pid"; wait`
	sh := exec.Command("bash", "-c", script, exe, filepath.Join(dir, "data"), addrAt(base), addrAt(base+2), addrAt(base+3), out)
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer sh.Process.Kill()
	var pid int
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		b, _ := os.ReadFile(out)
		if strings.Contains(string(b), "ready") {
			p, _ := os.ReadFile(out + ".pid")
			pid, _ = strconv.Atoi(strings.TrimSpace(string(p)))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("atoll dev not ready:\n%s", b)
		}
	}
	if pid == 0 {
		t.Fatal("no pid of atoll dev")
	}
	sh.Process.Kill()
	sh.Wait()
	for deadline := time.Now().Add(60 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("atoll dev (pid %d) outlived its parent by a minute", pid)
		}
	}
	// Its roles went with it: nothing listens on the manager's port.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c, err := net.Dial("tcp", addrAt(base))
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the manager outlived atoll dev")
		}
	}
	if b, _ := os.ReadFile(out); !strings.Contains(string(b), "stopped") && !strings.Contains(string(b), "stopping") {
		t.Logf("atoll dev's output (no clean-stop line found):\n%s", b)
	}
}

// lockedBuffer is a bytes.Buffer safe for the children's output copiers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDevCleanStopIsQuiet (issue #42): a clean stop of a cluster with
// replicated islands printed 30 to 45 raft ERROR and WARN lines ("failed
// to heartbeat", "stepping down") and looked like a crash. The servers
// now stop together and raft's complaints during a stop are debug. The
// cluster is two islands of three replicas (`atoll dev --islands 2`
// refused to start): they run on three island servers.
func TestDevCleanStopIsQuiet(t *testing.T) {
	base := freeBase(t, 8)
	var out lockedBuffer
	d, err := devcluster.New(devcluster.Config{DataDir: filepath.Join(t.TempDir(), "data"), Storage: 1, Islands: 2, IslandReplicas: 3,
		Exe: atoll(t), LogLevel: "info", Out: &out,
		ManagerListen: addrAt(base), StorageListen: addrAt(base + 2), IslandListen: addrAt(base + 3)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cl, err := d.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cl.Map.Islands) != 2 || len(cl.Map.IslandServers) != 3 || len(cl.Map.Replicas) != 2 {
		t.Fatalf("--islands 2 --island-replicas 3: islands %v, island servers %v, replica sets %v", cl.Map.Islands, cl.Map.IslandServers, cl.Map.Replicas)
	}
	for _, rs := range cl.Map.Replicas {
		if len(rs.Servers) != 3 {
			t.Fatalf("island %d has replicas on %v, want 3 servers", rs.Island, rs.Servers)
		}
	}
	time.Sleep(2 * time.Second) // raft heartbeats flowing between the replicas
	mark := len(out.String())
	cl.Stop()
	var noisy []string
	for _, line := range strings.Split(out.String()[mark:], "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			noisy = append(noisy, line)
		}
	}
	if len(noisy) > 0 {
		t.Errorf("%d warnings and errors during a clean stop:\n%s", len(noisy), strings.Join(noisy, "\n"))
	}
}
