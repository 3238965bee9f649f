package faults

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// registry holds every failpoint name a linked package declared with
// Register. Parse accepts only these names, so that a failpoint renamed in
// the product (or misspelt in a test) is an error, not a silent no-op.
var registry struct {
	sync.Mutex
	names map[string]bool
}

// Register declares failpoint names. Every package that calls Set.Hit
// registers the names it hits, from an init function next to the
// constants that name them:
//
//	func init() { faults.Register(FailA, FailB) }
//
// It panics on an empty name or on a name registered twice (two packages
// claiming one failpoint).
func Register(names ...string) {
	registry.Lock()
	defer registry.Unlock()
	if registry.names == nil {
		registry.names = make(map[string]bool)
	}
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, "=; \t\n") {
			panic(fmt.Sprintf("faults: Register(%q): bad failpoint name", n))
		}
		if registry.names[n] {
			panic(fmt.Sprintf("faults: failpoint %q registered twice", n))
		}
		registry.names[n] = true
	}
}

// Registered reports whether name was declared with Register.
func Registered(name string) bool {
	registry.Lock()
	defer registry.Unlock()
	return registry.names[name]
}

// Names returns the registered failpoint names, sorted.
func Names() []string {
	registry.Lock()
	defer registry.Unlock()
	out := make([]string, 0, len(registry.names))
	for n := range registry.names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// unknownError lists the names of a spec that no linked package registered.
func unknownError(unknown []string) error {
	slices.Sort(unknown)
	unknown = slices.Compact(unknown)
	known := Names()
	list := "none: this binary links no package that declares failpoints"
	if len(known) > 0 {
		list = strings.Join(known, ", ")
	}
	return fmt.Errorf("faults: unknown failpoint %s (renamed or misspelt?); registered failpoints: %s",
		quoteAll(unknown), list)
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
