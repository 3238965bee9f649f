package metaserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/meta"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/replica"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Config configures an island server.
type Config struct {
	// ID is this island server's id (not 0), unique among island servers.
	ID uint32
	// Listen is the address clients and peer islands reach every island
	// this server leads at (a fixed host:port: it is registered).
	Listen string
	// RaftListen is the server's raft port (replica.Mux).
	RaftListen string
	// Servers maps every island server's id to its raft address (this
	// one included). With Islands and Replicas it fixes the placement
	// (Placement); every server must be given the same.
	Servers map[uint32]string
	// Islands is the number of islands (ids 1..Islands); Replicas the
	// replicas of each (1, 3 or 5, at most len(Servers)).
	Islands  int
	Replicas int
	// Join: the server joins a running cluster. Its replicas come only
	// from the map's placement (an operator moves some onto it with
	// `atoll island server add`); Servers need name only this server,
	// and Islands and Replicas are ignored.
	Join bool
	// Dir holds one directory per hosted island (island-N) and raftlog/
	// (every hosted replica's raft log, replica.LogDB).
	Dir string
	// Managers are the manager addresses: each island this server leads
	// is registered there (its address is this server's), and the map
	// comes from them.
	Managers []string
	// Key is the cluster key (nil only in in-process tests).
	Key *auth.Key
	// InlineMax is the islands' inline limit (meta.Config.InlineMax).
	InlineMax int
	// MoveDuty is the islands' meta.Config.MoveDuty.
	MoveDuty float64
	// LockTerm is the islands' meta.Config.LockTerm.
	LockTerm time.Duration
	// LeadBackAfter is how long a replica leads an island whose
	// preferred leader is another server before offering it the lead
	// back (default DefaultLeadBackAfter; the preferred server may have
	// just restarted: give it time to catch up).
	LeadBackAfter time.Duration
	// Faults, Logger and Registerer as for meta.Config.
	Faults     *faults.Set
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// MetricsAddr is advertised in heartbeats ("" none).
	MetricsAddr string
	// Replica tunes the raft timing of every replica (tests).
	Replica func(*replica.Config)
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.ID == 0:
		return errors.New("metaserver: config: ID must not be 0")
	case c.Servers[c.ID] == "":
		return fmt.Errorf("metaserver: config: Servers lacks this server (%d)", c.ID)
	case !c.Join && (c.Islands < 1 || c.Islands > 1<<10):
		return fmt.Errorf("metaserver: config: %d islands (want 1..1024)", c.Islands)
	case !c.Join && c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5:
		return fmt.Errorf("metaserver: config: %d replicas (want 1, 3 or 5)", c.Replicas)
	case !c.Join && c.Replicas > len(c.Servers):
		return fmt.Errorf("metaserver: config: %d replicas need as many island servers (have %d)", c.Replicas, len(c.Servers))
	case c.Dir == "":
		return errors.New("metaserver: config: Dir is empty")
	case len(c.Managers) == 0:
		return errors.New("metaserver: config: no manager address")
	case c.LeadBackAfter < 0:
		return fmt.Errorf("metaserver: config: negative LeadBackAfter %v", c.LeadBackAfter)
	}
	if _, port, err := net.SplitHostPort(c.Listen); err != nil || port == "0" {
		return fmt.Errorf("metaserver: config: listen %q: a fixed host:port is needed (it is registered)", c.Listen)
	}
	return nil
}

// Placement returns the servers holding each island's replicas: island k
// (1-based) on the Replicas servers that follow, in id order, the
// (k-1) mod n-th of the n servers. The first of them is the island's
// preferred leader, so leaders spread over the servers.
func Placement(servers []uint32, islands, replicas int) map[uint32][]uint32 {
	ids := append([]uint32(nil), servers...)
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	out := map[uint32][]uint32{}
	for k := 1; k <= islands; k++ {
		for j := range replicas {
			out[uint32(k)] = append(out[uint32(k)], ids[(k-1+j)%len(ids)])
		}
	}
	return out
}

// Server is an island server: the replicas of the islands placement puts
// here, and a meta.Island for each one this server leads.
type Server struct {
	cfg  Config
	log  *slog.Logger
	mux  *replica.Mux
	logs *replica.LogDB // every hosted replica's raft log
	ln   net.Listener
	srv  *wire.Server
	view *cluster.View
	// revocations follows the map's revoked keys (nil without a key).
	revocations func(*cluster.Map)
	// viewSet is stored once view is (before viewReady closes), for
	// readers that do not wait for viewReady: probes.
	viewSet atomic.Bool
	// managersSeen is when (unix ns) the managers' leader last answered
	// a registration or heartbeat of an island led here.
	managersSeen atomic.Int64
	mc           *cluster.Client
	// hosts are the hosted replicas by island id: an immutable map,
	// replaced whole (under hostsMu) when the placement opens or drops
	// one, so that every request reads it without a lock.
	hosts   atomic.Pointer[map[uint32]*hosted]
	hostsMu sync.Mutex
	static  map[uint32][]uint32 // the placement the flags give (nil: Join)
	addr    string              // the registered client address
	// replicate times Replicate (a change from handed to raft until
	// applied on the leader), by island.
	replicate *prometheus.HistogramVec
}

