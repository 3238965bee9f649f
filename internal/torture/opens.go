package torture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// The open-file workload: a client holds a file open while another
// client unlinks it or renames a file over it; the holder then reads the
// file through its descriptor. The guarantee checked: such a read
// returns the file's bytes or fails, never other bytes; and once every
// holder closed (or its session ended), the island reclaims the inode
// (checkOpens: none left after the heal and two session terms).

// openFileSize is the size of a held file: past the inline limit, so its
// bytes are blocks in stripes the cleaner could take if the inode went.
const openFileSize = 20000

// openPattern is file n of client c's content.
func openPattern(c, n int) []byte {
	unit := fmt.Appendf(nil, "client %03d file %06d|", c, n)
	return bytes.Repeat(unit, openFileSize/len(unit)+1)[:openFileSize]
}

// opener is a client that can hold a file open: open returns how to
// read the whole file through the open descriptor, how to close it, and
// the inode.
type opener interface {
	open(ctx context.Context, path string) (read func(context.Context) ([]byte, error), closeFn func(), ino uint64, err error)
	// sessionsLost counts the lock sessions the client lost (its holds
	// went with them); -1: unknown (a mount in another process).
	sessionsLost() int64
}

func (l *libOps) sessionsLost() int64   { return int64(l.fs.LockSessionsLost()) }
func (p *posixOps) sessionsLost() int64 { return -1 }

