package faults

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The names the tests below arm; a real binary's packages register theirs.
func init() { Register("a", "b", "c", "e", "n", "z") }

func TestNilAndEmpty(t *testing.T) {
	var s *Set
	if err := s.Hit("x"); err != nil {
		t.Fatal(err)
	}
	if err := New().Hit("x"); err != nil {
		t.Fatal(err)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		ok   bool
	}{
		{"", true},
		{"a=error", true},
		{"a=error;b=crash; c=sleep(5ms)", true},
		{"a=2*error", true},
		{"a", false},
		{"=error", false},
		{"a=boom", false},
		{"a=0*error", false},
		{"a=sleep(xx)", false},
		{"unknown=error", false},
		{"a=error;unknown=crash", false},
	} {
		_, err := Parse(tc.spec)
		if (err == nil) != tc.ok {
			t.Errorf("Parse(%q) err=%v, want ok=%v", tc.spec, err, tc.ok)
		}
	}
}

// A name nobody registered (a failpoint renamed in the product) is an
// error naming it, not an armed point that never fires.
func TestParseUnknownName(t *testing.T) {
	_, err := Parse("a=error;renamed.point=crash;z=sleep(1ms);other.gone=error")
	if err == nil {
		t.Fatal("Parse accepted unregistered names")
	}
	for _, want := range []string{`"other.gone"`, `"renamed.point"`, "unknown failpoint", "registered failpoints: a, b, c"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), `"a"`) {
		t.Errorf("error %q lists a registered name as unknown", err)
	}
}

func TestRegister(t *testing.T) {
	if !Registered("a") || Registered("nope") {
		t.Fatal("Registered")
	}
	for _, bad := range []string{"", "a", "x=y", "x;y"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", bad)
				}
			}()
			Register(bad)
		}()
	}
}

// FromEnv honours ATOLL_FAILPOINTS only under -tags failpoints; otherwise
// a set variable is an error saying so.
func TestFromEnvGate(t *testing.T) {
	t.Setenv(EnvVar, "")
	if s, err := FromEnv(); err != nil || s == nil {
		t.Fatalf("empty %s: %v %v", EnvVar, s, err)
	}
	t.Setenv(EnvVar, "e=error")
	s, err := FromEnv()
	if Enabled {
		if err != nil || !errors.Is(s.Hit("e"), ErrInjected) {
			t.Fatalf("failpoints build: FromEnv: %v", err)
		}
		t.Setenv(EnvVar, "gone=error")
		if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), `"gone"`) {
			t.Fatalf("failpoints build: unknown name: %v", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), "-tags failpoints") {
		t.Fatalf("release build: FromEnv with %s set: %v %v", EnvVar, s, err)
	}
}

func TestActions(t *testing.T) {
	s, err := Parse("e=error;n=2*error;z=sleep(1ms);c=crash")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Hit("e"); !errors.Is(err, ErrInjected) {
		t.Fatalf("e: %v", err)
	}
	if err := s.Hit("n"); err != nil {
		t.Fatalf("n first hit: %v", err)
	}
	if err := s.Hit("n"); !errors.Is(err, ErrInjected) {
		t.Fatalf("n second hit: %v", err)
	}
	if err := s.Hit("n"); err != nil {
		t.Fatalf("n third hit: %v", err)
	}
	start := time.Now()
	if err := s.Hit("z"); err != nil || time.Since(start) < time.Millisecond {
		t.Fatalf("z: %v", err)
	}
	var crashed string
	s.OnCrash = func(name string) { crashed = name }
	if err := s.Hit("c"); !errors.Is(err, ErrInjected) || crashed != "c" {
		t.Fatalf("c: %v %q", err, crashed)
	}
	s.Disable("e")
	if err := s.Hit("e"); err != nil {
		t.Fatalf("disabled: %v", err)
	}
	// Call runs the test's function, on the Nth hit only when asked.
	var called []string
	boom := errors.New("boom")
	s.Enable("k", Action{Kind: Call, Nth: 2, Call: func(name string) error { called = append(called, name); return boom }})
	if err := s.Hit("k"); err != nil {
		t.Fatalf("k first hit: %v", err)
	}
	if err := s.Hit("k"); !errors.Is(err, boom) {
		t.Fatalf("k second hit: %v", err)
	}
	if len(called) != 1 || called[0] != "k" {
		t.Fatalf("Call ran for %v", called)
	}
}
