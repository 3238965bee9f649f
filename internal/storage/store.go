package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// Failpoint names (see package faults).
const (
	FailPutBeforeData      = "storage.put.beforeData"
	FailPutAfterData       = "storage.put.afterData" // file synced, record not committed
	FailPutAfterMeta       = "storage.put.afterMeta" // record committed, not acknowledged
	FailAppendBeforeData   = "storage.append.beforeData"
	FailAppendAfterData    = "storage.append.afterData" // bytes synced past the old length, record not updated
	FailAppendAfterMeta    = "storage.append.afterMeta"
	FailRepairBeforeRename = "storage.repair.beforeRename" // <name>.tmp synced, not renamed
	FailDeleteAfterMeta    = "storage.delete.afterMeta"    // record deleted, file still present
)

// diskReserve is kept free on the filesystem when CapacityBytes is zero, so
// that pebble can still commit records and compact when fragments fill it.
const diskReserve = 64 << 20

// Config configures a Store.
type Config struct {
	// Dir is the store's root directory; it is created if absent.
	Dir string
	// FS is the filesystem all I/O goes through (default vfs.Default).
	FS vfs.FS
	// ChunkSize is the checksum granularity of new fragments, in
	// [MinChunkSize, MaxChunkSize]; 0 means DefaultChunkSize. Existing
	// fragments keep the chunk size in their record.
	ChunkSize int
	// CapacityBytes caps the sum of fragment lengths; 0 means "whatever the
	// filesystem has free, less a small reserve".
	CapacityBytes int64
	// Faults holds failpoints; nil in production.
	Faults *faults.Set
	// Logger receives the store's and pebble's logs (default slog.Default()).
	Logger *slog.Logger
	// OnCorrupt, if set, is called (synchronously, without store locks held)
	// each time a read, verify, append or the scrubber finds a sick range.
	OnCorrupt func(fragment.ID, CorruptRange)
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("storage: config: Dir is empty")
	case c.ChunkSize != 0 && (c.ChunkSize < MinChunkSize || c.ChunkSize > MaxChunkSize):
		return fmt.Errorf("storage: config: ChunkSize %d not in [%d, %d]", c.ChunkSize, MinChunkSize, MaxChunkSize)
	case c.CapacityBytes < 0:
		return fmt.Errorf("storage: config: negative CapacityBytes %d", c.CapacityBytes)
	}
	return nil
}

// RecoveryReport summarizes what Open found and fixed.
type RecoveryReport struct {
	Records        int // fragment records found
	BadRecords     int // undecodable records, left in place (reads report corruption)
	OrphansRemoved int // fragment files without a record (uncommitted puts, interrupted deletes)
	TempRemoved    int // *.tmp files (interrupted repairs or truncations)
	Truncated      int // files cut back to their committed length (torn appends)
	Missing        int // records whose file is missing (reads report corruption)
	Short          int // files shorter than their committed length (reads report corruption)
	Unknown        int // files that are not ours or not where the hash puts them; left alone
	Duration       time.Duration
}

// ScrubStats describes the scrubber's progress.
type ScrubStats struct {
	Passes        int64     // complete passes over all fragments
	PassBytes     int64     // bytes verified so far in the current pass
	PassFragments int64     // fragments verified so far in the current pass
	Bytes         int64     // bytes verified, all passes
	CorruptFound  int64     // sick ranges found by the scrubber, all passes
	LastPassEnd   time.Time // zero before the first pass completes
}

// Stats is a snapshot of the store's counters.
type Stats struct {
	// CapacityBytes is CapacityBytes from the config or, when that is zero,
	// UsedBytes+FreeBytes; 0 if the filesystem cannot report free space.
	CapacityBytes int64
	UsedBytes     int64 // sum of committed fragment lengths
	FreeBytes     int64 // how many more fragment bytes fit
	// Disk names the file system the capacity comes from (diskID); 0 with
	// a configured capacity or when unknown.
	Disk      uint64
	Fragments int64
	// CorruptDetected counts sick ranges found by any path (reads, verify,
	// append, scrubber); a range found twice counts twice.
	CorruptDetected int64
	Repairs         int64
	Scrub           ScrubStats
}

