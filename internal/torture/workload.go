package torture

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// opTimeout bounds one operation; past it the outcome is unknown (the
// engine's faults hang servers for at most a few seconds, and a client
// is expected to recover after them).
const opTimeout = 45 * time.Second

// dataFile is a file with checked bytes: created, written and fsynced by
// one client, later overwritten in part, read back by any client.
type dataFile struct {
	path  string
	owner int
	mu    struct {
		sync.Mutex
		want      []byte // the bytes every fsync acknowledged
		gen       uint64 // bumped when a change starts
		busy      bool   // a change is under way
		uncertain bool   // a change failed: the bytes are unknown
		gone      bool   // unlinked (acknowledged)
	}
}

// workload is the shared state of the clients.
type workload struct {
	hist   *history
	groups int
	nextID atomic.Uint32
	rnd    func() *rand.Rand // a new generator per client

	mu struct {
		sync.Mutex
		files []*dataFile
	}
	ops, unknown, readChecks     atomic.Int64
	unknownMu                    sync.Mutex
	unknownWhy                   map[string]int64  // "client N (kind): errno or timeout" -> unknown outcomes
	unknownExample               map[string]string // the first error of each
	mismatches                   atomic.Int64      // reads that returned other bytes than acknowledged
	lostFiles                    atomic.Int64      // acknowledged files found missing during the run
	ackedBytes                   atomic.Int64
	liveBytes                    atomic.Int64 // acknowledged bytes of files not unlinked
	violationsMu                 sync.Mutex
	violations                   []string
	createdFiles, overwrites     atomic.Int64
	unlinkedFiles, nsOps, dataOp atomic.Int64
}

func (w *workload) violation(format string, args ...any) {
	at := float64(w.hist.now()) / 1e9
	w.violationsMu.Lock()
	defer w.violationsMu.Unlock()
	if len(w.violations) < 50 {
		w.violations = append(w.violations, fmt.Sprintf("at %.1fs: ", at)+fmt.Sprintf(format, args...))
	}
}

func groupDir(g int, dir uint8) string { return fmt.Sprintf("/ns/g%d/%c", g, "xy"[dir]) }

func slotPath(g int, s Slot) string { return fmt.Sprintf("%s/f%d", groupDir(g, s.Dir), s.Name) }

// noteUnknown counts an operation of client whose outcome is unknown
// (what, "" or "fill ", names the step): by client and errno, or
// "timeout" when it did not finish, with the first error of each as an
// example, so that a report with many says where they came from.
func (w *workload) noteUnknown(client int, c fsOps, what string, err error, finished bool) {
	why, example := "timeout", fmt.Sprintf("not finished within %v", opTimeout)
	if finished {
		why, example = "no errno", fmt.Sprint(err)
		if e := errnoOf(err); e != 0 {
			why = errnoName(e)
		}
	}
	w.unknown.Add(1)
	w.unknownMu.Lock()
	defer w.unknownMu.Unlock()
	if w.unknownWhy == nil {
		w.unknownWhy, w.unknownExample = map[string]int64{}, map[string]string{}
	}
	k := fmt.Sprintf("client %d (%s): %s%s", client, c.name(), what, why)
	w.unknownWhy[k]++
	if _, ok := w.unknownExample[k]; !ok {
		w.unknownExample[k] = example
	}
}

// run is one client's loop until ctx ends.
func (w *workload) run(ctx context.Context, id int, c fsOps, r *rand.Rand) {
	// A FUSE mount and an NFS gateway cache names and attributes for a
	// second (close-to-open consistency): their namespace view is not
	// linearizable with other clients', by design. They run the data
	// workload only, whose checks are close-to-open ones.
	cached := c.name() != "lib" // FUSE and NFS: a second of name caching
	for ctx.Err() == nil {
		w.ops.Add(1)
		if !cached && r.IntN(10) < 6 {
			w.nsOps.Add(1)
			if w.namespaceOp(ctx, id, c, r) {
				// An operation that failed without a definite answer (its
				// island unavailable, failed at once while the client
				// probes it) stays open to the end of the history and
				// doubles the checker's states; an application would back
				// off too. Without this, one client spinning through an
				// island's outage left thousands and the check gave up.
				select {
				case <-ctx.Done():
				case <-time.After(unknownBackoff):
				}
			}
		} else {
			w.dataOp.Add(1)
			w.dataOpOnce(ctx, id, c, r)
		}
	}
}

