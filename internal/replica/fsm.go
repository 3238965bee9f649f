package replica

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"github.com/atoll-fs/atoll/internal/faults"
)

// AppliedKey holds the index of the last raft entry applied to the
// island's database (8 bytes big-endian), written in the same batch as
// the entry, so an entry is applied exactly once across restarts. It
// sorts among the island's global records (internal/meta's schema).
var AppliedKey = []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 'A'}

// dbEnd is above every key of an island's database (meta keys start with
// a 4-byte bucket or FF FF FF FF FF and a tag below FF).
var dbEnd = []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fsm applies committed entries (pebble batch representations) to the
// replica's database.
type fsm struct {
	db      *pebble.DB
	dir     string // the replica's directory (a restore spools there)
	log     *slog.Logger
	faults  *faults.Set
	applied atomic.Uint64
	// failed is the first entry that could not be applied: the replica
	// stops applying (its database would diverge) and says so in Status.
	failed atomic.Pointer[error]
	// synced waits until the local raft log holds an index durably (a
	// leader's appends are synced in the background); nil: no wait.
	synced func(index uint64) error
	// persisted, when set, is told the size of each snapshot written.
	persisted func(bytes int64)
	// replayTo is the log's last index when the replica opened: entries
	// up to it are replayed at start (the database lost them with its
	// memtable), and the apply failpoints fire only after it, where a
	// change is being made rather than recovered.
	replayTo uint64
}

// waitSynced waits until this replica's log holds index durably: a
// leader applies an entry (and answers for it) only once its own copy is
// durable, besides the followers' copies that committed it.
func (f *fsm) waitSynced(index uint64) error {
	if f.synced == nil {
		return nil
	}
	if err := f.synced(index); err != nil {
		return fmt.Errorf("replica: entry %d: %w", index, err)
	}
	return nil
}

// hit fires failpoint name for entry index unless it is a replayed one.
func (f *fsm) hit(name string, index uint64) {
	if index > f.replayTo {
		_ = f.faults.Hit(name)
	}
}

func newFSM(db *pebble.DB, dir string, log *slog.Logger, fs *faults.Set) (*fsm, error) {
	f := &fsm{db: db, dir: dir, log: log, faults: fs}
	// A restore a crash interrupted left its spool behind.
	if old, err := filepath.Glob(filepath.Join(dir, "restore-*.snap")); err == nil {
		for _, p := range old {
			_ = os.Remove(p)
		}
	}
	v, c, err := db.Get(AppliedKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		defer c.Close()
		if len(v) != 8 {
			return nil, fmt.Errorf("replica: applied index record of %d bytes", len(v))
		}
		f.applied.Store(binary.BigEndian.Uint64(v))
	}
	return f, nil
}

// Apply applies one committed entry: its batch and the applied index in
// one pebble batch, without a sync (the raft log is the durable copy; a
// crash replays what the database lost).
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand || l.Index <= f.applied.Load() {
		return nil
	}
	if p := f.failed.Load(); p != nil {
		return *p
	}
	if err := f.waitSynced(l.Index); err != nil {
		return f.fail(l.Index, err) // raft counts it applied: never apply past it
	}
	// After the quorum, before the apply: a crash here must lose nothing.
	f.hit(FailBeforeApply, l.Index)
	b := f.db.NewBatch()
	defer b.Close()
	if len(l.Data) > 0 {
		if err := b.SetRepr(append([]byte(nil), l.Data...)); err != nil {
			return f.fail(l.Index, err)
		}
	}
	if err := b.Set(AppliedKey, binary.BigEndian.AppendUint64(nil, l.Index), nil); err != nil {
		return f.fail(l.Index, err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return f.fail(l.Index, err)
	}
	f.applied.Store(l.Index)
	f.hit(FailAfterApply, l.Index)
	return nil
}

