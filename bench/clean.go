package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/cleaner"
	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// CleanConfig configures the cleaner benchmark.
type CleanConfig struct {
	Storage    int
	WorkingSet int64   // bytes of files overwritten
	Rounds     int     // overwrite rounds, each rewriting half the blocks at random
	Foreground int64   // bytes written by the foreground writer, alone and during cleaning
	Rate       int64   // cleaner copy rate (bytes/s)
	Share      float64 // cleaner share of the measured capacity (default cleaner.DefaultShare)
	// RebuildData is written (sequential 4 MiB files) just before a
	// server is killed, so the rebuild has enough to time. Default 1 GiB.
	RebuildData int64
	// RebuildOnly skips the overwrite and cleaning phases.
	RebuildOnly bool
	Dir         string
	Exe         string
	BasePort    int
	Logger      *slog.Logger
}

// Validate checks the configuration and fills defaults.
func (c *CleanConfig) Validate() error {
	if c.Storage == 0 {
		c.Storage = 5
	}
	if c.WorkingSet == 0 {
		c.WorkingSet = 256 << 20
	}
	if c.Rounds == 0 {
		c.Rounds = 2
	}
	if c.Foreground == 0 {
		c.Foreground = 256 << 20
	}
	if c.Rate == 0 {
		c.Rate = cleaner.DefaultRate
	}
	if c.BasePort == 0 {
		c.BasePort = 17600
	}
	if c.RebuildData == 0 {
		c.RebuildData = 1 << 30
	}
	if c.Share == 0 {
		c.Share = cleaner.DefaultShare
	}
	switch {
	case c.Storage < 5:
		return fmt.Errorf("bench: clean needs at least 5 storage servers (ec:4+1)")
	case c.WorkingSet < 16<<20 || c.Foreground < 16<<20:
		return fmt.Errorf("bench: --size and --foreground must be at least 16 MiB")
	case c.Exe == "":
		return fmt.Errorf("bench: no atoll binary")
	}
	return nil
}

// CleanResult holds the figures; JSON names are stable.
type CleanResult struct {
	LiveBytes       int64 `json:"live_bytes"`
	DiskBeforeBytes int64 `json:"disk_before_bytes"`
	DiskAfterBytes  int64 `json:"disk_after_bytes"`
	CopiedBytes     int64 `json:"copied_bytes"`          // live file bytes the pass copied (logical)
	CopiedPhysical  int64 `json:"copied_physical_bytes"` // the same with parity: what the copies took on disk
	ReclaimedBytes  int64 `json:"reclaimed_bytes"`       // disk bytes given back, net of the copies (physical)
	// WriteAmplification is disk bytes written by the copies per disk
	// byte given back: physical by physical.
	WriteAmplification float64 `json:"write_amplification"`
	// CleanOverlap is the share of the measured pass's time during which
	// the foreground writer ran (1: the whole pass competed with it; the
	// foreground figure during cleaning means little when it is small).
	CleanOverlap       float64 `json:"clean_overlap_fraction"`
	CleanSeconds       float64 `json:"clean_seconds"`
	ForegroundMBps     float64 `json:"foreground_mbps"`
	ForegroundCleanMBs float64 `json:"foreground_during_clean_mbps"`
	ForegroundRatio    float64 `json:"foreground_ratio_during_clean"`
	RebuildBytes       int64   `json:"rebuild_bytes"`
	RebuildSeconds     float64 `json:"rebuild_seconds"`
	RebuildMBps        float64 `json:"rebuild_mbps"`
}

