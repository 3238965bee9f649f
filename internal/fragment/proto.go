package fragment

import (
	"errors"
	"fmt"
	"time"

	"github.com/atoll-fs/atoll/internal/wire"
)

// Storage RPC operations (the wire frame's op field).
const (
	OpPut    uint16 = 1  // PutReq + payload -> empty
	OpAppend uint16 = 2  // IDReq + payload -> AppendResp
	OpRead   uint16 = 3  // ReadReq -> ReadResp + payload (short only at end of fragment)
	OpDelete uint16 = 4  // IDReq -> empty
	OpInfo   uint16 = 5  // IDReq -> Info
	OpList   uint16 = 6  // ListReq -> ListResp
	OpNewest uint16 = 7  // LogReq -> NewestResp
	OpVerify uint16 = 8  // IDReq -> VerifyResp
	OpStat   uint16 = 9  // empty -> Stats
	OpScan   uint16 = 10 // ScanReq -> ScanResp (every fragment of the server, paged; for the cleaner and repair)
)

// Status codes of error responses, and the sentinels a client sees for them.
const (
	StatusInternal       uint32 = 1
	StatusNotFound       uint32 = 2
	StatusExists         uint32 = 3
	StatusCorrupt        uint32 = 4
	StatusOutOfRange     uint32 = 5
	StatusNoSpace        uint32 = 6
	StatusBadData        uint32 = 7
	StatusRepairMismatch uint32 = 8
	StatusBadRequest     uint32 = 9
	StatusUnavailable    uint32 = 10
	StatusForbidden      uint32 = 11
)

// Errors as seen by a storage client.
var (
	ErrNotFound       = errors.New("fragment not found")
	ErrExists         = errors.New("fragment already exists")
	ErrCorrupt        = errors.New("fragment corrupt")
	ErrOutOfRange     = errors.New("read beyond end of fragment")
	ErrNoSpace        = errors.New("storage server out of space")
	ErrBadData        = errors.New("fragment data does not match its checksums")
	ErrRepairMismatch = errors.New("repair bytes differ from the fragment")
	ErrBadRequest     = errors.New("malformed storage request")
	ErrUnavailable    = errors.New("storage server unavailable")
	ErrInternal       = errors.New("storage server internal error")
	ErrForbidden      = errors.New("storage request not permitted for this key")
)

var statusErr = map[uint32]error{
	StatusInternal:       ErrInternal,
	StatusNotFound:       ErrNotFound,
	StatusExists:         ErrExists,
	StatusCorrupt:        ErrCorrupt,
	StatusOutOfRange:     ErrOutOfRange,
	StatusNoSpace:        ErrNoSpace,
	StatusBadData:        ErrBadData,
	StatusRepairMismatch: ErrRepairMismatch,
	StatusBadRequest:     ErrBadRequest,
	StatusUnavailable:    ErrUnavailable,
	StatusForbidden:      ErrForbidden,
}

// RemoteErr turns a *wire.RemoteError into an error wrapping the sentinel
// for its status, keeping the server's text. Other errors pass through.
func RemoteErr(err error) error {
	var re *wire.RemoteError
	if !errors.As(err, &re) {
		return err
	}
	s, ok := statusErr[re.Status]
	if !ok {
		s = ErrInternal
	}
	return &StatusError{Sentinel: s, Message: re.Message}
}

// StatusError carries a server's error text and the sentinel it maps to.
type StatusError struct {
	Sentinel error
	Message  string
}

func (e *StatusError) Error() string { return e.Message }
func (e *StatusError) Unwrap() error { return e.Sentinel }

// PutReq asks to store a fragment. Repair rewrites an existing fragment
// with identical bytes. CRCs are the sender's CRC32C per ChunkSize chunk
// of the payload; the server refuses data that does not match them.
type PutReq struct {
	ID        ID
	Repair    bool
	ChunkSize uint32
	CRCs      []uint32
}

func (r *PutReq) Encode(e *wire.Enc) {
	e.B = r.ID.AppendBinary(e.B)
	e.Bool(r.Repair)
	e.U32(r.ChunkSize)
	e.Uvarint(uint64(len(r.CRCs)))
	for _, c := range r.CRCs {
		e.U32(c)
	}
}

