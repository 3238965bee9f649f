package namespace

import "math/bits"

// H3 matrix generator: row k of the matrix Q is half of output k/2 of
// splitmix64 seeded with H3Seed (low half for even k, high half for odd k).
// Both constants are part of the on-disk format: changing either moves
// every directory to another bucket.
const (
	// H3Seed is the splitmix64 seed of the H3 matrix: "AtollH3!" in ASCII.
	H3Seed uint64 = 0x41746f6c6c483321

	splitmixGamma uint64 = 0x9e3779b97f4a7c15
)

// tablePositions is how many leading key bytes are hashed through
// precomputed per-position tables (tabulation form of H3, 1 KiB each).
// Bytes beyond it use rows computed on the fly; the hash is the same.
const tablePositions = 128

// splitmix64 returns output n (0-based) of splitmix64 seeded with seed.
// The generator is counter based, so any output is computed directly.
func splitmix64(seed, n uint64) uint64 {
	z := seed + (n+1)*splitmixGamma
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// h3Row returns row k of the H3 matrix: the 32-bit value XORed into the
// hash when bit k of the key is 1 (bit k is bit k%8, least significant
// first, of key byte k/8).
func h3Row(k uint64) uint32 {
	return uint32(splitmix64(H3Seed, k>>1) >> (32 * (k & 1)))
}

// h3Tab[i][c] is the XOR of the rows of the bits set in byte value c at
// key position i.
var h3Tab = func() *[tablePositions][256]uint32 {
	t := new([tablePositions][256]uint32)
	for i := range t {
		for c := 1; c < 256; c++ {
			t[i][c] = t[i][c&(c-1)] ^ h3Row(uint64(8*i+bits.TrailingZeros(uint(c))))
		}
	}
	return t
}()

// Bucket returns the 32-bit H3 hash of a clean pathname (see IsClean):
// the XOR of the matrix rows of the 1 bits of the path's bytes. It
// allocates nothing. Bucket does not check p; hashing a path that is not
// clean gives a bucket no directory will ever have.
//
// A directory's bucket is computed once, from its pathname at creation,
// and then lives in its inode id; renaming never rehashes it.
func Bucket(p string) uint32 {
	n := min(len(p), tablePositions)
	t := h3Tab[:n]
	var h0, h1 uint32
	i := 0
	for ; i+1 < n; i += 2 {
		h0 ^= t[i][p[i]]
		h1 ^= t[i+1][p[i+1]]
	}
	if i < n {
		h0 ^= t[i][p[i]]
	}
	h := h0 ^ h1
	for i := tablePositions; i < len(p); i++ {
		h ^= h3Byte(uint64(i), p[i])
	}
	return h
}

// h3Byte returns the contribution of byte c at key position i computed from
// the generator (the slow path for positions past the tables).
func h3Byte(i uint64, c byte) uint32 {
	var h uint32
	for c != 0 {
		j := uint64(bits.TrailingZeros8(c))
		h ^= h3Row(8*i + j)
		c &= c - 1
	}
	return h
}