// RunClean starts a cluster (child processes, ec:4+1), makes an
// overwrite-heavy working set, measures a foreground writer alone and
// while a cleaner pass copies, reports the cleaner's write amplification,
// then kills a storage server, replaces it with an empty one on the same
// slot and times the rebuild.
func RunClean(ctx context.Context, cfg CleanConfig, progress io.Writer) (CleanResult, error) {
	var res CleanResult
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	say := sayer(progress)
	dir, done, err := scratch(cfg.Dir, "clean")
	if err != nil {
		return res, err
	}
	defer done()
	cl, stop, err := startCluster(ctx, dir, cfg.Exe, cfg.BasePort, cfg.Storage, 1, func(c *devcluster.Config) {
		c.CleanInterval = -1 // this benchmark runs its own passes
	})
	if err != nil {
		return res, err
	}
	defer stop()
	conn, err := connect.Dial(ctx, []string{cl.Manager}, cl.Key, cfg.Logger)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	fs, cred := conn.FS, metawire.Root // files get the cluster default, ec:4+1

	// Working set: 4 MiB files, then rounds of random 64 KiB overwrites.
	const fileSize, blk = 4 << 20, 64 << 10
	nFiles := int(cfg.WorkingSet / fileSize)
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, fileSize)
	say("writing %d files of 4 MiB, then %d rounds of random 64 KiB overwrites", nFiles, cfg.Rounds)
	for i := 0; i < nFiles; i++ {
		fillRand(r, buf)
		if err := fs.WriteFile(ctx, cred, fmt.Sprintf("/ws%04d", i), buf, 0o644); err != nil {
			return res, err
		}
	}
	// The cleaner's capacity is what the foreground writer alone made the
	// storage servers write (its bytes plus parity), as the manager's
	// heartbeat history would show it.
	var capacity atomic.Uint64
	// The benchmark's one writer commits each file before the next (its
	// stripes are dead or committed when the cleaner sees them), so a
	// grace below the commit window loses nothing here.
	c, err := cleaner.New(cleaner.Config{Data: conn.Data, FS: fs, Grace: time.Nanosecond, UnsafeGrace: true, Rate: cfg.Rate, Parallel: 16, Logger: cfg.Logger,
		Share: cfg.Share, Capacity: func() float64 { return math.Float64frombits(capacity.Load()) }})
	if err != nil {
		return res, err
	}
	if !cfg.RebuildOnly {
		if err := measureCleaning(ctx, cfg, c, fs, r, nFiles, &res, say, func(mbps float64) {
			capacity.Store(math.Float64bits(mbps * 1e6 * 5 / 4))
		}); err != nil {
			return res, err
		}
	}
	say("writing %s more for the rebuild", human(cfg.RebuildData))
	for i := 0; int64(i)*fileSize < cfg.RebuildData; i++ {
		fillRand(r, buf)
		if err := fs.WriteFile(ctx, cred, fmt.Sprintf("/rb%04d", i), buf, 0o644); err != nil {
			return res, err
		}
	}

	// Rebuild: storage slot 2 dies and an empty server takes its slot.
	const slot = 2
	victim := cl.Child("storage" + strconv.Itoa(slot))
	if victim == nil {
		return res, fmt.Errorf("bench: no storage%d child", slot)
	}
	addr := victim.Addr
	victim.Kill()
	<-victim.Done()
	say("storage%d killed; starting an empty replacement on slot %d", slot, slot)
	repl, err := devcluster.Start(ctx, devcluster.ChildSpec{
		Name: "replacement", Exe: cfg.Exe,
		Args: []string{"storage", "--dir", filepath.Join(dir, "replacement"), "--slot", strconv.Itoa(slot),
			"--manager", cl.Manager, "--listen", addr, "--log-level", "warn"},
		AddrFile: filepath.Join(dir, "replacement.addr"),
		Output:   os.Stderr,
	})
	if err != nil {
		return res, err
	}
	defer func() { _ = repl.Stop(10 * time.Second) }()
	start := time.Now()
	lastPhase := ""
	rep, err := c.Pass(ctx, cleaner.PassOptions{Repair: true, Progress: func(phase string, done, total int) {
		if phase != lastPhase || done%64 == 0 {
			lastPhase = phase
			say("  %6.2fs %s %d/%d", time.Since(start).Seconds(), phase, done, total)
		}
	}})
	if err != nil {
		return res, err
	}
	res.RebuildSeconds = time.Since(start).Seconds()
	scan, err := conn.Data.ScanAllSlot(ctx, slot)
	if err != nil {
		return res, err
	}
	for _, e := range scan.Entries {
		res.RebuildBytes += int64(e.Length)
	}
	res.RebuildMBps = mbps(res.RebuildBytes, time.Duration(res.RebuildSeconds*float64(time.Second)))
	say("rebuilt %d fragments (%s) in %.1fs: %.0f MB/s; %d failed", rep.Repaired, human(res.RebuildBytes), res.RebuildSeconds, res.RebuildMBps, rep.RepairFailed)
	if rep.RepairFailed > 0 {
		return res, fmt.Errorf("bench: %d fragments could not be rebuilt: %v", rep.RepairFailed, rep.Errors)
	}
	return res, nil
}

