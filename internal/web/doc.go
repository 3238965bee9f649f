// Package web is the HTTP side of every Atoll role: the Prometheus
// /metrics endpoint and the small server that carries it (and, on the
// manager, the dashboard of internal/web/dashboard).
//
// Invariants:
//
//   - No global state: every process makes its own registry (NewRegistry,
//     with the Go runtime and process collectors) and hands it to the
//     packages it runs through their Config's Registerer. Nothing is
//     registered on prometheus.DefaultRegisterer and nothing happens in
//     init().
//   - A Server is bound by NewServer (so a port in use is an error before
//     the role reports itself ready) and serves only inside Run, which
//     returns after a graceful shutdown once its context is done: the
//     caller that runs it owns it and joins it. RunWith runs a role and
//     its server side by side with that rule.
//   - The endpoints are read-only views: a scrape or a dashboard poll never
//     changes what the role does.
//
// Metric names are "atoll_<role>_<what>[_<unit>]" (unit suffixes per the
// Prometheus conventions: _total for counters, _bytes, _seconds); each
// package declares its own in its metrics.go.
package web
