package simnet

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The test binary doubles as the program run inside the hosts:
// SIMNET_HELPER=listen ADDR (TCP: answers "hello from ADDR" to every
// connection), dial ADDR (prints what the server says), udprecv ADDR
// (prints the first datagram, or "timeout" after 3 s), udpsend ADDR.
func TestMain(m *testing.M) {
	if h := os.Getenv("SIMNET_HELPER"); h != "" {
		os.Exit(helper(h, os.Getenv("SIMNET_ADDR")))
	}
	os.Exit(m.Run())
}

func helper(what, addr string) int {
	switch what {
	case "listen":
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println("listen:", err)
			return 1
		}
		fmt.Println("ready")
		for {
			c, err := l.Accept()
			if err != nil {
				return 1
			}
			fmt.Fprintf(c, "hello from %s\n", addr)
			c.Close()
		}
	case "dial":
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			fmt.Println("dial error:", err)
			return 0
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Print(line)
		return 0
	case "udprecv":
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			fmt.Println("listen:", err)
			return 1
		}
		fmt.Println("ready")
		_ = pc.SetReadDeadline(time.Now().Add(3 * time.Second))
		b := make([]byte, 100)
		n, _, err := pc.ReadFrom(b)
		if err != nil {
			fmt.Println("timeout")
			return 0
		}
		fmt.Println(string(b[:n]))
		return 0
	case "udpsend":
		c, err := net.Dial("udp", addr)
		if err != nil {
			fmt.Println("dial:", err)
			return 1
		}
		for i := 0; i < 5; i++ {
			_, _ = c.Write([]byte("datagram"))
			time.Sleep(100 * time.Millisecond)
		}
		return 0
	}
	return budgetHelper(what, addr)
}

