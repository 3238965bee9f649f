package meta

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/atoll-fs/atoll/internal/auth"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/leaderhint"
	"github.com/atoll-fs/atoll/internal/lease"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Island is one metadata island. Its methods are safe for concurrent use.
type Island struct {
	cfg   Config
	id    namespace.IslandID
	fs    vfs.FS
	log   *slog.Logger
	db    *pebble.DB
	peer  Peer
	pool  *wire.Pool // the default wire peer's pool, closed with the island
	locks *lockTable
	ln    net.Listener
	srv   *wire.Server
	met   *islandMetrics

	// confined remembers inodes found inside confined keys' subtrees.
	confined confineCache

	// state guards closing: every request holds it shared.
	state struct {
		lockcheck.RWMutex
		closed bool
	}

	seq struct {
		lockcheck.Mutex
		last map[uint32]uint32 // bucket -> last allocated sequence
		// high is the persisted reservation: every sequence up to it may
		// have been handed out, so a restart continues above it.
		high map[uint32]uint32
	}

	tx struct {
		lockcheck.Mutex
		prepared map[metawire.TxID]*preparedTx // participant side
		notify   map[metawire.TxID]*notifyTx   // coordinator side: decisions to deliver
		active   map[metawire.TxID]bool        // coordinator side: transactions being run
	}

	resolveMu lockcheck.Mutex // one resolver pass at a time

	lastNow atomic.Int64

	// repl replicates every change (Config.Replicator); nil: local commits.
	repl Replicator
	// moves are the table entries moving away from or into this island
	// (move.go).
	moves moves
	// load counts client operations by the top 16 bits of the bucket of
	// the inode they name first (OpEntryLoad: per table entry at any
	// depth); nil until the first.
	load bucketCounts
	// loadBytes counts the file bytes commits bring, the same way.
	loadBytes bucketCounts
	// flocks are the clients' file locks' waiters and sessions
	// (filelocks.go; the locks themselves are records).
	flocks fileLocks
	// leases are the clients' leases on buckets (lease.go).
	leases      *lease.Table
	leaseMarked atomic.Int32    // leaseMarkShared, leaseMarkExclusive: what the lease record says
	leaseRecord lockcheck.Mutex // writing or dropping the lease record (lease.go)
	// handler serves wire requests: serveWire, counted in met.
	handler wire.Handler
	// reqs are the request ids being served; lastSweep is when the
	// background loop last deleted old ones (dedup.go).
	reqs      requests
	lastSweep time.Time
	// lazyDels are background deletions of a replicated island (del),
	// waited for by Close.
	lazyDels sync.WaitGroup

	bgCancel context.CancelFunc
	bgCtx    context.Context // ends when Close begins
	bgDone   chan struct{}

	// Lazy creates kick syncKick; the syncer goroutine (done closes
	// syncDone) then syncs the log, which makes every record before it
	// durable.
	syncKick chan struct{}
	syncDone chan struct{}
	// boot is this run's incarnation (startBoot), set before serving.
	boot uint64

	timing timing
}

// timing holds the island's waits and retry pacing (tests shorten them).
type timing struct {
	lockWait     time.Duration // an operation waiting for inode locks
	prepareWait  time.Duration // a participant waiting for locks at prepare
	readWait     time.Duration // a reader waiting for an undecided transaction
	callTimeout  time.Duration // one island-to-island call
	resolveAfter time.Duration // a prepared transaction's age before asking its coordinator
	resolveEvery time.Duration // background resolver period
	maxAttempts  int           // operation attempts on conflicts
	noSyncer     bool          // tests: lazy creates wait for an explicit sync
	syncDelay    time.Duration // the syncer waits this long after a kick, gathering more
}

func defaultTiming() timing {
	return timing{
		lockWait:     500 * time.Millisecond,
		prepareWait:  100 * time.Millisecond,
		readWait:     2 * time.Second,
		callTimeout:  5 * time.Second,
		resolveAfter: 2 * time.Second,
		resolveEvery: 250 * time.Millisecond,
		maxAttempts:  12,
		syncDelay:    DefaultLazySync,
	}
}

