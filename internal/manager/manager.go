package manager

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/raftlog"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/bbolt"

	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Defaults of Config. The raft timeouts are shorter than hashicorp/raft's
// (1s) so that a laptop cluster fails over in about a second; they are
// still far above a LAN round trip.
const (
	DefaultDownAfter          = 5 * time.Second
	DefaultGatewayExpiry      = 15 * time.Minute
	DefaultHeartbeatTimeout   = 500 * time.Millisecond
	DefaultElectionTimeout    = 500 * time.Millisecond
	DefaultLeaderLeaseTimeout = 250 * time.Millisecond
	DefaultApplyTimeout       = 5 * time.Second
	DefaultSnapshotThreshold  = 1024
	DefaultSnapshotInterval   = 2 * time.Minute
)

// Config configures a manager.
type Config struct {
	// Dir holds raft.db (raft log and stable store), snapshots/, node-id
	// and LOCK. Created if absent.
	Dir string
	// Listen is the client-facing address (host:port, port 0 picks one).
	// The host must be one that members and other managers can reach.
	Listen string
	// RaftListen is the raft transport's address. Default: Listen's host
	// with port+1 (port 0 when Listen's port is 0).
	RaftListen string
	// Join is the client address of a manager of an existing group. Used
	// on first start only (an empty Dir): this manager asks the leader to
	// add it as a voter. Without Join, the first start bootstraps a new
	// single-voter group.
	Join string
	// DownAfter is how long a member may go without a heartbeat before the
	// leader marks it down. Default DefaultDownAfter.
	DownAfter time.Duration
	// GatewayExpiry is how long a gateway or mount may go without a
	// heartbeat before the leader removes it from the map (a live one
	// registers again). Default DefaultGatewayExpiry.
	GatewayExpiry time.Duration
	Logger        *slog.Logger
	// Registerer, when set, receives the manager's metrics (metrics.go).
	Registerer prometheus.Registerer

	// Raft timing; zero picks the Default* constants.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	SnapshotThreshold  uint64
	SnapshotInterval   time.Duration
	// ApplyTimeout bounds enqueueing one raft command. Default 5s.
	ApplyTimeout time.Duration
	// Key is the cluster key. With it every connection, the raft
	// transport's included, must authenticate with a key of this cluster,
	// and each operation needs its capability (needs). nil serves
	// unauthenticated: in-process tests only; the atoll command always
	// sets it.
	Key *auth.Key
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.Dir == "" {
		return errors.New("manager: --dir is required")
	}
	if c.Listen == "" {
		return errors.New("manager: --listen is required")
	}
	if err := checkListen("--listen", c.Listen); err != nil {
		return err
	}
	if c.RaftListen != "" {
		if err := checkListen("--raft-listen", c.RaftListen); err != nil {
			return err
		}
	} else if _, err := c.raftListen(); err != nil {
		return err
	}
	if c.Join != "" {
		if _, _, err := net.SplitHostPort(c.Join); err != nil {
			return fmt.Errorf("manager: --join %q: %v", c.Join, err)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"--down-after", c.DownAfter}, {"gateway expiry", c.GatewayExpiry}, {"heartbeat timeout", c.HeartbeatTimeout}, {"election timeout", c.ElectionTimeout},
		{"leader lease timeout", c.LeaderLeaseTimeout}, {"snapshot interval", c.SnapshotInterval}, {"apply timeout", c.ApplyTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("manager: negative %s %s", d.name, d.v)
		}
	}
	if c.DownAfter != 0 && c.DownAfter < 10*time.Millisecond {
		return fmt.Errorf("manager: --down-after %s below 10ms", c.DownAfter)
	}
	return nil
}

func checkListen(flag, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("manager: %s %q: %v", flag, addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("manager: %s %q: bad port", flag, addr)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("manager: %s %q: name an address peers can reach (e.g. 127.0.0.1:7300), not a wildcard", flag, addr)
	}
	return nil
}