// hosted is one island's replica on this server.
type hosted struct {
	id     uint32
	rep    *replica.Replica
	island atomic.Pointer[meta.Island] // set while leading and serving
	term   atomic.Uint64               // the raft term island serves in
	// stop ends the replica's leadership loop; done closes when it has.
	stop context.CancelFunc
	done chan struct{}
}

// New binds the listeners and opens the raft log database; Run registers
// the server, opens the replicas the map places here and serves.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("island_server", cfg.ID)}
	s.replicate = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "atoll_island_replicate_seconds", Help: "Time from a change handed to raft until it is applied on the leader (committed on a quorum).",
		Buckets: prometheus.ExponentialBuckets(100e-6, 2, 14), // 100µs .. 0.8s
	}, []string{"island"})
	ok := false
	defer func() {
		if !ok {
			s.close()
		}
	}()
	ta, err := net.ResolveTCPAddr("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("metaserver: listen %s: %w", cfg.Listen, err)
	}
	s.addr = ta.String()
	if s.mux, err = replica.NewMux(cfg.RaftListen, cfg.Key, s.log, nil); err != nil {
		return nil, fmt.Errorf("metaserver: raft listen %s: %w", cfg.RaftListen, err)
	}
	if err := meta.MakeDirDurable(vfs.Default, cfg.Dir); err != nil {
		return nil, fmt.Errorf("metaserver: %w", err)
	}
	if s.logs, err = replica.OpenLogDB(cfg.Dir, nil); err != nil {
		return nil, err
	}
	if !cfg.Join {
		servers := make([]uint32, 0, len(cfg.Servers))
		for id := range cfg.Servers {
			servers = append(servers, id)
		}
		s.static = Placement(servers, cfg.Islands, cfg.Replicas)
	}
	s.hosts.Store(&map[uint32]*hosted{})
	s.mux.SetProbe(s.probe)
	var verifier *auth.Verifier
	if cfg.Key != nil {
		s.revocations = cluster.FollowRevocations(cfg.Key)
		if verifier, err = auth.NewVerifier(cfg.Key); err != nil {
			return nil, fmt.Errorf("metaserver: %w", err)
		}
	}
	if s.srv, err = wire.NewServer(wire.ServerConfig{
		Auth: verifier, Handler: s.handle, Logger: s.log, ErrorCode: metawire.StatusOf, Inline: meta.InlineOp,
	}); err != nil {
		return nil, err
	}
	if s.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("metaserver: listen %s: %w", cfg.Listen, err)
	}
	s.mc = cluster.NewClient(cfg.Managers, cfg.Key, s.log)
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(&statusCollector{s}); err != nil {
			return nil, err
		}
		if err := cfg.Registerer.Register(s.replicate); err != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}

// Addr is the client address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// RaftAddr is the raft port's address.
func (s *Server) RaftAddr() string { return s.mux.Addr() }

// handle serves a request for the island its route names, if this server
// leads it.
func (s *Server) handle(ctx context.Context, req *wire.Request) (wire.Response, error) {
	h := (*s.hosts.Load())[req.Route]
	if h == nil {
		return wire.Response{}, fmt.Errorf("%w: island server %d holds no replica of island %d", metawire.ErrUnavailable, s.cfg.ID, req.Route)
	}
	isl := h.island.Load()
	// A replica that lost the lead (or regained it in a later term, with
	// another leader's changes in between) must not answer from the
	// Island it opened before: its in-memory state may be stale.
	if isl != nil && (!h.rep.IsLeader() || h.rep.Term() != h.term.Load()) {
		isl = nil
	}
	if isl == nil {
		leader, _ := h.rep.Leader()
		return wire.Response{}, fmt.Errorf("%w: island %d is not led by island server %d (leader: server %d)", metawire.ErrUnavailable, h.id, s.cfg.ID, leader)
	}
	return isl.Serve(ctx, req)
}