func helperCmd(ctx context.Context, h *Host, what, addr string) *exec.Cmd {
	cmd := h.Command(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SIMNET_HELPER="+what, "SIMNET_ADDR="+addr)
	return cmd
}

// startHelper starts a long-running helper and waits for its "ready".
func startHelper(t *testing.T, h *Host, what, addr string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := helperCmd(ctx, h, what, addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("%s %s in %s: %q %v", what, addr, h.Name, line, err)
	}
	return cmd, r
}

func dialFrom(t *testing.T, h *Host, addr string) string {
	t.Helper()
	out, err := helperCmd(context.Background(), h, "dial", addr).Output()
	if err != nil {
		t.Fatalf("dial from %s: %v", h.Name, err)
	}
	return strings.TrimSpace(string(out))
}

func dialLocal(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "dial error: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// Hosts reach each other and the caller over their own addresses;
// partitions cut exactly the chosen traffic, both ways or one way; Heal
// restores it; Close leaves no namespace behind.
func TestNetPartitions(t *testing.T) {
	if why := Available(); why != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: %s", why)
		}
		t.Skip(why)
	}
	ctx := context.Background()
	n, err := New(ctx, Config{Name: "st" + fmt.Sprint(os.Getpid()%1000), Hosts: []string{"a", "b", "c"}})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Isolated() {
		t.Fatalf("namespaces available but the net fell back: %s", n.Reason())
	}
	defer func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
		out, _ := exec.Command("ip", "netns", "list").Output()
		if strings.Contains(string(out), "atl-"+n.cfg.Name+"-") {
			t.Errorf("namespaces left after Close:\n%s", out)
		}
	}()
	a, b, c := n.Host("a"), n.Host("b"), n.Host("c")
	bAddr := b.Addr.String() + ":7000"
	aAddr := a.Addr.String() + ":7000"
	startHelper(t, b, "listen", bAddr)
	startHelper(t, a, "listen", aAddr)
	hello := "hello from " + bAddr
	if got := dialFrom(t, a, bAddr); got != hello {
		t.Fatalf("a -> b before any cut: %q", got)
	}
	if got := dialLocal(bAddr); got != hello {
		t.Fatalf("local -> b before any cut: %q", got)
	}
	// A host does not see another host's addresses as its own.
	if got := dialFrom(t, a, "127.0.0.1:7000"); !strings.HasPrefix(got, "dial error") {
		t.Fatalf("a reached 127.0.0.1:7000 (b's listener leaked into a?): %q", got)
	}

	if err := n.Partition(ctx, "a", "b", Both); err != nil {
		t.Fatal(err)
	}
	if got := dialFrom(t, a, bAddr); !strings.HasPrefix(got, "dial error") {
		t.Fatalf("a -> b across a two-way cut: %q", got)
	}
	if got := dialFrom(t, b, aAddr); !strings.HasPrefix(got, "dial error") {
		t.Fatalf("b -> a across a two-way cut: %q", got)
	}
	if got := dialFrom(t, c, bAddr); got != hello {
		t.Fatalf("c -> b, not cut: %q", got)
	}
	if got := dialLocal(bAddr); got != hello {
		t.Fatalf("local -> b, not cut: %q", got)
	}
	if err := n.Heal(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	if got := dialFrom(t, a, bAddr); got != hello {
		t.Fatalf("a -> b after Heal: %q", got)
	}

	// One way, seen with datagrams: a's to b are dropped, b's to a arrive.
	if err := n.Partition(ctx, "a", "b", OneWay); err != nil {
		t.Fatal(err)
	}
	if got := n.Cuts(); len(got) != 1 || got[0] != "a->b" {
		t.Fatalf("cuts %v, want [a->b]", got)
	}
	udp := func(from, to *Host) string {
		addr := to.Addr.String() + ":7001"
		_, r := startHelper(t, to, "udprecv", addr)
		if err := helperCmd(ctx, from, "udpsend", addr).Run(); err != nil {
			t.Fatal(err)
		}
		line, _ := r.ReadString('\n')
		return strings.TrimSpace(line)
	}
	if got := udp(a, b); got != "timeout" {
		t.Fatalf("a -> b datagram across a one-way cut a->b: %q", got)
	}
	if got := udp(b, a); got != "datagram" {
		t.Fatalf("b -> a datagram with only a->b cut: %q", got)
	}

	// The caller can be cut from a host too (on the host's side).
	if err := n.Partition(ctx, "local", "b", Both); err != nil {
		t.Fatal(err)
	}
	if got := dialLocal(bAddr); !strings.HasPrefix(got, "dial error") {
		t.Fatalf("local -> b across a cut: %q", got)
	}
	if err := n.HealAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := dialLocal(bAddr); got != hello {
		t.Fatalf("local -> b after HealAll: %q", got)
	}
	if got := dialFrom(t, a, bAddr); got != hello {
		t.Fatalf("a -> b after HealAll: %q", got)
	}
	if err := n.Partition(ctx, "a", "nosuch", Both); err == nil {
		t.Fatal("a cut to an unknown host was accepted")
	}
}

// Without namespaces every host still gets its own address and
// partitions say they cannot be made.
func TestLoopbackFallback(t *testing.T) {
	n, err := New(context.Background(), Config{Name: "lb", Hosts: []string{"a", "b"}, Loopback: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.Isolated() || n.Reason() == "" {
		t.Fatalf("loopback net: isolated %v, reason %q", n.Isolated(), n.Reason())
	}
	a, b := n.Host("a"), n.Host("b")
	if a.Addr == b.Addr || !a.Addr.IsLoopback() {
		t.Fatalf("addresses %v %v", a.Addr, b.Addr)
	}
	l, err := net.Listen("tcp", b.Addr.String()+":0")
	if err != nil {
		t.Fatalf("listen on %v: %v", b.Addr, err)
	}
	l.Close()
	if err := n.Partition(context.Background(), "a", "b", Both); err != ErrNoPartitions {
		t.Fatalf("partition on loopback: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{Name: "", Hosts: []string{"a"}},
		{Name: "toolong1", Hosts: []string{"a"}},
		{Name: "ok", Hosts: nil},
		{Name: "ok", Hosts: []string{"a", "a"}},
		{Name: "ok", Hosts: []string{"A"}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