// do runs fn with a timeout, on its own goroutine so that an operation
// stuck in the kernel (a FUSE request to a hung mount) cannot stall the
// client: after the timeout it is abandoned and counts as unknown.
func do(ctx context.Context, fn func(ctx context.Context) error) (error, bool) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		return err, true
	case <-ctx.Done():
		return ctx.Err(), false
	}
}

// unknownBackoff is a client's pause after an operation that failed
// without a definite answer.
const unknownBackoff = 250 * time.Millisecond

// namespaceOp runs one operation of the model and records it; it reports
// whether it failed without a definite answer (the caller backs off).
func (w *workload) namespaceOp(ctx context.Context, client int, c fsOps, r *rand.Rand) (indefinite bool) {
	in := NsInput{Group: r.IntN(w.groups), Kind: OpKind(r.IntN(7)), From: slots[r.IntN(4)]}
	// Creates and reads are the most telling: weight them up.
	switch r.IntN(10) {
	case 0, 1:
		in.Kind = OpCreate
	case 2, 3:
		in.Kind = OpRead
	}
	if in.Kind == OpRename {
		in.To = slots[r.IntN(4)]
	}
	if in.Kind == OpList {
		in.Dir = uint8(r.IntN(2))
	}
	p := slotPath(in.Group, in.From)
	if in.Kind == OpCreate {
		in.ID = w.nextID.Add(1)
	}
	// res and fill are written by the operation's goroutine: read only
	// once it finished (an abandoned one may still write them).
	var res NsOutput
	var fill func(ctx context.Context, data []byte) error // a created file's content, written next
	call := w.hist.now()
	err, finished := do(ctx, func(ctx context.Context) error {
		out := &res
		switch in.Kind {
		case OpCreate:
			var err error
			fill, err = c.createOpen(ctx, p)
			return err
		case OpUnlink:
			return c.unlink(ctx, p)
		case OpMkdir:
			return c.mkdir(ctx, p)
		case OpRmdir:
			return c.rmdir(ctx, p)
		case OpRename:
			return c.rename(ctx, p, slotPath(in.Group, in.To))
		case OpRead, OpList:
			return w.observe(ctx, client, c, in, out)
		}
		return nil
	})
	out := NsOutput{Unknown: true} // unfinished: it may still land
	if finished {
		out = res
		out.Errno = errnoOf(err)
		if !definite(out.Errno) {
			out = NsOutput{Unknown: true}
		}
	}
	if out.Unknown {
		w.noteUnknown(client, c, "", err, finished)
	}
	w.hist.add(client, in, call, out)
	if !finished {
		return false // it timed out: the wait was its back-off
	}
	if fill != nil && !out.Unknown && out.Errno == 0 {
		// The content, through the handle the create opened.
		fin := NsInput{Group: in.Group, Kind: OpFill, ID: in.ID}
		call := w.hist.now()
		err, finished := do(ctx, func(ctx context.Context) error { return fill(ctx, []byte(fmt.Sprintf("id=%d\n", in.ID))) })
		fout := NsOutput{}
		if err != nil || !finished {
			fout = NsOutput{Unknown: true}
			w.noteUnknown(client, c, "fill ", err, finished)
		}
		w.hist.add(client, fin, call, fout)
		return fout.Unknown && finished
	} else if fill != nil {
		_ = fill(ctx, nil) // closes the handle
	}
	return out.Unknown
}

