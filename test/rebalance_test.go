package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/cleaner"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/devcluster"
)

// slotUsage is every storage slot's used bytes (committed fragments),
// as its server reports them.
func slotUsage(t *testing.T, conn *connect.Conn) map[uint16]int64 {
	t.Helper()
	out := map[uint16]int64{}
	for _, s := range conn.Data.Slots() {
		st, err := conn.Data.ServerStats(context.Background(), s.ID)
		if err != nil {
			t.Fatalf("stats of slot %d: %v", s.ID, err)
		}
		out[s.ID] = int64(st.UsedBytes)
	}
	return out
}

// TestStorageServerJoinsAndFillsUp: a sixth storage server joins a
// 5-server cluster holding data: the map takes it at once and new
// stripes include it; `atoll clean --rebalance` passes move old data
// until every server's used bytes are within 10% of the mean; every
// file reads back exact, fsck is clean, and with one of the old servers
// killed afterwards everything still reads.
func TestStorageServerJoinsAndFillsUp(t *testing.T) {
	cl, base := startDev(t, 5, 2, 1, func(c *devcluster.Config) { c.CleanInterval = -1 })
	conn := dialDev(t, cl)
	ctx := context.Background()
	// A long-lived client follows the map, as the mount does.
	wctx, stop := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); conn.Watch(wctx, 200*time.Millisecond) }()
	t.Cleanup(func() { stop(); <-watched })
	r := newRand(2020)
	want := map[string][]byte{}
	for i := range 24 {
		p := fmt.Sprintf("/old%02d", i)
		want[p] = randBytes(r, 1<<20+r.IntN(1<<20))
		if err := conn.FS.WriteFile(ctx, root, p, want[p], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := slotUsage(t, conn)
	t.Logf("used bytes on 5 servers: %v", before)

	// The sixth server: a new slot number, started like any other.
	dir := filepath.Join(t.TempDir(), "storage5")
	child, err := devcluster.Start(ctx, devcluster.ChildSpec{
		Name: "storage5", Exe: atoll(t),
		Args: []string{"storage", "--dir", dir, "--slot", "5", "--listen", fmt.Sprintf("127.0.0.1:%d", base+2+5+2),
			"--manager", cl.Manager, "--key", cl.KeyPath, "--log-level", "warn"},
		AddrFile: dir + ".addr",
		Output:   os.Stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(child.Kill)
	deadline := time.Now().Add(20 * time.Second)
	for len(conn.Data.Slots()) < 6 {
		if time.Now().After(deadline) {
			t.Fatalf("the client never saw slot 5: %v", conn.Data.Slots())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// New stripes include it at once.
	for i := range 6 {
		p := fmt.Sprintf("/new%02d", i)
		want[p] = randBytes(r, 1<<20)
		if err := conn.FS.WriteFile(ctx, root, p, want[p], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if u := slotUsage(t, conn); u[5] == 0 {
		t.Fatalf("files written after slot 5 joined put nothing on it: %v", u)
	}
	if s := cleaner.Spread(slotUsage(t, conn)); s <= cleaner.DefaultTolerance {
		t.Fatalf("the cluster is already balanced (%.2f): the test would test nothing", s)
	}

	// A dry run plans moves off the old servers and changes nothing.
	planned := slotUsage(t, conn)
	out, err := exec.Command(atoll(t), "clean", "--cluster", cl.Manager, "--grace", "1ns", "--unsafe-grace", "--rebalance",
		"--dry-run", "--json", "--log-level", "warn").Output()
	if err != nil {
		t.Fatalf("atoll clean --rebalance --dry-run: %v\n%s", err, out)
	}
	var dry cleaner.Report
	if err := json.Unmarshal(out, &dry); err != nil {
		t.Fatalf("report %q: %v", out, err)
	}
	if !dry.DryRun || dry.PlannedMoves == 0 || dry.PlannedBytes == 0 || len(dry.PlannedAvoid) == 0 || dry.StorageImbalance <= cleaner.DefaultTolerance {
		t.Fatalf("dry run: %+v", dry)
	}
	for _, a := range dry.PlannedAvoid {
		if a == 5 {
			t.Fatalf("the plan avoids the new server: %v", dry.PlannedAvoid)
		}
	}
	if u := slotUsage(t, conn); fmt.Sprint(u) != fmt.Sprint(planned) {
		t.Fatalf("a dry run changed the servers: %v, then %v", planned, u)
	}

	// Rebalancing passes, as an operator (or the manager's cleaner) runs them.
	var moved int64
	for pass := 1; ; pass++ {
		cmd := exec.Command(atoll(t), "clean", "--cluster", cl.Manager, "--grace", "1ns", "--unsafe-grace", "--rebalance",
			"--json", "--log-level", "warn")
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("atoll clean --rebalance: %v\n%s", err, out)
		}
		var rep cleaner.Report
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("report %q: %v", out, err)
		}
		moved += rep.RebalancedBytes
		used := slotUsage(t, conn)
		t.Logf("pass %d: imbalance %.3f at its start, moved %d stripes (%d bytes), used now %v (spread %.3f)",
			pass, rep.StorageImbalance, rep.RebalancedStripes, rep.RebalancedBytes, used, cleaner.Spread(used))
		if cleaner.Spread(used) <= cleaner.DefaultTolerance {
			break
		}
		if pass == 12 { // the planner's simulation needs at most 8 on data like this
			t.Fatalf("not balanced after %d passes: %v", pass, used)
		}
	}
	if moved == 0 {
		t.Fatal("balanced without moving anything")
	}
	checkFiles(t, conn.FS, want)
	fsckClean(t, conn)

	// Everything still reads with one of the old servers gone (the
	// rebalanced stripes keep their redundancy).
	cl.Child("storage1").Kill()
	<-cl.Child("storage1").Done()
	checkFiles(t, conn.FS, want)
}
