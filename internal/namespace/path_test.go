package namespace

import (
	"errors"
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	long := strings.Repeat("x", MaxName)
	for _, tc := range []struct {
		in, want string
		err      error
	}{
		{"/", "/", nil},
		{"/a", "/a", nil},
		{"/a/b", "/a/b", nil},
		{"//", "/", nil},
		{"/a/", "/a", nil},
		{"/a//b///", "/a/b", nil},
		{"/./a/./b/.", "/a/b", nil},
		{"/a/../b", "/b", nil},
		{"/a/b/../../..", "/", nil},
		{"/..", "/", nil},
		{"/../a", "/a", nil},
		{"/a/b/c/../../d", "/a/d", nil},
		{"/...", "/...", nil},
		{"/.a/..b/a..", "/.a/..b/a..", nil},
		{"/ spaces /\xff\xfe", "/ spaces /\xff\xfe", nil},
		{"/" + long, "/" + long, nil},
		{"", "", ErrBadPath},
		{"a", "", ErrBadPath},
		{"./a", "", ErrBadPath},
		{"a/b", "", ErrBadPath},
		{"/a\x00b", "", ErrBadPath},
		{"/" + long + "x", "", ErrNameTooLong},
		{"/" + long + "x/..", "", ErrNameTooLong},
		{"/" + strings.Repeat("a/", MaxPath/2), "", ErrNameTooLong},
	} {
		got, err := Clean(tc.in)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("Clean(%.40q) = %.40q, %v; want %v", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Clean(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if !IsClean(got) {
			t.Errorf("IsClean(%q) = false", got)
		}
		if IsClean(tc.in) != (tc.in == tc.want) {
			t.Errorf("IsClean(%q) = %v", tc.in, IsClean(tc.in))
		}
	}
}

func TestCleanLimits(t *testing.T) {
	// MaxPath bytes exactly is allowed, one more is not.
	p := "/" + strings.Repeat("b/", (MaxPath-2)/2) + "c"
	if len(p) != MaxPath {
		t.Fatal(len(p))
	}
	if got, err := Clean(p); err != nil || got != p {
		t.Errorf("Clean(MaxPath bytes): %v", err)
	}
	if _, err := Clean(p + "c"); !errors.Is(err, ErrNameTooLong) {
		t.Errorf("Clean(MaxPath+1 bytes): %v", err)
	}
	if IsClean(p + "c") {
		t.Error("IsClean accepts MaxPath+1 bytes")
	}
}

func TestCleanNoAllocWhenClean(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _, _ = Clean("/usr/local/share") }); n != 0 {
		t.Errorf("Clean of a clean path allocates %v times", n)
	}
}

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"a", nil},
		{"...", nil},
		{".hidden", nil},
		{"\xff", nil},
		{strings.Repeat("n", MaxName), nil},
		{"", ErrBadName},
		{".", ErrBadName},
		{"..", ErrBadName},
		{"a/b", ErrBadName},
		{"/", ErrBadName},
		{"a\x00", ErrBadName},
		{strings.Repeat("n", MaxName+1), ErrNameTooLong},
	} {
		if err := ValidName(tc.name); !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("ValidName(%.20q) = %v; want %v", tc.name, err, tc.err)
		}
	}
}

func TestJoinSplit(t *testing.T) {
	for _, tc := range []struct{ dir, name, want string }{
		{"/", "a", "/a"},
		{"/a", "b", "/a/b"},
		{"/a/b", "c d", "/a/b/c d"},
	} {
		got, err := Join(tc.dir, tc.name)
		if err != nil || got != tc.want {
			t.Errorf("Join(%q, %q) = %q, %v", tc.dir, tc.name, got, err)
			continue
		}
		if d, n := SplitPath(got); d != tc.dir || n != tc.name {
			t.Errorf("SplitPath(%q) = %q, %q", got, d, n)
		}
	}
	if d, n := SplitPath("/"); d != "/" || n != "" {
		t.Errorf("SplitPath(/) = %q, %q", d, n)
	}
	for _, s := range []string{"", "a", "a/b"} { // not clean: no panic
		SplitPath(s)
	}
	for _, tc := range []struct {
		dir, name string
		err       error
	}{
		{"a", "b", ErrBadPath},
		{"/a/", "b", ErrBadPath},
		{"/a", "", ErrBadName},
		{"/a", "..", ErrBadName},
		{"/a", "b/c", ErrBadName},
		{"/" + strings.Repeat("d/", 2046) + "d", "yz", ErrNameTooLong},
	} {
		if got, err := Join(tc.dir, tc.name); !errors.Is(err, tc.err) {
			t.Errorf("Join(%.20q, %q) = %q, %v; want %v", tc.dir, tc.name, got, err, tc.err)
		}
	}
}
