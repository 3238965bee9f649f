package simnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// ErrNoPartitions is returned by Partition on a loopback net.
var ErrNoPartitions = errors.New("simnet: partitions need network namespaces")

// ErrConfig is a bad Config.
var ErrConfig = errors.New("simnet: bad config")

// Config describes a net.
type Config struct {
	// Name identifies the run: 1 to 6 letters or digits.
	Name string
	// Hosts are the hosts' names (letters, digits, '-'), at most 200.
	Hosts []string
	// Loopback forces the fallback to loopback addresses.
	Loopback bool
}

var nameRE = regexp.MustCompile(`^[a-z0-9]{1,6}$`)
var hostRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,30}$`)

// Validate checks the configuration.
func (c *Config) Validate() error {
	if !nameRE.MatchString(c.Name) {
		return fmt.Errorf("%w: name %q: 1 to 6 lower-case letters or digits", ErrConfig, c.Name)
	}
	if len(c.Hosts) == 0 || len(c.Hosts) > 200 {
		return fmt.Errorf("%w: %d hosts (1..200)", ErrConfig, len(c.Hosts))
	}
	seen := map[string]bool{}
	for _, h := range c.Hosts {
		if !hostRE.MatchString(h) || seen[h] {
			return fmt.Errorf("%w: host name %q (lower-case letters, digits, '-'; unique)", ErrConfig, h)
		}
		seen[h] = true
	}
	return nil
}

// Host is one simulated host.
type Host struct {
	Name string
	Addr netip.Addr
	ns   string // network namespace ("" on a loopback net)
	idx  int
	// cg maps a cgroup v1 controller to the host's cgroup (nil: none,
	// see BudgetsAvailable); disk is the budgeted disk's "MAJ:MIN".
	cg   map[string]string
	disk string
	// img, loop and mnt are the host's own disk (GiveDisk).
	img, loop, mnt string
}

// Net is a set of hosts on one bridge.
type Net struct {
	cfg    Config
	hosts  []*Host
	local  netip.Addr
	bridge string
	reason string // why this is a loopback net ("" when isolated)

	mu struct {
		sync.Mutex
		cuts map[[2]string]bool // a -> b dropped
	}
}

// New creates the hosts. Without the means for namespaces it falls back
// to loopback addresses (see Reason).
func New(ctx context.Context, cfg Config) (*Net, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Net{cfg: cfg}
	n.mu.cuts = map[[2]string]bool{}
	why := ""
	if cfg.Loopback {
		why = "loopback requested"
	} else {
		why = Available()
	}
	if why == "" {
		err := n.setup(ctx)
		if err == nil {
			return n, nil
		}
		n.teardown()
		why = err.Error()
	}
	// Fallback: 127.99.S.x on lo, S from the process id so concurrent
	// runs rarely meet.
	n.reason = why
	s := byte(os.Getpid() % 250)
	n.local = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	n.hosts = nil
	for i, h := range cfg.Hosts {
		n.hosts = append(n.hosts, &Host{Name: h, Addr: netip.AddrFrom4([4]byte{127, 99, s, byte(i + 2)}), idx: i})
	}
	return n, nil
}

// Available returns "" when this process can make namespaces, else why not.
func Available() string {
	if os.Geteuid() != 0 {
		return "not root: network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN"
	}
	for _, tool := range []string{"ip", "nsenter", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not installed (make setup)"
		}
	}
	return ""
}

func run(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("simnet: %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

func (n *Net) nsName(host string) string { return "atl-" + n.cfg.Name + "-" + host }

// vethName is the bridge side of h's veth pair.
func (n *Net) vethName(h *Host) string { return fmt.Sprintf("atv-%s-%d", n.cfg.Name, h.idx) }

// setup makes the bridge and the namespaces.
func (n *Net) setup(ctx context.Context) error {
	n.cleanupRun(ctx)
	s, err := freeSubnet(ctx)
	if err != nil {
		return err
	}
	n.bridge = "atb-" + n.cfg.Name
	n.local = netip.AddrFrom4([4]byte{10, 99, s, 1})
	cmds := [][]string{
		{"ip", "link", "add", n.bridge, "type", "bridge"},
		{"ip", "addr", "add", n.local.String() + "/24", "dev", n.bridge},
		{"ip", "link", "set", n.bridge, "up"},
	}
	for _, c := range cmds {
		if err := run(ctx, c...); err != nil {
			return err
		}
	}
	for i, name := range n.cfg.Hosts {
		h := &Host{Name: name, Addr: netip.AddrFrom4([4]byte{10, 99, s, byte(i + 2)}), ns: n.nsName(name), idx: i}
		n.hosts = append(n.hosts, h)
		veth := n.vethName(h)
		for _, c := range [][]string{
			{"ip", "netns", "add", h.ns},
			{"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
			{"ip", "link", "set", veth, "master", n.bridge, "up"},
			{"ip", "-n", h.ns, "addr", "add", h.Addr.String() + "/24", "dev", "eth0"},
			{"ip", "-n", h.ns, "link", "set", "eth0", "up"},
			{"ip", "-n", h.ns, "link", "set", "lo", "up"},
			{"ip", "-n", h.ns, "route", "add", "default", "via", n.local.String()},
		} {
			if err := run(ctx, c...); err != nil {
				return err
			}
		}
	}
	n.makeCgroups()
	return nil
}

// freeSubnet picks S such that no interface has an address in 10.99.S.0/24.
func freeSubnet(ctx context.Context) (byte, error) {
	out, err := exec.CommandContext(ctx, "ip", "-4", "-o", "addr", "show").Output()
	if err != nil {
		return 0, fmt.Errorf("simnet: ip addr show: %w", err)
	}
	start := os.Getpid() % 250
	for k := 0; k < 250; k++ {
		s := (start + k) % 250
		if !bytes.Contains(out, []byte(fmt.Sprintf(" 10.99.%d.", s))) {
			return byte(s), nil
		}
	}
	return 0, errors.New("simnet: no free 10.99.S.0/24 subnet")
}

// Isolated reports whether the hosts are namespaces (partitions work).
func (n *Net) Isolated() bool { return n.reason == "" }

// Reason says why the net fell back to loopback ("" when isolated).
func (n *Net) Reason() string { return n.reason }

// Local is the caller's own address on the net.
func (n *Net) Local() netip.Addr { return n.local }

// Hosts lists the hosts in Config order.
func (n *Net) Hosts() []*Host { return slices.Clone(n.hosts) }

// Host returns the named host, or nil.
func (n *Net) Host(name string) *Host {
	for _, h := range n.hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// Command runs exe inside h's network namespace (as exec.CommandContext).
// On a net with cgroups the process first joins the host's cgroups (its
// budget and its counters); its pid is the program's own either way.
func (h *Host) Command(ctx context.Context, exe string, args ...string) *exec.Cmd {
	if h.ns == "" {
		return exec.CommandContext(ctx, exe, args...)
	}
	argv := h.enterCgroups(append([]string{"nsenter", "--net=/run/netns/" + h.ns, "--", exe}, args...))
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// Mode is the direction of a cut.
type Mode int

const (
	// Both drops the traffic between two hosts in both directions.
	Both Mode = iota
	// OneWay drops what the first host sends to the second; the second's
	// packets still reach the first.
	OneWay
)

func (m Mode) String() string {
	if m == OneWay {
		return "one-way"
	}
	return "two-way"
}

// Partition cuts the traffic between hosts a and b ("" or the name
// "local" stands for the caller).
func (n *Net) Partition(ctx context.Context, a, b string, mode Mode) error {
	if !n.Isolated() {
		return ErrNoPartitions
	}
	pairs := [][2]string{{a, b}}
	if mode == Both {
		pairs = append(pairs, [2]string{b, a})
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range pairs {
		if _, _, err := n.endsLocked(p[0], p[1]); err != nil {
			return err
		}
		n.mu.cuts[p] = true
	}
	return n.applyLocked(ctx, a, b)
}

// Heal removes the cuts between a and b, both directions.
func (n *Net) Heal(ctx context.Context, a, b string) error {
	if !n.Isolated() {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.mu.cuts, [2]string{a, b})
	delete(n.mu.cuts, [2]string{b, a})
	return n.applyLocked(ctx, a, b)
}

// HealAll removes every cut.
func (n *Net) HealAll(ctx context.Context) error {
	if !n.Isolated() {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.cuts = map[[2]string]bool{}
	var first error
	for _, h := range n.hosts {
		if err := n.rulesLocked(ctx, h); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Cuts lists the current cuts as "a->b".
func (n *Net) Cuts() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for c := range n.mu.cuts {
		out = append(out, c[0]+"->"+c[1])
	}
	slices.Sort(out)
	return out
}

func (n *Net) addrOf(name string) (netip.Addr, *Host, error) {
	if name == "" || name == "local" {
		return n.local, nil, nil
	}
	h := n.Host(name)
	if h == nil {
		return netip.Addr{}, nil, fmt.Errorf("%w: no host %q", ErrConfig, name)
	}
	return h.Addr, h, nil
}

func (n *Net) endsLocked(a, b string) (*Host, *Host, error) {
	_, ha, err := n.addrOf(a)
	if err != nil {
		return nil, nil, err
	}
	_, hb, err := n.addrOf(b)
	if err != nil {
		return nil, nil, err
	}
	if ha == nil && hb == nil {
		return nil, nil, fmt.Errorf("%w: a cut needs at least one host", ErrConfig)
	}
	if ha == hb {
		return nil, nil, fmt.Errorf("%w: a host cannot be cut from itself", ErrConfig)
	}
	return ha, hb, nil
}

// applyLocked rewrites the rules of the namespaces of a and b.
func (n *Net) applyLocked(ctx context.Context, a, b string) error {
	for _, name := range []string{a, b} {
		if _, h, _ := n.addrOf(name); h != nil {
			if err := n.rulesLocked(ctx, h); err != nil {
				return err
			}
		}
	}
	return nil
}

// rulesLocked replaces h's nftables table with the cuts that involve it:
// a cut x->y drops, on x, what goes to y and, on y, what comes from x (so
// a cut holds whichever side is a namespace).
func (n *Net) rulesLocked(ctx context.Context, h *Host) error {
	var out, in []string
	for c := range n.mu.cuts {
		src, _, _ := n.addrOf(c[0])
		dst, _, _ := n.addrOf(c[1])
		if c[0] == h.Name {
			out = append(out, dst.String())
		}
		if c[1] == h.Name {
			in = append(in, src.String())
		}
	}
	slices.Sort(out)
	slices.Sort(in)
	var sb strings.Builder
	// Deleting a table that does not exist fails; adding it first makes
	// the delete always succeed, all in one atomic nft transaction.
	sb.WriteString("table inet atoll_simnet {}\ndelete table inet atoll_simnet\n")
	sb.WriteString("table inet atoll_simnet {\n")
	sb.WriteString("  chain output { type filter hook output priority 0; policy accept;\n")
	for _, a := range out {
		fmt.Fprintf(&sb, "    ip daddr %s drop\n", a)
	}
	sb.WriteString("  }\n  chain input { type filter hook input priority 0; policy accept;\n")
	for _, a := range in {
		fmt.Fprintf(&sb, "    ip saddr %s drop\n", a)
	}
	sb.WriteString("  }\n}\n")
	cmd := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+h.ns, "--", "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(sb.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("simnet: nft in %s: %v: %s", h.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Close deletes the namespaces, the bridge and the hosts' cgroups (killing
// what still runs in them).
func (n *Net) Close() error {
	if !n.Isolated() {
		return nil
	}
	return n.teardown()
}

func (n *Net) teardown() error {
	var first error
	ctx := context.Background()
	n.killHosts()
	for _, h := range n.hosts {
		if h.ns == "" {
			continue
		}
		// Deleting the namespace deletes eth0 and so its veth peer, but
		// the kernel does it later: a net made right after with the same
		// name would find the peer still there. Delete it now.
		_ = run(ctx, "ip", "link", "del", n.vethName(h))
		if err := run(ctx, "ip", "netns", "del", h.ns); err != nil && first == nil {
			first = err
		}
	}
	if n.bridge != "" {
		if err := run(ctx, "ip", "link", "del", n.bridge); err != nil && first == nil {
			first = err
		}
	}
	if err := n.removeDisks(); err != nil && first == nil {
		first = err
	}
	if err := n.removeCgroups(); err != nil && first == nil {
		first = err
	}
	return first
}

// cleanupRun deletes what an earlier run with the same name left.
func (n *Net) cleanupRun(ctx context.Context) {
	removeStale(ctx, "atl-"+n.cfg.Name+"-", "atb-"+n.cfg.Name)
}

// CleanupStale deletes the namespaces and bridges of every simnet run
// (leftovers of killed runs). Only for a machine where no run is going.
func CleanupStale(ctx context.Context) {
	removeStale(ctx, "atl-", "atb-")
	imgs, _ := filepath.Glob(filepath.Join(DiskRoot, "*.img"))
	for _, img := range imgs {
		removeStaleDisk(ctx, img)
	}
	for _, c := range budgetControllers {
		ds, _ := os.ReadDir(filepath.Join(CgroupRoot, c, cgroupParent))
		for _, d := range ds {
			if d.IsDir() {
				_ = syscall.Rmdir(filepath.Join(CgroupRoot, c, cgroupParent, d.Name()))
			}
		}
	}
}

func removeStale(ctx context.Context, nsPrefix, bridgePrefix string) {
	if out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], nsPrefix) {
				_ = run(ctx, "ip", "netns", "del", f[0])
			}
		}
	}
	if out, err := exec.CommandContext(ctx, "ip", "-o", "link", "show", "type", "bridge").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			name := strings.TrimSuffix(f[1], ":")
			if name == bridgePrefix || (strings.HasSuffix(bridgePrefix, "-") && strings.HasPrefix(name, bridgePrefix)) {
				_ = run(ctx, "ip", "link", "del", name)
			}
		}
	}
}
