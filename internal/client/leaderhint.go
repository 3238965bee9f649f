package client

import (
	"context"
	"sync"
	"time"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Finding an island's leader the map does not name. A replicated
// island's new leader registers the island at its own address with the
// managers, and clients find it through the map. While the managers are
// away (a lost quorum, a restart) it cannot register: the map keeps
// naming the former leader, which answers "unavailable" or nothing, and
// every request to the island would fail until the managers return.
//
// So when the address the map names for an island answers
// "unavailable" and a refreshed map names the same one, the client asks
// the other island servers it knows (the addresses the map gives the
// other islands: a server serves every island it leads on one address)
// whether they lead the island (an OpStatFS routed to it), and sends the
// island's requests to the one that answers until the map names another
// address or that one answers "unavailable" in turn. A server answers
// for an island only while it leads it, in the term it opened it in
// (internal/metaserver), so a hint may go stale but never sends a
// request to a server that would serve it wrongly. Scans are bounded:
// one per island per scanEvery, each server given scanWait.

const (
	scanEvery = time.Second
	scanWait  = time.Second
)

// islandLister is what a scan needs of the map beyond MapView: every
// island's address (cluster.View and StaticMapView have it).
type islandLister interface {
	Islands() map[namespace.IslandID]string
}

// leaderHints holds, by island, the leader found by the last scan.
type leaderHints struct {
	mu sync.Mutex
	m  map[namespace.IslandID]*leaderHint
	// found counts the scans that found a leader (LeaderHints).
	found uint64
}

type leaderHint struct {
	mapAddr  string // the address the map named when addr was found
	addr     string // the leader found ("": none)
	scanned  time.Time
	scanning bool
}

// LeaderHints returns how many scans found an island's leader at an
// address the map did not name.
func (f *FS) LeaderHints() uint64 {
	f.hints.mu.Lock()
	defer f.hints.mu.Unlock()
	return f.hints.found
}

// islandFor is MapView.IslandFor with a leader found by a scan in place
// of the address the map still names.
func (f *FS) islandFor(bucket uint32) (namespace.IslandID, string, bool) {
	id, addr, ok := f.cfg.Map.IslandFor(bucket)
	if !ok {
		return id, addr, ok
	}
	f.hints.mu.Lock()
	defer f.hints.mu.Unlock()
	if h := f.hints.m[id]; h != nil && h.addr != "" && h.mapAddr == addr {
		return id, h.addr, true
	}
	return id, addr, true
}

// dropHint forgets island id's leader if it is addr, which has just
// answered "unavailable", and returns the address the map named in its
// place ("" if addr was no hint).
func (f *FS) dropHint(id namespace.IslandID, addr string) string {
	f.hints.mu.Lock()
	defer f.hints.mu.Unlock()
	if h := f.hints.m[id]; h != nil && h.addr == addr {
		h.addr = ""
		return h.mapAddr
	}
	return ""
}

// unavailableAt handles an "unavailable" answer from island id at addr
// (owning bucket): it refreshes the map and, if the map still names addr
// (or, addr being a scan's find, the address it stood in for), scans for
// the island's leader. It reports whether a leader is known elsewhere.
func (f *FS) unavailableAt(ctx context.Context, id namespace.IslandID, addr string, bucket uint32) bool {
	stale := addr
	if m := f.dropHint(id, addr); m != "" {
		stale = m
	}
	f.refreshMap(ctx)
	if now, mapAddr, ok := f.cfg.Map.IslandFor(bucket); !ok || now != id || mapAddr != stale {
		return false // a new registration (or owner): requests go to it
	}
	return f.findLeader(ctx, id, bucket)
}

// findLeader scans for island id's leader (owning bucket) unless a scan
// ran within scanEvery or runs now, and reports whether a leader is
// known at an address other than the one the map names.
func (f *FS) findLeader(ctx context.Context, id namespace.IslandID, bucket uint32) bool {
	lister, ok := f.cfg.Map.(islandLister)
	if !ok {
		return false
	}
	now, mapAddr, ok := f.cfg.Map.IslandFor(bucket)
	if !ok || now != id {
		return false // the bucket moved: requests go to its new island
	}
	f.hints.mu.Lock()
	if f.hints.m == nil {
		f.hints.m = map[namespace.IslandID]*leaderHint{}
	}
	h := f.hints.m[id]
	if h == nil {
		h = &leaderHint{}
		f.hints.m[id] = h
	}
	if h.scanning || time.Since(h.scanned) < scanEvery {
		known := h.addr != "" && h.mapAddr == mapAddr
		f.hints.mu.Unlock()
		return known
	}
	h.scanning = true
	f.hints.mu.Unlock()

	seen := map[string]bool{mapAddr: true}
	var addrs []string
	for _, a := range lister.Islands() {
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	found := ""
	if len(addrs) > 0 {
		sctx, cancel := context.WithTimeout(ctx, scanWait)
		answers := make(chan string, len(addrs))
		var wg sync.WaitGroup
		for _, a := range addrs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := f.callOnce(sctx, a, id, wire.ReqID{}, metawire.OpStatFS, metawire.Marshal(&metawire.Empty{}))
				// Only an answer counts: an island server that is not
				// the leader says "unavailable", an unreplicated island
				// "wrong island".
				if err == nil {
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

	f.hints.mu.Lock()
	defer f.hints.mu.Unlock()
	h.scanning, h.scanned = false, time.Now()
	h.addr, h.mapAddr = found, mapAddr
	if found == "" {
		return false
	}
	f.hints.found++
	f.log.Info("client: island led at an address the map does not name (its leader could not register: managers away?)", "island", id, "map", mapAddr, "leader", found)
	return true
}