// observe runs a read or a list of the model's names and puts what it
// saw in out: a read's content id (0: created, not yet filled), a list's
// names. Bytes that are no content id, or names the model never makes,
// are violations of their own.
func (w *workload) observe(ctx context.Context, client int, c fsOps, in NsInput, out *NsOutput) error {
	if in.Kind == OpList {
		dir := groupDir(in.Group, in.Dir)
		names, err := c.list(ctx, dir)
		for _, n := range names {
			switch n {
			case "f0":
				out.Names |= 1
			case "f1":
				out.Names |= 2
			default:
				w.violation("client %d (%s): list %s has %q", client, c.name(), dir, n)
			}
		}
		return err
	}
	p := slotPath(in.Group, in.From)
	b, err := c.read(ctx, p)
	if err != nil || len(b) == 0 {
		return err
	}
	v, perr := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(string(b), "id="), "\n"), 10, 32)
	if perr != nil {
		// Bytes that are no content id: a torn or wrong read.
		w.violation("client %d (%s): read %s returned %q, not a content id", client, c.name(), p, b)
		v = uint64(^uint32(0))
	}
	out.ID = uint32(v)
	return nil
}

// content returns n bytes that name their file and generation, so a
// misplaced block is recognisable.
func content(r *rand.Rand, n int, tag string) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	copy(b, tag)
	return b
}

// liveMax bounds the acknowledged bytes of live data files: past it the
// clients unlink more than they create, so a long run does not fill its
// servers' disks (a full disk is a fault the schedule injects, not the
// workload's steady state).
const liveMax = 192 << 20

func (w *workload) dataOpOnce(ctx context.Context, client int, c fsOps, r *rand.Rand) {
	if w.liveBytes.Load() > liveMax && r.IntN(2) == 0 {
		if f := w.pick(r, client, true); f != nil {
			w.unlinkData(ctx, client, c, f)
			return
		}
	}
	switch k := r.IntN(10); {
	case k < 4:
		w.createData(ctx, client, c, r)
	case k < 6:
		if f := w.pick(r, client, true); f != nil {
			w.overwriteData(ctx, client, c, r, f)
		} else {
			w.createData(ctx, client, c, r)
		}
	case k < 9:
		if f := w.pick(r, client, false); f != nil {
			w.readData(ctx, client, c, f)
		}
	default:
		if f := w.pick(r, client, true); f != nil {
			w.unlinkData(ctx, client, c, f)
		}
	}
}

// pick returns a random live file: one of client's own (own), or anyone's.
func (w *workload) pick(r *rand.Rand, client int, own bool) *dataFile {
	w.mu.Lock()
	defer w.mu.Unlock()
	for tries := 0; tries < 8 && len(w.mu.files) > 0; tries++ {
		i := r.IntN(len(w.mu.files))
		f := w.mu.files[i]
		f.mu.Lock()
		dead := (f.mu.gone || f.mu.uncertain) && !f.mu.busy
		ok := !f.mu.gone && !f.mu.uncertain && !(own && f.mu.busy) && (!own || f.owner == client)
		f.mu.Unlock()
		if dead {
			// Nothing left to check on it: forget it (a long run's memory).
			last := len(w.mu.files) - 1
			w.mu.files[i], w.mu.files[last] = w.mu.files[last], nil
			w.mu.files = w.mu.files[:last]
			continue
		}
		if ok {
			return f
		}
	}
	return nil
}

func dataSize(r *rand.Rand) int {
	switch k := r.IntN(10); {
	case k < 5:
		return 1 + r.IntN(12<<10) // inline in the island
	case k < 9 || r.IntN(2) == 0:
		return 16<<10 + r.IntN(300<<10) // striped, a few blocks
	default:
		return 1<<20 + r.IntN(1<<20) // striped, several stripes
	}
}

func (w *workload) createData(ctx context.Context, client int, c fsOps, r *rand.Rand) {
	id := w.nextID.Add(1)
	f := &dataFile{path: fmt.Sprintf("/data/c%d/file%d", client, id), owner: client}
	data := content(r, dataSize(r), f.path+"@0;")
	err, finished := do(ctx, func(ctx context.Context) error { return c.create(ctx, f.path, data) })
	if err != nil || !finished {
		return // not acknowledged: nothing to check
	}
	f.mu.want = data
	w.createdFiles.Add(1)
	w.ackedBytes.Add(int64(len(data)))
	w.liveBytes.Add(int64(len(data)))
	w.mu.Lock()
	w.mu.files = append(w.mu.files, f)
	w.mu.Unlock()
}

