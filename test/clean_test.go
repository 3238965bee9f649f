package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/cleaner"
	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/fsck"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/namespace"
)

func newCleaner(t *testing.T, fs *client.FS, mod func(*cleaner.Config)) *cleaner.Cleaner {
	t.Helper()
	cfg := cleaner.Config{Data: fs.Data(), FS: fs, Grace: time.Nanosecond, UnsafeGrace: true, Rate: 1 << 40, Logger: quietLogger()}
	if mod != nil {
		mod(&cfg)
	}
	c, err := cleaner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// diskBytes is the sum of every fragment's length on every server.
func (fc *fsCluster) diskBytes(t *testing.T) int64 {
	t.Helper()
	var n int64
	for _, s := range fc.storage {
		infos, err := s.srv.Store().ListAll(context.Background(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			n += in.Length
		}
	}
	return n
}

// checkFsck runs the cluster-wide check, leaving out slots that are gone.
func (fc *fsCluster) checkFsck(t *testing.T, gone ...uint16) {
	t.Helper()
	m := fc.clusterMap()
	m.Storage = slices.DeleteFunc(m.Storage, func(s cluster.Storage) bool { return slices.Contains(gone, s.Slot) })
	rep, err := fsck.Run(context.Background(), m, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() {
		t.Fatalf("fsck: %v", rep.Problems())
	}
}

func checkFiles(t *testing.T, fs *client.FS, want map[string][]byte) {
	t.Helper()
	for p, w := range want {
		got, err := fs.ReadFile(context.Background(), root, p)
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		if !bytes.Equal(got, w) {
			t.Fatalf("%s: read %d bytes that differ from the %d written", p, len(got), len(w))
		}
	}
}

// Overwrites and deletes leave dead and half-dead stripes; after a pass
// the disk holds the live data plus its parity (within 10%), every file
// reads back exactly and fsck is clean.
func TestCleanerReclaimsOverwrittenAndDeletedSpace(t *testing.T) {
	fc := startFSCluster(t, 5, 3)
	fs := fc.newFS(t)
	ctx := context.Background()
	r := newRand(61)
	want := map[string][]byte{}
	for i := 0; i < 24; i++ {
		p := fmt.Sprintf("/f%02d", i)
		want[p] = randBytes(r, 300<<10+r.IntN(400<<10))
		if err := fs.WriteFile(ctx, root, p, want[p], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 2; round++ {
		for i := 0; i < 24; i += 2 {
			p := fmt.Sprintf("/f%02d", i)
			want[p] = randBytes(r, 300<<10+r.IntN(400<<10))
			if err := fs.WriteFile(ctx, root, p, want[p], 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 1; i < 24; i += 4 {
		p := fmt.Sprintf("/f%02d", i)
		if err := fs.Unlink(ctx, root, uint64(namespace.RootIno), p[1:]); err != nil {
			t.Fatal(err)
		}
		delete(want, p)
	}
	var live int64
	for _, w := range want {
		live += int64(len(w))
	}
	before := fc.diskBytes(t)
	c := newCleaner(t, fs, nil)
	rep, err := c.Pass(ctx, cleaner.PassOptions{Copy: true, Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	after := fc.diskBytes(t)
	t.Logf("live %d B, disk before %d B, after %d B; %+v", live, before, after, rep)
	if len(rep.Errors) > 0 {
		t.Fatalf("pass errors: %v", rep.Errors)
	}
	if rep.DeletedStripes == 0 || rep.CopiedStripes == 0 {
		t.Fatalf("nothing deleted or copied: %+v", rep)
	}
	// ec:4+1 stores 5/4 of the data.
	if limit := live * 5 / 4 * 110 / 100; after > limit {
		t.Fatalf("disk holds %d B after cleaning; live data with parity is %d B (limit %d)", after, live*5/4, limit)
	}
	checkFiles(t, fs, want)
	fc.checkFsck(t)
	// The islands forgot the counters of the stripes the pass deleted: the
	// counters left are those of stripes holding live data.
	if rep.Forgotten < rep.DeletedStripes {
		t.Fatalf("%d stripes deleted, %d counters forgotten", rep.DeletedStripes, rep.Forgotten)
	}
	counters, err := fs.LiveBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id, n := range counters {
		if n <= 0 {
			t.Fatalf("live counter of stripe %s is %d after cleaning", id, n)
		}
	}
	// A fresh client (no cached maps) reads the moved blocks too, and a
	// client whose cached block maps point into deleted stripes refetches.
	checkFiles(t, fc.newFS(t), want)

	// A second pass finds nothing more to delete.
	rep2, err := c.Pass(ctx, cleaner.PassOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep2.RepairFailed > 0 || len(rep2.Errors) > 0 {
		t.Fatalf("second pass: %+v", rep2)
	}
	if rep2.DeletedStripes != 0 || rep2.DeletedBytes != 0 {
		t.Fatalf("second pass deleted %d stripes (%d B) the first left behind: %+v", rep2.DeletedStripes, rep2.DeletedBytes, rep2)
	}
}

// A client holding a cached block map into a stripe the cleaner moved and
// deleted still reads the right bytes: the read fails, the map is fetched
// again, and the read retried.
func TestCleanerStaleMapRefetched(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	fs := fc.newFS(t)
	reader := fc.newFS(t)
	ctx := context.Background()
	data := randBytes(newRand(62), 900<<10)
	if err := fs.WriteFile(ctx, root, "/a", data, 0o644); err != nil {
		t.Fatal(err)
	}
	fh, err := reader.OpenPath(ctx, root, "/a")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if _, err := fh.ReadAt(ctx, buf, 0); err != nil { // caches the block map
		t.Fatal(err)
	}
	c := newCleaner(t, fs, func(c *cleaner.Config) { c.MaxLive = 1 })
	rep, err := c.Pass(ctx, cleaner.PassOptions{Copy: true})
	if err != nil || rep.MovedBlocks == 0 || rep.DeletedStripes == 0 {
		t.Fatalf("pass: %+v %v", rep, err)
	}
	got := make([]byte, len(data))
	if n, err := fh.ReadAt(ctx, got, 0); err != nil || n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("read after cleaning through a stale map: n=%d err=%v equal=%v", n, err, bytes.Equal(got, data))
	}
}

// A writer racing the cleaner on the same blocks always wins: the
// cleaner's deltas name the old pointers and are rejected once the writer
// committed. The race is made to happen: the cleaner is parked at
// FailAfterCopy (its copies durable, its deltas not sent) while every file
// is overwritten in place.
func TestCleanerWriterWins(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	fs := fc.newFS(t)
	ctx := context.Background()
	r := newRand(63)
	const files = 4
	want := map[string][]byte{}
	for i := 0; i < files; i++ {
		p := fmt.Sprintf("/w%d", i)
		want[p] = randBytes(r, 512<<10)
		if err := fs.WriteFile(ctx, root, p, want[p], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	parked, resume := make(chan struct{}), make(chan struct{})
	var resumeOnce sync.Once
	release := func() { resumeOnce.Do(func() { close(resume) }) }
	t.Cleanup(release) // never leave the pass parked
	fset := faults.New()
	fset.Enable(cleaner.FailAfterCopy, faults.Action{Kind: faults.Call, Nth: 1, Call: func(string) error {
		close(parked)
		<-resume
		return nil
	}})
	c := newCleaner(t, fs, func(c *cleaner.Config) { c.MaxLive = 1; c.Faults = fset })
	type result struct {
		rep cleaner.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := c.Pass(ctx, cleaner.PassOptions{Copy: true})
		done <- result{rep, err}
	}()
	select {
	case <-parked:
	case res := <-done:
		t.Fatalf("the pass ended without reaching %s: %+v %v", cleaner.FailAfterCopy, res.rep, res.err)
	case <-time.After(2 * time.Minute):
		t.Fatalf("the pass never reached %s", cleaner.FailAfterCopy)
	}
	// The cleaner holds durable copies of the files' blocks; overwrite
	// every block of every file in place and commit.
	wr := newRand(64)
	written := map[string]map[uint64]layout.Pointer{}
	for i := 0; i < files; i++ {
		p := fmt.Sprintf("/w%d", i)
		data := randBytes(wr, 512<<10)
		fh, err := fs.OpenPath(ctx, root, p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.WriteAt(ctx, data, 0); err != nil {
			t.Fatal(err)
		}
		if err := fh.Close(ctx); err != nil {
			t.Fatal(err)
		}
		want[p] = data
		a, err := fs.Resolve(ctx, root, p)
		if err != nil {
			t.Fatal(err)
		}
		if written[p], err = fs.BlockPointers(ctx, root, a.Ino); err != nil || len(written[p]) == 0 {
			t.Fatalf("%s: %d block pointers after the overwrite (%v)", p, len(written[p]), err)
		}
	}
	release()
	var res result
	select {
	case res = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the pass did not end after it was released")
	}
	t.Logf("pass: %+v", res.rep)
	if res.err != nil || len(res.rep.Errors) > 0 {
		t.Fatalf("pass: %v %v", res.err, res.rep.Errors)
	}
	if res.rep.RejectedBlocks == 0 || res.rep.MovedBlocks != 0 {
		t.Fatalf("%d deltas rejected and %d blocks moved, though the writer overwrote every block while the cleaner was parked: %+v",
			res.rep.RejectedBlocks, res.rep.MovedBlocks, res.rep)
	}
	// The writer's blocks are what the files point to: no delta of the
	// cleaner replaced one.
	for p, ptrs := range written {
		a, err := fs.Resolve(ctx, root, p)
		if err != nil {
			t.Fatal(err)
		}
		now, err := fs.BlockPointers(ctx, root, a.Ino)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.EqualFunc(now, ptrs, func(x, y layout.Pointer) bool {
			return bytes.Equal(x.AppendBinary(nil), y.AppendBinary(nil))
		}) {
			t.Fatalf("%s: the cleaner replaced the writer's block pointers:\nwriter %v\nnow    %v", p, ptrs, now)
		}
	}
	checkFiles(t, fs, want)
	checkFiles(t, fc.newFS(t), want)
	fc.checkFsck(t)
}

// A dead server replaced by an empty one on the same slot gets every
// fragment rebuilt; afterwards a different server can die and everything
// still reads.
func TestCleanerRebuildsReplacement(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	fs := fc.newFS(t)
	ctx := context.Background()
	r := newRand(65)
	want := map[string][]byte{}
	for i := 0; i < 12; i++ {
		p := fmt.Sprintf("/r%02d", i)
		want[p] = randBytes(r, 200<<10+r.IntN(600<<10))
		if err := fs.WriteFile(ctx, root, p, want[p], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dead := fc.storage[2]
	held, err := dead.srv.Store().ListAll(ctx, nil, 0)
	if err != nil || len(held) == 0 {
		t.Fatalf("slot 2 holds %d fragments (%v)", len(held), err)
	}
	dead.stop()
	if err := os.RemoveAll(dead.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dead.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dead.start() // the replacement: an empty store taking over slot 2
	c := newCleaner(t, fs, nil)
	rep, err := c.Pass(ctx, cleaner.PassOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep)
	if rep.Repaired != len(held) || rep.RepairFailed != 0 {
		t.Fatalf("repaired %d of %d fragments (%d failed): %v", rep.Repaired, len(held), rep.RepairFailed, rep.Errors)
	}
	now, err := dead.srv.Store().ListAll(ctx, nil, 0)
	if err != nil || len(now) != len(held) {
		t.Fatalf("replacement holds %d fragments, want %d (%v)", len(now), len(held), err)
	}
	fc.storage[0].stop()
	checkFiles(t, fc.newFS(t), want)
}

// Draining a slot while files are written: nothing is lost and the
// drained server ends with no fragments.
func TestCleanerDrain(t *testing.T) {
	fc := startFSCluster(t, 6, 1)
	fs := fc.newFS(t)
	ctx := context.Background()
	r := newRand(66)
	want := map[string][]byte{}
	for i := 0; i < 10; i++ {
		p := fmt.Sprintf("/d%02d", i)
		want[p] = randBytes(r, 300<<10+r.IntN(300<<10))
		if err := fs.WriteFile(ctx, root, p, want[p], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const drained = 3
	// The writer learns of the drain as a map update would tell it.
	fs.Data().SetDown(drained, true)
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		wr := newRand(67)
		for i := 0; i < 10; i++ {
			p := fmt.Sprintf("/n%02d", i)
			data := randBytes(wr, 200<<10)
			if err := fs.WriteFile(ctx, root, p, data, 0o644); err != nil {
				t.Errorf("write %s: %v", p, err)
				return
			}
			mu.Lock()
			want[p] = data
			mu.Unlock()
		}
	}()
	c := newCleaner(t, fs, nil)
	rep, err := c.Pass(ctx, cleaner.PassOptions{Drain: []uint16{drained}, Repair: true})
	<-done
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep)
	if rep.DrainRemaining != 0 || len(rep.Errors) > 0 {
		t.Fatalf("drain incomplete: %+v", rep)
	}
	left, err := fc.storage[drained].srv.Store().ListAll(ctx, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("drained slot still holds %d fragments, first %s", len(left), left[0].ID)
	}
	fc.storage[drained].stop()
	checkFiles(t, fc.newFS(t), want)
	fc.checkFsck(t, drained)
}

// cleanCrashCluster is a child-process cluster (5 storage servers, 2
// islands) with churned files, for killing the cleaner or the servers it
// talks to in the middle of a pass.
type cleanCrashCluster struct {
	t    *testing.T
	exe  string
	cl   *devcluster.Cluster
	fs   *client.FS
	r    *rand.Rand
	want map[string][]byte
}

func startCleanCrashCluster(t *testing.T) *cleanCrashCluster {
	// The test runs every cleaner pass itself.
	cl, _ := startDev(t, 5, 2, 0, func(c *devcluster.Config) { c.CleanInterval = -1 })
	conn := dialDev(t, cl)
	exe := atoll(t)
	c := &cleanCrashCluster{t: t, exe: exe, cl: cl, fs: conn.FS, r: newRand(71), want: map[string][]byte{}}
	c.churn(80)
	return c
}

// churn overwrites n random files of a set of 40 (100–600 KiB each).
func (c *cleanCrashCluster) churn(n int) {
	c.t.Helper()
	r := c.r
	for i := 0; i < n; i++ {
		p := fmt.Sprintf("/k%02d", r.IntN(40))
		c.want[p] = randBytes(r, 100<<10+r.IntN(500<<10))
		if err := c.fs.WriteFile(context.Background(), root, p, c.want[p], 0o644); err != nil {
			c.t.Fatal(err)
		}
	}
}

// check reads every file through a fresh client and runs fsck.
func (c *cleanCrashCluster) check(when string) {
	c.t.Helper()
	ctx := context.Background()
	fresh, err := connect.Dial(ctx, []string{c.cl.Manager}, testKey, quietLogger())
	if err != nil {
		c.t.Fatal(err)
	}
	defer fresh.Close()
	checkFiles(c.t, fresh.FS, c.want)
	rep, err := fsck.Run(ctx, fresh.View.Map(), testKey)
	if err != nil {
		c.t.Fatalf("%s: fsck: %v", when, err)
	}
	if !rep.Clean() {
		c.t.Fatalf("%s: fsck: %v", when, rep.Problems())
	}
}

// cleanCmd is `atoll clean --copy --max-live 1` against the cluster: it
// copies every live stripe, so that each failpoint is reached and a pass
// leaves only dense stripes behind.
func (c *cleanCrashCluster) cleanCmd(env ...string) *exec.Cmd {
	args := []string{"clean", "--cluster", c.cl.Manager, "--grace", "1ns", "--unsafe-grace", "--json", "--log-level", "warn", "--copy", "--max-live", "1"}
	cmd := exec.Command(c.exe, args...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

func (c *cleanCrashCluster) clean() cleaner.Report {
	c.t.Helper()
	cmd := c.cleanCmd()
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("atoll clean: %v\n%s", err, out)
	}
	var rep cleaner.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		c.t.Fatalf("report %q: %v", out, err)
	}
	return rep
}

// finish runs two passes after the crashes: the first does the work left
// behind (and copies every live block), the second sees the disk as the
// first left it, which must hold the live data and its parity within 10%:
// nothing the crashes left behind survives.
func (c *cleanCrashCluster) finish() {
	c.t.Helper()
	rep := c.clean()
	if rep.DeletedStripes == 0 || rep.MovedBlocks == 0 {
		c.t.Fatalf("final pass did nothing: %+v", rep)
	}
	c.t.Logf("final pass: %+v", rep)
	c.check("after the final pass")
	rep = c.clean()
	var live int64
	for _, w := range c.want {
		live += int64(len(w))
	}
	if rep.Bytes > live*5/4*110/100 {
		c.t.Fatalf("disk holds %d B for %d B of live data (ec:4+1): %+v", rep.Bytes, live, rep)
	}
}

// kill -9 the cleaner (`atoll clean` as a child process) at each of its
// failpoints in the middle of cleaning: afterwards nothing is lost, fsck
// is clean, and the next pass finishes the work.
func TestCleanerKill9AtFailpoints(t *testing.T) {
	c := startCleanCrashCluster(t)
	for _, fp := range []string{cleaner.FailAfterCopy, cleaner.FailAfterDeltas, cleaner.FailMidDelete} {
		cmd := c.cleanCmd("ATOLL_FAILPOINTS=" + fp + "=crash")
		cmd.Stderr = os.Stderr
		_, err := cmd.Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("%s: atoll clean did not die by SIGKILL: %v", fp, err)
		}
		c.check("after kill at " + fp)
		c.churn(10)
	}
	c.finish()
}

// kill -9 an island or a storage server while a cleaning pass is parked at
// one of its failpoints (copies made but not committed; deltas committed
// but old stripes not deleted; a stripe half deleted). The victim is
// restarted on the same directory and address either while the pass is
// parked or only after the pass went on without it and ended. The pass may
// fail or report errors, but nothing is lost, fsck is clean, and the next
// passes finish the work.
func TestCleanerSurvivesKill9OfIslandOrStorage(t *testing.T) {
	c := startCleanCrashCluster(t)
	ctx := context.Background()
	cases := []struct {
		fp, victim string
		late       bool // restart after the pass ended
	}{
		{cleaner.FailAfterCopy, "island1", false},
		{cleaner.FailAfterCopy, "island2", true},
		{cleaner.FailAfterDeltas, "island1", true},
		{cleaner.FailAfterCopy, "storage1", true},
		{cleaner.FailAfterDeltas, "storage2", false},
		{cleaner.FailMidDelete, "storage3", true},
	}
	for _, tc := range cases {
		name := tc.victim + "@" + tc.fp
		cmd := c.cleanCmd("ATOLL_FAILPOINTS=" + tc.fp + "=1*sleep(3s)")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		parked := make(chan struct{})
		var tail bytes.Buffer
		var tailMu sync.Mutex
		go func() {
			buf := make([]byte, 4096)
			signalled := false
			for {
				n, err := stderr.Read(buf)
				tailMu.Lock()
				tail.Write(buf[:n])
				hit := bytes.Contains(tail.Bytes(), []byte("faults: sleeping"))
				tailMu.Unlock()
				if hit && !signalled {
					signalled = true
					close(parked)
				}
				if err != nil {
					return
				}
			}
		}()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-parked:
		case err := <-exited:
			tailMu.Lock()
			defer tailMu.Unlock()
			t.Fatalf("%s: the pass ended (%v) before reaching the failpoint:\n%s\n%s", name, err, out.String(), tail.String())
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			t.Fatalf("%s: the pass never reached the failpoint", name)
		}
		victim := c.cl.Child(tc.victim)
		if victim == nil {
			t.Fatalf("no child %s", tc.victim)
		}
		victim.Kill()
		<-victim.Done()
		restart := func() {
			if _, err := c.cl.Restart(ctx, tc.victim); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if !tc.late {
			restart()
		}
		select {
		case err := <-exited:
			// Either outcome is allowed: the pass failed, or it went on
			// with errors about single stripes in its report.
			t.Logf("%s: pass ended: %v: %s", name, err, bytes.TrimSpace(out.Bytes()))
		case <-time.After(3 * time.Minute):
			_ = cmd.Process.Kill()
			t.Fatalf("%s: the pass hung", name)
		}
		if tc.late {
			restart()
		}
		c.check("after killing " + name)
		c.churn(10)
	}
	c.finish()
}

// Setting user.atoll.policy on a file re-stripes what it holds: ec:4+1
// blocks become mirror:3, so any two servers can then be lost.
func TestPolicyChangeRestripes(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	fs := fc.newFS(t)
	ctx := context.Background()
	data := randBytes(newRand(81), 2<<20+123)
	if err := fs.WriteFile(ctx, root, "/p", data, 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := fs.Resolve(ctx, root, "/p")
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.SetXattr(ctx, root, a.Ino, client.PolicyXattr, []byte("mirror:3"), 0); err != nil {
		t.Fatal(err)
	}
	ptrs, err := fs.BlockPointers(ctx, root, a.Ino)
	if err != nil || len(ptrs) == 0 {
		t.Fatalf("pointers: %d, %v", len(ptrs), err)
	}
	for idx, p := range ptrs {
		if p.Kind != layout.Mirror || p.K != 1 || p.M != 2 {
			t.Fatalf("block %d still %v %d+%d after the policy change", idx, p.Kind, p.K, p.M)
		}
	}
	// The old ec:4+1 stripes are dead now; the cleaner takes them.
	rep, err := newCleaner(t, fs, nil).Pass(ctx, cleaner.PassOptions{})
	if err != nil || rep.DeletedStripes == 0 {
		t.Fatalf("cleaner after restripe: %+v %v", rep, err)
	}
	fc.storage[1].stop()
	fc.storage[3].stop()
	got, err := fc.newFS(t).ReadFile(ctx, root, "/p")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read with two servers down: %d bytes, %v", len(got), err)
	}
}

// A fragment the scrubber finds corrupt is queued durably on its server
// (it survives a restart) and the cleaner's repair rewrites it.
func TestScrubberFindingIsRepairedByCleaner(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	fs := fc.newFS(t)
	ctx := context.Background()
	data := randBytes(newRand(91), 3<<20+77)
	if err := fs.WriteFile(ctx, root, "/s", data, 0o644); err != nil {
		t.Fatal(err)
	}
	s := fc.storage[1]
	infos, err := s.srv.Store().ListAll(ctx, nil, 0)
	if err != nil || len(infos) == 0 {
		t.Fatalf("slot 1 holds %d fragments (%v)", len(infos), err)
	}
	id := infos[0].ID
	path := fragPath(t, s.dir, id)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), orig...)
	for i := 0; i < 32; i++ {
		bad[64+i] ^= 0x5a
	}
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.srv.Store().ScrubOnce(ctx, 0); err != nil {
		t.Fatal(err)
	}
	s.stop() // the mark is durable
	s.start()
	sus, err := s.srv.Store().Suspects(ctx, 100)
	if err != nil || len(sus) != 1 || sus[0] != id {
		t.Fatalf("suspects after a scrub and a restart: %v %v", sus, err)
	}
	rep, err := newCleaner(t, fs, nil).Pass(ctx, cleaner.PassOptions{Repair: true})
	if err != nil || rep.Repaired != 1 || rep.RepairFailed != 0 {
		t.Fatalf("repair pass: %+v %v", rep, err)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got[64:], orig[64:]) {
		diff := -1
		for i := 64; i < min(len(got), len(orig)); i++ {
			if got[i] != orig[i] {
				diff = i
				break
			}
		}
		t.Fatalf("fragment not rewritten to its original bytes (%v): %d vs %d bytes, first difference at %d", err, len(got), len(orig), diff)
	}
	if sus, err := s.srv.Store().Suspects(ctx, 100); err != nil || len(sus) != 0 {
		t.Fatalf("suspects after repair: %v %v", sus, err)
	}
	checkFiles(t, fc.newFS(t), map[string][]byte{"/s": data})
}

// TestCleanSaysWhyNothingWasDeleted (issue #42): right after an overwrite
// `atoll clean` said "deleted 0 stripes" and nothing else; the stripes
// were dead but younger than the grace period. The report now counts
// them and says when the first may go.
func TestCleanSaysWhyNothingWasDeleted(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	fs := fc.newFS(t)
	ctx := context.Background()
	for range 2 { // the second write leaves the first's stripe dead
		if err := fs.WriteFile(ctx, root, "/over", bytes.Repeat([]byte("x"), 300<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := newCleaner(t, fs, func(cfg *cleaner.Config) { cfg.Grace, cfg.UnsafeGrace = cleaner.DefaultGrace, false })
	rep, err := c.Pass(ctx, cleaner.PassOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.DeletedStripes != 0 || rep.Waiting == 0 || rep.WaitingBytes == 0 ||
		rep.WaitingSeconds <= 0 || rep.WaitingSeconds > cleaner.DefaultGrace.Seconds() || rep.Grace != cleaner.DefaultGrace.Seconds() {
		t.Fatalf("a pass right after an overwrite: %+v", rep)
	}
}