// raftListen returns the raft address: RaftListen, or Listen's port + 1.
func (c *Config) raftListen() (string, error) {
	if c.RaftListen != "" {
		return c.RaftListen, nil
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return "", fmt.Errorf("manager: --listen %q: %v", c.Listen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p >= 65535 {
		return "", fmt.Errorf("manager: --listen %q: no port+1 for the raft transport; set --raft-listen", c.Listen)
	}
	if p != 0 {
		p++
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.DownAfter == 0 {
		c.DownAfter = DefaultDownAfter
	}
	if c.GatewayExpiry == 0 {
		c.GatewayExpiry = DefaultGatewayExpiry
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = DefaultElectionTimeout
	}
	if c.LeaderLeaseTimeout == 0 {
		c.LeaderLeaseTimeout = DefaultLeaderLeaseTimeout
		if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
			c.LeaderLeaseTimeout = c.HeartbeatTimeout
		}
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
	if c.ApplyTimeout == 0 {
		c.ApplyTimeout = DefaultApplyTimeout
	}
	return c
}

// liveInfo is the leader's in-memory record of a member's heartbeats.
type liveInfo struct {
	last  time.Time
	stats cluster.MemberStats
	hist  *sampleRing // counters of the last HistoryLen heartbeats
}

// Manager is one member of the manager raft group, serving the cluster
// protocol over internal/wire.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	id    string
	lock  *os.File
	ln    net.Listener
	srv   *wire.Server
	fsm   *fsm
	trans *raft.NetworkTransport
	store *raftboltdb.BoltStore
	raft  *raft.Raft
	join  bool // first start with Join: ask the group to add us

	refusedRaft auth.Refusals // raft connections that failed auth

	mu struct {
		lockcheck.Mutex
		// leaderTerm is the term in which this manager finished becoming
		// leader (barrier applied, heartbeat table reset); 0 when it is
		// not a ready leader.
		leaderTerm  uint64
		leaderSince time.Time
		live        map[cluster.MemberKey]liveInfo
		jobs        func() []cluster.Job
		progress    moveProgress
	}
}

// SetJobs installs the function Status calls to list background jobs.
func (m *Manager) SetJobs(fn func() []cluster.Job) {
	m.mu.Lock()
	m.mu.jobs = fn
	m.mu.Unlock()
}

// New opens (or creates) the manager's state in cfg.Dir, binds both
// listeners and starts raft: a first start without Join bootstraps a
// single-voter group. Run must be called to serve and, later, to shut
// everything down.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	raftListen, err := cfg.raftListen()
	if err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, fsm: newFSM()}
	ok := false
	defer func() {
		if !ok {
			m.closeResources()
		}
	}()
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("manager: data directory %s: %w", cfg.Dir, err)
	}
	if m.lock, err = lockDir(cfg.Dir); err != nil {
		return nil, err
	}
	if m.id, err = nodeID(cfg.Dir); err != nil {
		return nil, err
	}
	m.log = cfg.Logger.With("manager", m.id)
	if m.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("manager: listen %s: %w", cfg.Listen, err)
	}
	if cfg.Key != nil {
		var st *authStream
		st, err = newAuthStream(raftListen, cfg.Key, m.log, &m.refusedRaft)
		if err == nil {
			m.trans = raft.NewNetworkTransportWithLogger(st, 3, 10*time.Second, raftlog.New(m.log, "raft-net"))
		}
	} else {
		m.trans, err = raft.NewTCPTransportWithLogger(raftListen, nil, 3, 10*time.Second, raftlog.New(m.log, "raft-net"))
	}
	if err != nil {
		return nil, fmt.Errorf("manager: raft listen %s: %w", raftListen, err)
	}
	m.store, err = raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(cfg.Dir, "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: 2 * time.Second},
	})
	if err != nil {
		return nil, fmt.Errorf("manager: open %s: %w", filepath.Join(cfg.Dir, "raft.db"), err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, raftlog.New(m.log, "raft-snap"))
	if err != nil {
		return nil, fmt.Errorf("manager: snapshot store: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(m.id)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = 1024
	rc.Logger = raftlog.New(m.log, "raft")
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("manager: raft config: %w", err)
	}
	existing, err := raft.HasExistingState(m.store, m.store, snaps)
	if err != nil {
		return nil, fmt.Errorf("manager: reading raft state in %s: %w", cfg.Dir, err)
	}
	switch {
	case !existing && cfg.Join == "":
		boot := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: rc.LocalID, Address: m.trans.LocalAddr()}}}
		if err := raft.BootstrapCluster(rc, m.store, m.store, snaps, m.trans, boot); err != nil {
			return nil, fmt.Errorf("manager: bootstrap: %w", err)
		}
		m.log.Info("manager: bootstrapped a new manager group", "raft_addr", m.trans.LocalAddr())
	case !existing:
		if cfg.Join == m.Addr() {
			return nil, fmt.Errorf("manager: --join %s names this manager; join a running manager, or omit --join to start a new group", cfg.Join)
		}
		m.join = true
	case cfg.Join != "":
		m.log.Info("manager: existing raft state found; ignoring --join", "dir", cfg.Dir)
	}
	if m.raft, err = raft.NewRaft(rc, m.fsm, m.store, m.store, snaps, m.trans); err != nil {
		return nil, fmt.Errorf("manager: start raft: %w", err)
	}
	var verifier *auth.Verifier
	if cfg.Key != nil {
		cluster.FollowRevocations(cfg.Key)
		if verifier, err = auth.NewVerifier(cfg.Key); err != nil {
			return nil, fmt.Errorf("manager: %w", err)
		}
		m.followRevocations()
	}
	m.srv, err = wire.NewServer(wire.ServerConfig{
		Auth:      verifier,
		Handler:   m.handle,
		Logger:    m.log,
		ErrorCode: cluster.StatusOf,
		Limits:    wire.Limits{MaxMsg: cluster.MaxMsg, MaxPayload: 1 << 10},
	})
	if err != nil {
		return nil, err
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(newManagerCollector(m)); err != nil {
			return nil, fmt.Errorf("manager: metrics: %w", err)
		}
	}
	ok = true
	return m, nil
}

