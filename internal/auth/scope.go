package auth

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode"
)

// Scope limits what a key may act as. The zero Scope limits nothing (a
// mount host's key acts for all its users, as an NFS AUTH_SYS client).
//
// A scoped key is bound to its scope: the scope is part of the secret's
// derivation and of the handshake, so a holder cannot widen it.
type Scope struct {
	// UIDs are the user ids requests may assert (empty: any). Root (0)
	// only when listed: otherwise a request as root is squashed to
	// nobody (NobodyID) at the islands.
	UIDs []uint32
	// GIDs are the group ids requests may assert (empty: any):
	// supplementary groups outside them are dropped, a primary group
	// outside them is refused.
	GIDs []uint32
	// Gen is the key's generation: revoking a key name (the map's
	// revocations) refuses every key of that name with a lower one, and
	// the next key made under the name gets the new generation.
	Gen uint32
	// Root confines the key to a subtree: the inode id of its top
	// directory (0: the whole namespace). Islands refuse every request
	// naming an inode outside it, and the key's clients take it as
	// their "/" (cephx's MDS path capability).
	Root uint64
	// Path is the subtree's path when the key was made, for people
	// (listings, logs); Root is what is enforced, so renaming the
	// directory keeps the key's subtree.
	Path string
	// Protocols are the gateways the key may serve (empty: any): of
	// ProtoMount, ProtoNFS, ProtoSMB. Atoll's commands refuse to serve
	// another with it. Servers cannot tell a mount's requests from a
	// gateway's, so this guards against mistakes and reuse of a key
	// where it was not meant to go, not against a holder running
	// modified code: that one is held by the rest of the scope and the
	// key's capabilities.
	Protocols []string
}

// Gateway protocols (Scope.Protocols).
const (
	ProtoMount = "mount"
	ProtoNFS   = "nfs"
	ProtoSMB   = "smb"
)

// Serves reports whether s lets its key serve protocol proto.
func (s Scope) Serves(proto string) bool {
	return len(s.Protocols) == 0 || slices.Contains(s.Protocols, proto)
}

// ServesErr is Serves as an error for a command that serves proto.
func (s Scope) ServesErr(name, proto string) error {
	if s.Serves(proto) {
		return nil
	}
	return fmt.Errorf("%w: key %q may serve only %s, not %s (atoll key new --protocols)", ErrForbidden, name, strings.Join(s.Protocols, ", "), proto)
}

// NobodyID is the uid and gid a squashed root acts as.
const NobodyID = 65534

// maxScopeIDs bounds each list (the handshake carries the scope in at
// most 255 bytes).
const maxScopeIDs = 16

// maxScopePath bounds Path (the whole scope must fit the handshake's 255
// bytes).
const maxScopePath = 160

// IsZero reports whether s limits nothing.
func (s Scope) IsZero() bool {
	return len(s.UIDs) == 0 && len(s.GIDs) == 0 && s.Gen == 0 && s.Root == 0 && s.Path == "" && len(s.Protocols) == 0
}

// LimitsIDs reports whether s limits identities (not only a generation).
func (s Scope) LimitsIDs() bool { return len(s.UIDs) > 0 || len(s.GIDs) > 0 }

// Confined reports whether s limits the key to a subtree.
func (s Scope) Confined() bool { return s.Root != 0 }

// Tenant reports whether s limits what the key reaches (identities or a
// subtree): such a key writes only its own logs, reads others' fragments
// only with an island's read token, and its requests are checked
// against its scope. Admin keys cannot be tenants.
func (s Scope) Tenant() bool { return s.LimitsIDs() || s.Confined() }

// String is the canonical form: "uids=1000,1001;gids=100;gen=2;
// root=N;path=/home/alice" ("" for the zero Scope). It is what
// derivation and the handshake use.
func (s Scope) String() string {
	var parts []string
	list := func(name string, ids []uint32) {
		if len(ids) == 0 {
			return
		}
		f := make([]string, len(ids))
		for i, id := range ids {
			f[i] = strconv.FormatUint(uint64(id), 10)
		}
		parts = append(parts, name+"="+strings.Join(f, ","))
	}
	list("uids", s.UIDs)
	list("gids", s.GIDs)
	if s.Gen > 0 {
		parts = append(parts, "gen="+strconv.FormatUint(uint64(s.Gen), 10))
	}
	if s.Root != 0 {
		parts = append(parts, "root="+strconv.FormatUint(s.Root, 10))
		if s.Path != "" {
			parts = append(parts, "path="+s.Path)
		}
	}
	if len(s.Protocols) > 0 {
		parts = append(parts, "protocols="+strings.Join(s.Protocols, ","))
	}
	return strings.Join(parts, ";")
}

