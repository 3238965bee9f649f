// Package manager is the cluster manager: a hashicorp/raft group whose
// state machine is the cluster map (internal/cluster's Map, changed only
// by cluster.Command applied through raft), the leader's heartbeat
// monitor, and the handlers of the managers' wire protocol (described,
// with the map's format and the commands' encoding, in internal/cluster).
//
// # Raft
//
// Each manager is a hashicorp/raft voter. Its directory holds raft.db
// (raft-boltdb: log and stable store), snapshots/ (file snapshot store,
// two retained), node-id (the raft server id, random, made on first start,
// so the identity does not depend on addresses) and LOCK (flock: one
// manager per directory). The raft transport listens on its own port
// (default: the client port + 1).
//
// The first start without Join bootstraps a one-voter group. With Join, a
// new manager asks any manager (over the wire protocol, following
// redirects) to AddVoter it; the leader also records the joiner's client
// address in the map. A manager that restarts with the same directory
// recovers the map from its snapshot and log and ignores Join. When a
// manager becomes leader it first applies a barrier (its map then holds
// every committed command), records its own addresses in the map if they
// changed, and resets the heartbeat table; only then does it accept
// writes (before that it answers ErrUnavailable and clients wait). On
// shutdown a leader hands leadership to another voter when there is one.
//
// The raft timeouts default to 500ms (heartbeat, election) and 250ms
// (leader lease), shorter than hashicorp/raft's 1s so that a laptop
// cluster fails over in about a second.
//
// # Heartbeats and the monitor
//
// Members heartbeat the leader (Interval, default 1s). The leader's
// monitor (one goroutine owned by the Manager, ticking every DownAfter/5)
// marks down, in one command and so one new epoch, every up member not
// heard from for DownAfter (default 5s). The clock of each member starts
// no earlier than the moment this manager became leader, so after a leader
// change every member has a fresh grace period of DownAfter: heartbeats
// sent to the old leader were never seen by the new one. A heartbeat from
// a down member marks it up again (new epoch) before it is answered, so
// the reply carries the epoch in which the member is up.
//
// Heartbeats carry the member's statistics (MemberStats): storage usage,
// cumulative counters (bytes read and written, requests, scrub progress,
// corrupt ranges, repairs, degraded stripes) and the address of its
// /metrics. The leader keeps the last HistoryLen heartbeats' counters per
// member (ten minutes at the default interval) in memory, and derives
// from them each member's current rates and the storage servers' summed
// throughput over time (Manager.Snapshot, the dashboard's source). Like
// the rest of the heartbeat table this is never replicated: a new leader
// starts an empty history. The manager's own Prometheus metrics are in
// metrics.go.
//
// # Locks
//
// Two mutexes, never held together:
//
//   - fsm.mu (RW): the replicated map. Apply and Restore write it (on
//     raft's goroutine; Restore reads the snapshot before taking it),
//     Map, Snapshot and the lookups read it. Only copying, encoding and
//     applying a command happen under it.
//   - Manager.mu: the heartbeat table (each member's last heartbeat,
//     statistics and history), the term it belongs to, the jobs
//     callback and the move progress. Never held across raft calls
//     (apply, Barrier), I/O or the jobs callback, which status calls
//     after letting it go: the cleaner's Status, behind that callback,
//     takes the cleaner's own lock. currentMap copies the map (fsm.mu)
//     before it takes Manager.mu.
package manager
