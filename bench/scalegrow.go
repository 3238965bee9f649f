package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/atoll-fs/atoll/internal/cleaner"
	"github.com/atoll-fs/atoll/internal/simcluster"
	"github.com/atoll-fs/atoll/internal/simnet"
)

// scaleSample is every host's use and the machine's CPU times at a moment.
type scaleSample struct {
	at   time.Time
	cpu  simnet.CPUTimes
	host map[string]simnet.Usage
	cal  int64 // the CPU speed probe's count
}

// growEnv is what the growth coordinator works with.
type growEnv struct {
	cfg  ScaleConfig
	sp   pointSpec
	cl   *simcluster.Cluster
	net  *simnet.Net
	key  string            // the cluster key (the admin commands')
	kind map[string]string // each host's kind
	take func() (scaleSample, error)
	say  func(string, ...any)
}

// growMarks are the moments of a growth run, each with its sample: the
// before window opens after a warm-up and ends when the server is
// started; the moves run from moveStart to moveEnd; the after window
// ends at stop.
type growMarks struct {
	added, moved                           string
	joinSeconds                            float64
	before, join, moveStart, moveEnd, stop scaleSample
}

// growMaxPasses bounds the storage rebalancing passes of one run.
const growMaxPasses = 40

// growGrace is the rebalancing passes' grace (stripes younger stay where
// they are; dead ones younger are not deleted). The default, ten
// minutes, covers clients that hold writes for up to
// client.MaxCommitDelay; the files workers commit every file within
// seconds of writing it, so 20 s is safe for them and keeps a run short.
const growGrace = 20 * time.Second

// growDuring runs while the workers run: it measures a before window,
// adds a server as an operator would (the island server with --join,
// `atoll island create` and `atoll island add`; the storage server, then
// `atoll clean --rebalance` passes until balanced, each run on the
// manager's host within its budget), then an after window (15 s; 5 s
// with --small).
func growDuring(ctx context.Context, g growEnv) (*growMarks, error) {
	// A fresh island ran the mixed workload about a third faster for
	// its first half minute (measured: 1,140 falling to 770 ops/s with
	// nothing added; its first flushes and compactions, most likely, not
	// profiled): a 30 s warm-up keeps that out of the before window.
	warm, window := 30*time.Second, 15*time.Second
	if g.cfg.Small {
		warm, window = 2*time.Second, 5*time.Second
	}
	grace := growGrace
	if g.cfg.Small {
		grace = 5 * time.Second // the files commit within a second or two
	}
	before := window
	if g.sp.grow == "storage" {
		// Rebalancing moves only stripes older than its grace: the
		// warm-up and the before window write them.
		before = max(window, grace+5*time.Second-warm)
	}
	m := &growMarks{}
	var err error
	if err = sleepCtx(ctx, warm); err != nil {
		return nil, err
	}
	if m.before, err = g.take(); err != nil {
		return nil, err
	}
	if err = sleepCtx(ctx, before); err != nil {
		return nil, err
	}
	if m.join, err = g.take(); err != nil {
		return nil, err
	}
	switch g.sp.grow {
	case "island":
		r, err := g.cl.AddIslandServer(ctx)
		if err != nil {
			return nil, err
		}
		out, err := g.admin(ctx, "island", "create", "--replicas", "1", "--timeout", "2m")
		if err != nil {
			return nil, err
		}
		id := regexp.MustCompile(`island (\d+) is serving`).FindStringSubmatch(out)
		if id == nil {
			return nil, fmt.Errorf("atoll island create printed %q", out)
		}
		m.joinSeconds = time.Since(m.join.at).Seconds()
		m.added = fmt.Sprintf("island server on %s (island %s, one replica)", r.Host.Name, id[1])
		g.say("  %s serving after %.1f s; giving it its share", m.added, m.joinSeconds)
		if m.moveStart, err = g.take(); err != nil {
			return nil, err
		}
		out, err = g.admin(ctx, "island", "add", id[1], "--timeout", "8m")
		if err != nil {
			return nil, err
		}
		if m.moveEnd, err = g.take(); err != nil {
			return nil, err
		}
		m.moved = "table entries"
		if n := regexp.MustCompile(`(\d+) entry moves`).FindStringSubmatch(out); n != nil {
			m.moved = n[1] + " table entries"
		}
	case "storage":
		// The rebalancer copies at most a fifth of what the storage
		// servers' disks did before (the manager's cleaner's share of
		// their observed throughput).
		var disk int64
		for h, u := range m.join.host {
			if g.kind[h] == simcluster.KindStorage {
				disk += u.Sub(m.before.host[h]).DiskBytes
			}
		}
		rate := max(1<<20, int64(cleaner.DefaultShare*float64(disk)/m.join.at.Sub(m.before.at).Seconds()))
		r, err := g.cl.AddStorage(ctx)
		if err != nil {
			return nil, err
		}
		m.joinSeconds = time.Since(m.join.at).Seconds()
		m.added = fmt.Sprintf("storage server on %s", r.Host.Name)
		g.say("  %s up after %.1f s; rebalancing at %s/s at most", m.added, m.joinSeconds, human(rate))
		if m.moveStart, err = g.take(); err != nil {
			return nil, err
		}
		var moved int64
		for passes := 0; ; passes++ {
			pre, err := g.take()
			if err != nil {
				return nil, err
			}
			if g.cfg.Small && passes == 1 {
				m.moveEnd = pre // CI: one pass shows the path works
				break
			}
			out, err := g.admin(ctx, "clean", "--rebalance", "--json", "--rate", strconv.FormatInt(rate, 10),
				"--grace", grace.String(), "--unsafe-grace")
			var rep cleaner.Report
			if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil {
				return nil, fmt.Errorf("rebalancing pass: %v (printed %q)", cmpErr(err, jerr), out)
			}
			// A pass measures the spread before it moves: the one that
			// finds it within tolerance ends the moves at its start.
			if passes > 0 && rep.StorageImbalance <= cleaner.DefaultTolerance {
				m.moveEnd = pre
				break
			}
			moved += rep.RebalancedBytes
			g.say("    pass %d: imbalance %.3f, moved %s", passes+1, rep.StorageImbalance, human(rep.RebalancedBytes))
			if passes+1 == growMaxPasses {
				return nil, fmt.Errorf("storage not balanced after %d passes (imbalance %.3f)", growMaxPasses, rep.StorageImbalance)
			}
		}
		m.moved = human(moved)
	default:
		return nil, fmt.Errorf("growth: %q (island or storage)", g.sp.grow)
	}
	if err = sleepCtx(ctx, window); err != nil {
		return nil, err
	}
	if m.stop, err = g.take(); err != nil {
		return nil, err
	}
	return m, nil
}

