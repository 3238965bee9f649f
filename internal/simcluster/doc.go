// Package simcluster starts an Atoll cluster on simulated hosts
// (internal/simnet): every role is a real atoll process in its own
// host's network namespace, binding and advertising that host's address,
// so the roles meet over real interfaces exactly as on separate machines
// and the fault engine can kill, pause, restart and partition them.
//
// # The deployment guide, run
//
// Start follows docs/deploy.md step by step, with the same subcommands and
// the same flags in the same order as the systemd units under deploy/
// (TestDeployUnitsMatch fails when they drift apart; plan is the one
// place the command lines are made):
//
//  1. the manager on host "m0": --listen m0:7300, --raft-listen m0:7301,
//     --web-listen m0:7380 (dashboard), --metrics-listen m0:9100;
//  2. storage server i on host "si" as role "storagei", slot i, on :7400;
//  3. island i on host "ii" as role "islandi", id i, on :7500 (an island
//     serves only once the namespace is formatted);
//  4. `atoll format --cluster m0:7300 --islands N --storage N`, run on m0;
//  5. the NFS gateway on host "gw" (role "nfs", :2049), when Config.NFS;
//  6. the FUSE mount on host "cl" (role "mount"), when Config.Mount.
//
// Every role also serves /metrics on its host's port 9100. Each role's
// data directory is Config.Dir/<role name> (the NFS gateway and the mount
// keep no data: their Role.Dir is empty); its addr file (the harness's
// only flag the units do not have, --addr-file, how Start knows a role
// serves) is Config.Dir/<role name>.addr. Config.ManagerArgs and
// Config.IslandArgs are added to the manager's and every island server's
// command line (timings a test wants shorter).
//
// Start returns once every role serves, the namespace is formatted, and
// every member is registered and up in the map with its own address.
//
// For the scale model (`atoll bench scale`), Config.Budgets makes each
// host a small machine by its role's kind (simnet.SetBudget: CPU quota,
// disk rate on its data directory, link rate), and Config.OwnDisks gives
// every role with a data directory a disk of its own (simnet.GiveDisk),
// each applied just before the role starts.
//
// # Machines added while serving
//
// Config.SpareStorage and Config.SpareIslandServers make hosts for
// machines added later: Cluster.AddStorage starts the next storage server
// (slot Storage, Storage+1, ...; up in the map when it returns) and
// Cluster.AddIslandServer the next island server with --join instead of
// the placement flags, as docs/deploy.md adds one; it holds no replica
// until `atoll island create` or `atoll island server add` places one on
// it (Role.Joined: WaitMembers does not wait for it).
//
// # Roles
//
// A Role is one process. Kill (SIGKILL), Pause (SIGSTOP), Resume
// (SIGCONT) and Restart (the same command line, after an exit) act on it;
// Cluster.Stop stops them all (SIGTERM, then SIGKILL after 10 s) in
// reverse start order and detaches the FUSE mount if it is still there. A
// mount killed with SIGKILL leaves its mountpoint stale, as on a real
// machine; Restart detaches it first.
//
// The mount runs in the client host's network namespace but in the
// caller's mount namespace (nsenter --net changes only the network), so
// the caller reads and writes the namespace at Config.Mount.
//
// Processes get Pdeathsig=SIGKILL (internal/devcluster), so a dying test
// takes its cluster with it; a stale FUSE mount it leaves is detached by
// the next Start on the same mountpoint.
package simcluster
