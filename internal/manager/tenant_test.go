package manager

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
)

// TestTenantCannotGrowTheMap is the attack of issue #43 (1): a `user` key
// registering fake gateways without end grew the map past the frame limit
// and every map fetch failed for good. Now a key gets MaxGatewaysPerKey
// entries, cannot take over another key's, cannot remove any, silent ones
// expire, and an admin removes one at once.
func TestTenantCannotGrowTheMap(t *testing.T) {
	ck, err := auth.NewClusterKey()
	if err != nil {
		t.Fatal(err)
	}
	alice, _ := ck.Derive("alice", auth.CapRead|auth.CapWrite)
	bob, _ := ck.Derive("bob", auth.CapRead|auth.CapWrite)
	cfg := testConfig(t, t.TempDir())
	cfg.Key = ck
	cfg.GatewayExpiry = 3 * time.Second
	n := startNode(t, cfg)
	waitLeader(t, n)
	ctx := ctxT(t, 60*time.Second)
	ca := cluster.NewClient([]string{n.Addr()}, alice, testLogger(t))
	defer ca.Close()
	cb := cluster.NewClient([]string{n.Addr()}, bob, testLogger(t))
	defer cb.Close()
	admin := cluster.NewClient([]string{n.Addr()}, ck, testLogger(t))
	defer admin.Close()

	long := strings.Repeat("h", 190) + ":1" // addresses as long as allowed
	var refused error
	registered := 0
	for i := range cluster.MaxGatewaysPerKey + 10 {
		if _, err := ca.Register(ctx, cluster.KindGateway, uint32(1000+i), long, i); err != nil {
			refused = err
			break
		}
		registered++
	}
	if registered != cluster.MaxGatewaysPerKey || !errors.Is(refused, cluster.ErrLimit) {
		t.Fatalf("alice registered %d gateways, then %v; want %d then ErrLimit", registered, refused, cluster.MaxGatewaysPerKey)
	}
	// Still fetchable, bounded, and owned.
	m, err := cb.Map(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sz := len(cluster.EncodeMap(m)); sz > cluster.MaxMapBytes {
		t.Fatalf("map is %d bytes", sz)
	}
	if v, ok := m.Member(cluster.MemberKey{Kind: cluster.KindGateway, ID: 1000}); !ok || len(m.Gateways) != cluster.MaxGatewaysPerKey || m.Gateways[0].Owner != "alice" {
		t.Fatalf("gateways %d, first %+v %v", len(m.Gateways), v, ok)
	}
	// Another key has its own quota, and cannot take alice's entries.
	if _, err := cb.Register(ctx, cluster.KindGateway, 1000, "127.0.0.1:2", 1); !errors.Is(err, cluster.ErrLimit) {
		t.Fatalf("bob over alice's gateway: %v, want ErrLimit", err)
	}
	if _, err := cb.Register(ctx, cluster.KindGateway, 5000, "127.0.0.1:2", 1); err != nil {
		t.Fatalf("bob's own gateway: %v", err)
	}
	// Nor pose as a storage server, nor remove anything.
	if _, err := cb.Register(ctx, cluster.KindStorage, 1, "127.0.0.1:2", 1); !errors.Is(err, auth.ErrForbidden) {
		t.Fatalf("bob as storage: %v", err)
	}
	if _, err := cb.Remove(ctx, cluster.KindGateway, 1000); !errors.Is(err, auth.ErrForbidden) {
		t.Fatalf("bob removing: %v", err)
	}
	// The admin removes one; storage and islands are not removed this way.
	if _, err := admin.Remove(ctx, cluster.KindGateway, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Remove(ctx, cluster.KindGateway, 1000); !errors.Is(err, cluster.ErrUnknownMember) {
		t.Fatalf("second remove: %v", err)
	}
	if _, err := admin.Register(ctx, cluster.KindStorage, 3, "127.0.0.1:3", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Remove(ctx, cluster.KindStorage, 3); !errors.Is(err, cluster.ErrBadRequest) {
		t.Fatalf("removing storage: %v", err)
	}
	// alice has room for one again.
	if _, err := ca.Register(ctx, cluster.KindGateway, 999, "127.0.0.1:4", 1); err != nil {
		t.Fatalf("alice after a removal: %v", err)
	}
	// Nobody heartbeats: every gateway expires, the storage server stays.
	waitFor(t, 60*time.Second, "gateways expired", func() bool { return len(n.Map().Gateways) == 0 })
	if _, ok := n.Map().StorageSlot(3); !ok {
		t.Fatal("storage slot 3 expired with the gateways")
	}
}
