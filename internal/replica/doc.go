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
// replica applies a committed entry to its own database in one batch
// together with AppliedKey = the entry's index, without a sync: the raft
// log (raft-boltdb, synced on every append) is the durable copy, and an
// entry at or below the recorded applied index is skipped, so a restart
// replays exactly what the database lost. raft is told not to restore
// its last snapshot at start (the database persists); a database behind
// that snapshot (lost or replaced) is restored from it first.
//
// Replicate returns once the entry is applied on the leader, which is
// after a quorum has it in its synced log: a change an island
// acknowledges survives the loss of any minority of its replicas.
// A replica that cannot apply a committed entry (a corrupt batch, a full
// disk) stops applying and fails every later Replicate with ErrIO rather
// than diverge; Status reports it.
//
// # Snapshots
//
// Snapshot syncs the database and streams a pebble snapshot of it:
// records of u32 key length, key, u32 value length, value; a u32
// 0xFFFFFFFF end mark; a u32 CRC32C of everything before the mark's end.
// Restore clears the database and loads the records (the applied index
// is one of them). A replica started on an empty directory (a lost disk)
// bootstraps with the same voters, which every replica did at the start,
// and the leader catches it up by log or by snapshot. (Its vote in the
// current term is forgotten with the disk: run it only after the term has
// moved on, e.g. after a restart of the group's leader, or accept the
// small window in which two leaders of one term could be elected.)
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
// At beforeApply and afterApply only the crash and sleep actions mean
// anything (applying must be deterministic: an error there is ignored);
// an error at beforeAppend fails the change with ErrUnavailable.
//
// # Choice of library
//
// See the package's benchmark figures in DESIGN notes of the closing
// issue; hashicorp/raft was chosen (already the manager's, with its
// authenticated transport and boltdb log store).
package replica
