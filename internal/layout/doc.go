// Package layout holds the pure logic of the data path: redundancy
// policies, stripe geometry and placement of fragments on storage slots. It
// does no I/O, so every rule here is table-tested.
//
// # Policies
//
// A policy is written as text:
//
//	none                one fragment, no redundancy
//	mirror:R            R full copies (2 <= R <= 8)
//	ec:K+M              K data + M parity fragments, Reed–Solomon
//	                    (1 <= K <= 32, 1 <= M <= 8); ec:K+1 is Zebra's parity
//
// optionally followed by ",frag=SIZE" (bytes per data fragment, default
// 1MiB, 4KiB..32MiB) and ",block=SIZE" (largest block one pointer addresses,
// default 64KiB, 512B..frag). Sizes accept B, KiB, MiB suffixes.
//
// # Stripe geometry
//
// A stripe holds L bytes of log data (L <= K*F, F the fragment size). Its
// shard size is always F, so a block's place in the stripe is known the
// moment it is appended, before the stripe is sealed: data fragment i
// holds stripe bytes [i*F, min(L, (i+1)*F)) (empty when L <= i*F), and
// parity fragments hold min(L, F) bytes, computed over data shards
// zero-padded to that length. A short stripe therefore costs its data plus
// M times at most F, not K+M full fragments. For mirror:R every fragment is
// a full copy of the L bytes; for none there is one fragment. Every
// fragment ends with a stripe trailer (see package fragment) so any
// survivor tells the stripe's geometry. Because Reed–Solomon works byte
// position by byte position, any byte range of a lost shard is rebuilt
// from the same range of K other shards.
//
// # Placement
//
// Fragments go to storage slots, which are stable identities (a
// replacement server takes over a slot). Stripe seq of log l uses K+M
// consecutive slots of the sorted candidate list, starting at
// (hash(l)+seq*s) mod n, s the smallest step of at least K+M coprime with
// n: consecutive stripes of a log share few slots (stripes in flight do
// not pile onto the same servers) and, over n stripes, every slot takes
// every position once, so data and parity rotate (Sigma's rotating
// machine list). Candidates are the slots that
// are up when at least K+M are; otherwise all slots are used and the
// fragments on down slots are missing: the stripe is degraded.
//
// # Block pointer binary format (big-endian)
//
//	u8  version (1)
//	u8  kind (0 none, 1 mirror, 2 ec)
//	u8  K
//	u8  M
//	u64 log, u64 seq          stripe id
//	u32 shard size S
//	u32 offset of the block in the stripe's data
//	u32 length of the block
//	u32 CRC32C of the block (the parental checksum)
//	u16 slot of fragment i, for i in 0..K+M-1
package layout
