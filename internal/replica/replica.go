package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/raftlog"
)

// Failpoints of the replication steps (see the package doc).
const (
	FailBeforeAppend = "replica.beforeAppend" // leader: batch built, not handed to raft
	FailBeforeApply  = "replica.beforeApply"  // any replica: entry committed on a quorum, not applied
	FailAfterApply   = "replica.afterApply"   // any replica: entry applied, not answered
)

func init() { faults.Register(FailBeforeAppend, FailBeforeApply, FailAfterApply) }

// Config configures one replica of one island.
type Config struct {
	// Island is the group's id (the island id).
	Island uint32
	// Self is this island server's id; Voters maps every replica's
	// server id (Self included) to its raft address. The first start
	// bootstraps the group with exactly these voters; every replica must
	// be given the same set.
	Self   uint32
	Voters map[uint32]string
	// Join: never bootstrap. The replica waits for the group's leader to
	// add it (a replica moved onto this server, or one whose placement
	// changed since the group was formed); Voters need name only Self.
	Join bool
	// Defer: on the group's first start (it bootstraps), wait longer
	// before a first election (deferFactor × HeartbeatTimeout), so that
	// the replica meant to lead (the placement's first) is elected rather
	// than handed the lead a few seconds later, which gives the island's
	// leases up (every client's cache of it) in the middle of its first
	// workload. The usual timeouts return once a leader is known.
	Defer bool
	// Dir holds db/ (pebble), raft.db (raft-boltdb: log and stable
	// store) and snapshots/.
	Dir string
	// Pebble are the database's options (meta.PebbleOptions).
	Pebble *pebble.Options
	// Log holds the group's raft log and stable state, shared by the
	// server's replicas (OpenLogDB). Nil: the replica opens its own in
	// Dir.
	Log *LogDB
	// Mux is the server's raft port.
	Mux *Mux
	// ApplyTimeout bounds how long Replicate waits for raft to take a
	// batch (not for it to commit). Default 10s.
	ApplyTimeout time.Duration
	// Raft timing; zero values take the defaults below.
	HeartbeatTimeout   time.Duration // 500ms
	ElectionTimeout    time.Duration // 500ms
	LeaderLeaseTimeout time.Duration // 250ms
	CommitTimeout      time.Duration // 500ms
	SnapshotThreshold  uint64        // 8192 entries
	SnapshotInterval   time.Duration // 30s
	TrailingLogs       uint64        // 4096 entries
	Faults             *faults.Set
	Logger             *slog.Logger
	// Observe, when set, is given the time each successful Replicate
	// took (a metric).
	Observe func(time.Duration)
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.Island == 0:
		return errors.New("replica: config: Island must not be 0")
	case c.Self == 0:
		return errors.New("replica: config: Self must not be 0")
	case c.Voters[c.Self] == "":
		return fmt.Errorf("replica: config: Voters lacks this server (%d)", c.Self)
	case c.Dir == "":
		return errors.New("replica: config: Dir is empty")
	case c.Pebble == nil:
		return errors.New("replica: config: Pebble options are nil")
	case c.Mux == nil:
		return errors.New("replica: config: Mux is nil")
	}
	for id, addr := range c.Voters {
		if id == 0 || addr == "" {
			return fmt.Errorf("replica: config: bad voter %d at %q", id, addr)
		}
	}
	return nil
}

// Replica is one replica of an island: its database, the raft group
// member that changes it, and the island's leadership as seen here.
type Replica struct {
	cfg    Config
	log    *slog.Logger
	db     *pebble.DB
	fsm    *fsm
	ownLog *LogDB // opened by the replica (Config.Log nil)
	store  *groupLog
	trans  *raft.NetworkTransport
	layer  raft.StreamLayer
	raft   *raft.Raft
	// running is raft once started, for raft's own goroutines (the log
	// store asks whether it leads).
	running atomic.Pointer[raft.Raft]
	// undefer restores the usual election timeouts of a deferred first
	// start (Config.Defer) once a leader is known; closed stops it.
	undefer sync.WaitGroup
	closed  chan struct{}
	// reload orders raft.ReloadConfig calls (each changes some fields of
	// the current reloadable config: the election timeouts, the snapshot
	// threshold).
	reload sync.Mutex
}

