package namespace

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Handle is what an NFS file handle carries: the inode id and the inode's
// generation, which changes when an inode id is reused so that handles to
// the old file go stale. It holds no epoch, island or gateway, so a handle
// stays valid across gateways, restarts and rebalancing.
type Handle struct {
	Ino Ino
	Gen uint32
}

// HandleSize is the size of an encoded Handle (NFSv3 allows up to 64).
const HandleSize = 20

const (
	handleMagic0  = 'A'
	handleMagic1  = 'H'
	handleVersion = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// AppendBinary appends the HandleSize-byte form described in the package
// doc.
func (h Handle) AppendBinary(b []byte) []byte {
	start := len(b)
	b = append(b, handleMagic0, handleMagic1, handleVersion, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(h.Ino))
	b = binary.BigEndian.AppendUint32(b, h.Gen)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// DecodeHandle decodes a handle from exactly HandleSize bytes. Anything
// else, a wrong magic, version, flags byte or checksum, or an inode id with
// sequence 0, is ErrBadHandle.
func DecodeHandle(b []byte) (Handle, error) {
	if len(b) != HandleSize {
		return Handle{}, fmt.Errorf("%w: %d bytes (want %d)", ErrBadHandle, len(b), HandleSize)
	}
	if b[0] != handleMagic0 || b[1] != handleMagic1 {
		return Handle{}, fmt.Errorf("%w: magic %#02x%02x", ErrBadHandle, b[0], b[1])
	}
	if b[2] != handleVersion || b[3] != 0 {
		return Handle{}, fmt.Errorf("%w: version %d flags %#x", ErrBadHandle, b[2], b[3])
	}
	if got, want := binary.BigEndian.Uint32(b[16:]), crc32.Checksum(b[:16], castagnoli); got != want {
		return Handle{}, fmt.Errorf("%w: checksum %#08x, computed %#08x", ErrBadHandle, got, want)
	}
	h := Handle{Ino: Ino(binary.BigEndian.Uint64(b[4:])), Gen: binary.BigEndian.Uint32(b[12:])}
	if !h.Ino.Valid() {
		return Handle{}, fmt.Errorf("%w: inode %v", ErrBadHandle, h.Ino)
	}
	return h, nil
}
