package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	opEcho  = 1
	opFail  = 2
	opPanic = 3
	opSleep = 4
)

func startServer(t *testing.T, lim Limits) string {
	t.Helper()
	h := func(ctx context.Context, req *Request) (Response, error) {
		switch req.Op {
		case opEcho:
			// Copy: req buffers are recycled after the handler returns.
			return Response{Msg: append([]byte(nil), req.Msg...), Payload: append([]byte(nil), req.Payload...)}, nil
		case opFail:
			return Response{}, fmt.Errorf("no such thing: %s", req.Msg)
		case opPanic:
			panic("boom")
		case opSleep:
			select {
			case <-time.After(2 * time.Second):
			case <-ctx.Done():
			}
			return Response{}, nil
		}
		return Response{}, errors.New("unknown op")
	}
	return serveWith(t, ServerConfig{Handler: h, Limits: lim, Logger: slog.New(slog.DiscardHandler),
		ErrorCode: func(err error) uint32 { return 7 }})
}

// serveWith serves cfg on a loopback port until the test ends.
func serveWith(t *testing.T, cfg ServerConfig) string {
	t.Helper()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func TestRoundTripConcurrent(t *testing.T) {
	addr := startServer(t, Limits{})
	c, err := Dial(context.Background(), addr, ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; i < 50; i++ {
				n := r.IntN(300 << 10)
				if i%10 == 0 {
					n = 0
				}
				p := make([]byte, n)
				for j := range p {
					p[j] = byte(r.Uint32())
				}
				msg := []byte(fmt.Sprintf("g%d-i%d", g, i))
				var dst []byte
				if i%2 == 0 {
					dst = make([]byte, 0, n)
				}
				rep, err := c.Call(context.Background(), opEcho, 9, msg, p, dst)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(rep.Msg, msg) || !bytes.Equal(rep.Payload, p) {
					errs <- fmt.Errorf("g%d i%d: mismatch", g, i)
					return
				}
				if dst != nil && n > 0 && &rep.Payload[0] != &dst[:1][0] {
					errs <- fmt.Errorf("payload not read into dst")
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestErrorsAndPanics(t *testing.T) {
	addr := startServer(t, Limits{})
	c, err := Dial(context.Background(), addr, ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Call(context.Background(), opFail, 0, []byte("x"), nil, nil)
	var re *RemoteError
	if !errors.As(err, &re) || re.Status != 7 || re.Message != "no such thing: x" {
		t.Fatalf("got %v", err)
	}
	_, err = c.Call(context.Background(), opPanic, 0, nil, nil, nil)
	if !errors.As(err, &re) {
		t.Fatalf("panic: got %v", err)
	}
	// The connection survives both.
	if _, err := c.Call(context.Background(), opEcho, 0, []byte("ok"), nil, nil); err != nil {
		t.Fatal(err)
	}
}

func TestContextDeadline(t *testing.T) {
	addr := startServer(t, Limits{})
	c, err := Dial(context.Background(), addr, ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Call(ctx, opSleep, 0, nil, nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	if _, err := c.Call(context.Background(), opEcho, 0, []byte("ok"), nil, nil); err != nil {
		t.Fatal(err)
	}
}

// rawFrame builds a request frame by hand.
func rawFrame(op uint16, msg []byte, payloadLen uint32) []byte {
	b := make([]byte, HeaderSize)
	PutHeader(b, &Header{Kind: KindRequest, Op: op, ID: 1, PayloadLen: payloadLen}, msg)
	return append(b, msg...)
}

func TestMalformedFramesCloseOnlyThatConnection(t *testing.T) {
	addr := startServer(t, Limits{MaxMsg: 1024, MaxPayload: 1 << 20})
	good, err := Dial(context.Background(), addr, ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	bad := func(name string, frame []byte) {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write(frame)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := io.Copy(io.Discard, c)
			// Unread bytes make the kernel answer with a reset; both are a close.
			if n != 0 || (err != nil && !errors.Is(err, syscall.ECONNRESET)) {
				t.Fatalf("want clean close with no reply, got n=%d err=%v", n, err)
			}
		})
	}
	f := rawFrame(opEcho, []byte("hi"), 0)
	f[0] = 'G'
	bad("magic", f)
	f = rawFrame(opEcho, []byte("hi"), 0)
	f[2] = 9
	bad("version", f)
	f = rawFrame(opEcho, []byte("hi"), 0)
	f[HeaderSize] ^= 1
	bad("checksum", f)
	bad("msg too large", rawFrame(opEcho, make([]byte, 2048), 0))
	bad("payload too large", rawFrame(opEcho, nil, 2<<20))
	f = rawFrame(opEcho, nil, 0)
	binary.BigEndian.PutUint16(f[6:], 1)
	bad("reserved flags", f)
	bad("garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789012345678901234567890123456789"))
	// The well-behaved connection is unaffected.
	if _, err := good.Call(context.Background(), opEcho, 0, []byte("ok"), []byte("pp"), nil); err != nil {
		t.Fatal(err)
	}
}

func TestTooLargeRefusedLocally(t *testing.T) {
	addr := startServer(t, Limits{})
	c, err := Dial(context.Background(), addr, ClientConfig{Limits: Limits{MaxPayload: 10}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Call(context.Background(), opEcho, 0, nil, make([]byte, 11), nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v", err)
	}
}

func TestPoolRedialsAfterServerRestart(t *testing.T) {
	addr := startServer(t, Limits{})
	p := NewPool(ClientConfig{}, 2)
	defer p.Close()
	if _, err := p.Call(context.Background(), "127.0.0.1:1", opEcho, 0, nil, nil, nil); err == nil {
		t.Fatal("call to a closed port succeeded")
	}
	for i := 0; i < 4; i++ {
		if _, err := p.Call(context.Background(), addr, opEcho, 0, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Break the pooled connections from underneath; the pool replaces them.
	p.mu.Lock()
	for _, c := range p.mu.conns[addr] {
		c.conn.Close()
	}
	p.mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	if _, err := p.Call(context.Background(), addr, opEcho, 0, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
}

func TestCodec(t *testing.T) {
	var e Enc
	e.U8(1)
	e.U16(2)
	e.U32(3)
	e.U64(4)
	e.I64(-5)
	e.Uvarint(300)
	e.Bool(true)
	e.Bytes([]byte("abc"))
	e.String("héllo")
	d := NewDec(e.B)
	if d.U8() != 1 || d.U16() != 2 || d.U32() != 3 || d.U64() != 4 || d.I64() != -5 || d.Uvarint() != 300 ||
		!d.Bool() || string(d.Bytes()) != "abc" || d.Str() != "héllo" {
		t.Fatal("round trip mismatch")
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(e.B); i++ {
		d := NewDec(e.B[:i])
		d.U8()
		d.U16()
		d.U32()
		d.U64()
		d.I64()
		d.Uvarint()
		d.Bool()
		d.Bytes()
		d.Str()
		if !errors.Is(d.Finish(), ErrMalformed) {
			t.Fatalf("truncated at %d: no error", i)
		}
	}
	d = NewDec([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	if n := d.Count(1); n != 0 || d.Err() == nil {
		t.Fatalf("hostile count accepted: %d", n)
	}
}

func FuzzReadFrameHeader(f *testing.F) {
	f.Add(rawFrame(opEcho, []byte("hello"), 3))
	f.Add(rawFrame(0, nil, 0))
	f.Add([]byte{})
	f.Add(make([]byte, HeaderSize))
	f.Fuzz(func(t *testing.T, in []byte) {
		var hdr [HeaderSize]byte
		lim := Limits{MaxMsg: 4096, MaxPayload: 1 << 20}
		h, msg, err := ReadFrameHeader(bytes.NewReader(in), hdr[:], nil, lim)
		if err != nil {
			return
		}
		if h.MsgLen > lim.MaxMsg || h.PayloadLen > lim.MaxPayload || int(h.MsgLen) != len(msg) {
			t.Fatalf("accepted out-of-limit frame %+v", h)
		}
		// A frame that decodes re-encodes to the same bytes.
		var out [HeaderSize]byte
		PutHeader(out[:], &h, msg)
		if !bytes.Equal(out[:], in[:HeaderSize]) || !bytes.Equal(msg, in[HeaderSize:HeaderSize+len(msg)]) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzDec(f *testing.F) {
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, in []byte) {
		d := NewDec(in)
		for d.Err() == nil {
			switch d.U8() % 6 {
			case 0:
				d.Bytes()
			case 1:
				d.Count(8)
			case 2:
				d.Uvarint()
			case 3:
				d.U64()
			case 4:
				d.Bool()
			case 5:
				d.Str()
			}
		}
	})
}

func BenchmarkCall1MiB(b *testing.B) {
	h := func(ctx context.Context, req *Request) (Response, error) { return Response{}, nil }
	srv, _ := NewServer(ServerConfig{Handler: h, Logger: slog.New(slog.DiscardHandler)})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	go srv.Serve(ctx, ln)
	defer cancel()
	c, err := Dial(context.Background(), ln.Addr().String(), ClientConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p := make([]byte, 1<<20)
	b.SetBytes(int64(len(p)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Call(context.Background(), 1, 0, nil, p, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestInlineServing checks ServerConfig.Inline: an inline operation is
// served on the reader goroutine (IsInline), one that would block is
// served again on a worker and answered once, and a request blocked on a
// worker does not hold up inline ones behind it on the same connection.
func TestInlineServing(t *testing.T) {
	const opInline, opMaybe, opWait = 1, 2, 3
	release := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]int{}
	h := func(ctx context.Context, req *Request) (Response, error) {
		mu.Lock()
		seen[fmt.Sprintf("%d/%v", req.Op, IsInline(ctx))]++
		mu.Unlock()
		switch req.Op {
		case opMaybe:
			if IsInline(ctx) {
				return Response{}, fmt.Errorf("op %d: %w", req.Op, ErrWouldBlock)
			}
		case opWait:
			<-release
		}
		return Response{Msg: append([]byte(nil), req.Msg...)}, nil
	}
	addr := serveWith(t, ServerConfig{Handler: h, Logger: slog.New(slog.DiscardHandler),
		Inline: func(op uint16) bool { return op == opInline || op == opMaybe }})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the server stops, which waits for handlers
	c, err := Dial(context.Background(), addr, ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	waited := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), opWait, 0, []byte("w"), nil, nil)
		waited <- err
	}()
	for { // the blocked request is on a worker before the others are sent
		mu.Lock()
		started := seen["3/false"] == 1
		mu.Unlock()
		if started {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 20; i++ {
		for _, op := range []uint16{opInline, opMaybe} {
			msg := []byte(fmt.Sprintf("%d-%d", op, i))
			rep, err := c.Call(context.Background(), op, 0, msg, nil, nil)
			if err != nil || !bytes.Equal(rep.Msg, msg) {
				t.Fatalf("op %d call %d: %q, %v", op, i, rep.Msg, err)
			}
		}
	}
	select {
	case err := <-waited:
		t.Fatalf("the blocked request returned early: %v", err)
	default:
	}
	free()
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{"1/true": 20, "2/true": 20, "2/false": 20, "3/false": 1}
	for k, n := range want {
		if seen[k] != n {
			t.Errorf("handler calls %s: %d, want %d (all: %v)", k, seen[k], n, seen)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("handler calls: %v, want %v", seen, want)
	}
}