// DefaultLazySync is how long the syncer lets lazy changes gather before it
// syncs the log (Config.LazySync): a sync costs the island a disk flush and
// CPU whether it covers one change or a hundred, and a lazy change promises
// durability only at the next fsync (which syncs at once) — this bounds
// how long it may stay volatile otherwise. MaxLazySync caps the setting.
const (
	DefaultLazySync = 5 * time.Millisecond
	MaxLazySync     = time.Minute
)

// New opens (creating if needed) the island's database, resolves every
// open intent and prepared transaction it can (see the package doc),
// creates the root directory if this island owns its bucket, and binds
// the listener. It does not serve until Run; Handle works at once.
func New(cfg Config) (*Island, error) {
	return newIsland(cfg, defaultTiming())
}

func newIsland(cfg Config, tm timing) (*Island, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.InlineMax == 0 {
		cfg.InlineMax = DefaultInlineMax
	}
	if cfg.LazySync != 0 {
		tm.syncDelay = cfg.LazySync
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	i := &Island{
		cfg:    cfg,
		id:     namespace.IslandID(cfg.ID),
		fs:     cfg.FS,
		log:    cfg.Logger.With("island", cfg.ID),
		locks:  newLockTable(),
		timing: tm,
		met:    newIslandMetrics(cfg.Registerer, cfg.ID),
	}
	i.seq.last = map[uint32]uint32{}
	i.flocks.init()
	i.seq.high = map[uint32]uint32{}
	i.tx.prepared = map[metawire.TxID]*preparedTx{}
	i.tx.notify = map[metawire.TxID]*notifyTx{}
	i.tx.active = map[metawire.TxID]bool{}
	i.peer = cfg.Peer
	if i.peer == nil {
		i.pool = wire.NewPool(wire.ClientConfig{Key: cfg.Key, Dial: cfg.Dial}, 1)
		wp := &WirePeer{Pool: i.pool, Map: cfg.Map}
		if _, ok := cfg.Map.(leaderhint.Map); ok {
			wp.Hints = leaderhint.New(wp.askIsland, i.log)
		}
		i.peer = wp
	}
	if err := makeDirDurable(i.fs, cfg.Dir); err != nil {
		i.closePool()
		return nil, fmt.Errorf("meta: open %s: %w", cfg.Dir, err)
	}
	db := cfg.DB
	var err error
	if db == nil {
		if db, err = pebble.Open(i.fs.PathJoin(cfg.Dir, "db"), PebbleOptions(i.fs, i.log)); err != nil {
			i.closePool()
			return nil, fmt.Errorf("meta: open %s: %w", cfg.Dir, err)
		}
	}
	i.db = db
	i.repl = cfg.Replicator
	i.handler = i.met.wrap(i.serveWire)
	if err := i.openLeases(); err != nil {
		i.closeDB()
		i.closePool()
		return nil, fmt.Errorf("meta: open %s: %w", cfg.Dir, err)
	}
	if err := i.start(); err != nil {
		i.closeDB()
		i.closePool()
		return nil, fmt.Errorf("meta: open %s: %w", cfg.Dir, err)
	}
	if cfg.Listen != "" || cfg.Listener != nil {
		var verifier *auth.Verifier
		if cfg.Key != nil {
			if verifier, err = auth.NewVerifier(cfg.Key); err != nil {
				i.Close()
				return nil, fmt.Errorf("meta: %w", err)
			}
		}
		i.srv, err = wire.NewServer(wire.ServerConfig{
			Auth:      verifier,
			Handler:   i.handler,
			Logger:    i.log,
			ErrorCode: metawire.StatusOf,
			Inline:    inlineOp,
		})
		if i.ln = cfg.Listener; err == nil && i.ln == nil {
			i.ln, err = net.Listen("tcp", cfg.Listen)
		}
		if err != nil {
			i.Close()
			return nil, fmt.Errorf("meta: listen %s: %w", cfg.Listen, err)
		}
	}
	if err := i.met.register(i); err != nil {
		i.Close()
		return nil, fmt.Errorf("meta: metrics: %w", err)
	}
	return i, nil
}

// PebbleOptions are the options of an island's database (a replica opens
// it with them: the counter merger must be the island's).
func PebbleOptions(fs vfs.FS, log *slog.Logger) *pebble.Options {
	opts := &pebble.Options{
		FS: fs,
		// Measured with atoll bench meta: an 8 MiB cache and 4 MiB
		// memtables sent most lookups to sstable blocks on disk; these
		// sizes keep a few million inodes' hot records in memory.
		CacheSize:                   64 << 20,
		MemTableSize:                16 << 20,
		MemTableStopWritesThreshold: 4,
		MaxOpenFiles:                1024,
		FormatMajorVersion:          pebble.FormatNewest,
		Merger:                      counterMerger,
		Logger:                      pebbleLogger{log},
	}
	// Most creates look up a name that does not exist yet: bloom filters
	// answer those without reading a data block.
	for l := range opts.Levels {
		opts.Levels[l].FilterPolicy = bloom.FilterPolicy(10)
	}
	return opts
}

// closeDB closes the database unless the caller owns it (Config.DB).
func (i *Island) closeDB() error {
	if i.cfg.DB != nil {
		return nil
	}
	return i.db.Close()
}

// start checks the island's identity, recovers transactions, creates the
// root and starts the background resolver.
func (i *Island) start() error {
	v, ok, err := get(i.db, globalKey(gMeta))
	if err != nil {
		return err
	}
	if ok {
		id, format, err := decodeMeta(v)
		if err != nil {
			return fmt.Errorf("island record: %w", err)
		}
		if id != i.cfg.ID {
			return fmt.Errorf("directory belongs to island %d, not %d", id, i.cfg.ID)
		}
		if format != formatVersion {
			return fmt.Errorf("format version %d, want %d", format, formatVersion)
		}
	} else if err := i.put(context.Background(), globalKey(gMeta), encodeMeta(i.cfg.ID)); err != nil {
		return err
	}
	if err := i.startBoot(); err != nil {
		return err
	}
	if err := i.recoverTx(); err != nil {
		return err
	}
	if err := i.loadMoves(); err != nil {
		return err
	}
	if err := i.ensureRoot(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	i.bgCancel, i.bgDone = cancel, make(chan struct{})
	// One synchronous pass delivers what it can before serving (its
	// changes, like recovery's, do not wait for the lease fence: see
	// breakLeases).
	pass, pcancel := context.WithTimeout(ctx, 3*time.Second)
	i.resolveOnce(pass, true)
	pcancel()
	i.bgCtx = ctx
	go i.background(ctx)
	i.syncKick, i.syncDone = make(chan struct{}, 1), make(chan struct{})
	if i.repl != nil {
		close(i.syncDone) // every change is durable once applied: nothing to sync
	} else {
		go i.syncer(ctx)
	}
	return nil
}

// kickSync asks the syncer for a log sync soon.
func (i *Island) kickSync() {
	if i.timing.noSyncer {
		return
	}
	select {
	case i.syncKick <- struct{}{}:
	default: // one is pending: it will cover this record too
	}
}

// syncer makes lazily committed records durable. A sync that starts after
// a record was committed covers it, so kicks that arrive during a sync
// coalesce into the next one.
func (i *Island) syncer(ctx context.Context) {
	defer close(i.syncDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-i.syncKick:
			if d := i.timing.syncDelay; d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			if err := i.syncLog(); err != nil {
				i.log.Warn("meta: log sync failed", "err", err)
			}
		}
	}
}

// syncLog makes everything committed so far durable (OpSync, the syncer).
// A replicated island's changes are durable on a quorum once applied.
func (i *Island) syncLog() error {
	if i.repl != nil {
		return nil
	}
	if err := i.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("%w: log sync: %v", metawire.ErrIO, err)
	}
	return nil
}

