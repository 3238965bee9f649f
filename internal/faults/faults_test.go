package faults

import (
	"errors"
	"testing"
	"time"
)

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
	} {
		_, err := Parse(tc.spec)
		if (err == nil) != tc.ok {
			t.Errorf("Parse(%q) err=%v, want ok=%v", tc.spec, err, tc.ok)
		}
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
}
