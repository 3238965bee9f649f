package client

import (
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// TestLeaseRenewedByReadsUntilAPollRenewsIt: a lease the polls have not
// renewed yet (its island's poll was parked for the long wait when it was
// granted, and the next one comes only after the lease would end) is
// renewed by the reads that use it past half its term, even once the
// polls have said how long they renew for; once a poll sent after the
// grant has renewed it, the reads leave it to the polls. Before, any
// known hold made the reads leave it, and a lease in use lapsed one term
// after its grant (a small-file loop then lost its directory's
// completeness and asked the island for every new name).
func TestLeaseRenewedByReadsUntilAPollRenewsIt(t *testing.T) {
	const isl, table = namespace.IslandID(1), 77
	term := 2700 * time.Millisecond
	now := time.Now()
	l := &heldLease{island: isl, table: table, term: term, hold: time.Minute, granted: now.Add(-2 * time.Second), expires: now.Add(700 * time.Millisecond)}
	f := &FS{}
	f.cache.hold = map[namespace.IslandID]time.Duration{}
	f.cache.leases = map[uint32]*heldLease{9: l}
	if !l.renewsByRead(now) {
		t.Fatal("a lease past half its term that no poll renewed is left to lapse")
	}

	// A poll sent before the grant renews nothing in time: still the reads'.
	f.renewByPoll(isl, &metawire.PollResp{HoldMs: 60000, Table: table}, l.granted.Add(-time.Millisecond))
	if l.polled || !l.renewsByRead(now) {
		t.Fatal("a poll sent before the grant counted as keeping the lease")
	}

	// A poll sent after the grant renewed it: the polls keep it now.
	sent := l.granted.Add(time.Second)
	f.renewByPoll(isl, &metawire.PollResp{HoldMs: 60000, Table: table}, sent)
	if !l.polled {
		t.Fatal("a poll sent after the grant did not count")
	}
	if want := sent.Add(term); !l.expires.Equal(want) {
		t.Fatalf("expires %v after the poll, want %v", l.expires, want)
	}
	if later := l.expires.Add(-term / 4); l.renewsByRead(later) {
		t.Fatal("reads renew a lease the polls keep")
	}
}
