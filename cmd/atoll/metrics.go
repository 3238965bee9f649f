package main

import (
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/atoll-fs/atoll/internal/web"
)

// metricsServer binds a role's --metrics-listen address to serve reg at
// /metrics; nil (and no error) when addr is empty. The role runs it with
// web.RunWith.
func metricsServer(addr string, reg *prometheus.Registry, log *slog.Logger) (*web.Server, error) {
	if addr == "" {
		return nil, nil
	}
	ms, err := web.NewServer(addr, web.MetricsMux(reg), log)
	if err != nil {
		return nil, usageErr("--metrics-listen", err)
	}
	log.Info("metrics: serving", "url", "http://"+ms.Addr()+"/metrics")
	return ms, nil
}

// serverAddr is ms's bound address, "" for no server.
func serverAddr(ms *web.Server) string {
	if ms == nil {
		return ""
	}
	return ms.Addr()
}

// closeServer releases a server that will not run.
func closeServer(ms *web.Server) {
	if ms != nil {
		_ = ms.Close()
	}
}

// advertisedMetrics is the /metrics address a role reports with its
// heartbeats (status, the dashboard): ms's bound address, except that a
// wildcard host (--metrics-listen :9100 serves every interface) is
// replaced by the host of roleAddr, the address the role registered, so
// that what is shown is reachable from another machine. "" for no server.
func advertisedMetrics(ms *web.Server, roleAddr string) string {
	addr := serverAddr(ms)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if rh, _, err := net.SplitHostPort(roleAddr); err == nil && rh != "" {
			return net.JoinHostPort(rh, port)
		}
	}
	return addr
}
