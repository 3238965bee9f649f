package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/meta"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestKill9IslandAtEveryFailpoint runs a cross-island mkdir between two
// island processes and kills (SIGKILL, through a crash failpoint) the
// coordinator or the participant at each step of the two-phase commit.
// Every case's failpoint must fire (the island dies by SIGKILL there). After
// restarting the killed island the operation has happened entirely or not
// at all, fsck is clean and the namespace keeps working.
func TestKill9IslandAtEveryFailpoint(t *testing.T) {
	// Depth-1 table: buckets with top bit 0 on island 1, 1 on island 2.
	// The root's bucket (0x961e849c) is island 2's, so a directory whose
	// path hashes to a top bit of 0 is created across islands with island
	// 2 coordinating.
	name := ""
	for i := 0; ; i++ {
		n := "dir" + strconv.Itoa(i)
		if namespace.Bucket("/"+n)>>31 == 0 {
			name = n
			break
		}
	}
	cases := []struct {
		point  string
		island int
	}{
		{"meta.tx.afterIntent", 2},
		{"meta.tx.afterPrepare", 2},
		{"meta.tx.afterDecision", 2},
		{"meta.tx.afterDecide", 2},
		{"meta.participant.afterPrepare", 1},
		{"meta.participant.beforeApply", 1},
		{"meta.participant.afterApply", 1},
	}
	for _, op := range []string{"mkdir", "rmdir", "rename"} {
		for _, tc := range cases {
			target := tc.island
			if op == "rename" {
				// A rename is coordinated by the source directory's island:
				// here island 1 (the subdirectory), with island 2 (the root)
				// participating.
				target = 3 - target
			}
			t.Run(fmt.Sprintf("%s/%s/island%d", op, tc.point, target), func(t *testing.T) {
				killIslandCase(t, op, name, tc.point, target)
			})
		}
	}
}