// deferFactor lengthens a deferred replica's first election timeouts
// (Config.Defer): a replica meant to lead campaigns within 1-2 ×
// HeartbeatTimeout of its start, a deferred one after 4-8 ×, so the
// first wins even when the servers start a second or so apart.
const deferFactor = 4

// syncedTransport tells followers of commits only up to what the leader
// has durably in its own log (see groupLog.StoreLogs): a follower applies
// an entry only once the leader's copy is durable too, so every applied
// entry survives the loss of any one replica.
type syncedTransport struct {
	*raft.NetworkTransport
	synced func() uint64
}

func (t *syncedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	args.LeaderCommitIndex = min(args.LeaderCommitIndex, t.synced())
	return t.NetworkTransport.AppendEntries(id, target, args, resp)
}

func (t *syncedTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newMergingPipeline(p, t.synced), nil
}

// Open opens (creating) the replica's database and raft state, and joins
// the group (bootstrapping it with Voters on the very first start).
func Open(cfg Config) (*Replica, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.ApplyTimeout, 10*time.Second)
	def(&cfg.HeartbeatTimeout, 500*time.Millisecond)
	def(&cfg.ElectionTimeout, 500*time.Millisecond)
	def(&cfg.LeaderLeaseTimeout, 250*time.Millisecond)
	def(&cfg.CommitTimeout, 500*time.Millisecond)
	def(&cfg.SnapshotInterval, 30*time.Second)
	if cfg.SnapshotThreshold == 0 {
		cfg.SnapshotThreshold = 8192
	}
	if cfg.TrailingLogs == 0 {
		cfg.TrailingLogs = 4096
	}
	r := &Replica{cfg: cfg, log: cfg.Logger.With("island", cfg.Island, "replica", cfg.Self), closed: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			r.closeParts(false)
		}
	}()
	var err error
	// The raft log is the database's log: an entry applied only in memory
	// is replayed from it after a crash (AppliedKey says where to start),
	// so the database needs no write-ahead log of its own (one write per
	// applied entry saved on every replica).
	opts := *cfg.Pebble
	opts.DisableWAL = true
	if r.db, err = pebble.Open(filepath.Join(cfg.Dir, "db"), &opts); err != nil {
		return nil, fmt.Errorf("replica: open %s: %w", cfg.Dir, err)
	}
	if r.fsm, err = newFSM(r.db, cfg.Dir, r.log, cfg.Faults); err != nil {
		return nil, fmt.Errorf("replica: open %s: %w", cfg.Dir, err)
	}
	logs := cfg.Log
	if logs == nil {
		if r.ownLog, err = OpenLogDB(cfg.Dir, cfg.Pebble.Logger); err != nil {
			return nil, err
		}
		logs = r.ownLog
	}
	if r.store, err = logs.group(cfg.Island); err != nil {
		return nil, err
	}
	if r.fsm.replayTo, err = r.store.LastIndex(); err != nil {
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, raftlog.New(r.log, "raft-snap"))
	if err != nil {
		return nil, fmt.Errorf("replica: snapshot store: %w", err)
	}
	// The database persists across restarts: raft must not restore the
	// last snapshot over it (entries after the applied index are replayed
	// instead), unless the database is behind that snapshot (it was lost
	// or replaced), which restoreIfBehind handles.
	if err := r.restoreIfBehind(snaps); err != nil {
		return nil, err
	}
	if r.layer, err = cfg.Mux.Layer(cfg.Island); err != nil {
		return nil, err
	}
	r.trans = raft.NewNetworkTransportWithLogger(r.layer, 3, 10*time.Second, raftlog.New(r.log, "raft-net"))
	// This replica's appends while it leads are synced in the background
	// (groupLog.StoreLogs); its state machine waits for them.
	r.store.leading = func() bool { rf := r.running.Load(); return rf != nil && rf.State() == raft.Leader }
	r.fsm.synced = r.store.waitSynced
	r.fsm.persisted = r.snapshotPersisted
	rc := raft.DefaultConfig()
	rc.LocalID = serverID(cfg.Self)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.NoSnapshotRestoreOnStart = true
	rc.BatchApplyCh = true
	rc.Logger = raftlog.New(r.log, "raft")
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("replica: raft config: %w", err)
	}
	existing, err := raft.HasExistingState(r.store, r.store, snaps)
	if err != nil {
		return nil, fmt.Errorf("replica: reading raft state in %s: %w", cfg.Dir, err)
	}
	deferred := !existing && !cfg.Join && cfg.Defer
	if deferred {
		rc.HeartbeatTimeout *= deferFactor
		rc.ElectionTimeout *= deferFactor
	}
	if !existing && !cfg.Join {
		boot := raft.Configuration{}
		for _, id := range sortedIDs(cfg.Voters) {
			boot.Servers = append(boot.Servers, raft.Server{Suffrage: raft.Voter, ID: serverID(id), Address: raft.ServerAddress(cfg.Voters[id])})
		}
		if err := raft.BootstrapCluster(rc, r.store, r.store, snaps, r.trans, boot); err != nil {
			return nil, fmt.Errorf("replica: bootstrap: %w", err)
		}
		r.log.Info("replica: bootstrapped", "voters", len(boot.Servers))
	}
	// The cache spares the leader reading entries it just wrote back from
	// the log store to send them.
	cached, err := raft.NewLogCache(1024, r.store)
	if err != nil {
		return nil, err
	}
	if r.raft, err = raft.NewRaft(rc, r.fsm, cached, r.store, snaps, &syncedTransport{r.trans, r.store.synced}); err != nil {
		return nil, fmt.Errorf("replica: start raft: %w", err)
	}
	r.running.Store(r.raft)
	if deferred {
		r.undefer.Add(1)
		go r.undeferWhenLed()
	}
	ok = true
	return r, nil
}

