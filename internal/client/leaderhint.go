package client

import (
	"context"

	"github.com/atoll-fs/atoll/internal/leaderhint"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// An island whose new leader could not register with the managers is
// found by asking the other island servers the map names
// (internal/leaderhint). Only maps that list every island's address
// (cluster.View, StaticMapView) allow it.

// newHints returns the FS's leader hints, nil when the map cannot list
// the islands.
func (f *FS) newHints() *leaderhint.Hints {
	if _, ok := f.cfg.Map.(leaderhint.Map); !ok {
		return nil
	}
	return leaderhint.New(func(ctx context.Context, addr string, id namespace.IslandID) error {
		_, err := f.callOnce(ctx, addr, id, wire.ReqID{}, metawire.OpStatFS, metawire.Marshal(&metawire.Empty{}))
		return err
	}, f.log)
}

// LeaderHints returns how many scans found an island's leader at an
// address the map did not name.
func (f *FS) LeaderHints() uint64 {
	if f.hints == nil {
		return 0
	}
	return f.hints.Found()
}

// islandFor is MapView.IslandFor with a leader found by a scan in place
// of the address the map still names.
func (f *FS) islandFor(bucket uint32) (namespace.IslandID, string, bool) {
	id, addr, ok := f.cfg.Map.IslandFor(bucket)
	if ok && f.hints != nil {
		addr = f.hints.Addr(id, addr)
	}
	return id, addr, ok
}

// unavailableAt handles an "unavailable" answer from island id at addr
// (owning bucket): it refreshes the map and, if the map still names
// addr, looks for the island's leader elsewhere. It reports whether one
// is known now.
func (f *FS) unavailableAt(ctx context.Context, id namespace.IslandID, addr string, bucket uint32) bool {
	if f.hints == nil {
		f.refreshMap(ctx)
		return false
	}
	return f.hints.Unavailable(ctx, f.cfg.Map.(leaderhint.Map), id, addr, func() (string, bool) {
		now, a, ok := f.cfg.Map.IslandFor(bucket)
		return a, ok && now == id
	})
}