func decodeID(d *wire.Dec) ID {
	var id ID
	id.Log, id.Seq, id.Index = d.U64(), d.U64(), d.U16()
	return id
}

func (r *PutReq) Decode(d *wire.Dec) {
	r.ID = decodeID(d)
	r.Repair = d.Bool()
	r.ChunkSize = d.U32()
	n := d.Count(4)
	r.CRCs = make([]uint32, n)
	for i := range r.CRCs {
		r.CRCs[i] = d.U32()
	}
}

// IDReq names one fragment.
type IDReq struct{ ID ID }

func (r *IDReq) Encode(e *wire.Enc) { e.B = r.ID.AppendBinary(e.B) }
func (r *IDReq) Decode(d *wire.Dec) { r.ID = decodeID(d) }

// AppendResp returns a fragment's length after an append.
type AppendResp struct{ Length uint64 }

func (r *AppendResp) Encode(e *wire.Enc) { e.U64(r.Length) }
func (r *AppendResp) Decode(d *wire.Dec) { r.Length = d.U64() }

// ReadReq reads Len bytes at Off.
type ReadReq struct {
	ID  ID
	Off uint64
	Len uint32
	// Token and Grant, optional (absent on the wire when Token is empty):
	// the read token (auth.ReadToken) an island gave a key limited to
	// identities for the block Grant describes. Storage servers require
	// them from such a key for a fragment outside its own logs.
	Token []byte
	Grant Grant
}

func (r *ReadReq) Encode(e *wire.Enc) {
	e.B = r.ID.AppendBinary(e.B)
	e.U64(r.Off)
	e.U32(r.Len)
	if len(r.Token) > 0 {
		e.Bytes(r.Token)
		r.Grant.encode(e)
	}
}

func (r *ReadReq) Decode(d *wire.Dec) {
	r.ID = decodeID(d)
	r.Off = d.U64()
	r.Len = d.U32()
	if d.More() {
		r.Token = append([]byte(nil), d.Bytes()...)
		r.Grant.decode(d)
	}
}

// Grant is what a read token lets a tenant's key read of one stripe: one
// block, [Offset, Offset+Length) of the stripe's data laid over K data
// fragments of Shard bytes each (layout.Spans), whose fragments are on
// Slots. Log stripes hold many files' blocks, so a grant is narrow:
//
//   - a data fragment: only the block's own piece in it;
//   - a parity fragment (or a mirror's copy): the rows of a piece (the
//     same offsets), which a degraded read needs;
//   - another data fragment's rows of a piece too, but only while the
//     slot holding that piece is down in the cluster map (the storage
//     server's view): a degraded read rebuilds the piece from them.
//
// So a token shows its holder the block, parity over its rows (a linear
// combination of the blocks sharing them), and those blocks themselves
// only while the block cannot be read any other way.
type Grant struct {
	K      uint8
	Shard  uint32
	Offset uint32
	Length uint32
	Slots  []uint16
}

func (g *Grant) encode(e *wire.Enc) {
	e.U8(g.K)
	e.U32(g.Shard)
	e.U32(g.Offset)
	e.U32(g.Length)
	e.Uvarint(uint64(len(g.Slots)))
	for _, s := range g.Slots {
		e.U16(s)
	}
}

func (g *Grant) decode(d *wire.Dec) {
	g.K, g.Shard, g.Offset, g.Length = d.U8(), d.U32(), d.U32(), d.U32()
	g.Slots = make([]uint16, d.Count(2))
	for i := range g.Slots {
		g.Slots[i] = d.U16()
	}
}

// Canonical is the form a token signs: stripe (log, seq) and the grant.
func (g Grant) Canonical(s StripeID) []byte {
	e := wire.Enc{B: make([]byte, 0, 8+8+13+1+2*len(g.Slots))}
	e.U64(s.Log)
	e.U64(s.Seq)
	g.encode(&e)
	return e.B
}

