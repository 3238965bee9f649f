package smb

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
)

// NTHash is the NT one-way function of a password, what Samba's password
// database keeps for NTLM: MD4 over the password in UTF-16LE. MD4 is
// broken as a hash; NTLM needs it anyway, and the users file that holds
// these (UsersPath) is readable by root only.
func NTHash(password string) [16]byte {
	u := utf16.Encode([]rune(password))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		binary.LittleEndian.PutUint16(b[2*i:], c)
	}
	return md4(b)
}

// md4 is RFC 1320's message digest, written from the RFC: Go's standard
// library has none, and NTLM is its only use here.
func md4(msg []byte) [16]byte {
	n := len(msg)
	padded := append(append([]byte(nil), msg...), 0x80)
	for len(padded)%64 != 56 {
		padded = append(padded, 0)
	}
	padded = binary.LittleEndian.AppendUint64(padded, uint64(n)*8)

	a, b, c, d := uint32(0x67452301), uint32(0xefcdab89), uint32(0x98badcfe), uint32(0x10325476)
	var x [16]uint32
	for off := 0; off < len(padded); off += 64 {
		for i := range x {
			x[i] = binary.LittleEndian.Uint32(padded[off+4*i:])
		}
		aa, bb, cc, dd := a, b, c, d
		// Each round applies its function 16 times, the four state words
		// taking turns as the one updated: a, d, c, b, a, d, ...
		round := func(f func(x, y, z uint32) uint32, add uint32, order [16]int, shifts [4]int) {
			for i := 0; i < 16; i++ {
				k, s := order[i], shifts[i%4]
				switch i % 4 {
				case 0:
					a = bits.RotateLeft32(a+f(b, c, d)+x[k]+add, s)
				case 1:
					d = bits.RotateLeft32(d+f(a, b, c)+x[k]+add, s)
				case 2:
					c = bits.RotateLeft32(c+f(d, a, b)+x[k]+add, s)
				case 3:
					b = bits.RotateLeft32(b+f(c, d, a)+x[k]+add, s)
				}
			}
		}
		round(func(x, y, z uint32) uint32 { return x&y | ^x&z }, 0,
			[16]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, [4]int{3, 7, 11, 19})
		round(func(x, y, z uint32) uint32 { return x&y | x&z | y&z }, 0x5a827999,
			[16]int{0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15}, [4]int{3, 5, 9, 13})
		round(func(x, y, z uint32) uint32 { return x ^ y ^ z }, 0x6ed9eba1,
			[16]int{0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15}, [4]int{3, 9, 11, 15})
		a, b, c, d = a+aa, b+bb, c+cc, d+dd
	}
	var out [16]byte
	binary.LittleEndian.PutUint32(out[0:], a)
	binary.LittleEndian.PutUint32(out[4:], b)
	binary.LittleEndian.PutUint32(out[8:], c)
	binary.LittleEndian.PutUint32(out[12:], d)
	return out
}
