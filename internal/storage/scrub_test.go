package storage

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

type corruptLog struct {
	mu  sync.Mutex
	ids []fragment.ID
	rs  []CorruptRange
}

func (l *corruptLog) add(id fragment.ID, r CorruptRange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids = append(l.ids, id)
	l.rs = append(l.rs, r)
}

func TestScrub(t *testing.T) {
	const cs = 4096
	fs := vfs.NewMem()
	var seen corruptLog
	s := openStore(t, fs, func(c *Config) { c.ChunkSize = cs; c.OnCorrupt = seen.add })
	r := rand.New(rand.NewPCG(11, 12))
	var ids []fragment.ID
	var datas [][]byte
	total := int64(0)
	for i := range 5 {
		id := fid(uint64(i%2), uint64(i), 0)
		d := randBytes(r, 50<<10)
		if err := s.Put(bg, id, d, nil); err != nil {
			t.Fatal(err)
		}
		ids, datas = append(ids, id), append(datas, d)
		total += int64(len(d))
	}
	if err := s.ScrubOnce(bg, 0); err != nil {
		t.Fatal(err)
	}
	if st := s.Stat(); st.Scrub.Passes != 1 || st.Scrub.PassBytes != total || st.Scrub.CorruptFound != 0 || st.CorruptDetected != 0 || st.Scrub.LastPassEnd.IsZero() {
		t.Fatalf("Stat after clean pass = %+v", st)
	}

	flipByte(t, fs, s.fragPath(ids[3]), HeaderSize+4*cs+1)
	if err := s.ScrubOnce(bg, 0); err != nil {
		t.Fatal(err)
	}
	st := s.Stat()
	if st.Scrub.Passes != 2 || st.Scrub.CorruptFound != 1 || st.CorruptDetected != 1 {
		t.Fatalf("Stat after pass over rot = %+v", st)
	}
	if !slices.Equal(seen.ids, []fragment.ID{ids[3]}) || !slices.Equal(seen.rs, []CorruptRange{{4 * cs, cs}}) {
		t.Fatalf("OnCorrupt saw %v %v", seen.ids, seen.rs)
	}
	if err := s.Repair(bg, ids[3], datas[3]); err != nil {
		t.Fatal(err)
	}
	if err := s.ScrubOnce(bg, 0); err != nil {
		t.Fatal(err)
	}
	if st := s.Stat(); st.Scrub.Passes != 3 || st.Scrub.CorruptFound != 1 || st.Repairs != 1 {
		t.Fatalf("Stat after repair = %+v", st)
	}

	// Throttled: 250 KiB at 1 MiB/s takes about 0.24 s.
	start := time.Now()
	if err := s.ScrubOnce(bg, 1<<20); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("throttled pass took %v", d)
	}

	// Scrub runs passes until its context ends.
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	if err := s.Scrub(ctx, 0, 10*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Scrub = %v", err)
	}
	if st := s.Stat(); st.Scrub.Passes < 6 {
		t.Fatalf("Scrub made %d passes in total", st.Scrub.Passes)
	}
}

