package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// WorkerConfig is one load generator of `atoll bench scale`: a process on
// its own simulated client host, driven phase by phase through files in
// Sync (see ScaleConfig).
type WorkerConfig struct {
	Cluster []string // manager addresses
	Key     *auth.Key
	// Kind is "data" (Zebra's log: stripes straight to the storage
	// servers, then read back and compared) or "meta" (creates, stats and
	// a mixed namespace workload through the client library).
	Kind    string
	ID      int
	Size    int64  // data: bytes to write and read
	Policy  string // data: redundancy policy
	Files   int    // meta: files to create and stat
	Threads int    // meta: requests in flight
	// Pipeline is data: stripes of the log in flight (0: the client's
	// default).
	Pipeline int
	// Duration is how long a "run" phase lasts at most (data-run,
	// meta-run, files-run); it ends sooner when the coordinator leaves
	// the file stop-run in Sync.
	Duration time.Duration
	Sync     string // the barrier directory
	// Dir is the mount kind's directory on a FUSE mount of the cluster:
	// the worker writes and reads plain files there (no client of its
	// own).
	Dir    string
	Logger *slog.Logger
}

// WorkerPhase is what one worker did in one phase.
type WorkerPhase struct {
	Name  string `json:"name"`
	Start int64  `json:"start_ns"` // unix nanoseconds
	End   int64  `json:"end_ns"`
	Ops   int64  `json:"ops"`
	Bytes int64  `json:"bytes"`
	// Timeline is the work done (bytes for data, operations for meta) in
	// each tick from Start.
	Timeline []int64 `json:"timeline"`
}

// Tick is a timeline's step.
const Tick = 100 * time.Millisecond

// errDone ends a run phase's workers.
var errDone = errors.New("bench: the run is over")

// Phases of each worker kind, in order.
var workerPhases = map[string][]string{
	"data": {"write", "read"},
	"meta": {"create", "stat", "mixed"},
	// For failover: one phase of Duration, the mixed workload or writes.
	"data-run": {"run"},
	"meta-run": {"run"},
	// For growth: files of 4 MiB written through the naming layer, so
	// that the data is live and a rebalancing pass can move it.
	"files-run": {"run"},
	// For the mount experiment: files written through a FUSE mount with
	// write(2), then read back after dropping them from the page cache.
	"mount": {"write", "read"},
}

// runClock ends a run phase: at its deadline or once the coordinator left
// stop-run in the barrier directory (looked for every 50 ms at most).
type runClock struct {
	deadline time.Time
	stopFile string
	mu       sync.Mutex
	checked  time.Time
	over     bool
}

func newRunClock(cfg WorkerConfig) *runClock {
	return &runClock{deadline: time.Now().Add(cfg.Duration), stopFile: filepath.Join(cfg.Sync, "stop-run")}
}

// Over reports whether the run is over.
func (c *runClock) Over() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over || time.Now().After(c.deadline) {
		c.over = true
		return true
	}
	if time.Since(c.checked) >= 50*time.Millisecond {
		c.checked = time.Now()
		if _, err := os.Stat(c.stopFile); err == nil {
			c.over = true
		}
	}
	return c.over
}

// barrier announces that worker id is ready for phase and waits for the
// coordinator's go.
func barrier(ctx context.Context, dir, phase string, id int) error {
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("ready-%s-%d", phase, id)), nil, 0o644); err != nil {
		return err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go-"+phase)); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// RunWorker runs a worker's phases. An error is also left in Sync as
// error-ID, so the coordinator stops waiting for this worker.
func RunWorker(ctx context.Context, cfg WorkerConfig) (phases []WorkerPhase, err error) {
	defer func() {
		if err != nil {
			_ = os.WriteFile(filepath.Join(cfg.Sync, fmt.Sprintf("error-%d", cfg.ID)), []byte(err.Error()), 0o644)
		}
	}()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	names, ok := workerPhases[cfg.Kind]
	if !ok {
		return nil, fmt.Errorf("bench: worker kind %q (data or meta)", cfg.Kind)
	}
	if cfg.Kind == "mount" {
		return runPhases(ctx, cfg, names, mountWorker(ctx, cfg))
	}
	// The client as the CLI, the mount and the gateways build it: it
	// follows the map (a storage server marked down, new slots).
	conn, err := connect.DialWith(ctx, cfg.Cluster, cfg.Key, cfg.Logger, connect.Tune{Data: func(c *client.Config) {
		c.ReadTimeout = 5 * time.Second
		c.Pipeline = cfg.Pipeline
	}})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer conn.Close()
	// As the mount does: refresh the map every 5 s; stopped before the
	// connection closes.
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		conn.Watch(wctx, 5*time.Second)
	}()
	defer func() { stopWatch(); <-watched }()

	var run func(phase string, done *atomic.Int64) (ops, bytes int64, err error)
	switch cfg.Kind {
	case "data", "data-run":
		run, err = dataWorker(ctx, cfg, conn.Data)
	case "files-run":
		run, err = filesWorker(ctx, cfg, conn.FS)
	case "meta", "meta-run":
		// The stats go through a second naming layer with nothing cached
		// and no leases, so each one is an island request.
		statFS, ferr := client.NewFS(client.FSConfig{Data: conn.Data, Map: conn.View, Logger: cfg.Logger})
		if ferr != nil {
			return nil, ferr
		}
		defer statFS.Close()
		run, err = metaWorker(ctx, cfg, conn.FS, statFS)
	}
	if err != nil {
		return nil, err
	}
	return runPhases(ctx, cfg, names, run)
}

