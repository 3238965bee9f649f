package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Info describes a stored fragment.
type Info struct {
	ID        fragment.ID
	Length    int64
	ChunkSize int
	Created   time.Time
	CRCs      []uint32 // CRC32C of each ChunkSize chunk, the last one partial
}

// opErr wraps err as "storage: <op> <id>: err", adding ErrNoSpace when the
// filesystem reported ENOSPC.
func opErr(op string, id fragment.ID, err error) error {
	if vfs.IsNoSpaceError(err) && !errors.Is(err, ErrNoSpace) {
		return fmt.Errorf("storage: %s %s: %w: %w", op, id, ErrNoSpace, err)
	}
	return fmt.Errorf("storage: %s %s: %w", op, id, err)
}

// getRecord returns the decoded record of id, copied out of pebble.
func (s *Store) getRecord(id fragment.ID) (record, error) {
	var key [keyLen]byte
	v, closer, err := s.db.Get(appendKey(key[:0], id))
	if errors.Is(err, pebble.ErrNotFound) {
		return record{}, ErrNotFound
	}
	if err != nil {
		return record{}, err
	}
	defer closer.Close()
	rec, err := decodeRecord(v)
	if err != nil {
		return record{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	rec.crcs = append([]byte(nil), rec.crcs...)
	return rec, nil
}

func (s *Store) exists(id fragment.ID) (bool, error) {
	var key [keyLen]byte
	_, closer, err := s.db.Get(appendKey(key[:0], id))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, closer.Close()
}

// commitRecord writes id's record durably; this is the commit point of
// puts and appends.
func (s *Store) commitRecord(id fragment.ID, rec *record) error {
	var key [keyLen]byte
	val := appendRecord(make([]byte, 0, recordFixed+len(rec.crcs)+4), rec)
	return s.db.Set(appendKey(key[:0], id), val, pebble.Sync)
}

// Put stores a new fragment durably. crcs, if not nil, are the sender's
// CRC32Cs of each ChunkSize chunk of data; a mismatch fails with ErrBadData.
// Put never overwrites: an existing fragment fails with ErrExists.
func (s *Store) Put(ctx context.Context, id fragment.ID, data []byte, crcs []uint32) error {
	if err := ctx.Err(); err != nil {
		return opErr("put", id, err)
	}
	if len(data) > MaxFragmentSize {
		return opErr("put", id, fmt.Errorf("%w: %d bytes exceeds %d", ErrBadData, len(data), MaxFragmentSize))
	}
	if err := s.enter(); err != nil {
		return opErr("put", id, err)
	}
	defer s.exit()
	// Checksum outside the lock: it is the only CPU-heavy step.
	raw := appendChunkCRCs(make([]byte, 0, 4*numChunks(int64(len(data)), s.chunkSize)), data, s.chunkSize)
	if crcs != nil {
		if len(crcs)*4 != len(raw) {
			return opErr("put", id, fmt.Errorf("%w: %d checksums for %d chunks", ErrBadData, len(crcs), len(raw)/4))
		}
		for i, c := range crcs {
			if got := binary.BigEndian.Uint32(raw[4*i:]); got != c {
				return opErr("put", id, fmt.Errorf("%w: chunk %d checksum %08x, sender says %08x", ErrBadData, i, got, c))
			}
		}
	}
	l := s.lockFor(id)
	l.Lock()
	defer l.Unlock()
	if ok, err := s.exists(id); err != nil {
		return opErr("put", id, err)
	} else if ok {
		return opErr("put", id, ErrExists)
	}
	rec := record{length: int64(len(data)), chunkSize: s.chunkSize, created: time.Now().UnixNano(), crcs: raw}
	return s.createLocked("put", FailPutBeforeData, FailPutAfterData, FailPutAfterMeta, id, data, &rec)
}

// createLocked writes a new fragment file for rec, makes it durable, then
// commits the record. The caller holds id's lock and knows no record exists.
func (s *Store) createLocked(op, failBefore, failAfterData, failAfterMeta string, id fragment.ID, data []byte, rec *record) (err error) {
	n := int64(len(data))
	if err := s.reserve(n); err != nil {
		return opErr(op, id, fmt.Errorf("%w: %d bytes", err, n))
	}
	committed := false
	defer func() { s.release(n, committed, true) }()
	if err := s.cfg.Faults.Hit(failBefore); err != nil {
		return opErr(op, id, err)
	}
	path := s.fragPath(id)
	if err := s.writeFile(path, id, rec, data); err != nil {
		return opErr(op, id, err)
	}
	if err := s.syncDir(s.fs.PathDir(path)); err != nil {
		_ = s.fs.Remove(path)
		return opErr(op, id, err)
	}
	if err := s.cfg.Faults.Hit(failAfterData); err != nil {
		_ = s.fs.Remove(path)
		return opErr(op, id, err)
	}
	if err := s.commitRecord(id, rec); err != nil {
		// The record may or may not have landed; keep the file. Without a
		// record it is an orphan that the next Put replaces or Open removes.
		return opErr(op, id, err)
	}
	committed = true
	if err := s.cfg.Faults.Hit(failAfterMeta); err != nil {
		return opErr(op, id, err)
	}
	return nil
}

// writeFile creates path (replacing any leftover) holding the header and
// data, synced. On failure it removes the partial file. It uses WriteAt
// because vfs.File.Write may scribble on its argument (pebble's MemFS does
// under -race), and data belongs to the caller.
func (s *Store) writeFile(path string, id fragment.ID, rec *record, data []byte) error {
	if err := s.fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := s.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	var hdr [HeaderSize]byte
	encodeHeader(&hdr, id, rec.chunkSize, rec.created)
	_, err = f.WriteAt(hdr[:], 0)
	if err == nil && len(data) > 0 {
		_, err = f.WriteAt(data, HeaderSize)
	}
	if err == nil {
		err = f.SyncData()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = s.fs.Remove(path)
	}
	return err
}

// Append appends data to the fragment, creating it if absent, and returns
// the new length. It is atomic: after a crash the fragment has either its
// old length and bytes or the new ones.
func (s *Store) Append(ctx context.Context, id fragment.ID, data []byte) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, opErr("append", id, err)
	}
	if err := s.enter(); err != nil {
		return 0, opErr("append", id, err)
	}
	defer s.exit()
	l := s.lockFor(id)
	l.Lock()
	newLen, cerr, err := s.appendLocked(id, data)
	l.Unlock()
	if cerr != nil {
		s.reportCorrupt(id, cerr.Range)
		return 0, cerr
	}
	return newLen, err
}

