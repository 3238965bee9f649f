package cluster

import (
	"context"
	"fmt"
	"slices"

	"github.com/atoll-fs/atoll/internal/wire"
)

// IslandServer is an island server (`atoll meta --server-id`) as the map
// records it: the raft address its replicas are reached at. Out servers
// (removed by an operator) are given no replica.
type IslandServer struct {
	ID       uint32 `json:"id"`
	RaftAddr string `json:"raft_addr"`
	Out      bool   `json:"out,omitempty"`
}

// ReplicaSet names the island servers that are to hold an island's
// replicas; the first is its preferred leader. The island's leader makes
// its raft configuration follow it (internal/metaserver: add the new
// replicas as non-voters, promote them once caught up, then remove the
// others), and servers open or drop their replicas to match.
type ReplicaSet struct {
	Island  uint32   `json:"island"`
	Servers []uint32 `json:"servers"`
	// Origin is the set the group was formed with (its raft bootstrap
	// voters): a server bootstraps its replica only while Servers is
	// still that set (a cluster's or a new island's first start, or a
	// lost disk before any move); any other replica joins and is added
	// by the leader.
	Origin []uint32 `json:"origin"`
}

// MaxReplicaSets bounds the islands a placement names (island ids are at
// most 1024); maxSetSize the replicas of one island.
const (
	MaxReplicaSets = 1 << 10
	maxSetSize     = 5
	MaxServers     = 1 << 12
)

// ReplicaSet returns island's placement, if the map records one.
func (m *Map) ReplicaSet(island uint32) ([]uint32, bool) {
	s, ok := m.Placement(island)
	return s.Servers, ok
}

// Placement returns island's replica set record (servers and origin).
func (m *Map) Placement(island uint32) (ReplicaSet, bool) {
	i, ok := slices.BinarySearchFunc(m.Replicas, island, func(s ReplicaSet, v uint32) int { return cmpInt(s.Island, v) })
	if !ok {
		return ReplicaSet{}, false
	}
	return m.Replicas[i], true
}

// PlanNewIsland places a new island of replicas replicas on the eligible
// island servers (registered, not out) holding fewest replicas, the one
// holding fewest preferred leaders first; its id is one above every
// island the map knows.
func PlanNewIsland(m *Map, replicas int) (ReplicaSet, error) {
	if len(m.Replicas) == 0 {
		return ReplicaSet{}, fmt.Errorf("%w: the map records no replica placement (island servers register it when they start)", ErrBadRequest)
	}
	if replicas != 1 && replicas != 3 && replicas != 5 {
		return ReplicaSet{}, fmt.Errorf("%w: %d replicas (want 1, 3 or 5)", ErrBadRequest, replicas)
	}
	load, lead := map[uint32]int{}, map[uint32]int{}
	eligible := m.eligibleServers(nil)
	if len(eligible) < replicas {
		return ReplicaSet{}, fmt.Errorf("%w: %d replicas need as many island servers (have %d)", ErrBadRequest, replicas, len(eligible))
	}
	id := uint32(0)
	for _, s := range m.Replicas {
		id = max(id, s.Island)
		lead[s.Servers[0]]++
		for _, v := range s.Servers {
			load[v]++
		}
	}
	for _, is := range m.Islands {
		id = max(id, is.ID)
	}
	if id+1 > MaxReplicaSets {
		return ReplicaSet{}, fmt.Errorf("%w: island ids exhausted", ErrBadRequest)
	}
	order := slices.Clone(eligible)
	slices.SortStableFunc(order, func(a, b uint32) int {
		if load[a] != load[b] {
			return load[a] - load[b]
		}
		return lead[a] - lead[b]
	})
	servers := order[:replicas]
	// The preferred leader: the chosen server leading fewest islands.
	best := 0
	for k, v := range servers {
		if lead[v] < lead[servers[best]] {
			best = k
		}
	}
	servers[0], servers[best] = servers[best], servers[0]
	return ReplicaSet{Island: id + 1, Servers: slices.Clone(servers), Origin: slices.Clone(servers)}, nil
}

