package filelock

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
)

// Owners used throughout: A and B share session 1, C is in session 2, D
// holds nothing.
var (
	A = Owner{1, 1}
	B = Owner{1, 2}
	C = Owner{2, 1}
	D = Owner{3, 9}
)

const M = MaxEnd

func px(o Owner, t Type, start, end uint64) Lock {
	return Lock{Owner: o, Kind: POSIX, Type: t, Start: start, End: end}
}

func pxp(o Owner, t Type, start, end uint64, pid uint32) Lock {
	l := px(o, t, start, end)
	l.Pid = pid
	return l
}

func fl(o Owner, t Type) Lock {
	return Lock{Owner: o, Kind: Flock, Type: t, Start: 0, End: MaxEnd}
}

func flp(o Owner, t Type, pid uint32) Lock {
	l := fl(o, t)
	l.Pid = pid
	return l
}

// checkSet fails t unless s keeps every Set invariant. It is written
// independently of the package's own checks so that breaking those is
// caught.
func checkSet(t *testing.T, s Set) {
	t.Helper()
	if s != nil && len(s) == 0 {
		t.Errorf("empty set is not nil")
	}
	less := func(a, b Lock) bool {
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Owner.Session != b.Owner.Session {
			return a.Owner.Session < b.Owner.Session
		}
		if a.Owner.ID != b.Owner.ID {
			return a.Owner.ID < b.Owner.ID
		}
		return a.Start < b.Start
	}
	for i, l := range s {
		if err := l.Valid(); err != nil {
			t.Errorf("lock %d %+v: %v", i, l, err)
		}
		if i > 0 && !less(s[i-1], l) {
			t.Errorf("lock %d %+v not after %+v", i, l, s[i-1])
		}
		for j := range i {
			p := s[j]
			if p.Owner != l.Owner || p.Kind != l.Kind {
				continue
			}
			if p.Start <= l.End && l.Start <= p.End {
				t.Errorf("locks %d %+v and %d %+v of one owner overlap", j, p, i, l)
			}
			if p.Type == l.Type && ((p.End != MaxEnd && p.End+1 == l.Start) || (l.End != MaxEnd && l.End+1 == p.Start)) {
				t.Errorf("locks %d %+v and %d %+v of one owner touch unmerged", j, p, i, l)
			}
		}
	}
}

// pure runs f on a copy of s and fails t if f changed s or if the result
// shares memory with s.
func pure(t *testing.T, s Set, f func(Set) Set) Set {
	t.Helper()
	orig := slices.Clone(s)
	got := f(s)
	if !reflect.DeepEqual(s, orig) {
		t.Fatalf("input modified: %+v, was %+v", s, orig)
	}
	res := slices.Clone(got)
	for i := range got {
		got[i].Pid ^= 0xdead
	}
	if !reflect.DeepEqual(s, orig) {
		t.Fatalf("result shares memory with the input")
	}
	return res
}

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		l  Lock
		ok bool
	}{
		{px(A, Read, 0, 0), true},
		{px(A, Write, 0, M), true},
		{px(A, Write, M, M), true},
		{px(A, Read, 10, 9), false},
		{Lock{Owner: A, Kind: 0, Type: Read}, false},
		{Lock{Owner: A, Kind: 3, Type: Read}, false},
		{Lock{Owner: A, Kind: POSIX, Type: 0}, false},
		{Lock{Owner: A, Kind: POSIX, Type: 3}, false},
		{fl(A, Read), true},
		{fl(A, Write), true},
		{Lock{Owner: A, Kind: Flock, Type: Read, Start: 0, End: 10}, false},
		{Lock{Owner: A, Kind: Flock, Type: Read, Start: 1, End: M}, false},
		{Lock{Owner: A, Kind: Flock, Type: 0, Start: 0, End: M}, false},
	} {
		err := tc.l.Valid()
		if (err == nil) != tc.ok {
			t.Errorf("%+v: Valid() = %v, want ok=%v", tc.l, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v does not wrap ErrInvalid", tc.l, err)
		}
	}
}

