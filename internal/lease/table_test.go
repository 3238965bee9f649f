package lease

import (
	"context"
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// listen keeps a poll of session id outstanding, acknowledging what it
// got, and reports every break on the channel.
func listen(ctx context.Context, t *Table, id uint64) <-chan Break {
	out := make(chan Break, 64)
	started := make(chan struct{})
	go func() {
		var ack uint64
		first := true
		for ctx.Err() == nil {
			if first {
				first = false
				close(started)
			}
			bs, err := t.Poll(ctx, id, ack, time.Minute)
			if err != nil {
				return
			}
			for _, b := range bs {
				out <- b
				ack = max(ack, b.Seq)
			}
		}
	}()
	<-started
	// Wait until the poll is registered.
	for {
		t.mu.Lock()
		s := t.mu.sessions[id]
		n := 0
		if s != nil {
			n = s.polls
		}
		t.mu.Unlock()
		if n > 0 {
			return out
		}
		time.Sleep(time.Millisecond)
	}
}

func TestGrantBreakAck(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tb := New(Config{Term: time.Hour})
	if _, ok := tb.Grant(7, 1, tb.Begin(1)); ok {
		t.Fatal("granted to a session that does not listen")
	}
	breaks := listen(ctx, tb, 7)
	seq, ok := tb.Grant(7, 1, tb.Begin(1))
	if !ok || seq != 0 {
		t.Fatalf("grant: %d %v", seq, ok)
	}
	// The holder's own change keeps its lease.
	done, err := tb.Break(ctx, []uint32{1}, 7)
	if err != nil {
		t.Fatal(err)
	}
	done()
	select {
	case b := <-breaks:
		t.Fatalf("own change broke the lease: %+v", b)
	default:
	}
	// Another session's change breaks it and waits for the acknowledgement
	// (the term is an hour: returning means it was acknowledged).
	done, err = tb.Break(ctx, []uint32{1, 2}, 9)
	if err != nil {
		t.Fatal(err)
	}
	done()
	b := <-breaks
	if b.Bucket != 1 || b.Seq != 1 {
		t.Fatalf("break %+v", b)
	}
	if st := tb.Stats(); st.Broken != 1 || st.Granted != 2-1 || st.Holders != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestGrantRefusedAcrossAChange(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tb := New(Config{Term: time.Hour})
	listen(ctx, tb, 7)
	m := tb.Begin(1)
	done, err := tb.Break(ctx, []uint32{1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tb.Grant(7, 1, m); ok {
		t.Fatal("granted while the bucket changes")
	}
	if _, ok := tb.Grant(7, 1, tb.Begin(1)); ok {
		t.Fatal("granted on a mark taken while the bucket changes")
	}
	done()
	if _, ok := tb.Grant(7, 1, m); ok {
		t.Fatal("granted on a mark taken before a change")
	}
	if _, ok := tb.Grant(7, 1, tb.Begin(1)); !ok {
		t.Fatal("refused after the change")
	}
	// Another bucket's change does not matter.
	m = tb.Begin(1)
	done, _ = tb.Break(ctx, []uint32{2}, 0)
	done()
	if _, ok := tb.Grant(7, 1, m); !ok {
		t.Fatal("refused after another bucket's change")
	}
}

func TestBreakWaitsOutADeadHolder(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tb := New(Config{Term: 200 * time.Millisecond})
	lctx, stop := context.WithCancel(ctx)
	listen(lctx, tb, 7)
	if _, ok := tb.Grant(7, 1, tb.Begin(1)); !ok {
		t.Fatal("refused")
	}
	stop() // the holder dies without acknowledging
	defer cancel()
	start := time.Now()
	done, err := tb.Break(ctx, []uint32{1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	done()
	if time.Since(start) < 150*time.Millisecond {
		t.Fatalf("break returned after %v, before the lease ended", time.Since(start))
	}
	if st := tb.Stats(); st.Expired != 1 {
		t.Fatalf("stats %+v", st)
	}
	// A lease the island counts as ended is not waited for.
	c := &clock{t: time.Unix(1000, 0)}
	tb = New(Config{Term: time.Second, Now: c.now})
	tb.mu.Lock()
	s := tb.sessionLocked(7, c.now())
	s.answered = c.now()
	tb.mu.Unlock()
	if _, ok := tb.Grant(7, 1, tb.Begin(1)); !ok {
		t.Fatal("refused a session that just polled")
	}
	c.add(3 * time.Second)
	if _, ok := tb.Grant(7, 2, tb.Begin(2)); ok {
		t.Fatal("granted to a session that stopped polling")
	}
	bctx, bcancel := context.WithTimeout(ctx, time.Second)
	defer bcancel()
	done, err = tb.Break(bctx, []uint32{1}, 0)
	if err != nil {
		t.Fatalf("waited for an ended lease: %v", err)
	}
	done()
}

func TestFence(t *testing.T) {
	tb := New(Config{Term: 100 * time.Millisecond, Fenced: true})
	start := time.Now()
	done, err := tb.Break(context.Background(), []uint32{1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	done()
	if time.Since(start) < 80*time.Millisecond {
		t.Fatalf("a fenced table applied a change after %v", time.Since(start))
	}
	tb = New(Config{Term: time.Hour})
	done, err = tb.Break(context.Background(), []uint32{1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	done()
}

// TestWritesLeaveNoRecords: changes of buckets nobody leases leave the
// table empty, and a mark taken during such a change is still refused.
func TestWritesLeaveNoRecords(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tb := New(Config{Term: time.Hour})
	listen(ctx, tb, 7)
	for b := range uint32(1000) {
		done, err := tb.Break(ctx, []uint32{b}, 0)
		if err != nil {
			t.Fatal(err)
		}
		done()
	}
	tb.mu.Lock()
	n := len(tb.mu.buckets)
	tb.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d bucket records after changes nobody leased", n)
	}
	done, _ := tb.Break(ctx, []uint32{5}, 0)
	m := tb.Begin(5)
	done()
	if _, ok := tb.Grant(7, 5, m); ok {
		t.Fatal("granted on a mark taken during a change")
	}
	m = tb.Begin(5)
	done, _ = tb.Break(ctx, []uint32{5}, 0)
	done()
	if _, ok := tb.Grant(7, 5, m); ok {
		t.Fatal("granted on a mark taken before a change")
	}
}

// TestExclusiveRecall: an exclusive lease is granted to a bucket's only
// holder; another session's read recalls it and waits for the holder's
// acknowledgement; the bucket is then shared-only for Contended, and a
// change by anyone else breaks an exclusive lease like any other.
func TestExclusiveRecall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tb := New(Config{Term: time.Hour})
	b7 := listen(ctx, tb, 7)
	listen(ctx, tb, 8)
	if _, excl, ok := tb.GrantExclusive(7, 1, tb.Begin(1)); !ok || !excl {
		t.Fatalf("exclusive grant to the only holder: excl %v ok %v", excl, ok)
	}
	if !tb.Exclusive() {
		t.Fatal("Exclusive false with an exclusive holder")
	}
	// The holder's own reads and renewals keep it exclusive.
	if err := tb.Recall(ctx, []uint32{1}, 7); err != nil {
		t.Fatal(err)
	}
	if _, excl, ok := tb.GrantExclusive(7, 1, tb.Begin(1)); !ok || !excl {
		t.Fatalf("renewal: excl %v ok %v", excl, ok)
	}
	// Another session cannot take a lease beside it without a recall.
	if _, ok := tb.Grant(8, 1, tb.Begin(1)); ok {
		t.Fatal("granted a lease beside an exclusive one")
	}
	// Session 8 reads: the recall waits for 7's acknowledgement (the term
	// is an hour, so returning means acknowledged).
	recalled := make(chan error, 1)
	go func() { recalled <- tb.Recall(ctx, []uint32{1}, 8) }()
	if b := <-b7; b.Bucket != 1 {
		t.Fatalf("break %+v", b)
	}
	if err := <-recalled; err != nil {
		t.Fatal(err)
	}
	if tb.Exclusive() {
		t.Fatal("still exclusive after the recall")
	}
	// Contended: both get shared leases, neither an exclusive one.
	for _, id := range []uint64{7, 8} {
		if _, excl, ok := tb.GrantExclusive(id, 1, tb.Begin(1)); !ok || excl {
			t.Fatalf("session %d after a recall: excl %v ok %v", id, excl, ok)
		}
	}
	// Reads with nothing exclusive cost nothing and wait for nobody.
	if err := tb.Recall(ctx, []uint32{1, 2}, 0); err != nil {
		t.Fatal(err)
	}
	if st := tb.Stats(); st.Exclusive != 1 || st.Recalled != 1 || st.Broken != 1 {
		t.Fatalf("stats %+v", st)
	}
	// A change by another session breaks an exclusive lease too.
	if _, excl, _ := tb.GrantExclusive(7, 2, tb.Begin(2)); !excl {
		t.Fatal("bucket 2 not exclusive")
	}
	done, err := tb.Break(ctx, []uint32{2}, 8)
	if err != nil {
		t.Fatal(err)
	}
	done()
	if b := <-b7; b.Bucket != 2 || tb.Exclusive() {
		t.Fatalf("break %+v, exclusive %v", b, tb.Exclusive())
	}
}

// TestReadFence: a table whose earlier incarnation granted exclusive
// leases serves no read for one term.
func TestReadFence(t *testing.T) {
	tb := New(Config{Term: 100 * time.Millisecond, Fenced: true, FencedReads: true})
	start := time.Now()
	if err := tb.Recall(context.Background(), []uint32{1}, 0); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 80*time.Millisecond {
		t.Fatalf("a read-fenced table served a read after %v", time.Since(start))
	}
}

// TestOwnChangesDoNotRefuseGrants: a session reading a bucket while its
// own change of it is in flight (or ended since the read began) still
// gets its lease; another session's read is refused.
func TestOwnChangesDoNotRefuseGrants(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tb := New(Config{Term: time.Hour})
	listen(ctx, tb, 7)
	listen(ctx, tb, 8)
	m7, m8 := tb.Begin(1), tb.Begin(1)
	done, err := tb.Break(ctx, []uint32{1}, 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tb.Grant(7, 1, tb.Begin(1)); !ok {
		t.Fatal("refused during the session's own change")
	}
	if _, ok := tb.Grant(8, 1, tb.Begin(1)); ok {
		t.Fatal("granted during another session's change")
	}
	done()
	if _, ok := tb.Grant(7, 1, m7); !ok {
		t.Fatal("refused on a mark from before the session's own change")
	}
	if _, ok := tb.Grant(8, 1, m8); ok {
		t.Fatal("granted on a mark from before another session's change")
	}
	// A mark older than the events kept is refused (the bucket stays:
	// 7 holds it).
	if _, ok := tb.Grant(7, 2, tb.Begin(2)); !ok {
		t.Fatal("refused")
	}
	old := tb.Begin(2)
	for range maxEvents + 1 {
		done, _ := tb.Break(ctx, []uint32{2}, 7)
		done()
	}
	if _, ok := tb.Grant(7, 2, old); ok {
		t.Fatal("granted on a mark older than the bucket's events")
	}
}

// TestPollRenews: a session's poll renews, as it arrives, every live
// lease the session was granted within Hold, for a term from then; not
// another session's, not a broken one, not one granted longer ago.
func TestPollRenews(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Unix(1000, 0)}
	tb := New(Config{Term: 3 * time.Second, Hold: 10 * time.Second, Now: c.now})
	poll := func(id uint64) {
		t.Helper()
		if _, err := tb.Poll(ctx, id, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	end := func(id uint64, b uint32) time.Time {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		if bk := tb.mu.buckets[b]; bk != nil {
			return bk.holders[id]
		}
		return time.Time{}
	}
	poll(7)
	poll(9)
	for _, b := range []uint32{1, 2} {
		if _, ok := tb.Grant(7, b, tb.Begin(b)); !ok {
			t.Fatalf("grant of bucket %d refused", b)
		}
	}
	if _, ok := tb.Grant(9, 3, tb.Begin(3)); !ok {
		t.Fatal("grant to session 9 refused")
	}
	broken := make(chan error, 1)
	go func() { // 7's lease on 2 is broken
		done, err := tb.Break(ctx, []uint32{2}, 0)
		if err == nil {
			done()
		}
		broken <- err
	}()
	if bs, err := tb.Poll(ctx, 7, 0, time.Minute); err != nil || len(bs) != 1 {
		t.Fatalf("poll: %v %v, want the break", bs, err)
	}
	if _, err := tb.Poll(ctx, 7, 1, 0); err != nil { // acknowledges it
		t.Fatal(err)
	}
	if err := <-broken; err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 4; k++ { // 8 s, well past the 3 s term
		c.add(2 * time.Second)
		poll(7) // 9 has stopped polling
		if want := c.now().Add(3 * time.Second); !end(7, 1).Equal(want) {
			t.Fatalf("after %d polls, 7's lease on 1 ends %v, want %v", k+1, end(7, 1), want)
		}
	}
	if !end(7, 2).IsZero() {
		t.Fatal("a broken lease came back with a poll")
	}
	if e := end(9, 3); !e.Equal(time.Unix(1003, 0)) {
		t.Fatalf("session 9's lease ends %v, want 3 s after its grant: another session's polls renewed it", e)
	}
	// Past Hold since its grant, a lease runs out with its term.
	c.add(2 * time.Second) // 10 s after the grant
	poll(7)
	if e := end(7, 1); e.After(c.now().Add(time.Second + 1)) {
		t.Fatalf("a lease past Hold was renewed to %v (now %v)", e, c.now())
	}
	if st := tb.Stats(); st.Renewed != 4 {
		t.Fatalf("stats %+v, want 4 renewals", st)
	}
}

// TestLongPollAnswersAtAGrant: a poll waiting longer than a term (its
// client held no lease here) answers when its session is granted one, so
// the client's next poll comes soon enough to renew it.
func TestLongPollAnswersAtAGrant(t *testing.T) {
	ctx := context.Background()
	tb := New(Config{Term: time.Second})
	if _, err := tb.Poll(ctx, 7, 0, 0); err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		_, err := tb.Poll(ctx, 7, 0, time.Hour)
		answered <- err
	}()
	for { // until the poll waits
		tb.mu.Lock()
		n := tb.mu.sessions[7].longPolls
		tb.mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-answered:
		t.Fatalf("the long poll answered before any grant: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, ok := tb.Grant(7, 1, tb.Begin(1)); !ok {
		t.Fatal("grant refused")
	}
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll did not answer at the grant")
	}
}

// TestNoExclusiveGrantBesideALockRequest: a session whose file-lock
// request is in flight on a bucket (between its Recall and its change)
// keeps every other session from being made the bucket's exclusive
// holder: that holder would copy the file's lock set without the change
// and grant itself a conflicting lock from the copy. The requester's own
// grant stays exclusive, and after done other sessions' do again.
func TestNoExclusiveGrantBesideALockRequest(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tb := New(Config{Term: time.Hour})
	listen(ctx, tb, 7)
	listen(ctx, tb, 8)
	// Session 8's lock request: nothing to recall yet.
	done := tb.Locking(1, 8)
	if err := tb.Recall(ctx, []uint32{1}, 8); err != nil {
		t.Fatal(err)
	}
	// Session 7 reads the bucket meanwhile: a lease, but shared.
	if _, excl, ok := tb.GrantExclusive(7, 1, tb.Begin(1)); !ok || excl {
		t.Fatalf("grant beside another session's lock request: excl %v ok %v, want a shared lease", excl, ok)
	}
	if tb.Exclusive() || tb.MustRecall([]uint32{1}, 8) {
		t.Fatal("an exclusive holder beside a lock request in flight")
	}
	if st := tb.Stats(); st.LockShared != 1 || st.Exclusive != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Other buckets are not held back.
	if _, excl, _ := tb.GrantExclusive(7, 2, tb.Begin(2)); !excl {
		t.Fatal("bucket 2 not exclusive")
	}
	done()
	// The change applied: 7 may hold bucket 1 exclusively again (it is
	// its only holder; 8 holds no lease there).
	if _, excl, ok := tb.GrantExclusive(7, 1, tb.Begin(1)); !ok || !excl {
		t.Fatalf("grant after the lock request: excl %v ok %v", excl, ok)
	}
	// A session's own lock request does not hold back its own grant.
	done = tb.Locking(2, 7)
	defer done()
	if _, excl, ok := tb.GrantExclusive(7, 2, tb.Begin(2)); !ok || !excl {
		t.Fatalf("renewal beside the holder's own lock request: excl %v ok %v", excl, ok)
	}
}

// TestRecallInProgressHoldsEveryone: while an exclusive lease recalled
// for one session is not yet given back, another session's request waits
// for the same acknowledgement (its holder may still keep changes or
// locks the island lacks); the holder's own requests (its hand-over) do
// not. Clearing the exclusive mark at the first recall let the second
// session through at once.
func TestRecallInProgressHoldsEveryone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tb := New(Config{Term: time.Hour})
	if _, err := tb.Poll(ctx, 7, 0, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	listen(ctx, tb, 8)
	listen(ctx, tb, 9)
	if _, excl, ok := tb.GrantExclusive(7, 1, tb.Begin(1)); !ok || !excl {
		t.Fatalf("exclusive grant: excl %v ok %v", excl, ok)
	}
	first := make(chan error, 1)
	go func() { first <- tb.Recall(ctx, []uint32{1}, 8) }()
	bs, err := tb.Poll(ctx, 7, 0, time.Minute)
	if err != nil || len(bs) != 1 || bs[0].Bucket != 1 {
		t.Fatalf("break %+v, %v", bs, err)
	}
	if !tb.MustRecall([]uint32{1}, 9) {
		t.Fatal("another session's request would not wait for the recall in progress")
	}
	if tb.MustRecall([]uint32{1}, 7) {
		t.Fatal("the holder's own request would wait for its own recall")
	}
	second := make(chan error, 1)
	go func() { second <- tb.Recall(ctx, []uint32{1}, 9) }()
	select {
	case err := <-second:
		t.Fatalf("second session's recall returned before the acknowledgement: %v", err)
	case err := <-first:
		t.Fatalf("first recall returned before the acknowledgement: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	go func() { _, _ = tb.Poll(ctx, 7, bs[0].Seq, time.Minute) }()
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if tb.Exclusive() || tb.MustRecall([]uint32{1}, 9) {
		t.Fatal("still recalling after the acknowledgement")
	}
}
