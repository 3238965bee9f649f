package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/fsck"
)

// startReplicated starts a dev cluster of servers island servers (and as
// many islands), each island replicated on replicas of them.
func startReplicated(t *testing.T, storage, servers, replicas int, tune func(*devcluster.Config)) *devcluster.Cluster {
	t.Helper()
	cl, _ := startDev(t, storage, servers, servers, func(c *devcluster.Config) {
		c.IslandReplicas = replicas
		host, p, _ := net.SplitHostPort(c.IslandListen)
		port, _ := strconv.Atoi(p)
		c.IslandRaftListen = net.JoinHostPort(host, strconv.Itoa(port+servers))
		c.CleanInterval = -1
		if tune != nil {
			tune(c)
		}
	})
	return cl
}

// islandLeaders returns, by island id, the child process serving it now
// (the map's registration of its leader).
func islandLeaders(t *testing.T, cl *devcluster.Cluster, conn *connect.Conn) map[uint32]*devcluster.Child {
	t.Helper()
	if err := conn.View.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := map[uint32]*devcluster.Child{}
	for _, is := range conn.View.Map().Islands {
		for _, c := range cl.Children {
			if c.PID() == is.PID && is.State == cluster.StateUp {
				out[is.ID] = c
			}
		}
	}
	return out
}

// waitPreferredLeaders waits until island k is served by island server k
// (the placement's preferred leader), so a test knows whom it kills.
func waitPreferredLeaders(t *testing.T, cl *devcluster.Cluster, conn *connect.Conn, islands int) {
	t.Helper()
	waitEvent(t, "every island led by its preferred server", func() error {
		ls := islandLeaders(t, cl, conn)
		for k := 1; k <= islands; k++ {
			if c := ls[uint32(k)]; c == nil || c.Name != fmt.Sprintf("island%d", k) {
				return fmt.Errorf("island %d led by %v", k, c)
			}
		}
		return nil
	})
}

// storm runs workers that create, write and rename files through the
// mount, each in its own directory, until stop closes; it records what
// every successful operation left (path -> bytes), the longest a
// successful operation took, and the failures.
type storm struct {
	mu       sync.Mutex
	want     map[string][]byte
	gone     map[string]bool
	errs     []error
	longest  time.Duration
	ops      int
	wg       sync.WaitGroup
	stop     chan struct{}
	dirCount int
}

func startStorm(t *testing.T, mnt string, workers int) *storm {
	s := &storm{want: map[string][]byte{}, gone: map[string]bool{}, stop: make(chan struct{}), dirCount: workers}
	for w := range workers {
		dir := filepath.Join(mnt, fmt.Sprintf("w%d", w))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			r := newRand(uint64(w) + 17)
			for i := 0; ; i++ {
				select {
				case <-s.stop:
					return
				default:
				}
				data := randBytes(r, []int{100, 5000, 30000, 200000}[i%4])
				p := filepath.Join(dir, fmt.Sprintf("f%05d", i))
				start := time.Now()
				err := os.WriteFile(p, data, 0o644)
				s.note(time.Since(start), err, func() { s.want[p] = data })
				if err != nil || i%3 != 0 {
					continue
				}
				q := filepath.Join(dir, fmt.Sprintf("r%05d", i))
				start = time.Now()
				err = os.Rename(p, q)
				s.note(time.Since(start), err, func() {
					delete(s.want, p)
					s.gone[p] = true
					s.want[q] = data
				})
			}
		}()
	}
	return s
}

func (s *storm) note(d time.Duration, err error, ok func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops++
	if err != nil {
		s.errs = append(s.errs, err)
		return
	}
	s.longest = max(s.longest, d)
	ok()
}

func (s *storm) halt() {
	close(s.stop)
	s.wg.Wait()
}

// check reads back every file the storm's successful operations left
// and checks that renamed-away names are gone.
func (s *storm) check(t *testing.T) {
	t.Helper()
	for p, data := range s.want {
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes, %v; want the %d written", p, len(got), err, len(data))
		}
	}
	for p := range s.gone {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s renamed away, still there: %v", p, err)
		}
	}
}

// TestReplicatedIslandLeaderKill9 kills -9 the island server leading an
// island in the middle of a create/write/rename storm through the FUSE
// mount: every operation that returned success is there afterwards, no
// operation fails (they wait for the new leader), fsck is clean, and the
// killed server catches up when it returns.
func TestReplicatedIslandLeaderKill9(t *testing.T) {
	fuseUsable(t)
	cl := startReplicated(t, 5, 3, 3, nil)
	ctx := context.Background()
	conn := dialDev(t, cl)
	waitPreferredLeaders(t, cl, conn, 3)
	_, mnt := mountFS(t, conn.FS)

	s := startStorm(t, mnt, 6)
	time.Sleep(2 * time.Second)
	victim := cl.Child("island2")
	victim.Kill()
	killed := time.Now()
	t.Logf("killed island server 2 (leader of island 2) after %d operations", s.ops)
	time.Sleep(6 * time.Second)
	s.halt()
	t.Logf("%d operations, %d failed, the slowest successful one took %v", s.ops, len(s.errs), s.longest.Round(time.Millisecond))
	if len(s.errs) > 0 {
		t.Fatalf("%d operations failed across the failover, first: %v", len(s.errs), s.errs[0])
	}
	s.check(t)
	leaders := islandLeaders(t, cl, conn)
	if c := leaders[2]; c == nil || c.Name == "island2" {
		t.Fatalf("island 2 is led by %v after its leader was killed", c)
	}
	t.Logf("island 2 failed over to %s within %v", leaders[2].Name, time.Since(killed).Round(time.Millisecond))

	if _, err := cl.Restart(ctx, "island2"); err != nil {
		t.Fatal(err)
	}
	rep, err := fsck.Run(ctx, conn.View.Map(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() {
		t.Fatalf("fsck: %v", rep.Problems())
	}
	// The returned server takes its island back (preferred leader) with
	// everything: the files read the same through the mount after it.
	waitPreferredLeaders(t, cl, conn, 3)
	s.check(t)
}
