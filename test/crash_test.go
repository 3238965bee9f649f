package test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/storage"
	"github.com/atoll-fs/atoll/internal/wire"
)

// failpointEnv arms one failpoint in a child storage server.
func crashFailpointEnv(name, action string) string {
	return "ATOLL_FAILPOINTS=" + name + "=" + action
}

// fragFiles lists the files holding id under a storage directory.
func crashFragFiles(t *testing.T, dir string, id fragment.ID) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "frags", "*", id.String()))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitExit waits for a child that is expected to have killed itself.
func crashWaitExit(t *testing.T, s *childServer) {
	t.Helper()
	select {
	case <-s.c.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("storage%d did not exit at its failpoint", s.slot)
	}
}

// expectConnLost checks that a call failed because the server went away,
// not with an error response.
func crashExpectConnLost(t *testing.T, what string, err error) {
	t.Helper()
	var re *wire.RemoteError
	var se *fragment.StatusError
	if err == nil || errors.As(err, &re) || errors.As(err, &se) || !errors.Is(err, wire.ErrConnClosed) {
		t.Fatalf("%s at a crash failpoint: %v; want the connection lost", what, err)
	}
}

func TestCrashPutAfterDataBeforeMeta(t *testing.T) {
	s := startChild(t, 0, crashFailpointEnv(storage.FailPutAfterData, "3*crash"))
	c := rawDial(t, s.addr)
	r := rand.New(rand.NewPCG(30, 30))
	before := map[fragment.ID][]byte{
		{Log: 5, Seq: 1}:           randBytes(r, 200_000),
		{Log: 5, Seq: 2, Index: 3}: randBytes(r, 17),
	}
	for _, id := range []fragment.ID{{Log: 5, Seq: 1}, {Log: 5, Seq: 2, Index: 3}} {
		if err := rawPut(c, id, before[id], false); err != nil {
			t.Fatalf("put %s before the crash: %v", id, err)
		}
	}
	lost := fragment.ID{Log: 5, Seq: 3, Index: 1}
	crashExpectConnLost(t, "put", rawPut(c, lost, randBytes(r, 150_000), false))
	crashWaitExit(t, s)
	// The crash came after the data was synced: its file is on disk, with
	// no record.
	if f := crashFragFiles(t, s.dir, lost); len(f) != 1 {
		t.Fatalf("before restart: %d files for %s, want the uncommitted one", len(f), lost)
	}

	s.start()
	c2 := rawDial(t, s.addr)
	rawMustNotFound(t, c2, lost)
	if _, _, err := rawRead(c2, lost, 0, 10); !errors.Is(err, fragment.ErrNotFound) {
		t.Fatalf("read of the uncommitted put: %v; want ErrNotFound", err)
	}
	if f := crashFragFiles(t, s.dir, lost); len(f) != 0 {
		t.Fatalf("after restart: orphan files %v not removed", f)
	}
	for id, data := range before {
		rawMustContent(t, c2, id, data)
		if sick, err := rawVerify(c2, id); err != nil || len(sick) != 0 {
			t.Fatalf("verify %s: %v %v", id, sick, err)
		}
	}
	st := rawMustStat(t, c2)
	if st.Fragments != 2 || st.UsedBytes != 200_000+17 {
		t.Fatalf("stats after restart: %+v", st)
	}
	// The id is free again, and the failpoint is gone with the old process.
	again := randBytes(r, 1000)
	if err := rawPut(c2, lost, again, false); err != nil {
		t.Fatalf("put of the lost id after restart: %v", err)
	}
	rawMustContent(t, c2, lost, again)
}