func (s *Store) appendLocked(id fragment.ID, data []byte) (int64, *CorruptError, error) {
	rec, err := s.getRecord(id)
	if errors.Is(err, ErrNotFound) {
		if len(data) > MaxFragmentSize {
			return 0, nil, opErr("append", id, fmt.Errorf("%w: %d bytes exceeds %d", ErrBadData, len(data), MaxFragmentSize))
		}
		raw := appendChunkCRCs(nil, data, s.chunkSize)
		rec := record{length: int64(len(data)), chunkSize: s.chunkSize, created: time.Now().UnixNano(), crcs: raw}
		err := s.createLocked("append", FailAppendBeforeData, FailAppendAfterData, FailAppendAfterMeta, id, data, &rec)
		if err != nil {
			return 0, nil, err
		}
		return rec.length, nil, nil
	}
	if err != nil {
		return 0, nil, opErr("append", id, err)
	}
	oldLen, cs := rec.length, rec.chunkSize
	if len(data) == 0 {
		return oldLen, nil, nil
	}
	if oldLen+int64(len(data)) > MaxFragmentSize {
		return 0, nil, opErr("append", id, fmt.Errorf("%w: length %d + %d exceeds %d", ErrBadData, oldLen, len(data), MaxFragmentSize))
	}
	path := s.fragPath(id)
	// A missing or short file cannot be extended: the hole would be
	// committed under checksums of bytes we never had.
	fi, err := s.fs.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, &CorruptError{ID: id, Range: CorruptRange{0, oldLen}, Reason: "file missing"}, nil
	} else if err != nil {
		return 0, nil, opErr("append", id, err)
	}
	if have := fi.Size() - HeaderSize; have < oldLen {
		from := max(have, 0) / cs * cs
		return 0, &CorruptError{ID: id, Range: CorruptRange{from, oldLen - from}, Reason: "file short"}, nil
	}
	f, err := s.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return 0, nil, opErr("append", id, err)
	}
	defer f.Close()

	crcs := make([]byte, len(rec.crcs), 4*numChunks(oldLen+int64(len(data)), cs))
	copy(crcs, rec.crcs)
	rest := data
	if part := oldLen % cs; part != 0 {
		// Extending a partial chunk: check its old bytes first so that a
		// corrupt prefix never gets laundered into a fresh checksum.
		last := oldLen / cs
		bp := s.getChunkBuf()
		buf := (*bp)[:part]
		k, _ := f.ReadAt(buf, HeaderSize+last*cs)
		ok := k == len(buf) && checksum(buf) == rec.crc(last)
		s.putChunkBuf(bp)
		if !ok {
			return 0, &CorruptError{ID: id, Range: CorruptRange{last * cs, part}, Reason: "checksum mismatch"}, nil
		}
		fill := min(cs-part, int64(len(data)))
		binary.BigEndian.PutUint32(crcs[4*last:], crc32Update(rec.crc(last), data[:fill]))
		rest = data[fill:]
	}
	crcs = appendChunkCRCs(crcs, rest, cs)

	n := int64(len(data))
	if err := s.reserve(n); err != nil {
		return 0, nil, opErr("append", id, fmt.Errorf("%w: %d bytes", err, n))
	}
	committed := false
	defer func() { s.release(n, committed, false) }()
	if err := s.cfg.Faults.Hit(FailAppendBeforeData); err != nil {
		return 0, nil, opErr("append", id, err)
	}
	// Bytes past the committed length are garbage from a failed append (or
	// cut by Open); overwrite them.
	if _, err := f.WriteAt(data, HeaderSize+oldLen); err != nil {
		return 0, nil, opErr("append", id, err)
	}
	if err := f.SyncData(); err != nil {
		return 0, nil, opErr("append", id, err)
	}
	if err := s.cfg.Faults.Hit(FailAppendAfterData); err != nil {
		return 0, nil, opErr("append", id, err)
	}
	rec.length += n
	rec.crcs = crcs
	if err := s.commitRecord(id, &rec); err != nil {
		return 0, nil, opErr("append", id, err)
	}
	committed = true
	if err := s.cfg.Faults.Hit(FailAppendAfterMeta); err != nil {
		return 0, nil, opErr("append", id, err)
	}
	return rec.length, nil, nil
}

