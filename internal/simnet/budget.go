package simnet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoBudgets is returned by SetBudget where the cgroup v1 controllers
// (cpu, cpuacct, blkio) or network namespaces are missing.
var ErrNoBudgets = errors.New("simnet: host budgets need root, network namespaces and cgroup v1 cpu, cpuacct and blkio")

// CgroupRoot is where the cgroup v1 hierarchies are mounted.
const CgroupRoot = "/sys/fs/cgroup"

// cgroupParent groups every run's host cgroups under each controller.
const cgroupParent = "atoll-simnet"

// Budget is what one simulated host may use: a small machine modelled on
// the shared box. A zero field is unlimited.
type Budget struct {
	// CPU is the host's share of the machine in cores (0.2 = a fifth of
	// one core), enforced by the CFS quota over a 100 ms period.
	CPU float64 `json:"cpu_cores,omitempty"`
	// DiskBps and DiskIOPS cap the host's reads and writes each (blkio
	// throttle) on the device of the directory given to SetBudget.
	// cgroup v1 charges only I/O the host's processes issue themselves:
	// reads, direct I/O and fsync's writeback; the kernel's background
	// writeback of dirty pages is not charged.
	DiskBps  int64 `json:"disk_bytes_per_s,omitempty"`
	DiskIOPS int64 `json:"disk_iops,omitempty"`
	// LinkBits is the host's link rate in bits/s, each direction.
	LinkBits int64 `json:"link_bits_per_s,omitempty"`
	// LinkDelay is added to every packet the host sends (a round trip
	// between two hosts pays both hosts' delays). It needs tc's netem,
	// which some kernels lack (SetBudget then fails with ErrNoBudgets);
	// without it a link has the veth's own latency, tens of µs.
	LinkDelay time.Duration `json:"link_delay_ns,omitempty"`
}