// Store is a fragment store. Its methods are safe for concurrent use.
type Store struct {
	// disk is diskID of the data directory, computed once (diskOnce).
	diskOnce  sync.Once
	disk      uint64
	cfg       Config
	fs        vfs.FS
	log       *slog.Logger
	chunkSize int64
	fragDirs  [256]string
	db        *pebble.DB
	recovery  RecoveryReport

	// locks serialize writers (put, append, repair, delete) of one id; reads
	// go without them and retake them (shared) only to confirm an anomaly.
	locks [256]lockcheck.RWMutex

	// state guards closing: every operation holds it shared.
	state struct {
		lockcheck.RWMutex
		closed bool
	}

	mu struct {
		lockcheck.Mutex
		used      int64 // sum of committed lengths
		reserved  int64 // bytes of writes in flight
		fragments int64
		scrub     ScrubStats
	}
	corrupt atomic.Int64
	repairs atomic.Int64

	chunkPool sync.Pool // *[]byte of MaxChunkSize
	batchPool sync.Pool // *[]byte of verifyBatch
}

// verifyBatch is how many bytes Verify and the scrubber read per call.
const verifyBatch = 1 << 20

// Open opens (creating if needed) the store in cfg.Dir and runs start-up
// recovery before returning.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Store{cfg: cfg, fs: cfg.FS, log: cfg.Logger, chunkSize: int64(cfg.ChunkSize)}
	s.chunkPool.New = func() any { b := make([]byte, MaxChunkSize); return &b }
	s.batchPool.New = func() any { b := make([]byte, verifyBatch); return &b }

	if err := s.makeDirs(); err != nil {
		return nil, err
	}
	opts := &pebble.Options{
		FS: s.fs,
		// Records are small; keep pebble's share of the server's memory
		// budget to ~16 MiB.
		CacheSize:                   8 << 20,
		MemTableSize:                4 << 20,
		MemTableStopWritesThreshold: 2,
		MaxOpenFiles:                256,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      pebbleLogger{s.log},
	}
	db, err := pebble.Open(s.fs.PathJoin(cfg.Dir, "meta"), opts)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", cfg.Dir, err)
	}
	s.db = db
	if err := s.recover(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("storage: recover %s: %w", cfg.Dir, err)
	}
	r := s.recovery
	s.log.Info("storage: opened", "dir", cfg.Dir, "records", r.Records, "bad_records", r.BadRecords,
		"orphans_removed", r.OrphansRemoved, "tmp_removed", r.TempRemoved, "truncated", r.Truncated,
		"missing", r.Missing, "short", r.Short, "unknown", r.Unknown, "took", r.Duration)
	return s, nil
}

// makeDirs creates Dir, Dir/meta, Dir/frags and its 256 subdirectories,
// syncing each parent whose entries changed so the tree survives a crash.
func (s *Store) makeDirs() error {
	dir := s.cfg.Dir
	frags := s.fs.PathJoin(dir, "frags")
	// Find the ancestors that MkdirAll will create: each one's parent must
	// be synced, or a crash could lose the whole tree.
	var missing []string
	for p := dir; ; {
		if _, err := s.fs.Stat(p); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("storage: open %s: %w", dir, err)
		}
		missing = append(missing, p)
		parent := s.fs.PathDir(p)
		if parent == p {
			break
		}
		p = parent
	}
	if len(missing) > 0 {
		if err := s.fs.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("storage: open %s: %w", dir, err)
		}
		for _, p := range missing {
			if err := s.syncDir(s.fs.PathDir(p)); err != nil {
				return fmt.Errorf("storage: open %s: %w", dir, err)
			}
		}
	}
	dirChanged := false
	for _, d := range []string{s.fs.PathJoin(dir, "meta"), frags} {
		c, err := s.ensureDir(d)
		if err != nil {
			return err
		}
		dirChanged = dirChanged || c
	}
	if dirChanged {
		if err := s.syncDir(dir); err != nil {
			return fmt.Errorf("storage: open %s: %w", dir, err)
		}
	}
	fragsChanged := false
	for i := range s.fragDirs {
		s.fragDirs[i] = s.fs.PathJoin(frags, fmt.Sprintf("%02x", i))
		c, err := s.ensureDir(s.fragDirs[i])
		if err != nil {
			return err
		}
		fragsChanged = fragsChanged || c
	}
	if fragsChanged {
		if err := s.syncDir(frags); err != nil {
			return fmt.Errorf("storage: open %s: %w", dir, err)
		}
	}
	return nil
}