// Repair rewrites a fragment's file with data, which must be byte-identical
// to what the record describes (ErrRepairMismatch otherwise). The new file
// replaces the old one atomically.
func (s *Store) Repair(ctx context.Context, id fragment.ID, data []byte) error {
	if err := ctx.Err(); err != nil {
		return opErr("repair", id, err)
	}
	if err := s.enter(); err != nil {
		return opErr("repair", id, err)
	}
	defer s.exit()
	l := s.lockFor(id)
	l.Lock()
	defer l.Unlock()
	rec, err := s.getRecord(id)
	if err != nil {
		return opErr("repair", id, err)
	}
	if int64(len(data)) != rec.length {
		return opErr("repair", id, fmt.Errorf("%w: %d bytes, record has %d", ErrRepairMismatch, len(data), rec.length))
	}
	for c := int64(0); c < rec.nchunks(); c++ {
		if checksum(data[c*rec.chunkSize:rec.chunkEnd(c)]) != rec.crc(c) {
			return opErr("repair", id, fmt.Errorf("%w: chunk %d", ErrRepairMismatch, c))
		}
	}
	path := s.fragPath(id)
	tmp := path + ".tmp"
	if err := s.writeFile(tmp, id, &rec, data); err != nil {
		return opErr("repair", id, err)
	}
	if err := s.cfg.Faults.Hit(FailRepairBeforeRename); err != nil {
		_ = s.fs.Remove(tmp)
		return opErr("repair", id, err)
	}
	if err := s.fs.Rename(tmp, path); err != nil {
		_ = s.fs.Remove(tmp)
		return opErr("repair", id, err)
	}
	if err := s.syncDir(s.fs.PathDir(path)); err != nil {
		return opErr("repair", id, err)
	}
	s.repairs.Add(1)
	if err := s.db.Delete(suspectKey(id), pebble.Sync); err != nil {
		s.log.Warn("storage: clearing a repaired fragment's mark", "id", id, "err", err)
	}
	s.log.Info("storage: repaired fragment", "id", id, "length", rec.length)
	return nil
}

