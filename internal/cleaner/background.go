package cleaner

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/layout"
)

// BackgroundConfig configures the cleaner a manager process runs while it
// is the raft leader.
type BackgroundConfig struct {
	// Managers are the addresses the cleaner's client dials (the
	// manager's own).
	Managers []string
	// Key is the manager's cluster key.
	Key *auth.Key
	// IsLeader reports whether this manager leads now. The cleaner runs
	// only while it does: one cleaner in the cluster, started over from
	// the durable state by each new leader.
	IsLeader func() bool
	// Interval between passes; 0 means no background cleaner (Run only
	// waits).
	Interval time.Duration
	// Cleaner is the rest of the cleaner's settings (Data, FS and
	// Interval are filled in).
	Cleaner Config
	Logger  *slog.Logger
}

// Background runs a Cleaner in the manager's leader: it starts one when
// this manager becomes leader and stops it when the lead is lost.
type Background struct {
	cfg BackgroundConfig
	log *slog.Logger
	cur atomic.Pointer[Cleaner] // while leading
	// lead runs while this manager leads (b.leadOnce; tests replace it).
	lead func(ctx context.Context) error
	// How often leadership is checked while following and while leading.
	follow, leading time.Duration
}

// NewBackground checks cfg. The cleaner's grace is checked here, at
// start, rather than at the first pass after an election.
func NewBackground(cfg BackgroundConfig) (*Background, error) {
	if cfg.IsLeader == nil {
		return nil, fmt.Errorf("%w: background cleaner: IsLeader is required", ErrBadConfig)
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("%w: background cleaner: negative interval", ErrBadConfig)
	}
	if cfg.Interval > 0 && len(cfg.Managers) == 0 {
		return nil, fmt.Errorf("%w: background cleaner: no manager address", ErrBadConfig)
	}
	grace := cfg.Cleaner.Grace
	if grace == 0 {
		grace = DefaultGrace
	}
	if err := CheckGrace(grace, cfg.Cleaner.UnsafeGrace); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Background{cfg: cfg, log: cfg.Logger, follow: 5 * time.Second, leading: 2 * time.Second}
	b.lead = b.leadOnce
	return b, nil
}

// Status is the running cleaner's, or an idle one's.
func (b *Background) Status() Status {
	if c := b.cur.Load(); c != nil {
		return c.Status()
	}
	return Status{}
}

// Jobs reports the cleaner to the manager's Status (`atoll status`, the
// dashboard): nothing unless it runs here.
func (b *Background) Jobs() []cluster.Job {
	c := b.cur.Load()
	if c == nil {
		return nil
	}
	st := c.Status()
	return []cluster.Job{{Name: "cleaner", Phase: st.Phase, Done: st.Done, Total: st.Total, ETASeconds: st.ETASeconds, Summary: st.Summary()}}
}

// Summary is a one-line account of the passes so far.
func (st *Status) Summary() string {
	l, tot := &st.Last, &st.Totals
	size := func(n int64) string { return layout.HumanSize(uint64(n)) }
	sum := fmt.Sprintf("%d passes; last: %d stripes, %s on disk, %s live; deleted %d stripes, copied %s, repaired %d (%d failed, %d waiting)",
		st.Passes, l.Stripes, size(l.Bytes), size(l.LiveBytes), l.DeletedStripes, size(l.CopiedBytes),
		l.Repaired, l.RepairFailed, l.RepairPending)
	sum += fmt.Sprintf("; in all: copied %s, repaired %d", size(tot.CopiedBytes), tot.Repaired)
	if len(l.Unreachable) > 0 {
		sum += fmt.Sprintf("; unreachable slots %v", l.Unreachable)
	}
	if l.DrainRemaining > 0 {
		sum += fmt.Sprintf("; %d stripes wait to leave drained or lost slots (too few other servers for their width)", l.DrainRemaining)
	}
	if l.StorageImbalance > 0 {
		sum += fmt.Sprintf("; storage imbalance %.2f, rebalanced %s in all, about %s still to move", l.StorageImbalance,
			size(tot.RebalancedBytes), size(l.RebalanceRemaining))
	}
	return sum
}

// Run returns when ctx is done. While this manager leads it runs the
// cleaner; an error ends that cleaner (it is logged) and the next check
// starts another.
func (b *Background) Run(ctx context.Context) error {
	if b.cfg.Interval <= 0 {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(b.follow)
	defer tick.Stop()
	for {
		if b.cfg.IsLeader() {
			if err := b.whileLeading(ctx); err != nil && ctx.Err() == nil {
				b.log.Warn("manager: cleaner stopped", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// whileLeading runs b.lead until it returns, ctx is done or the lead is
// lost (then it cancels it and waits for it).
func (b *Background) whileLeading(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.lead(ctx) }()
	t := time.NewTicker(b.leading)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
			if !b.cfg.IsLeader() {
				cancel()
				return <-done
			}
		}
	}
}

// leadOnce dials the cluster and runs a Cleaner until ctx is done.
func (b *Background) leadOnce(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, err := connect.DialWhenFormatted(ctx, b.cfg.Managers, b.cfg.Key, b.log)
	if err != nil {
		return err
	}
	defer conn.Close()
	// The map moves on while the cleaner runs (a storage server joins,
	// goes down, drains): its data client follows.
	var watch sync.WaitGroup
	defer watch.Wait()
	defer cancel()
	watch.Add(1)
	go func() {
		defer watch.Done()
		conn.Watch(ctx, 5*time.Second)
	}()
	cfg := b.cfg.Cleaner
	cfg.Data, cfg.FS, cfg.Interval = conn.Data, conn.FS, b.cfg.Interval
	if cfg.Logger == nil {
		cfg.Logger = b.log.With("role", "cleaner")
	}
	c, err := New(cfg)
	if err != nil {
		return err
	}
	b.cur.Store(c)
	defer b.cur.Store(nil)
	return c.Run(ctx)
}