// IslandServer returns the island server with id.
func (m *Map) IslandServer(id uint32) (IslandServer, bool) {
	i, ok := slices.BinarySearchFunc(m.IslandServers, id, func(s IslandServer, v uint32) int { return cmpInt(s.ID, v) })
	if !ok {
		return IslandServer{}, false
	}
	return m.IslandServers[i], true
}

func encodeServers(e *wire.Enc, servers []IslandServer) {
	e.Uvarint(uint64(len(servers)))
	for _, s := range servers {
		e.U32(s.ID)
		e.String(s.RaftAddr)
		e.Bool(s.Out)
	}
}

func decodeServers(d *wire.Dec) []IslandServer {
	n := d.Count(6)
	if n == 0 {
		return nil
	}
	out := make([]IslandServer, n)
	for i := range out {
		out[i] = IslandServer{ID: d.U32(), RaftAddr: d.Str(), Out: d.Bool()}
	}
	return out
}

func encodeSets(e *wire.Enc, sets []ReplicaSet) {
	e.Uvarint(uint64(len(sets)))
	for _, s := range sets {
		e.U32(s.Island)
		for _, l := range [][]uint32{s.Servers, s.Origin} {
			e.Uvarint(uint64(len(l)))
			for _, v := range l {
				e.U32(v)
			}
		}
	}
}

func decodeSets(d *wire.Dec) []ReplicaSet {
	n := d.Count(6)
	if n == 0 {
		return nil
	}
	out := make([]ReplicaSet, n)
	for i := range out {
		out[i].Island = d.U32()
		for range d.Count(4) {
			out[i].Servers = append(out[i].Servers, d.U32())
		}
		for range d.Count(4) {
			out[i].Origin = append(out[i].Origin, d.U32())
		}
	}
	return out
}

func cloneSets(sets []ReplicaSet) []ReplicaSet {
	if sets == nil {
		return nil
	}
	out := make([]ReplicaSet, len(sets))
	for i, s := range sets {
		out[i] = ReplicaSet{Island: s.Island, Servers: slices.Clone(s.Servers), Origin: slices.Clone(s.Origin)}
	}
	return out
}

// validatePlacement checks the island servers (sorted by id, unique,
// bounded addresses) and the replica sets (sorted by island, unique; 1..5
// distinct registered servers each, none out).
func (m *Map) validatePlacement() error {
	if len(m.IslandServers) > MaxServers || len(m.Replicas) > MaxReplicaSets {
		return fmt.Errorf("%w: %d island servers, %d replica sets", ErrBadRequest, len(m.IslandServers), len(m.Replicas))
	}
	prev := int64(0)
	for _, s := range m.IslandServers {
		if int64(s.ID) <= prev {
			return fmt.Errorf("%w: island server %d out of order, duplicate or 0", ErrBadRequest, s.ID)
		}
		prev = int64(s.ID)
		if len(s.RaftAddr) > maxAddrLen {
			return fmt.Errorf("%w: island server %d: address too long", ErrBadRequest, s.ID)
		}
	}
	prev = 0
	for _, set := range m.Replicas {
		if int64(set.Island) <= prev {
			return fmt.Errorf("%w: replica set of island %d out of order, duplicate or 0", ErrBadRequest, set.Island)
		}
		prev = int64(set.Island)
		if err := m.checkSet(set); err != nil {
			return err
		}
	}
	return nil
}