// Allows reports whether the grant covers reading [off, off+n) of
// fragment index; down says whether a slot is down in the reader's map.
func (g Grant) Allows(index uint16, off uint64, n uint32, down func(slot uint16) bool) bool {
	if g.Shard == 0 || g.K == 0 || int(index) >= len(g.Slots) || int(g.K) > len(g.Slots) ||
		uint64(g.Offset)+uint64(g.Length) > uint64(g.K)*uint64(g.Shard) {
		return false
	}
	end := off + uint64(n)
	shard := uint64(g.Shard)
	for o, rest := uint64(g.Offset), uint64(g.Length); rest > 0; {
		frag, row := o/shard, o%shard
		l := min(shard-row, rest)
		if off >= row && end <= row+l { // within this piece's rows
			switch {
			case uint64(index) == frag, index >= uint16(g.K):
				return true
			case down != nil && down(g.Slots[frag]):
				return true
			}
		}
		o, rest = o+l, rest-l
	}
	return false
}

// ReadResp accompanies read bytes with the fragment's total length, so a
// reader can tell where the stripe trailer starts without another round trip.
type ReadResp struct{ Length uint64 }

func (r *ReadResp) Encode(e *wire.Enc) { e.U64(r.Length) }
func (r *ReadResp) Decode(d *wire.Dec) { r.Length = d.U64() }

// Info describes one stored fragment.
type Info struct {
	ID        ID
	Length    uint64
	ChunkSize uint32
	Created   time.Time
	CRCs      []uint32
}

func (r *Info) Encode(e *wire.Enc) {
	e.B = r.ID.AppendBinary(e.B)
	e.U64(r.Length)
	e.U32(r.ChunkSize)
	e.I64(r.Created.UnixNano())
	e.Uvarint(uint64(len(r.CRCs)))
	for _, c := range r.CRCs {
		e.U32(c)
	}
}

func (r *Info) Decode(d *wire.Dec) {
	r.ID = decodeID(d)
	r.Length = d.U64()
	r.ChunkSize = d.U32()
	r.Created = time.Unix(0, d.I64())
	n := d.Count(4)
	r.CRCs = make([]uint32, n)
	for i := range r.CRCs {
		r.CRCs[i] = d.U32()
	}
}

// ListReq lists fragments of Log from stripe FromSeq on.
type ListReq struct {
	Log     uint64
	FromSeq uint64
	Limit   uint32
}

func (r *ListReq) Encode(e *wire.Enc) { e.U64(r.Log); e.U64(r.FromSeq); e.U32(r.Limit) }
func (r *ListReq) Decode(d *wire.Dec) { r.Log = d.U64(); r.FromSeq = d.U64(); r.Limit = d.U32() }

// ListResp holds (id, length) pairs in (Seq, Index) order.
type ListResp struct {
	IDs     []ID
	Lengths []uint64
}

func (r *ListResp) Encode(e *wire.Enc) {
	e.Uvarint(uint64(len(r.IDs)))
	for i, id := range r.IDs {
		e.B = id.AppendBinary(e.B)
		e.U64(r.Lengths[i])
	}
}

func (r *ListResp) Decode(d *wire.Dec) {
	n := d.Count(EncodedLen + 8)
	r.IDs = make([]ID, n)
	r.Lengths = make([]uint64, n)
	for i := range r.IDs {
		r.IDs[i] = decodeID(d)
		r.Lengths[i] = d.U64()
	}
}

// ScanReq asks for up to Limit fragments in (Log, Seq, Index) order,
// starting after After unless First.
type ScanReq struct {
	First bool
	After ID
	Limit uint32
}

func (r *ScanReq) Encode(e *wire.Enc) {
	e.Bool(r.First)
	e.B = r.After.AppendBinary(e.B)
	e.U32(r.Limit)
}
func (r *ScanReq) Decode(d *wire.Dec) { r.First = d.Bool(); r.After = decodeID(d); r.Limit = d.U32() }

// ScanEntry is one fragment: its id, length and creation time.
type ScanEntry struct {
	ID      ID
	Length  uint64
	Created time.Time
}

// ScanResp is one page of a scan; More says a later page exists. The
// first page also lists the fragments the server found corrupt and that
// were not repaired since (its durable repair queue).
type ScanResp struct {
	Entries []ScanEntry
	More    bool
	Suspect []ID
}

