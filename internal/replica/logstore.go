package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"github.com/atoll-fs/atoll/internal/lockcheck"
)

// LogDB holds the raft logs and stable state of every replica of one
// island server in one pebble database, so that the log appends of all
// the server's groups share its write-ahead log: concurrent synced
// appends of different groups become one fsync (pebble's group commit),
// where a log store per group (raft-boltdb: two fdatasyncs per append)
// synced each on its own.
//
// Keys: u32 group (big-endian), a tag, then
//
//	'l' u64 index    a log entry: u64 term, u8 type, i64 appended-at (ns),
//	                 uvarint length + data, uvarint length + extensions
//	's' name         a stable value (raft's current term, last vote)
type LogDB struct {
	db *pebble.DB
	mu struct {
		lockcheck.Mutex
		open map[uint32]bool
	}
	// sync is the background syncer of leaders' appends (see
	// groupLog.StoreLogs): written is each group's highest index appended
	// without a sync, synced each group's highest index known durable.
	sync struct {
		lockcheck.Mutex
		cond    *sync.Cond
		written map[uint32]uint64
		synced  map[uint32]uint64
		// gen counts each group's truncations: a sync that started
		// before one must not mark the truncated indexes (which new
		// entries may take) durable.
		gen     map[uint32]uint64
		pending bool
		closed  bool
		err     error
	}
	syncDone chan struct{}
	// beforeSync, when set, runs before each background sync (tests hold
	// a leader's appends undurable with it).
	beforeSync atomic.Pointer[func()]
}

// OpenLogDB opens (creating) the log database in dir.
func OpenLogDB(dir string, logger pebble.Logger) (*LogDB, error) {
	opts := &pebble.Options{
		CacheSize:          16 << 20,
		MemTableSize:       8 << 20,
		FormatMajorVersion: pebble.FormatNewest,
	}
	if logger != nil {
		opts.Logger = logger
	}
	db, err := pebble.Open(filepath.Join(dir, "raftlog"), opts)
	if err != nil {
		return nil, fmt.Errorf("replica: open raft log in %s: %w", dir, err)
	}
	// What the previous run wrote without a sync (a leader's last
	// appends) counts as durable from here on: make it so.
	if err := db.Flush(); err != nil {
		db.Close()
		return nil, fmt.Errorf("replica: raft log in %s: %w", dir, err)
	}
	l := &LogDB{db: db, syncDone: make(chan struct{})}
	l.mu.open = map[uint32]bool{}
	l.sync.cond = sync.NewCond(&l.sync.Mutex)
	l.sync.written, l.sync.synced, l.sync.gen = map[uint32]uint64{}, map[uint32]uint64{}, map[uint32]uint64{}
	go l.syncLoop()
	return l, nil
}

// Close closes the database (after every group's raft has shut down).
func (l *LogDB) Close() error {
	l.sync.Lock()
	l.sync.closed = true
	l.sync.cond.Broadcast()
	l.sync.Unlock()
	<-l.syncDone
	return l.db.Close()
}

// syncLoop syncs the log whenever a leader appended without a sync: one
// fsync covers every group's appends made before it started.
func (l *LogDB) syncLoop() {
	defer close(l.syncDone)
	l.sync.Lock()
	defer l.sync.Unlock()
	for {
		for !l.sync.pending && !l.sync.closed {
			l.sync.cond.Wait()
		}
		if l.sync.closed {
			return
		}
		l.sync.pending = false
		upTo, gen := maps.Clone(l.sync.written), maps.Clone(l.sync.gen)
		l.sync.Unlock()
		if h := l.beforeSync.Load(); h != nil {
			(*h)()
		}
		err := l.db.LogData(nil, pebble.Sync)
		l.sync.Lock()
		if err != nil {
			l.sync.err = fmt.Errorf("replica: syncing the raft log: %w", err)
		}
		for g, i := range upTo {
			if gen[g] == l.sync.gen[g] {
				l.sync.synced[g] = max(l.sync.synced[g], i)
			}
		}
		l.sync.cond.Broadcast()
	}
}

// markSynced records group id durable up to index (a synced append).
func (l *LogDB) markSynced(id uint32, index uint64) {
	l.sync.Lock()
	l.sync.synced[id] = max(l.sync.synced[id], index)
	l.sync.cond.Broadcast()
	l.sync.Unlock()
}

// written records an append without a sync and asks for one.
func (l *LogDB) written(id uint32, index uint64) {
	l.sync.Lock()
	l.sync.written[id] = max(l.sync.written[id], index)
	l.sync.pending = true
	l.sync.cond.Broadcast()
	l.sync.Unlock()
}

