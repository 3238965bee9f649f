package meta

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Moving table entries (Archipelago's migration; the package doc, "Moving
// table entries"). The source island drives a move; every step is
// resumable from what is durable:
//
//  0. base copy: while the entry still serves, its records from one
//     snapshot go to the destination (OpImportEntry, ImportBase, in
//     chunks; applied there at once, not served), and the keys every
//     change writes in the entry from then on are noted.
//  1. freeze: every lease in the entry's buckets is broken and none is
//     granted (their holders flush what they kept back); then no lock is
//     granted on an inode there (every change takes one: changes fail
//     with ErrUnavailable and clients retry) and no inode id is handed out;
//     changes already running end; then the move marker (gMoving) is
//     written. Reads go on.
//  2. delta: the noted keys' records as they are now go to the
//     destination (ImportDelta), which applies them over the base with
//     the live-byte and statistics counters they carry and its own marker
//     (gImported), and answers a repeated copy without applying it again.
//     A source that restarted frozen (it lost the noted keys), or whose
//     destination lost the base, copies the whole entry instead
//     (ImportWhole): the freeze then lasts the whole copy.
//  3. flip: the manager gives the entry to the destination (FinishMove,
//     a new epoch). From then on clients and islands with the new map go
//     to the destination; this island answers ErrWrongIsland once its
//     own map is the new one.
//  4. drop: a grace period after its map has the flip, this island
//     deletes the entry's records with their counters and the marker, in
//     one batch, and thaws the range.
//
// A restart finds the marker and resumes: still pending in the map, the
// move is copied again; flipped, the records are dropped; gone from the
// map (cancelled), the range thaws. A failed step is tried again after a
// wait that doubles (moveRetry up to 30 times it); a frozen entry whose
// copy keeps failing for moveGiveUp (its destination is gone) is given
// back: the source cancels the move with the manager, which refuses
// nothing (a move it flipped meanwhile stays flipped), and thaws. Prepared transactions hold locks, so
// a frozen entry has none, and an island's intents and decisions concern
// transactions, not buckets: nothing of the 2PC moves.

// Failpoint names of a move (source island).
const (
	FailMoveAfterBase   = "meta.move.afterBase"   // base copy applied by the destination, entry not frozen
	FailMoveAfterFreeze = "meta.move.afterFreeze" // entry frozen and marker durable, nothing copied
	FailMoveAfterCopy   = "meta.move.afterCopy"   // destination applied the records, map not flipped
	FailMoveAfterFlip   = "meta.move.afterFlip"   // map flipped, records not dropped
	// destination island
	FailMoveAfterImport = "meta.move.afterImport" // the entry's records applied, not answered
	FailMoveAfterChunk  = "meta.move.afterChunk"  // a chunk before the final one applied, not answered
)

const (
	gMoving   = 'V' // move id(8) -> first, last, to: this island froze the entry to move it
	gImported = 'W' // move id(8) -> first, last, from: this island holds a moved entry's records
	gAdopted  = 'X' // boot(8) -> u64 ns until when: an incarnation whose records this island took over
	gBase     = 'Y' // move id(8) -> first, last, from: this island holds a moving entry's base copy
	gPartial  = 'Z' // move id(8) -> first, last, from: this island holds part of a base or whole copy
)

// importTags are the markers of records a move brought into this island;
// one left after its move ended names records to forget (moveOnce).
var importTags = []byte{gImported, gBase, gPartial}

// maxNoted bounds the keys noted for a move's delta; past it the delta
// is a whole copy.
const maxNoted = 1 << 20

// noted are the keys changes wrote in a moving entry since its base copy.
type noted struct {
	r    bucketRange
	keys map[string]struct{}
	over bool
}

// adoptKeep is how long an island answers syncs with an incarnation it
// adopted: longer than a client keeps a lazy change unsettled.
const adoptKeep = 24 * time.Hour

// maxAdopted bounds the incarnations one sync answer lists.
const maxAdopted = 256

// adopted lists the incarnations this island took records over from.
func (i *Island) adopted() ([]uint64, error) {
	p := globalKey(gAdopted)
	it, err := i.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", metawire.ErrIO, err)
	}
	defer it.Close()
	var out []uint64
	for ok := it.First(); ok && len(out) < maxAdopted; ok = it.Next() {
		if k := it.Key(); len(k) == len(p)+8 {
			out = append(out, binary.BigEndian.Uint64(k[len(p):]))
		}
	}
	return out, it.Error()
}

// sweepAdopted deletes adoptions older than adoptKeep (the background
// loop, with the request ids).
func (i *Island) sweepAdopted(ctx context.Context) {
	p := globalKey(gAdopted)
	it, err := i.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return
	}
	var old [][]byte
	now := uint64(time.Now().UnixNano())
	for ok := it.First(); ok; ok = it.Next() {
		if v := it.Value(); len(v) == 8 && binary.BigEndian.Uint64(v) < now {
			old = append(old, append([]byte(nil), it.Key()...))
		}
	}
	it.Close()
	if len(old) == 0 {
		return
	}
	b := i.db.NewBatch()
	defer b.Close()
	if deleteKeys(b, old) == nil {
		if err := i.write(ctx, b, true); err != nil {
			i.log.Debug("meta: sweeping adopted incarnations", "err", err)
		}
	}
}

// timing of moves (tests shorten them).
var (
	moveEvery  = 100 * time.Millisecond // how often the mover looks at the map
	moveGrace  = time.Second            // after the flip, before the source drops the records
	moveQuiet  = 10 * time.Second       // the longest a freeze waits for running changes
	moveRetry  = time.Second            // after a failed step, the first wait before the next try (doubling)
	moveGiveUp = 30 * time.Second       // a frozen entry whose copy fails this long is given back (the move cancelled)
)

func moveKey(tag byte, id uint64) []byte {
	return binary.BigEndian.AppendUint64(globalKey(tag), id)
}

// moveMark is a gMoving or gImported record: the entry's buckets and the
// other island of the move.
type moveMark struct {
	r     bucketRange
	other namespace.IslandID
}

func (m moveMark) encode() []byte {
	e := wire.Enc{}
	e.U8(recordVersion)
	e.U32(m.r.first)
	e.U32(m.r.last)
	e.U32(uint32(m.other))
	return seal(e.B)
}

func decodeMoveMark(v []byte) (moveMark, error) {
	d, err := open(v)
	if err != nil {
		return moveMark{}, err
	}
	m := moveMark{r: bucketRange{d.U32(), d.U32()}, other: namespace.IslandID(d.U32())}
	return m, finish(d)
}

// moves is an island's state of entry moves.
type moves struct {
	mu struct {
		lockcheck.Mutex
		// withdrawn gives back the lease range of a frozen entry.
		withdrawn map[uint64]func()
		// flipped is when this island first saw its map give a frozen
		// entry away (the drop waits moveGrace from then).
		flipped map[uint64]time.Time
		// importing gathers the chunks of moves into this island.
		importing map[uint64]*importing
		// noting are the entries moving away whose changes are noted.
		noting map[uint64]*noted
		// failing are the moves whose last step failed, with when to try
		// again; frozenFailing since when a frozen one fails.
		failing map[uint64]*failing
		// lastErr and loggedAt rate-limit the mover's warnings.
		lastErr  string
		loggedAt time.Time
		// pauseUntil: no new move starts before (Config.MoveDuty).
		pauseUntil time.Time
	}
	nNoting atomic.Int32 // len(mu.noting), read by every write
	// importMu serializes imports: a source that gave up on a slow chunk
	// and starts over must not have its new copy overtaken by the old.
	importMu sync.Mutex
}

type failing struct {
	next   time.Time
	wait   time.Duration
	frozen time.Time // zero: not frozen when it failed
}

type importing struct {
	phase            uint8
	next             uint32
	busy             bool // a chunk is being applied
	records, deletes int
}

func (m *moves) init() {
	m.mu.withdrawn = map[uint64]func(){}
	m.mu.flipped = map[uint64]time.Time{}
	m.mu.importing = map[uint64]*importing{}
	m.mu.noting = map[uint64]*noted{}
	m.mu.failing = map[uint64]*failing{}
}

// backingOff reports whether move id failed recently and must wait.
func (m *moves) backingOff(id uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.mu.failing[id]
	return f != nil && time.Now().Before(f.next)
}

// failed records a failed step of move id (frozen: the entry is frozen)
// and reports how long a frozen entry has been failing.
func (m *moves) failed(id uint64, frozen bool) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.mu.failing[id]
	if f == nil {
		f = &failing{wait: moveRetry}
		m.mu.failing[id] = f
	} else {
		f.wait = min(2*f.wait, 30*moveRetry)
	}
	f.next = time.Now().Add(f.wait)
	if !frozen {
		f.frozen = time.Time{}
		return 0
	}
	if f.frozen.IsZero() {
		f.frozen = time.Now()
	}
	return time.Since(f.frozen)
}

func (m *moves) succeeded(id uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.mu.failing, id)
}

// movePaused reports whether the duty cycle keeps new moves waiting.
func (i *Island) movePaused() bool {
	i.moves.mu.Lock()
	defer i.moves.mu.Unlock()
	return time.Now().Before(i.moves.mu.pauseUntil)
}

// movePause holds the next move back after one that took d, so moves
// take at most Config.MoveDuty of the time.
func (i *Island) movePause(d time.Duration) {
	duty := i.cfg.MoveDuty
	if duty == 0 {
		duty = DefaultMoveDuty
	}
	if duty >= 1 {
		return
	}
	i.moves.mu.Lock()
	defer i.moves.mu.Unlock()
	i.moves.mu.pauseUntil = time.Now().Add(time.Duration(float64(d) * (1/duty - 1)))
}

// warn logs the mover's error unless it said the same within a minute.
func (i *Island) warnMove(err error) {
	i.moves.mu.Lock()
	same := err.Error() == i.moves.mu.lastErr && time.Since(i.moves.mu.loggedAt) < time.Minute
	if !same {
		i.moves.mu.lastErr, i.moves.mu.loggedAt = err.Error(), time.Now()
	}
	i.moves.mu.Unlock()
	if !same {
		i.log.Warn("meta: moving a table entry", "err", err)
	}
}

// note starts noting the keys changes write in r for move id.
func (i *Island) note(id uint64, r bucketRange) *noted {
	n := &noted{r: r, keys: map[string]struct{}{}}
	i.moves.mu.Lock()
	defer i.moves.mu.Unlock()
	i.moves.mu.noting[id] = n
	i.moves.nNoting.Store(int32(len(i.moves.mu.noting)))
	return n
}

func (i *Island) unnote(id uint64) {
	i.moves.mu.Lock()
	defer i.moves.mu.Unlock()
	delete(i.moves.mu.noting, id)
	i.moves.nNoting.Store(int32(len(i.moves.mu.noting)))
}

// noteWrite notes the keys of b in entries being noted (write calls it
// once b is applied, or failed to be: noting too much costs nothing).
func (i *Island) noteWrite(b *pebble.Batch) {
	if i.moves.nNoting.Load() == 0 {
		return
	}
	i.moves.mu.Lock()
	defer i.moves.mu.Unlock()
	var dedup []byte // the batch's request id record, if any
	touched := map[*noted]bool{}
	add := func(n *noted, key []byte) {
		if n.over {
			return
		}
		if len(n.keys) >= maxNoted {
			n.over, n.keys = true, nil
			return
		}
		n.keys[string(key)] = struct{}{}
	}
	r := b.Reader()
	for {
		_, key, _, ok, err := r.Next()
		if err != nil || !ok {
			break
		}
		if isDedupKey(key) {
			dedup = key
			continue
		}
		if len(key) < 5 || key[4] >= 0x80 {
			continue
		}
		bk := binary.BigEndian.Uint32(key)
		for _, n := range i.moves.mu.noting {
			if n.r.has(bk) {
				add(n, key)
				touched[n] = true
			}
		}
	}
	// A change of the entry goes with its request id: a client retrying
	// it at the destination after the move finds it applied.
	if dedup != nil {
		for n := range touched {
			add(n, dedup)
		}
	}
}

// isDedupKey reports whether key is a request id record (dedup.go).
func isDedupKey(key []byte) bool {
	p := globalKey(gDedup)
	return len(key) == len(p)+16 && string(key[:len(p)]) == string(p)
}

// marks reads every record under tag.
func (i *Island) marks(tag byte) (map[uint64]moveMark, error) {
	p := globalKey(tag)
	it, err := i.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", metawire.ErrIO, err)
	}
	defer it.Close()
	out := map[uint64]moveMark{}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != len(p)+8 {
			return nil, fmt.Errorf("move record %x: %w", k, errCorrupt)
		}
		m, err := decodeMoveMark(it.Value())
		if err != nil {
			return nil, fmt.Errorf("move record %x: %w", k, err)
		}
		out[binary.BigEndian.Uint64(k[len(p):])] = m
	}
	return out, it.Error()
}

// loadMoves freezes the entries a previous run froze (at start, before
// serving).
func (i *Island) loadMoves() error {
	i.moves.init()
	out, err := i.marks(gMoving)
	if err != nil {
		return err
	}
	for id, m := range out {
		i.locks.freeze(id, m.r)
		// No lease is held yet; none may be granted in the range either.
		if err := i.withdraw(context.Background(), id, m.r); err != nil {
			return err
		}
		i.log.Info("meta: resuming a move", "move", id, "buckets", fmt.Sprintf("%08x..%08x", m.r.first, m.r.last), "to", m.other)
	}
	return nil
}

// mover carries out this island's moves (the background loop's helper).
func (i *Island) mover(ctx context.Context) {
	t := time.NewTicker(moveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := i.moveOnce(ctx); err != nil && ctx.Err() == nil {
			i.warnMove(err)
		}
	}
}

// moveOnce takes every move of this island one step further.
func (i *Island) moveOnce(ctx context.Context) error {
	if err := i.enter(); err != nil {
		return nil // closing
	}
	defer i.leave()
	tab := i.cfg.Map.Table()
	frozen, err := i.marks(gMoving)
	if err != nil {
		return err
	}
	var errs []error
	// Moves this island froze: copy, flip, drop, or thaw if cancelled.
	for id, m := range frozen {
		if _, pending := tab.Move(id); pending {
			continue // below
		}
		if tab.Lookup(m.r.first) == m.other {
			errs = append(errs, i.dropMoved(ctx, id, m))
		} else {
			errs = append(errs, i.thawMove(ctx, id, m, "cancelled"))
		}
	}
	for _, mv := range tab.Moves {
		if mv.From != i.id || i.moves.backingOff(mv.ID) {
			continue
		}
		// The markers read above are current for a pending move: only
		// this goroutine writes them (freezeEntry).
		_, wasFrozen := frozen[mv.ID]
		if !wasFrozen && i.movePaused() {
			continue // a frozen one goes on: its entry is waiting
		}
		start := time.Now()
		frozen, err := i.moveEntry(ctx, tab, mv, wasFrozen)
		i.movePause(time.Since(start))
		if err == nil || ctx.Err() != nil {
			i.moves.succeeded(mv.ID)
			errs = append(errs, err)
			continue
		}
		errs = append(errs, err)
		// A frozen entry whose copy keeps failing (its destination is
		// gone) is given back: the move is cancelled, unless the manager
		// flipped it meanwhile (then the next pass drops the records).
		if d := i.moves.failed(mv.ID, frozen); frozen && d >= moveGiveUp {
			if c, ok := i.cfg.Map.(MoveCanceller); ok {
				if _, cerr := c.CancelMove(ctx, mv.ID); cerr != nil {
					errs = append(errs, fmt.Errorf("move %d: cancelling after %v of failures: %w", mv.ID, d, cerr))
				} else {
					i.log.Warn("meta: gave up a table entry move", "move", mv.ID, "entry", mv.Entry, "to", mv.To, "failing_for", d)
				}
			}
		}
	}
	// Moves into this island that ended: forget their markers (and, for a
	// cancelled one, the records it would have received).
	for _, tag := range importTags {
		imported, err := i.marks(tag)
		if err != nil {
			return err
		}
		for id, m := range imported {
			if _, pending := tab.Move(id); pending {
				continue
			}
			errs = append(errs, i.forgetImport(ctx, tag, id, m, tab.Lookup(m.r.first) != i.id))
		}
	}
	return errors.Join(errs...)
}

// moveEntry freezes mv's entry if it is not yet (frozen: its marker is
// written), copies it to the destination and asks for the flip. It
// reports whether the entry is frozen now.
func (i *Island) moveEntry(ctx context.Context, tab namespace.Table, mv namespace.PendingMove, frozen bool) (bool, error) {
	first, last := namespace.EntryRange(tab.Depth, mv.Entry)
	m := moveMark{r: bucketRange{first, last}, other: mv.To}
	var n *noted
	if !frozen {
		// The base copy, while the entry serves; its changes from the
		// snapshot on are noted (noting starts first).
		n = i.note(mv.ID, m.r)
		defer i.unnote(mv.ID)
		if err := i.copyEntry(ctx, mv.ID, m, metawire.ImportBase); err != nil {
			return false, fmt.Errorf("move %d: base copy to island %d: %w", mv.ID, mv.To, err)
		}
		if err := i.fp(FailMoveAfterBase); err != nil {
			return false, err
		}
	}
	if err := i.freezeEntry(ctx, mv.ID, m, frozen); err != nil {
		_, written, _ := get(i.db, moveKey(gMoving, mv.ID))
		return written, fmt.Errorf("move %d: freezing: %w", mv.ID, err)
	}
	frozenAt := time.Now()
	whole := n == nil
	if !whole {
		i.moves.mu.Lock()
		over, keys := n.over, n.keys
		n.keys = nil
		i.moves.mu.Unlock()
		whole = over
		if !over {
			err := i.copyDelta(ctx, mv.ID, m, keys)
			switch {
			case errors.Is(err, errNoBase):
				whole = true
			case err != nil:
				return true, fmt.Errorf("move %d: delta copy to island %d: %w", mv.ID, mv.To, err)
			}
		}
	}
	if whole {
		if err := i.copyEntry(ctx, mv.ID, m, metawire.ImportWhole); err != nil {
			return true, fmt.Errorf("move %d: copying to island %d: %w", mv.ID, mv.To, err)
		}
	}
	if err := i.fp(FailMoveAfterCopy); err != nil {
		return true, err
	}
	fin, ok := i.cfg.Map.(MoveFinisher)
	if !ok {
		return true, fmt.Errorf("move %d: the map source cannot finish moves", mv.ID)
	}
	epoch, err := fin.FinishMove(ctx, mv.ID)
	if err != nil {
		return true, fmt.Errorf("move %d: flipping the entry: %w", mv.ID, err)
	}
	i.met.movedAway.Inc()
	i.met.frozen.Observe(time.Since(frozenAt).Seconds())
	i.log.Info("meta: moved a table entry", "move", mv.ID, "entry", mv.Entry, "to", mv.To, "epoch", epoch, "frozen", time.Since(frozenAt))
	if err := i.fp(FailMoveAfterFlip); err != nil {
		return true, err
	}
	return true, nil // the drop follows once the map has the flip (moveOnce)
}

// freezeEntry is step 1; marked: the marker is written already (a
// resumed move), and only what is in memory is made sure of.
func (i *Island) freezeEntry(ctx context.Context, id uint64, m moveMark, marked bool) error {
	if marked {
		// Frozen already (at start, loadMoves; or a marker write that
		// failed here yet was applied later): make sure it is in memory
		// too before anything is copied.
		i.locks.freeze(id, m.r)
		if err := i.withdraw(ctx, id, m.r); err != nil {
			return err
		}
		return i.locks.waitQuiet(ctx, m.r, moveQuiet)
	}
	// Leases first: their holders flush what they kept back (it still
	// applies here), then the changes stop.
	start := time.Now()
	if err := i.withdraw(ctx, id, m.r); err != nil {
		return err
	}
	withdrawn := time.Now()
	i.locks.freeze(id, m.r)
	if err := i.locks.waitQuiet(ctx, m.r, moveQuiet); err != nil {
		i.unwithdraw(id)
		i.locks.thaw(id)
		return err
	}
	// An id allocation running now holds the sequence lock; once it is
	// ours, none is (allocInos refuses frozen buckets).
	i.seq.Lock()
	i.forgetSeqLocked(m.r)
	i.seq.Unlock()
	if err := i.put(ctx, moveKey(gMoving, id), m.encode()); err != nil {
		i.unwithdraw(id)
		i.locks.thaw(id)
		return err
	}
	i.log.Info("meta: froze a table entry to move it", "move", id, "buckets", fmt.Sprintf("%08x..%08x", m.r.first, m.r.last), "to", m.other,
		"leases", withdrawn.Sub(start), "quiet", time.Since(withdrawn))
	return i.fp(FailMoveAfterFreeze)
}

// withdraw takes r away from leases until the move ends.
func (i *Island) withdraw(ctx context.Context, id uint64, r bucketRange) error {
	i.moves.mu.Lock()
	_, done := i.moves.mu.withdrawn[id]
	i.moves.mu.Unlock()
	if done {
		return nil
	}
	give, err := i.leases.Withdraw(ctx, r.first, r.last)
	if err != nil {
		return fmt.Errorf("%w: breaking leases: %v", metawire.ErrUnavailable, err)
	}
	i.moves.mu.Lock()
	i.moves.mu.withdrawn[id] = give
	i.moves.mu.Unlock()
	return nil
}

func (i *Island) unwithdraw(id uint64) {
	i.moves.mu.Lock()
	give := i.moves.mu.withdrawn[id]
	delete(i.moves.mu.withdrawn, id)
	i.moves.mu.Unlock()
	if give != nil {
		give()
	}
}

// forgetSeqLocked drops the cached id counters of r's buckets (they are
// read again from the database, which a move changes under them).
func (i *Island) forgetSeqLocked(r bucketRange) {
	for b := range i.seq.last {
		if r.has(b) {
			delete(i.seq.last, b)
			delete(i.seq.high, b)
		}
	}
}

// copyEntry sends the entry's records from one snapshot, in chunks: a
// base copy (step 0) or, frozen, a whole one (step 2).
func (i *Island) copyEntry(ctx context.Context, id uint64, m moveMark, phase uint8) error {
	snap := i.db.NewSnapshot()
	defer snap.Close()
	lo, hi := BucketSpan(m.r.first, m.r.last)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("%w: %v", metawire.ErrIO, err)
	}
	defer it.Close()
	boots, err := i.adopted()
	if err != nil {
		return err
	}
	req := metawire.ImportReq{MoveID: id, From: uint32(i.id), First: m.r.first, Last: m.r.last, Phase: phase}
	size := 0
	send := func(final bool) error {
		req.Final = final
		if final && phase == metawire.ImportWhole {
			req.Boots = append([]uint64{i.boot}, boots...)
		}
		if _, err := i.call(ctx, m.other, metawire.OpImportEntry, &req, nil); err != nil {
			return err
		}
		req.Chunk++
		req.Keys, req.Values, size = req.Keys[:0], req.Values[:0], 0
		return nil
	}
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if size > 0 && size+len(k)+len(v) > importChunk {
			if err := send(false); err != nil {
				return err
			}
		}
		req.Keys = append(req.Keys, append([]byte(nil), k...))
		req.Values = append(req.Values, append([]byte(nil), v...))
		size += len(k) + len(v) + 8
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("%w: %v", metawire.ErrIO, err)
	}
	return send(true)
}

// errNoBase: the destination has no base copy for a delta.
var errNoBase = errors.New("meta: the destination has no base copy")

// copyDelta is step 2 after a base copy: the noted keys as they are now
// (frozen: they change no more), in chunks.
func (i *Island) copyDelta(ctx context.Context, id uint64, m moveMark, keys map[string]struct{}) error {
	boots, err := i.adopted()
	if err != nil {
		return err
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	req := metawire.ImportReq{MoveID: id, From: uint32(i.id), First: m.r.first, Last: m.r.last, Phase: metawire.ImportDelta}
	size := 0
	send := func(final bool) error {
		req.Final = final
		if final {
			req.Boots = append([]uint64{i.boot}, boots...)
		}
		if _, err := i.call(ctx, m.other, metawire.OpImportEntry, &req, nil); err != nil {
			if errors.Is(err, metawire.ErrBusy) && strings.Contains(err.Error(), "no base copy") {
				return fmt.Errorf("%w: %v", errNoBase, err)
			}
			return err
		}
		req.Chunk++
		req.Keys, req.Values, req.Deleted, size = req.Keys[:0], req.Values[:0], req.Deleted[:0], 0
		return nil
	}
	for _, k := range sorted {
		v, ok, err := get(i.db, []byte(k))
		if err != nil {
			return err
		}
		if size > 0 && size+len(k)+len(v) > importChunk {
			if err := send(false); err != nil {
				return err
			}
		}
		if ok {
			req.Keys, req.Values = append(req.Keys, []byte(k)), append(req.Values, v)
		} else {
			req.Deleted = append(req.Deleted, []byte(k))
		}
		size += len(k) + len(v) + 8
	}
	return send(true)
}

// dropMoved is step 4: the entry is the destination's in this island's
// map; moveGrace after that was first seen (reads that began before it
// have ended), its records go, with the marker, and the range thaws.
func (i *Island) dropMoved(ctx context.Context, id uint64, m moveMark) error {
	i.moves.mu.Lock()
	at, seen := i.moves.mu.flipped[id]
	if !seen {
		at = time.Now()
		i.moves.mu.flipped[id] = at
	}
	i.moves.mu.Unlock()
	if time.Since(at) < moveGrace {
		return nil
	}
	err := i.clearSpan(ctx, m.r, func(b *pebble.Batch) error { return b.Delete(moveKey(gMoving, id), nil) })
	if err != nil {
		return fmt.Errorf("move %d: dropping the moved records: %w", id, err)
	}
	i.log.Info("meta: dropped a moved table entry's records", "move", id, "buckets", fmt.Sprintf("%08x..%08x", m.r.first, m.r.last), "to", m.other)
	i.endMove(id, m.r)
	return nil
}

// thawMove ends a move that did not happen: the entry serves again here.
func (i *Island) thawMove(ctx context.Context, id uint64, m moveMark, why string) error {
	if err := i.del(ctx, moveKey(gMoving, id), false); err != nil {
		return err
	}
	i.log.Info("meta: a table entry stays", "move", id, "why", why)
	i.endMove(id, m.r)
	return nil
}

func (i *Island) endMove(id uint64, r bucketRange) {
	i.seq.Lock()
	i.forgetSeqLocked(r)
	i.seq.Unlock()
	i.locks.thaw(id)
	i.unwithdraw(id)
	i.moves.mu.Lock()
	delete(i.moves.mu.flipped, id)
	i.moves.mu.Unlock()
}

// dropSpan deletes up to limit records (0: all) of buckets r in b
// (which reads through to the database), taking the blocks' bytes off
// the live counters, the blocks' stripe references with them, and the
// inodes off the statistics. more reports records left.
func dropSpan(b *pebble.Batch, r bucketRange, d *deltas, limit int) (more bool, err error) {
	lo, hi := BucketSpan(r.first, r.last)
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return false, err
	}
	var keys [][]byte
	n := 0
	ok := it.First()
	for ; ok && (limit == 0 || n < limit); ok = it.Next() {
		k := append([]byte(nil), it.Key()...)
		refs, err := account(k, it.Value(), d, -1)
		if err != nil {
			it.Close()
			return false, err
		}
		keys = append(append(keys, k), refs...)
		n++
	}
	if err := it.Close(); err != nil {
		return false, err
	}
	return ok, deleteKeys(b, keys)
}

// dropBatch bounds the records one batch of clearSpan deletes: a large
// entry is dropped in many writes (a replicated island's log entries
// stay small), never half counted (each carries its own counters).
// importChunk bounds the record bytes of one OpImportEntry. (Variables:
// tests make them small, so every move takes many.)
var (
	dropBatch   = 4096
	importChunk = metawire.MaxImportChunk
)

// clearSpan deletes every record of buckets r, dropBatch at a time, each
// write with the counters of what it deleted; last (may be nil) adds to
// the final write (a marker's deletion), which happens even when r is
// empty.
func (i *Island) clearSpan(ctx context.Context, r bucketRange, last func(*pebble.Batch) error) error {
	for {
		b := i.db.NewIndexedBatch()
		var d deltas
		more, err := dropSpan(b, r, &d, dropBatch)
		if err == nil {
			err = d.write(b)
		}
		if err == nil && !more && last != nil {
			err = last(b)
		}
		if err == nil && !b.Empty() {
			err = i.write(ctx, b, false)
		}
		b.Close()
		if err != nil || !more {
			return err
		}
	}
}

// account adds (sign 1) or takes off (sign -1) what record k, v counts
// for: a block's bytes on its stripe's live counter, an inode in the
// statistics. It returns the stripe reference keys of a block.
func account(k, v []byte, d *deltas, sign int64) ([][]byte, error) {
	if len(k) < 5+8 {
		return nil, nil
	}
	ino := namespace.Ino(binary.BigEndian.Uint64(k[5:13]))
	switch k[4] {
	case tagLock:
		// The island-wide index of locked inodes follows the record.
		return [][]byte{lockIndexKey(ino)}, nil
	case tagHold:
		return [][]byte{holdIndexKey(ino)}, nil
	case tagBlock:
		p, err := decodeBytes(v)
		if err != nil {
			return nil, fmt.Errorf("block of %v: %w", ino, err)
		}
		if s, l, err := pointerStripe(p); err == nil && len(k) == 5+16 {
			d.addLive(s, sign*int64(l))
			return [][]byte{refKey(s, ino, blockIndex(k))}, nil
		}
	case tagInode:
		n, err := decodeInode(ino, v)
		if err != nil {
			return nil, fmt.Errorf("inode %v: %w", ino, err)
		}
		d.inodes += sign
		if n.isReg() {
			d.bytes += sign * int64(n.size)
		}
	}
	return nil, nil
}

// importEntry serves OpImportEntry (the destination of a move): each
// chunk is applied as it comes, in order; the final one completes the
// phase.
func (i *Island) importEntry(ctx context.Context, r *metawire.ImportReq) error {
	i.moves.importMu.Lock()
	defer i.moves.importMu.Unlock()
	if r.First > r.Last || len(r.Keys) != len(r.Values) || len(r.Boots) > maxAdopted+1 || r.Phase > metawire.ImportDelta ||
		len(r.Deleted) > 0 && r.Phase != metawire.ImportDelta {
		return fmt.Errorf("%w: import of buckets %08x..%08x", metawire.ErrBadRequest, r.First, r.Last)
	}
	if err := i.checkImport(ctx, r); err != nil {
		return err
	}
	if _, ok, err := get(i.db, moveKey(gImported, r.MoveID)); err != nil || ok {
		return err // applied already: the source repeats a copy it lost the answer of
	}
	lo, hi := BucketSpan(r.First, r.Last)
	for _, ks := range [][][]byte{r.Keys, r.Deleted} {
		for _, k := range ks {
			if r.Phase == metawire.ImportDelta && isDedupKey(k) {
				continue // a request id recorded with a change of the entry
			}
			if string(k) < string(lo) || string(k) >= string(hi) {
				return fmt.Errorf("%w: import of buckets %08x..%08x carries key %x", metawire.ErrBadRequest, r.First, r.Last, k)
			}
		}
	}
	i.moves.mu.Lock()
	im := i.moves.mu.importing[r.MoveID]
	switch {
	case r.Chunk == 0:
		im = &importing{phase: r.Phase}
		i.moves.mu.importing[r.MoveID] = im
	case im == nil || im.next != r.Chunk || im.phase != r.Phase:
		i.moves.mu.Unlock()
		return fmt.Errorf("%w: import %d: chunk %d of phase %d out of order", metawire.ErrBusy, r.MoveID, r.Chunk, r.Phase)
	}
	if im.busy {
		i.moves.mu.Unlock()
		return fmt.Errorf("%w: import %d: a chunk is being applied", metawire.ErrBusy, r.MoveID)
	}
	im.busy = true
	i.moves.mu.Unlock()
	applied := false
	defer func() {
		i.moves.mu.Lock()
		im.busy = false
		if applied {
			im.next++
			im.records += len(r.Keys)
			im.deletes += len(r.Deleted)
		} else if i.moves.mu.importing[r.MoveID] == im {
			delete(i.moves.mu.importing, r.MoveID) // the source starts the phase over
		}
		if r.Final && applied {
			delete(i.moves.mu.importing, r.MoveID)
		}
		i.moves.mu.Unlock()
	}()

	// Each chunk is applied as it comes (this island does not serve the
	// buckets until the flip: nobody sees a partial copy), so a large
	// entry makes many small writes; the final chunk writes the marker.
	br := bucketRange{r.First, r.Last}
	mark := moveMark{r: br, other: namespace.IslandID(r.From)}.encode()
	if r.Chunk == 0 {
		if r.Phase == metawire.ImportDelta {
			if _, ok, err := get(i.db, moveKey(gBase, r.MoveID)); err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("%w: import %d: no base copy for a delta", metawire.ErrBusy, r.MoveID)
			}
		} else if err := i.clearSpan(ctx, br, nil); err != nil {
			// Records left of an earlier stay of these buckets (a
			// cancelled move in, an earlier base) go first, with what
			// they counted for.
			return err
		}
	}
	b := i.db.NewIndexedBatch()
	defer b.Close()
	if r.Chunk == 0 && r.Phase != metawire.ImportDelta {
		// The chunks applied before the final one are part of a copy that
		// may never end (the move is cancelled meanwhile): the marker lets
		// moveOnce drop them, and fsck know them.
		if err := b.Set(moveKey(gPartial, r.MoveID), mark, nil); err != nil {
			return err
		}
	}
	var d deltas
	for _, k := range r.Deleted {
		if err := replaceRecord(b, k, nil, &d); err != nil {
			return fmt.Errorf("%w: import %d: %v", metawire.ErrBadRequest, r.MoveID, err)
		}
	}
	for k := range r.Keys {
		if err := replaceRecord(b, r.Keys[k], r.Values[k], &d); err != nil {
			return fmt.Errorf("%w: import %d: %v", metawire.ErrBadRequest, r.MoveID, err)
		}
	}
	if err := d.write(b); err != nil {
		return err
	}
	if r.Final {
		if err := b.Delete(moveKey(gPartial, r.MoveID), nil); err != nil {
			return err
		}
		if r.Phase == metawire.ImportBase {
			if err := b.Set(moveKey(gBase, r.MoveID), mark, nil); err != nil {
				return err
			}
		} else {
			if err := b.Delete(moveKey(gBase, r.MoveID), nil); err != nil {
				return err
			}
			if err := b.Set(moveKey(gImported, r.MoveID), mark, nil); err != nil {
				return err
			}
			until := binary.BigEndian.AppendUint64(nil, uint64(time.Now().Add(adoptKeep).UnixNano()))
			for _, boot := range r.Boots {
				if boot != 0 && boot != i.boot {
					if err := b.Set(binary.BigEndian.AppendUint64(globalKey(gAdopted), boot), until, nil); err != nil {
						return err
					}
				}
			}
		}
	}
	if !b.Empty() {
		if err := i.write(ctx, b, false); err != nil {
			return err
		}
	}
	applied = true
	if !r.Final {
		return i.fp(FailMoveAfterChunk)
	}
	i.seq.Lock()
	i.forgetSeqLocked(br)
	i.seq.Unlock()
	i.moves.mu.Lock()
	records, deletes := im.records+len(r.Keys), im.deletes+len(r.Deleted)
	i.moves.mu.Unlock()
	if r.Phase == metawire.ImportBase {
		i.log.Info("meta: received a moving table entry's base copy", "move", r.MoveID, "from", r.From, "records", records)
		return nil
	}
	if err := i.fp(FailMoveAfterImport); err != nil {
		return err
	}
	i.met.movedIn.Inc()
	i.log.Info("meta: received a moving table entry", "move", r.MoveID, "from", r.From, "phase", r.Phase,
		"records", records, "deleted", deletes)
	return nil
}

// replaceRecord sets key to v in b (nil: deletes it), taking what the
// record it replaces counted for off the counters and adding the new
// one's (live bytes with stripe references, statistics).
func replaceRecord(b *pebble.Batch, key, v []byte, d *deltas) error {
	old, ok, err := get(b, key)
	if err != nil {
		return err
	}
	if ok {
		refs, err := account(key, old, d, -1)
		if err != nil {
			return err
		}
		if err := deleteKeys(b, refs); err != nil {
			return err
		}
	}
	if v == nil {
		if ok {
			return b.Delete(key, nil)
		}
		return nil
	}
	refs, err := account(key, v, d, 1)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if err := b.Set(ref, nil, nil); err != nil {
			return err
		}
	}
	return b.Set(key, v, nil)
}

// checkImport accepts only an import the map has pending, into this
// island, of exactly the entry's buckets (a newer map is fetched once).
func (i *Island) checkImport(ctx context.Context, r *metawire.ImportReq) error {
	for attempt := 0; ; attempt++ {
		tab := i.cfg.Map.Table()
		if mv, ok := tab.Move(r.MoveID); ok {
			first, last := namespace.EntryRange(tab.Depth, mv.Entry)
			if mv.To != i.id || uint32(mv.From) != r.From || first != r.First || last != r.Last {
				return fmt.Errorf("%w: import %d does not match the map's move (%d -> %d)", metawire.ErrBadRequest, r.MoveID, mv.From, mv.To)
			}
			return nil
		}
		if attempt > 0 {
			return fmt.Errorf("%w: no pending move %d in the map of epoch %d", metawire.ErrStaleEpoch, r.MoveID, tab.Epoch)
		}
		if err := i.cfg.Map.Refresh(ctx); err != nil {
			return fmt.Errorf("%w: %v", metawire.ErrUnavailable, err)
		}
	}
}

// forgetImport deletes the marker of a move into this island that ended;
// drop also deletes the records it brought (the move was cancelled: the
// entry is not this island's).
func (i *Island) forgetImport(ctx context.Context, tag byte, id uint64, m moveMark, drop bool) error {
	// A chunk that passed checkImport before the move ended is applied
	// before this, so it is dropped with the rest (a later one is refused).
	i.moves.importMu.Lock()
	defer i.moves.importMu.Unlock()
	mark := func(b *pebble.Batch) error { return b.Delete(moveKey(tag, id), nil) }
	if drop {
		return i.clearSpan(ctx, m.r, mark)
	}
	b := i.db.NewBatch()
	defer b.Close()
	if err := mark(b); err != nil {
		return err
	}
	return i.write(ctx, b, false)
}