// Run serves until ctx is done: the wire listener, and for every hosted
// replica a loop that runs an Island while it leads. It waits for the
// cluster map (formatted) before any island serves.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	// The view is fetched with retries: managers may start after us.
	viewReady := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		v, err := cluster.WaitView(ctx, s.mc, s.log, "island server")
		if err != nil {
			return
		}
		if s.revocations != nil {
			s.revocations(v.Map())
			v.OnChange(s.revocations)
		}
		s.view = v
		s.viewSet.Store(true)
		close(viewReady)
		s.place(ctx, viewReady)
	}()
	s.log.Info("metaserver: serving", "addr", s.Addr(), "raft", s.RaftAddr())
	err := s.srv.Serve(ctx, s.ln)
	cancel()
	wg.Wait()
	for _, h := range *s.hosts.Load() {
		h.stop()
		<-h.done
	}
	if cerr := s.close(); err == nil {
		err = cerr
	}
	return err
}

// lead follows h's leadership: while this replica leads, the island is
// registered with the managers at this server's address and served.
func (s *Server) lead(ctx context.Context, h *hosted, viewReady <-chan struct{}) {
	defer close(h.done)
	type running struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	var cur *running
	stepDown := func() {
		if cur != nil {
			cur.cancel()
			<-cur.done
			cur = nil
		}
	}
	defer stepDown()
	leading := h.rep.IsLeader()
	for {
		// Every signal restarts the Island: even true after true may
		// hide a lost and regained lead, after which the Island's
		// in-memory state (inode number reservations, prepared
		// transactions) may be another leader's past.
		stepDown()
		if leading {
			lctx, cancel := context.WithCancel(ctx)
			cur = &running{cancel: cancel, done: make(chan struct{})}
			go func(done chan struct{}) {
				defer close(done)
				s.serveIsland(lctx, h, viewReady)
			}(cur.done)
		}
		select {
		case <-ctx.Done():
			return
		case leading = <-h.rep.LeaderCh():
		}
	}
}

// serveIsland runs while h leads: it waits for the map, applies a
// barrier, opens the Island on the replica's database (recovering its
// transactions through the log), serves it, registers it and, when
// another server is the island's preferred leader, offers it the lead
// once it has led here for a while.
func (s *Server) serveIsland(ctx context.Context, h *hosted, viewReady <-chan struct{}) {
	log := s.log.With("island", h.id)
	select {
	case <-ctx.Done():
		return
	case <-viewReady:
	}
	// Registered first (an unformatted cluster needs its islands
	// registered to format), served once the namespace is formatted.
	var wg sync.WaitGroup
	defer wg.Wait()
	mctx, stopMember := context.WithCancel(ctx)
	defer stopMember()
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := cluster.RunMember(mctx, cluster.MemberConfig{
			Managers: s.cfg.Managers, Kind: cluster.KindIsland, ID: h.id, Addr: s.addr, PID: os.Getpid(),
			Logger: log, OnMap: s.view.Update, Key: s.cfg.Key, Reclaim: true,
			OnContact: func() { s.managersSeen.Store(time.Now().UnixNano()) },
			Stats: func() cluster.MemberStats {
				var ops uint64
				var leases *cluster.LeaseStats
				var locks *cluster.LockStats
				if isl := h.island.Load(); isl != nil {
					ops, leases, locks = isl.Ops(), isl.LeaseStats(), isl.LockStats()
				}
				return cluster.MemberStats{Ops: ops, MetricsAddr: s.cfg.MetricsAddr, Replicas: s.replicaStats(), Leases: leases, Locks: locks}
			},
		})
		if err != nil {
			log.Error("metaserver: island registration failed", "err", err)
		}
	}()
	if err := s.view.WaitFormatted(ctx, log, "island"); err != nil {
		return
	}
	var isl *meta.Island
	for isl == nil {
		if err := h.rep.Barrier(10 * time.Second); err != nil {
			log.Warn("metaserver: barrier before serving failed; retrying", "err", err)
		} else {
			var err error
			isl, err = meta.New(meta.Config{
				Dir: filepath.Join(s.cfg.Dir, "island-"+strconv.Itoa(int(h.id))), ID: h.id,
				Map: cluster.NewIslandMap(s.view), InlineMax: s.cfg.InlineMax, MoveDuty: s.cfg.MoveDuty, LockTerm: s.cfg.LockTerm, Faults: s.cfg.Faults,
				Logger: s.log, Registerer: s.cfg.Registerer, Key: s.cfg.Key,
				DB: h.rep.DB(), Replicator: h.rep,
			})
			if err != nil {
				log.Warn("metaserver: opening the island failed; retrying", "err", err)
			}
		}
		if isl == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	h.term.Store(h.rep.Term())
	h.island.Store(isl)
	log.Info("metaserver: leading and serving", "term", h.term.Load())
	defer func() {
		h.island.Store(nil)
		if err := isl.Close(); err != nil {
			log.Warn("metaserver: closing the island", "err", err)
		}
		log.Info("metaserver: stopped leading")
	}()
	var resume func() // grants held back by the last hand-over
	defer func() {
		if resume != nil {
			resume()
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.reconcile(ctx, h, log)
	}()
	led := time.Now()
	var tried time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		pref := s.preferred(h.id)
		if pref == s.cfg.ID || pref == 0 || time.Since(led) < s.leadBackAfter() || time.Since(tried) < preferredRetry ||
			!slices.ContainsFunc(h.rep.Members(), func(m replica.Member) bool { return m.ID == pref && m.Voter }) {
			continue
		}
		tried = time.Now()
		if why := s.handOverBlocked(h, pref); why != "" {
			log.Info("metaserver: keeping the lead from the preferred server", "preferred", pref, "why", why)
			continue
		}
		if resume != nil {
			// Still leading after a transfer that said it went: grants
			// come back until the next try.
			resume()
			resume = nil
		}
		log.Info("metaserver: handing the lead to the preferred server", "to", pref)
		// Leases go first: the new leader then needs no lease term of
		// waiting before it serves.
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := isl.HandOver(hctx)
		cancel()
		if err != nil {
			log.Info("metaserver: giving the leases up failed; keeping the lead", "err", err)
			continue
		}
		if err := h.rep.TransferTo(pref); err != nil {
			log.Info("metaserver: leadership transfer failed; keeping the lead", "err", err)
			r()
			continue
		}
		resume = r
	}
}

