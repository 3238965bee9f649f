// Package lease is an island's table of directory leases (#18, DESIGN.md
// "Client caching"): which client sessions may answer names and
// attributes of a bucket from their own cache, and the breaking of those
// leases before anyone else changes the bucket.
//
// # What a lease covers
//
// A lease names one bucket (namespace: a directory's bucket holds the
// directory's inode, its entries and the inodes of its non-directory
// children). While a session holds it, every record of the bucket that
// the session read under the lease stays true until the session is told
// otherwise: the island breaks the lease before it applies any change to
// the bucket made by another session (or by the island itself: a
// transaction a peer drives, the cleaner). A session's own changes do not
// break its lease: their replies carry what changed.
//
// # Protocol
//
// Reads: Begin before the read takes a Mark of the bucket; Grant after
// the read records the session as a holder for Term, but only when no
// other session's change of the bucket started, ended or was in flight
// in between (a seqlock per bucket that remembers its last moves and who
// made them), so a lease never covers data older than a change the
// session was not told about. The session's own changes do not count:
// their answers tell it, so a client writing a directory keeps getting
// leases on it. Grant answers the session's break sequence number
// at the moment of the grant; a client must refuse a grant whose number
// is below a break it has already received (the break may concern it).
//
// Changes: Break, before the change is applied, marks the buckets
// changing (no grants until Done), removes every other holder, queues a
// break for each and waits until each holder acknowledged it or its
// lease expired. The change is then applied and Done called.
//
// Renewal: each poll renews, as it arrives, every live lease of its
// session granted within Hold (DefaultHold, a minute) for one term from
// then, and its answer says so (with the table's ID, so a client renews
// only leases this table granted, not an earlier leader's). A client
// holding leases polls about six times a term; a poll waiting longer
// than a term answers at the session's next grant, so that a client that
// held nothing here starts polling often. A lease unused for Hold ends
// with its term; the client re-reads one it uses before that.
//
// Sessions learn of breaks by polling (Poll: a long-poll request kept
// outstanding per island); the next poll acknowledges the breaks the
// previous one returned. Only a session with a poll outstanding or
// answered within PollGrace gets leases, so a client that stopped
// listening costs a writer at most one lease term, once.
//
// # Exclusive leases
//
// GrantExclusive makes a session the bucket's exclusive holder when no
// other session holds it and it was not recalled within Contended (30
// s): the holder may keep attribute changes back (client write-behind).
// Recall, before another session's read or change of the bucket, breaks
// the exclusive lease and waits like Break; other sessions' shared
// leases are not touched by a read. A recalled bucket is shared-only for
// Contended, so two clients using one directory do not recall each other
// at every request. A table with no exclusive holder answers Recall with
// an atomic load.
//
// # Time
//
// The island counts a lease from the grant; the client from when it sent
// the request, minus a margin, so the client's lease ends first as long
// as the two clocks run at about the same rate (no clock synchronisation
// is assumed). An island that starts (or a replica that becomes leader)
// cannot know the holders of leases its previous incarnation granted: it
// applies no change to a bucket until one Term after it started (Fence),
// and, when that incarnation granted exclusive leases, serves no read
// either (FencedReads).
//
// # Locks
//
// One mutex, Table.mu: buckets, sessions, the generation counter, the
// statistics and the withdrawn ranges. Whatever waits (Break, Recall,
// Withdraw, Poll, the fences) sets up under it, lets it go, then waits
// on a session's channel or a timer: it is never held across a wait.
// Nothing nests inside it but Config.Now, which is called under it (a
// test clock must not call back into the table).
package lease
