package meta

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// retryBusy repeats op while it fails with ErrBusy, as a client does.
func retryBusy(ctx context.Context, op func() error) error {
	for {
		err := op()
		if !errors.Is(err, metawire.ErrBusy) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
	}
}

// TestConcurrentCrossIsland runs clients that create files, move them
// between directories of different islands and move their own
// directories into each other's (which races for loops), all at once.
// Nothing may be lost, no cycle may form, nothing may deadlock, and fsck
// must be clean.
func TestConcurrentCrossIsland(t *testing.T) {
	w := newThreeWay(t)
	r := w.r
	var tops []uint64
	for _, id := range w.ids {
		tops = append(tops, w.dirs[id].Ino)
	}
	const workers = 8
	const ops = 80
	wdirs := make([]uint64, workers)
	for k := range workers {
		wdirs[k] = must(r.mkdir(tops[k%3], fmt.Sprintf("w%d", k), 0o777)).Ino
	}
	ctx, cancel := context.WithTimeout(bg, 60*time.Second)
	defer cancel()
	type place struct {
		dir  uint64
		name string
	}
	files := make([]map[string]place, workers) // worker -> file id -> where
	wparent := make([]uint64, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for k := range workers {
		files[k] = map[string]place{}
		wparent[k] = tops[k%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(k), 42))
			fail := func(format string, args ...any) {
				errs <- fmt.Errorf("worker %d: "+format, append([]any{k}, args...)...)
			}
			for n := range ops {
				if ctx.Err() != nil {
					fail("timeout")
					return
				}
				dirs := append(append([]uint64(nil), tops...), wdirs[k])
				switch x := rng.IntN(10); {
				case x < 4 || len(files[k]) == 0:
					id := fmt.Sprintf("f%d-%d", k, n)
					d := dirs[rng.IntN(len(dirs))]
					if err := retryBusy(ctx, func() error { _, err := r.create(d, id, 0o644); return err }); err != nil {
						fail("create %s: %v", id, err)
						return
					}
					files[k][id] = place{d, id}
				case x < 8:
					var id string
					for id = range files[k] {
						break
					}
					from := files[k][id]
					to := place{dirs[rng.IntN(len(dirs))], fmt.Sprintf("f%d-%d", k, n)}
					if err := retryBusy(ctx, func() error { return r.rename(from.dir, from.name, to.dir, to.name, 0) }); err != nil {
						fail("rename %v -> %v: %v", from, to, err)
						return
					}
					files[k][id] = to
				default:
					// Move this worker's directory under a top directory or
					// under another worker's directory.
					to := tops[rng.IntN(3)]
					if rng.IntN(2) == 0 {
						to = wdirs[rng.IntN(workers)]
					}
					name := fmt.Sprintf("w%d", k)
					err := retryBusy(ctx, func() error { return r.rename(wparent[k], name, to, name, 0) })
					switch {
					case err == nil:
						wparent[k] = to
					case errors.Is(err, metawire.ErrInvalid):
						// It would have gone inside itself.
					default:
						fail("move w%d to %v: %v", k, namespace.Ino(to), err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	w.settle()
	for k := range workers {
		for id, p := range files[k] {
			a, err := r.lookup(p.dir, p.name)
			if err != nil {
				t.Fatalf("worker %d file %s at %v/%s: %v", k, id, namespace.Ino(p.dir), p.name, err)
			}
			_ = a
		}
		if got := must(r.lookup(wdirs[k], "..")); got.Ino != wparent[k] {
			t.Fatalf("w%d: parent %v, want %v", k, namespace.Ino(got.Ino), namespace.Ino(wparent[k]))
		}
	}
	rep := w.fsck()
	if !rep.Clean() {
		t.Fatalf("fsck: %v", rep.Problems)
	}
	t.Logf("fsck: %d inodes, %d entries", rep.Inodes, rep.Dirents)
}
