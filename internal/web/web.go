package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a fresh registry holding the Go runtime and process
// collectors: one per process, never the global default.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// MetricsHandler serves reg in the Prometheus text (or negotiated)
// exposition format. A collector that fails is reported in the response
// (HTTP 500) rather than silently dropped.
func MetricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:          reg, // counts its own scrapes and errors
		ErrorHandling:     promhttp.HTTPErrorOnError,
		EnableOpenMetrics: false,
	})
}

// MetricsMux is a handler serving reg at /metrics and 404 elsewhere: what
// every role's --metrics-listen serves.
func MetricsMux(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", MetricsHandler(reg))
	return mux
}

// ShutdownGrace bounds how long Run waits for requests in progress once
// its context is done.
const ShutdownGrace = 5 * time.Second

// Server is an HTTP server bound to its address.
type Server struct {
	ln  net.Listener
	srv *http.Server
	log *slog.Logger
}

// NewServer binds addr (host:port; port 0 picks one) for handler h. It
// does not serve until Run.
func NewServer(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	if h == nil {
		return nil, errors.New("web: nil handler")
	}
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("web: listen %s: %w", addr, err)
	}
	return &Server{
		ln:  ln,
		log: log,
		srv: &http.Server{
			Handler: h,
			// Slow or idle clients must not pin goroutines forever.
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      60 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
	}, nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Run serves until ctx is done, then shuts down gracefully (at most
// ShutdownGrace for requests in progress) and returns nil; a failure to
// serve is returned at once.
func (s *Server) Run(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(s.ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("web: serving %s: %w", s.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		s.log.Warn("web: shutdown", "addr", s.Addr(), "err", err)
		_ = s.srv.Close()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("web: serving %s: %w", s.Addr(), err)
	}
	return nil
}

// Close releases the listener of a Server whose Run was never called.
func (s *Server) Close() error { return s.ln.Close() }

// RunWith runs a role (run) and, when srv is not nil, its HTTP server side
// by side until ctx is done or either stops; then it stops the other and
// waits for both. It returns the role's error, else the server's.
func RunWith(ctx context.Context, srv *Server, run func(context.Context) error) error {
	if srv == nil {
		return run(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	webDone := make(chan error, 1)
	go func() {
		err := srv.Run(ctx)
		if err != nil {
			srv.log.Error("web: server stopped; stopping the role", "err", err)
		}
		webDone <- err
		cancel()
	}()
	err := run(ctx)
	cancel()
	if werr := <-webDone; err == nil {
		err = werr
	}
	return err
}
