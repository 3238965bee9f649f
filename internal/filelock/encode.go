package filelock

import (
	"encoding/binary"
	"fmt"
)

const (
	version  = 1
	lockSize = 8 + 8 + 1 + 1 + 8 + 8 + 4 // session, id, kind, type, start, end, pid
)

// Encode returns the set's bytes (format in the package doc). It is
// stable: equal sets encode equally.
func (s Set) Encode() []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(s)*lockSize)
	b = append(b, version)
	b = binary.AppendUvarint(b, uint64(len(s)))
	for _, l := range s {
		b = binary.BigEndian.AppendUint64(b, l.Owner.Session)
		b = binary.BigEndian.AppendUint64(b, l.Owner.ID)
		b = append(b, byte(l.Kind), byte(l.Type))
		b = binary.BigEndian.AppendUint64(b, l.Start)
		b = binary.BigEndian.AppendUint64(b, l.End)
		b = binary.BigEndian.AppendUint32(b, l.Pid)
	}
	return b
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// Decode parses bytes made by Encode, rejecting anything malformed or
// unsorted/overlapping with an error wrapping ErrCorrupt; it never
// panics, and allocates no more than the input can hold.
func Decode(b []byte) (Set, error) {
	if len(b) == 0 {
		return nil, corrupt("empty")
	}
	if b[0] != version {
		return nil, corrupt("format version %d, want %d", b[0], version)
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 {
		return nil, corrupt("bad count")
	}
	// A longer-than-needed varint would decode to the same set but not
	// re-encode to the same bytes.
	if k != len(binary.AppendUvarint(nil, n)) {
		return nil, corrupt("count %d not minimally encoded", n)
	}
	rest := b[1+k:]
	// Before allocating: a huge count in a short input must not make a
	// huge slice.
	if n > uint64(len(rest)/lockSize) {
		return nil, corrupt("count %d, but %d bytes of locks", n, len(rest))
	}
	if uint64(len(rest)) != n*lockSize {
		return nil, corrupt("%d bytes after %d locks", uint64(len(rest))-n*lockSize, n)
	}
	if n == 0 {
		return nil, nil
	}
	s := make(Set, n)
	for i := range s {
		p := rest[i*lockSize : (i+1)*lockSize]
		l := Lock{
			Owner: Owner{
				Session: binary.BigEndian.Uint64(p[0:]),
				ID:      binary.BigEndian.Uint64(p[8:]),
			},
			Kind:  Kind(p[16]),
			Type:  Type(p[17]),
			Start: binary.BigEndian.Uint64(p[18:]),
			End:   binary.BigEndian.Uint64(p[26:]),
			Pid:   binary.BigEndian.Uint32(p[34:]),
		}
		if err := l.Valid(); err != nil {
			return nil, fmt.Errorf("%w: lock %d: %w", ErrCorrupt, i, err)
		}
		if i > 0 {
			if err := checkOrder(s[i-1], l); err != nil {
				return nil, fmt.Errorf("%w: lock %d: %s", ErrCorrupt, i, err)
			}
		}
		s[i] = l
	}
	return s, nil
}

// checkOrder checks the Set invariants between consecutive locks p and l.
// Within one owner and kind the order is by Start, so comparing
// neighbours suffices.
func checkOrder(p, l Lock) error {
	if compare(p, l) >= 0 {
		return fmt.Errorf("out of order")
	}
	if p.Owner != l.Owner || p.Kind != l.Kind {
		return nil
	}
	if p.End >= l.Start {
		return fmt.Errorf("overlaps the previous lock of its owner")
	}
	if p.Type == l.Type && touches(p, l) {
		return fmt.Errorf("not merged with the previous lock of its owner")
	}
	return nil
}