func TestConflicts(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b Lock
		want bool
	}{
		{"read read other owners", px(A, Read, 0, 9), px(B, Read, 0, 9), false},
		{"read write", px(A, Read, 0, 9), px(B, Write, 5, 5), true},
		{"write read", px(A, Write, 0, 9), px(B, Read, 9, 20), true},
		{"write write", px(A, Write, 0, 9), px(B, Write, 0, 9), true},
		{"same owner", px(A, Write, 0, 9), px(A, Write, 0, 9), false},
		{"same session other id", px(A, Write, 0, 9), px(B, Read, 0, 9), true},
		{"same id other session", px(Owner{1, 1}, Write, 0, 9), px(Owner{2, 1}, Read, 0, 9), true},
		{"touching", px(A, Write, 0, 9), px(B, Write, 10, 19), false},
		{"one byte overlap", px(A, Write, 0, 10), px(B, Write, 10, 19), true},
		{"disjoint", px(A, Write, 0, 9), px(B, Write, 100, 109), false},
		{"at MaxEnd", px(A, Write, 10, M), px(B, Read, M, M), true},
		{"at 0", px(A, Read, 0, 0), px(B, Write, 0, M), true},
		{"flock vs posix", fl(A, Write), px(B, Write, 0, M), false},
		{"posix vs flock", px(A, Write, 0, 9), fl(B, Write), false},
		{"flock write read", fl(A, Write), fl(B, Read), true},
		{"flock read read", fl(A, Read), fl(B, Read), false},
		{"flock same owner", fl(A, Write), fl(A, Write), false},
	} {
		if got := Conflicts(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: Conflicts(%+v, %+v) = %v, want %v", tc.name, tc.a, tc.b, got, tc.want)
		}
		if got := Conflicts(tc.b, tc.a); got != tc.want {
			t.Errorf("%s: Conflicts not symmetric", tc.name)
		}
	}
}

func TestConflict(t *testing.T) {
	s := Set{
		px(A, Read, 0, 9),
		px(B, Write, 5, 15),
		px(C, Write, 10, 20),
		fl(A, Read),
		fl(C, Write),
	}
	checkSet(t, s)
	for _, tc := range []struct {
		name string
		l    Lock
		want Lock
		ok   bool
	}{
		{"first of three", px(D, Write, 8, 12), s[0], true},
		{"read skips read", px(D, Read, 8, 12), s[1], true},
		{"only last", px(D, Read, 16, 30), s[2], true},
		{"none past", px(D, Write, 21, M), Lock{}, false},
		{"own locks ignored", px(B, Write, 5, 15), s[0], true},
		{"own and only", px(C, Write, 16, 20), Lock{}, false},
		{"flock read", fl(D, Read), s[4], true},
		{"flock write", fl(D, Write), s[3], true},
		{"flock own", fl(C, Read), Lock{}, false},
		{"flock own write", fl(C, Write), s[3], true},
	} {
		got, ok := s.Conflict(tc.l)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: Conflict(%+v) = %+v, %v; want %+v, %v", tc.name, tc.l, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBlockers(t *testing.T) {
	s := Set{
		px(A, Read, 0, 9),
		px(A, Read, 20, 29),
		px(A, Write, 40, 49),
		px(B, Write, 30, 39),
		px(C, Read, 0, 50),
		fl(B, Write),
	}
	checkSet(t, s)
	for _, tc := range []struct {
		name string
		l    Lock
		want []Owner
	}{
		{"all distinct", px(D, Write, 0, 100), []Owner{A, B, C}},
		{"own excluded", px(A, Write, 0, 100), []Owner{B, C}},
		{"readers pass readers", px(D, Read, 0, 100), []Owner{A, B}},
		{"read by writer of range", px(D, Read, 45, 45), []Owner{A}},
		{"none", px(D, Write, 51, M), nil},
		{"flock only flock", fl(D, Read), []Owner{B}},
		{"flock own", fl(B, Write), nil},
	} {
		got := s.Blockers(tc.l)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Blockers(%+v) = %v, want %v", tc.name, tc.l, got, tc.want)
		}
	}
}

