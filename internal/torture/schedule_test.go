package torture

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

var top = Topology{
	Roles:     []string{"manager", "storage0", "storage1", "storage2", "island1", "mount"},
	Storage:   []string{"storage0", "storage1", "storage2"},
	Hosts:     []string{"local", "m0", "s0", "s1", "s2", "i1"},
	Partition: true,
}

// The same seed gives the same schedule (a failure replays); another
// seed another one; every kind shows up in a long run; faults on one role
// never overlap; the last fifth is quiet.
func TestSchedule(t *testing.T) {
	d := 10 * time.Minute
	a, b := Schedule(7, d, 4*time.Second, top), Schedule(7, d, 4*time.Second, top)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("one seed, two schedules")
	}
	if reflect.DeepEqual(a, Schedule(8, d, 4*time.Second, top)) {
		t.Fatal("seeds 7 and 8 gave the same schedule")
	}
	kinds := map[FaultKind]int{}
	busy := map[string]time.Duration{}
	for _, f := range a {
		kinds[f.Kind]++
		if f.At+f.Duration > d*4/5+time.Second {
			t.Errorf("%s runs into the quiet end", f)
		}
		if busy[f.Target] > f.At {
			t.Errorf("%s overlaps an earlier fault on %s", f, f.Target)
		}
		busy[f.Target] = f.At + f.Duration
		if f.Kind == FaultPartition && (f.Peer == "" || f.Peer == f.Target) {
			t.Errorf("partition %s", f)
		}
	}
	for _, k := range []FaultKind{FaultKill, FaultPause, FaultPartition, FaultCorrupt, FaultDelete, FaultDiskFull} {
		if kinds[k] == 0 {
			t.Errorf("no %s fault in 10 minutes: %v", k, kinds)
		}
	}
	noNet := top
	noNet.Partition = false
	for _, f := range Schedule(7, d, 4*time.Second, noNet) {
		if f.Kind == FaultPartition {
			t.Fatal("a partition scheduled without namespaces")
		}
	}
}

// Failpoint faults come from a stream of their own: with them, a seed's
// other faults are the ones it had without them; each arms a point its
// role passes, and none overlaps another fault on its role.
func TestScheduleFailpoints(t *testing.T) {
	d := 10 * time.Minute
	withFP := top
	withFP.Failpoints = map[string][]string{"storage0": {"storage.put.afterData"}, "island1": {"meta.tx.afterIntent", "replica.beforeAppend"}, "manager": nil}
	plain, armed := Schedule(37, d, 4*time.Second, top), Schedule(37, d, 4*time.Second, withFP)
	var rest []Fault
	n := 0
	busy := map[string]time.Duration{}
	for _, f := range armed {
		if busy[f.Target] > f.At {
			t.Errorf("%s overlaps an earlier fault on %s", f, f.Target)
		}
		busy[f.Target] = f.At + f.Duration
		if f.Kind != FaultFailpoint {
			rest = append(rest, f)
			continue
		}
		n++
		if !slices.Contains(withFP.Failpoints[f.Target], f.Point) {
			t.Errorf("%s arms a point its role does not pass", f)
		}
		if f.At+f.Duration > d*4/5+time.Second {
			t.Errorf("%s runs into the quiet end", f)
		}
	}
	if !reflect.DeepEqual(rest, plain) {
		t.Error("scheduling failpoints changed the seed's other faults")
	}
	if n < 10 {
		t.Errorf("%d failpoint faults in 10 minutes", n)
	}
	if !reflect.DeepEqual(armed, Schedule(37, d, 4*time.Second, withFP)) {
		t.Error("one seed, two schedules")
	}
}
