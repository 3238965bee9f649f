package metawire

import "github.com/atoll-fs/atoll/internal/wire"

// Island-to-island operations added with the two-phase commit (see
// OpPrepare, OpDecide, OpOutcome and OpFsck in msgs.go).
const (
	OpAllocIno uint16 = 68 // AllocInoReq -> AllocInoResp (a fresh inode id in a bucket)
)

// TxID names one cross-island transaction: the coordinator's island id
// (big-endian, first 4 bytes) followed by 12 random bytes.
type TxID [16]byte

func (t *TxID) encode(e *wire.Enc) { e.B = append(e.B, t[:]...) }
func (t *TxID) decode(d *wire.Dec) {
	for i := range t {
		t[i] = d.U8()
	}
}

// ActionKind tags an Action. Each kind acts on the records of one inode
// (Action.Ino), so an action runs on the island owning that inode's bucket.
type ActionKind uint8

const (
	// ActCreateInode creates inode Ino from Init; it must not exist.
	ActCreateInode ActionKind = 1
	// ActDeleteInode deletes inode Ino with its blocks and xattrs. Type, if
	// not 0, is the expected type; with ActRequireEmpty the inode must be a
	// directory without entries (else ErrNotEmpty).
	ActDeleteInode ActionKind = 2
	// ActAdjustNlink adds Delta to the link count of Ino and sets its ctime
	// to Time. With ActDeleteAtZero an inode left with no links is deleted.
	// A result above MaxLinks is ErrTooManyLinks.
	ActAdjustNlink ActionKind = 3
	// ActAddEntry makes entry Name of directory Ino point at Target (of
	// type Type). Expect is the entry it replaces (0: the name must be
	// free). The directory's mtime and ctime become Time.
	ActAddEntry ActionKind = 4
	// ActRemoveEntry removes entry Name of directory Ino, which must point
	// at Target. The directory's mtime and ctime become Time.
	ActRemoveEntry ActionKind = 5
	// ActSetParent changes the parent of directory Ino from Expect to
	// Target and sets its ctime to Time.
	ActSetParent ActionKind = 6
	// ActTouch adds Delta to the link count of Ino (a directory gaining or
	// losing a subdirectory) and sets its ctime (and with ActTouchMtime its
	// mtime) to Time. With ActTouchParent, a non-directory whose recorded
	// parent is Expect gets parent Target (a rename of the name it was
	// created under; a hard link's rename leaves it).
	ActTouch ActionKind = 7
	// ActCheck changes nothing: inode Ino must exist, have type Type (if
	// not 0) and, with ActCheckParent, have parent Target. It takes a
	// shared lock, so the facts hold until the transaction is decided.
	ActCheck ActionKind = 8
	// ActCheckEntry changes nothing: entry Name of directory Ino must
	// point at Target. Shared lock, like ActCheck.
	ActCheckEntry ActionKind = 9
)

// Action flags.
const (
	ActRequireEmpty uint32 = 1 << iota
	ActDeleteAtZero
	ActTouchMtime
	ActCheckParent
	ActTouchParent

	ActAllFlags = ActRequireEmpty | ActDeleteAtZero | ActTouchMtime | ActCheckParent | ActTouchParent
)

// InodeInit holds the attributes of an inode being created.
type InodeInit struct {
	Mode      uint32
	Nlink     uint32
	UID, GID  uint32
	Rdev      uint32
	Time      int64 // atime, mtime and ctime
	BlockSize uint32
	Policy    string
	Parent    uint64 // directories: the parent directory
	Path      string // directories: the creation path (hashes subdirectories)
	Target    string // symbolic links
	Verf      uint64 // exclusive-create verifier (0: none)
}

func (n *InodeInit) Encode(e *wire.Enc) {
	e.U32(n.Mode)
	e.U32(n.Nlink)
	e.U32(n.UID)
	e.U32(n.GID)
	e.U32(n.Rdev)
	e.I64(n.Time)
	e.U32(n.BlockSize)
	e.String(n.Policy)
	e.U64(n.Parent)
	e.String(n.Path)
	e.String(n.Target)
	e.U64(n.Verf)
}

func (n *InodeInit) Decode(d *wire.Dec) {
	n.Mode, n.Nlink, n.UID, n.GID, n.Rdev = d.U32(), d.U32(), d.U32(), d.U32(), d.U32()
	n.Time, n.BlockSize, n.Policy = d.I64(), d.U32(), d.Str()
	n.Parent, n.Path, n.Target, n.Verf = d.U64(), d.Str(), d.Str(), d.U64()
}

