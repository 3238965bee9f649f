package cluster

import (
	"fmt"
	"math"
	"time"

	"github.com/atoll-fs/atoll/internal/wire"
)

// Manager RPC operations (the wire frame's op field). "Leader" ops are
// answered by the leader only; a follower answers *NotLeaderError.
const (
	OpGetMap       uint16 = 1  // GetMapReq -> map (any manager; ErrStaleEpoch if its map is older than MinEpoch)
	OpRegister     uint16 = 2  // RegisterReq -> map (leader)
	OpHeartbeat    uint16 = 3  // HeartbeatReq -> HeartbeatResp (leader)
	OpSetState     uint16 = 4  // SetStateReq -> EpochResp (leader)
	OpFormat       uint16 = 5  // FormatReq -> map (leader)
	OpJoin         uint16 = 6  // JoinReq -> EpochResp (leader)
	OpStatus       uint16 = 7  // empty -> StatusResp (leader if one is known, else any manager)
	OpSetTable     uint16 = 8  // SetTableReq -> EpochResp (leader)
	OpSetPolicy    uint16 = 9  // SetPolicyReq -> EpochResp (leader)
	OpMoveEntries  uint16 = 10 // MoveEntriesReq -> EpochResp (leader)
	OpFinishMove   uint16 = 11 // MoveIDReq -> EpochResp (leader; islands)
	OpCancelMove   uint16 = 12 // MoveIDReq -> EpochResp (leader)
	OpIslandServer uint16 = 13 // IslandServerReq -> EpochResp (leader; island servers)
	OpSetReplicas  uint16 = 14 // SetReplicasReq -> EpochResp (leader)
	OpRemove       uint16 = 15 // RemoveReq -> EpochResp (leader; gateways only)
	OpRevoke       uint16 = 16 // RevokeReq -> EpochResp (leader)
)

// Message is implemented by every request and response structure.
type Message = wire.Message

// Marshal encodes a message.
func Marshal(m Message) []byte { return wire.Marshal(m) }

// Unmarshal decodes a whole message, failing on short or trailing bytes.
func Unmarshal(b []byte, m Message) error {
	if err := wire.Unmarshal(b, m); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return nil
}

// GetMapReq asks for a map of at least MinEpoch.
type GetMapReq struct{ MinEpoch uint64 }

func (r *GetMapReq) Encode(e *wire.Enc) { e.U64(r.MinEpoch) }
func (r *GetMapReq) Decode(d *wire.Dec) { r.MinEpoch = d.U64() }

// RegisterReq adds a member, or updates its address and pid after a
// restart. A down member that registers is up again; draining and out are
// operator states and survive a restart.
type RegisterReq struct {
	Kind Kind
	ID   uint32
	Addr string
	PID  int
}

func (r *RegisterReq) Encode(e *wire.Enc) {
	e.U8(uint8(r.Kind))
	e.U32(r.ID)
	e.String(r.Addr)
	e.I64(int64(r.PID))
}

func (r *RegisterReq) Decode(d *wire.Dec) {
	r.Kind = Kind(d.U8())
	r.ID = d.U32()
	r.Addr = d.Str()
	r.PID = int(d.I64())
}

