package test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/fsck"
	"github.com/atoll-fs/atoll/internal/layout"
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
