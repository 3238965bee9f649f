// Package simnet puts the roles of a cluster on simulated hosts: each host
// is a Linux network namespace with its own address, joined to the others
// by a veth pair on one bridge, so roles talk over real interfaces and
// real TCP exactly as on separate machines, and the network between
// chosen hosts can be cut.
//
// # Layout
//
// New makes, for a run named R (a few characters, unique among runs that
// exist at the same time):
//
//   - a bridge "atb-R" in the caller's namespace with the address
//     10.99.S.1/24, S a free subnet number; the caller (a test, `atoll
//     torture`) is on the net at that address, so library clients, FUSE
//     mounts and NFS clients started by the caller reach every host;
//   - per host i (0-based) a namespace "atl-R-NAME" holding "eth0" with
//     10.99.S.(i+2)/24 and lo, its peer "atv-R-i" on the bridge.
//
// Host.Command runs a program inside a host's network namespace with
// nsenter --net (only the network namespace changes: a FUSE mount a role
// makes there is visible to the caller). A role must bind and advertise
// the address it is given; nothing here rewrites 127.0.0.1.
//
// # Faults
//
// Partition cuts the traffic between two hosts, both ways or one way, with
// an nftables table "atoll_simnet" inside the namespaces concerned (the
// caller's namespace is never touched: a cut between the caller and a host
// is made on the host's side). Heal and HealAll remove the rules.
// Established TCP connections see their packets dropped, exactly as
// behind a failed switch port: they time out, they are not reset.
//
// # Budgets
//
// Every host of an isolated net also gets a cgroup under the cgroup v1
// cpu, cpuacct and blkio controllers (/sys/fs/cgroup/C/atoll-simnet/R-NAME)
// and Host.Command starts its program inside them (a shell writes its own
// pid to cgroup.procs and execs, so the pid is the program's). SetBudget
// turns a host into a small machine: a CPU quota in cores (CFS quota over
// 100 ms), a disk rate and IOPS cap (blkio throttle on the disk holding
// the host's data directory; cgroup v1 charges reads, direct writes and
// fsync's writeback, not background writeback), and a link rate each way
// (tc tbf on eth0 and on its veth peer). A link delay needs tc's netem;
// on a kernel without it (this project's CI VM) SetBudget refuses the
// delay with ErrNoBudgets and links keep the veth's own tens of µs.
// Hosts on one filesystem share its journal, so their fsyncs wait for
// each other whatever their budgets; GiveDisk gives a host a disk of its
// own (a sparse image under /dev/shm/atoll-simnet on a loop device with a
// fresh ext4, mounted at its data directory), which its disk budget then
// throttles; Close unmounts and deletes it.
// Usage reads a host's CPU-seconds, disk bytes and link bytes;
// ReadCPUTimes and IdleSince give the whole machine's idle fraction, and
// CheckQuotas refuses budgets that add up to more than a share of the
// machine, so a result is bound by the modelled hosts, not by the box.
//
// # Without namespaces
//
// Creating namespaces needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN),
// iproute2, nsenter and nft. When any is missing, or Config.Loopback is
// set, New falls back to loopback addresses 127.99.S.(i+2) (every 127/8
// address reaches lo on Linux), Reason says why, and Partition returns
// ErrNoPartitions: everything but the partition faults still runs.
//
// # Cleanup
//
// Close deletes the namespaces, the bridge and the cgroups (killing what
// still runs in them). A run killed before Close
// leaves them behind; New deletes leftovers of a run with the same name
// first, and CleanupStale deletes every leftover of any run.
package simnet