// MemberStats is what a member reports with each heartbeat; it is kept in
// the leader's memory, never in raft. Counters are cumulative since the
// member process started (a restart starts them at zero again); the
// leader turns them into rates (Manager.Snapshot).
type MemberStats struct {
	// Storage servers: capacity and use. Gateways: stripes their client
	// knows to miss fragments (Degraded).
	CapacityBytes uint64
	UsedBytes     uint64
	Degraded      uint64

	BytesRead    uint64 // bytes served to readers (storage: fragment bytes; gateways: file bytes)
	BytesWritten uint64 // bytes stored (storage) or made durable (gateways)
	Ops          uint64 // requests served
	// Scrubber progress (storage): bytes verified in the current pass,
	// completed passes and sick ranges found.
	ScrubPassBytes uint64
	ScrubPasses    uint64
	Corrupt        uint64 // sick ranges found by any path
	Repairs        uint64 // fragments repaired (storage: repairs received; gateways: repairs made)
	// MetricsAddr is where the member serves /metrics ("" = nowhere).
	MetricsAddr string
	// Replicas (the leader of a replicated island) are the states of
	// every island replica its island server hosts, so status can show
	// each island's replicas, leader and lag.
	Replicas []ReplicaStats
	// Leases are the member's lease counts (islands: the island's table;
	// mounts: the leases its client holds and the attribute changes it
	// kept back); nil for the others.
	Leases *LeaseStats
	// Locks are the member's file lock and open-file figures (islands
	// and client-side members); nil for the others.
	Locks *LockStats
	// Role says what a gateway is, for people ("mount at /mnt on host",
	// "NFS gateway at 10.0.0.5:2049"); at most MaxRoleLen bytes.
	Role string
}

// MaxRoleLen bounds MemberStats.Role (a longer one is cut).
const MaxRoleLen = 128

// LockStats are a member's lock and open-file figures. Islands: Locks
// held on their inodes, Waiters (blocking requests waiting), Sessions
// holding locks or open files there, SessionsEnded (not renewed in
// time, or ended by an operator), OpenHeld inodes some session holds
// open, OpenUnlinked of them with no name left, OpenReclaimed unlinked
// inodes reclaimed at their last hold's end. Mounts and gateways: Locks
// is the files they hold locks on, SessionsEnded their sessions an
// island ended, OpenHeld the files held open at their islands, OpenLocal
// those held under an exclusive lease only.
type LockStats struct {
	Locks, Waiters, Sessions, SessionsEnded          uint64
	OpenHeld, OpenUnlinked, OpenReclaimed, OpenLocal uint64
}

// LeaseStats are a member's lease figures (#18). Islands: Held leases
// held by client sessions now, Granted, Broken (acknowledged), Expired
// (waited out), Exclusive (granted exclusive), Recalled (exclusive ones
// recalled before another session's request). Mounts and gateways: Held
// leases held now, Broken breaks received, Kept attribute changes kept
// back, Sent merged setattrs that carried them.
type LeaseStats struct {
	Held, Granted, Broken, Expired, Exclusive, Recalled, Kept, Sent uint64
}

// ReplicaStats is one island replica's state as its server sees it.
type ReplicaStats struct {
	Island, Server uint32
	Role           string // leader, follower, candidate, shutdown
	Leader         uint32 // the leader's server id as this replica knows it (0: none)
	Term           uint64
	Commit         uint64 // raft commit index known here
	Applied        uint64 // raft index applied to the replica's database
	LastContactMS  uint64 // since the leader was last heard from (followers)
	Voters         []uint32
}

// MaxMetricsAddr bounds MemberStats.MetricsAddr (a host:port).
const MaxMetricsAddr = 256

// HeartbeatReq tells the leader a member is alive. Epoch is the member's
// map epoch (informational). The fields after Stats.Degraded were added
// later and are encoded after it, in the order of MemberStats.
type HeartbeatReq struct {
	Kind  Kind
	ID    uint32
	Epoch uint64
	Stats MemberStats
}

func (r *HeartbeatReq) Encode(e *wire.Enc) {
	e.U8(uint8(r.Kind))
	e.U32(r.ID)
	e.U64(r.Epoch)
	encodeStats(e, &r.Stats)
}

func (r *HeartbeatReq) Decode(d *wire.Dec) {
	r.Kind = Kind(d.U8())
	r.ID = d.U32()
	r.Epoch = d.U64()
	decodeStats(d, &r.Stats)
}

