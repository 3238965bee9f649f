package islandload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
)

// BalancerConfig configures a Balancer.
type BalancerConfig struct {
	// Client reaches the managers; Key the islands.
	Client *cluster.Client
	Key    *auth.Key
	// Leader reports whether this manager leads (only the leader acts).
	Leader func() bool
	// Every is how often load is sampled (each sample lasts Window).
	Every, Window time.Duration
	// Threshold is the spread of load (standard deviation over mean)
	// above which the islands count as unbalanced; 0 turns the balancer
	// off. Sustain is how many samples in a row it must stay above it
	// before entries move (a passing burst moves nothing).
	Threshold float64
	Sustain   int
	// MinOps is the total operations per second below which load is too
	// small to balance.
	MinOps float64
	// MaxMoves bounds the entries one round moves.
	MaxMoves int
	Logger   *slog.Logger
}

// Defaults for the manager's balancer.
const (
	DefaultEvery     = time.Minute
	DefaultWindow    = 10 * time.Second
	DefaultThreshold = 0.5
	DefaultSustain   = 5
	DefaultMinOps    = 50
	DefaultMaxMoves  = 8
)

// Validate checks the configuration and fills in defaults.
func (c *BalancerConfig) Validate() error {
	if c.Threshold < 0 {
		return errors.New("islandload: threshold below 0")
	}
	if c.Client == nil || c.Leader == nil {
		return errors.New("islandload: balancer without a client or leader check")
	}
	if c.Every <= 0 {
		c.Every = DefaultEvery
	}
	if c.Window <= 0 || c.Window >= c.Every {
		c.Window = min(DefaultWindow, c.Every/2)
	}
	if c.Sustain <= 0 {
		c.Sustain = DefaultSustain
	}
	if c.MaxMoves <= 0 {
		c.MaxMoves = DefaultMaxMoves
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Balancer moves table entries from loaded islands to idle ones when the
// islands' load stays unbalanced (the manager runs one; it acts only
// while its manager leads).
type Balancer struct {
	cfg   BalancerConfig
	above int
}

// NewBalancer returns a balancer; cfg must Validate.
func NewBalancer(cfg BalancerConfig) (*Balancer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Balancer{cfg: cfg}, nil
}

// Run samples every Every until ctx ends.
func (b *Balancer) Run(ctx context.Context) error {
	if b.cfg.Threshold == 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(b.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if !b.cfg.Leader() {
			b.above = 0
			continue
		}
		if err := b.Round(ctx); err != nil && ctx.Err() == nil {
			b.cfg.Logger.Warn("island balancer", "err", err)
		}
	}
}

// Round samples the load once and records entry moves if it has been
// above the threshold for Sustain rounds in a row.
func (b *Balancer) Round(ctx context.Context) error {
	m, err := b.cfg.Client.Map(ctx, 0)
	if err != nil {
		return err
	}
	if !m.Formatted || len(m.Moves) > 0 {
		return nil // moves pending: their effect is not measurable yet
	}
	load, err := Sample(ctx, m, b.cfg.Key, b.cfg.Window)
	if err != nil {
		return err
	}
	var total float64
	for _, v := range load.Islands {
		total += v
	}
	spread := load.Spread()
	if total < b.cfg.MinOps || spread <= b.cfg.Threshold || len(load.Islands) < 2 {
		b.above = 0
		return nil
	}
	if b.above++; b.above < b.cfg.Sustain {
		b.cfg.Logger.Info("island balancer: islands unbalanced", "spread", spread, "rounds", b.above, "of", b.cfg.Sustain)
		return nil
	}
	b.above = 0
	moves, err := Plan(m, load, b.cfg.Threshold/2)
	if err != nil {
		return err
	}
	if len(moves) > b.cfg.MaxMoves {
		moves = moves[:b.cfg.MaxMoves]
	}
	if len(moves) == 0 {
		return nil
	}
	if _, err := b.cfg.Client.MoveEntries(ctx, moves); err != nil {
		return fmt.Errorf("island balancer: %w", err)
	}
	b.cfg.Logger.Info("island balancer: moving entries", "spread", spread, "ops_per_s", load.Islands, "moves", len(moves))
	return nil
}
