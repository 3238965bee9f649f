package cleaner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/lockcheck"
)

// Defaults.
const (
	DefaultGrace      = 10 * time.Minute
	DefaultRate       = 64 << 20 // bytes copied per second
	DefaultMaxLive    = 0.75
	DefaultCopyBudget = 1 << 30
	DefaultInterval   = 30 * time.Second
	DefaultFreeBelow  = 0.2
	DefaultShare      = 0.2
	// MinGrace is the shortest grace Validate accepts: a client commits
	// its blocks within client.MaxCommitDelay of appending them, and a
	// stripe deleted before that loses acknowledged writes (the fault
	// engine lost acked bytes with 20 s). The minute covers clock skew
	// between the writer and the servers' creation times.
	MinGrace = client.MaxCommitDelay + time.Minute
	// MinRate is the copy rate Share never lowers Rate below, so a quiet
	// cluster (small observed peak) still gets cleaned.
	MinRate = 8 << 20
)

// Failpoints, in the order a copy reaches them.
const (
	FailAfterCopy   = "cleaner.afterCopy"   // copies durable, no delta sent
	FailAfterDeltas = "cleaner.afterDeltas" // deltas applied, old stripe not deleted
	FailMidDelete   = "cleaner.midDelete"   // one fragment of the old stripe deleted
)

// ErrBadConfig is returned by Config.Validate.
var ErrBadConfig = errors.New("cleaner: bad configuration")

// Config configures a Cleaner.
type Config struct {
	Data *client.Client
	FS   *client.FS
	// Grace is the age below which no stripe is deleted: its writer may
	// not have committed its blocks yet. It must exceed the clients'
	// client.MaxCommitDelay by a wide margin. Default 10m; at least
	// MinGrace unless UnsafeGrace.
	Grace time.Duration
	// UnsafeGrace accepts a Grace below MinGrace. Only for a cluster no
	// client is writing to (tests, a drain after every writer stopped):
	// otherwise it deletes stripes whose commits are still coming.
	UnsafeGrace bool
	// Rate bounds the bytes copied per second (read plus written), so
	// foreground work keeps most of the disks. Default 64 MiB/s.
	Rate int64
	// Share, with Capacity, bounds copying further to this fraction of
	// what the storage servers have been seen to move (the foreground
	// loses at most about this share of a saturated cluster's
	// throughput). Default 0.2; the rate never drops below MinRate.
	Share float64
	// Capacity, if set, returns the storage servers' peak observed
	// throughput (read plus written bytes per second, summed over the
	// cluster; 0 if unknown). The manager's cleaner uses its heartbeat
	// history. It is called with none of the cleaner's locks held and
	// may call back into Status.
	Capacity func() float64
	// MaxLive is the highest live fraction of a stripe worth copying.
	MaxLive float64
	// CopyBudget bounds the live bytes one pass copies. Default 1 GiB.
	CopyBudget int64
	// Interval between passes of Run. Default 30s.
	Interval time.Duration
	// FreeBelow: Run copies (not only deletes) when any storage server's
	// free fraction falls below it. Default 0.2.
	FreeBelow float64
	// RebuildAfter: Run drains a slot that has been unreachable this long
	// (its data is rebuilt onto the others). 0 disables. A replacement
	// server on the slot is filled by repair instead.
	RebuildAfter time.Duration
	// Rebalance is the tolerance of Run's passes for uneven storage slots
	// (PassOptions.Rebalance): 0 means DefaultTolerance, a negative value
	// turns rebalancing off.
	Rebalance float64
	// Parallel repairs and deletes. Default 8.
	Parallel int
	Faults   *faults.Set
	Logger   *slog.Logger
	Now      func() time.Time
}

// CheckGrace refuses a grace below MinGrace unless unsafe is set.
func CheckGrace(grace time.Duration, unsafe bool) error {
	if grace < MinGrace && !unsafe {
		return fmt.Errorf("%w: grace %v is shorter than the clients' commit window plus a margin (%v): stripes whose writers have not committed yet would be deleted, losing acknowledged data", ErrBadConfig, grace, MinGrace)
	}
	return nil
}