func (w *workload) overwriteData(ctx context.Context, client int, c fsOps, r *rand.Rand, f *dataFile) {
	f.mu.Lock()
	f.mu.busy = true
	f.mu.gen++
	want := f.mu.want
	gen := f.mu.gen
	f.mu.Unlock()
	off := r.IntN(len(want) + 1)
	n := 1 + r.IntN(min(256<<10, len(want)+1024))
	patch := content(r, n, fmt.Sprintf("%s@%d;", f.path, gen))
	err, finished := do(ctx, func(ctx context.Context) error { return c.overwrite(ctx, f.path, int64(off), patch) })
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.busy = false
	if err != nil || !finished {
		f.mu.uncertain = true // a failed write may have landed in part
		w.liveBytes.Add(-int64(len(want)))
		f.mu.want = nil
		return
	}
	next := make([]byte, max(len(want), off+n))
	copy(next, want)
	copy(next[off:], patch)
	f.mu.want = next
	w.liveBytes.Add(int64(len(next) - len(want)))
	w.overwrites.Add(1)
	w.ackedBytes.Add(int64(n))
}

func (w *workload) readData(ctx context.Context, client int, c fsOps, f *dataFile) {
	f.mu.Lock()
	if f.mu.busy || f.mu.gone || f.mu.uncertain {
		f.mu.Unlock()
		return
	}
	gen, want := f.mu.gen, f.mu.want
	f.mu.Unlock()
	var got []byte
	err, finished := do(ctx, func(ctx context.Context) error {
		var err error
		got, err = c.read(ctx, f.path)
		return err
	})
	f.mu.Lock()
	changed := f.mu.gen != gen || f.mu.busy || f.mu.gone
	f.mu.Unlock()
	if !finished || changed {
		return
	}
	w.readChecks.Add(1)
	switch {
	case err == nil && !bytes.Equal(got, want):
		w.mismatches.Add(1)
		w.violation("client %d (%s): read of %s (acknowledged, %d bytes) returned %d other bytes (first difference at %d)",
			client, c.name(), f.path, len(want), len(got), firstDiff(got, want))
	case errnoOf(err) == syscall.ENOENT:
		w.lostFiles.Add(1)
		w.violation("client %d (%s): acknowledged file %s not found: %v", client, c.name(), f.path, err)
	}
}

func (w *workload) unlinkData(ctx context.Context, client int, c fsOps, f *dataFile) {
	f.mu.Lock()
	f.mu.busy = true
	f.mu.gen++
	f.mu.Unlock()
	err, finished := do(ctx, func(ctx context.Context) error { return c.unlink(ctx, f.path) })
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.busy = false
	w.liveBytes.Add(-int64(len(f.mu.want)))
	f.mu.want = nil
	if err == nil && finished {
		f.mu.gone = true
		w.unlinkedFiles.Add(1)
	} else {
		f.mu.uncertain = true
	}
}

func firstDiff(a, b []byte) int {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// verify reads every acknowledged file through c after the final heal:
// each must read back exact. It returns the bytes lost (files missing or
// unreadable, or different).
func (w *workload) verify(ctx context.Context, c fsOps) (files int, lost int64) {
	w.mu.Lock()
	all := append([]*dataFile(nil), w.mu.files...)
	w.mu.Unlock()
	for _, f := range all {
		f.mu.Lock()
		skip := f.mu.gone || f.mu.uncertain
		want := f.mu.want
		f.mu.Unlock()
		if skip {
			continue
		}
		files++
		var got []byte
		err, _ := do(ctx, func(ctx context.Context) error {
			var err error
			got, err = c.read(ctx, f.path)
			return err
		})
		if err != nil || !bytes.Equal(got, want) {
			lost += int64(len(want))
			w.violation("after the final heal: %s (%d bytes acknowledged): %d bytes read, err %v", f.path, len(want), len(got), err)
		}
	}
	return files, lost
}
