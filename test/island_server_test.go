package test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/devcluster"
)

// TestIslandServerAddRemove grows a cluster of 3 island servers (3
// islands × 3 replicas) by a fourth started with --join, creates a fourth
// island (a new replica group) and gives it its share of the table, then
// removes the first server, all while a create/write/rename/unlink storm
// runs through the FUSE mount: the new server gets its share of
// replicas (each caught up by raft before it votes), the removed one's
// replicas move off and its replica directories are deleted; then the
// removed server and one more are killed and every file still reads,
// fsck clean.
func TestIslandServerAddRemove(t *testing.T) {
	fuseUsable(t)
	// Entry moves unthrottled: this test is about replicas.
	cl, conn, dataDir, dir4 := joinCluster(t, 1)
	ctx := context.Background()
	m, err := conn.Cluster.Map(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Replicas) != 3 || len(m.IslandServers) != 4 {
		t.Fatalf("the static placement and the joined server were not recorded: servers %+v sets %+v", m.IslandServers, m.Replicas)
	}
	_, mnt := mountFS(t, conn.FS)
	s := startStorm(t, mnt, 4)
	if n := replicaDirs(t, dir4); n != 0 {
		t.Fatalf("a joining server opened %d replicas before it was given any", n)
	}
	t.Log(islandCmd(t, managerAddr(cl.Manager), "server", "add", "4"))
	m = placement(t, conn, 4)
	held := 0
	for _, set := range m.Replicas {
		if slices.Contains(set.Servers, 4) {
			held++
		}
	}
	if held < 2 {
		t.Fatalf("server 4 holds %d replicas: %+v", held, m.Replicas)
	}
	if n := replicaDirs(t, dir4); n != held {
		t.Fatalf("server 4 has %d replica directories for %d replicas", n, held)
	}
	t.Logf("after add: %+v (%d operations so far)", m.Replicas, s.count())
	moveJob(t, conn, "island replica moves", 2)
	after := s.count()

	// A fourth island: a new replica group on the servers holding fewest
	// replicas, then its share of the table.
	t.Log(islandCmd(t, managerAddr(cl.Manager), "create"))
	t.Log(islandCmd(t, managerAddr(cl.Manager), "add", "4"))
	if m, err = conn.Cluster.Map(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if c := entryCounts(m); c[4] == 0 || len(m.Moves) != 0 {
		t.Fatalf("island 4 after its add: entries %v, moves %v", c, m.Moves)
	}
	if p, ok := m.Placement(4); !ok || len(p.Servers) != 3 || !slices.Equal(p.Servers, p.Origin) {
		t.Fatalf("island 4 placed %+v", p)
	}

	t.Logf("island 4 created and given %d entries (%d operations meanwhile)", entryCounts(m)[4], s.count()-after)
	t.Log(islandCmd(t, managerAddr(cl.Manager), "server", "remove", "1"))
	m = placement(t, conn, 3)
	for _, set := range m.Replicas {
		if slices.Contains(set.Servers, 1) {
			t.Fatalf("island %d still placed on removed server 1: %v", set.Island, set.Servers)
		}
	}
	if sv, _ := m.IslandServer(1); !sv.Out {
		t.Fatalf("server 1 not out: %+v", sv)
	}
	waitEvent(t, "server 1's replicas deleted", func() error {
		if n := replicaDirs(t, filepath.Join(dataDir, "island", "1")); n != 0 {
			return fmt.Errorf("%d replica directories left", n)
		}
		return nil
	})
	t.Logf("after remove: %+v (%d operations so far)", m.Replicas, s.count())
	time.Sleep(time.Second)
	s.end(t, "replicas moving between island servers")

	// The removed server can go, and then any one of the others.
	cl.Child("island1").Kill()
	cl.Child("island2").Kill()
	s.check(t)
	fsckClean(t, dialDev(t, cl)) // a fresh client: no cached leaders
	t.Logf("%d files checked with servers 1 (removed) and 2 killed", len(s.want))
}

// joinCluster starts 3 island servers (3 islands × 3 replicas; entry
// moves at duty, 0: the default) and a fourth island server that joins
// (--join) and has registered. It returns the cluster, a client, the
// cluster's data directory and the fourth server's data directory.
func joinCluster(t *testing.T, duty float64) (cl *devcluster.Cluster, conn *connect.Conn, dataDir, dir4 string) {
	t.Helper()
	const storage, servers = 5, 3
	cl, base := startDev(t, storage, servers, servers+2, func(c *devcluster.Config) {
		c.IslandReplicas = 3
		host, p, _ := net.SplitHostPort(c.IslandListen)
		port, _ := strconv.Atoi(p)
		c.IslandRaftListen = net.JoinHostPort(host, strconv.Itoa(port+servers))
		c.CleanInterval = -1
		c.MoveDuty = duty
		dataDir = c.DataDir
	})
	ctx := context.Background()
	conn = dialDev(t, cl)
	waitPreferredLeaders(t, cl, conn, 3)
	dir4 = filepath.Join(dataDir, "island", "4")
	raft4 := fmt.Sprintf("127.0.0.1:%d", base+2+storage+2*servers+1)
	child, err := devcluster.Start(ctx, devcluster.ChildSpec{
		Name: "island4", Exe: atoll(t),
		Args: []string{"meta", "--dir", dir4, "--server-id", "4", "--join", "--listen", fmt.Sprintf("127.0.0.1:%d", base+2+storage+2*servers),
			"--raft-listen", raft4, "--manager", cl.Manager, "--key", cl.KeyPath, "--log-level", "warn"},
		AddrFile: dir4 + ".addr", Output: os.Stderr, NoWait: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Stopped after the mount a test makes later (cleanups run last in
	// first), which syncs with the islands at unmount.
	t.Cleanup(child.Kill)
	waitEvent(t, "island server 4 registered", func() error {
		m, err := conn.Cluster.Map(ctx, 0)
		if err != nil {
			return err
		}
		if sv, ok := m.IslandServer(4); !ok || sv.RaftAddr != raft4 {
			return fmt.Errorf("island servers %+v", m.IslandServers)
		}
		return nil
	})
	return cl, conn, dataDir, dir4
}

// placement waits until every island's leader reports the group the map
// places it on, checks that the replicas are spread over servers island
// servers, and returns the map.
func placement(t *testing.T, conn *connect.Conn, servers int) *cluster.Map {
	t.Helper()
	var m *cluster.Map
	waitEvent(t, "replicas where the map places them", func() error {
		st, err := conn.Cluster.Status(context.Background())
		if err != nil {
			return err
		}
		if left := cluster.ReplicasUnsettled(st); len(left) > 0 {
			return fmt.Errorf("islands %v still moving replicas", left)
		}
		m = st.Map
		return nil
	})
	load := map[uint32]int{}
	for _, set := range m.Replicas {
		for _, id := range set.Servers {
			load[id]++
		}
	}
	if len(load) != servers {
		t.Fatalf("replicas on %d servers, want %d: %+v", len(load), servers, m.Replicas)
	}
	return m
}

// moveJob checks that status reports job done, with total steps.
func moveJob(t *testing.T, conn *connect.Conn, name string, total int) {
	t.Helper()
	st, err := conn.Cluster.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range st.Jobs {
		if j.Name == name {
			// A finished batch of entry moves leaves only its summary.
			entries := name == "island entry moves" && j.Total == 0 && strings.HasPrefix(j.Summary, fmt.Sprintf("last batch: %d entries moved", total))
			if j.Phase != "" || j.Summary == "" || !entries && (j.Done != total || j.Total != total) {
				t.Fatalf("status job %+v, want %d of %d done", j, total, total)
			}
			t.Logf("status: %s: %s", name, j.Summary)
			return
		}
	}
	t.Fatalf("status lists no %q job: %+v", name, st.Jobs)
}

// replicaDirs counts the island-N replica directories under dir.
func replicaDirs(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if e.IsDir() && len(e.Name()) > 7 && e.Name()[:7] == "island-" {
			n++
		}
	}
	return n
}

// TestIslandServerAddKill9 kills -9 the leader of island 1 while island
// 1's replicas move onto a new island server (`atoll island server add`
// running): a new leader carries the move on from the raft configuration
// it finds, the killed server comes back and its now surplus replica is
// dropped once its island no longer counts it; the storm through the
// mount loses nothing and fsck is clean.
func TestIslandServerAddKill9(t *testing.T) {
	fuseUsable(t)
	cl, conn, dataDir, dir4 := joinCluster(t, 0)
	ctx := context.Background()
	_, mnt := mountFS(t, conn.FS)
	s := startStorm(t, mnt, 4)
	time.Sleep(time.Second)

	// The add runs in the background; island 1's leader (server 1, which
	// the plan takes off island 1) dies while the new replica catches up.
	type result struct {
		out []byte
		err error
	}
	added := make(chan result, 1)
	go func() {
		cmd := exec.Command(atoll(t), "island", "server", "add", "4", "--cluster", cl.Manager, "--log-level", "warn", "--timeout", "2m")
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		added <- result{out, err}
	}()
	waitEvent(t, "island 1's new replica added", func() error {
		for _, r := range replicaApplied(t, conn)[1] {
			if r.Role == "leader" && len(r.Voters) != 3 {
				return nil
			}
		}
		if n := replicaDirs(t, dir4); n > 0 {
			return nil // opened: the leader adds it within a second
		}
		return errors.New("not yet")
	})
	cl.Child("island1").Kill()
	t.Log("killed island server 1 (leader of island 1) during the replica move")
	time.Sleep(2 * time.Second)
	if _, err := cl.Restart(ctx, "island1"); err != nil {
		t.Fatal(err)
	}
	if r := <-added; r.err != nil {
		t.Fatalf("atoll island server add 4: %v\n%s", r.err, r.out)
	} else {
		t.Logf("%s", r.out)
	}
	m := placement(t, conn, 4)
	for _, set := range m.Replicas {
		if set.Island == 1 && slices.Contains(set.Servers, 1) {
			t.Fatalf("island 1 still placed on server 1: %v", set.Servers)
		}
	}
	waitEvent(t, "server 1's replica of island 1 dropped", func() error {
		if _, err := os.Stat(filepath.Join(dataDir, "island", "1", "island-1")); !os.IsNotExist(err) {
			return fmt.Errorf("island-1 on server 1: %v", err)
		}
		return nil
	})
	time.Sleep(time.Second)
	s.end(t, "across the replica move and the kill")
	fsckClean(t, dialDev(t, cl))
}
