package manager

import (
	"fmt"
	"io"

	"github.com/hashicorp/raft"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/lockcheck"
)

// maxSnapshotBytes bounds a snapshot read back by Restore.
const maxSnapshotBytes = 256 << 20

// applyResult is what fsm.Apply returns through raft's ApplyFuture.
type applyResult struct {
	Epoch   uint64
	Changed bool
	Err     error
}

// fsm is the raft state machine: the cluster map.
type fsm struct {
	mu struct {
		lockcheck.RWMutex
		m *cluster.Map
	}
}

func newFSM() *fsm {
	f := &fsm{}
	f.mu.m = &cluster.Map{DefaultPolicy: cluster.DefaultPolicyFor(0)}
	return f
}

// Map returns a copy of the current map.
func (f *fsm) Map() *cluster.Map {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.mu.m.Clone()
}

// Epoch returns the current epoch.
func (f *fsm) Epoch() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.mu.m.Epoch
}

// member looks one member up without copying the map, and returns the
// epoch with it.
func (f *fsm) member(k cluster.MemberKey) (cluster.MemberView, uint64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	v, ok := f.mu.m.Member(k)
	return v, f.mu.m.Epoch, ok
}

// revocations is Map.Revocations without copying the map (the monitor
// asks every tick).
func (f *fsm) revocations() map[string]uint32 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.mu.m.Revocations()
}

// manager looks a manager up by raft id without copying the map.
func (f *fsm) manager(raftID string) (cluster.ManagerNode, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.mu.m.Manager(raftID)
}

// Apply implements raft.FSM. A command that fails (an unknown member, a
// second format) fails identically on every manager and changes nothing.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return &applyResult{Epoch: f.Epoch()}
	}
	c, err := cluster.DecodeCommand(l.Data)
	if err != nil {
		return &applyResult{Epoch: f.Epoch(), Err: err}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	changed, err := f.mu.m.Apply(c)
	return &applyResult{Epoch: f.mu.m.Epoch, Changed: changed, Err: err}
}

// Snapshot implements raft.FSM: the whole map in its binary form.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return &fsmSnapshot{data: cluster.EncodeMap(f.mu.m)}, nil
}

// Restore implements raft.FSM.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxSnapshotBytes+1))
	if err != nil {
		return fmt.Errorf("cluster: restore snapshot: %w", err)
	}
	if len(b) > maxSnapshotBytes {
		return fmt.Errorf("cluster: restore snapshot: larger than %d bytes", maxSnapshotBytes)
	}
	m, err := cluster.DecodeMap(b)
	if err != nil {
		return fmt.Errorf("cluster: restore snapshot: %w", err)
	}
	m.StripLive()
	f.mu.Lock()
	f.mu.m = m
	f.mu.Unlock()
	return nil
}

type fsmSnapshot struct{ data []byte }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s.data); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("cluster: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
