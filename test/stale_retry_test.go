package test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// laggingView is a map view whose epoch stays behind the islands' (0:
// refused as stale) until a time, as a client's map does while a table
// entry's move that lost an island to a crash reaches the manager.
type laggingView struct {
	*client.StaticMapView
	until atomic.Pointer[time.Time]
}

func (v *laggingView) Epoch() uint64 {
	if u := v.until.Load(); u != nil && time.Now().Before(*u) {
		return 0
	}
	return v.StaticMapView.Epoch()
}

// A request the islands refuse as stale (or busy, or for another island)
// keeps being retried for IslandWait, not only 12 times: 12 quick
// attempts took 3 s and surfaced EAGAIN to a FUSE user while a move's map
// caught up (TestIslandMoveKill9 in CI).
func TestStaleAnswersRetriedForIslandWait(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	view := &laggingView{StaticMapView: fc.view}
	fs, err := client.NewFS(client.FSConfig{Data: newClient(t, fc.storage, nil), Map: view, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	const lag = 4 * time.Second // past 12 attempts, within DefaultIslandWait
	until := time.Now().Add(lag)
	view.until.Store(&until)
	start := time.Now()
	_, err = fs.GetAttrFresh(context.Background(), root, uint64(namespace.RootIno))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("getattr while the map lagged %v: %v after %v", lag, err, took.Round(time.Millisecond))
	}
	if took < lag-100*time.Millisecond {
		t.Fatalf("getattr answered after %v, before the map caught up (%v): the lag was not exercised", took, lag)
	}
}
