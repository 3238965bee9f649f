package manager

import (
	"context"
	"time"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/hashicorp/raft"
)

// monitorInterval is how often the leader looks for silent members.
func (m *Manager) monitorInterval() time.Duration {
	return min(max(m.cfg.DownAfter/5, 10*time.Millisecond), time.Second)
}

// leaderLoop follows leadership changes and, while this manager leads,
// runs the heartbeat monitor. It is the only goroutine that marks members
// down.
func (m *Manager) leaderLoop(ctx context.Context) {
	t := time.NewTicker(m.monitorInterval())
	defer t.Stop()
	leaderCh := m.raft.LeaderCh()
	for {
		select {
		case <-ctx.Done():
			return
		case <-leaderCh:
		case <-t.C:
		}
		m.tick()
	}
}

func (m *Manager) tick() {
	m.followRevocations()
	isLeader := m.raft.State() == raft.Leader
	term := m.raft.CurrentTerm()
	m.mu.Lock()
	readyTerm := m.mu.leaderTerm
	m.mu.Unlock()
	switch {
	case !isLeader:
		if readyTerm != 0 {
			m.stepDown()
		}
	case readyTerm != term:
		if err := m.becomeLeader(term); err != nil {
			m.log.Warn("manager: taking over as leader", "term", term, "err", err)
		}
	default:
		m.checkLiveness()
	}
}

// becomeLeader makes this manager a ready leader for term: its FSM holds
// every committed command (barrier), its own address is in the map, and
// every member gets a fresh grace period of DownAfter: heartbeats sent to
// the previous leader were never seen here.
func (m *Manager) becomeLeader(term uint64) error {
	if err := m.raft.Barrier(m.cfg.ApplyTimeout).Error(); err != nil {
		return err
	}
	// A single manager restarted on another raft port still has its old
	// address in the configuration: update it.
	self := raft.ServerAddress(m.RaftAddr())
	if cf := m.raft.GetConfiguration(); cf.Error() == nil {
		for _, s := range cf.Configuration().Servers {
			if string(s.ID) == m.id && s.Address != self {
				if err := m.raft.AddVoter(s.ID, self, 0, m.cfg.ApplyTimeout).Error(); err != nil {
					return err
				}
			}
		}
	}
	want := cluster.ManagerNode{RaftID: m.id, RaftAddr: m.RaftAddr(), ClientAddr: m.Addr()}
	if cur, ok := m.fsm.manager(m.id); !ok || cur != want {
		if _, err := m.apply(&cluster.Command{Type: cluster.CmdManager, Manager: want}); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.mu.leaderTerm = term
	m.mu.leaderSince = time.Now()
	m.mu.live = make(map[cluster.MemberKey]liveInfo)
	m.mu.Unlock()
	m.log.Info("manager: leading the manager group", "term", term, "epoch", m.fsm.Epoch())
	return nil
}

func (m *Manager) stepDown() {
	m.mu.Lock()
	m.mu.leaderTerm = 0
	m.mu.live = nil
	m.mu.Unlock()
	m.log.Info("manager: no longer the leader")
}

// checkLiveness marks down, in one new epoch, every up member that has not
// been heard from for DownAfter (counting from when this manager became
// leader at the earliest). Draining and out members are left alone: their
// states are the operator's.
func (m *Manager) checkLiveness() {
	mp := m.fsm.Map()
	now := time.Now()
	var down, expired []cluster.MemberKey
	m.mu.Lock()
	for _, v := range mp.Members() {
		last := m.mu.leaderSince
		if li, ok := m.mu.live[v.Key()]; ok && li.last.After(last) {
			last = li.last
		}
		silent := now.Sub(last)
		if v.Kind == cluster.KindGateway && silent > m.cfg.GatewayExpiry && len(expired) < cluster.MaxMarkDown {
			expired = append(expired, v.Key())
			continue
		}
		if v.State == cluster.StateUp && silent > m.cfg.DownAfter && len(down) < cluster.MaxMarkDown {
			down = append(down, v.Key())
		}
	}
	m.mu.Unlock()
	if len(expired) > 0 {
		// Gateways and mounts leave no data behind: one gone for long is
		// forgotten, so dead mounts and a tenant's registrations do not
		// accumulate in the map.
		if res, err := m.apply(&cluster.Command{Type: cluster.CmdRemove, Keys: expired}); err != nil {
			m.log.Warn("manager: removing silent gateways", "members", len(expired), "err", err)
		} else if res.Changed {
			m.forget(expired...)
			m.log.Info("manager: gateways removed (no heartbeat)", "members", len(expired), "after", m.cfg.GatewayExpiry, "epoch", res.Epoch)
		}
	}
	if len(down) == 0 {
		return
	}
	res, err := m.apply(&cluster.Command{Type: cluster.CmdMarkDown, Keys: down})
	if err != nil {
		m.log.Warn("manager: marking silent members down", "members", keyStrings(down), "err", err)
		return
	}
	if res.Changed {
		m.log.Warn("manager: members down (no heartbeat)", "members", keyStrings(down), "after", m.cfg.DownAfter, "epoch", res.Epoch)
	}
}

func keyStrings(ks []cluster.MemberKey) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.String()
	}
	return out
}

