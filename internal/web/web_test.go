package web

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricsServer(t *testing.T) {
	reg := NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "atoll_test_things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Add(3)
	srv, err := NewServer("127.0.0.1:0", MetricsMux(reg), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	body := get(t, "http://"+srv.Addr()+"/metrics", http.StatusOK)
	for _, want := range []string{"atoll_test_things_total 3", "go_goroutines ", "process_resident_memory_bytes "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	get(t, "http://"+srv.Addr()+"/", http.StatusNotFound)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(ShutdownGrace + time.Second):
		t.Fatal("Run did not return after its context was done")
	}
	if _, err := http.Get("http://" + srv.Addr() + "/metrics"); err == nil {
		t.Fatal("still serving after Run returned")
	}
}

func TestNewServerAddressInUse(t *testing.T) {
	a, err := NewServer("127.0.0.1:0", http.NotFoundHandler(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := NewServer(a.Addr(), http.NotFoundHandler(), nil); err == nil {
		t.Fatal("second server on one address")
	}
}

func TestRunWith(t *testing.T) {
	// Without a server, RunWith is the role.
	boom := errors.New("boom")
	if err := RunWith(context.Background(), nil, func(context.Context) error { return boom }); err != boom {
		t.Fatalf("RunWith(nil server) = %v", err)
	}
	// The role stopping stops the server, and the role's error wins.
	srv, err := NewServer("127.0.0.1:0", http.NotFoundHandler(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := RunWith(context.Background(), srv, func(context.Context) error { return boom }); err != boom {
		t.Fatalf("RunWith = %v, want the role's error", err)
	}
	// The context ending stops both.
	srv, err = NewServer("127.0.0.1:0", http.NotFoundHandler(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	roleSawDone := false
	err = RunWith(ctx, srv, func(ctx context.Context) error {
		<-ctx.Done()
		roleSawDone = true
		return nil
	})
	if err != nil || !roleSawDone {
		t.Fatalf("RunWith = %v, role saw done %v", err, roleSawDone)
	}
}

func get(t *testing.T, url string, want int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %s, want %d", url, resp.Status, want)
	}
	return string(b)
}
