// Package devcluster starts Atoll roles as child processes of the current
// binary: `atoll dev`, the benchmarks and the multi-process tests use it so
// that a role can be killed with SIGKILL like a real server.
//
// A child is told "--addr-file PATH" and writes its listening address
// followed by a newline to PATH once it serves; Start waits for that line.
// Children get Pdeathsig=SIGKILL, so they never outlive their parent.
package devcluster