// measureCleaning overwrites the working set, then measures the
// foreground writer alone and during a copying cleaner pass.
func measureCleaning(ctx context.Context, cfg CleanConfig, c *cleaner.Cleaner, fs *client.FS, r *rand.Rand, nFiles int, res *CleanResult, say func(string, ...any), measured func(mbps float64)) error {
	const fileSize, blk = 4 << 20, 64 << 10
	cred := metawire.Root
	buf := make([]byte, fileSize)
	var err error
	for round := 0; round < cfg.Rounds; round++ {
		for i := 0; i < nFiles; i++ {
			fh, err := fs.OpenPath(ctx, cred, fmt.Sprintf("/ws%04d", i))
			if err != nil {
				return err
			}
			for b := 0; b < fileSize/blk/2; b++ {
				fillRand(r, buf[:blk])
				if _, err := fh.WriteAt(ctx, buf[:blk], int64(r.IntN(fileSize/blk))*blk); err != nil {
					return err
				}
			}
			if err := fh.Close(ctx); err != nil {
				return err
			}
		}
	}
	res.LiveBytes = int64(nFiles) * fileSize

	fg := func(name string) (float64, error) {
		fh, err := fs.CreateFile(ctx, cred, name, 0o644)
		if err != nil {
			return 0, err
		}
		chunk := make([]byte, 4<<20)
		fillRand(r, chunk)
		start := time.Now()
		for off := int64(0); off < cfg.Foreground; off += int64(len(chunk)) {
			if _, err := fh.WriteAt(ctx, chunk, off); err != nil {
				return 0, err
			}
		}
		if err := fh.Close(ctx); err != nil {
			return 0, err
		}
		return mbps(cfg.Foreground, time.Since(start)), nil
	}
	say("foreground writer alone: %s", human(cfg.Foreground))
	if res.ForegroundMBps, err = fg("/fg-alone"); err != nil {
		return err
	}
	measured(res.ForegroundMBps)
	if err := fs.Unlink(ctx, cred, uint64(namespace.RootIno), "fg-alone"); err != nil {
		return err
	}

	// The deleted foreground file's stripes are dead: a first pass takes
	// them (not counted), so the measured pass is about overwrites only.
	if _, err := c.Pass(ctx, cleaner.PassOptions{}); err != nil {
		return err
	}
	say("cleaning (copy rate limit %s/s, or %.0f%% of the %.0f MB/s the disks took from the writer alone) while the foreground writer runs",
		human(cfg.Rate), cfg.Share*100, res.ForegroundMBps*5/4)
	type passOut struct {
		rep cleaner.Report
		err error
		d   time.Duration
	}
	passDone := make(chan passOut, 1)
	passStart := time.Now()
	go func() {
		rep, err := c.Pass(ctx, cleaner.PassOptions{Copy: true})
		passDone <- passOut{rep, err, time.Since(passStart)}
	}()
	during, fgErr := fg("/fg-during")
	fgEnd := time.Now()
	p := <-passDone
	if p.d > 0 {
		res.CleanOverlap = min(fgEnd.Sub(passStart), p.d).Seconds() / p.d.Seconds()
	}
	if fgErr != nil {
		return fgErr
	}
	if p.err != nil {
		return p.err
	}
	res.ForegroundCleanMBs = during
	if res.ForegroundMBps > 0 {
		res.ForegroundRatio = during / res.ForegroundMBps
	}
	res.DiskBeforeBytes = p.rep.Bytes
	res.CopiedBytes = p.rep.CopiedBytes
	res.CleanSeconds = p.d.Seconds()
	// Net space given back: what was deleted (fragments: physical) minus
	// what the copies took (their stripes carry ec:4+1's parity too).
	res.CopiedPhysical = p.rep.CopiedBytes * 5 / 4
	res.ReclaimedBytes = p.rep.DeletedBytes - res.CopiedPhysical
	if res.ReclaimedBytes > 0 {
		res.WriteAmplification = float64(res.CopiedPhysical) / float64(res.ReclaimedBytes)
	}
	if err := fs.Unlink(ctx, cred, uint64(namespace.RootIno), "fg-during"); err != nil {
		return err
	}
	after, err := c.Pass(ctx, cleaner.PassOptions{})
	if err != nil {
		return err
	}
	res.DiskAfterBytes = after.Bytes - after.DeletedBytes
	say("cleaner: copied %s (%s on disk), reclaimed %s net (write amplification %.2f, disk bytes by disk bytes); the foreground writer ran during %.0f%% of the pass",
		human(res.CopiedBytes), human(res.CopiedPhysical), human(res.ReclaimedBytes), res.WriteAmplification, 100*res.CleanOverlap)

	return nil
}

func fillRand(r *rand.Rand, b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
}