func encodeStats(e *wire.Enc, s *MemberStats) {
	e.U64(s.CapacityBytes)
	e.U64(s.UsedBytes)
	e.U64(s.Degraded)
	e.U64(s.BytesRead)
	e.U64(s.BytesWritten)
	e.U64(s.Ops)
	e.U64(s.ScrubPassBytes)
	e.U64(s.ScrubPasses)
	e.U64(s.Corrupt)
	e.U64(s.Repairs)
	e.String(s.MetricsAddr)
	e.Uvarint(uint64(len(s.Replicas)))
	for _, r := range s.Replicas {
		e.U32(r.Island)
		e.U32(r.Server)
		e.String(r.Role)
		e.U32(r.Leader)
		e.U64(r.Term)
		e.U64(r.Commit)
		e.U64(r.Applied)
		e.U64(r.LastContactMS)
		e.Uvarint(uint64(len(r.Voters)))
		for _, v := range r.Voters {
			e.U32(v)
		}
	}
	// A presence flag, not a tail: stats are also encoded inside lists
	// (StatusResp), where "bytes remain" does not mean "this field".
	e.Bool(s.Leases != nil)
	if l := s.Leases; l != nil {
		for _, v := range []uint64{l.Held, l.Granted, l.Broken, l.Expired, l.Exclusive, l.Recalled, l.Kept, l.Sent} {
			e.U64(v)
		}
	}
	e.Bool(s.Locks != nil)
	if l := s.Locks; l != nil {
		for _, v := range []uint64{l.Locks, l.Waiters, l.Sessions, l.SessionsEnded, l.OpenHeld, l.OpenUnlinked, l.OpenReclaimed, l.OpenLocal} {
			e.U64(v)
		}
	}
	e.String(s.Role)
}

func decodeStats(d *wire.Dec, s *MemberStats) {
	*s = MemberStats{CapacityBytes: d.U64(), UsedBytes: d.U64(), Degraded: d.U64(),
		BytesRead: d.U64(), BytesWritten: d.U64(), Ops: d.U64(),
		ScrubPassBytes: d.U64(), ScrubPasses: d.U64(), Corrupt: d.U64(), Repairs: d.U64(),
		MetricsAddr: d.Str()}
	// Count bounds the entries by the message's size (MaxMsg).
	for range d.Count(36) {
		r := ReplicaStats{Island: d.U32(), Server: d.U32(), Role: d.Str(), Leader: d.U32(), Term: d.U64(),
			Commit: d.U64(), Applied: d.U64(), LastContactMS: d.U64()}
		for range d.Count(4) {
			r.Voters = append(r.Voters, d.U32())
		}
		s.Replicas = append(s.Replicas, r)
	}
	if d.Bool() {
		s.Leases = &LeaseStats{Held: d.U64(), Granted: d.U64(), Broken: d.U64(), Expired: d.U64(),
			Exclusive: d.U64(), Recalled: d.U64(), Kept: d.U64(), Sent: d.U64()}
	}
	if d.Bool() {
		s.Locks = &LockStats{Locks: d.U64(), Waiters: d.U64(), Sessions: d.U64(), SessionsEnded: d.U64(),
			OpenHeld: d.U64(), OpenUnlinked: d.U64(), OpenReclaimed: d.U64(), OpenLocal: d.U64()}
	}
	s.Role = d.Str()
}

// HeartbeatResp carries the current epoch, so a member notices a newer
// map, and the member's own state in it.
type HeartbeatResp struct {
	Epoch uint64
	State State
}

func (r *HeartbeatResp) Encode(e *wire.Enc) { e.U64(r.Epoch); e.U8(uint8(r.State)) }
func (r *HeartbeatResp) Decode(d *wire.Dec) { r.Epoch = d.U64(); r.State = State(d.U8()) }

// SetStateReq sets an operator state: up, draining or out.
type SetStateReq struct {
	Kind  Kind
	ID    uint32
	State State
}

func (r *SetStateReq) Encode(e *wire.Enc) { e.U8(uint8(r.Kind)); e.U32(r.ID); e.U8(uint8(r.State)) }
func (r *SetStateReq) Decode(d *wire.Dec) {
	r.Kind = Kind(d.U8())
	r.ID = d.U32()
	r.State = State(d.U8())
}

// RemoveReq forgets a gateway or mount (admin).
type RemoveReq struct {
	Kind Kind
	ID   uint32
}

