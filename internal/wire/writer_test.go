package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
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

// A peer that stops reading holds the senders back: frames queue up to a
// bound, then write blocks, instead of buffering without limit. Closing
// the connection then fails the blocked and later writes.
func TestFrameWriterBoundsQueueAndFailsAfterClose(t *testing.T) {
	a, b := tcpPair(t)
	w := newFrameWriter(a, 10*time.Second)
	frame := make([]byte, 4000)
	errs := make(chan error, 64)
	for s := 0; s < 64; s++ {
		go func() {
			for {
				h := Header{Kind: KindResponse, PayloadLen: uint32(len(frame))}
				if err := w.write(&h, nil, [][]byte{frame}, time.Time{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// Socket buffers fill, then the queue; then every sender blocks.
	time.Sleep(500 * time.Millisecond)
	w.mu.Lock()
	queued := len(w.mu.pending)
	w.mu.Unlock()
	if queued > maxPending+smallFrame {
		t.Fatalf("%d bytes queued behind a stalled peer, bound %d", queued, maxPending+smallFrame)
	}
	a.Close()
	b.Close()
	for s := 0; s < 64; s++ {
		select {
		case err := <-errs:
			if err == nil {
				t.Fatal("nil error after close")
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("sender %d still blocked after close", s)
		}
	}
	h := Header{Kind: KindResponse}
	if err := w.write(&h, nil, nil, time.Time{}); err == nil {
		t.Fatal("write after close succeeded")
	}
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