// ApplyBatch applies the entries raft committed together (raft.BatchingFSM)
// in one pebble batch: one memtable insertion and one commit for a whole
// round of the group's log instead of one per entry. An entry that does
// not decode fails the merge, and the round is applied entry by entry
// (Apply), which stops at that entry.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	fail := func(err error) []any {
		for k := range out {
			out[k] = err
		}
		return out
	}
	if p := f.failed.Load(); p != nil {
		return fail(*p)
	}
	if err := f.waitSynced(logs[len(logs)-1].Index); err != nil {
		return fail(f.fail(logs[len(logs)-1].Index, err)) // raft counts them applied: never apply past them
	}
	b := f.db.NewBatch()
	defer b.Close()
	var last uint64
	var applied []int
	for k, l := range logs {
		if l.Type != raft.LogCommand || l.Index <= f.applied.Load() {
			continue
		}
		f.hit(FailBeforeApply, l.Index)
		if err := mergeRepr(b, l.Data); err != nil {
			return f.applyEach(logs)
		}
		last = l.Index
		applied = append(applied, k)
	}
	if last == 0 {
		return out
	}
	if err := b.Set(AppliedKey, binary.BigEndian.AppendUint64(nil, last), nil); err != nil {
		return f.applyEach(logs)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return f.applyEach(logs)
	}
	f.applied.Store(last)
	for _, k := range applied {
		f.hit(FailAfterApply, logs[k].Index)
	}
	return out
}

// mergeRepr appends one entry's batch representation to b; a
// representation pebble refuses (or panics on) is an error.
func mergeRepr(b *pebble.Batch, repr []byte) (err error) {
	if len(repr) == 0 {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("replica: entry batch: %v", p)
		}
	}()
	e := &pebble.Batch{}
	if err := e.SetRepr(repr); err != nil {
		return err
	}
	return b.Apply(e, nil)
}

// applyEach applies logs one at a time (Apply skips what is applied).
func (f *fsm) applyEach(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	for k, l := range logs {
		out[k] = f.Apply(l)
	}
	return out
}

func (f *fsm) fail(index uint64, err error) error {
	err = fmt.Errorf("replica: applying entry %d: %w", index, err)
	f.failed.CompareAndSwap(nil, &err)
	f.log.Error("replica: cannot apply a committed entry; this replica stops applying", "err", err)
	return err
}

// Snapshot captures the database at the applied index and starts a
// flush of its memtable, which Persist waits for: the database has no
// write-ahead log (the raft log is its log), raft drops the log up to
// this index once the snapshot is stored, and entries applied only in
// memory must not then be lost.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	flushed, err := f.db.AsyncFlush()
	if err != nil {
		return nil, err
	}
	return &snapshot{snap: f.db.NewSnapshot(), flushed: flushed, persisted: f.persisted}, nil
}

// Snapshot stream format: records of u32 key length, key, u32 value
// length, value; then a u32 0xFFFFFFFF end mark and a u32 CRC32C of
// everything before it.
const snapEnd = 0xFFFFFFFF

type snapshot struct {
	snap      *pebble.Snapshot
	flushed   <-chan struct{}
	persisted func(bytes int64)
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	<-s.flushed
	w := &countingWriter{w: sink}
	err := s.write(w)
	if err != nil {
		_ = sink.Cancel()
		return err
	}
	if err := sink.Close(); err != nil {
		return err
	}
	if s.persisted != nil {
		s.persisted(w.n)
	}
	return nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (s *snapshot) write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	crc := crc32.New(castagnoli)
	out := io.MultiWriter(bw, crc)
	it, err := s.snap.NewIter(nil)
	if err != nil {
		return err
	}
	var hdr [4]byte
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return err
		}
		for _, b := range [][]byte{it.Key(), v} {
			binary.BigEndian.PutUint32(hdr[:], uint32(len(b)))
			if _, err := out.Write(hdr[:]); err != nil {
				it.Close()
				return err
			}
			if _, err := out.Write(b); err != nil {
				it.Close()
				return err
			}
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	binary.BigEndian.PutUint32(hdr[:], snapEnd)
	if _, err := out.Write(hdr[:]); err != nil {
		return err
	}
	binary.BigEndian.PutUint32(hdr[:], crc.Sum32())
	if _, err := bw.Write(hdr[:]); err != nil {
		return err
	}
	return bw.Flush()
}