// lockDir takes DIR/LOCK so two managers never share a directory.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("manager: data directory %s is not writable: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("manager: another manager is using %s (lock held)", dir)
	}
	return f, nil
}

// nodeID returns the manager's raft server id, created on first start and
// kept in DIR/node-id: a stable identity independent of addresses.
func nodeID(dir string) (string, error) {
	path := filepath.Join(dir, "node-id")
	if b, err := os.ReadFile(path); err == nil {
		id := strings.TrimSpace(string(b))
		if id == "" || len(id) > cluster.MaxRaftIDLen {
			return "", fmt.Errorf("manager: %s: bad node id %q", path, id)
		}
		return id, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("manager: %w", err)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("manager: node id: %w", err)
	}
	id := "m-" + hex.EncodeToString(b[:])
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("manager: write node id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("manager: write node id: %w", err)
	}
	return id, nil
}

// Addr is the client-facing listening address.
func (m *Manager) Addr() string { return m.ln.Addr().String() }

// Refused counts connections closed because they did not authenticate
// with a key of this cluster (client port and raft port).
func (m *Manager) Refused() uint64 { return m.srv.Refused() + m.refusedRaft.Count() }

// RaftAddr is the raft transport's address.
func (m *Manager) RaftAddr() string { return string(m.trans.LocalAddr()) }

// ID is the manager's raft server id.
func (m *Manager) ID() string { return m.id }

// IsLeader reports whether this manager is the ready leader (it serves
// writes).
func (m *Manager) IsLeader() bool { return m.leaderCheck() == nil }

// Map returns this manager's current map (with heartbeat data when it is
// the leader).
func (m *Manager) Map() *cluster.Map { return m.currentMap() }

// Run serves until ctx is done, then stops serving, hands leadership to
// another voter when there is one, and shuts raft down cleanly.
func (m *Manager) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	serveErr := make(chan error, 1)
	wg.Add(2)
	go func() {
		defer wg.Done()
		serveErr <- m.srv.Serve(ctx, m.ln)
		cancel()
	}()
	go func() {
		defer wg.Done()
		m.leaderLoop(ctx)
	}()
	if m.join {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.joinLoop(ctx)
		}()
	}
	m.log.Info("manager: serving", "addr", m.Addr(), "raft_addr", m.RaftAddr(), "dir", m.cfg.Dir)
	<-ctx.Done()
	wg.Wait()
	err := <-serveErr
	m.shutdown()
	return err
}

// shutdown transfers leadership (when others can take it) and closes raft
// and the stores.
func (m *Manager) shutdown() {
	if m.raft.State() == raft.Leader {
		if cf := m.raft.GetConfiguration(); cf.Error() == nil && countVoters(cf.Configuration()) > 1 {
			if err := m.raft.LeadershipTransfer().Error(); err != nil {
				m.log.Warn("manager: leadership transfer before shutdown failed", "err", err)
			}
		}
	}
	m.closeResources()
	m.log.Info("manager: stopped")
}

func countVoters(c raft.Configuration) int {
	n := 0
	for _, s := range c.Servers {
		if s.Suffrage == raft.Voter {
			n++
		}
	}
	return n
}

// closeResources releases whatever New acquired, in reverse order.
func (m *Manager) closeResources() {
	if m.raft != nil {
		if err := m.raft.Shutdown().Error(); err != nil {
			m.log.Warn("manager: raft shutdown", "err", err)
		}
	}
	if m.trans != nil {
		_ = m.trans.Close()
	}
	if m.store != nil {
		if err := m.store.Close(); err != nil {
			m.log.Warn("manager: close raft.db", "err", err)
		}
	}
	if m.ln != nil {
		_ = m.ln.Close()
	}
	if m.lock != nil {
		_ = m.lock.Close()
	}
}

