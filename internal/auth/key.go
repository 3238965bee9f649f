package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Errors.
var (
	ErrBadKey    = errors.New("auth: bad key")
	ErrNoKey     = errors.New("auth: no key")
	ErrRefused   = errors.New("auth: refused")
	ErrForbidden = errors.New("auth: not permitted")
)

// Caps is a set of capabilities.
type Caps uint8

// Capabilities (see doc.go).
const (
	CapRead Caps = 1 << iota
	CapWrite
	CapAdmin
	CapMember

	// AllCaps is the cluster key's set.
	AllCaps = CapRead | CapWrite | CapAdmin | CapMember
)

var capNames = []struct {
	c    Caps
	name string
}{{CapRead, "read"}, {CapWrite, "write"}, {CapAdmin, "admin"}, {CapMember, "member"}}

// String is the comma list of the capability names.
func (c Caps) String() string {
	var names []string
	for _, n := range capNames {
		if c&n.c != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// Has reports whether c includes every capability of want.
func (c Caps) Has(want Caps) bool { return c&want == want }

// ParseCaps parses a comma list of capability names; "user" is read,write.
func ParseCaps(s string) (Caps, error) {
	var c Caps
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch f {
		case "user":
			c |= CapRead | CapWrite
			continue
		case "all":
			c |= AllCaps
			continue
		}
		found := false
		for _, n := range capNames {
			if n.name == f {
				c |= n.c
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("%w: unknown capability %q (read, write, admin, member, user, all)", ErrBadKey, f)
		}
	}
	if c == 0 {
		return 0, fmt.Errorf("%w: no capabilities", ErrBadKey)
	}
	return c, nil
}

// SecretSize is the size of every key's secret.
const SecretSize = 32

// ClusterKeyName is the name of the cluster key.
const ClusterKeyName = "cluster"

// Key is a name, its capabilities, its scope and its secret.
type Key struct {
	Name   string
	Caps   Caps
	Scope  Scope
	Secret [SecretSize]byte
	// Revocations, on a cluster key a server verifies with, are the key
	// generations it refuses (set from the cluster map by the process
	// serving; never written to the key file).
	Revocations *Revocations
	// Encrypt asks for encrypted records on every connection made with
	// the key; on the cluster key a server verifies with, it refuses
	// connections that do not (`--encrypt`, $ATOLL_ENCRYPT; never
	// written to the key file).
	Encrypt bool
}

// EnvEncrypt, set to 1, turns Key.Encrypt on for every key a command
// loads (what `--encrypt` does).
const EnvEncrypt = "ATOLL_ENCRYPT"

// NewClusterKey makes a fresh cluster key.
func NewClusterKey() (*Key, error) {
	k := &Key{Name: ClusterKeyName, Caps: AllCaps, Encrypt: os.Getenv(EnvEncrypt) == "1"}
	if _, err := rand.Read(k.Secret[:]); err != nil {
		return nil, err
	}
	return k, nil
}

// IsCluster reports whether k is a cluster key (it holds the cluster
// secret and can verify and derive every other key).
func (k *Key) IsCluster() bool { return k != nil && k.Caps.Has(CapMember) }

// Derive makes the key named name with caps from the cluster key k.
// Member keys are not derived: every member holds the cluster key.
func (k *Key) Derive(name string, caps Caps) (*Key, error) {
	if !k.IsCluster() {
		return nil, fmt.Errorf("%w: only the cluster key derives keys", ErrBadKey)
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	if caps.Has(CapMember) {
		return nil, fmt.Errorf("%w: member keys are the cluster key itself (copy it to the member)", ErrBadKey)
	}
	if caps == 0 {
		return nil, fmt.Errorf("%w: no capabilities", ErrBadKey)
	}
	return &Key{Name: name, Caps: caps, Secret: derive(k.Secret, name, caps, Scope{}), Encrypt: k.Encrypt}, nil
}

// DeriveScoped is Derive for a key limited to scope. Admin keys are the
// operator's: their scope may hold a generation, no identities.
func (k *Key) DeriveScoped(name string, caps Caps, scope Scope) (*Key, error) {
	d, err := k.Derive(name, caps)
	if err != nil || scope.IsZero() {
		return d, err
	}
	if caps.Has(CapAdmin) && scope.Tenant() {
		return nil, fmt.Errorf("%w: an admin key cannot be limited to identities or a subtree", ErrBadKey)
	}
	if scope.Path != "" {
		if scope.Root == 0 {
			return nil, fmt.Errorf("%w: a scope path needs its root inode", ErrBadKey)
		}
		if err := checkScopePath(scope.Path); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadKey, err)
		}
	}
	// The scope must read back as itself: that form is what the secret
	// and the handshake carry.
	if back, err := ParseScope(scope.String()); err != nil || back.String() != scope.String() || len(scope.String()) > 255 {
		return nil, fmt.Errorf("%w: scope %q", ErrBadKey, scope)
	}
	d.Scope = scope
	d.Secret = derive(k.Secret, name, caps, scope)
	return d, nil
}

// derive is a key's secret. A scoped key's derivation covers its scope
// ("atoll-key-v2"), so neither a holder nor a server can take the scope
// off without the cluster key; unscoped keys keep the v1 derivation.
func derive(cluster [SecretSize]byte, name string, caps Caps, scope Scope) [SecretSize]byte {
	m := hmac.New(sha256.New, cluster[:])
	if scope.IsZero() {
		m.Write([]byte("atoll-key-v1\x00"))
	} else {
		m.Write([]byte("atoll-key-v2\x00"))
	}
	m.Write([]byte(name))
	m.Write([]byte{0})
	m.Write([]byte(caps.String()))
	if !scope.IsZero() {
		m.Write([]byte{0})
		m.Write([]byte(scope.String()))
	}
	var out [SecretSize]byte
	copy(out[:], m.Sum(nil))
	return out
}

func checkName(name string) error {
	if len(name) == 0 || len(name) > 64 {
		return fmt.Errorf("%w: name must be 1..64 characters", ErrBadKey)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%w: name %q: only letters, digits, '.', '_' and '-'", ErrBadKey, name)
		}
	}
	return nil
}

