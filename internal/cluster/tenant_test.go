package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
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
	ca := NewClient([]string{n.Addr()}, alice, testLogger(t))
	defer ca.Close()
	cb := NewClient([]string{n.Addr()}, bob, testLogger(t))
	defer cb.Close()
	admin := NewClient([]string{n.Addr()}, ck, testLogger(t))
	defer admin.Close()

	long := strings.Repeat("h", 190) + ":1" // addresses as long as allowed
	var refused error
	registered := 0
	for i := range MaxGatewaysPerKey + 10 {
		if _, err := ca.Register(ctx, KindGateway, uint32(1000+i), long, i); err != nil {
			refused = err
			break
		}
		registered++
	}
	if registered != MaxGatewaysPerKey || !errors.Is(refused, ErrLimit) {
		t.Fatalf("alice registered %d gateways, then %v; want %d then ErrLimit", registered, refused, MaxGatewaysPerKey)
	}
	// Still fetchable, bounded, and owned.
	m, err := cb.Map(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sz := len(EncodeMap(m)); sz > MaxMapBytes {
		t.Fatalf("map is %d bytes", sz)
	}
	if v, ok := m.Member(MemberKey{KindGateway, 1000}); !ok || len(m.Gateways) != MaxGatewaysPerKey || m.Gateways[0].Owner != "alice" {
		t.Fatalf("gateways %d, first %+v %v", len(m.Gateways), v, ok)
	}
	// Another key has its own quota, and cannot take alice's entries.
	if _, err := cb.Register(ctx, KindGateway, 1000, "127.0.0.1:2", 1); !errors.Is(err, ErrLimit) {
		t.Fatalf("bob over alice's gateway: %v, want ErrLimit", err)
	}
	if _, err := cb.Register(ctx, KindGateway, 5000, "127.0.0.1:2", 1); err != nil {
		t.Fatalf("bob's own gateway: %v", err)
	}
	// Nor pose as a storage server, nor remove anything.
	if _, err := cb.Register(ctx, KindStorage, 1, "127.0.0.1:2", 1); !errors.Is(err, auth.ErrForbidden) {
		t.Fatalf("bob as storage: %v", err)
	}
	if _, err := cb.Remove(ctx, KindGateway, 1000); !errors.Is(err, auth.ErrForbidden) {
		t.Fatalf("bob removing: %v", err)
	}
	// The admin removes one; storage and islands are not removed this way.
	if _, err := admin.Remove(ctx, KindGateway, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Remove(ctx, KindGateway, 1000); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("second remove: %v", err)
	}
	if _, err := admin.Register(ctx, KindStorage, 3, "127.0.0.1:3", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Remove(ctx, KindStorage, 3); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("removing storage: %v", err)
	}
	// alice has room for one again.
	if _, err := ca.Register(ctx, KindGateway, 999, "127.0.0.1:4", 1); err != nil {
		t.Fatalf("alice after a removal: %v", err)
	}
	// Nobody heartbeats: every gateway expires, the storage server stays.
	waitFor(t, 60*time.Second, "gateways expired", func() bool { return len(n.Map().Gateways) == 0 })
	if _, ok := n.Map().StorageSlot(3); !ok {
		t.Fatal("storage slot 3 expired with the gateways")
	}
}

// TestMapOwnersRoundTrip: the owners' tail survives encoding, alone and
// with the other tails absent.
func TestMapOwnersRoundTrip(t *testing.T) {
	m := &Map{Epoch: 3, Gateways: []Gateway{{ID: 1, Addr: "a:1", State: StateUp}, {ID: 2, Addr: "b:1", State: StateUp, Owner: "alice"}}}
	got, err := DecodeMap(EncodeMap(m))
	if err != nil {
		t.Fatal(err)
	}
	if got.Gateways[0].Owner != "" || got.Gateways[1].Owner != "alice" {
		t.Fatalf("owners %+v", got.Gateways)
	}
	m.Gateways[1].Owner = ""
	if b := EncodeMap(m); len(b) >= len(EncodeMap(got)) {
		t.Fatal("a map without owners carries the owners' tail")
	}
	// Revocations alone (every earlier tail empty), and applied twice.
	if _, err := m.apply(&command{Type: cmdRevoke, Owner: "bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.apply(&command{Type: cmdRevoke, Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.apply(&command{Type: cmdRevoke, Owner: "bob"}); err != nil {
		t.Fatal(err)
	}
	got, err = DecodeMap(EncodeMap(m))
	if err != nil {
		t.Fatal(err)
	}
	if r := got.Revocations(); len(got.Revoked) != 2 || r["alice"] != 1 || r["bob"] != 2 || got.Revoked[0].Name != "alice" {
		t.Fatalf("revocations %+v", got.Revoked)
	}
	c, err := decodeCommand((&command{Type: cmdRevoke, Owner: "bob"}).encode())
	if err != nil || c.Owner != "bob" {
		t.Fatalf("revoke command round trip: %+v %v", c, err)
	}
}
