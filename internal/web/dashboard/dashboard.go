package dashboard

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/manager"
	"github.com/atoll-fs/atoll/internal/web"
)

//go:embed index.html
var indexHTML []byte

// initialMarker is replaced in indexHTML by the JSON view at serving time.
var initialMarker = []byte("/*ATOLL_INITIAL*/null")

// Source gives the dashboard its data; *manager.Manager is one.
type Source interface {
	Snapshot() manager.Snapshot
}

// Handler serves the page, /api/cluster and, when reg is not nil, /metrics.
func Handler(src Source, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		js, err := json.Marshal(Build(src.Snapshot()))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// json.Marshal escapes <, > and &, so the view cannot close the
		// <script> element it is inlined in.
		page := bytes.Replace(indexHTML, initialMarker, js, 1)
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		// Everything is inline; nothing may be loaded from elsewhere.
		h.Set("Content-Security-Policy", "default-src 'none'; connect-src 'self'; img-src 'self' data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'")
		_, _ = w.Write(page)
	})
	mux.HandleFunc("GET /api/cluster", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		if r.URL.Query().Has("pretty") {
			enc.SetIndent("", "  ")
		}
		_ = enc.Encode(Build(src.Snapshot()))
	})
	if reg != nil {
		mux.Handle("GET /metrics", web.MetricsHandler(reg))
	}
	return mux
}

// View is the JSON of /api/cluster. Byte counts are bytes, rates are per
// second, times are Unix milliseconds.
type View struct {
	Time          int64          `json:"time"`
	Epoch         uint64         `json:"epoch"`
	Formatted     bool           `json:"formatted"`
	DefaultPolicy string         `json:"default_policy"`
	Raft          RaftView       `json:"raft"`
	Members       []MemberView   `json:"members"`
	Islands       []IslandView   `json:"islands"`
	Table         TableView      `json:"table"`
	Throughput    ThroughputView `json:"throughput"`
	Totals        Totals         `json:"totals"`
	Jobs          []JobView      `json:"jobs"`
}

// JobView is a background job of the manager (the cleaner: deletes,
// repairs, copies and drains).
type JobView struct {
	Name       string  `json:"name"`
	Phase      string  `json:"phase"` // "" when idle
	Done       int     `json:"done"`
	Total      int     `json:"total"`
	ETASeconds float64 `json:"eta_seconds"`
	Summary    string  `json:"summary"`
}

// RaftView is the answering manager's raft view.
type RaftView struct {
	State    string `json:"state"` // Leader, Follower, Candidate, Shutdown
	Self     string `json:"self"`
	LeaderID string `json:"leader_id"`
	Leader   string `json:"leader"` // the leader's client address ("" = none known)
	Term     uint64 `json:"term"`
	Voters   int    `json:"voters"`
	// Heartbeats is true when the answer carries the leader's heartbeat
	// table (false from a follower: no stats, rates or throughput).
	Heartbeats bool `json:"heartbeats"`
}

// MemberView is one member.
type MemberView struct {
	Name  string `json:"name"` // KIND-ID: storage-0, island-1, gateway-123
	Kind  string `json:"kind"`
	ID    uint32 `json:"id"`
	Addr  string `json:"addr"`
	State string `json:"state"` // up, down, draining, out
	PID   int    `json:"pid"`
	// HeartbeatAgeMS is the age of the last heartbeat, -1 when unknown.
	HeartbeatAgeMS int64  `json:"heartbeat_age_ms"`
	MetricsAddr    string `json:"metrics_addr"`
	// ReportedBy is the key (not the cluster key) that registered a
	// gateway or mount: everything it reports is that tenant's word, and
	// the page shows it as such (no link to its metrics address; its
	// degraded stripes apart from the total).
	ReportedBy string `json:"reported_by,omitempty"`
	// Role is what a gateway says it is ("mount at /mnt on host", "NFS
	// gateway at ADDR"), from its heartbeats.
	Role string `json:"role,omitempty"`

	CapacityBytes  uint64  `json:"capacity_bytes"`
	UsedBytes      uint64  `json:"used_bytes"`
	Degraded       uint64  `json:"degraded_stripes"`
	BytesRead      uint64  `json:"bytes_read"`
	BytesWritten   uint64  `json:"bytes_written"`
	Ops            uint64  `json:"ops"`
	ReadBps        float64 `json:"read_bps"`
	WriteBps       float64 `json:"write_bps"`
	OpsPerSec      float64 `json:"ops_per_sec"`
	ScrubPassBytes uint64  `json:"scrub_pass_bytes"`
	ScrubPasses    uint64  `json:"scrub_passes"`
	// ScrubProgress is the current pass's bytes over the used bytes, 0..1;
	// -1 for members that do not scrub or have not reported.
	ScrubProgress float64 `json:"scrub_progress"`
	Corrupt       uint64  `json:"corrupt"`
	Repairs       uint64  `json:"repairs"`
	// Leases are the member's lease figures (islands and mounts; see
	// cluster.LeaseStats), absent for the others.
	Leases *LeaseView `json:"leases,omitempty"`
	// Locks are the member's lock and open-file figures (islands, mounts
	// and gateways; see cluster.LockStats), absent for the others.
	Locks *LockView `json:"locks,omitempty"`
}

