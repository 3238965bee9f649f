// Package nfs is Atoll's NFSv3 (RFC 1813) + MOUNT v3 gateway over
// client.FS, with its own ONC RPC (RFC 5531) server and XDR codec
// (package xdr).
//
// # Transport
//
// NFS and MOUNT share one TCP listener; an optional minimal portmapper
// (rpcbind v2 NULL/GETPORT/DUMP, v3/v4 GETADDR; registrations refused)
// answers on another, so that clients which ask it (libnfs URLs without
// ?nfsport=&mountport=, go-nfs-client's DialMount) find the gateway.
// Only TCP is served. Records use record marking with any number of
// fragments, at most MaxRecord bytes in all; a longer record or a broken
// stream closes that connection. Each connection reads records in one
// goroutine and handles up to Config.MaxInFlight at once, replying in
// completion order (clients match replies by xid).
//
// A call with RPC version other than 2 is denied with RPC_MISMATCH; an
// unknown program is PROG_UNAVAIL, a known one at another version
// PROG_MISMATCH (NFS and MOUNT: 3..3), an unknown procedure PROC_UNAVAIL,
// arguments that do not decode strictly (short, trailing bytes, nonzero
// padding, booleans other than 0/1, over-long opaques) GARBAGE_ARGS, and
// a procedure that panics SYSTEM_ERR. Credentials: AUTH_SYS (uid, gid,
// up to 16 aux gids) becomes metawire.Cred; AUTH_NONE is the anonymous id
// (65534); a malformed AUTH_SYS body is AUTH_ERROR/AUTH_BADCRED and any
// other flavor AUTH_ERROR/AUTH_REJECTEDCRED. Replies carry an AUTH_NONE
// verifier. Records too short to hold a call header, and replies, are
// dropped.
//
// # Locks (NLM)
//
// NLM v4 (program 100021) and the status monitor's NOTIFY (NSM, 100024
// v1) are served on the NFS port and registered on the portmapper, over
// the islands' file locks (nlm.go), so an NFS client's lock conflicts
// with FUSE mounts' and other gateways'. TEST, LOCK, NM_LOCK, CANCEL,
// UNLOCK and FREE_ALL are served; the _MSG/_RES procedures and SHARE are
// not (PROC_UNAVAIL). A blocking LOCK waits 5 s at the island, then is
// answered BLOCKED and granted later through the client's NLM GRANTED
// (found through its host's portmapper). UNLOCK writes back the
// gateway's buffered writes of the file first; a grant marks the open
// File for revalidation. The gateway's locks are held under one lock
// session derived from its listen address and taken back when it starts
// again (client.FS.ResumeLockSession), so a gateway restarted within the
// islands' lock term keeps its clients' locks; for Config.NLMGrace it
// then refuses new locks (NLM4_DENIED_GRACE_PERIOD) and serves reclaims.
// A client host's NOTIFY or FREE_ALL releases its locks at every island
// (the host's hash is in the top bits of its owners' ids), also those an
// earlier run of the gateway took. The gateway sends no NOTIFY of its
// own restarts: its clients' locks survive them.
//
// # Export
//
// The gateway has one export: MNT of any directory path returns that
// directory's handle (flavors: AUTH_SYS). Export options (Config.Export):
// an allow list of client addresses/prefixes (others get MNT3ERR_ACCES and
// AUTH_ERROR/AUTH_TOOWEAK on NFS calls but NULL), read-only (NFS3ERR_ROFS
// on every change; ACCESS never grants MODIFY, EXTEND or DELETE), root
// squash (uid and gid 0, also among aux gids, become AnonUID/AnonGID), and
// secure ports (NFS and MOUNT calls but NULL only from client ports below
// 1024, AUTH_TOOWEAK otherwise). DUMP reports the MNTs not yet UMNTed (in
// memory, advisory).
//
// # File handles
//
// A handle is namespace.Handle{Ino, Gen} (20 bytes, versioned, CRC) and a
// 16-byte tag, HMAC-SHA256(HandleKey, export path, handle), HandleKey
// derived from the gateway's key: it names the inode only, so it is valid
// at every gateway with the same key and export, and across restarts. A
// handle that does not decode is NFS3ERR_BADHANDLE; one whose tag is not
// this gateway's (made by hand, or by a gateway with another key or
// export), an inode that no longer exists, or whose generation differs,
// NFS3ERR_STALE. (Inode numbers are never reused, so the generation is
// constant.) A handle made by hand once reached a file in a 0700
// directory its caller could not search. With Export.Path below /
// (`atoll nfs --export DIR`) clients are confined to that directory: only
// it mounts, LOOKUP ".." of it is itself.
// (A file moved out of the export after a client looked it up stays
// reachable through that handle.) An unconfined export, the default,
// reaches the whole namespace.
//
// # Data
//
// Regular files are kept open (client.File) between requests in a cache
// of at most Config.MaxOpenFiles. WRITE UNSTABLE goes into the File's
// write-back buffer and is answered at once with the gateway's write
// verifier (its start time and random bytes, so a restarted gateway has
// another and clients resend what they did not commit); FILE_SYNC and
// DATA_SYNC flush before answering (committed FILE_SYNC). COMMIT flushes
// the File: the data is then durable on the storage servers and committed
// to the island. A background flusher, stopped and joined by Run, also
// flushes files idle for Config.FlushIdle or dirty for Config.FlushMaxAge,
// and Run flushes everything at shutdown. When more than
// Config.MaxDirtyBytes are buffered, a WRITE flushes its file before
// answering. Buffered writes of a file removed meanwhile are dropped.
//
// READ serves from the open File (its own buffered writes included, and
// its read-ahead). A clean File is checked against the island at most
// once a second and reopened when another writer changed the file, and
// every GETATTR (and LOOKUP, ACCESS...) that sees a newer version marks it
// for reopening, so a client's close-to-open GETATTR makes another
// gateway's committed writes visible. Attributes show the size of
// buffered writes. SETATTR flushes and closes the open File first. The
// owner may always READ and WRITE its file (as knfsd allows, for files
// created read-only); others need the mode bits (READ also with execute).
//
// Truncation to a size inside a block rewrites that block short (islands
// keep the whole block, so the cut-off bytes would otherwise come back
// when the file grows again).
//
// # Procedures
//
// NFS: NULL, GETATTR, SETATTR (guard: ctime must match, else
// NFS3ERR_NOT_SYNC), LOOKUP, ACCESS, READLINK, READ, WRITE, CREATE
// (UNCHECKED; GUARDED -> NFS3ERR_EXIST; EXCLUSIVE stores the createverf3
// in the island, CreateReq.Exclusive+Verf, so a retry with the same
// verifier succeeds), MKDIR, SYMLINK, MKNOD (character and block devices,
// sockets, fifos; other types NFS3ERR_BADTYPE), REMOVE, RMDIR, RENAME,
// LINK, READDIR and READDIRPLUS (island cookies, stable for an entry's
// life; the cookie verifier is the directory's mtime and a stale one,
// nonzero, is NFS3ERR_BAD_COOKIE; maxcount bounds the reply, dircount is
// only a hint as in knfsd), FSSTAT (Config.StatFS), FSINFO (rtmax, wtmax,
// rtpref, wtpref 1 MiB; dtpref 64 KiB; LINK|SYMLINK|HOMOGENEOUS|
// CANSETTIME), PATHCONF (name_max 255, no_trunc), COMMIT. Mutating
// replies carry wcc data: pre-op attributes from the client cache (or the
// open File) and post-op attributes from the island's answer.
//
// Errors map through StatusTable, one row per metawire sentinel;
// transient cluster states (stale epoch, wrong island, busy, unavailable)
// are NFS3ERR_JUKEBOX so clients retry.
//
// # Locks
//
// Order: openFile.mu → fileCache.mu (acquire locks a new openFile
// before it publishes it; drop, reopen and eviction take it out of the
// map under its lock), and under openFile.mu the client's locks
// (client.File's). The others are leaves.
//
//   - openFile.mu (RW): I/O on the open client.File against its
//     replacement; held across I/O by design. Shared by READ, WRITE,
//     COMMIT, UNLOCK and the flusher across the File's reads, writes
//     and flushes (storage and island calls); exclusive across fs.Open
//     in acquire (a file not yet open) and reopen, and across the flush
//     in drop (SETATTR, a removed file, shutdown). Eviction, the idle
//     close, overlay and noteAttr only try it. nlmUnlock takes it shared
//     through peek for the flush and lets it go before the island's
//     unlock (it kept it until TestNLMUnlockLetsTheFileGo).
//   - fileCache.mu: the open files by inode. revalidate's GetAttrFresh
//     runs with neither lock held.
//   - nlmState.mu: the blocked LOCKs' cancel functions.
//   - mountTable.mu: what DUMP reports.
//   - Server.mu: the open connections; shutdown closes them under it.
//   - conn.wmu: one reply at a time on a connection, held across the
//     socket write (send, bounded by sendTimeout): records must not
//     interleave.
package nfs
