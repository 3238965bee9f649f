package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// HeaderSize is the size of the fixed frame header.
const HeaderSize = 40

const (
	magic0  = 0xA7
	magic1  = 0x70
	version = 1

	// KindRequest and KindResponse are the two frame kinds.
	KindRequest  = 1
	KindResponse = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrBadFrame is the sentinel for frames that fail validation.
var ErrBadFrame = errors.New("wire: bad frame")

// ErrTooLarge is returned for frames whose lengths exceed the limits.
var ErrTooLarge = errors.New("wire: frame too large")

// Limits bounds what a peer may send.
type Limits struct {
	MaxMsg     uint32 // message bytes; default 1 MiB
	MaxPayload uint32 // payload bytes; default 65 MiB
}

func (l Limits) withDefaults() Limits {
	if l.MaxMsg == 0 {
		l.MaxMsg = 1 << 20
	}
	if l.MaxPayload == 0 {
		l.MaxPayload = 65 << 20
	}
	return l
}

// FlagReqID marks a request whose message starts with a 16-byte request
// id (Request.ReqID). No other flag is defined.
const FlagReqID = 0x0001

// ReqID names a request across retries (an idempotency key): a server
// that applied a request with this id answers a retry without applying
// it again. The zero ReqID is none.
type ReqID [16]byte

// Header is the decoded fixed part of a frame.
type Header struct {
	Kind       uint8
	Op         uint16
	Flags      uint16
	ID         uint64
	Epoch      uint64
	Status     uint32
	MsgLen     uint32
	PayloadLen uint32
}

// PutHeader writes h into b[:HeaderSize] with the checksum over b and msg.
func PutHeader(b []byte, h *Header, msg []byte) {
	_ = b[HeaderSize-1]
	b[0], b[1], b[2], b[3] = magic0, magic1, version, h.Kind
	binary.BigEndian.PutUint16(b[4:], h.Op)
	binary.BigEndian.PutUint16(b[6:], h.Flags)
	binary.BigEndian.PutUint64(b[8:], h.ID)
	binary.BigEndian.PutUint64(b[16:], h.Epoch)
	binary.BigEndian.PutUint32(b[24:], h.Status)
	binary.BigEndian.PutUint32(b[28:], uint32(len(msg)))
	binary.BigEndian.PutUint32(b[32:], h.PayloadLen)
	c := crc32.Update(crc32.Checksum(b[:36], castagnoli), castagnoli, msg)
	binary.BigEndian.PutUint32(b[36:], c)
}

// parseHeader validates the fixed header fields that can be checked before
// the message is read. The checksum is checked by checkSum once msg is in.
func parseHeader(b []byte, lim Limits) (Header, error) {
	var h Header
	if b[0] != magic0 || b[1] != magic1 {
		return h, fmt.Errorf("%w: bad magic %#x%02x", ErrBadFrame, b[0], b[1])
	}
	if b[2] != version {
		return h, fmt.Errorf("%w: unsupported version %d", ErrBadFrame, b[2])
	}
	h.Kind = b[3]
	if h.Kind != KindRequest && h.Kind != KindResponse {
		return h, fmt.Errorf("%w: bad kind %d", ErrBadFrame, h.Kind)
	}
	h.Flags = binary.BigEndian.Uint16(b[6:])
	if h.Flags&^FlagReqID != 0 || (h.Flags != 0 && h.Kind != KindRequest) {
		return h, fmt.Errorf("%w: reserved flags %#x set", ErrBadFrame, h.Flags)
	}
	h.Op = binary.BigEndian.Uint16(b[4:])
	h.ID = binary.BigEndian.Uint64(b[8:])
	h.Epoch = binary.BigEndian.Uint64(b[16:])
	h.Status = binary.BigEndian.Uint32(b[24:])
	h.MsgLen = binary.BigEndian.Uint32(b[28:])
	h.PayloadLen = binary.BigEndian.Uint32(b[32:])
	if h.MsgLen > lim.MaxMsg {
		return h, fmt.Errorf("%w: message %d > %d", ErrTooLarge, h.MsgLen, lim.MaxMsg)
	}
	if h.PayloadLen > lim.MaxPayload {
		return h, fmt.Errorf("%w: payload %d > %d", ErrTooLarge, h.PayloadLen, lim.MaxPayload)
	}
	return h, nil
}

func checkSum(hdr, msg []byte) error {
	want := binary.BigEndian.Uint32(hdr[36:])
	got := crc32.Update(crc32.Checksum(hdr[:36], castagnoli), castagnoli, msg)
	if got != want {
		return fmt.Errorf("%w: header checksum %08x != %08x", ErrBadFrame, got, want)
	}
	return nil
}

// ReadFrameHeader reads and validates a frame's header and message from r.
// hdr must have room for HeaderSize bytes; msgBuf is reused for the message
// when large enough. The payload (h.PayloadLen bytes) is left unread for
// the caller to read into a buffer of its choosing.
func ReadFrameHeader(r io.Reader, hdr []byte, msgBuf []byte, lim Limits) (Header, []byte, error) {
	lim = lim.withDefaults()
	if _, err := io.ReadFull(r, hdr[:HeaderSize]); err != nil {
		return Header{}, nil, err
	}
	h, err := parseHeader(hdr, lim)
	if err != nil {
		return h, nil, err
	}
	var msg []byte
	if int(h.MsgLen) <= cap(msgBuf) {
		msg = msgBuf[:h.MsgLen]
	} else {
		msg = make([]byte, h.MsgLen)
	}
	if _, err := io.ReadFull(r, msg); err != nil {
		return h, nil, noEOF(err)
	}
	if err := checkSum(hdr, msg); err != nil {
		return h, nil, err
	}
	return h, msg, nil
}

// noEOF turns an EOF in the middle of a frame into ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
