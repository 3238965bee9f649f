package cluster

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/wire"
)

// CmdType is the type of a raft command (see the package doc).
type CmdType uint8

const (
	CmdRegister     CmdType = 1
	CmdMarkDown     CmdType = 2
	CmdMarkUp       CmdType = 3
	CmdSetState     CmdType = 4
	CmdSetTable     CmdType = 5
	CmdSetPolicy    CmdType = 6
	CmdFormat       CmdType = 7
	CmdManager      CmdType = 8
	CmdMoveEntries  CmdType = 9
	CmdFinishMove   CmdType = 10
	CmdCancelMove   CmdType = 11
	CmdIslandServer CmdType = 12
	CmdSetReplicas  CmdType = 13
	CmdRemove       CmdType = 14
	CmdRevoke       CmdType = 15

	CmdVersion uint8 = 1

	// MaxMarkDown bounds the members one markDown command names.
	MaxMarkDown = 1 << 16
)

func (t CmdType) String() string {
	switch t {
	case CmdRegister:
		return "register"
	case CmdMarkDown:
		return "mark-down"
	case CmdMarkUp:
		return "mark-up"
	case CmdSetState:
		return "set-state"
	case CmdSetTable:
		return "set-table"
	case CmdSetPolicy:
		return "set-policy"
	case CmdFormat:
		return "format"
	case CmdManager:
		return "manager"
	case CmdMoveEntries:
		return "move-entries"
	case CmdFinishMove:
		return "finish-move"
	case CmdCancelMove:
		return "cancel-move"
	case CmdIslandServer:
		return "island-server"
	case CmdSetReplicas:
		return "set-replicas"
	case CmdRemove:
		return "remove"
	case CmdRevoke:
		return "revoke"
	}
	return fmt.Sprintf("cmd(%d)", uint8(t))
}

// Command is one raft log entry. Only the fields of its type are encoded.
type Command struct {
	Type    CmdType
	Key     MemberKey      // register, mark-up, set-state
	Keys    []MemberKey    // mark-down, remove
	Addr    string         // register
	PID     int            // register
	Owner   string         // register: the registering key's name ("" for a member); revoke: the key name
	State   State          // set-state
	Table   Table          // set-table
	Policy  string         // set-policy
	Islands []uint32       // format
	Manager ManagerNode    // manager
	Moves   []EntryMove    // move-entries
	MoveID  uint64         // finish-move, cancel-move
	Servers []IslandServer // island-server
	Sets    []ReplicaSet   // island-server (the seed), set-replicas
	Out     []uint32       // set-replicas
}

func encodeKey(e *wire.Enc, k MemberKey) { e.U8(uint8(k.Kind)); e.U32(k.ID) }
func decodeKey(d *wire.Dec) MemberKey    { return MemberKey{Kind(d.U8()), d.U32()} }

func (c *Command) Encode() []byte {
	var e wire.Enc
	e.U8(CmdVersion)
	e.U8(uint8(c.Type))
	switch c.Type {
	case CmdRegister:
		encodeKey(&e, c.Key)
		e.String(c.Addr)
		e.I64(int64(c.PID))
		if c.Owner != "" {
			e.String(c.Owner)
		}
	case CmdMarkDown, CmdRemove:
		e.Uvarint(uint64(len(c.Keys)))
		for _, k := range c.Keys {
			encodeKey(&e, k)
		}
	case CmdMarkUp:
		encodeKey(&e, c.Key)
	case CmdSetState:
		encodeKey(&e, c.Key)
		e.U8(uint8(c.State))
	case CmdSetTable:
		encodeTable(&e, c.Table)
	case CmdSetPolicy:
		e.String(c.Policy)
	case CmdFormat:
		e.Uvarint(uint64(len(c.Islands)))
		for _, id := range c.Islands {
			e.U32(id)
		}
	case CmdManager:
		e.String(c.Manager.RaftID)
		e.String(c.Manager.RaftAddr)
		e.String(c.Manager.ClientAddr)
	case CmdMoveEntries:
		encodeMoves(&e, c.Moves)
	case CmdFinishMove, CmdCancelMove:
		e.U64(c.MoveID)
	case CmdRevoke:
		e.String(c.Owner)
	case CmdIslandServer:
		(&IslandServerReq{Servers: c.Servers, Seed: c.Sets}).Encode(&e)
	case CmdSetReplicas:
		(&SetReplicasReq{Sets: c.Sets, Out: c.Out}).Encode(&e)
	}
	return e.B
}

