package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// Peer is who an authenticated connection belongs to.
type Peer struct {
	Name  string
	Caps  Caps
	Scope Scope // what the key may act as (zero: anything its caps allow)
}

// Allow returns nil if p has every capability of need, else ErrForbidden
// naming the operation, what it needs and what the key has.
func (p Peer) Allow(need Caps, op string) error {
	if p.Caps.Has(need) {
		return nil
	}
	return fmt.Errorf("%w: %s needs capability %s; key %q has %s", ErrForbidden, op, need&^p.Caps, p.Name, p.Caps)
}

// String is "name(caps)".
func (p Peer) String() string { return fmt.Sprintf("%s(%s)", p.Name, p.Caps) }

var magic = [5]byte{'A', 't', 'A', 'u', 1}

// magicScoped starts the hello of a scoped key: the scope follows the
// name (u8 length, Scope.String), and is covered by both proofs.
var magicScoped = [5]byte{'A', 't', 'A', 'u', 2}

const nonceSize = 32

// DefaultTimeout bounds a whole handshake.
const DefaultTimeout = 10 * time.Second

func proof(secret [SecretSize]byte, label string, hello, nonceS []byte) []byte {
	m := hmac.New(sha256.New, secret[:])
	m.Write([]byte(label))
	m.Write(hello)
	m.Write(nonceS)
	return m.Sum(nil)
}

// verdictSealed is the second byte of an accepting verdict: the
// connection goes on in sealed records (sealedConn). A server that sends
// anything else is of a version before sealing; the client refuses it
// rather than talk in the clear.
const verdictSealed = 'S'

// helloEncrypt is the bit of the hello's capability byte by which a
// client asks for encrypted records. The hello is covered by both
// proofs, so no one on the path can add or remove it.
const helloEncrypt = 0x80

// helloPlainOK is the bit by which a client says it would take an
// unsealed connection: the data path's clients set it (sealing costs the
// data path a fifth of its CPU, README "Keys"), and a storage server
// that allows it (Verifier.AllowPlain) answers verdictPlain. Like the
// encryption bit it is covered by both proofs; a verdict changed on the
// path makes the two sides disagree and the connection fail, never go
// on unsealed unseen.
const helloPlainOK = 0x40

// verdictPlain accepts a client that said helloPlainOK, unsealed.
const verdictPlain = 'P'

// EnvSealData, set to 1, seals the data path's connections too: a client
// no longer offers helloPlainOK and a storage server no longer allows it.
const EnvSealData = "ATOLL_SEAL_DATA"

// SealData reports whether $ATOLL_SEAL_DATA asks for sealed data
// connections.
func SealData() bool { return os.Getenv(EnvSealData) == "1" }

// Client runs the client side of the handshake on conn with key k. It
// returns, once the server has accepted the key, the connection to use
// from then on (conn in sealed records), or an error saying which side
// failed.
func Client(conn net.Conn, k *Key, timeout time.Duration) (net.Conn, error) {
	return ClientWith(conn, k, timeout, false)
}

