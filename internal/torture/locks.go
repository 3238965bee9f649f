package torture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/filelock"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// The lock workload: clients increment counter files under exclusive
// locks while the faults run; checkLocks judges the holds afterwards.

// counters is the number of counter files.
const counters = 4

// lockTerm is the islands' lock session term in a run (atoll meta
// --lock-term): short, so that a lock whose holder was killed, hung or
// cut off is released within seconds, and so that sessions really end
// under the engine's faults (1-8 s each).
const lockTerm = 5 * time.Second

// counterWidth is the counter files' size: a fixed-width decimal and a
// newline, so every write replaces the whole value.
const counterWidth = 13

// libOwner is the lock owner of every library client inside its FS (a
// client holds one lock at a time; each FS has its own session).
const libOwner = 1

func counterPath(i int) string { return fmt.Sprintf("/locks/d%d/counter", i) }

// counterKind is the lock kind of counter file i: POSIX and flock locks
// never conflict with each other, so each file is locked with one kind.
func counterKind(i int) filelock.Kind {
	if i%2 == 0 {
		return filelock.POSIX
	}
	return filelock.Flock
}

func counterValue(v int64) []byte { return fmt.Appendf(nil, "%0*d\n", counterWidth-1, v) }

// errNotCounter: bytes read from a counter file that are no counter
// value (a torn or misplaced write).
var errNotCounter = errors.New("no counter value")

func parseCounter(b []byte) (int64, error) {
	if len(b) != counterWidth || b[counterWidth-1] != '\n' {
		return -1, fmt.Errorf("%w: %q", errNotCounter, b)
	}
	v, err := strconv.ParseInt(string(b[:counterWidth-1]), 10, 64)
	if err != nil || v < 0 {
		return -1, fmt.Errorf("%w: %q", errNotCounter, b)
	}
	return v, nil
}

// locker is one client's way to increment a counter file: take the
// lock, read, write value+1 durably, confirm the lock was held all
// along, unlock, filling in h (File and Client set) step by step.
// Steps after the grant run to their end after ctx ends.
type locker interface {
	name() string
	increment(ctx context.Context, lw *lockWorkload, h *lockHold)
}

// lockWorkload is the lock traffic's shared state.
type lockWorkload struct {
	w    *workload
	inos [counters]uint64 // the counter files' inodes (library clients lock by inode)
	mu   struct {
		sync.Mutex
		holds []lockHold
	}
}

func (lw *lockWorkload) now() int64 { return lw.w.hist.now() }

// setup creates the counter files at 0, each in a directory of its own
// (so they spread over the islands).
func (lw *lockWorkload) setup(ctx context.Context, c *libOps) error {
	if err := c.mkdir(ctx, "/locks"); err != nil {
		return fmt.Errorf("torture: mkdir /locks: %w", err)
	}
	for i := range counters {
		p := counterPath(i)
		if err := c.mkdir(ctx, strings.TrimSuffix(p, "/counter")); err != nil {
			return fmt.Errorf("torture: mkdir for %s: %w", p, err)
		}
		if err := c.create(ctx, p, counterValue(0)); err != nil {
			return fmt.Errorf("torture: create %s: %w", p, err)
		}
		a, err := c.fs.Resolve(ctx, root, p)
		if err != nil {
			return fmt.Errorf("torture: %s: %w", p, err)
		}
		lw.inos[i] = a.Ino
	}
	return nil
}