// Delete removes a fragment: the record first (the commit point), then the
// file. A crash in between leaves an orphan file that Open removes.
func (s *Store) Delete(ctx context.Context, id fragment.ID) error {
	if err := ctx.Err(); err != nil {
		return opErr("delete", id, err)
	}
	if err := s.enter(); err != nil {
		return opErr("delete", id, err)
	}
	defer s.exit()
	l := s.lockFor(id)
	l.Lock()
	defer l.Unlock()
	rec, err := s.getRecord(id)
	bad := errors.Is(err, ErrCorrupt) // an unreadable record can still be deleted
	if err != nil && !bad {
		return opErr("delete", id, err)
	}
	var key [keyLen]byte
	if err := s.db.Delete(appendKey(key[:0], id), pebble.Sync); err != nil {
		return opErr("delete", id, err)
	}
	if err := s.db.Delete(suspectKey(id), pebble.NoSync); err != nil {
		s.log.Warn("storage: clearing a deleted fragment's mark", "id", id, "err", err)
	}
	if !bad {
		s.mu.Lock()
		s.mu.used -= rec.length
		s.mu.fragments--
		s.mu.Unlock()
	}
	if err := s.cfg.Faults.Hit(FailDeleteAfterMeta); err != nil {
		return opErr("delete", id, err)
	}
	if err := s.fs.Remove(s.fragPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("storage: removing deleted fragment's file", "id", id, "err", err)
	}
	return nil
}

// Info returns the record of a fragment.
func (s *Store) Info(ctx context.Context, id fragment.ID) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, opErr("info", id, err)
	}
	if err := s.enter(); err != nil {
		return Info{}, opErr("info", id, err)
	}
	defer s.exit()
	rec, err := s.getRecord(id)
	if err != nil {
		return Info{}, opErr("info", id, err)
	}
	return rec.info(id), nil
}

// Read reads up to len(dst) bytes of the fragment at off into dst. n is
// less than len(dst) only at the end of the fragment; off beyond the length
// fails with ErrOutOfRange. Every chunk overlapping the range is verified;
// on a mismatch Read returns a *CorruptError naming the bad chunks and no
// bytes (dst is zeroed).
func (s *Store) Read(ctx context.Context, id fragment.ID, off int64, dst []byte) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, opErr("read", id, err)
	}
	if err := s.enter(); err != nil {
		return 0, opErr("read", id, err)
	}
	defer s.exit()
	n, cerr, err := s.readOnce(id, off, dst)
	if cerr != nil {
		// Confirm under the lock: a concurrent delete or repair can make a
		// lock-free read look corrupt.
		l := s.lockFor(id)
		l.RLock()
		n, cerr, err = s.readOnce(id, off, dst)
		l.RUnlock()
		if cerr != nil {
			s.reportCorrupt(id, cerr.Range)
			return 0, cerr
		}
	}
	if err != nil {
		return 0, opErr("read", id, err)
	}
	return n, nil
}

func (s *Store) readOnce(id fragment.ID, off int64, dst []byte) (int, *CorruptError, error) {
	var key [keyLen]byte
	v, closer, err := s.db.Get(appendKey(key[:0], id))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil, ErrNotFound
	}
	if err != nil {
		return 0, nil, err
	}
	defer closer.Close()
	rec, err := decodeRecord(v)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if off < 0 || off > rec.length {
		return 0, nil, fmt.Errorf("%w: offset %d, length %d", ErrOutOfRange, off, rec.length)
	}
	n := min(int64(len(dst)), rec.length-off)
	if n == 0 {
		return 0, nil, nil
	}
	dst = dst[:n]
	f, err := s.fs.Open(s.fragPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return 0, &CorruptError{ID: id, Range: CorruptRange{0, rec.length}, Reason: "file missing"}, nil
	}
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	if lo, hi := s.readVerified(f, &rec, off, dst); lo >= 0 {
		clear(dst)
		start := lo * rec.chunkSize
		return 0, &CorruptError{ID: id, Range: CorruptRange{start, rec.chunkEnd(hi) - start}, Reason: "checksum mismatch"}, nil
	}
	return int(n), nil, nil
}

// readGroup is how many bytes of whole chunks readVerified reads per
// call before checking them: small enough to stay in a core's L2 cache.
const readGroup = 256 << 10