// admin runs an atoll command on the manager's host with the cluster key
// and returns what it printed.
func (g growEnv) admin(ctx context.Context, args ...string) (string, error) {
	return adminOn(ctx, g.net, g.cfg.Exe, g.cl.Manager, g.key, args...)
}

// adminOn runs an atoll command on the manager's host of n (within its
// budget, as the manager's own work) against manager with key.
func adminOn(ctx context.Context, n *simnet.Net, exe, manager, key string, args ...string) (string, error) {
	args = append(args, "--cluster", manager, "--key", key)
	cmd := n.Host(simcluster.ManagerHost).Command(ctx, exe, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("atoll %s %s: %v: %s", args[0], args[1], err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}

// cmpErr is the command's error when there is one, else the parse error.
func cmpErr(cmdErr, parseErr error) error {
	if cmdErr != nil {
		return cmdErr
	}
	return parseErr
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// growthOf measures the windows of a growth run on the workers' merged
// timeline and returns the figures and the windows as phases (each with
// its hosts' use; Efficiency against the mean of before and after).
func growthOf(results [][]WorkerPhase, m *growMarks, unit string, use func(*PhaseResult, scaleSample, scaleSample)) (*Growth, []PhaseResult) {
	t0, bins := mergeTimelines(results)
	mean := binMean(bins, unit)
	tick := func(s scaleSample) int { return int(s.at.Sub(time.Unix(0, t0)) / Tick) }
	g := &Growth{Added: m.added, Moved: m.moved, Unit: unit, JoinSeconds: m.joinSeconds,
		MoveSeconds: m.moveEnd.at.Sub(m.moveStart.at).Seconds(),
		JoinAt:      float64(tick(m.join)) * Tick.Seconds(), MoveAt: float64(tick(m.moveStart)) * Tick.Seconds(),
		MovedAt: float64(tick(m.moveEnd)) * Tick.Seconds(), PerSecond: perSecond(bins, unit)}
	d0, d1 := tick(m.moveStart), max(tick(m.moveEnd), tick(m.moveStart)+1)
	g.Before, g.During, g.After = mean(tick(m.before), tick(m.join)), mean(d0, d1), mean(d1, tick(m.stop))
	base := (g.Before + g.After) / 2
	if base > 0 {
		g.Penalty = 1 - g.During/base
	}
	var phases []PhaseResult
	servers := map[string]float64{} // CPU-seconds per second of the server hosts, per window
	for _, w := range []struct {
		name   string
		rate   float64
		s0, s1 scaleSample
	}{{"before", g.Before, m.before, m.join}, {"moving", g.During, m.moveStart, m.moveEnd}, {"after", g.After, m.moveEnd, m.stop}} {
		pr := PhaseResult{Name: w.name, Rate: w.rate, Unit: unit, Seconds: w.s1.at.Sub(w.s0.at).Seconds()}
		if base > 0 {
			pr.Efficiency, pr.NormEfficiency = w.rate/base, w.rate/base
		}
		use(&pr, w.s0, w.s1)
		for _, h := range pr.Hosts {
			if h.Kind != kindClient && h.Kind != kindCalibrate && pr.Seconds > 0 {
				servers[w.name] += h.CPUSeconds / pr.Seconds
			}
		}
		phases = append(phases, pr)
	}
	g.MoveCPUSeconds = (servers["moving"] - (servers["before"]+servers["after"])/2) * g.MoveSeconds
	return g, phases
}

func printGrowth(say func(string, ...any), points []ScalePoint) {
	for _, p := range points {
		g := p.Growth
		say("  %s added: %.1f %s before, %.1f while %s moved (%.1f s), %.1f after: penalty %.1f%% (server hosts' extra CPU for the moves %.1f s; up %.1f s after its start)",
			g.Added, g.Before, g.Unit, g.During, g.Moved, g.MoveSeconds, g.After, 100*g.Penalty, g.MoveCPUSeconds, g.JoinSeconds)
		for _, ph := range p.Phases {
			say("    %-7s %9.1f %-5s (%.1f s; busiest: %s; machine idle %.0f%%)", ph.Name, ph.Rate, ph.Unit, ph.Seconds, ph.Bottleneck, 100*ph.Idle)
		}
		say("    per second (started in second %d, moves from %d to %d): %v", int(g.JoinAt), int(g.MoveAt), int(g.MovedAt), g.PerSecond)
	}
}