func DecodeCommand(b []byte) (*Command, error) {
	d := wire.NewDec(b)
	if v := d.U8(); d.Err() == nil && v != CmdVersion {
		return nil, fmt.Errorf("%w: raft command version %d", ErrBadRequest, v)
	}
	c := &Command{Type: CmdType(d.U8())}
	switch c.Type {
	case CmdRegister:
		c.Key = decodeKey(d)
		c.Addr = d.Str()
		c.PID = int(d.I64())
		if d.More() {
			c.Owner = d.Str()
		}
	case CmdMarkDown, CmdRemove:
		if n := d.Count(5); n > 0 {
			c.Keys = make([]MemberKey, n)
			for i := range c.Keys {
				c.Keys[i] = decodeKey(d)
			}
		}
	case CmdMarkUp:
		c.Key = decodeKey(d)
	case CmdSetState:
		c.Key = decodeKey(d)
		c.State = State(d.U8())
	case CmdSetTable:
		c.Table = decodeTable(d)
	case CmdSetPolicy:
		c.Policy = d.Str()
	case CmdFormat:
		if n := d.Count(4); n > 0 {
			c.Islands = make([]uint32, n)
			for i := range c.Islands {
				c.Islands[i] = d.U32()
			}
		}
	case CmdManager:
		c.Manager = ManagerNode{RaftID: d.Str(), RaftAddr: d.Str(), ClientAddr: d.Str()}
	case CmdMoveEntries:
		c.Moves = decodeMoves(d)
	case CmdFinishMove, CmdCancelMove:
		c.MoveID = d.U64()
	case CmdRevoke:
		c.Owner = d.Str()
	case CmdIslandServer:
		var r IslandServerReq
		r.Decode(d)
		c.Servers, c.Sets = r.Servers, r.Seed
	case CmdSetReplicas:
		var r SetReplicasReq
		r.Decode(d)
		c.Sets, c.Out = r.Sets, r.Out
	default:
		if d.Err() == nil {
			return nil, fmt.Errorf("%w: unknown raft command %d", ErrBadRequest, uint8(c.Type))
		}
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("%w: raft command %s: %v", ErrBadRequest, c.Type, err)
	}
	return c, nil
}

// ValidateKey checks a member key from a request.
func ValidateKey(k MemberKey) error {
	if !k.Kind.Valid() {
		return fmt.Errorf("%w: unknown member kind %d", ErrBadRequest, uint8(k.Kind))
	}
	if k.Kind == KindStorage && k.ID > 0xFFFF {
		return fmt.Errorf("%w: storage slot %d above 65535", ErrBadRequest, k.ID)
	}
	return nil
}

// apply performs c on m. It is deterministic (no clock, no randomness): every
// manager applies the same log to the same state. On error m is unchanged.
// changed reports whether the map changed, in which case the epoch was
// increased by one.
func (m *Map) Apply(c *Command) (changed bool, err error) {
	switch c.Type {
	case CmdRegister:
		changed, err = m.applyRegister(c.Key, c.Addr, c.PID, c.Owner)
	case CmdRemove:
		changed, err = m.applyRemove(c.Keys)
	case CmdRevoke:
		changed, err = m.applyRevoke(c.Owner)
	case CmdMarkDown:
		for _, k := range c.Keys {
			if f, ok := m.fields(k); ok && *f.state == StateUp {
				*f.state = StateDown
				changed = true
			}
		}
	case CmdMarkUp:
		f, ok := m.fields(c.Key)
		if !ok {
			return false, fmt.Errorf("%w: %s", ErrUnknownMember, c.Key)
		}
		if *f.state == StateDown {
			*f.state = StateUp
			changed = true
		}
	case CmdSetState:
		changed, err = m.applySetState(c.Key, c.State)
	case CmdSetTable:
		changed, err = m.applySetTable(c.Table)
	case CmdSetPolicy:
		changed, err = m.applySetPolicy(c.Policy)
	case CmdFormat:
		changed, err = m.applyFormat(c.Islands)
	case CmdManager:
		changed, err = m.applyManager(c.Manager)
	case CmdMoveEntries:
		changed, err = m.applyMoveEntries(c.Moves)
	case CmdFinishMove:
		changed, err = m.applyFinishMove(c.MoveID)
	case CmdCancelMove:
		changed, err = m.applyCancelMove(c.MoveID)
	case CmdIslandServer:
		changed, err = m.applyIslandServer(c.Servers, c.Sets)
	case CmdSetReplicas:
		changed, err = m.applySetReplicas(c.Sets, c.Out)
	default:
		return false, fmt.Errorf("%w: unknown raft command %d", ErrBadRequest, uint8(c.Type))
	}
	if err != nil || !changed {
		return false, err
	}
	if !m.PolicyPinned {
		m.DefaultPolicy = DefaultPolicyFor(m.activeStorage())
	}
	m.Epoch++
	return true, nil
}