// readVerified fills dst (non-empty, within the fragment) from logical
// offset off and verifies every chunk it overlaps. Chunks lying wholly in
// the range are read straight into dst; the partial chunks at either edge
// go through a pooled buffer. It returns the first and last bad chunk, or
// -1, -1. Short reads and read errors count as bad chunks.
func (s *Store) readVerified(f vfs.File, rec *record, off int64, dst []byte) (badLo, badHi int64) {
	cs := rec.chunkSize
	end := off + int64(len(dst))
	first, last := off/cs, (end-1)/cs
	badLo, badHi = -1, -1
	mark := func(c int64) { // chunks are visited in increasing order
		if badLo < 0 {
			badLo = c
		}
		badHi = c
	}
	partial := func(c int64) {
		start, cend := c*cs, rec.chunkEnd(c)
		bp := s.getChunkBuf()
		buf := (*bp)[:cend-start]
		if k, _ := f.ReadAt(buf, HeaderSize+start); k != len(buf) || checksum(buf) != rec.crc(c) {
			mark(c)
		} else {
			lo, hi := max(start, off), min(cend, end)
			copy(dst[lo-off:hi-off], buf[lo-start:hi-start])
		}
		s.putChunkBuf(bp)
	}
	fullLo, fullHi := first, last
	if off%cs != 0 {
		fullLo++
	}
	if rec.chunkEnd(last) != end {
		fullHi--
	}
	if fullLo > fullHi { // at most two chunks, neither wholly inside
		partial(first)
		if last != first {
			partial(last)
		}
		return badLo, badHi
	}
	if first < fullLo {
		partial(first)
	}
	// Whole chunks are read a group at a time and checked at once, while
	// the bytes are still in the CPU cache: checking a 1 MiB range after
	// reading all of it went to memory again, at a third of the speed.
	group := max(1, readGroup/cs)
	for g := fullLo; g <= fullHi; g += group {
		gl := min(g+group-1, fullHi)
		gs, ge := g*cs, rec.chunkEnd(gl)
		mid := dst[gs-off : ge-off]
		k, _ := f.ReadAt(mid, HeaderSize+gs)
		for c := g; c <= gl; c++ {
			s0, e0 := c*cs-gs, rec.chunkEnd(c)-gs
			if e0 > int64(k) || checksum(mid[s0:e0]) != rec.crc(c) {
				mark(c)
			}
		}
	}
	if last > fullHi {
		partial(last)
	}
	return badLo, badHi
}

// Verify re-reads the whole fragment and returns every sick range (nil if
// it is healthy). Each range is also counted and passed to OnCorrupt.
func (s *Store) Verify(ctx context.Context, id fragment.ID) ([]CorruptRange, error) {
	return s.verify(ctx, id, nil)
}

// verify is Verify with an optional throttle called after each batch.
func (s *Store) verify(ctx context.Context, id fragment.ID, throttle func(n int64) error) ([]CorruptRange, error) {
	if err := ctx.Err(); err != nil {
		return nil, opErr("verify", id, err)
	}
	if err := s.enter(); err != nil {
		return nil, opErr("verify", id, err)
	}
	defer s.exit()
	bad, err := s.verifyOnce(id, throttle)
	if err == nil && len(bad) > 0 {
		l := s.lockFor(id)
		l.RLock()
		bad, err = s.verifyOnce(id, nil)
		l.RUnlock()
	}
	if err != nil {
		return nil, opErr("verify", id, err)
	}
	for _, r := range bad {
		s.reportCorrupt(id, r)
	}
	return bad, nil
}

