package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// crashAt arms failpoint name so that, when hit, it snapshots fs as a crash
// would leave it (synced state plus unsyncedPct% of the rest) and makes the
// operation fail.
func crashAt(fs *vfs.MemFS, name string, unsyncedPct int, seed uint64) (*faults.Set, func() *vfs.MemFS) {
	fp := faults.New()
	var clone *vfs.MemFS
	fp.OnCrash = func(string) {
		clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsyncedPct, RNG: rand.New(rand.NewPCG(seed, seed))})
	}
	fp.Enable(name, faults.Action{Kind: faults.Crash})
	return fp, func() *vfs.MemFS { return clone }
}

func TestCrashPutAfterData(t *testing.T) {
	fs := vfs.NewCrashableMem()
	fp, clone := crashAt(fs, FailPutAfterData, 0, 1)
	s := openStore(t, fs, func(c *Config) { c.Faults = fp })
	acked := fid(1, 1, 0)
	ackedData := bytes.Repeat([]byte("acked"), 20000)
	fp.Disable(FailPutAfterData)
	if err := s.Put(bg, acked, ackedData, nil); err != nil {
		t.Fatal(err)
	}
	fp.Enable(FailPutAfterData, faults.Action{Kind: faults.Crash})
	lost := fid(1, 2, 0)
	if err := s.Put(bg, lost, []byte("never acknowledged"), nil); !errors.Is(err, faults.ErrInjected) {
		t.Fatalf("Put at failpoint = %v", err)
	}
	crashed := clone()
	if crashed == nil {
		t.Fatal("failpoint never fired")
	}
	// The crash image still holds the synced file of the lost put.
	s2 := openStore(t, crashed, nil)
	if rep := s2.Recovery(); rep.OrphansRemoved != 1 || rep.Records != 1 {
		t.Fatalf("Recovery = %+v", rep)
	}
	if _, err := s2.Info(bg, lost); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unacknowledged put visible: %v", err)
	}
	if fileExists(t, crashed, s2.fragPath(lost)) {
		t.Fatal("orphan file not removed")
	}
	if got := readAll(t, s2, acked); !bytes.Equal(got, ackedData) {
		t.Fatal("acknowledged put lost")
	}
	// The same id can be put again.
	if err := s2.Put(bg, lost, []byte("second try"), nil); err != nil {
		t.Fatal(err)
	}
}

// TestCrashAnyInstant crashes each put/append/delete/repair failpoint with
// a random share of unsynced data surviving, and checks that the reopened
// store shows either the old or the new state, and never a corrupt byte.
func TestCrashAnyInstant(t *testing.T) {
	const cs = 4096
	old := bytes.Repeat([]byte{1}, cs+300) // ends in a partial chunk
	add := bytes.Repeat([]byte{2}, 2*cs+5)
	type state struct {
		exists bool
		data   []byte
	}
	cases := []struct {
		point    string
		op       func(s *Store, id fragment.ID) error
		before   state
		after    state
		setupOld bool
	}{
		{FailPutBeforeData, func(s *Store, id fragment.ID) error { return s.Put(bg, id, add, nil) }, state{}, state{true, add}, false},
		{FailPutAfterData, func(s *Store, id fragment.ID) error { return s.Put(bg, id, add, nil) }, state{}, state{true, add}, false},
		{FailPutAfterMeta, func(s *Store, id fragment.ID) error { return s.Put(bg, id, add, nil) }, state{}, state{true, add}, false},
		{FailAppendBeforeData, func(s *Store, id fragment.ID) error { _, err := s.Append(bg, id, add); return err }, state{true, old}, state{true, append(slices.Clone(old), add...)}, true},
		{FailAppendAfterData, func(s *Store, id fragment.ID) error { _, err := s.Append(bg, id, add); return err }, state{true, old}, state{true, append(slices.Clone(old), add...)}, true},
		{FailAppendAfterMeta, func(s *Store, id fragment.ID) error { _, err := s.Append(bg, id, add); return err }, state{true, old}, state{true, append(slices.Clone(old), add...)}, true},
		{FailAppendAfterData, func(s *Store, id fragment.ID) error { _, err := s.Append(bg, id, add); return err }, state{}, state{true, add}, false},
		{FailRepairBeforeRename, func(s *Store, id fragment.ID) error { return s.Repair(bg, id, old) }, state{true, old}, state{true, old}, true},
		{FailDeleteAfterMeta, func(s *Store, id fragment.ID) error { return s.Delete(bg, id) }, state{true, old}, state{}, true},
	}
	for i, tc := range cases {
		for _, pct := range []int{0, 50, 100} {
			t.Run(fmt.Sprintf("%d-%s-%d%%", i, tc.point, pct), func(t *testing.T) {
				fs := vfs.NewCrashableMem()
				fp, clone := crashAt(fs, tc.point, pct, uint64(i*1000+pct))
				fp.Disable(tc.point)
				s := openStore(t, fs, func(c *Config) { c.Faults = fp; c.ChunkSize = cs })
				id := fid(9, 9, 1)
				if tc.setupOld {
					if _, err := s.Append(bg, id, old); err != nil {
						t.Fatal(err)
					}
				}
				fp.Enable(tc.point, faults.Action{Kind: faults.Crash})
				if err := tc.op(s, id); !errors.Is(err, faults.ErrInjected) {
					t.Fatalf("op = %v, want injected crash", err)
				}
				crashed := clone()
				_ = s.Close()

				s2 := openStore(t, crashed, func(c *Config) { c.ChunkSize = cs })
				got := state{}
				if in, err := s2.Info(bg, id); err == nil {
					got.exists = true
					buf := make([]byte, in.Length)
					if _, err := s2.Read(bg, id, 0, buf); err != nil {
						t.Fatalf("Read after crash: %v (recovery %+v)", err, s2.Recovery())
					}
					got.data = buf
				} else if !errors.Is(err, ErrNotFound) {
					t.Fatal(err)
				}
				eq := func(a, b state) bool { return a.exists == b.exists && bytes.Equal(a.data, b.data) }
				if !eq(got, tc.before) && !eq(got, tc.after) {
					t.Fatalf("after crash: exists=%v len=%d; want old or new state", got.exists, len(got.data))
				}
				if bad, err := s2.Verify(bg, id); err != nil && !errors.Is(err, ErrNotFound) || len(bad) > 0 {
					t.Fatalf("Verify after crash = %v, %v", bad, err)
				}
				// The recovered store keeps working.
				if got.exists {
					if n, err := s2.Append(bg, id, []byte("tail")); err != nil || n != int64(len(got.data))+4 {
						t.Fatalf("Append after crash = %d, %v", n, err)
					}
					if data := readAll(t, s2, id); !bytes.Equal(data, append(got.data, "tail"...)) {
						t.Fatal("append after crash reads back wrong")
					}
				} else {
					if fileExists(t, crashed, s2.fragPath(id)) {
						t.Fatal("file of absent fragment survived recovery")
					}
					if err := s2.Put(bg, id, add, nil); err != nil {
						t.Fatalf("Put after crash: %v", err)
					}
				}
			})
		}
	}
}

// TestCrashAppendAfterData is the named scenario: old length and bytes
// survive, the torn tail is cut back, and a later append works.
func TestCrashAppendAfterData(t *testing.T) {
	const cs = 4096
	fs := vfs.NewCrashableMem()
	fp, clone := crashAt(fs, FailAppendAfterData, 0, 7)
	fp.Disable(FailAppendAfterData)
	s := openStore(t, fs, func(c *Config) { c.Faults = fp; c.ChunkSize = cs })
	id := fid(3, 4, 5)
	var want []byte
	for i := range 5 {
		d := bytes.Repeat([]byte{byte(i + 1)}, 1000)
		if _, err := s.Append(bg, id, d); err != nil {
			t.Fatal(err)
		}
		want = append(want, d...)
	}
	fp.Enable(FailAppendAfterData, faults.Action{Kind: faults.Crash})
	if _, err := s.Append(bg, id, bytes.Repeat([]byte{0xEE}, 5000)); !errors.Is(err, faults.ErrInjected) {
		t.Fatalf("Append at failpoint = %v", err)
	}
	crashed := clone()
	_ = s.Close()
	s2 := openStore(t, crashed, func(c *Config) { c.ChunkSize = cs })
	if rep := s2.Recovery(); rep.Truncated != 1 {
		t.Fatalf("Recovery = %+v, want one truncation", rep)
	}
	fi, err := crashed.Stat(s2.fragPath(id))
	if err != nil || fi.Size() != HeaderSize+int64(len(want)) {
		t.Fatalf("file size after recovery = %v, %v", fi, err)
	}
	if got := readAll(t, s2, id); !bytes.Equal(got, want) {
		t.Fatal("old bytes changed")
	}
	more := bytes.Repeat([]byte{9}, 3000)
	if n, err := s2.Append(bg, id, more); err != nil || n != int64(len(want)+len(more)) {
		t.Fatalf("Append after recovery = %d, %v", n, err)
	}
	if got := readAll(t, s2, id); !bytes.Equal(got, append(want, more...)) {
		t.Fatal("append after recovery reads back wrong")
	}
}

