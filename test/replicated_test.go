package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/fsck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// fsckClean waits until fsck over conn's map runs (every island serves
// again after a restart) and fails the test unless it is clean.
func fsckClean(t *testing.T, conn *connect.Conn) {
	t.Helper()
	var rep *fsck.Report
	waitEvent(t, "fsck ran", func() error {
		if err := conn.View.Refresh(context.Background()); err != nil {
			return err
		}
		r, err := fsck.Run(context.Background(), conn.View.Map(), testKey)
		rep = r
		return err
	})
	if !rep.Clean() {
		t.Fatalf("fsck: %v", rep.Problems())
	}
}

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

// mountReplicated starts a cluster of 5 storage servers and 3 island
// servers, each island replicated on all three (startReplicated), waits
// until every island is led by its preferred server, and mounts it.
func mountReplicated(t *testing.T, tune func(*devcluster.Config)) (*devcluster.Cluster, *connect.Conn, string) {
	t.Helper()
	cl := startReplicated(t, 5, 3, 3, tune)
	conn := dialDev(t, cl)
	waitPreferredLeaders(t, cl, conn, 3)
	_, mnt := mountFS(t, conn.FS)
	return cl, conn, mnt
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
// (the placement's preferred leader), so a test knows whom it kills. A
// leader registers before it serves (it may still wait for the map), so
// every island must also answer at its registered address: a test that
// then takes the managers away must not catch a leader between the two.
func waitPreferredLeaders(t *testing.T, cl *devcluster.Cluster, conn *connect.Conn, islands int) {
	t.Helper()
	waitEvent(t, "every island led by its preferred server, and serving", func() error {
		ls := islandLeaders(t, cl, conn)
		for k := 1; k <= islands; k++ {
			if c := ls[uint32(k)]; c == nil || c.Name != fmt.Sprintf("island%d", k) {
				return fmt.Errorf("island %d led by %v", k, c)
			}
		}
		for _, is := range conn.View.Map().Islands {
			if err := islandAnswers(is.Addr, is.ID); err != nil {
				return fmt.Errorf("island %d at %s: %w", is.ID, is.Addr, err)
			}
		}
		return nil
	})
}

// islandAnswers asks island id at addr for its statistics (a request
// only an island that serves answers).
func islandAnswers(addr string, id uint32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := wire.Dial(ctx, addr, wire.ClientConfig{Key: testKey, IOTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.CallRoute(ctx, id, wire.ReqID{}, metawire.OpStatFS, 0, metawire.Marshal(&metawire.Empty{}), nil, nil)
	return err
}

// storm runs workers that create, write, rename and unlink files through
// the mount, each in its own directory, until stop closes; it records what
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
	halted   sync.Once
	dirCount int
}

func startStorm(t *testing.T, mnt string, workers int, dirs ...string) *storm {
	s := &storm{want: map[string][]byte{}, gone: map[string]bool{}, stop: make(chan struct{}), dirCount: workers}
	for w := range workers {
		dir := filepath.Join(mnt, fmt.Sprintf("w%d", w))
		if w < len(dirs) {
			dir = dirs[w] // made by the caller
		} else if err := os.Mkdir(dir, 0o755); err != nil {
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
				if err == nil && i%5 == 1 {
					// Some names go again: an unlink must not come back
					// (nor its file's blocks be lost to another name).
					start = time.Now()
					err = os.Remove(p)
					s.note(time.Since(start), err, func() {
						delete(s.want, p)
						s.gone[p] = true
					})
					continue
				}
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

func (s *storm) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ops
}

func (s *storm) halt() {
	s.halted.Do(func() { close(s.stop) })
	s.wg.Wait()
}

// end halts the storm and fails the test if any of its operations failed
// or any file it left does not read back (check).
func (s *storm) end(t *testing.T, during string) {
	t.Helper()
	s.halt()
	t.Logf("%d operations, %d failed, the slowest successful one took %v", s.ops, len(s.errs), s.longest.Round(time.Millisecond))
	if len(s.errs) > 0 {
		t.Fatalf("%d operations failed %s, first: %v", len(s.errs), during, s.errs[0])
	}
	s.check(t)
}

// check reads back every file the storm's successful operations left
// and checks that renamed-away and removed names are gone.
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
			t.Fatalf("%s renamed away or removed, still there: %v", p, err)
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
	cl, conn, mnt := mountReplicated(t, nil)
	ctx := context.Background()

	s := startStorm(t, mnt, 6)
	time.Sleep(2 * time.Second)
	victim := cl.Child("island2")
	victim.Kill()
	killed := time.Now()
	t.Logf("killed island server 2 (leader of island 2) after %d operations", s.count())
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
	fsckClean(t, conn)
	// The returned server takes its island back (preferred leader) with
	// everything: the files read the same through the mount after it.
	waitPreferredLeaders(t, cl, conn, 3)
	s.check(t)
}

// replicaApplied reports, from the managers' view of the island servers'
// heartbeats, each island's replicas: server -> applied index, and the
// leader's server.
func replicaApplied(t *testing.T, conn *connect.Conn) map[uint32]map[uint32]cluster.ReplicaStats {
	t.Helper()
	st, err := conn.Cluster.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32]map[uint32]cluster.ReplicaStats{}
	for _, l := range st.Live {
		for _, r := range l.Stats.Replicas {
			if out[r.Island] == nil {
				out[r.Island] = map[uint32]cluster.ReplicaStats{}
			}
			if old, ok := out[r.Island][r.Server]; !ok || r.Applied >= old.Applied {
				out[r.Island][r.Server] = r
			}
		}
	}
	return out
}

var dirSeq atomic.Int64

// dirOnIsland creates directories under mnt until one's entries live on
// island want (its bucket's owner) and returns its path.
func dirOnIsland(t *testing.T, conn *connect.Conn, mnt string, want uint32) string {
	t.Helper()
	for k := 0; k < 200; k++ {
		name := fmt.Sprintf("on%d-%d", want, dirSeq.Add(1))
		if err := os.Mkdir(filepath.Join(mnt, name), 0o755); err != nil {
			t.Fatal(err)
		}
		a, err := conn.FS.Lookup(context.Background(), metawire.Cred{}, uint64(namespace.RootIno), name)
		if err != nil {
			t.Fatal(err)
		}
		if id, _, _ := conn.View.IslandFor(namespace.Ino(a.Ino).Bucket()); uint32(id) == want {
			return filepath.Join(mnt, name)
		}
	}
	t.Fatalf("no directory landed on island %d", want)
	return ""
}

// TestReplicatedIslandQuorumLoss: with 2 of an island's 3 replicas down
// that island refuses changes with EIO after a bounded wait while the
// islands that kept a quorum serve on; bringing one replica back makes
// it serve again with nothing lost.
func TestReplicatedIslandQuorumLoss(t *testing.T) {
	fuseUsable(t)
	// 5 island servers, 3 replicas: island k on servers k, k+1, k+2
	// (mod 5). Killing servers 1 and 2 leaves islands 1 (1,2,3) and 5
	// (5,1,2) one replica each; islands 2, 3 and 4 keep two or three.
	cl := startReplicated(t, 5, 5, 3, nil)
	ctx := context.Background()
	conn := dialDev(t, cl)
	waitPreferredLeaders(t, cl, conn, 5)
	_, mnt := mountFS(t, conn.FS)
	lost, kept := dirOnIsland(t, conn, mnt, 1), dirOnIsland(t, conn, mnt, 3)
	files := map[string][]byte{}
	r := newRand(5)
	for k := range 10 {
		for _, d := range []string{lost, kept} {
			p := filepath.Join(d, fmt.Sprintf("f%d", k))
			files[p] = randBytes(r, 1000+k*3000)
			if err := os.WriteFile(p, files[p], 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	cl.Child("island1").Kill()
	cl.Child("island2").Kill()

	// An island with a quorum serves (island 2 fails over to 3 or 4).
	p := filepath.Join(kept, "after")
	if err := os.WriteFile(p, []byte("kept a quorum"), 0o644); err != nil {
		t.Fatalf("write on an island that kept a quorum: %v", err)
	}
	files[p] = []byte("kept a quorum")
	// The island without one refuses, after a bounded wait, with EIO.
	start := time.Now()
	err := os.WriteFile(filepath.Join(lost, "refused"), []byte("x"), 0o644)
	took := time.Since(start)
	wantErrno(t, "create on an island with 1 of 3 replicas", err, syscall.EIO)
	if took > 3*client.DefaultIslandWait {
		t.Fatalf("the refusal took %v", took)
	}
	t.Logf("island 1 without a quorum refused a create with EIO after %v", took.Round(time.Millisecond))
	// Given up on: the next request there fails at once, counted
	// (client: unreachable.go), instead of waiting as long again.
	fast := conn.FS.FastFails()
	_, err = os.Stat(filepath.Join(lost, "never"))
	wantErrno(t, "stat on the island given up on", err, syscall.EIO)
	if conn.FS.FastFails() == fast {
		t.Fatalf("the stat after the refusal did not fail at once (FastFails %d): island 1 was not given up on", fast)
	}

	// One replica back: island 1 (servers 2 and 3) serves again, with
	// everything it had.
	if _, err := cl.Restart(ctx, "island2"); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, "island 1 serving again", func() error {
		return os.WriteFile(filepath.Join(lost, "back"), []byte("back"), 0o644)
	})
	files[filepath.Join(lost, "back")] = []byte("back")
	for p, want := range files {
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes, %v; want %d", p, len(got), err, len(want))
		}
	}
	if _, err := cl.Restart(ctx, "island1"); err != nil {
		t.Fatal(err)
	}
	fsckClean(t, conn)
}

// TestReplicatedIslandLostDisk: an island server whose data directory is
// deleted while the cluster serves starts empty, catches every island it
// hosts up from the others (by log or snapshot); then another server is
// killed and everything still reads.
func TestReplicatedIslandLostDisk(t *testing.T) {
	fuseUsable(t)
	var dataDir string
	cl, conn, mnt := mountReplicated(t, func(c *devcluster.Config) { dataDir = c.DataDir })
	ctx := context.Background()

	s := startStorm(t, mnt, 4)
	time.Sleep(1500 * time.Millisecond)
	victim := cl.Child("island3")
	victim.Kill()
	if err := os.RemoveAll(filepath.Join(dataDir, "island", "3")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if _, err := cl.Restart(ctx, "island3"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	s.halt()
	if len(s.errs) > 0 {
		t.Fatalf("%d operations failed, first: %v", len(s.errs), s.errs[0])
	}
	// Caught up: every island's replica on server 3 has applied what its
	// leader has.
	waitEvent(t, "server 3's replicas caught up", func() error {
		for island, reps := range replicaApplied(t, conn) {
			var leader uint64
			for _, r := range reps {
				if r.Role == "leader" {
					leader = r.Applied
				}
			}
			if r, ok := reps[3]; !ok || leader == 0 || r.Applied < leader {
				return fmt.Errorf("island %d: server 3 applied %d, leader %d", island, r.Applied, leader)
			}
		}
		return nil
	})
	// Now lose another server: islands run on the rebuilt replica.
	cl.Child("island1").Kill()
	s.check(t)
	fsckClean(t, dialDev(t, cl)) // a fresh client: no cached leaders
	t.Logf("%d files checked with server 3 rebuilt from nothing and server 1 killed", len(s.want))
}

// TestReplicationFailpoints crashes an island server at each replication
// step (a change built, not handed to raft; committed on a quorum, not
// applied; applied, not answered) in the middle of a storm through the
// mount: no operation fails or is applied twice (retries carry request
// ids), every acknowledged one is there, fsck is clean.
func TestReplicationFailpoints(t *testing.T) {
	fuseUsable(t)
	cl, conn, mnt := mountReplicated(t, nil)
	ctx := context.Background()
	// Two workers on island 1, which island server 1 leads.
	s := startStorm(t, mnt, 4, dirOnIsland(t, conn, mnt, 1), dirOnIsland(t, conn, mnt, 1))
	for _, fp := range []struct{ name, action string }{
		{"replica.beforeAppend", "40*crash"},
		{"replica.beforeApply", "150*crash"},
		{"replica.afterApply", "150*crash"},
	} {
		victim := cl.Child("island1")
		victim.Kill()
		if _, err := cl.RestartWith(ctx, "island1", "ATOLL_FAILPOINTS="+fp.name+"="+fp.action); err != nil {
			t.Fatal(err)
		}
		select {
		case <-cl.Child("island1").Done():
			t.Logf("%s: island server 1 crashed there", fp.name)
		case <-time.After(90 * time.Second):
			t.Fatalf("failpoint %s never fired", fp.name)
		}
		time.Sleep(time.Second)
		if _, err := cl.RestartWith(ctx, "island1"); err != nil { // without the failpoint
			t.Fatal(err)
		}
		waitPreferredLeaders(t, cl, conn, 3)
	}
	time.Sleep(time.Second)
	s.halt()
	t.Logf("%d operations, %d failed, the slowest successful one took %v", s.ops, len(s.errs), s.longest.Round(time.Millisecond))
	if len(s.errs) > 0 {
		t.Fatalf("%d operations failed, first: %v", len(s.errs), s.errs[0])
	}
	s.check(t)
	fsckClean(t, conn)
}

// TestIslandRaftPortRefusesStrangers: an island server's raft port
// closes a connection without a key (garbage gets no byte back), refuses
// another cluster's key and a user key (not a member) at the handshake,
// counts the refusals, and the islands go on serving.
func TestIslandRaftPortRefusesStrangers(t *testing.T) {
	var raftAddr, metrics string
	cl := startReplicated(t, 3, 3, 3, func(c *devcluster.Config) {
		raftAddr = c.IslandRaftListen
		c.MetricsListen = fmt.Sprintf("127.0.0.1:%d", freeBase(t, 8))
		metrics = c.MetricsAddrs().Islands[0]
	})
	ctx := context.Background()
	conn := dialDev(t, cl)
	closesKeyless(t, "island raft port", raftAddr, []byte{0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8})
	other, _ := auth.NewClusterKey()
	user, _ := testKey.Derive("mount", auth.CapRead|auth.CapWrite)
	for name, k := range map[string]*auth.Key{"another cluster's key": other, "a user key": user} {
		c, err := auth.Dial(raftAddr, k, 5*time.Second)
		if err == nil {
			// The handshake may complete on our side before the server
			// refuses the capability: then it closes without a byte.
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			n, rerr := io.ReadAll(c)
			c.Close()
			if len(n) > 0 || errors.Is(rerr, os.ErrDeadlineExceeded) {
				t.Errorf("island raft port kept %s: %q %v", name, n, rerr)
			}
		} else if !errors.Is(err, auth.ErrRefused) && !errors.Is(err, auth.ErrForbidden) {
			t.Logf("%s: %v", name, err)
		}
	}
	waitEvent(t, "the refusals counted", func() error {
		body := string(httpGet(t, "http://"+metrics+"/metrics"))
		for _, l := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(l, "atoll_island_raft_refused_connections_total "); ok {
				if n, _ := strconv.Atoi(v); n >= 3 {
					return nil
				}
				return fmt.Errorf("refused %s", v)
			}
		}
		return errors.New("no atoll_island_raft_refused_connections_total")
	})
	if err := conn.FS.WriteFile(ctx, metawire.Root, "/still-serving", []byte("yes"), 0o644); err != nil {
		t.Fatalf("the islands after the strangers: %v", err)
	}
}