// ensureRoot creates the root directory if this island owns its bucket
// and it does not exist.
func (i *Island) ensureRoot() error {
	if !i.owns(namespace.RootIno) {
		return nil
	}
	n, err := readInode(i.db, namespace.RootIno)
	if err != nil || n != nil {
		return err
	}
	now := i.now()
	root := &inode{
		ino: namespace.RootIno, gen: 1, mode: metawire.ModeDir | 0o755, nlink: 2,
		atime: now, mtime: now, ctime: now, version: 1,
		parent: namespace.RootIno, path: "/", nextCookie: firstCookie,
	}
	b := i.db.NewBatch()
	defer b.Close()
	if err := putInode(b, root); err != nil {
		return err
	}
	if err := b.Merge(globalKey(gStats), encodeCounters(1, 0), nil); err != nil {
		return err
	}
	i.log.Info("meta: created root directory", "ino", namespace.RootIno)
	return i.write(context.Background(), b, false)
}

// Addr is the listening address ("" without a listener).
func (i *Island) Addr() string {
	if i.ln == nil {
		return ""
	}
	return i.ln.Addr().String()
}

// ID is the island's id.
func (i *Island) ID() namespace.IslandID { return i.id }

// Run serves on the listener until ctx is done, then closes the island.
// Without a listener it waits for ctx and closes.
func (i *Island) Run(ctx context.Context) error {
	var err error
	if i.srv != nil {
		i.log.Info("meta: serving", "addr", i.Addr(), "dir", i.cfg.Dir)
		err = i.srv.Serve(ctx, i.ln)
	} else {
		<-ctx.Done()
	}
	if cerr := i.Close(); err == nil {
		err = cerr
	}
	return err
}