// ClientWith is Client for a client that, with plainOK, takes an
// unsealed connection if the server allows it (the data path; never with
// an encrypting key).
func ClientWith(conn net.Conn, k *Key, timeout time.Duration, plainOK bool) (net.Conn, error) {
	if k == nil {
		return nil, fmt.Errorf("%w: a key is required to connect", ErrNoKey)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	hello := make([]byte, 0, 8+len(k.Name)+nonceSize)
	capsByte := byte(k.Caps)
	if k.Encrypt {
		capsByte |= helloEncrypt
	} else if plainOK {
		capsByte |= helloPlainOK
	}
	if k.Scope.IsZero() {
		hello = append(hello, magic[:]...)
		hello = append(hello, capsByte, byte(len(k.Name)))
		hello = append(hello, k.Name...)
	} else {
		sc := k.Scope.String()
		hello = append(hello, magicScoped[:]...)
		hello = append(hello, capsByte, byte(len(k.Name)))
		hello = append(hello, k.Name...)
		hello = append(hello, byte(len(sc)))
		hello = append(hello, sc...)
	}
	nonceC := make([]byte, nonceSize)
	if _, err := rand.Read(nonceC); err != nil {
		return nil, err
	}
	hello = append(hello, nonceC...)
	if _, err := conn.Write(hello); err != nil {
		return nil, fmt.Errorf("auth: sending hello: %w", err)
	}
	var chal [5 + nonceSize + sha256.Size]byte
	if _, err := io.ReadFull(conn, chal[:]); err != nil {
		return nil, fmt.Errorf("%w: the server closed the connection during the handshake (not an atoll server of this version, or it refused us): %v", ErrRefused, err)
	}
	if [5]byte(chal[:5]) != magic {
		return nil, fmt.Errorf("%w: the server's reply is not an atoll handshake", ErrRefused)
	}
	nonceS := chal[5 : 5+nonceSize]
	if !hmac.Equal(chal[5+nonceSize:], proof(k.Secret, "server", hello, nonceS)) {
		return nil, fmt.Errorf("%w: the server and key %q disagree (a key from another cluster, a forged key, or a server that is not a cluster member)", ErrRefused, k.Name)
	}
	if _, err := conn.Write(proof(k.Secret, "client", hello, nonceS)); err != nil {
		return nil, fmt.Errorf("auth: sending proof: %w", err)
	}
	var v [2]byte
	if _, err := io.ReadFull(conn, v[:]); err != nil {
		return nil, fmt.Errorf("%w: no verdict from the server: %v", ErrRefused, err)
	}
	if v[0] == 0 {
		if v[1] == verdictPlain && capsByte&helloPlainOK != 0 {
			return conn, nil
		}
		if v[1] != verdictSealed {
			return nil, fmt.Errorf("%w: the server does not seal its connections (a version before sealing): refusing to go on in the clear", ErrRefused)
		}
		c2s, s2c := sessionKeys(k.Secret, hello, nonceS)
		sc, err := newSealed(conn, c2s, s2c, k.Encrypt)
		if err != nil {
			return nil, err
		}
		return sc, nil
	}
	reason := make([]byte, v[1])
	_, _ = io.ReadFull(conn, reason)
	return nil, fmt.Errorf("%w by the server: %s", ErrRefused, reason)
}

// Verifier checks clients' keys against the cluster key.
type Verifier struct {
	cluster [SecretSize]byte
	self    *Key
	revoked *Revocations
	// AllowPlain lets a client that offers it (helloPlainOK) go on
	// unsealed: set by storage servers unless $ATOLL_SEAL_DATA=1, never
	// with an encrypting cluster key.
	AllowPlain bool
}

// NewVerifier returns a Verifier for the cluster key k.
func NewVerifier(k *Key) (*Verifier, error) {
	if !k.IsCluster() {
		return nil, fmt.Errorf("%w: a server needs the cluster key (capability member), not %q (%s)", ErrBadKey, k.Name, k.Caps)
	}
	return &Verifier{cluster: k.Secret, self: k, revoked: k.Revocations}, nil
}

// Revoked reports whether p's key was revoked since it authenticated
// (servers ask before each request, so a revoked key's connections stop).
func (v *Verifier) Revoked(p Peer) bool { return v != nil && v.revoked.Revoked(p) }

// Key is the cluster key the verifier holds (what a server dials its
// peers with).
func (v *Verifier) Key() *Key { return v.self }

func (v *Verifier) secretFor(name string, caps Caps, scope Scope) [SecretSize]byte {
	if caps.Has(CapMember) {
		return v.cluster
	}
	return derive(v.cluster, name, caps, scope)
}

// Server runs the server side of the handshake on conn and returns the
// authenticated peer and the connection to use from then on (conn in
// sealed records). On failure the connection has been told why (when it
// got that far) and should be closed.
func (v *Verifier) Server(conn net.Conn, timeout time.Duration) (net.Conn, Peer, error) {
	p, keys, encrypt, err := v.server(conn, timeout)
	if err != nil {
		return nil, p, err
	}
	if keys[0] == nil {
		return conn, p, nil // unsealed, as the client offered and v allows
	}
	sc, err := newSealed(conn, keys[1], keys[0], encrypt)
	if err != nil {
		return nil, p, err
	}
	return sc, p, nil
}

// server is Server up to the verdict; keys are the record keys, client
// to server then server to client.
func (v *Verifier) server(conn net.Conn, timeout time.Duration) (_ Peer, keys [2][]byte, encrypt bool, _ error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	var head [7]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return Peer{}, keys, encrypt, fmt.Errorf("%w: no handshake: %v", ErrRefused, err)
	}
	scoped := [5]byte(head[:5]) == magicScoped
	if [5]byte(head[:5]) != magic && !scoped {
		return Peer{}, keys, encrypt, fmt.Errorf("%w: no handshake (the first bytes are not an atoll hello: an unauthenticated or older client)", ErrRefused)
	}
	caps, n := Caps(head[5]&^(helloEncrypt|helloPlainOK)), int(head[6])
	encrypt = head[5]&helloEncrypt != 0
	plain := head[5]&helloPlainOK != 0 && !encrypt && v.AllowPlain && !v.self.Encrypt
	hello := make([]byte, 7+n, 8+n+255+nonceSize)
	copy(hello, head[:])
	if _, err := io.ReadFull(conn, hello[7:]); err != nil {
		return Peer{}, keys, encrypt, fmt.Errorf("%w: short hello: %v", ErrRefused, err)
	}
	p := Peer{Name: string(hello[7 : 7+n]), Caps: caps}
	var scopeText string
	if scoped {
		var l [1]byte
		if _, err := io.ReadFull(conn, l[:]); err != nil {
			return Peer{}, keys, encrypt, fmt.Errorf("%w: short hello: %v", ErrRefused, err)
		}
		sc := make([]byte, l[0])
		if _, err := io.ReadFull(conn, sc); err != nil {
			return Peer{}, keys, encrypt, fmt.Errorf("%w: short hello: %v", ErrRefused, err)
		}
		hello = append(append(hello, l[0]), sc...)
		scopeText = string(sc)
	}
	hello = hello[:len(hello)+nonceSize]
	if _, err := io.ReadFull(conn, hello[len(hello)-nonceSize:]); err != nil {
		return Peer{}, keys, encrypt, fmt.Errorf("%w: short hello: %v", ErrRefused, err)
	}
	refuse := func(reason string) (Peer, [2][]byte, bool, error) {
		if len(reason) > 255 {
			reason = reason[:255]
		}
		_, _ = conn.Write(append([]byte{1, byte(len(reason))}, reason...))
		return p, keys, encrypt, fmt.Errorf("%w: %s", ErrRefused, reason)
	}
	if err := checkName(p.Name); err != nil || caps == 0 || caps&^AllCaps != 0 {
		return refuse("malformed key name or capabilities")
	}
	if scoped {
		// Only the canonical form derives the key's secret; anything
		// else could not have been made by DeriveScoped.
		sc, err := ParseScope(scopeText)
		if err != nil || sc.IsZero() || sc.String() != scopeText || caps.Has(CapAdmin) && sc.Tenant() {
			return refuse("malformed key scope")
		}
		p.Scope = sc
	}
	secret := v.secretFor(p.Name, caps, p.Scope)
	nonceS := make([]byte, nonceSize)
	if _, err := rand.Read(nonceS); err != nil {
		return Peer{}, keys, encrypt, err
	}
	chal := make([]byte, 0, 5+nonceSize+sha256.Size)
	chal = append(chal, magic[:]...)
	chal = append(chal, nonceS...)
	chal = append(chal, proof(secret, "server", hello, nonceS)...)
	if _, err := conn.Write(chal); err != nil {
		return Peer{}, keys, encrypt, fmt.Errorf("auth: sending challenge: %w", err)
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(conn, got); err != nil {
		// A client with a key of another cluster stops here: our proof
		// did not check out on its side.
		return Peer{}, keys, encrypt, fmt.Errorf("%w: %s gave no proof (a key of another cluster?): %v", ErrRefused, p, err)
	}
	if !hmac.Equal(got, proof(secret, "client", hello, nonceS)) {
		return refuse(fmt.Sprintf("wrong key for %s", p))
	}
	if v.self.Encrypt && !encrypt {
		return refuse("this cluster's servers accept encrypted connections only: run the client with --encrypt or " + EnvEncrypt + "=1")
	}
	if v.Revoked(p) {
		return refuse(fmt.Sprintf("key %s generation %d was revoked (atoll key revoke)", p.Name, p.Scope.Gen))
	}
	verdict := byte(verdictSealed)
	if plain {
		verdict = verdictPlain
	}
	if _, err := conn.Write([]byte{0, verdict}); err != nil {
		return Peer{}, keys, encrypt, fmt.Errorf("auth: sending verdict: %w", err)
	}
	if !plain {
		keys[0], keys[1] = sessionKeys(secret, hello, nonceS)
	}
	return p, keys, encrypt, nil
}

// IsRefused reports whether err is a refused handshake.
func IsRefused(err error) bool { return errors.Is(err, ErrRefused) }

// Refusals counts the connections a server refused and logs them, at
// most one line a second: a flood of strangers must not flood the log
// too (the count has them all). The zero value is ready.
type Refusals struct {
	n      atomic.Uint64
	logged atomic.Int64 // when one was last logged, Unix ns
}

// Add counts one refusal of the connection from remote and logs it as msg
// unless log is nil or a line went out less than a second ago.
func (r *Refusals) Add(log *slog.Logger, msg, remote string, why error) {
	n := r.n.Add(1)
	if now := time.Now().UnixNano(); log != nil && now-r.logged.Load() >= int64(time.Second) {
		r.logged.Store(now)
		log.Warn(msg, "remote", remote, "reason", why, "refused_total", n)
	}
}

// Count is how many were refused.
func (r *Refusals) Count() uint64 { return r.n.Load() }
