package bench

import (
	"testing"
	"time"
)

// failoverOf on a made-up timeline: 100 ops per tick, a kill at 2 s, a
// second at 10 per tick, then 70 per tick (a host less).
func TestFailoverOf(t *testing.T) {
	var tl []int64
	for i := 0; i < 100; i++ {
		switch {
		case i < 22: // the kill at tick 20; requests in flight finish
			tl = append(tl, 100)
		case i < 32:
			tl = append(tl, 10)
		default:
			tl = append(tl, 70)
		}
	}
	t0 := time.Unix(100, 0)
	res := [][]WorkerPhase{{{Start: t0.UnixNano(), Timeline: tl}}}
	f := failoverOf(res, t0.Add(2*time.Second), "island1", "ops/s")
	if f.Before != 1000 || f.After != 700 || f.Lowest != 100 {
		t.Errorf("before %v after %v lowest %v, want 1000, 700, 100", f.Before, f.After, f.Lowest)
	}
	// The dip ends at tick 32: back at 90% of 700 with the half second
	// from 32 to 37, 1.7 s after the kill.
	if f.FullSpeedAfter < 1.65 || f.FullSpeedAfter > 1.75 {
		t.Errorf("full speed after %v s, want 1.7", f.FullSpeedAfter)
	}
	if len(f.PerSecond) != 10 || f.PerSecond[0] != 1000 || f.PerSecond[9] != 700 {
		t.Errorf("per second %v", f.PerSecond)
	}
	// Never back: -1.
	for i := 22; i < 100; i++ {
		tl[i] = 0
	}
	if f := failoverOf(res, t0.Add(2*time.Second), "island1", "ops/s"); f.FullSpeedAfter != -1 {
		t.Errorf("a dead cluster came back after %v s", f.FullSpeedAfter)
	}
}

// growthOf on a made-up timeline: 100 ops per tick for 5 s, 60 while the
// moves run (from 6 s to 10 s), then 120 (a server more).
func TestGrowthOf(t *testing.T) {
	var tl []int64
	for i := 0; i < 150; i++ {
		switch {
		case i < 60:
			tl = append(tl, 100)
		case i < 100:
			tl = append(tl, 60)
		default:
			tl = append(tl, 120)
		}
	}
	t0 := time.Unix(100, 0)
	at := func(s float64) scaleSample { return scaleSample{at: t0.Add(time.Duration(s * float64(time.Second)))} }
	m := &growMarks{added: "x", moved: "y", before: at(1), join: at(5), moveStart: at(6), moveEnd: at(10), stop: at(15)}
	res := [][]WorkerPhase{{{Start: t0.UnixNano(), Timeline: tl}}}
	var used int
	g, phases := growthOf(res, m, "ops/s", func(*PhaseResult, scaleSample, scaleSample) { used++ })
	if g.Before != 1000 || g.During != 600 || g.After != 1200 {
		t.Errorf("before %v during %v after %v, want 1000, 600, 1200", g.Before, g.During, g.After)
	}
	// 1 - 600 / ((1000 + 1200) / 2)
	if want := 1 - 600.0/1100; g.Penalty < want-1e-9 || g.Penalty > want+1e-9 {
		t.Errorf("penalty %v, want %v", g.Penalty, want)
	}
	if g.MoveSeconds != 4 || g.JoinAt != 5 || g.MoveAt != 6 || g.MovedAt != 10 {
		t.Errorf("move %v s, join at %v, moves %v to %v", g.MoveSeconds, g.JoinAt, g.MoveAt, g.MovedAt)
	}
	if len(phases) != 3 || used != 3 || phases[1].Name != "moving" || phases[1].Rate != 600 {
		t.Errorf("phases %+v (use called %d times)", phases, used)
	}
	if len(g.PerSecond) != 15 || g.PerSecond[0] != 1000 || g.PerSecond[7] != 600 || g.PerSecond[14] != 1200 {
		t.Errorf("per second %v", g.PerSecond)
	}
}
