package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Islands given up on. A request that waited IslandWait for an island
// answering "unavailable" (or not answering: a partition, 2 of 3
// replicas down) fails with ErrUnavailable; each further request to that
// island would wait as long again (the kernel sends several per stat:
// a stat cut off from its island took about a minute). So the island is
// marked unreachable: requests to it fail at once, and one goroutine
// probes it (OpStatFS, every probeEvery, each given probeWait) until it
// answers, which clears the mark. A failover does not mark: its requests
// are answered within IslandWait. Lease polls are not failed at once:
// they retry on their own with a backoff, and FastFails counts only the
// requests someone waits for.

const (
	probeEvery = time.Second
	probeWait  = 2 * time.Second
)

// unreachable holds the islands given up on.
type unreachable struct {
	mu sync.Mutex
	m  map[namespace.IslandID]time.Time // since when
	// fastFails counts the requests failed at once (FastFails).
	fastFails uint64
	closed    bool // FS.Close: no new prober
	probers   sync.WaitGroup
}

// FastFails returns how many requests failed at once because their
// island was given up on and no probe had reached it since.
func (f *FS) FastFails() uint64 {
	f.down.mu.Lock()
	defer f.down.mu.Unlock()
	return f.down.fastFails
}

// givenUp returns the error for a request to island id when it is
// marked unreachable (nil otherwise), counting it.
func (f *FS) givenUp(id namespace.IslandID) error {
	f.down.mu.Lock()
	defer f.down.mu.Unlock()
	since, ok := f.down.m[id]
	if !ok {
		return nil
	}
	f.down.fastFails++
	return fmt.Errorf("client: island %d unreachable (a request gave up on it %v ago; probing): %w", id, time.Since(since).Round(time.Millisecond), metawire.ErrUnavailable)
}

// giveUp marks island id (owning bucket) unreachable and starts its
// prober, unless the FS closed or the island is marked already.
func (f *FS) giveUp(id namespace.IslandID, bucket uint32) {
	f.down.mu.Lock()
	defer f.down.mu.Unlock()
	if _, ok := f.down.m[id]; ok || f.down.closed {
		return
	}
	if f.down.m == nil {
		f.down.m = map[namespace.IslandID]time.Time{}
	}
	f.down.m[id] = time.Now()
	f.log.Warn("client: island unreachable: failing its requests at once until it answers", "island", id)
	f.down.probers.Add(1)
	go func() {
		defer f.down.probers.Done()
		f.probe(id, bucket)
	}()
}

// stopProbing ends the probers (FS.Close, after pollCtx is done).
func (f *FS) stopProbing() {
	f.down.mu.Lock()
	f.down.closed = true
	f.down.mu.Unlock()
	f.down.probers.Wait()
}

// probe asks island id, through the island the map names for bucket,
// until it answers or the FS closes, then clears the mark.
func (f *FS) probe(id namespace.IslandID, bucket uint32) {
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		select {
		case <-f.pollCtx.Done():
			return
		case <-tick.C:
		}
		if f.reachable(id, bucket) {
			f.down.mu.Lock()
			delete(f.down.m, id)
			f.down.mu.Unlock()
			f.log.Info("client: island answers again", "island", id)
			return
		}
	}
}

// reachable reports whether one probe of island id got an answer (any
// answer but "unavailable"), or the map gave bucket to another island
// (requests go there now).
func (f *FS) reachable(id namespace.IslandID, bucket uint32) bool {
	now, addr, ok := f.islandFor(bucket)
	if !ok {
		return false
	}
	if now != id {
		return true
	}
	ctx, cancel := context.WithTimeout(f.pollCtx, probeWait)
	defer cancel()
	_, err := f.callOnce(ctx, addr, id, wire.ReqID{}, metawire.OpStatFS, metawire.Marshal(&metawire.Empty{}))
	if !errors.Is(err, metawire.ErrUnavailable) {
		return true // it answered (a stale epoch, say: requests refresh the map)
	}
	// A leader the map does not name (leaderhint.go) counts: requests
	// go to it.
	return f.unavailableAt(ctx, id, addr, bucket)
}
