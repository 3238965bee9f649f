package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed is returned by Dec when a message does not decode.
var ErrMalformed = errors.New("wire: malformed message")

// Enc appends fields to a message. The zero value is ready to use.
type Enc struct{ B []byte }

func (e *Enc) U8(v uint8)   { e.B = append(e.B, v) }
func (e *Enc) U16(v uint16) { e.B = binary.BigEndian.AppendUint16(e.B, v) }
func (e *Enc) U32(v uint32) { e.B = binary.BigEndian.AppendUint32(e.B, v) }
func (e *Enc) U64(v uint64) { e.B = binary.BigEndian.AppendUint64(e.B, v) }
func (e *Enc) I64(v int64)  { e.U64(uint64(v)) }
func (e *Enc) Uvarint(v uint64) {
	e.B = binary.AppendUvarint(e.B, v)
}
func (e *Enc) Bool(v bool) {
	if v {
		e.U8(1)
	} else {
		e.U8(0)
	}
}

// Bytes appends a uvarint length and the bytes.
func (e *Enc) Bytes(b []byte) { e.Uvarint(uint64(len(b))); e.B = append(e.B, b...) }

// String appends a uvarint length and the string.
func (e *Enc) String(s string) { e.Uvarint(uint64(len(s))); e.B = append(e.B, s...) }

// Dec reads fields from a message. The first failure is sticky: later reads
// return zero values and Err reports the failure.
type Dec struct {
	b   []byte
	err error
}

// NewDec returns a decoder over b.
func NewDec(b []byte) *Dec { return &Dec{b: b} }

func (d *Dec) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: short %s", ErrMalformed, what)
	}
	d.b = nil
}

func (d *Dec) take(n int, what string) []byte {
	if d.err != nil || n < 0 || len(d.b) < n {
		d.fail(what)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *Dec) U8() uint8 {
	if b := d.take(1, "u8"); b != nil {
		return b[0]
	}
	return 0
}

func (d *Dec) U16() uint16 {
	if b := d.take(2, "u16"); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (d *Dec) U32() uint32 {
	if b := d.take(4, "u32"); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *Dec) U64() uint64 {
	if b := d.take(8, "u64"); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (d *Dec) I64() int64 { return int64(d.U64()) }

func (d *Dec) Bool() bool {
	switch d.U8() {
	case 0:
		return false
	case 1:
		return true
	}
	if d.err == nil {
		d.err = fmt.Errorf("%w: bad bool", ErrMalformed)
	}
	return false
}

func (d *Dec) Uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Bytes returns a length-prefixed byte string aliasing the message.
func (d *Dec) Bytes() []byte {
	n := d.Uvarint()
	if n > uint64(len(d.b)) {
		d.fail("bytes")
		return nil
	}
	return d.take(int(n), "bytes")
}

func (d *Dec) Str() string { return string(d.Bytes()) }

// Count reads a uvarint element count and checks that at least min bytes
// per element remain, so a hostile count cannot force a huge allocation.
func (d *Dec) Count(minElemSize int) int {
	n := d.Uvarint()
	if minElemSize < 1 {
		minElemSize = 1
	}
	if d.err != nil || n > uint64(len(d.b)/minElemSize) {
		d.fail("count")
		return 0
	}
	return int(n)
}

// More reports whether bytes remain: a field a newer peer appended to a
// message is read only when present, so older senders stay understood.
func (d *Dec) More() bool { return d.err == nil && len(d.b) > 0 }

// Err returns the first decoding failure.
func (d *Dec) Err() error { return d.err }

// Finish returns the first failure, or an error if bytes remain unread.
func (d *Dec) Finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(d.b))
	}
	return d.err
}

// Message is a protocol structure encoded with Enc and decoded with Dec.
// The protocol packages (fragment, cluster, metawire) define theirs.
type Message interface {
	Encode(*Enc)
	Decode(*Dec)
}

// Marshal encodes a message.
func Marshal(m Message) []byte {
	var e Enc
	m.Encode(&e)
	return e.B
}

// Unmarshal decodes a whole message strictly: short or trailing bytes are
// an error wrapping ErrMalformed.
func Unmarshal(b []byte, m Message) error {
	d := NewDec(b)
	m.Decode(d)
	return d.Finish()
}
