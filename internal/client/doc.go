// Package client is the client library's logical and physical layers (the
// naming and cache layers arrive with the namespace).
//
// # Writing
//
// Each client owns one append-only Log per policy class; its id is derived
// from the client id and the policy text. Append copies file data into the
// open stripe as blocks (at most the policy's block size; blocks of many
// files share a stripe) and returns a layout.Pointer per block at once:
// placement is chosen when a stripe opens and the shard size is the policy's
// fragment size, so a block's stripe, offset and slots are known before the
// stripe is sealed. A full stripe, or the open stripe at Flush, is handed
// to a writer goroutine which computes parity and puts all K+M fragments in
// parallel; up to Config.Pipeline stripes are in flight while the next one
// fills. Fragments are never rewritten, so a short stripe is just a stripe
// with less data: there is no write hole. Pointers are durable once Flush
// returns nil.
//
// Invariant: Flush returns nil only when every stripe appended before it
// has at least K fragments durable (K data for EC, one copy for mirrors).
// Fragments that could not be written (server down or failing) make the
// stripe degraded: it is listed by DegradedStripes and counted in Stats.
//
// # Reading
//
// Read fetches the byte ranges a pointer covers straight from the servers
// holding its data fragments, in parallel, and verifies the block's CRC32C
// (the parental checksum). A fragment that is missing, times out
// (Config.ReadTimeout), is reported corrupt by its server, or yields bytes
// failing the checksum is rebuilt from the same range of the other
// fragments (a degraded read). A fragment a live server reports corrupt or
// lost is rebuilt whole and written back to the same slot in the
// background (identical bytes, so immutability holds); the server itself
// checks that a repair matches its recorded checksums.
//
// Invariant: Read returns nil only with bytes whose CRC32C equals the
// pointer's; otherwise ErrUnrecoverable (EIO at the edges).
//
// A File keeps a 16 MiB read-ahead window for a sequential reader and,
// while the reader consumes it, fetches the next window in a background
// goroutine (owned by the FS: Close waits for it). Any write, commit or
// truncation drops both; a prefetch that finishes after that is discarded.
// File.ReadView hands out slices of the window itself (the FUSE mount
// replies from them without a copy); windows are reference-counted and go
// back to the buffer pool only when the last view is released. All files
// of an FS share a read-ahead budget (FSConfig.ReadAheadMax, 256 MiB):
// past it no prefetch starts and a reader fetches only what it reads. A
// window's bytes return to the budget when it is released (File.Release,
// which the FUSE mount and the NFS gateway call when they drop a file) or,
// for a File dropped without it, when the window is collected.
//
// Writes collect in dirty blocks (at most FSConfig.DirtyMax per file, and
// about FSConfig.DirtyTotalMax for all files together: past it a writer
// holding 8 MiB or more writes its own file back first). A
// block whose last byte is written is appended to the log at once
// (streaming), so a sequential writer's stripes travel while it writes;
// the block stays dirty until a commit names it. A flush appends only the
// blocks not streamed (or written again since), waits for every stripe
// holding them, and commits. After a failed stripe or commit every dirty
// block is appended again, and a streamed block older than half of
// MaxCommitDelay is never trusted (the cleaner may collect stripes nothing
// references once they are older than its grace).
//
// # Lazy creates and closes
//
// With FS.SetLazyCreate (the FUSE mount) a non-exclusive regular-file
// create asks its island not to wait for the log sync (CreateReq.Lazy);
// with FS.SetLazyClose, File.Flush and File.Close commit the same way
// (CommitReq.Lazy): the data is on the storage servers and the commit is
// applied, so every client sees it (close-to-open), but the island's log
// may not be on disk yet. POSIX promises durability only at fsync, and a
// local file system also loses data closed but not fsynced in a crash.
// The FS remembers such files (with a generation, so a change made while
// a sync was under way is not forgotten) until something made them
// durable: a synced commit to the file, or an OpSync to its island, which
// File.Fsync sends when it has nothing left to commit. So fsync always
// returns durable. Each lazy change is remembered with the incarnation of
// the island that acknowledged it (metawire.SyncResp.Boot, which changes
// only when an island restarts after a crash): if the synced write that
// settles it is answered by another incarnation, the change may have been
// lost, and that fsync (or FS.SyncLazy, FS.SyncDir) fails with ErrIO, once,
// as Linux reports a failed write-back. Before that an island crash may lose a suffix of the
// lazy changes (the island's syncer usually makes them durable within one
// log sync anyway); a lost create's inode number is never reused. Past
// 4096 remembered files, and at unmount (FS.SyncLazy), one OpSync per
// island settles them all. Without SetLazyClose, Flush and Close are
// Fsync. The NFS gateway uses neither: NFS CREATE must be stable when
// answered, and COMMIT calls Fsync.
//
// # Leases
//
// With FS.EnableLeases (the FUSE mount) a lookup, getattr or readdir the
// cache cannot answer is sent as metawire.OpLease: the island answers
// and, when it can, grants a lease on the bucket read (a directory's
// names, its own attributes and those of its files; internal/lease).
// Until the lease ends (its term, counted from before the request was
// sent, minus a margin) or its island breaks it, whatever the FS cached
// from replies under it stays valid past AttrTTL: found names, names
// found missing, attributes (open's revalidation, GetAttrFresh, is
// answered from them too) and, after a directory was listed whole in one
// page, that listing and the knowledge that no other name exists (a
// second missing name in a directory makes the FS list it once, so an
// unpack creates names without looking each up; under write-behind the
// first missing name of a directory this FS made does, which takes the
// lease, the empty listing and the directory's attributes in one request). Records carry the
// generation of the lease they were read under; a record whose read raced
// with a lease acquisition or break, or with one of this FS's own changes
// of the same key (its inode, or for names and listings its directory;
// begun, ended or in flight while the read was out) carries none and
// lives AttrTTL as before. Per key, so one client's concurrent creates in
// a directory keep each other's answers leased (cacheMark).
//
// One goroutine per island polls for breaks (OpLeasePoll, a long poll;
// the next poll acknowledges). A break drops the lease and every record
// of its bucket, runs the OnLeaseBreak hook (the mount invalidates the
// kernel's copies), then is acknowledged: the other client's change is
// applied only after that, so it is seen as soon as it returns. A poll
// that fails drops every lease of its island. Each poll also renews, as
// it arrives, every lease the island's current lease table granted this
// session within its hold (PollResp.HoldMs, a minute): on the answer, a
// lease still live here and granted (sent) within the hold runs to the
// poll's send time plus its term (renewByPoll). While it holds such
// leases the poller asks six times a term (renewPolls); a lease in use past half
// the hold is granted again by a background read (hitLocked). A change this FS makes
// carries its lease session in the request id, so it does not break its
// own leases; its answer updates the cache instead.
//
// # Write-behind
//
// With FS.EnableWriteBehind (the mount's --write-behind) the FS asks for
// its leases exclusive (lease.Table.GrantExclusive): granted while no
// other session holds the bucket, recalled by the island before any other
// session's request touches it. Under an exclusive lease SetAttr of
// owner, group, mode and times (what the island would certainly allow:
// anything by root, chmod and utimes by the owner) is answered from the
// cached attributes and kept back (writebehind.go); an inode's kept-back
// changes merge into one setattr of final values. They are sent, in
// inode order, one flush at a time: before any other request of this FS
// (so no answer it gets predates a change it already answered, and its
// own later changes apply after them), except that an own change of
// other records (a create in the directory after the previous file's
// chown, chmod and utimes) runs beside the flush, so their island can
// commit both in one round; before a break or recall of their lease is
// acknowledged, within a second and half a second before the lease
// could end, and by Fsync, SyncLazy and Close. Every request carries the
// session in its id under write-behind, so the FS's own reads do not
// recall its leases. A kept-back change the island refuses is dropped
// with its inode's cache and reported by the next Fsync or SyncLazy.
// What a crash of the client loses: changes kept back and not yet sent,
// at most one second's, as for the data of files not yet closed.
//
// Creates are kept back too (createbehind.go). A create of a regular file
// whose name is known missing under the exclusive lease (a negative
// entry, or the directory listed whole), by a creator the cached
// directory attributes let write there, is answered here: the inode id
// comes from a run reserved beforehand (OpAllocIno with a Count: 32, then
// doubling to 1024 per bucket; unused ids are skipped, never reused), the
// attributes are computed as the island would (set-gid directories, the
// directory's policy). The pending create gathers what follows: a Flush
// of the file while it is inline hands it the data (CreateReq.Data), and
// kept-back attribute changes of the file merge into CreateReq.Set. It is
// sent alone by SendCreate (the mount's close, and before a commit of
// blocks it cannot carry), and with everything else by the flushes above.
// A flush sends attribute changes before creates (a create may depend on
// a chmod of its directory), and a change of a directory with creates
// kept back is not kept back itself (they depended on its attributes as
// they were). A kept-back create refused by its island (or whose name
// turns out to be another file's) is dropped with the file's cache and
// reported by SendCreate, the next Fsync, SyncDir or SyncLazy. The
// unlink of a file whose create is still kept back drops the create
// (removeBehind): neither reaches the island. The unlink of another file
// is kept back when the name, its inode's attributes and the directory's
// attributes are cached under the lease and those let the caller remove
// it (unlinkbehind.go; a fresh read of the directory, or of the name,
// gets them first when missing); a flush sends kept-back unlinks after
// the attribute changes and before the creates (a name removed and made
// again): those of one directory and caller in one OpUnlinkMany of up to
// wbUnlinkMany names (sent again one by one if refused as a whole, or
// always after an island answered it as unknown), up to wbParallel
// requests in flight. With SetPreborn (the
// mount's --write-cache preborn) the mount does not send a closed file's
// create, so that holds for a file created, written, closed and removed
// within the window (Sigma's preborn caching). One timer sends what is
// due (flushDue): attribute changes a second after they were kept,
// creates a second (or the preborn window) after they were answered,
// anything half a second before its lease could end; a renewal of the
// lease moves that end, and does not send anything itself.
//
// # Unavailable islands
//
// FS.call retries a request its island answers "unavailable" (down,
// electing a leader, cut off: wire's PeerTimeout ends a silent
// connection) for up to FSConfig.IslandWait, then fails it with
// ErrUnavailable (EIO). The island is then given up on (unreachable.go):
// further requests to it fail at once, where each had waited as long
// again (a stat through a mount cut from its island took about a minute:
// the kernel sends several requests), and one goroutine probes it every
// second (OpStatFS) until it answers, which ends that. A failover is
// answered within IslandWait and gives nothing up. Requests failed at
// once are counted (FS.FastFails, atoll_client_unreachable_fails_total).
//
// A replicated island's new leader that cannot register with the
// managers (they are away) is found by asking the other island servers
// the map names (internal/leaderhint): the island's requests go there
// until the map names another address (FS.LeaderHints,
// atoll_client_unregistered_leaders_found_total).
//
// # Small files in one request
//
// FS.CreateWithData sends a new file's contents (at most InlineMax bytes)
// with its create (CreateReq.Data): the island makes the inode with its
// inline data in the same batch, so the file appears whole or not at all,
// and create, write and close cost one round trip instead of two. It is
// lazy only when both lazy settings are on. FS.WriteFile (and atoll cp)
// use it for small new files and fall back to create, truncate, write and
// close when the name exists.
//
// # Locks
//
// FS.SetLock, GetLock, Unlock and UnlockOwner take POSIX and flock locks
// at the inode's island (locks.go): the FS holds one lock session and
// renews it, four times a term, at each island where it holds locks; a
// session an island ended is replaced, and what was locked under it is
// lost (LockCheck fails writes under it with ErrIO, as it does once no
// renewal was answered for 90% of a term). Waits are held at the island
// (at most 16 of this FS's at once) and cancelled there when the caller
// is interrupted. A gateway takes back its session after a restart
// (SetLockSession, ResumeLockSession).
//
// # Open files
//
// HoldOpen and ReleaseOpen (opens.go) bracket a file's use by an
// adapter that keeps files open (the FUSE mount): the island holds the
// inode under the lock session, so an unlink or rename over through any
// client leaves it, with no name, to the descriptors open on it until
// the last release (or the session's end) reclaims it. Under an
// exclusive lease the hold stays here until the lease is recalled or
// ends (it is told then, before the recall is acknowledged), so a file
// created, used and removed under the lease costs no request; KeepOpen
// tells the island at once, before this FS removes the last name itself.
//
// # Clones
//
// CloneRange (clone.go) copies a range of whole blocks by giving the
// destination the source's block pointers in one commit: stripes never
// change, and each island counts every reference (live bytes, reverse
// index), so the files diverge by replacing pointers and a shared
// stripe lives while either points into it. The cleaner moves each
// reference's block on its own, which ends the sharing, not the data.
//
// # Locks (mutexes)
//
// The package's mutexes (not the file locks above). Order, outermost
// first: File.mu → writeBehind.flush → writeBehind.sending → FS.cache →
// writeBehind.mu; File.mu → Log.mu; openHold.send → lockState.mu →
// FS.cache; openHold.send → openState.mu. File.mu reaches
// writeBehind.flush through FS.call, which first sends what is kept
// back (flushBeforeCall, beginChange). Held across I/O by design:
//
//   - File.mu: the File's cache, its I/O lock. Held across reads (the
//     block map, storage reads, waiting for a prefetch), writes (log
//     appends), flushLocked (appends, Log.Sync waiting for the stripes,
//     SendCreate, OpCommit, OpSync), Fsync (flushKept, settle) and
//     Truncate (SetAttr, GetAttrFresh). Also takes Client.mu (Log),
//     FS.lazy and unreachable.mu.
//   - Log.mu: the open stripe. sealLocked waits under it for a pipeline
//     slot, i.e. for an earlier stripe's storage writes (back-pressure
//     on every appender to the log).
//   - writeBehind.flush: one flush of kept-back changes at a time, held
//     across its setattr, unlink and create calls so that an inode's
//     changes stay in order; writeBehind.sending is taken exclusively
//     under it only to wait for creates sent alone.
//   - writeBehind.sending (RW): shared across a create sent alone
//     (sendAlone's OpCreate).
//   - openHold.send: one inode's hold and unhold messages, held across
//     them (settleHold: sendHold, joinIsland, flushKept) so they reach
//     the island in order.
//
// Memory only: FS.cache, lockState.mu, and the leaves writeBehind.mu,
// FS.lazy, openState.mu, unreachable.mu, Client.mu, Client.encMu,
// Client.repairMu, Log.errMu and the local mutexes of Read and
// readRun. endLeasesAndUnlock lets FS.cache go before it sends what
// is kept back and hands locks and holds over, and before the
// OnLeaseBreak hook, which runs with no lock of this package held.
package client
