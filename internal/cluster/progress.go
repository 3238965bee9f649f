package cluster

import (
	"fmt"
	"slices"
	"time"
)

// moveProgress is the leader's in-memory account of the current batch of
// island entry moves and of replica moves, for status, the dashboard and
// /metrics (never replicated: a new leader starts counting afresh from
// the moves the map still holds).
type moveProgress struct {
	// Entry moves: a batch starts when moves are added to an empty list
	// and ends when the list is empty again.
	entryStart            time.Time
	entryTotal, entryDone int
	entryCancelled        int
	entrySummary          string
	// Replica moves: the islands the last SetReplicas changed.
	replicaStart   time.Time
	replicaIslands []uint32
	replicaSummary string
}

// noteMoves updates the account after an entry-move command was applied
// (op is OpMoveEntries, OpFinishMove or OpCancelMove) with pending moves
// left afterwards.
func (m *Manager) noteMoves(op uint16, added, pending int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := &m.mu.progress
	now := time.Now()
	switch op {
	case OpMoveEntries:
		if p.entryTotal == 0 || p.entryDone+p.entryCancelled >= p.entryTotal {
			*p = moveProgress{entryStart: now, replicaStart: p.replicaStart, replicaIslands: p.replicaIslands, replicaSummary: p.replicaSummary, entrySummary: p.entrySummary}
		}
		p.entryTotal += added
	case OpFinishMove:
		p.entryDone++
	case OpCancelMove:
		p.entryCancelled++
	}
	// A leader that took over mid-batch knows only what is pending.
	if p.entryTotal < p.entryDone+p.entryCancelled+pending {
		p.entryTotal = p.entryDone + p.entryCancelled + pending
		if p.entryStart.IsZero() {
			p.entryStart = now
		}
	}
	if pending == 0 && p.entryTotal > 0 {
		p.entrySummary = fmt.Sprintf("last batch: %d entries moved, %d cancelled in %v", p.entryDone, p.entryCancelled, now.Sub(p.entryStart).Round(time.Millisecond))
		p.entryTotal, p.entryDone, p.entryCancelled = 0, 0, 0
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
func (m *Manager) moveJobs(st *Status) []Job {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := &m.mu.progress
	var out []Job
	pending := len(st.Map.Moves)
	if pending > 0 && p.entryTotal < p.entryDone+p.entryCancelled+pending {
		p.entryTotal = p.entryDone + p.entryCancelled + pending
		if p.entryStart.IsZero() {
			p.entryStart = time.Now()
		}
	}
	j := Job{Name: "island entry moves", Summary: p.entrySummary}
	if pending > 0 {
		j.Phase = "moving"
		j.Total = p.entryTotal
		j.Done = p.entryTotal - pending
		j.ETASeconds = eta(p.entryStart, j.Done, pending)
	}
	if j.Phase != "" || j.Summary != "" {
		out = append(out, j)
	}
	if len(p.replicaIslands) > 0 {
		unsettled := ReplicasUnsettled(st)
		left := 0
		for _, id := range p.replicaIslands {
			if slices.Contains(unsettled, id) {
				left++
			}
		}
		rj := Job{Name: "island replica moves", Total: len(p.replicaIslands), Done: len(p.replicaIslands) - left}
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