func TestApply(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before Set
		l      Lock
		want   Set
	}{
		{"empty", nil, px(A, Write, 0, 99), Set{px(A, Write, 0, 99)}},
		{"split write by read", Set{px(A, Write, 0, 99)}, px(A, Read, 10, 19),
			Set{px(A, Write, 0, 9), px(A, Read, 10, 19), px(A, Write, 20, 99)}},
		{"merge adjacent reads", Set{px(A, Read, 0, 9)}, px(A, Read, 10, 19), Set{px(A, Read, 0, 19)}},
		{"merge adjacent before", Set{px(A, Read, 10, 19)}, px(A, Read, 0, 9), Set{px(A, Read, 0, 19)}},
		{"merge and cut", Set{px(A, Read, 0, 9), px(A, Write, 10, 19)}, px(A, Read, 5, 14),
			Set{px(A, Read, 0, 14), px(A, Write, 15, 19)}},
		{"upgrade whole", Set{px(A, Read, 0, 99)}, px(A, Write, 0, 99), Set{px(A, Write, 0, 99)}},
		{"upgrade wider", Set{px(A, Read, 10, 19)}, px(A, Write, 0, 99), Set{px(A, Write, 0, 99)}},
		{"upgrade middle", Set{px(A, Read, 0, 99)}, px(A, Write, 40, 59),
			Set{px(A, Read, 0, 39), px(A, Write, 40, 59), px(A, Read, 60, 99)}},
		{"downgrade start", Set{px(A, Write, 0, 99)}, px(A, Read, 0, 9),
			Set{px(A, Read, 0, 9), px(A, Write, 10, 99)}},
		{"downgrade end", Set{px(A, Write, 0, 99)}, px(A, Read, 90, 99),
			Set{px(A, Write, 0, 89), px(A, Read, 90, 99)}},
		{"downgrade overhanging", Set{px(A, Write, 10, 19)}, px(A, Read, 15, 30),
			Set{px(A, Write, 10, 14), px(A, Read, 15, 30)}},
		{"same type inside", Set{px(A, Read, 0, 99)}, px(A, Read, 10, 19), Set{px(A, Read, 0, 99)}},
		{"bridge touching", Set{px(A, Read, 0, 9), px(A, Read, 20, 29)}, px(A, Read, 10, 19),
			Set{px(A, Read, 0, 29)}},
		{"bridge overlapping", Set{px(A, Read, 0, 9), px(A, Read, 20, 29)}, px(A, Read, 5, 25),
			Set{px(A, Read, 0, 29)}},
		{"across types", Set{px(A, Read, 0, 9), px(A, Write, 20, 29), px(A, Read, 40, 49)}, px(A, Write, 5, 44),
			Set{px(A, Read, 0, 4), px(A, Write, 5, 44), px(A, Read, 45, 49)}},
		{"swallow several", Set{px(A, Read, 0, 9), px(A, Write, 20, 29), px(A, Read, 40, 49)}, px(A, Read, 0, 49),
			Set{px(A, Read, 0, 49)}},
		{"touching other type kept", Set{px(A, Read, 0, 9)}, px(A, Write, 10, 19),
			Set{px(A, Read, 0, 9), px(A, Write, 10, 19)}},
		{"touching both sides other type", Set{px(A, Read, 0, 9), px(A, Read, 20, 29)}, px(A, Write, 10, 19),
			Set{px(A, Read, 0, 9), px(A, Write, 10, 19), px(A, Read, 20, 29)}},
		{"gap not merged", Set{px(A, Read, 0, 9)}, px(A, Read, 11, 19),
			Set{px(A, Read, 0, 9), px(A, Read, 11, 19)}},
		{"adjacent at 0", Set{px(A, Read, 1, 9)}, px(A, Read, 0, 0), Set{px(A, Read, 0, 9)}},
		{"no wrap: MaxEnd then 0", Set{px(A, Read, 10, M)}, px(A, Read, 0, 3),
			Set{px(A, Read, 0, 3), px(A, Read, 10, M)}},
		{"no wrap: 0 then MaxEnd", Set{px(A, Read, 0, 3)}, px(A, Read, 10, M),
			Set{px(A, Read, 0, 3), px(A, Read, 10, M)}},
		{"adjacent at MaxEnd", Set{px(A, Read, 0, M-1)}, px(A, Read, M, M), Set{px(A, Read, 0, M)}},
		{"adjacent before MaxEnd", Set{px(A, Read, M, M)}, px(A, Read, 0, M-1), Set{px(A, Read, 0, M)}},
		{"split at MaxEnd", Set{px(A, Write, 0, M)}, px(A, Read, M, M),
			Set{px(A, Write, 0, M-1), px(A, Read, M, M)}},
		{"split at 0", Set{px(A, Write, 0, M)}, px(A, Read, 0, 0),
			Set{px(A, Read, 0, 0), px(A, Write, 1, M)}},
		{"whole over pieces", Set{px(A, Read, 0, 0), px(A, Write, 5, 6), px(A, Read, M, M)}, px(A, Write, 0, M),
			Set{px(A, Write, 0, M)}},
		{"other owners never merge", Set{px(A, Read, 0, 9)}, px(B, Read, 10, 19),
			Set{px(A, Read, 0, 9), px(B, Read, 10, 19)}},
		{"other owner not split", Set{px(B, Write, 0, 99)}, px(A, Read, 10, 19),
			Set{px(A, Read, 10, 19), px(B, Write, 0, 99)}},
		{"other owner kept around", Set{px(A, Read, 0, 9), px(B, Read, 0, 9), px(C, Read, 10, 19)}, px(B, Read, 10, 19),
			Set{px(A, Read, 0, 9), px(B, Read, 0, 19), px(C, Read, 10, 19)}},
		{"sorted by session then id", Set{px(C, Read, 0, 9)}, px(B, Read, 50, 59),
			Set{px(B, Read, 50, 59), px(C, Read, 0, 9)}},
		{"flock acquire", nil, fl(A, Read), Set{fl(A, Read)}},
		{"flock upgrade", Set{fl(A, Read)}, fl(A, Write), Set{fl(A, Write)}},
		{"flock downgrade", Set{fl(A, Write), fl(B, Read)}, fl(A, Read), Set{fl(A, Read), fl(B, Read)}},
		{"flock again", Set{fl(A, Write)}, fl(A, Write), Set{fl(A, Write)}},
		{"flock other owner", Set{fl(B, Read)}, fl(A, Read), Set{fl(A, Read), fl(B, Read)}},
		{"flock leaves posix", Set{px(A, Write, 0, 9), px(B, Write, 0, 9)}, fl(A, Write),
			Set{px(A, Write, 0, 9), px(B, Write, 0, 9), fl(A, Write)}},
		{"posix leaves flock", Set{fl(A, Write)}, px(A, Read, 0, M), Set{px(A, Read, 0, M), fl(A, Write)}},
		{"posix after flock of lower owner", Set{fl(A, Read)}, px(C, Read, 0, 0), Set{px(C, Read, 0, 0), fl(A, Read)}},
		{"pid: pieces keep theirs", Set{pxp(A, Write, 0, 99, 7)}, pxp(A, Read, 10, 19, 8),
			Set{pxp(A, Write, 0, 9, 7), pxp(A, Read, 10, 19, 8), pxp(A, Write, 20, 99, 7)}},
		{"pid: merged takes the request's", Set{pxp(A, Read, 0, 9, 7)}, pxp(A, Read, 10, 19, 8),
			Set{pxp(A, Read, 0, 19, 8)}},
		{"pid: flock replaced", Set{flp(A, Read, 7)}, flp(A, Read, 8), Set{flp(A, Read, 8)}},
		{"invalid ignored", Set{px(A, Read, 0, 9)}, px(A, Read, 20, 19), Set{px(A, Read, 0, 9)}},
		{"invalid flock range ignored", nil, Lock{Owner: A, Kind: Flock, Type: Read, Start: 5, End: 5}, nil},
		{"invalid kind ignored", Set{px(A, Read, 0, 9)}, Lock{Owner: A, Kind: 9, Type: Read}, Set{px(A, Read, 0, 9)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkSet(t, tc.before)
			got := pure(t, tc.before, func(s Set) Set { return s.Apply(tc.l) })
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Apply(%+v) to %+v\n got %+v\nwant %+v", tc.l, tc.before, got, tc.want)
			}
			checkSet(t, got)
		})
	}
}

