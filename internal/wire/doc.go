// Package wire is Atoll's framed TCP transport for the data path.
//
// A connection carries frames in both directions. Many requests may be in
// flight on one connection: each request carries an id and its response
// carries the same id, in any order.
//
// # Frame format (all integers big-endian)
//
//	offset size field
//	 0     2    magic 0xA7 0x70
//	 2     1    version (1)
//	 3     1    kind: 1 request, 2 response
//	 4     2    op (request) / op echoed (response)
//	 6     2    flags: 0x0001 (requests only) the message starts with a
//	            16-byte request id (ReqID, an idempotency key kept across
//	            retries); every other bit is reserved and must be 0
//	 8     8    request id
//	16     8    sender's cluster-map epoch
//	24     4    status (responses: 0 ok, else an error code); route
//	            (requests: what the request is for inside a server hosting
//	            several, e.g. the island of a replicated island server; 0
//	            for the server's only one)
//	28     4    message length M (at most Limits.MaxMsg)
//	32     4    payload length P (at most Limits.MaxPayload)
//	36     4    CRC32C (Castagnoli) of bytes 0..35 followed by the message
//	40     M    message: a small structure encoded with Enc/Dec
//	40+M   P    payload: raw bytes (fragment data), sent and received without
//	            extra copies
//
// The header checksum covers the fixed header and the message, so a
// corrupted length, op or argument is detected before it is acted on. The
// payload is not checksummed by the transport: every payload carries its own
// end-to-end checksums (per-chunk CRC32C on writes, parental checksums on
// reads), which also cover bytes at rest.
//
// With keys (ClientConfig.Key, ServerConfig.Auth) frames travel inside
// the sealed records of internal/auth that follow the handshake: every
// byte, payload included, is authenticated per connection and direction,
// so a frame changed or injected on the path ends the connection before
// it is parsed. The checksums above still catch what the sealing does not
// see (a bug, a connection without keys in tests).
//
// A frame that fails any check (magic, version, kind, lengths above the
// limits, checksum) closes the connection with a logged reason; it never
// reaches a handler and never crashes the process.
//
// Both ends combine small frames (at most 16 KiB) that are ready at the same
// time into one write: a busy connection makes one syscall for a burst of
// requests or responses (see frameWriter). Large frames are written from the
// caller's buffers without a copy.
//
// A server reads each connection on one goroutine and serves requests on a
// per-connection pool of worker goroutines (at most
// ServerConfig.MaxConcurrentPerConn), so responses may come in any order.
// Operations named by ServerConfig.Inline are served on the reader
// goroutine itself when no further request is already buffered, saving
// the handoff (a thread wakeup, much of a lone request's cost) while a
// burst still goes to workers in parallel; their handlers see
// IsInline(ctx) and must not wait:
// returning ErrWouldBlock sends the request on to a worker instead, and
// nothing is answered for the first attempt.
//
// An error response has a nonzero status and its message is the UTF-8 error
// text; the meaning of status codes belongs to the protocol built on top.
//
// Resource limits: a frame once begun (its first byte read) must arrive
// whole within ServerConfig.IOTimeout; a connection with no request in
// flight that sends nothing for ServerConfig.IdleTimeout (10 minutes) is
// closed, and a Pool retires its own connections idle for PoolIdle (5
// minutes) first, so a live client never sends on a connection the server
// is closing; connections are capped per server and per remote address;
// buffered request payloads are capped across connections
// (MaxInflightBytes); an accept that fails for want of file descriptors
// is retried with a back-off instead of stopping the server.
//
// A client gives up on a silent server host (ClientConfig.PeerTimeout,
// 15 s): a dial unanswered for a third of it, request bytes left
// unacknowledged for all of it (TCP_USER_TIMEOUT), or keepalive probes
// unanswered while a call waits fail the connection and its calls with
// ErrConnClosed. Without it a partitioned host held calls for the quarter
// of an hour TCP retransmits, and a dial for the two minutes of SYN
// retries: a lookup through a FUSE mount cut from its island had not
// failed after 5 minutes, and fails after about a minute with it
// (internal/simcluster's TestPartitionedMountServesNoStaleName).
//
// # Schemas
//
// Each protocol built on frames (metawire, fragment, cluster) declares its
// operations once, in a Schema of OpSpecs: name, request and response
// types, the capability a connection's key needs, whether the server
// deduplicates it by ReqID and whether it is served at any map epoch.
// Servers check capabilities and label metrics from it; wiretest checks
// that every Op constant has an entry and that every message round-trips
// and survives fuzzing.
//
// # Locks
//
// Order: Pool.mu → Client.mu (Get asks each pooled connection's Err and
// idleLongerThan); the others are leaves. None is held across a socket
// read or write:
//
//   - Pool.mu: the connections by address. Dials and closes run after
//     it is let go.
//   - Client.mu: the pending calls, the next id and the error that
//     broke the connection. fail closes the pending calls' channels
//     under it.
//   - frameWriter.mu: the pending bytes and the writer role. The role is
//     a flag, not the mutex: the writer lets the mutex go around each
//     socket write (flushLocked, and write's large frames). Senders wait
//     on its condition variable idle (a large frame while a write runs,
//     a small one while pending is past maxPending), which lets it go
//     while they wait. failLocked closes the connection under it (Close
//     does not block).
//   - Server.mu: the open connections; Serve closes them under it when
//     it stops.
package wire
