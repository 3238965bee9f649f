package cluster

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
)

// TestReplicaPlacement: island servers register (the first registration
// seeds the placement, later seeds are ignored), the placement survives
// the map and raft command encodings, bad placements are refused and
// leave the map as it was.
func TestReplicaPlacement(t *testing.T) {
	m := sampleMap()
	apply := func(c Command) (bool, error) { t.Helper(); return applyEncoded(t, m, c) }
	static := []IslandServer{{ID: 1, RaftAddr: "127.0.0.1:7510"}, {ID: 2, RaftAddr: "127.0.0.1:7511"}, {ID: 3, RaftAddr: "127.0.0.1:7512"}}
	seed := []ReplicaSet{{Island: 2, Servers: []uint32{2, 3, 1}}, {Island: 1, Servers: []uint32{1, 2, 3}}}
	if ch, err := apply(Command{Type: CmdIslandServer, Servers: static, Sets: seed}); err != nil || !ch {
		t.Fatalf("first registration: %v %v", ch, err)
	}
	if set, ok := m.ReplicaSet(1); !ok || !slices.Equal(set, []uint32{1, 2, 3}) {
		t.Fatalf("seeded island 1: %v", set)
	}
	// The same registration again changes nothing; another seed is ignored.
	other := []ReplicaSet{{Island: 1, Servers: []uint32{3}}}
	if ch, err := apply(Command{Type: CmdIslandServer, Servers: []IslandServer{static[1], static[0]}, Sets: other}); err != nil || ch {
		t.Fatalf("second registration: %v %v", ch, err)
	}
	// A server's own registration updates its address; a list does not.
	if ch, err := apply(Command{Type: CmdIslandServer, Servers: []IslandServer{{ID: 2, RaftAddr: "127.0.0.1:9911"}, {ID: 1, RaftAddr: "127.0.0.1:1"}}}); err != nil || !ch {
		t.Fatalf("readdress: %v %v", ch, err)
	}
	if s, _ := m.IslandServer(2); s.RaftAddr != "127.0.0.1:9911" {
		t.Fatalf("server 2: %+v", s)
	}
	if s, _ := m.IslandServer(1); s.RaftAddr != "127.0.0.1:7510" {
		t.Fatalf("server 1 readdressed by another's list: %+v", s)
	}
	if ch, err := apply(Command{Type: CmdIslandServer, Servers: []IslandServer{{ID: 4, RaftAddr: "127.0.0.1:7513"}}}); err != nil || !ch {
		t.Fatalf("join: %v %v", ch, err)
	}
	got, err := DecodeMap(EncodeMap(m))
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, m)
	}
	before := m.Clone()
	for _, bad := range []Command{
		{Type: CmdSetReplicas, Sets: []ReplicaSet{{Island: 1, Servers: []uint32{1, 9}}}},          // unknown server
		{Type: CmdSetReplicas, Sets: []ReplicaSet{{Island: 1, Servers: []uint32{1, 1, 2}}}},       // twice
		{Type: CmdSetReplicas, Sets: []ReplicaSet{{Island: 1}}},                                   // empty
		{Type: CmdSetReplicas, Sets: []ReplicaSet{{Island: 0, Servers: []uint32{1}}}},             // island 0
		{Type: CmdSetReplicas, Sets: []ReplicaSet{{Island: 1, Servers: []uint32{1, 2, 3, 4, 1}}}}, // twice again
		{Type: CmdSetReplicas, Out: []uint32{3}},                                                  // out but holding replicas
		{Type: CmdIslandServer, Servers: []IslandServer{{ID: 5, RaftAddr: "nope"}}},               // bad address
		{Type: CmdIslandServer},
	} {
		if _, err := apply(bad); err == nil {
			t.Fatalf("%s %+v accepted", bad.Type, bad)
		}
	}
	if !reflect.DeepEqual(before, m) {
		t.Fatalf("refused commands changed the map:\n%+v\n%+v", before, m)
	}
	// Moving island 1's replica off server 3 onto 4 and marking 3 out
	// needs island 2 off it too.
	if _, err := apply(Command{Type: CmdSetReplicas, Sets: []ReplicaSet{{Island: 1, Servers: []uint32{1, 2, 4}}}, Out: []uint32{3}}); err == nil {
		t.Fatal("server 3 marked out while island 2 is on it")
	}
	if ch, err := apply(Command{Type: CmdSetReplicas, Sets: []ReplicaSet{{Island: 1, Servers: []uint32{1, 2, 4}}, {Island: 2, Servers: []uint32{2, 4, 1}}}, Out: []uint32{3}}); err != nil || !ch {
		t.Fatalf("set: %v %v", ch, err)
	}
	if s, _ := m.IslandServer(3); !s.Out {
		t.Fatalf("server 3 not out: %+v", s)
	}
	// A moved island keeps the set it was formed with.
	if p, _ := m.Placement(1); !slices.Equal(p.Origin, []uint32{1, 2, 3}) || !slices.Equal(p.Servers, []uint32{1, 2, 4}) {
		t.Fatalf("island 1 after its move: %+v", p)
	}
	// A new island: placed on the servers holding fewest (out ones
	// excluded), with its own origin.
	set, err := PlanNewIsland(m, 3)
	if err != nil {
		t.Fatal(err)
	}
	if set.Island != 3 || len(set.Servers) != 3 || slices.Contains(set.Servers, 3) || !slices.Equal(set.Servers, set.Origin) {
		t.Fatalf("new island %+v", set)
	}
	if _, err := PlanNewIsland(m, 5); err == nil {
		t.Fatal("5 replicas planned on 3 servers")
	}
	if _, err := apply(Command{Type: CmdSetReplicas, Sets: []ReplicaSet{set}}); err != nil {
		t.Fatal(err)
	}
	if p, _ := m.Placement(3); !slices.Equal(p.Origin, set.Servers) {
		t.Fatalf("new island's origin: %+v", p)
	}
	got, err = DecodeMap(EncodeMap(m))
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, m)
	}
}