func (m *Map) checkSet(set ReplicaSet) error {
	if len(set.Servers) == 0 || len(set.Servers) > maxSetSize {
		return fmt.Errorf("%w: island %d: %d replicas (want 1..%d)", ErrBadRequest, set.Island, len(set.Servers), maxSetSize)
	}
	for k, id := range set.Servers {
		s, ok := m.IslandServer(id)
		if !ok {
			return fmt.Errorf("%w: island %d: island server %d", ErrUnknownMember, set.Island, id)
		}
		if s.Out {
			return fmt.Errorf("%w: island %d: island server %d is out", ErrBadRequest, set.Island, id)
		}
		if slices.Contains(set.Servers[:k], id) {
			return fmt.Errorf("%w: island %d: island server %d named twice", ErrBadRequest, set.Island, id)
		}
	}
	if len(set.Origin) == 0 || len(set.Origin) > maxSetSize {
		return fmt.Errorf("%w: island %d: origin of %d servers", ErrBadRequest, set.Island, len(set.Origin))
	}
	for _, id := range set.Origin {
		if _, ok := m.IslandServer(id); !ok {
			return fmt.Errorf("%w: island %d: origin server %d", ErrUnknownMember, set.Island, id)
		}
	}
	return nil
}

// applyIslandServer registers island servers: the first is the caller,
// whose address is always taken; the others (the caller's static list)
// are added only when absent. seed becomes the placement when the map
// has none yet (the static placement every server was started with).
func (m *Map) applyIslandServer(servers []IslandServer, seed []ReplicaSet) (bool, error) {
	if len(servers) == 0 {
		return false, fmt.Errorf("%w: island server registration names no server", ErrBadRequest)
	}
	next := slices.Clone(m.IslandServers)
	changed := false
	for k, s := range servers {
		if s.ID == 0 {
			return false, fmt.Errorf("%w: island server id 0", ErrBadRequest)
		}
		if err := ValidateAddr(fmt.Sprintf("island server %d raft", s.ID), s.RaftAddr); err != nil {
			return false, err
		}
		i := slices.IndexFunc(next, func(o IslandServer) bool { return o.ID == s.ID })
		switch {
		case i < 0:
			next = append(next, IslandServer{ID: s.ID, RaftAddr: s.RaftAddr})
			changed = true
		case k == 0 && next[i].RaftAddr != s.RaftAddr:
			next[i].RaftAddr = s.RaftAddr
			changed = true
		}
	}
	slices.SortFunc(next, func(a, b IslandServer) int { return cmpInt(a.ID, b.ID) })
	c := &Map{IslandServers: next, Replicas: m.Replicas}
	if len(m.Replicas) == 0 && len(seed) > 0 {
		c.Replicas = cloneSets(seed)
		for i := range c.Replicas {
			c.Replicas[i].Origin = slices.Clone(c.Replicas[i].Servers)
		}
		slices.SortFunc(c.Replicas, func(a, b ReplicaSet) int { return cmpInt(a.Island, b.Island) })
		changed = true
	}
	if !changed {
		return false, nil
	}
	if err := c.validatePlacement(); err != nil {
		return false, err
	}
	m.IslandServers, m.Replicas = c.IslandServers, c.Replicas
	return true, nil
}

// applySetReplicas replaces the replica sets of the islands sets names and
// marks the servers of out out (an out server may hold no replica).
func (m *Map) applySetReplicas(sets []ReplicaSet, out []uint32) (bool, error) {
	c := &Map{IslandServers: slices.Clone(m.IslandServers), Replicas: cloneSets(m.Replicas)}
	for _, id := range out {
		i := slices.IndexFunc(c.IslandServers, func(o IslandServer) bool { return o.ID == id })
		if i < 0 {
			return false, fmt.Errorf("%w: island server %d", ErrUnknownMember, id)
		}
		c.IslandServers[i].Out = true
	}
	for _, set := range sets {
		if set.Island == 0 || set.Island > MaxReplicaSets {
			return false, fmt.Errorf("%w: island %d", ErrBadRequest, set.Island)
		}
		// A placed island keeps its origin; a new one is a new group,
		// formed by the servers given.
		set = ReplicaSet{Island: set.Island, Servers: slices.Clone(set.Servers), Origin: slices.Clone(set.Servers)}
		i, ok := slices.BinarySearchFunc(c.Replicas, set.Island, func(s ReplicaSet, v uint32) int { return cmpInt(s.Island, v) })
		if ok {
			set.Origin = c.Replicas[i].Origin
			c.Replicas[i] = set
		} else {
			c.Replicas = slices.Insert(c.Replicas, i, set)
		}
	}
	if err := c.validatePlacement(); err != nil {
		return false, err
	}
	if slices.EqualFunc(c.IslandServers, m.IslandServers, func(a, b IslandServer) bool { return a == b }) &&
		slices.EqualFunc(c.Replicas, m.Replicas, func(a, b ReplicaSet) bool {
			return a.Island == b.Island && slices.Equal(a.Servers, b.Servers) && slices.Equal(a.Origin, b.Origin)
		}) {
		return false, nil
	}
	m.IslandServers, m.Replicas = c.IslandServers, c.Replicas
	return true, nil
}

