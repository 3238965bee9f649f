package test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cleaner"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/fsck"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/wire"
)

// clusterMap describes an in-process fsCluster as a cluster map.
func (fc *fsCluster) clusterMap() *cluster.Map {
	m := &cluster.Map{Epoch: 1, Formatted: true}
	for _, s := range fc.storage {
		m.Storage = append(m.Storage, cluster.Storage{Slot: s.slot, Addr: s.addr, State: cluster.StateUp})
	}
	for _, is := range fc.islands {
		m.Islands = append(m.Islands, cluster.Island{ID: uint32(is.ID()), Addr: is.Addr(), State: cluster.StateUp})
	}
	return m
}

func TestClusterFsck(t *testing.T) {
	fc := startFSCluster(t, 5, 3)
	fs := fc.newFS(t)
	ctx := context.Background()
	if _, err := fs.MkdirAll(ctx, root, "/x/y/z", 0o755); err != nil {
		t.Fatal(err)
	}
	data := randBytes(newRand(30), 3<<20)
	if err := fs.WriteFile(ctx, root, "/x/y/big", data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteFile(ctx, root, "/x/small", []byte("inline"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := fsck.Run(ctx, fc.clusterMap(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.StripesChecked == 0 || rep.Namespace.Inodes < 6 {
		t.Fatalf("fresh cluster not clean: %+v problems %v", rep, rep.Problems())
	}
	// Delete every fragment of the big file's first stripe: fsck must say so.
	var ptr layout.Pointer
	found := false
	for _, s := range fc.storage {
		infos, err := s.srv.Store().ListAll(ctx, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			if !found {
				ptr.Stripe = in.ID.Stripe()
				found = true
			}
			if in.ID.Stripe() == ptr.Stripe {
				if err := s.srv.Store().Delete(ctx, in.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	rep, err = fsck.Run(ctx, fc.clusterMap(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Clean() || len(rep.MissingStripes) != 1 || rep.MissingStripes[0] != ptr.Stripe {
		t.Fatalf("missing stripe not reported: %v", rep.Problems())
	}
	if !strings.Contains(strings.Join(rep.Problems(), "\n"), ptr.Stripe.String()) {
		t.Fatalf("problem text does not name the stripe: %v", rep.Problems())
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

// fsck on a serving cluster: the cleaner moves a file's blocks to a new
// stripe and deletes the old one between fsck's namespace pass (which saw
// the old stripe referenced) and its storage listing (which no longer
// finds it). Nothing is wrong, and fsck must not say otherwise; a stripe
// deleted while still referenced is still reported (TestClusterFsck).
// The re-check asks the islands of the current map: with a map that is
// out of date it refreshes it, and without a way to it says it could not
// ask rather than call the stripe gone.
func TestClusterFsckWhileTheCleanerMovesBlocks(t *testing.T) {
	fc := startFSCluster(t, 5, 3)
	fs := fc.newFS(t)
	ctx := context.Background()
	for round, tc := range []struct {
		name    string
		epoch   uint64 // of the map fsck starts with (the islands have 1)
		refresh bool
		clean   bool
	}{
		{"current map", 1, false, true},
		{"stale map, refreshed", 0, true, true},
		{"stale map, no refresh", 0, false, false},
	} {
		name := fmt.Sprintf("/moved%d", round)
		data := randBytes(newRand(31+uint64(round)), 900<<10)
		if err := fs.WriteFile(ctx, root, name, data, 0o644); err != nil {
			t.Fatal(err)
		}
		set := faults.New()
		var moved cleaner.Report
		set.Enable(fsck.FailAfterNamespace, faults.Action{Kind: faults.Call, Call: func(string) error {
			c := newCleaner(t, fs, func(c *cleaner.Config) { c.MaxLive = 1 })
			var err error
			moved, err = c.Pass(ctx, cleaner.PassOptions{Copy: true})
			return err
		}})
		m := fc.clusterMap()
		m.Epoch = tc.epoch
		refreshed := 0
		ck := fsck.Checker{Key: testKey, Faults: set}
		if tc.refresh {
			ck.Refresh = func(context.Context) (*cluster.Map, error) { refreshed++; return fc.clusterMap(), nil }
		}
		rep, err := ck.Run(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if moved.MovedBlocks == 0 || moved.DeletedStripes == 0 {
			t.Fatalf("%s: the cleaner moved nothing between the passes: %+v", tc.name, moved)
		}
		switch {
		case tc.clean && (!rep.Clean() || rep.GoneDuringCheck != moved.DeletedStripes):
			t.Fatalf("%s: fsck while the cleaner moved %d blocks and deleted %d stripes: clean %v, gone during check %d, problems %v",
				tc.name, moved.MovedBlocks, moved.DeletedStripes, rep.Clean(), rep.GoneDuringCheck, rep.Problems())
		case !tc.clean && (rep.Clean() || len(rep.Unreachable) == 0 || rep.GoneDuringCheck != 0):
			t.Fatalf("%s: a stripe no island could be asked about counted as gone: clean %v, unreachable %v, gone %d",
				tc.name, rep.Clean(), rep.Unreachable, rep.GoneDuringCheck)
		case tc.refresh && refreshed == 0:
			t.Fatalf("%s: the map was never refreshed", tc.name)
		}
		got, err := fc.newFS(t).ReadFile(ctx, root, name)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: read after the move: %v, equal %v", tc.name, err, bytes.Equal(got, data))
		}
	}
}

// fsck started while an island is between leaders (just elected and
// still opening its island, or failing over) waits for it as clients do,
// rather than failing the whole check: the README tour's `atoll fsck`
// once failed so right after `atoll dev` came up. Here a front server
// answers the island's first requests as a replica with no serving
// leader would, then relays to the island.
func TestClusterFsckWaitsForAnIslandBetweenLeaders(t *testing.T) {
	fc := startFSCluster(t, 5, 2)
	fs := fc.newFS(t)
	ctx := context.Background()
	if err := fs.WriteFile(ctx, root, "/f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := fc.clusterMap()
	target := m.Islands[0].Addr
	pool := wire.NewPool(wire.ClientConfig{Key: testKey}, 1)
	defer pool.Close()
	var refused atomic.Int32
	verifier, err := auth.NewVerifier(testKey)
	if err != nil {
		t.Fatal(err)
	}
	front, err := wire.NewServer(wire.ServerConfig{Auth: verifier, ErrorCode: metawire.StatusOf,
		Handler: func(ctx context.Context, req *wire.Request) (wire.Response, error) {
			if refused.Add(1) <= 3 {
				return wire.Response{}, fmt.Errorf("%w: island %d is not led by this server", metawire.ErrUnavailable, req.Route)
			}
			reply, err := pool.CallRoute(ctx, target, req.Route, req.ReqID, req.Op, req.Epoch, req.Msg, req.Payload, nil)
			if err != nil {
				return wire.Response{}, metawire.RemoteErr(err)
			}
			return wire.Response{Msg: reply.Msg, Payload: reply.Payload}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go front.Serve(sctx, ln)
	m.Islands[0].Addr = ln.Addr().String()

	rep, err := fsck.Run(ctx, m, testKey)
	if err != nil {
		t.Fatalf("fsck failed on an island between leaders: %v", err)
	}
	if !rep.Clean() || rep.Namespace.Inodes < 2 || refused.Load() <= 3 {
		t.Fatalf("report %+v problems %v (front answered %d)", rep, rep.Problems(), refused.Load())
	}
}