func (s *snapshot) Release() { _ = s.snap.Close() }

// Restore replaces the database with a snapshot's records (a replica
// that fell behind the leader's log, or lost its disk). The stream is
// spooled to a file in the replica's directory and checked whole (its
// format and CRC) before anything is cleared: a snapshot damaged on the
// way fails the install (raft retries it) and leaves the database as it
// was. The records then go in batches; the applied index comes with
// them (AppliedKey is a record).
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	spool, err := os.CreateTemp(f.dir, "restore-*.snap")
	if err != nil {
		return fmt.Errorf("replica: snapshot: %w", err)
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	bw := bufio.NewWriterSize(spool, 1<<20)
	if err := readSnapshot(io.TeeReader(rc, bw), func(_, _ []byte) error { return nil }); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("replica: snapshot: %w", err)
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("replica: snapshot: %w", err)
	}
	if err := f.db.DeleteRange(nil, dbEnd, pebble.NoSync); err != nil {
		return err
	}
	b := f.db.NewBatch()
	defer func() { b.Close() }()
	err = readSnapshot(spool, func(k, v []byte) error {
		if err := b.Set(k, v, nil); err != nil {
			return err
		}
		if b.Len() < 4<<20 {
			return nil
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			return err
		}
		b.Close()
		b = f.db.NewBatch()
		return nil
	})
	if err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	if err := f.db.Flush(); err != nil {
		return err
	}
	f.failed.Store(nil)
	applied := uint64(0)
	if v, c, err := f.db.Get(AppliedKey); err == nil {
		if len(v) == 8 {
			applied = binary.BigEndian.Uint64(v)
		}
		c.Close()
	}
	f.applied.Store(applied)
	f.log.Info("replica: restored a snapshot", "applied", applied)
	return nil
}

// readSnapshot parses a snapshot stream (see snapshot.write), calling fn
// with every record, and checks its CRC at the end. fn's slices are its
// own to keep.
func readSnapshot(r io.Reader, fn func(k, v []byte) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	crc := crc32.New(castagnoli)
	in := io.TeeReader(br, crc)
	var hdr [4]byte
	readLen := func() (uint32, error) {
		if _, err := io.ReadFull(in, hdr[:]); err != nil {
			return 0, err
		}
		return binary.BigEndian.Uint32(hdr[:]), nil
	}
	for {
		kl, err := readLen()
		if err != nil {
			return fmt.Errorf("replica: snapshot: %w", err)
		}
		if kl == snapEnd {
			break
		}
		if kl > 1<<20 {
			return fmt.Errorf("replica: snapshot: key of %d bytes", kl)
		}
		k := make([]byte, kl)
		if _, err := io.ReadFull(in, k); err != nil {
			return fmt.Errorf("replica: snapshot: %w", err)
		}
		vl, err := readLen()
		if err != nil || vl > 64<<20 {
			return fmt.Errorf("replica: snapshot: value length %d: %v", vl, err)
		}
		v := make([]byte, vl)
		if _, err := io.ReadFull(in, v); err != nil {
			return fmt.Errorf("replica: snapshot: %w", err)
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	sum := crc.Sum32()
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return fmt.Errorf("replica: snapshot checksum: %w", err)
	}
	if binary.BigEndian.Uint32(hdr[:]) != sum {
		return fmt.Errorf("replica: snapshot checksum %08x, computed %08x", binary.BigEndian.Uint32(hdr[:]), sum)
	}
	return nil
}
