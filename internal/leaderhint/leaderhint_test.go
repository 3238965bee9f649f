package leaderhint

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/namespace"
)

type fakeMap struct {
	mu        sync.Mutex
	islands   map[namespace.IslandID]string
	refreshed int
}

func (m *fakeMap) Refresh(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refreshed++
	return nil
}

func (m *fakeMap) Islands() map[namespace.IslandID]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[namespace.IslandID]string{}
	for k, v := range m.islands {
		out[k] = v
	}
	return out
}

func (m *fakeMap) current(id namespace.IslandID) func() (string, bool) {
	return func() (string, bool) {
		m.mu.Lock()
		defer m.mu.Unlock()
		a, ok := m.islands[id]
		return a, ok
	}
}

var errNotLeader = errors.New("not the leader")

// Island 2's leader died and "b" took over without registering: the map
// names the dead "x". A scan finds "b" (not "a", "c" nor the dead "x"
// itself); requests go there until the map names another address or "b"
// stops answering; scans are rate-limited, bounded by Wait, and skipped
// when a refreshed map names a new address.
func TestHints(t *testing.T) {
	m := &fakeMap{islands: map[namespace.IslandID]string{1: "a", 2: "x", 3: "b", 4: "c"}}
	var leader atomic.Value
	leader.Store("b")
	var asked atomic.Int32
	h := New(func(ctx context.Context, addr string, id namespace.IslandID) error {
		asked.Add(1)
		if id != 2 {
			t.Errorf("asked about island %d", id)
		}
		if addr == "x" {
			t.Error("the scan asked the address that had just failed")
		}
		if addr == "c" { // silent: a partitioned server
			<-ctx.Done()
			return ctx.Err()
		}
		if addr == leader.Load().(string) {
			return nil
		}
		return errNotLeader
	}, nil)
	h.Every, h.Wait = 200*time.Millisecond, 5*time.Second
	ctx := context.Background()

	if got := h.Addr(2, "x"); got != "x" {
		t.Fatalf("no hint yet: %q", got)
	}
	start := time.Now()
	if !h.Unavailable(ctx, m, 2, "x", m.current(2)) {
		t.Fatal("no leader found")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the scan waited %v for a silent server after the leader answered", d)
	}
	if got := h.Addr(2, "x"); got != "b" || h.Found() != 1 || m.refreshed != 1 {
		t.Fatalf("after the scan: addr %q, found %d, refreshed %d", got, h.Found(), m.refreshed)
	}
	if got := h.Addr(3, "b"); got != "b" {
		t.Fatalf("another island's address changed: %q", got)
	}

	// The leader moves on; "b" answers unavailable: forgotten, and no new
	// scan within Every.
	leader.Store("a")
	n := asked.Load()
	if h.Unavailable(ctx, m, 2, "b", m.current(2)) {
		t.Fatal("a leader known right after the hint failed, with no scan")
	}
	if asked.Load() != n || h.Addr(2, "x") != "x" {
		t.Fatalf("scanned within Every (%d asks), or kept the failed hint (%q)", asked.Load()-n, h.Addr(2, "x"))
	}
	time.Sleep(h.Every)
	if !h.Unavailable(ctx, m, 2, "x", m.current(2)) || h.Addr(2, "x") != "a" {
		t.Fatalf("the new leader not found: %q", h.Addr(2, "x"))
	}

	// The leader registers: the map names it, and the hint stands aside.
	m.mu.Lock()
	m.islands[2] = "a"
	m.mu.Unlock()
	if got := h.Addr(2, "a"); got != "a" {
		t.Fatalf("with the map naming a: %q", got)
	}
	// A refreshed map naming a new address: no scan, requests go there.
	time.Sleep(h.Every)
	n = asked.Load()
	if h.Unavailable(ctx, m, 2, "x", m.current(2)) || asked.Load() != n {
		t.Fatalf("scanned though the map names a new address (%d asks)", asked.Load()-n)
	}

	// Nobody answers: nothing found, the map's address stays.
	leader.Store("nobody")
	m.mu.Lock()
	m.islands[2] = "x"
	m.mu.Unlock()
	time.Sleep(h.Every)
	h.Wait = 100 * time.Millisecond
	if h.Unavailable(ctx, m, 2, "a", m.current(2)) || h.Unavailable(ctx, m, 2, "x", m.current(2)) || h.Addr(2, "x") != "x" {
		t.Fatalf("a leader found where none answers: %q", h.Addr(2, "x"))
	}
}

// A server that came back from a crash leads an island while leading
// nothing the map shows: the scan asks the addresses the map named
// before too.
func TestHintsAskServersTheMapNoLongerNames(t *testing.T) {
	m := &fakeMap{islands: map[namespace.IslandID]string{1: "a", 2: "x"}}
	h := New(func(ctx context.Context, addr string, id namespace.IslandID) error {
		if addr == "d" {
			return nil
		}
		return errNotLeader
	}, nil)
	if got := h.Addr(3, "d"); got != "d" { // island 3 was at d once
		t.Fatalf("addr %q", got)
	}
	if !h.Unavailable(context.Background(), m, 2, "x", m.current(2)) || h.Addr(2, "x") != "d" {
		t.Fatalf("the leader at an address the map no longer names not found: %q", h.Addr(2, "x"))
	}
}
