package filelock

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The model: per owner, the type and pid of every byte of a small
// address space, and of its flock lock. Cell 63 stands for the bytes
// 63..MaxEnd, so the random operations also hit MaxEnd.
const cells = 64

func cellStart(i int) uint64 { return uint64(i) }

func cellEnd(i int) uint64 {
	if i == cells-1 {
		return MaxEnd
	}
	return uint64(i)
}

type cell struct {
	t   Type // 0: not locked
	pid uint32
}

type modelOwner struct {
	posix [cells]cell
	flock cell
}

type model struct {
	owners []Owner // in Set order
	m      map[Owner]*modelOwner
}

func newModel(owners ...Owner) *model {
	md := &model{owners: owners, m: make(map[Owner]*modelOwner)}
	for _, o := range owners {
		md.m[o] = new(modelOwner)
	}
	return md
}

// apply sets [a, b]; the run of the same type the range ends up in is
// one merged lock, which takes the request's pid, as Apply documents.
func (md *model) apply(o Owner, t Type, a, b int, pid uint32) {
	p := &md.m[o].posix
	for i := a; i <= b; i++ {
		p[i] = cell{t, pid}
	}
	for i := a - 1; i >= 0 && p[i].t == t; i-- {
		p[i].pid = pid
	}
	for i := b + 1; i < cells && p[i].t == t; i++ {
		p[i].pid = pid
	}
}

func (md *model) unlock(o Owner, a, b int) {
	for i := a; i <= b; i++ {
		md.m[o].posix[i] = cell{}
	}
}

// conflict: some other owner's cell in [a, b] is locked, and one of the
// two is a write.
func (md *model) blockers(o Owner, t Type, a, b int) []Owner {
	var out []Owner
	for _, x := range md.owners {
		if x == o {
			continue
		}
		for i := a; i <= b; i++ {
			if c := md.m[x].posix[i]; c.t != 0 && (c.t == Write || t == Write) {
				out = append(out, x)
				break
			}
		}
	}
	return out
}

func (md *model) flockBlockers(o Owner, t Type) []Owner {
	var out []Owner
	for _, x := range md.owners {
		if c := md.m[x].flock; x != o && c.t != 0 && (c.t == Write || t == Write) {
			out = append(out, x)
		}
	}
	return out
}

// set is the canonical Set of the model: each maximal run of cells of
// one type is one lock.
func (md *model) set(t *testing.T) Set {
	t.Helper()
	var s Set
	for _, o := range md.owners {
		p := &md.m[o].posix
		for i := 0; i < cells; {
			if p[i].t == 0 {
				i++
				continue
			}
			j := i
			for j+1 < cells && p[j+1].t == p[i].t {
				j++
				if p[j].pid != p[i].pid {
					t.Fatalf("model: run %d..%d of %v has pids %d and %d", i, j, o, p[i].pid, p[j].pid)
				}
			}
			s = append(s, pxp(o, p[i].t, cellStart(i), cellEnd(j), p[i].pid))
			i = j + 1
		}
	}
	for _, o := range md.owners {
		if c := md.m[o].flock; c.t != 0 {
			s = append(s, flp(o, c.t, c.pid))
		}
	}
	return s
}

