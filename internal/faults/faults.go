package faults

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// EnvVar names the environment variable read by FromEnv.
const EnvVar = "ATOLL_FAILPOINTS"

// ErrInjected is returned by Hit for a failpoint armed with "error".
var ErrInjected = errors.New("faults: injected failure")

// Kind is what an armed failpoint does when it fires.
type Kind int

const (
	// Error makes Hit return ErrInjected.
	Error Kind = iota + 1
	// Crash kills the process (or calls the Set's crash hook).
	Crash
	// Sleep delays the caller.
	Sleep
	// Call runs Action.Call and returns its error (in-process tests only;
	// the ATOLL_FAILPOINTS format has no way to name a function). A test
	// uses it to park the code under test at the failpoint until it has
	// done something, deterministically.
	Call
)

// Action describes one armed failpoint.
type Action struct {
	Kind  Kind
	Sleep time.Duration // for Sleep
	// Nth, when > 0, fires the action on the Nth hit only.
	Nth int64
	// Call is run by a Call action with the failpoint's name; Hit returns
	// its error.
	Call func(name string) error
}

type point struct {
	act  Action
	hits atomic.Int64
}

// Set is a collection of armed failpoints. The zero value and nil are both
// valid and have nothing armed.
type Set struct {
	armed atomic.Int32 // number of armed points; fast path when zero
	mu    struct {
		sync.Mutex
		points map[string]*point
	}
	// OnCrash replaces the default SIGKILL for in-process crash tests.
	OnCrash func(name string)
}

// New returns an empty Set.
func New() *Set { return &Set{} }

// FromEnv parses ATOLL_FAILPOINTS. An unset or empty variable gives an
// empty Set. In a binary built without -tags failpoints (Enabled false, a
// release build) a non-empty ATOLL_FAILPOINTS is an error: the role must
// refuse to start rather than run with failpoints silently off (or, worse,
// on, in production).
func FromEnv() (*Set, error) {
	spec := os.Getenv(EnvVar)
	if !Enabled {
		if strings.TrimSpace(spec) != "" {
			return nil, fmt.Errorf("faults: %s=%q is set, but this binary was built without failpoints: "+
				"failpoints need a binary built with -tags failpoints (unset %s to run normally)", EnvVar, spec, EnvVar)
		}
		return New(), nil
	}
	return Parse(spec)
}

// Parse parses the ATOLL_FAILPOINTS format described in the package doc.
// Every name must have been registered (Register) by a package linked into
// the binary; unknown names are an error that lists them.
func Parse(spec string) (*Set, error) {
	s := New()
	var unknown []string
	for _, item := range strings.Split(spec, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, act, ok := strings.Cut(item, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("faults: parse %q: want name=action", item)
		}
		a, err := parseAction(act)
		if err != nil {
			return nil, fmt.Errorf("faults: parse %q: %w", item, err)
		}
		if !Registered(name) {
			unknown = append(unknown, name)
			continue
		}
		s.Enable(name, a)
	}
	if len(unknown) > 0 {
		return nil, unknownError(unknown)
	}
	return s, nil
}

func parseAction(s string) (Action, error) {
	var a Action
	if n, rest, ok := strings.Cut(s, "*"); ok {
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil || v < 1 {
			return a, fmt.Errorf("bad hit count %q", n)
		}
		a.Nth = v
		s = rest
	}
	switch {
	case s == "error":
		a.Kind = Error
	case s == "crash":
		a.Kind = Crash
	case strings.HasPrefix(s, "sleep(") && strings.HasSuffix(s, ")"):
		d, err := time.ParseDuration(s[len("sleep(") : len(s)-1])
		if err != nil {
			return a, err
		}
		a.Kind, a.Sleep = Sleep, d
	default:
		return a, fmt.Errorf("unknown action %q", s)
	}
	return a, nil
}

// Enable arms name with a.
func (s *Set) Enable(name string, a Action) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.points == nil {
		s.mu.points = make(map[string]*point)
	}
	if _, ok := s.mu.points[name]; !ok {
		s.armed.Add(1)
	}
	s.mu.points[name] = &point{act: a}
}

// Disable disarms name.
func (s *Set) Disable(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.mu.points[name]; ok {
		delete(s.mu.points, name)
		s.armed.Add(-1)
	}
}

// Hit evaluates the failpoint name. It is safe on a nil Set.
func (s *Set) Hit(name string) error {
	if s == nil || s.armed.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	p := s.mu.points[name]
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	n := p.hits.Add(1)
	if p.act.Nth > 0 && n != p.act.Nth {
		return nil
	}
	switch p.act.Kind {
	case Call:
		if p.act.Call != nil {
			return p.act.Call(name)
		}
	case Error:
		return fmt.Errorf("%w at %s", ErrInjected, name)
	case Sleep:
		// Announced so that a test driving a child process knows the
		// child is parked here.
		fmt.Fprintf(os.Stderr, "faults: sleeping %v at failpoint %s\n", p.act.Sleep, name)
		time.Sleep(p.act.Sleep)
	case Crash:
		if s.OnCrash != nil {
			s.OnCrash(name)
			return fmt.Errorf("%w: crash at %s", ErrInjected, name)
		}
		fmt.Fprintf(os.Stderr, "faults: crash at failpoint %s\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not deliverable late; never return
	}
	return nil
}
