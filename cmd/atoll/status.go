package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/cluster"
)

// defaultCluster is the manager address used when neither --cluster nor
// $ATOLL_CLUSTER is set: where `atoll dev` and a default `atoll manager`
// listen.
const defaultCluster = "127.0.0.1:7300"

// clusterAddrs resolves the manager addresses: the flag, else
// $ATOLL_CLUSTER, else defaultCluster. Several may be comma-separated.
func clusterAddrs(flag string) []string {
	s := flag
	if s == "" {
		s = os.Getenv("ATOLL_CLUSTER")
	}
	if s == "" {
		s = defaultCluster
	}
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func newStatusCmd(g *globalFlags) *cobra.Command {
	var addr string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--cluster ADDR] [--json]",
		Short: "Show the cluster map: managers, members, islands, hash table, default policy",
		Long: `Show the cluster map as the leading manager sees it: the epoch, the manager
group (leader, voters, term), every member with its state and last heartbeat,
the islands with their share of the namespace hash table, and the default
policy.

The manager address is --cluster, else $ATOLL_CLUSTER, else ` + defaultCluster + `
(comma-separate several; any manager will do, followers redirect to the leader).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			addrs := clusterAddrs(addr)
			key, err := g.key()
			if err != nil {
				return err
			}
			cl := cluster.NewClient(addrs, key, log)
			defer cl.Close()
			cl.CallTimeout, cl.LeaderWait = 3*time.Second, 3*time.Second
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			st, err := cl.Status(ctx)
			if err != nil {
				if errors.Is(err, cluster.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("cannot reach the manager at %s: %s (is `atoll dev` running? set ATOLL_CLUSTER)", strings.Join(addrs, ","), rootCause(err))
				}
				return err
			}
			if asJSON {
				return writeStatusJSON(cmd.OutOrStdout(), st, time.Now())
			}
			return writeStatus(cmd.OutOrStdout(), st, time.Now())
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "cluster", "", "manager address(es) (default $ATOLL_CLUSTER, else "+defaultCluster+")")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// rootCause shortens a connection failure to its system error
// ("connect: connection refused"); other errors keep their full text.
func rootCause(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

type statusJSON struct {
	Epoch         uint64       `json:"epoch"`
	Leader        string       `json:"leader"`
	LeaderID      string       `json:"leader_id"`
	Term          uint64       `json:"term"`
	Voters        []voterJSON  `json:"voters"`
	Members       []memberJSON `json:"members"`
	Islands       []islandJSON `json:"islands"`
	Table         tableJSON    `json:"table"`
	DefaultPolicy string       `json:"default_policy"`
	PolicyPinned  bool         `json:"policy_pinned"`
	Formatted     bool         `json:"formatted"`
	AnsweredBy    string       `json:"answered_by"`
	Jobs          []jobJSON    `json:"jobs"`
	RaftState     string       `json:"raft_state"`
}

type voterJSON struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	Addr     string `json:"addr"`
	Voter    bool   `json:"voter"`
}

type memberJSON struct {
	Kind   string `json:"kind"`
	ID     uint32 `json:"id"`
	Addr   string `json:"addr"`
	State  string `json:"state"`
	PID    int    `json:"pid"`
	LastHB string `json:"last_heartbeat,omitempty"` // RFC 3339, absent when unknown
	// HeartbeatAgeMS is the age of the last heartbeat, -1 when unknown
	// (never seen by this leader).
	HeartbeatAgeMS int64  `json:"heartbeat_age_ms"`
	CapacityBytes  uint64 `json:"capacity_bytes,omitempty"`
	UsedBytes      uint64 `json:"used_bytes,omitempty"`
	Degraded       uint64 `json:"degraded_stripes"` // as the dashboard's /api/cluster
	// MetricsAddr is where the member serves Prometheus /metrics, as its
	// heartbeats report it (absent when it serves none, or from a follower).
	MetricsAddr string `json:"metrics_addr,omitempty"`
	// RegisteredBy is the key (not the cluster key) that registered a
	// gateway or mount: its address and figures are that key's word.
	RegisteredBy string `json:"registered_by,omitempty"`
	// Role is what a gateway says it is (mount at PATH on HOST, NFS
	// gateway at ADDR), from its heartbeats.
	Role string `json:"role,omitempty"`
	// Leases are the member's lease figures as its heartbeats report them
	// (islands and mounts; absent otherwise, or from a follower).
	Leases *leasesJSON `json:"leases,omitempty"`
	// Locks are the member's lock and open-file figures as its
	// heartbeats report them (islands, mounts and gateways).
	Locks *locksJSON `json:"locks,omitempty"`
}

// locksJSON is cluster.LockStats: islands fill locks, waiters,
// sessions, sessions_ended, open_held, open_unlinked and open_reclaimed;
// mounts and gateways locks (files locked), sessions_ended (sessions
// lost), open_held (held at islands) and open_local (under a lease).
type locksJSON struct {
	Locks         uint64 `json:"locks"`
	Waiters       uint64 `json:"waiters,omitempty"`
	Sessions      uint64 `json:"sessions,omitempty"`
	SessionsEnded uint64 `json:"sessions_ended"`
	OpenHeld      uint64 `json:"open_held"`
	OpenUnlinked  uint64 `json:"open_unlinked,omitempty"`
	OpenReclaimed uint64 `json:"open_reclaimed,omitempty"`
	OpenLocal     uint64 `json:"open_local,omitempty"`
}

// memberLocks maps each live member to its lock figures.
func memberLocks(st *cluster.Status) map[cluster.MemberKey]*locksJSON {
	out := map[cluster.MemberKey]*locksJSON{}
	for _, l := range st.Live {
		if x := l.Stats.Locks; x != nil {
			out[l.Key] = &locksJSON{Locks: x.Locks, Waiters: x.Waiters, Sessions: x.Sessions, SessionsEnded: x.SessionsEnded,
				OpenHeld: x.OpenHeld, OpenUnlinked: x.OpenUnlinked, OpenReclaimed: x.OpenReclaimed, OpenLocal: x.OpenLocal}
		}
	}
	return out
}

// leasesJSON is cluster.LeaseStats: islands fill held, granted, broken,
// expired, exclusive and recalled; mounts held, broken (breaks received),
// kept (attribute changes kept back) and sent (merged setattrs).
type leasesJSON struct {
	Held      uint64 `json:"held"`
	Granted   uint64 `json:"granted,omitempty"`
	Broken    uint64 `json:"broken"`
	Expired   uint64 `json:"expired,omitempty"`
	Exclusive uint64 `json:"exclusive,omitempty"`
	Recalled  uint64 `json:"recalled,omitempty"`
	Kept      uint64 `json:"kept_back,omitempty"`
	Sent      uint64 `json:"kept_back_sent,omitempty"`
}

// memberLeases maps each live member to its lease figures.
func memberLeases(st *cluster.Status) map[cluster.MemberKey]*leasesJSON {
	out := map[cluster.MemberKey]*leasesJSON{}
	for _, l := range st.Live {
		if x := l.Stats.Leases; x != nil {
			out[l.Key] = &leasesJSON{Held: x.Held, Granted: x.Granted, Broken: x.Broken, Expired: x.Expired,
				Exclusive: x.Exclusive, Recalled: x.Recalled, Kept: x.Kept, Sent: x.Sent}
		}
	}
	return out
}

type islandJSON struct {
	ID      uint32  `json:"id"`
	Addr    string  `json:"addr"`
	State   string  `json:"state"`
	Entries int     `json:"entries"`
	Share   float64 `json:"share"` // fraction of table entries, 0..1
	// Replicated islands: the island server leading it and every replica
	// (absent for a single-copy island).
	LeaderServer uint32        `json:"leader_server,omitempty"`
	Replicas     []replicaJSON `json:"replicas,omitempty"`
	// Placement is where the map puts its replicas (preferred leader
	// first); Moving is set while its group does not match it yet.
	Placement []uint32 `json:"placement,omitempty"`
	Moving    bool     `json:"replicas_moving,omitempty"`
}

// replicaJSON is one replica of a replicated island, as its island server
// last reported it (Reported false: no report reached the manager, e.g.
// its server is down or leads no island).
type replicaJSON struct {
	Server        uint32 `json:"server"`
	Reported      bool   `json:"reported"`
	Role          string `json:"role,omitempty"`
	Term          uint64 `json:"term,omitempty"`
	CommitIndex   uint64 `json:"commit_index,omitempty"`
	AppliedIndex  uint64 `json:"applied_index,omitempty"`
	Lag           uint64 `json:"lag"` // entries behind the leader's applied index
	LastContactMS uint64 `json:"last_contact_ms,omitempty"`
}

// islandReplicas gathers the replica reports of every island from the
// heartbeats of the islands' leaders: by island, its leader's server id
// and its replicas sorted by server.
func islandReplicas(st *cluster.Status) map[uint32]struct {
	leader   uint32
	replicas []replicaJSON
} {
	type key struct{ island, server uint32 }
	reports := map[key]cluster.ReplicaStats{}
	voters := map[uint32][]uint32{}
	for _, l := range st.Live {
		for _, r := range l.Stats.Replicas {
			k := key{r.Island, r.Server}
			if old, ok := reports[k]; !ok || r.Applied >= old.Applied {
				reports[k] = r
			}
			if r.Role == "leader" || len(voters[r.Island]) == 0 {
				voters[r.Island] = r.Voters
			}
		}
	}
	out := map[uint32]struct {
		leader   uint32
		replicas []replicaJSON
	}{}
	for island, vs := range voters {
		var leader uint32
		var leaderApplied uint64
		for _, v := range vs {
			if r, ok := reports[key{island, v}]; ok && r.Role == "leader" {
				leader, leaderApplied = v, r.Applied
			}
		}
		var reps []replicaJSON
		for _, v := range slices.Sorted(slices.Values(vs)) {
			rj := replicaJSON{Server: v}
			if r, ok := reports[key{island, v}]; ok {
				rj = replicaJSON{Server: v, Reported: true, Role: r.Role, Term: r.Term, CommitIndex: r.Commit,
					AppliedIndex: r.Applied, LastContactMS: r.LastContactMS}
				if leaderApplied > r.Applied {
					rj.Lag = leaderApplied - r.Applied
				}
			}
			reps = append(reps, rj)
		}
		out[island] = struct {
			leader   uint32
			replicas []replicaJSON
		}{leader, reps}
	}
	return out
}

type tableJSON struct {
	Depth   uint8    `json:"depth"`
	Entries []uint32 `json:"entries"`
	// Moves are the entries moving between islands (atoll island).
	Moves []cluster.EntryMove `json:"moves"`
}

type jobJSON struct {
	Name       string  `json:"name"`
	Phase      string  `json:"phase"`
	Done       int     `json:"done"`
	Total      int     `json:"total"`
	ETASeconds float64 `json:"eta_seconds"`
	Summary    string  `json:"summary"`
}

func writeStatusJSON(w io.Writer, st *cluster.Status, now time.Time) error {
	m := st.Map
	out := statusJSON{
		Epoch: m.Epoch, Leader: st.Leader, LeaderID: st.LeaderID, Term: st.Term,
		DefaultPolicy: m.DefaultPolicy, PolicyPinned: m.PolicyPinned, Formatted: m.Formatted,
		AnsweredBy: st.Self, RaftState: st.RaftState,
		Voters: []voterJSON{}, Members: []memberJSON{}, Islands: []islandJSON{},
		Table: tableJSON{Depth: m.Table.Depth, Entries: m.Table.Entries},
	}
	if out.Table.Entries == nil {
		out.Table.Entries = []uint32{}
	}
	out.Table.Moves = append([]cluster.EntryMove{}, m.Moves...)
	for _, v := range st.Voters {
		out.Voters = append(out.Voters, voterJSON{ID: v.RaftID, RaftAddr: v.RaftAddr, Addr: v.ClientAddr, Voter: v.Voter})
	}
	out.Jobs = []jobJSON{}
	for _, j := range st.Jobs {
		out.Jobs = append(out.Jobs, jobJSON{Name: j.Name, Phase: j.Phase, Done: j.Done, Total: j.Total, ETASeconds: j.ETASeconds, Summary: j.Summary})
	}
	metrics := map[cluster.MemberKey]string{}
	roles := map[cluster.MemberKey]string{}
	for _, l := range st.Live {
		metrics[l.Key] = l.Stats.MetricsAddr
		roles[l.Key] = l.Stats.Role
	}
	leases := memberLeases(st)
	locks := memberLocks(st)
	for _, v := range st.Members() {
		mj := memberJSON{Kind: v.Kind.String(), ID: v.ID, Addr: v.Addr, State: v.State.String(), PID: v.PID, HeartbeatAgeMS: -1,
			CapacityBytes: v.CapacityBytes, UsedBytes: v.UsedBytes, Degraded: v.Degraded, MetricsAddr: metrics[v.Key()],
			Leases: leases[v.Key()], Locks: locks[v.Key()], RegisteredBy: v.Owner, Role: roles[v.Key()]}
		if !v.LastHeartbeat.IsZero() {
			mj.LastHB = v.LastHeartbeat.UTC().Format(time.RFC3339Nano)
			mj.HeartbeatAgeMS = max(now.Sub(v.LastHeartbeat).Milliseconds(), 0)
		}
		out.Members = append(out.Members, mj)
	}
	shares := m.Table.Shares()
	reps := islandReplicas(st)
	unsettled := cluster.ReplicasUnsettled(st)
	for _, is := range m.Islands {
		ij := islandJSON{ID: is.ID, Addr: is.Addr, State: is.State.String(), Entries: shares[is.ID]}
		if n := len(m.Table.Entries); n > 0 {
			ij.Share = float64(ij.Entries) / float64(n)
		}
		if r, ok := reps[is.ID]; ok {
			ij.LeaderServer, ij.Replicas = r.leader, r.replicas
		}
		ij.Placement, _ = m.ReplicaSet(is.ID)
		ij.Moving = slices.Contains(unsettled, is.ID)
		out.Islands = append(out.Islands, ij)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func writeStatus(w io.Writer, st *cluster.Status, now time.Time) error {
	m := st.Map
	bw := &errWriter{w: w}
	formatted := "not formatted (no namespace table yet)"
	if m.Formatted {
		formatted = "formatted"
	}
	policy := m.DefaultPolicy
	if !m.PolicyPinned {
		policy += " (automatic for the number of storage slots)"
	}
	bw.printf("epoch %d, %s\n", m.Epoch, formatted)
	bw.printf("default policy: %s\n", policy)
	leader := st.Leader
	if leader == "" {
		leader = "none (election under way, or no quorum); answered by " + st.Self
	}
	bw.printf("leader: %s  (term %d)\n", leader, st.Term)

	bw.printf("\nmanagers (%d):\n", len(st.Voters))
	tw := tabwriter.NewWriter(bw, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tADDRESS\tRAFT ADDRESS\tROLE")
	for _, v := range st.Voters {
		role := "voter"
		if !v.Voter {
			role = "non-voter"
		}
		if v.RaftID == st.LeaderID {
			role = "leader"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", v.RaftID, orDash(v.ClientAddr), v.RaftAddr, role)
	}
	tw.Flush()

	members := st.Members()
	bw.printf("\nmembers (%d):\n", len(members))
	if len(members) == 0 {
		bw.printf("  none registered\n")
	} else {
		tw = tabwriter.NewWriter(bw, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  KIND\tID\tADDRESS\tSTATE\tPID\tHEARTBEAT\tCAPACITY\tUSED\tDEGRADED")
		for _, v := range members {
			hb := "-"
			if !v.LastHeartbeat.IsZero() {
				hb = fmtAge(now.Sub(v.LastHeartbeat)) + " ago"
			}
			capacity, used := "", ""
			if v.Kind == cluster.KindStorage {
				capacity, used = fmtBytes(v.CapacityBytes), fmtBytes(v.UsedBytes)
				if v.CapacityBytes == 0 && v.UsedBytes == 0 {
					capacity, used = "-", "-"
				}
			}
			degraded := "-"
			if v.Degraded > 0 {
				degraded = fmt.Sprintf("%d stripes", v.Degraded)
			}
			addr := v.Addr
			if v.Owner != "" {
				addr += " (key " + v.Owner + ")"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", v.Kind, v.ID, addr, v.State, v.PID, hb, capacity, used, degraded)
		}
		tw.Flush()
	}

	if leases := memberLeases(st); len(leases) > 0 {
		bw.printf("\nleases:\n")
		tw = tabwriter.NewWriter(bw, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  KIND\tID\tHELD\tGRANTED\tBROKEN\tEXPIRED\tEXCLUSIVE\tRECALLED\tKEPT BACK\tSENT")
		for _, v := range members {
			l := leases[v.Key()]
			if l == nil {
				continue
			}
			if v.Kind == cluster.KindIsland {
				fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t-\t-\n", v.Kind, v.ID, l.Held, l.Granted, l.Broken, l.Expired, l.Exclusive, l.Recalled)
			} else {
				fmt.Fprintf(tw, "  %s\t%d\t%d\t-\t%d\t-\t-\t-\t%d\t%d\n", v.Kind, v.ID, l.Held, l.Broken, l.Kept, l.Sent)
			}
		}
		tw.Flush()
	}

	if locks := memberLocks(st); len(locks) > 0 {
		bw.printf("\nlocks and open files:\n")
		tw = tabwriter.NewWriter(bw, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  KIND\tID\tLOCKS\tWAITERS\tSESSIONS\tSESSIONS ENDED\tOPEN HELD\tUNLINKED\tRECLAIMED\tOPEN LOCAL")
		for _, v := range members {
			l := locks[v.Key()]
			if l == nil {
				continue
			}
			if v.Kind == cluster.KindIsland {
				fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t-\n", v.Kind, v.ID, l.Locks, l.Waiters, l.Sessions, l.SessionsEnded, l.OpenHeld, l.OpenUnlinked, l.OpenReclaimed)
			} else {
				fmt.Fprintf(tw, "  %s\t%d\t%d\t-\t-\t%d\t%d\t-\t-\t%d\n", v.Kind, v.ID, l.Locks, l.SessionsEnded, l.OpenHeld, l.OpenLocal)
			}
		}
		tw.Flush()
	}

	bw.printf("\nislands (%d), hash table depth %d, %d entries:\n", len(m.Islands), m.Table.Depth, len(m.Table.Entries))
	if len(m.Islands) == 0 {
		bw.printf("  none registered\n")
	} else {
		shares := m.Table.Shares()
		ids := make([]uint32, 0, len(m.Islands))
		for _, is := range m.Islands {
			ids = append(ids, is.ID)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		tw = tabwriter.NewWriter(bw, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ISLAND\tSTATE\tENTRIES\tSHARE")
		for _, id := range ids {
			is, _ := m.Island(id)
			share := "-"
			if n := len(m.Table.Entries); n > 0 {
				share = fmt.Sprintf("%.1f%%", 100*float64(shares[id])/float64(n))
			}
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\n", id, is.State, shares[id], share)
		}
		tw.Flush()
		if len(m.Moves) > 0 {
			bw.printf("  %d entries moving:", len(m.Moves))
			for k, mv := range m.Moves {
				if k == 8 {
					bw.printf(" ...")
					break
				}
				bw.printf(" %d (%d -> %d)", mv.Entry, mv.From, mv.To)
			}
			bw.printf("\n")
		}
		reps := islandReplicas(st)
		unsettled := cluster.ReplicasUnsettled(st)
		for _, id := range ids {
			r, ok := reps[id]
			if !ok {
				continue
			}
			var parts []string
			for _, rj := range r.replicas {
				switch {
				case !rj.Reported:
					parts = append(parts, fmt.Sprintf("server %d: no report", rj.Server))
				case rj.Role == "leader":
					parts = append(parts, fmt.Sprintf("server %d: leader, applied %d", rj.Server, rj.AppliedIndex))
				default:
					parts = append(parts, fmt.Sprintf("server %d: %s, applied %d (lag %d)", rj.Server, rj.Role, rj.AppliedIndex, rj.Lag))
				}
			}
			moving := ""
			if set, ok := m.ReplicaSet(id); ok && slices.Contains(unsettled, id) {
				moving = fmt.Sprintf(" (moving to servers %v)", set)
			}
			bw.printf("  island %d replicas: %s%s\n", id, strings.Join(parts, "; "), moving)
		}
	}
	bw.printf("\nbackground jobs (run by the leader):\n")
	if len(st.Jobs) == 0 {
		bw.printf("  none reported by %s\n", st.Self)
	}
	for _, j := range st.Jobs {
		phase := "idle"
		if j.Phase != "" {
			phase = fmt.Sprintf("%s %d/%d", j.Phase, j.Done, j.Total)
			if j.ETASeconds > 0 {
				phase += fmt.Sprintf(", about %s left", fmtAge(time.Duration(j.ETASeconds*float64(time.Second))))
			}
		}
		bw.printf("  %s: %s\n    %s\n", j.Name, phase, j.Summary)
	}
	return bw.err
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fmtAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

func fmtBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := uint64(unit), 0
	for v := n / unit; v >= unit && exp < 5; v /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
