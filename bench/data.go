package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/atoll-fs/atoll/internal/auth"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/layout"
)

// DataConfig configures the data-path benchmark.
type DataConfig struct {
	Servers     int
	Policy      string
	Size        int64     // bytes written and read
	SmallBlocks int       // number of 4 KiB blocks in the small-block phase
	Cluster     []string  // manager addresses of a running cluster; empty: start Servers children
	Key         *auth.Key // the key for Cluster; children started here get a fresh cluster key
	Dir         string    // scratch directory (default: a new temp dir)
	Exe         string    // atoll binary used to start storage servers
	ReadWorkers int       // concurrent block reads (default 16)
	Logger      *slog.Logger
}

// Validate checks the configuration.
func (c *DataConfig) Validate() error {
	if len(c.Cluster) == 0 && (c.Servers < 1 || c.Servers > 64) {
		return fmt.Errorf("bench: --servers must be 1..64")
	}
	if c.Size < 1<<20 {
		return fmt.Errorf("bench: --size must be at least 1MiB")
	}
	if len(c.Cluster) == 0 && c.Exe == "" {
		return errors.New("bench: no atoll binary to start servers with")
	}
	p, err := layout.Parse(c.Policy)
	if err != nil {
		return err
	}
	if len(c.Cluster) > 0 {
		return nil // checked against the cluster's slots once known
	}
	return p.Validate(c.Servers)
}

// DataResult holds the figures; JSON names are stable.
type DataResult struct {
	Policy            string  `json:"policy"`
	Servers           int     `json:"servers"`
	SizeBytes         int64   `json:"size_bytes"`
	WriteMBps         float64 `json:"write_mbps"`
	ReadMBps          float64 `json:"read_mbps"`
	DegradedReadMBps  float64 `json:"degraded_read_mbps"`
	DegradedRatio     float64 `json:"degraded_read_ratio"`
	LocalWriteMBps    float64 `json:"local_write_mbps"`
	LocalReadMBps     float64 `json:"local_read_mbps"`
	WriteVsLocal      float64 `json:"write_vs_local"`
	ReadVsLocal       float64 `json:"read_vs_local"`
	SmallBlocks       int     `json:"small_blocks"`
	SmallBlocksPerS   float64 `json:"small_blocks_per_s"`
	MaxStorageRSSMiB  float64 `json:"max_storage_rss_mib"`
	DegradedReads     uint64  `json:"degraded_reads"`
	VerifiedReadBytes int64   `json:"verified_read_bytes"`
}

const mib = 1 << 20

