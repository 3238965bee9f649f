package lease

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/lockcheck"
)

// DefaultTerm is how long a lease lasts unless renewed. It is also what a
// dead holder can cost a writer, and how long a restarted island or a new
// leader holds changes back (Config.Fenced): a failover already takes a
// few seconds, so the term stays short, and a holder in use renews it
// with its next read that misses.
const DefaultTerm = 3 * time.Second

// DefaultPollWait is how long a poll waits for a break before it answers
// with none.
const DefaultPollWait = 20 * time.Second

// DefaultHold is how long after its last grant a lease stays alive by
// its session's polls alone: each poll renews, as it arrives, every lease
// of its session granted within Hold (Poll), so a client listening for
// breaks keeps what it read cached without asking again, and a lease it
// stopped using ends at most Hold plus a term after its grant. A client
// renews a lease it uses past half of Hold with a read.
const DefaultHold = time.Minute

// PollGrace is how long after its last poll answer a session still counts
// as listening (the client polls again at once).
const PollGrace = 2 * time.Second

// idle is how long a bucket or session record with nothing in it is kept.
const idle = time.Minute

// Contended is how long after a recall a bucket's leases are only
// shared: two clients taking turns on a directory would otherwise recall
// each other's exclusive lease at every read.
const Contended = 30 * time.Second

// ErrNoSession is a poll for session 0.
var ErrNoSession = errors.New("lease: session id 0")

// Config configures a Table.
type Config struct {
	// Term is a lease's length (DefaultTerm).
	Term time.Duration
	// Hold is how long after its grant polls keep a lease alive
	// (DefaultHold); negative: polls renew nothing.
	Hold time.Duration
	// Now is the clock (time.Now); tests move it.
	Now func() time.Time
	// Fenced makes the first Term after New refuse no change but delay
	// it: leases granted by an earlier incarnation of the island may
	// still be held (see "Time" in the package doc).
	Fenced bool
	// FencedReads makes the first Term fence reads too (Recall): an
	// earlier incarnation granted exclusive leases, whose holders may
	// keep changes back until they see the island gone.
	FencedReads bool
}

// Break tells a session that its lease on Bucket is gone. Seq orders the
// session's breaks: a poll acknowledges every break up to the Seq it
// sends back.
type Break struct {
	Bucket uint32
	Seq    uint64
}

// Mark is a bucket's state before a read (Begin), checked by Grant.
type Mark struct {
	gen uint64
	ok  bool
}

// Stats are a table's counts since it was made.
type Stats struct {
	Granted, Broken, Expired uint64 // leases granted, broken (acknowledged), waited out
	Exclusive                uint64 // of Granted, exclusive ones
	Recalled                 uint64 // exclusive leases recalled for another session's read
	LockShared               uint64 // exclusive leases granted shared for another session's lock request in flight
	Renewed                  uint64 // lease terms extended by their session's polls
	Holders                  int
}

// Table is one island's leases. It is safe for concurrent use.
type Table struct {
	term   time.Duration
	hold   time.Duration
	id     uint64 // this table's, so a client renews only leases it granted
	now    func() time.Time
	fence  time.Time    // no change applied before it (Config.Fenced)
	rfence time.Time    // no read served before it (Config.FencedReads)
	excl   atomic.Int64 // buckets with an exclusive holder (expired ones until swept)
	recs   atomic.Int64 // entries of buckets' recalling lists (done ones until pruned)
	mu     struct {
		lockcheck.Mutex
		buckets  map[uint32]*bucket
		sessions map[uint64]*session
		gen      uint64 // bucket generations come from here, so none repeats
		stats    Stats
		swept    time.Time
		// withdrawn are bucket ranges no lease is granted in (Withdraw).
		withdrawn []bucketRange
	}
}

type bucketRange struct{ first, last uint32 }