// IslandServerReq registers island servers (OpIslandServer): Servers[0]
// is the caller; Seed is its static placement, taken when the map has
// none.
type IslandServerReq struct {
	Servers []IslandServer
	Seed    []ReplicaSet
}

func (r *IslandServerReq) Encode(e *wire.Enc) { encodeServers(e, r.Servers); encodeSets(e, r.Seed) }
func (r *IslandServerReq) Decode(d *wire.Dec) { r.Servers = decodeServers(d); r.Seed = decodeSets(d) }

// SetReplicasReq changes the placement (OpSetReplicas).
type SetReplicasReq struct {
	Sets []ReplicaSet
	Out  []uint32
}

func (r *SetReplicasReq) Encode(e *wire.Enc) {
	encodeSets(e, r.Sets)
	e.Uvarint(uint64(len(r.Out)))
	for _, id := range r.Out {
		e.U32(id)
	}
}

func (r *SetReplicasReq) Decode(d *wire.Dec) {
	r.Sets = decodeSets(d)
	for range d.Count(4) {
		r.Out = append(r.Out, d.U32())
	}
}

// RegisterIslandServer records island servers (the caller first) and,
// when the map has no placement yet, seed as the placement. It returns
// the resulting epoch.
func (c *Client) RegisterIslandServer(ctx context.Context, servers []IslandServer, seed []ReplicaSet) (uint64, error) {
	return c.callEpoch(ctx, OpIslandServer, Marshal(&IslandServerReq{Servers: servers, Seed: seed}))
}

// SetReplicas replaces the replica sets of the islands named and marks
// the out servers out; island leaders then move their replicas. It
// returns the resulting epoch.
func (c *Client) SetReplicas(ctx context.Context, sets []ReplicaSet, out []uint32) (uint64, error) {
	return c.callEpoch(ctx, OpSetReplicas, Marshal(&SetReplicasReq{Sets: sets, Out: out}))
}

