// Package namespace holds the pure logic of Atoll's namespace placement
// (Archipelago): canonical pathnames, the H3 hash that gives each directory
// its bucket, inode ids and NFS file handles that embed the bucket, and the
// extendible hash table of the cluster map that maps buckets to metadata
// islands, with rebalance planning. It does no I/O and starts no
// goroutines; the metadata islands, the cluster map and the client naming
// layer share it. Every error wraps one of the sentinels in errors.go.
//
// # Invariants
//
//  1. A directory's bucket is Bucket of its clean pathname when it is
//     created (the naming layer builds that path with Join). The bucket is
//     stored in the directory's inode id and never recomputed: rename moves
//     the name entry between parents but the directory, and every file in
//     it, stays in its bucket and so on its island.
//  2. Every non-directory inode takes its parent directory's bucket, so
//     create, lookup, getattr, readdir and unlink in one directory touch
//     one island. A hard link made later does not move the inode.
//  3. Bucket is a pure function of the path bytes, H3Seed and the
//     splitmix64 generator. Those are on-disk format: the golden values in
//     h3_test.go must never change.
//  4. Table entry i (of 1<<Depth) owns the buckets whose top Depth bits are
//     i. No entry holds NoIsland. Split and Merge never change the island
//     of any bucket; only Apply does, and only as its moves say.
//  5. Decoders accept exactly what the encoders produce (a canonical form)
//     and reject everything else with an error; no input panics.
//
// # Pathnames
//
// A clean path (IsClean) is "/" or "/" followed by names joined by single
// slashes, at most MaxPath (4096) bytes. A name is 1..MaxName (255) bytes,
// no '/' and no NUL, and not "." or ".."; other bytes, including invalid
// UTF-8, are allowed. Clean turns any absolute path into this form
// lexically, like path.Clean: it drops empty and "." components and lets
// ".." remove the component before it ("/.." is "/"). It rejects empty,
// relative and NUL-containing paths with ErrBadPath and overlong paths or
// components with ErrNameTooLong. Bucket keys are clean paths only.
//
// # H3 bucket hash
//
// The key of a clean path p is its bytes, bit k of the key being bit k%8
// (least significant first) of byte p[k/8]. Conceptually the key is padded
// with zero bits to any length; because a clean path contains no NUL,
// distinct clean paths, even of different lengths, are distinct keys.
// The H3 matrix Q has one 32-bit row per key bit:
//
//	Q[k] = uint32(splitmix64(k/2) >> (32*(k%2)))
//	splitmix64(n): z = H3Seed + (n+1)*0x9e3779b97f4a7c15
//	               z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
//	               z = (z ^ z>>27) * 0x94d049bb133111eb
//	               return z ^ z>>31          (all arithmetic mod 2^64)
//	H3Seed = 0x41746f6c6c483321 ("AtollH3!")
//
// and Bucket(p) is the XOR of Q[k] over the 1 bits k of the key (0 for an
// empty key). This is H3 of Carter and Wegman over the whole key, so for
// two different paths the chance, over the choice of Q, that they share a
// bucket is 2^-32, with no bound on path length and no folding. The first
// 128 byte positions are evaluated as tabulation hashing: a table per
// position of the XOR of rows for each byte value (128 KiB, built at init),
// one lookup per byte; later positions compute their rows from the
// generator, which is counter based, giving the same value more slowly.
// For example Bucket("/") = 0x961e849c and Bucket("/home") = 0x40472215.
//
// H3 is linear over GF(2): for keys of equal length, Bucket(a^b) =
// Bucket(a)^Bucket(b). Sets of names that differ only in a few bits (like
// d0..d9 or user000..user249) therefore land in very even but correlated
// buckets; the distribution tests measure generated trees and sequences.
//
// # Inode ids
//
// An Ino is 64 bits: bucket<<32 | seq. The island owning the bucket
// allocates seq; 0 is never valid, 1 is reserved and every bucket's
// allocation starts at FirstSeq (2). The root directory is RootIno =
// (Bucket("/"), 1) = 961e849c:00000001, so the root lives where a
// directory named "/" would hash. The text form is "bbbbbbbb:ssssssss" in
// lower-case hex; ParseIno also takes the decimal form (ls -i, NFS fileid).
// A FUSE node id is not an Ino: the FUSE adapter maps between them.
//
// # File handle binary format (HandleSize = 20 bytes, big-endian)
//
//	u8  'A', u8 'H'   magic
//	u8  version (1)
//	u8  flags (0; any other value is rejected)
//	u64 inode id      (sequence must not be 0)
//	u32 generation
//	u32 CRC32C (Castagnoli) of the 16 bytes before it
//
// The checksum rejects garbage and stale formats; it is not a secret, so a
// client can forge a handle for any inode id, as with most NFS servers.
//
// # Extendible hash table
//
// A Table has Depth (0..MaxDepth=16) and 1<<Depth island ids; Lookup of a
// bucket reads entry bucket>>(32-Depth). IslandID 0 (NoIsland) is
// reserved. NewTable shares the entries out in contiguous runs in island
// order, the shares differing by at most one: each island then owns one
// contiguous bucket range, which is one pebble key range (keys are prefixed
// by the big-endian bucket), and neighbouring entries of one island can be
// merged back. Round robin would give no better balance, since buckets are
// already hashed, and would cut every island's keys into 1<<Depth/n
// ranges. Split doubles the depth (entry i becomes 2i and 2i+1, same
// owner); Merge halves it when every pair has one owner.
//
// # Table binary format (big-endian)
//
//	"AXHT"            magic
//	u8  version (1)
//	u8  depth (0..16)
//	u64 epoch
//	u32 number of runs R (1..1<<depth)
//	R × { u32 island (not 0), u16 run length - 1 }
//	u32 CRC32C (Castagnoli) of everything before it
//
// Runs are maximal (adjacent runs name different islands) and cover
// exactly 1<<depth entries, so a table has one encoding; a contiguous
// table of n islands encodes in 22+6n bytes at any depth.
//
// # Rebalancing (Archipelago §5.2)
//
// PlanRebalance takes the table, the measured load of each island and the
// list of islands that should share the table. Islands missing from the
// list lose all their entries (removal); listed islands without entries
// gain some (addition). The load of an island is assumed spread evenly over
// its entries. Islands above the mean are sources, islands below it are
// destinations, and the roles do not change during a plan: entries move
// only from removed islands and sources to destinations, each entry at most
// once. A source gives only while above the mean, to a destination still
// below it, and only when the move lowers the sum of squared deviations;
// removed islands' entries fill destinations up to the mean, in runs of
// consecutive entries. Under equal load per entry the result gives every island
// floor or ceil of N/n entries. The plan splits the table first when it has
// fewer than MinEntriesPerIsland entries per island, or when an entry that
// may move carries more than 1/8 of the mean load; moves name entries at
// that depth and Apply splits to it. Apply returns a new table; the caller
// bumps the epoch, runs the two-phase migration (the moved entries, as
// bucket ranges from EntryRange, are copied in the background and served on
// demand) and may Merge afterwards. Diff lists the moves between two
// tables, for the migrator. To keep noisy measurements from moving entries
// back and forth, plan only when Imbalance of the loads exceeds a
// threshold.
package namespace