func TestUnlock(t *testing.T) {
	for _, tc := range []struct {
		name       string
		before     Set
		o          Owner
		k          Kind
		start, end uint64
		want       Set
	}{
		{"split whole file", Set{px(A, Write, 0, M)}, A, POSIX, 50, 59,
			Set{px(A, Write, 0, 49), px(A, Write, 60, M)}},
		{"nothing there", Set{px(A, Read, 0, 9)}, A, POSIX, 20, 29, Set{px(A, Read, 0, 9)}},
		{"touching not cut", Set{px(A, Read, 10, 19)}, A, POSIX, 20, 29, Set{px(A, Read, 10, 19)}},
		{"empty set", nil, A, POSIX, 0, M, nil},
		{"exact", Set{px(A, Read, 0, 9)}, A, POSIX, 0, 9, nil},
		{"covering several", Set{px(A, Read, 0, 9), px(A, Write, 20, 29), px(A, Read, 40, 49)}, A, POSIX, 5, 44,
			Set{px(A, Read, 0, 4), px(A, Read, 45, 49)}},
		{"all of owner", Set{px(A, Read, 0, 9), px(A, Write, 20, M), px(B, Read, 0, 9)}, A, POSIX, 0, M,
			Set{px(B, Read, 0, 9)}},
		{"start of lock", Set{px(A, Write, 0, 9)}, A, POSIX, 0, 0, Set{px(A, Write, 1, 9)}},
		{"end of lock", Set{px(A, Write, 0, 9)}, A, POSIX, 9, 20, Set{px(A, Write, 0, 8)}},
		{"at 0 of whole file", Set{px(A, Write, 0, M)}, A, POSIX, 0, 0, Set{px(A, Write, 1, M)}},
		{"at MaxEnd of whole file", Set{px(A, Write, 0, M)}, A, POSIX, M, M, Set{px(A, Write, 0, M-1)}},
		{"tail", Set{px(A, Write, 0, M)}, A, POSIX, 100, M, Set{px(A, Write, 0, 99)}},
		{"empty range", Set{px(A, Write, 0, M)}, A, POSIX, 10, 9, Set{px(A, Write, 0, M)}},
		{"other owner untouched", Set{px(A, Write, 0, 9), px(B, Write, 20, 29)}, B, POSIX, 0, 9,
			Set{px(A, Write, 0, 9), px(B, Write, 20, 29)}},
		{"same id other session", Set{px(Owner{2, 1}, Write, 0, 9)}, Owner{1, 1}, POSIX, 0, M,
			Set{px(Owner{2, 1}, Write, 0, 9)}},
		{"pid kept", Set{pxp(A, Write, 0, 9, 5)}, A, POSIX, 3, 4,
			Set{pxp(A, Write, 0, 2, 5), pxp(A, Write, 5, 9, 5)}},
		{"posix leaves flock", Set{px(A, Write, 0, 9), fl(A, Write)}, A, POSIX, 0, M, Set{fl(A, Write)}},
		{"flock leaves posix", Set{px(A, Write, 0, 9), fl(A, Write)}, A, Flock, 0, M, Set{px(A, Write, 0, 9)}},
		{"flock range ignored", Set{fl(A, Write), fl(B, Read)}, A, Flock, 5, 5, Set{fl(B, Read)}},
		{"flock empty range ignored", Set{fl(A, Write)}, A, Flock, 5, 4, nil},
		{"flock none held", Set{fl(B, Read)}, A, Flock, 0, M, Set{fl(B, Read)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkSet(t, tc.before)
			got := pure(t, tc.before, func(s Set) Set { return s.Unlock(tc.o, tc.k, tc.start, tc.end) })
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Unlock(%v, %d, %d, %d) of %+v\n got %+v\nwant %+v", tc.o, tc.k, tc.start, tc.end, tc.before, got, tc.want)
			}
			checkSet(t, got)
		})
	}
}