// RunData runs the data-path benchmark: write then read Size bytes through
// the client library, read again with one server stopped, do the same with
// a local file, and write SmallBlocks 4 KiB blocks. Every read is compared
// with what was written.
func RunData(ctx context.Context, cfg DataConfig, progress io.Writer) (DataResult, error) {
	if err := cfg.Validate(); err != nil {
		return DataResult{}, err
	}
	if cfg.ReadWorkers == 0 {
		cfg.ReadWorkers = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SmallBlocks == 0 {
		cfg.SmallBlocks = 100000
	}
	pol, _ := layout.Parse(cfg.Policy)
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "atoll-bench-")
		if err != nil {
			return DataResult{}, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	res := DataResult{Policy: pol.String(), SizeBytes: cfg.Size, SmallBlocks: cfg.SmallBlocks}

	var children []*devcluster.Child
	var slots []client.SlotAddr
	key := cfg.Key
	if len(cfg.Cluster) == 0 {
		var err error
		if key, err = auth.NewClusterKey(); err == nil {
			err = auth.Save(filepath.Join(dir, "cluster.key"), key)
		}
		if err != nil {
			return res, err
		}
	}
	if len(cfg.Cluster) > 0 {
		mc := cluster.NewClient(cfg.Cluster, key, cfg.Logger)
		m, err := mc.Map(ctx, 0)
		mc.Close()
		if err != nil {
			return res, fmt.Errorf("bench: cannot reach the manager at %v: %w", cfg.Cluster, err)
		}
		for _, s := range m.Storage {
			if s.State == cluster.StateUp {
				slots = append(slots, client.SlotAddr{ID: s.Slot, Addr: s.Addr})
			}
		}
		if err := pol.Validate(len(slots)); err != nil {
			return res, err
		}
	} else {
		defer func() {
			for _, c := range children {
				c.Kill()
			}
		}()
		for i := 0; i < cfg.Servers; i++ {
			sdir := filepath.Join(dir, fmt.Sprintf("storage%d", i))
			ch, err := devcluster.Start(ctx, devcluster.ChildSpec{
				Name: fmt.Sprintf("storage%d", i), Exe: cfg.Exe,
				Args:     []string{"storage", "--dir", sdir, "--listen", "127.0.0.1:0", "--slot", strconv.Itoa(i), "--scrub-rate", "0", "--log-level", "warn", "--key", filepath.Join(dir, "cluster.key")},
				AddrFile: filepath.Join(dir, fmt.Sprintf("storage%d.addr", i)),
				Output:   os.Stderr,
			})
			if err != nil {
				return res, err
			}
			children = append(children, ch)
			slots = append(slots, client.SlotAddr{ID: uint16(i), Addr: ch.Addr})
		}
	}
	res.Servers = len(slots)
	// The sampler goroutine and this one both sample; rss guards the
	// peak and children (slot 0's child is replaced below).
	var rss struct {
		sync.Mutex
		peak float64
	}
	sampleRSS := func() {
		rss.Lock()
		defer rss.Unlock()
		for _, c := range children {
			if v := float64(c.SampleRSS()) / mib; v > rss.peak {
				rss.peak = v
			}
		}
	}
	stopSampling := make(chan struct{})
	var samplerWG sync.WaitGroup
	samplerWG.Add(1)
	go func() {
		defer samplerWG.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
				sampleRSS()
			}
		}
	}()
	defer func() { close(stopSampling); samplerWG.Wait() }()

	cl, err := client.New(client.Config{Slots: slots, Logger: cfg.Logger, ReadTimeout: 2 * time.Second, Key: key})
	if err != nil {
		return res, err
	}
	defer cl.Close()

	src := newSource(cfg.Size)
	say := func(format string, a ...any) {
		if progress != nil {
			fmt.Fprintf(progress, format+"\n", a...)
		}
	}

	// Phase 1: write.
	say("writing %s with %s over %d servers...", human(cfg.Size), pol, len(slots))
	log, err := cl.Log(ctx, pol)
	if err != nil {
		return res, err
	}
	var ptrs []layout.Pointer
	start := time.Now()
	for off := int64(0); off < cfg.Size; off += mib {
		p, err := log.Append(ctx, src.chunk(off))
		if err != nil {
			return res, err
		}
		ptrs = append(ptrs, p...)
	}
	if err := log.Flush(ctx); err != nil {
		return res, err
	}
	res.WriteMBps = mbps(cfg.Size, time.Since(start))
	say("  write          %8.1f MB/s", res.WriteMBps)

	// Phase 2: read everything back and compare.
	start = time.Now()
	if err := readAll(ctx, cl, ptrs, src, cfg.ReadWorkers); err != nil {
		return res, err
	}
	res.ReadMBps = mbps(cfg.Size, time.Since(start))
	res.VerifiedReadBytes = cfg.Size
	say("  read           %8.1f MB/s", res.ReadMBps)

	// Phase 3: stop one server (slot 0), read again.
	if len(children) > 0 && pol.M > 0 {
		children[0].Kill()
		start = time.Now()
		if err := readAll(ctx, cl, ptrs, src, cfg.ReadWorkers); err != nil {
			return res, fmt.Errorf("degraded read: %w", err)
		}
		res.DegradedReadMBps = mbps(cfg.Size, time.Since(start))
		res.DegradedRatio = res.DegradedReadMBps / res.ReadMBps
		res.DegradedReads = cl.Stats().DegradedReads
		say("  degraded read  %8.1f MB/s (%.0f%% of normal; slot 0 killed)", res.DegradedReadMBps, 100*res.DegradedRatio)
	}

	// Phase 4: the local filesystem, same bytes, same machine.
	lw, lr, err := localFile(filepath.Join(dir, "local.bin"), src, cfg.Size, cfg.ReadWorkers)
	if err != nil {
		return res, err
	}
	res.LocalWriteMBps, res.LocalReadMBps = lw, lr
	res.WriteVsLocal, res.ReadVsLocal = res.WriteMBps/lw, res.ReadMBps/lr
	say("  local write    %8.1f MB/s (atoll %.2fx)", lw, res.WriteVsLocal)
	say("  local read     %8.1f MB/s (atoll %.2fx)", lr, res.ReadVsLocal)

	// Phase 5: many 4 KiB blocks batched into stripes (on the surviving
	// servers when one was stopped).
	if len(children) > 0 && pol.M > 0 {
		// Bring the killed slot back so small blocks are not all degraded.
		ch, err := devcluster.Start(ctx, devcluster.ChildSpec{
			Name: "storage0", Exe: cfg.Exe,
			Args:     []string{"storage", "--dir", filepath.Join(dir, "storage0"), "--listen", slots[0].Addr, "--slot", "0", "--scrub-rate", "0", "--log-level", "warn"},
			AddrFile: filepath.Join(dir, "storage0.addr"),
			Output:   os.Stderr,
		})
		if err != nil {
			return res, fmt.Errorf("restart slot 0: %w", err)
		}
		rss.Lock()
		children[0] = ch
		rss.Unlock()
		cl.SetDown(0, false)
	}
	block := make([]byte, 4096)
	start = time.Now()
	var small []layout.Pointer
	for i := 0; i < cfg.SmallBlocks; i++ {
		block[0], block[1], block[2] = byte(i), byte(i>>8), byte(i>>16)
		p, err := log.Append(ctx, block)
		if err != nil {
			return res, err
		}
		small = append(small, p...)
	}
	if err := log.Flush(ctx); err != nil {
		return res, err
	}
	res.SmallBlocksPerS = float64(cfg.SmallBlocks) / time.Since(start).Seconds()
	say("  4 KiB blocks   %8.0f blocks/s (%d blocks)", res.SmallBlocksPerS, cfg.SmallBlocks)
	// Spot-check small blocks.
	for i := 0; i < len(small); i += max(1, len(small)/100) {
		if err := cl.Read(ctx, &small[i], block); err != nil {
			return res, err
		}
		if block[0] != byte(i) || block[1] != byte(i>>8) || block[2] != byte(i>>16) {
			return res, fmt.Errorf("small block %d: wrong bytes", i)
		}
	}
	sampleRSS()
	rss.Lock()
	res.MaxStorageRSSMiB = rss.peak
	rss.Unlock()
	say("  max storage RSS %7.1f MiB", res.MaxStorageRSSMiB)
	return res, nil
}

