package cluster

import (
	"context"
	"math/rand/v2"
	"time"

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
	want := ManagerNode{RaftID: m.id, RaftAddr: m.RaftAddr(), ClientAddr: m.Addr()}
	if cur, ok := m.fsm.manager(m.id); !ok || cur != want {
		if _, err := m.apply(&command{Type: cmdManager, Manager: want}); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.mu.leaderTerm = term
	m.mu.leaderSince = time.Now()
	m.mu.live = make(map[MemberKey]liveInfo)
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
	var down []MemberKey
	m.mu.Lock()
	for _, v := range mp.Members() {
		if v.State != StateUp {
			continue
		}
		last := m.mu.leaderSince
		if li, ok := m.mu.live[v.Key()]; ok && li.last.After(last) {
			last = li.last
		}
		if now.Sub(last) > m.cfg.DownAfter && len(down) < maxMarkDown {
			down = append(down, v.Key())
		}
	}
	m.mu.Unlock()
	if len(down) == 0 {
		return
	}
	res, err := m.apply(&command{Type: cmdMarkDown, Keys: down})
	if err != nil {
		m.log.Warn("manager: marking silent members down", "members", keyStrings(down), "err", err)
		return
	}
	if res.Changed {
		m.log.Warn("manager: members down (no heartbeat)", "members", keyStrings(down), "after", m.cfg.DownAfter, "epoch", res.Epoch)
	}
}

func keyStrings(ks []MemberKey) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.String()
	}
	return out
}

// backoff yields growing, jittered waits between min and max.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	// ±20% jitter so that many members do not retry in lockstep.
	j := time.Duration(rand.Int64N(int64(b.cur)/5+1)) - b.cur/10
	return b.cur + j
}

func (b *backoff) reset() { b.cur = 0 }

// sleepCtx waits d or until ctx is done; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
