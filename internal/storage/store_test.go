package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

var bg = context.Background()

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// openStore opens a store at /store on fs (a fresh MemFS if nil).
func openStore(t testing.TB, fs vfs.FS, mod func(*Config)) *Store {
	t.Helper()
	if fs == nil {
		fs = vfs.NewMem()
	}
	cfg := Config{Dir: "/store", FS: fs, Logger: quietLogger()}
	if mod != nil {
		mod(&cfg)
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func fid(log, seq uint64, idx uint16) fragment.ID { return fragment.ID{Log: log, Seq: seq, Index: idx} }

func crcsOf(data []byte, cs int) []uint32 {
	var out []uint32
	for len(data) > 0 {
		n := min(len(data), cs)
		out = append(out, checksum(data[:n]))
		data = data[n:]
	}
	return out
}

// readAll reads the whole fragment with one Read.
func readAll(t testing.TB, s *Store, id fragment.ID) []byte {
	t.Helper()
	in, err := s.Info(bg, id)
	if err != nil {
		t.Fatalf("Info(%v): %v", id, err)
	}
	buf := make([]byte, in.Length+10)
	n, err := s.Read(bg, id, 0, buf)
	if err != nil {
		t.Fatalf("Read(%v): %v", id, err)
	}
	if int64(n) != in.Length {
		t.Fatalf("Read(%v) = %d bytes, want %d", id, n, in.Length)
	}
	return buf[:n]
}

func fileExists(t testing.TB, fs vfs.FS, path string) bool {
	t.Helper()
	_, err := fs.Stat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Stat(%s): %v", path, err)
	}
	return err == nil
}

// flipByte inverts one byte of a file through fs.
func flipByte(t testing.TB, fs vfs.FS, path string, off int64) {
	t.Helper()
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"minimal", Config{Dir: "/x"}, true},
		{"no dir", Config{}, false},
		{"chunk min", Config{Dir: "/x", ChunkSize: MinChunkSize}, true},
		{"chunk max", Config{Dir: "/x", ChunkSize: MaxChunkSize}, true},
		{"chunk too small", Config{Dir: "/x", ChunkSize: MinChunkSize - 1}, false},
		{"chunk too big", Config{Dir: "/x", ChunkSize: MaxChunkSize + 1}, false},
		{"negative capacity", Config{Dir: "/x", CapacityBytes: -1}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if _, err := Open(Config{Dir: "/x", FS: vfs.NewMem(), ChunkSize: 7}); err == nil {
		t.Error("Open with bad chunk size succeeded")
	}
}

func TestRecordFormat(t *testing.T) {
	rec := record{length: 3*4096 + 5, chunkSize: 4096, created: 1234567890123, crcs: appendChunkCRCs(nil, make([]byte, 3*4096+5), 4096)}
	v := appendRecord(nil, &rec)
	if len(v) != recordFixed+4*4+4 {
		t.Fatalf("record is %d bytes", len(v))
	}
	got, err := decodeRecord(v)
	if err != nil {
		t.Fatal(err)
	}
	if got.length != rec.length || got.chunkSize != rec.chunkSize || got.created != rec.created || !bytes.Equal(got.crcs, rec.crcs) {
		t.Fatalf("round trip: got %+v, want %+v", got, rec)
	}
	for i := range v {
		w := slices.Clone(v)
		w[i] ^= 0x10
		if _, err := decodeRecord(w); err == nil {
			t.Fatalf("flipped byte %d of record accepted", i)
		}
	}
	if _, err := decodeRecord(v[:len(v)-4]); err == nil {
		t.Fatal("truncated record accepted")
	}
	if _, err := decodeRecord(nil); err == nil {
		t.Fatal("empty record accepted")
	}

	var h [HeaderSize]byte
	id := fid(1, 2, 3)
	encodeHeader(&h, id, rec.chunkSize, rec.created)
	if string(h[:8]) != "ATOLFRAG" {
		t.Fatalf("magic %q", h[:8])
	}
	if why := checkHeader(h[:], id, &rec); why != "" {
		t.Fatalf("good header rejected: %s", why)
	}
	if why := checkHeader(h[:], fid(1, 2, 4), &rec); why == "" {
		t.Fatal("header of another id accepted")
	}
	h[20] ^= 1
	if why := checkHeader(h[:], id, &rec); why == "" {
		t.Fatal("corrupt header accepted")
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ in, want []byte }{
		{[]byte{1, 2}, []byte{1, 3}},
		{[]byte{1, 0xff}, []byte{2}},
		{[]byte{0xff, 0xff}, nil},
	} {
		if got := prefixEnd(tc.in); !bytes.Equal(got, tc.want) {
			t.Errorf("prefixEnd(%x) = %x, want %x", tc.in, got, tc.want)
		}
	}
}

func TestPutReadRoundTrip(t *testing.T) {
	s := openStore(t, nil, nil)
	cs := DefaultChunkSize
	r := rand.New(rand.NewPCG(1, 2))
	for i, size := range []int{0, 1, cs - 1, cs, cs + 1, 3*cs + 17, 5<<20 + 3} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			id := fid(7, uint64(i), 0)
			data := randBytes(r, size)
			if err := s.Put(bg, id, data, crcsOf(data, cs)); err != nil {
				t.Fatalf("Put: %v", err)
			}
			in, err := s.Info(bg, id)
			if err != nil {
				t.Fatal(err)
			}
			if in.Length != int64(size) || in.ChunkSize != cs || !slices.Equal(in.CRCs, crcsOf(data, cs)) || in.ID != id {
				t.Fatalf("Info = %+v", in)
			}
			if got := readAll(t, s, id); !bytes.Equal(got, data) {
				t.Fatal("whole read differs")
			}
			for range 200 {
				off := r.IntN(size + 1)
				n := r.IntN(size-off+2*cs) + 1
				dst := make([]byte, n)
				got, err := s.Read(bg, id, int64(off), dst)
				if err != nil {
					t.Fatalf("Read(%d, %d): %v", off, n, err)
				}
				want := data[off:min(off+n, size)]
				if got != len(want) || !bytes.Equal(dst[:got], want) {
					t.Fatalf("Read(%d, %d) = %d bytes, want %d (equal=%v)", off, n, got, len(want), bytes.Equal(dst[:got], want))
				}
			}
			if n, err := s.Read(bg, id, int64(size), make([]byte, 10)); n != 0 || err != nil {
				t.Fatalf("Read at end = %d, %v", n, err)
			}
			if _, err := s.Read(bg, id, int64(size)+1, make([]byte, 10)); !errors.Is(err, ErrOutOfRange) {
				t.Fatalf("Read past end: %v, want ErrOutOfRange", err)
			}
			if _, err := s.Read(bg, id, -1, make([]byte, 10)); !errors.Is(err, ErrOutOfRange) {
				t.Fatalf("Read at -1: %v, want ErrOutOfRange", err)
			}
		})
	}
	if _, err := s.Read(bg, fid(99, 0, 0), 0, make([]byte, 1)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Read of absent: %v", err)
	}
	if _, err := s.Info(bg, fid(99, 0, 0)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Info of absent: %v", err)
	}
}

func TestPutErrors(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs, func(c *Config) { c.ChunkSize = 4096 })
	r := rand.New(rand.NewPCG(3, 4))
	data := randBytes(r, 10000)
	id := fid(1, 1, 0)

	// Wrong checksums: nothing stored.
	bad := crcsOf(data, 4096)
	bad[1] ^= 1
	for name, crcs := range map[string][]uint32{
		"flipped":          bad,
		"short":            crcsOf(data, 4096)[:2],
		"long":             append(crcsOf(data, 4096), 0),
		"other chunk size": crcsOf(data, 8192),
	} {
		if err := s.Put(bg, id, data, crcs); !errors.Is(err, ErrBadData) {
			t.Fatalf("%s: Put = %v, want ErrBadData", name, err)
		}
		if _, err := s.Info(bg, id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: Info after bad put = %v", name, err)
		}
		if fileExists(t, fs, s.fragPath(id)) {
			t.Fatalf("%s: file left after bad put", name)
		}
	}
	if st := s.Stat(); st.UsedBytes != 0 || st.Fragments != 0 {
		t.Fatalf("Stat after bad puts = %+v", st)
	}

	// A leftover file without a record (crash debris) is replaced.
	leftover, err := fs.Create(s.fragPath(id), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leftover.Write(bytes.Repeat([]byte{0xAA}, 20000)); err != nil {
		t.Fatal(err)
	}
	leftover.Close()
	if err := s.Put(bg, id, data, nil); err != nil {
		t.Fatal(err)
	}
	if fi, err := fs.Stat(s.fragPath(id)); err != nil || fi.Size() != HeaderSize+int64(len(data)) {
		t.Fatalf("file after put over leftover: %v, %v", fi, err)
	}
	if s.ChunkSize() != 4096 {
		t.Fatalf("ChunkSize() = %d", s.ChunkSize())
	}
	other := randBytes(r, 500)
	if err := s.Put(bg, id, other, nil); !errors.Is(err, ErrExists) {
		t.Fatalf("second Put = %v, want ErrExists", err)
	}
	if got := readAll(t, s, id); !bytes.Equal(got, data) {
		t.Fatal("data changed by refused put")
	}
	if err := s.Put(bg, fid(1, 2, 0), make([]byte, MaxFragmentSize+1), nil); !errors.Is(err, ErrBadData) {
		t.Fatalf("oversized Put = %v", err)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := s.Put(ctx, fid(1, 3, 0), data, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with canceled ctx = %v", err)
	}
	if st := s.Stat(); st.UsedBytes != int64(len(data)) || st.Fragments != 1 {
		t.Fatalf("Stat = %+v", st)
	}
}

func TestAppend(t *testing.T) {
	const cs = 4096
	s := openStore(t, nil, func(c *Config) { c.ChunkSize = cs })
	r := rand.New(rand.NewPCG(5, 6))
	id := fid(2, 0, 0)
	var want []byte
	for i := 0; len(want) < 5*cs+123; i++ {
		// Mostly small appends, some crossing several chunks, one empty.
		n := r.IntN(700)
		if i%9 == 0 {
			n = r.IntN(3 * cs)
		}
		d := randBytes(r, n)
		got, err := s.Append(bg, id, d)
		if err != nil {
			t.Fatalf("Append #%d (%d bytes): %v", i, n, err)
		}
		want = append(want, d...)
		if got != int64(len(want)) {
			t.Fatalf("Append #%d returned length %d, want %d", i, got, len(want))
		}
	}
	if got := readAll(t, s, id); !bytes.Equal(got, want) {
		t.Fatal("appended bytes differ")
	}
	in, err := s.Info(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in.CRCs, crcsOf(want, cs)) {
		t.Fatal("incremental CRCs differ from CRCs of the whole")
	}
	if n, err := s.Append(bg, id, nil); err != nil || n != int64(len(want)) {
		t.Fatalf("empty Append = %d, %v", n, err)
	}
	if st := s.Stat(); st.UsedBytes != int64(len(want)) || st.Fragments != 1 {
		t.Fatalf("Stat = %+v", st)
	}
	if _, err := s.Append(bg, id, make([]byte, MaxFragmentSize)); !errors.Is(err, ErrBadData) {
		t.Fatalf("Append past MaxFragmentSize = %v", err)
	}
	// Put then append.
	id2 := fid(2, 1, 0)
	if err := s.Put(bg, id2, want[:100], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(bg, id2, want[100:]); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, id2); !bytes.Equal(got, want) {
		t.Fatal("put+append differs")
	}
}

// TestAppendRefusesCorruptTail: extending a partial chunk whose bytes rotted
// must fail instead of checksumming the rot.
func TestAppendRefusesCorruptTail(t *testing.T) {
	const cs = 4096
	fs := vfs.NewMem()
	var seen []CorruptRange
	s := openStore(t, fs, func(c *Config) {
		c.ChunkSize = cs
		c.OnCorrupt = func(_ fragment.ID, r CorruptRange) { seen = append(seen, r) }
	})
	id := fid(3, 0, 0)
	data := bytes.Repeat([]byte{7}, cs+100)
	if _, err := s.Append(bg, id, data); err != nil {
		t.Fatal(err)
	}
	flipByte(t, fs, s.fragPath(id), HeaderSize+cs+10)
	_, err := s.Append(bg, id, []byte("more"))
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Range != (CorruptRange{cs, 100}) {
		t.Fatalf("Append on corrupt tail = %v, want CorruptError at [%d,+100)", err, cs)
	}
	if in, _ := s.Info(bg, id); in.Length != int64(len(data)) {
		t.Fatalf("length changed to %d", in.Length)
	}
	if !slices.Equal(seen, []CorruptRange{{cs, 100}}) {
		t.Fatalf("OnCorrupt saw %v", seen)
	}
	// After repair the append goes through.
	if err := s.Repair(bg, id, data); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Append(bg, id, []byte("more")); err != nil || n != int64(len(data))+4 {
		t.Fatalf("Append after repair = %d, %v", n, err)
	}
	if got := readAll(t, s, id); !bytes.Equal(got, append(data, "more"...)) {
		t.Fatal("bytes differ after repair + append")
	}
}

func TestCorruptionRealDir(t *testing.T) {
	const cs = 4096
	dir := t.TempDir()
	var mu sync.Mutex
	var seen []CorruptRange
	s := openStore(t, vfs.Default, func(c *Config) {
		c.Dir = dir
		c.ChunkSize = cs
		c.OnCorrupt = func(_ fragment.ID, r CorruptRange) { mu.Lock(); seen = append(seen, r); mu.Unlock() }
	})
	r := rand.New(rand.NewPCG(7, 8))
	id := fid(4, 1, 2)
	data := randBytes(r, 4*cs+100)
	if err := s.Put(bg, id, data, nil); err != nil {
		t.Fatal(err)
	}
	path := s.fragPath(id)
	flip := func(off int64) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		if _, err := f.ReadAt(b[:], off); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x01
		if _, err := f.WriteAt(b[:], off); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	flip(HeaderSize + 2*cs + 5)

	checkReads(t, s, id, data, []readCase{
		{0, int64(len(data)), &CorruptRange{2 * cs, cs}},
		{2*cs + 5, 1, &CorruptRange{2 * cs, cs}},
		{cs + 10, cs, &CorruptRange{2 * cs, cs}},
		{0, 2 * cs, nil},
		{3 * cs, cs + 100, nil},
		{2*cs - 1, 1, nil},
	})
	if got, err := s.Verify(bg, id); err != nil || !slices.Equal(got, []CorruptRange{{2 * cs, cs}}) {
		t.Fatalf("Verify = %v, %v", got, err)
	}
	// A second bad chunk, in the partial tail, far from the first.
	flip(HeaderSize + 4*cs + 99)
	if got, err := s.Verify(bg, id); err != nil || !slices.Equal(got, []CorruptRange{{2 * cs, cs}, {4 * cs, 100}}) {
		t.Fatalf("Verify = %v, %v", got, err)
	}
	var ce *CorruptError
	if _, err := s.Read(bg, id, 0, make([]byte, len(data))); !errors.As(err, &ce) || ce.Range != (CorruptRange{2 * cs, 2*cs + 100}) {
		t.Fatalf("Read over both = %v", err)
	}
	st := s.Stat()
	mu.Lock()
	nseen := len(seen)
	mu.Unlock()
	if st.CorruptDetected == 0 || st.CorruptDetected != int64(nseen) {
		t.Fatalf("CorruptDetected = %d, OnCorrupt calls %d", st.CorruptDetected, nseen)
	}

	wrong := slices.Clone(data)
	wrong[0] ^= 1
	for name, d := range map[string][]byte{"different": wrong, "short": data[:len(data)-1], "long": append(slices.Clone(data), 0)} {
		if err := s.Repair(bg, id, d); !errors.Is(err, ErrRepairMismatch) {
			t.Fatalf("Repair with %s bytes = %v, want ErrRepairMismatch", name, err)
		}
	}
	if err := s.Repair(bg, fid(9, 9, 9), data); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Repair of absent = %v", err)
	}
	if err := s.Repair(bg, id, data); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != HeaderSize+len(data) || !bytes.Equal(raw[HeaderSize:], data) || string(raw[:8]) != "ATOLFRAG" {
		t.Fatalf("repaired file is %d bytes, data equal=%v", len(raw), bytes.Equal(raw[HeaderSize:], data))
	}
	if got := readAll(t, s, id); !bytes.Equal(got, data) {
		t.Fatal("read after repair differs")
	}
	if got, err := s.Verify(bg, id); err != nil || got != nil {
		t.Fatalf("Verify after repair = %v, %v", got, err)
	}
	if st := s.Stat(); st.Repairs != 1 {
		t.Fatalf("Repairs = %d", st.Repairs)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("tmp file left: %v", err)
	}

	// A rotten header makes the whole file suspect; repair fixes it.
	flip(20)
	if got, err := s.Verify(bg, id); err != nil || !slices.Equal(got, []CorruptRange{{0, int64(len(data))}}) {
		t.Fatalf("Verify with bad header = %v, %v", got, err)
	}
	if err := s.Repair(bg, id, data); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Verify(bg, id); err != nil || got != nil {
		t.Fatalf("Verify after header repair = %v, %v", got, err)
	}
}

func TestDelete(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs, nil)
	id := fid(5, 5, 5)
	if err := s.Put(bg, id, []byte("hello"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(bg, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(bg, id, 0, make([]byte, 5)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Read after Delete = %v", err)
	}
	if fileExists(t, fs, s.fragPath(id)) {
		t.Fatal("file left after Delete")
	}
	if err := s.Delete(bg, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete = %v", err)
	}
	if st := s.Stat(); st.UsedBytes != 0 || st.Fragments != 0 {
		t.Fatalf("Stat = %+v", st)
	}
	if err := s.Put(bg, id, []byte("again"), nil); err != nil {
		t.Fatalf("Put after Delete: %v", err)
	}
	if got := readAll(t, s, id); string(got) != "again" {
		t.Fatalf("read %q", got)
	}
}

func TestListNewest(t *testing.T) {
	s := openStore(t, nil, nil)
	ids := []fragment.ID{
		fid(2, 10, 1), fid(1, 3, 0), fid(2, 5, 0), fid(2, 5, 2), fid(3, 1, 0),
		fid(2, 7, 0), fid(2, 5, 1), fid(math.MaxUint64, 9, 0), fid(math.MaxUint64, math.MaxUint64, 3),
		fid(0, 0, 0), fid(2, 300, 0), fid(2, 256, 0),
	}
	for i, id := range ids {
		if err := s.Put(bg, id, bytes.Repeat([]byte{byte(i)}, i), nil); err != nil {
			t.Fatal(err)
		}
	}
	idsOf := func(in []Info) []fragment.ID {
		var out []fragment.ID
		for _, x := range in {
			out = append(out, x.ID)
		}
		return out
	}
	for _, tc := range []struct {
		log, from uint64
		limit     int
		want      []fragment.ID
	}{
		{2, 0, 0, []fragment.ID{fid(2, 5, 0), fid(2, 5, 1), fid(2, 5, 2), fid(2, 7, 0), fid(2, 10, 1), fid(2, 256, 0), fid(2, 300, 0)}},
		{2, 6, 0, []fragment.ID{fid(2, 7, 0), fid(2, 10, 1), fid(2, 256, 0), fid(2, 300, 0)}},
		{2, 5, 2, []fragment.ID{fid(2, 5, 0), fid(2, 5, 1)}},
		{2, 301, 0, nil},
		{1, 0, 0, []fragment.ID{fid(1, 3, 0)}},
		{4, 0, 0, nil},
		{math.MaxUint64, 0, 0, []fragment.ID{fid(math.MaxUint64, 9, 0), fid(math.MaxUint64, math.MaxUint64, 3)}},
		{0, 0, 0, []fragment.ID{fid(0, 0, 0)}},
	} {
		got, err := s.List(bg, tc.log, tc.from, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(idsOf(got), tc.want) {
			t.Errorf("List(%d, %d, %d) = %v, want %v", tc.log, tc.from, tc.limit, idsOf(got), tc.want)
		}
	}
	for _, tc := range []struct {
		log  uint64
		want uint64
		ok   bool
	}{
		{0, 0, true}, {1, 3, true}, {2, 300, true}, {3, 1, true}, {4, 0, false},
		{math.MaxUint64, math.MaxUint64, true}, {math.MaxUint64 - 1, 0, false},
	} {
		seq, ok, err := s.Newest(bg, tc.log)
		if err != nil || seq != tc.want || ok != tc.ok {
			t.Errorf("Newest(%d) = %d, %v, %v; want %d, %v", tc.log, seq, ok, err, tc.want, tc.ok)
		}
	}
	// ListAll pages through everything in id order, including the zero id.
	var all []fragment.ID
	var after *fragment.ID
	for {
		page, err := s.ListAll(bg, after, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		all = append(all, idsOf(page)...)
		after = &page[len(page)-1].ID
	}
	want := slices.Clone(ids)
	slices.SortFunc(want, func(a, b fragment.ID) int {
		return bytes.Compare(a.AppendBinary(nil), b.AppendBinary(nil))
	})
	if !slices.Equal(all, want) {
		t.Fatalf("ListAll = %v, want %v", all, want)
	}
}

func TestClosed(t *testing.T) {
	s := openStore(t, nil, nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(bg, fid(1, 1, 1), nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close = %v", err)
	}
	if _, err := s.Read(bg, fid(1, 1, 1), 0, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close = %v", err)
	}
	if err := s.ScrubOnce(bg, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("ScrubOnce after Close = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs, func(c *Config) { c.ChunkSize = 8192 })
	data := bytes.Repeat([]byte("abc"), 10000)
	if err := s.Put(bg, fid(1, 1, 0), data, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A different configured chunk size applies only to new fragments.
	s2 := openStore(t, fs, nil)
	if got := readAll(t, s2, fid(1, 1, 0)); !bytes.Equal(got, data) {
		t.Fatal("data differs after reopen")
	}
	if in, _ := s2.Info(bg, fid(1, 1, 0)); in.ChunkSize != 8192 {
		t.Fatalf("chunk size %d after reopen", in.ChunkSize)
	}
	if st := s2.Stat(); st.UsedBytes != int64(len(data)) || st.Fragments != 1 {
		t.Fatalf("Stat after reopen = %+v", st)
	}
	if rep := s2.Recovery(); rep.Records != 1 || rep.OrphansRemoved+rep.Missing+rep.Short+rep.Truncated+rep.TempRemoved+rep.Unknown != 0 {
		t.Fatalf("Recovery = %+v", rep)
	}
}

// TestReadVerifiesEveryGroup reads a fragment far larger than readGroup,
// so whole chunks are read and checked group by group: bad chunks in two
// different groups are both found (the error spans from the first to the
// last), a read wholly between them is clean, and one ending just before
// a group boundary with a bad chunk after it is clean too.
func TestReadVerifiesEveryGroup(t *testing.T) {
	const cs = 4096
	dir := t.TempDir()
	s := openStore(t, vfs.Default, func(c *Config) { c.Dir = dir; c.ChunkSize = cs })
	per := int64(readGroup / cs)
	data := randBytes(rand.New(rand.NewPCG(9, 9)), int(3*per*cs+123))
	id := fid(5, 1, 0)
	if err := s.Put(bg, id, data, nil); err != nil {
		t.Fatal(err)
	}
	badA, badB := per+3, 2*per+1 // in the second and third groups
	f, err := os.OpenFile(s.fragPath(id), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []int64{badA, badB} {
		if _, err := f.WriteAt([]byte{data[c*cs+7] ^ 0x80}, HeaderSize+c*cs+7); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	checkReads(t, s, id, data, []readCase{
		{0, int64(len(data)), &CorruptRange{badA * cs, (badB - badA + 1) * cs}},
		{1, int64(len(data)) - 2, &CorruptRange{badA * cs, (badB - badA + 1) * cs}},
		{(badA + 1) * cs, (badB - badA - 1) * cs, nil},
		{0, badA * cs, nil},
		{(badB + 1) * cs, int64(len(data)) - (badB+1)*cs, nil},
		{badB*cs - 10, 20, &CorruptRange{badB * cs, cs}},
	})
}

// readCase is a read of n bytes at off of a fragment, with the corrupt
// range it must report (nil: the read is clean).
type readCase struct {
	off, n int64
	bad    *CorruptRange
}

// checkReads reads each case from fragment id, whose bytes are data: a
// clean read returns them; a corrupt one fails with a CorruptError naming
// id and the range (in its text too) and leaves dst all zeros.
func checkReads(t *testing.T, s *Store, id fragment.ID, data []byte, cases []readCase) {
	t.Helper()
	for _, tc := range cases {
		dst := make([]byte, tc.n)
		n, err := s.Read(bg, id, tc.off, dst)
		if tc.bad == nil {
			if err != nil || !bytes.Equal(dst[:n], data[tc.off:tc.off+tc.n]) {
				t.Errorf("Read(%d,%d) = %d, %v; want clean bytes", tc.off, tc.n, n, err)
			}
			continue
		}
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Range != *tc.bad || ce.ID != id ||
			!strings.Contains(err.Error(), id.String()) || !strings.Contains(err.Error(), tc.bad.String()) {
			t.Errorf("Read(%d,%d) = %v, want CorruptError %v", tc.off, tc.n, err, *tc.bad)
		}
		if n != 0 || !bytes.Equal(dst, make([]byte, tc.n)) {
			t.Errorf("Read(%d,%d) leaked %d bytes", tc.off, tc.n, n)
		}
	}
}
