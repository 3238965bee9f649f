package test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/atoll-fs/atoll/bench"
	"github.com/atoll-fs/atoll/internal/simnet"
	"github.com/atoll-fs/atoll/internal/testenv"
)

// `atoll bench scale --small` runs every experiment of the scale model at
// two points on budgeted simulated hosts, so the model cannot rot: each
// phase moved data or operations, every host's CPU was counted, each
// budget held, and the report carries the figures the README quotes.
func TestBenchScaleSmall(t *testing.T) {
	if why := simnet.BudgetsAvailable(); why != "" {
		testenv.Missing(t, "scale model: %s", why)
	}
	exe := testenv.Atoll(t)
	cmd := exec.Command(exe, "bench", "scale", "--small", "--json", "--dir", t.TempDir())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench scale: %v\n%s", err, stderr.String())
	}
	t.Logf("%s", stderr.String())
	var res bench.ScaleResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("report: %v: %s", err, out)
	}
	if res.StorageEfficiency == nil || res.MetadataEfficiency == nil || res.ReplicasRatio == nil || res.ClientsAfterPeak == nil || res.FailoverSeconds == nil {
		t.Fatalf("an experiment's figure is missing: %s", out)
	}
	// The least idle fraction may be 0 on a loaded machine (the model's
	// figures then say so); it is a fraction all the same.
	if res.IdleFraction < 0 || res.IdleFraction > 1 {
		t.Errorf("idle fraction %v", res.IdleFraction)
	}
	for name, points := range map[string][]bench.ScalePoint{"storage": res.Storage, "metadata": res.Metadata, "replicas": res.Replicas, "clients": res.Clients} {
		if len(points) != 2 {
			t.Errorf("%s: %d points, want 2", name, len(points))
		}
		for _, p := range points {
			if len(p.Phases) < 2 {
				t.Errorf("%s: %d phases", name, len(p.Phases))
			}
			for _, ph := range p.Phases {
				if ph.Rate <= 0 || ph.Efficiency <= 0 || ph.Bottleneck == "" {
					t.Errorf("%s %+v: phase %s: rate %v, efficiency %v, bottleneck %q", name, p, ph.Name, ph.Rate, ph.Efficiency, ph.Bottleneck)
				}
				kinds := map[string]float64{}
				for _, h := range ph.Hosts {
					kinds[h.Kind] += h.CPUSeconds
					// A budget holds: over a phase of a second or more no
					// host uses much more CPU than its quota.
					if ph.Seconds >= 1 && h.CPU > 1.3 {
						t.Errorf("%s: host %s used %.0f%% of its CPU budget in %s", name, h.Host, 100*h.CPU, ph.Name)
					}
				}
				for _, k := range []string{"client", "island"} {
					if kinds[k] <= 0 {
						t.Errorf("%s %s: no CPU counted on the %s hosts", name, ph.Name, k)
					}
				}
				if name == "storage" && kinds["storage"] <= 0 {
					t.Errorf("storage %s: no CPU counted on the storage hosts", ph.Name)
				}
			}
		}
	}
	// A kill -9 of an island's leader and of a storage server under load:
	// the cluster keeps serving and settles within the run.
	if len(res.Failover) != 2 {
		t.Fatalf("failover: %d points", len(res.Failover))
	}
	for _, p := range res.Failover {
		f := p.Failover
		if f == nil {
			t.Fatalf("failover point without its figures: %+v", p)
		}
		t.Logf("kill -9 %s: %.1f %s before, settled at %.1f after %.1f s; per second %v", f.Killed, f.Before, f.Unit, f.After, f.FullSpeedAfter, f.PerSecond)
		if f.Before <= 0 || f.FullSpeedAfter < 0 || f.After < 0.3*f.Before {
			t.Errorf("kill -9 %s: before %.1f, after %.1f, back after %.1f s", f.Killed, f.Before, f.After, f.FullSpeedAfter)
		}
	}
	// A server added while serving: an island server (a new island takes
	// its share of the table) and a storage server (old data rebalanced
	// onto it). Work goes on in every window, something moved, and the
	// penalty is a figure.
	if len(res.Growth) != 2 || res.MigrationPenalty == nil {
		t.Fatalf("growth: %d points, penalty %v", len(res.Growth), res.MigrationPenalty)
	}
	for _, p := range res.Growth {
		g := p.Growth
		if g == nil || len(p.Phases) != 3 {
			t.Fatalf("growth point without its figures: %+v", p)
		}
		t.Logf("%s: %.1f %s before, %.1f during %.1f s of moves (%s), %.1f after: penalty %.1f%%", g.Added, g.Before, g.Unit, g.During, g.MoveSeconds, g.Moved, g.After, 100*g.Penalty)
		if g.Before <= 0 || g.During <= 0 || g.After <= 0 || g.MoveSeconds <= 0 || g.Moved == "" || g.Moved == "0B" {
			t.Errorf("%s: before %.1f, during %.1f, after %.1f, moves %.1f s of %q", g.Added, g.Before, g.During, g.After, g.MoveSeconds, g.Moved)
		}
	}
	// Files written and read back byte for byte through a FUSE mount on
	// a host of its own (the worker compares what it reads).
	if len(res.Mount) != 1 || res.MountLinkShare == nil || len(res.Mount[0].Phases) != 2 {
		t.Fatalf("mount: %d points, link share %v", len(res.Mount), res.MountLinkShare)
	}
	for _, ph := range res.Mount[0].Phases {
		t.Logf("mount %s: %.1f %s, %.0f%% of the servers' links (busiest: %s)", ph.Name, ph.Rate, ph.Unit, 100*ph.Efficiency, ph.Bottleneck)
		if ph.Rate <= 0 || ph.Efficiency <= 0 {
			t.Errorf("mount %s: rate %v, share %v", ph.Name, ph.Rate, ph.Efficiency)
		}
	}
	// Each of the 9 replicas on a host of its own: every island host
	// worked in the durable creates.
	if res.Replicas[1].IslandServers != 9 {
		t.Errorf("3 replicas of 3 islands ran on %d island servers, want 9 (a host per replica)", res.Replicas[1].IslandServers)
	}
	busy := 0
	for _, h := range res.Replicas[1].Phases[0].Hosts {
		// A follower uses a quarter to a third of its budget in the
		// creates, a leader nearly all; a host without a replica 2%.
		if h.Kind == "island" && h.CPU > 0.1 {
			busy++
		}
	}
	if busy != 9 {
		t.Errorf("%d island hosts worked in %s with 3 replicas of 3 islands, want 9", busy, res.Replicas[1].Phases[0].Name)
	}
	if res.Storage[1].Storage != 10 || res.Metadata[1].Islands != 2 || res.Replicas[1].Replicas != 3 || res.Clients[1].Clients != 4 {
		t.Errorf("points: storage %d servers, metadata %d islands, replicas %d, clients %d", res.Storage[1].Storage, res.Metadata[1].Islands, res.Replicas[1].Replicas, res.Clients[1].Clients)
	}
}