// Example from the brief: Linux-like split and merge through a sequence.
func TestApplyUnlockSequence(t *testing.T) {
	var s Set
	s = s.Apply(px(A, Write, 0, 99))
	s = s.Apply(px(A, Read, 10, 19))
	s = s.Apply(px(B, Read, 200, 299))
	s = s.Unlock(A, POSIX, 50, 59)
	s = s.Apply(px(A, Write, 10, 19))
	want := Set{px(A, Write, 0, 49), px(A, Write, 60, 99), px(B, Read, 200, 299)}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
	s = s.Apply(px(A, Write, 50, 59))
	want = Set{px(A, Write, 0, 99), px(B, Read, 200, 299)}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
}

func testSet() Set {
	return Set{
		px(A, Read, 0, 9),
		px(A, Write, 20, 29),
		px(B, Read, 0, 9),
		px(C, Write, 100, M),
		fl(A, Write),
		fl(B, Read),
		fl(C, Read),
	}
}

func TestUnlockOwner(t *testing.T) {
	s := testSet()
	checkSet(t, s)
	for _, tc := range []struct {
		o    Owner
		want Set
	}{
		{A, Set{px(B, Read, 0, 9), px(C, Write, 100, M), fl(B, Read), fl(C, Read)}},
		{B, Set{px(A, Read, 0, 9), px(A, Write, 20, 29), px(C, Write, 100, M), fl(A, Write), fl(C, Read)}},
		{D, s},
	} {
		got := pure(t, s, func(s Set) Set { return s.UnlockOwner(tc.o) })
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("UnlockOwner(%v)\n got %+v\nwant %+v", tc.o, got, tc.want)
		}
		checkSet(t, got)
	}
	if got := (Set{px(A, Read, 0, 0), fl(A, Read)}).UnlockOwner(A); got != nil {
		t.Errorf("UnlockOwner of everything = %#v, want nil", got)
	}
}

