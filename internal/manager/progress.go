package manager

import (
	"fmt"
	"slices"
	"time"

	"github.com/atoll-fs/atoll/internal/cluster"
)

// Names of the move jobs the leader reports (Status.Jobs, metrics).
const (
	JobEntryMoves   = "island entry moves"
	JobReplicaMoves = "island replica moves"
)

// moveProgress is the leader's in-memory account of the current batch of
// island entry moves and of replica moves, for status, the dashboard and
// /metrics (never replicated: a new leader starts counting afresh from
// the moves the map still holds).
type moveProgress struct {
	entry entryBatch
	// Replica moves: the islands the last SetReplicas changed.
	replicaStart   time.Time
	replicaIslands []uint32
	replicaSummary string
}

// entryBatch counts a batch of entry moves: it starts when moves are
// added to an empty list and ends when the list is empty again.
type entryBatch struct {
	start                  time.Time
	total, done, cancelled int
	summary                string // the last finished batch's
}

// cover makes the batch account for pending moves it has not seen added
// (a leader that took over mid-batch knows only what is pending).
func (b *entryBatch) cover(pending int, now time.Time) {
	if b.total < b.done+b.cancelled+pending {
		b.total = b.done + b.cancelled + pending
		if b.start.IsZero() {
			b.start = now
		}
	}
}

// noteMoves updates the account after an entry-move command was applied
// (op is OpMoveEntries, OpFinishMove or OpCancelMove) with pending moves
// left afterwards.
func (m *Manager) noteMoves(op uint16, added, pending int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := &m.mu.progress.entry
	now := time.Now()
	switch op {
	case cluster.OpMoveEntries:
		if b.total == 0 || b.done+b.cancelled >= b.total {
			*b = entryBatch{start: now, summary: b.summary}
		}
		b.total += added
	case cluster.OpFinishMove:
		b.done++
	case cluster.OpCancelMove:
		b.cancelled++
	}
	b.cover(pending, now)
	if pending == 0 && b.total > 0 {
		b.summary = fmt.Sprintf("last batch: %d entries moved, %d cancelled in %v", b.done, b.cancelled, now.Sub(b.start).Round(time.Millisecond))
		b.total, b.done, b.cancelled = 0, 0, 0
	}
}

// noteReplicaMoves records the islands a SetReplicas changed.
func (m *Manager) noteReplicaMoves(islands []uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.progress.replicaStart = time.Now()
	m.mu.progress.replicaIslands = islands
}

// moveJobs reports both kinds of moves as background jobs of the leader.
// st is the status being built (its map and heartbeat table).
func (m *Manager) moveJobs(st *cluster.Status) []cluster.Job {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := &m.mu.progress
	var out []cluster.Job
	pending := len(st.Map.Moves)
	j := cluster.Job{Name: JobEntryMoves, Summary: p.entry.summary}
	if pending > 0 {
		p.entry.cover(pending, time.Now())
		j.Phase = "moving"
		j.Total = p.entry.total
		j.Done = p.entry.total - pending
		j.ETASeconds = eta(p.entry.start, j.Done, pending)
	}
	if j.Phase != "" || j.Summary != "" {
		out = append(out, j)
	}
	if len(p.replicaIslands) > 0 {
		unsettled := cluster.ReplicasUnsettled(st)
		left := 0
		for _, id := range p.replicaIslands {
			if slices.Contains(unsettled, id) {
				left++
			}
		}
		rj := cluster.Job{Name: JobReplicaMoves, Total: len(p.replicaIslands), Done: len(p.replicaIslands) - left}
		if left > 0 {
			rj.Phase = "moving"
			rj.ETASeconds = eta(p.replicaStart, rj.Done, left)
		} else {
			if p.replicaSummary == "" {
				p.replicaSummary = fmt.Sprintf("last change: %d islands moved replicas in %v", len(p.replicaIslands), time.Since(p.replicaStart).Round(time.Millisecond))
			}
			rj.Summary = p.replicaSummary
		}
		out = append(out, rj)
	}
	return out
}

// eta extrapolates the time left from the rate so far (0: unknown yet).
func eta(start time.Time, done, left int) float64 {
	if done == 0 || start.IsZero() {
		return 0
	}
	return time.Since(start).Seconds() / float64(done) * float64(left)
}