// Close stops the background work, waits for requests in flight and
// closes the database. Prepared transactions and intents stay on disk.
func (i *Island) Close() error {
	if i.bgCancel != nil {
		i.bgCancel()
		<-i.bgDone
		<-i.syncDone
	}
	i.state.Lock()
	defer i.state.Unlock()
	if i.state.closed {
		return nil
	}
	i.state.closed = true
	if i.ln != nil {
		i.ln.Close()
	}
	// No request runs now (each holds state shared): no deletion starts.
	i.lazyDels.Wait()
	i.closePool()
	// Lazy records committed since the syncer's last sync become durable,
	// and the next start keeps this incarnation: nothing acknowledged was
	// lost.
	if i.repl == nil {
		if err := i.syncLog(); err == nil && i.boot != 0 {
			_ = i.db.Set(globalKey(gBoot), encodeBoot(i.boot, true), pebble.Sync)
		}
	}
	i.met.unregister()
	return i.closeDB()
}

// startBoot picks this run's incarnation (metawire.SyncResp): the last
// one if the island closed cleanly, else a new random one, and records
// it as not closed cleanly until Close says otherwise.
func (i *Island) startBoot() error {
	v, ok, err := get(i.db, globalKey(gBoot))
	if err != nil {
		return err
	}
	if i.repl != nil {
		// A replicated island loses nothing it acknowledged (every change
		// is applied only once a quorum holds it), whichever replica
		// leads: one incarnation for the island's life.
		if ok && len(v) == 9 && binary.BigEndian.Uint64(v) != 0 {
			i.boot = binary.BigEndian.Uint64(v)
			return nil
		}
		for i.boot == 0 {
			i.boot = mrand.Uint64()
		}
		return i.put(context.Background(), globalKey(gBoot), encodeBoot(i.boot, true))
	}
	if ok && len(v) == 9 && v[8] == 1 && binary.BigEndian.Uint64(v) != 0 {
		i.boot = binary.BigEndian.Uint64(v)
	} else {
		for i.boot == 0 {
			i.boot = mrand.Uint64()
		}
	}
	return i.db.Set(globalKey(gBoot), encodeBoot(i.boot, false), pebble.Sync)
}

func encodeBoot(boot uint64, clean bool) []byte {
	v := binary.BigEndian.AppendUint64(nil, boot)
	if clean {
		return append(v, 1)
	}
	return append(v, 0)
}

func (i *Island) closePool() {
	if i.pool != nil {
		i.pool.Close()
	}
}

// enter marks a request in flight; it fails once the island is closed.
func (i *Island) enter() error {
	i.state.RLock()
	if i.state.closed {
		i.state.RUnlock()
		return fmt.Errorf("%w: island %d is closed", metawire.ErrUnavailable, i.id)
	}
	return nil
}

func (i *Island) leave() { i.state.RUnlock() }

// now returns a strictly increasing wall-clock time in nanoseconds, so
// that every change moves ctime.
func (i *Island) now() int64 {
	for {
		t := time.Now().UnixNano()
		last := i.lastNow.Load()
		if t <= last {
			t = last + 1
		}
		if i.lastNow.CompareAndSwap(last, t) {
			return t
		}
	}
}

func (i *Island) newTxID() metawire.TxID {
	var t metawire.TxID
	binary.BigEndian.PutUint32(t[:4], uint32(i.id))
	_, _ = rand.Read(t[4:])
	return t
}

// owns reports whether this island owns ino's bucket in the current map.
func (i *Island) owns(ino namespace.Ino) bool {
	return i.cfg.Map.Table().Lookup(ino.Bucket()) == i.id
}

// islandOf returns the island owning ino's bucket.
func (i *Island) islandOf(ino namespace.Ino) namespace.IslandID {
	return i.cfg.Map.Table().Lookup(ino.Bucket())
}

// checkIno fails with ErrStale for an invalid inode id and with
// ErrWrongIsland for one this island does not own.
func (i *Island) checkIno(op string, ino namespace.Ino) error {
	if !ino.Valid() {
		return fmt.Errorf("%s %v: %w", op, ino, metawire.ErrStale)
	}
	if !i.owns(ino) {
		return fmt.Errorf("%s %v: %w (bucket %08x is island %d's)", op, ino, metawire.ErrWrongIsland, ino.Bucket(), i.islandOf(ino))
	}
	if op != "clean" { // the cleaner's work is not the namespace's load
		i.countLoad(ino.Bucket())
	}
	return nil
}

// allocIno allocates a fresh inode id in bucket. The counter reservation
// is durable before any id from it is handed out: a lazily committed
// create may be lost in a crash, and its id must not then be given to
// another file while a client still holds it. One synced write per
// seqReserve ids.
func (i *Island) allocIno(bucket uint32) (namespace.Ino, error) { return i.allocInos(bucket, 1) }

// allocInos allocates n consecutive fresh inode ids in bucket and returns
// the first.
func (i *Island) allocInos(bucket uint32, n uint32) (namespace.Ino, error) {
	i.seq.Lock()
	defer i.seq.Unlock()
	if i.locks.isFrozen(bucket) {
		return 0, fmt.Errorf("inode ids of bucket %08x: %w", bucket, errMoving)
	}
	last, err := i.lastSeqLocked(bucket)
	if err != nil {
		return 0, err
	}
	if uint64(last)+uint64(n) > uint64(^uint32(0)) {
		return 0, fmt.Errorf("%w: bucket %08x has no inode numbers left", metawire.ErrNoSpace, bucket)
	}
	next, end := last+1, last+n
	if end > i.seq.high[bucket] {
		// Reserve a run of numbers with one write instead of writing the
		// counter for every inode (it was a second pebble commit per
		// create). A crash skips the unused rest of the run: numbers are
		// never reused, they may be skipped.
		high := uint32(min(max(uint64(end), uint64(next)+seqReserve-1), uint64(^uint32(0))))
		if err := i.put(context.Background(), seqKey(bucket), encodeU32(high)); err != nil {
			return 0, err
		}
		i.seq.high[bucket] = high
	}
	i.seq.last[bucket] = end
	return namespace.MakeIno(bucket, next), nil
}

// seqReserve is how many inode numbers one counter write reserves.
const seqReserve = 1024

// MakeDirDurable creates dir and its missing ancestors durably (a
// replica's directory, before its database is opened).
func MakeDirDurable(fs vfs.FS, dir string) error { return makeDirDurable(fs, dir) }

// makeDirDurable creates dir and its missing ancestors, syncing the
// parent of each one created so that the tree survives a crash.
func makeDirDurable(fs vfs.FS, dir string) error {
	var missing []string
	for p := dir; ; {
		if _, err := fs.Stat(p); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		missing = append(missing, p)
		parent := fs.PathDir(p)
		if parent == p {
			break
		}
		p = parent
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, p := range missing {
		d, err := fs.OpenDir(fs.PathDir(p))
		if err != nil {
			return err
		}
		err = d.Sync()
		if cerr := d.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// lastSeqLocked returns the last sequence allocated in bucket.
func (i *Island) lastSeqLocked(bucket uint32) (uint32, error) {
	if last, ok := i.seq.last[bucket]; ok {
		return last, nil
	}
	v, found, err := get(i.db, seqKey(bucket))
	if err != nil {
		return 0, err
	}
	last := namespace.RootSeq
	if found {
		if last, err = decodeU32(v); err != nil {
			return 0, fmt.Errorf("sequence of bucket %08x: %w", bucket, err)
		}
	}
	i.seq.last[bucket] = last
	i.seq.high[bucket] = last
	return last, nil
}

// noteSeq checks that ino, about to be created here, is an id this island
// handed out (allocIno: every id is at most the bucket's durable
// reservation), and makes sure the bucket's sequence is at least ino's so
// it is never allocated again. An id beyond the reservation was made up:
// taking it would let one forged prepare use up the bucket's numbers
// (^uint32(0) leaves none), so it is refused.
func (i *Island) noteSeq(ino namespace.Ino) error {
	i.seq.Lock()
	defer i.seq.Unlock()
	b := ino.Bucket()
	last, err := i.lastSeqLocked(b)
	if err != nil {
		return err
	}
	if ino.Seq() <= last {
		return nil
	}
	if ino.Seq() > i.seq.high[b] {
		return fmt.Errorf("%w: create of inode %v, which bucket %08x never allocated (reserved up to %d)", metawire.ErrBadRequest, ino, b, i.seq.high[b])
	}
	i.seq.last[b] = ino.Seq()
	return nil
}

// pebbleLogger routes pebble's logs to slog.
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

// Serve serves one wire request the way the island's own listener does
// (capability check, metrics): an island server hosting several islands
// dispatches to it.
func (i *Island) Serve(ctx context.Context, req *wire.Request) (wire.Response, error) {
	return i.handler(ctx, req)
}

// InlineOp names the requests an island serves on a connection's reader
// goroutine (wire.ServerConfig.Inline).
func InlineOp(op uint16) bool { return inlineOp(op) }

// inlineOp names the requests served on a connection's reader goroutine:
// lookups and getattrs read one snapshot and answer.
func inlineOp(op uint16) bool { return op == metawire.OpLookup || op == metawire.OpGetAttr }

// write makes b's changes the island's. Locally: committed with a synced
// write, or for a lazy change without one, kicking the syncer.
// Replicated: handed to the Replicator, which returns once a quorum holds
// the batch and it is applied here (lazy changes too: they are durable
// when acknowledged).
func (i *Island) write(ctx context.Context, b *pebble.Batch, lazy bool) error {
	done, err := i.breakLeases(ctx, b)
	if err != nil {
		return err
	}
	defer done()
	// A moving entry's changes since its base copy go with its delta;
	// noted whether or not the write succeeds (a failed replication may
	// still apply), once it is no longer running.
	defer i.noteWrite(b)
	if i.repl != nil {
		return i.repl.Replicate(ctx, b.Repr())
	}
	opt := pebble.Sync
	if lazy {
		opt = pebble.NoSync
	}
	if err := b.Commit(opt); err != nil {
		return fmt.Errorf("%w: %v", metawire.ErrIO, err)
	}
	if lazy {
		i.kickSync()
	}
	return nil
}

// put durably sets one key (write of a one-record batch).
func (i *Island) put(ctx context.Context, key, value []byte) error {
	b := i.db.NewBatch()
	defer b.Close()
	if err := b.Set(key, value, nil); err != nil {
		return err
	}
	return i.write(ctx, b, false)
}

// del deletes one key; lazy skips the sync (see write). A replicated
// island does a lazy deletion in the background instead: the callers
// (clearing a transaction's intent once every participant acknowledged,
// or an aborted one's) hold no lock and lose nothing if it never happens
// (the resolver clears what is left), and waiting would add a consensus
// round to every cross-island operation.
func (i *Island) del(ctx context.Context, key []byte, lazy bool) error {
	b := i.db.NewBatch()
	if err := b.Delete(key, nil); err != nil {
		b.Close()
		return err
	}
	if lazy && i.repl != nil {
		repr := append([]byte(nil), b.Repr()...)
		b.Close()
		i.lazyDels.Add(1)
		go func() {
			defer i.lazyDels.Done()
			if err := i.repl.Replicate(context.Background(), repr); err != nil {
				i.log.Debug("meta: background deletion", "err", err)
			}
		}()
		return nil
	}
	defer b.Close()
	return i.write(ctx, b, lazy)
}