// undeferWhenLed restores the usual election timeouts of a deferred first
// start once the group has a leader (or after a while without one: the
// replica meant to lead may never come).
func (r *Replica) undeferWhenLed() {
	defer r.undefer.Done()
	give := time.NewTimer(10 * deferFactor * r.cfg.HeartbeatTimeout)
	defer give.Stop()
	tick := time.NewTicker(r.cfg.HeartbeatTimeout / 10)
	defer tick.Stop()
	for {
		select {
		case <-r.closed:
			return
		case <-give.C:
		case <-tick.C:
			if addr, _ := r.raft.LeaderWithID(); addr == "" {
				continue
			}
		}
		if err := r.reloadConfig(func(c *raft.ReloadableConfig) {
			c.HeartbeatTimeout, c.ElectionTimeout = r.cfg.HeartbeatTimeout, r.cfg.ElectionTimeout
		}); err != nil {
			r.log.Warn("replica: restoring the election timeouts", "err", err)
		}
		return
	}
}

// reloadConfig changes raft's reloadable config with change, keeping the
// other fields as they are.
func (r *Replica) reloadConfig(change func(*raft.ReloadableConfig)) error {
	rf := r.running.Load() // raft's own goroutines call this too
	if rf == nil {
		return raft.ErrRaftShutdown
	}
	r.reload.Lock()
	defer r.reload.Unlock()
	c := rf.ReloadableConfig()
	change(&c)
	return rf.ReloadConfig(c)
}

// maxSnapshotThreshold caps the adaptive snapshot threshold (entries).
const maxSnapshotThreshold = 1 << 20