// truncated forgets durability above index-1 for group id (a suffix was
// deleted; entries appended there again are new).
func (l *LogDB) truncated(id uint32, index uint64) {
	l.sync.Lock()
	l.sync.synced[id] = min(l.sync.synced[id], index-1)
	l.sync.written[id] = min(l.sync.written[id], index-1)
	l.sync.gen[id]++
	l.sync.pending = true // entries kept below index may still be unsynced
	l.sync.cond.Broadcast()
	l.sync.Unlock()
}

// syncedIndex is group id's highest index known durable.
func (l *LogDB) syncedIndex(id uint32) uint64 {
	l.sync.Lock()
	defer l.sync.Unlock()
	return l.sync.synced[id]
}

// waitSynced waits until group id is durable up to index.
func (l *LogDB) waitSynced(id uint32, index uint64) error {
	l.sync.Lock()
	defer l.sync.Unlock()
	for l.sync.synced[id] < index {
		switch {
		case l.sync.err != nil:
			return l.sync.err
		case l.sync.closed:
			return raft.ErrRaftShutdown
		}
		l.sync.cond.Wait()
	}
	return nil
}

// group returns group's LogStore and StableStore (one per group).
func (l *LogDB) group(id uint32) (*groupLog, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.open[id] {
		return nil, fmt.Errorf("replica: island %d's raft log is already open", id)
	}
	g := &groupLog{db: l.db, ldb: l, id: id, release: func() {
		l.mu.Lock()
		delete(l.mu.open, id)
		l.mu.Unlock()
	}}
	if err := g.loadBounds(); err != nil {
		return nil, err
	}
	l.mu.open[id] = true
	// What is stored counts as durable after one sync: it covers appends
	// an earlier opening of this group made in this process (what earlier
	// processes wrote, OpenLogDB flushed).
	l.written(id, g.last.Load())
	return g, nil
}

// DropGroup deletes everything group id stored (its replica left this
// server for good). The group must not be open.
func (l *LogDB) DropGroup(id uint32) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.open[id] {
		return fmt.Errorf("replica: island %d's raft log is open", id)
	}
	lo := binary.BigEndian.AppendUint32(nil, id)
	hi := binary.BigEndian.AppendUint32(nil, id+1)
	if id == ^uint32(0) {
		hi = []byte{0xff, 0xff, 0xff, 0xff, 0xff}
	}
	if err := l.db.DeleteRange(lo, hi, pebble.Sync); err != nil {
		return fmt.Errorf("replica: dropping island %d's raft log: %w", id, err)
	}
	l.sync.Lock()
	delete(l.sync.written, id)
	delete(l.sync.synced, id)
	l.sync.gen[id]++
	l.sync.Unlock()
	return nil
}

// groupLog is one group's raft.LogStore and raft.StableStore.
type groupLog struct {
	db  *pebble.DB
	ldb *LogDB
	id  uint32
	// leading, when set, reports whether raft runs this group's leader
	// loop; its appends are then not synced before StoreLogs returns.
	leading func() bool
	release func()
	once    sync.Once
	// first and last index stored (0, 0: empty), kept in memory.
	first, last atomic.Uint64
	boundsMu    sync.Mutex // orders bound updates of appends and deletions
	// appendedBytes and appendedEntries count the entry data this
	// process appended (avgEntryBytes).
	appendedBytes, appendedEntries atomic.Uint64
}

// avgEntryBytes is the mean data size of the entries appended since the
// log was opened (0: none yet).
func (g *groupLog) avgEntryBytes() uint64 {
	n := g.appendedEntries.Load()
	if n == 0 {
		return 0
	}
	return g.appendedBytes.Load() / n
}

func (g *groupLog) prefix(tag byte) []byte {
	return append(binary.BigEndian.AppendUint32(make([]byte, 0, 16), g.id), tag)
}

func (g *groupLog) logKey(index uint64) []byte {
	return binary.BigEndian.AppendUint64(g.prefix('l'), index)
}

func (g *groupLog) loadBounds() error {
	lo, hi := g.prefix('l'), g.prefix('l'+1)
	it, err := g.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	defer it.Close()
	if it.First() {
		g.first.Store(binary.BigEndian.Uint64(it.Key()[len(lo):]))
	}
	if it.Last() {
		g.last.Store(binary.BigEndian.Uint64(it.Key()[len(lo):]))
	}
	return it.Error()
}

func (g *groupLog) close() { g.once.Do(g.release) }

func (g *groupLog) FirstIndex() (uint64, error) { return g.first.Load(), nil }
func (g *groupLog) LastIndex() (uint64, error)  { return g.last.Load(), nil }

func (g *groupLog) GetLog(index uint64, out *raft.Log) error {
	v, c, err := g.db.Get(g.logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return err
	}
	defer c.Close()
	return decodeLog(index, v, out)
}

