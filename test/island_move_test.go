package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/filelock"
	"github.com/atoll-fs/atoll/internal/islandload"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/testenv"
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
	// Moves as fast as they go (the duty cycle is TestIslandsGrowWhileServing's).
	cl, conn, mnt := mountReplicated(t, func(c *devcluster.Config) { c.MoveDuty = 1 })
	ctx := context.Background()
	dirs := []string{dirOnIsland(t, conn, mnt, 1), dirOnIsland(t, conn, mnt, 1), dirOnIsland(t, conn, mnt, 2), dirOnIsland(t, conn, mnt, 3)}
	s := startStorm(t, mnt, 6, dirs...)
	time.Sleep(time.Second)

	// A lock and an unlinked open file on island 1 move with its
	// entries: another client still finds the lock held, and the
	// descriptor still reads the file.
	other := dialDev(t, cl)
	lockedPath, heldPath := filepath.Join(dirs[0], "locked"), filepath.Join(dirs[0], "held-open")
	for _, p := range []string{lockedPath, heldPath} {
		if err := os.WriteFile(p, []byte("moves with its entry"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lf := openRW(t, lockedPath)
	if _, err := posixLock(lf, unix.F_SETLK, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	hf, err := os.Open(heldPath)
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close()
	var hst syscall.Stat_t
	if err := syscall.Fstat(int(hf.Fd()), &hst); err != nil {
		t.Fatal(err)
	}
	if d, name, err := other.FS.ResolveParent(ctx, root, strings.TrimPrefix(heldPath, mnt)); err != nil {
		t.Fatal(err)
	} else if err := other.FS.Unlink(ctx, root, d.Ino, name); err != nil {
		t.Fatal(err)
	}
	locked, err := other.FS.Resolve(ctx, root, strings.TrimPrefix(lockedPath, mnt))
	if err != nil {
		t.Fatal(err)
	}
	otherLock := filelock.Lock{Owner: filelock.Owner{ID: 1}, Kind: filelock.POSIX, Type: filelock.Write, End: filelock.MaxEnd}

	out := islandCmd(t, managerAddr(cl.Manager), "remove", "1", "--dry-run")
	t.Logf("dry run: %s", out)
	if m, _ := conn.Cluster.Map(ctx, 0); len(m.Moves) != 0 || entryCounts(m)[1] == 0 {
		t.Fatalf("a dry run changed the map: moves %v, entries %v", m.Moves, entryCounts(m))
	}
	m0, err := conn.Cluster.Map(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	t.Logf("remove: %s", islandCmd(t, managerAddr(cl.Manager), "remove", "1"))
	_, planned, err := cluster.PlanIslandMoves(m0, []uint32{2, 3})
	if err != nil {
		t.Fatal(err)
	}
	moveJob(t, conn, "island entry moves", len(planned))
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
	if _, err := other.FS.SetLock(ctx, root, locked.Ino, otherLock, false, nil); !errors.Is(err, metawire.ErrWouldBlock) {
		t.Fatalf("another client's lock on a file locked before its entry moved: %v, want EWOULDBLOCK", err)
	}
	if b, err := io.ReadAll(hf); err != nil || string(b) != "moves with its entry" {
		t.Fatalf("the unlinked open file after its entry moved: %q, %v", b, err)
	}
	if err := hf.Close(); err != nil {
		t.Fatal(err)
	}
	waitReclaimed(t, other.FS, hst.Ino)
	if _, err := posixLock(lf, unix.F_SETLK, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := other.FS.SetLock(ctx, root, locked.Ino, otherLock, false, nil); err != nil {
		t.Fatalf("the lock after its holder's unlock, entry moved: %v", err)
	}
	if err := other.FS.Unlock(ctx, root, locked.Ino, otherLock); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)

	start = time.Now()
	t.Logf("add: %s", islandCmd(t, managerAddr(cl.Manager), "add", "1"))
	t.Logf("island 1 added back in %v", time.Since(start).Round(time.Millisecond))
	time.Sleep(time.Second)
	s.end(t, "across the moves")
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

// TestIslandMoveKill9: entry moves from island 1 to island 2 (both
// replicated) under a FUSE storm, with kill -9 of the source's leader at
// each of its move failpoints (after the base copy, after the freeze,
// after the copy, after the flip), of the destination's leader after it applied the records,
// and of the manager right after it recorded a move. Each time the move
// completes (another replica takes over the island and resumes from the
// replicated markers, or the restarted manager serves the map), no
// operation of the storm fails, every file reads back exact and fsck is
// clean.
func TestIslandMoveKill9(t *testing.T) {
	fuseUsable(t)
	cl, conn, mnt := mountReplicated(t, func(c *devcluster.Config) { c.MoveDuty = 1 })
	ctx := context.Background()
	s := startStorm(t, mnt, 4, dirOnIsland(t, conn, mnt, 1), dirOnIsland(t, conn, mnt, 1), dirOnIsland(t, conn, mnt, 2))
	// moveOne records a move of island 1's entry holding the most of the
	// storm's directories' buckets... any entry of island 1 will do: the
	// storm's directories were made on island 1, so entries there are
	// busy.
	moveOne := func() cluster.EntryMove {
		t.Helper()
		m, err := conn.Cluster.Map(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		for e, id := range m.Table.Entries {
			if id == 1 {
				mv := cluster.EntryMove{Entry: uint32(e), From: 1, To: 2}
				if _, err := conn.Cluster.MoveEntries(ctx, []cluster.EntryMove{mv}); err != nil {
					t.Fatal(err)
				}
				return mv
			}
		}
		t.Fatal("island 1 has no entry left")
		return cluster.EntryMove{}
	}
	waitDone := func(mv cluster.EntryMove) {
		t.Helper()
		waitEvent(t, fmt.Sprintf("entry %d moved to island 2", mv.Entry), func() error {
			m, err := conn.Cluster.Map(ctx, 0)
			if err != nil {
				return err
			}
			if int(mv.Entry) >= len(m.Table.Entries) {
				return fmt.Errorf("a map of epoch %d without the table (a manager starting)", m.Epoch)
			}
			if len(m.Moves) > 0 || m.Table.Entries[mv.Entry] != 2 {
				return fmt.Errorf("moves %v, entry %d is island %d's", m.Moves, mv.Entry, m.Table.Entries[mv.Entry])
			}
			return nil
		})
	}
	for _, fp := range []struct{ server, name string }{
		{"island1", "meta.move.afterBase"},
		{"island1", "meta.move.afterFreeze"},
		{"island1", "meta.move.afterCopy"},
		{"island1", "meta.move.afterFlip"},
		{"island2", "meta.move.afterImport"},
	} {
		victim := cl.Child(fp.server)
		victim.Kill()
		if _, err := cl.RestartWith(ctx, fp.server, "ATOLL_FAILPOINTS="+fp.name+"=crash"); err != nil {
			t.Fatal(err)
		}
		waitPreferredLeaders(t, cl, conn, 3)
		mv := moveOne()
		select {
		case <-cl.Child(fp.server).Done():
		case <-time.After(60 * time.Second):
			t.Fatalf("failpoint %s never fired", fp.name)
		}
		crashed := time.Now()
		waitDone(mv)
		t.Logf("%s: %s crashed there; the move completed %v later", fp.name, fp.server, time.Since(crashed).Round(time.Millisecond))
		if _, err := cl.RestartWith(ctx, fp.server); err != nil { // without the failpoint
			t.Fatal(err)
		}
		waitPreferredLeaders(t, cl, conn, 3)
	}
	// The manager dies right after recording a move.
	mv := moveOne()
	cl.Child("manager").Kill()
	<-cl.Child("manager").Done()
	if _, err := cl.Restart(ctx, "manager"); err != nil {
		t.Fatal(err)
	}
	waitDone(mv)
	time.Sleep(time.Second)
	s.end(t, "during the moves")
	fsckClean(t, conn)
}

// TestIslandsGrowWhileServing: a cluster of 2 single-copy islands grows
// to 4 (two new island processes start, register, and `atoll island add`
// gives each its share) and shrinks to 3 (`atoll island remove 2`) while
// a create/write/rename storm runs through the FUSE mount: no operation
// fails, every file reads back exact, renamed-away names stay gone, the
// table is even after each step and fsck is clean. A second client that
// never refreshes its map on its own reads the files right afterwards
// (redirected, never a wrong answer). The islands' moves take a tenth
// of the time (duty cycle 0.1).
func TestIslandsGrowWhileServing(t *testing.T) {
	fuseUsable(t)
	// Moves throttled (a tenth of the time), not at the slower default.
	cl, base := startDev(t, 5, 2, 2, func(c *devcluster.Config) { c.IslandReplicas = 1; c.CleanInterval = -1; c.MoveDuty = 0.1 })
	ctx := context.Background()
	conn := dialDev(t, cl)
	even := func(ids ...uint32) {
		t.Helper()
		m, err := conn.Cluster.Map(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		c := entryCounts(m)
		lo, hi := len(m.Table.Entries), 0
		for _, id := range ids {
			lo, hi = min(lo, c[id]), max(hi, c[id])
		}
		if hi-lo > 1 || len(m.Moves) != 0 || lo == 0 {
			t.Fatalf("entries %v over islands %v, moves %v", c, ids, m.Moves)
		}
		t.Logf("entries: %v", c)
	}
	// The new islands start (and are stopped at the end after the
	// mount, which syncs with them at unmount).
	for id := uint32(3); id <= 4; id++ {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("island%d", id))
		child, err := devcluster.Start(ctx, devcluster.ChildSpec{
			Name: fmt.Sprintf("island%d", id), Exe: atoll(t),
			Args: []string{"meta", "--dir", dir, "--id", fmt.Sprint(id), "--listen", fmt.Sprintf("127.0.0.1:%d", base+2+5+2+int(id)-3),
				"--manager", cl.Manager, "--key", cl.KeyPath, "--log-level", "warn"},
			AddrFile: dir + ".addr",
			Output:   os.Stderr,
			NoWait:   true,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(child.Kill)
		waitEvent(t, fmt.Sprintf("island %d registered and up", id), func() error {
			m, err := conn.Cluster.Map(ctx, 0)
			if err != nil {
				return err
			}
			if is, ok := m.Island(id); !ok || is.State != cluster.StateUp {
				return fmt.Errorf("island %d: %+v", id, is)
			}
			return nil
		})
	}
	_, mnt := mountFS(t, conn.FS)
	s := startStorm(t, mnt, 4, dirOnIsland(t, conn, mnt, 1), dirOnIsland(t, conn, mnt, 2))
	// fsx on a file of island 2, whose entries all move by the end.
	fx := startFsx(t, dirOnIsland(t, conn, mnt, 2))
	time.Sleep(time.Second)
	// A client that never looks at the map on its own: after the moves
	// it holds an old one, and every answer it gets must still be right.
	stale := dialDev(t, cl)
	staleEpoch := stale.View.Epoch()
	for id := uint32(3); id <= 4; id++ {
		t.Logf("add %d: %s", id, islandCmd(t, managerAddr(cl.Manager), "add", fmt.Sprint(id)))
	}
	even(1, 2, 3, 4)
	t.Logf("remove 2: %s", islandCmd(t, managerAddr(cl.Manager), "remove", "2"))
	even(1, 3, 4)
	time.Sleep(time.Second)
	s.halt()
	fx.end(t)
	checked := 0
	for p, data := range s.want {
		rel, err := filepath.Rel(mnt, p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := stale.FS.ReadFile(ctx, metawire.Cred{}, "/"+rel)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s through a client with the map of epoch %d: %d bytes, %v; want the %d written", rel, staleEpoch, len(got), err, len(data))
		}
		if checked++; checked == 200 {
			break
		}
	}
	if stale.View.Epoch() <= staleEpoch {
		t.Fatalf("the stale client still has epoch %d", stale.View.Epoch())
	}
	t.Logf("a client with the map of epoch %d read %d files right (its map is now epoch %d)", staleEpoch, checked, stale.View.Epoch())
	s.end(t, "across the moves")
	fsckClean(t, conn)
}

// fsxRun runs fsx rounds (fsxRoundOps operations each, a new seed each
// round) on one file until end, failing the test on any miscompare.
type fsxRun struct {
	stop   chan struct{}
	done   chan struct{}
	rounds int
	err    error
}

const fsxRoundOps = 2000

func startFsx(t *testing.T, dir string) *fsxRun {
	t.Helper()
	if _, err := exec.LookPath("fsx"); err != nil {
		testenv.Missing(t, "fsx is not installed (make setup installs it: cargo install fsx)")
	}
	conf, err := filepath.Abs("../internal/fusefs/testdata/fsx.toml")
	if err != nil {
		t.Fatal(err)
	}
	f := &fsxRun{stop: make(chan struct{}), done: make(chan struct{})}
	artifacts := t.TempDir()
	go func() {
		defer close(f.done)
		for seed := 1; ; seed++ {
			select {
			case <-f.stop:
				return
			default:
			}
			out, err := exec.Command("fsx", "-f", conf, "-N", strconv.Itoa(fsxRoundOps), "-S", strconv.Itoa(seed),
				"-P", artifacts, filepath.Join(dir, "fsx.data")).CombinedOutput()
			if err != nil {
				tail := out[max(0, len(out)-3000):]
				f.err = fmt.Errorf("fsx round %d (seed %d): %v\n%s", f.rounds+1, seed, err, tail)
				return
			}
			f.rounds++
		}
	}()
	return f
}

// end stops after the round running and fails the test if any round
// failed or none ran.
func (f *fsxRun) end(t *testing.T) {
	t.Helper()
	close(f.stop)
	<-f.done
	if f.err != nil {
		t.Fatal(f.err)
	}
	if f.rounds == 0 {
		t.Fatal("no fsx round completed")
	}
	t.Logf("fsx: %d rounds of %d operations, no miscompare", f.rounds, fsxRoundOps)
}

// TestIslandRebalanceByLoad: a storm in six directories of island 1
// (single-copy islands) loads it alone. `atoll island rebalance
// --by-load --dry-run` measures each entry's operations per second and
// plans moves off island 1 only; the manager's balancer (run here in the
// test's process, with short periods) finds the islands unbalanced twice
// in a row and moves entries; a second measure shows the islands' spread
// of load fell. The storm loses nothing and fsck is clean.
func TestIslandRebalanceByLoad(t *testing.T) {
	fuseUsable(t)
	cl, _ := startDev(t, 5, 3, 0, func(c *devcluster.Config) { c.IslandReplicas = 1; c.CleanInterval = -1; c.MoveDuty = 0.1 })
	ctx := context.Background()
	conn := dialDev(t, cl)
	_, mnt := mountFS(t, conn.FS)
	var dirs []string
	for range 6 {
		dirs = append(dirs, dirOnIsland(t, conn, mnt, 1))
	}
	s := startStorm(t, mnt, 6, dirs...)
	time.Sleep(time.Second)
	sample := func() islandload.Load {
		t.Helper()
		m, err := conn.Cluster.Map(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		l, err := islandload.Sample(ctx, m, testKey, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	before := sample()
	out := islandCmd(t, managerAddr(cl.Manager), "rebalance", "--by-load", "--window", "2s", "--tolerance", "0.2", "--json", "--dry-run")
	t.Logf("rebalance --dry-run: %s", out)
	var plan struct {
		Moves []cluster.EntryMove `json:"moves"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Moves) == 0 {
		t.Fatalf("no moves planned with load %v", before.Islands)
	}
	for _, mv := range plan.Moves {
		if mv.From != 1 {
			t.Fatalf("a move off island %d, which was not the loaded one: %v", mv.From, plan.Moves)
		}
	}
	if m, _ := conn.Cluster.Map(ctx, 0); len(m.Moves) != 0 {
		t.Fatalf("a dry run recorded moves: %v", m.Moves)
	}
	bal, err := islandload.NewBalancer(islandload.BalancerConfig{Client: conn.Cluster, Key: testKey, Leader: func() bool { return true },
		Every: time.Minute, Window: 2 * time.Second, Threshold: 0.3, Sustain: 2, MinOps: 10})
	if err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 2; round++ {
		if err := bal.Round(ctx); err != nil {
			t.Fatal(err)
		}
		m, err := conn.Cluster.Map(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if moving := len(m.Moves) > 0 || entryCounts(m)[1] < entryCounts(m)[2]-2; moving != (round == 2) {
			t.Fatalf("after balancer round %d: moves %v, entries %v", round, m.Moves, entryCounts(m))
		}
	}
	waitEvent(t, "moves done", func() error {
		m, err := conn.Cluster.Map(ctx, 0)
		if err != nil {
			return err
		}
		if len(m.Moves) > 0 {
			return fmt.Errorf("%d moves pending", len(m.Moves))
		}
		return nil
	})
	after := sample()
	t.Logf("load (ops/s) before %v, spread %.2f; after %v, spread %.2f", before.Islands, before.Spread(), after.Islands, after.Spread())
	if after.Spread() >= before.Spread()/2 {
		t.Fatalf("spread of load %.2f before, %.2f after", before.Spread(), after.Spread())
	}
	s.end(t, "during the moves")
	fsckClean(t, conn)
}