func TestOpenCleansUp(t *testing.T) {
	const cs = 4096
	fs := vfs.NewMem()
	s := openStore(t, fs, func(c *Config) { c.ChunkSize = cs })
	keep, gone, short, torn := fid(1, 1, 0), fid(1, 2, 0), fid(1, 3, 0), fid(1, 4, 0)
	data := bytes.Repeat([]byte("x"), 3*cs+10)
	for _, id := range []fragment.ID{keep, gone, short, torn} {
		if err := s.Put(bg, id, data, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	write := func(path string, b []byte) {
		t.Helper()
		f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	orphan := fid(2, 2, 2)
	write(s.fragPath(orphan), []byte("uncommitted put"))
	write(s.fragPath(keep)+".tmp", []byte("interrupted repair"))
	junk := fs.PathJoin(s.fragDirs[0], "not-a-fragment")
	write(junk, []byte("?"))
	// A valid name in the wrong directory is not ours to delete.
	misplaced := fid(3, 3, 3)
	wrongDir := s.fragDirs[(subdirOf(misplaced)+1)%256]
	write(fs.PathJoin(wrongDir, misplaced.String()), []byte("?"))
	if err := fs.Remove(s.fragPath(gone)); err != nil {
		t.Fatal(err)
	}
	// Short: only the first chunk and a bit survive.
	raw := make([]byte, HeaderSize+cs+7)
	f, _ := fs.Open(s.fragPath(short))
	_, _ = f.ReadAt(raw, 0)
	f.Close()
	write(s.fragPath(short), raw)
	// Torn append: garbage beyond the committed length.
	f2, _ := fs.OpenReadWrite(s.fragPath(torn), vfs.WriteCategoryUnspecified)
	_, _ = f2.WriteAt([]byte("garbage past the end"), HeaderSize+int64(len(data)))
	f2.Close()

	s2 := openStore(t, fs, func(c *Config) { c.ChunkSize = cs })
	want := RecoveryReport{Records: 4, OrphansRemoved: 1, TempRemoved: 1, Truncated: 1, Missing: 1, Short: 1, Unknown: 2}
	got := s2.Recovery()
	got.Duration = 0
	if got != want {
		t.Fatalf("Recovery = %+v, want %+v", got, want)
	}
	for path, exists := range map[string]bool{
		s2.fragPath(orphan):        false,
		s2.fragPath(keep) + ".tmp": false,
		junk:                       true,
		fs.PathJoin(wrongDir, misplaced.String()): true,
	} {
		if fileExists(t, fs, path) != exists {
			t.Errorf("%s exists=%v, want %v", path, !exists, exists)
		}
	}
	if fi, _ := fs.Stat(s2.fragPath(torn)); fi.Size() != HeaderSize+int64(len(data)) {
		t.Errorf("torn file size %d", fi.Size())
	}
	if got := readAll(t, s2, torn); !bytes.Equal(got, data) {
		t.Error("torn fragment reads wrong")
	}
	if got := readAll(t, s2, keep); !bytes.Equal(got, data) {
		t.Error("kept fragment reads wrong")
	}
	var ce *CorruptError
	if _, err := s2.Read(bg, gone, 0, make([]byte, 10)); !errors.As(err, &ce) || ce.Range != (CorruptRange{0, int64(len(data))}) {
		t.Errorf("Read of missing file = %v", err)
	}
	if n, err := s2.Read(bg, short, 0, make([]byte, cs)); err != nil || n != cs {
		t.Errorf("Read of surviving chunk of short file = %d, %v", n, err)
	}
	if _, err := s2.Read(bg, short, cs, make([]byte, 10)); !errors.As(err, &ce) || ce.Range != (CorruptRange{cs, cs}) {
		t.Errorf("Read of lost chunk of short file = %v", err)
	}
	if bad, err := s2.Verify(bg, short); err != nil || !slices.Equal(bad, []CorruptRange{{cs, 2*cs + 10}}) {
		t.Errorf("Verify of short file = %v, %v", bad, err)
	}
	var ce2 *CorruptError
	if _, err := s2.Append(bg, gone, []byte("x")); !errors.As(err, &ce2) || ce2.Range != (CorruptRange{0, int64(len(data))}) {
		t.Errorf("Append to missing file = %v", err)
	}
	// Repair restores the missing and the short file.
	for _, id := range []fragment.ID{gone, short} {
		if err := s2.Repair(bg, id, data); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, s2, id); !bytes.Equal(got, data) {
			t.Errorf("%v reads wrong after repair", id)
		}
	}
}

func TestCapacity(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs, func(c *Config) { c.CapacityBytes = 100 << 10 })
	if err := s.Put(bg, fid(1, 1, 0), make([]byte, 60<<10), nil); err != nil {
		t.Fatal(err)
	}
	id := fid(1, 2, 0)
	if err := s.Put(bg, id, make([]byte, 60<<10), nil); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Put over capacity = %v", err)
	}
	if _, err := s.Info(bg, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("record after refused put: %v", err)
	}
	if fileExists(t, fs, s.fragPath(id)) {
		t.Fatal("file after refused put")
	}
	if _, err := s.Append(bg, fid(1, 1, 0), make([]byte, 50<<10)); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Append over capacity = %v", err)
	}
	st := s.Stat()
	if st.CapacityBytes != 100<<10 || st.UsedBytes != 60<<10 || st.FreeBytes != 40<<10 {
		t.Fatalf("Stat = %+v", st)
	}
	if err := s.Put(bg, id, make([]byte, 40<<10), nil); err != nil {
		t.Fatalf("Put that fits exactly: %v", err)
	}
	if err := s.Delete(bg, fid(1, 1, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(bg, id, make([]byte, 50<<10)); err != nil {
		t.Fatalf("Append after delete freed space: %v", err)
	}
}

func TestCapacityFromFilesystem(t *testing.T) {
	fs := vfs.NewMem()
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: diskReserve + 1<<20, TotalBytes: 1 << 30})
	s := openStore(t, fs, nil)
	if err := s.Put(bg, fid(1, 1, 0), make([]byte, 2<<20), nil); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Put beyond free space = %v", err)
	}
	if err := s.Put(bg, fid(1, 1, 0), make([]byte, 1<<20), nil); err != nil {
		t.Fatalf("Put within free space = %v", err)
	}
	if st := s.Stat(); st.FreeBytes != 1<<20 || st.CapacityBytes != 2<<20 {
		t.Fatalf("Stat = %+v", st)
	}
}

