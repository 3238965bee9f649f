package wire

import (
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/atoll-fs/atoll/internal/lockcheck"
)

// smallFrame is the largest frame (header, message and payload) that is
// copied into the shared send buffer; larger frames are written straight
// from the caller's slices.
const smallFrame = 16 << 10

// maxPending bounds the small frames queued behind a write in progress;
// beyond it senders wait (back-pressure from a slow peer).
const maxPending = 256 << 10

var zeroHeader [HeaderSize]byte

// frameWriter writes whole frames to one connection for many goroutines.
//
// Small frames are combined: a frame is appended to a pending buffer, and
// whichever goroutine finds no write in progress becomes the writer and
// sends everything pending, looping until nothing is left. Frames queued
// while a write syscall runs therefore leave in the next one, so a busy
// connection makes one syscall (and one TCP segment train) for many
// frames instead of one each. A large frame waits for the writer role and
// goes out with a vectored write behind whatever was pending, without a
// copy.
//
// A queued small frame is owned by the writer once write returns, so its
// caller may reuse its slices at once. A write error closes the connection
// (a half-written frame poisons the stream) and is reported to whichever
// goroutine was writing; frames still queued are dropped, and the owner
// of the connection learns of it from its reader, which fails.
type frameWriter struct {
	conn    net.Conn
	timeout time.Duration

	mu struct {
		lockcheck.Mutex
		pending []byte
		spare   []byte
		writing bool
		err     error
		idle    *sync.Cond // broadcast when writing turns false or pending is taken
	}
}

func newFrameWriter(conn net.Conn, timeout time.Duration) *frameWriter {
	w := &frameWriter{conn: conn, timeout: timeout}
	w.mu.idle = sync.NewCond(&w.mu.Mutex)
	return w
}

// write sends one frame. h must have its lengths set; deadline, when not
// zero, bounds this frame's own write when it is large.
func (w *frameWriter) write(h *Header, msg []byte, payload [][]byte, deadline time.Time) error {
	size := HeaderSize + len(msg)
	for _, p := range payload {
		size += len(p)
	}
	w.mu.Lock()
	if w.mu.err != nil {
		err := w.mu.err
		w.mu.Unlock()
		return err
	}
	if size <= smallFrame {
		for w.mu.writing && len(w.mu.pending) >= maxPending && w.mu.err == nil {
			w.mu.idle.Wait()
		}
		if w.mu.err != nil {
			err := w.mu.err
			w.mu.Unlock()
			return err
		}
		at := len(w.mu.pending)
		w.mu.pending = append(w.mu.pending, zeroHeader[:]...)
		PutHeader(w.mu.pending[at:], h, msg)
		w.mu.pending = append(w.mu.pending, msg...)
		for _, p := range payload {
			w.mu.pending = append(w.mu.pending, p...)
		}
		if w.mu.writing {
			w.mu.Unlock()
			return nil
		}
		w.mu.writing = true
		// Let goroutines that are about to send (other handlers of the
		// same burst of requests) queue behind this frame first.
		w.mu.Unlock()
		runtime.Gosched()
		w.mu.Lock()
		return w.flushLocked()
	}
	for w.mu.writing {
		w.mu.idle.Wait()
	}
	if w.mu.err != nil {
		err := w.mu.err
		w.mu.Unlock()
		return err
	}
	w.mu.writing = true
	queued := w.takeLocked()
	w.mu.Unlock()

	var hdr [HeaderSize]byte
	PutHeader(hdr[:], h, msg)
	bufs := make(net.Buffers, 0, 3+len(payload))
	if len(queued) > 0 {
		bufs = append(bufs, queued)
	}
	bufs = append(bufs, hdr[:], msg)
	bufs = append(bufs, payload...)
	dl := time.Now().Add(w.timeout)
	if !deadline.IsZero() && deadline.Before(dl) {
		dl = deadline
	}
	_ = w.conn.SetWriteDeadline(dl)
	_, err := bufs.WriteTo(w.conn)

	w.mu.Lock()
	w.giveBackLocked(queued)
	if err != nil {
		w.failLocked(err)
	}
	return w.flushLocked()
}

// flushLocked sends everything pending while holding the writer role, then
// gives the role up and unlocks w.mu. It returns the connection's error.
func (w *frameWriter) flushLocked() error {
	for len(w.mu.pending) > 0 && w.mu.err == nil {
		buf := w.takeLocked()
		w.mu.Unlock()
		_ = w.conn.SetWriteDeadline(time.Now().Add(w.timeout))
		_, err := w.conn.Write(buf)
		w.mu.Lock()
		w.giveBackLocked(buf)
		if err != nil {
			w.failLocked(err)
		}
	}
	w.mu.writing = false
	w.mu.idle.Broadcast()
	err := w.mu.err
	w.mu.Unlock()
	return err
}

// takeLocked hands the pending bytes to the writer and starts a new
// pending buffer.
func (w *frameWriter) takeLocked() []byte {
	buf := w.mu.pending
	w.mu.pending = w.mu.spare[:0]
	w.mu.spare = nil
	w.mu.idle.Broadcast()
	return buf
}

// giveBackLocked keeps a sent buffer for reuse unless it grew large (one
// burst should not pin memory for the connection's lifetime).
func (w *frameWriter) giveBackLocked(buf []byte) {
	if buf != nil && cap(buf) <= 256<<10 {
		w.mu.spare = buf[:0]
	}
}

func (w *frameWriter) failLocked(err error) {
	if w.mu.err == nil {
		w.mu.err = err
	}
	w.mu.pending = nil
	w.conn.Close()
}
