package test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// dropProxy forwards TCP to target; once armed, it cuts the next
// connection that sends a reply instead of forwarding the reply: the
// island applied the request, the client never hears of it.
type dropProxy struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
	cut    atomic.Int32
	wg     sync.WaitGroup
}

func newDropProxy(t *testing.T, target string) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(s, c); s.Close() }()
			go func() {
				defer p.wg.Done()
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && p.armed.CompareAndSwap(true, false) {
						p.cut.Add(1)
						s.Close()
						return
					}
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return p
}

// An exclusive create whose reply is lost is retried by the client; the
// retry must answer with the file the first attempt made, not EEXIST for
// a create that succeeded (found by the fault engine, seed 202).
func TestExclusiveCreateRetriedAfterLostReply(t *testing.T) {
	fc := startFSCluster(t, 5, 1)
	p := newDropProxy(t, fc.islands[0].Addr())
	view := *fc.view
	view.Addrs = map[namespace.IslandID]string{1: p.ln.Addr().String()}
	fs, err := client.NewFS(client.FSConfig{Data: newClient(t, fc.storage, nil), Map: &view, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := fs.Resolve(ctx, root, "/")
	if err != nil {
		t.Fatal(err)
	}
	// A request on the connection first, so that the cut falls on the
	// create's reply and not on a new connection's handshake.
	if _, err := fs.Readdir(ctx, root, d.Ino, 0, 10, false); err != nil {
		t.Fatal(err)
	}
	p.armed.Store(true)
	r, err := fs.Create(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: "once", Mode: metawire.ModeFile | 0o644, Exclusive: true})
	if p.cut.Load() != 1 {
		t.Fatalf("the proxy cut %d replies, want 1 (the test did not exercise a retry)", p.cut.Load())
	}
	if err != nil {
		t.Fatalf("exclusive create retried after a lost reply: %v", err)
	}
	a, err := fs.Resolve(ctx, root, "/once")
	if err != nil || a.Ino != r.Attr.Ino || r.Existed {
		t.Fatalf("created %v (existed %v), the name resolves to %v, %v", r.Attr.Ino, r.Existed, a.Ino, err)
	}
	// A second exclusive create of the name is still refused.
	if _, err := fs.Create(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: "once", Mode: metawire.ModeFile | 0o644, Exclusive: true}); metawire.Errno(err) != 17 {
		t.Fatalf("a second exclusive create: %v, want EEXIST", err)
	}
}