// Handle is a secret derived from k for purpose (e.g. tagging NFS file
// handles), the same for every holder of k.
func (k *Key) Handle(purpose string) []byte {
	m := hmac.New(sha256.New, k.Secret[:])
	m.Write([]byte("atoll-purpose-v1\x00"))
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// Marshal is the key file's line (version 2 with the scope for a scoped
// key).
func (k *Key) Marshal() []byte {
	sec := base64.RawURLEncoding.EncodeToString(k.Secret[:])
	if !k.Scope.IsZero() {
		return []byte(fmt.Sprintf("atoll-key 2 %s %s %s %s\n", k.Name, k.Caps, k.Scope, sec))
	}
	return []byte(fmt.Sprintf("atoll-key 1 %s %s %s\n", k.Name, k.Caps, sec))
}

// Parse reads a key file's line. With $ATOLL_ENCRYPT=1 the key asks for
// encrypted connections (Key.Encrypt).
func Parse(b []byte) (*Key, error) {
	f := strings.Fields(string(bytes.TrimSpace(b)))
	var scope Scope
	if len(f) == 6 && f[0] == "atoll-key" && f[1] == "2" {
		s, err := ParseScope(f[4])
		if err != nil {
			return nil, err
		}
		if s.IsZero() {
			return nil, fmt.Errorf("%w: a version 2 key without a scope", ErrBadKey)
		}
		scope = s
		f = append(f[:4], f[5])
		f[1] = "1"
	}
	if len(f) != 5 || f[0] != "atoll-key" {
		return nil, fmt.Errorf("%w: not an atoll key (want \"atoll-key 1 NAME CAPS SECRET\" or \"atoll-key 2 NAME CAPS SCOPE SECRET\")", ErrBadKey)
	}
	if f[1] != "1" {
		return nil, fmt.Errorf("%w: key format version %s (this build reads 1 and 2)", ErrBadKey, f[1])
	}
	if err := checkName(f[2]); err != nil {
		return nil, err
	}
	caps, err := ParseCaps(f[3])
	if err != nil {
		return nil, err
	}
	sec, err := base64.RawURLEncoding.DecodeString(f[4])
	if err != nil || len(sec) != SecretSize {
		return nil, fmt.Errorf("%w: secret is not %d bytes of base64", ErrBadKey, SecretSize)
	}
	if scope.Tenant() && caps.Has(CapAdmin) {
		return nil, fmt.Errorf("%w: an admin key cannot be limited to identities or a subtree", ErrBadKey)
	}
	// Encryption is the process's choice, not the file's.
	k := &Key{Name: f[2], Caps: caps, Scope: scope, Encrypt: os.Getenv(EnvEncrypt) == "1"}
	copy(k.Secret[:], sec)
	return k, nil
}

// Load reads a key file. A file that group or others may read is
// refused: a key is a password.
func Load(path string) (*Key, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoKey, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %v: a key file must be readable by its owner only (chmod 600)", ErrBadKey, path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoKey, err)
	}
	k, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// Save writes k to path with mode 0600 (its directory 0700 if made).
func Save(path string, k *Key) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, k.Marshal(), 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// EnvVar names the environment variable Resolve reads.
const EnvVar = "ATOLL_KEY"

// UserKeyPath is ~/.config/atoll/admin.key of the current user ("" if
// there is no home directory).
func UserKeyPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "atoll", "admin.key")
}

// Resolve finds the key a command uses: the file named by flag, else
// $ATOLL_KEY (a key line or a path), else ~/.config/atoll/admin.key.
func Resolve(flag string) (*Key, error) {
	if flag != "" {
		return Load(flag)
	}
	if v := strings.TrimSpace(os.Getenv(EnvVar)); v != "" {
		if strings.HasPrefix(v, "atoll-key ") {
			k, err := Parse([]byte(v))
			if err != nil {
				return nil, fmt.Errorf("$%s: %w", EnvVar, err)
			}
			return k, nil
		}
		return Load(v)
	}
	if p := UserKeyPath(); p != "" {
		if _, err := os.Stat(p); err == nil {
			return Load(p)
		}
	}
	return nil, fmt.Errorf("%w: this cluster authenticates every connection: pass --key FILE, set $%s, or run `atoll dev` (it writes %s)", ErrNoKey, EnvVar, UserKeyPath())
}
