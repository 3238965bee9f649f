// Package meta is an Atoll metadata island (Archipelago): a
// self-contained metadata server on pebble holding the directories,
// inodes, block maps, inline small files and xattrs of the buckets the
// cluster map gives it, and its intent log. It serves the protocol of
// internal/metawire (client operations and island-to-island two-phase
// commit) over internal/wire, or in-process through Island.Handle.
//
// # Running
//
// New(Config) opens the island (pebble on Config.FS under Config.Dir,
// with a small cache), recovers transactions and creates the root
// directory (mode 0755, uid 0, nlink 2, path "/") if this island owns
// RootIno's bucket. Run serves Config.Listen over internal/wire; Handle
// serves a request in-process. The cluster map comes from a MapSource
// (StaticMap in tests and for the CLI). Other islands are reached through
// Config.Peer: WirePeer (the default, addresses from the map; with a map
// that lists the islands, an island whose new leader could not register
// is found by asking the island servers, internal/leaderhint) or
// LocalNet (in-process islands, for tests).
//
// # Requests
//
// Every request but OpStatFS, OpDecide, OpOutcome and OpFsck is checked
// against the map epoch: a frame epoch of 0 or older than the island's is
// ErrStaleEpoch; a newer one makes the island call MapSource.Refresh
// first. A request naming an inode whose bucket this island does not own
// (Table.Lookup(bucket) != Config.ID) is ErrWrongIsland; an invalid or
// unknown inode is ErrStale (NFS semantics); a missing name is
// ErrNotFound. A request goes to the island of the inode it names first
// (the directory of name operations, the source directory of a rename);
// a link is accepted by the island of the directory or of the inode.
// Malformed messages are ErrBadRequest; no input panics (FuzzHandle).
// Over the wire, lookups and getattrs are served on the connection's
// reader goroutine (wire.ServerConfig.Inline); one that would wait (an
// inode held by an undecided transaction, a map refresh, a peer island)
// returns wire.ErrWouldBlock and is served again on a worker.
//
// # Pebble schema
//
// Every namespace key starts with the 4-byte big-endian bucket of the
// inode it belongs to (for a directory's entries, the directory's), then
// a tag byte below 0x80, so a bucket's records are one key range and
// moving buckets first..last is copying [first|0x00, last|0x80)
// (BucketSpan). Island-wide records live under FF FF FF FF FF, which no
// namespace key can start with (tag 0xFF is not a namespace tag). All
// integers are big-endian; ino is the 8-byte inode id
// (bucket<<32 | seq).
//
//	bucket 'i' ino                 inode record
//	bucket 'd' dir name            directory entry: name is the raw bytes
//	bucket 'c' dir cookie(8)       cookie index: the entry with that cookie
//	bucket 'b' ino index(8)        block map: encoded layout.Pointer
//	bucket 'x' ino name            xattr value (name includes "user.")
//	bucket 's'                     last inode sequence allocated in bucket
//	bucket 'k' ino                 file locks of the inode (filelock.Set encoding)
//	bucket 'o' ino                 sessions holding the inode open: bytes of u64 sessions, ascending
//	FF FF FF FF FF 'M'             island identity
//	FF FF FF FF FF 'I' txid(16)    intent (coordinator)
//	FF FF FF FF FF 'P' txid(16)    prepared transaction (participant)
//	FF FF FF FF FF 'L' log(8) seq(8)  live bytes of a stripe (merge counter)
//	FF FF FF FF FF 'S'             island statistics (merge counter)
//	FF FF FF FF FF 'Q' reqid(16)   request applied (u64 ns when), kept DedupKeep (dedup.go)
//	FF FF FF FF FF 'A'             replicated islands: the last raft index applied, u64
//	                               without version or CRC (written by internal/replica)
//	FF FF FF FF FF 'G'             present (one byte 1, raw) once a lease was granted
//	FF FF FF FF FF 'k' ino(8)      the inode has a lock record (empty value, raw)
//	FF FF FF FF FF 'o' ino(8)      the inode has a hold record (empty value, raw)
//	FF FF FF FF FF 'K' session(8)  lock session ended: i64 ns when (raw)
//	FF FF FF FF FF 'V' move(8)     entry frozen to move it: u32 first, u32 last bucket, u32 to island
//	FF FF FF FF FF 'W' move(8)     moved entry received: u32 first, u32 last bucket, u32 from island
//	FF FF FF FF FF 'X' boot(8)     incarnation adopted with a moved entry: u64 ns until when (raw)
//	FF FF FF FF FF 'Y' move(8)     moving entry's base copy received: u32 first, u32 last bucket, u32 from island
//	FF FF FF FF FF 'Z' move(8)     part of a base or whole copy received (from its first chunk to its last): same
//
// Every value is u8 version (1), a payload, and u32 CRC32C (Castagnoli)
// of the version and payload; a value failing either is ErrIO. In
// payloads, "str" and "bytes" are a uvarint length and the bytes, "bool"
// is one byte 0 or 1 (the internal/wire encoding). Payloads:
//
//	inode:    u32 gen, u32 mode, u32 nlink, u32 uid, u32 gid, u32 rdev,
//	          u64 size, u64 alloc (bytes of referenced blocks),
//	          i64 atime, i64 mtime, i64 ctime (ns since the epoch),
//	          u64 version, u32 blocksize, str policy, bool inline,
//	          u64 parent (see below), str creation path (dirs),
//	          u64 next cookie (dirs), str symlink target,
//	          bytes inline data, u64 exclusive-create verifier
//	entry:    u64 ino, u32 type (mode type bits), u64 cookie
//	cookie:   u64 ino, u32 type, str name
//	block:    the encoded pointer bytes
//	xattr:    the value bytes
//	locks:    the internal/filelock encoding of the inode's lock set
//	sequence: u32 seq
//	identity: u32 island id, u32 format version (1)
//	intent:   u8 state (1 pending, 2 committed), i64 created,
//	          uvarint n, n × {u32 island, action list}
//	prepared: u32 coordinator, i64 created, action list
//	counter:  uvarint n, n × i64
//
// Action lists use the metawire encoding (metawire.EncodeActions).
// Counters are updated with pebble merges (merger
// "atoll.meta.counters.v1") that add vectors element-wise, so concurrent
// batches never lose an update: live bytes are [bytes]; statistics are
// [inodes, logical bytes of regular files]. Live bytes move with every
// commit, truncation, deletion and applied cleaner delta (the cleaner
// sums them across islands, LiveBytes); a stripe whose count reaches 0
// keeps its record.
//
// A directory's parent is the directory naming it. Another inode's
// parent is the directory of the name it was created under, moved by a
// rename of that name (ActTouchParent); a hard link elsewhere leaves it,
// and inodes made before parents were recorded have 0. Parents are what
// a key confined to a subtree is checked against (perm.go, within).
//
// The creation path of a directory is namespace.Join of its parent's
// creation path and its name; a new subdirectory's bucket is
// namespace.Bucket of its creation path, computed once and embedded in
// its inode id, so renames never move a directory. Path limits (4096
// bytes) apply to creation paths. Files take their directory's bucket.
// Inode numbers are never reused (the per-bucket sequence only grows;
// Gen is 1). Readdir cookies are 1 for ".", 2 for "..", and from 3 on a
// per-directory counter kept in the directory's inode: an entry keeps its
// cookie for its life (a rename makes a new entry), so a listing resumed
// from a cookie neither repeats nor skips an entry that survived.
//
// # Files
//
// A regular file is inline (data in its inode, at most Config.InlineMax)
// or a block map; missing blocks are holes. Commit applies a batch of
// FileWrites atomically in one batch (every inode must be this island's,
// or nothing is applied); SetInline replaces the data and drops all
// blocks, blocks make an inline file a block file. Size is taken as
// given (the client does max semantics); commits do not drop blocks.
// Truncation (SetAttr SetSize) drops the blocks wholly past the new size;
// the block holding the new end keeps its bytes past it, so a client
// that truncates to a size inside a block rewrites that block's tail
// before extending the file again. Growing an inline file stays inline
// (zero-filled) up to InlineMax; past it an empty inline file becomes a
// block file of holes, while a non-empty one stays inline with data
// shorter than its size (the rest reads as zeros) until the client
// commits blocks. Cleaner deltas apply only when the block still holds
// the old pointer byte for byte (Zebra's Table 1), without changing the
// file's version. Islands check no permission on ReadMap and Commit
// (clients check at open); a commit by a non-root credential clears
// set-user-id as a write does.
//
// An unlinked inode whose link count reaches 0 is deleted at once with
// its blocks and xattrs: keeping open-unlinked files readable is the
// client's business (FUSE and NFS clients rename them aside).
//
// The redundancy policy is the xattr "user.atoll.policy" (validated with
// layout.Parse, stored canonically in the inode's Policy, not as an xattr
// record). New files and directories inherit their directory's policy;
// a regular file takes its block size from the policy while it has no
// data. Only "user." xattrs are stored; other namespaces are
// ErrNotSupported.
//
// # Permissions
//
// Linux semantics with Cred: uid 0 passes read and write checks, and
// execute checks on directories or when any execute bit is set. Sticky
// directories let only the entry's owner, the directory's owner or root
// remove or rename entries. New inodes take the caller's uid, and the
// directory's gid when it has set-group-id (subdirectories inherit the
// bit); a new file keeps set-group-id only if the caller is in its group.
// chmod needs the owner (set-group-id is dropped if the caller is not in
// the file's group); changing the uid needs root; the owner may change
// the gid to one of its groups; chown clears set-user-id (and set-group-
// id with group execute) of non-directories. Truncation needs write
// permission; explicit times need the owner, "now" also write
// permission; every change moves ctime.
//
// # Operations as actions
//
// Namespace operations (create, mkdir, symlink, unlink, rmdir, rename,
// link) read what they need without locks (here, or from other islands),
// check names and permissions in Linux's order, and turn into a list of
// metawire.Action, each on one inode: CreateInode, DeleteInode
// (optionally only an empty directory), AdjustNlink (optionally deleting
// at zero), AddEntry (the name must be free or hold an expected inode),
// RemoveEntry (the name must hold an expected inode), SetParent, Touch
// (link count and times of a directory, ctime of a renamed inode) and
// Check (shared lock on a fact: a rename of a directory into another
// parent checks every ancestor of the destination up to the root, so no
// concurrent rename can make a directory its own ancestor). A rename with
// RENAME_EXCHANGE is two AddEntry actions, each expecting the other's
// inode, plus SetParent for a directory that changes parent (and the
// parents' link counts), across islands as any rename. Actions
// re-verify the facts the operation read; a fact that changed is a
// conflict, and the operation starts over (ErrBusy to the client only
// after many attempts). OpUnlinkMany is the unlinks of several names of
// one directory as one action list: one set of locks and one commit for
// all (the mount's kept-back unlinks), all or none. A create with CreateReq.Data (a regular file, at
// most InlineMax bytes) writes the data into the new inode inside its
// CreateInode (execOpts.data, never through an intent: a file is always
// created on its directory's island), so the file exists whole or not at
// all; an existing name is answered Existed and left alone. A create
// may also carry the inode id to use (CreateReq.Ino: one a client
// reserved with OpAllocIno and a Count, for a create it answered itself
// under an exclusive lease): it must be a regular file in the directory's
// bucket, an id this island handed out (noteSeq) and unused. And it may
// carry attribute changes the creator made before sending it
// (CreateReq.Set: mode, owner, times), applied to the new inode with the
// creator's credentials by the same rules as a setattr, in the same
// batch: a change setattr would refuse refuses the create.
//
// The actions are grouped by the island owning their inode. Actions of
// one island run in one pebble batch under in-memory inode locks (taken
// all at once with a bounded wait, so waits never deadlock). SetAttr,
// xattrs, Commit and Clean take the same locks on their inodes and write
// one batch.
//
// # Cross-island atomicity
//
// When actions fall on several islands, the island that received the
// request coordinates a two-phase commit with presumed abort:
//
//  1. It locks and validates its own actions (not yet committed). It
//     writes nothing yet: while it runs, OpOutcome answers pending from
//     memory, and a coordinator that crashes before its decision has no
//     record, which presumed abort reads as aborted. (Earlier versions
//     wrote a pending intent here with Sync, a consensus round per
//     operation on a replicated island; one found at open is aborted.)
//  2. It sends OpPrepare to every participant in parallel. A participant
//     checks the actions are on its inodes, takes their locks (waiting at
//     most a short while; ErrBusy otherwise), validates them, writes a
//     prepared record with Sync and keeps the locks. While prepared,
//     readers of the locked inodes wait for the decision (ErrBusy after a
//     bound), so no client sees half an operation.
//  3. If every participant prepared, the coordinator writes the commit
//     decision (the intent: participants and their actions, marked
//     committed) in the same synced batch as its own actions and
//     releases its locks; otherwise it tells the participants (abort).
//  4. It sends OpDecide; a participant applies (or drops) the actions
//     and deletes its prepared record in one synced batch and releases
//     its locks; deciding an unknown transaction succeeds.
//  5. When every participant acknowledged, the intent is deleted;
//     unacknowledged decisions are redelivered in the background.
//
// Presumed abort: OpOutcome answers committed (intent committed),
// pending (being run: checked before the intent is read, since a
// coordinator stops running only after its decision is written) or
// aborted (no intent, not running). A prepared participant asks its
// coordinator after a while, and at every restart. At open, before serving, an island resolves every open intent:
// undecided ones are aborted (deleted, participants told in the
// background) and committed ones are queued for redelivery; prepared
// records take their locks again. One synchronous resolution pass runs
// in New; ResolvePending runs one on demand.
//
// Inode ids for directories created in another island's bucket come from
// that island (metawire.OpAllocIno, durably); an id never used is
// skipped. A client reserves runs of ids the same way (Count up to
// metawire.MaxAllocInos).
//
// # Durability
//
// Every change is committed with a synced write before it is answered,
// except a create with CreateReq.Lazy (regular, non-exclusive files) and a
// commit with CommitReq.Lazy (both from the FUSE mount, for creates and
// close; its fsync asks for synced writes): they are committed without
// waiting for the log sync and kick the syncer goroutine, which syncs the
// log within Config.LazySync (5ms by default; kicks meanwhile coalesce). Any later
// synced write — a synced commit, OpSync — makes them durable too, since
// pebble's log is written in order, and a crash loses a suffix of the
// lazily committed changes, never a change in the middle. Clients learn
// of such a loss from the island's incarnation (metawire.SyncResp.Boot,
// also in create and commit replies): a random id recorded at start under
// a global key, kept across a clean Close (which syncs everything first),
// new after a crash. Inode-number reservations are always synced, so the number of a
// lazy create lost in a crash is never handed out again. Close syncs the
// log once more.
//
// # Replication
//
// With Config.Replicator (a replicated island: internal/replica, run by
// internal/metaserver) the island runs only on its group's leader, on the
// replica's database (Config.DB), and never commits a batch itself: every
// write (write, put, del) hands the batch's representation to Replicate,
// which returns once a quorum holds it and it is applied here, while the
// island still holds its inode locks. Lazy changes are no exception:
// acknowledged means committed on a quorum, so the incarnation (Boot) is
// one for the island's life, recorded once, and the syncer does nothing.
// Deleting a finished or aborted transaction's intent (del with lazy)
// runs in the background instead of adding a consensus round to the
// operation; Close waits for it. A new leader opens a new Island, which
// recovers open intents and prepared transactions from the replicated
// records like a restarted island.
//
// # Leases
//
// OpLease wraps a lookup, getattr or readdir from a client session and
// answers it (a missing name is an answer: LeaseResp.Status) with a lease
// on the bucket it read when internal/lease grants one. Every write hands
// its batch to breakLeases first: the buckets of its namespace keys are
// marked changing and every lease on them but the changing session's own
// (the first 8 bytes of the request id) is broken and waited for
// (acknowledged through OpLeasePoll, or its term run out) before the
// batch is applied, all under the write's inode locks. The first grant of
// an island's life writes FF FF FF FF FF 'G'; an island (or a replica
// becoming leader, which opens a new Island) that finds it delays every
// change by one lease term (Config.LeaseTerm, lease.DefaultTerm 3 s),
// since its previous incarnation may have granted leases it cannot know.
// Leases are held in the leader's memory only.
//
// A lease asked for exclusive (LeaseReq.Exclusive) is granted so to a
// bucket's only holder. Before serving any request (recall, before the
// request takes a lock), the island recalls an exclusive lease another
// session holds on the buckets the request names (routeInos: its
// directory or inode, both directories of a rename): the holder sends
// what it kept back, then acknowledges, and the request runs. Requests
// carry their session in the request id's first 8 bytes (reads too,
// from a client with write-behind); a request with none recalls every
// exclusive lease it meets. An inline lookup or getattr that must wait
// for a recall moves off the connection's reader. The record's value
// says the strongest lease granted: after an exclusive one (value 2) the
// next incarnation fences reads for a term as well, since a holder may
// still keep changes back.
//
// # File locks
//
// OpLock serves POSIX byte-range, OFD and flock locks (internal/filelock
// decides conflicts, splits and merges) for owners named by a client's
// lock session and an owner id within it. An inode's locks are one
// record under its bucket (tag 'k'), written in a batch under the
// inode's lock like any change (replicated, so a new leader has them;
// copied with the bucket when its table entry moves; deleted with the
// inode), with an island-wide index entry ('k' under FF..) that move
// accounting keeps in step, so the session sweep finds locked inodes
// without a scan. Lock records break no lease (no read answers with
// them). A blocking request (LockWait) waits at the island on a channel
// per inode, closed at that inode's next lock change, for at most
// WaitMs (the client asks again: a held request takes one of the
// connection's handlers); LockCancel ends it (an interrupted F_SETLKW),
// and a POSIX wait that would close a cycle in the waits-for graph of
// the island's waiters is ErrDeadlock (cycles through two islands are
// not seen). Waiters live in the leader's memory: after a failover the
// client's retry waits at the new leader.
//
// Sessions: any lock request or OpLockSession renews its session (in the
// leader's memory); the background loop counts each session's locks
// once a second and ends a session not renewed for Config.LockTerm
// (DefaultLockTerm, 30 s): its locks go and FF..'K' records that it
// ended (kept a day), so its client, when it comes back, is told
// (ErrSessionEnded, LockSessionResp.Ended) rather than finding its locks
// silently gone. A session this incarnation never saw counts from when
// the sweep first finds its locks, so no session ends sooner than a term
// after its last renewal at any leader. OpLockEnd (admin) ends a session
// at once (an operator breaking a dead client's locks); OpLockSession
// with ReleaseMask releases some of its owners (an NFS gateway freeing a
// restarted client host's locks). Lock ids are not authenticated: any
// key that may lock may name any session (see the tenants issue).
//
// # Open files
//
// LockHold and LockUnhold (OpLock commands) record which lock sessions
// hold an inode open (opens.go): one record under the inode's bucket
// (tag 'o', indexed under FF..'o' like locks, breaking no lease). When
// an unlink or a rename over drops a file's last link while a session
// holds it, ActAdjustNlink keeps the inode (nlink 0, no entry) instead
// of deleting it, so the holders keep reading and writing what they
// opened; the last unhold, or the end of the last holding session (the
// sweep, OpLockEnd), reclaims it. fsck reports no orphan for an
// unlinked inode that has holders. A new hold of an unlinked inode is
// refused (ErrStale) unless someone still holds it.
//
// # Request ids
//
// A change (metawire.Schema.Dedup) sent with a wire.ReqID is applied at
// most once: its id is written with its effect (the single-island batch,
// the coordinator's decision batch, or the SetAttr/xattr/Commit batch)
// under FF FF FF FF FF 'Q', and a request whose id is found is answered
// from the current state (the attributes of what it made or changed)
// without applying it again; one still being served answers ErrBusy. Ids
// are deleted after DedupKeep (10 minutes) by the background loop.
//
// # Moving table entries
//
// A table entry (its buckets: one key range, BucketSpan) moves to another
// island while both serve (move.go; the cluster map's pending moves,
// Table.Moves). The source copies its records from one snapshot to the
// destination while it still serves them (OpImportEntry, a base copy in
// chunks, each applied as it comes with the live-byte counters, stripe
// references and statistics it carries; the destination does not serve
// them yet) and notes the keys changes write there from then on. Then it
// freezes the entry (leases withdrawn; no inode lock or id granted
// there, so changes get ErrUnavailable and clients retry; reads go on),
// sends the noted keys as they are now (the delta), asks the manager to
// flip the entry, and a grace period after its own map has the flip
// drops its copy in bounded writes. Markers ('V' at the source, 'Z', 'Y'
// and 'W' at the destination) make every step resumable and the import
// idempotent, and let a destination drop what it received of a move that
// ended without it, even a copy cut off halfway; a source that restarted
// frozen, or whose destination lost the base, copies the whole entry frozen; one that cannot reach the
// destination for 30 s cancels the move and thaws. fsck skips the other island's
// copy of a moving entry. The destination adopts the source's
// incarnations ('X'): its sync answers list them, so a client's lazy
// change acknowledged by the source is known durable. A change noted for
// the delta carries its request id record, so a client retrying it at
// the destination is answered, not applied twice (a change applied
// before the base copy and retried only after the flip is not covered).
//
// Moves are throttled by a duty cycle (Config.MoveDuty, `atoll meta
// --move-duty`): after a move that took d, the next starts (1/duty - 1)·d
// later. The default (0.02) was chosen with `atoll bench rebalance`: at
// it, a metadata workload kept 0.88–0.96 of its throughput while entries
// moved (see DefaultMoveDuty).
//
// # Failpoints
//
//	meta.tx.afterIntent            coordinator: own actions locked, nothing prepared or written
//	meta.tx.afterPrepare           coordinator: all prepared, no decision
//	meta.tx.afterDecision          coordinator: decision and own actions durable, no Decide sent
//	meta.tx.afterDecide            coordinator: Decide acknowledged, intent not cleared
//	meta.participant.afterPrepare  participant: prepared record durable, not answered
//	meta.participant.beforeApply   participant: commit received, not applied
//	meta.participant.afterApply    participant: applied, not answered
//	meta.local.beforeCommit        single-island operation validated, not committed
//	meta.move.afterBase            move source: base copy applied by the destination, not frozen
//	meta.move.afterFreeze          move source: entry frozen, marker durable, nothing copied
//	meta.move.afterCopy            move source: destination applied the records, no flip
//	meta.move.afterFlip            move source: map flipped, records not dropped
//	meta.move.afterImport          move destination: records applied, not answered
//	meta.move.afterChunk           move destination: a chunk before the last applied, not answered
//
// An error at a failpoint is handled as a failure of that step (abort
// before the decision, redelivery after it); crash tests take the
// island's crash image inside faults.Set.OnCrash and reopen from it.
//
// # fsck
//
// OpFsck pages through an island's records (inodes with type, nlink and
// parent; entries with their targets; block pointers' stripes; open
// intents and prepared transactions; problems the island sees locally:
// bad records, entries and cookie records out of step, blocks or xattrs
// of missing inodes, records of buckets it does not own). Fsck combines
// the pages of all islands and checks that no entry dangles, no inode but
// the root is orphaned, every directory hangs off the root, link counts
// match (2 plus subdirectories for directories), entry types match inode
// types, each directory is named once, by its parent, and no transaction
// is open. It returns the referenced stripes for the caller to check.
//
// # Static cluster map (atoll meta --static-map)
//
// Until the manager serves the map, an island reads it from JSON (see
// ParseMapJSON):
//
//	{"epoch": 1, "depth": 2, "entries": [1, 1, 2, 3],
//	 "islands": {"1": "127.0.0.1:7500", "2": "127.0.0.1:7501", "3": "127.0.0.1:7502"}}
//
// # Locks
//
// Order, outermost first: Island.state, then one of resolveMu,
// moves.importMu and leaseRecord, then seq, then the leaves. (importMu
// → seq at an import's end; seq and leaseRecord are never held
// together.) These are held across I/O by design:
//
//   - state (RW): closing. Requests (and moveOnce, ResolvePending,
//     HandOver, LiveBytes) hold it shared for their whole run, across
//     island calls, lease waits, pebble writes and raft replication.
//     Close holds it exclusively across closing the listener, waiting
//     for the background raft deletions (lazyDels), the log sync and
//     closing the database.
//   - resolveMu: one resolver pass at a time, held across all of it:
//     OpDecide and OpOutcome calls to other islands, intent deletions,
//     decide's writes.
//   - moves.importMu: one import at a time, held across checkImport
//     (which may refresh the cluster map from the managers), pebble
//     reads and the chunk's write, or forgetImport's.
//   - leaseRecord: held across writing (leasedRead) or deleting
//     (HandOver) the lease record, a synced write or, replicated, a raft
//     round trip; takes lease.Table's lock (Withdrawn).
//   - seq: the inode id counters. Held across lastSeqLocked's pebble
//     read and, once per seqReserve ids, allocInos' write of the new
//     reservation (synced, or a raft round trip): no id is handed out
//     beyond what is durable. Takes lockTable.mu (isFrozen).
//
// Leaves, memory only: tx, lockTable.mu, flocks.mu, moves.mu (write's
// noteWrite takes it under any lock above), reqs.mu, confined.mu,
// touched.mu, deliver's mu, StaticMap.mu and LocalNet.mu. The inode
// locks lockTable grants are not mutexes: held across a change's commit
// and a prepared transaction's decision, with bounded waits for them.
// write's lease breaks (lease.Table's lock, then waits for holders) run
// under resolveMu and importMu, not under seq or leaseRecord: their
// keys break no lease.
package meta
