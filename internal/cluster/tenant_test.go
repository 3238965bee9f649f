package cluster

import (
	"testing"
)

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
	if _, err := m.Apply(&Command{Type: CmdRevoke, Owner: "bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(&Command{Type: CmdRevoke, Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(&Command{Type: CmdRevoke, Owner: "bob"}); err != nil {
		t.Fatal(err)
	}
	got, err = DecodeMap(EncodeMap(m))
	if err != nil {
		t.Fatal(err)
	}
	if r := got.Revocations(); len(got.Revoked) != 2 || r["alice"] != 1 || r["bob"] != 2 || got.Revoked[0].Name != "alice" {
		t.Fatalf("revocations %+v", got.Revoked)
	}
	c, err := DecodeCommand((&Command{Type: CmdRevoke, Owner: "bob"}).Encode())
	if err != nil || c.Owner != "bob" {
		t.Fatalf("revoke command round trip: %+v %v", c, err)
	}
}