// joinLoop asks the existing group to add this manager as a voter,
// retrying until it succeeds or ctx is done.
func (m *Manager) joinLoop(ctx context.Context) {
	cl := cluster.NewClient([]string{m.cfg.Join}, m.cfg.Key, m.log)
	defer cl.Close()
	req := cluster.JoinReq{RaftID: m.id, RaftAddr: m.RaftAddr(), ClientAddr: m.Addr()}
	bo := cluster.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		err := cl.Join(ctx, req)
		if err == nil {
			m.log.Info("manager: joined the manager group", "via", m.cfg.Join)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, cluster.ErrBadRequest) {
			m.log.Error("manager: join refused", "via", m.cfg.Join, "err", err)
			return
		}
		m.log.Warn("manager: join failed; retrying", "via", m.cfg.Join, "err", err)
		if !cluster.SleepCtx(ctx, bo.Next()) {
			return
		}
	}
}

// leaderClientAddr is the client address of the current raft leader, or ""
// when no leader is known (or it has not recorded its address yet).
func (m *Manager) leaderClientAddr() string {
	_, lid := m.raft.LeaderWithID()
	if lid == "" {
		return ""
	}
	if string(lid) == m.id {
		return m.Addr()
	}
	if n, ok := m.fsm.manager(string(lid)); ok {
		return n.ClientAddr
	}
	return ""
}

// leaderCheck returns nil on the ready leader, ErrUnavailable on a leader
// still catching up, and *NotLeaderError elsewhere.
func (m *Manager) leaderCheck() error {
	if m.raft.State() == raft.Leader {
		term := m.raft.CurrentTerm()
		m.mu.Lock()
		ready := m.mu.leaderTerm != 0 && m.mu.leaderTerm == term
		m.mu.Unlock()
		if ready {
			return nil
		}
		return fmt.Errorf("%w: leader is starting", cluster.ErrUnavailable)
	}
	nl := &cluster.NotLeaderError{Leader: m.leaderClientAddr()}
	if nl.Leader == m.Addr() {
		nl.Leader = "" // raft's view lags ours; let the client wait
	}
	return nl
}

// apply commits one command through raft and returns the FSM's result.
func (m *Manager) apply(c *cluster.Command) (*applyResult, error) {
	f := m.raft.Apply(c.Encode(), m.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
			errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return nil, &cluster.NotLeaderError{Leader: m.leaderClientAddr()}
		case errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, raft.ErrEnqueueTimeout):
			return nil, fmt.Errorf("%w: %v", cluster.ErrUnavailable, err)
		}
		return nil, fmt.Errorf("%w: raft apply %s: %v", cluster.ErrInternal, c.Type, err)
	}
	res, ok := f.Response().(*applyResult)
	if !ok {
		return nil, fmt.Errorf("%w: raft apply %s: unexpected result %T", cluster.ErrInternal, c.Type, f.Response())
	}
	if res.Err != nil {
		return nil, res.Err
	}
	return res, nil
}

// currentMap is the FSM's map, with the heartbeat table overlaid when this
// manager is the leader.
func (m *Manager) currentMap() *cluster.Map {
	mp := m.fsm.Map()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.live == nil {
		return mp
	}
	for i := range mp.Storage {
		s := &mp.Storage[i]
		if li, ok := m.mu.live[cluster.MemberKey{Kind: cluster.KindStorage, ID: uint32(s.Slot)}]; ok {
			s.LastHeartbeat = li.last
			s.CapacityBytes, s.UsedBytes, s.Degraded = li.stats.CapacityBytes, li.stats.UsedBytes, li.stats.Degraded
		}
	}
	for i := range mp.Islands {
		if li, ok := m.mu.live[cluster.MemberKey{Kind: cluster.KindIsland, ID: mp.Islands[i].ID}]; ok {
			mp.Islands[i].LastHeartbeat = li.last
		}
	}
	for i := range mp.Gateways {
		if li, ok := m.mu.live[cluster.MemberKey{Kind: cluster.KindGateway, ID: mp.Gateways[i].ID}]; ok {
			mp.Gateways[i].LastHeartbeat = li.last
		}
	}
	return mp
}

// touch records a sign of life from a member (leader only).
func (m *Manager) touch(k cluster.MemberKey, stats *cluster.MemberStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.live == nil {
		return
	}
	li := m.mu.live[k]
	li.last = time.Now()
	if stats != nil {
		li.stats = *stats
		if li.hist == nil {
			li.hist = new(sampleRing)
		}
		li.hist.add(sample{at: li.last.UnixNano(), read: stats.BytesRead, written: stats.BytesWritten, ops: stats.Ops})
	}
	m.mu.live[k] = li
}

// memberAllowed: storage servers and islands serve data and names, so
// only holders of the cluster key may register or heartbeat as one (a
// forged storage member would be handed stripes); gateways and mounts
// register with their user keys.
func memberAllowed(p auth.Peer, k cluster.MemberKey) error {
	if k.Kind == cluster.KindGateway {
		return nil
	}
	return p.Allow(auth.CapMember, "registering "+k.String())
}