func (m *Map) applyRegister(k MemberKey, addr string, pid int, owner string) (bool, error) {
	if err := ValidateKey(k); err != nil {
		return false, err
	}
	if err := ValidateAddr(k.String(), addr); err != nil {
		return false, err
	}
	if pid < 0 {
		return false, fmt.Errorf("%w: %s: negative pid %d", ErrBadRequest, k, pid)
	}
	if len(owner) > maxOwnerLen || owner != "" && k.Kind != KindGateway {
		return false, fmt.Errorf("%w: %s: bad owner %.64q", ErrBadRequest, k, owner)
	}
	f, ok := m.fields(k)
	if !ok {
		if err := m.roomFor(k, addr, owner); err != nil {
			return false, err
		}
		m.insert(k, addr, pid, StateUp)
		if owner != "" {
			i, _ := m.gatewayIndex(k.ID)
			m.Gateways[i].Owner = owner
		}
		return true, nil
	}
	if k.Kind == KindGateway {
		i, _ := m.gatewayIndex(k.ID)
		g := &m.Gateways[i]
		if owner != "" && g.Owner != owner {
			// A tenant's key cannot take over another key's gateway (a
			// member's key may: it is the cluster's).
			return false, fmt.Errorf("%w: %s was registered by another key", ErrLimit, k)
		}
		if len(addr) > len(*f.addr) && m.encodedSize()+len(addr)-len(*f.addr) > MaxMapBytes {
			return false, fmt.Errorf("%w: the map would pass %d bytes", ErrLimit, MaxMapBytes)
		}
	}
	st := *f.state
	if st == StateDown {
		st = StateUp
	}
	if *f.addr == addr && *f.pid == pid && *f.state == st {
		return false, nil
	}
	*f.addr, *f.pid, *f.state = addr, pid, st
	return true, nil
}

// Bounds on what registering can add to the map: every member fetches the
// whole map, and a frame carries at most wire.MaxFrame, so a tenant's key
// registering gateways must not be able to grow it without end.
const (
	// MaxGateways bounds the gateways and mounts registered at once.
	MaxGateways = 4096
	// MaxGatewaysPerKey bounds those one key other than the cluster key
	// registered.
	MaxGatewaysPerKey = 64
	// MaxMapBytes bounds the encoded map; registrations that would pass it
	// are refused (the frame limit is far above).
	MaxMapBytes = 2 << 20
)

// roomFor refuses a new member past the bounds above.
func (m *Map) roomFor(k MemberKey, addr, owner string) error {
	if k.Kind == KindGateway {
		if len(m.Gateways) >= MaxGateways {
			return fmt.Errorf("%w: %d gateways and mounts are registered (at most %d; `atoll member remove` frees entries)", ErrLimit, len(m.Gateways), MaxGateways)
		}
		if owner != "" {
			n := 0
			for _, g := range m.Gateways {
				if g.Owner == owner {
					n++
				}
			}
			if n >= MaxGatewaysPerKey {
				return fmt.Errorf("%w: key %q has %d gateways and mounts registered (at most %d per key)", ErrLimit, owner, n, MaxGatewaysPerKey)
			}
		}
	}
	// An upper estimate of the entry's encoded size.
	if m.encodedSize()+len(addr)+len(owner)+48 > MaxMapBytes {
		return fmt.Errorf("%w: the map would pass %d bytes", ErrLimit, MaxMapBytes)
	}
	return nil
}

// encodedSize is the size of EncodeMap(m).
func (m *Map) encodedSize() int { return len(EncodeMap(m)) }

// applyRemove forgets gateways (any state). Storage servers and islands
// leave through drain and out, which move what they hold first.
func (m *Map) applyRemove(keys []MemberKey) (bool, error) {
	for _, k := range keys {
		if k.Kind != KindGateway {
			return false, fmt.Errorf("%w: %s: only gateways and mounts are removed; storage servers and islands leave with `atoll drain`", ErrBadRequest, k)
		}
	}
	changed := false
	for _, k := range keys {
		if i, ok := m.gatewayIndex(k.ID); ok {
			m.Gateways = slices.Delete(m.Gateways, i, i+1)
			changed = true
		}
	}
	return changed, nil
}