type bucket struct {
	gen      uint64
	changing int
	// changers are the sessions with changes in flight (0: the island's
	// own); events the last generation moves with the session that made
	// them, every move after floor: a grant is refused only for another
	// session's change since its mark, so a client reading a directory
	// while it writes there still gets its lease.
	changers map[uint64]int
	events   []event
	floor    uint64
	holders  map[uint64]time.Time // session -> lease end (island clock)
	used     time.Time
	// excl is the session holding the bucket's lease exclusively (its
	// only holder), 0 for none; contended ends the shared-only time
	// after a recall.
	excl      uint64
	contended time.Time
	// lockers are the sessions with a file-lock request on the bucket in
	// flight (Locking): none but the requester is made exclusive holder
	// meanwhile.
	lockers map[uint64]int
	// recalling are the breaks of exclusive leases of the bucket not
	// yet acknowledged (nor run out): every other session's read or
	// lock request waits for them as the first one does (Recall).
	recalling []waiter
}

// event is one generation move of a bucket and the session whose change
// made it.
type event struct{ gen, session uint64 }

// maxEvents bounds a bucket's events; a mark older than them is refused.
const maxEvents = 64

type session struct {
	seq      uint64 // last break queued
	acked    uint64 // last break acknowledged
	pending  []Break
	polls    int           // polls waiting now
	answered time.Time     // last poll answer
	wake     chan struct{} // closed when a break is queued
	ackWake  chan struct{} // closed when acked moves
	used     time.Time
	// held are the buckets whose lease the session was granted here
	// within Hold, with the time of the last grant: a poll renews them.
	held map[uint32]time.Time
	// grants counts grants to the session; a long poll (waiting longer
	// than a term: its client held no lease here) answers at the next, so
	// that the client polls often enough to keep the new lease renewed.
	grants    uint64
	longPolls int
}

