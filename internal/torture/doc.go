// Package torture is Atoll's randomized fault engine (Archipelago's fault
// injection, etcd's robustness suite): a whole cluster on simulated hosts
// (internal/simnet, internal/simcluster: each role in its own network
// namespace, started by the steps of docs/deploy.md), a random workload of
// several clients recorded operation by operation, a seeded schedule of
// faults, a final heal, and checks of DESIGN.md's invariants.
//
// # Faults
//
// Schedule draws from the seed, about one every Config.FaultEvery:
//
//   - kill: kill -9 of any role (manager, storage server, island, FUSE
//     mount), restarted after 1-8 s, and again every 2 s while its start
//     fails (as deploy/'s units do with Restart=on-failure: a mount
//     started while the manager is down exits);
//   - pause: SIGSTOP, SIGCONT after 1-8 s (a hung server: connections stay
//     open, nothing answers);
//   - partition: the traffic between two hosts (the clients' host "local"
//     among them) cut both ways or one way (nftables), healed after 1-8 s;
//   - corrupt: 16 bytes flipped in a fragment file of a storage server;
//   - delete: a fragment file removed;
//   - diskfull: a storage server's disk (a 1.5 GiB tmpfs of its own) filled
//     up for 1-8 s;
//   - failpoint (Config.Failpoints, a -tags failpoints binary): a role
//     restarted with one of the registered failpoints its process passes
//     armed to crash it there (storage servers: their store's puts,
//     appends, deletes and repairs; islands: transactions, moves and
//     replica appends; the manager: its cleaner; mounts and gateways:
//     the client's puts), for 2-8 s; a point that fired is counted, and
//     the role starts again without it. These come from a random stream
//     of their own, about one every 3 × FaultEvery, so a seed's other
//     faults are what they were without them.
//
// At most one fault runs on a role at a time, at most one fragment per
// stripe is damaged in a run (the policies tolerate one), and the last
// fifth of the run is quiet. The same seed and topology give the same
// schedule; the workload's timing is not replayed exactly (it races with
// real servers), so a replay reproduces the faults, not every
// interleaving.
//
// Clock jumps are not injected: nothing in a correctness path compares
// clocks of two hosts except the cleaner's grace period (a stripe younger
// than Grace by the manager's clock is never deleted), which a jump of the
// manager's clock by more than Grace would defeat. Linux time namespaces
// cannot move CLOCK_REALTIME, so this needs a fake clock in the cleaner;
// it is listed in the notes.
//
// # Workload
//
// Config.Clients client-library clients in this process (no name or
// attribute cache: Config.AttrTTL) and, with Config.Mount, one client
// through a real FUSE mount run in a loop:
//
//   - namespace operations (library clients) on 8 groups of two
//     directories /ns/gG/{x,y} with the names f0 and f1: exclusive
//     create, the write of the created file's content ("id=N", fsynced),
//     unlink, mkdir, rmdir, rename (within and across the two
//     directories, which usually live on different islands: cross-island
//     transactions), read and list. Every call, return and result goes
//     into a history;
//   - data operations (every client) under /data/cI: files of 1 B to 3 MiB
//     created and fsynced, overwritten in part and fsynced, read by any
//     client (close-to-open: a file acknowledged before the read started
//     must read back exact), unlinked.
//   - lock traffic (library clients and the mount, each in a second
//     loop): increments of 4 counter files /locks/dN/counter, each under
//     an exclusive lock taken with wait (POSIX locks on two files, flock
//     on the other two; the mount uses OFD locks and flock): read the
//     value, write value+1, fsync, confirm the lock was still held
//     (client.FS.LockCheck; through the mount a second fsync, which the
//     mount refuses under a lock it may have lost), unlock. The islands'
//     lock term is 5 s (atoll meta --lock-term), so a lock whose holder
//     was killed, hung or cut off is released during the run. Each
//     hold's times and value go into a history of holds; an increment
//     is acknowledged when its write was durable and its lock confirmed
//     after it, unknown when it failed after its write started.
//
// An operation that fails with an error that is no answer about the
// namespace (EIO, a timeout, an unreachable server, the mount being down)
// has an unknown outcome: it may or may not have taken effect, at any time
// after its call. The FUSE client caches names for a second, so its view
// is close-to-open consistent, not linearizable: it runs the data
// workload only.
//
// # Checks
//
// After the workload: every cut healed, every paused role resumed, every
// dead role restarted, every ballast file removed, and every member up
// again. Then:
//
//   - the history, with a final read and list of every name, must be
//     linearizable against the model in model.go
//     (github.com/anishathalye/porcupine, partitioned by group); a
//     violation is cut down to its shortest failing prefix and printed;
//   - every acknowledged data file reads back byte for byte through a new
//     client (lost_bytes must be 0), and no read during the run returned
//     other bytes than acknowledged or missed an acknowledged file;
//   - every corrupted fragment is also probed during the run, from two
//     seconds after its injection (for up to 90 s while its server is
//     unreachable): its server must report it sick unless a read repaired
//     it first or its stripe died; calling it sound is a violation (at
//     the end of a long run most corrupted stripes are dead, so this is
//     where detection is really measured);
//   - every corrupted fragment still on disk is reported sick by its
//     server (OpVerify, what the scrubber does) or was repaired during
//     the run; after the cleaner's repair passes every damaged fragment of
//     a live stripe has its original bytes again (repair rewrites
//     identical bytes, invariant 3);
//   - each counter's final value counts every acknowledged increment and
//     at most the unknown ones besides; no two holds of a counter prove a
//     double grant (the lock is certainly held from its grant's return
//     to the last lock check that passed; an unconfirmed hold was held
//     at least at its grant, inside its request); no two acknowledged
//     increments read the same value (a lost update), and none read
//     less than an acknowledged increment confirmed before its grant
//     wrote (lockcheck.go);
//   - `atoll fsck` is clean and a cleaner pass finds nothing left to
//     repair (every stripe fully redundant).
//
// The Report has every count; Run never returns a Report with Passed set
// unless all of the above hold. The binary of a run should be built with
// -tags failpoints,deadlock (make torture): the lock checker then turns a
// lock-order inversion anywhere in the cluster into a dead role and a
// failed run.
package torture
