package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// dropCaches drops the kernel's page cache, dentries and inodes, machine
// wide (a variable so that tests can see whether RunFS calls it).
var dropCaches = func() error { return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0) }

// FSConfig configures the file system benchmark, which runs on any
// directory: an Atoll FUSE mount, or a local directory for comparison.
type FSConfig struct {
	Dir        string
	Size       int64 // sequential file size
	SmallFiles int   // 4 KiB files created, written and closed; then stat'ed
	// Jobs is the number of concurrent writers of the parallel small-file
	// phase (the serial phase has one). Default 8.
	Jobs int
	// KeepCache leaves the kernel's caches alone before the cold read
	// and the cold stat, which are then not cold. By default the caches
	// of the whole machine (page cache, dentries, inodes) are dropped
	// before each (when allowed: root), which a test running beside
	// others must not do.
	KeepCache bool
}

// Validate checks the configuration.
func (c *FSConfig) Validate() error {
	if c.Dir == "" {
		return errors.New("bench: --dir is required")
	}
	if st, err := os.Stat(c.Dir); err != nil || !st.IsDir() {
		return fmt.Errorf("bench: --dir %s is not a directory", c.Dir)
	}
	if c.Size < 1<<20 || c.SmallFiles < 1 {
		return errors.New("bench: --size must be at least 1MiB and --small-files positive")
	}
	if c.Jobs < 0 || c.Jobs > 256 {
		return fmt.Errorf("bench: --jobs %d: want 1 to 256", c.Jobs)
	}
	return nil
}

// FSResult holds the figures; JSON names are stable.
type FSResult struct {
	Dir          string  `json:"dir"`
	SizeBytes    int64   `json:"size_bytes"`
	SeqWriteMBps float64 `json:"seq_write_mbps"`
	ColdReadMBps float64 `json:"cold_read_mbps"`
	ColdCache    bool    `json:"cold_cache"` // page cache dropped before the read
	// SecondReadMBps reads the big file again right after the cold
	// read: the page cache (or the file system's own cache) is warm.
	SecondReadMBps float64 `json:"second_read_mbps"`
	SmallFiles     int     `json:"small_files"`
	SmallFilesPerS float64 `json:"small_files_per_s"`
	// SmallFsyncPerS is create+write+fsync+close: durable files, the
	// like-for-like comparison (Atoll's close is already durable).
	SmallFsyncPerS float64 `json:"small_files_fsync_per_s"`
	// SmallParallelPerS is create+write+close by Jobs concurrent writers,
	// each in its own directory.
	SmallParallelPerS float64 `json:"small_files_parallel_per_s"`
	Jobs              int     `json:"jobs"`
	// StatColdPerS is readdir + lstat of every small file (of the serial
	// phase) after dropping the kernel's caches; StatColdCache says
	// whether they really were dropped (root, and not KeepCache). When
	// false the "cold" figure is warm. StatWarmPerS is the same at once
	// again. StatPerS, the name of earlier versions, equals StatColdPerS.
	StatPerS      float64 `json:"stat_per_s"`
	StatColdPerS  float64 `json:"stat_cold_per_s"`
	StatColdCache bool    `json:"stat_cold_cache"`
	StatWarmPerS  float64 `json:"stat_warm_per_s"`
}