func (r *RemoveReq) Encode(e *wire.Enc) { e.U8(uint8(r.Kind)); e.U32(r.ID) }
func (r *RemoveReq) Decode(d *wire.Dec) { r.Kind = Kind(d.U8()); r.ID = d.U32() }

// RevokeReq revokes every key made so far under Name (admin).
type RevokeReq struct{ Name string }

func (r *RevokeReq) Encode(e *wire.Enc) { e.String(r.Name) }
func (r *RevokeReq) Decode(d *wire.Dec) { r.Name = d.Str() }

// EpochResp is the map epoch after a write.
type EpochResp struct{ Epoch uint64 }

func (r *EpochResp) Encode(e *wire.Enc) { e.U64(r.Epoch) }
func (r *EpochResp) Decode(d *wire.Dec) { r.Epoch = d.U64() }

// FormatReq creates the namespace table over Islands (empty: every
// registered island that is not out).
type FormatReq struct{ Islands []uint32 }

func (r *FormatReq) Encode(e *wire.Enc) {
	e.Uvarint(uint64(len(r.Islands)))
	for _, id := range r.Islands {
		e.U32(id)
	}
}

func (r *FormatReq) Decode(d *wire.Dec) {
	if n := d.Count(4); n > 0 {
		r.Islands = make([]uint32, n)
		for i := range r.Islands {
			r.Islands[i] = d.U32()
		}
	}
}

// JoinReq asks the leader to add a manager as a raft voter.
type JoinReq struct {
	RaftID     string
	RaftAddr   string
	ClientAddr string
}

func (r *JoinReq) Encode(e *wire.Enc) {
	e.String(r.RaftID)
	e.String(r.RaftAddr)
	e.String(r.ClientAddr)
}
func (r *JoinReq) Decode(d *wire.Dec) {
	r.RaftID = d.Str()
	r.RaftAddr = d.Str()
	r.ClientAddr = d.Str()
}

// SetTableReq replaces the namespace table (rebalancing).
type SetTableReq struct{ Table Table }

func (r *SetTableReq) Encode(e *wire.Enc) { encodeTable(e, r.Table) }
func (r *SetTableReq) Decode(d *wire.Dec) { r.Table = decodeTable(d) }

// SetPolicyReq sets (and pins) the default policy.
type SetPolicyReq struct{ Policy string }

func (r *SetPolicyReq) Encode(e *wire.Enc) { e.String(r.Policy) }
func (r *SetPolicyReq) Decode(d *wire.Dec) { r.Policy = d.Str() }

// Voter is one raft server of the manager group.
type Voter struct {
	RaftID     string
	RaftAddr   string
	ClientAddr string // from the map; empty if not recorded yet
	Voter      bool   // false for a non-voter
}

// Status is the map plus the answering manager's raft view.
type Status struct {
	Map          *Map
	Self         string // raft id of the answering manager
	RaftState    string // Leader, Follower, Candidate, Shutdown
	LeaderID     string
	Leader       string // the leader's client address
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	Voters       []Voter
	// Live is the answering manager's heartbeat table: every member it has
	// heard from since it became leader, with its last reported stats.
	// Empty from a follower.
	Live []MemberLive
	// Jobs are the background jobs running in the answering manager's
	// process (the cleaner runs in the leader's).
	Jobs []Job
}

// Job is the progress of a background job running in the manager's
// process (the stripe cleaner), as its owner reports it.
type Job struct {
	Name       string
	Phase      string // "" when idle between runs
	Done       int
	Total      int
	ETASeconds float64
	Summary    string // one line: what the last run did
}

