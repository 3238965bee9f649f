// Package replica replicates a metadata island: each island is a group
// of replicas on different island servers, kept identical by a raft log
// (hashicorp/raft, the manager's library) whose entries are the pebble
// batches the island applies. internal/meta stays the state machine: an
// Island built on a replica's DB hands every batch it would commit to
// Replicate (meta.Replicator) instead; internal/metaserver runs the
// replicas of a server and an Island for each one it leads.
//
// # Entries and the database
//
// An entry's data is a pebble batch representation (Batch.Repr). Every
// replica applies the entries raft commits together to its own database
// in one batch, together with AppliedKey = the last entry's index. The
// database has no write-ahead log (pebble's DisableWAL): the raft log
// (LogDB, synced on every append) is its log. A crash loses the
// memtable, i.e. the entries applied since the last flush, and the
// restart replays them from the raft log; an entry at or below the
// recorded applied index is skipped, so each is applied exactly once.
// The log keeps every entry the database may have lost: raft truncates
// it only after a snapshot, and a snapshot waits for a flush of the
// database up to its index. This saves each replica one write(2) per
// applied round; measured with BenchmarkReplicate (16 proposers) it was
// within this machine's noise (5,714–7,194 entries/s against 5,800). raft is told not to restore
// its last snapshot at start (the database persists); a database behind
// that snapshot (lost or replaced) is restored from it first.
//
// Replicate returns once the entry is applied on the leader, which is
// after a quorum has it in its synced log: a change an island
// acknowledges survives the loss of any minority of its replicas.
//
// # The leader writes its log while it replicates
//
// hashicorp/raft's leader syncs its own append and only then sends the
// entries to the followers: two fsyncs in series per commit. Here a
// leader's appends are written without a sync and synced in the
// background (one fsync for every group of the server, LogDB.syncLoop)
// while raft sends them (the Raft thesis, §10.2.1). raft then counts the
// leader's copy before it is durable, so an entry can be "committed"
// with only a follower's copy on disk; nothing acts on that until the
// leader's copy is durable as well:
//
//   - the leader's state machine waits for its log to be synced up to an
//     entry before applying it (so before Replicate returns);
//   - followers are told of commits only up to the leader's synced index
//     (syncedTransport lowers LeaderCommitIndex), so no follower applies
//     an entry the leader could still lose.
//
// A leader that crashes before its sync loses entries no replica applied
// and no client was told of; the followers' copies are then overwritten
// or committed by the next leader, as for any uncommitted entry. A
// follower syncs before it answers, as raft requires. Measured with
// BenchmarkReplicate (16 proposers, same run of this VM): 11,031–11,247
// entries/s against 5,714–7,194 with the leader's sync in series, and a
// lone proposer's entry in 0.43–0.49 ms against 0.59 ms.
//
// # Merged appends
//
// A follower stores the append requests of its connection one at a
// time, each with a synced write, and hashicorp/raft's leader pipelines
// one request per group of entries as they come: under load a follower
// synced once per small request and each request waited behind the
// syncs of those before it. The leader's pipeline (mergingPipeline)
// keeps one request on the connection and merges those raft hands it
// meanwhile (contiguous entries of one term, at most 512 entries or
// 4 MiB) into the next: one sync for all of them; a lone request goes at
// once. Measured with `atoll bench meta --islands 3 --replicas 3
// --files 40000` (builds alternating, one VM session): durable creates
// 3,904–4,877/s over 8 runs against 3,441–4,420/s over 5 without it;
// raft's own metrics showed about 2.9 entries per follower request
// against 2.0. The leader's commit time under load stayed at 2.6–3.4 ms:
// the gain is fewer syncs and requests on a machine whose two cores were
// busy (vmstat: 6–9% idle), not latency.
//
// A replica that cannot apply a committed entry (a corrupt batch, a full
// disk) stops applying and fails every later Replicate with ErrIO rather
// than diverge; Status reports it.
//
// # Raft log
//
// The raft logs and stable state of all replicas of one island server
// live in one pebble database (LogDB, the server's raftlog/ directory):
// concurrent synced appends of different groups share one fsync of its
// write-ahead log. Keys are u32 island, a tag ('l' u64 index for entries,
// 's' name for raft's term and vote) and values a small fixed encoding
// (logstore.go). Measured with BenchmarkReplicate (3 replicas in one
// process, 16 proposers, 300-byte entries, this 2-core VM): 4,192
// entries/s and 0.91 ms for a lone proposer, against 3,064 entries/s and
// 1.15 ms with raft-boltdb (two fdatasyncs per append).
//
// # Snapshots
//
// Snapshot streams a pebble snapshot of the database once a flush of it
// has finished: records of u32 key length, key, u32 value length, value;
// a u32 0xFFFFFFFF end mark; a u32 CRC32C of everything before the mark's
// end. Restore spools the stream to a file in the replica's directory
// and checks it whole before it clears the database and loads the
// records (the applied index is one of them): a damaged snapshot leaves
// the database as it was. A replica started on an empty directory (a lost disk)
// bootstraps with the same voters, which every replica did at the start,
// and the leader catches it up by log or by snapshot. (Its vote in the
// current term is forgotten with the disk: run it only after the term has
// moved on, e.g. after a restart of the group's leader, or accept the
// small window in which two leaders of one term could be elected.)
//
// A snapshot writes the whole database, so a fixed entry count between
// snapshots (raft's SnapshotThreshold, 8192 here) would make their cost
// grow with the island: at a gigabyte of metadata, a full copy every few
// seconds of writes. After each snapshot the threshold becomes the
// snapshot's size divided by the mean entry size (snapshotThresholdFor):
// the log takes about as many bytes as the snapshot before the next one,
// so snapshots cost about what the log itself does, whatever the size.
// It stays at least Config.SnapshotThreshold and at most 1<<20 entries
// (what a replica rebuilt from the snapshot replays; the raft log holds
// them until the next snapshot).
//
// # First election
//
// On a group's first start (it bootstraps) the replicas given
// Config.Defer wait deferFactor (4) times longer before campaigning, so
// the replica meant to lead (internal/metaserver: the placement's first
// server) wins the first election. Otherwise any replica could, and the
// metaserver would hand the lead to the preferred one 5 s later, which
// gives the island's leases up: on a fresh `atoll dev` that broke 86
// leases of the mount 3-4 s into its first `tar x`. The usual timeouts
// return (raft.ReloadConfig) once a leader is known, or after 10 ×
// the deferred timeout without one.
//
// # Membership
//
// A replica opened with Join never bootstraps: it waits for the group's
// leader to add it (AddNonvoter, then Promote once caught up) and
// receives the log or a snapshot. RemoveMember takes a replica out of
// the group; Destroy then deletes its database, snapshots and raft log.
// internal/metaserver drives these from the cluster map's placement.
//
// The raft port also answers probes (ProbeReplica): a connection that
// names group 0 (islands are numbered from 1) sends u32 island and gets
// u8 found, u8 leader, u64 applied index, u8 n, n × (u32 server, u8
// voter) of the replica's configuration, u8 ready (the server could serve
// the island: absent from older servers, read as ready), then the
// connection closes.
// Probes need a member key like raft traffic.
//
// # Reads
//
// An island serves reads from its leader's database while IsLeader
// holds: hashicorp/raft steps a leader down when it has not heard from a
// quorum within LeaderLeaseTimeout (250ms), shorter than the heartbeat
// timeout (500ms) after which followers start an election, so a deposed
// leader stops answering before a new one can change anything (assuming
// clocks that run at the same rate). A new leader waits for a barrier
// (every committed entry applied) before it serves.
//
// # Idle cost
//
// hashicorp/raft's leader sends each follower a heartbeat every
// HeartbeatTimeout/10 and, in pipeline mode, an empty append every
// CommitTimeout (default 50ms) so followers learn the commit index when
// no new entries carry it. Nine replicas of an idle `atoll dev` spent
// 1.28 CPU-s per 10 s on this; CommitTimeout is 500ms here (0.96 CPU-s
// per 10 s, same VM minutes): under load every new entry carries the
// commit index anyway, and at rest a follower applies the last entries
// within a second (the leader serves reads; a new leader applies its log
// before it serves). `atoll bench meta --replicas 3`, builds
// alternating, 3 runs each (23:59-00:01): durable creates 3,611-4,785/s
// against 4,017-4,230, stat 38.6k-43.2k/s against 30.2k-41.1k.
//
// # Raft port
//
// A server's replicas share one raft port (Mux): a connection runs the
// auth handshake (cluster members only, when there is a key), then names
// its group in 4 bytes (the island id, big-endian).
//
// # Failpoints
//
//	replica.beforeAppend  leader: batch built, not handed to raft
//	replica.beforeApply   any replica: entry committed on a quorum, not applied
//	replica.afterApply    any replica: entry applied, not answered
//
// beforeApply and afterApply fire for entries applied as they commit,
// not for those replayed at start (up to the log's last index when the
// replica opened). At beforeApply and afterApply only the crash and sleep actions mean
// anything (applying must be deterministic: an error there is ignored);
// an error at beforeAppend fails the change with ErrUnavailable.
//
// # Choice of library
//
// hashicorp/raft v1.7.3, the manager's library: its transport runs over
// the authenticated Mux, it handles snapshots, membership and leadership
// transfer, and it was already a dependency. go.etcd.io/raft/v3 v3.6.0
// was measured beside it on the same machine (a standalone harness: 3
// nodes in one process over loopback TCP, 300-byte entries, every node's
// log fsynced before it counts, 3 runs each, min/median/max entries/s):
//
//	proposers  hashicorp+boltdb        etcd raft (own fsynced log)
//	1            877 /  919 / 1068     1554 / 1593 / 1740
//	8           2285 / 2357 / 2472     3538 / 4310 / 4494
//	64          9178 / 9596 / 11879   13622 / 17222 / 17512
//
// etcd's core is about 1.7x faster there, mostly because its leader may
// write its own log while it sends to followers (hashicorp's leader syncs
// first, then sends: two fsyncs in series per commit) — but its harness
// log was a best case (no compaction, no recovery), and etcd raft leaves
// the log, snapshots, transport and membership to its user. The pebble
// LogDB above narrowed the gap (+37% over boltdb). A replicated create is
// bound by that serial latency (two syncs and two hops): see the create
// figures in bench/ (make bench-meta-replicas). Moving to etcd raft is
// the measured way to close the rest.
//
// # Locks
//
// Order: LogDB.mu → LogDB.sync; the others are leaves.
//
//   - LogDB.mu: which groups have their log open. group holds it across
//     loadBounds (a pebble iterator: disk reads) and DropGroup across a
//     synced DeleteRange of the group's keys, so that an open of the
//     same group cannot race them; both are rare (a replica opening, or
//     leaving for good).
//   - LogDB.sync (with cond): each group's written and synced indexes.
//     syncLoop lets it go around the fsync (db.LogData) and the
//     beforeSync hook; waitSynced waits on cond, which lets it go.
//   - groupLog.boundsMu: the first and last index as StoreLogs and
//     DeleteRange move them; DeleteRange holds it across loadBounds
//     (pebble reads).
//   - Mux.mu: the groups' layers and the probe function; never held
//     across an accept, a handshake or a probe's answer.
//   - mergingPipeline.mu (with cond): queued and in-flight appends. The
//     sending flag is the writer role, so the inner AppendEntries (a
//     network write) runs without the mutex; AppendEntries waits on
//     cond while the queue is full, which lets it go.
//   - Replica.reload: orders ReloadableConfig and ReloadConfig pairs;
//     raft's ReloadConfig (in memory, under raft's own lock) runs under
//     it.
package replica
