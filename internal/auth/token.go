package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// TokenSize is the length of a read token.
const TokenSize = 16

// ReadToken is the read token for grant given to the key named name:
// HMAC-SHA256(cluster key, "atoll-read-v1" 0x00 name 0x00 grant), first
// 16 bytes, where grant is the canonical form of what it lets the key
// read (fragment.Grant: a block's place in one stripe). Islands hand it
// out beside a block pointer to a key limited to identities, after their
// permission checks; storage servers require it from such a key for
// another log's fragments. k must be the cluster key: only members can
// make one. Bound to the name, a token one tenant obtained is worthless
// on another tenant's key.
func (k *Key) ReadToken(name string, grant []byte) []byte {
	m := hmac.New(sha256.New, k.Secret[:])
	m.Write([]byte("atoll-read-v1\x00"))
	m.Write([]byte(name))
	m.Write([]byte{0})
	m.Write(grant)
	return m.Sum(nil)[:TokenSize]
}

// CheckReadToken reports whether token is name's token for grant.
func (k *Key) CheckReadToken(name string, grant, token []byte) bool {
	return len(token) == TokenSize && hmac.Equal(token, k.ReadToken(name, grant))
}

// LogPrefix is the high 32 bits every id a tenant's key makes carries
// (its log ids, lock and lease sessions, request ids; Scope.Tenant):
// SHA-256("atoll-log-v1" 0x00 name), first 4 bytes. Storage servers let
// such a key append to, and read without a token, only logs with its
// prefix, and islands let it name only sessions with it, so one tenant's
// key neither reads nor adds to another's logs, nor touches its locks, by
// guessing their ids. Not secret: names are the administrator's choice,
// and a prefix only routes a key to what is its own.
func LogPrefix(name string) uint32 {
	h := sha256.Sum256([]byte("atoll-log-v1\x00" + name))
	return binary.BigEndian.Uint32(h[:4])
}

// TenantID is low's 32 bits under name's prefix (LogPrefix).
func TenantID(name string, low uint64) uint64 {
	return uint64(LogPrefix(name))<<32 | low&0xffffffff
}

// OwnsID reports whether id carries name's prefix (LogPrefix).
func OwnsID(name string, id uint64) bool { return uint32(id>>32) == LogPrefix(name) }

// WritesOwnLogs reports whether a key of this name and these
// capabilities writes only logs under its own prefix (LogPrefix): every
// derived key but an admin one (a tenant's, a mount host's, a
// gateway's). A put into another log could plant bytes that readers check
// only against CRC32C, which anyone can forge (internal/storage, "Who may
// repair"); the cluster key and admin keys are the cluster's own
// repairers and write anywhere.
func WritesOwnLogs(name string, caps Caps) bool {
	return name != "" && !caps.Has(CapAdmin) && !caps.Has(CapMember)
}

// OwnsLog reports whether log id is one of name's logs (LogPrefix).
func OwnsLog(name string, log uint64) bool { return OwnsID(name, log) }
