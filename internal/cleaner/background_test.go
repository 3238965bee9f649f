package cleaner

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The background cleaner runs only while its manager leads: it starts
// when the lead comes, is stopped when it goes, starts again after an
// error, and ends with its context.
func TestBackgroundRunsOnlyWhileLeading(t *testing.T) {
	var leader atomic.Bool
	b, err := NewBackground(BackgroundConfig{Managers: []string{"127.0.0.1:1"}, IsLeader: leader.Load, Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b.follow, b.leading = 5*time.Millisecond, 5*time.Millisecond
	var running, starts atomic.Int32
	fail := make(chan error, 1)
	b.lead = func(ctx context.Context) error {
		starts.Add(1)
		running.Add(1)
		defer running.Add(-1)
		select {
		case err := <-fail:
			return err
		case <-ctx.Done():
			return nil
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: never (running %d, starts %d)", what, running.Load(), starts.Load())
			}
		}
	}

	time.Sleep(50 * time.Millisecond)
	if starts.Load() != 0 {
		t.Fatalf("a follower ran the cleaner %d times", starts.Load())
	}
	leader.Store(true)
	eventually("runs once leading", func() bool { return running.Load() == 1 })
	leader.Store(false)
	eventually("stops when the lead is lost", func() bool { return running.Load() == 0 })
	time.Sleep(50 * time.Millisecond)
	if n := starts.Load(); n != 1 {
		t.Fatalf("started %d times while following", n)
	}
	leader.Store(true)
	eventually("runs again when leading again", func() bool { return starts.Load() == 2 && running.Load() == 1 })
	fail <- errors.New("storage unreachable")
	eventually("starts over after an error", func() bool { return starts.Load() == 3 && running.Load() == 1 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if running.Load() != 0 {
		t.Fatal("the cleaner outlived Run")
	}
	if b.Jobs() != nil {
		t.Fatalf("jobs without a running cleaner: %v", b.Jobs())
	}
}

func TestBackgroundConfig(t *testing.T) {
	yes := func() bool { return true }
	for _, tc := range []struct {
		cfg  BackgroundConfig
		want string
	}{
		{BackgroundConfig{Interval: time.Second, Managers: []string{"a"}}, "IsLeader"},
		{BackgroundConfig{IsLeader: yes, Interval: -time.Second}, "negative"},
		{BackgroundConfig{IsLeader: yes, Interval: time.Second}, "no manager"},
		{BackgroundConfig{IsLeader: yes, Interval: time.Second, Managers: []string{"a"}, Cleaner: Config{Grace: time.Second}}, "grace"},
	} {
		if _, err := NewBackground(tc.cfg); err == nil || !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrBadConfig about %q", tc.cfg, err, tc.want)
		}
	}
	// Interval 0: no cleaner; Run waits for its context.
	b, err := NewBackground(BackgroundConfig{IsLeader: yes})
	if err != nil {
		t.Fatal(err)
	}
	b.lead = func(context.Context) error { t.Error("a disabled background cleaner ran"); return nil }
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := b.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestStatusSummary(t *testing.T) {
	st := Status{Passes: 3, Last: Report{Stripes: 10, Bytes: 3 << 20, LiveBytes: 1 << 20, DeletedStripes: 2, Unreachable: []uint16{4}}, Totals: Report{CopiedBytes: 1536}}
	got := st.Summary()
	for _, want := range []string{"3 passes", "10 stripes, 3.0MiB on disk, 1.0MiB live", "deleted 2 stripes", "in all: copied 1.5KiB", "unreachable slots [4]"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary %q lacks %q", got, want)
		}
	}
}