// LockView is cluster.LockStats for the dashboard.
type LockView struct {
	Locks         uint64 `json:"locks"`
	Waiters       uint64 `json:"waiters"`
	Sessions      uint64 `json:"sessions"`
	SessionsEnded uint64 `json:"sessions_ended"`
	OpenHeld      uint64 `json:"open_held"`
	OpenUnlinked  uint64 `json:"open_unlinked"`
	OpenReclaimed uint64 `json:"open_reclaimed"`
	OpenLocal     uint64 `json:"open_local"`
}

// LeaseView is cluster.LeaseStats for the dashboard.
type LeaseView struct {
	Held      uint64 `json:"held"`
	Granted   uint64 `json:"granted"`
	Broken    uint64 `json:"broken"`
	Expired   uint64 `json:"expired"`
	Exclusive uint64 `json:"exclusive"`
	Recalled  uint64 `json:"recalled"`
	Kept      uint64 `json:"kept_back"`
	Sent      uint64 `json:"kept_back_sent"`
}

// IslandView is one island and the hash-table entries it owns.
type IslandView struct {
	ID      uint32  `json:"id"`
	Name    string  `json:"name"`
	Addr    string  `json:"addr"`
	State   string  `json:"state"`
	Entries []int   `json:"entries"` // indexes into the table, ascending
	Share   float64 `json:"share"`   // fraction of the entries, 0..1
}

// TableView is the namespace's extendible hash table.
type TableView struct {
	Depth uint8 `json:"depth"`
	Size  int   `json:"size"`
	// Owners is the island of each entry.
	Owners []uint32 `json:"owners"`
}

// ThroughputView is the storage servers' summed throughput over time.
type ThroughputView struct {
	StepSeconds float64 `json:"step_seconds"`
	Points      []Point `json:"points"` // oldest first
}

// Point is one ThroughputStep.
type Point struct {
	T     int64   `json:"t"` // end of the step, Unix ms
	Read  float64 `json:"read_bps"`
	Write float64 `json:"write_bps"`
	Ops   float64 `json:"ops_per_sec"`
}

// Totals sum the members.
type Totals struct {
	Members       int    `json:"members"`
	Up            int    `json:"up"`
	Down          int    `json:"down"`
	Other         int    `json:"other"` // draining or out
	CapacityBytes uint64 `json:"capacity_bytes"`
	UsedBytes     uint64 `json:"used_bytes"`
	Degraded      uint64 `json:"degraded_stripes"`
	// DegradedReported are the degraded stripes members registered by
	// tenants' keys report (not in Degraded).
	DegradedReported uint64  `json:"degraded_stripes_reported"`
	Repairs          uint64  `json:"repairs"`
	Corrupt          uint64  `json:"corrupt"`
	ReadBps          float64 `json:"read_bps"`  // storage servers
	WriteBps         float64 `json:"write_bps"` // storage servers
	ScrubPasses      uint64  `json:"scrub_passes"`
	// ScrubProgress is the storage servers' current passes together:
	// bytes verified over bytes used, 0..1 (-1: nothing reported).
	ScrubProgress float64 `json:"scrub_progress"`
}

// Name is a member's name on the page and in the JSON: KIND-ID.
func Name(k cluster.MemberKey) string {
	return k.Kind.String() + "-" + strconv.FormatUint(uint64(k.ID), 10)
}

