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
