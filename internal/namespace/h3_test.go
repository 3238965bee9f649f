package namespace

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

const goldenLong = "/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s/t/u/v/w/x/y/z" +
	"/0123456789/0123456789/0123456789/0123456789/0123456789/0123456789/0123456789/0123456789"

// Golden buckets. These are part of the on-disk format: every existing
// directory's inode id embeds its bucket. If this test fails, the hash
// changed and existing file systems would be misplaced: fix the code, not
// the constants. (Checked against an independent implementation of the
// package doc's definition.)
var goldenBuckets = []struct {
	path   string
	bucket uint32
}{
	{"/", 0x961e849c},
	{"/home", 0x40472215},
	{"/home/alice", 0x2baee4a9},
	{"/usr/local/share/doc", 0x49b426d3},
	{goldenLong, 0x1164d213}, // 140 bytes: past the precomputed tables
}

func TestBucketGolden(t *testing.T) {
	for _, g := range goldenBuckets {
		if got := Bucket(g.path); got != g.bucket {
			t.Errorf("Bucket(%q) = %#08x, want %#08x", g.path, got, g.bucket)
		}
	}
	if RootBucket != 0x961e849c || RootIno != 0x961e849c00000001 {
		t.Errorf("root: bucket %#08x ino %v", RootBucket, RootIno)
	}
}

func TestSplitmix64(t *testing.T) {
	// The published first outputs of splitmix64 seeded with 0.
	for n, want := range []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f} {
		if got := splitmix64(0, uint64(n)); got != want {
			t.Errorf("splitmix64(0, %d) = %#x, want %#x", n, got, want)
		}
	}
}

// refBucket is H3 as the package doc defines it, bit by bit.
func refBucket(p string) uint32 {
	var h uint32
	for i := 0; i < len(p); i++ {
		for j := range 8 {
			if p[i]>>j&1 == 1 {
				h ^= h3Row(uint64(8*i + j))
			}
		}
	}
	return h
}

func TestBucketMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for n := range 600 {
		b := make([]byte, r.IntN(3*tablePositions))
		if n%50 == 0 {
			b = make([]byte, MaxPath)
		}
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if got, want := Bucket(string(b)), refBucket(string(b)); got != want {
			t.Fatalf("length %d: Bucket %#08x, definition %#08x", len(b), got, want)
		}
	}
}

func TestBucketLinear(t *testing.T) {
	// H3 is linear over GF(2) for keys of equal length: documented, and a
	// check that each byte position contributes independently.
	a, b := "/abc/def", "/xyz/uvw"
	x := make([]byte, len(a))
	for i := range x {
		x[i] = a[i] ^ b[i]
	}
	if Bucket(a)^Bucket(b) != Bucket(string(x)) {
		t.Error("H3 is not linear")
	}
	if Bucket("") != 0 {
		t.Error("empty key must hash to 0")
	}
}

func TestBucketNoAlloc(t *testing.T) {
	p := strings.Repeat("/abcdefghi", 20)
	if n := testing.AllocsPerRun(100, func() { Bucket(p) }); n != 0 {
		t.Errorf("Bucket allocates %v times", n)
	}
}

// TestRenameKeepsBucket: placement survives rename because a directory's
// bucket is embedded in its inode id, computed from its pathname once, at
// mkdir, and from then on read from the id, never from the current name.
// A rename moves name entries only; the id (a client's file handle) stays,
// and so do the bucket and island found from it. This package has no
// rename: internal/meta's TestRenameKeepsDirectoryIsland renames a
// directory across islands and checks the same property there.
func TestRenameKeepsBucket(t *testing.T) {
	// The id carries its bucket and sequence unchanged, whatever they are,
	// also through its printed form (what a handle or ls -i gives back).
	r := rand.New(rand.NewPCG(7, 8))
	for range 1000 {
		b, s := r.Uint32(), r.Uint32()|1
		ino := MakeIno(b, s)
		if ino.Bucket() != b || ino.Seq() != s {
			t.Fatalf("MakeIno(%#08x, %d) = %v: bucket %#08x seq %d", b, s, ino, ino.Bucket(), ino.Seq())
		}
		for _, txt := range []string{ino.String(), strconv.FormatUint(uint64(ino), 10)} {
			if back, err := ParseIno(txt); err != nil || back != ino {
				t.Fatalf("ParseIno(%q) = %v, %v; want %v", txt, back, err, ino)
			}
		}
	}

	// mkdir /projects/atoll, then a file in it.
	tab, _ := NewTable([]IslandID{1, 2, 3, 4}, DepthFor(4))
	oldPath, _ := Join("/projects", "atoll")
	dir := MakeIno(Bucket(oldPath), FirstSeq)
	file := MakeIno(dir.Bucket(), FirstSeq+1) // files take their directory's bucket
	home := tab.Lookup(Bucket(oldPath))
	// rename /projects/atoll to a name whose own hash is on another island.
	var newPath string
	for k := 0; newPath == ""; k++ {
		p, _ := Join("/archive", "old-atoll-"+strconv.Itoa(k))
		if tab.Lookup(Bucket(p)) != home {
			newPath = p
		}
	}
	if Bucket(newPath) == Bucket(oldPath) {
		t.Fatal("test needs a new name with another bucket")
	}
	// The handle the client keeps across the rename still names the old
	// bucket, and with it the directory's island and its file's.
	h, err := ParseIno(dir.String())
	if err != nil {
		t.Fatal(err)
	}
	if h.Bucket() != Bucket(oldPath) || h.Bucket() == Bucket(newPath) {
		t.Errorf("renamed directory %v: bucket %#08x, want its creation path's %#08x (new path's is %#08x)",
			h, h.Bucket(), Bucket(oldPath), Bucket(newPath))
	}
	if got := tab.Lookup(h.Bucket()); got != home {
		t.Errorf("renamed directory on island %d, want %d (its new name hashes to island %d)", got, home, tab.Lookup(Bucket(newPath)))
	}
	if got := tab.Lookup(file.Bucket()); got != home {
		t.Errorf("file of the renamed directory on island %d, want %d", got, home)
	}
}

func BenchmarkBucket(b *testing.B) {
	p := "/home/alice/src/github.com/atoll-fs/atoll/internal/namespace" // 60 bytes
	if len(p) != 60 {
		b.Fatal(len(p))
	}
	b.SetBytes(int64(len(p)))
	var h uint32
	for b.Loop() {
		h ^= Bucket(p)
	}
	_ = h
}