// Validate checks the configuration and fills defaults.
func (c *Config) Validate() error {
	if c.Data == nil || c.FS == nil {
		return fmt.Errorf("%w: Data and FS are required", ErrBadConfig)
	}
	if c.Grace < 0 || c.Rate < 0 || c.CopyBudget < 0 || c.Interval < 0 || c.RebuildAfter < 0 {
		return fmt.Errorf("%w: negative duration or size", ErrBadConfig)
	}
	if c.MaxLive < 0 || c.MaxLive > 1 || c.FreeBelow < 0 || c.FreeBelow > 1 || c.Share < 0 || c.Share > 1 || c.Rebalance > 1 {
		return fmt.Errorf("%w: fractions must be within 0..1", ErrBadConfig)
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if err := CheckGrace(c.Grace, c.UnsafeGrace); err != nil {
		return err
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.MaxLive == 0 {
		c.MaxLive = DefaultMaxLive
	}
	if c.Share == 0 {
		c.Share = DefaultShare
	}
	if c.CopyBudget == 0 {
		c.CopyBudget = DefaultCopyBudget
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.FreeBelow == 0 {
		c.FreeBelow = DefaultFreeBelow
	}
	if c.Parallel <= 0 {
		c.Parallel = 8
	}
	if c.Rebalance == 0 {
		c.Rebalance = DefaultTolerance
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// PassOptions selects the work of one pass.
type PassOptions struct {
	Copy   bool     // copy live data out of sparse stripes (cost-benefit)
	Drain  []uint16 // move every live block off these slots
	Repair bool     // rebuild missing fragments on reachable slots
	// Rebalance, when above 0, moves old data off the fullest storage
	// slots until every slot's used bytes are within this fraction of the
	// mean (a server added to the cluster fills up; PlanRebalance).
	Rebalance float64
	// DryRun only surveys and plans: it deletes, repairs and moves
	// nothing, and reports what the pass would do (the stripes to delete
	// and, with Rebalance, the rebalancing plan).
	DryRun bool
	// Progress, if set, is called as work advances (phase, done, total).
	Progress func(phase string, done, total int)
}

// Report is what a pass found and did.
type Report struct {
	Stripes        int      `json:"stripes"`
	Fragments      int      `json:"fragments"`
	Bytes          int64    `json:"bytes"`      // on disk, all fragments found
	LiveBytes      int64    `json:"live_bytes"` // summed over islands
	Unreachable    []uint16 `json:"unreachable_slots,omitempty"`
	DeletedStripes int      `json:"deleted_stripes"`
	DeletedBytes   int64    `json:"deleted_bytes"`
	// Waiting are dead stripes (nothing points at them) younger than the
	// grace period, which a pass leaves for later: their writers may still
	// commit. WaitingSeconds is when the first of them may go; Grace the
	// grace period, in seconds.
	Waiting        int     `json:"waiting_stripes"`
	WaitingBytes   int64   `json:"waiting_bytes"`
	WaitingSeconds float64 `json:"waiting_first_in_seconds,omitempty"`
	Grace          float64 `json:"grace_seconds"`
	CopiedStripes  int     `json:"copied_stripes"`
	CopiedBytes    int64   `json:"copied_bytes"`
	MovedBlocks    int     `json:"moved_blocks"`
	RejectedBlocks int     `json:"rejected_blocks"` // a writer won: the copy is dead
	Repaired       int     `json:"repaired_fragments"`
	RepairFailed   int     `json:"repair_failed"`
	RepairPending  int     `json:"repair_pending"` // missing on unreachable slots
	DrainRemaining int     `json:"drain_remaining"`
	// Storage balance: max |used − mean| / mean over the storage slots at
	// the start of the pass; the stripes and live bytes this pass moved to
	// even them out, and the bytes estimated still to move after it.
	StorageImbalance   float64 `json:"storage_imbalance"`
	RebalancedStripes  int     `json:"rebalanced_stripes"`
	RebalancedBytes    int64   `json:"rebalanced_bytes"`
	RebalanceRemaining int64   `json:"rebalance_remaining_bytes"`
	// A dry run's plan: the stripes and live bytes it would move to even
	// out the slots, off which slots, and the imbalance expected after;
	// and the dead stripes it would delete.
	PlannedMoves     int      `json:"planned_moves,omitempty"`
	PlannedBytes     int64    `json:"planned_bytes,omitempty"`
	PlannedAvoid     []uint16 `json:"planned_avoid,omitempty"`
	PlannedImbalance float64  `json:"planned_imbalance,omitempty"`
	PlannedDeletes   int      `json:"planned_deletes,omitempty"`
	DryRun           bool     `json:"dry_run,omitempty"`
	Errors           []string `json:"errors,omitempty"`
	Seconds          float64  `json:"seconds"`
	// Forgotten counts the islands' live counters of deleted stripes
	// dropped at the end of the pass (they would pile up forever).
	Forgotten int `json:"forgotten_counters,omitempty"`

	deleted []fragment.StripeID // stripes this pass deleted
}

// add sums the counters of r into t (the inventory figures are the last
// pass's, not sums).
func (t *Report) add(r *Report) {
	t.Stripes, t.Fragments, t.Bytes, t.LiveBytes = r.Stripes, r.Fragments, r.Bytes, r.LiveBytes
	t.DeletedStripes += r.DeletedStripes
	t.DeletedBytes += r.DeletedBytes
	t.Waiting, t.WaitingBytes, t.WaitingSeconds, t.Grace = r.Waiting, r.WaitingBytes, r.WaitingSeconds, r.Grace
	t.CopiedStripes += r.CopiedStripes
	t.CopiedBytes += r.CopiedBytes
	t.MovedBlocks += r.MovedBlocks
	t.RejectedBlocks += r.RejectedBlocks
	t.Repaired += r.Repaired
	t.RepairFailed += r.RepairFailed
	t.RepairPending = r.RepairPending
	t.DrainRemaining = r.DrainRemaining
	t.StorageImbalance, t.RebalanceRemaining = r.StorageImbalance, r.RebalanceRemaining
	t.RebalancedStripes += r.RebalancedStripes
	t.RebalancedBytes += r.RebalancedBytes
	t.Seconds += r.Seconds
}

// Cleaner runs passes. Passes are serialised; concurrent cleaners (a
// manager's and an operator's `atoll clean`) are safe but waste work.
type Cleaner struct {
	cfg Config
	log *slog.Logger
	// pass is a token (capacity 1) serialising passes. It is a channel, not
	// a mutex, because a pass holds it across calls into the islands and
	// storage servers: a waiting Pass gives up when its ctx ends, and no
	// status path ever waits for it.
	pass chan struct{}
	kick chan struct{} // Kick -> Run, never closed

	mu struct {
		lockcheck.Mutex
		geom        map[fragment.StripeID]geom // committed stripes (immutable)
		unreachable map[uint16]time.Time       // first seen unreachable
		capacity    float64                    // Config.Capacity's last answer
		capAt       time.Time
		last        Report
		totals      Report // summed over every pass of this Cleaner
		passes      int
		running     string // phase of the pass in progress
		done, total int
		phaseStart  time.Time
	}
}

// New returns a Cleaner.
func New(cfg Config) (*Cleaner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Cleaner{cfg: cfg, log: cfg.Logger}
	c.mu.geom = map[fragment.StripeID]geom{}
	c.mu.unreachable = map[uint16]time.Time{}
	c.kick = make(chan struct{}, 1)
	c.pass = make(chan struct{}, 1)
	return c, nil
}

// Status is the cleaner's progress for status displays and metrics.
type Status struct {
	Phase string `json:"phase"` // "" when idle
	Done  int    `json:"done"`
	Total int    `json:"total"`
	// ETASeconds estimates the rest of the current phase from its pace so
	// far (0 when unknown).
	ETASeconds float64 `json:"eta_seconds"`
	Passes     int     `json:"passes"`
	Last       Report  `json:"last"`
	Totals     Report  `json:"totals"`
}

// Status returns the pass in progress and the last pass's report.
func (c *Cleaner) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{Phase: c.mu.running, Done: c.mu.done, Total: c.mu.total, Passes: c.mu.passes, Last: c.mu.last, Totals: c.mu.totals}
	if c.mu.done > 0 && c.mu.total > c.mu.done {
		el := time.Since(c.mu.phaseStart).Seconds()
		st.ETASeconds = el / float64(c.mu.done) * float64(c.mu.total-c.mu.done)
	}
	return st
}

// Kick asks Run for a copying pass now.
func (c *Cleaner) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Run runs passes every Interval until ctx is done: deletes and repairs
// always, copies when space runs low or after Kick, drains slots
// unreachable for RebuildAfter.
func (c *Cleaner) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	kicked := false
	for {
		opts := PassOptions{Repair: true, Copy: kicked || c.lowOnSpace(ctx), Rebalance: max(c.cfg.Rebalance, 0)}
		if c.cfg.RebuildAfter > 0 {
			opts.Drain = c.longUnreachable()
		}
		rep, err := c.Pass(ctx, opts)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			c.log.Warn("cleaner: pass failed", "err", err)
		} else if rep.DeletedStripes+rep.CopiedStripes+rep.Repaired+rep.RebalancedStripes > 0 || len(rep.Errors) > 0 {
			c.log.Info("cleaner: pass", "deleted_stripes", rep.DeletedStripes, "deleted_bytes", rep.DeletedBytes,
				"copied_stripes", rep.CopiedStripes, "copied_bytes", rep.CopiedBytes, "rejected", rep.RejectedBlocks,
				"repaired", rep.Repaired, "errors", len(rep.Errors))
		}
		kicked = false
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-c.kick:
			kicked = true
		}
	}
}

func (c *Cleaner) lowOnSpace(ctx context.Context) bool {
	for _, s := range c.cfg.Data.Slots() {
		st, err := c.cfg.Data.ServerStats(ctx, s.ID)
		if err != nil || st.CapacityBytes == 0 {
			continue
		}
		if float64(st.FreeBytes)/float64(st.CapacityBytes) < c.cfg.FreeBelow {
			return true
		}
	}
	return false
}

func (c *Cleaner) longUnreachable() []uint16 {
	now := c.cfg.Now() // a Config function: called before c.mu is taken
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []uint16
	for s, t := range c.mu.unreachable {
		if now.Sub(t) >= c.cfg.RebuildAfter {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (c *Cleaner) phase(name string, done, total int, opts *PassOptions) {
	c.mu.Lock()
	if name != c.mu.running {
		c.mu.phaseStart = time.Now()
	}
	c.mu.running, c.mu.done, c.mu.total = name, done, total
	c.mu.Unlock()
	if opts.Progress != nil {
		opts.Progress(name, done, total)
	}
}

// Pass runs one cleaning pass. Errors about single stripes are collected
// in the report; the error return is for a pass that could not run.
func (c *Cleaner) Pass(ctx context.Context, opts PassOptions) (rep Report, err error) {
	select {
	case c.pass <- struct{}{}:
	case <-ctx.Done():
		return rep, ctx.Err()
	}
	defer func() { <-c.pass }()
	start := time.Now()
	defer func() { // named results: the caller's report gets these too
		if len(rep.deleted) > 0 && ctx.Err() == nil {
			dropped, kept, ferr := c.cfg.FS.ForgetStripes(ctx, rep.deleted)
			rep.Forgotten += dropped
			if ferr != nil {
				rep.Errors = append(rep.Errors, ferr.Error())
			} else if kept > 0 {
				rep.Errors = append(rep.Errors, fmt.Sprintf("cleaner: %d deleted stripes still had live bytes counted by an island", kept))
			}
		}
		rep.Seconds = time.Since(start).Seconds()
		c.mu.Lock()
		c.mu.last, c.mu.running = rep, ""
		c.mu.passes++
		c.mu.totals.add(&rep)
		c.mu.Unlock()
	}()
	c.phase("inventory", 0, 0, &opts)
	stripes, err := c.inventory(ctx, &rep)
	if err != nil {
		return rep, err
	}
	live, err := c.cfg.FS.LiveBytes(ctx)
	if err != nil {
		return rep, fmt.Errorf("cleaner: %w", err)
	}
	// Geometry of live stripes, looked up in parallel (one island round
	// trip each the first time a stripe is seen; cached after).
	var need []*Stripe
	for id, s := range stripes {
		s.Live = live[id]
		rep.LiveBytes += max(s.Live, 0)
		if s.Live > 0 {
			need = append(need, s)
		}
	}
	var gmu lockcheck.Mutex
	c.forEach(len(need), func(i int) {
		s := need[i]
		g, err := c.geometry(ctx, s.ID)
		gmu.Lock()
		defer gmu.Unlock()
		if err != nil {
			rep.Errors = append(rep.Errors, err.Error())
		} else if g.slots != nil {
			s.K, s.M = g.k, g.m
		}
	})
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	list := make([]Stripe, 0, len(stripes))
	for _, s := range stripes {
		list = append(list, *s)
	}
	sort.Slice(list, func(i, j int) bool { return less(list[i].ID, list[j].ID) })
	rep.Stripes = len(list)
	budget := int64(0)
	if opts.Copy {
		budget = c.cfg.CopyBudget
	}
	now := c.cfg.Now()
	dead, copies := Plan(list, PlanConfig{Now: now, Grace: c.cfg.Grace, MaxLive: c.cfg.MaxLive, CopyBudget: budget})
	rep.Grace = c.cfg.Grace.Seconds()
	for _, st := range list {
		if age := now.Sub(st.Created); st.Live <= 0 && age < c.cfg.Grace {
			rep.Waiting++
			rep.WaitingBytes += st.Bytes
			if in := (c.cfg.Grace - age).Seconds(); rep.WaitingSeconds == 0 || in < rep.WaitingSeconds {
				rep.WaitingSeconds = in
			}
		}
	}
	if opts.DryRun {
		rep.DryRun, rep.PlannedDeletes = true, len(dead)
		if opts.Rebalance > 0 {
			plan, keep := c.planRebalance(list, nil, dead, setOf(opts.Drain), &rep, opts.Rebalance)
			rep.PlannedMoves, rep.PlannedAvoid, rep.PlannedImbalance = len(plan.Move), plan.Avoid, plan.Estimated
			moving := setOf(plan.Move)
			for _, st := range keep {
				if moving[st.ID] {
					rep.PlannedBytes += st.Live
				}
			}
		}
		return rep, nil
	}

	// 1. Stripes nobody points into.
	for i, id := range dead {
		c.phase("delete", i, len(dead), &opts)
		if err := c.deleteIfUnreferenced(ctx, stripes[id], &rep); err != nil {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			rep.Errors = append(rep.Errors, err.Error())
		}
	}

	// 2. Repair, drain and copy work on committed stripes.
	drain := map[uint16]bool{}
	for _, s := range opts.Drain {
		drain[s] = true
		c.cfg.Data.SetDown(s, true) // new stripes avoid it
	}
	// A stripe can leave a drained slot only if enough other slots are up
	// for its width; otherwise its copy would be placed degraded on the
	// same slot again, so it waits (for the server or a replacement).
	avail := 0
	for _, sl := range c.cfg.Data.Slots() {
		if sl.Up && !drain[sl.ID] {
			avail++
		}
	}
	var repairs []repairJob
	var drains []fragment.StripeID
	for _, s := range list {
		if s.Live <= 0 {
			continue
		}
		c.mu.Lock()
		slots := c.mu.geom[s.ID].slots
		c.mu.Unlock()
		if slots == nil {
			continue // no readable pointer, or its last reference went away
		}
		onDrained := false
		for _, sl := range slots {
			onDrained = onDrained || drain[sl]
		}
		if onDrained {
			if len(slots) > avail {
				rep.DrainRemaining++
				continue
			}
			drains = append(drains, s.ID)
			continue // moving it is its repair
		}
		if opts.Repair {
			have, sick := map[uint16]bool{}, map[uint16]bool{}
			for _, f := range s.Frags {
				have[f.Index] = true
				// A fragment its server found corrupt is rebuilt and
				// rewritten in place.
				sick[f.Index] = sick[f.Index] || f.Suspect
			}
			for i, sl := range slots {
				if sick[uint16(i)] {
					repairs = append(repairs, repairJob{s.ID, slots, i, true})
					continue
				}
				if have[uint16(i)] {
					continue
				}
				if slices.Contains(rep.Unreachable, sl) {
					rep.RepairPending++
					continue
				}
				repairs = append(repairs, repairJob{s.ID, slots, i, false})
			}
		}
	}
	c.repair(ctx, repairs, &rep, &opts)

	// 3. Drains, then cost-benefit copies, in batches that fill whole
	// stripes of the cleaner's log (a sync per stripe moved would write
	// short stripes, as sparse as the ones being cleaned).
	isDrain := map[fragment.StripeID]bool{}
	for _, id := range drains {
		isDrain[id] = true
	}
	work := append(drains, copies...)
	seen := map[fragment.StripeID]bool{}
	var batch []*Stripe
	var batchLive int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := c.relocate(ctx, batch, &rep)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			rep.Errors = append(rep.Errors, err.Error())
			for _, s := range batch {
				if isDrain[s.ID] {
					rep.DrainRemaining++
				}
			}
		}
		batch, batchLive = batch[:0], 0
		return nil
	}
	for i, id := range work {
		if seen[id] {
			continue
		}
		seen[id] = true
		c.phase("copy", i, len(work), &opts)
		s := stripes[id]
		batch = append(batch, s)
		batchLive += s.Live
		if batchLive >= batchBytes {
			if err := flush(); err != nil {
				return rep, err
			}
		}
	}
	if err := flush(); err != nil {
		return rep, err
	}
	if opts.Rebalance > 0 {
		if err := c.rebalance(ctx, list, seen, dead, drain, &rep, &opts); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// rebalance plans and makes this pass's moves toward even storage slots
// (PlanRebalance). Its copies go through the same path as the cleaner's
// others, with the over-full slots avoided for the new stripes.
func (c *Cleaner) rebalance(ctx context.Context, list []Stripe, moved map[fragment.StripeID]bool, dead []fragment.StripeID,
	drain map[uint16]bool, rep *Report, opts *PassOptions) error {
	plan, keep := c.planRebalance(list, moved, dead, drain, rep, opts.Rebalance)
	if len(plan.Move) == 0 {
		return nil
	}
	c.log.Info("cleaner: rebalancing storage", "imbalance", plan.Imbalance, "stripes", len(plan.Move), "avoid", plan.Avoid,
		"estimated_after", plan.Estimated, "remaining_bytes", plan.Remaining)
	c.cfg.Data.Avoid(plan.Avoid)
	defer c.cfg.Data.Avoid(nil)
	byID := map[fragment.StripeID]*Stripe{}
	for k := range keep {
		byID[keep[k].ID] = &keep[k]
	}
	var batch []*Stripe
	var batchLive int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		before := rep.CopiedBytes
		err := c.relocate(ctx, batch, rep)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			rep.Errors = append(rep.Errors, err.Error())
		} else {
			rep.RebalancedStripes += len(batch)
			rep.RebalancedBytes += rep.CopiedBytes - before
		}
		batch, batchLive = batch[:0], 0
		return nil
	}
	for i, id := range plan.Move {
		c.phase("rebalance", i, len(plan.Move), opts)
		s := byID[id]
		batch = append(batch, s)
		batchLive += s.Live
		if batchLive >= batchBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// planRebalance plans a pass's rebalancing moves over list, leaving out
// the stripes the pass deleted (dead) or already moved and the slots
// being drained; it returns the plan and the stripes it considered.
func (c *Cleaner) planRebalance(list []Stripe, moved map[fragment.StripeID]bool, dead []fragment.StripeID,
	drain map[uint16]bool, rep *Report, tolerance float64) (RebalancePlan, []Stripe) {
	used := map[uint16]int64{}
	for _, sl := range c.cfg.Data.Slots() {
		if sl.Up && !drain[sl.ID] && !slices.Contains(rep.Unreachable, sl.ID) {
			used[sl.ID] = 0
		}
	}
	gone := setOf(dead)
	var keep []Stripe
	for _, s := range list {
		if gone[s.ID] || moved[s.ID] {
			continue
		}
		for _, f := range s.Frags {
			if _, ok := used[f.Slot]; ok {
				used[f.Slot] += f.Length
			}
		}
		keep = append(keep, s)
	}
	plan := PlanRebalance(keep, used, RebalanceConfig{Now: c.cfg.Now(), Grace: c.cfg.Grace, Tolerance: tolerance, Budget: c.cfg.CopyBudget})
	rep.StorageImbalance, rep.RebalanceRemaining = plan.Imbalance, plan.Remaining
	return plan, keep
}

// setOf is the set of ids.
func setOf[T comparable](ids []T) map[T]bool {
	m := make(map[T]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// batchBytes is how much live data one relocation batch moves before its
// copies are synced and its deltas sent.
const batchBytes = 32 << 20

// inventory lists every fragment of every reachable slot.
func (c *Cleaner) inventory(ctx context.Context, rep *Report) (map[fragment.StripeID]*Stripe, error) {
	stripes := map[fragment.StripeID]*Stripe{}
	now := c.cfg.Now()
	reached := 0
	// Every server is scanned at once; the results are merged in slot order.
	slots := c.cfg.Data.Slots()
	scans := make([]fragment.ScanResp, len(slots))
	errs := make([]error, len(slots))
	c.forEach(len(slots), func(i int) {
		scans[i], errs[i] = c.cfg.Data.ScanAllSlot(ctx, slots[i].ID)
	})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for i, sl := range slots {
		scan, err := scans[i], errs[i]
		ok := err == nil
		if !ok {
			c.log.Debug("cleaner: slot unreachable", "slot", sl.ID, "err", err)
		}
		suspect := map[fragment.ID]bool{}
		for _, id := range scan.Suspect {
			suspect[id] = true
		}
		c.mu.Lock()
		if !ok {
			if _, seen := c.mu.unreachable[sl.ID]; !seen {
				c.mu.unreachable[sl.ID] = now
			}
		} else {
			delete(c.mu.unreachable, sl.ID)
		}
		c.mu.Unlock()
		if !ok {
			rep.Unreachable = append(rep.Unreachable, sl.ID)
			continue
		}
		reached++
		for _, e := range scan.Entries {
			sid := e.ID.Stripe()
			s := stripes[sid]
			if s == nil {
				s = &Stripe{ID: sid, Created: e.Created}
				stripes[sid] = s
			}
			if e.Created.Before(s.Created) {
				s.Created = e.Created
			}
			s.Bytes += int64(e.Length)
			s.Frags = append(s.Frags, Frag{Slot: sl.ID, Index: e.ID.Index, Length: int64(e.Length), Suspect: suspect[e.ID]})
			rep.Fragments++
			rep.Bytes += int64(e.Length)
		}
	}
	if reached == 0 {
		return nil, fmt.Errorf("cleaner: no storage server reachable: %w", fragment.ErrUnavailable)
	}
	return stripes, nil
}

// forEach runs fn(0..n-1) on up to Parallel goroutines and waits.
func (c *Cleaner) forEach(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(c.cfg.Parallel, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// geom is a committed stripe's placement and redundancy.
type geom struct {
	slots []uint16 // slots[i] holds fragment i
	k, m  int
}

// geometry returns where a committed stripe's fragments live and its K+M,
// from a pointer into it (cached: stripes never change). A zero geom
// means nothing points into it any more.
func (c *Cleaner) geometry(ctx context.Context, sid fragment.StripeID) (geom, error) {
	c.mu.Lock()
	g, ok := c.mu.geom[sid]
	c.mu.Unlock()
	if ok {
		return g, nil
	}
	refs, err := c.cfg.FS.StripeRefs(ctx, sid)
	if err != nil {
		return geom{}, fmt.Errorf("cleaner: %w", err)
	}
	for _, r := range refs {
		p, _, err := layout.DecodePointer(r.Ptr)
		if err != nil || p.Stripe != sid {
			continue
		}
		g := geom{slots: p.Slots, k: int(p.K), m: int(p.M)}
		c.mu.Lock()
		c.mu.geom[sid] = g
		c.mu.Unlock()
		return g, nil
	}
	return geom{}, nil
}

// deleteIfUnreferenced deletes a stripe's fragments after checking, right
// before, that no island points into it.
func (c *Cleaner) deleteIfUnreferenced(ctx context.Context, s *Stripe, rep *Report) error {
	refs, err := c.cfg.FS.StripeRefs(ctx, s.ID)
	if err != nil {
		return fmt.Errorf("cleaner: delete %s: %w", s.ID, err)
	}
	if len(refs) > 0 {
		return nil // referenced after all (counters read earlier)
	}
	// Besides the fragments the inventory saw, every fragment the stripe's
	// placement allows: a repair in this same pass may have recreated one
	// after the inventory, and it must not stay behind as an orphan.
	frags := slices.Clone(s.Frags)
	c.mu.Lock()
	g := c.mu.geom[s.ID]
	c.mu.Unlock()
	var typical int64
	for _, f := range frags {
		typical = max(typical, f.Length)
	}
	for i, sl := range g.slots {
		// An unreachable server's copy (if any) waits for a later pass.
		if slices.Contains(rep.Unreachable, sl) {
			continue
		}
		if !slices.ContainsFunc(s.Frags, func(f Frag) bool { return int(f.Index) == i }) {
			frags = append(frags, Frag{Slot: sl, Index: uint16(i), Length: typical, unseen: true})
		}
	}
	var errs []error
	for i, f := range frags {
		if i == 1 {
			if err := c.cfg.Faults.Hit(FailMidDelete); err != nil {
				return err
			}
		}
		err := c.cfg.Data.DeleteFragment(ctx, f.Slot, s.ID.Fragment(int(f.Index)))
		if f.unseen && errors.Is(err, fragment.ErrNotFound) {
			continue // the usual case: no repair made it
		}
		if err != nil && !errors.Is(err, fragment.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		rep.DeletedBytes += f.Length
	}
	c.mu.Lock()
	delete(c.mu.geom, s.ID)
	c.mu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("cleaner: delete %s: %w", s.ID, errors.Join(errs...))
	}
	rep.DeletedStripes++
	rep.deleted = append(rep.deleted, s.ID)
	return nil
}

type repairJob struct {
	sid     fragment.StripeID
	slots   []uint16
	frag    int
	rewrite bool // in place: the fragment is there but corrupt
}

func (c *Cleaner) repair(ctx context.Context, jobs []repairJob, rep *Report, opts *PassOptions) {
	if len(jobs) == 0 {
		return
	}
	var mu lockcheck.Mutex
	var wg sync.WaitGroup
	next := make(chan repairJob)
	done := 0
	for w := 0; w < c.cfg.Parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				var err error
				if j.rewrite {
					err = c.cfg.Data.RewriteFragment(ctx, j.sid, j.slots, j.frag)
				} else {
					err = c.cfg.Data.RecreateFragment(ctx, j.sid, j.slots, j.frag)
				}
				mu.Lock()
				done++
				if err != nil {
					rep.RepairFailed++
					rep.Errors = append(rep.Errors, err.Error())
				} else {
					rep.Repaired++
				}
				c.phase("repair", done, len(jobs), opts)
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		next <- j
	}
	close(next)
	wg.Wait()
}

// relocate copies every live block of a batch of stripes into the
// cleaner's log, makes the copies durable, commits conditional deltas,
// and deletes each stripe once nothing points into it.
func (c *Cleaner) relocate(ctx context.Context, batch []*Stripe, rep *Report) error {
	var moves []client.BlockMove
	for _, s := range batch {
		refs, err := c.cfg.FS.StripeRefs(ctx, s.ID)
		if err != nil {
			return fmt.Errorf("cleaner: copy %s: %w", s.ID, err)
		}
		for _, r := range refs {
			p, rest, err := layout.DecodePointer(r.Ptr)
			if err != nil || len(rest) != 0 || p.Stripe != s.ID {
				continue
			}
			moves = append(moves, client.BlockMove{Ino: r.Ino, Index: r.Index, Old: r.Ptr, Policy: copyPolicy(&p)})
		}
	}
	applied, copied, err := c.cfg.FS.MoveBlocks(ctx, moves, client.MoveHooks{
		// Reading and writing both cost the disks.
		Copied:       func(ctx context.Context, n int64) error { return c.throttle(ctx, 2*n) },
		BeforeCommit: func() error { return c.cfg.Faults.Hit(FailAfterCopy) },
	})
	if err != nil {
		return fmt.Errorf("cleaner: copy: %w", err)
	}
	for _, a := range applied {
		if a {
			rep.MovedBlocks++
		} else {
			rep.RejectedBlocks++
		}
	}
	rep.CopiedStripes += len(batch)
	rep.CopiedBytes += copied
	if err := c.cfg.Faults.Hit(FailAfterDeltas); err != nil {
		return err
	}
	var errs []error
	for _, s := range batch {
		if err := c.deleteIfUnreferenced(ctx, s, rep); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// copyPolicy is the policy of the cleaner's log for a block: the same
// redundancy and shard size as its stripe (MoveBlocks makes its blocks as
// large as a fragment).
func copyPolicy(p *layout.Pointer) layout.Policy {
	pol := p.Policy()
	if fs := int(p.Shard); fs >= layout.MinFragmentSize && fs <= layout.MaxFragmentSize {
		pol.FragmentSize = fs
	}
	return pol
}

// rate is the copy rate allowed now: Rate, lowered to Share of the
// observed capacity when that is known (looked up at most every 2s).
//
// Config.Capacity is called without c.mu held (invariant 7): it calls into
// the manager, whose status calls back into Status, which takes c.mu.
func (c *Cleaner) rate() float64 {
	r := float64(c.cfg.Rate)
	if c.cfg.Capacity == nil {
		return r
	}
	now := time.Now()
	c.mu.Lock()
	capacity, stale := c.mu.capacity, now.Sub(c.mu.capAt) > 2*time.Second
	if stale {
		c.mu.capAt = now // one caller refreshes; the others use the last answer
	}
	c.mu.Unlock()
	if stale {
		capacity = c.cfg.Capacity()
		c.mu.Lock()
		c.mu.capacity = capacity
		c.mu.Unlock()
	}
	if capacity > 0 {
		r = min(r, max(c.cfg.Share*capacity, MinRate))
	}
	return r
}

// throttle sleeps so that copying stays within the allowed rate.
func (c *Cleaner) throttle(ctx context.Context, n int64) error {
	d := time.Duration(float64(n) / c.rate() * float64(time.Second))
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