func TestCrashPutAfterMeta(t *testing.T) {
	s := startChild(t, 1, crashFailpointEnv(storage.FailPutAfterMeta, "2*crash"))
	c := rawDial(t, s.addr)
	r := rand.New(rand.NewPCG(31, 31))
	first, firstData := fragment.ID{Log: 6, Seq: 1}, randBytes(r, 65536)
	if err := rawPut(c, first, firstData, false); err != nil {
		t.Fatal(err)
	}
	committed, data := fragment.ID{Log: 6, Seq: 2, Index: 4}, randBytes(r, 3*65536+99)
	crashExpectConnLost(t, "put", rawPut(c, committed, data, false))
	crashWaitExit(t, s)

	s.start()
	c2 := rawDial(t, s.addr)
	info, err := rawInfo(c2, committed)
	if err != nil {
		t.Fatalf("committed put lost: %v", err)
	}
	if info.Length != uint64(len(data)) || !slices.Equal(info.CRCs, rawChunkCRCs(data, storage.DefaultChunkSize)) {
		t.Fatalf("info of the committed put: length %d, %d crcs", info.Length, len(info.CRCs))
	}
	rawMustContent(t, c2, committed, data)
	rawMustContent(t, c2, first, firstData)
	if sick, err := rawVerify(c2, committed); err != nil || len(sick) != 0 {
		t.Fatalf("verify: %v %v", sick, err)
	}
	// A retry of the unacknowledged put finds it there; different bytes
	// cannot replace it.
	if err := rawPut(c2, committed, randBytes(r, len(data)), false); !errors.Is(err, fragment.ErrExists) {
		t.Fatalf("put over the committed fragment: %v; want ErrExists", err)
	}
	rawMustContent(t, c2, committed, data)
	if st := rawMustStat(t, c2); st.Fragments != 2 || st.UsedBytes != uint64(len(firstData)+len(data)) {
		t.Fatalf("stats after restart: %+v", st)
	}
}

func TestCrashAppend(t *testing.T) {
	for _, tc := range []struct {
		failpoint string
		// whether the crashing append is durable (its record committed)
		committed bool
	}{
		{storage.FailAppendAfterData, false},
		{storage.FailAppendAfterMeta, true},
	} {
		t.Run(tc.failpoint, func(t *testing.T) {
			// The first append creates the fragment and hits the failpoint
			// too, so the 4th append crashes.
			s := startChild(t, 2, crashFailpointEnv(tc.failpoint, "4*crash"))
			c := rawDial(t, s.addr)
			r := rand.New(rand.NewPCG(32, 32))
			id := fragment.ID{Log: 7, Seq: 1, Index: 2}
			var want []byte
			for _, n := range []int{1000, 70_000, 3000} { // crosses a chunk, then extends a partial one
				b := randBytes(r, n)
				got, err := rawAppend(c, id, b)
				if err != nil {
					t.Fatalf("append %d bytes: %v", n, err)
				}
				want = append(want, b...)
				if got != uint64(len(want)) {
					t.Fatalf("append returned length %d, want %d", got, len(want))
				}
			}
			crashing := randBytes(r, 100_000)
			_, err := rawAppend(c, id, crashing)
			crashExpectConnLost(t, "append", err)
			crashWaitExit(t, s)
			if tc.committed {
				want = append(want, crashing...)
			}
			f := crashFragFiles(t, s.dir, id)
			if len(f) != 1 {
				t.Fatalf("%d files for %s", len(f), id)
			}
			// The crashing append's bytes are in the file either way.
			if fi, err := os.Stat(f[0]); err != nil || fi.Size() != storage.HeaderSize+int64(len(want))+int64(len(crashing))*crashB2I(!tc.committed) {
				t.Fatalf("file before restart: %v %v", fi.Size(), err)
			}

			s.start()
			c2 := rawDial(t, s.addr)
			info, err := rawInfo(c2, id)
			if err != nil {
				t.Fatal(err)
			}
			if info.Length != uint64(len(want)) {
				t.Fatalf("length after restart %d, want %d (acknowledged appends)", info.Length, len(want))
			}
			rawMustContent(t, c2, id, want)
			// A torn append is cut back to the committed length.
			if fi, err := os.Stat(f[0]); err != nil || fi.Size() != storage.HeaderSize+int64(len(want)) {
				t.Fatalf("file after restart: %d bytes, want %d (%v)", fi.Size(), storage.HeaderSize+len(want), err)
			}
			if sick, err := rawVerify(c2, id); err != nil || len(sick) != 0 {
				t.Fatalf("verify: %v %v", sick, err)
			}
			// The log goes on.
			more := randBytes(r, 5000)
			n, err := rawAppend(c2, id, more)
			want = append(want, more...)
			if err != nil || n != uint64(len(want)) {
				t.Fatalf("append after restart: length %d, %v; want %d", n, err, len(want))
			}
			rawMustContent(t, c2, id, want)
			if st := rawMustStat(t, c2); st.Fragments != 1 || st.UsedBytes != uint64(len(want)) || st.CorruptFound != 0 {
				t.Fatalf("stats: %+v", st)
			}
		})
	}
}

