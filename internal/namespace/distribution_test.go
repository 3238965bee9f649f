package namespace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// Directory trees the distribution tests hash. Each is deterministic.

// wordTree grows a tree of n directories with names drawn from a word list,
// some numbered, and random fan-out, like a source checkout or home area.
func wordTree(n int) []string {
	words := []string{"src", "lib", "bin", "doc", "test", "internal", "cmd", "pkg",
		"home", "alice", "bob", "carol", "data", "logs", "tmp", "cache", "build",
		"include", "share", "local", "etc", "var", "photos", "2024", "2025",
		"Documents", "Downloads", "Music", "projects", "atoll", "vendor", "node_modules"}
	r := rand.New(rand.NewPCG(1, 2))
	dirs := []string{"/"}
	seen := map[string]bool{"/": true}
	for len(dirs) < n+1 {
		parent := dirs[r.IntN(len(dirs))]
		name := words[r.IntN(len(words))]
		if r.IntN(3) == 0 {
			name = fmt.Sprintf("%s%d", name, r.IntN(100))
		}
		p, err := Join(parent, name)
		if err != nil || seen[p] {
			continue
		}
		seen[p] = true
		dirs = append(dirs, p)
	}
	return dirs[1:]
}

// gridTree is /dA/dB/dC with fan-out 13 at each level: 2379 directories
// whose names differ only in a digit or two.
func gridTree() []string {
	var dirs []string
	for a := range 13 {
		pa := fmt.Sprintf("/d%d", a)
		dirs = append(dirs, pa)
		for b := range 13 {
			pb := fmt.Sprintf("%s/d%d", pa, b)
			dirs = append(dirs, pb)
			for c := range 13 {
				dirs = append(dirs, fmt.Sprintf("%s/d%d", pb, c))
			}
		}
	}
	return dirs
}

// homeTree is 250 home directories each with the same 7 subdirectories:
// 2000 directories where most names repeat under parents of equal length.
func homeTree() []string {
	subs := []string{"Documents", "Downloads", "src", ".config", ".cache", "Desktop", "tmp"}
	var dirs []string
	for u := range 250 {
		h := fmt.Sprintf("/home/user%03d", u)
		dirs = append(dirs, h)
		for _, s := range subs {
			dirs = append(dirs, h+"/"+s)
		}
	}
	return dirs
}

// chiSquare returns the chi-square statistic of the top-d-bit bins of the
// paths' buckets.
func chiSquare(paths []string, d uint) float64 {
	bins := make([]float64, 1<<d)
	for _, p := range paths {
		bins[uint64(Bucket(p))>>(32-d)]++
	}
	exp := float64(len(paths)) / float64(len(bins))
	var x float64
	for _, c := range bins {
		x += (c - exp) * (c - exp) / exp
	}
	return x
}

// chiLimit approximates the upper 1e-4 quantile of chi-square with df
// degrees of freedom (Wilson–Hilferty).
func chiLimit(df float64) float64 {
	const z = 3.719
	v := 2 / (9 * df)
	return df * math.Pow(1-v+z*math.Sqrt(v), 3)
}

func TestBucketDistributionTopBits(t *testing.T) {
	seq := make([]string, 100000)
	for i := range seq {
		seq[i] = fmt.Sprintf("/data/set%06d", i)
	}
	nested := make([]string, 0, 100000)
	for i := 0; len(nested) < 100000; i++ {
		nested = append(nested, fmt.Sprintf("/vol/%d/%d/%d", i/1000, i/10%100, i%10))
	}
	r := rand.New(rand.NewPCG(3, 4))
	random := make([]string, 0, 100000)
	seen := map[string]bool{}
	for len(random) < 100000 {
		b := []byte("/")
		for range 4 + r.IntN(40) {
			b = append(b, "abcdefghijklmnopqrstuvwxyz_./"[r.IntN(29)])
		}
		if p, err := Clean(string(b)); err == nil && !seen[p] {
			seen[p] = true
			random = append(random, p)
		}
	}
	sets := map[string][]string{
		"sequential": seq, "nested": nested, "random": random,
		"wordTree": wordTree(2000), "gridTree": gridTree(), "homeTree": homeTree(),
	}
	for name, paths := range sets {
		var xs []string
		for d := uint(1); d <= 6; d++ {
			x, lim := chiSquare(paths, d), chiLimit(float64(int(1)<<d-1))
			if x > lim {
				t.Errorf("%s (%d paths), %d top bits: chi-square %.1f > %.1f", name, len(paths), d, x, lim)
			}
			xs = append(xs, fmt.Sprintf("%.1f/%.0f", x, lim))
		}
		t.Logf("%-10s %6d paths, chi-square/limit for 2..64 bins: %v", name, len(paths), xs)
	}
}

// TestTreeImbalanceThreeIslands checks the placement the system actually
// does: ~2,000 directories, buckets by H3, islands by a table shared equally
// among 3 islands (both a fresh table and one grown from 1 island by
// PlanRebalance).
func TestTreeImbalanceThreeIslands(t *testing.T) {
	three := []IslandID{1, 2, 3}
	fresh, err := NewTable(three, DepthFor(3))
	if err != nil {
		t.Fatal(err)
	}
	one, _ := NewTable([]IslandID{1}, 0)
	moves, err := PlanRebalance(one, nil, three)
	if err != nil {
		t.Fatal(err)
	}
	grown, err := Apply(one, moves)
	if err != nil {
		t.Fatal(err)
	}
	for name, dirs := range map[string][]string{"wordTree": wordTree(2000), "gridTree": gridTree(), "homeTree": homeTree()} {
		for tname, tab := range map[string]Table{"NewTable": fresh, "planned": grown} {
			count := map[IslandID]float64{}
			for _, d := range dirs {
				count[tab.Lookup(Bucket(d))]++
			}
			c := []float64{count[1], count[2], count[3]}
			imb := Imbalance(c)
			t.Logf("%-8s %d dirs, %s depth %d: per island %v, imbalance %.3f", name, len(dirs), tname, tab.Depth, c, imb)
			if imb > 0.1 {
				t.Errorf("%s via %s: imbalance %.3f > 0.1 (%v)", name, tname, imb, c)
			}
		}
	}
}