// snapshotThresholdFor is how many entries the log takes before the next
// snapshot, given the last snapshot's size and the mean entry size
// (0: unknown): at least base, and enough that the entries hold about as
// many bytes as the snapshot, so writing snapshots costs about as much
// as writing the log whatever the database's size; capped so a replica
// rebuilt from a snapshot never replays more than maxSnapshotThreshold
// entries.
func snapshotThresholdFor(snapBytes int64, avgEntry, base uint64) uint64 {
	if avgEntry == 0 {
		avgEntry = 256
	}
	return min(max(uint64(max(snapBytes, 0))/avgEntry, base), max(base, maxSnapshotThreshold))
}

// snapshotPersisted adapts the snapshot threshold to the size of the
// snapshot just written (see "# Snapshots" in the package doc).
func (r *Replica) snapshotPersisted(bytes int64) {
	want := snapshotThresholdFor(bytes, r.store.avgEntryBytes(), r.cfg.SnapshotThreshold)
	if rf := r.running.Load(); rf == nil || rf.ReloadableConfig().SnapshotThreshold == want {
		return
	}
	if err := r.reloadConfig(func(c *raft.ReloadableConfig) { c.SnapshotThreshold = want }); err != nil {
		r.log.Warn("replica: adapting the snapshot threshold", "err", err)
		return
	}
	r.log.Debug("replica: snapshot threshold", "island", r.cfg.Island, "snapshot_bytes", bytes, "entries", want)
}

// restoreIfBehind restores the newest local snapshot when the database
// has not applied up to it: the database directory was lost while the
// raft log was compacted past what it held.
func (r *Replica) restoreIfBehind(snaps *raft.FileSnapshotStore) error {
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return err
	}
	if list[0].Index <= r.fsm.applied.Load() {
		return nil
	}
	_, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		return fmt.Errorf("replica: opening snapshot %s: %w", list[0].ID, err)
	}
	r.log.Warn("replica: database behind the last snapshot; restoring it", "applied", r.fsm.applied.Load(), "snapshot", list[0].Index)
	return r.fsm.Restore(rc)
}

func serverID(id uint32) raft.ServerID { return raft.ServerID(strconv.FormatUint(uint64(id), 10)) }

func parseServerID(id raft.ServerID) uint32 {
	n, _ := strconv.ParseUint(string(id), 10, 32)
	return uint32(n)
}

func sortedIDs(m map[uint32]string) []uint32 {
	ids := make([]uint32, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	return ids
}

// DB is the replica's database. Only the FSM writes it; an Island reads
// it (and hands its batches to Replicate) while this replica leads.
func (r *Replica) DB() *pebble.DB { return r.db }

// Replicate appends batch to the group's log and returns once a quorum
// holds it and it is applied to DB (meta.Replicator). It waits for raft's
// answer whatever ctx says: an entry handed to raft may still commit, and
// the island must not act as if it had not. Not leading, or losing the
// lead before the entry committed, is metawire.ErrUnavailable (the entry
// may yet commit under the next leader; the client retries there).
func (r *Replica) Replicate(ctx context.Context, batch []byte) error {
	if err := r.cfg.Faults.Hit(FailBeforeAppend); err != nil {
		return fmt.Errorf("%w: island %d: %v", metawire.ErrUnavailable, r.cfg.Island, err)
	}
	if p := r.fsm.failed.Load(); p != nil {
		return fmt.Errorf("%w: island %d replica %d: %v", metawire.ErrIO, r.cfg.Island, r.cfg.Self, *p)
	}
	// raft keeps the slice (its log cache sends it to followers after
	// Replicate returns and the caller reuses its batch): a copy.
	start := time.Now()
	f := r.raft.Apply(append([]byte(nil), batch...), r.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		return r.raftErr("replicate", err)
	}
	if r.cfg.Observe != nil {
		r.cfg.Observe(time.Since(start))
	}
	if err, ok := f.Response().(error); ok && err != nil {
		return fmt.Errorf("%w: island %d: %v", metawire.ErrIO, r.cfg.Island, err)
	}
	return nil
}

// raftErr maps raft's errors to the island protocol's.
func (r *Replica) raftErr(op string, err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrRaftShutdown),
		errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: island %d replica %d: %s: %v", metawire.ErrUnavailable, r.cfg.Island, r.cfg.Self, op, err)
	}
	return fmt.Errorf("%w: island %d replica %d: %s: %v", metawire.ErrIO, r.cfg.Island, r.cfg.Self, op, err)
}

