package simnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// budgetHelper: "source ADDR" sends zeros to whoever connects; "sink
// ADDR" counts what one connection sends for 2 s after its first byte
// and prints the count.
func budgetHelper(what, addr string) int {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Println("listen:", err)
		return 1
	}
	fmt.Println("ready")
	c, err := l.Accept()
	if err != nil {
		return 1
	}
	defer c.Close()
	buf := make([]byte, 64<<10)
	switch what {
	case "source":
		for {
			if _, err := c.Write(buf); err != nil {
				return 0
			}
		}
	case "sink":
		if _, err := io.ReadFull(c, buf[:1]); err != nil {
			return 1
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		var n int64
		for {
			k, err := c.Read(buf)
			n += int64(k)
			if err != nil {
				break
			}
		}
		fmt.Println(n)
		return 0
	}
	return 2
}

func budgetNet(t *testing.T) *Net {
	t.Helper()
	if why := BudgetsAvailable(); why != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: %s", why)
		}
		t.Skip(why)
	}
	n, err := New(context.Background(), Config{Name: "bu" + fmt.Sprint(os.Getpid()%1000), Hosts: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Isolated() {
		t.Fatalf("namespaces available but the net fell back: %s", n.Reason())
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
		for _, c := range budgetControllers {
			if _, err := os.Stat(n.cgroupDir(c, n.Host("a"))); err == nil {
				t.Errorf("cgroup %s left after Close", n.cgroupDir(c, n.Host("a")))
			}
		}
	})
	return n
}

// A CPU-bound process on a host with 0.2 core gets about 0.2 core, and
// its host's CPU-seconds say so; a host without a budget is not held back.
func TestBudgetCPU(t *testing.T) {
	n := budgetNet(t)
	ctx := context.Background()
	if err := n.SetBudget(ctx, "a", Budget{CPU: 0.2}, ""); err != nil {
		t.Fatal(err)
	}
	// Both spin at once, so whatever else loads the machine loads both.
	spin := func(host string, used *float64, done chan<- struct{}) {
		defer func() { done <- struct{}{} }()
		u0, err := n.Usage(ctx, host)
		if err != nil {
			t.Error(err)
			return
		}
		// timeout forks the loop: the child is in the host's cgroups too.
		if out, err := n.Host(host).Command(ctx, "timeout", "2", "sh", "-c", "while :; do :; done").CombinedOutput(); err != nil && !strings.Contains(err.Error(), "124") {
			t.Errorf("spin on %s: %v %s", host, err, out)
		}
		u1, err := n.Usage(ctx, host)
		if err != nil {
			t.Error(err)
			return
		}
		*used = u1.Sub(u0).CPUSeconds
	}
	var a, b float64
	done := make(chan struct{})
	go spin("a", &a, done)
	go spin("b", &b, done)
	<-done
	<-done
	t.Logf("2 s of a busy loop: %.2f CPU-s on a (0.2 core), %.2f on b (unlimited)", a, b)
	if a > 0.5 {
		t.Errorf("a 0.2-core host used %.2f CPU-s in 2 s, want about 0.4", a)
	}
	// Where the machine leaves b more than a's quota, a gets its quota.
	if b >= 0.6 && a < 0.25 {
		t.Errorf("a 0.2-core host used only %.2f CPU-s in 2 s while b got %.2f", a, b)
	}
	if b < a {
		t.Errorf("an unbudgeted host used %.2f CPU-s, less than the 0.2-core one's %.2f", b, a)
	}
	// Lifting the budget lifts the quota.
	if err := n.SetBudget(ctx, "a", Budget{}, ""); err != nil {
		t.Fatal(err)
	}
	if q, _ := os.ReadFile(filepath.Join(n.cgroupDir("cpu", n.Host("a")), "cpu.cfs_quota_us")); strings.TrimSpace(string(q)) != "-1" {
		t.Errorf("quota after a zero budget: %q", q)
	}
}

