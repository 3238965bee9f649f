package test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/cluster"
)

// islandCmd runs `atoll island ARGS` against cl and fails the test if it
// fails.
func islandCmd(t *testing.T, cl interface{ ManagerAddr() string }, args ...string) string {
	t.Helper()
	cmd := exec.Command(atoll(t), append(append([]string{"island"}, args...), "--cluster", cl.ManagerAddr(), "--log-level", "warn", "--timeout", "2m")...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("atoll island %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// entryCounts is the number of table entries of each island.
func entryCounts(m *cluster.Map) map[uint32]int {
	out := map[uint32]int{}
	for _, id := range m.Table.Entries {
		out[id]++
	}
	return out
}

// TestIslandsShrinkAndGrowWhileServing: with a create/write/rename storm
// running through the FUSE mount (leases and kept-back creates on),
// island 1 of 3 (replicated) is removed: its entries move to the other
// two, it is marked out; then it is added back and takes its share
// again. No operation of the storm fails, every file it wrote reads back
// exact, renamed-away names stay gone, fsck is clean, and the table is
// even (entry counts within one) after each step.
func TestIslandsShrinkAndGrowWhileServing(t *testing.T) {
	fuseUsable(t)
	cl := startReplicated(t, 5, 3, 3, nil)
	ctx := context.Background()
	conn := dialDev(t, cl)
	waitPreferredLeaders(t, cl, conn, 3)
	_, mnt := mountFS(t, conn.FS)
	dirs := []string{dirOnIsland(t, conn, mnt, 1), dirOnIsland(t, conn, mnt, 1), dirOnIsland(t, conn, mnt, 2), dirOnIsland(t, conn, mnt, 3)}
	s := startStorm(t, mnt, 6, dirs...)
	time.Sleep(time.Second)

	out := islandCmd(t, managerAddr(cl.Manager), "remove", "1", "--dry-run")
	t.Logf("dry run: %s", out)
	if m, _ := conn.Cluster.Map(ctx, 0); len(m.Moves) != 0 || entryCounts(m)[1] == 0 {
		t.Fatalf("a dry run changed the map: moves %v, entries %v", m.Moves, entryCounts(m))
	}
	start := time.Now()
	t.Logf("remove: %s", islandCmd(t, managerAddr(cl.Manager), "remove", "1"))
	t.Logf("island 1 removed in %v, %d storm operations so far", time.Since(start).Round(time.Millisecond), s.count())
	m, err := conn.Cluster.Map(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	counts := entryCounts(m)
	if counts[1] != 0 || len(m.Moves) != 0 || absDiff(counts[2], counts[3]) > 1 {
		t.Fatalf("after removing island 1: entries %v, moves %v", counts, m.Moves)
	}
	if is, _ := m.Island(1); is.State != cluster.StateOut {
		t.Fatalf("island 1 is %s after its removal", is.State)
	}
	time.Sleep(time.Second)

	start = time.Now()
	t.Logf("add: %s", islandCmd(t, managerAddr(cl.Manager), "add", "1"))
	t.Logf("island 1 added back in %v", time.Since(start).Round(time.Millisecond))
	time.Sleep(time.Second)
	s.halt()
	t.Logf("%d operations, %d failed, the slowest successful one took %v", s.ops, len(s.errs), s.longest.Round(time.Millisecond))
	if len(s.errs) > 0 {
		t.Fatalf("%d operations failed across the moves, first: %v", len(s.errs), s.errs[0])
	}
	s.check(t)
	if m, err = conn.Cluster.Map(ctx, 0); err != nil {
		t.Fatal(err)
	}
	counts = entryCounts(m)
	lo, hi := len(m.Table.Entries), 0
	for _, id := range []uint32{1, 2, 3} {
		lo, hi = min(lo, counts[id]), max(hi, counts[id])
	}
	if hi-lo > 1 || len(m.Moves) != 0 {
		t.Fatalf("after adding island 1 back: entries %v, moves %v", counts, m.Moves)
	}
	fsckClean(t, conn)
}

func absDiff(a, b int) int { return max(a-b, b-a) }

type managerAddr string

func (a managerAddr) ManagerAddr() string { return string(a) }