// source produces Size bytes deterministically: a 64 MiB random pattern
// with each MiB stamped with its index, so a block returned from the wrong
// place is caught by the comparison.
type source struct {
	pattern []byte
	scratch sync.Pool
}

func newSource(size int64) *source {
	n := int(min(size, 64*mib))
	p := make([]byte, n+mib)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(p); i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			p[i+j] = byte(v >> (8 * j))
		}
	}
	return &source{pattern: p}
}

// chunk returns the MiB at off (a fresh buffer, stamped).
func (s *source) chunk(off int64) []byte {
	b := make([]byte, mib)
	s.fill(off, b)
	return b
}

// fill writes the source bytes of [off, off+len(b)) into b.
func (s *source) fill(off int64, b []byte) {
	period := int64(len(s.pattern) - mib)
	for len(b) > 0 {
		m := off / mib
		in := off % mib
		n := int(min(int64(len(b)), mib-in))
		base := (m * mib) % period
		copy(b[:n], s.pattern[base+in:base+in+int64(n)])
		// Stamp the first 8 bytes of each MiB with its index.
		for j := in; j < 8 && j < in+int64(n); j++ {
			b[j-in] = byte(uint64(m) >> (8 * j))
		}
		b, off = b[n:], off+int64(n)
	}
}

// readAll reads the pointers as a sequential reader with read-ahead
// would: windows of 4 MiB, several in flight, and compares every byte.
func readAll(ctx context.Context, cl *client.Client, ptrs []layout.Pointer, src *source, workers int) error {
	type job struct {
		lo, hi int
		off    int64
	}
	var jobs []job
	var off int64
	for i := 0; i < len(ptrs); {
		j, n := i, 0
		for j < len(ptrs) && n+int(ptrs[j].Length) <= window {
			n += int(ptrs[j].Length)
			j++
		}
		if j == i {
			j, n = i+1, int(ptrs[i].Length)
		}
		jobs = append(jobs, job{i, j, off})
		off += int64(n)
		i = j
	}
	var next int64 = -1
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, window+layout.MaxFragmentSize)
			want := make([]byte, len(buf))
			for {
				mu.Lock()
				next++
				i := next
				stop := firstErr != nil
				mu.Unlock()
				if stop || i >= int64(len(jobs)) {
					return
				}
				jb := jobs[i]
				n := 0
				for k := jb.lo; k < jb.hi; k++ {
					n += int(ptrs[k].Length)
				}
				err := cl.ReadBlocks(ctx, ptrs[jb.lo:jb.hi], buf[:n])
				if err == nil {
					src.fill(jb.off, want[:n])
					if !bytes.Equal(buf[:n], want[:n]) {
						err = fmt.Errorf("bytes at %d..%d differ from what was written", jb.off, jb.off+int64(n))
					}
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// localFile writes size bytes to path in 1 MiB writes with a final fsync,
// then reads them back as Atoll's read phase does (workers readers taking
// the next window in turn, comparing), so the ratio compares like with
// like. Both reads find their bytes in the page cache: Atoll's storage
// servers' fragment files were just written too.
func localFile(path string, src *source, size int64, workers int) (wMBps, rMBps float64, err error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(path)
	defer f.Close()
	start := time.Now()
	for off := int64(0); off < size; off += mib {
		if _, err := f.Write(src.chunk(off)[:min(mib, size-off)]); err != nil {
			return 0, 0, err
		}
	}
	if err := f.Sync(); err != nil {
		return 0, 0, err
	}
	wMBps = mbps(size, time.Since(start))
	start = time.Now()
	var next atomic.Int64
	next.Store(-window)
	errs := make(chan error, max(workers, 1))
	for w := 0; w < max(workers, 1); w++ {
		go func() {
			buf, want := make([]byte, window), make([]byte, window)
			for {
				off := next.Add(window)
				if off >= size {
					errs <- nil
					return
				}
				n, err := f.ReadAt(buf[:min(window, size-off)], off)
				if err != nil && !errors.Is(err, io.EOF) {
					errs <- err
					return
				}
				src.fill(off, want[:n])
				if int64(n) != min(window, size-off) || !bytes.Equal(buf[:n], want[:n]) {
					errs <- fmt.Errorf("local file differs at %d", off)
					return
				}
			}
		}()
	}
	for w := 0; w < max(workers, 1); w++ {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return 0, 0, err
	}
	rMBps = mbps(size, time.Since(start))
	return wMBps, rMBps, nil
}

// window is the bytes one reader of the read phases asks for at a time.
const window = 4 * mib

func mbps(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }

func human(n int64) string { return layout.FormatSize(int(n)) }