// TestConcurrent runs puts, appends, reads, deletes and the scrubber at once;
// under -race it also checks the locking. No operation may see corruption.
func TestConcurrent(t *testing.T) {
	const cs = 4096
	s := openStore(t, nil, func(c *Config) { c.ChunkSize = cs })
	ctx, cancel := context.WithCancel(bg)
	var wg sync.WaitGroup
	errc := make(chan error, 100)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	var scrubWG sync.WaitGroup
	scrubWG.Add(1)
	go func() {
		defer scrubWG.Done()
		if err := s.Scrub(ctx, 0, time.Millisecond); !errors.Is(err, context.Canceled) {
			fail(err)
		}
	}()

	// Writers of distinct fragments.
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 99))
			for i := range 15 {
				id := fid(100+uint64(g), uint64(i), 0)
				d := randBytes(r, r.IntN(100<<10))
				if err := s.Put(bg, id, d, crcsOf(d, cs)); err != nil {
					fail(err)
					return
				}
				got := make([]byte, len(d))
				if n, err := s.Read(bg, id, 0, got); err != nil || n != len(d) || !bytes.Equal(got, d) {
					fail(errors.New("put/read mismatch"))
					return
				}
			}
		}()
	}

	// Appenders sharing one fragment: each appends blocks of its own byte.
	shared := fid(1, 1, 1)
	const block, perAppender, appenders = 1500, 20, 4
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := bytes.Repeat([]byte{byte(g + 1)}, block)
			for range perAppender {
				if _, err := s.Append(bg, shared, d); err != nil {
					fail(err)
					return
				}
			}
		}()
	}

	// Put/delete churn of one id, with readers that must see the data or
	// nothing, never corruption.
	churn := fid(2, 2, 2)
	churnData := bytes.Repeat([]byte("churn"), 3000)
	var churning atomic.Bool
	churning.Store(true)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer churning.Store(false)
		for range 30 {
			if err := s.Put(bg, churn, churnData, nil); err != nil {
				fail(err)
				return
			}
			if err := s.Delete(bg, churn); err != nil {
				fail(err)
				return
			}
		}
	}()
	var readers sync.WaitGroup
	for range 3 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			buf := make([]byte, len(churnData))
			for churning.Load() {
				n, err := s.Read(bg, churn, 0, buf)
				if err == nil && (n != len(buf) || !bytes.Equal(buf, churnData)) {
					fail(errors.New("churn read returned wrong bytes"))
				}
				if err != nil && !errors.Is(err, ErrNotFound) {
					fail(err)
				}
				// Reads of the growing shared fragment.
				if in, err := s.Info(bg, shared); err == nil && in.Length > 0 {
					off := in.Length / 2
					if _, err := s.Read(bg, shared, off, make([]byte, in.Length-off)); err != nil {
						fail(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	readers.Wait()
	cancel()
	scrubWG.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}

	got := readAll(t, s, shared)
	if len(got) != block*perAppender*appenders {
		t.Fatalf("shared fragment is %d bytes", len(got))
	}
	counts := map[byte]int{}
	for i := 0; i < len(got); i += block {
		b := got[i : i+block]
		if !bytes.Equal(b, bytes.Repeat(b[:1], block)) {
			t.Fatalf("append block at %d interleaved", i)
		}
		counts[b[0]]++
	}
	for g := range appenders {
		if counts[byte(g+1)] != perAppender {
			t.Fatalf("appender %d has %d blocks", g, counts[byte(g+1)])
		}
	}
	if st := s.Stat(); st.CorruptDetected != 0 || st.Fragments != 6*15+1 {
		t.Fatalf("Stat = %+v", st)
	}
}

func benchStore(b *testing.B) *Store {
	return openStore(b, vfs.Default, func(c *Config) { c.Dir = b.TempDir() })
}

func BenchmarkPut1MiB(b *testing.B) {
	s := benchStore(b)
	data := randBytes(rand.New(rand.NewPCG(1, 1)), 1<<20)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := range b.N {
		if err := s.Put(bg, fid(1, uint64(i), 0), data, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPut1MiBParallel shows concurrent puts sharing fsync time
// (pebble group commit, parallel file syncs).
func BenchmarkPut1MiBParallel(b *testing.B) {
	s := benchStore(b)
	data := randBytes(rand.New(rand.NewPCG(1, 1)), 1<<20)
	var seq atomic.Uint64
	b.SetBytes(int64(len(data)))
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Put(bg, fid(1, seq.Add(1), 0), data, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkRead1MiB(b *testing.B) {
	s := benchStore(b)
	data := randBytes(rand.New(rand.NewPCG(1, 1)), 1<<20)
	const n = 16
	for i := range n {
		if err := s.Put(bg, fid(1, uint64(i), 0), data, nil); err != nil {
			b.Fatal(err)
		}
	}
	dst := make([]byte, len(data))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Read(bg, fid(1, uint64(i%n), 0), 0, dst); err != nil {
			b.Fatal(err)
		}
	}
}