// Members lists the map's members with the figures of their last
// heartbeat (capacity, used bytes, degraded stripes) from Live, for every
// kind of member: the one source `atoll status`, `status --json` and the
// dashboard show. Without a heartbeat table (a follower's answer) the
// map's own figures stay.
func (st *Status) Members() []MemberView {
	if st.Map == nil {
		return nil
	}
	live := make(map[MemberKey]*MemberLive, len(st.Live))
	for i := range st.Live {
		live[st.Live[i].Key] = &st.Live[i]
	}
	out := st.Map.Members()
	for i := range out {
		if l, ok := live[out[i].Key()]; ok {
			out[i].CapacityBytes, out[i].UsedBytes, out[i].Degraded = l.Stats.CapacityBytes, l.Stats.UsedBytes, l.Stats.Degraded
			if !l.LastHeartbeat.IsZero() {
				out[i].LastHeartbeat = l.LastHeartbeat
			}
		}
	}
	return out
}

// MemberLive is one member's entry of the leader's heartbeat table.
type MemberLive struct {
	Key           MemberKey
	LastHeartbeat time.Time // zero: registered but no heartbeat yet
	Stats         MemberStats
}

// StatusResp is the wire form of Status: the map travels in its own
// checksummed encoding.
type StatusResp struct {
	MapBytes []byte // EncodeMap
	Status          // Map is ignored here
}

func (r *StatusResp) Encode(e *wire.Enc) {
	s := &r.Status
	e.Bytes(r.MapBytes)
	e.String(s.Self)
	e.String(s.RaftState)
	e.String(s.LeaderID)
	e.String(s.Leader)
	e.U64(s.Term)
	e.U64(s.CommitIndex)
	e.U64(s.AppliedIndex)
	e.Uvarint(uint64(len(s.Voters)))
	for _, v := range s.Voters {
		e.String(v.RaftID)
		e.String(v.RaftAddr)
		e.String(v.ClientAddr)
		e.Bool(v.Voter)
	}
	// Added after Voters: the heartbeat table.
	e.Uvarint(uint64(len(s.Live)))
	for _, l := range s.Live {
		e.U8(uint8(l.Key.Kind))
		e.U32(l.Key.ID)
		e.I64(timeNanos(l.LastHeartbeat))
		encodeStats(e, &l.Stats)
	}
	// Added after Live: background jobs.
	e.Uvarint(uint64(len(s.Jobs)))
	for _, j := range s.Jobs {
		e.String(j.Name)
		e.String(j.Phase)
		e.U64(uint64(max(j.Done, 0)))
		e.U64(uint64(max(j.Total, 0)))
		e.U64(math.Float64bits(j.ETASeconds))
		e.String(j.Summary)
	}
}

func (r *StatusResp) Decode(d *wire.Dec) {
	s := &r.Status
	r.MapBytes = d.Bytes()
	s.Self = d.Str()
	s.RaftState = d.Str()
	s.LeaderID = d.Str()
	s.Leader = d.Str()
	s.Term = d.U64()
	s.CommitIndex = d.U64()
	s.AppliedIndex = d.U64()
	if n := d.Count(4); n > 0 {
		s.Voters = make([]Voter, n)
		for i := range s.Voters {
			s.Voters[i] = Voter{RaftID: d.Str(), RaftAddr: d.Str(), ClientAddr: d.Str(), Voter: d.Bool()}
		}
	}
	// kind, id, time and 10 counters: at least 94 bytes each.
	if n := d.Count(94); n > 0 {
		s.Live = make([]MemberLive, n)
		for i := range s.Live {
			l := &s.Live[i]
			l.Key = MemberKey{Kind(d.U8()), d.U32()}
			l.LastHeartbeat = nanosTime(d.I64())
			decodeStats(d, &l.Stats)
		}
	}
	if n := d.Count(28); n > 0 {
		s.Jobs = make([]Job, n)
		for i := range s.Jobs {
			j := &s.Jobs[i]
			j.Name, j.Phase = d.Str(), d.Str()
			j.Done, j.Total = int(min(d.U64(), 1<<31)), int(min(d.U64(), 1<<31))
			j.ETASeconds = math.Float64frombits(d.U64())
			j.Summary = d.Str()
		}
	}
}

// MaxMsg bounds a manager message (a map of ~10^4 members fits).
const MaxMsg = 8 << 20
