package manager

import (
	"strconv"
	"time"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// Manager metrics. They are computed at scrape time from the map and the
// raft state, so the manager keeps no counters of its own:
//
//	atoll_manager_map_epoch                      gauge  this manager's map epoch
//	atoll_manager_members{kind,state}            gauge  members per kind and state
//	atoll_manager_raft_state{state}              gauge  1 for this manager's raft state, 0 for the others
//	atoll_manager_leader                         gauge  1 when this manager is the ready leader
//	atoll_manager_raft_term                      gauge
//	atoll_manager_raft_applied_index             gauge
//	atoll_manager_table_entries{island}          gauge  hash-table entries per island
//	atoll_manager_heartbeat_age_seconds{kind,id} gauge  leader only: time since each member's last heartbeat
//	atoll_manager_refused_connections_total      counter connections (client and raft ports) that failed to authenticate
//	atoll_manager_moves{job,measure}             gauge  leader only: island entry moves and island replica moves
//	                                                    in progress: measure done, total, eta_seconds (0: unknown)
type managerCollector struct {
	m *Manager

	epoch, members, raftState, leader, term, applied, entries, hbAge, refused, moves *prometheus.Desc
}

func newManagerCollector(m *Manager) *managerCollector {
	return &managerCollector{
		m:         m,
		refused:   prometheus.NewDesc("atoll_manager_refused_connections_total", "Connections (client and raft ports) closed because they did not authenticate with a key of this cluster.", nil, nil),
		epoch:     prometheus.NewDesc("atoll_manager_map_epoch", "Epoch of this manager's cluster map.", nil, nil),
		members:   prometheus.NewDesc("atoll_manager_members", "Members of the cluster map by kind and state.", []string{"kind", "state"}, nil),
		raftState: prometheus.NewDesc("atoll_manager_raft_state", "1 for this manager's raft state, 0 for the others.", []string{"state"}, nil),
		leader:    prometheus.NewDesc("atoll_manager_leader", "1 when this manager is the ready raft leader.", nil, nil),
		term:      prometheus.NewDesc("atoll_manager_raft_term", "Current raft term.", nil, nil),
		applied:   prometheus.NewDesc("atoll_manager_raft_applied_index", "Last raft index applied to the map.", nil, nil),
		entries:   prometheus.NewDesc("atoll_manager_table_entries", "Namespace hash-table entries owned per island.", []string{"island"}, nil),
		hbAge:     prometheus.NewDesc("atoll_manager_heartbeat_age_seconds", "Seconds since each member's last heartbeat (leader only).", []string{"kind", "id"}, nil),
		moves:     prometheus.NewDesc("atoll_manager_moves", "Island entry moves and island replica moves in progress (leader only): done, total and estimated seconds left.", []string{"job", "measure"}, nil),
	}
}

func (c *managerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.epoch, c.members, c.raftState, c.leader, c.term, c.applied, c.entries, c.hbAge, c.refused, c.moves} {
		ch <- d
	}
}

var (
	allKinds  = []cluster.Kind{cluster.KindStorage, cluster.KindIsland, cluster.KindGateway}
	allStates = []cluster.State{cluster.StateUp, cluster.StateDown, cluster.StateDraining, cluster.StateOut}
	// raftStates are hashicorp/raft's states, in its order.
	raftStates = []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown}
)

func (c *managerCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	sn := m.status()
	now := time.Now()
	mp := sn.Map
	ch <- prometheus.MustNewConstMetric(c.epoch, prometheus.GaugeValue, float64(mp.Epoch))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(m.Refused()))
	// Every kind and state, zeros included, so a state that empties shows
	// as 0 rather than vanishing.
	var counts [4][5]int
	for _, v := range mp.Members() {
		if v.Kind.Valid() && v.State.Valid() {
			counts[v.Kind][v.State]++
		}
	}
	for _, k := range allKinds {
		for _, st := range allStates {
			ch <- prometheus.MustNewConstMetric(c.members, prometheus.GaugeValue, float64(counts[k][st]), k.String(), st.String())
		}
	}
	cur := m.raft.State()
	for _, rs := range raftStates {
		v := 0.0
		if rs == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.raftState, prometheus.GaugeValue, v, rs.String())
	}
	leader := 0.0
	if m.IsLeader() {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, float64(sn.Term))
	ch <- prometheus.MustNewConstMetric(c.applied, prometheus.GaugeValue, float64(sn.AppliedIndex))
	shares := mp.Table.Shares()
	for _, is := range mp.Islands {
		ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(shares[is.ID]), strconv.FormatUint(uint64(is.ID), 10))
	}
	for _, j := range sn.Jobs {
		if j.Name != JobEntryMoves && j.Name != JobReplicaMoves {
			continue
		}
		for measure, v := range map[string]float64{"done": float64(j.Done), "total": float64(j.Total), "eta_seconds": j.ETASeconds} {
			ch <- prometheus.MustNewConstMetric(c.moves, prometheus.GaugeValue, v, j.Name, measure)
		}
	}
	for _, l := range sn.Live {
		if !l.LastHeartbeat.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.hbAge, prometheus.GaugeValue, now.Sub(l.LastHeartbeat).Seconds(), l.Key.Kind.String(), strconv.FormatUint(uint64(l.Key.ID), 10))
		}
	}
}