// run is one client's increments until ctx ends. After a lock request
// that failed the client asks for the same file again: the island may
// have granted the failed request (its answer lost), and that lock is
// this owner's own, so asking again gets it and the unlock after
// releases it (a request for another file would leave it held as long
// as the session lives).
func (lw *lockWorkload) run(ctx context.Context, client int, c fsOps, l locker, r *rand.Rand) {
	file := -1
	for ctx.Err() == nil {
		if file < 0 {
			file = r.IntN(counters)
		}
		h := lockHold{Client: client, File: file, Read: -1}
		l.increment(ctx, lw, &h)
		if h.Outcome == incNoLock && ctx.Err() != nil {
			return // the workload ended while it waited: no failure
		}
		lw.mu.Lock()
		lw.mu.holds = append(lw.mu.holds, h)
		lw.mu.Unlock()
		if h.Outcome == incUnknown {
			lw.w.noteUnknown(client, c, "increment ", h.cause, h.finished)
		}
		pause := time.Duration(r.IntN(20)) * time.Millisecond
		if h.Outcome == incNoLock {
			pause = 200*time.Millisecond + time.Duration(r.IntN(800))*time.Millisecond
		} else {
			file = -1
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// holds returns the history of holds.
func (lw *lockWorkload) holds() []lockHold {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return append([]lockHold(nil), lw.mu.holds...)
}

// why names an error for a report: its errno, or "timeout" for a step
// abandoned after opTimeout.
func why(err error, finished bool) string {
	switch {
	case errors.Is(err, errNotMounted):
		return "mount down"
	case !finished:
		return fmt.Sprintf("timeout (%v)", err)
	}
	if e := errnoOf(err); e != 0 {
		return fmt.Sprintf("%s (%v)", errnoName(e), err)
	}
	return err.Error()
}

// libLocker increments through the client library.
type libLocker struct {
	fs *client.FS
}

func (l *libLocker) name() string { return "lib" }

func (l *libLocker) increment(ctx context.Context, lw *lockWorkload, h *lockHold) {
	fs, ino := l.fs, lw.inos[h.File]
	lk := filelock.Lock{Owner: filelock.Owner{ID: libOwner}, Kind: counterKind(h.File), Type: filelock.Write, End: filelock.MaxEnd}
	h.Owner = fmt.Sprintf("lib %d", h.Client)
	h.AcqStart = lw.now()
	var waited bool
	err, finished := do(ctx, func(ctx context.Context) error {
		_, err := fs.SetLock(ctx, root, ino, lk, false, nil)
		if errors.Is(err, metawire.ErrWouldBlock) {
			waited = true
			_, err = fs.SetLock(ctx, root, ino, lk, true, nil)
		}
		return err
	})
	if err != nil || !finished {
		h.Outcome = incNoLock
		h.failed(err, finished)
		return
	}
	h.AcqEnd, h.Waited = lw.now(), waited
	// Held: the increment runs to its end (its steps have their own
	// timeouts) however the workload's time ends.
	hctx := context.WithoutCancel(ctx)
	defer l.unlock(hctx, lw, h, lk)
	// held confirms the lock: the time is taken before the check, which
	// looks at the clock after it.
	held := func() bool {
		t := lw.now()
		if !fs.Locked(ino) {
			h.failed(errors.New("the FS does not know the lock it was granted"), true)
			return false
		}
		if err := fs.LockCheck(ino); err != nil {
			h.failed(err, true)
			h.Lost = true
			return false
		}
		h.HeldUntil = t
		return true
	}
	h.Outcome = incNoWrite
	if !held() {
		return
	}
	var fh *client.File
	var v int64
	err, finished = do(hctx, func(ctx context.Context) error {
		var err error
		if fh, err = fs.Open(ctx, root, ino); err != nil {
			return err
		}
		b := make([]byte, counterWidth+1)
		n, err := fh.ReadAt(ctx, b, 0)
		if err != nil {
			return err
		}
		v, err = parseCounter(b[:n])
		return err
	})
	if err != nil || !finished {
		if finished && fh != nil {
			fh.Release()
		}
		h.failed(err, finished)
		if finished && errors.Is(err, errNotCounter) {
			lw.w.violation("client %d (%s): counter %d read under its lock: %v", h.Client, h.Owner, h.File, err)
		}
		return
	}
	defer fh.Release()
	h.Read = v
	if !held() {
		return
	}
	h.Outcome = incUnknown
	err, finished = do(hctx, func(ctx context.Context) error {
		if _, err := fh.WriteAt(ctx, counterValue(v+1), 0); err != nil {
			return err
		}
		return fh.Fsync(ctx)
	})
	if err != nil || !finished {
		h.failed(err, finished)
		return
	}
	// Durable, and the lock still held after: the write landed under it.
	if held() {
		h.Outcome = incAcked
		h.failed(nil, true)
	}
}

// unlock releases h's lock, retrying while the island is away: a lock
// left behind would be held as long as the FS renews its session.
// It gives up when the session may have ended (the island releases the
// lock then) or after opTimeout.
func (l *libLocker) unlock(ctx context.Context, lw *lockWorkload, h *lockHold, lk filelock.Lock) {
	ino := lw.inos[h.File]
	h.RelStart = lw.now()
	deadline := time.Now().Add(opTimeout)
	for {
		err, finished := do(ctx, func(ctx context.Context) error { return l.fs.Unlock(ctx, root, ino, lk) })
		if err == nil && finished {
			h.RelEnd = lw.now()
			return
		}
		if l.fs.LockCheck(ino) != nil || time.Now().After(deadline) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// fuseLocker increments through the FUSE mount with flock(2) on flock
// files and OFD locks (F_OFD_SETLKW) on POSIX files: both belong to the
// open file description, so every attempt is an owner of its own. The
// mount checks its lock session at each write-back and fsync
// (client.FS.LockCheck); a second fsync after the durable one is the
// check that the lock outlived the write. A step stuck in the kernel
// (the mount hung) is abandoned after opTimeout: the file is closed,
// which releases its lock once the step returns.
type fuseLocker struct {
	p *posixOps
}

func (l *fuseLocker) name() string { return "fuse" }

// lockFD takes (how: LOCK_EX, LOCK_NB, LOCK_UN) the lock of kind on f.
func lockFD(f *os.File, kind filelock.Kind, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) {
		if kind == filelock.Flock {
			lerr = unix.Flock(int(fd), how)
			for lerr == unix.EINTR { // a signal; the os package retries its own calls so
				lerr = unix.Flock(int(fd), how)
			}
			return
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
		cmd := unix.F_OFD_SETLKW
		if how&unix.LOCK_NB != 0 {
			cmd = unix.F_OFD_SETLK
		}
		if how&unix.LOCK_UN != 0 {
			lk.Type, cmd = unix.F_UNLCK, unix.F_OFD_SETLK
		}
		lerr = unix.FcntlFlock(fd, cmd, &lk)
		for lerr == unix.EINTR {
			lerr = unix.FcntlFlock(fd, cmd, &lk)
		}
	}); err != nil {
		return err
	}
	return lerr
}

func (l *fuseLocker) increment(ctx context.Context, lw *lockWorkload, h *lockHold) {
	path, kind := l.p.at(counterPath(h.File)), counterKind(h.File)
	h.AcqStart = lw.now()
	// A lock granted after the step was abandoned is closed (released)
	// by the step itself; one granted as it was abandoned is taken.
	var mu sync.Mutex
	var f *os.File
	var waited, granted, abandoned bool
	err, finished := do(ctx, func(context.Context) error {
		if !l.p.mounted() {
			return errNotMounted
		}
		file, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		w := false
		err = lockFD(file, kind, unix.LOCK_EX|unix.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EAGAIN) {
			w = true
			err = lockFD(file, kind, unix.LOCK_EX)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil || abandoned {
			file.Close()
			return err
		}
		f, waited, granted = file, w, true
		return nil
	})
	if !finished {
		mu.Lock()
		abandoned = true
		if granted {
			err, finished = nil, true
		}
		mu.Unlock()
	}
	h.Owner = fmt.Sprintf("fuse %d", h.AcqStart) // one open file description
	if err != nil || !finished {
		h.Outcome = incNoLock
		h.failed(err, finished)
		return
	}
	h.AcqEnd, h.Waited = lw.now(), waited
	// Closing releases the lock even if the unlock failed or a step is
	// still stuck (the close then happens when it returns).
	defer f.Close()
	defer func() {
		h.RelStart = lw.now()
		if err, finished := do(context.WithoutCancel(ctx), func(context.Context) error { return lockFD(f, kind, unix.LOCK_UN) }); err == nil && finished {
			h.RelEnd = lw.now()
		}
	}()
	h.Outcome = incNoWrite
	var v int64
	err, finished = do(ctx, func(context.Context) error {
		b := make([]byte, counterWidth+1)
		n, err := f.ReadAt(b, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		v, err = parseCounter(b[:n])
		return err
	})
	if err != nil || !finished {
		h.failed(err, finished)
		if finished && errors.Is(err, errNotCounter) {
			lw.w.violation("client %d (%s): counter %d read under its lock: %v", h.Client, h.Owner, h.File, err)
		}
		return
	}
	h.Read = v
	h.Outcome = incUnknown
	step := func(fn func() error) bool {
		t := lw.now()
		err, finished := do(context.WithoutCancel(ctx), func(context.Context) error { return fn() })
		if err != nil || !finished {
			h.failed(err, finished)
			return false
		}
		// The mount's lock check passed after t: held until then.
		h.HeldUntil = t
		return true
	}
	if !step(func() error {
		if _, err := f.WriteAt(counterValue(v+1), 0); err != nil {
			return err
		}
		return f.Sync()
	}) {
		return
	}
	if step(f.Sync) {
		h.Outcome = incAcked
		h.failed(nil, true)
	}
}

// checkLocks reads the counters' final values through c after the heal,
// judges the lock history against them (checkLocks) and counts the
// lock workload into the report.
func (e *engine) checkLocks(ctx context.Context, lw *lockWorkload, c *libOps) {
	final := make([]int64, counters)
	for i := range final {
		var b []byte
		err, _ := do(ctx, func(ctx context.Context) error {
			var err error
			b, err = c.read(ctx, counterPath(i))
			return err
		})
		final[i] = -1
		if err == nil {
			final[i], err = parseCounter(b)
		}
		if err != nil {
			e.rep.Errors = append(e.rep.Errors, fmt.Sprintf("counter %d after the heal: %v", i, err))
		}
	}
	r := e.rep
	r.Counters = final
	r.LockFailWhy = map[string]int64{}
	holds := lw.holds()
	for _, h := range holds {
		if h.AcqEnd == 0 {
			r.LockFailures++
			k, _, _ := strings.Cut(h.Why, " (")
			r.LockFailWhy[fmt.Sprintf("client %d (%s): %s", h.Client, strings.Fields(h.Owner)[0], k)]++
			continue
		}
		r.LockHolds++
		if h.Waited {
			r.LockWaits++
		}
		if w := sec(h.AcqEnd - h.AcqStart); w > r.LockWaitMaxSec {
			r.LockWaitMaxSec, r.LockWaitLongest = w, h.String()
		}
		if h.Lost {
			r.LocksLost++
		}
		switch h.Outcome {
		case incAcked:
			r.IncrementsAcked++
		case incUnknown:
			r.IncrementsUnknown++
		case incNoWrite:
			r.IncrementsFailed++
		}
	}
	v := checkLocks(holds, final)
	r.LockViolations = len(v)
	r.Violations = append(r.Violations, v...)
	if err := writeHolds(filepath.Join(e.cfg.Dir, "locks.log"), holds); err != nil {
		r.Errors = append(r.Errors, err.Error())
	}
}

// writeHolds writes the history of holds, one a line in the order they
// ended, with the error that decided each outcome: what a failed lock
// check is read against (the run's directory is kept when it fails).
func writeHolds(path string, holds []lockHold) error {
	var b strings.Builder
	for _, h := range holds {
		b.WriteString(h.String())
		if h.Why != "" {
			b.WriteString(": " + h.Why)
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("torture: the lock history: %w", err)
	}
	return nil
}
