// Package devcluster starts Atoll roles as child processes of the current
// binary: `atoll dev`, the benchmarks and the multi-process tests use it so
// that a role can be killed with SIGKILL like a real server.
//
// A child is told "--addr-file PATH" and writes its listening address
// followed by a newline to PATH once it serves; Start waits for that line.
// Children get Pdeathsig=SIGKILL, so they never outlive their parent.
//
// Ports: the manager listens on ManagerListen (raft on the next port) and,
// with WebListen, serves the dashboard there; storage server i on
// StorageListen's port + i; island i on IslandListen's port + i - 1. With
// MetricsListen, every other child serves /metrics on consecutive ports
// from it, in the order storage servers, islands, NFS gateway, mount
// (Config.MetricsAddrs); each port is checked free before its child
// starts, so a port in use is a clear error naming the role.
package devcluster