func crashB2I(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// TestCrashKillStorageDuringECStream SIGKILLs one of five storage servers
// while a client streams ec:4+1 stripes to them.
func TestCrashKillStorageDuringECStream(t *testing.T) {
	children := make([]*childServer, 5)
	for i := range children {
		children[i] = startChild(t, i)
	}
	slots := func() []client.SlotAddr {
		var out []client.SlotAddr
		for _, s := range children {
			out = append(out, client.SlotAddr{ID: uint16(s.slot), Addr: s.addr})
		}
		return out
	}
	newChildClient := func() *client.Client {
		c, err := client.New(client.Config{Key: testKey, Slots: slots(), ClientID: 0xc0ffee, Logger: quietLogger(),
			ReadTimeout: 2 * time.Second, DownFor: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := newChildClient()
	ctx := context.Background()
	pol := mustPolicy(t, "ec:4+1")
	log, err := c.Log(ctx, pol)
	if err != nil {
		t.Fatal(err)
	}

	const rounds, killAfter = 6, 2
	r := rand.New(rand.NewPCG(33, 33))
	var data [rounds][]byte
	for i := range data {
		// A full 4 MiB stripe is sealed (and written in the background)
		// during each Append, and Flush writes a short one.
		data[i] = randBytes(r, 9<<19+333*i+1)
	}
	victim := children[2]
	var killing, killed atomic.Bool
	// Rounds acknowledged before the kill, after it, and across it.
	var before, after, straddle []written
	failures := 0
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < rounds; i++ {
			wasKilled := killed.Load()
			ptrs, err := log.Append(ctx, data[i])
			if err == nil {
				err = log.Flush(ctx)
			}
			switch {
			case err != nil:
				failures++
				t.Logf("round %d: %v", i, err)
			case wasKilled:
				after = append(after, written{data[i], ptrs})
			case !killing.Load():
				before = append(before, written{data[i], ptrs})
			default:
				straddle = append(straddle, written{data[i], ptrs})
			}
			if i == killAfter-1 {
				close(ready)
			}
		}
	}()
	// Kill while the next round's stripes are on their way.
	<-ready
	time.Sleep(3 * time.Millisecond)
	killing.Store(true)
	victim.c.Kill()
	killed.Store(true)
	<-done
	if failures != 0 {
		t.Fatalf("%d flushes failed with one of five servers down under ec:4+1", failures)
	}
	if len(before) < killAfter || len(after) == 0 {
		t.Fatalf("%d rounds acknowledged before the kill, %d after; the kill did not land mid-stream", len(before), len(after))
	}
	t.Logf("acknowledged: %d rounds before the kill, %d across it, %d after", len(before), len(straddle), len(after))

	// Everything acknowledged before the kill reads back while the server
	// is down, rebuilt from the other fragments where needed.
	checkAll(t, c, before)
	if st := c.Stats(); st.DegradedReads == 0 {
		t.Fatalf("no degraded reads with slot %d down: %+v", victim.slot, st)
	}
	checkAll(t, c, after)
	if st := c.Stats(); st.DegradedStripes == 0 || len(c.DegradedStripes()) == 0 {
		t.Fatalf("no degraded stripes recorded after the kill: %+v", st)
	}
	// A client that never saw the server alive reads it all too.
	all := append(append(append([]written(nil), before...), straddle...), after...)
	checkAll(t, c, straddle)
	checkAll(t, newChildClient(), all)

	// Restart the killed server on its directory: its store opens, every
	// fragment it kept is whole.
	victim.start()
	vc := rawDial(t, victim.addr)
	list, err := rawList(vc, log.ID())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.IDs) == 0 {
		t.Fatal("restarted server holds no fragment of the log")
	}
	for i, id := range list.IDs {
		if sick, err := rawVerify(vc, id); err != nil || len(sick) != 0 {
			t.Fatalf("restarted server: fragment %s (%d bytes): sick %v, %v", id, list.Lengths[i], sick, err)
		}
	}
	if st := rawMustStat(t, vc); st.CorruptFound != 0 || st.Fragments != uint64(len(list.IDs)) {
		t.Fatalf("restarted server stats: %+v (%d fragments listed)", st, len(list.IDs))
	}

	c.SetDown(uint16(victim.slot), false)
	n, err := c.RepairDegraded(ctx)
	if err != nil {
		t.Fatalf("repair after restart: restored %d, %v", n, err)
	}
	if n == 0 {
		t.Fatal("nothing repaired after restart")
	}
	if d := c.DegradedStripes(); len(d) != 0 {
		t.Fatalf("still degraded after repair: %+v", d)
	}
	checkAll(t, c, all)

	// Full redundancy is back: lose a different server and read it all
	// with a fresh client.
	children[0].c.Kill()
	checkAll(t, newChildClient(), all)
}
