package fusefs

import (
	"testing"

	"github.com/atoll-fs/atoll/internal/metawire"
)

func TestToldVersionsNeverGoBack(t *testing.T) {
	var tv toldVersions
	file := func(gen uint32, version, size uint64) metawire.Attr {
		return metawire.Attr{Ino: 7, Gen: gen, Mode: metawire.ModeFile | 0o644, Version: version, Size: size, Mtime: int64(version)}
	}
	if got := tv.tell(file(1, 5, 500)); got.Size != 500 {
		t.Fatalf("first: size %d", got.Size)
	}
	// An older version after a newer one: the newer's size and times.
	if got := tv.tell(file(1, 4, 400)); got.Size != 500 || got.Version != 5 || got.Mtime != 5 {
		t.Fatalf("older version answered %+v, want version 5's size and times", got)
	}
	if got := tv.tell(file(1, 6, 300)); got.Size != 300 {
		t.Fatalf("a newer version (a truncation) answered size %d, want 300", got.Size)
	}
	if size, ok := tv.size(7); !ok || size != 300 {
		t.Fatalf("size %d %v, want 300", size, ok)
	}
	// Another generation (the inode number reused): taken as it is.
	if got := tv.tell(file(2, 1, 10)); got.Size != 10 {
		t.Fatalf("new generation answered size %d, want 10", got.Size)
	}
	// Directories are not recorded.
	dir := metawire.Attr{Ino: 8, Mode: metawire.ModeDir | 0o755, Version: 1, Size: 4096}
	tv.tell(dir)
	if _, ok := tv.size(8); ok {
		t.Fatal("a directory was recorded")
	}
	// Bounded.
	for i := range maxTold + 10 {
		tv.tell(metawire.Attr{Ino: uint64(100 + i), Mode: metawire.ModeFile, Version: 1})
	}
	if n := len(tv.mu.m); n > maxTold {
		t.Fatalf("%d records, bound %d", n, maxTold)
	}
}