func (m *Manager) handle(ctx context.Context, req *wire.Request) (wire.Response, error) {
	if err := req.Peer.Allow(cluster.Schema.Needs(req.Op), cluster.Schema.Name(req.Op)); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: %w", err)
	}
	switch req.Op {
	case cluster.OpGetMap:
		return m.handleGetMap(req)
	case cluster.OpRegister:
		return m.handleRegister(req)
	case cluster.OpHeartbeat:
		return m.handleHeartbeat(req)
	case cluster.OpSetState:
		return m.handleSetState(req)
	case cluster.OpFormat:
		return m.handleFormat(req)
	case cluster.OpJoin:
		return m.handleJoin(req)
	case cluster.OpStatus:
		return m.handleStatus(req)
	case cluster.OpSetTable:
		return m.handleSetTable(req)
	case cluster.OpSetPolicy:
		return m.handleSetPolicy(req)
	case cluster.OpMoveEntries, cluster.OpFinishMove, cluster.OpCancelMove:
		return m.handleMove(req)
	case cluster.OpIslandServer, cluster.OpSetReplicas:
		return m.handlePlacement(req)
	case cluster.OpRemove:
		return m.handleRemove(req)
	case cluster.OpRevoke:
		return m.handleRevoke(req)
	}
	return wire.Response{}, fmt.Errorf("cluster: op %d: %w: unknown operation", req.Op, cluster.ErrBadRequest)
}

func (m *Manager) handleGetMap(req *wire.Request) (wire.Response, error) {
	var r cluster.GetMapReq
	if err := cluster.Unmarshal(req.Msg, &r); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: get-map: %w", err)
	}
	mp := m.currentMap()
	if mp.Epoch < r.MinEpoch {
		return wire.Response{}, fmt.Errorf("cluster: get-map: %w: this manager has epoch %d, want %d", cluster.ErrStaleEpoch, mp.Epoch, r.MinEpoch)
	}
	return wire.Response{Msg: cluster.EncodeMap(mp)}, nil
}

func (m *Manager) handleRegister(req *wire.Request) (wire.Response, error) {
	var r cluster.RegisterReq
	if err := cluster.Unmarshal(req.Msg, &r); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: register: %w", err)
	}
	k := cluster.MemberKey{Kind: r.Kind, ID: r.ID}
	if err := cluster.ValidateKey(k); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: register: %w", err)
	}
	if err := memberAllowed(req.Peer, k); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: register: %w", err)
	}
	if err := cluster.ValidateAddr(k.String(), r.Addr); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: register: %w", err)
	}
	if r.PID < 0 {
		return wire.Response{}, fmt.Errorf("cluster: register %s: %w: negative pid", k, cluster.ErrBadRequest)
	}
	if err := m.leaderCheck(); err != nil {
		return wire.Response{}, err
	}
	// Record the sign of life first, so the monitor never sees the member
	// up without one.
	m.touch(k, nil)
	c := &cluster.Command{Type: cluster.CmdRegister, Key: k, Addr: r.Addr, PID: r.PID}
	if !req.Peer.Caps.Has(auth.CapMember) {
		c.Owner = req.Peer.Name
	}
	res, err := m.apply(c)
	if err != nil {
		return wire.Response{}, fmt.Errorf("cluster: register %s: %w", k, err)
	}
	if res.Changed {
		m.log.Info("manager: member registered", "member", k.String(), "addr", r.Addr, "pid", r.PID, "epoch", res.Epoch)
	}
	return wire.Response{Msg: cluster.EncodeMap(m.currentMap())}, nil
}

func (m *Manager) handleHeartbeat(req *wire.Request) (wire.Response, error) {
	var r cluster.HeartbeatReq
	if err := cluster.Unmarshal(req.Msg, &r); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: heartbeat: %w", err)
	}
	k := cluster.MemberKey{Kind: r.Kind, ID: r.ID}
	if err := cluster.ValidateKey(k); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: heartbeat: %w", err)
	}
	if err := memberAllowed(req.Peer, k); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: heartbeat: %w", err)
	}
	if err := m.leaderCheck(); err != nil {
		return wire.Response{}, err
	}
	v, epoch, ok := m.fsm.member(k)
	if !ok {
		return wire.Response{}, fmt.Errorf("cluster: heartbeat %s: %w", k, cluster.ErrUnknownMember)
	}
	if len(r.Stats.MetricsAddr) > cluster.MaxMetricsAddr {
		r.Stats.MetricsAddr = "" // informational only: not worth refusing the heartbeat
	}
	if len(r.Stats.Role) > cluster.MaxRoleLen {
		r.Stats.Role = r.Stats.Role[:cluster.MaxRoleLen]
	}
	m.touch(k, &r.Stats)
	resp := cluster.HeartbeatResp{Epoch: epoch, State: v.State}
	if v.State == cluster.StateDown {
		res, err := m.apply(&cluster.Command{Type: cluster.CmdMarkUp, Key: k})
		if err != nil {
			return wire.Response{}, fmt.Errorf("cluster: heartbeat %s: mark up: %w", k, err)
		}
		if res.Changed {
			m.log.Info("manager: member up again", "member", k.String(), "epoch", res.Epoch)
		}
		resp = cluster.HeartbeatResp{Epoch: res.Epoch, State: cluster.StateUp}
	}
	return wire.Response{Msg: cluster.Marshal(&resp)}, nil
}

