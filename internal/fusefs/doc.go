// Package fusefs is Atoll's FUSE mount: a thin adapter that serves the
// Linux kernel's FUSE protocol (github.com/hanwen/go-fuse/v2) over
// client.FS, the inode-based file system API of the client library.
//
// # Why the raw API
//
// go-fuse offers a node API (package fs: an in-memory tree of
// InodeEmbedder nodes, with its own node ids and lookup counts) and the
// raw API (fuse.RawFileSystem: one method per FUSE opcode, node ids chosen
// by the file system). This package uses the raw API because Atoll's
// inode ids are already stable, cluster-wide node ids:
//
//   - The FUSE node id of an inode is its Atoll inode id (the root, whose
//     Atoll id is namespace.RootIno, is FUSE's node 1; no other Atoll id
//     is 1), and the generation is Attr.Gen. The adapter keeps no node
//     table and no lookup counts: FORGET is a no-op, any node id the kernel
//     sends names its inode directly. An inode this mount has open stays
//     at its island after its last name goes, through any client, until
//     the mount releases it (client.FS.HoldOpen); one it does not have
//     open answers ESTALE once removed.
//   - READDIR and READDIRPLUS offsets are the islands' directory cookies,
//     which are stable for an entry's life, so a listing resumed after
//     concurrent changes neither repeats nor skips entries. The node API
//     would re-number entries per open directory stream. Each open
//     directory handle buffers one island page (512 entries) and serves
//     the kernel's page-sized requests from it while their offsets follow
//     on and the page is younger than the attribute timeout; any other
//     offset (rewinddir, seekdir) asks the island again.
//   - FLUSH (close) writes back and commits without waiting for the
//     island's log sync; FSYNC commits synced (or syncs the island after
//     an earlier lazy commit); FSYNCDIR syncs the directory's island log,
//     which makes lazy creates of files in it durable; unmount syncs every
//     island with lazy changes (see client.FS.SetLazyCreate and
//     SetLazyClose: the mount creates and closes lazily, as POSIX allows).
//   - Every request is answered from client.FS with the caller's
//     credentials, and the islands check permissions; the kernel checks
//     them first too (allow_other, default_permissions), from cached
//     attributes, so a cached name never skips a directory's search
//     permission.
//
// # Extended attributes
//
// The islands store the "user." namespace only. getxattr of any other
// name (security.selinux, system.posix_acl_access, security.capability,
// trusted.*) is answered EOPNOTSUPP by the mount itself, as setxattr is
// by the islands: the namespace is not supported, not merely empty. That
// lets ls -l, cp -a and tar stop asking for SELinux labels and ACLs on
// this file system (coreutils remembers an unsupported device), where
// ENODATA had cost two or three FUSE round trips per file listed (about
// 75 us each on this VM): a warm ls -lR of 11,478 files took 1.2-1.7 s,
// now 0.17-0.24 s (one run each, 03:02).
//
// # Caller credentials
//
// uid and gid come from the FUSE request header; supplementary groups
// are read from /proc/<tid>/status ("Groups:"), cached for 100ms per
// (tid, uid, gid); without /proc the caller has no supplementary groups.
// Requests the kernel makes on its own (pid 0: write-back, release) use
// the open handle's credentials.
//
// # Files
//
// All open handles of one inode in a mount share one *client.File (so two
// descriptors of one process see each other's unflushed writes). Writes go
// to its write-back cache; FLUSH (every close(2)), FSYNC and the last
// RELEASE flush it, so data is durable and committed when close or fsync
// returns (close-to-open consistency). OPEN always fetches fresh attributes
// and invalidates the kernel's cached attributes (FUSE notify; its reply
// cannot carry them, and the kernel reads only up to the size it has
// cached), so a file opened after another client closed it shows that
// client's data, all of it: the kernel asks again (GETATTR, from the
// island) before it reads past its old size or answers fstat. Attributes
// the kernel was given under a lease the mount still holds are kept
// (another client's change breaks the lease first, and the break
// invalidates them), so opening a file again costs no GETATTR. OPEN keeps
// the kernel's page cache (FOPEN_KEEP_CACHE) only when the pages hold the
// data version the island has now (pages.go: a version is recorded when
// an open drops the pages and moved by this mount's own commits), so a
// second read of an unchanged file is served by the kernel while a file
// another client changed is read again. While a file is open
// with unflushed data, GETATTR reports the size (and modification time)
// of that data. Truncation, attribute changes and user.atoll.policy
// changes of an open file first flush it (a later commit would set mtime
// and clear set-id bits again); truncation and policy changes then re-open
// the shared File so its cached state (size, block size, policy) follows
// the island, while chmod, chown and utimes hand the File the attributes
// the island answered (client.File.TakeAttr; a re-open cost a getattr and
// a readmap each, three times per file of a tar x).
// Truncation always goes through a File: islands keep the bytes past a new
// size inside its last block, and client.FS.SetAttr rewrites that block
// (short) so stale bytes cannot reappear when the file grows again
// (internal/meta's contract; fsx found it). ftruncate(2) on a descriptor
// open for writing succeeds whatever the mode says now, as on Linux.
// fallocate mode 0 (posix_fallocate) extends the size; other modes are
// EOPNOTSUPP. The mount negotiates FUSE_HANDLE_KILLPRIV_V2: the islands
// clear set-id bits on chown, on truncation and on writes by the
// unprivileged (FATTR_KILL_SUIDGID becomes metawire.SetKillSUID). Without
// it the kernel asked GETATTR before every chown, and cleared the bits of
// a file an unprivileged user wrote with a chmod in that user's name,
// which the island refused (EPERM from write(2) on a set-id file the user
// may write).
//
// Every file open in this mount is held at its island (client.FS.HoldOpen
// at the first open, ReleaseOpen at the last release), so an unlink or a
// rename over, through this mount or any other client, leaves the inode
// to the open descriptors: reads, writes and fstat (nlink 0) go on, and
// the island reclaims it at the last release, or a session term after
// the mount dies. Only when the island cannot be told (unreachable) does
// unlinking or renaming over a file open here rename it aside to
// ".atoll-open-<ino>-<n>" in the same directory (NFS's "silly rename"),
// removed at the last release; a mount that dies then leaves the name
// behind (rm it).
//
// # Caching
//
// Entry and attribute timeouts are Config.EntryTTL and AttrTTL (1s by
// default); the kernel invalidates them itself on every change made
// through this mount, and client.FS invalidates its own cache the same
// way. When client.FS holds a lease (client.FS.EnableLeases, `atoll
// mount --leases`, on by default) on what an answer says, the kernel gets
// it for as long as the lease is held instead (leases.go): names, names
// found missing (a negative entry: node id 0 with a timeout, so a create
// of a new name costs no LOOKUP), and the attributes of files not open
// here (those of an open file follow its unflushed writes). The mount
// records what it gave the kernel under each lease; when the lease is
// broken it invalidates those names and attributes (FUSE notify) before
// the break is acknowledged, so another client's change is seen as soon
// as it returns. The kernel takes the directory's lock to invalidate a
// name, which orders it after lookups in flight there, and drops
// attribute replies that raced with an invalidation. An invalidation
// waiting for that lock (a change of this mount in that directory, itself
// waiting at the island) does not hold the acknowledgement longer than
// 200 ms. Without a lease nothing is cached longer than the timeouts,
// and names not found are not cached.
//
// "As long as the lease is held" is longer than its term (3 s): the
// island renews a lease at each poll of its holder for a minute after
// its grant, so the kernel gets the name or attributes until then, at
// most 30 s (client.FS.EntryHold), once the lease has 1.5 s left and the
// island's hold is known. Past the lease's current end the kernel's copy
// relies on the mount: every 200 ms its watch (kernelLeasesEnding)
// drops, as a break does, what the kernel keeps under a lease that is
// within 1 s of its end unrenewed, before the island's copy of the lease
// can end (it ends after this side's, which counts from before the
// request was sent, less 10%). Only records given past their lease's end
// count (kernelBucket.beyond): one given what its lease had left, or the
// configured timeout, expires in time by itself, and dropping those in
// every lease's last second (leases used once end so, a minute after
// their grant) made a cold grep -r of the tree 2x slower. A hold is
// given only if it is noted within 250 ms of reading its lease (it is
// read with at least 1.5 s left, and the watch drops at 1 s), so no drop
// can fall between the two.
// A tree listed again 8 s later cost one LOOKUP per name when the
// kernel's copy lasted the term only: a warm ls -lR of 11,478 files after
// an 8 s pause took 0.83 s, now 0.19 s (one run each, 03:25-03:40). What
// this gives up: a mount process that stops answering (SIGSTOP, a hang)
// while its kernel holds such copies no longer drops them, so for up to
// 30 s the kernel may answer a name another client changed after the
// lease ended at the island; a mount that dies (kill -9) takes its kernel
// copies with it (ENOTCONN). A drop (a FUSE entry notification) waits in
// the kernel for its directory's lock; if a request to this mount holds
// that lock when the process is killed, the notifying thread never gets
// it and the process never exits: Abort (atoll mount --abort) ends it,
// and internal/devcluster does so for the roles it kills.
//
// Sizes the kernel is given never go back to an older data version of a
// regular file (told.go): the kernel takes a smaller size for a
// truncation, cuts reads at it and ends a mapping under its reader with
// SIGBUS, and an older version's attributes come from replies answered
// from the cache or sent in another order than computed while another
// client grows the file. A read that ends short of the newest size told
// opens the File again and reads once more (staleEnd): the open's File
// predates the commit that size came from.
//
// # Mounting
//
// New checks /dev/fuse and the mountpoint first (missing, not a directory,
// already mounted, or a stale mount whose server died: the error says to
// run fusermount3 -u or umount -l). Mount mounts directly as root (the
// fusermount3 helper otherwise) with allow_other, 1 MiB requests and
// default_permissions, then raises the kernel's read-ahead for the mount
// from 128 KiB to Config.ReadAhead (8 MiB: sequential reads become 1 MiB
// requests, several in flight, instead of 128 KiB ones); Run serves until
// its context ends or the file system is unmounted from outside, then
// unmounts (lazily if busy) and writes back every open file. Kill
// simulates a crash for tests.
//
// # Locks
//
// The mount negotiates POSIX and flock locks (MountOptions.EnableLocks),
// so the kernel sends fcntl (F_SETLK, F_SETLKW, F_GETLK, OFD locks) and
// flock requests here and every lock is taken at the inode's island
// through client.FS (locks.go): locks conflict across mounts, NFS
// gateways (NLM) and hosts. The kernel's owner id is the lock owner (its
// process's files for POSIX locks, the open file description for OFD and
// flock locks). Linux semantics are kept where the kernel leaves them to
// the file system: FLUSH (every close(2)) drops the closing process's
// POSIX locks on the file, and RELEASE (the description's last close)
// drops the locks of every owner that locked through it (OFD locks: the
// kernel sends no unlock for them) and its flock. An F_SETLKW the kernel
// interrupts cancels its wait at the island and answers EINTR, which the
// kernel restarts (SA_RESTART); a grant that raced with the cancel is
// kept and answered. The pid F_GETLK reports is the holder's, which the
// kernel shows only if that pid exists on this host (0 otherwise).
//
// Lock-coherent data, as NFS clients keep it: an unlock first writes back
// what the file has unflushed; a grant revalidates the file (the shared
// File is opened again when the island's version or size moved, the
// kernel's attributes are dropped, and its pages unless they hold the
// island's version), so data written under a lock through one mount is
// read under it through another. Writes and flushes of a file locked
// under a lock session that ended, or that its island may have ended (not
// renewed within 90% of its term), fail with EIO (client.FS.LockCheck)
// until the file is locked again or closed: a mount cut off from its
// island never lands a write under a lock someone else may hold by then.
//
// # Appends
//
// A write through a descriptor with O_APPEND (at open, or set later with
// fcntl: the kernel sends the descriptor's flags with each WRITE) ignores
// the kernel's offset, which is the end it caches, stale when another
// host appended: under the file's append lock (filelock.Append, which no
// application lock conflicts with) it takes the island's end, writes
// there, and writes back before the lock goes (append.go). Under this
// mount's exclusive lease the lock, the end and the write stay local
// (one appender: as fast as plain writes) and the appends are written
// back when the lease breaks, before the break is acknowledged. Opens
// with O_APPEND get direct I/O, so the kernel's pages never hold the
// bytes at the offset it guessed; for descriptors given O_APPEND by
// fcntl the pages are dropped after the write. A write larger than the
// mount's max_write reaches here as several WRITEs, each appended on its
// own: another host's append can land between them.
//
// # O_TMPFILE
//
// The island has no nameless create: Tmpfile (tmpfile.go) creates the
// file under a hidden name, opens it (the island holds it for this
// mount) and removes the name, which the hold outlives (nlink 0, as an
// unlinked open file); linkat names it (LINK), and its last close
// without one reclaims it. If the island cannot take the hold, the
// hidden name stays until the link or the last close (visible in
// listings meanwhile).
//
// # Range copies and access times
//
// COPY_FILE_RANGE (copy_file_range(2), cp --reflink=auto) clones the
// whole blocks that line up in both files (client.FS.CloneRange, inside
// modifyOpen: the destination's File is written back first and opened
// again after) and copies the edges through the two Files. An open for
// reading updates the access time by Config.Atime (accessed): at the
// open, because reads of pages the kernel keeps never reach the mount.
//
// # Interrupts
//
// Lookups, reads and listings stop when the kernel interrupts them (a
// signal to the caller) and answer EINTR. Requests that change something
// do not: a change the cluster applied must not be answered EINTR, since
// callers retry (Go's runtime retries syscalls its own preemption signals
// interrupt), and a retried exclusive create or unlink would then fail.
// But the kernel holds a process, even one killed with SIGKILL, until its
// request is answered, so an interrupted change gives up after
// Config.InterruptGrace (5s, longer than a client retries a server that
// is down): only a server that hangs (stopped, or its machine frozen with
// connections open) makes a killed process wait that long. One goroutine
// per mount polls the interrupted requests; none is started per request.
//
// # Errors
//
// Every error of client.FS becomes an errno through metawire.Errno, the
// one errno table of the system. Requests with impossible input (bad
// handles, unknown flags) get EBADF or EINVAL; no input panics.
//
// # Locks (mutexes)
//
// The adapter's mutexes (not the file locks above). Order, outermost
// first: openFile.appendMu → openFile.mu → pageVersions.mu,
// adapter.muts and the client's locks (client.File's); dirStream.mu →
// adapter.mu, toldVersions.mu, kernelLeases.mu (fillEntry) and the
// client's. adapter.mu nests only the lock of an openFile acquire has
// just made and not yet published. Mount.mu is taken alone.
//
//   - adapter.mu: files, handles, directory streams, openFile.refs and
//     orphan, handle.lockOwners. Never held across a call: release lets
//     it go before the write-back, ReleaseOpen and an orphan's unlink.
//   - openFile.mu (RW): the shared File against its replacement; held
//     across I/O by design. Shared across the File's reads, writes and
//     flushes (Read, Write, Fallocate, flush, copy_file_range's copy);
//     exclusive across island calls in acquire (HoldOpen, Open),
//     refreshLocked and reopenLocked, modifyOpenAttr (write-back, the
//     change, reopen: SETATTR, truncation, O_TRUNC, the policy xattr,
//     fallocate, copy_file_range's clone), staleEnd and revalidateFile.
//   - openFile.appendMu: one O_APPEND write at a time, held across all
//     of appendWrite: SetLock waiting for the island's append lock, the
//     write-back, the write and UnlockWritten.
//   - dirStream.mu: a directory handle's buffer, held across readDir's
//     island Readdir.
//   - Mount.mu: held across Mount's mount (fuse.NewServer, WaitMount for
//     the kernel, the read-ahead sysfs write).
//   - adapter.muts, kernelLeases.mu, pageVersions.mu, toldVersions.mu,
//     credCache.mu: leaves, memory only (credCache reads /proc and
//     kernelBreak waits for the kernel's invalidations without them).
//
// leaseBroken, which the client's lease poller runs before a break is
// acknowledged, takes openFile.mu shared (flush): a request holding it
// exclusively while it waits at the island delays the acknowledgement.
package fusefs