// runPhases runs each phase at its barrier with a timeline of the work
// done, and leaves ready-end-ID after the last.
func runPhases(ctx context.Context, cfg WorkerConfig, names []string, run func(string, *atomic.Int64) (int64, int64, error)) (phases []WorkerPhase, err error) {
	for _, name := range names {
		if err := barrier(ctx, cfg.Sync, name, cfg.ID); err != nil {
			return phases, err
		}
		p := WorkerPhase{Name: name, Start: time.Now().UnixNano()}
		var done atomic.Int64
		stop := make(chan struct{})
		ticked := make(chan []int64)
		go func() {
			var tl []int64
			var last int64
			t := time.NewTicker(Tick)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					v := done.Load()
					tl = append(tl, v-last)
					last = v
				case <-stop:
					ticked <- append(tl, done.Load()-last)
					return
				}
			}
		}()
		p.Ops, p.Bytes, err = run(name, &done)
		p.End = time.Now().UnixNano()
		close(stop)
		p.Timeline = <-ticked
		if err != nil {
			return phases, fmt.Errorf("%s: %w", name, err)
		}
		phases = append(phases, p)
	}
	return phases, os.WriteFile(filepath.Join(cfg.Sync, fmt.Sprintf("ready-end-%d", cfg.ID)), nil, 0o644)
}

func dataWorker(ctx context.Context, cfg WorkerConfig, cl *client.Client) (func(string, *atomic.Int64) (int64, int64, error), error) {
	pol, err := layout.Parse(cfg.Policy)
	if err != nil {
		return nil, err
	}
	src := newSource(cfg.Size)
	var ptrs []layout.Pointer
	return func(phase string, done *atomic.Int64) (int64, int64, error) {
		switch phase {
		case "run": // writes until Duration is over
			log, err := cl.Log(ctx, pol)
			if err != nil {
				return 0, 0, err
			}
			var n int64
			for clock := newRunClock(cfg); !clock.Over(); n += mib {
				p, err := log.Append(ctx, src.chunk(n % max(cfg.Size, mib))[:mib])
				if err != nil {
					return 0, n, err
				}
				ptrs = append(ptrs, p...)
				done.Add(mib)
			}
			return int64(len(ptrs)), n, log.Flush(ctx)
		case "write":
			log, err := cl.Log(ctx, pol)
			if err != nil {
				return 0, 0, err
			}
			for off := int64(0); off < cfg.Size; off += mib {
				p, err := log.Append(ctx, src.chunk(off)[:min(mib, cfg.Size-off)])
				if err != nil {
					return 0, 0, err
				}
				ptrs = append(ptrs, p...)
				done.Add(int64(min(mib, cfg.Size-off)))
			}
			if err := log.Flush(ctx); err != nil {
				return 0, 0, err
			}
		case "read":
			if err := readAll(ctx, cl, ptrs, src, 4); err != nil {
				return 0, 0, err
			}
		}
		return int64(len(ptrs)), cfg.Size, nil
	}, nil
}

