// Package storage is the fragment store of an Atoll storage server: a Zebra
// storage server's store with a Loris-style physical layer. It stores
// immutable fragments (a few KiB to MaxFragmentSize) named by fragment.ID,
// checks every byte it returns against a CRC32C kept in a separate metadata
// record (Loris's parental checksums), and turns silent corruption into a
// *CorruptError naming the sick range. The network server around it lives
// in server.go; this file documents the disk layer.
//
// # Layout
//
// All I/O, including pebble's, goes through Config.FS (a pebble vfs.FS), so
// tests can run on vfs.NewCrashableMem and errorfs. Under Config.Dir:
//
//	meta/              pebble DB: one record per fragment
//	frags/XX/<id>      fragment files; <id> is fragment.ID.String()
//	frags/XX/<id>.tmp  a repair (or an Open-time truncation) in progress
//
// XX is the id's subdirectory in lower-case hex, the top byte of
//
//	x := Log*0x9E3779B97F4A7C15 ^ Seq*0xC2B2AE3D27D4EB4F ^ uint64(Index)*0x165667B19E3779F9
//	x ^= x >> 31; x *= 0xBF58476D1CE4E5B9; x ^= x >> 29
//
// (wrapping uint64 arithmetic). This function is part of the format.
//
// # Fragment file
//
// All integers are big-endian, in the file header and in the record (the
// id encoding is big-endian anyway, so that keys sort by id).
//
//	offset size field
//	0      8    magic "ATOLFRAG"
//	8      2    format version, 1
//	10     2    reserved, 0
//	12     18   fragment id: Log u64, Seq u64, Index u16 (fragment.ID.AppendBinary)
//	30     4    chunk size
//	34     8    creation time, Unix nanoseconds (int64)
//	42     18   reserved, 0
//	60     4    CRC32C (Castagnoli) of bytes [0, 60)
//	64     ...  data: logical offset o lives at file offset 64+o
//
// The header lets a file prove which fragment it holds; Verify and the
// scrubber check it (a bad header makes the whole fragment sick). Reads do
// not: the record's chunk checksums already vouch for the data.
//
// # Metadata record
//
// Key: 'f' (0x66) followed by the 18-byte binary id, so keys sort by (Log,
// Seq, Index) and one log is one key range. Value:
//
//	offset size field
//	0      2    record version, 1
//	2      8    committed length L
//	10     4    chunk size C (at most 64 KiB)
//	14     8    creation time, Unix nanoseconds (equal to the header's)
//	22     4*n  CRC32C of each chunk, n = ceil(L/C); the last chunk is partial
//	22+4n  4    CRC32C of bytes [0, 22+4n) of the value
//
// # Invariants
//
//   - The record is the commit point. A fragment exists iff its record
//     exists, and its length is the record's committed length; bytes past it
//     in the file are garbage. Records are written with pebble Sync.
//   - A record is committed only after its bytes are durable: Put writes the
//     file (header and data), fdatasyncs it, fsyncs its directory, and only
//     then commits the record. Append writes at 64+L, fdatasyncs, then
//     commits the longer record. A crash at any instant therefore leaves the
//     old state or the new one.
//   - Fragments are immutable: Put never overwrites (ErrExists), Append only
//     adds bytes past the committed length, and Repair only rewrites
//     identical bytes (every chunk must match the recorded CRC), through
//     <id>.tmp and an atomic rename.
//   - No read returns a byte that failed its chunk's checksum. Reads verify
//     every chunk they overlap (whole chunks are read for that); a mismatch,
//     a short file or a missing file is a *CorruptError over the logical
//     range of the bad chunks, counted and passed to Config.OnCorrupt. Read
//     errors of the file are treated the same way (the bytes cannot be
//     vouched for); failing to open it for other reasons than absence is an
//     ordinary error.
//   - Append verifies the existing bytes of a partial last chunk before
//     extending its checksum, so corruption is never laundered into a new
//     CRC. It refuses (with a CorruptError) to extend a missing or short file.
//   - Writers of one id (put, append, repair, delete) are serialized by a
//     striped lock table; reads take no lock, and retake the lock (shared)
//     only to confirm a corruption they saw, because a concurrent delete or
//     repair can make a lock-free read look corrupt.
//   - Nothing partial is ever visible: a write that fails (ENOSPC, I/O error,
//     an injected fault) removes its file and commits no record, and a
//     failed append leaves the record unchanged. The capacity check
//     (Config.CapacityBytes, or the filesystem's free space less a 64 MiB
//     reserve) happens before anything is written.
//
// # Recovery
//
// Open, before it returns, walks the records and the fragment directories:
//
//   - *.tmp files are removed (interrupted repair).
//   - Fragment files without a record are removed (put that crashed before
//     its commit, delete that crashed after it).
//   - Files longer than 64+L are cut back to it (torn append: back to the
//     last verified append). vfs has no truncate; the OS file's Truncate is
//     used when available, else the prefix is copied through <id>.tmp.
//   - Records whose file is missing or short are kept; reads report the
//     missing chunks as corrupt so that the client reconstructs them and
//     repairs the fragment.
//   - Files with names that are not fragment ids, or not in the directory
//     their id hashes to, are left alone and counted as Unknown.
//
// The counts are logged in one line and returned by Store.Recovery. UsedBytes
// (the sum of committed lengths) is computed in the same walk and then kept
// in memory.
//
// # Scrubbing
//
// Scrub and ScrubOnce walk all records in key order (in pages, so no pebble
// iterator stays open across the slow part) and Verify each fragment,
// pacing to a byte rate between fragments. Sick ranges go to OnCorrupt and
// the stats; repair is the caller's job (reconstruct from the stripe, then
// Repair).
//
// # Who may repair
//
// A repair (PutReq.Repair) replaces a fragment's stored bytes with bytes
// the server checks against the checksums it recorded at the put. Those
// are CRC32C, and CRC32C is no defence against a deliberate change: it
// is affine, so four chosen bytes make any edit keep a chunk's checksum
// (and the block's, held by its parent at the island). A tenant's `user`
// key replaced the first 16 bytes of another user's file this way, and
// reads, mtime and fsck saw nothing (issue #43). So repairs need the admin
// capability (the cluster key, the cleaner, `atoll clean`): a client with
// a tenant's key that finds a corrupt fragment leaves it to the cleaner
// (the server has queued it under its suspect records), and reports the stripe
// degraded meanwhile.
//
// A plain put of a fragment id that is missing (its server lost it) is
// the same attack: the putter sends the checksums with the bytes. So
// every key but an admin one (a tenant's, a mount host's, a gateway's)
// puts and appends only into its own logs, whose ids carry the key's
// prefix (auth.WritesOwnLogs, auth.LogPrefix; its clients make them so):
// a mount host's key put forged bytes with the original CRC32C into
// another log's lost fragment, and every read returned them
// (TestForgedReputRefused). Its client leaves another log's missing
// fragment to the cleaner, as a corrupt one. Within its own logs a key
// writes what it likes: those are its own files' bytes, which it may
// change through the islands anyway. Trusted members (the cleaner, the
// cluster key) repair with bytes rebuilt from the stripe; a check no key
// could forge (a cryptographic hash per block in the parent pointer)
// would protect even against them, and is not built.
//
// Logs written before this rule by mount hosts' unlimited keys carry no
// prefix: their missing fragments are rebuilt by the cleaner only. A
// client older than this rule writes such logs, which a newer server
// refuses: upgrade the clients (mounts, gateways) before the storage
// servers.
//
// # Tenants' keys: their own logs, and read tokens for the rest
//
// A key limited to identities (auth.Scope.Tenant: identities or a subtree) gets from a storage
// server only what the islands let its users read. Its clients write logs
// whose ids carry the key's prefix (auth.LogPrefix, the high 32 bits), and
// in those logs it may append, put, read, ask infos and the newest stripe
// freely. In any other log it may only read, and only with a read token:
// islands add one per block to the block maps they answer such a key
// (metawire.ReadMapResp.Tokens), after checking the file's permission bits
// for the request's identity, and the token (auth.ReadToken, an HMAC under
// the cluster key that only members hold, bound to the key's name) signs
// the block's place in its stripe (fragment.Grant). The read must lie in
// the block's own piece of a data fragment, or in the same rows of a
// parity fragment (a mirror's copy), or, while the slot holding a piece
// is down in this server's map, in those rows of the other data fragments
// (what a degraded read rebuilds from). A log stripe holds many files'
// blocks, so a token per stripe would show its holder its neighbours'
// bytes; a token per block shows them only through the parity over its
// rows (a linear combination, not the bytes) and, while a server is down,
// in the rows a rebuild needs.
//
// Costs and limits: one HMAC-SHA256 per block map entry at the island and
// per tenant read at the server (neither measured yet); a token does not
// expire (a reader that once could read a block could have kept its
// bytes), so a chmod does not take back tokens already handed out; keys
// of one name share their logs (a tenant's mounts read each other's
// logs); a degraded read whose data fragment is bad but whose slot is not
// marked down (a corrupt fragment, or the seconds before the map marks a
// dead server down) is refused to a tenant until the cleaner repairs the
// stripe or the map catches up. Other keys (mount hosts, gateways, the
// cleaner) read every log; only admin keys write into others' logs
// ("Who may repair").
//
// # Failpoints
//
// storage.put.{beforeData,afterData,afterMeta},
// storage.append.{beforeData,afterData,afterMeta},
// storage.repair.beforeRename and storage.delete.afterMeta; see the Fail*
// constants.
//
// # Locks
//
// Order: state → locks[i] → mu. The first two are held across disk I/O
// on purpose:
//
//   - Store.state (RW): closing. Every operation holds it shared from
//     enter to exit, across all its I/O, so that Close, which takes it
//     exclusively (and holds it across db.Close), waits for the
//     operations in flight. No operation enters twice: a second shared
//     lock behind a waiting Close would never be granted.
//   - Store.locks (256 RWMutexes, by fragment id): the writers of one
//     fragment. Put, Append, Repair and Delete hold theirs exclusively
//     across the whole change (file writes and fsyncs, synced pebble
//     commits and deletes, rename, remove; failpoints, in tests, may
//     sleep there): a fragment's file and record change together. Read
//     and verify take it shared, across a second read of the file, only
//     to confirm a checksum failure. No operation takes two of them.
//   - Store.mu: byte and fragment counts, scrub statistics. A leaf held
//     for arithmetic (reserve asks the file system for free space
//     before taking it).
//
// reportCorrupt (a synced pebble write, OnCorrupt) runs after the
// fragment's lock is let go; the scrubber sleeps with no lock held.
package storage
