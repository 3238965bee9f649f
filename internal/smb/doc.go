// Package smb is the SMB gateway (`atoll smb`): Windows and macOS clients
// reach the cluster through Samba's smbd, which serves a FUSE mount of
// the cluster that the gateway runs and supervises. Atoll does not speak
// SMB itself.
//
// # Why smbd over a mount, not a Samba VFS module
//
// Samba can reach a file system through a VFS module linked into smbd
// (vfs_ceph and vfs_glusterfs do, over their C client libraries), or
// through the kernel, over a mount. A module would need a C API of the
// client (cgo exports from a Go client loaded into every smbd process,
// one Go runtime per SMB connection) and a build against Samba's private
// headers, which Debian does not ship for out-of-tree modules. The mount
// is the client every other path already tests (pjdfstest, fsx, the fault
// engine), it gives smbd the cluster's byte-range locks through fcntl
// (posix locking) and its permission checks through each user's uid, and
// it needs nothing from Samba but its packages. The cost is a pass through
// the kernel per request; it has not been measured against a module here
// (no module exists to measure).
//
// # Processes and files
//
// A gateway runs, under Config.Dir:
//
//	mnt/          `atoll mount` of the cluster (a child process, its own
//	              process group; it dies with the gateway)
//	smb.conf      written at every start (renderConf)
//	samba/        smbd's private, lock, state, cache, pid, ncalrpc and log
//	              directories; private/passdb.tdb is its password database
//	nss/          passwd and group for nss_wrapper (Debian libnss-wrapper),
//	              which smbd and pdbedit load with LD_PRELOAD, so the SMB
//	              users resolve to their uids without accounts on the host
//
// smbd runs as root (it switches to each user's uid and gid for their
// requests, so the islands check every request as that user) in the
// foreground in its own process group; it is restarted if it exits, and
// SIGTERM ends it (and the clients' smbd processes), then the mount. A
// gateway killed with -9 takes them with it (their parent-death signal).
//
// # Users
//
// The cluster keeps its SMB users in its own namespace, UsersPath (a
// root-owned 0700 directory and 0600 file; hidden from shares with "veto
// files"), one line per user: name, uid, gid and NT hash (NTHash, what
// NTLMv2 proves knowledge of; the password itself is never stored).
// `atoll smb user add|remove|list` changes it through the client library
// (written beside, made durable, renamed over). Every gateway reads it
// through its mount every Config.UserSync (5s) and, when it changed,
// rewrites the nss_wrapper files and imports it into its password
// database (pdbedit -i smbpasswd:...; users no longer listed are
// removed), so every gateway knows every user and a removed user is
// refused within seconds. Users with uid or gid 0 are refused: root over
// SMB would be root over the namespace.
//
// # What holds across gateways (and what is turned off)
//
// Any number of gateways may serve the same namespace. What one writes,
// another reads (they are clients of the cluster like any mount).
// Byte-range locks are the cluster's: smbd maps SMB locks to fcntl locks
// on its mount (posix locking), which are the islands' locks, so they
// conflict across gateways, FUSE mounts and NFS clients. Oplocks and
// leases are off (oplocks, level2 oplocks, smb2 leases = no): an smbd
// could not break them for a change made through another gateway or host,
// so granting them would let a client cache stale data. Share modes
// (deny-write opens and the like) are each smbd's own (kept in its
// locking.tdb): they hold among the clients of one gateway, not across
// gateways; clustered Samba (CTDB) would share them and is not built.
//
// # Cost (measured 2026-12-06, the 2-core development VM, one run of
// two rounds each; atoll dev with 5 storage servers, ec:4+1, 2 islands)
//
// Large files: 1 GiB with smbclient put and get through the gateway
// against cp to and cat from the dev FUSE mount and nfs-cp/nfs-cat
// through the NFS gateway, same run, page cache dropped before reads:
// write SMB 328-378 MB/s, FUSE 361-379, NFS 379-425; read SMB 490-624
// MB/s, FUSE 545-654, NFS 765-902. SMB is 90-100% of the mount.
//
// Small files: 1,000 files of 4 KiB into an empty directory, smbclient
// mput against cp into the mount: SMB 7.4-7.6 s, FUSE 0.72-0.78 s; the
// same smbclient mput into Samba over local ext4 took 0.59 s. Most of
// the difference is case-blind names: for every name that does not exist
// yet smbd lists the directory to look for another case of it, which on
// ext4 is a page-cache walk and through the mount a listing from the
// island (each create changes the directory, so nothing stays cached):
// quadratic in the directory's size. With Config.CaseSensitive (atoll smb
// --case-sensitive) the same mput took 2.65-2.74 s; the rest is smbd's
// per-file metadata round trips (create, DOS attribute xattr, times).
//
// DOS attributes and alternate data streams live in user.* extended
// attributes, which the islands store (store dos attributes,
// streams_xattr); vfs_fruit serves macOS clients' metadata as streams.
//
// # Locks
//
// One mutex, Gateway.mu: the users file last imported. syncUsers takes
// it only to compare the file with it and to record it, not across
// reading the file through the mount or running pdbedit. Nothing nests
// inside it.
package smb
