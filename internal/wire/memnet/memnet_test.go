package memnet

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

func connect(t *testing.T, n *Network, from, to string) (client, server net.Conn, l *Listener) {
	t.Helper()
	l, err := n.Listen(to)
	if err != nil {
		t.Fatal(err)
	}
	client, err = n.Dialer(from)(context.Background(), l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return client, server, l
}

func TestConnCarriesBytesBothWays(t *testing.T) {
	n := New()
	c, s, l := connect(t, n, "a", "b")
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if k, err := io.ReadFull(s, buf); err != nil || string(buf[:k]) != "hel" {
		t.Fatalf("%q %v", buf[:k], err)
	}
	if k, err := s.Read(buf); err != nil || string(buf[:k]) != "lo" {
		t.Fatalf("%q %v", buf[:k], err)
	}
	if _, err := s.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	if k, err := c.Read(buf[:3]); err != nil || string(buf[:k]) != "bac" {
		t.Fatalf("%q %v", buf[:k], err)
	}
	if c.RemoteAddr().String() != l.Addr().String() || s.RemoteAddr().String() != c.LocalAddr().String() {
		t.Fatalf("addresses: %v %v %v", c.RemoteAddr(), s.RemoteAddr(), c.LocalAddr())
	}
	// Close: the other side drains, then EOF; its writes fail.
	c.Write([]byte("x"))
	c.Close()
	if k, err := s.Read(buf); err != nil || string(buf[:k]) != "x" {
		t.Fatalf("after close: %q %v", buf[:k], err)
	}
	if _, err := s.Read(buf); err != io.EOF {
		t.Fatalf("after close and drain: %v, want EOF", err)
	}
	if _, err := s.Write([]byte("y")); err == nil {
		t.Fatal("write to a closed peer succeeded")
	}
	l.Close()
	if _, err := n.Dialer("a")(context.Background(), l.Addr().String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial to a closed listener: %v", err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept on a closed listener: %v", err)
	}
}

func TestDeadlines(t *testing.T) {
	c, _, _ := connect(t, New(), "a", "b")
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	start := time.Now()
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("read past its deadline: %v after %v", err, time.Since(start))
	}
	// A deadline set while a read waits wakes it.
	c.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 1)); done <- err }()
	time.Sleep(10 * time.Millisecond)
	c.SetReadDeadline(time.Now())
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("waiting read after a deadline: %v", err)
	}
}

func TestSetDown(t *testing.T) {
	n := New()
	c, s, l := connect(t, n, "a", "b")
	n.SetDown("b", true)
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("client read on a downed host's conn: %v", err)
	}
	if _, err := s.Write([]byte("x")); err == nil {
		t.Fatal("the downed host wrote")
	}
	if _, err := n.Dialer("a")(context.Background(), l.Addr().String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial to a downed host: %v", err)
	}
	n.SetDown("b", false)
	go l.Accept()
	if _, err := n.Dialer("a")(context.Background(), l.Addr().String()); err != nil {
		t.Fatalf("dial after the host came back: %v", err)
	}
}

func TestPartitionLosesTrafficAndHeals(t *testing.T) {
	n := New()
	c, s, l := connect(t, n, "a", "b")
	n.Partition("b", "a")
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatalf("a write into a cut link fails at once: %v", err)
	}
	s.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if _, err := s.Read(make([]byte, 4)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read across a cut: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := n.Dialer("a")(ctx, l.Addr().String()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial across a cut: %v, want it to hang until its context ends", err)
	}
	// ... or for a third of the peer timeout.
	n.SetPeerTimeout(90 * time.Millisecond)
	if _, err := n.Dialer("a")(context.Background(), l.Addr().String()); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("dial across a cut: %v, want a timeout", err)
	}
	// Another host still reaches b.
	go l.Accept()
	if _, err := n.Dialer("c")(context.Background(), l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	// A dial waiting on the cut goes through when it heals.
	dialed := make(chan error, 1)
	go func() { _, err := n.Dialer("a")(context.Background(), l.Addr().String()); dialed <- err }()
	time.Sleep(10 * time.Millisecond)
	go l.Accept()
	n.Heal("a", "b")
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("ok"))
	s.SetReadDeadline(time.Time{})
	buf := make([]byte, 4)
	if k, err := s.Read(buf); err != nil || string(buf[:k]) != "ok" {
		t.Fatalf("after heal: %q %v", buf[:k], err)
	}
}

// A connection across a cut breaks after the peer timeout, unless the
// cut heals first.
func TestPartitionBreaksConnectionsAfterThePeerTimeout(t *testing.T) {
	n := New()
	n.SetPeerTimeout(50 * time.Millisecond)
	c, _, _ := connect(t, n, "a", "b")
	n.Partition("a", "b")
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); err != io.EOF || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("read across a cut: %v after %v", err, time.Since(start))
	}
	n.Heal("a", "b")
	c2, s2, _ := connect(t, n, "a", "b")
	n.Partition("a", "b")
	n.Heal("a", "b")
	n.Partition("a", "b") // a later cut: the first one's timer must not count
	time.Sleep(30 * time.Millisecond)
	n.Heal("a", "b")
	time.Sleep(60 * time.Millisecond)
	c2.Write([]byte("z"))
	if k, err := s2.Read(make([]byte, 1)); err != nil || k != 1 {
		t.Fatalf("a connection that lived through healed cuts: %v", err)
	}
}

func TestDelay(t *testing.T) {
	n := New()
	c, s, _ := connect(t, n, "a", "b")
	n.SetDelay(40 * time.Millisecond)
	start := time.Now()
	c.Write([]byte("x"))
	if _, err := s.Read(make([]byte, 1)); err != nil || time.Since(start) < 40*time.Millisecond {
		t.Fatalf("delayed write read after %v: %v", time.Since(start), err)
	}
}