func (m *Manager) handleRemove(req *wire.Request) (wire.Response, error) {
	var r cluster.RemoveReq
	if err := cluster.Unmarshal(req.Msg, &r); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: remove: %w", err)
	}
	k := cluster.MemberKey{Kind: r.Kind, ID: r.ID}
	if err := cluster.ValidateKey(k); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: remove: %w", err)
	}
	if err := m.leaderCheck(); err != nil {
		return wire.Response{}, err
	}
	if _, _, ok := m.fsm.member(k); !ok {
		return wire.Response{}, fmt.Errorf("cluster: remove %s: %w", k, cluster.ErrUnknownMember)
	}
	res, err := m.apply(&cluster.Command{Type: cluster.CmdRemove, Keys: []cluster.MemberKey{k}})
	if err != nil {
		return wire.Response{}, fmt.Errorf("cluster: remove %s: %w", k, err)
	}
	m.forget(k)
	m.log.Info("manager: member removed", "member", k.String(), "epoch", res.Epoch)
	return wire.Response{Msg: cluster.Marshal(&cluster.EpochResp{Epoch: res.Epoch})}, nil
}

func (m *Manager) handleRevoke(req *wire.Request) (wire.Response, error) {
	var r cluster.RevokeReq
	if err := cluster.Unmarshal(req.Msg, &r); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: revoke: %w", err)
	}
	if r.Name == auth.ClusterKeyName {
		return wire.Response{}, fmt.Errorf("cluster: revoke: %w: the cluster key is revoked by making a new cluster key", cluster.ErrBadRequest)
	}
	if err := m.leaderCheck(); err != nil {
		return wire.Response{}, err
	}
	res, err := m.apply(&cluster.Command{Type: cluster.CmdRevoke, Owner: r.Name})
	if err != nil {
		return wire.Response{}, fmt.Errorf("cluster: revoke %q: %w", r.Name, err)
	}
	m.followRevocations()
	m.log.Info("manager: key revoked", "key", r.Name, "epoch", res.Epoch)
	return wire.Response{Msg: cluster.Marshal(&cluster.EpochResp{Epoch: res.Epoch})}, nil
}

// followRevocations hands the map's revocations to this manager's own
// key verifier (a follower's map is as new as its log).
func (m *Manager) followRevocations() {
	if k := m.cfg.Key; k != nil && k.Revocations != nil {
		k.Revocations.Set(m.fsm.revocations())
	}
}

// forget drops removed members from the heartbeat table.
func (m *Manager) forget(keys ...cluster.MemberKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		delete(m.mu.live, k)
	}
}

func (m *Manager) handleSetState(req *wire.Request) (wire.Response, error) {
	var r cluster.SetStateReq
	if err := cluster.Unmarshal(req.Msg, &r); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: set-state: %w", err)
	}
	k := cluster.MemberKey{Kind: r.Kind, ID: r.ID}
	if err := cluster.ValidateKey(k); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: set-state: %w", err)
	}
	if err := m.leaderCheck(); err != nil {
		return wire.Response{}, err
	}
	res, err := m.apply(&cluster.Command{Type: cluster.CmdSetState, Key: k, State: r.State})
	if err != nil {
		return wire.Response{}, fmt.Errorf("cluster: set-state %s %s: %w", k, r.State, err)
	}
	if res.Changed {
		m.log.Info("manager: member state set", "member", k.String(), "state", r.State.String(), "epoch", res.Epoch)
	}
	return wire.Response{Msg: cluster.Marshal(&cluster.EpochResp{Epoch: res.Epoch})}, nil
}

func (m *Manager) handleFormat(req *wire.Request) (wire.Response, error) {
	var r cluster.FormatReq
	if err := cluster.Unmarshal(req.Msg, &r); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: format: %w", err)
	}
	if len(r.Islands) > 1<<cluster.MaxTableDepth {
		return wire.Response{}, fmt.Errorf("cluster: format: %w: %d islands", cluster.ErrBadRequest, len(r.Islands))
	}
	if err := m.leaderCheck(); err != nil {
		return wire.Response{}, err
	}
	res, err := m.apply(&cluster.Command{Type: cluster.CmdFormat, Islands: r.Islands})
	if err != nil {
		return wire.Response{}, fmt.Errorf("cluster: format: %w", err)
	}
	m.log.Info("manager: cluster formatted", "epoch", res.Epoch)
	return wire.Response{Msg: cluster.EncodeMap(m.currentMap())}, nil
}

