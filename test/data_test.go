package test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/layout"
)

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

type written struct {
	data []byte
	ptrs []layout.Pointer
}

// writeFiles appends each buffer as one "file" and flushes.
func writeFiles(t *testing.T, c *client.Client, pol layout.Policy, files [][]byte) []written {
	t.Helper()
	ctx := context.Background()
	log, err := c.Log(ctx, pol)
	if err != nil {
		t.Fatal(err)
	}
	var out []written
	for _, f := range files {
		p, err := log.Append(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, written{f, p})
	}
	if err := log.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return out
}

// readFile reads a written file back block by block.
func readFile(ctx context.Context, c *client.Client, w written) ([]byte, error) {
	var out []byte
	for i := range w.ptrs {
		b := make([]byte, w.ptrs[i].Length)
		if err := c.Read(ctx, &w.ptrs[i], b); err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}

func checkAll(t *testing.T, c *client.Client, ws []written) {
	t.Helper()
	for i, w := range ws {
		got, err := readFile(context.Background(), c, w)
		if err != nil {
			t.Fatalf("file %d (%d bytes): %v", i, len(w.data), err)
		}
		if !bytes.Equal(got, w.data) {
			t.Fatalf("file %d (%d bytes): bytes differ", i, len(w.data))
		}
	}
}

func mustPolicy(t *testing.T, s string) layout.Policy {
	t.Helper()
	p, err := layout.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRoundTripEveryPolicy(t *testing.T) {
	servers := startServers(t, 6)
	c := newClient(t, servers, nil)
	r := rand.New(rand.NewPCG(1, 1))
	sizes := []int{0, 1, 7, 4095, 4096, 65535, 65536, 65537, 1 << 20, 3<<20 + 5, 13 << 20}
	for i := 0; i < 8; i++ {
		sizes = append(sizes, r.IntN(2<<20))
	}
	var files [][]byte
	for _, n := range sizes {
		files = append(files, randBytes(r, n))
	}
	for _, ps := range []string{"none", "mirror:2", "mirror:3", "ec:2+1", "ec:4+1", "ec:4+2", "ec:3+2,frag=64KiB,block=4KiB", "ec:5+1,frag=256KiB"} {
		t.Run(ps, func(t *testing.T) {
			ws := writeFiles(t, c, mustPolicy(t, ps), files)
			checkAll(t, c, ws)
		})
	}
	if st := c.Stats(); st.DegradedReads != 0 || st.DegradedStripes != 0 || st.CorruptDetected != 0 {
		t.Fatalf("healthy cluster shows trouble: %+v", st)
	}
}

func TestDegradedReads(t *testing.T) {
	for _, tc := range []struct {
		policy string
		kill   []int
	}{
		{"ec:4+1", []int{2}},
		{"ec:4+2", []int{0, 3}},
		{"mirror:3", []int{1, 4}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			servers := startServers(t, 6)
			c := newClient(t, servers, nil)
			r := rand.New(rand.NewPCG(2, 2))
			var files [][]byte
			for _, n := range []int{10, 70000, 1 << 20, 5<<20 + 3, 9 << 20} {
				files = append(files, randBytes(r, n))
			}
			ws := writeFiles(t, c, mustPolicy(t, tc.policy), files)
			for _, k := range tc.kill {
				servers[k].stop()
			}
			checkAll(t, c, ws)
			if c.Stats().DegradedReads == 0 {
				t.Fatal("no degraded reads counted with servers down")
			}
			// A fresh client that never saw the servers alive reads too.
			c2 := newClient(t, servers, nil)
			checkAll(t, c2, ws)
		})
	}
}

func TestTooManyLostIsAnError(t *testing.T) {
	servers := startServers(t, 5)
	c := newClient(t, servers, nil)
	ws := writeFiles(t, c, mustPolicy(t, "ec:4+1"), [][]byte{randBytes(rand.New(rand.NewPCG(3, 3)), 6<<20)})
	// Stop the servers of two data fragments of the first stripe.
	p := ws[0].ptrs[0]
	for _, s := range servers {
		if s.slot == p.Slots[0] || s.slot == p.Slots[1] {
			s.stop()
		}
	}
	_, err := readFile(context.Background(), c, ws[0])
	if !errors.Is(err, client.ErrUnrecoverable) {
		t.Fatalf("want ErrUnrecoverable, got %v", err)
	}
}

// fragPath finds a fragment's file under a storage directory.
func fragPath(t *testing.T, dir string, id fragment.ID) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "frags", "*", id.String()))
	if len(m) != 1 {
		t.Fatalf("fragment %s: %d files", id, len(m))
	}
	return m[0]
}

