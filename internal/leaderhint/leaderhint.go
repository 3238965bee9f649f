package leaderhint

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/atoll-fs/atoll/internal/namespace"
)

// Defaults of Hints.Every and Hints.Wait.
const (
	DefaultEvery = time.Second
	DefaultWait  = time.Second
)

// Map is what a scan needs of the cluster map.
type Map interface {
	// Refresh fetches a newer map if there is one.
	Refresh(ctx context.Context) error
	// Islands returns every island's address by id.
	Islands() map[namespace.IslandID]string
}

// Asker asks the server at addr to answer for island (a cheap read
// routed to it); nil means it did, and so leads the island.
type Asker func(ctx context.Context, addr string, island namespace.IslandID) error

// Hints holds, by island, the leader the last scan found. The zero value
// is not usable: make one with New.
type Hints struct {
	ask Asker
	log *slog.Logger
	// Every bounds scans of one island (at most one per Every); Wait is
	// how long each server asked gets.
	Every, Wait time.Duration

	mu struct {
		sync.Mutex
		m     map[namespace.IslandID]*hint
		found uint64
		// seen are the addresses the map named for any island since
		// (at most maxSeen): a server that lost all its islands to a
		// crash is in no map entry when it leads again.
		seen map[string]bool
	}
}

// maxSeen bounds Hints' memory of addresses (past it, it starts over).
const maxSeen = 256

type hint struct {
	mapAddr  string // the address the map named when addr was found
	addr     string // the leader found ("": none)
	scanned  time.Time
	scanning bool
}

// New returns Hints asking servers with ask.
func New(ask Asker, log *slog.Logger) *Hints {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Hints{ask: ask, log: log, Every: DefaultEvery, Wait: DefaultWait}
	h.mu.m = map[namespace.IslandID]*hint{}
	h.mu.seen = map[string]bool{}
	return h
}

// Found returns how many scans found a leader.
func (h *Hints) Found() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.found
}

// Addr returns where island id's requests go when the map names mapAddr:
// the leader a scan found while the map named the same address, or
// mapAddr.
func (h *Hints) Addr(id namespace.IslandID, mapAddr string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seeLocked(mapAddr)
	if x := h.mu.m[id]; x != nil && x.addr != "" && x.mapAddr == mapAddr {
		return x.addr
	}
	return mapAddr
}

func (h *Hints) seeLocked(addr string) {
	if addr == "" || h.mu.seen[addr] {
		return
	}
	if len(h.mu.seen) >= maxSeen {
		clear(h.mu.seen)
	}
	h.mu.seen[addr] = true
}

// Unavailable handles an "unavailable" answer (or none) from island id
// at addr. It forgets a leader found at addr, refreshes m and, if the
// map still names addr (or, addr being a scan's find, the address it
// stood in for), scans the servers of m's other islands for id's leader.
// current returns the address the map names for id now (ok false: the
// map gives the caller's request to no island, or to another one). It
// reports whether a leader is known elsewhere: the caller's next attempt
// goes there (Addr).
func (h *Hints) Unavailable(ctx context.Context, m Map, id namespace.IslandID, addr string, current func() (string, bool)) bool {
	stale := addr
	h.mu.Lock()
	if x := h.mu.m[id]; x != nil && x.addr == addr {
		x.addr, stale = "", x.mapAddr
	}
	h.mu.Unlock()
	if err := m.Refresh(ctx); err != nil {
		h.log.Debug("leaderhint: map refresh failed", "err", err)
	}
	if mapAddr, ok := current(); !ok || mapAddr != stale {
		return false // a new registration (or owner): requests go to it
	}
	return h.find(ctx, m, id, stale)
}

// find scans for island id's leader, the map naming mapAddr, unless a
// scan ran within Every or runs now, and reports whether a leader is
// known elsewhere.
func (h *Hints) find(ctx context.Context, m Map, id namespace.IslandID, mapAddr string) bool {
	h.mu.Lock()
	x := h.mu.m[id]
	if x == nil {
		x = &hint{}
		h.mu.m[id] = x
	}
	if x.scanning || time.Since(x.scanned) < h.Every {
		known := x.addr != "" && x.mapAddr == mapAddr
		h.mu.Unlock()
		return known
	}
	x.scanning = true
	for _, a := range m.Islands() {
		h.seeLocked(a)
	}
	var addrs []string
	for a := range h.mu.seen {
		if a != mapAddr {
			addrs = append(addrs, a)
		}
	}
	h.mu.Unlock()

	found := ""
	if len(addrs) > 0 {
		sctx, cancel := context.WithTimeout(ctx, h.Wait)
		answers := make(chan string, len(addrs))
		var wg sync.WaitGroup
		for _, a := range addrs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if h.ask(sctx, a, id) == nil {
					answers <- a
				}
			}()
		}
		go func() {
			wg.Wait()
			close(answers)
		}()
		for a := range answers { // until every asker is done
			if found == "" {
				found = a
				cancel() // the others need not wait
			}
		}
		cancel()
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	x.scanning, x.scanned = false, time.Now()
	x.addr, x.mapAddr = found, mapAddr
	if found == "" {
		return false
	}
	h.mu.found++
	h.log.Info("leaderhint: island led at an address the map does not name (its leader could not register: managers away?)", "island", id, "map", mapAddr, "leader", found)
	return true
}
