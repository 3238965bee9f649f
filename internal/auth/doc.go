// Package auth holds Atoll's cluster identity: keys with capabilities, the
// files they live in, and the mutual challenge-response handshake every
// connection between roles runs before its first request (wire uses it on
// the data path, the islands and the manager; the manager's Raft transport
// uses it too).
//
// # Keys
//
// A cluster has one secret, the cluster key (32 random bytes), made when
// the cluster is created (`atoll dev`, `atoll key init`). Every serving
// role (manager, storage server, island) holds it: it is what lets a
// server check any other key without a database, and what a member proves
// to register. Other keys are derived from it:
//
//	secret = HMAC-SHA256(cluster key, "atoll-key-v1" 0x00 name 0x00 caps)
//
// so a server recomputes a client's secret from the name and capabilities
// the client claims, and a client cannot claim more than its key was made
// for. Capabilities (Caps):
//
//	read    read names, attributes and data (a read-only key has only this)
//	write   act for users: change names and data, asserting uid/gid the
//	        way NFS AUTH_SYS does (mounts and gateways), within the key's
//	        scope if it has one
//	admin   drain, clean, set the table or the default policy, format
//	member  a cluster member (holds the cluster key): serve, register,
//	        peer-island 2PC calls, the cleaner's operations
//
// The cluster key itself is the admin key `atoll dev` writes: it carries
// every capability and may start any role.
//
// # Scopes and generations
//
// A derived key may carry a Scope: the uids and gids it may act as (not
// for admin keys) and its generation. A scoped key's secret is
//
//	secret = HMAC-SHA256(cluster key, "atoll-key-v2" 0x00 name 0x00 caps 0x00 scope)
//
// where scope is Scope.String's canonical form ("uids=1000,1001;gids=100;
// gen=2", lists sorted, parts omitted when empty), so the scope cannot be
// widened or dropped without the cluster key. Islands hold every request
// of a connection whose key limits identities to them (internal/meta
// applyScope): another uid is refused, root is squashed to nobody unless
// uid 0 is listed, groups outside the scope are dropped, and block maps
// and commits are checked against the file's permission bits too.
//
// A scope may also confine a key to a subtree: root=N is the inode id of
// its top directory, path=P the directory's path when the key was made
// (for people; both are in the derivation, so neither can be changed).
// Islands refuse a confined key's request that names an inode whose
// recorded parents do not lead to N (internal/meta, checkConfined), and
// the key's clients take N as their "/". A confined key is a tenant's
// key (Scope.Tenant) for storage as one limited to identities is.
//
// A tenant's key also names only lock and lease sessions and request
// ids whose top 32 bits are its LogPrefix (internal/meta
// checkSessions): its clients make them so, and islands refuse others.
//
// A key name is revoked by raising its generation in the cluster map
// (`atoll key revoke NAME`); every server keeps the map's revocations in
// the Revocations of the cluster key it verifies with, refuses a key of a
// lower generation at the handshake, and closes a connection whose key
// was revoked at its next request. `atoll key new` derives a name's next
// generation from the map. Member keys (the cluster key) are never
// revoked: revoking the cluster key means making a new one.
//
// # Key file
//
// One line of text, mode 0600 (Load refuses a file others can read):
//
//	atoll-key 1 NAME CAPS SECRET
//	atoll-key 2 NAME CAPS SCOPE SECRET    (a scoped key)
//
// NAME is 1..64 characters of [A-Za-z0-9._-]; CAPS is a comma list of the
// capability names above; SECRET is 32 bytes in base64 (RawURLEncoding).
// The cluster key has CAPS "read,write,admin,member". `$ATOLL_KEY` holds
// either such a line or a path to such a file.
//
// # Handshake (before any frame; all integers big-endian)
//
//	client → server  hello:  "AtAu" | version 1 | caps u8 | len u8 | name | nonceC[32]
//	                 or, for a scoped key, "AtAu" | version 2 | caps u8 |
//	                 len u8 | name | len u8 | scope | nonceC[32]
//	server → client  chal:   "AtAu" | version 1 | nonceS[32] | proofS[32]
//	client → server  proofC[32]
//	server → client  verdict: 0 ok | 1 refused, then u8 len | reason
//
//	proofS = HMAC-SHA256(secret, "server" | hello | nonceS)
//	proofC = HMAC-SHA256(secret, "client" | hello | nonceS)
//
// where secret is the key's secret, which the server derives from the
// cluster key and the claimed name, caps and scope. The server's proof shows the
// client it talks to a member (a forged server cannot compute it), and is
// checked before the client proves anything; the client's proof shows the
// server the claim is backed by the key. Fresh nonces on both sides make a
// recorded handshake useless. Every step has a deadline (Handshake's
// timeout), so a peer that stalls mid-handshake is dropped.
//
// # Where capabilities are checked
//
// Each server maps every operation to the capability it needs (a table
// named needs in storage, meta and cluster) and refuses the rest with
// ErrForbidden before decoding the request: storage reads need read, log
// appends write, listing, deleting and verifying fragments admin; island
// lookups, attributes, readdir and block maps read, every change write
// (EROFS for a read-only key), the cleaner's and fsck's operations admin,
// the cross-island transaction protocol (prepare, decide, outcome,
// allocino) member; the manager's map and status read, registering and
// heartbeating a storage server or island member, a gateway or mount
// write, changing the map admin. Raft connections need member.
//
// Storage access is by key for trusted keys and by token for tenants'
// keys. A client writes its own log stripes before any island knows of
// them, so a token per stripe for every reader would cost a round trip
// to an island on every stripe of the data path; fragments are immutable
// and checked against their parents' checksums on every read. So a key
// that may act as any uid (a mount host's, a gateway's, the cleaner's)
// reads any fragment by id, as an NFS AUTH_SYS client is trusted to act
// for its users, and islands do not re-check POSIX permissions on its
// block maps and commits; like every key but an admin one it writes only
// logs with its own prefix (LogPrefix, WritesOwnLogs: a put into another
// log could plant bytes with forged CRC32Cs). A key limited to
// identities (a tenant's) also reads other logs' fragments
// only with a read token (ReadToken) that an island gives it beside each
// block pointer after checking the file's bits for its identity; storage
// servers check the token and that the read stays within the block
// (internal/storage, "Tenants' keys"; fragment.Grant).
//
// # Floods
//
// Anyone who reaches a port can open connections before proving a key.
// Every listener admits them through a Gate: wire servers and raft ports
// at most 256 handshakes per source address and 4,096 in all, so a flood
// from a few addresses fills only its own share; the NFS gateway, whose
// clients have no key, 256 connections per source and 4,096 in all, and
// closes connections idle for 6 minutes.
//
// # Sealed records (after the handshake)
//
// A connection does not go on in the clear: both sides derive two record
// keys from the key's secret and the handshake,
//
//	base = HMAC-SHA256(secret, "atoll-seal-v1" | hello | nonceS)
//	c2s  = HMAC-SHA256(base, "client to server")[:16]
//	s2c  = HMAC-SHA256(base, "server to client")[:16]
//
// and every byte after the verdict travels in records (sealed.go):
//
//	u32 length L (at most 64 KiB) | L bytes | tag[16]
//
// where tag is AES-128-GCM's tag over the L bytes as authenticated data
// with no plaintext (GMAC), under the direction's key and a nonce of the
// record's number on the connection (4 zero bytes, u64 counter). A
// record changed, injected, dropped, repeated or reordered by anyone on
// the path fails the reader's check (ErrTampered) and ends the
// connection; nothing of it reaches the protocol. The accepting verdict
// is 0 'S'; a client refuses a server that does not announce sealing,
// so a downgrade is refused too.
//
// A client may offer to go on unsealed (bit 0x40 of the hello's
// capability byte): the data path's clients do, and storage servers
// accept (verdict 0 'P') unless $ATOLL_SEAL_DATA=1 (Verifier.AllowPlain),
// because sealing every byte of file data cost the data path a fifth
// more CPU (README "Keys"). Islands, managers and Raft never accept it.
// A verdict changed on the path leaves the two sides disagreeing, and
// the connection fails; it never goes on unsealed unseen.
//
// By default the bytes are authenticated, not encrypted: an eavesdropper
// reads them. A process whose keys have Encrypt (`--encrypt`,
// $ATOLL_ENCRYPT=1) sets bit 0x80 of the hello's capability byte; both
// sides then encrypt each record's bytes with AES-128-GCM (the u32
// length as authenticated data, the tag after the ciphertext). The bit
// is in the hello, which both proofs cover, so no one on the path can
// add or strip it; a server whose cluster key has Encrypt refuses a
// hello without it. Run every role of a cluster with it to encrypt the
// whole cluster (its Raft traffic too).
//
// # Why an HMAC handshake and not TLS (measured)
//
// transport_bench_test.go, one stream of 1 MiB writes over loopback on
// the 2-core development VM (2026-11-25, machine otherwise idle): plain
// TCP 3,605 MB/s, TLS 1.3 (AES-128-GCM) 1,431 MB/s, 2.5 times slower;
// the HMAC handshake costs 127 µs per connection, once (connections are
// pooled). The data path moves every byte client → storage server and
// back, and on this machine it is CPU-bound already (a 1 GiB ec:4+1 write
// takes about 8 CPU-seconds across the client and five servers), so TLS
// would cost the data path far more than the 5% the cluster may spend on
// authentication. Measured the same day, same machine, build before
// authentication against this one, three alternating rounds each
// (`atoll bench data`, 1 GiB ec:4+1 over 5 servers; `atoll bench meta
// --islands 3`): medians 596 vs 626 MB/s write (pairs 0.64, 1.13,
// 1.06: noise), 2,168 vs 2,249 MB/s read (pairs 0.96 to 0.98), whole-run
// CPU 7.6 vs 8.0 s; metadata within noise or faster (creates 23.8k vs
// 21.5k/s, stat 46.2k vs 45.6k/s, whole-run CPU 29.5 vs 30.4 s).
//
// # Locks
//
// Three mutexes, none taken inside another:
//
//   - Gate.mu: the connections admitted, in all and by source. Held for
//     the counting only.
//   - sealedConn.w: the writing direction's AEAD, record number and
//     buffers. Write holds it across the socket write (bufs.WriteTo) on
//     purpose: records must reach the stream in record-number order and
//     one Write's records must not interleave with another's, so a peer
//     that stops reading holds up every writer until the write deadline
//     the connection's user set.
//   - sealedConn.r: the reading direction's state. Read holds it across
//     the socket read (readRecordLocked), for the same reason.
package auth