func (s *Store) verifyOnce(id fragment.ID, throttle func(n int64) error) ([]CorruptRange, error) {
	rec, err := s.getRecord(id)
	if err != nil {
		return nil, err
	}
	whole := []CorruptRange{{0, rec.length}}
	f, err := s.fs.Open(s.fragPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return whole, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hdr [HeaderSize]byte
	if k, _ := f.ReadAt(hdr[:], 0); checkHeader(hdr[:k], id, &rec) != "" {
		// The file is not demonstrably this fragment: all of it is suspect.
		return whole, nil
	}
	bp := s.batchPool.Get().(*[]byte)
	defer s.batchPool.Put(bp)
	cs := rec.chunkSize
	per := max(int64(len(*bp))/cs, 1) * cs
	var bad []CorruptRange
	for start := int64(0); start < rec.length; start += per {
		end := min(start+per, rec.length)
		buf := (*bp)[:end-start]
		k, _ := f.ReadAt(buf, HeaderSize+start)
		for c := start / cs; c*cs < end; c++ {
			s0, e0 := c*cs-start, rec.chunkEnd(c)-start
			if e0 <= int64(k) && checksum(buf[s0:e0]) == rec.crc(c) {
				continue
			}
			if n := len(bad); n > 0 && bad[n-1].Off+bad[n-1].Len == c*cs {
				bad[n-1].Len = rec.chunkEnd(c) - bad[n-1].Off
			} else {
				bad = append(bad, CorruptRange{c * cs, rec.chunkEnd(c) - c*cs})
			}
		}
		if throttle != nil {
			if err := throttle(end - start); err != nil {
				return nil, err
			}
		}
	}
	return bad, nil
}

// List returns up to limit fragments of log with Seq >= fromSeq, in (Seq,
// Index) order. limit <= 0 means no limit.
func (s *Store) List(ctx context.Context, log uint64, fromSeq uint64, limit int) ([]Info, error) {
	lower := binary.BigEndian.AppendUint64(logPrefix(log), fromSeq)
	return s.list(ctx, "list", lower, prefixEnd(logPrefix(log)), limit)
}

// ListAll returns up to limit fragments in (Log, Seq, Index) order, starting
// after the id *after, or at the first fragment if after is nil. limit <= 0
// means no limit. Page with after = &last.ID.
func (s *Store) ListAll(ctx context.Context, after *fragment.ID, limit int) ([]Info, error) {
	lower := []byte{keyPrefix}
	if after != nil {
		// The smallest key greater than after's key.
		lower = append(appendKey(nil, *after), 0)
	}
	return s.list(ctx, "list", lower, []byte{keyPrefix + 1}, limit)
}

func (s *Store) list(ctx context.Context, op string, lower, upper []byte, limit int) ([]Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("storage: %s: %w", op, err)
	}
	if err := s.enter(); err != nil {
		return nil, fmt.Errorf("storage: %s: %w", op, err)
	}
	defer s.exit()
	var out []Info
	err := s.scan(lower, upper, func(id fragment.ID, v []byte) (bool, error) {
		rec, err := decodeRecord(v)
		if err != nil {
			// Skip it rather than hide every later fragment; reads of it
			// report the corruption.
			s.log.Warn("storage: bad record", "id", id, "err", err)
			return true, nil
		}
		out = append(out, rec.info(id))
		if len(out)%256 == 0 {
			if err := ctx.Err(); err != nil {
				return false, err
			}
		}
		return limit <= 0 || len(out) < limit, nil
	})
	if err != nil {
		return nil, fmt.Errorf("storage: %s: %w", op, err)
	}
	return out, nil
}

// scan calls fn on each record in [lower, upper) until fn returns false.
func (s *Store) scan(lower, upper []byte, fn func(fragment.ID, []byte) (bool, error)) error {
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	for ok := iter.First(); ok; ok = iter.Next() {
		id, err := decodeKey(iter.Key())
		if err != nil {
			continue
		}
		v, err := iter.ValueAndErr()
		if err != nil {
			_ = iter.Close()
			return err
		}
		more, err := fn(id, v)
		if err != nil {
			_ = iter.Close()
			return err
		}
		if !more {
			break
		}
	}
	return iter.Close()
}

// Suspects returns up to limit fragments found corrupt and not repaired
// since (marks of deleted fragments are skipped).
func (s *Store) Suspects(ctx context.Context, limit int) ([]fragment.ID, error) {
	if err := s.enter(); err != nil {
		return nil, fmt.Errorf("storage: suspects: %w", err)
	}
	defer s.exit()
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{suspectPrefix}, UpperBound: []byte{suspectPrefix + 1}})
	if err != nil {
		return nil, fmt.Errorf("storage: suspects: %w", err)
	}
	defer iter.Close()
	var out []fragment.ID
	for ok := iter.First(); ok && len(out) < limit; ok = iter.Next() {
		k := iter.Key()
		if len(k) != keyLen {
			continue
		}
		id, err := decodeKey(append([]byte{keyPrefix}, k[1:]...))
		if err != nil {
			continue
		}
		if ok, err := s.exists(id); err != nil || !ok {
			continue
		}
		out = append(out, id)
	}
	return out, ctx.Err()
}

// Newest returns the highest stripe sequence number stored for log; ok is
// false if the store holds no fragment of it. A restarted client uses it to
// find the end of its log.
func (s *Store) Newest(ctx context.Context, log uint64) (seq uint64, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return 0, false, fmt.Errorf("storage: newest: %w", err)
	}
	if err := s.enter(); err != nil {
		return 0, false, fmt.Errorf("storage: newest: %w", err)
	}
	defer s.exit()
	p := logPrefix(log)
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return 0, false, fmt.Errorf("storage: newest: %w", err)
	}
	defer iter.Close()
	for valid := iter.Last(); valid; valid = iter.Prev() {
		if id, err := decodeKey(iter.Key()); err == nil {
			return id.Seq, true, nil
		}
	}
	if err := iter.Error(); err != nil {
		return 0, false, fmt.Errorf("storage: newest: %w", err)
	}
	return 0, false, nil
}