// New returns an empty table.
func New(cfg Config) *Table {
	if cfg.Term <= 0 {
		cfg.Term = DefaultTerm
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Hold == 0 {
		cfg.Hold = DefaultHold
	}
	t := &Table{term: cfg.Term, hold: max(cfg.Hold, 0), now: cfg.Now, id: rand.Uint64() | 1}
	if cfg.Fenced {
		t.fence = cfg.Now().Add(cfg.Term)
	}
	if cfg.FencedReads {
		t.rfence = cfg.Now().Add(cfg.Term)
	}
	t.mu.buckets = map[uint32]*bucket{}
	t.mu.sessions = map[uint64]*session{}
	return t
}

// Term is the lease length.
func (t *Table) Term() time.Duration { return t.term }

// Hold is how long after its grant a lease is renewed by its session's
// polls (0: it is not).
func (t *Table) Hold() time.Duration { return t.hold }

// ID identifies this table among every island incarnation's (never 0): a
// poll renews the leases this table granted, not those of an earlier
// leader, which this one cannot know.
func (t *Table) ID() uint64 { return t.id }

func (t *Table) bucketLocked(b uint32, now time.Time) *bucket {
	bk := t.mu.buckets[b]
	if bk == nil {
		t.mu.gen++
		bk = &bucket{gen: t.mu.gen, floor: t.mu.gen, holders: map[uint64]time.Time{}, changers: map[uint64]int{}}
		t.mu.buckets[b] = bk
	}
	bk.used = now
	return bk
}

func (t *Table) sessionLocked(id uint64, now time.Time) *session {
	s := t.mu.sessions[id]
	if s == nil {
		s = &session{wake: make(chan struct{}), ackWake: make(chan struct{})}
		t.mu.sessions[id] = s
	}
	s.used = now
	return s
}

// Begin marks bucket b before a read whose answer may be leased.
func (t *Table) Begin(b uint32) Mark {
	t.mu.Lock()
	defer t.mu.Unlock()
	bk := t.bucketLocked(b, t.now())
	return Mark{gen: bk.gen, ok: true}
}

// moveLocked moves bk's generation for a change by session.
func (t *Table) moveLocked(bk *bucket, session uint64) {
	t.mu.gen++
	bk.gen = t.mu.gen
	if len(bk.events) == maxEvents {
		bk.floor = bk.events[0].gen
		bk.events = append(bk.events[:0], bk.events[1:]...)
	}
	bk.events = append(bk.events, event{bk.gen, session})
}

// changedForLocked reports whether a session other than id changed bk
// since m, or is changing it.
func changedForLocked(bk *bucket, m Mark, id uint64) bool {
	for s, n := range bk.changers {
		if n > 0 && s != id {
			return true
		}
	}
	if bk.gen == m.gen {
		return false
	}
	if m.gen < bk.floor {
		return true
	}
	for _, e := range bk.events {
		if e.gen > m.gen && e.session != id {
			return true
		}
	}
	return false
}

// Grant makes session a holder of bucket b, read since m was taken, for
// one term. It refuses (ok false) when the bucket changed or was changing
// since m, or when the session is not listening for breaks. seq is the
// session's last break number at the grant.
func (t *Table) Grant(sessionID uint64, b uint32, m Mark) (seq uint64, ok bool) {
	seq, _, ok = t.grant(sessionID, b, m, false)
	return seq, ok
}

// GrantExclusive is Grant for a session that wants the lease exclusive:
// no other session reads the bucket without recalling it first (Recall),
// so the holder may keep changes back (metadata write-behind) and flush
// them when the lease is recalled or broken. The lease is exclusive
// (excl) when the session is the bucket's only holder and the bucket was
// not recalled within Contended; otherwise it is shared, as from Grant.
// A session that holds a bucket exclusively keeps it so on renewal.
func (t *Table) GrantExclusive(sessionID uint64, b uint32, m Mark) (seq uint64, excl, ok bool) {
	return t.grant(sessionID, b, m, true)
}

func (t *Table) grant(sessionID uint64, b uint32, m Mark, wantExcl bool) (seq uint64, excl, ok bool) {
	if sessionID == 0 || !m.ok {
		return 0, false, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	bk := t.mu.buckets[b]
	if bk == nil || changedForLocked(bk, m, sessionID) {
		return 0, false, false
	}
	if t.withdrawnLocked(b) {
		return 0, false, false
	}
	s := t.mu.sessions[sessionID]
	if s == nil || (s.polls == 0 && now.Sub(s.answered) > PollGrace) {
		return 0, false, false
	}
	if bk.excl != 0 && bk.excl != sessionID {
		if end, held := bk.holders[bk.excl]; held && end.After(now) {
			return 0, false, false // recalled before this read, and granted again since: not ours to share
		}
		t.clearExclLocked(bk)
	}
	bk.used, s.used = now, now
	if _, held := bk.holders[sessionID]; !held {
		t.mu.stats.Granted++
	}
	bk.holders[sessionID] = now.Add(t.term)
	if t.hold > 0 {
		if s.held == nil {
			s.held = map[uint32]time.Time{}
		}
		s.held[b] = now
		if s.grants++; s.longPolls > 0 {
			close(s.wake)
			s.wake = make(chan struct{})
		}
	}
	switch {
	case bk.excl == sessionID:
		excl = true
	case wantExcl && !now.Before(bk.contended) && t.onlyHolderLocked(bk, sessionID, now):
		if lockingForLocked(bk, sessionID) {
			t.mu.stats.LockShared++
			break
		}
		bk.excl, excl = sessionID, true
		t.excl.Add(1)
		t.mu.stats.Exclusive++
	}
	t.sweepLocked(now)
	return s.seq, excl, true
}

// lockingForLocked reports whether a session other than id has a
// file-lock request on bk in flight.
func lockingForLocked(bk *bucket, id uint64) bool {
	for s, n := range bk.lockers {
		if n > 0 && s != id {
			return true
		}
	}
	return false
}

// Locking marks a file-lock request of session s (0: none) on a file of
// bucket b as in flight until done is called, which must be once the
// request has been answered (its change applied or abandoned). Call it
// before the request's Recall: a holder of the exclusive lease may grant
// the bucket's file locks itself from a copy of the island's lock set
// read after its grant, so no other session may become exclusive holder
// between a lock request's Recall and the moment its change is applied,
// or that copy would miss the change (two owners would both hold a
// conflicting lock, and the holder's hand-over to the island would fail).
// Meanwhile GrantExclusive grants such a session a shared lease.
func (t *Table) Locking(b uint32, s uint64) (done func()) {
	t.mu.Lock()
	bk := t.bucketLocked(b, t.now())
	if bk.lockers == nil {
		bk.lockers = map[uint64]int{}
	}
	bk.lockers[s]++
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if bk.lockers[s]--; bk.lockers[s] <= 0 {
			delete(bk.lockers, s)
		}
		bk.used = t.now()
	}
}

// onlyHolderLocked reports whether id is bk's only holder with a live
// lease.
func (t *Table) onlyHolderLocked(bk *bucket, id uint64, now time.Time) bool {
	for h, end := range bk.holders {
		if h != id && end.After(now) {
			return false
		}
	}
	return true
}

func (t *Table) clearExclLocked(bk *bucket) {
	if bk.excl != 0 {
		bk.excl = 0
		t.excl.Add(-1)
	}
}

// Recall prepares a read of buckets by session except (0: a reader with
// no session): an exclusive lease another session holds on one of them
// is broken, and Recall waits until its holder acknowledged (having
// flushed the changes it kept back) or the lease ran out. Shared leases
// stay. The bucket's leases are then only shared for Contended. Recall
// with no exclusive lease anywhere costs an atomic load.
func (t *Table) Recall(ctx context.Context, buckets []uint32, except uint64) error {
	if !t.rfence.IsZero() {
		if err := t.waitUntil(ctx, t.rfence); err != nil {
			return err
		}
	}
	if !t.Exclusive() {
		return nil
	}
	t.mu.Lock()
	now := t.now()
	var ws []waiter
	for _, b := range buckets {
		bk := t.mu.buckets[b]
		if bk == nil {
			continue
		}
		// An exclusive lease recalled (or broken) for another session
		// and not yet given back: its holder may still keep changes and
		// locks the island does not have. Clearing bk.excl at the first
		// recall let a second session's request run meanwhile (SQLite
		// on three mounts: a PENDING lock granted at the island while
		// the holder's copy had it locked for writing).
		ws = append(ws, t.recallingLocked(bk, except, now)...)
		if bk.excl == 0 || bk.excl == except {
			continue
		}
		id := bk.excl
		t.clearExclLocked(bk)
		bk.contended = now.Add(Contended)
		end, held := bk.holders[id]
		delete(bk.holders, id)
		if !held || !end.After(now) {
			continue
		}
		t.mu.stats.Recalled++
		w := t.queueBreakLocked(id, b, end, now)
		t.noteRecallLocked(bk, w)
		ws = append(ws, w)
	}
	t.mu.Unlock()
	for _, w := range ws {
		if err := t.wait(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

// Exclusive reports whether any bucket may have an exclusive holder, or
// one whose recall is not yet acknowledged.
func (t *Table) Exclusive() bool { return t.excl.Load() != 0 || t.recs.Load() != 0 }

// noteRecallLocked records w, the break of bk's exclusive holder, until
// it is acknowledged or runs out.
func (t *Table) noteRecallLocked(bk *bucket, w waiter) {
	bk.recalling = append(bk.recalling, w)
	t.recs.Add(1)
}

// recallingLocked drops bk's recalls that are over and returns those
// of sessions other than except.
func (t *Table) recallingLocked(bk *bucket, except uint64, now time.Time) []waiter {
	var out []waiter
	keep := bk.recalling[:0]
	for _, w := range bk.recalling {
		if w.s.acked >= w.seq || !w.end.After(now) {
			t.recs.Add(-1)
			continue
		}
		keep = append(keep, w)
		if w.id != except {
			out = append(out, w)
		}
	}
	clear(bk.recalling[len(keep):])
	bk.recalling = keep
	return out
}

// MustRecall reports whether Recall(buckets, except) would wait: a read
// fence, or an exclusive lease of a session but except on one of them.
func (t *Table) MustRecall(buckets []uint32, except uint64) bool {
	if t.ReadFenced() {
		return true
	}
	if !t.Exclusive() {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for _, b := range buckets {
		if bk := t.mu.buckets[b]; bk != nil && (bk.excl != 0 && bk.excl != except || len(t.recallingLocked(bk, except, now)) > 0) {
			return true
		}
	}
	return false
}

// queueBreakLocked queues the break of session id's lease on bucket b,
// which ends at end, and returns what to wait for.
func (t *Table) queueBreakLocked(id uint64, b uint32, end, now time.Time) waiter {
	s := t.sessionLocked(id, now)
	s.seq++
	s.pending = append(s.pending, Break{Bucket: b, Seq: s.seq})
	close(s.wake)
	s.wake = make(chan struct{})
	return waiter{id, s, s.seq, end}
}

type waiter struct {
	id  uint64 // the session broken
	s   *session
	seq uint64
	end time.Time
}

// Break prepares a change of buckets by session except (0: nobody's own):
// it stops grants on them, breaks every other holder's lease and waits
// until each acknowledged or its lease ran out. done must be called once
// the change is applied (or abandoned). On ctx's end Break returns its
// error with the buckets released.
func (t *Table) Break(ctx context.Context, buckets []uint32, except uint64) (done func(), err error) {
	return t.breakLeases(ctx, buckets, except, true)
}

// BreakUnfenced is Break without waiting for the fence: for an island's
// recovery at start, which finishes what its previous incarnation began
// (changes no client was answered yet) and must not hold the island's
// start by a lease term.
func (t *Table) BreakUnfenced(ctx context.Context, buckets []uint32, except uint64) (done func(), err error) {
	return t.breakLeases(ctx, buckets, except, false)
}

func (t *Table) breakLeases(ctx context.Context, buckets []uint32, except uint64, fenced bool) (done func(), err error) {
	if fenced {
		if err := t.waitUntil(ctx, t.fence); err != nil {
			return nil, err
		}
	}
	t.mu.Lock()
	now := t.now()
	var ws []waiter
	for _, b := range buckets {
		bk := t.bucketLocked(b, now)
		bk.changing++
		bk.changers[except]++
		t.moveLocked(bk, except)
		for id, end := range bk.holders {
			if id == except {
				continue
			}
			delete(bk.holders, id)
			wasExcl := id == bk.excl
			if wasExcl {
				t.clearExclLocked(bk)
			}
			if !end.After(now) {
				continue
			}
			w := t.queueBreakLocked(id, b, end, now)
			if wasExcl {
				t.noteRecallLocked(bk, w)
			}
			ws = append(ws, w)
		}
	}
	t.mu.Unlock()
	done = func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		now := t.now()
		for _, b := range buckets {
			bk := t.bucketLocked(b, now)
			bk.changing--
			if bk.changers[except]--; bk.changers[except] == 0 {
				delete(bk.changers, except)
			}
			t.moveLocked(bk, except)
			t.recallingLocked(bk, 0, now)
			if bk.changing == 0 && len(bk.holders) == 0 && len(bk.lockers) == 0 && len(bk.recalling) == 0 && !now.Before(bk.contended) {
				// Nobody holds it: a mark taken meanwhile finds no record
				// and is refused, and a table that only sees writes stays
				// empty.
				delete(t.mu.buckets, b)
			}
		}
		t.sweepLocked(now)
	}
	for _, w := range ws {
		if err := t.wait(ctx, w); err != nil {
			done()
			return nil, err
		}
	}
	return done, nil
}

// Withdrawn reports whether bucket b is in a withdrawn range (no lease
// is granted there).
func (t *Table) Withdrawn(b uint32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.withdrawnLocked(b)
}

func (t *Table) withdrawnLocked(b uint32) bool {
	for _, r := range t.mu.withdrawn {
		if r.first <= b && b <= r.last {
			return true
		}
	}
	return false
}

// Withdraw takes buckets first..last away from leases (the island hands
// them to another): no lease is granted in the range until done is
// called, and every lease held in it is broken and waited for, as Break
// does. On ctx's end it returns its error with the range given back.
func (t *Table) Withdraw(ctx context.Context, first, last uint32) (done func(), err error) {
	r := bucketRange{first, last}
	t.mu.Lock()
	t.mu.withdrawn = append(t.mu.withdrawn, r)
	var held []uint32
	for b := range t.mu.buckets {
		if first <= b && b <= last {
			held = append(held, b)
		}
	}
	t.mu.Unlock()
	give := func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if k := slices.Index(t.mu.withdrawn, r); k >= 0 {
			t.mu.withdrawn = slices.Delete(t.mu.withdrawn, k, k+1)
		}
	}
	broken, err := t.breakLeases(ctx, held, 0, false)
	if err != nil {
		give()
		return nil, err
	}
	return func() { broken(); give() }, nil
}

// waitUntil waits until the table's clock reaches at.
func (t *Table) waitUntil(ctx context.Context, at time.Time) error {
	left := at.Sub(t.now())
	if left <= 0 {
		return nil
	}
	timer := time.NewTimer(left)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ReadFenced reports whether Recall still waits out Config.FencedReads.
func (t *Table) ReadFenced() bool { return t.now().Before(t.rfence) }

// wait waits until w's break is acknowledged or its lease ended.
func (t *Table) wait(ctx context.Context, w waiter) error {
	for {
		t.mu.Lock()
		if w.s.acked >= w.seq {
			t.mu.stats.Broken++
			t.mu.Unlock()
			return nil
		}
		left := w.end.Sub(t.now())
		if left <= 0 {
			t.mu.stats.Expired++
			t.mu.Unlock()
			return nil
		}
		ch := w.s.ackWake
		t.mu.Unlock()
		timer := time.NewTimer(left)
		select {
		case <-ch:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
		timer.Stop()
	}
}

// Poll acknowledges the session's breaks up to ack, renews its leases
// granted within Hold for a term from now, and waits (at most wait) for
// breaks after ack, returning them. A poll that waits longer than a term
// also answers when the session is granted a lease meanwhile.
func (t *Table) Poll(ctx context.Context, sessionID, ack uint64, wait time.Duration) ([]Break, error) {
	if sessionID == 0 {
		return nil, ErrNoSession
	}
	t.mu.Lock()
	now := t.now()
	s := t.sessionLocked(sessionID, now)
	t.renewLocked(sessionID, s, now)
	if ack > s.acked && ack <= s.seq {
		s.acked = ack
		close(s.ackWake)
		s.ackWake = make(chan struct{})
		keep := s.pending[:0]
		for _, b := range s.pending {
			if b.Seq > ack {
				keep = append(keep, b)
			} else if bk := t.mu.buckets[b.Bucket]; bk != nil && len(bk.recalling) > 0 {
				t.recallingLocked(bk, 0, now) // acknowledged: over
			}
		}
		s.pending = keep
	}
	s.polls++
	long, grants := t.hold > 0 && wait > t.term, s.grants
	if long {
		s.longPolls++
	}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		s.polls--
		if long {
			s.longPolls--
		}
		s.answered = t.now()
		t.mu.Unlock()
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		t.mu.Lock()
		var out []Break
		for _, b := range s.pending {
			if b.Seq > ack {
				out = append(out, b)
			}
		}
		ch := s.wake
		granted := long && s.grants != grants
		t.mu.Unlock()
		if len(out) > 0 || granted {
			return out, nil
		}
		select {
		case <-ch:
		case <-timer.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// renewLocked extends every live lease session id was granted within
// Hold to a term from now. A lease broken, expired or granted longer ago
// leaves s.held (the latter ends with its term).
func (t *Table) renewLocked(id uint64, s *session, now time.Time) {
	end := now.Add(t.term)
	for b, granted := range s.held {
		if bk := t.mu.buckets[b]; bk != nil {
			if cur, ok := bk.holders[id]; ok && cur.After(now) && now.Sub(granted) < t.hold {
				if end.After(cur) {
					bk.holders[id] = end
					t.mu.stats.Renewed++
				}
				continue
			}
		}
		delete(s.held, b)
	}
}

// Stats returns the table's counts.
func (t *Table) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.mu.stats
	now := t.now()
	for _, bk := range t.mu.buckets {
		for _, end := range bk.holders {
			if end.After(now) {
				st.Holders++
			}
		}
	}
	return st
}

// sweepLocked drops expired holders and records idle for a while, at most
// once a second.
func (t *Table) sweepLocked(now time.Time) {
	if now.Sub(t.mu.swept) < time.Second {
		return
	}
	t.mu.swept = now
	for b, bk := range t.mu.buckets {
		for id, end := range bk.holders {
			if !end.After(now) {
				delete(bk.holders, id)
				if id == bk.excl {
					t.clearExclLocked(bk)
				}
			}
		}
		t.recallingLocked(bk, 0, now)
		if len(bk.holders) == 0 && bk.changing == 0 && len(bk.lockers) == 0 && len(bk.recalling) == 0 && now.Sub(bk.used) > idle && !now.Before(bk.contended) {
			delete(t.mu.buckets, b)
		}
	}
	for id, s := range t.mu.sessions {
		if s.polls == 0 && now.Sub(s.used) > idle && now.Sub(s.answered) > idle {
			delete(t.mu.sessions, id)
		}
	}
}

// Fenced reports whether changes still wait for leases an earlier
// incarnation may have granted (Config.Fenced).
func (t *Table) Fenced() bool { return t.now().Before(t.fence) }
