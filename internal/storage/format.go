package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/atoll-fs/atoll/internal/fragment"
)

// Sizes and limits of the on-disk format (see the package doc).
const (
	// HeaderSize is the size of the header at the start of every fragment
	// file; logical offset o of a fragment lives at file offset HeaderSize+o.
	HeaderSize = 64
	// DefaultChunkSize is the checksum granularity used when
	// Config.ChunkSize is zero.
	DefaultChunkSize = 64 << 10
	// MinChunkSize and MaxChunkSize bound Config.ChunkSize. The lower bound
	// keeps a metadata record of a MaxFragmentSize fragment at 64 KiB.
	MinChunkSize = 4 << 10
	MaxChunkSize = 64 << 10
	// MaxFragmentSize is the largest fragment the store accepts.
	MaxFragmentSize = 64 << 20

	headerMagic   = "ATOLFRAG"
	headerVersion = 1
	recordVersion = 1
	// recordFixed is the size of the record value before the chunk CRCs.
	recordFixed = 2 + 8 + 4 + 8
	// keyPrefix starts every fragment record key; other prefixes are free
	// for future use and ignored by recovery.
	keyPrefix = 'f'
	keyLen    = 1 + fragment.EncodedLen
	// suspectPrefix marks fragments found corrupt (by a read or the
	// scrubber) until a repair rewrites them or they are deleted: the
	// durable repair queue the cleaner works through.
	suspectPrefix = 's'
)

func suspectKey(id fragment.ID) []byte { return id.AppendBinary([]byte{suspectPrefix}) }

// castagnoli is the CRC32C table; crc32 uses the SSE4.2/ARMv8 instructions
// when handed this table.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// errBadRecord marks an undecodable metadata record. Callers wrap it in
// ErrCorrupt because the record is lost data as far as the client goes.
var errBadRecord = errors.New("storage: malformed fragment record")

// mix hashes an id for the subdirectory and the lock stripe. The subdirectory
// is part of the on-disk format: this function must never change.
func mix(id fragment.ID) uint64 {
	x := id.Log*0x9E3779B97F4A7C15 ^ id.Seq*0xC2B2AE3D27D4EB4F ^ uint64(id.Index)*0x165667B19E3779F9
	x ^= x >> 31
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 29
	return x
}

// subdirOf is the index (0..255) of the frags/XX directory holding id.
func subdirOf(id fragment.ID) int { return int(mix(id) >> 56) }

func appendKey(b []byte, id fragment.ID) []byte {
	return id.AppendBinary(append(b, keyPrefix))
}

func decodeKey(k []byte) (fragment.ID, error) {
	if len(k) != keyLen || k[0] != keyPrefix {
		return fragment.ID{}, fmt.Errorf("%w: key %x", errBadRecord, k)
	}
	return fragment.DecodeID(k[1:])
}

// logPrefix is the key prefix of all records of one log.
func logPrefix(log uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{keyPrefix}, log)
}

// prefixEnd returns the smallest key greater than every key with prefix p,
// or nil if there is none.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// encodeHeader builds the 64-byte fragment file header.
func encodeHeader(h *[HeaderSize]byte, id fragment.ID, chunkSize int64, created int64) {
	*h = [HeaderSize]byte{}
	copy(h[0:8], headerMagic)
	binary.BigEndian.PutUint16(h[8:], headerVersion)
	id.AppendBinary(h[12:12])
	binary.BigEndian.PutUint32(h[30:], uint32(chunkSize))
	binary.BigEndian.PutUint64(h[34:], uint64(created))
	binary.BigEndian.PutUint32(h[60:], checksum(h[:60]))
}

// checkHeader reports why h is not the header the record says it must be,
// or "" if it is.
func checkHeader(h []byte, id fragment.ID, rec *record) string {
	var want [HeaderSize]byte
	encodeHeader(&want, id, rec.chunkSize, rec.created)
	switch {
	case len(h) != HeaderSize:
		return "short header"
	case string(h[0:8]) != headerMagic:
		return "bad header magic"
	case binary.BigEndian.Uint32(h[60:]) != checksum(h[:60]):
		return "header checksum mismatch"
	case string(h) != string(want[:]):
		return "header does not match record"
	}
	return ""
}

// record is a decoded metadata record. crcs aliases the encoded value.
type record struct {
	length    int64
	chunkSize int64
	created   int64
	crcs      []byte // 4 bytes per chunk, big-endian
}

func numChunks(length, chunkSize int64) int64 { return (length + chunkSize - 1) / chunkSize }

func (r *record) nchunks() int64         { return int64(len(r.crcs) / 4) }
func (r *record) crc(c int64) uint32     { return binary.BigEndian.Uint32(r.crcs[4*c:]) }
func (r *record) chunkEnd(c int64) int64 { return min((c+1)*r.chunkSize, r.length) }

func (r *record) info(id fragment.ID) Info {
	in := Info{
		ID:        id,
		Length:    r.length,
		ChunkSize: int(r.chunkSize),
		Created:   time.Unix(0, r.created),
		CRCs:      make([]uint32, r.nchunks()),
	}
	for i := range in.CRCs {
		in.CRCs[i] = r.crc(int64(i))
	}
	return in
}

// decodeRecord parses and checks a record value; the result aliases v.
func decodeRecord(v []byte) (record, error) {
	var r record
	if len(v) < recordFixed+4 {
		return r, fmt.Errorf("%w: %d bytes", errBadRecord, len(v))
	}
	body := v[:len(v)-4]
	if got, want := checksum(body), binary.BigEndian.Uint32(v[len(v)-4:]); got != want {
		return r, fmt.Errorf("%w: checksum %08x, want %08x", errBadRecord, got, want)
	}
	if ver := binary.BigEndian.Uint16(v); ver != recordVersion {
		return r, fmt.Errorf("%w: version %d", errBadRecord, ver)
	}
	length := binary.BigEndian.Uint64(v[2:])
	cs := int64(binary.BigEndian.Uint32(v[10:]))
	r.created = int64(binary.BigEndian.Uint64(v[14:]))
	if length > MaxFragmentSize || cs < 1 || cs > MaxChunkSize {
		return r, fmt.Errorf("%w: length %d chunk size %d", errBadRecord, length, cs)
	}
	r.length, r.chunkSize = int64(length), cs
	r.crcs = body[recordFixed:]
	if int64(len(r.crcs)) != 4*numChunks(r.length, cs) {
		return r, fmt.Errorf("%w: %d checksum bytes for length %d", errBadRecord, len(r.crcs), length)
	}
	return r, nil
}

// appendRecord appends the encoded value of r to b.
func appendRecord(b []byte, r *record) []byte {
	start := len(b)
	b = binary.BigEndian.AppendUint16(b, recordVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(r.length))
	b = binary.BigEndian.AppendUint32(b, uint32(r.chunkSize))
	b = binary.BigEndian.AppendUint64(b, uint64(r.created))
	b = append(b, r.crcs...)
	return binary.BigEndian.AppendUint32(b, checksum(b[start:]))
}

// appendChunkCRCs appends the big-endian CRC32C of each chunkSize chunk of
// data (the last one partial) to b.
func appendChunkCRCs(b, data []byte, chunkSize int64) []byte {
	for len(data) > 0 {
		n := min(int64(len(data)), chunkSize)
		b = binary.BigEndian.AppendUint32(b, checksum(data[:n]))
		data = data[n:]
	}
	return b
}

// crc32Update extends crc, the CRC32C of some prefix, over p.
func crc32Update(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }
