package meta

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
	"github.com/cockroachdb/pebble/v2"
)

// Failpoint names (see package faults and the package doc).
const (
	FailTxAfterIntent           = "meta.tx.afterIntent"           // coordinator: own actions validated and locked, nothing prepared (no intent is written before the decision)
	FailTxAfterPrepare          = "meta.tx.afterPrepare"          // coordinator: every participant prepared, no decision
	FailTxAfterDecision         = "meta.tx.afterDecision"         // coordinator: commit decision and own actions durable, no Decide sent
	FailTxAfterDecide           = "meta.tx.afterDecide"           // coordinator: participants acknowledged, intent not cleared
	FailParticipantAfterPrepare = "meta.participant.afterPrepare" // participant: prepared record durable, not answered
	FailParticipantBeforeApply  = "meta.participant.beforeApply"  // participant: commit decision received, not applied
	FailParticipantAfterApply   = "meta.participant.afterApply"   // participant: applied, not answered
	FailLocalBeforeCommit       = "meta.local.beforeCommit"       // single-island operation validated, batch not committed
)

// Intent states.
const (
	intentPending   = 1
	intentCommitted = 2
)

// intent is the coordinator's record of a cross-island transaction.
type intent struct {
	state   uint8
	created int64
	parts   []participant
}

type participant struct {
	island  namespace.IslandID
	actions []metawire.Action
}

func (t *intent) encode() []byte {
	e := wire.Enc{B: []byte{recordVersion}}
	e.U8(t.state)
	e.I64(t.created)
	e.Uvarint(uint64(len(t.parts)))
	for _, p := range t.parts {
		e.U32(uint32(p.island))
		metawire.EncodeActions(&e, p.actions)
	}
	return seal(e.B)
}

func decodeIntent(v []byte) (*intent, error) {
	d, err := open(v)
	if err != nil {
		return nil, err
	}
	t := &intent{state: d.U8(), created: d.I64()}
	n := d.Count(5)
	for range n {
		t.parts = append(t.parts, participant{island: namespace.IslandID(d.U32()), actions: metawire.DecodeActions(d)})
	}
	if err := finish(d); err != nil {
		return nil, err
	}
	if t.state != intentPending && t.state != intentCommitted {
		return nil, errCorrupt
	}
	return t, nil
}

// preparedTx is a participant's prepared transaction.
type preparedTx struct {
	id       metawire.TxID
	coord    namespace.IslandID
	actions  []metawire.Action
	session  uint64    // the client's lease session (PrepareReq.Session; 0 after a restart)
	created  time.Time // when prepared (or loaded at restart)
	deciding bool      // a decision is being applied
}

func encodePrepared(coord namespace.IslandID, created int64, as []metawire.Action) []byte {
	e := wire.Enc{B: []byte{recordVersion}}
	e.U32(uint32(coord))
	e.I64(created)
	metawire.EncodeActions(&e, as)
	return seal(e.B)
}

func decodePrepared(v []byte) (namespace.IslandID, []metawire.Action, error) {
	d, err := open(v)
	if err != nil {
		return 0, nil, err
	}
	coord := namespace.IslandID(d.U32())
	_ = d.I64()
	as := metawire.DecodeActions(d)
	return coord, as, finish(d)
}

// notifyTx is a decision the coordinator still has to deliver.
type notifyTx struct {
	commit  bool
	pending map[namespace.IslandID]bool // participants not yet acknowledged
	tries   int
}

// txHex renders a transaction id for logs and fsck.
func txHex(t metawire.TxID) string { return hex.EncodeToString(t[:]) }

// execute runs a namespace operation's actions: on this island alone as
// one batch, or as a two-phase commit with the islands owning the other
// actions' inodes, this island coordinating.
func (i *Island) execute(ctx context.Context, as []metawire.Action) error {
	return i.executeOpt(ctx, as, execOpts{})
}

// execOpts tunes executeOpt.
type execOpts struct {
	// lazy commits a single-island batch without waiting for the log
	// sync (the syncer makes it durable right after).
	lazy bool
	// fresh is an inode number this island just allocated: its
	// ActCreateInode need not check that it is absent.
	fresh namespace.Ino
	// data, when not nil, is the contents of the fresh inode (a regular
	// file created with its data: CreateReq.Data).
	data []byte
	// preset: fresh is an id the client reserved earlier (CreateReq.Ino),
	// so its ActCreateInode does check that it is absent.
	preset bool
	// set, when not nil, is applied to the fresh inode right after it
	// is made, in the same batch (CreateReq.Set); *setAfter receives its
	// attributes then.
	set      *metawire.SetAttrReq
	setAfter *metawire.Attr
	// When set, *after receives the attributes of inode watch (one of
	// this island's) as the actions leave it, saving a read afterwards.
	watch namespace.Ino
	after *metawire.Attr
}

// executeOpt is execute with options (execOpts).
func (i *Island) executeOpt(ctx context.Context, as []metawire.Action, o execOpts) error {
	tab := i.cfg.Map.Table()
	var local []metawire.Action
	remote := map[namespace.IslandID][]metawire.Action{}
	for _, a := range as {
		owner := tab.Lookup(namespace.Ino(a.Ino).Bucket())
		switch owner {
		case i.id:
			local = append(local, a)
		case namespace.NoIsland:
			return fmt.Errorf("%w: no island owns inode %v", metawire.ErrInternal, namespace.Ino(a.Ino))
		default:
			remote[owner] = append(remote[owner], a)
		}
	}
	txid := i.newTxID()
	if err := i.locks.acquire(ctx, txid, lockReqs(local), i.timing.lockWait); err != nil {
		return err
	}
	released := false
	release := func() {
		if !released {
			released = true
			i.locks.release(txid)
		}
	}
	defer release()
	b := i.db.NewIndexedBatch()
	defer b.Close()
	if err := i.applyActionsOpt(b, local, &o); err != nil {
		return err
	}
	if len(remote) == 0 {
		if err := i.fp(FailLocalBeforeCommit); err != nil {
			return err
		}
		if err := i.markDone(ctx, b); err != nil {
			return err
		}
		return i.write(ctx, b, o.lazy)
	}
	return i.coordinate(ctx, txid, b, remote, release)
}

func (i *Island) fp(name string) error { return i.cfg.Faults.Hit(name) }

// coordinate is the coordinator's side of the two-phase commit; b holds
// this island's validated actions and the locks are held.
func (i *Island) coordinate(ctx context.Context, txid metawire.TxID, b *pebble.Batch,
	remote map[namespace.IslandID][]metawire.Action, release func()) error {
	it := &intent{state: intentPending, created: i.now()}
	for id, as := range remote {
		it.parts = append(it.parts, participant{island: id, actions: as})
	}
	slices.SortFunc(it.parts, func(a, b participant) int { return int(a.island) - int(b.island) })
	key := intentKey(txid)
	i.tx.Lock()
	i.tx.active[txid] = true
	i.tx.Unlock()
	defer func() {
		i.tx.Lock()
		delete(i.tx.active, txid)
		i.tx.Unlock()
	}()
	// No intent is written before the prepares (presumed abort): until
	// the decision is durable, a participant asking is told "pending"
	// while this runs (i.tx.active) and "aborted" after, or after a
	// crash, as an intent deleted at restart would have told it. It
	// saves a synced write (a consensus round on a replicated island)
	// per cross-island operation; a crashed coordinator's participants
	// now learn of the abort by asking (resolveAfter) instead of being
	// told at its restart.
	i.met.txStarted.Inc()
	if err := i.fp(FailTxAfterIntent); err != nil {
		i.abort(ctx, txid, it, release)
		return err
	}

	// Phase one: prepare every participant in parallel.
	errs := make([]error, len(it.parts))
	var wg sync.WaitGroup
	for k, p := range it.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := metawire.PrepareReq{TxID: txid, Coordinator: uint32(i.id), Actions: p.actions, Session: sessionOf(ctx)}
			_, errs[k] = i.call(ctx, p.island, metawire.OpPrepare, &req, nil)
		}()
	}
	wg.Wait()
	if err := prepareError(errs); err != nil {
		i.abort(ctx, txid, it, release)
		return err
	}
	if err := i.fp(FailTxAfterPrepare); err != nil {
		i.abort(ctx, txid, it, release)
		return err
	}

	// The decision: commit with this island's own actions in one batch.
	it.state = intentCommitted
	if err := i.markDone(ctx, b); err != nil {
		i.abort(ctx, txid, it, release)
		return err
	}
	if err := b.Set(key, it.encode(), nil); err != nil {
		i.abort(ctx, txid, it, release)
		return err
	}
	if err := i.write(ctx, b, false); err != nil {
		i.abort(ctx, txid, it, release)
		return fmt.Errorf("committing decision: %w", err)
	}
	release()
	i.met.txCommitted.Inc()
	n := &notifyTx{commit: true, pending: map[namespace.IslandID]bool{}}
	for _, p := range it.parts {
		n.pending[p.island] = true
	}
	if err := i.fp(FailTxAfterDecision); err != nil {
		i.queueNotify(txid, n)
		return err
	}

	// Phase two: deliver the decision; whatever is not acknowledged now
	// is redelivered in the background.
	i.deliver(ctx, txid, n)
	if err := i.fp(FailTxAfterDecide); err != nil {
		i.queueNotify(txid, n)
		return err
	}
	if len(n.pending) == 0 {
		if err := i.del(ctx, key, true); err != nil {
			i.log.Warn("meta: clearing intent", "tx", txHex(txid), "err", err)
		}
		return nil
	}
	i.queueNotify(txid, n)
	return nil
}

// prepareError picks the error to report from failed prepares: a final
// answer (not empty, too many links, ...) before a busy or unreachable
// participant.
func prepareError(errs []error) error {
	var busy, other error
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, metawire.ErrBusy), errors.Is(err, metawire.ErrStaleEpoch),
			errors.Is(err, metawire.ErrWrongIsland):
			if busy == nil {
				busy = err
			}
		case errors.Is(err, metawire.ErrUnavailable), errors.Is(err, metawire.ErrInternal):
			if other == nil {
				other = err
			}
		default:
			return err
		}
	}
	if other != nil {
		return other
	}
	if busy != nil && (errors.Is(busy, metawire.ErrWrongIsland)) {
		// The participant's map disagrees: retry after a refresh.
		return fmt.Errorf("%w: %v", metawire.ErrStaleEpoch, busy)
	}
	return busy
}

// abort drops an undecided transaction: participants are told, best
// effort; those that do not hear it ask (OpOutcome) and learn it from the
// missing intent (presumed abort).
func (i *Island) abort(ctx context.Context, txid metawire.TxID, it *intent, release func()) {
	i.met.txAborted.Inc()
	// Only a decision whose write failed left an intent (it may still
	// have applied).
	if _, ok, err := get(i.db, intentKey(txid)); err != nil || ok {
		if err := i.del(ctx, intentKey(txid), true); err != nil {
			i.log.Warn("meta: deleting aborted intent", "tx", txHex(txid), "err", err)
		}
	}
	release()
	n := &notifyTx{pending: map[namespace.IslandID]bool{}}
	for _, p := range it.parts {
		n.pending[p.island] = true
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), i.timing.callTimeout)
	defer cancel()
	i.deliver(ctx, txid, n)
}

// deliver sends n's decision to its pending participants in parallel and
// removes those that acknowledged.
func (i *Island) deliver(ctx context.Context, txid metawire.TxID, n *notifyTx) {
	var mu lockcheck.Mutex
	var wg sync.WaitGroup
	ids := make([]namespace.IslandID, 0, len(n.pending))
	for id := range n.pending {
		ids = append(ids, id)
	}
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := metawire.DecideReq{TxID: txid, Commit: n.commit}
			if _, err := i.call(ctx, id, metawire.OpDecide, &req, nil); err != nil {
				i.log.Debug("meta: decide not delivered", "tx", txHex(txid), "to", id, "err", err)
				return
			}
			mu.Lock()
			delete(n.pending, id)
			mu.Unlock()
		}()
	}
	wg.Wait()
}

func (i *Island) queueNotify(txid metawire.TxID, n *notifyTx) {
	i.tx.Lock()
	defer i.tx.Unlock()
	i.tx.notify[txid] = n
}

// prepare is a participant's answer to OpPrepare.
func (i *Island) prepare(ctx context.Context, req *metawire.PrepareReq) error {
	coord := namespace.IslandID(req.Coordinator)
	if coord == namespace.NoIsland || coord == i.id {
		return fmt.Errorf("%w: prepare: bad coordinator %d", metawire.ErrBadRequest, coord)
	}
	if err := i.checkActions(req.Actions); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	i.tx.Lock()
	_, dup := i.tx.prepared[req.TxID]
	i.tx.Unlock()
	if dup {
		return nil
	}
	if err := i.locks.acquire(ctx, req.TxID, lockReqs(req.Actions), i.timing.prepareWait); err != nil {
		return err
	}
	b := i.db.NewIndexedBatch()
	err := i.applyActions(b, req.Actions)
	b.Close()
	if err == nil {
		err = i.put(ctx, preparedKey(req.TxID), encodePrepared(coord, i.now(), req.Actions))
	}
	if err != nil {
		i.locks.release(req.TxID)
		return err
	}
	i.tx.Lock()
	i.tx.prepared[req.TxID] = &preparedTx{id: req.TxID, coord: coord, actions: req.Actions, session: req.Session, created: time.Now()}
	i.tx.Unlock()
	i.locks.setPrepared(req.TxID)
	return i.fp(FailParticipantAfterPrepare)
}

// decide applies or drops a prepared transaction (OpDecide, and the
// participant's own resolution). An unknown transaction is done already.
func (i *Island) decide(txid metawire.TxID, commit bool) error {
	i.tx.Lock()
	p := i.tx.prepared[txid]
	if p == nil {
		i.tx.Unlock()
		return nil
	}
	if p.deciding {
		i.tx.Unlock()
		return fmt.Errorf("%w: transaction %s is being decided", metawire.ErrBusy, txHex(txid))
	}
	p.deciding = true
	i.tx.Unlock()
	undo := func() {
		i.tx.Lock()
		p.deciding = false
		i.tx.Unlock()
	}
	if commit {
		if err := i.fp(FailParticipantBeforeApply); err != nil {
			undo()
			return err
		}
		b := i.db.NewIndexedBatch()
		err := i.applyActions(b, p.actions)
		if err == nil {
			err = b.Delete(preparedKey(txid), nil)
		}
		if err == nil {
			err = i.write(withSession(context.Background(), p.session), b, false)
		}
		b.Close()
		if err != nil {
			undo()
			i.log.Error("meta: applying a prepared transaction failed", "tx", txHex(txid), "err", err)
			return fmt.Errorf("%w: applying prepared transaction %s: %v", metawire.ErrInternal, txHex(txid), err)
		}
	} else if err := i.del(context.Background(), preparedKey(txid), false); err != nil {
		undo()
		return err
	}
	i.tx.Lock()
	delete(i.tx.prepared, txid)
	i.tx.Unlock()
	i.locks.release(txid)
	if commit {
		return i.fp(FailParticipantAfterApply)
	}
	return nil
}

// outcome answers OpOutcome from the intent log (presumed abort).
func (i *Island) outcome(txid metawire.TxID) (uint8, error) {
	// Whether the transaction runs is read before its intent: a
	// coordinator writes its decision before it stops running, so one
	// not running now has no decision to come, and its intent read next
	// is final. (Read the other way round, a decision written in between
	// would be answered "aborted".)
	i.tx.Lock()
	active := i.tx.active[txid]
	i.tx.Unlock()
	v, ok, err := get(i.db, intentKey(txid))
	if err != nil {
		return 0, err
	}
	if !ok {
		if active {
			return metawire.TxPending, nil // no intent before the decision
		}
		return metawire.TxAborted, nil
	}
	it, err := decodeIntent(v)
	if err != nil {
		return 0, fmt.Errorf("intent %s: %w", txHex(txid), err)
	}
	if it.state == intentCommitted {
		return metawire.TxCommitted, nil
	}
	if !active {
		// Undecided and nobody is deciding it (an abort whose intent
		// deletion failed): it is aborted.
		if err := i.del(context.Background(), intentKey(txid), false); err != nil {
			return 0, err
		}
		return metawire.TxAborted, nil
	}
	return metawire.TxPending, nil
}

// recoverTx runs at open, before serving: every undecided intent is
// aborted (its participants are told later), every committed one is
// queued for redelivery, and every prepared transaction takes its locks
// again and waits for its coordinator's decision.
func (i *Island) recoverTx() error {
	it, err := i.db.NewIter(&pebble.IterOptions{LowerBound: globalKey(gIntent), UpperBound: prefixEnd(globalKey(gIntent))})
	if err != nil {
		return err
	}
	type found struct {
		id metawire.TxID
		it *intent
	}
	var intents []found
	for ok := it.First(); ok; ok = it.Next() {
		var id metawire.TxID
		if len(it.Key()) != len(globalKey(gIntent))+16 {
			continue
		}
		copy(id[:], it.Key()[len(globalKey(gIntent)):])
		t, err := decodeIntent(it.Value())
		if err != nil {
			it.Close()
			return fmt.Errorf("intent %s: %w", txHex(id), err)
		}
		intents = append(intents, found{id, t})
	}
	if err := it.Close(); err != nil {
		return err
	}
	aborted, committed := 0, 0
	for _, f := range intents {
		n := &notifyTx{commit: f.it.state == intentCommitted, pending: map[namespace.IslandID]bool{}}
		for _, p := range f.it.parts {
			n.pending[p.island] = true
		}
		if !n.commit {
			if err := i.del(context.Background(), intentKey(f.id), false); err != nil {
				return err
			}
			aborted++
		} else {
			committed++
		}
		i.tx.notify[f.id] = n
	}

	pi, err := i.db.NewIter(&pebble.IterOptions{LowerBound: globalKey(gPrepared), UpperBound: prefixEnd(globalKey(gPrepared))})
	if err != nil {
		return err
	}
	prepared := 0
	for ok := pi.First(); ok; ok = pi.Next() {
		var id metawire.TxID
		if len(pi.Key()) != len(globalKey(gPrepared))+16 {
			continue
		}
		copy(id[:], pi.Key()[len(globalKey(gPrepared)):])
		coord, as, err := decodePrepared(pi.Value())
		if err != nil {
			pi.Close()
			return fmt.Errorf("prepared %s: %w", txHex(id), err)
		}
		if err := i.locks.acquire(context.Background(), id, lockReqs(as), 0); err != nil {
			pi.Close()
			return fmt.Errorf("prepared %s: conflicting locks: %w", txHex(id), err)
		}
		i.locks.setPrepared(id)
		i.tx.prepared[id] = &preparedTx{id: id, coord: coord, actions: as, created: time.Time{}}
		prepared++
	}
	if err := pi.Close(); err != nil {
		return err
	}
	if aborted+committed+prepared > 0 {
		i.log.Info("meta: recovered transactions", "intents_aborted", aborted,
			"intents_committed", committed, "prepared", prepared)
	}
	return nil
}

// background runs the resolver until ctx is done.
func (i *Island) background(ctx context.Context) {
	defer close(i.bgDone)
	moverDone := make(chan struct{})
	go func() { defer close(moverDone); i.mover(ctx) }()
	defer func() { <-moverDone }()
	t := time.NewTicker(i.timing.resolveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			i.resolveOnce(ctx, false)
			i.sweepDedup(ctx)
			i.sweepAdopted(ctx)
			i.sweepLocks(ctx)
		}
	}
}

// ResolvePending delivers every pending decision and asks the
// coordinator of every prepared transaction for its outcome, once, now.
// It returns how many transactions are still unresolved.
func (i *Island) ResolvePending(ctx context.Context) int {
	if err := i.enter(); err != nil {
		return 0
	}
	defer i.leave()
	return i.resolveOnce(ctx, true)
}

// resolveOnce is one resolver pass; force ignores the age of prepared
// transactions.
func (i *Island) resolveOnce(ctx context.Context, force bool) int {
	i.resolveMu.Lock()
	defer i.resolveMu.Unlock()
	i.tx.Lock()
	notify := make(map[metawire.TxID]*notifyTx, len(i.tx.notify))
	for id, n := range i.tx.notify {
		notify[id] = n
	}
	var ask []*preparedTx
	for _, p := range i.tx.prepared {
		if !p.deciding && (force || time.Since(p.created) >= i.timing.resolveAfter) {
			ask = append(ask, p)
		}
	}
	i.tx.Unlock()

	for id, n := range notify {
		cctx, cancel := context.WithTimeout(ctx, i.timing.callTimeout)
		i.deliver(cctx, id, n)
		cancel()
		n.tries++
		done := len(n.pending) == 0
		if !done && !n.commit && n.tries >= 20 {
			done = true // participants learn an abort by asking
		}
		if done {
			if n.commit {
				if err := i.del(ctx, intentKey(id), true); err != nil {
					continue
				}
			}
			i.tx.Lock()
			delete(i.tx.notify, id)
			i.tx.Unlock()
		}
	}
	for _, p := range ask {
		cctx, cancel := context.WithTimeout(ctx, i.timing.callTimeout)
		var resp metawire.OutcomeResp
		_, err := i.call(cctx, p.coord, metawire.OpOutcome, &metawire.TxReq{TxID: p.id}, &resp)
		cancel()
		if err != nil {
			i.log.Debug("meta: outcome unknown", "tx", txHex(p.id), "coordinator", p.coord, "err", err)
			continue
		}
		switch resp.State {
		case metawire.TxCommitted:
			_ = i.decide(p.id, true)
		case metawire.TxAborted:
			_ = i.decide(p.id, false)
		}
	}
	i.tx.Lock()
	defer i.tx.Unlock()
	return len(i.tx.notify) + len(i.tx.prepared)
}
