package fragment

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ID names one fragment: the Index-th fragment of stripe Seq of client log Log.
// Stripe sequence numbers grow monotonically within a log, which is what
// lets a restarted client find the newest stripe of its log (Zebra §3.5).
type ID struct {
	Log   uint64 // client log id
	Seq   uint64 // stripe sequence number within the log
	Index uint16 // position of the fragment within the stripe (data first, then parity)
}

// StripeID names a stripe: fragments of one stripe share Log and Seq.
type StripeID struct {
	Log uint64
	Seq uint64
}

// Stripe returns the stripe this fragment belongs to.
func (id ID) Stripe() StripeID { return StripeID{Log: id.Log, Seq: id.Seq} }

// Fragment returns the id of fragment i of the stripe.
func (s StripeID) Fragment(i int) ID { return ID{Log: s.Log, Seq: s.Seq, Index: uint16(i)} }

func (s StripeID) String() string { return fmt.Sprintf("%016x-%016x", s.Log, s.Seq) }

// String renders the id as "LLLLLLLLLLLLLLLL-SSSSSSSSSSSSSSSS-IIII" in hex;
// ParseID reverses it. It is also the fragment's file name on disk.
func (id ID) String() string { return fmt.Sprintf("%016x-%016x-%04x", id.Log, id.Seq, id.Index) }

// ErrBadID is returned by ParseID and DecodeID for malformed ids.
var ErrBadID = errors.New("fragment: malformed id")

// ParseID parses the String form of an id.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 16+1+16+1+4 || s[16] != '-' || s[33] != '-' {
		return id, fmt.Errorf("%w: %q", ErrBadID, s)
	}
	if _, err := fmt.Sscanf(s, "%016x-%016x-%04x", &id.Log, &id.Seq, &id.Index); err != nil {
		return id, fmt.Errorf("%w: %q: %v", ErrBadID, s, err)
	}
	if id.String() != s {
		return id, fmt.Errorf("%w: %q not canonical", ErrBadID, s)
	}
	return id, nil
}

// EncodedLen is the size of the binary form of an ID.
const EncodedLen = 18

// AppendBinary appends the big-endian binary form (log, seq, index), which
// sorts like (Log, Seq, Index) and so serves as a key prefix.
func (id ID) AppendBinary(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, id.Log)
	b = binary.BigEndian.AppendUint64(b, id.Seq)
	return binary.BigEndian.AppendUint16(b, id.Index)
}

// DecodeID decodes the binary form written by AppendBinary.
func DecodeID(b []byte) (ID, error) {
	if len(b) != EncodedLen {
		return ID{}, fmt.Errorf("%w: %d bytes", ErrBadID, len(b))
	}
	return ID{
		Log:   binary.BigEndian.Uint64(b[0:]),
		Seq:   binary.BigEndian.Uint64(b[8:]),
		Index: binary.BigEndian.Uint16(b[16:]),
	}, nil
}