// applyRevoke raises a key name's lowest valid generation by one: every
// key of that name made so far is refused from now on.
func (m *Map) applyRevoke(name string) (bool, error) {
	if name == "" || len(name) > maxOwnerLen {
		return false, fmt.Errorf("%w: bad key name %.64q", ErrBadRequest, name)
	}
	i, ok := slices.BinarySearchFunc(m.Revoked, name, func(r RevokedKey, n string) int { return strings.Compare(r.Name, n) })
	if ok {
		if m.Revoked[i].Below == math.MaxUint32 {
			return false, fmt.Errorf("%w: key %q: no generation left", ErrLimit, name)
		}
		m.Revoked[i].Below++
		return true, nil
	}
	if len(m.Revoked) >= MaxRevoked {
		return false, fmt.Errorf("%w: %d key names revoked (at most %d)", ErrLimit, len(m.Revoked), MaxRevoked)
	}
	m.Revoked = slices.Insert(m.Revoked, i, RevokedKey{Name: name, Below: 1})
	return true, nil
}

func (m *Map) applySetState(k MemberKey, st State) (bool, error) {
	if err := ValidateKey(k); err != nil {
		return false, err
	}
	switch st {
	case StateUp, StateDraining, StateOut:
	default:
		return false, fmt.Errorf("%w: %s: state %s cannot be set (want up, draining or out)", ErrBadRequest, k, st)
	}
	f, ok := m.fields(k)
	if !ok {
		return false, fmt.Errorf("%w: %s", ErrUnknownMember, k)
	}
	if *f.state == st {
		return false, nil
	}
	*f.state = st
	return true, nil
}

func (m *Map) applySetTable(t Table) (bool, error) {
	if !m.Formatted {
		return false, ErrNotFormatted
	}
	if err := ValidateTable(t); err != nil {
		return false, err
	}
	if len(t.Entries) == 0 {
		return false, fmt.Errorf("%w: empty table", ErrBadRequest)
	}
	for _, id := range t.Entries {
		if _, ok := m.Island(id); !ok {
			return false, fmt.Errorf("%w: table names island %d", ErrUnknownMember, id)
		}
	}
	if m.Table.Equal(t) {
		return false, nil
	}
	if len(m.Moves) > 0 {
		// A pending move names an entry at this depth and its source;
		// a new table would pull either from under it.
		return false, fmt.Errorf("%w: %d entry moves pending", ErrBadRequest, len(m.Moves))
	}
	m.Table = t.Clone()
	return true, nil
}

func (m *Map) applySetPolicy(text string) (bool, error) {
	if strings.TrimSpace(text) == "" {
		// Unpin: follow the number of storage slots again.
		if !m.PolicyPinned {
			return false, nil
		}
		m.PolicyPinned = false
		return true, nil
	}
	if len(text) > MaxPolicyLen {
		return false, fmt.Errorf("%w: policy too long", ErrBadRequest)
	}
	p, err := layout.Parse(text)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if n := m.activeStorage(); p.Width() > n {
		return false, fmt.Errorf("%w: policy %s needs %d storage slots, the cluster has %d", ErrBadRequest, p, p.Width(), n)
	}
	canon := p.String()
	if m.PolicyPinned && m.DefaultPolicy == canon {
		return false, nil
	}
	m.PolicyPinned, m.DefaultPolicy = true, canon
	return true, nil
}

func (m *Map) applyFormat(islands []uint32) (bool, error) {
	if m.Formatted {
		return false, ErrFormatted
	}
	ids := slices.Clone(islands)
	if len(ids) == 0 {
		for _, is := range m.Islands {
			if is.State != StateOut {
				ids = append(ids, is.ID)
			}
		}
		if len(ids) == 0 {
			return false, fmt.Errorf("%w: format: no islands registered", ErrBadRequest)
		}
	}
	for _, id := range ids {
		if _, ok := m.Island(id); !ok {
			return false, fmt.Errorf("%w: format: island %d", ErrUnknownMember, id)
		}
	}
	m.Table = InitialTable(ids)
	m.Formatted = true
	return true, nil
}

func (m *Map) applyManager(n ManagerNode) (bool, error) {
	if n.RaftID == "" || len(n.RaftID) > MaxRaftIDLen {
		return false, fmt.Errorf("%w: manager raft id %q", ErrBadRequest, n.RaftID)
	}
	if err := ValidateAddr("manager raft", n.RaftAddr); err != nil {
		return false, err
	}
	if err := ValidateAddr("manager client", n.ClientAddr); err != nil {
		return false, err
	}
	if old, ok := m.Manager(n.RaftID); ok && old == n {
		return false, nil
	}
	// A manager that rejoins under a new id at the same address replaces
	// the old entry.
	m.Managers = slices.DeleteFunc(m.Managers, func(o ManagerNode) bool {
		return o.RaftID == n.RaftID || o.RaftAddr == n.RaftAddr
	})
	m.Managers = append(m.Managers, n)
	slices.SortFunc(m.Managers, func(a, b ManagerNode) int { return strings.Compare(a.RaftID, b.RaftID) })
	return true, nil
}