// Action is one step of a namespace operation, run by the island owning
// Ino's bucket. Which fields a kind uses is listed with the kinds; the
// encoding carries exactly those fields:
//
//	u8 kind, u64 ino, then
//	CreateInode: InodeInit
//	DeleteInode: u32 type, u32 flags
//	AdjustNlink: i32 delta (as u32), u32 flags, i64 time
//	AddEntry:    string name, u64 target, u32 type, u64 expect, i64 time
//	RemoveEntry: string name, u64 target, i64 time
//	SetParent:   u64 target, u64 expect, i64 time
//	Touch:       i32 delta (as u32), u32 flags, i64 time
//	Check:       u32 type, u32 flags, u64 target
//	CheckEntry:  string name, u64 target
type Action struct {
	Kind   ActionKind
	Ino    uint64
	Name   string
	Target uint64
	Expect uint64
	Type   uint32
	Delta  int32
	Flags  uint32
	Time   int64
	Init   InodeInit
}

func (a *Action) Encode(e *wire.Enc) {
	e.U8(uint8(a.Kind))
	e.U64(a.Ino)
	switch a.Kind {
	case ActCreateInode:
		a.Init.Encode(e)
	case ActDeleteInode:
		e.U32(a.Type)
		e.U32(a.Flags)
	case ActAdjustNlink, ActTouch:
		e.U32(uint32(a.Delta))
		e.U32(a.Flags)
		e.I64(a.Time)
		if a.Kind == ActTouch && a.Flags&ActTouchParent != 0 {
			// Only then: intents and prepared records written before the
			// flag existed decode as they were.
			e.U64(a.Target)
			e.U64(a.Expect)
		}
	case ActAddEntry:
		e.String(a.Name)
		e.U64(a.Target)
		e.U32(a.Type)
		e.U64(a.Expect)
		e.I64(a.Time)
	case ActRemoveEntry:
		e.String(a.Name)
		e.U64(a.Target)
		e.I64(a.Time)
	case ActSetParent:
		e.U64(a.Target)
		e.U64(a.Expect)
		e.I64(a.Time)
	case ActCheck:
		e.U32(a.Type)
		e.U32(a.Flags)
		e.U64(a.Target)
	case ActCheckEntry:
		e.String(a.Name)
		e.U64(a.Target)
	}
}

// Decode reads an action; an unknown kind fails the decoder.
func (a *Action) Decode(d *wire.Dec) {
	*a = Action{Kind: ActionKind(d.U8()), Ino: d.U64()}
	switch a.Kind {
	case ActCreateInode:
		a.Init.Decode(d)
	case ActDeleteInode:
		a.Type, a.Flags = d.U32(), d.U32()
	case ActAdjustNlink, ActTouch:
		a.Delta, a.Flags, a.Time = int32(d.U32()), d.U32(), d.I64()
		if a.Kind == ActTouch && a.Flags&ActTouchParent != 0 {
			a.Target, a.Expect = d.U64(), d.U64()
		}
	case ActAddEntry:
		a.Name, a.Target, a.Type, a.Expect, a.Time = d.Str(), d.U64(), d.U32(), d.U64(), d.I64()
	case ActRemoveEntry:
		a.Name, a.Target, a.Time = d.Str(), d.U64(), d.I64()
	case ActSetParent:
		a.Target, a.Expect, a.Time = d.U64(), d.U64(), d.I64()
	case ActCheck:
		a.Type, a.Flags, a.Target = d.U32(), d.U32(), d.U64()
	case ActCheckEntry:
		a.Name, a.Target = d.Str(), d.U64()
	default:
		// Unknown kind: read until the decoder fails (it always does once
		// the bytes run out), so the message is rejected.
		for d.Err() == nil {
			_ = d.U64()
		}
	}
}

// EncodeActions and DecodeActions write and read a counted action list.
func EncodeActions(e *wire.Enc, as []Action) {
	e.Uvarint(uint64(len(as)))
	for i := range as {
		as[i].Encode(e)
	}
}

func DecodeActions(d *wire.Dec) []Action {
	n := d.Count(9)
	as := make([]Action, n)
	for i := range as {
		as[i].Decode(d)
	}
	return as
}

// PrepareReq asks a participant to validate and lock Actions (all on
// inodes it owns) and to record them durably as prepared for TxID.
type PrepareReq struct {
	TxID        TxID
	Coordinator uint32
	Actions     []Action
	// Session is the lease session of the client whose request the
	// transaction serves (0: none): applying it does not break that
	// client's own leases (see internal/lease).
	Session uint64
}

func (r *PrepareReq) Encode(e *wire.Enc) {
	r.TxID.encode(e)
	e.U32(r.Coordinator)
	EncodeActions(e, r.Actions)
	e.U64(r.Session)
}

func (r *PrepareReq) Decode(d *wire.Dec) {
	r.TxID.decode(d)
	r.Coordinator = d.U32()
	r.Actions = DecodeActions(d)
	r.Session = d.U64()
}

// DecideReq tells a participant the outcome of TxID. Deciding an unknown
// transaction succeeds (it was already applied or dropped).
type DecideReq struct {
	TxID   TxID
	Commit bool
}

