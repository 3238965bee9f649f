package client

import (
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/atoll-fs/atoll/internal/layout"
)

// TestFragmentCRCsMatchChunkCRCs checks that taking chunk checksums from
// block checksums gives exactly the chunk checksums of the bytes, for
// aligned chunk-sized blocks, unaligned ones, short stripes, and trailers
// that complete or spill over a partial last chunk.
func TestFragmentCRCsMatchChunkCRCs(t *testing.T) {
	const F = 4 * chunkSize
	rng := rand.New(rand.NewPCG(1, 2))
	layouts := map[string][]int{ // block lengths appended in order
		"aligned":      {chunkSize, chunkSize, chunkSize, chunkSize, chunkSize, chunkSize, chunkSize, chunkSize},
		"short tail":   {chunkSize, chunkSize, chunkSize, 100},
		"unaligned":    {4096, chunkSize, chunkSize, chunkSize, chunkSize, chunkSize - 4096},
		"small blocks": {512, 512, 1000, 3000, chunkSize, 7},
		"one byte":     {1},
		"empty":        {},
		"fragment end": {F - 10, 10, chunkSize},
	}
	trailers := [][]byte{nil, []byte("trailer"), make([]byte, 3*chunkSize/2)}
	for name, lens := range layouts {
		var data []byte
		var sums []blockSum
		for _, n := range lens {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			sums = append(sums, blockSum{off: len(data), n: n, crc: crc32.Checksum(b, castagnoli)})
			data = append(data, b...)
		}
		for i := 0; i*F < max(len(data), 1); i++ {
			base := min(i*F, len(data))
			content := data[base:min(base+F, len(data))]
			for _, tr := range trailers {
				want := chunkCRCsV(content, tr)
				got := fragmentCRCs(content, base, sums, tr)
				if !slices.Equal(got, want) {
					t.Errorf("%s: fragment %d, trailer %d bytes: got %x, want %x", name, i, len(tr), got, want)
				}
			}
		}
	}
}

// TestFragmentCRCsUseBlockSums checks that a chunk exactly covered by a
// block takes the block's checksum rather than reading the bytes: a wrong
// block checksum shows through (the storage server would refuse the put,
// so the shortcut must only be taken for exact matches).
func TestFragmentCRCsUseBlockSums(t *testing.T) {
	data := make([]byte, 2*chunkSize)
	sums := []blockSum{{off: 0, n: chunkSize, crc: 0xdead}, {off: chunkSize, n: chunkSize - 1, crc: 0xbeef}}
	got := fragmentCRCs(data, 0, sums, nil)
	want := []uint32{0xdead, crc32.Checksum(data[chunkSize:], castagnoli)}
	if !slices.Equal(got, want) {
		t.Fatalf("got %x, want %x", got, want)
	}
}

// TestCheckInSpan checks the early block verification of readRun: only
// blocks wholly inside the span that match their checksums are marked;
// blocks crossing the span's edges, outside it, or corrupt are left for
// the full check.
func TestCheckInSpan(t *testing.T) {
	lens := []int{1000, 3000, 2000, 500, 4000} // back to back in out
	var out []byte
	var ptrs []layout.Pointer
	for i, n := range lens {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*7 + j)
		}
		ptrs = append(ptrs, layout.Pointer{Length: uint32(n), CRC: crc32.Checksum(b, castagnoli)})
		out = append(out, b...)
	}
	out[4000+100] ^= 1 // block 2 (bytes 4000..6000) is corrupt
	for _, tc := range []struct {
		dst, n int
		want   []bool
	}{
		{0, len(out), []bool{true, true, false, true, true}},
		{0, 4000, []bool{true, true, false, false, false}},
		{500, 6000, []bool{false, true, false, true, false}}, // 500..6500
		{6000, 500, []bool{false, false, false, true, false}},
		{6100, 4400, []bool{false, false, false, false, true}},
		{9000, 1500, []bool{false, false, false, false, false}},
	} {
		got := make([]bool, len(ptrs))
		checkInSpan(ptrs, out, layout.Span{Dst: tc.dst, Len: tc.n}, got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("span [%d,%d): verified %v, want %v", tc.dst, tc.dst+tc.n, got, tc.want)
		}
	}
}
