// Package cleaner gives the striped log its space back and keeps its
// stripes whole: Zebra's stripe cleaner (§3.4, §4.5–4.6) plus the repair,
// drain and rebalance jobs, which reuse its inventory and its copy path.
//
// A pass works from two durable sources only, so a cleaner killed at any
// point simply starts over and finishes on its next pass:
//
//   - the inventory: every fragment every reachable storage server holds
//     (fragment.OpScan), grouped into stripes with their creation time;
//   - the islands' per-stripe live-byte counters and their reverse index
//     stripe -> blocks (metawire.OpLiveBytes, OpStripeRefs), written in the
//     same batch as the block pointers they describe.
//
// Invariants:
//
//   - A stripe is deleted only when no island has a block pointing into it
//     (its reverse index is empty, checked right before the delete) and it
//     is older than Grace. The age rule protects stripes whose writer has
//     not committed yet: a client commits within MaxCommitDelay of writing
//     (client.FSConfig), and Grace is far longer. Stripes whose writer died
//     before committing are deleted once Grace has passed.
//   - Live blocks move by copy plus a conditional cleaner delta: the copy
//     is appended to the cleaner's own log and made durable, then an island
//     replaces the block's pointer only if it still holds the old one. A
//     rejected delta means a writer got there first; the copy is dead and
//     its stripe's live count never rose, so accounting stays exact.
//   - Repair never changes pointers: a missing fragment is rebuilt from the
//     others onto the slot the pointer names (slots are stable identities;
//     a replacement server takes over the slot of the one it replaces).
//   - Drain moves every live block with a fragment on the drained slot
//     into new stripes that avoid it, through the same copy path.
//   - Rebalance (PlanRebalance) evens out the storage slots' used bytes
//     after a server joins: it rewrites old stripes (older than Grace,
//     fullest slot first, sparsest stripes first) through the same copy
//     path, with the over-full slots avoided for the new stripes
//     (client.Avoid, never at the cost of a degraded stripe), until every
//     slot is within the tolerance of the mean. A rewritten stripe puts
//     at most one fragment on the new slot, so filling a new server
//     rewrites about as many stripes as its share of fragments.
//   - Deleting a stripe deletes every fragment its placement allows, not
//     only those the inventory saw (a repair in the same pass may have
//     recreated one), and at the end of the pass the islands drop the
//     stripe's live counter (metawire.OpForget) if it is zero, so counters
//     do not pile up with every stripe ever written. A counter a crash
//     brings back is a zero key, which means the same as no key.
//
// # In the manager
//
// `atoll clean` and `atoll drain` run one pass. The cluster's own cleaner
// is Background, run by every manager process: it runs a Cleaner (Run:
// a pass every Interval) only while its manager is the raft leader, so
// one cleaner works at a time; it checks the lead every 2 s while leading
// and stops its cleaner when the lead goes, and every 5 s while
// following. A new leader's cleaner starts over from the durable state
// above, as a killed one does.
//
// # Locks
//
// Cleaner.mu guards the stripe geometries, unreachable slots, the
// capacity answer and the progress figures. It is a leaf held for map
// and counter updates: island and storage calls, Config.Capacity (which
// calls into the manager, whose status calls back into Status) and
// Progress run without it. The pass token (Cleaner.pass) is a channel,
// not a mutex: a pass holds it across all its calls, and a Pass waiting
// for it gives up with its ctx.
//
// Two local mutexes: Pass's gmu (the report's errors and stripe shapes;
// a leaf), and repair's mu, which orders the repair workers' report
// updates and is held across phase (so repair's mu → Cleaner.mu) and
// thus across the PassOptions.Progress callback (atoll clean's progress
// bar: a write to the terminal).
package cleaner