func (r *DecideReq) Encode(e *wire.Enc) { r.TxID.encode(e); e.Bool(r.Commit) }
func (r *DecideReq) Decode(d *wire.Dec) { r.TxID.decode(d); r.Commit = d.Bool() }

// TxReq names a transaction (OpOutcome).
type TxReq struct{ TxID TxID }

func (r *TxReq) Encode(e *wire.Enc) { r.TxID.encode(e) }
func (r *TxReq) Decode(d *wire.Dec) { r.TxID.decode(d) }

// Transaction states answered by OpOutcome. A coordinator without an
// intent for the transaction answers TxAborted (presumed abort).
const (
	TxAborted   uint8 = 0
	TxPending   uint8 = 1
	TxCommitted uint8 = 2
)

// OutcomeResp is a coordinator's answer to OpOutcome.
type OutcomeResp struct{ State uint8 }

func (r *OutcomeResp) Encode(e *wire.Enc) { e.U8(r.State) }
func (r *OutcomeResp) Decode(d *wire.Dec) { r.State = d.U8() }

// AllocInoReq asks the island owning Bucket for a fresh inode id in it
// (for a directory created from another island). The allocation is
// durable; an id that is never used is simply skipped.
//
// Count > 1 asks for that many consecutive ids (at most MaxAllocInos): a
// client reserving numbers for the creates it answers itself under an
// exclusive lease (CreateReq.Ino). Ids are never reused; unused ones are
// skipped.
type AllocInoReq struct {
	Bucket uint32
	Count  uint32 // 0 or 1: one id
}

// MaxAllocInos bounds AllocInoReq.Count.
const MaxAllocInos = 1024

func (r *AllocInoReq) Encode(e *wire.Enc) {
	e.U32(r.Bucket)
	if r.Count > 1 {
		e.U32(r.Count)
	}
}

func (r *AllocInoReq) Decode(d *wire.Dec) {
	r.Bucket = d.U32()
	if d.More() {
		r.Count = d.U32()
	}
}

// AllocInoResp returns the allocated inode id.
type AllocInoResp struct{ Ino uint64 }

func (r *AllocInoResp) Encode(e *wire.Enc) { e.U64(r.Ino) }
func (r *AllocInoResp) Decode(d *wire.Dec) { r.Ino = d.U64() }

// Fsck record kinds.
const (
	FsckInode    uint8 = 1 // Ino, Mode, Nlink, Aux = parent (directories)
	FsckDirent   uint8 = 2 // Ino = directory, Name, Aux = target, Mode = type
	FsckBlock    uint8 = 3 // Ino, Aux = block index, Log/Seq = stripe
	FsckIntent   uint8 = 4 // Name = transaction id (hex) and state
	FsckPrepared uint8 = 5 // Name = transaction id (hex), Aux = coordinator
	FsckProblem  uint8 = 6 // Name = a problem the island found in its own records
)

// FsckRecord is one record of an island, reduced to what a cross-island
// checker needs.
type FsckRecord struct {
	Kind     uint8
	Ino      uint64
	Aux      uint64
	Mode     uint32
	Nlink    uint32
	Name     string
	Log, Seq uint64
}

// FsckReq asks for the page of records after Cursor (empty: from the
// start), at most Max records (0: the island's default).
type FsckReq struct {
	Cursor []byte
	Max    uint32
}

func (r *FsckReq) Encode(e *wire.Enc) { e.Bytes(r.Cursor); e.U32(r.Max) }
func (r *FsckReq) Decode(d *wire.Dec) {
	r.Cursor = append([]byte(nil), d.Bytes()...)
	r.Max = d.U32()
}

// FsckResp is one page: Next is the cursor of the following page; Done
// says there is none.
type FsckResp struct {
	Island  uint32
	Records []FsckRecord
	Next    []byte
	Done    bool
}

func (r *FsckResp) Encode(e *wire.Enc) {
	e.U32(r.Island)
	e.Uvarint(uint64(len(r.Records)))
	for i := range r.Records {
		x := &r.Records[i]
		e.U8(x.Kind)
		e.U64(x.Ino)
		e.U64(x.Aux)
		e.U32(x.Mode)
		e.U32(x.Nlink)
		e.String(x.Name)
		e.U64(x.Log)
		e.U64(x.Seq)
	}
	e.Bytes(r.Next)
	e.Bool(r.Done)
}

func (r *FsckResp) Decode(d *wire.Dec) {
	r.Island = d.U32()
	n := d.Count(42)
	r.Records = make([]FsckRecord, n)
	for i := range r.Records {
		x := &r.Records[i]
		x.Kind, x.Ino, x.Aux, x.Mode, x.Nlink = d.U8(), d.U64(), d.U64(), d.U32(), d.U32()
		x.Name, x.Log, x.Seq = d.Str(), d.U64(), d.U64()
	}
	r.Next = append([]byte(nil), d.Bytes()...)
	r.Done = d.Bool()
}