// PlanReplicas plans the placement after removing the servers of remove:
// every island keeps its number of replicas; a replica on a removed
// server goes to the eligible server (registered, not out, not removed)
// holding fewest replicas, then replicas move from the fullest to the
// emptiest servers until they differ by at most one, and preferred
// leaders (each set's first) are spread the same way by reordering
// sets. It returns only the sets that changed. A new server is simply an
// eligible one holding nothing.
func PlanReplicas(m *Map, remove []uint32) ([]ReplicaSet, error) {
	if len(m.Replicas) == 0 {
		return nil, fmt.Errorf("%w: the map records no replica placement (island servers register it when they start)", ErrBadRequest)
	}
	eligible := m.eligibleServers(remove)
	for _, id := range remove {
		if _, ok := m.IslandServer(id); !ok {
			return nil, fmt.Errorf("%w: island server %d", ErrUnknownMember, id)
		}
	}
	sets := cloneSets(m.Replicas)
	load := map[uint32]int{}
	for _, id := range eligible {
		load[id] = 0
	}
	for _, s := range sets {
		if len(s.Servers) > len(eligible) {
			return nil, fmt.Errorf("%w: island %d has %d replicas and only %d island servers would remain", ErrBadRequest, s.Island, len(s.Servers), len(eligible))
		}
		for _, id := range s.Servers {
			if _, ok := load[id]; ok {
				load[id]++
			}
		}
	}
	// least returns the eligible server with fewest replicas (lowest id
	// on ties) not in set.
	least := func(set []uint32) uint32 {
		best := uint32(0)
		for _, id := range eligible {
			if !slices.Contains(set, id) && (best == 0 || load[id] < load[best]) {
				best = id
			}
		}
		return best
	}
	for i := range sets {
		for k, id := range sets[i].Servers {
			if _, ok := load[id]; ok {
				continue
			}
			to := least(sets[i].Servers)
			sets[i].Servers[k] = to
			load[to]++
		}
	}
	spread(sets, eligible, load, false)
	lead := map[uint32]int{}
	for _, id := range eligible {
		lead[id] = 0
	}
	for _, s := range sets {
		lead[s.Servers[0]]++
	}
	spread(sets, eligible, lead, true)
	var changed []ReplicaSet
	for i, s := range sets {
		if !slices.Equal(s.Servers, m.Replicas[i].Servers) {
			changed = append(changed, s)
		}
	}
	return changed, nil
}

// eligibleServers lists the island servers that may hold replicas:
// registered, not out, not in remove.
func (m *Map) eligibleServers(remove []uint32) []uint32 {
	var out []uint32
	for _, s := range m.IslandServers {
		if !s.Out && !slices.Contains(remove, s.ID) {
			out = append(out, s.ID)
		}
	}
	return out
}

// SameServers reports whether a and b name the same servers, in any
// order (each list free of duplicates, as replica sets and raft
// configurations are).
func SameServers(a, b []uint32) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(v uint32) bool { return !slices.Contains(b, v) })
}

// spread evens count out over eligible: while the fullest server has two
// more than the emptiest, a set holding the fullest (as its leader, when
// leaders) and not the emptiest gives its place to the emptiest; for
// leaders, a set that holds the emptiest as a follower swaps the two.
func spread(sets []ReplicaSet, eligible []uint32, count map[uint32]int, leaders bool) {
	for range 4 * MaxReplicaSets {
		hi, lo := eligible[0], eligible[0]
		for _, id := range eligible {
			if count[id] > count[hi] {
				hi = id
			}
			if count[id] < count[lo] {
				lo = id
			}
		}
		if count[hi]-count[lo] <= 1 {
			return
		}
		moved := false
		for i := range sets {
			s := sets[i].Servers
			if leaders {
				if s[0] != hi {
					continue
				}
				if k := slices.Index(s, lo); k > 0 {
					s[0], s[k] = lo, hi
					moved = true
				}
			} else if k := slices.Index(s, hi); k >= 0 && !slices.Contains(s, lo) {
				s[k] = lo
				moved = true
			}
			if moved {
				count[hi]--
				count[lo]++
				break
			}
		}
		if !moved {
			return
		}
	}
}

// ReplicasUnsettled lists the islands whose group does not match the
// map's placement yet, by the leaders' heartbeats in st (an island
// whose leader has not reported counts as unsettled): the voters its
// leader reports must be exactly its set.
func ReplicasUnsettled(st *Status) []uint32 {
	if st == nil || st.Map == nil {
		return nil
	}
	// The newest term's leader: a dead server's last report lingers in
	// the heartbeat table.
	leaders := map[uint32]ReplicaStats{}
	for _, l := range st.Live {
		for _, r := range l.Stats.Replicas {
			if r.Role == "leader" && r.Server == r.Leader && r.Term >= leaders[r.Island].Term {
				leaders[r.Island] = r
			}
		}
	}
	var out []uint32
	for _, set := range st.Map.Replicas {
		if r, ok := leaders[set.Island]; !ok || !SameServers(r.Voters, set.Servers) {
			out = append(out, set.Island)
		}
	}
	return out
}