// A shaped link carries about its rate each way, and the host's byte
// counters see it.
func TestBudgetLink(t *testing.T) {
	n := budgetNet(t)
	ctx := context.Background()
	const rate = 20e6 // bits/s
	if err := n.SetBudget(ctx, "a", Budget{LinkBits: rate}, ""); err != nil {
		t.Fatal(err)
	}
	a := n.Host("a")
	addr := a.Addr.String() + ":7100"

	// a sends (its eth0 egress).
	startHelper(t, a, "source", addr)
	// The counters are read around the whole connection, so every byte
	// the reader gets has passed eth0 between them (bytes still queued
	// in socket buffers would otherwise be counted on one side only).
	u0, err := n.Usage(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var all int64
	buf := make([]byte, 64<<10)
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	for {
		k, err := c.Read(buf)
		all += int64(k)
		if err != nil {
			break
		}
	}
	var got int64
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(2 * time.Second))
	for {
		k, err := c.Read(buf)
		got += int64(k)
		if err != nil {
			break
		}
	}
	all += got
	out := float64(got) * 8 / time.Since(start).Seconds()
	c.Close()
	u1, err := n.Usage(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	sent := u1.Sub(u0).SentBytes

	// a receives (the bridge side of its veth).
	addr2 := a.Addr.String() + ":7101"
	sink, r := startHelper(t, a, "sink", addr2)
	c2, err := net.Dial("tcp", addr2)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := c2.Write(buf); err != nil {
				return
			}
		}
	}()
	line, err := r.ReadString('\n')
	c2.Close()
	_ = sink.Wait()
	recv, perr := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil || perr != nil {
		t.Fatalf("sink: %q %v %v", line, err, perr)
	}
	in := float64(recv) * 8 / 2
	t.Logf("link of 20 Mbit/s: a sent %.1f Mbit/s (eth0 counted %d bytes), received %.1f Mbit/s", out/1e6, sent, in/1e6)
	for _, v := range []struct {
		what string
		bps  float64
	}{{"sent", out}, {"received", in}} {
		if v.bps < 0.7*rate || v.bps > 1.15*rate {
			t.Errorf("a %s %.1f Mbit/s over a 20 Mbit/s link", v.what, v.bps/1e6)
		}
	}
	if sent < all {
		t.Errorf("eth0 counted %d bytes sent, the reader got %d", sent, all)
	}
	// A delay needs netem: it is applied, or refused with ErrNoBudgets.
	if err := n.SetBudget(ctx, "a", Budget{LinkBits: rate, LinkDelay: time.Millisecond}, ""); err != nil && !errors.Is(err, ErrNoBudgets) {
		t.Errorf("a link delay: %v", err)
	}
}

// A host's own disk is a filesystem of its own; direct writes on a host
// with a 10 MB/s disk go at about 10 MB/s, and the host's disk counter
// sees them; Close takes the disk away.
func TestBudgetDisk(t *testing.T) {
	// Cleanups run last first: the checks after the net's Close, the
	// temporary directory's removal after both.
	dir := filepath.Join(t.TempDir(), "disk")
	var img string
	t.Cleanup(func() {
		if _, err := os.Stat(img); err == nil {
			t.Errorf("disk image %s left after Close", img)
		}
		if b, _ := os.ReadFile("/proc/mounts"); strings.Contains(string(b), dir) {
			t.Errorf("%s still mounted after Close", dir)
		}
	})
	n := budgetNet(t)
	ctx := context.Background()
	if err := n.GiveDisk(ctx, "a", dir, 256<<20); err != nil {
		t.Fatal(err)
	}
	var root, own syscall.Stat_t
	if err := syscall.Stat("/", &root); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(dir, &own); err != nil {
		t.Fatal(err)
	}
	if root.Dev == own.Dev {
		t.Fatalf("the host's disk at %s is the root filesystem's device", dir)
	}
	img = n.Host("a").img
	if err := n.SetBudget(ctx, "a", Budget{DiskBps: 10e6}, dir); err != nil {
		t.Fatal(err)
	}
	u0, err := n.Usage(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if out, err := n.Host("a").Command(ctx, "dd", "if=/dev/zero", "of="+filepath.Join(dir, "f"), "bs=1M", "count=30", "oflag=direct").CombinedOutput(); err != nil {
		t.Fatalf("dd: %v %s", err, out)
	}
	el := time.Since(start)
	u1, err := n.Usage(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	mbps := 30 * 1048576 / el.Seconds() / 1e6
	t.Logf("30 MiB direct writes on a 10 MB/s disk: %.1f MB/s, counted %d bytes", mbps, u1.Sub(u0).DiskBytes)
	if mbps > 12 || mbps < 5 {
		t.Errorf("30 MiB of direct writes at %.1f MB/s on a 10 MB/s disk", mbps)
	}
	if d := u1.Sub(u0).DiskBytes; d < 30<<20 {
		t.Errorf("the host's disk counter saw %d bytes of 30 MiB", d)
	}
}

func TestCheckQuotas(t *testing.T) {
	if err := CheckQuotas([]Budget{{CPU: 0.1}, {CPU: 0.1}}, 0.8); err != nil {
		t.Error(err)
	}
	if err := CheckQuotas([]Budget{{CPU: 0.1}, {}}, 0.8); err == nil {
		t.Error("an unlimited host passed")
	}
	if err := CheckQuotas([]Budget{{CPU: 1000}}, 0.8); err == nil {
		t.Error("1000 cores passed")
	}
	if err := (Budget{CPU: 0.001}).Validate(); err == nil {
		t.Error("0.001 core passed")
	}
}