// Build turns a snapshot into the view.
func Build(sn manager.Snapshot) View {
	mp := sn.Map
	if mp == nil {
		mp = &cluster.Map{}
	}
	v := View{
		Time: sn.Now.UnixMilli(), Epoch: mp.Epoch, Formatted: mp.Formatted, DefaultPolicy: mp.DefaultPolicy,
		Raft: RaftView{State: sn.RaftState, Self: sn.Self, LeaderID: sn.LeaderID, Leader: sn.Leader, Term: sn.Term,
			Voters: len(sn.Voters), Heartbeats: sn.RaftState == "Leader"},
		Members: []MemberView{}, Islands: []IslandView{},
		Table:      TableView{Depth: mp.Table.Depth, Size: len(mp.Table.Entries), Owners: slices.Clone(mp.Table.Entries)},
		Throughput: ThroughputView{StepSeconds: manager.ThroughputStep.Seconds(), Points: []Point{}},
	}
	if v.Table.Owners == nil {
		v.Table.Owners = []uint32{}
	}
	v.Jobs = []JobView{}
	for _, j := range sn.Jobs {
		v.Jobs = append(v.Jobs, JobView{Name: j.Name, Phase: j.Phase, Done: j.Done, Total: j.Total, ETASeconds: j.ETASeconds, Summary: j.Summary})
	}
	live := make(map[cluster.MemberKey]cluster.MemberLive, len(sn.Live))
	for _, l := range sn.Live {
		live[l.Key] = l
	}
	var scrubUsed, scrubDone uint64
	scrubbing := false
	// Capacity, used and degraded come from Status.Members, as in `atoll
	// status`.
	for _, m := range sn.Status.Members() {
		k := m.Key()
		mv := MemberView{Name: Name(k), Kind: k.Kind.String(), ID: k.ID, Addr: m.Addr, State: m.State.String(), PID: m.PID,
			HeartbeatAgeMS: -1, ScrubProgress: -1, CapacityBytes: m.CapacityBytes, UsedBytes: m.UsedBytes, Degraded: m.Degraded, ReportedBy: m.Owner}
		if !m.LastHeartbeat.IsZero() {
			mv.HeartbeatAgeMS = max(sn.Now.Sub(m.LastHeartbeat).Milliseconds(), 0)
		}
		if l, ok := live[k]; ok {
			st := l.Stats
			if !l.LastHeartbeat.IsZero() {
				mv.HeartbeatAgeMS = max(sn.Now.Sub(l.LastHeartbeat).Milliseconds(), 0)
			}
			mv.MetricsAddr, mv.Role = st.MetricsAddr, st.Role
			mv.BytesRead, mv.BytesWritten, mv.Ops = st.BytesRead, st.BytesWritten, st.Ops
			mv.ScrubPassBytes, mv.ScrubPasses, mv.Corrupt, mv.Repairs = st.ScrubPassBytes, st.ScrubPasses, st.Corrupt, st.Repairs
			if x := st.Leases; x != nil {
				mv.Leases = &LeaseView{Held: x.Held, Granted: x.Granted, Broken: x.Broken, Expired: x.Expired,
					Exclusive: x.Exclusive, Recalled: x.Recalled, Kept: x.Kept, Sent: x.Sent}
			}
			if x := st.Locks; x != nil {
				mv.Locks = &LockView{Locks: x.Locks, Waiters: x.Waiters, Sessions: x.Sessions, SessionsEnded: x.SessionsEnded,
					OpenHeld: x.OpenHeld, OpenUnlinked: x.OpenUnlinked, OpenReclaimed: x.OpenReclaimed, OpenLocal: x.OpenLocal}
			}
			if k.Kind == cluster.KindStorage && !l.LastHeartbeat.IsZero() {
				mv.ScrubProgress = progress(st.ScrubPassBytes, st.UsedBytes)
				if m.State == cluster.StateUp {
					scrubbing = true
					scrubUsed += st.UsedBytes
					scrubDone += min(st.ScrubPassBytes, st.UsedBytes)
					v.Totals.ScrubPasses += st.ScrubPasses
				}
			}
		}
		if r, ok := sn.Rates[k]; ok && m.State != cluster.StateDown {
			mv.ReadBps, mv.WriteBps, mv.OpsPerSec = r.ReadBytesPerSec, r.WriteBytesPerSec, r.OpsPerSec
		}
		t := &v.Totals
		t.Members++
		switch m.State {
		case cluster.StateUp:
			t.Up++
		case cluster.StateDown:
			t.Down++
		default:
			t.Other++
		}
		if k.Kind == cluster.KindStorage && m.State != cluster.StateOut {
			t.CapacityBytes += mv.CapacityBytes
			t.UsedBytes += mv.UsedBytes
			t.ReadBps += mv.ReadBps
			t.WriteBps += mv.WriteBps
		}
		if mv.ReportedBy != "" {
			t.DegradedReported += mv.Degraded
		} else {
			t.Degraded += mv.Degraded
		}
		t.Repairs += mv.Repairs
		t.Corrupt += mv.Corrupt
		v.Members = append(v.Members, mv)
	}
	v.Totals.ScrubProgress = -1
	if scrubbing {
		v.Totals.ScrubProgress = progress(scrubDone, scrubUsed)
	}
	entries := map[uint32][]int{}
	for i, id := range mp.Table.Entries {
		entries[id] = append(entries[id], i)
	}
	for _, is := range mp.Islands {
		iv := IslandView{ID: is.ID, Name: Name(cluster.MemberKey{Kind: cluster.KindIsland, ID: is.ID}), Addr: is.Addr,
			State: is.State.String(), Entries: entries[is.ID]}
		if iv.Entries == nil {
			iv.Entries = []int{}
		}
		if n := len(mp.Table.Entries); n > 0 {
			iv.Share = float64(len(iv.Entries)) / float64(n)
		}
		v.Islands = append(v.Islands, iv)
	}
	for _, p := range sn.Throughput {
		v.Throughput.Points = append(v.Throughput.Points, Point{T: p.Time.UnixMilli(), Read: p.ReadBytesPerSec, Write: p.WriteBytesPerSec, Ops: p.OpsPerSec})
	}
	return v
}

// progress is done/total in 0..1; 1 when there is nothing to do.
func progress(done, total uint64) float64 {
	if total == 0 {
		return 1
	}
	return min(float64(done)/float64(total), 1)
}

// String renders a view for logs and test failures.
func (v View) String() string {
	return fmt.Sprintf("epoch %d, %d members (%d up, %d down), raft %s at %s", v.Epoch, v.Totals.Members, v.Totals.Up, v.Totals.Down,
		v.Raft.State, time.UnixMilli(v.Time).Format(time.RFC3339))
}
