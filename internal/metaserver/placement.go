package metaserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/meta"
	"github.com/atoll-fs/atoll/internal/replica"
)

// placeEvery is the pace of the placement loop (opening and dropping
// replicas) and of a leader's membership changes.
const placeEvery = time.Second

// catchUpSlack is how far (raft entries) a non-voter may be behind the
// leader's applied index when it is promoted: close enough that it
// answers appends at once, so the group's commits do not wait for it.
const catchUpSlack = 64

// probeTimeout bounds one probe of another server's replica.
const probeTimeout = 2 * time.Second

// preferred is island's preferred leader: the first server of its
// placement in the map, else of the static placement.
func (s *Server) preferred(island uint32) uint32 {
	if v := s.view; v != nil {
		if set, ok := v.Map().ReplicaSet(island); ok {
			return set[0]
		}
	}
	if set := s.static[island]; len(set) > 0 {
		return set[0]
	}
	return 0
}

// probe answers another server's question about our replica of island.
func (s *Server) probe(island uint32) (replica.Probe, bool) {
	h := (*s.hosts.Load())[island]
	if h == nil {
		return replica.Probe{}, false
	}
	ready := s.viewSet.Load() && s.view.Map().Formatted
	return replica.Probe{Leader: h.rep.IsLeader(), Applied: h.rep.Applied(), Members: h.rep.Members(), Ready: ready}, true
}

// handOverBlocked says why island h's lead must not go to its preferred
// server pref now ("" if it may). The new leader serves only once it has
// the cluster map, and clients find it through the map once it has
// registered with the managers (otherwise only by asking around,
// internal/leaderhint): handed the lead while the managers were away, a
// server could not register, and in a fault run (before leaderhint) its
// island answered nobody until the managers were back.
func (s *Server) handOverBlocked(h *hosted, pref uint32) string {
	members := h.rep.Members()
	i := slices.IndexFunc(members, func(m replica.Member) bool { return m.ID == pref })
	if i < 0 {
		return "not a member"
	}
	p, ok, err := replica.ProbeReplica(members[i].Addr, s.cfg.Key, h.id, probeTimeout)
	switch {
	case err != nil:
		return err.Error()
	case !ok:
		return "it holds no replica"
	case !p.Ready:
		return "it has no cluster map yet"
	}
	// A heartbeat needs the managers' leader (any manager answers a map
	// request, even one cut off from the others).
	if seen := s.managersSeen.Load(); seen == 0 || time.Since(time.Unix(0, seen)) > managersFresh {
		return "the managers' leader has not answered a heartbeat lately"
	}
	return ""
}

// managersFresh is how recently the managers' leader must have answered
// a heartbeat (sent every second) for a lead to be handed over.
const managersFresh = 3 * time.Second

