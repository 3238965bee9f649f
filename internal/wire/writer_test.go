package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Many goroutines send small and large frames at once over one
// frameWriter: every frame arrives whole (the header checksum holds), with
// its own payload, and each sender's frames arrive in the order it sent
// them.
func TestFrameWriterConcurrentFramesArriveWholeAndInOrder(t *testing.T) {
	a, b := tcpPair(t)
	w := newFrameWriter(a, 10*time.Second)
	const senders, perSender = 8, 200
	go func() {
		var wg sync.WaitGroup
		for s := 0; s < senders; s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perSender; i++ {
					n := (s*7 + i*13) % 700
					if i%50 == 7 {
						n = smallFrame + 1000*s // large: written in place
					}
					payload := framePayload(s, i, n)
					msg := []byte{byte(s), byte(i)}
					h := Header{Kind: KindRequest, Op: uint16(s), ID: uint64(i), PayloadLen: uint32(len(payload))}
					// Split the payload to exercise gathering.
					half := len(payload) / 2
					if err := w.write(&h, msg, [][]byte{payload[:half], payload[half:]}, time.Time{}); err != nil {
						t.Error(err)
						return
					}
					// The writer owns nothing of ours once write returns.
					clear(payload)
				}
			}()
		}
		wg.Wait()
	}()

	br := bufio.NewReader(b)
	next := make([]int, senders)
	var hdr [HeaderSize]byte
	for got := 0; got < senders*perSender; got++ {
		h, msg, err := ReadFrameHeader(br, hdr[:], nil, Limits{}.withDefaults())
		if err != nil {
			t.Fatalf("frame %d: %v", got, err)
		}
		s, i := int(h.Op), int(h.ID)
		if s >= senders || i != next[s] || !bytes.Equal(msg, []byte{byte(s), byte(i)}) {
			t.Fatalf("frame %d: sender %d frame %d msg %v, want frame %d", got, s, i, msg, next[s])
		}
		next[s]++
		payload := make([]byte, h.PayloadLen)
		if _, err := io.ReadFull(br, payload); err != nil {
			t.Fatal(err)
		}
		if want := framePayload(s, i, len(payload)); !bytes.Equal(payload, want) {
			t.Fatalf("sender %d frame %d: payload differs", s, i)
		}
	}
}

// gateConn is a net.Conn whose writes block until open is called (a peer
// that stops reading), recording what each Write was given. Close fails
// blocked and later writes. Its channels belong to the synctest bubble
// that makes it, so a writer blocked on it is durably blocked.
type gateConn struct {
	net.Conn // nil: only the methods below are used
	gate     chan struct{}
	closed   chan struct{}
	mu       sync.Mutex
	entered  int      // Write calls started
	writes   [][]byte // what each finished Write call delivered
}

func newGateConn() *gateConn {
	return &gateConn{gate: make(chan struct{}), closed: make(chan struct{})}
}

func (c *gateConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.entered++
	c.mu.Unlock()
	select {
	case <-c.gate:
	case <-c.closed:
		return 0, net.ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, bytes.Clone(b))
	return len(b), nil
}

func (c *gateConn) open() { close(c.gate) }

func (c *gateConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return nil
}

func (c *gateConn) SetWriteDeadline(time.Time) error { return nil }

// stats returns the Write calls started and finished.
func (c *gateConn) stats() (entered int, writes [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entered, slices.Clone(c.writes)
}

func (w *frameWriter) pendingLen() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.mu.pending)
}

// testFrame is frame i of sender s: msg {s, i} and an n-byte payload.
func testFrame(s, i, n int) (Header, []byte, []byte) {
	payload := framePayload(s, i, n)
	return Header{Kind: KindResponse, Op: uint16(s), ID: uint64(i), PayloadLen: uint32(n)}, []byte{byte(s), byte(i)}, payload
}

// readFrames parses a byte stream of frames, checking each one's header
// checksum and that its msg and payload are testFrame's.
func readFrames(t *testing.T, stream []byte) []Header {
	t.Helper()
	var out []Header
	r := bytes.NewReader(stream)
	var hdr [HeaderSize]byte
	for r.Len() > 0 {
		h, msg, err := ReadFrameHeader(r, hdr[:], nil, Limits{}.withDefaults())
		if err != nil {
			t.Fatalf("frame %d: %v", len(out), err)
		}
		payload := make([]byte, h.PayloadLen)
		if _, err := io.ReadFull(r, payload); err != nil {
			t.Fatalf("frame %d: payload: %v", len(out), err)
		}
		_, wantMsg, wantPayload := testFrame(int(h.Op), int(h.ID), len(payload))
		if !bytes.Equal(msg, wantMsg) || !bytes.Equal(payload, wantPayload) {
			t.Fatalf("frame %d (sender %d frame %d): bytes differ from what was sent", len(out), h.Op, h.ID)
		}
		out = append(out, h)
	}
	return out
}

