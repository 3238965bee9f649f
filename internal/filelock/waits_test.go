package filelock

import "testing"

func TestWaits(t *testing.T) {
	E := Owner{4, 4}
	type wait struct {
		w        Owner
		blockers []Owner
	}
	for _, tc := range []struct {
		name  string
		waits []wait // recorded in order with Wait
		done  []Owner
		w     Owner
		on    []Owner
		want  bool
		len   int
	}{
		{"empty graph", nil, nil, A, []Owner{B}, false, 0},
		{"no blockers", []wait{{B, []Owner{A}}}, nil, A, nil, false, 1},
		{"self", nil, nil, A, []Owner{A}, true, 0},
		{"self among others", nil, nil, A, []Owner{B, C, A}, true, 0},
		{"cycle of 2", []wait{{A, []Owner{B}}}, nil, B, []Owner{A}, true, 1},
		{"cycle of 3", []wait{{A, []Owner{B}}, {B, []Owner{C}}}, nil, C, []Owner{A}, true, 2},
		{"cycle of 4 through second blocker", []wait{{A, []Owner{E, B}}, {B, []Owner{C}}}, nil, C, []Owner{D, A}, true, 2},
		{"chain, not a cycle", []wait{{A, []Owner{B}}, {B, []Owner{C}}}, nil, D, []Owner{A}, false, 2},
		{"waiting on the chain's end", []wait{{A, []Owner{B}}, {B, []Owner{C}}}, nil, C, []Owner{D}, false, 2},
		{"reverse direction", []wait{{A, []Owner{B}}}, nil, A, []Owner{B}, false, 1},
		{"diamond", []wait{{A, []Owner{B, C}}, {B, []Owner{D}}, {C, []Owner{D}}}, nil, E, []Owner{A}, false, 3},
		{"diamond closed", []wait{{A, []Owner{B, C}}, {B, []Owner{D}}, {C, []Owner{D}}}, nil, D, []Owner{A}, true, 3},
		{"existing cycle elsewhere", []wait{{B, []Owner{C}}, {C, []Owner{B}}}, nil, A, []Owner{B}, false, 2},
		{"existing cycle elsewhere reaching w", []wait{{B, []Owner{C}}, {C, []Owner{B, A}}}, nil, A, []Owner{B}, true, 2},
		{"Done breaks cycle", []wait{{A, []Owner{B}}, {B, []Owner{C}}}, []Owner{B}, C, []Owner{A}, false, 1},
		{"Done of other keeps cycle", []wait{{A, []Owner{B}}, {B, []Owner{C}}}, []Owner{D}, C, []Owner{A}, true, 2},
		{"Wait replaces", []wait{{A, []Owner{B}}, {A, []Owner{C}}}, nil, B, []Owner{A}, false, 1},
		{"Wait replaces, new edge", []wait{{A, []Owner{B}}, {A, []Owner{C}}}, nil, C, []Owner{A}, true, 1},
		{"Wait with none is Done", []wait{{A, []Owner{B}}, {A, nil}}, nil, B, []Owner{A}, false, 0},
		{"same session other id", []wait{{Owner{1, 1}, []Owner{Owner{1, 2}}}}, nil, Owner{2, 1}, []Owner{Owner{1, 1}}, false, 1},
	} {
		for _, g := range []*Waits{NewWaits(), new(Waits)} {
			for _, w := range tc.waits {
				g.Wait(w.w, w.blockers)
			}
			for _, o := range tc.done {
				g.Done(o)
			}
			if got := g.WouldDeadlock(tc.w, tc.on); got != tc.want {
				t.Errorf("%s: WouldDeadlock(%v, %v) = %v, want %v", tc.name, tc.w, tc.on, got, tc.want)
			}
			if g.Len() != tc.len {
				t.Errorf("%s: Len() = %d, want %d", tc.name, g.Len(), tc.len)
			}
		}
	}
}

// WouldDeadlock only asks; Wait keeps its own copy of the blockers.
func TestWaitsNoAliasing(t *testing.T) {
	g := NewWaits()
	blockers := []Owner{B}
	g.Wait(A, blockers)
	if g.WouldDeadlock(C, []Owner{A}) || g.Len() != 1 {
		t.Fatal("asking changed the graph")
	}
	blockers[0] = C
	if g.WouldDeadlock(C, []Owner{A}) {
		t.Fatal("Wait kept the caller's slice")
	}
	if !g.WouldDeadlock(B, []Owner{A}) {
		t.Fatal("A no longer waits for B")
	}
	g.Done(A)
	g.Done(A)
	if g.Len() != 0 {
		t.Fatalf("Len() = %d after Done", g.Len())
	}
}
