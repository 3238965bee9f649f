package auth

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
)

// ErrTampered is a sealed record whose tag does not check out: bytes were
// changed, dropped, replayed or injected on the way (or the peer is
// broken). The connection is unusable after it.
var ErrTampered = errors.New("auth: a record failed its integrity check (changed, replayed or injected on the way)")

// maxRecord bounds a sealed record's bytes, so a reader needs at most
// this much buffer and checks a record before any of it is used.
const maxRecord = 64 << 10

const tagSize = 16

// sealLabel starts the derivation of a connection's record keys.
const sealLabel = "atoll-seal-v1"

// sessionKeys derives the two directions' record keys of a connection
// from the key's secret and its handshake (hello and the server's nonce
// are fresh on both sides, so every connection has keys of its own).
func sessionKeys(secret [SecretSize]byte, hello, nonceS []byte) (c2s, s2c []byte) {
	m := hmac.New(sha256.New, secret[:])
	m.Write([]byte(sealLabel))
	m.Write(hello)
	m.Write(nonceS)
	base := m.Sum(nil)
	dir := func(label string) []byte {
		h := hmac.New(sha256.New, base)
		h.Write([]byte(label))
		return h.Sum(nil)[:16]
	}
	return dir("client to server"), dir("server to client")
}

// sealedConn carries a byte stream in records that each carry a GMAC tag
// (AES-128-GCM with no plaintext: the record is authenticated data) under
// a key per direction and a nonce counting records, so a record that is
// changed, dropped, repeated, reordered or injected fails the reader's
// check. Record: u32 length (at most maxRecord) | bytes | tag[16]. The
// length is not covered by the tag by itself; GCM's tag covers the
// authenticated data's length, so a changed length fails the check too.
// With encrypt the record's bytes are encrypted too (AES-128-GCM with
// the length as authenticated data); without, they travel in the clear.
type sealedConn struct {
	net.Conn
	encrypt bool

	w struct {
		sync.Mutex
		aead  cipher.AEAD
		seq   uint64
		hdr   [4]byte
		tag   [tagSize]byte
		nonce [12]byte
		bufs  [3][]byte
		out   []byte // an encrypted record's bytes and tag
	}
	r struct {
		sync.Mutex
		raw  *bufio.Reader // several small records per read syscall
		aead cipher.AEAD
		seq  uint64
		buf  []byte // the record being read: header, bytes, tag
		fill int    // bytes of buf read so far
		need int    // bytes of buf this record needs (4 until its length is known)
		pos  int    // checked bytes not yet returned: buf[pos:end]
		end  int
		err  error // sticky: a failed check ends the connection
		// nonce is the next record's (kept here: one allocation less a record).
		nonce [12]byte
	}
}

func newSealed(c net.Conn, writeKey, readKey []byte, encrypt bool) (*sealedConn, error) {
	wa, err := gcm(writeKey)
	if err != nil {
		return nil, err
	}
	ra, err := gcm(readKey)
	if err != nil {
		return nil, err
	}
	s := &sealedConn{Conn: c, encrypt: encrypt}
	s.w.aead, s.r.aead = wa, ra
	s.r.raw = bufio.NewReaderSize(c, 32<<10)
	s.r.buf = make([]byte, 4, 4+4096+tagSize)
	s.r.need = 4
	return s, nil
}

func gcm(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// nonceOf writes seq into n (its first 4 bytes stay 0) and returns it.
func nonceOf(n *[12]byte, seq uint64) []byte {
	binary.BigEndian.PutUint64(n[4:], seq)
	return n[:]
}

// Write sends p as one or more records.
func (s *sealedConn) Write(p []byte) (int, error) {
	s.w.Lock()
	defer s.w.Unlock()
	done := 0
	for done < len(p) || len(p) == 0 {
		chunk := p[done:min(len(p), done+maxRecord)]
		binary.BigEndian.PutUint32(s.w.hdr[:], uint32(len(chunk)))
		n := nonceOf(&s.w.nonce, s.w.seq)
		bufs := net.Buffers(s.w.bufs[:0])
		if s.encrypt {
			if s.w.out == nil {
				s.w.out = make([]byte, 0, maxRecord+tagSize)
			}
			bufs = append(bufs, s.w.hdr[:], s.w.aead.Seal(s.w.out[:0], n, chunk, s.w.hdr[:]))
		} else {
			bufs = append(bufs, s.w.hdr[:], chunk, s.w.aead.Seal(s.w.tag[:0], n, nil, chunk))
		}
		s.w.seq++
		if _, err := bufs.WriteTo(s.Conn); err != nil {
			return done, err
		}
		done += len(chunk)
		if len(p) == 0 {
			break
		}
	}
	return done, nil
}

// Read returns checked bytes only. A read cut short by a deadline keeps
// the part of the record it got, so the next Read goes on with it.
func (s *sealedConn) Read(p []byte) (int, error) {
	s.r.Lock()
	defer s.r.Unlock()
	for s.r.pos == s.r.end {
		if s.r.err != nil {
			return 0, s.r.err
		}
		if err := s.readRecordLocked(); err != nil {
			return 0, err
		}
	}
	n := copy(p, s.r.buf[s.r.pos:s.r.end])
	s.r.pos += n
	return n, nil
}

// readRecordLocked reads (the rest of) one record and checks it.
func (s *sealedConn) readRecordLocked() error {
	for s.r.fill < s.r.need {
		k, err := s.r.raw.Read(s.r.buf[s.r.fill:s.r.need])
		s.r.fill += k
		if s.r.fill == 4 && s.r.need == 4 {
			n := int(binary.BigEndian.Uint32(s.r.buf[:4]))
			if n > maxRecord {
				s.r.err = fmt.Errorf("%w: a record of %d bytes (at most %d)", ErrTampered, n, maxRecord)
				return s.r.err
			}
			s.r.need = 4 + n + tagSize
			if cap(s.r.buf) < s.r.need {
				grown := make([]byte, s.r.need, 4+maxRecord+tagSize)
				copy(grown, s.r.buf[:4])
				s.r.buf = grown
			}
			s.r.buf = s.r.buf[:s.r.need]
		}
		if err != nil && s.r.fill < s.r.need {
			return err
		}
	}
	n := s.r.need - 4 - tagSize
	var err error
	if s.encrypt {
		// In place: the plaintext takes the ciphertext's first n bytes.
		_, err = s.r.aead.Open(s.r.buf[4:4], nonceOf(&s.r.nonce, s.r.seq), s.r.buf[4:s.r.need], s.r.buf[:4])
	} else {
		_, err = s.r.aead.Open(nil, nonceOf(&s.r.nonce, s.r.seq), s.r.buf[4+n:s.r.need], s.r.buf[4:4+n])
	}
	if err != nil {
		s.r.err = fmt.Errorf("%w (record %d)", ErrTampered, s.r.seq)
		return s.r.err
	}
	s.r.seq++
	s.r.pos, s.r.end = 4, 4+n
	s.r.fill, s.r.need = 0, 4
	return nil
}

// Unwrap is the TCP connection under the records.
func (s *sealedConn) Unwrap() net.Conn { return s.Conn }