func serverOf(servers []*server, slot uint16) *server {
	for _, s := range servers {
		if s.slot == slot {
			return s
		}
	}
	return nil
}

func TestCorruptFragmentIsRepairedInPlace(t *testing.T) {
	servers := startServers(t, 5)
	c := newClient(t, servers, nil)
	r := rand.New(rand.NewPCG(4, 4))
	ws := writeFiles(t, c, mustPolicy(t, "ec:4+1"), [][]byte{randBytes(r, 3<<20+100)})
	p := ws[0].ptrs[20] // a block inside data fragment 1 of stripe 0 (blocks are 64 KiB)
	spans := layout.Spans(int(p.Shard), int(p.Offset), int(p.Length))
	frag := spans[0].Frag
	id := p.Fragment(frag)
	s := serverOf(servers, p.Slots[frag])
	path := fragPath(t, s.dir, id)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Flip bytes inside the block's range in the file (data starts after
	// the store's 64-byte header).
	bad := append([]byte(nil), orig...)
	at := 64 + spans[0].Off + 100
	for i := 0; i < 16; i++ {
		bad[at+i] ^= 0xff
	}
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	checkAll(t, c, ws)
	if st := c.Stats(); st.CorruptDetected == 0 || st.DegradedReads == 0 {
		t.Fatalf("corruption not detected: %+v", st)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Repairs == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no repair: %+v", c.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, err := os.ReadFile(fragPath(t, s.dir, id))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[64:], orig[64:]) {
		t.Fatal("fragment file not repaired to its original bytes")
	}
	sick, err := s.srv.Store().Verify(context.Background(), id)
	if err != nil || len(sick) != 0 {
		t.Fatalf("verify after repair: %v %v", sick, err)
	}
	st, err := c.ServerStats(context.Background(), s.slot)
	if err != nil || st.CorruptFound == 0 || st.Repairs != 1 {
		t.Fatalf("server stats: %+v %v", st, err)
	}
}

func TestMissingFragmentIsRecreated(t *testing.T) {
	servers := startServers(t, 5)
	c := newClient(t, servers, nil)
	ws := writeFiles(t, c, mustPolicy(t, "ec:4+1"), [][]byte{randBytes(rand.New(rand.NewPCG(5, 5)), 2<<20)})
	p := ws[0].ptrs[0]
	if err := c.DeleteFragment(context.Background(), p.Slots[0], p.Fragment(0)); err != nil {
		t.Fatal(err)
	}
	checkAll(t, c, ws)
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Repairs == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no repair: %+v", c.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := serverOf(servers, p.Slots[0]).srv.Store().Info(context.Background(), p.Fragment(0)); err != nil {
		t.Fatalf("fragment not recreated: %v", err)
	}
	before := c.Stats().DegradedReads
	checkAll(t, c, ws)
	if c.Stats().DegradedReads != before {
		t.Fatal("reads still degraded after repair")
	}
}