// LeaderCh signals this replica gaining (true) or losing (false) the
// lead; only the latest signal is kept when the reader is slow.
func (r *Replica) LeaderCh() <-chan bool { return r.raft.LeaderCh() }

// IsLeader reports whether this replica leads now. raft steps a leader
// down once it has not heard from a quorum for LeaderLeaseTimeout, which
// is shorter than the time followers wait before electing another: a
// replica that answers reads while IsLeader holds does not answer after
// a newer leader accepted a change (with clocks that run at the same
// rate).
func (r *Replica) IsLeader() bool { return r.raft.State() == raft.Leader }

// Term is the raft term this replica is in.
func (r *Replica) Term() uint64 { return r.raft.CurrentTerm() }

// Barrier waits until every entry committed before it is applied here
// (a new leader does this before it serves).
func (r *Replica) Barrier(timeout time.Duration) error {
	if err := r.raft.Barrier(timeout).Error(); err != nil {
		return r.raftErr("barrier", err)
	}
	return nil
}

// Leader returns the server id of the leader this replica knows of.
func (r *Replica) Leader() (uint32, bool) {
	_, id := r.raft.LeaderWithID()
	if id == "" {
		return 0, false
	}
	return parseServerID(id), true
}

// TransferTo hands the lead to server (a preferred leader), which must be
// a voter of the group's configuration.
func (r *Replica) TransferTo(server uint32) error {
	var addr string
	for _, m := range r.Members() {
		if m.ID == server && m.Voter {
			addr = m.Addr
		}
	}
	if addr == "" {
		return fmt.Errorf("replica: island %d has no voting replica on server %d", r.cfg.Island, server)
	}
	if err := r.raft.LeadershipTransferToServer(serverID(server), raft.ServerAddress(addr)).Error(); err != nil {
		return r.raftErr("leadership transfer", err)
	}
	return nil
}

// Member is one replica of the group's raft configuration.
type Member struct {
	ID    uint32 // island server
	Addr  string // its raft address
	Voter bool   // false: a non-voter catching up
}

// Members is the group's latest raft configuration as known here (the
// leader's is authoritative). Nil when raft cannot say.
func (r *Replica) Members() []Member {
	cf := r.raft.GetConfiguration()
	if cf.Error() != nil {
		return nil
	}
	var out []Member
	for _, sv := range cf.Configuration().Servers {
		out = append(out, Member{ID: parseServerID(sv.ID), Addr: string(sv.Address), Voter: sv.Suffrage == raft.Voter})
	}
	return out
}

// AddNonvoter adds server (at its raft address) to the group as a
// non-voter: the leader sends it the log (or a snapshot) without counting
// it for commits. Leader only.
func (r *Replica) AddNonvoter(server uint32, addr string) error {
	if err := r.raft.AddNonvoter(serverID(server), raft.ServerAddress(addr), 0, r.cfg.ApplyTimeout).Error(); err != nil {
		return r.raftErr("add non-voter", err)
	}
	return nil
}

// Promote makes server (a member already) a voter. Leader only.
func (r *Replica) Promote(server uint32, addr string) error {
	if err := r.raft.AddVoter(serverID(server), raft.ServerAddress(addr), 0, r.cfg.ApplyTimeout).Error(); err != nil {
		return r.raftErr("promote", err)
	}
	return nil
}