// History of heartbeat counters, kept by the leader for the dashboard's
// throughput over time. It lives in memory only, like the rest of the
// heartbeat table: a new leader starts with an empty history.
const (
	// HistoryLen is how many heartbeats are kept per member: ten minutes
	// at the default 1s interval.
	HistoryLen = 600
	// ThroughputStep is the width of one point of Snapshot.Throughput.
	ThroughputStep = 2 * time.Second
	// ThroughputWindow is how far back Snapshot.Throughput goes.
	ThroughputWindow = 10 * time.Minute
	// rateWindow is the span over which a member's current rates are
	// computed (a few heartbeats, so one late heartbeat does not show as
	// a dip).
	rateWindow = 5 * time.Second
)

// sample is one heartbeat's cumulative counters (32 bytes: a full ring
// is about 19 KiB per member).
type sample struct {
	at                 int64 // unix nanoseconds
	read, written, ops uint64
}

func (s sample) time() time.Time { return time.Unix(0, s.at) }

// sampleRing holds a member's last HistoryLen samples. It grows up to
// HistoryLen, then overwrites its oldest sample. It is guarded by
// Manager.mu.
type sampleRing struct {
	buf  []sample
	next int // once full: where the next sample goes (the oldest)
}

func (r *sampleRing) add(s sample) {
	if len(r.buf) < HistoryLen {
		r.buf = append(r.buf, s)
		return
	}
	r.buf[r.next] = s
	r.next = (r.next + 1) % HistoryLen
}

func (r *sampleRing) len() int { return len(r.buf) }

// get returns the i-th oldest sample.
func (r *sampleRing) get(i int) sample { return r.buf[(r.next+i)%len(r.buf)] }

// counterDelta is how much a cumulative counter grew from a to b; a
// smaller b means the member restarted and counted from zero again.
func counterDelta(a, b uint64) uint64 {
	if b < a {
		return b
	}
	return b - a
}

// rates returns the member's read, write and op rates (per second) over
// about the last rateWindow before now; zero without two samples in it.
func (r *sampleRing) rates(now time.Time) (read, write, ops float64) {
	n := r.len()
	if n < 2 {
		return 0, 0, 0
	}
	last := r.get(n - 1)
	if now.Sub(last.time()) > rateWindow {
		return 0, 0, 0 // silent member: no current throughput
	}
	first, taken := last, 0
	var dr, dw, do uint64
	for i := n - 2; i >= 0; i-- {
		s := r.get(i)
		if taken > 0 && time.Duration(last.at-s.at) > rateWindow {
			break
		}
		dr += counterDelta(s.read, first.read)
		dw += counterDelta(s.written, first.written)
		do += counterDelta(s.ops, first.ops)
		first = s
		taken++
	}
	secs := time.Duration(last.at - first.at).Seconds()
	if secs <= 0 {
		return 0, 0, 0
	}
	return float64(dr) / secs, float64(dw) / secs, float64(do) / secs
}

// ThroughputPoint is the cluster's storage throughput during one
// ThroughputStep ending at Time.
type ThroughputPoint struct {
	Time             time.Time
	ReadBytesPerSec  float64
	WriteBytesPerSec float64
	OpsPerSec        float64
}

// throughput sums the growth of the rings' counters into ThroughputStep
// buckets over the ThroughputWindow before now (complete buckets only),
// oldest first, starting at the oldest sample. Each increase between two
// consecutive samples of a member counts in the bucket of the later one.
func throughput(rings []*sampleRing, now time.Time) []ThroughputPoint {
	end := now.Truncate(ThroughputStep)
	start := end.Add(-ThroughputWindow)
	oldest := end
	for _, r := range rings {
		if r.len() > 0 {
			if t := r.get(0).time().Truncate(ThroughputStep); t.Before(oldest) {
				oldest = t
			}
		}
	}
	if oldest.After(start) {
		start = oldest
	}
	n := int(end.Sub(start) / ThroughputStep)
	if n <= 0 {
		return nil
	}
	pts := make([]ThroughputPoint, n)
	for i := range pts {
		pts[i].Time = start.Add(time.Duration(i+1) * ThroughputStep)
	}
	lo, hi := start.UnixNano(), end.UnixNano()
	for _, r := range rings {
		for i := 1; i < r.len(); i++ {
			prev, s := r.get(i-1), r.get(i)
			if s.at <= lo || s.at >= hi {
				continue
			}
			k := int(time.Duration(s.at-lo) / ThroughputStep)
			pts[k].ReadBytesPerSec += float64(counterDelta(prev.read, s.read))
			pts[k].WriteBytesPerSec += float64(counterDelta(prev.written, s.written))
			pts[k].OpsPerSec += float64(counterDelta(prev.ops, s.ops))
		}
	}
	secs := ThroughputStep.Seconds()
	for i := range pts {
		pts[i].ReadBytesPerSec /= secs
		pts[i].WriteBytesPerSec /= secs
		pts[i].OpsPerSec /= secs
	}
	return pts
}