func (m *Manager) handleSetTable(req *wire.Request) (wire.Response, error) {
	var r cluster.SetTableReq
	if err := cluster.Unmarshal(req.Msg, &r); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: set-table: %w", err)
	}
	if err := cluster.ValidateTable(r.Table); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: set-table: %w", err)
	}
	if err := m.leaderCheck(); err != nil {
		return wire.Response{}, err
	}
	res, err := m.apply(&cluster.Command{Type: cluster.CmdSetTable, Table: r.Table})
	if err != nil {
		return wire.Response{}, fmt.Errorf("cluster: set-table: %w", err)
	}
	return wire.Response{Msg: cluster.Marshal(&cluster.EpochResp{Epoch: res.Epoch})}, nil
}

func (m *Manager) handleSetPolicy(req *wire.Request) (wire.Response, error) {
	var r cluster.SetPolicyReq
	if err := cluster.Unmarshal(req.Msg, &r); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: set-policy: %w", err)
	}
	if len(r.Policy) > cluster.MaxPolicyLen {
		return wire.Response{}, fmt.Errorf("cluster: set-policy: %w: policy too long", cluster.ErrBadRequest)
	}
	if err := m.leaderCheck(); err != nil {
		return wire.Response{}, err
	}
	res, err := m.apply(&cluster.Command{Type: cluster.CmdSetPolicy, Policy: r.Policy})
	if err != nil {
		return wire.Response{}, fmt.Errorf("cluster: set-policy %q: %w", r.Policy, err)
	}
	return wire.Response{Msg: cluster.Marshal(&cluster.EpochResp{Epoch: res.Epoch})}, nil
}

func (m *Manager) handleJoin(req *wire.Request) (wire.Response, error) {
	var r cluster.JoinReq
	if err := cluster.Unmarshal(req.Msg, &r); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: join: %w", err)
	}
	if r.RaftID == "" || len(r.RaftID) > cluster.MaxRaftIDLen {
		return wire.Response{}, fmt.Errorf("cluster: join: %w: raft id %q", cluster.ErrBadRequest, r.RaftID)
	}
	if err := cluster.ValidateAddr("raft", r.RaftAddr); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: join %s: %w", r.RaftID, err)
	}
	if err := cluster.ValidateAddr("client", r.ClientAddr); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: join %s: %w", r.RaftID, err)
	}
	if err := m.leaderCheck(); err != nil {
		return wire.Response{}, err
	}
	cf := m.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return wire.Response{}, fmt.Errorf("cluster: join %s: %w: configuration: %v", r.RaftID, cluster.ErrUnavailable, err)
	}
	present := false
	for _, s := range cf.Configuration().Servers {
		switch {
		case string(s.ID) == r.RaftID && string(s.Address) == r.RaftAddr && s.Suffrage == raft.Voter:
			present = true
		case string(s.ID) != r.RaftID && string(s.Address) == r.RaftAddr:
			// The same address under a new id: a manager whose directory
			// was wiped. Replace the old server.
			if err := m.raft.RemoveServer(s.ID, 0, m.cfg.ApplyTimeout).Error(); err != nil {
				return wire.Response{}, fmt.Errorf("cluster: join %s: remove stale server %s: %w", r.RaftID, s.ID, m.raftErr(err))
			}
			m.log.Info("manager: removed stale manager at the joiner's address", "old", string(s.ID), "addr", r.RaftAddr)
		}
	}
	if !present {
		if err := m.raft.AddVoter(raft.ServerID(r.RaftID), raft.ServerAddress(r.RaftAddr), 0, m.cfg.ApplyTimeout).Error(); err != nil {
			return wire.Response{}, fmt.Errorf("cluster: join %s: add voter: %w", r.RaftID, m.raftErr(err))
		}
		m.log.Info("manager: added voter", "id", r.RaftID, "raft_addr", r.RaftAddr, "addr", r.ClientAddr)
	}
	res, err := m.apply(&cluster.Command{Type: cluster.CmdManager, Manager: cluster.ManagerNode{RaftID: r.RaftID, RaftAddr: r.RaftAddr, ClientAddr: r.ClientAddr}})
	if err != nil {
		return wire.Response{}, fmt.Errorf("cluster: join %s: %w", r.RaftID, err)
	}
	return wire.Response{Msg: cluster.Marshal(&cluster.EpochResp{Epoch: res.Epoch})}, nil
}

// raftErr classifies an error from a raft membership future.
func (m *Manager) raftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return &cluster.NotLeaderError{Leader: m.leaderClientAddr()}
	case errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %v", cluster.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %v", cluster.ErrInternal, err)
}

func (m *Manager) handleStatus(req *wire.Request) (wire.Response, error) {
	if len(req.Msg) != 0 {
		return wire.Response{}, fmt.Errorf("cluster: status: %w: %d unexpected bytes", cluster.ErrBadRequest, len(req.Msg))
	}
	if err := m.leaderCheck(); err != nil {
		var nl *cluster.NotLeaderError
		if errors.As(err, &nl) && nl.Leader != "" {
			return wire.Response{}, err // the leader has the heartbeat table
		}
		// No leader: answer with this manager's own view.
	}
	st := m.status()
	return wire.Response{Msg: cluster.Marshal(&cluster.StatusResp{MapBytes: cluster.EncodeMap(st.Map), Status: st})}, nil
}

// status is this manager's map (with heartbeat data when it leads), its
// raft view and its heartbeat table.
func (m *Manager) status() cluster.Status {
	mp := m.currentMap()
	_, leaderID := m.raft.LeaderWithID()
	st := cluster.Status{
		Map:          mp,
		Self:         m.id,
		RaftState:    m.raft.State().String(),
		LeaderID:     string(leaderID),
		Leader:       m.leaderClientAddr(),
		Term:         m.raft.CurrentTerm(),
		CommitIndex:  m.raft.CommitIndex(),
		AppliedIndex: m.raft.AppliedIndex(),
	}
	if cf := m.raft.GetConfiguration(); cf.Error() == nil {
		for _, s := range cf.Configuration().Servers {
			v := cluster.Voter{RaftID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter}
			if n, ok := mp.Manager(string(s.ID)); ok {
				v.ClientAddr = n.ClientAddr
			}
			st.Voters = append(st.Voters, v)
		}
	}
	m.mu.Lock()
	for k, li := range m.mu.live {
		st.Live = append(st.Live, cluster.MemberLive{Key: k, LastHeartbeat: li.last, Stats: li.stats})
	}
	jobs := m.mu.jobs
	m.mu.Unlock()
	if jobs != nil {
		st.Jobs = jobs()
	}
	slices.SortFunc(st.Live, func(a, b cluster.MemberLive) int { return compareKeys(a.Key, b.Key) })
	if m.IsLeader() {
		st.Jobs = append(st.Jobs, m.moveJobs(&st)...)
	}
	return st
}

func compareKeys(a, b cluster.MemberKey) int {
	if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// Rates are a member's current throughput, from its last heartbeats.
type Rates struct {
	ReadBytesPerSec  float64
	WriteBytesPerSec float64
	OpsPerSec        float64
}

// Snapshot is what the dashboard shows: this manager's Status and, when it
// leads, the rates derived from its heartbeat history. A follower has no
// heartbeat table: its Snapshot has the replicated map only.
type Snapshot struct {
	cluster.Status
	Now   time.Time
	Rates map[cluster.MemberKey]Rates
	// Throughput is the storage servers' summed throughput, one point per
	// ThroughputStep over the last ThroughputWindow, oldest first.
	Throughput []ThroughputPoint
}

// Throughput is Snapshot's Throughput alone: the storage servers' summed
// throughput history, without building a whole status (no raft calls, no
// background jobs' callbacks).
func (m *Manager) Throughput() []ThroughputPoint {
	var storage []*sampleRing
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, li := range m.mu.live {
		if k.Kind == cluster.KindStorage && li.hist != nil {
			storage = append(storage, li.hist)
		}
	}
	return throughput(storage, time.Now())
}

// PeakThroughput is the highest read-plus-write rate of the storage
// servers in the throughput history (0 without history): what the
// background cleaner's copy rate is a share of.
func (m *Manager) PeakThroughput() float64 {
	var peak float64
	for _, p := range m.Throughput() {
		peak = max(peak, p.ReadBytesPerSec+p.WriteBytesPerSec)
	}
	return peak
}

// Snapshot returns the dashboard's view of the cluster.
func (m *Manager) Snapshot() Snapshot {
	sn := Snapshot{Status: m.status(), Now: time.Now(), Rates: map[cluster.MemberKey]Rates{}}
	var storage []*sampleRing
	m.mu.Lock()
	for k, li := range m.mu.live {
		if li.hist == nil {
			continue
		}
		var r Rates
		r.ReadBytesPerSec, r.WriteBytesPerSec, r.OpsPerSec = li.hist.rates(sn.Now)
		sn.Rates[k] = r
		if k.Kind == cluster.KindStorage {
			storage = append(storage, li.hist)
		}
	}
	sn.Throughput = throughput(storage, sn.Now)
	m.mu.Unlock()
	return sn
}