func (l *libOps) open(ctx context.Context, path string) (func(context.Context) ([]byte, error), func(), uint64, error) {
	a, err := l.fs.Resolve(ctx, root, path)
	if err != nil {
		return nil, nil, 0, err
	}
	// As the mount does for every open (client.FS.HoldOpen).
	if err := l.fs.HoldOpen(ctx, a.Ino); err != nil {
		return nil, nil, 0, err
	}
	fh, err := l.fs.Open(ctx, root, a.Ino)
	if err != nil {
		l.fs.ReleaseOpen(a.Ino)
		return nil, nil, 0, err
	}
	read := func(ctx context.Context) ([]byte, error) {
		out := make([]byte, fh.Size())
		n, err := fh.ReadAt(ctx, out, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return out[:n], nil
	}
	return read, func() { fh.Release(); l.fs.ReleaseOpen(a.Ino) }, a.Ino, nil
}

func (p *posixOps) open(_ context.Context, path string) (func(context.Context) ([]byte, error), func(), uint64, error) {
	var f *os.File
	var st syscall.Stat_t
	err := p.guard(func() (err error) {
		if f, err = os.Open(p.at(path)); err != nil {
			return err
		}
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		if f != nil && !errors.Is(err, errNotMounted) {
			f.Close()
		}
		return nil, nil, 0, err
	}
	read := func(context.Context) ([]byte, error) {
		var b []byte
		err := p.guard(func() (err error) {
			b, err = io.ReadAll(io.NewSectionReader(f, 0, 1<<30))
			return err
		})
		return b, err
	}
	return read, func() { f.Close() }, st.Ino, nil
}

// openRecord is one file held open and removed by another client.
type openRecord struct {
	Holder, Remover int
	Path            string
	Rename          bool   // renamed over rather than unlinked
	Ino             uint64 // the removed inode
	Outcome         string // "ok", "mismatch", or why the read failed
	// Kept: the holder's lock session lived through the hold and as
	// long after a failed read as the client can take to learn that an
	// island ended it (sessionKept; known for library clients only), so
	// a failed read is a violation.
	Kept bool
}

// openWorkload is the open-file traffic's shared state.
type openWorkload struct {
	w       *workload
	clients []fsOps
	closing sync.WaitGroup // closes of descriptors whose removal timed out
	mu      struct {
		sync.Mutex
		recs []openRecord
	}
}

// run is holder client i's loop until ctx ends: create, open, have
// another client remove, read through the descriptor, close.
func (ow *openWorkload) run(ctx context.Context, i int, o opener, r *rand.Rand) {
	holder := ow.clients[i]
	for n := 0; ctx.Err() == nil; n++ {
		path := fmt.Sprintf("/opens/c%d-%d", i, n)
		want := openPattern(i, n)
		if err, ok := do(ctx, func(ctx context.Context) error { return holder.create(ctx, path, want) }); err != nil || !ok {
			ow.pause(ctx, r)
			continue
		}
		var read func(context.Context) ([]byte, error)
		var closeFn func()
		var ino uint64
		if err, ok := do(ctx, func(ctx context.Context) (err error) {
			read, closeFn, ino, err = o.open(ctx, path)
			return err
		}); err != nil || !ok {
			ow.pause(ctx, r)
			continue
		}
		lost := o.sessionsLost()
		rec := openRecord{Holder: i, Path: path, Ino: ino}
		rec.Remover = r.IntN(len(ow.clients) - 1)
		if rec.Remover >= i {
			rec.Remover++
		}
		rm := ow.clients[rec.Remover]
		rec.Rename = !isNFS(rm) && r.IntN(2) == 0
		err, ok := do(ctx, func(ctx context.Context) error {
			if !rec.Rename {
				return rm.unlink(ctx, path)
			}
			if err := rm.create(ctx, path+".new", []byte("replacement")); err != nil {
				return err
			}
			return rm.rename(ctx, path+".new", path)
		})
		if err == nil && ok {
			var got []byte
			rerr, rok := do(ctx, func(ctx context.Context) (err error) {
				got, err = read(ctx)
				return err
			})
			switch {
			case !rok:
				rec.Outcome = "read timed out"
			case rerr != nil:
				rec.Outcome = why(rerr, true)
				rec.Kept = lost >= 0 && sessionKept(ctx, o, lost)
			case bytes.Equal(got, want):
				rec.Outcome = "ok"
			default:
				rec.Outcome = fmt.Sprintf("mismatch: %d bytes, %.40q", len(got), got)
			}
			ow.mu.Lock()
			ow.mu.recs = append(ow.mu.recs, rec)
			ow.mu.Unlock()
		}
		if ok {
			// A close of a descriptor whose removal timed out would race
			// with it; an abandoned one closes when the step ends.
			closeFn()
		} else {
			ow.closing.Add(1)
			go func() {
				defer ow.closing.Done()
				time.Sleep(opTimeout)
				closeFn()
			}()
		}
		ow.pause(ctx, r)
	}
}

// sessionKept reports whether the holder's lock session outlived a read
// that failed: an island ends a session it has not heard from for a term
// (and lets its holds go), and the client learns it at its next renewal
// that gets through, which a partition can put off. So the count of
// sessions the client lost is watched for as long as that can take (two
// terms and the longest partition), not only at the failure: a session
// the island had already ended is not a violation.
func sessionKept(ctx context.Context, o opener, lost int64) bool {
	deadline := time.Now().Add(2*lockTerm + 10*time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if o.sessionsLost() != lost {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	return o.sessionsLost() == lost
}

func (ow *openWorkload) pause(ctx context.Context, r *rand.Rand) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(50+r.IntN(200)) * time.Millisecond):
	}
}

// checkOpens judges the open-file records: no read through a held
// descriptor returned other bytes, and every removed inode was reclaimed
// once its holders closed (after the heal, within two session terms and
// the islands' sweep).
func (e *engine) checkOpens(ctx context.Context, ow *openWorkload, fs *client.FS) {
	ow.closing.Wait()
	ow.mu.Lock()
	recs := append([]openRecord(nil), ow.mu.recs...)
	ow.mu.Unlock()
	r := e.rep
	r.OpenFailWhy = map[string]int64{}
	for _, rec := range recs {
		r.OpenRemoved++
		switch {
		case rec.Outcome == "ok":
			r.OpenReadsOK++
		case strings.HasPrefix(rec.Outcome, "mismatch"):
			r.OpenMismatches++
			if r.OpenMismatches <= maxLockViolations {
				e.rep.Violations = append(e.rep.Violations, fmt.Sprintf("open file %s of client %d, removed by client %d (rename %v): read through the open descriptor: %s",
					rec.Path, rec.Holder, rec.Remover, rec.Rename, rec.Outcome))
			}
		default:
			r.OpenReadsFailed++
			r.OpenFailWhy[fmt.Sprintf("client %d: %s", rec.Holder, rec.Outcome)]++
			if rec.Kept && strings.HasPrefix(rec.Outcome, "ESTALE") {
				r.OpenMismatches++
				if r.OpenMismatches <= maxLockViolations {
					e.rep.Violations = append(e.rep.Violations, fmt.Sprintf("open file %s of client %d, removed by client %d (rename %v): gone under its open descriptor while the holder's session lived: %s",
						rec.Path, rec.Holder, rec.Remover, rec.Rename, rec.Outcome))
				}
			}
		}
	}
	deadline := time.Now().Add(2*lockTerm + 10*time.Second)
	for _, rec := range recs {
		for {
			_, err := fs.GetAttrFresh(ctx, metawire.Root, rec.Ino)
			if errors.Is(err, metawire.ErrStale) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				r.OpenLeaked++
				if r.OpenLeaked <= maxLockViolations {
					e.rep.Violations = append(e.rep.Violations, fmt.Sprintf("open file %s (inode %x) of client %d still not reclaimed %v after the heal: %v",
						rec.Path, rec.Ino, rec.Holder, 2*lockTerm+10*time.Second, err))
				}
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
