package layout

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Kind is the redundancy scheme of a policy.
type Kind uint8

const (
	None   Kind = 0
	Mirror Kind = 1
	EC     Kind = 2
)

// Limits on policy parameters.
const (
	MaxK            = 32
	MaxM            = 8
	MaxCopies       = 8
	MinFragmentSize = 4 << 10
	MaxFragmentSize = 32 << 20
	MinBlockSize    = 512

	DefaultFragmentSize = 1 << 20
	DefaultBlockSize    = 64 << 10
)

// ErrBadPolicy is wrapped by every policy parse and validation error.
var ErrBadPolicy = errors.New("layout: bad policy")

// Policy is a file's redundancy policy.
type Policy struct {
	Kind Kind
	// K data fragments and M redundant fragments per stripe. For mirror:R,
	// K = 1 and M = R-1; for none, K = 1 and M = 0.
	K, M         int
	FragmentSize int // bytes per data fragment of a full stripe
	BlockSize    int // largest block addressed by one pointer
}

// Width is the number of fragments per stripe.
func (p Policy) Width() int { return p.K + p.M }

// StripeData is the data capacity of a full stripe.
func (p Policy) StripeData() int { return p.K * p.FragmentSize }

// Default is the cluster default policy.
func Default() Policy {
	return Policy{Kind: EC, K: 4, M: 1, FragmentSize: DefaultFragmentSize, BlockSize: DefaultBlockSize}
}

// String renders the canonical text; Parse(p.String()) == p.
func (p Policy) String() string {
	var b strings.Builder
	switch p.Kind {
	case None:
		b.WriteString("none")
	case Mirror:
		fmt.Fprintf(&b, "mirror:%d", p.M+1)
	case EC:
		fmt.Fprintf(&b, "ec:%d+%d", p.K, p.M)
	default:
		fmt.Fprintf(&b, "kind%d", p.Kind)
	}
	if p.FragmentSize != DefaultFragmentSize {
		b.WriteString(",frag=" + FormatSize(p.FragmentSize))
	}
	if p.BlockSize != DefaultBlockSize {
		b.WriteString(",block=" + FormatSize(p.BlockSize))
	}
	return b.String()
}

// Parse parses policy text (see the package doc).
func Parse(s string) (Policy, error) {
	p := Policy{FragmentSize: DefaultFragmentSize, BlockSize: DefaultBlockSize}
	parts := strings.Split(strings.TrimSpace(s), ",")
	scheme := strings.ToLower(strings.TrimSpace(parts[0]))
	switch {
	case scheme == "none":
		p.Kind, p.K, p.M = None, 1, 0
	case strings.HasPrefix(scheme, "mirror:"):
		r, err := strconv.Atoi(scheme[len("mirror:"):])
		if err != nil {
			return p, fmt.Errorf("%w %q: mirror:R needs a copy count", ErrBadPolicy, s)
		}
		if r < 2 || r > MaxCopies {
			return p, fmt.Errorf("%w %q: mirror needs 2..%d copies", ErrBadPolicy, s, MaxCopies)
		}
		p.Kind, p.K, p.M = Mirror, 1, r-1
	case strings.HasPrefix(scheme, "ec:"):
		ks, ms, ok := strings.Cut(scheme[len("ec:"):], "+")
		k, err1 := strconv.Atoi(ks)
		m, err2 := strconv.Atoi(ms)
		if !ok || err1 != nil || err2 != nil {
			return p, fmt.Errorf("%w %q: ec needs K+M, e.g. ec:4+1", ErrBadPolicy, s)
		}
		if k < 1 || k > MaxK || m < 1 || m > MaxM {
			return p, fmt.Errorf("%w %q: ec needs 1<=K<=%d and 1<=M<=%d", ErrBadPolicy, s, MaxK, MaxM)
		}
		p.Kind, p.K, p.M = EC, k, m
	case scheme == "":
		return p, fmt.Errorf("%w: empty", ErrBadPolicy)
	default:
		return p, fmt.Errorf("%w %q: scheme must be none, mirror:R or ec:K+M", ErrBadPolicy, s)
	}
	for _, opt := range parts[1:] {
		key, val, ok := strings.Cut(strings.TrimSpace(opt), "=")
		if !ok {
			return p, fmt.Errorf("%w %q: option %q needs key=value", ErrBadPolicy, s, opt)
		}
		n, err := ParseSize(val)
		if err != nil {
			return p, fmt.Errorf("%w %q: %v", ErrBadPolicy, s, err)
		}
		switch key {
		case "frag":
			p.FragmentSize = n
		case "block":
			p.BlockSize = n
		default:
			return p, fmt.Errorf("%w %q: unknown option %q", ErrBadPolicy, s, key)
		}
	}
	if err := p.check(); err != nil {
		return p, fmt.Errorf("%w %q: %v", ErrBadPolicy, s, err)
	}
	return p, nil
}

func (p Policy) check() error {
	if p.FragmentSize < MinFragmentSize || p.FragmentSize > MaxFragmentSize {
		return fmt.Errorf("frag must be %s..%s", FormatSize(MinFragmentSize), FormatSize(MaxFragmentSize))
	}
	if p.BlockSize < MinBlockSize || p.BlockSize > p.FragmentSize {
		return fmt.Errorf("block must be %s..frag", FormatSize(MinBlockSize))
	}
	if int64(p.K)*int64(p.FragmentSize) > 1<<31 {
		return errors.New("stripe data above 2 GiB")
	}
	return nil
}

// Validate checks that the policy can be placed on a cluster with the
// given number of storage slots.
func (p Policy) Validate(slots int) error {
	if err := p.check(); err != nil {
		return fmt.Errorf("%w %s: %v", ErrBadPolicy, p, err)
	}
	if p.Width() > slots {
		return fmt.Errorf("%w %s: needs %d storage slots, cluster has %d", ErrBadPolicy, p, p.Width(), slots)
	}
	return nil
}

// ParseSize parses "4096", "64KiB", "1MiB", "4k", "1M" (binary units).
func ParseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	mult := 1
	for _, u := range []struct {
		suf string
		m   int
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1}} {
		if strings.HasSuffix(strings.ToLower(t), u.suf) {
			t, mult = t[:len(t)-len(u.suf)], u.m
			break
		}
	}
	n, err := strconv.Atoi(strings.TrimSpace(t))
	if err != nil || n < 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

// HumanSize renders n in the largest binary unit below it, to one
// decimal (for people: "1.5GiB").
func HumanSize(n uint64) string {
	f := float64(n)
	for _, u := range []string{"B", "KiB", "MiB", "GiB", "TiB"} {
		if f < 1024 || u == "TiB" {
			return fmt.Sprintf("%.1f%s", f, u)
		}
		f /= 1024
	}
	return ""
}

// FormatSize renders n with the largest exact binary unit.
func FormatSize(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.Itoa(n>>30) + "GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}