func killIslandCase(t *testing.T, op, name, point string, target int) {
	tc := struct {
		point  string
		island int
	}{point, target}
	dir := t.TempDir()
	// Below the ephemeral range: a restarted island binds its old address
	// again, and an outgoing connection could have taken an ephemeral one.
	base := freeBase(t, 2)
	addrs := map[int]string{1: addrAt(base), 2: addrAt(base + 1)}
	mapFile := filepath.Join(dir, "map.json")
	js := fmt.Sprintf(`{"epoch":1,"depth":1,"entries":[1,2],"islands":{"1":%q,"2":%q}}`, addrs[1], addrs[2])
	if err := os.WriteFile(mapFile, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	// start runs island id; its output goes to stderr and into out[id]
	// (the test looks there for the failpoint's last words).
	out := map[int]*syncBuffer{}
	start := func(id int, env ...string) *devcluster.Child {
		var c *devcluster.Child
		var err error
		for try := 0; try < 20; try++ {
			out[id] = &syncBuffer{}
			c, err = devcluster.Start(context.Background(), devcluster.ChildSpec{
				Name: "island" + strconv.Itoa(id), Exe: atoll(t),
				Args: []string{"meta", "--dir", filepath.Join(dir, strconv.Itoa(id)), "--listen", addrs[id],
					"--id", strconv.Itoa(id), "--static-map", mapFile, "--log-level", "warn"},
				AddrFile: filepath.Join(dir, strconv.Itoa(id)+".addr"),
				Env:      env,
				Output:   io.MultiWriter(os.Stderr, out[id]),
			})
			if err == nil || strings.Contains(out[id].String(), "faults:") {
				break // started, or refused the failpoints: no retry helps
			}
			// The address, just freed by the killed island, may linger.
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("island %d (env %q): %v\n%s", id, env, err, out[id].String())
		}
		t.Cleanup(c.Kill)
		return c
	}
	procs := map[int]*devcluster.Child{}
	for id := 1; id <= 2; id++ {
		procs[id] = start(id)
	}
	tab, err := namespace.NewTable([]namespace.IslandID{1, 2}, 1)
	if err != nil {
		t.Fatal(err)
	}
	tab.Epoch = 1
	view := &client.StaticMapView{MapEpoch: 1, Table: tab, Addrs: map[namespace.IslandID]string{1: addrs[1], 2: addrs[2]}}
	data, err := client.New(client.Config{Key: testKey, Slots: []client.SlotAddr{{ID: 0, Addr: "127.0.0.1:1"}}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close()
	fs, err := client.NewFS(client.FSConfig{Data: data, Map: view, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	rootIno := uint64(namespace.RootIno)
	bg := context.Background()
	// Preconditions, before any failpoint is armed: for rmdir the
	// cross-island directory exists; for rename a file sits in it
	// and moves to the root (island 1 -> island 2).
	var sub metawire.Attr
	if op != "mkdir" {
		r, err := fs.Mkdir(bg, metawire.CreateReq{Cred: root, Dir: rootIno, Name: name, Mode: 0o755})
		if err != nil {
			t.Fatal(err)
		}
		sub = r.Attr
	}
	if op == "rename" {
		if _, err := fs.Create(bg, metawire.CreateReq{Cred: root, Dir: sub.Ino, Name: "f", Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	procs[tc.island].Kill()
	procs[tc.island] = start(tc.island, "ATOLL_FAILPOINTS="+tc.point+"=crash")

	ctx, cancel := context.WithTimeout(bg, 4*time.Second)
	var mkErr error
	switch op {
	case "mkdir":
		_, mkErr = fs.Mkdir(ctx, metawire.CreateReq{Cred: root, Dir: rootIno, Name: name, Mode: 0o755})
	case "rmdir":
		mkErr = fs.Rmdir(ctx, root, rootIno, name)
	case "rename":
		mkErr = fs.Rename(ctx, metawire.RenameReq{Cred: root, SrcDir: sub.Ino, SrcName: "f", DstDir: rootIno, DstName: "moved"})
	}
	cancel()
	// The failpoint must fire: the island dies by SIGKILL, having said
	// where. (It may fire after the client gave up, on a retry or in
	// recovery, so the wait is generous; a point that is not on the
	// operation's path is a broken case, not a pass.)
	victim := procs[tc.island]
	select {
	case <-victim.Done():
	case <-time.After(2 * time.Minute):
		victim.Kill()
		t.Fatalf("failpoint %s on island %d never fired during %s (which returned %v):\n%s",
			tc.point, tc.island, op, mkErr, out[tc.island].String())
	}
	var ee *exec.ExitError
	if err := victim.ExitErr(); !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() ||
		ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("island %d exited (%v) but not killed by failpoint %s:\n%s", tc.island, err, tc.point, out[tc.island].String())
	}
	if said := "faults: crash at failpoint " + tc.point + "\n"; !strings.Contains(out[tc.island].String(), said) {
		t.Fatalf("island %d died by SIGKILL without %q in its output:\n%s", tc.island, said, out[tc.island].String())
	}
	procs[tc.island] = start(tc.island)

	// Fsck until the restarted island and its peer have resolved
	// the transaction.
	pool := wire.NewPool(wire.ClientConfig{Key: testKey}, 1)
	defer pool.Close()
	var rep meta.Report
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rep, err = meta.Fsck(context.Background(), []meta.FsckSource{meta.WireFsckSource(pool, 1, addrs[1]), meta.WireFsckSource(pool, 2, addrs[2])})
		if err == nil && rep.Clean() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fsck not clean after recovery: err=%v problems=%v", err, rep.Problems)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// All or nothing, and an acknowledged operation happened.
	fs.Invalidate(rootIno)
	fs.Invalidate(sub.Ino)
	switch op {
	case "mkdir", "rmdir":
		a, err := fs.Lookup(bg, root, rootIno, name)
		switch {
		case err == nil:
			if !a.IsDir() || a.Nlink != 2 || namespace.Ino(a.Ino).Bucket()>>31 != 0 {
				t.Fatalf("half a directory: %+v", a)
			}
			if _, err := fs.GetAttrFresh(bg, root, a.Ino); err != nil {
				t.Fatalf("entry without its inode: %v", err)
			}
			if op == "rmdir" && mkErr == nil {
				t.Fatal("rmdir was acknowledged but the directory is still there")
			}
		case errors.Is(err, metawire.ErrNotFound):
			if op == "mkdir" && mkErr == nil {
				t.Fatal("mkdir was acknowledged but did not happen")
			}
		default:
			t.Fatal(err)
		}
	case "rename":
		_, errOld := fs.Lookup(bg, root, sub.Ino, "f")
		_, errNew := fs.Lookup(bg, root, rootIno, "moved")
		if (errOld == nil) == (errNew == nil) {
			t.Fatalf("rename half done: old=%v new=%v", errOld, errNew)
		}
		if mkErr == nil && errNew != nil {
			t.Fatalf("rename was acknowledged but did not happen: %v", errNew)
		}
	}
	// The namespace still works across the two islands.
	if _, err := fs.Mkdir(context.Background(), metawire.CreateReq{Cred: root, Dir: rootIno, Name: name + "-after", Mode: 0o755}); err != nil {
		t.Fatalf("mkdir after recovery: %v", err)
	}
	if err := fs.Rmdir(context.Background(), root, rootIno, name+"-after"); err != nil {
		t.Fatalf("rmdir after recovery: %v", err)
	}
}