// TestModel runs random operations of three owners (two sharing a
// session) against the model, checking after every step the whole Set,
// its invariants, its encoding, and Conflict and Blockers before every
// lock request.
func TestModel(t *testing.T) {
	owners := []Owner{{1, 1}, {1, 2}, {2, 1}}
	runs, steps := 50, 500
	if testing.Short() {
		runs = 5
	}
	for seed := range uint64(runs) {
		r := rand.New(rand.NewPCG(seed, 99))
		md := newModel(owners...)
		var s Set
		var hist []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d after\n%s\n%s", seed, strings.Join(hist, "\n"), fmt.Sprintf(format, args...))
		}
		randRange := func() (int, int) {
			a, b := r.IntN(cells), r.IntN(cells)
			if a > b {
				a, b = b, a
			}
			if r.IntN(3) == 0 {
				b = min(cells-1, a+r.IntN(4))
			}
			return a, b
		}
		for range steps {
			o := owners[r.IntN(len(owners))]
			typ := Type(1 + r.IntN(2))
			pid := r.Uint32N(4)
			var op string
			switch x := r.IntN(100); {
			case x < 50:
				a, b := randRange()
				l := pxp(o, typ, cellStart(a), cellEnd(b), pid)
				op = fmt.Sprintf("Apply %+v", l)
				checkConflict(t, s, l, md.blockers(o, typ, a, b), fail)
				s = s.Apply(l)
				md.apply(o, typ, a, b, pid)
			case x < 78:
				a, b := randRange()
				op = fmt.Sprintf("Unlock %v POSIX %d %d", o, cellStart(a), cellEnd(b))
				s = s.Unlock(o, POSIX, cellStart(a), cellEnd(b))
				md.unlock(o, a, b)
			case x < 90:
				l := flp(o, typ, pid)
				op = fmt.Sprintf("Apply %+v", l)
				checkConflict(t, s, l, md.flockBlockers(o, typ), fail)
				s = s.Apply(l)
				md.m[o].flock = cell{typ, pid}
			case x < 96:
				op = fmt.Sprintf("Unlock %v Flock", o)
				s = s.Unlock(o, Flock, 0, MaxEnd)
				md.m[o].flock = cell{}
			case x < 98:
				op = fmt.Sprintf("UnlockOwner %v", o)
				s = s.UnlockOwner(o)
				md.m[o] = new(modelOwner)
			default:
				session := uint64(1 + r.IntN(3))
				op = fmt.Sprintf("DropSession %d", session)
				want := 0
				for _, l := range md.set(t) {
					if l.Owner.Session == session {
						want++
					}
				}
				var n int
				s, n = s.DropSession(session)
				for _, x := range owners {
					if x.Session == session {
						md.m[x] = new(modelOwner)
					}
				}
				if n != want {
					fail("%s: removed %d, want %d", op, n, want)
				}
			}
			hist = append(hist, op)
			want := md.set(t)
			if !reflect.DeepEqual(s, want) {
				fail("got  %+v\nwant %+v", s, want)
			}
			checkSet(t, s)
			if t.Failed() {
				fail("invariants broken: %+v", s)
			}
			for _, x := range owners {
				var h []Lock
				for _, l := range want {
					if l.Owner == x {
						h = append(h, l)
					}
				}
				if got := s.Held(x); !reflect.DeepEqual(got, h) {
					fail("Held(%v) = %+v, want %+v", x, got, h)
				}
			}
			if d, err := Decode(s.Encode()); err != nil || !reflect.DeepEqual(d, s) {
				fail("Decode(Encode) = %+v, %v", d, err)
			}
		}
	}
}

// checkConflict compares Conflict and Blockers for l with the model's
// blockers (in owner order, which is Set order within a kind).
func checkConflict(t *testing.T, s Set, l Lock, want []Owner, fail func(string, ...any)) {
	t.Helper()
	got := s.Blockers(l)
	if !reflect.DeepEqual(got, want) {
		fail("Blockers(%+v) = %v, want %v", l, got, want)
	}
	c, ok := s.Conflict(l)
	if ok != (len(want) > 0) {
		fail("Conflict(%+v) = %+v, %v; model blockers %v", l, c, ok, want)
	}
	if !ok {
		return
	}
	i := slices.Index(s, c)
	if i < 0 || !Conflicts(c, l) || c.Owner != want[0] {
		fail("Conflict(%+v) = %+v, not a conflicting lock of %v in the set", l, c, want[0])
	}
	for _, e := range s[:i] {
		if Conflicts(e, l) {
			fail("Conflict(%+v) = %+v, but %+v comes first", l, c, e)
		}
	}
}
