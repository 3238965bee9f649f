package torture

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// FaultKind is one kind of fault the engine injects.
type FaultKind string

const (
	FaultKill      FaultKind = "kill"      // kill -9, restart after Duration
	FaultPause     FaultKind = "pause"     // SIGSTOP, SIGCONT after Duration (a hung server)
	FaultPartition FaultKind = "partition" // cut A from B (Mode) for Duration
	FaultCorrupt   FaultKind = "corrupt"   // flip bytes in a fragment file of storage A
	FaultDelete    FaultKind = "delete"    // delete a fragment file of storage A
	FaultDiskFull  FaultKind = "diskfull"  // fill storage A's disk for Duration
	// FaultFailpoint restarts role A with one of its registered
	// failpoints armed to crash it (Point); it runs until the point
	// fires or Duration ends, then starts again without it.
	FaultFailpoint FaultKind = "failpoint"
)

// Fault is one scheduled fault.
type Fault struct {
	At       time.Duration `json:"at"` // since the workload started
	Kind     FaultKind     `json:"kind"`
	Target   string        `json:"target"`            // a role name, or a host for partitions
	Peer     string        `json:"peer,omitempty"`    // partitions: the other side
	OneWay   bool          `json:"one_way,omitempty"` // partitions: only Target -> Peer is cut
	Duration time.Duration `json:"duration,omitempty"`
	Pick     uint64        `json:"pick,omitempty"`  // corrupt/delete: which fragment (an index into the sorted list)
	Point    string        `json:"point,omitempty"` // failpoint: the point armed
}

func (f Fault) String() string {
	s := fmt.Sprintf("%8.1fs %-9s %s", f.At.Seconds(), f.Kind, f.Target)
	if f.Kind == FaultPartition {
		dir := "<->"
		if f.OneWay {
			dir = "->"
		}
		s = fmt.Sprintf("%8.1fs %-9s %s %s %s", f.At.Seconds(), f.Kind, f.Target, dir, f.Peer)
	}
	if f.Kind == FaultFailpoint {
		s += " at " + f.Point
	}
	if f.Duration > 0 {
		s += fmt.Sprintf(" for %s", f.Duration.Round(100*time.Millisecond))
	}
	return s
}

// Topology is what the schedule may pick from.
type Topology struct {
	Roles     []string // every role that can be killed or paused
	Storage   []string // storage roles (corruption, deletion, disk full)
	Hosts     []string // hosts that can be partitioned, "local" being the clients
	Partition bool     // false: no partition faults (no namespaces)
	// Failpoints are the registered failpoints each role's process
	// passes (nil: no failpoint faults; the roles' binary must be built
	// with -tags failpoints).
	Failpoints map[string][]string
}

// Schedule draws the faults of a run from seed: one every Every on
// average over duration, each kind with its weight, at most one fault
// that makes a role unavailable at a time per role. The same seed and
// topology give the same schedule.
func Schedule(seed uint64, duration, every time.Duration, top Topology) []Fault {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	kinds := []FaultKind{FaultKill, FaultKill, FaultPause, FaultCorrupt, FaultDelete, FaultDiskFull}
	if top.Partition && len(top.Hosts) > 1 {
		kinds = append(kinds, FaultPartition, FaultPartition)
	}
	var out []Fault
	busyUntil := map[string]time.Duration{}
	// The last fifth of the run is quiet: every fault has ended before the
	// final heal, so what the checks see is the system's doing.
	end := duration * 4 / 5
	for at := every / 2; at < end; at += time.Duration(float64(every) * (0.5 + r.Float64())) {
		f := Fault{At: at, Kind: kinds[r.IntN(len(kinds))], Duration: time.Duration(1+r.IntN(8)) * time.Second}
		switch f.Kind {
		case FaultKill, FaultPause:
			f.Target = top.Roles[r.IntN(len(top.Roles))]
		case FaultCorrupt, FaultDelete, FaultDiskFull:
			f.Target = top.Storage[r.IntN(len(top.Storage))]
			f.Pick = r.Uint64()
			if f.Kind != FaultDiskFull {
				f.Duration = 0
			}
		case FaultPartition:
			i := r.IntN(len(top.Hosts))
			j := (i + 1 + r.IntN(len(top.Hosts)-1)) % len(top.Hosts)
			f.Target, f.Peer, f.OneWay = top.Hosts[i], top.Hosts[j], r.IntN(3) == 0
		}
		if at+f.Duration > end {
			f.Duration = max(end-at, time.Second)
		}
		key := f.Target
		if busyUntil[key] > at {
			continue // one fault at a time on a role: they are easier to replay
		}
		busyUntil[key] = at + f.Duration + time.Second
		out = append(out, f)
	}
	return withFailpoints(out, seed, every, end, top)
}

// withFailpoints adds failpoint faults to sched, one every 3×every on
// average, from a stream of their own: the other faults of a seed stay
// what they were before failpoints were scheduled.
func withFailpoints(sched []Fault, seed uint64, every, end time.Duration, top Topology) []Fault {
	var roles []string
	for r, pts := range top.Failpoints {
		if len(pts) > 0 {
			roles = append(roles, r)
		}
	}
	if len(roles) == 0 {
		return sched
	}
	slices.Sort(roles)
	r := rand.New(rand.NewPCG(seed, seed^0xfa11fa11fa11fa11))
	// busy holds every fault's window on its target (busyUntil has
	// only the last one).
	busy := func(target string, from, to time.Duration) bool {
		for _, f := range sched {
			if (f.Target == target || f.Peer == target) && f.At < to && from < f.At+f.Duration+time.Second {
				return true
			}
		}
		return false
	}
	for at := every * 3 / 2; at < end; at += time.Duration(float64(3*every) * (0.5 + r.Float64())) {
		target := roles[r.IntN(len(roles))]
		pts := top.Failpoints[target]
		f := Fault{At: at, Kind: FaultFailpoint, Target: target, Point: pts[r.IntN(len(pts))], Duration: time.Duration(2+r.IntN(7)) * time.Second}
		if at+f.Duration > end {
			f.Duration = max(end-at, time.Second)
		}
		if busy(target, at, at+f.Duration+time.Second) {
			continue
		}
		sched = append(sched, f) // later ones see it as busy
	}
	slices.SortStableFunc(sched, func(a, b Fault) int { return cmp.Compare(a.At, b.At) })
	return sched
}
