package fragment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// TrailerSize is the size of the stripe trailer at the end of every
// fragment written by the client data path.
const TrailerSize = 28

// Trailer describes the stripe a fragment belongs to. Every fragment of a
// stripe ends with the same trailer, so any surviving fragment tells the
// stripe's geometry and data length, which repair and the cleaner need.
//
// Format (big-endian): magic "ATST", u8 version (1), u8 kind, u8 K, u8 M,
// u32 fragment size F, u64 stripe data length L, u32 reserved (0),
// u32 CRC32C of the preceding 24 bytes.
//
// The content of fragment i (the bytes before the trailer) is, for
// erasure-coded stripes, stripe bytes [i*F, min(L,(i+1)*F)) for a data
// fragment (possibly empty) and min(L, F) bytes for a parity fragment; for
// mirrored or unprotected stripes it is all L bytes.
type Trailer struct {
	Kind     uint8
	K, M     uint8
	FragSize uint32
	DataLen  uint64
}

// ErrBadTrailer is returned when a trailer does not decode.
var ErrBadTrailer = errors.New("fragment: bad stripe trailer")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Append appends the encoded trailer to b.
func (t Trailer) Append(b []byte) []byte {
	start := len(b)
	b = append(b, 'A', 'T', 'S', 'T', 1, t.Kind, t.K, t.M)
	b = binary.BigEndian.AppendUint32(b, t.FragSize)
	b = binary.BigEndian.AppendUint64(b, t.DataLen)
	b = binary.BigEndian.AppendUint32(b, 0)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// DecodeTrailer decodes the TrailerSize bytes of b.
func DecodeTrailer(b []byte) (Trailer, error) {
	var t Trailer
	if len(b) != TrailerSize || string(b[:4]) != "ATST" || b[4] != 1 {
		return t, fmt.Errorf("%w: header", ErrBadTrailer)
	}
	if crc32.Checksum(b[:24], castagnoli) != binary.BigEndian.Uint32(b[24:]) {
		return t, fmt.Errorf("%w: checksum", ErrBadTrailer)
	}
	t.Kind, t.K, t.M = b[5], b[6], b[7]
	t.FragSize = binary.BigEndian.Uint32(b[8:])
	t.DataLen = binary.BigEndian.Uint64(b[12:])
	return t, nil
}

// ContentLen is the length of fragment i's content (see Trailer). kindEC
// is the value of layout.EC for the Kind field.
func (t Trailer) ContentLen(i int, kindEC uint8) int64 {
	L, F := int64(t.DataLen), int64(t.FragSize)
	if t.Kind != kindEC {
		return L
	}
	if i >= int(t.K) {
		return min(L, F)
	}
	return max(0, min(F, L-int64(i)*F))
}