// String is a short form for reports: "0.2 core, 40 MB/s, 1 Gbit/s 0.1 ms".
func (b Budget) String() string {
	var parts []string
	if b.CPU > 0 {
		parts = append(parts, fmt.Sprintf("%.2g core", b.CPU))
	}
	if b.DiskBps > 0 || b.DiskIOPS > 0 {
		s := "disk"
		if b.DiskBps > 0 {
			s += fmt.Sprintf(" %.0f MB/s", float64(b.DiskBps)/1e6)
		}
		if b.DiskIOPS > 0 {
			s += fmt.Sprintf(" %d IOPS", b.DiskIOPS)
		}
		parts = append(parts, s)
	}
	if b.LinkBits > 0 || b.LinkDelay > 0 {
		s := "link"
		if b.LinkBits > 0 {
			s += fmt.Sprintf(" %g Mbit/s", float64(b.LinkBits)/1e6)
		}
		if b.LinkDelay > 0 {
			s += fmt.Sprintf(" +%gms", float64(b.LinkDelay)/1e6)
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "unlimited"
	}
	return strings.Join(parts, ", ")
}

// Validate checks the fields' ranges.
func (b Budget) Validate() error {
	switch {
	case b.CPU < 0 || (b.CPU > 0 && b.CPU < 0.01):
		return fmt.Errorf("%w: cpu %g cores (0 = unlimited, at least 0.01)", ErrConfig, b.CPU)
	case b.DiskBps < 0 || b.DiskIOPS < 0:
		return fmt.Errorf("%w: negative disk budget", ErrConfig)
	case b.LinkBits < 0 || (b.LinkBits > 0 && b.LinkBits < 8000):
		return fmt.Errorf("%w: link %d bits/s (0 = unlimited, at least 8000)", ErrConfig, b.LinkBits)
	case b.LinkDelay < 0 || b.LinkDelay > 10*time.Second:
		return fmt.Errorf("%w: link delay %v", ErrConfig, b.LinkDelay)
	}
	return nil
}

var budgetControllers = []string{"cpu", "cpuacct", "blkio"}

// BudgetsAvailable returns "" when hosts of an isolated net can get
// budgets, else why not.
func BudgetsAvailable() string {
	if why := Available(); why != "" {
		return why
	}
	if _, err := exec.LookPath("tc"); err != nil {
		return "tc is not installed (iproute2)"
	}
	for _, c := range budgetControllers {
		if _, err := os.Stat(filepath.Join(CgroupRoot, c, "cgroup.procs")); err != nil {
			return fmt.Sprintf("no cgroup v1 %s controller at %s", c, filepath.Join(CgroupRoot, c))
		}
	}
	return ""
}

// cgroupDir is h's cgroup under controller c.
func (n *Net) cgroupDir(c string, h *Host) string {
	return filepath.Join(CgroupRoot, c, cgroupParent, n.cfg.Name+"-"+h.Name)
}

// makeCgroups gives every host a cgroup under each controller, so every
// host's CPU-seconds and disk bytes are counted, budget or not. It is
// called once the namespaces exist; without the controllers the net works
// unbudgeted (SetBudget says why).
func (n *Net) makeCgroups() {
	if BudgetsAvailable() != "" {
		return
	}
	for _, h := range n.hosts {
		cg := map[string]string{}
		for _, c := range budgetControllers {
			d := n.cgroupDir(c, h)
			_ = removeCgroup(d) // a killed earlier run's
			if err := os.MkdirAll(d, 0o755); err != nil {
				return
			}
			cg[c] = d
		}
		h.cg = cg
	}
}

// removeCgroups deletes the hosts' cgroups once their processes are gone
// (teardown kills them first).
func (n *Net) removeCgroups() error {
	var first error
	for _, h := range n.hosts {
		for _, d := range h.cg {
			if err := removeCgroup(d); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// killHosts kills every process still in a host's cgroups.
func (n *Net) killHosts() {
	for _, h := range n.hosts {
		if d, ok := h.cg["cpuacct"]; ok {
			if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil {
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
		}
	}
}

func removeCgroup(d string) error {
	var err error
	for i := 0; i < 50; i++ {
		err = syscall.Rmdir(d)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("simnet: remove cgroup %s: %w", d, err)
}

// SetBudget applies b to host: CPU quota, disk throttle on the device
// holding dataDir ("" with no disk budget), link shaping both ways.
// Processes started by Command afterwards, and those already started,
// are bound by it. A zero Budget lifts every limit.
func (n *Net) SetBudget(ctx context.Context, host string, b Budget, dataDir string) error {
	if err := b.Validate(); err != nil {
		return err
	}
	h := n.Host(host)
	if h == nil {
		return fmt.Errorf("%w: no host %q", ErrConfig, host)
	}
	if !n.Isolated() || h.cg == nil {
		return ErrNoBudgets
	}
	quota := "-1"
	if b.CPU > 0 {
		quota = strconv.Itoa(int(b.CPU * 100000))
	}
	if err := writeFile(filepath.Join(h.cg["cpu"], "cpu.cfs_period_us"), "100000"); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(h.cg["cpu"], "cpu.cfs_quota_us"), quota); err != nil {
		return err
	}
	if err := n.setDisk(h, b, dataDir); err != nil {
		return err
	}
	return n.setLink(ctx, h, b)
}

func (n *Net) setDisk(h *Host, b Budget, dataDir string) error {
	if b.DiskBps == 0 && b.DiskIOPS == 0 && dataDir == "" {
		return nil
	}
	if dataDir == "" {
		return fmt.Errorf("%w: a disk budget needs the host's data directory", ErrConfig)
	}
	dev, err := diskOf(dataDir)
	if err != nil {
		return err
	}
	set := func(file string, v int64) error {
		// Writing "MAJ:MIN 0" removes the rule.
		return writeFile(filepath.Join(h.cg["blkio"], file), fmt.Sprintf("%s %d", dev, v))
	}
	for _, f := range []struct {
		file string
		v    int64
	}{
		{"blkio.throttle.read_bps_device", b.DiskBps},
		{"blkio.throttle.write_bps_device", b.DiskBps},
		{"blkio.throttle.read_iops_device", b.DiskIOPS},
		{"blkio.throttle.write_iops_device", b.DiskIOPS},
	} {
		if err := set(f.file, f.v); err != nil {
			return err
		}
	}
	h.disk = dev
	return nil
}

// diskOf returns "MAJ:MIN" of the whole disk holding path (the throttle
// applies to a disk, not a partition).
func diskOf(path string) (string, error) {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return "", err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return "", fmt.Errorf("simnet: stat %s: %w", path, err)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	sys := "/sys/dev/block/" + dev
	if _, err := os.Stat(sys); err != nil {
		return "", fmt.Errorf("simnet: %s is on %s, not a block device (a disk budget needs one)", path, dev)
	}
	if _, err := os.Stat(sys + "/partition"); err == nil {
		parent, err := os.ReadFile(sys + "/../dev")
		if err != nil {
			return "", fmt.Errorf("simnet: the disk of partition %s: %w", dev, err)
		}
		dev = strings.TrimSpace(string(parent))
	}
	return dev, nil
}

// setLink shapes h's link with a token bucket (tc tbf) on its eth0 (what
// it sends) and on its veth peer on the bridge (what it receives); a delay
// is a netem qdisc above eth0's bucket.
func (n *Net) setLink(ctx context.Context, h *Host, b Budget) error {
	veth := n.vethName(h)
	_ = run(ctx, "tc", "-n", h.ns, "qdisc", "del", "dev", "eth0", "root")
	_ = run(ctx, "tc", "qdisc", "del", "dev", veth, "root")
	var tbf []string
	if b.LinkBits > 0 {
		// The bucket holds 10 ms at the rate and at least one 64 KiB GSO
		// packet; the queue about 50 ms, so TCP meets a bottleneck, not
		// losses (400 ms measured no better: 10-server reads 95 MB/s
		// against 115).
		burst := max(b.LinkBits/8/100, 70000)
		tbf = []string{"tbf", "rate", fmt.Sprintf("%dbit", b.LinkBits), "burst", strconv.FormatInt(burst, 10), "latency", "50ms"}
	}
	eth0 := []string{"tc", "-n", h.ns, "qdisc", "add", "dev", "eth0"}
	if b.LinkDelay > 0 {
		err := run(ctx, append(eth0, "root", "handle", "1:", "netem", "delay", fmt.Sprintf("%dus", max(1, b.LinkDelay.Microseconds())), "limit", "10000")...)
		if err != nil {
			return fmt.Errorf("%w: a link delay needs tc's netem (CONFIG_NET_SCH_NETEM): %v", ErrNoBudgets, err)
		}
		if tbf != nil {
			if err := run(ctx, append(append(eth0, "parent", "1:1", "handle", "10:"), tbf...)...); err != nil {
				return err
			}
		}
	} else if tbf != nil {
		if err := run(ctx, append(append(eth0, "root"), tbf...)...); err != nil {
			return err
		}
	}
	if tbf == nil {
		return nil
	}
	return run(ctx, append([]string{"tc", "qdisc", "add", "dev", veth, "root"}, tbf...)...)
}

func writeFile(path, v string) error {
	if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
		return fmt.Errorf("simnet: write %q to %s: %w", v, path, err)
	}
	return nil
}

// enterCgroups wraps a command line so the process joins h's cgroups
// before it runs: the shell writes its own pid and execs, so the pid and
// everything the program forks stay in them.
func (h *Host) enterCgroups(argv []string) []string {
	if h.cg == nil {
		return argv
	}
	script := ""
	for _, c := range budgetControllers {
		script += fmt.Sprintf("echo $$ > %s/cgroup.procs && ", h.cg[c])
	}
	return append([]string{"/bin/sh", "-c", script + `exec "$@"`, "sh"}, argv...)
}

// Usage is what a host's processes used since the net was made.
type Usage struct {
	CPUSeconds float64 `json:"cpu_s"`
	// DiskBytes is what the host's processes read and wrote on their
	// budgeted disk (0 without a disk budget).
	DiskBytes int64 `json:"disk_bytes"`
	// Sent and Received are bytes through the host's eth0.
	SentBytes     int64 `json:"sent_bytes"`
	ReceivedBytes int64 `json:"received_bytes"`
}

// Sub is u - v, field by field.
func (u Usage) Sub(v Usage) Usage {
	return Usage{CPUSeconds: u.CPUSeconds - v.CPUSeconds, DiskBytes: u.DiskBytes - v.DiskBytes,
		SentBytes: u.SentBytes - v.SentBytes, ReceivedBytes: u.ReceivedBytes - v.ReceivedBytes}
}

// Usage reads h's counters: CPU from its cpuacct cgroup, disk from its
// blkio cgroup, bytes from its eth0.
func (n *Net) Usage(ctx context.Context, host string) (Usage, error) {
	h := n.Host(host)
	if h == nil {
		return Usage{}, fmt.Errorf("%w: no host %q", ErrConfig, host)
	}
	if h.cg == nil {
		return Usage{}, ErrNoBudgets
	}
	var u Usage
	b, err := os.ReadFile(filepath.Join(h.cg["cpuacct"], "cpuacct.usage"))
	if err != nil {
		return u, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return u, fmt.Errorf("simnet: cpuacct.usage: %w", err)
	}
	u.CPUSeconds = float64(ns) / 1e9
	if h.disk != "" {
		u.DiskBytes, err = blkioBytes(filepath.Join(h.cg["blkio"], "blkio.throttle.io_service_bytes"), h.disk)
		if err != nil {
			return u, err
		}
	}
	out, err := exec.CommandContext(ctx, "ip", "-n", h.ns, "-j", "-s", "link", "show", "eth0").Output()
	if err != nil {
		return u, fmt.Errorf("simnet: link counters of %s: %w", h.Name, err)
	}
	var links []struct {
		Stats64 struct {
			RX struct{ Bytes int64 } `json:"rx"`
			TX struct{ Bytes int64 } `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return u, fmt.Errorf("simnet: link counters of %s: %v", h.Name, err)
	}
	u.SentBytes, u.ReceivedBytes = links[0].Stats64.TX.Bytes, links[0].Stats64.RX.Bytes
	return u, nil
}

// blkioBytes sums the Read and Write lines of dev in an io_service_bytes
// file ("254:0 Read 4096").
func blkioBytes(path, dev string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) == 3 && fl[0] == dev && (fl[1] == "Read" || fl[1] == "Write") {
			v, _ := strconv.ParseInt(fl[2], 10, 64)
			total += v
		}
	}
	return total, sc.Err()
}

// CPUTimes is the machine's CPU time from /proc/stat, in clock ticks.
type CPUTimes struct{ Idle, Total uint64 }

// ReadCPUTimes reads the machine's aggregate CPU times.
func ReadCPUTimes() (CPUTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return CPUTimes{}, fmt.Errorf("simnet: /proc/stat: unexpected %q", line)
	}
	var t CPUTimes
	for i, s := range f[1:] {
		v, _ := strconv.ParseUint(s, 10, 64)
		if i == 7 || i == 8 { // guest time is already counted in user
			continue
		}
		t.Total += v
		if i == 3 || i == 4 { // idle, iowait
			t.Idle += v
		}
	}
	return t, nil
}

// IdleSince is the fraction of the machine idle between t0 and t1.
func IdleSince(t0, t1 CPUTimes) float64 {
	if t1.Total <= t0.Total {
		return 1
	}
	return float64(t1.Idle-t0.Idle) / float64(t1.Total-t0.Total)
}

// CheckQuotas fails when the budgets' CPU adds up to more than frac of
// the machine's cores (or one is unlimited): results would then be bound
// by the box, not by the modelled hosts.
func CheckQuotas(budgets []Budget, frac float64) error {
	var sum float64
	for _, b := range budgets {
		if b.CPU == 0 {
			return fmt.Errorf("%w: a host without a CPU budget can take the whole machine", ErrConfig)
		}
		sum += b.CPU
	}
	if limit := frac * float64(runtime.NumCPU()); sum > limit {
		return fmt.Errorf("%w: the hosts' CPU budgets add up to %.2f cores, more than %.0f%% of this machine's %d", ErrConfig, sum, 100*frac, runtime.NumCPU())
	}
	return nil
}

// DiskRoot holds the images of hosts' own disks: memory, so the only
// limit on a host's disk is its budget, not the box's one disk and
// journal.
const DiskRoot = "/dev/shm/atoll-simnet"

// GiveDisk gives host a disk of its own mounted at dir: a sparse image of
// size bytes in DiskRoot on a loop device, with a fresh ext4. Hosts that
// share the box's filesystem share its journal, so their fsyncs wait for
// each other's however their budgets are set; a disk of its own has its
// own journal, and SetBudget on dir throttles it. Close unmounts and
// deletes it.
func (n *Net) GiveDisk(ctx context.Context, host, dir string, size int64) error {
	h := n.Host(host)
	if h == nil {
		return fmt.Errorf("%w: no host %q", ErrConfig, host)
	}
	if !n.Isolated() {
		return ErrNoBudgets
	}
	if h.img != "" {
		return fmt.Errorf("%w: host %s has a disk already", ErrConfig, host)
	}
	for _, tool := range []string{"losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: %s is not installed", ErrNoBudgets, tool)
		}
	}
	if err := os.MkdirAll(DiskRoot, 0o755); err != nil {
		return err
	}
	img := filepath.Join(DiskRoot, n.cfg.Name+"-"+h.Name+".img")
	removeStaleDisk(ctx, img) // a killed run's of the same name
	f, err := os.Create(img)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(img)
		return err
	}
	h.img = img
	out, err := exec.CommandContext(ctx, "losetup", "-f", "--show", img).Output()
	if err != nil {
		return fmt.Errorf("simnet: losetup %s: %w", img, err)
	}
	h.loop = strings.TrimSpace(string(out))
	if err := run(ctx, "mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", h.loop); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := run(ctx, "mount", h.loop, dir); err != nil {
		return err
	}
	h.mnt = dir
	return nil
}

// removeDisks undoes GiveDisk for every host.
func (n *Net) removeDisks() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	ctx := context.Background()
	for _, h := range n.hosts {
		if h.mnt != "" {
			// A process killed a moment ago may still hold it.
			var err error
			for i := 0; i < 50; i++ {
				if err = run(ctx, "umount", h.mnt); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				err = run(ctx, "umount", "-l", h.mnt)
			}
			keep(err)
			h.mnt = ""
		}
		if h.loop != "" {
			keep(run(ctx, "losetup", "-d", h.loop))
			h.loop = ""
		}
		if h.img != "" {
			keep(os.Remove(h.img))
			h.img = ""
		}
	}
	return first
}

// removeStaleDisk detaches and deletes a disk image a killed run left:
// its loop devices' mounts, the loop devices, the file.
func removeStaleDisk(ctx context.Context, img string) {
	if _, err := os.Stat(img); err != nil {
		return
	}
	out, _ := exec.CommandContext(ctx, "losetup", "-j", img).Output()
	mounts, _ := os.ReadFile("/proc/mounts")
	for _, l := range strings.Split(string(out), "\n") {
		dev, _, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		for _, m := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(m); len(f) > 1 && f[0] == dev {
				_ = run(ctx, "umount", "-l", f[1])
			}
		}
		_ = run(ctx, "losetup", "-d", dev)
	}
	_ = os.Remove(img)
}
