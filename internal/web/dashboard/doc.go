// Package dashboard is the manager's web page: a live view of the cluster
// map, served on the manager's --web-listen next to its /metrics.
//
// Routes:
//
//	GET /             the page: one self-contained HTML document (inline
//	                  CSS and JavaScript, no external assets, fonts or
//	                  CDNs), embedded in the binary, with the current view
//	                  inlined so it renders before the first poll
//	GET /api/cluster  the view as JSON (View); the page polls it every 1.5s
//	GET /metrics      the manager's Prometheus registry
//
// The view is built from one manager.Snapshot: the map, the raft view and,
// on the leader, the heartbeat table with each member's cumulative
// counters and the rates derived from their history. A follower answers
// with its replicated map only (no heartbeats, rates or throughput;
// raft.heartbeats is false), which the page says.
//
// Stable hooks for tests and scripts: every member row of the page is a
// <tr data-member="KIND-ID" data-state="STATE"> (e.g. storage-0, island-1,
// gateway-123) whose state cell holds the state's name ("up", "down",
// "draining", "out") in an element of class "badge STATE"; <body> carries
// data-polls, the number of successful polls, and data-epoch.
package dashboard
