package filelock

// Waits is a wait-for graph between owners for POSIX deadlock detection
// (EDEADLK), like the kernel's: an owner waiting for a lock waits for the
// owners of the conflicting locks. Unlike the kernel, which follows only
// the first blocker of each waiter, every blocker is an edge, so a cycle
// through any of them is found. Not safe for concurrent use (the caller
// locks). The zero value is empty and ready to use.
type Waits struct {
	waits map[Owner][]Owner // waiter -> owners it waits for; never empty lists
}

// NewWaits returns an empty graph.
func NewWaits() *Waits { return &Waits{waits: make(map[Owner][]Owner)} }

// WouldDeadlock reports whether owner w starting to wait for blockers
// closes a cycle: some blocker is w, or transitively waits for w. What w
// itself waits for now does not matter (Wait would replace it).
func (g *Waits) WouldDeadlock(w Owner, blockers []Owner) bool {
	stack := append([]Owner(nil), blockers...)
	seen := make(map[Owner]bool)
	for len(stack) > 0 {
		o := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if o == w {
			return true
		}
		if seen[o] {
			// Also ends cycles that do not pass through w.
			continue
		}
		seen[o] = true
		stack = append(stack, g.waits[o]...)
	}
	return false
}

// Wait records that w waits for blockers (replacing what w waited for
// before). Waiting for nobody is Done.
func (g *Waits) Wait(w Owner, blockers []Owner) {
	if len(blockers) == 0 {
		g.Done(w)
		return
	}
	if g.waits == nil {
		g.waits = make(map[Owner][]Owner)
	}
	// A copy: the caller may reuse its slice.
	g.waits[w] = append([]Owner(nil), blockers...)
}

// Done removes w's waits.
func (g *Waits) Done(w Owner) { delete(g.waits, w) }

// Len is the number of waiting owners.
func (g *Waits) Len() int { return len(g.waits) }