func (g *groupLog) StoreLog(l *raft.Log) error { return g.StoreLogs([]*raft.Log{l}) }

func (g *groupLog) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	b := g.db.NewBatch()
	defer b.Close()
	var buf []byte
	var data uint64
	for _, l := range logs {
		data += uint64(len(l.Data))
		buf = encodeLog(buf[:0], l)
		if err := b.Set(g.logKey(l.Index), buf, nil); err != nil {
			return err
		}
	}
	// A leader's append is synced in the background while raft sends the
	// entries to the followers (the Raft thesis, §10.2.1: the leader may
	// write its log in parallel with replicating it), instead of a sync
	// and then the sends, two fsyncs in series per commit. raft counts
	// the leader's copy at once, so an entry may be "committed" with only
	// a follower's copy durable; nothing acts on that until the leader's
	// copy is durable too: its state machine waits for the sync before
	// applying (fsm.synced) and followers learn of a commit only up to
	// the leader's synced index (syncedTransport). A crash before the sync
	// loses an entry no replica applied and no client was told of.
	// Followers' appends (and everything else) are synced before they
	// answer, as raft requires.
	last := logs[len(logs)-1].Index
	async := g.leading != nil && g.leading()
	opt := pebble.Sync
	if async {
		opt = pebble.NoSync
	}
	if err := b.Commit(opt); err != nil {
		return err
	}
	g.appendedBytes.Add(data)
	g.appendedEntries.Add(uint64(len(logs)))
	if async {
		g.ldb.written(g.id, last)
	} else {
		g.ldb.markSynced(g.id, last)
	}
	g.boundsMu.Lock()
	defer g.boundsMu.Unlock()
	if g.first.Load() == 0 {
		g.first.Store(logs[0].Index)
	}
	g.last.Store(max(g.last.Load(), last))
	return nil
}

// synced is the highest index of this group known durable here.
func (g *groupLog) synced() uint64 { return g.ldb.syncedIndex(g.id) }

// waitSynced waits until this group's log is durable up to index.
func (g *groupLog) waitSynced(index uint64) error { return g.ldb.waitSynced(g.id, index) }

// DeleteRange removes entries min..max (a compacted prefix, or a
// conflicting suffix a new leader overwrites). Not synced: entries that
// come back after a crash are below the snapshot or get overwritten.
func (g *groupLog) DeleteRange(min, max uint64) error {
	if err := g.db.DeleteRange(g.logKey(min), g.logKey(max+1), pebble.NoSync); err != nil {
		return err
	}
	if max >= g.last.Load() {
		g.ldb.truncated(g.id, min)
	}
	g.boundsMu.Lock()
	defer g.boundsMu.Unlock()
	g.first.Store(0)
	g.last.Store(0)
	return g.loadBounds()
}

func (g *groupLog) Set(key, val []byte) error {
	return g.db.Set(append(g.prefix('s'), key...), val, pebble.Sync)
}

// errNotFound is the error raft expects of a missing stable key (it
// compares the text).
var errNotFound = errors.New("not found")

func (g *groupLog) Get(key []byte) ([]byte, error) {
	v, c, err := g.db.Get(append(g.prefix('s'), key...))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return append([]byte(nil), v...), nil
}

func (g *groupLog) SetUint64(key []byte, val uint64) error {
	return g.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

func (g *groupLog) GetUint64(key []byte) (uint64, error) {
	v, err := g.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("replica: stable value %q of %d bytes", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func encodeLog(b []byte, l *raft.Log) []byte {
	b = binary.BigEndian.AppendUint64(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	return append(b, l.Extensions...)
}

func decodeLog(index uint64, v []byte, out *raft.Log) error {
	bad := fmt.Errorf("replica: raft log entry %d: malformed", index)
	if len(v) < 17 {
		return bad
	}
	*out = raft.Log{Index: index, Term: binary.BigEndian.Uint64(v), Type: raft.LogType(v[8])}
	if at := int64(binary.BigEndian.Uint64(v[9:])); at != 0 {
		out.AppendedAt = time.Unix(0, at)
	}
	v = v[17:]
	take := func() ([]byte, bool) {
		n, k := binary.Uvarint(v)
		if k <= 0 || uint64(len(v)-k) < n {
			return nil, false
		}
		b := append([]byte(nil), v[k:k+int(n)]...)
		v = v[k+int(n):]
		return b, true
	}
	var ok bool
	if out.Data, ok = take(); !ok {
		return bad
	}
	if out.Extensions, ok = take(); !ok || len(v) != 0 {
		return bad
	}
	if len(out.Data) == 0 {
		out.Data = nil
	}
	if len(out.Extensions) == 0 {
		out.Extensions = nil
	}
	return nil
}
