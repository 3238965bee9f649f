package cluster

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"slices"
	"time"

	"github.com/atoll-fs/atoll/internal/wire"
)

const (
	mapMagic   uint32 = 0x41544D50 // "ATMP"
	mapVersion uint8  = 1

	maxAddrLen   = 256
	MaxPolicyLen = 256
	MaxRaftIDLen = 128
	maxOwnerLen  = 64 // a key name (auth)
)

// gatewayOwners counts the gateways a key other than the cluster key
// registered.
func (m *Map) gatewayOwners() int {
	n := 0
	for _, g := range m.Gateways {
		if g.Owner != "" {
			n++
		}
	}
	return n
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeMap returns the binary form of m (see the package doc), ending
// with a CRC32C of everything before it.
func EncodeMap(m *Map) []byte {
	var e wire.Enc
	e.U32(mapMagic)
	e.U8(mapVersion)
	e.U64(m.Epoch)
	e.Bool(m.Formatted)
	e.Bool(m.PolicyPinned)
	e.String(m.DefaultPolicy)
	e.Uvarint(uint64(len(m.Storage)))
	for _, s := range m.Storage {
		e.U16(s.Slot)
		e.String(s.Addr)
		e.U8(uint8(s.State))
		e.I64(int64(s.PID))
		e.I64(timeNanos(s.LastHeartbeat))
		e.U64(s.CapacityBytes)
		e.U64(s.UsedBytes)
		e.U64(s.Degraded)
	}
	e.Uvarint(uint64(len(m.Islands)))
	for _, s := range m.Islands {
		e.U32(s.ID)
		e.String(s.Addr)
		e.U8(uint8(s.State))
		e.I64(int64(s.PID))
		e.I64(timeNanos(s.LastHeartbeat))
	}
	e.Uvarint(uint64(len(m.Gateways)))
	for _, s := range m.Gateways {
		e.U32(s.ID)
		e.String(s.Addr)
		e.U8(uint8(s.State))
		e.I64(int64(s.PID))
		e.I64(timeNanos(s.LastHeartbeat))
	}
	e.Uvarint(uint64(len(m.Managers)))
	for _, n := range m.Managers {
		e.String(n.RaftID)
		e.String(n.RaftAddr)
		e.String(n.ClientAddr)
	}
	encodeTable(&e, m.Table)
	// Optional tails, in this order: older readers never saw moves, a
	// placement, gateway owners or revocations. A tail is written when it
	// or any later one has something.
	owners := m.gatewayOwners()
	tails := []bool{len(m.Moves) > 0, len(m.IslandServers) > 0 || len(m.Replicas) > 0, owners > 0, len(m.Revoked) > 0}
	need := func(i int) bool { return slices.Contains(tails[i:], true) }
	if need(0) {
		encodeMoves(&e, m.Moves)
	}
	if need(1) {
		encodeServers(&e, m.IslandServers)
		encodeSets(&e, m.Replicas)
	}
	if need(2) {
		e.Uvarint(uint64(owners))
		for _, g := range m.Gateways {
			if g.Owner != "" {
				e.U32(g.ID)
				e.String(g.Owner)
			}
		}
	}
	if need(3) {
		e.Uvarint(uint64(len(m.Revoked)))
		for _, r := range m.Revoked {
			e.String(r.Name)
			e.U32(r.Below)
		}
	}
	e.U32(crc32.Checksum(e.B, castagnoli))
	return e.B
}

// DecodeMap parses and validates a map produced by EncodeMap. Any damage
// (checksum, version, lengths, unsorted or duplicate members, a table
// naming an unknown island) is an error wrapping ErrBadRequest.
func DecodeMap(b []byte) (*Map, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: cluster map: %d bytes", ErrBadRequest, len(b))
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: cluster map: checksum mismatch", ErrBadRequest)
	}
	d := wire.NewDec(body)
	if mg := d.U32(); d.Err() == nil && mg != mapMagic {
		return nil, fmt.Errorf("%w: cluster map: bad magic %#x", ErrBadRequest, mg)
	}
	if v := d.U8(); d.Err() == nil && v != mapVersion {
		return nil, fmt.Errorf("%w: cluster map: unsupported version %d", ErrBadRequest, v)
	}
	m := &Map{}
	m.Epoch = d.U64()
	m.Formatted = d.Bool()
	m.PolicyPinned = d.Bool()
	m.DefaultPolicy = d.Str()
	if n := d.Count(44); n > 0 {
		m.Storage = make([]Storage, n)
		for i := range m.Storage {
			s := &m.Storage[i]
			s.Slot = d.U16()
			s.Addr = d.Str()
			s.State = State(d.U8())
			s.PID = int(d.I64())
			s.LastHeartbeat = nanosTime(d.I64())
			s.CapacityBytes = d.U64()
			s.UsedBytes = d.U64()
			s.Degraded = d.U64()
		}
	}
	if n := d.Count(22); n > 0 {
		m.Islands = make([]Island, n)
		for i := range m.Islands {
			s := &m.Islands[i]
			s.ID = d.U32()
			s.Addr = d.Str()
			s.State = State(d.U8())
			s.PID = int(d.I64())
			s.LastHeartbeat = nanosTime(d.I64())
		}
	}
	if n := d.Count(22); n > 0 {
		m.Gateways = make([]Gateway, n)
		for i := range m.Gateways {
			s := &m.Gateways[i]
			s.ID = d.U32()
			s.Addr = d.Str()
			s.State = State(d.U8())
			s.PID = int(d.I64())
			s.LastHeartbeat = nanosTime(d.I64())
		}
	}
	if n := d.Count(3); n > 0 {
		m.Managers = make([]ManagerNode, n)
		for i := range m.Managers {
			m.Managers[i] = ManagerNode{RaftID: d.Str(), RaftAddr: d.Str(), ClientAddr: d.Str()}
		}
	}
	m.Table = decodeTable(d)
	if d.More() {
		m.Moves = decodeMoves(d)
	}
	if d.More() {
		m.IslandServers = decodeServers(d)
		m.Replicas = decodeSets(d)
	}
	if d.More() {
		for range d.Count(5) {
			id, owner := d.U32(), d.Str()
			i, ok := m.gatewayIndex(id)
			if !ok || owner == "" || len(owner) > maxOwnerLen || m.Gateways[i].Owner != "" {
				return nil, fmt.Errorf("%w: cluster map: bad owner of gateway %d", ErrBadRequest, id)
			}
			m.Gateways[i].Owner = owner
		}
	}
	if d.More() {
		if n := d.Count(5); n > 0 {
			m.Revoked = make([]RevokedKey, n)
			for i := range m.Revoked {
				m.Revoked[i] = RevokedKey{Name: d.Str(), Below: d.U32()}
			}
		}
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("%w: cluster map: %v", ErrBadRequest, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// Validate checks the map's invariants: valid states, members sorted by id
// without duplicates, bounded addresses, a well-formed table whose entries
// are registered islands, and Formatted exactly when the table exists.
func (m *Map) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: cluster map: %s", ErrBadRequest, fmt.Sprintf(format, args...))
	}
	if len(m.DefaultPolicy) > MaxPolicyLen {
		return bad("default policy too long")
	}
	check := func(k MemberKey, prev *int64, addr string, st State, pid int) error {
		if int64(k.ID) <= *prev {
			return bad("%s out of order or duplicate", k)
		}
		*prev = int64(k.ID)
		if !st.Valid() {
			return bad("%s: invalid state %d", k, uint8(st))
		}
		if len(addr) > maxAddrLen {
			return bad("%s: address too long", k)
		}
		if pid < 0 {
			return bad("%s: negative pid", k)
		}
		return nil
	}
	prev := int64(-1)
	for _, s := range m.Storage {
		if err := check(MemberKey{KindStorage, uint32(s.Slot)}, &prev, s.Addr, s.State, s.PID); err != nil {
			return err
		}
	}
	prev = -1
	for _, s := range m.Islands {
		if err := check(MemberKey{KindIsland, s.ID}, &prev, s.Addr, s.State, s.PID); err != nil {
			return err
		}
	}
	prev = -1
	for _, s := range m.Gateways {
		if err := check(MemberKey{KindGateway, s.ID}, &prev, s.Addr, s.State, s.PID); err != nil {
			return err
		}
		if len(s.Owner) > maxOwnerLen {
			return bad("gateway %d: owner too long", s.ID)
		}
	}
	for i, r := range m.Revoked {
		if r.Name == "" || len(r.Name) > maxOwnerLen || r.Below == 0 || i > 0 && m.Revoked[i-1].Name >= r.Name {
			return bad("bad revocation %q", r.Name)
		}
	}
	seen := make(map[string]bool, len(m.Managers))
	for _, n := range m.Managers {
		if n.RaftID == "" || len(n.RaftID) > MaxRaftIDLen || len(n.RaftAddr) > maxAddrLen || len(n.ClientAddr) > maxAddrLen {
			return bad("bad manager entry %q", n.RaftID)
		}
		if seen[n.RaftID] {
			return bad("duplicate manager %q", n.RaftID)
		}
		seen[n.RaftID] = true
	}
	if err := ValidateTable(m.Table); err != nil {
		return fmt.Errorf("cluster map: %w", err)
	}
	if m.Formatted != (len(m.Table.Entries) > 0) {
		return bad("formatted=%v but table has %d entries", m.Formatted, len(m.Table.Entries))
	}
	for _, id := range m.Table.Entries {
		if _, ok := m.Island(id); !ok {
			return bad("table names unknown island %d", id)
		}
	}
	if err := m.validateMoves(); err != nil {
		return fmt.Errorf("cluster map: %w", err)
	}
	if err := m.validatePlacement(); err != nil {
		return fmt.Errorf("cluster map: %w", err)
	}
	return nil
}

func encodeTable(e *wire.Enc, t Table) {
	e.U8(t.Depth)
	e.Uvarint(uint64(len(t.Entries)))
	for _, v := range t.Entries {
		e.U32(v)
	}
}

func decodeTable(d *wire.Dec) Table {
	t := Table{Depth: d.U8()}
	if n := d.Count(4); n > 0 {
		t.Entries = make([]uint32, n)
		for i := range t.Entries {
			t.Entries[i] = d.U32()
		}
	}
	return t
}

// ValidateTable checks the table's shape: empty, or 2^Depth entries with
// Depth <= MaxTableDepth.
func ValidateTable(t Table) error {
	if t.Depth > MaxTableDepth {
		return fmt.Errorf("%w: table depth %d above %d", ErrBadRequest, t.Depth, MaxTableDepth)
	}
	if len(t.Entries) == 0 {
		if t.Depth != 0 {
			return fmt.Errorf("%w: empty table with depth %d", ErrBadRequest, t.Depth)
		}
		return nil
	}
	if len(t.Entries) != 1<<t.Depth {
		return fmt.Errorf("%w: table depth %d with %d entries", ErrBadRequest, t.Depth, len(t.Entries))
	}
	return nil
}

// ValidateAddr checks a host:port a member or manager advertises.
func ValidateAddr(what, addr string) error {
	if addr == "" || len(addr) > maxAddrLen {
		return fmt.Errorf("%w: %s address %q: empty or longer than %d bytes", ErrBadRequest, what, addr, maxAddrLen)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%w: %s address %q: %v", ErrBadRequest, what, addr, err)
	}
	return nil
}

func timeNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func nanosTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