func TestWritesWhileAServerIsDown(t *testing.T) {
	t.Run("enough servers up: placed around it", func(t *testing.T) {
		servers := startServers(t, 6)
		c := newClient(t, servers, nil)
		servers[3].stop()
		c.SetDown(3, true)
		ws := writeFiles(t, c, mustPolicy(t, "ec:4+1"), [][]byte{randBytes(rand.New(rand.NewPCG(6, 6)), 9<<20)})
		if st := c.Stats(); st.DegradedStripes != 0 {
			t.Fatalf("degraded with enough servers: %+v", st)
		}
		for _, w := range ws {
			for _, p := range w.ptrs {
				for _, s := range p.Slots {
					if s == 3 {
						t.Fatal("placed on the down slot")
					}
				}
			}
		}
		checkAll(t, c, ws)
	})
	t.Run("too few: degraded, then repaired", func(t *testing.T) {
		servers := startServers(t, 5)
		c := newClient(t, servers, nil)
		servers[2].stop()
		// The client learns of the failure from the puts themselves.
		ws := writeFiles(t, c, mustPolicy(t, "ec:4+1"), [][]byte{randBytes(rand.New(rand.NewPCG(7, 7)), 9<<20)})
		deg := c.DegradedStripes()
		if len(deg) == 0 || c.Stats().DegradedStripes == 0 {
			t.Fatalf("no degraded stripes recorded: %+v", c.Stats())
		}
		checkAll(t, c, ws)
		servers[2].start()
		c.SetDown(2, false)
		n, err := c.RepairDegraded(context.Background())
		if err != nil || n == 0 {
			t.Fatalf("repair: n=%d err=%v", n, err)
		}
		if d := c.DegradedStripes(); len(d) != 0 {
			t.Fatalf("still degraded: %+v", d)
		}
		// Fully redundant again: lose a different server and read all.
		servers[0].stop()
		checkAll(t, newClient(t, servers, nil), ws)
	})
	t.Run("fewer than K up: the write fails", func(t *testing.T) {
		servers := startServers(t, 5)
		c := newClient(t, servers, nil)
		servers[0].stop()
		servers[1].stop()
		ctx := context.Background()
		log, err := c.Log(ctx, mustPolicy(t, "ec:4+1"))
		if err != nil {
			t.Fatal(err)
		}
		_, aerr := log.Append(ctx, make([]byte, 100))
		ferr := log.Flush(ctx)
		if aerr == nil && ferr == nil {
			t.Fatal("write with 3 of 5 servers up succeeded for ec:4+1")
		}
	})
}

func TestImpossiblePolicies(t *testing.T) {
	servers := startServers(t, 5)
	c := newClient(t, servers, nil)
	for _, ps := range []string{"ec:4+2", "ec:5+1", "mirror:6"} {
		if _, err := c.Log(context.Background(), mustPolicy(t, ps)); !errors.Is(err, layout.ErrBadPolicy) {
			t.Errorf("%s on 5 slots: %v", ps, err)
		}
	}
}

func TestClientRestartContinuesItsLog(t *testing.T) {
	servers := startServers(t, 5)
	pol := mustPolicy(t, "ec:4+1")
	c1 := newClient(t, servers, func(c *client.Config) { c.ClientID = 42 })
	w1 := writeFiles(t, c1, pol, [][]byte{randBytes(rand.New(rand.NewPCG(8, 8)), 5<<20)})
	c1.Close()
	c2 := newClient(t, servers, func(c *client.Config) { c.ClientID = 42 })
	w2 := writeFiles(t, c2, pol, [][]byte{randBytes(rand.New(rand.NewPCG(9, 9)), 1<<20)})
	if w2[0].ptrs[0].Stripe.Seq <= w1[0].ptrs[len(w1[0].ptrs)-1].Stripe.Seq {
		t.Fatalf("restarted client reused stripe ids: %v after %v", w2[0].ptrs[0].Stripe, w1[0].ptrs[len(w1[0].ptrs)-1].Stripe)
	}
	checkAll(t, c2, append(w1, w2...))
}

func TestDiskFull(t *testing.T) {
	servers := make([]*server, 5)
	for i := range servers {
		servers[i] = &server{t: t, slot: uint16(i), dir: t.TempDir(), cap: 3 << 20}
		servers[i].start()
		t.Cleanup(servers[i].stop)
	}
	c := newClient(t, servers, nil)
	ctx := context.Background()
	log, err := c.Log(ctx, mustPolicy(t, "ec:4+1"))
	if err != nil {
		t.Fatal(err)
	}
	// 4 MiB stripes put 1 MiB per server: the fourth stripe does not fit.
	r := rand.New(rand.NewPCG(10, 10))
	var ok []written
	var ferr error
	for i := 0; i < 5 && ferr == nil; i++ {
		d := randBytes(r, 4<<20)
		p, err := log.Append(ctx, d)
		if err == nil {
			err = log.Flush(ctx)
		}
		if err != nil {
			ferr = err
			break
		}
		ok = append(ok, written{d, p})
	}
	if !errors.Is(ferr, fragment.ErrNoSpace) {
		t.Fatalf("want ErrNoSpace, got %v", ferr)
	}
	if len(ok) < 2 {
		t.Fatalf("only %d stripes fit", len(ok))
	}
	checkAll(t, c, ok)
	for _, s := range servers {
		st := s.srv.Store().Stat()
		if st.UsedBytes > 3<<20 {
			t.Fatalf("slot %d over capacity: %d", s.slot, st.UsedBytes)
		}
	}
}