func (s *Store) ensureDir(d string) (created bool, err error) {
	if _, err := s.fs.Stat(d); err == nil {
		return false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("storage: open: %w", err)
	}
	if err := s.fs.MkdirAll(d, 0o755); err != nil {
		return false, fmt.Errorf("storage: open: %w", err)
	}
	return true, nil
}

func (s *Store) syncDir(d string) error {
	f, err := s.fs.OpenDir(d)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *Store) fragPath(id fragment.ID) string {
	return s.fs.PathJoin(s.fragDirs[subdirOf(id)], id.String())
}

// recover reconciles fragment files with records: see the package doc.
func (s *Store) recover() error {
	start := time.Now()
	rep := &s.recovery
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{keyPrefix}, UpperBound: []byte{keyPrefix + 1}})
	if err != nil {
		return err
	}
	for iter.First(); iter.Valid(); iter.Next() {
		id, err := decodeKey(iter.Key())
		if err != nil {
			rep.BadRecords++
			s.log.Warn("storage: bad record key", "key", fmt.Sprintf("%x", iter.Key()))
			continue
		}
		v, err := iter.ValueAndErr()
		if err != nil {
			_ = iter.Close()
			return err
		}
		rec, err := decodeRecord(v)
		if err != nil {
			rep.BadRecords++
			s.log.Warn("storage: bad record", "id", id, "err", err)
			continue
		}
		rep.Records++
		s.mu.used += rec.length
		s.mu.fragments++
		path := s.fragPath(id)
		fi, err := s.fs.Stat(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			rep.Missing++
			s.log.Debug("storage: fragment file missing", "id", id)
		case err != nil:
			_ = iter.Close()
			return err
		case fi.Size() < HeaderSize+rec.length:
			rep.Short++
			s.log.Debug("storage: fragment file short", "id", id, "size", fi.Size(), "length", rec.length)
		case fi.Size() > HeaderSize+rec.length:
			if err := s.truncate(path, HeaderSize+rec.length); err != nil {
				_ = iter.Close()
				return err
			}
			rep.Truncated++
			s.log.Debug("storage: torn append cut back", "id", id, "size", fi.Size(), "length", rec.length)
		}
	}
	if err := iter.Close(); err != nil {
		return err
	}

	var key [keyLen]byte
	for sub, d := range s.fragDirs {
		names, err := s.fs.List(d)
		if err != nil {
			return err
		}
		for _, name := range names {
			path := s.fs.PathJoin(d, name)
			if strings.HasSuffix(name, ".tmp") {
				if err := s.fs.Remove(path); err != nil {
					return err
				}
				rep.TempRemoved++
				continue
			}
			id, err := fragment.ParseID(name)
			if err != nil || subdirOf(id) != sub {
				rep.Unknown++
				s.log.Warn("storage: unknown file left alone", "path", path)
				continue
			}
			_, closer, err := s.db.Get(appendKey(key[:0], id))
			if err == nil {
				_ = closer.Close()
				continue
			}
			if !errors.Is(err, pebble.ErrNotFound) {
				return err
			}
			if err := s.fs.Remove(path); err != nil {
				return err
			}
			rep.OrphansRemoved++
			s.log.Debug("storage: orphan removed", "id", id)
		}
	}
	rep.Duration = time.Since(start)
	return nil
}

// truncate cuts the file at path to size. vfs has no truncate, so use the
// OS file's when there is one and otherwise copy the prefix and rename.
func (s *Store) truncate(path string, size int64) error {
	f, err := s.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if t, ok := f.(interface{ Truncate(int64) error }); ok {
		err := t.Truncate(size)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	defer f.Close()
	tmp := path + ".tmp"
	out, err := s.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, io.NewSectionReader(f, 0, size))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(tmp, path)
	}
	if err != nil {
		_ = s.fs.Remove(tmp)
		return err
	}
	return s.syncDir(s.fs.PathDir(path))
}

// ChunkSize is the chunk size of fragments this store creates; Put's crcs
// argument must be per chunk of this size.
func (s *Store) ChunkSize() int { return int(s.chunkSize) }

// Recovery returns what Open found and fixed.
func (s *Store) Recovery() RecoveryReport { return s.recovery }

