package client

import (
	"testing"

	"github.com/atoll-fs/atoll/internal/metawire"
)

// TestInlineCacheBounded: the inline data the cached block maps hold stays
// within inlineCacheMax, and forgetting a map (Invalidate, a newer data
// version) gives its bytes back.
func TestInlineCacheBounded(t *testing.T) {
	f := &FS{}
	f.cache.blocks = map[uint64]*blockMap{}
	f.cache.attrs = map[uint64]cachedAttr{}
	const size = 1 << 20
	n := inlineCacheMax/size + 8
	for ino := 1; ino <= n; ino++ {
		f.cacheInline(metawire.Attr{Ino: uint64(ino), Inline: true, Size: size, Version: 1}, make([]byte, size))
	}
	if f.cache.inlineBytes > inlineCacheMax || len(f.cache.blocks) != inlineCacheMax/size {
		t.Fatalf("%d maps holding %d bytes, want %d maps within %d", len(f.cache.blocks), f.cache.inlineBytes, inlineCacheMax/size, inlineCacheMax)
	}
	f.Invalidate(1)
	f.cacheAttr(metawire.Attr{Ino: 2, Inline: true, Size: size, Version: 2}) // a newer version
	if want := inlineCacheMax - 2*size; f.cache.inlineBytes != want {
		t.Fatalf("%d bytes after two maps were dropped, want %d", f.cache.inlineBytes, want)
	}
	f.cacheInline(metawire.Attr{Ino: uint64(n), Inline: true, Size: size, Version: 1}, make([]byte, size))
	if f.cache.blocks[uint64(n)] == nil {
		t.Fatal("a map was refused with room in the cache")
	}
	// A map of an older version than the one cached is not kept.
	f.cacheInline(metawire.Attr{Ino: uint64(n), Inline: true, Size: 1, Version: 0}, []byte{1})
	if bm := f.cache.blocks[uint64(n)]; bm == nil || bm.version != 1 {
		t.Fatal("an older version replaced the cached map")
	}
}