func TestDropSession(t *testing.T) {
	s := testSet()
	for _, tc := range []struct {
		session uint64
		want    Set
		n       int
	}{
		{1, Set{px(C, Write, 100, M), fl(C, Read)}, 5},
		{2, Set{px(A, Read, 0, 9), px(A, Write, 20, 29), px(B, Read, 0, 9), fl(A, Write), fl(B, Read)}, 2},
		{3, s, 0},
	} {
		var n int
		got := pure(t, s, func(s Set) Set {
			var out Set
			out, n = s.DropSession(tc.session)
			return out
		})
		if !reflect.DeepEqual(got, tc.want) || n != tc.n {
			t.Errorf("DropSession(%d)\n got %+v, %d\nwant %+v, %d", tc.session, got, n, tc.want, tc.n)
		}
		checkSet(t, got)
	}
	s, n := s.DropSession(1)
	s, m := s.DropSession(2)
	if s != nil || n+m != 7 {
		t.Errorf("dropping every session left %#v, counted %d+%d", s, n, m)
	}
}

func TestHeld(t *testing.T) {
	s := testSet()
	for _, tc := range []struct {
		o    Owner
		want []Lock
	}{
		{A, []Lock{px(A, Read, 0, 9), px(A, Write, 20, 29), fl(A, Write)}},
		{C, []Lock{px(C, Write, 100, M), fl(C, Read)}},
		{D, nil},
	} {
		got := s.Held(tc.o)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Held(%v) = %+v, want %+v", tc.o, got, tc.want)
		}
		if len(got) > 0 {
			got[0].Pid = 99
			if s[0].Pid == 99 || !reflect.DeepEqual(s, testSet()) {
				t.Errorf("Held shares memory with the set")
			}
		}
	}
}

