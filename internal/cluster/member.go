package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
)

// MemberConfig configures RunMember.
type MemberConfig struct {
	Managers []string // any manager client addresses
	Kind     Kind
	ID       uint32 // the slot for storage
	Addr     string // the address the member serves on
	PID      int
	// Interval between heartbeats. Default 1s; keep it well below the
	// managers' DownAfter.
	Interval time.Duration
	// Stats, when set, is sampled for every heartbeat.
	Stats func() MemberStats
	// OnMap, when set, is called (from RunMember's goroutine) with every
	// newer map: after registering and whenever a heartbeat reply shows a
	// newer epoch.
	OnMap func(*Map)
	// OnContact, when set, is called (from RunMember's goroutine) after
	// every registration or heartbeat the managers' leader answered: a
	// member knows from it that the managers can take changes now.
	OnContact func()
	Logger    *slog.Logger
	// Key is the cluster key the member registers with (nil: none, for
	// in-process tests).
	Key *auth.Key
	// Reclaim makes the member register again whenever a map shows
	// another address or pid under its key: the leader of a replicated
	// island, whose key a former leader may have registered last.
	Reclaim bool
}

// Validate checks the configuration.
func (c *MemberConfig) Validate() error {
	if len(c.Managers) == 0 {
		return errors.New("cluster: member: no manager address")
	}
	k := MemberKey{c.Kind, c.ID}
	if err := ValidateKey(k); err != nil {
		return fmt.Errorf("cluster: member: %w", err)
	}
	if err := ValidateAddr(k.String(), c.Addr); err != nil {
		return fmt.Errorf("cluster: member: %w", err)
	}
	if c.PID < 0 || c.Interval < 0 {
		return fmt.Errorf("cluster: member %s: negative pid or interval", k)
	}
	return nil
}

// RunMember keeps a member registered with the manager group until ctx is
// done: it registers, heartbeats every Interval, fetches the map whenever
// a heartbeat reply carries a newer epoch and hands it to OnMap, and
// registers again if the managers forgot it. While no manager is
// reachable it retries with backoff, logging each failure. It returns nil
// when ctx is done, or an error if the managers reject the member's
// registration as malformed.
func RunMember(ctx context.Context, cfg MemberConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	key := MemberKey{cfg.Kind, cfg.ID}
	log := cfg.Logger.With("member", key.String())
	cl := NewClient(cfg.Managers, cfg.Key, log)
	defer cl.Close()

	var epoch uint64
	registered := false
	deliver := func(m *Map) {
		if m.Epoch < epoch && registered {
			return
		}
		epoch = m.Epoch
		if cfg.OnMap != nil {
			cfg.OnMap(m)
		}
		if cfg.Reclaim && registered {
			if f, ok := m.fields(key); ok && (*f.addr != cfg.Addr || *f.pid != cfg.PID) {
				log.Info("cluster: the map names another process for this member; registering again", "addr", *f.addr, "pid", *f.pid)
				registered = false
			}
		}
	}
	bo := Backoff{Min: 100 * time.Millisecond, Max: max(2*cfg.Interval, time.Second)}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		wait := cfg.Interval
		if !registered {
			m, err := cl.Register(ctx, cfg.Kind, cfg.ID, cfg.Addr, cfg.PID)
			switch {
			case err == nil:
				deliver(m)
				registered = true
				bo.Reset()
				if cfg.OnContact != nil {
					cfg.OnContact()
				}
				log.Info("cluster: registered with the manager", "epoch", m.Epoch, "leader", cl.Leader())
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, ErrBadRequest):
				return fmt.Errorf("cluster: member %s: %w", key, err)
			default:
				wait = bo.Next()
				log.Warn("cluster: cannot register with the manager; retrying", "retry_in", wait.Round(time.Millisecond), "err", err)
			}
		} else {
			var stats MemberStats
			if cfg.Stats != nil {
				stats = cfg.Stats()
			}
			r, err := cl.Heartbeat(ctx, cfg.Kind, cfg.ID, epoch, stats)
			switch {
			case err == nil:
				bo.Reset()
				if cfg.OnContact != nil {
					cfg.OnContact()
				}
				if r.Epoch > epoch {
					m, err := cl.Map(ctx, r.Epoch)
					if err != nil {
						if ctx.Err() != nil {
							return nil
						}
						log.Warn("cluster: fetching the new map", "epoch", r.Epoch, "err", err)
						wait = bo.Next()
						break
					}
					deliver(m)
				}
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, ErrUnknownMember):
				log.Warn("cluster: the manager does not know this member; registering again")
				registered = false
				wait = 0
			case errors.Is(err, ErrBadRequest):
				return fmt.Errorf("cluster: member %s: %w", key, err)
			default:
				wait = bo.Next()
				log.Warn("cluster: heartbeat failed; retrying", "retry_in", wait.Round(time.Millisecond), "err", err)
			}
		}
		t.Reset(wait)
	}
}
