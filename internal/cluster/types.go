package cluster

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// State is a member's state in the cluster map.
type State uint8

// Member states. The zero value is invalid and never appears in a map.
const (
	StateUp       State = 1 // serving
	StateDown     State = 2 // missed heartbeats for DownAfter (set by the monitor)
	StateDraining State = 3 // set by an operator: serving, but data is moved off it
	StateOut      State = 4 // set by an operator: removed, its data is rebuilt elsewhere
)

func (s State) String() string {
	switch s {
	case StateUp:
		return "up"
	case StateDown:
		return "down"
	case StateDraining:
		return "draining"
	case StateOut:
		return "out"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool { return s >= StateUp && s <= StateOut }

// ParseState parses "up", "down", "draining" (or "drain") and "out".
func ParseState(s string) (State, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "up":
		return StateUp, nil
	case "down":
		return StateDown, nil
	case "draining", "drain":
		return StateDraining, nil
	case "out":
		return StateOut, nil
	}
	return 0, fmt.Errorf("%w: unknown state %q (want up, draining or out)", ErrBadRequest, s)
}

// Kind is the role of a registered member.
type Kind uint8

// Member kinds.
const (
	KindStorage Kind = 1 // a storage server; its ID is its slot (0..65535)
	KindIsland  Kind = 2 // a metadata island
	KindGateway Kind = 3 // an NFS gateway or other client-facing member (status only)
)

func (k Kind) String() string {
	switch k {
	case KindStorage:
		return "storage"
	case KindIsland:
		return "island"
	case KindGateway:
		return "gateway"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool { return k >= KindStorage && k <= KindGateway }

// ParseKind parses "storage", "island" (or "meta") and "gateway" (or "nfs").
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "storage":
		return KindStorage, nil
	case "island", "meta":
		return KindIsland, nil
	case "gateway", "nfs":
		return KindGateway, nil
	}
	return 0, fmt.Errorf("%w: unknown member kind %q", ErrBadRequest, s)
}

// MemberKey names a member: its kind and its id (the slot for storage).
type MemberKey struct {
	Kind Kind
	ID   uint32
}

func (k MemberKey) String() string { return fmt.Sprintf("%s/%d", k.Kind, k.ID) }

// Storage is a storage slot. Slots are stable identities: a replacement
// server registers under the slot it takes over.
type Storage struct {
	Slot  uint16
	Addr  string
	State State
	PID   int
	// LastHeartbeat and the usage fields are filled in by the leader from
	// its in-memory heartbeat table; they are not replicated and do not
	// change the epoch. A map read from a follower has them zero.
	LastHeartbeat time.Time
	CapacityBytes uint64
	UsedBytes     uint64
	Degraded      uint64 // degraded stripes this server reports
}

// Island is a metadata island.
type Island struct {
	ID            uint32
	Addr          string
	State         State
	PID           int
	LastHeartbeat time.Time
}

// Gateway is an NFS gateway or other member registered for status only.
type Gateway struct {
	ID            uint32
	Addr          string
	State         State
	PID           int
	LastHeartbeat time.Time
	// Owner names the key that registered the gateway ("" for a member,
	// which holds the cluster key): registrations are bounded per key,
	// and no other tenant's key may take the entry over.
	Owner string
}

// ManagerNode is one manager (raft server) as recorded in the map, so a
// follower can point clients at the leader's client address and members
// learn every manager address.
type ManagerNode struct {
	RaftID     string
	RaftAddr   string
	ClientAddr string
}

// Table is the namespace's extendible hash table: entry i names the island
// that owns the buckets whose top Depth bits equal i. An unformatted
// cluster has the empty table (Depth 0, no entries).
type Table struct {
	Depth   uint8
	Entries []uint32
}

// MaxTableDepth bounds Table.Depth.
const MaxTableDepth = 16

// Owner returns the island owning a 32-bit bucket. ok is false for the
// empty table.
func (t Table) Owner(bucket uint32) (island uint32, ok bool) {
	if len(t.Entries) == 0 || len(t.Entries) != 1<<t.Depth {
		return 0, false
	}
	if t.Depth == 0 {
		return t.Entries[0], true
	}
	return t.Entries[bucket>>(32-uint(t.Depth))], true
}

// Shares counts the entries each island owns.
func (t Table) Shares() map[uint32]int {
	s := make(map[uint32]int)
	for _, e := range t.Entries {
		s[e]++
	}
	return s
}

// Clone returns a deep copy.
func (t Table) Clone() Table {
	return Table{Depth: t.Depth, Entries: slices.Clone(t.Entries)}
}

// Equal reports whether two tables are identical.
func (t Table) Equal(u Table) bool {
	return t.Depth == u.Depth && slices.Equal(t.Entries, u.Entries)
}

// InitialTable spreads 2^d entries over the islands round-robin, so each
// island owns an equal share (±1 entry) and one island's entries are
// spread over the whole bucket space. d is the smallest depth with
// 2^d >= 16*len(islands), at most MaxTableDepth. The islands are sorted
// and deduplicated first, so the result does not depend on their order.
// No islands give the empty table.
func InitialTable(islands []uint32) Table {
	ids := slices.Clone(islands)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 0 {
		return Table{}
	}
	var d uint8
	for d < MaxTableDepth && 1<<d < 16*len(ids) {
		d++
	}
	t := Table{Depth: d, Entries: make([]uint32, 1<<d)}
	for i := range t.Entries {
		t.Entries[i] = ids[i%len(ids)]
	}
	return t
}

// DefaultPolicyFor is the default redundancy policy for a cluster of n
// storage slots: ec:4+1, capped to what n slots allow (ec:(n-1)+1 for 3 and
// 4 slots, mirror:2 for 2, none for 0 or 1).
func DefaultPolicyFor(n int) string {
	switch {
	case n >= 5:
		return "ec:4+1"
	case n >= 3:
		return fmt.Sprintf("ec:%d+1", n-1)
	case n == 2:
		return "mirror:2"
	}
	return "none"
}

// Map is the cluster map. Every change a member must observe (membership,
// state, table, policy, managers) increases Epoch by exactly one per raft
// command; heartbeat times and usage statistics never do.
type Map struct {
	Epoch    uint64
	Storage  []Storage // sorted by Slot, unique
	Islands  []Island  // sorted by ID, unique
	Gateways []Gateway // sorted by ID, unique
	Managers []ManagerNode
	Table    Table
	// DefaultPolicy is the policy of files that name none (layout syntax).
	// Unless PolicyPinned, it follows DefaultPolicyFor(storage slots not out).
	DefaultPolicy string
	PolicyPinned  bool
	// Formatted is set once the namespace table exists.
	Formatted bool
	// Moves are the table entries being moved between islands.
	Moves []EntryMove
	// IslandServers are the island servers of replicated islands, and
	// Replicas where each island's replicas are to be (see ReplicaSet);
	// both empty until the first island server registers.
	IslandServers []IslandServer
	Replicas      []ReplicaSet
	// Revoked are the revoked key names, sorted by name: keys of a name
	// with a generation below Below are refused (auth.Revocations).
	Revoked []RevokedKey
}

// RevokedKey is one revoked key name and its lowest valid generation.
type RevokedKey struct {
	Name  string
	Below uint32
}

// MaxRevoked bounds the revoked key names the map lists.
const MaxRevoked = 4096

// Revocations is Revoked as auth.Revocations.Set takes it.
func (m *Map) Revocations() map[string]uint32 {
	out := make(map[string]uint32, len(m.Revoked))
	for _, r := range m.Revoked {
		out[r.Name] = r.Below
	}
	return out
}

// Clone returns a deep copy.
func (m *Map) Clone() *Map {
	c := *m
	c.Storage = slices.Clone(m.Storage)
	c.Islands = slices.Clone(m.Islands)
	c.Gateways = slices.Clone(m.Gateways)
	c.Managers = slices.Clone(m.Managers)
	c.Table = m.Table.Clone()
	c.Moves = slices.Clone(m.Moves)
	c.IslandServers = slices.Clone(m.IslandServers)
	c.Replicas = cloneSets(m.Replicas)
	c.Revoked = slices.Clone(m.Revoked)
	return &c
}

// StorageSlot returns the storage member holding slot.
func (m *Map) StorageSlot(slot uint16) (Storage, bool) {
	i, ok := slices.BinarySearchFunc(m.Storage, slot, func(s Storage, v uint16) int { return cmpInt(s.Slot, v) })
	if !ok {
		return Storage{}, false
	}
	return m.Storage[i], true
}

// Island returns the island with id.
func (m *Map) Island(id uint32) (Island, bool) {
	i, ok := slices.BinarySearchFunc(m.Islands, id, func(s Island, v uint32) int { return cmpInt(s.ID, v) })
	if !ok {
		return Island{}, false
	}
	return m.Islands[i], true
}

// Manager returns the manager with raft id.
func (m *Map) Manager(raftID string) (ManagerNode, bool) {
	for _, n := range m.Managers {
		if n.RaftID == raftID {
			return n, true
		}
	}
	return ManagerNode{}, false
}

// MemberView is the kind-independent view of one member, for listings.
type MemberView struct {
	Kind          Kind
	ID            uint32
	Addr          string
	State         State
	PID           int
	LastHeartbeat time.Time
	CapacityBytes uint64 // storage only
	UsedBytes     uint64 // storage only
	// Degraded is the stripes the member knows to miss fragments: a
	// storage server's, or a mount's or gateway's own writes (Status.Members
	// fills it for every kind from the heartbeat table).
	Degraded uint64
	// Owner is the key that registered a gateway or mount ("" for the
	// cluster key): what such a member reports is the tenant's word.
	Owner string
}

// Key returns the member's key.
func (v MemberView) Key() MemberKey { return MemberKey{v.Kind, v.ID} }

// Members lists every member: storage, then islands, then gateways.
func (m *Map) Members() []MemberView {
	out := make([]MemberView, 0, len(m.Storage)+len(m.Islands)+len(m.Gateways))
	for _, s := range m.Storage {
		out = append(out, MemberView{Kind: KindStorage, ID: uint32(s.Slot), Addr: s.Addr, State: s.State, PID: s.PID, LastHeartbeat: s.LastHeartbeat, CapacityBytes: s.CapacityBytes, UsedBytes: s.UsedBytes, Degraded: s.Degraded})
	}
	for _, s := range m.Islands {
		out = append(out, MemberView{Kind: KindIsland, ID: s.ID, Addr: s.Addr, State: s.State, PID: s.PID, LastHeartbeat: s.LastHeartbeat})
	}
	for _, s := range m.Gateways {
		out = append(out, MemberView{Kind: KindGateway, ID: s.ID, Addr: s.Addr, State: s.State, PID: s.PID, LastHeartbeat: s.LastHeartbeat, Owner: s.Owner})
	}
	return out
}

// Member returns one member's view.
func (m *Map) Member(k MemberKey) (MemberView, bool) {
	f, ok := m.fields(k)
	if !ok {
		return MemberView{}, false
	}
	v := MemberView{Kind: k.Kind, ID: k.ID, Addr: *f.addr, State: *f.state, PID: *f.pid, LastHeartbeat: *f.hb}
	if k.Kind == KindStorage {
		s, _ := m.StorageSlot(uint16(k.ID))
		v.CapacityBytes, v.UsedBytes, v.Degraded = s.CapacityBytes, s.UsedBytes, s.Degraded
	}
	return v, true
}

// memberFields points at the fields every kind of member shares.
type memberFields struct {
	addr  *string
	state *State
	pid   *int
	hb    *time.Time
}

// fields finds a member's shared fields, for in-place updates.
func (m *Map) fields(k MemberKey) (memberFields, bool) {
	switch k.Kind {
	case KindStorage:
		if k.ID > 0xFFFF {
			return memberFields{}, false
		}
		i, ok := slices.BinarySearchFunc(m.Storage, uint16(k.ID), func(s Storage, v uint16) int { return cmpInt(s.Slot, v) })
		if ok {
			s := &m.Storage[i]
			return memberFields{&s.Addr, &s.State, &s.PID, &s.LastHeartbeat}, true
		}
	case KindIsland:
		i, ok := slices.BinarySearchFunc(m.Islands, k.ID, func(s Island, v uint32) int { return cmpInt(s.ID, v) })
		if ok {
			s := &m.Islands[i]
			return memberFields{&s.Addr, &s.State, &s.PID, &s.LastHeartbeat}, true
		}
	case KindGateway:
		if i, ok := m.gatewayIndex(k.ID); ok {
			s := &m.Gateways[i]
			return memberFields{&s.Addr, &s.State, &s.PID, &s.LastHeartbeat}, true
		}
	}
	return memberFields{}, false
}

// gatewayIndex finds gateway id in the sorted Gateways: its index, or
// where it would go.
func (m *Map) gatewayIndex(id uint32) (int, bool) {
	return slices.BinarySearchFunc(m.Gateways, id, func(s Gateway, v uint32) int { return cmpInt(s.ID, v) })
}

// insert adds a new member in sorted position. The caller checked that it
// is absent and that the key is valid.
func (m *Map) insert(k MemberKey, addr string, pid int, st State) {
	switch k.Kind {
	case KindStorage:
		m.Storage = append(m.Storage, Storage{Slot: uint16(k.ID), Addr: addr, State: st, PID: pid})
		slices.SortFunc(m.Storage, func(a, b Storage) int { return cmpInt(a.Slot, b.Slot) })
	case KindIsland:
		m.Islands = append(m.Islands, Island{ID: k.ID, Addr: addr, State: st, PID: pid})
		slices.SortFunc(m.Islands, func(a, b Island) int { return cmpInt(a.ID, b.ID) })
	case KindGateway:
		m.Gateways = append(m.Gateways, Gateway{ID: k.ID, Addr: addr, State: st, PID: pid})
		slices.SortFunc(m.Gateways, func(a, b Gateway) int { return cmpInt(a.ID, b.ID) })
	}
}

// activeStorage counts storage slots that are not out.
func (m *Map) activeStorage() int {
	n := 0
	for _, s := range m.Storage {
		if s.State != StateOut {
			n++
		}
	}
	return n
}

// ManagerAddrs lists the managers' client addresses.
func (m *Map) ManagerAddrs() []string {
	var out []string
	for _, n := range m.Managers {
		if n.ClientAddr != "" {
			out = append(out, n.ClientAddr)
		}
	}
	return out
}

// SameContent reports whether two maps are equal ignoring the unreplicated
// fields (heartbeat times and usage statistics).
func (m *Map) SameContent(o *Map) bool {
	a, b := m.Clone(), o.Clone()
	a.StripLive()
	b.StripLive()
	return slices.Equal(EncodeMap(a), EncodeMap(b))
}

// StripLive zeroes the unreplicated fields.
func (m *Map) StripLive() {
	for i := range m.Storage {
		s := &m.Storage[i]
		s.LastHeartbeat, s.CapacityBytes, s.UsedBytes, s.Degraded = time.Time{}, 0, 0, 0
	}
	for i := range m.Islands {
		m.Islands[i].LastHeartbeat = time.Time{}
	}
	for i := range m.Gateways {
		m.Gateways[i].LastHeartbeat = time.Time{}
	}
}

func cmpInt[T ~uint16 | ~uint32](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