// A flock lock and POSIX locks of other owners on the same bytes never
// conflict, in either direction, while each kind still conflicts within
// itself.
func TestFlockPosixIndependent(t *testing.T) {
	var s Set
	s = s.Apply(px(A, Write, 0, M))
	if l, ok := s.Conflict(fl(B, Write)); ok {
		t.Fatalf("flock conflicts with posix %+v", l)
	}
	s = s.Apply(fl(B, Write))
	if l, ok := s.Conflict(px(C, Write, 0, 0)); !ok || l != px(A, Write, 0, M) {
		t.Fatalf("posix conflict = %+v, %v", l, ok)
	}
	if l, ok := s.Conflict(fl(C, Read)); !ok || l != fl(B, Write) {
		t.Fatalf("flock conflict = %+v, %v", l, ok)
	}
	if b := s.Blockers(px(B, Write, 5, 5)); !reflect.DeepEqual(b, []Owner{A}) {
		t.Fatalf("posix blockers of B = %v", b)
	}
	if b := s.Blockers(fl(A, Write)); !reflect.DeepEqual(b, []Owner{B}) {
		t.Fatalf("flock blockers of A = %v", b)
	}
	// Unlocking one kind leaves the other.
	s = s.Unlock(B, POSIX, 0, M)
	s = s.Unlock(A, Flock, 0, M)
	want := Set{px(A, Write, 0, M), fl(B, Write)}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v, want %+v", s, want)
	}
}

func ExampleSet_Apply() {
	a := Owner{Session: 1, ID: 1}
	s := Set{{Owner: a, Kind: POSIX, Type: Write, Start: 0, End: 99}}
	s = s.Apply(Lock{Owner: a, Kind: POSIX, Type: Read, Start: 10, End: 19})
	for _, l := range s {
		fmt.Println(l.Type, l.Start, l.End)
	}
	// Output:
	// 2 0 9
	// 1 10 19
	// 2 20 99
}

// TestAppendKind: the lock a client holds while it appends conflicts only
// with another owner's append lock, never with an application's POSIX or
// flock lock on the same file, and is one whole-file lock per owner.
func TestAppendKind(t *testing.T) {
	app := func(o Owner) Lock { return Lock{Owner: o, Kind: Append, Type: Write, End: MaxEnd} }
	var s Set
	s = s.Apply(Lock{Owner: B, Kind: POSIX, Type: Write, End: MaxEnd})
	s = s.Apply(Lock{Owner: B, Kind: Flock, Type: Write, End: MaxEnd})
	if c, ok := s.Conflict(app(A)); ok {
		t.Fatalf("append lock conflicts with %+v", c)
	}
	s = s.Apply(app(A))
	if _, ok := s.Conflict(app(B)); !ok {
		t.Fatal("two owners' append locks do not conflict")
	}
	if _, ok := s.Conflict(app(A)); ok {
		t.Fatal("an owner's append lock conflicts with its own")
	}
	if got := len(s.Apply(app(A))); got != 3 {
		t.Fatalf("append lock taken twice: %d locks, want 3", got)
	}
	s = s.Unlock(A, Append, 0, 0)
	if _, ok := s.Conflict(app(B)); ok || len(s) != 2 {
		t.Fatalf("after the unlock: %v", s)
	}
	if err := (Lock{Owner: A, Kind: Append, Type: Write, End: 9}).Valid(); err == nil {
		t.Fatal("an append lock on part of the file is valid")
	}
}
