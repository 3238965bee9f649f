// Package raftlog sends hashicorp/raft's logs (an hclog.Logger) to a
// *slog.Logger, for the manager group and replicated islands. raft's info
// messages (state transitions, replication start) become debug: the
// users log the transitions that matter themselves.
package raftlog