// TestPlanReplicas: a new server gets its share of replicas and leaders,
// a removed one gives all of its away, every island keeps its replica
// count on distinct servers, and servers end within one replica (and one
// leader) of each other.
func TestPlanReplicas(t *testing.T) {
	for _, tc := range []struct {
		servers, islands, replicas int
		add                        int // servers registered after the seed
		remove                     []uint32
	}{
		{3, 3, 3, 1, nil},
		{3, 3, 3, 3, nil},
		{3, 3, 3, 1, []uint32{1}},
		{5, 7, 3, 0, []uint32{2}},
		{5, 5, 5, 2, []uint32{1, 3}},
		{3, 6, 1, 3, nil},
	} {
		t.Run(fmt.Sprintf("%d+%d-%v/%dx%d", tc.servers, tc.add, tc.remove, tc.islands, tc.replicas), func(t *testing.T) {
			m := sampleMap()
			var ids []uint32
			var servers []IslandServer
			for i := 1; i <= tc.servers; i++ {
				ids = append(ids, uint32(i))
				servers = append(servers, IslandServer{ID: uint32(i), RaftAddr: fmt.Sprintf("127.0.0.1:%d", 7000+i)})
			}
			var seed []ReplicaSet
			for k := 1; k <= tc.islands; k++ {
				var on []uint32
				for j := range tc.replicas {
					on = append(on, ids[(k-1+j)%len(ids)])
				}
				seed = append(seed, ReplicaSet{Island: uint32(k), Servers: on})
			}
			if _, err := m.Apply(&Command{Type: CmdIslandServer, Servers: servers, Sets: seed}); err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= tc.add; i++ {
				id := uint32(tc.servers + i)
				if _, err := m.Apply(&Command{Type: CmdIslandServer, Servers: []IslandServer{{ID: id, RaftAddr: fmt.Sprintf("127.0.0.1:%d", 7000+id)}}}); err != nil {
					t.Fatal(err)
				}
			}
			sets, err := PlanReplicas(m, tc.remove)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Apply(&Command{Type: CmdSetReplicas, Sets: sets, Out: tc.remove}); err != nil {
				t.Fatalf("plan %v refused: %v", sets, err)
			}
			load, lead := map[uint32]int{}, map[uint32]int{}
			for _, s := range m.IslandServers {
				if !s.Out {
					load[s.ID], lead[s.ID] = 0, 0
				}
			}
			for _, s := range m.Replicas {
				if len(s.Servers) != tc.replicas {
					t.Fatalf("island %d has %v", s.Island, s.Servers)
				}
				for _, id := range s.Servers {
					if _, ok := load[id]; !ok {
						t.Fatalf("island %d placed on removed server %d", s.Island, id)
					}
					load[id]++
				}
				lead[s.Servers[0]]++
			}
			for name, c := range map[string]map[uint32]int{"replicas": load, "leaders": lead} {
				lo, hi := 1<<30, 0
				for _, v := range c {
					lo, hi = min(lo, v), max(hi, v)
				}
				if hi-lo > 1 {
					t.Fatalf("%s uneven: %v (placement %+v)", name, c, m.Replicas)
				}
			}
		})
	}
	m := sampleMap()
	if _, err := PlanReplicas(m, nil); err == nil {
		t.Fatal("planned without a placement")
	}
}

// TestReplicasUnsettled: an island is settled when its newest leader
// reports exactly its set as voters, whatever a dead server's last report
// (an older term) still says.
func TestReplicasUnsettled(t *testing.T) {
	m := &Map{Replicas: []ReplicaSet{{Island: 1, Servers: []uint32{4, 2, 3}, Origin: []uint32{1, 2, 3}}}}
	old := MemberLive{Key: MemberKey{KindIsland, 1}, Stats: MemberStats{Replicas: []ReplicaStats{
		{Island: 1, Server: 1, Leader: 1, Role: "leader", Term: 2, Voters: []uint32{1, 2, 3}}}}}
	cur := MemberLive{Key: MemberKey{KindIsland, 2}, Stats: MemberStats{Replicas: []ReplicaStats{
		{Island: 1, Server: 2, Leader: 2, Role: "leader", Term: 3, Voters: []uint32{2, 3, 4}}}}}
	for _, live := range [][]MemberLive{{old, cur}, {cur, old}} {
		if got := ReplicasUnsettled(&Status{Map: m, Live: live}); len(got) != 0 {
			t.Fatalf("settled island reported moving: %v", got)
		}
	}
	if got := ReplicasUnsettled(&Status{Map: m, Live: []MemberLive{old}}); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("only the old leader's report: %v", got)
	}
	if got := ReplicasUnsettled(&Status{Map: m}); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("no report: %v", got)
	}
}