// ParseScope reads Scope.String's form; the lists come out sorted and
// without duplicates, so parsing then printing is canonical.
func ParseScope(str string) (Scope, error) {
	var s Scope
	if str == "" {
		return s, nil
	}
	for _, part := range strings.Split(str, ";") {
		name, val, ok := strings.Cut(part, "=")
		var dst *[]uint32
		switch {
		case ok && name == "gen" && s.Gen == 0:
			n, err := strconv.ParseUint(val, 10, 32)
			if err != nil || n == 0 {
				return Scope{}, fmt.Errorf("%w: scope %q: bad generation", ErrBadKey, str)
			}
			s.Gen = uint32(n)
			continue
		case ok && name == "root" && s.Root == 0:
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil || n == 0 {
				return Scope{}, fmt.Errorf("%w: scope %q: bad root", ErrBadKey, str)
			}
			s.Root = n
			continue
		case ok && name == "path" && s.Root != 0 && s.Path == "":
			if err := checkScopePath(val); err != nil {
				return Scope{}, fmt.Errorf("%w: scope %q: %v", ErrBadKey, str, err)
			}
			s.Path = val
			continue
		case ok && name == "protocols" && s.Protocols == nil:
			ps, err := ParseProtocols(val)
			if err == nil && len(ps) == 0 {
				err = errors.New("no protocols")
			}
			if err != nil {
				return Scope{}, fmt.Errorf("%w: scope %q: %v", ErrBadKey, str, err)
			}
			s.Protocols = ps
			continue
		case ok && name == "uids" && s.UIDs == nil:
			dst = &s.UIDs
		case ok && name == "gids" && s.GIDs == nil:
			dst = &s.GIDs
		default:
			return Scope{}, fmt.Errorf("%w: scope %q: want uids=N,...;gids=N,...;gen=N;root=N;path=P;protocols=mount,nfs,smb", ErrBadKey, str)
		}
		ids, err := parseIDs(val)
		if err != nil {
			return Scope{}, fmt.Errorf("%w: scope %q: %v", ErrBadKey, str, err)
		}
		*dst = ids
	}
	return s, nil
}

// checkScopePath accepts an absolute path that fits the handshake and
// cannot be mistaken for the scope's separators.
func checkScopePath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is not absolute", p)
	case len(p) > maxScopePath:
		return fmt.Errorf("path of %d bytes (at most %d)", len(p), maxScopePath)
	case strings.ContainsFunc(p, func(r rune) bool { return r == ';' || r == 0 || unicode.IsSpace(r) }):
		return fmt.Errorf("path %q holds ';', white space or NUL (a key file is one line of fields)", p)
	}
	return nil
}

// ParseProtocols parses a comma list of gateway protocols into a sorted,
// deduplicated list (nil for "").
func ParseProtocols(val string) ([]string, error) {
	if strings.TrimSpace(val) == "" {
		return nil, nil
	}
	var ps []string
	for _, f := range strings.Split(val, ",") {
		switch p := strings.TrimSpace(f); p {
		case ProtoMount, ProtoNFS, ProtoSMB:
			ps = append(ps, p)
		default:
			return nil, fmt.Errorf("protocol %q: want %s, %s or %s", f, ProtoMount, ProtoNFS, ProtoSMB)
		}
	}
	slices.Sort(ps)
	return slices.Compact(ps), nil
}

// parseIDs parses a comma list of ids into a sorted, deduplicated list.
func parseIDs(val string) ([]uint32, error) {
	var ids []uint32
	for _, f := range strings.Split(val, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("bad id %q", f)
		}
		ids = append(ids, uint32(n))
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) > maxScopeIDs {
		return nil, fmt.Errorf("%d ids (at most %d)", len(ids), maxScopeIDs)
	}
	return ids, nil
}

// ParseIDList parses a comma list of ids as a command line gives them.
func ParseIDList(val string) ([]uint32, error) {
	if strings.TrimSpace(val) == "" {
		return nil, nil
	}
	ids, err := parseIDs(val)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadKey, err)
	}
	return ids, nil
}

// Revocations are the key generations a cluster refuses: a key named N
// whose generation is below Below(N) was revoked. Servers keep them from
// the cluster map (cluster.Map.Revoked); the zero value revokes nothing.
// Safe for concurrent use.
type Revocations struct {
	m atomic.Pointer[map[string]uint32]
}

// Set replaces the revocations: name -> the lowest generation still valid.
func (r *Revocations) Set(below map[string]uint32) { r.m.Store(&below) }

// Revoked reports whether p's key was revoked (member keys never are: a
// member holds the cluster key itself).
func (r *Revocations) Revoked(p Peer) bool {
	if r == nil || p.Caps.Has(CapMember) {
		return false
	}
	m := r.m.Load()
	return m != nil && p.Scope.Gen < (*m)[p.Name]
}

// Below is the lowest valid generation of name (0: never revoked).
func (r *Revocations) Below(name string) uint32 {
	if r == nil {
		return 0
	}
	if m := r.m.Load(); m != nil {
		return (*m)[name]
	}
	return 0
}

// AllowsUID reports whether requests may assert uid.
func (s Scope) AllowsUID(uid uint32) bool {
	return len(s.UIDs) == 0 || slices.Contains(s.UIDs, uid)
}

// AllowsGID reports whether requests may assert gid.
func (s Scope) AllowsGID(gid uint32) bool {
	return len(s.GIDs) == 0 || slices.Contains(s.GIDs, gid)
}
