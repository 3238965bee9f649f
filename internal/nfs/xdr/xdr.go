// Package xdr is a small, strict XDR (RFC 4506) codec for the NFS gateway.
//
// A Reader decodes from one in-memory record and never allocates more than
// the caller's bounds: variable-length opaques are returned as sub-slices
// of the record (no copy), strings are copied only after their length has
// been checked against a maximum and against the bytes actually left, and
// counts of repeated items are checked the same way before anything is
// allocated. The first error sticks: every later call returns a zero value,
// so a decoder can read a whole structure and check Err once.
//
// Strictness: padding bytes must be zero, booleans must be 0 or 1, and
// Finish fails if bytes are left over.
//
// A Writer appends to a byte slice.
package xdr

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Errors of the decoder. All wrap ErrGarbage.
var (
	ErrGarbage  = errors.New("xdr: malformed data")
	errShort    = fmt.Errorf("%w: truncated", ErrGarbage)
	errTooLong  = fmt.Errorf("%w: length over the limit", ErrGarbage)
	errPadding  = fmt.Errorf("%w: nonzero padding", ErrGarbage)
	errBool     = fmt.Errorf("%w: boolean not 0 or 1", ErrGarbage)
	errTrailing = fmt.Errorf("%w: trailing bytes", ErrGarbage)
)

// Reader decodes XDR from a byte slice.
type Reader struct {
	b   []byte
	off int
	err error
}

// NewReader returns a Reader over b (not copied).
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Reset makes r read b from the start.
func (r *Reader) Reset(b []byte) { *r = Reader{b: b} }

// Err returns the first error.
func (r *Reader) Err() error { return r.err }

// Fail records err (if none yet), for decoders that find a semantic error.
func (r *Reader) Fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Remaining is the number of bytes not yet read.
func (r *Reader) Remaining() int { return len(r.b) - r.off }

// Offset is the number of bytes read so far.
func (r *Reader) Offset() int { return r.off }

// Rest returns the unread bytes (not copied) and consumes them.
func (r *Reader) Rest() []byte {
	if r.err != nil {
		return nil
	}
	b := r.b[r.off:]
	r.off = len(r.b)
	return b
}

// Finish returns the first error, or an error if bytes are left.
func (r *Reader) Finish() error {
	if r.err != nil {
		return r.err
	}
	if r.off != len(r.b) {
		return fmt.Errorf("%w (%d)", errTrailing, len(r.b)-r.off)
	}
	return nil
}

func (r *Reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.err = errShort
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

// Uint32 reads an unsigned int.
func (r *Reader) Uint32() uint32 {
	b := r.take(4)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

// Int32 reads an int.
func (r *Reader) Int32() int32 { return int32(r.Uint32()) }

// Uint64 reads an unsigned hyper.
func (r *Reader) Uint64() uint64 {
	b := r.take(8)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// Bool reads a bool (0 or 1 only).
func (r *Reader) Bool() bool {
	v := r.Uint32()
	if v > 1 {
		r.Fail(errBool)
		return false
	}
	return v == 1
}

// pad consumes the zero padding after n bytes of opaque data.
func (r *Reader) pad(n int) {
	if p := (4 - n%4) % 4; p > 0 {
		for _, c := range r.take(p) {
			if c != 0 {
				r.Fail(errPadding)
				return
			}
		}
	}
}

// Fixed reads fixed-length opaque data of n bytes (not copied).
func (r *Reader) Fixed(n int) []byte {
	b := r.take(n)
	r.pad(n)
	if r.err != nil {
		return nil
	}
	return b
}

// Opaque reads variable-length opaque data of at most max bytes (not
// copied: the slice aliases the record).
func (r *Reader) Opaque(max int) []byte {
	n := r.Uint32()
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(max) {
		r.Fail(errTooLong)
		return nil
	}
	b := r.take(int(n))
	r.pad(int(n))
	if r.err != nil {
		return nil
	}
	return b
}

// String reads a string of at most max bytes (copied).
func (r *Reader) String(max int) string {
	b := r.Opaque(max)
	if r.err != nil {
		return ""
	}
	return string(b)
}

// Count reads the length of an array whose items take at least minSize
// bytes each, checking it against max and against the bytes left so a
// hostile count cannot make the caller allocate.
func (r *Reader) Count(max, minSize int) int {
	n := r.Uint32()
	if r.err != nil {
		return 0
	}
	if uint64(n) > uint64(max) || (minSize > 0 && uint64(n)*uint64(minSize) > uint64(r.Remaining())) {
		r.Fail(errTooLong)
		return 0
	}
	return int(n)
}

// Writer encodes XDR by appending to B.
type Writer struct{ B []byte }

// Uint32 appends an unsigned int.
func (w *Writer) Uint32(v uint32) { w.B = binary.BigEndian.AppendUint32(w.B, v) }

// Int32 appends an int.
func (w *Writer) Int32(v int32) { w.Uint32(uint32(v)) }

// Uint64 appends an unsigned hyper.
func (w *Writer) Uint64(v uint64) { w.B = binary.BigEndian.AppendUint64(w.B, v) }

// Bool appends a bool.
func (w *Writer) Bool(v bool) {
	if v {
		w.Uint32(1)
	} else {
		w.Uint32(0)
	}
}

var zeros [4]byte

// Fixed appends fixed-length opaque data and its padding.
func (w *Writer) Fixed(b []byte) {
	w.B = append(w.B, b...)
	w.B = append(w.B, zeros[:(4-len(b)%4)%4]...)
}

// Opaque appends variable-length opaque data.
func (w *Writer) Opaque(b []byte) {
	w.Uint32(uint32(len(b)))
	w.Fixed(b)
}

// String appends a string.
func (w *Writer) String(s string) {
	w.Uint32(uint32(len(s)))
	w.B = append(w.B, s...)
	w.B = append(w.B, zeros[:(4-len(s)%4)%4]...)
}

// Len is the number of bytes written.
func (w *Writer) Len() int { return len(w.B) }

// Grow extends B by n bytes and returns them (contents unspecified): for
// reading file data straight into a reply.
func (w *Writer) Grow(n int) []byte {
	start := len(w.B)
	if cap(w.B)-start < n {
		nb := make([]byte, start, start+n+max(start, 64))
		copy(nb, w.B)
		w.B = nb
	}
	w.B = w.B[:start+n]
	return w.B[start : start+n]
}

// Truncate drops everything after the first n bytes.
func (w *Writer) Truncate(n int) { w.B = w.B[:n] }

// PutUint32 overwrites the 4 bytes at off.
func (w *Writer) PutUint32(off int, v uint32) { binary.BigEndian.PutUint32(w.B[off:], v) }