// DefaultLeadBackAfter is Config.LeadBackAfter's default; preferredRetry
// is the pause between later offers while the preferred server is away
// or not ready.
const (
	DefaultLeadBackAfter = 5 * time.Second
	preferredRetry       = 10 * time.Second
)

func (s *Server) leadBackAfter() time.Duration {
	if s.cfg.LeadBackAfter > 0 {
		return s.cfg.LeadBackAfter
	}
	return DefaultLeadBackAfter
}

// Status returns the state of every hosted replica, by island.
func (s *Server) Status() []replica.Status {
	var out []replica.Status
	for _, h := range *s.hosts.Load() {
		out = append(out, h.rep.Status())
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Island < out[b].Island })
	return out
}

// replicaStats reports every hosted replica for heartbeats.
func (s *Server) replicaStats() []cluster.ReplicaStats {
	var out []cluster.ReplicaStats
	for _, st := range s.Status() {
		out = append(out, cluster.ReplicaStats{
			Island: st.Island, Server: st.Server, Role: st.State, Leader: st.Leader, Term: st.Term,
			Commit: st.CommitIndex, Applied: st.AppliedIndex, LastContactMS: uint64(st.LastContact.Milliseconds()),
			Voters: st.Voters,
		})
	}
	return out
}

func (s *Server) close() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil && !errors.Is(err, net.ErrClosed) {
			first = err
		}
	}
	if s.ln != nil {
		keep(s.ln.Close())
	}
	if hs := s.hosts.Load(); hs != nil {
		for _, h := range *hs {
			keep(h.rep.Close())
		}
	}
	if s.logs != nil {
		keep(s.logs.Close())
	}
	if s.mux != nil {
		keep(s.mux.Close())
	}
	if s.mc != nil {
		s.mc.Close()
	}
	return first
}

// statusCollector exports each replica's state.
type statusCollector struct{ s *Server }

var (
	descLeader  = prometheus.NewDesc("atoll_island_replica_leader", "1 if this server's replica leads the island (and serves it).", []string{"island"}, nil)
	descApplied = prometheus.NewDesc("atoll_island_replica_applied_index", "Raft index applied to this replica's database.", []string{"island"}, nil)
	descCommit  = prometheus.NewDesc("atoll_island_replica_commit_index", "Raft commit index this replica knows of.", []string{"island"}, nil)
	descTerm    = prometheus.NewDesc("atoll_island_replica_term", "Raft term of this replica.", []string{"island"}, nil)
	descRefused = prometheus.NewDesc("atoll_island_raft_refused_connections_total", "Connections to the raft port closed because they did not authenticate as a member of this cluster.", nil, nil)
)

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLeader
	ch <- descApplied
	ch <- descCommit
	ch <- descTerm
	ch <- descRefused
}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(c.s.mux.Refused()))
	for _, h := range *c.s.hosts.Load() {
		st := h.rep.Status()
		id := strconv.Itoa(int(h.id))
		lead := 0.0
		if h.island.Load() != nil {
			lead = 1
		}
		ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, lead, id)
		ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(st.AppliedIndex), id)
		ch <- prometheus.MustNewConstMetric(descCommit, prometheus.GaugeValue, float64(st.CommitIndex), id)
		ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(st.Term), id)
	}
}
