package layout

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/atoll-fs/atoll/internal/fragment"
)

// Pointer locates one block of file data: the stripe, where the block lies
// in the stripe's data, its length and its CRC32C. The checksum lives with
// the pointer (in the parent), not beside the data, so a reader verifies
// what it got against what the writer meant (Loris' parental checksums).
type Pointer struct {
	Kind   Kind
	K, M   uint8
	Stripe fragment.StripeID
	Shard  uint32 // shard size of the stripe
	Offset uint32 // offset of the block in the stripe's data
	Length uint32
	CRC    uint32
	Slots  []uint16 // Slots[i] holds fragment i
	// Token is the block's read token for a key limited to identities
	// (auth.ReadToken over Grant), as an island gave it beside the
	// pointer; not part of the binary form.
	Token []byte
}

// Grant is what a read token for this block lets its holder read.
func (p *Pointer) Grant() fragment.Grant {
	return fragment.Grant{K: p.K, Shard: p.Shard, Offset: p.Offset, Length: p.Length, Slots: p.Slots}
}

// ErrBadPointer is returned for pointers that do not decode or are
// inconsistent.
var ErrBadPointer = errors.New("layout: bad pointer")

// Fragment returns the id of fragment i of the pointer's stripe.
func (p *Pointer) Fragment(i int) fragment.ID { return p.Stripe.Fragment(i) }

// Policy returns the redundancy scheme of the stripe (sizes are defaults).
func (p *Pointer) Policy() Policy {
	return Policy{Kind: p.Kind, K: int(p.K), M: int(p.M), FragmentSize: DefaultFragmentSize, BlockSize: DefaultBlockSize}
}

const pointerFixed = 1 + 1 + 1 + 1 + 8 + 8 + 4 + 4 + 4 + 4

// AppendBinary appends the binary form described in the package doc.
func (p *Pointer) AppendBinary(b []byte) []byte {
	b = append(b, 1, byte(p.Kind), p.K, p.M)
	b = binary.BigEndian.AppendUint64(b, p.Stripe.Log)
	b = binary.BigEndian.AppendUint64(b, p.Stripe.Seq)
	b = binary.BigEndian.AppendUint32(b, p.Shard)
	b = binary.BigEndian.AppendUint32(b, p.Offset)
	b = binary.BigEndian.AppendUint32(b, p.Length)
	b = binary.BigEndian.AppendUint32(b, p.CRC)
	for _, s := range p.Slots {
		b = binary.BigEndian.AppendUint16(b, s)
	}
	return b
}

// DecodePointer decodes one pointer from the front of b and returns the rest.
func DecodePointer(b []byte) (Pointer, []byte, error) {
	var p Pointer
	if len(b) < pointerFixed {
		return p, nil, fmt.Errorf("%w: %d bytes", ErrBadPointer, len(b))
	}
	if b[0] != 1 {
		return p, nil, fmt.Errorf("%w: version %d", ErrBadPointer, b[0])
	}
	p.Kind, p.K, p.M = Kind(b[1]), b[2], b[3]
	p.Stripe.Log = binary.BigEndian.Uint64(b[4:])
	p.Stripe.Seq = binary.BigEndian.Uint64(b[12:])
	p.Shard = binary.BigEndian.Uint32(b[20:])
	p.Offset = binary.BigEndian.Uint32(b[24:])
	p.Length = binary.BigEndian.Uint32(b[28:])
	p.CRC = binary.BigEndian.Uint32(b[32:])
	b = b[pointerFixed:]
	if err := p.checkShape(); err != nil {
		return p, nil, err
	}
	w := int(p.K) + int(p.M)
	if len(b) < 2*w {
		return p, nil, fmt.Errorf("%w: short slot list", ErrBadPointer)
	}
	p.Slots = make([]uint16, w)
	for i := range p.Slots {
		p.Slots[i] = binary.BigEndian.Uint16(b[2*i:])
	}
	return p, b[2*w:], nil
}

func (p *Pointer) checkShape() error {
	switch {
	case p.Kind == None && (p.K != 1 || p.M != 0),
		p.Kind == Mirror && (p.K != 1 || p.M < 1 || int(p.M) >= MaxCopies),
		p.Kind == EC && (p.K < 1 || p.K > MaxK || p.M < 1 || p.M > MaxM),
		p.Kind > EC:
		return fmt.Errorf("%w: kind %d with K=%d M=%d", ErrBadPointer, p.Kind, p.K, p.M)
	}
	// The block must lie inside the stripe's data.
	if uint64(p.Offset)+uint64(p.Length) > uint64(p.K)*uint64(p.Shard) {
		return fmt.Errorf("%w: block [%d,+%d) outside stripe of %dx%d", ErrBadPointer, p.Offset, p.Length, p.K, p.Shard)
	}
	return nil
}