// register records this server (and, unless it joins, the static list of
// servers and placement, which seeds the map's placement on a cluster's
// first start) with the managers, retrying until it is done.
func (s *Server) register(ctx context.Context) error {
	servers := []cluster.IslandServer{{ID: s.cfg.ID, RaftAddr: s.RaftAddr()}}
	var seed []cluster.ReplicaSet
	if !s.cfg.Join {
		for _, id := range slices.Sorted(maps.Keys(s.cfg.Servers)) {
			if id != s.cfg.ID {
				servers = append(servers, cluster.IslandServer{ID: id, RaftAddr: s.cfg.Servers[id]})
			}
		}
		for _, k := range slices.Sorted(maps.Keys(s.static)) {
			seed = append(seed, cluster.ReplicaSet{Island: k, Servers: s.static[k]})
		}
	}
	for wait := 200 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		epoch, err := s.mc.RegisterIslandServer(ctx, servers, seed)
		if err == nil {
			if err = s.view.Refresh(ctx); err == nil && s.view.Epoch() >= epoch {
				return nil
			}
		}
		s.log.Warn("metaserver: registering with the managers failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// place keeps the hosted replicas in line with the map's placement until
// ctx ends: it opens a replica of every island placed here, and drops
// (deletes) one the placement moved away once the island's leader no
// longer counts it. A replica directory found on disk is opened whatever
// the placement says, so that it serves until its leader removes it.
func (s *Server) place(ctx context.Context, viewReady <-chan struct{}) {
	if err := s.register(ctx); err != nil {
		return
	}
	for {
		s.placeOnce(ctx, viewReady)
		select {
		case <-ctx.Done():
			return
		case <-time.After(placeEvery):
		}
	}
}

func (s *Server) placeOnce(ctx context.Context, viewReady <-chan struct{}) {
	// A server that leads no island has no member loop bringing it maps.
	if err := s.view.Refresh(ctx); err != nil {
		s.log.Debug("metaserver: map refresh", "err", err)
	}
	m := s.view.Map()
	hosts := *s.hosts.Load()
	want := map[uint32]bool{}
	for _, set := range m.Replicas {
		if slices.Contains(set.Servers, s.cfg.ID) {
			want[set.Island] = true
		}
	}
	for _, k := range onDisk(s.cfg.Dir) {
		want[k] = want[k] || hosts[k] == nil
	}
	for k := range want {
		if hosts[k] != nil {
			continue
		}
		if err := s.open(ctx, m, k, viewReady); err != nil {
			s.log.Warn("metaserver: opening a replica failed; retrying", "island", k, "err", err)
		}
	}
	for k, h := range hosts {
		set, ok := m.ReplicaSet(k)
		if !ok || slices.Contains(set, s.cfg.ID) || h.rep.IsLeader() {
			continue
		}
		if counted, err := s.stillCounted(m, k, set); err != nil || counted {
			continue
		}
		s.drop(h)
	}
}

// onDisk lists the islands with a replica directory under dir.
func onDisk(dir string) []uint32 {
	ents, _ := os.ReadDir(dir)
	var out []uint32
	for _, e := range ents {
		if n, ok := strings.CutPrefix(e.Name(), "island-"); ok && e.IsDir() {
			if k, err := strconv.ParseUint(n, 10, 32); err == nil && k > 0 {
				out = append(out, uint32(k))
			}
		}
	}
	return out
}

// open opens this server's replica of island k and starts following its
// leadership. It bootstraps the group (on a cluster's or a new island's
// first start, or on a lost disk, as before any move) only while the
// map's set for k is the set the group was formed with (its Origin);
// otherwise it joins and waits for the leader to add it.
func (s *Server) open(ctx context.Context, m *cluster.Map, k uint32, viewReady <-chan struct{}) error {
	pl, placed := m.Placement(k)
	set := pl.Servers
	voters := map[uint32]string{s.cfg.ID: s.RaftAddr()}
	// A directory of an island the map does not place (any more) only
	// ever joins.
	join := !placed || !cluster.SameServers(set, pl.Origin)
	if !join {
		for _, id := range set {
			sv, ok := m.IslandServer(id)
			if !ok {
				return fmt.Errorf("island server %d of the placement is not in the map", id)
			}
			voters[id] = sv.RaftAddr
		}
	}
	obs := s.replicate.WithLabelValues(strconv.Itoa(int(k)))
	rc := replica.Config{
		Observe: func(d time.Duration) { obs.Observe(d.Seconds()) },
		Island:  k, Self: s.cfg.ID, Voters: voters, Join: join,
		// The placement's first server is meant to lead: on a first start
		// the others let it win the election instead of handing it the
		// lead later (which gives the island's leases up).
		Defer:  !join && len(set) > 1 && set[0] != s.cfg.ID,
		Dir:    filepath.Join(s.cfg.Dir, "island-"+strconv.Itoa(int(k))),
		Pebble: meta.PebbleOptions(vfs.Default, s.log.With("island", k)),
		Mux:    s.mux, Log: s.logs, Faults: s.cfg.Faults, Logger: s.log,
	}
	if s.cfg.Replica != nil {
		s.cfg.Replica(&rc)
	}
	if err := meta.MakeDirDurable(vfs.Default, rc.Dir); err != nil {
		return err
	}
	r, err := replica.Open(rc)
	if err != nil {
		return err
	}
	lctx, stop := context.WithCancel(ctx)
	h := &hosted{id: k, rep: r, stop: stop, done: make(chan struct{})}
	s.setHost(k, h)
	s.log.Info("metaserver: replica opened", "island", k, "join", join, "placement", set)
	go s.lead(lctx, h, viewReady)
	return nil
}

// stillCounted asks the servers of island k's placement which one leads,
// and whether that leader's configuration still has this server. An error (nobody leads, nobody
// answers) counts as yes: a replica is never dropped on a guess.
func (s *Server) stillCounted(m *cluster.Map, k uint32, set []uint32) (bool, error) {
	for _, id := range set {
		sv, ok := m.IslandServer(id)
		if !ok || id == s.cfg.ID {
			continue
		}
		p, ok, err := replica.ProbeReplica(sv.RaftAddr, s.cfg.Key, k, probeTimeout)
		if err != nil || !ok || !p.Leader {
			continue
		}
		return slices.ContainsFunc(p.Members, func(mb replica.Member) bool { return mb.ID == s.cfg.ID }), nil
	}
	return true, errors.New("no leader of the island answered")
}

// setHost replaces the hosts map with a copy in which island k is h
// (nil: none).
func (s *Server) setHost(k uint32, h *hosted) {
	s.hostsMu.Lock()
	defer s.hostsMu.Unlock()
	next := maps.Clone(*s.hosts.Load())
	if h == nil {
		delete(next, k)
	} else {
		next[k] = h
	}
	s.hosts.Store(&next)
}

// drop stops and deletes the replica h: its island's leader removed it.
func (s *Server) drop(h *hosted) {
	s.setHost(h.id, nil)
	h.stop()
	<-h.done
	if err := h.rep.Destroy(s.logs); err != nil {
		s.log.Warn("metaserver: deleting a replica moved away", "island", h.id, "err", err)
		return
	}
	s.log.Info("metaserver: replica moved away and deleted", "island", h.id)
}

// reconcile runs while this server leads island h: it makes the group's
// raft configuration follow the map's placement one step at a time (add
// a new server as a non-voter; promote it once its replica has caught up;
// then remove the servers the placement dropped). Removing this leader
// itself is left to the hand-over to the preferred leader, which then
// removes it.
func (s *Server) reconcile(ctx context.Context, h *hosted, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(placeEvery):
		}
		if err := s.reconcileOnce(h, log); err != nil {
			log.Info("metaserver: replica move step failed; retrying", "err", err)
		}
	}
}

func (s *Server) reconcileOnce(h *hosted, log *slog.Logger) error {
	m := s.view.Map()
	want, ok := m.ReplicaSet(h.id)
	if !ok {
		return nil
	}
	members := h.rep.Members()
	if members == nil {
		return nil
	}
	has := func(id uint32) (replica.Member, bool) {
		i := slices.IndexFunc(members, func(mb replica.Member) bool { return mb.ID == id })
		if i < 0 {
			return replica.Member{}, false
		}
		return members[i], true
	}
	for _, id := range want {
		if _, ok := has(id); ok {
			continue
		}
		sv, ok := m.IslandServer(id)
		if !ok {
			return fmt.Errorf("island server %d is not in the map", id)
		}
		log.Info("metaserver: adding a replica as a non-voter", "server", id, "raft", sv.RaftAddr)
		return h.rep.AddNonvoter(id, sv.RaftAddr)
	}
	for _, id := range want {
		mb, _ := has(id)
		if mb.Voter {
			continue
		}
		p, ok, err := replica.ProbeReplica(mb.Addr, s.cfg.Key, h.id, probeTimeout)
		if err != nil || !ok {
			return fmt.Errorf("probing the new replica on server %d: ok=%v %v", id, ok, err)
		}
		if p.Applied+catchUpSlack < h.rep.Applied() {
			return nil // still catching up
		}
		log.Info("metaserver: promoting a caught-up replica", "server", id, "applied", p.Applied, "leader_applied", h.rep.Applied())
		return h.rep.Promote(id, mb.Addr)
	}
	for _, mb := range members {
		if slices.Contains(want, mb.ID) || mb.ID == s.cfg.ID {
			continue
		}
		log.Info("metaserver: removing a replica the placement dropped", "server", mb.ID)
		return h.rep.RemoveMember(mb.ID)
	}
	return nil
}
