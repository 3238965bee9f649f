package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// appendRecord is writer w's record k: 100 bytes, one line.
func appendRecord(w byte, k int) []byte {
	r := fmt.Appendf(nil, "%c %06d ", w, k)
	r = append(r, bytes.Repeat([]byte{w}, 100-len(r)-1)...)
	return append(r, '\n')
}

// checkAppends checks that data holds every record of each writer
// exactly once, whole, and each writer's in its order.
func checkAppends(t *testing.T, data []byte, writers string, n int) {
	t.Helper()
	if len(data) != len(writers)*n*100 {
		t.Errorf("file has %d bytes, want %d (%d writers x %d records of 100 bytes)", len(data), len(writers)*n*100, len(writers), n)
	}
	next := map[byte]int{}
	bad := 0
	for off := 0; off+100 <= len(data); off += 100 {
		rec := data[off : off+100]
		var w byte
		var k int
		if _, err := fmt.Sscanf(string(rec[:9]), "%c %06d", &w, &k); err != nil || !bytes.Equal(rec, appendRecord(w, k)) {
			if bad++; bad <= 3 {
				t.Errorf("record at %d is not whole: %q", off, rec)
			}
			continue
		}
		if k != next[w] {
			if bad++; bad <= 3 {
				t.Errorf("record at %d: writer %c's %d, want its %d", off, w, k, next[w])
			}
		}
		next[w] = k + 1
	}
	for i := range len(writers) {
		if next[writers[i]] != n {
			t.Errorf("writer %c: %d of %d records found in order", writers[i], next[writers[i]], n)
		}
	}
	if bad > 0 {
		t.Fatalf("%d bad records", bad)
	}
}

// TestFUSEAppendsFromTwoMounts: two processes, one per mount (two
// hosts), append 100-byte records with O_APPEND to one file; every
// record of both is there once, whole, in each writer's order, as on a
// local disk. Before appends took the file's end at the island, the
// kernel's cached end made the two overwrite each other: with
// descriptors kept open one writer's 2,000 records were all lost, and
// with open/append/close per record 302 of 4,000. The first writer
// starts alone, so its first appends are made under its exclusive lease
// and must reach the island when the second one's recalls it.
// ATOLL_APPEND_RECORDS sets the records per writer.
func TestFUSEAppendsFromTwoMounts(t *testing.T) {
	fsa, _, _, ma, mb := twoMounts(t)
	n := envInt("ATOLL_APPEND_RECORDS", 300)
	modes := []struct {
		name string
		// open opens the file for one writer's appends; each record is
		// written by write, then after calls close (or nothing).
		keepOpen, fsync bool
	}{
		{"kept open", true, false},
		{"fsync each", true, true},
		{"open append close", false, false},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			// In a directory of A's own: A holds its lease exclusively
			// until B comes.
			name := filepath.Join("d-"+m.name[:4], "log")
			if err := os.Mkdir(filepath.Join(ma, filepath.Dir(name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ma, name), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			local0, _ := fsa.LocalLocks()
			// A writes a tenth of its records alone (its append locks
			// granted by its mount under the lease, the records not yet
			// written back), then waits until B has appended three.
			started, bGoing := make(chan struct{}), make(chan struct{})
			writer := func(mnt string, w byte, started chan<- struct{}) error {
				p := filepath.Join(mnt, name)
				open := func() (*os.File, error) { return os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0) }
				var f *os.File
				var err error
				if m.keepOpen {
					if f, err = open(); err != nil {
						return err
					}
					defer f.Close()
				}
				for k := range n {
					if k == n/10 && started != nil {
						close(started)
						select {
						case <-bGoing:
						case <-time.After(time.Minute):
						}
					}
					if k == 3 && started == nil {
						close(bGoing)
					}
					if !m.keepOpen {
						if f, err = open(); err != nil {
							return err
						}
					}
					if _, err := f.Write(appendRecord(w, k)); err != nil {
						return fmt.Errorf("record %d: %w", k, err)
					}
					if m.fsync {
						if err := f.Sync(); err != nil {
							return fmt.Errorf("fsync after record %d: %w", k, err)
						}
					}
					if !m.keepOpen {
						if err := f.Close(); err != nil {
							return fmt.Errorf("close after record %d: %w", k, err)
						}
					}
				}
				return nil
			}
			errs := make([]error, 2)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); errs[0] = writer(ma, 'A', started) }()
			go func() {
				defer wg.Done()
				select {
				case <-started:
				case <-time.After(2 * time.Minute):
				}
				errs[1] = writer(mb, 'B', nil)
			}()
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("writer %c: %v", 'A'+i, err)
				}
			}
			if local, _ := fsa.LocalLocks(); local-local0 < uint64(n/20) {
				t.Errorf("A's mount granted %d append locks itself, want at least %d of its first %d", local-local0, n/20, n/10)
			}
			// Read through both mounts: the same bytes.
			for _, mnt := range []string{ma, mb} {
				data, err := os.ReadFile(filepath.Join(mnt, name))
				if err != nil {
					t.Fatal(err)
				}
				checkAppends(t, data, "AB", n)
			}
		})
	}
}

// TestFUSEAppendFcntl: O_APPEND set with fcntl after the open (a
// descriptor without direct I/O) appends at the island's end too, and
// the kernel's pages of the file show the bytes where they landed.
func TestFUSEAppendFcntl(t *testing.T) {
	_, _, _, ma, mb := twoMounts(t)
	if err := os.WriteFile(filepath.Join(ma, "f"), appendRecord('A', 0), 0o644); err != nil {
		t.Fatal(err)
	}
	fb, err := os.OpenFile(filepath.Join(mb, "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	// B reads the file (its kernel caches the end and the pages).
	if _, err := fb.ReadAt(make([]byte, 100), 0); err != nil {
		t.Fatal(err)
	}
	// A appends behind B's back.
	fa, err := os.OpenFile(filepath.Join(ma, "f"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fa.Write(appendRecord('A', 1)); err != nil {
		t.Fatal(err)
	}
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	flags, err := unix.FcntlInt(fb.Fd(), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(fb.Fd(), unix.F_SETFL, flags|unix.O_APPEND); err != nil {
		t.Fatal(err)
	}
	if _, err := fb.Write(appendRecord('B', 0)); err != nil {
		t.Fatal(err)
	}
	want := append(append(appendRecord('A', 0), appendRecord('A', 1)...), appendRecord('B', 0)...)
	// The pages are dropped after the write's reply: give it a moment.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := make([]byte, 400)
		k, err := fb.ReadAt(got, 0)
		if err == nil || k > 0 {
			got = got[:k]
		}
		if bytes.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B reads %d bytes %q..., want A's two records then B's", len(got), got[:min(len(got), 120)])
		}
		time.Sleep(50 * time.Millisecond)
	}
	data, err := os.ReadFile(filepath.Join(ma, "f"))
	if err != nil || !bytes.Equal(data, want) {
		t.Fatalf("A reads %d bytes (%v), want A's two records then B's", len(data), err)
	}
}