func (r *ScanResp) Encode(e *wire.Enc) {
	e.Uvarint(uint64(len(r.Entries)))
	for _, x := range r.Entries {
		e.B = x.ID.AppendBinary(e.B)
		e.U64(x.Length)
		e.I64(x.Created.UnixNano())
	}
	e.Bool(r.More)
	e.Uvarint(uint64(len(r.Suspect)))
	for _, id := range r.Suspect {
		e.B = id.AppendBinary(e.B)
	}
}

func (r *ScanResp) Decode(d *wire.Dec) {
	n := d.Count(EncodedLen + 16)
	r.Entries = make([]ScanEntry, n)
	for i := range r.Entries {
		r.Entries[i] = ScanEntry{ID: decodeID(d), Length: d.U64(), Created: time.Unix(0, d.I64())}
	}
	r.More = d.Bool()
	n = d.Count(EncodedLen)
	r.Suspect = make([]ID, n)
	for i := range r.Suspect {
		r.Suspect[i] = decodeID(d)
	}
}

// LogReq names a client log.
type LogReq struct{ Log uint64 }

func (r *LogReq) Encode(e *wire.Enc) { e.U64(r.Log) }
func (r *LogReq) Decode(d *wire.Dec) { r.Log = d.U64() }

// NewestResp is the highest stripe sequence number stored for a log.
type NewestResp struct {
	Found bool
	Seq   uint64
}

func (r *NewestResp) Encode(e *wire.Enc) { e.Bool(r.Found); e.U64(r.Seq) }
func (r *NewestResp) Decode(d *wire.Dec) { r.Found = d.Bool(); r.Seq = d.U64() }

// Range is a byte range of a fragment.
type Range struct{ Off, Len uint64 }

// VerifyResp lists the sick ranges of a fragment (empty when healthy).
type VerifyResp struct{ Sick []Range }

func (r *VerifyResp) Encode(e *wire.Enc) {
	e.Uvarint(uint64(len(r.Sick)))
	for _, s := range r.Sick {
		e.U64(s.Off)
		e.U64(s.Len)
	}
}

func (r *VerifyResp) Decode(d *wire.Dec) {
	n := d.Count(16)
	r.Sick = make([]Range, n)
	for i := range r.Sick {
		r.Sick[i] = Range{d.U64(), d.U64()}
	}
}

// Stats is a storage server's state.
type Stats struct {
	Slot          uint16
	CapacityBytes uint64
	UsedBytes     uint64
	FreeBytes     uint64
	Fragments     uint64
	ScrubPasses   uint64
	ScrubBytes    uint64 // scanned in the current pass
	CorruptFound  uint64 // corrupt chunks detected (reads and scrubs)
	Repairs       uint64
	// Disk names the file system the capacity comes from (a hash of the
	// host's boot id and the device), so servers sharing one disk count
	// it once; 0 when unknown or when the capacity is configured.
	// Optional on the wire (absent: 0).
	Disk uint64
}

func (r *Stats) Encode(e *wire.Enc) {
	e.U16(r.Slot)
	for _, v := range []uint64{r.CapacityBytes, r.UsedBytes, r.FreeBytes, r.Fragments, r.ScrubPasses, r.ScrubBytes, r.CorruptFound, r.Repairs} {
		e.U64(v)
	}
	if r.Disk != 0 {
		e.U64(r.Disk)
	}
}

func (r *Stats) Decode(d *wire.Dec) {
	r.Slot = d.U16()
	for _, p := range []*uint64{&r.CapacityBytes, &r.UsedBytes, &r.FreeBytes, &r.Fragments, &r.ScrubPasses, &r.ScrubBytes, &r.CorruptFound, &r.Repairs} {
		*p = d.U64()
	}
	if d.More() {
		r.Disk = d.U64()
	}
}

// Message is implemented by every request and response structure.
type Message = wire.Message

// Unmarshal decodes a whole message, failing on short or trailing bytes.
func Unmarshal(b []byte, m Message) error {
	if err := wire.Unmarshal(b, m); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return nil
}

// Marshal encodes a message.
func Marshal(m Message) []byte { return wire.Marshal(m) }
