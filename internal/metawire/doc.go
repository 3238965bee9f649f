// Package metawire is the protocol between clients and metadata islands,
// and between islands (two-phase commit of cross-island operations). It
// holds the operation codes, request and response messages (encoded with
// internal/wire's Enc/Dec; every message decodes strictly: short or
// trailing bytes are ErrBadRequest), the attribute structure, and the one
// table that maps island errors to status codes and to POSIX errnos.
//
// Ops is the protocol's schema: one entry per operation with its name,
// request and response types, the capability it needs, whether islands
// deduplicate it and whether it is served at any map epoch. The islands'
// checks, their metric labels and the codec tests (a round trip of random
// contents and a fuzz target over every message) are read from it, and a
// test fails when an Op constant has no entry.
//
// Inode-based operations name files by inode id (see internal/namespace:
// the top 32 bits are the bucket). A request goes to the island owning the
// bucket of the inode it names first (the directory for name operations);
// an island that does not own that bucket answers StatusWrongIsland and the
// client refreshes its cluster map. Every request frame carries the
// sender's map epoch (internal/wire header); an island with a newer map
// answers StatusStaleEpoch.
//
// File data: a file is either inline (its bytes live in the inode, below
// the policy's inline threshold) or a map from block index (file offset /
// block size) to an encoded layout.Pointer. Blocks are replaced whole; a
// missing block is a hole and reads as zeros.
package metawire