// Close closes the store after in-flight operations finish. Later calls
// return ErrClosed; a second Close returns nil.
func (s *Store) Close() error {
	s.state.Lock()
	defer s.state.Unlock()
	if s.state.closed {
		return nil
	}
	s.state.closed = true
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("storage: close: %w", err)
	}
	return nil
}

// enter marks an operation in flight; it fails once the store is closed.
func (s *Store) enter() error {
	s.state.RLock()
	if s.state.closed {
		s.state.RUnlock()
		return ErrClosed
	}
	return nil
}

func (s *Store) exit() { s.state.RUnlock() }

func (s *Store) lockFor(id fragment.ID) *lockcheck.RWMutex { return &s.locks[mix(id)&255] }

// freeOnDisk is the filesystem's free space less the reserve, or -1 when
// the filesystem cannot tell (then ENOSPC is the only limit).
func (s *Store) freeOnDisk() int64 {
	du, err := s.fs.GetDiskUsage(s.cfg.Dir)
	if err != nil {
		return -1
	}
	return max(int64(du.AvailBytes)-diskReserve, 0)
}

// reserve claims n bytes for a write in flight, or fails with ErrNoSpace.
func (s *Store) reserve(n int64) error {
	free := int64(-1)
	if s.cfg.CapacityBytes == 0 {
		free = s.freeOnDisk()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ok bool
	switch {
	case s.cfg.CapacityBytes > 0:
		ok = s.mu.used+s.mu.reserved+n <= s.cfg.CapacityBytes
	case free >= 0:
		// Used bytes are already off the filesystem's free space.
		ok = s.mu.reserved+n <= free
	default:
		ok = true
	}
	if !ok {
		return ErrNoSpace
	}
	s.mu.reserved += n
	return nil
}

// release returns a reservation; committed moves it into the used bytes,
// and created counts a new fragment.
func (s *Store) release(n int64, committed, created bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.reserved -= n
	if committed {
		s.mu.used += n
		if created {
			s.mu.fragments++
		}
	}
}

// Stat returns a snapshot of the store's counters.
func (s *Store) Stat() Stats {
	free := int64(-1)
	if s.cfg.CapacityBytes == 0 {
		free = s.freeOnDisk()
	}
	s.mu.Lock()
	st := Stats{
		UsedBytes: s.mu.used,
		Fragments: s.mu.fragments,
		Scrub:     s.mu.scrub,
	}
	s.mu.Unlock()
	st.CorruptDetected = s.corrupt.Load()
	st.Repairs = s.repairs.Load()
	switch {
	case s.cfg.CapacityBytes > 0:
		st.CapacityBytes = s.cfg.CapacityBytes
		st.FreeBytes = max(s.cfg.CapacityBytes-st.UsedBytes, 0)
	case free >= 0:
		st.CapacityBytes = st.UsedBytes + free
		st.FreeBytes = free
		s.diskOnce.Do(func() { s.disk = diskID(s.cfg.Dir) })
		st.Disk = s.disk
	}
	return st
}

// diskID names the file system holding dir on this host: FNV-1a of the
// kernel's boot id and the device number (device numbers repeat across
// hosts). 0 when either is unknown (an in-memory vfs, no /proc).
func diskID(dir string) uint64 {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return 0
	}
	h := fnv.New64a()
	h.Write(bytes.TrimSpace(boot))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], st.Dev)
	h.Write(b[:])
	return max(h.Sum64(), 1)
}

// reportCorrupt counts a sick range and tells OnCorrupt.
func (s *Store) reportCorrupt(id fragment.ID, r CorruptRange) {
	s.corrupt.Add(1)
	if err := s.db.Set(suspectKey(id), nil, pebble.Sync); err != nil {
		s.log.Warn("storage: recording a corrupt fragment", "id", id, "err", err)
	}
	s.log.Warn("storage: corrupt fragment", "id", id, "range", r.String())
	if s.cfg.OnCorrupt != nil {
		s.cfg.OnCorrupt(id, r)
	}
}

func (s *Store) getChunkBuf() *[]byte  { return s.chunkPool.Get().(*[]byte) }
func (s *Store) putChunkBuf(b *[]byte) { s.chunkPool.Put(b) }

// pebbleLogger routes pebble's logs to slog: chatter at debug, errors at
// error. Fatalf must not return (pebble relies on it), so it panics.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic(msg)
}