// While a write is stuck on the connection (a peer that stops reading),
// small frames are queued, not written: their write calls return at once.
// The queue is bounded: a sender beyond maxPending waits. When the
// connection moves again the queue leaves in one Write, after the frame
// that was stuck, and every frame arrives whole and in the order sent.
func TestFrameWriterQueuesBehindAStalledWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := newGateConn()
		t.Cleanup(func() { conn.Close() }) // a failed test's blocked senders give up
		w := newFrameWriter(conn, time.Hour)
		errs := make(chan error, 3)

		// Frame 0 takes the writer role and is stuck in conn.Write.
		go func() {
			h, msg, p := testFrame(0, 0, 100)
			errs <- w.write(&h, msg, [][]byte{p}, time.Time{})
		}()
		synctest.Wait()
		if entered, _ := conn.stats(); entered != 1 || w.pendingLen() != 0 {
			t.Fatalf("first frame: %d writes started, %d bytes pending; want 1, 0", entered, w.pendingLen())
		}

		// Frames 1..n of sender 1 are queued: their calls all return
		// while the connection is still stuck.
		const n = 20
		queued := make(chan struct{})
		want := 0
		go func() {
			defer close(queued)
			for i := 1; i <= n; i++ {
				h, msg, p := testFrame(1, i, 10*i)
				if err := w.write(&h, msg, [][]byte{p}, time.Time{}); err != nil {
					errs <- err
					return
				}
			}
		}()
		for i := 1; i <= n; i++ {
			want += HeaderSize + 2 + 10*i
		}
		synctest.Wait()
		select {
		case <-queued:
		default:
			t.Fatal("small frames were not queued: their writes wait for the stuck connection")
		}
		if entered, writes := conn.stats(); entered != 1 || len(writes) != 0 {
			t.Fatalf("%d writes started, %d finished while the connection was stuck; want 1, 0", entered, len(writes))
		}
		if got := w.pendingLen(); got != want {
			t.Fatalf("%d bytes queued, want the %d bytes of %d frames", got, want, n)
		}

		// Sender 2 has more than the bound to send: it waits once the
		// queue holds maxPending bytes, and the queue stays bounded.
		const frame = 4000
		const many = 2 * maxPending / frame
		var sent atomic.Int64
		go func() {
			for i := 0; i < many; i++ {
				h, msg, p := testFrame(2, i, frame)
				if err := w.write(&h, msg, [][]byte{p}, time.Time{}); err != nil {
					errs <- err
					return
				}
				sent.Add(1)
			}
			errs <- nil
		}()
		synctest.Wait()
		got := w.pendingLen()
		if got < maxPending || got > maxPending+smallFrame {
			t.Fatalf("%d bytes queued behind a stalled peer, want between %d and %d", got, maxPending, maxPending+smallFrame)
		}
		if k := sent.Load(); k == many || k == 0 {
			t.Fatalf("sender 2 sent %d of %d frames before the connection moved", k, many)
		}
		stuck := sent.Load()

		// The connection moves: everything is delivered, in order.
		conn.open()
		for range 2 { // frame 0's sender and sender 2 (sender 1 is done)
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if w.pendingLen() != 0 {
			t.Fatalf("%d bytes still queued", w.pendingLen())
		}
		_, writes := conn.stats()
		if len(writes) < 2 {
			t.Fatalf("%d writes", len(writes))
		}
		// The stuck write held frame 0 alone; the next carried the queue:
		// all of sender 1's frames and the ones sender 2 had queued.
		if hs := readFrames(t, writes[0]); len(hs) != 1 || hs[0].Op != 0 {
			t.Fatalf("first write: %+v, want frame 0 alone", hs)
		}
		if hs := readFrames(t, writes[1]); len(hs) != n+int(stuck) {
			t.Fatalf("second write carried %d frames, want the %d queued (coalesced)", len(hs), n+int(stuck))
		}
		next := []uint64{0, 1, 0}
		total := 0
		for _, h := range readFrames(t, bytes.Join(writes, nil)) {
			if h.ID != next[h.Op] {
				t.Fatalf("sender %d: frame %d arrived, want %d", h.Op, h.ID, next[h.Op])
			}
			next[h.Op]++
			total++
		}
		if total != 1+n+many || next[1] != n+1 || next[2] != many {
			t.Fatalf("%d frames arrived (next %v), want %d", total, next, 1+n+many)
		}
	})
}

// Closing the connection under a stalled write fails the write in
// progress, the senders waiting for room in the queue, and later writes.
func TestFrameWriterFailsAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := newGateConn()
		t.Cleanup(func() { conn.Close() }) // a failed test's blocked senders give up
		w := newFrameWriter(conn, time.Hour)
		const senders = 8
		errs := make(chan error, senders)
		for s := 0; s < senders; s++ {
			go func() {
				// Far more than the queue holds: each sender must block,
				// then fail; one that runs out has been failing silently.
				for i := 0; i < 1000; i++ {
					h, msg, p := testFrame(s, i, 4000)
					if err := w.write(&h, msg, [][]byte{p}, time.Time{}); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		// Every sender is blocked: one in conn.Write, the others waiting
		// for room in the full queue.
		synctest.Wait()
		if got := w.pendingLen(); got < maxPending {
			t.Fatalf("%d bytes queued, want the queue full (%d)", got, maxPending)
		}
		select {
		case err := <-errs:
			t.Fatalf("a sender failed before the close: %v", err)
		default:
		}
		conn.Close()
		for s := 0; s < senders; s++ {
			if err := <-errs; err == nil {
				t.Fatal("nil error after close")
			}
		}
		h, msg, p := testFrame(0, 0, 10)
		if err := w.write(&h, msg, [][]byte{p}, time.Time{}); err == nil {
			t.Fatal("write after close succeeded")
		}
		if _, writes := conn.stats(); len(writes) != 0 {
			t.Fatalf("%d writes delivered through a connection that never moved", len(writes))
		}
	})
}

func framePayload(s, i, n int) []byte {
	p := make([]byte, n)
	for k := 0; k+8 <= n; k += 8 {
		binary.BigEndian.PutUint64(p[k:], uint64(s)<<48|uint64(i)<<32|uint64(k))
	}
	return p
}

func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}