func metaWorker(ctx context.Context, cfg WorkerConfig, fs, statFS *client.FS) (func(string, *atomic.Int64) (int64, int64, error), error) {
	cred := metawire.Root
	// Directories hash onto islands: 256 per worker keep any island's
	// share from hanging on a few hot directories' hashes. (With 32 the
	// islands were evenly busy all the same, at 88-99% of their CPU at
	// 8 islands: the spread was not what held the efficiency down.)
	const dirs = 256
	top, err := fs.MkdirAll(ctx, cred, fmt.Sprintf("/w%d", cfg.ID), 0o755)
	if err != nil {
		return nil, err
	}
	dir := make([]uint64, dirs)
	for i := range dir {
		r, err := fs.Mkdir(ctx, metawire.CreateReq{Cred: cred, Dir: top.Ino, Name: fmt.Sprintf("d%03d", i), Mode: 0o755})
		if err != nil {
			return nil, fmt.Errorf("mkdir: %w", err)
		}
		dir[i] = r.Attr.Ino
	}
	threads := max(cfg.Threads, 1)
	return func(phase string, ops *atomic.Int64) (int64, int64, error) {
		var err error
		// mixed is one round of create, rename, lookup, unlink.
		mixed := func(i int) error {
			d := dir[i%dirs]
			a, b := fmt.Sprintf("t%07d", i), fmt.Sprintf("u%07d", i)
			if _, err := fs.Create(ctx, metawire.CreateReq{Cred: cred, Dir: d, Name: a, Mode: 0o644}); err != nil {
				return err
			}
			if err := fs.Rename(ctx, metawire.RenameReq{Cred: cred, SrcDir: d, SrcName: a, DstDir: d, DstName: b}); err != nil {
				return err
			}
			if _, err := fs.Lookup(ctx, cred, d, b); err != nil {
				return err
			}
			if err := fs.Unlink(ctx, cred, d, b); err != nil {
				return err
			}
			ops.Add(4)
			return nil
		}
		switch phase {
		case "run": // the mixed workload until Duration is over
			clock := newRunClock(cfg)
			err = parallel(ctx, threads, 1<<30, func(_, i int) error {
				if clock.Over() {
					return errDone
				}
				return mixed(i)
			})
			if errors.Is(err, errDone) {
				err = nil
			}
		case "create": // durable: each synced on its island before the answer
			err = parallel(ctx, threads, cfg.Files, func(_, i int) error {
				_, err := fs.Create(ctx, metawire.CreateReq{Cred: cred, Dir: dir[i%dirs], Name: fmt.Sprintf("f%06d", i), Mode: 0o644})
				ops.Add(1)
				return err
			})
		case "stat": // lookups by a client that has seen none of them
			err = parallel(ctx, threads, cfg.Files, func(_, i int) error {
				_, err := statFS.Lookup(ctx, cred, dir[i%dirs], fmt.Sprintf("f%06d", i))
				ops.Add(1)
				return err
			})
		case "mixed": // create, rename, lookup, unlink: four operations
			err = parallel(ctx, threads, max(cfg.Files/4, 1), func(_, i int) error { return mixed(i) })
		default:
			err = errors.New("unknown phase " + strings.ToUpper(phase))
		}
		return ops.Load(), 0, err
	}, nil
}

// filesWorker writes 4 MiB files in its own directory until the run is
// over, four at a time: data a rebalancing pass can move (the data
// workers' raw logs belong to no file).
func filesWorker(ctx context.Context, cfg WorkerConfig, fs *client.FS) (func(string, *atomic.Int64) (int64, int64, error), error) {
	cred := metawire.Root
	top := fmt.Sprintf("/w%d", cfg.ID)
	if _, err := fs.MkdirAll(ctx, cred, top, 0o755); err != nil {
		return nil, err
	}
	const fileSize = 4 * mib
	src := newSource(64 * mib)
	return func(phase string, done *atomic.Int64) (int64, int64, error) {
		clock := newRunClock(cfg)
		var files atomic.Int64
		err := parallel(ctx, 4, 1<<30, func(_, i int) error {
			if clock.Over() {
				return errDone
			}
			f, err := fs.CreateFile(ctx, cred, fmt.Sprintf("%s/f%06d", top, i), 0o644)
			if err != nil {
				return err
			}
			for off := int64(0); off < fileSize; off += mib {
				if _, err := f.WriteAt(ctx, src.chunk(int64(i)*fileSize+off), off); err != nil {
					_ = f.Close(ctx)
					return err
				}
				done.Add(mib)
			}
			files.Add(1)
			return f.Close(ctx)
		})
		if errors.Is(err, errDone) {
			err = nil
		}
		return files.Load(), done.Load(), err // done: this phase's bytes
	}, nil
}

// mountWorker writes Size bytes into four files under Dir with 1 MiB
// write(2) calls, each file fsynced and closed (the mount commits at
// close), then reads them back after dropping them from the kernel's page
// cache (fadvise DONTNEED), comparing every byte.
func mountWorker(ctx context.Context, cfg WorkerConfig) func(string, *atomic.Int64) (int64, int64, error) {
	const files = 4
	per := max(cfg.Size/files/mib, 1) * mib
	src := newSource(64 * mib)
	name := func(f int) string { return filepath.Join(cfg.Dir, fmt.Sprintf("w%d-f%d", cfg.ID, f)) }
	return func(phase string, done *atomic.Int64) (int64, int64, error) {
		err := parallel(ctx, files, files, func(_, f int) error {
			base := int64(f) * per
			switch phase {
			case "write":
				fh, err := os.OpenFile(name(f), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
				if err != nil {
					return err
				}
				for off := int64(0); off < per; off += mib {
					if _, err := fh.Write(src.chunk(base + off)); err != nil {
						fh.Close()
						return err
					}
					done.Add(mib)
				}
				if err := fh.Sync(); err != nil {
					fh.Close()
					return err
				}
				return fh.Close()
			case "read":
				fh, err := os.Open(name(f))
				if err != nil {
					return err
				}
				defer fh.Close()
				if err := unix.Fadvise(int(fh.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
					return err
				}
				buf := make([]byte, mib)
				for off := int64(0); off < per; off += mib {
					if _, err := io.ReadFull(fh, buf); err != nil {
						return fmt.Errorf("read %s at %d: %w", name(f), off, err)
					}
					if !bytes.Equal(buf, src.chunk(base+off)) {
						return fmt.Errorf("%s: the MiB at %d differs from what was written", name(f), off)
					}
					done.Add(mib)
				}
			}
			return nil
		})
		return files, files * per, err
	}
}
