package smb

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// UsersDir and UsersPath: where the cluster keeps its SMB users, in its
// own namespace (a root-owned 0700 directory, a 0600 file), so every
// gateway reads the same users and none keeps them alone.
const (
	UsersDir  = "/.atoll-smb"
	UsersPath = UsersDir + "/users"
)

// ErrBadUsers marks a malformed users file or user.
var ErrBadUsers = errors.New("smb: bad users file")

// User is one SMB user: the name a client logs on with, the Atoll
// identity its files are created and checked as, and its NT hash
// (NTHash), what NTLMv2 proves knowledge of.
type User struct {
	Name     string
	UID, GID uint32
	NTHash   [16]byte
}

// The users file: one line per user, sorted by name,
//
//	atoll-smb-user 1 NAME UID GID NTHASH
//
// NTHASH in lower-case hex. Lines starting with # are comments.
const userMagic = "atoll-smb-user"

// validName: what Samba and the nss_wrapper passwd file the gateway
// writes accept without quoting.
func validName(n string) error {
	if len(n) == 0 || len(n) > 64 {
		return fmt.Errorf("%w: user name %q: 1 to 64 characters", ErrBadUsers, n)
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') || n[0] == '-' {
			return fmt.Errorf("%w: user name %q: only letters, digits, '.', '_' and '-' (not first)", ErrBadUsers, n)
		}
	}
	switch strings.ToLower(n) {
	case "root", "nobody", "nogroup":
		return fmt.Errorf("%w: user name %q is reserved", ErrBadUsers, n)
	}
	return nil
}

// Validate checks a user: a valid name, and not root (uid or gid 0):
// root over SMB would be root over the whole namespace.
func (u User) Validate() error {
	if err := validName(u.Name); err != nil {
		return err
	}
	if u.UID == 0 || u.GID == 0 {
		return fmt.Errorf("%w: user %s: uid and gid must not be 0", ErrBadUsers, u.Name)
	}
	return nil
}

// ParseUsers reads a users file.
func ParseUsers(b []byte) ([]User, error) {
	var out []User
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		f := strings.Fields(t)
		if len(f) != 6 || f[0] != userMagic || f[1] != "1" {
			return nil, fmt.Errorf("%w: line %d", ErrBadUsers, line)
		}
		uid, err1 := strconv.ParseUint(f[3], 10, 32)
		gid, err2 := strconv.ParseUint(f[4], 10, 32)
		h, err3 := hex.DecodeString(f[5])
		if err1 != nil || err2 != nil || err3 != nil || len(h) != 16 {
			return nil, fmt.Errorf("%w: line %d", ErrBadUsers, line)
		}
		u := User{Name: f[2], UID: uint32(uid), GID: uint32(gid)}
		copy(u.NTHash[:], h)
		if err := u.Validate(); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if slices.ContainsFunc(out, func(o User) bool { return strings.EqualFold(o.Name, u.Name) }) {
			return nil, fmt.Errorf("%w: line %d: user %s twice", ErrBadUsers, line, u.Name)
		}
		out = append(out, u)
	}
	return out, sc.Err()
}

// FormatUsers writes a users file (sorted by name).
func FormatUsers(us []User) []byte {
	us = slices.Clone(us)
	slices.SortFunc(us, func(a, b User) int { return strings.Compare(a.Name, b.Name) })
	var b bytes.Buffer
	b.WriteString("# Atoll's SMB users (atoll smb user add); read by every atoll smb gateway.\n")
	for _, u := range us {
		fmt.Fprintf(&b, "%s 1 %s %d %d %x\n", userMagic, u.Name, u.UID, u.GID, u.NTHash)
	}
	return b.Bytes()
}

// SetUser adds u to us or replaces the user of its name (case-blind, as
// SMB names are).
func SetUser(us []User, u User) []User {
	out := slices.DeleteFunc(slices.Clone(us), func(o User) bool { return strings.EqualFold(o.Name, u.Name) })
	return append(out, u)
}

// RemoveUser removes the user named name; ok reports whether it was there.
func RemoveUser(us []User, name string) ([]User, bool) {
	n := len(us)
	out := slices.DeleteFunc(slices.Clone(us), func(o User) bool { return strings.EqualFold(o.Name, name) })
	return out, len(out) != n
}
