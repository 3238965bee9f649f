package meta

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// crashOp is a cross-island operation under test: setup builds the state
// before it, run performs it, and happened tells (by lookups) whether it
// took effect, failing the test on any half state.
type crashOp struct {
	name  string
	setup func(t *testing.T, w *threeWay) (coord, part namespace.IslandID, run func() error, happened func() bool)
}

// lookupState returns whether name exists in dir, failing on other errors.
func lookupState(t *testing.T, k *client, dir uint64, name string) bool {
	t.Helper()
	_, err := k.lookup(dir, name)
	switch {
	case err == nil:
		return true
	case errors.Is(err, metawire.ErrNotFound):
		return false
	}
	t.Fatalf("lookup %q: %v", name, err)
	return false
}

func crashOps() []crashOp {
	return []crashOp{
		{name: "mkdir", setup: func(t *testing.T, w *threeWay) (namespace.IslandID, namespace.IslandID, func() error, func() bool) {
			a, b := w.ids[0], w.ids[1]
			name := w.nameOn(w.paths[a], "m", b)
			run := func() error { _, err := w.r.mkdir(w.dirs[a].Ino, name, 0o755); return err }
			return a, b, run, func() bool { return lookupState(t, w.r, w.dirs[a].Ino, name) }
		}},
		{name: "rmdir", setup: func(t *testing.T, w *threeWay) (namespace.IslandID, namespace.IslandID, func() error, func() bool) {
			a, b := w.ids[0], w.ids[1]
			name := w.nameOn(w.paths[a], "m", b)
			must(w.r.mkdir(w.dirs[a].Ino, name, 0o755))
			run := func() error { return w.r.rmdir(w.dirs[a].Ino, name) }
			return a, b, run, func() bool { return !lookupState(t, w.r, w.dirs[a].Ino, name) }
		}},
		{name: "rename-dir", setup: func(t *testing.T, w *threeWay) (namespace.IslandID, namespace.IslandID, func() error, func() bool) {
			// /dA/x (on island C) moves to /dB/y: A coordinates, B adds the
			// entry, C changes the directory's parent.
			a, b, cc := w.ids[0], w.ids[1], w.ids[2]
			name := w.nameOn(w.paths[a], "x", cc)
			x := must(w.r.mkdir(w.dirs[a].Ino, name, 0o755))
			must(w.r.create(x.Ino, "child", 0o644))
			run := func() error { return w.r.rename(w.dirs[a].Ino, name, w.dirs[b].Ino, "y", 0) }
			return a, b, run, func() bool {
				src := lookupState(t, w.r, w.dirs[a].Ino, name)
				dst := lookupState(t, w.r, w.dirs[b].Ino, "y")
				if src == dst {
					t.Fatalf("rename half done: source %v destination %v", src, dst)
				}
				if dst {
					if p := must(w.r.lookup(x.Ino, "..")); p.Ino != w.dirs[b].Ino {
						t.Fatalf(".. is %v", p.Ino)
					}
				}
				return dst
			}
		}},
		{name: "rename-dir-participant2", setup: func(t *testing.T, w *threeWay) (namespace.IslandID, namespace.IslandID, func() error, func() bool) {
			// As above, crashing the island of the moved directory.
			a, b, cc := w.ids[0], w.ids[1], w.ids[2]
			name := w.nameOn(w.paths[a], "x", cc)
			must(w.r.mkdir(w.dirs[a].Ino, name, 0o755))
			run := func() error { return w.r.rename(w.dirs[a].Ino, name, w.dirs[b].Ino, "y", 0) }
			return a, cc, run, func() bool {
				src := lookupState(t, w.r, w.dirs[a].Ino, name)
				dst := lookupState(t, w.r, w.dirs[b].Ino, "y")
				if src == dst {
					t.Fatalf("rename half done: source %v destination %v", src, dst)
				}
				return dst
			}
		}},
		{name: "rename-file-replace", setup: func(t *testing.T, w *threeWay) (namespace.IslandID, namespace.IslandID, func() error, func() bool) {
			// A file of /dA replaces one of /dB.
			a, b := w.ids[0], w.ids[1]
			f := must(w.r.create(w.dirs[a].Ino, "f", 0o644))
			must(w.r.create(w.dirs[b].Ino, "g", 0o644))
			run := func() error { return w.r.rename(w.dirs[a].Ino, "f", w.dirs[b].Ino, "g", 0) }
			return a, b, run, func() bool {
				src := lookupState(t, w.r, w.dirs[a].Ino, "f")
				g := must(w.r.lookup(w.dirs[b].Ino, "g"))
				if src == (g.Ino == f.Ino) {
					t.Fatal("rename half done")
				}
				return !src
			}
		}},
	}
}

// expected says whether an operation crashed at a failpoint must have
// happened after recovery.
var crashPoints = []struct {
	name        string
	participant bool
	happens     bool
}{
	{FailTxAfterIntent, false, false},
	{FailTxAfterPrepare, false, false},
	{FailTxAfterDecision, false, true},
	{FailTxAfterDecide, false, true},
	{FailParticipantAfterPrepare, true, false},
	{FailParticipantBeforeApply, true, true},
	{FailParticipantAfterApply, true, true},
}

// TestCrashAtEveryFailpoint crashes the coordinator or a participant of
// mkdir, rmdir and cross-directory renames at each two-phase-commit
// failpoint, restarts it from what a crash leaves on disk, and checks that
// the operation happened wholly or not at all and that fsck is clean.
func TestCrashAtEveryFailpoint(t *testing.T) {
	for _, op := range crashOps() {
		for _, cp := range crashPoints {
			for _, pct := range []int{0, 100} {
				t.Run(fmt.Sprintf("%s/%s/%d%%", op.name, cp.name, pct), func(t *testing.T) {
					w := newThreeWay(t)
					coord, part, run, happened := op.setup(t, w)
					w.mustFsck()
					victim := coord
					if cp.participant {
						victim = part
					}
					clone := w.crashAtPct(victim, cp.name, pct)
					err := run()
					snap := clone()
					if snap == nil {
						t.Fatalf("failpoint %s on island %d never hit (op: %v)", cp.name, victim, err)
					}
					if err != nil && !errors.Is(err, faults.ErrInjected) && !errors.Is(err, metawire.ErrUnavailable) &&
						!errors.Is(err, metawire.ErrInternal) {
						t.Fatalf("op failed with %v", err)
					}
					w.restart(victim, snap)
					w.settle()
					got := happened()
					if err == nil && !got {
						t.Fatal("acknowledged operation lost")
					}
					if got != cp.happens {
						t.Fatalf("happened = %v, want %v (op error %v)", got, cp.happens, err)
					}
					w.mustFsck()
					// The namespace is usable: the directories take new entries.
					for _, id := range w.ids {
						must(w.r.create(w.dirs[id].Ino, "after", 0o644))
					}
					w.mustFsck()
				})
			}
		}
	}
}

// crashAtPct is crashAt keeping pct% of unsynced data in the snapshot.
func (c *cluster) crashAtPct(id namespace.IslandID, name string, pct int) func() *vfs.MemFS {
	var clone *vfs.MemFS
	fs := c.fs[id]
	c.fp[id].OnCrash = func(string) {
		if clone == nil {
			clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(uint64(pct), 7))})
			c.net.SetDown(id, true)
		}
	}
	c.fp[id].Enable(name, faults.Action{Kind: faults.Crash})
	return func() *vfs.MemFS { return clone }
}

// TestParticipantWaitsForCoordinator: a participant whose coordinator is
// down keeps its prepared transaction (and readers of the locked inodes
// get ErrBusy) until the coordinator returns and resolves it.
func TestParticipantWaitsForCoordinator(t *testing.T) {
	w := newThreeWay(t)
	a, b := w.ids[0], w.ids[1]
	name := w.nameOn(w.paths[a], "m", b)
	clone := w.crashAtPct(a, FailTxAfterDecision, 0)
	_, err := w.r.mkdir(w.dirs[a].Ino, name, 0o755)
	wantErr(t, err, faults.ErrInjected, "mkdir crashing at the decision")
	snap := clone()
	// Island b holds the prepared creation; it cannot learn the outcome.
	if left := w.isl[b].ResolvePending(bg); left != 1 {
		t.Fatalf("participant pending %d, want 1", left)
	}
	w.restart(a, snap)
	w.settle()
	if !lookupState(t, w.r, w.dirs[a].Ino, name) {
		t.Fatal("committed mkdir lost")
	}
	w.mustFsck()
}

// TestCoordinatorWritesNothingBeforeDecision: a coordinator writes no
// intent before its decision (presumed abort), and while it runs it
// answers a participant's OpOutcome "pending" from memory; once it has
// returned without a decision (here: an error after the prepares), the
// answer is "aborted" and the participant drops its prepared change.
func TestCoordinatorWritesNothingBeforeDecision(t *testing.T) {
	w := newThreeWay(t)
	a, b := w.ids[0], w.ids[1]
	name := w.nameOn(w.paths[a], "m", b)
	var txid metawire.TxID
	var parked bool
	w.fp[a].Enable(FailTxAfterPrepare, faults.Action{Kind: faults.Call, Call: func(string) error {
		parked = true
		w.isl[b].tx.Lock()
		for id := range w.isl[b].tx.prepared {
			txid = id
		}
		w.isl[b].tx.Unlock()
		if _, ok, err := get(w.isl[a].db, intentKey(txid)); err != nil || ok {
			t.Errorf("coordinator's intent before its decision: found %v, err %v", ok, err)
		}
		if st, err := w.isl[a].outcome(txid); err != nil || st != metawire.TxPending {
			t.Errorf("outcome while coordinating = %d, %v; want pending (%d)", st, err, metawire.TxPending)
		}
		return faults.ErrInjected
	}})
	_, err := w.r.mkdir(w.dirs[a].Ino, name, 0o755)
	wantErr(t, err, faults.ErrInjected, "mkdir failing after its prepares")
	if !parked {
		t.Fatal("failpoint never hit")
	}
	if st, err := w.isl[a].outcome(txid); err != nil || st != metawire.TxAborted {
		t.Fatalf("outcome after the abort = %d, %v; want aborted (%d)", st, err, metawire.TxAborted)
	}
	w.settle()
	if lookupState(t, w.r, w.dirs[a].Ino, name) {
		t.Fatal("aborted mkdir happened")
	}
	w.mustFsck()
}