func TestENOSPC(t *testing.T) {
	mem := vfs.NewMem()
	var full atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt) && bytes.Contains([]byte(op.Path), []byte("/frags/")) {
			return fmt.Errorf("write %s: %w", op.Path, syscall.ENOSPC)
		}
		return nil
	})
	fs := errorfs.Wrap(mem, inj)
	s := openStore(t, fs, nil)
	existing := fid(1, 1, 0)
	if err := s.Put(bg, existing, []byte("before"), nil); err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	id := fid(1, 2, 0)
	err := s.Put(bg, id, make([]byte, 100000), nil)
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Put on full disk = %v", err)
	}
	if _, err := s.Info(bg, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("record after ENOSPC: %v", err)
	}
	if fileExists(t, mem, s.fragPath(id)) {
		t.Fatal("partial file left after ENOSPC")
	}
	if _, err := s.Append(bg, existing, []byte(" and after")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Append on full disk = %v", err)
	}
	if got := readAll(t, s, existing); string(got) != "before" {
		t.Fatalf("fragment after failed append = %q", got)
	}
	if st := s.Stat(); st.UsedBytes != 6 || st.Fragments != 1 {
		t.Fatalf("Stat = %+v", st)
	}
	full.Store(false)
	if _, err := s.Append(bg, existing, []byte(" and after")); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, existing); string(got) != "before and after" {
		t.Fatalf("fragment = %q", got)
	}
	if err := s.Put(bg, id, []byte("now it fits"), nil); err != nil {
		t.Fatal(err)
	}
}

// TestTornAppendRealDir cuts a torn tail with the OS file's Truncate.
func TestTornAppendRealDir(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, vfs.Default, func(c *Config) { c.Dir = dir })
	id := fid(8, 8, 8)
	data := bytes.Repeat([]byte("0123456789"), 1000)
	if err := s.Put(bg, id, data, nil); err != nil {
		t.Fatal(err)
	}
	path := s.fragPath(id)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 12345)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s2 := openStore(t, vfs.Default, func(c *Config) { c.Dir = dir })
	if rep := s2.Recovery(); rep.Truncated != 1 || rep.Records != 1 || rep.TempRemoved != 0 {
		t.Fatalf("Recovery = %+v", rep)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != HeaderSize+int64(len(data)) {
		t.Fatalf("size after recovery: %v, %v", fi, err)
	}
	if got := readAll(t, s2, id); !bytes.Equal(got, data) {
		t.Fatal("data differs")
	}
}

// TestFreshStoreSurvivesCrash: the directories Open creates (including new
// ancestors of Dir) are synced, so a crash right after Open loses nothing.
func TestFreshStoreSurvivesCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := openStore(t, fs, func(c *Config) { c.Dir = "/data/node1/store" })
	id := fid(1, 1, 1)
	if err := s.Put(bg, id, []byte("durable"), nil); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	s2 := openStore(t, crashed, func(c *Config) { c.Dir = "/data/node1/store" })
	if got := readAll(t, s2, id); string(got) != "durable" {
		t.Fatalf("read %q after crash", got)
	}
}