// RunFS writes Size bytes sequentially with a final fsync, reads them back
// cold and then again warm, creates SmallFiles 4 KiB files
// (create+write+close; in parallel; with fsync), and lists and stats them
// cold and then warm.
func RunFS(ctx context.Context, cfg FSConfig, progress io.Writer) (FSResult, error) {
	if err := cfg.Validate(); err != nil {
		return FSResult{}, err
	}
	say := func(format string, a ...any) {
		if progress != nil {
			fmt.Fprintf(progress, format+"\n", a...)
		}
	}
	work, err := os.MkdirTemp(cfg.Dir, "atoll-bench-fs-")
	if err != nil {
		return FSResult{}, err
	}
	defer os.RemoveAll(work)
	if cfg.Jobs == 0 {
		cfg.Jobs = 8
	}
	res := FSResult{Dir: cfg.Dir, SizeBytes: cfg.Size, SmallFiles: cfg.SmallFiles, Jobs: cfg.Jobs}
	src := newSource(cfg.Size)

	// Sequential write + fsync.
	path := filepath.Join(work, "seq")
	f, err := os.Create(path)
	if err != nil {
		return res, err
	}
	wbuf := make([]byte, mib) // one buffer: allocating is no part of the workload
	// The checksum of every MiB written, taken while the MiB is in the CPU
	// cache, lets the read check every byte without generating the data a
	// second time and comparing it (two more passes over memory, which
	// took about a sixth of the CPU of a cold read on a 2-core machine).
	sums := make([]uint32, 0, (cfg.Size+mib-1)/mib)
	start := time.Now()
	for off := int64(0); off < cfg.Size; off += mib {
		src.fill(off, wbuf)
		sums = append(sums, crc32.Checksum(wbuf[:min(mib, cfg.Size-off)], castagnoli))
		if _, err := f.Write(wbuf[:min(mib, cfg.Size-off)]); err != nil {
			f.Close()
			return res, err
		}
		if ctx.Err() != nil {
			f.Close()
			return res, ctx.Err()
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return res, err
	}
	if err := f.Close(); err != nil {
		return res, err
	}
	res.SeqWriteMBps = mbps(cfg.Size, time.Since(start))
	say("  sequential write+fsync %8.1f MB/s", res.SeqWriteMBps)

	// Cold read: drop the kernel's caches when allowed (root).
	if !cfg.KeepCache {
		res.ColdCache = dropCaches() == nil
	}
	buf := make([]byte, mib)
	if res.ColdReadMBps, err = readBack(path, cfg.Size, buf, sums); err != nil {
		return res, err
	}
	say("  cold read              %8.1f MB/s (page cache dropped: %v)", res.ColdReadMBps, res.ColdCache)

	// Second read, at once: what the page cache (or the file system's
	// own cache) gives back.
	if res.SecondReadMBps, err = readBack(path, cfg.Size, buf, sums); err != nil {
		return res, err
	}
	say("  second read (warm)     %8.1f MB/s", res.SecondReadMBps)

	// Small files.
	small := filepath.Join(work, "small")
	if err := os.Mkdir(small, 0o755); err != nil {
		return res, err
	}
	block := make([]byte, 4096)
	start = time.Now()
	for i := 0; i < cfg.SmallFiles; i++ {
		block[0], block[1] = byte(i), byte(i>>8)
		if err := os.WriteFile(filepath.Join(small, fmt.Sprintf("f%06d", i)), block, 0o644); err != nil {
			return res, err
		}
	}
	res.SmallFilesPerS = float64(cfg.SmallFiles) / time.Since(start).Seconds()
	say("  4 KiB files            %8.0f files/s", res.SmallFilesPerS)

	// The same with Jobs concurrent writers, each in its own directory.
	par := filepath.Join(work, "parallel")
	start = time.Now()
	errs := make(chan error, cfg.Jobs)
	for j := 0; j < cfg.Jobs; j++ {
		go func() {
			dir := filepath.Join(par, fmt.Sprintf("j%03d", j))
			err := os.MkdirAll(dir, 0o755)
			b := make([]byte, 4096)
			for i := j; i < cfg.SmallFiles && err == nil; i += cfg.Jobs {
				b[0], b[1] = byte(i), byte(i>>8)
				err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%06d", i)), b, 0o644)
			}
			errs <- err
		}()
	}
	var perr error
	for j := 0; j < cfg.Jobs; j++ {
		if e := <-errs; e != nil && perr == nil {
			perr = e
		}
	}
	if perr != nil {
		return res, perr
	}
	res.SmallParallelPerS = float64(cfg.SmallFiles) / time.Since(start).Seconds()
	say("  %-22s %8.0f files/s", fmt.Sprintf("4 KiB files, %d jobs", cfg.Jobs), res.SmallParallelPerS)

	// The same, durable: fsync before close (a quarter as many files).
	synced := filepath.Join(work, "synced")
	if err := os.Mkdir(synced, 0o755); err != nil {
		return res, err
	}
	nSync := max(cfg.SmallFiles/4, 1)
	start = time.Now()
	for i := 0; i < nSync; i++ {
		f, err := os.OpenFile(filepath.Join(synced, fmt.Sprintf("f%06d", i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return res, err
		}
		_, err = f.Write(block)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return res, err
		}
	}
	res.SmallFsyncPerS = float64(nSync) / time.Since(start).Seconds()
	say("  4 KiB files, fsync     %8.0f files/s", res.SmallFsyncPerS)

	// readdir + stat of every small file: cold (caches dropped, when
	// allowed), then at once again, warm.
	if !cfg.KeepCache {
		res.StatColdCache = dropCaches() == nil
	}
	if res.StatColdPerS, err = statAll(small, cfg.SmallFiles); err != nil {
		return res, err
	}
	res.StatPerS = res.StatColdPerS
	say("  readdir+stat, cold     %8.0f files/s (caches dropped: %v)", res.StatColdPerS, res.StatColdCache)
	if res.StatWarmPerS, err = statAll(small, cfg.SmallFiles); err != nil {
		return res, err
	}
	say("  readdir+stat, warm     %8.0f files/s", res.StatWarmPerS)
	return res, nil
}

// readBack reads the file at path, size bytes, checks every MiB against
// the checksums taken as it was written, and returns MB/s.
func readBack(path string, size int64, buf []byte, sums []uint32) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	start := time.Now()
	for off := int64(0); off < size; off += mib {
		n, err := io.ReadFull(f, buf[:min(mib, size-off)])
		if err != nil {
			return 0, fmt.Errorf("read at %d: %w", off, err)
		}
		if crc32.Checksum(buf[:n], castagnoli) != sums[off/mib] {
			return 0, fmt.Errorf("bytes of the MiB at %d differ from what was written", off)
		}
	}
	return mbps(size, time.Since(start)), nil
}

// statAll lists dir and lstats every entry; it wants exactly want
// entries and returns entries per second.
func statAll(dir string, want int) (float64, error) {
	start := time.Now()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		if _, err := os.Lstat(filepath.Join(dir, e.Name())); err != nil {
			return 0, err
		}
	}
	if len(ents) != want {
		return 0, fmt.Errorf("readdir found %d files, %d were written", len(ents), want)
	}
	return float64(len(ents)) / time.Since(start).Seconds(), nil
}