// RemoveMember removes server from the group. Leader only; removing the
// leader itself makes it step down once the change commits.
func (r *Replica) RemoveMember(server uint32) error {
	if err := r.raft.RemoveServer(serverID(server), 0, r.cfg.ApplyTimeout).Error(); err != nil {
		return r.raftErr("remove member", err)
	}
	return nil
}

// Applied is the raft index applied to the database.
func (r *Replica) Applied() uint64 { return r.fsm.applied.Load() }

// Destroy stops the replica and deletes its database, snapshots and raft
// log: the group no longer counts it (its leader removed it).
func (r *Replica) Destroy(logs *LogDB) error {
	if err := r.closeParts(false); err != nil {
		r.log.Warn("replica: closing before destroying", "err", err)
	}
	if err := os.RemoveAll(r.cfg.Dir); err != nil {
		return fmt.Errorf("replica: removing %s: %w", r.cfg.Dir, err)
	}
	// A log of the replica's own lived in Dir and went with it.
	if logs != nil && logs != r.ownLog {
		return logs.DropGroup(r.cfg.Island)
	}
	return nil
}

// Status is a replica's view of its group.
type Status struct {
	Island       uint32
	Server       uint32
	State        string // leader, follower, candidate, shutdown
	Leader       uint32 // 0: none known
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64 // applied to the database
	LastContact  time.Duration
	Voters       []uint32 // voting members (non-voters catching up are not listed)
	Failed       string   // the entry this replica could not apply, if any
}

// Status reports the replica's state.
func (r *Replica) Status() Status {
	s := Status{
		Island: r.cfg.Island, Server: r.cfg.Self, State: r.raft.State().String(),
		Term: r.raft.CurrentTerm(), CommitIndex: r.raft.CommitIndex(), AppliedIndex: r.fsm.applied.Load(),
	}
	if s.State == raft.Leader.String() {
		s.State = "leader"
	}
	s.State = lower(s.State)
	s.Leader, _ = r.Leader()
	if lc := r.raft.LastContact(); !lc.IsZero() && s.State != "leader" {
		s.LastContact = time.Since(lc)
	}
	for _, m := range r.Members() {
		if m.Voter {
			s.Voters = append(s.Voters, m.ID)
		}
	}
	if p := r.fsm.failed.Load(); p != nil {
		s.Failed = (*p).Error()
	}
	return s
}

func voters(ms []Member) int {
	n := 0
	for _, m := range ms {
		if m.Voter {
			n++
		}
	}
	return n
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Close hands the lead to another replica when it leads (so the island
// pauses for a transfer, not an election), stops raft and closes the
// database.
func (r *Replica) Close() error {
	if r.raft != nil && r.raft.State() == raft.Leader && voters(r.Members()) > 1 {
		if err := r.raft.LeadershipTransfer().Error(); err != nil {
			r.log.Debug("replica: leadership transfer at close", "err", err)
		}
	}
	return r.closeParts(true)
}

// closeParts stops raft and closes the stores; flush writes the
// database's memtable first (a clean stop: nothing to replay at the next
// start). A crash is closeParts(false).
func (r *Replica) closeParts(flush bool) error {
	select {
	case <-r.closed:
	default:
		close(r.closed)
	}
	r.undefer.Wait()
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if r.raft != nil {
		keep(r.raft.Shutdown().Error())
	}
	if r.trans != nil {
		keep(r.trans.Close())
	} else if r.layer != nil {
		keep(r.layer.Close())
	}
	if r.store != nil {
		r.store.close()
	}
	if r.ownLog != nil {
		keep(r.ownLog.Close())
	}
	if r.db != nil {
		if r.fsm != nil && flush {
			keep(r.db.Flush())
		}
		keep(r.db.Close())
	}
	return first
}
