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
	"os"
	"slices"
	"sync"
	"sync/atomic"
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
			// Blocks until its connection or the server closes (or, so
			// that a caller that fails to give up fails instead of
			// hanging, a generous 30s).
			select {
			case <-ctx.Done():
			case <-time.After(30 * time.Second):
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, cfg, ln)
	return ln.Addr().String()
}

// serveOn serves cfg on ln until the test ends and returns the server.
func serveOn(t *testing.T, cfg ServerConfig, ln net.Listener) *Server {
	t.Helper()
	srv, err := NewServer(cfg)
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
	return srv
}

// echo answers every request with its message.
func echo(ctx context.Context, req *Request) (Response, error) {
	return Response{Msg: append([]byte(nil), req.Msg...)}, nil
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
			c.SetReadDeadline(time.Now().Add(30 * time.Second)) // generous: only a hang fails
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
	old := slices.Clone(p.mu.conns[addr])
	p.mu.Unlock()
	if len(old) != 2 {
		t.Fatalf("%d pooled connections, want 2", len(old))
	}
	for _, c := range old {
		c.conn.Close()
	}
	for _, c := range old { // each one's reader sees the close
		select {
		case <-c.readerDone:
		case <-time.After(30 * time.Second):
			t.Fatal("a closed connection's reader is still running after 30s")
		}
		if c.Err() == nil {
			t.Fatal("a closed connection reports no error")
		}
	}
	for i := 0; i < 4; i++ {
		if _, err := p.Call(context.Background(), addr, opEcho, 0, []byte("again"), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	p.mu.Lock()
	now := slices.Clone(p.mu.conns[addr])
	p.mu.Unlock()
	if len(now) != 2 {
		t.Fatalf("%d pooled connections after the redial, want 2", len(now))
	}
	for _, c := range now {
		if slices.Contains(old, c) || c.Err() != nil {
			t.Fatal("the pool still holds a broken connection")
		}
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

// decShapes are the decoder's shapes FuzzDec reads: an input is a
// sequence of (shape byte, field) pairs, the shape taken modulo
// len(decShapes).
var decShapes = []string{"u8", "u16", "u32", "u64", "i64", "uvarint", "bool", "bytes", "str", "count"}

// decField is one field decoded by FuzzDec: its shape byte as read, and
// its value.
type decField struct {
	sel   uint8
	u     uint64
	b     []byte
	elems []uint64 // of a count: that many u64s follow it
}

// decodeFields decodes in as FuzzDec's program until the first failure,
// returning the fields, the bytes each one took, and the failed decoder.
func decodeFields(t *testing.T, in []byte) ([]decField, []int, *Dec) {
	d := NewDec(in)
	var out []decField
	var sizes []int
	for {
		before := len(d.b)
		sel := d.U8()
		if d.Err() != nil {
			return out, sizes, d
		}
		f := decField{sel: sel}
		switch decShapes[int(sel)%len(decShapes)] {
		case "u8":
			f.u = uint64(d.U8())
		case "u16":
			f.u = uint64(d.U16())
		case "u32":
			f.u = uint64(d.U32())
		case "u64":
			f.u = d.U64()
		case "i64":
			f.u = uint64(d.I64())
		case "uvarint":
			f.u = d.Uvarint()
		case "bool":
			if d.Bool() {
				f.u = 1
			}
		case "bytes":
			f.b = d.Bytes()
			if f.b != nil && cap(f.b) != len(f.b) {
				t.Fatalf("Bytes returned %d bytes with capacity %d: an append would overwrite the message", len(f.b), cap(f.b))
			}
		case "str":
			f.b = []byte(d.Str())
		case "count":
			n := d.Count(8)
			if d.Err() == nil && n*8 > len(d.b) {
				t.Fatalf("Count(8) = %d with %d bytes left", n, len(d.b))
			}
			f.u = uint64(n)
			for range n {
				f.elems = append(f.elems, d.U64())
			}
		}
		if d.Err() != nil {
			return out, sizes, d
		}
		out = append(out, f)
		sizes = append(sizes, before-len(d.b))
	}
}

// encodeField encodes f as decodeFields reads it.
func encodeField(e *Enc, f decField) {
	e.U8(f.sel)
	switch decShapes[int(f.sel)%len(decShapes)] {
	case "u8":
		e.U8(uint8(f.u))
	case "u16":
		e.U16(uint16(f.u))
	case "u32":
		e.U32(uint32(f.u))
	case "u64":
		e.U64(f.u)
	case "i64":
		e.I64(int64(f.u))
	case "uvarint":
		e.Uvarint(f.u)
	case "count":
		e.Uvarint(f.u)
		for _, v := range f.elems {
			e.U64(v)
		}
	case "bool":
		e.Bool(f.u == 1)
	case "bytes":
		e.Bytes(f.b)
	case "str":
		e.String(string(f.b))
	}
}

// FuzzDec decodes arbitrary bytes as a sequence of fields of every shape
// (a count is followed by that many u64s, as in a message).
// Decoding never panics; it stops at a failure that wraps ErrMalformed
// and sticks (later reads give zero values). Every field decoded before
// it re-encodes to the bytes it was read from (or fewer: a uvarint may
// be sent longer than needed), and the re-encoding decodes to the same
// fields, exactly, with nothing left over.
func FuzzDec(f *testing.F) {
	for k, shape := range decShapes {
		var e Enc
		e.U8(uint8(k))
		switch shape {
		case "u8":
			e.U8(0xfe)
		case "u16":
			e.U16(0xbeef)
		case "u32":
			e.U32(0xdeadbeef)
		case "u64":
			e.U64(1<<63 | 12345)
		case "i64":
			e.I64(-5)
		case "uvarint":
			e.Uvarint(300)
		case "bool":
			e.Bool(true)
		case "bytes":
			e.Bytes([]byte("abc"))
		case "str":
			e.String("héllo")
		case "count":
			e.Uvarint(2)
			e.U64(1)
			e.U64(2)
		}
		f.Add(e.B)
		f.Add(e.B[:len(e.B)-1]) // truncated
	}
	var all Enc // every shape in one message
	for k := range decShapes {
		all.U8(uint8(k + len(decShapes)))
		all.U64(uint64(k))
	}
	f.Add(all.B)
	f.Add([]byte{})
	f.Add([]byte{5, 0x80, 0x00})                                                 // uvarint 0 in two bytes
	f.Add([]byte{5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}) // uvarint overflow
	f.Add([]byte{6, 2})                                                          // bad bool
	f.Add([]byte{7, 0xff, 0xff, 0xff, 0xff, 0x0f, 'x'})                          // bytes longer than the message
	f.Add([]byte{9, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0})                         // hostile count
	f.Fuzz(func(t *testing.T, in []byte) {
		fields, sizes, d := decodeFields(t, in)
		err := d.Err()
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("decoding stopped with %v, want an error wrapping ErrMalformed", err)
		}
		// The failure sticks: later reads give zero values, and the
		// first error stays.
		if d.U8() != 0 || d.U64() != 0 || d.Uvarint() != 0 || d.Bytes() != nil || d.Str() != "" || d.Bool() ||
			d.Count(1) != 0 || d.Finish() != err || d.Err() != err {
			t.Fatalf("reads after the failure %v give values or change it", err)
		}
		var e Enc
		at := 0
		for k, fl := range fields {
			start := len(e.B)
			encodeField(&e, fl)
			got, orig := e.B[start:], in[at:at+sizes[k]]
			if !bytes.Equal(got, orig) && len(got) >= len(orig) {
				t.Fatalf("field %d (%s) read from %x re-encodes to %x", k, decShapes[int(fl.sel)%len(decShapes)], orig, got)
			}
			at += sizes[k]
		}
		again, _, d := decodeFields(t, e.B)
		if err := d.Err(); !errors.Is(err, ErrMalformed) || len(again) != len(fields) {
			t.Fatalf("re-encoding decodes to %d fields (%v), want %d", len(again), d.Err(), len(fields))
		}
		for k := range fields {
			a, b := fields[k], again[k]
			if a.sel != b.sel || a.u != b.u || !bytes.Equal(a.b, b.b) || !slices.Equal(a.elems, b.elems) {
				t.Fatalf("field %d: %+v decoded again as %+v", k, a, b)
			}
		}
		// Each field's encoding alone decodes to it, taking all its bytes.
		for k, fl := range fields {
			var one Enc
			encodeField(&one, fl)
			got, sizes, _ := decodeFields(t, one.B)
			if len(got) != 1 || sizes[0] != len(one.B) || got[0].u != fl.u || !bytes.Equal(got[0].b, fl.b) || !slices.Equal(got[0].elems, fl.elems) {
				t.Fatalf("field %d %+v alone (%x): %+v, sizes %v", k, fl, one.B, got, sizes)
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
	waiting := make(chan struct{}, 1)
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
			waiting <- struct{}{}
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
	// The blocked request is on a worker before the others are sent.
	select {
	case <-waiting:
	case err := <-waited:
		t.Fatalf("the blocked request returned: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the blocked request did not reach its handler in 30s")
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

// flakyListener fails its first n accepts the way a process out of file
// descriptors does.
type flakyListener struct {
	net.Listener
	n atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.n.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// A server out of file descriptors keeps accepting once some are free,
// instead of returning from Serve (which stopped the whole role).
func TestAcceptSurvivesEMFILE(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: ln}
	fl.n.Store(5)
	srv := serveOn(t, ServerConfig{Logger: slog.New(slog.DiscardHandler), Handler: echo}, fl)
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	c, err := Dial(cctx, ln.Addr().String(), ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rep, err := c.Call(cctx, 1, 0, []byte("still here"), nil, nil)
	if err != nil || string(rep.Msg) != "still here" {
		t.Fatalf("after EMFILE: %q %v", rep.Msg, err)
	}
	if n := srv.AcceptFailures(); n != 5 {
		t.Errorf("accept failures counted %d, want 5", n)
	}
}

// Connections beyond MaxConnsPerPeer from one address are closed at once
// and counted; the ones already served keep working, and a slot freed is
// usable again.
// A connection that sends nothing for IdleTimeout is closed by the
// server, unless a request on it is still being served (then its answer
// arrives); a pool retires connections idle for PoolIdle itself and
// dials anew, so its calls never meet a server-closed connection.
func TestIdleConnections(t *testing.T) {
	const idle = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, ServerConfig{Logger: slog.New(slog.DiscardHandler), IdleTimeout: idle, Handler: func(ctx context.Context, req *Request) (Response, error) {
		if string(req.Msg) == "slow" {
			time.Sleep(3 * idle)
		}
		return Response{Msg: append([]byte(nil), req.Msg...)}, nil
	}}, ln)
	addr := ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Idle: closed after about IdleTimeout.
	c, err := Dial(ctx, addr, ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Call(ctx, 1, 0, []byte("hi"), nil, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to close an idle connection", func() bool { return c.Err() != nil })

	// Busy past IdleTimeout: answered, not closed.
	c2, err := Dial(ctx, addr, ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if r, err := c2.Call(ctx, 1, 0, []byte("slow"), nil, nil); err != nil || string(r.Msg) != "slow" {
		t.Fatalf("a request served for longer than the idle timeout: %q, %v", r.Msg, err)
	}

	// A pool retires its idle connection before the server would.
	old := PoolIdle
	PoolIdle = idle / 3
	defer func() { PoolIdle = old }()
	p := NewPool(ClientConfig{}, 1)
	defer p.Close()
	first, err := p.Get(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Call(ctx, 1, 0, []byte("a"), nil, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(idle / 2)
	second, err := p.Get(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("the pool kept a connection idle for longer than PoolIdle")
	}
	if r, err := second.Call(ctx, 1, 0, []byte("b"), nil, nil); err != nil || string(r.Msg) != "b" {
		t.Fatalf("call on the pool's new connection: %q, %v", r.Msg, err)
	}
}

func TestConnectionCaps(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := serveOn(t, ServerConfig{Logger: slog.New(slog.DiscardHandler), MaxConnsPerPeer: 3, Handler: echo}, ln)
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	var cs []*Client
	for i := 0; i < 5; i++ {
		c, err := Dial(cctx, ln.Addr().String(), ClientConfig{IOTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	served := 0
	for _, c := range cs {
		if rep, err := c.Call(cctx, 1, 0, []byte("x"), nil, nil); err == nil && string(rep.Msg) == "x" {
			served++
		}
	}
	if served != 3 || srv.Refused() != 2 {
		t.Fatalf("served %d of 5 connections (refused %d); want 3 and 2", served, srv.Refused())
	}
	cs[0].Close()
	var err2 error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var c *Client
		if c, err2 = Dial(cctx, ln.Addr().String(), ClientConfig{IOTimeout: 5 * time.Second}); err2 == nil {
			_, err2 = c.Call(cctx, 1, 0, []byte("y"), nil, nil)
			c.Close()
			if err2 == nil {
				break
			}
		}
	}
	if err2 != nil {
		t.Fatalf("a freed slot is not usable again: %v", err2)
	}
}

// A peer that starts a frame and stalls is dropped after IOTimeout; one
// that stays idle between frames is not.
func TestStalledFrameDropped(t *testing.T) {
	addr := serveWith(t, ServerConfig{Logger: slog.New(slog.DiscardHandler), IOTimeout: 300 * time.Millisecond,
		Handler: func(ctx context.Context, req *Request) (Response, error) { return Response{}, nil }})
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	half, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	half.Write([]byte{0xA7, 0x70, 1, 1, 0, 1, 0, 0, 0, 0})
	_ = half.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if n, err := half.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a stalled half frame was kept: %d %v after %v", n, err, time.Since(start))
	}
	// The idle connection is still served.
	c := NewClient(idle, ClientConfig{IOTimeout: 5 * time.Second})
	defer c.Close()
	if _, err := c.Call(context.Background(), 1, 0, nil, nil, nil); err != nil {
		t.Fatalf("an idle connection was dropped: %v", err)
	}
}

// waitFor polls cond until it holds, failing the test after 30 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestRoute: a request's route and id reach the handler, and its
// message without the id; plain calls carry neither.
func TestRoute(t *testing.T) {
	h := func(ctx context.Context, req *Request) (Response, error) {
		out := binary.BigEndian.AppendUint32(nil, req.Route)
		out = append(out, req.ReqID[:]...)
		return Response{Msg: append(out, req.Msg...)}, nil
	}
	addr := serveWith(t, ServerConfig{Handler: h, Logger: slog.New(slog.DiscardHandler)})
	p := NewPool(ClientConfig{}, 1)
	defer p.Close()
	ctx := context.Background()
	for _, route := range []uint32{0, 1, 7, 1<<32 - 1} {
		id := ReqID{byte(route), 2, 3}
		if route == 0 {
			id = ReqID{}
		}
		rep, err := p.CallRoute(ctx, addr, route, id, opEcho, 1, []byte("msg"), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := binary.BigEndian.Uint32(rep.Msg); got != route {
			t.Fatalf("route %d arrived as %d", route, got)
		}
		if got := ReqID(rep.Msg[4:20]); got != id || string(rep.Msg[20:]) != "msg" {
			t.Fatalf("request id %x and message %q arrived as %x, %q", id, "msg", got, rep.Msg[20:])
		}
	}
	rep, err := p.Call(ctx, addr, opEcho, 1, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.BigEndian.Uint32(rep.Msg); got != 0 || ReqID(rep.Msg[4:20]) != (ReqID{}) {
		t.Fatalf("a plain call arrived with route %d, id %x", got, rep.Msg[4:20])
	}
}
