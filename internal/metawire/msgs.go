package metawire

import (
	"fmt"

	"github.com/atoll-fs/atoll/internal/wire"
)

// Operations (the wire frame's op field). Client operations first, then
// island-to-island ones.
const (
	OpLookup      uint16 = 1  // NameReq -> AttrResp
	OpGetAttr     uint16 = 2  // InoReq -> AttrResp
	OpSetAttr     uint16 = 3  // SetAttrReq -> AttrResp
	OpCreate      uint16 = 4  // CreateReq -> CreateResp (regular files, fifos, sockets, devices)
	OpMkdir       uint16 = 5  // CreateReq -> CreateResp
	OpSymlink     uint16 = 6  // CreateReq (Target) -> CreateResp
	OpReadlink    uint16 = 7  // InoReq -> ReadlinkResp
	OpUnlink      uint16 = 8  // NameReq -> Empty
	OpRmdir       uint16 = 9  // NameReq -> Empty
	OpRename      uint16 = 10 // RenameReq -> Empty
	OpLink        uint16 = 11 // LinkReq -> AttrResp
	OpReaddir     uint16 = 12 // ReaddirReq -> ReaddirResp
	OpGetXattr    uint16 = 13 // XattrReq -> XattrResp
	OpSetXattr    uint16 = 14 // XattrReq -> Empty
	OpListXattr   uint16 = 15 // InoReq -> XattrResp (Names)
	OpRemoveXattr uint16 = 16 // XattrReq -> Empty
	OpReadMap     uint16 = 17 // ReadMapReq -> ReadMapResp
	OpCommit      uint16 = 18 // CommitReq -> CommitResp
	OpClean       uint16 = 19 // CleanReq -> CleanResp
	OpStatFS      uint16 = 20 // Empty -> StatFSResp
	OpAccess      uint16 = 21 // AccessReq -> Empty
	OpLiveBytes   uint16 = 22 // LiveReq -> LiveResp (one page of per-stripe live bytes, for the cleaner)
	OpStripeRefs  uint16 = 23 // RefsReq -> RefsResp (the blocks pointing into one stripe)
	OpSync        uint16 = 24 // Empty -> SyncResp (everything the island acknowledged before is durable)
	OpForget      uint16 = 25 // ForgetReq -> ForgetResp (drop the zero live counters of deleted stripes)
	OpLease       uint16 = 26 // LeaseReq -> LeaseResp (a lookup, getattr or readdir answered with a lease on its bucket)
	OpLeasePoll   uint16 = 27 // PollReq -> PollResp (the breaks of a session's leases; a long poll)
	OpUnlinkMany  uint16 = 28 // UnlinkManyReq -> Empty (several unlinks in one directory, all or none)

	OpPrepare uint16 = 64 // PrepareReq -> Empty (participant prepared)
	OpDecide  uint16 = 65 // DecideReq -> Empty (commit or abort a prepared tx)
	OpOutcome uint16 = 66 // TxReq -> OutcomeResp (asked of a coordinator)
	OpFsck    uint16 = 67 // FsckReq -> FsckResp (one page of an island's records)
)

// Message is implemented by every request and response structure.
type Message = wire.Message

// Marshal encodes a message.
func Marshal(m Message) []byte { return wire.Marshal(m) }

// Unmarshal decodes a whole message strictly.
func Unmarshal(b []byte, m Message) error {
	if err := wire.Unmarshal(b, m); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return nil
}

// Empty is a message with no fields.
type Empty = wire.Empty

// InoReq names one inode.
type InoReq struct {
	Cred Cred
	Ino  uint64
}

func (r *InoReq) Encode(e *wire.Enc) { r.Cred.Encode(e); e.U64(r.Ino) }
func (r *InoReq) Decode(d *wire.Dec) { r.Cred.Decode(d); r.Ino = d.U64() }

// NameReq names an entry of a directory.
type NameReq struct {
	Cred Cred
	Dir  uint64
	Name string
}

func (r *NameReq) Encode(e *wire.Enc) { r.Cred.Encode(e); e.U64(r.Dir); e.String(r.Name) }
func (r *NameReq) Decode(d *wire.Dec) { r.Cred.Decode(d); r.Dir = d.U64(); r.Name = d.Str() }

// UnlinkManyReq removes several names of one directory (none a
// directory) in one change: all of them or, on the first that cannot go
// (its error names it), none. The mount sends its kept-back unlinks this
// way: one round, one set of locks and one commit on the island for a
// whole directory's files instead of one each, which a replicated island
// would otherwise run one consensus round after another under the
// directory's lock.
type UnlinkManyReq struct {
	Cred  Cred
	Dir   uint64
	Names []string
}

// MaxUnlinkMany bounds UnlinkManyReq.Names.
const MaxUnlinkMany = 1024

func (r *UnlinkManyReq) Encode(e *wire.Enc) {
	r.Cred.Encode(e)
	e.U64(r.Dir)
	e.Uvarint(uint64(len(r.Names)))
	for _, n := range r.Names {
		e.String(n)
	}
}

func (r *UnlinkManyReq) Decode(d *wire.Dec) {
	r.Cred.Decode(d)
	r.Dir = d.U64()
	n := d.Count(1)
	r.Names = make([]string, 0, n)
	for range n {
		r.Names = append(r.Names, d.Str())
	}
}

// AttrResp returns attributes.
type AttrResp struct{ Attr Attr }

func (r *AttrResp) Encode(e *wire.Enc) { r.Attr.Encode(e) }
func (r *AttrResp) Decode(d *wire.Dec) { r.Attr.Decode(d) }

// SetAttr validity bits.
const (
	SetMode uint32 = 1 << iota
	SetUID
	SetGID
	SetSize
	SetAtime
	SetAtimeNow
	SetMtime
	SetMtimeNow
	SetCtime
	// SetKillSUID clears the set-user-id bit of a file that is not a
	// directory, and its set-group-id bit when group execute is set
	// (what Linux does for chown and for writes and truncation by
	// unprivileged users), unless SetMode sets the mode itself. The
	// mount sends it for the kernel's FATTR_KILL_SUIDGID
	// (FUSE_HANDLE_KILLPRIV_V2), which saves the kernel a getattr
	// before every chown.
	SetKillSUID
	// SetAccessed records a read of the file's data: atime becomes now
	// and, unlike SetAtimeNow, ctime stays (a read is not a change),
	// and read permission is enough. The mount sends it by its atime
	// rule (fusefs.Config.Atime).
	SetAccessed
)

// SetAttrReq changes attributes selected by Valid. Truncation (SetSize)
// releases the blocks past the new size.
type SetAttrReq struct {
	Cred         Cred
	Ino          uint64
	Valid        uint32
	Mode         uint32
	UID, GID     uint32
	Size         uint64
	Atime, Mtime int64
	Ctime        int64
}

func (r *SetAttrReq) Encode(e *wire.Enc) {
	r.Cred.Encode(e)
	e.U64(r.Ino)
	e.U32(r.Valid)
	e.U32(r.Mode)
	e.U32(r.UID)
	e.U32(r.GID)
	e.U64(r.Size)
	e.I64(r.Atime)
	e.I64(r.Mtime)
	e.I64(r.Ctime)
}

func (r *SetAttrReq) Decode(d *wire.Dec) {
	r.Cred.Decode(d)
	r.Ino, r.Valid, r.Mode, r.UID, r.GID = d.U64(), d.U32(), d.U32(), d.U32(), d.U32()
	r.Size, r.Atime, r.Mtime, r.Ctime = d.U64(), d.I64(), d.I64(), d.I64()
}

// CreateReq creates Name in Dir: a regular file or special file (OpCreate,
// Mode's type bits choose; Rdev for devices), a directory (OpMkdir) or a
// symbolic link to Target (OpSymlink). Exclusive fails with ErrExists if
// the name exists; otherwise an existing regular file is returned with
// Existed set. Verf is the NFS exclusive-create verifier: a retried
// exclusive create with the same Verf succeeds.
type CreateReq struct {
	Cred      Cred
	Dir       uint64
	Name      string
	Mode      uint32
	Rdev      uint32
	Exclusive bool
	Verf      uint64
	Target    string
	// Lazy asks for a regular, non-exclusive file to be created without
	// waiting for the island's log to reach the disk: it is durable after
	// the next synced write to that island (the file's first commit, an
	// OpSync) and within one log sync in any case. A POSIX create need not
	// be durable before fsync; NFS CREATE must be, so gateways never set it.
	Lazy bool
	// Data is the contents of a new regular file, at most the island's
	// inline maximum: create, write and close in one request (small-file
	// ingest). It is written only when the create makes the file; when the
	// name exists the reply says Existed and the caller writes the usual
	// way. A lazy create with Data is a lazy commit too.
	Data []byte
	// Ino, when set, is the new file's inode id: one the client reserved
	// in the directory's bucket (OpAllocIno with a Count), for a create
	// it answered itself under an exclusive lease and sends later
	// (metadata write-behind). The island refuses an id it did not hand
	// out or one in use. Regular files only.
	Ino uint64
	// Set holds attribute changes the creator made before the create
	// was sent (chown, chmod, utimes kept back with it): applied to the
	// new file as a setattr by Cred right after it is made, in the same
	// commit. Only Mode, UID, GID, Atime, Mtime and Ctime (final values)
	// may be set (the times are those the client answered the create
	// with, so the file does not change when it is sent); Set.Cred and
	// Set.Ino are ignored.
	Set SetAttrReq
}

// CreateSettable are the SetAttrReq bits a create may carry in Set.
const CreateSettable = SetMode | SetUID | SetGID | SetAtime | SetMtime | SetCtime

func (r *CreateReq) Encode(e *wire.Enc) {
	r.Cred.Encode(e)
	e.U64(r.Dir)
	e.String(r.Name)
	e.U32(r.Mode)
	e.U32(r.Rdev)
	e.Bool(r.Exclusive)
	e.U64(r.Verf)
	e.String(r.Target)
	e.Bool(r.Lazy)
	e.Bytes(r.Data)
	if r.Ino != 0 || r.Set.Valid != 0 { // appended only when used: older islands refuse it
		e.U64(r.Ino)
		e.U32(r.Set.Valid)
		e.U32(r.Set.Mode)
		e.U32(r.Set.UID)
		e.U32(r.Set.GID)
		e.I64(r.Set.Atime)
		e.I64(r.Set.Mtime)
		e.I64(r.Set.Ctime)
	}
}

func (r *CreateReq) Decode(d *wire.Dec) {
	r.Cred.Decode(d)
	r.Dir, r.Name, r.Mode, r.Rdev = d.U64(), d.Str(), d.U32(), d.U32()
	r.Exclusive, r.Verf, r.Target, r.Lazy = d.Bool(), d.U64(), d.Str(), d.Bool()
	r.Data = d.Bytes()
	if d.More() { // newer senders: a reserved id and changes made before
		r.Ino, r.Set.Valid = d.U64(), d.U32()
		r.Set.Mode, r.Set.UID, r.Set.GID = d.U32(), d.U32(), d.U32()
		r.Set.Atime, r.Set.Mtime, r.Set.Ctime = d.I64(), d.I64(), d.I64()
	}
}

// CreateResp returns the new (or existing) entry's attributes and the
// parent directory's attributes after the change (NFS wcc data).
type CreateResp struct {
	Attr    Attr
	DirAttr Attr
	Existed bool
	// Boot is the island's incarnation (see SyncResp).
	Boot uint64
}

func (r *CreateResp) Encode(e *wire.Enc) {
	r.Attr.Encode(e)
	r.DirAttr.Encode(e)
	e.Bool(r.Existed)
	e.U64(r.Boot)
}

func (r *CreateResp) Decode(d *wire.Dec) {
	r.Attr.Decode(d)
	r.DirAttr.Decode(d)
	r.Existed, r.Boot = d.Bool(), d.U64()
}

// SyncResp answers OpSync. Boot is the island's incarnation: it changes
// when the island restarts after a crash (a clean shutdown syncs
// everything and keeps it), so a client that holds lazily acknowledged
// changes (CreateReq.Lazy, CommitReq.Lazy) learns whether they may have
// been lost before this sync covered them.
type SyncResp struct {
	Boot uint64
	// Adopted are incarnations of other islands whose records of a
	// table entry this island took over (a move): a lazy change one of
	// them acknowledged is durable here (an optional tail).
	Adopted []uint64
}

func (r *SyncResp) Encode(e *wire.Enc) {
	e.U64(r.Boot)
	if len(r.Adopted) > 0 {
		e.Uvarint(uint64(len(r.Adopted)))
		for _, b := range r.Adopted {
			e.U64(b)
		}
	}
}

func (r *SyncResp) Decode(d *wire.Dec) {
	r.Boot = d.U64()
	if d.More() {
		n := d.Count(8)
		r.Adopted = make([]uint64, n)
		for k := range n {
			r.Adopted[k] = d.U64()
		}
	}
}

// ReadlinkResp returns a symlink's target.
type ReadlinkResp struct{ Target string }

func (r *ReadlinkResp) Encode(e *wire.Enc) { e.String(r.Target) }
func (r *ReadlinkResp) Decode(d *wire.Dec) { r.Target = d.Str() }

// Rename flags.
const (
	RenameNoReplace uint32 = 1 << iota
	RenameExchange
)

// RenameReq moves SrcDir/SrcName to DstDir/DstName with POSIX semantics.
type RenameReq struct {
	Cred    Cred
	SrcDir  uint64
	SrcName string
	DstDir  uint64
	DstName string
	Flags   uint32
}

func (r *RenameReq) Encode(e *wire.Enc) {
	r.Cred.Encode(e)
	e.U64(r.SrcDir)
	e.String(r.SrcName)
	e.U64(r.DstDir)
	e.String(r.DstName)
	e.U32(r.Flags)
}

func (r *RenameReq) Decode(d *wire.Dec) {
	r.Cred.Decode(d)
	r.SrcDir, r.SrcName, r.DstDir, r.DstName, r.Flags = d.U64(), d.Str(), d.U64(), d.Str(), d.U32()
}

// LinkReq makes Dir/Name a new hard link to Ino.
type LinkReq struct {
	Cred Cred
	Ino  uint64
	Dir  uint64
	Name string
}

func (r *LinkReq) Encode(e *wire.Enc) { r.Cred.Encode(e); e.U64(r.Ino); e.U64(r.Dir); e.String(r.Name) }
func (r *LinkReq) Decode(d *wire.Dec) {
	r.Cred.Decode(d)
	r.Ino, r.Dir, r.Name = d.U64(), d.U64(), d.Str()
}

// ReaddirReq reads entries of Dir after Cookie (0 = from the start).
// Cookies are stable: an entry keeps its cookie for its lifetime, so a
// listing resumed after concurrent changes neither repeats nor skips
// entries that stayed. "." and ".." are included with cookies 1 and 2.
type ReaddirReq struct {
	Cred       Cred
	Dir        uint64
	Cookie     uint64
	MaxEntries uint32
	Plus       bool // include attributes of entries held by this island
}

func (r *ReaddirReq) Encode(e *wire.Enc) {
	r.Cred.Encode(e)
	e.U64(r.Dir)
	e.U64(r.Cookie)
	e.U32(r.MaxEntries)
	e.Bool(r.Plus)
}

func (r *ReaddirReq) Decode(d *wire.Dec) {
	r.Cred.Decode(d)
	r.Dir, r.Cookie, r.MaxEntries, r.Plus = d.U64(), d.U64(), d.U32(), d.Bool()
}

// Dirent is one directory entry.
type Dirent struct {
	Name    string
	Ino     uint64
	Type    uint32 // Mode type bits
	Cookie  uint64
	HasAttr bool
	Attr    Attr
}

// ReaddirResp is one page of a listing.
type ReaddirResp struct {
	DirAttr Attr
	Entries []Dirent
	EOF     bool
}

func (r *ReaddirResp) Encode(e *wire.Enc) {
	r.DirAttr.Encode(e)
	e.Uvarint(uint64(len(r.Entries)))
	for i := range r.Entries {
		en := &r.Entries[i]
		e.String(en.Name)
		e.U64(en.Ino)
		e.U32(en.Type)
		e.U64(en.Cookie)
		e.Bool(en.HasAttr)
		if en.HasAttr {
			en.Attr.Encode(e)
		}
	}
	e.Bool(r.EOF)
}

func (r *ReaddirResp) Decode(d *wire.Dec) {
	r.DirAttr.Decode(d)
	n := d.Count(22)
	r.Entries = make([]Dirent, n)
	for i := range r.Entries {
		en := &r.Entries[i]
		en.Name, en.Ino, en.Type, en.Cookie, en.HasAttr = d.Str(), d.U64(), d.U32(), d.U64(), d.Bool()
		if en.HasAttr {
			en.Attr.Decode(d)
		}
	}
	r.EOF = d.Bool()
}

// Xattr flags (setxattr).
const (
	XattrCreate  uint32 = 1
	XattrReplace uint32 = 2
)

// XattrReq gets, sets or removes attribute Name of Ino. Only the "user."
// namespace is stored; "user.atoll.policy" is the redundancy policy.
type XattrReq struct {
	Cred  Cred
	Ino   uint64
	Name  string
	Value []byte
	Flags uint32
}

func (r *XattrReq) Encode(e *wire.Enc) {
	r.Cred.Encode(e)
	e.U64(r.Ino)
	e.String(r.Name)
	e.Bytes(r.Value)
	e.U32(r.Flags)
}

func (r *XattrReq) Decode(d *wire.Dec) {
	r.Cred.Decode(d)
	r.Ino, r.Name, r.Value, r.Flags = d.U64(), d.Str(), append([]byte(nil), d.Bytes()...), d.U32()
}

// XattrResp returns a value (get) or names (list).
type XattrResp struct {
	Value []byte
	Names []string
}

func (r *XattrResp) Encode(e *wire.Enc) {
	e.Bytes(r.Value)
	e.Uvarint(uint64(len(r.Names)))
	for _, n := range r.Names {
		e.String(n)
	}
}

func (r *XattrResp) Decode(d *wire.Dec) {
	r.Value = append([]byte(nil), d.Bytes()...)
	n := d.Count(1)
	r.Names = make([]string, n)
	for i := range r.Names {
		r.Names[i] = d.Str()
	}
}

// AccessReq checks access (R=4, W=2, X=1 bits in Mask) for Cred.
type AccessReq struct {
	Cred Cred
	Ino  uint64
	Mask uint32
}

func (r *AccessReq) Encode(e *wire.Enc) { r.Cred.Encode(e); e.U64(r.Ino); e.U32(r.Mask) }
func (r *AccessReq) Decode(d *wire.Dec) { r.Cred.Decode(d); r.Ino, r.Mask = d.U64(), d.U32() }

// Block is one entry of a file's block map: block Index holds the encoded
// layout.Pointer Ptr (empty Ptr = hole).
type Block struct {
	Index uint64
	Ptr   []byte
}

func encodeBlocks(e *wire.Enc, bs []Block) {
	e.Uvarint(uint64(len(bs)))
	for _, b := range bs {
		e.U64(b.Index)
		e.Bytes(b.Ptr)
	}
}

func decodeBlocks(d *wire.Dec) []Block {
	n := d.Count(9)
	bs := make([]Block, n)
	for i := range bs {
		bs[i].Index = d.U64()
		bs[i].Ptr = append([]byte(nil), d.Bytes()...)
	}
	return bs
}

// ReadMapReq asks for the attributes and the block map of Ino for blocks
// [First, First+Count) (Count 0 = all).
type ReadMapReq struct {
	Cred  Cred
	Ino   uint64
	First uint64
	Count uint64
}

func (r *ReadMapReq) Encode(e *wire.Enc) {
	r.Cred.Encode(e)
	e.U64(r.Ino)
	e.U64(r.First)
	e.U64(r.Count)
}
func (r *ReadMapReq) Decode(d *wire.Dec) {
	r.Cred.Decode(d)
	r.Ino, r.First, r.Count = d.U64(), d.U64(), d.U64()
}

// ReadMapResp returns the inline data (when Attr.Inline) or the blocks.
type ReadMapResp struct {
	Attr   Attr
	Inline []byte
	Blocks []Block
	// Tokens, optional (absent on the wire when empty), are given only to
	// a key limited to identities: Tokens[i] is the read token
	// (auth.ReadToken) of the block Blocks[i] points to, without which
	// storage servers refuse that key another log's fragments.
	Tokens [][]byte
}

func (r *ReadMapResp) Encode(e *wire.Enc) {
	r.Attr.Encode(e)
	e.Bytes(r.Inline)
	encodeBlocks(e, r.Blocks)
	if len(r.Tokens) > 0 {
		e.Uvarint(uint64(len(r.Tokens)))
		for _, t := range r.Tokens {
			e.Bytes(t)
		}
	}
}
func (r *ReadMapResp) Decode(d *wire.Dec) {
	r.Attr.Decode(d)
	r.Inline = append([]byte(nil), d.Bytes()...)
	r.Blocks = decodeBlocks(d)
	if d.More() {
		r.Tokens = make([][]byte, d.Count(1))
		for i := range r.Tokens {
			r.Tokens[i] = append([]byte(nil), d.Bytes()...)
		}
	}
}

// FileWrite is one file's delta in a commit: the new size, the data
// (inline bytes, or blocks whose pointers replace the old ones), and the
// modification time. SetInline with empty Inline and no Blocks truncates
// inline data; an inline file that gets Blocks stops being inline.
type FileWrite struct {
	Ino       uint64
	Size      uint64
	Mtime     int64
	SetInline bool
	Inline    []byte
	Blocks    []Block
}

// CommitReq applies a batch of file deltas atomically (all inodes belong
// to this island). Pointers must be durable before the commit is sent.
type CommitReq struct {
	Cred   Cred
	Writes []FileWrite
	// Lazy asks the island to apply the commit without waiting for its log
	// to reach the disk (close on the FUSE mount: POSIX close is no
	// durability promise, fsync is). The commit is visible at once and
	// durable after the next synced write to that island (OpSync, any
	// synced commit) and within one log sync in any case. Pointers must be
	// durable before a lazy commit too.
	Lazy bool
}

func (r *CommitReq) Encode(e *wire.Enc) {
	r.Cred.Encode(e)
	e.Uvarint(uint64(len(r.Writes)))
	for i := range r.Writes {
		w := &r.Writes[i]
		e.U64(w.Ino)
		e.U64(w.Size)
		e.I64(w.Mtime)
		e.Bool(w.SetInline)
		e.Bytes(w.Inline)
		encodeBlocks(e, w.Blocks)
	}
	e.Bool(r.Lazy)
}

func (r *CommitReq) Decode(d *wire.Dec) {
	r.Cred.Decode(d)
	n := d.Count(27)
	r.Writes = make([]FileWrite, n)
	for i := range r.Writes {
		w := &r.Writes[i]
		w.Ino, w.Size, w.Mtime, w.SetInline = d.U64(), d.U64(), d.I64(), d.Bool()
		w.Inline = append([]byte(nil), d.Bytes()...)
		w.Blocks = decodeBlocks(d)
	}
	r.Lazy = d.Bool()
}

// CommitResp returns each written file's attributes after the commit.
type CommitResp struct {
	Attrs []Attr
	Boot  uint64 // the island's incarnation (see SyncResp)
}

func (r *CommitResp) Encode(e *wire.Enc) {
	e.Uvarint(uint64(len(r.Attrs)))
	for i := range r.Attrs {
		r.Attrs[i].Encode(e)
	}
	e.U64(r.Boot)
}

func (r *CommitResp) Decode(d *wire.Dec) {
	n := d.Count(60)
	r.Attrs = make([]Attr, n)
	for i := range r.Attrs {
		r.Attrs[i].Decode(d)
	}
	r.Boot = d.U64()
}

// CleanDelta moves block Index of Ino from Old to New only if the block
// still points at Old (Zebra's conditional update).
type CleanDelta struct {
	Ino   uint64
	Index uint64
	Old   []byte
	New   []byte
}

// CleanReq is a batch of cleaner deltas.
type CleanReq struct{ Deltas []CleanDelta }

func (r *CleanReq) Encode(e *wire.Enc) {
	e.Uvarint(uint64(len(r.Deltas)))
	for _, c := range r.Deltas {
		e.U64(c.Ino)
		e.U64(c.Index)
		e.Bytes(c.Old)
		e.Bytes(c.New)
	}
}

func (r *CleanReq) Decode(d *wire.Dec) {
	n := d.Count(18)
	r.Deltas = make([]CleanDelta, n)
	for i := range r.Deltas {
		c := &r.Deltas[i]
		c.Ino, c.Index = d.U64(), d.U64()
		c.Old = append([]byte(nil), d.Bytes()...)
		c.New = append([]byte(nil), d.Bytes()...)
	}
}

// CleanResp says which deltas were applied (false: rejected, the copy is dead).
type CleanResp struct{ Applied []bool }

func (r *CleanResp) Encode(e *wire.Enc) {
	e.Uvarint(uint64(len(r.Applied)))
	for _, a := range r.Applied {
		e.Bool(a)
	}
}

func (r *CleanResp) Decode(d *wire.Dec) {
	n := d.Count(1)
	r.Applied = make([]bool, n)
	for i := range r.Applied {
		r.Applied[i] = d.Bool()
	}
}

// StatFSResp reports an island's inode usage.
type StatFSResp struct {
	Inodes uint64
	Bytes  uint64 // logical bytes of files held
}

func (r *StatFSResp) Encode(e *wire.Enc) { e.U64(r.Inodes); e.U64(r.Bytes) }
func (r *StatFSResp) Decode(d *wire.Dec) { r.Inodes, r.Bytes = d.U64(), d.U64() }

// LiveReq asks for one page of an island's per-stripe live-byte counters,
// in (Log, Seq) order, starting after (AfterLog, AfterSeq) unless First.
type LiveReq struct {
	First    bool
	AfterLog uint64
	AfterSeq uint64
	Limit    uint32
}

func (r *LiveReq) Encode(e *wire.Enc) {
	e.Bool(r.First)
	e.U64(r.AfterLog)
	e.U64(r.AfterSeq)
	e.U32(r.Limit)
}
func (r *LiveReq) Decode(d *wire.Dec) {
	r.First, r.AfterLog, r.AfterSeq, r.Limit = d.Bool(), d.U64(), d.U64(), d.U32()
}

// StripeLive is one stripe's live bytes in one island (0: every block it
// held was overwritten, truncated or unlinked).
type StripeLive struct {
	Log, Seq uint64
	Live     int64
}

// LiveResp is one page of live-byte counters; More says a later page exists.
type LiveResp struct {
	Stripes []StripeLive
	More    bool
}

func (r *LiveResp) Encode(e *wire.Enc) {
	e.Uvarint(uint64(len(r.Stripes)))
	for _, s := range r.Stripes {
		e.U64(s.Log)
		e.U64(s.Seq)
		e.I64(s.Live)
	}
	e.Bool(r.More)
}

func (r *LiveResp) Decode(d *wire.Dec) {
	n := d.Count(24)
	r.Stripes = make([]StripeLive, n)
	for i := range r.Stripes {
		r.Stripes[i] = StripeLive{Log: d.U64(), Seq: d.U64(), Live: d.I64()}
	}
	r.More = d.Bool()
}

// ForgetReq names stripes the cleaner deleted: an island drops their live
// counters if they are zero (no block of it points there; none can again,
// since stripe ids are never reused), so counters do not pile up forever.
type ForgetReq struct{ Stripes []StripeLive } // Live unused

// MaxForget bounds the stripes of one ForgetReq.
const MaxForget = 10000

func (r *ForgetReq) Encode(e *wire.Enc) {
	e.Uvarint(uint64(len(r.Stripes)))
	for _, s := range r.Stripes {
		e.U64(s.Log)
		e.U64(s.Seq)
	}
}

func (r *ForgetReq) Decode(d *wire.Dec) {
	n := d.Count(16)
	r.Stripes = make([]StripeLive, n)
	for i := range r.Stripes {
		r.Stripes[i] = StripeLive{Log: d.U64(), Seq: d.U64()}
	}
}

// ForgetResp says how many counters were dropped and how many were kept
// because they were not zero.
type ForgetResp struct{ Dropped, Kept uint32 }

func (r *ForgetResp) Encode(e *wire.Enc) { e.U32(r.Dropped); e.U32(r.Kept) }
func (r *ForgetResp) Decode(d *wire.Dec) { r.Dropped, r.Kept = d.U32(), d.U32() }

// RefsReq asks which blocks of an island point into stripe (Log, Seq).
type RefsReq struct{ Log, Seq uint64 }

func (r *RefsReq) Encode(e *wire.Enc) { e.U64(r.Log); e.U64(r.Seq) }
func (r *RefsReq) Decode(d *wire.Dec) { r.Log, r.Seq = d.U64(), d.U64() }

// BlockRef is one block pointing into a stripe: block Index of Ino holds
// the encoded pointer Ptr.
type BlockRef struct {
	Ino   uint64
	Index uint64
	Ptr   []byte
}

// RefsResp lists the blocks pointing into a stripe.
type RefsResp struct{ Refs []BlockRef }

func (r *RefsResp) Encode(e *wire.Enc) {
	e.Uvarint(uint64(len(r.Refs)))
	for _, b := range r.Refs {
		e.U64(b.Ino)
		e.U64(b.Index)
		e.Bytes(b.Ptr)
	}
}

func (r *RefsResp) Decode(d *wire.Dec) {
	n := d.Count(17)
	r.Refs = make([]BlockRef, n)
	for i := range r.Refs {
		b := &r.Refs[i]
		b.Ino, b.Index = d.U64(), d.U64()
		b.Ptr = append([]byte(nil), d.Bytes()...)
	}
}

// LeaseReq wraps a read (Op: OpLookup, OpGetAttr or OpReaddir, Msg its
// request) from a client session that wants a lease on the bucket it
// reads (internal/lease). The session's changes carry it as the first 8
// bytes of their wire.ReqID, so they do not break its own leases.
//
// Exclusive asks for the lease exclusive (lease.Table.GrantExclusive):
// while it holds one, the session may keep attribute changes of the
// bucket back and send them merged, flushing them before it acknowledges
// the lease's break. It is appended only when set, so a request without
// it reads as before.
type LeaseReq struct {
	Session   uint64
	Op        uint16
	Msg       []byte
	Exclusive bool
}

func (r *LeaseReq) Encode(e *wire.Enc) {
	e.U64(r.Session)
	e.U16(r.Op)
	e.Bytes(r.Msg)
	if r.Exclusive {
		e.Bool(true)
	}
}

func (r *LeaseReq) Decode(d *wire.Dec) {
	r.Session, r.Op, r.Msg = d.U64(), d.U16(), d.Bytes()
	if d.More() {
		r.Exclusive = d.Bool()
	}
}

// LeaseResp answers OpLease: the read's answer (Msg) or its error (Status
// nonzero, Error its text: a lookup of a missing name is leased too), and
// whether a lease was granted, for how long (Term, ns, counted by the
// client from when it sent the request) and at which break number of the
// session (Seq: a client that already received a later break must not
// use the grant). Exclusive says the lease granted is exclusive; Table
// names the island's lease table that granted it (lease.Table.ID), whose
// polls renew it (PollResp.Hold). Both are appended only when set.
type LeaseResp struct {
	Granted   bool
	Seq       uint64
	Term      int64
	Status    uint32
	Error     string
	Msg       []byte
	Exclusive bool
	Table     uint64
}

func (r *LeaseResp) Encode(e *wire.Enc) {
	e.Bool(r.Granted)
	e.U64(r.Seq)
	e.I64(r.Term)
	e.U32(r.Status)
	e.String(r.Error)
	e.Bytes(r.Msg)
	if r.Exclusive || r.Table != 0 {
		e.Bool(r.Exclusive)
	}
	if r.Table != 0 {
		e.U64(r.Table)
	}
}

func (r *LeaseResp) Decode(d *wire.Dec) {
	r.Granted, r.Seq, r.Term, r.Status, r.Error, r.Msg = d.Bool(), d.U64(), d.I64(), d.U32(), d.Str(), d.Bytes()
	if d.More() {
		r.Exclusive = d.Bool()
	}
	if d.More() {
		r.Table = d.U64()
	}
}

// Err returns the read's error (nil when Status is 0), with the sentinel
// of its status.
func (r *LeaseResp) Err() error {
	if r.Status == 0 {
		return nil
	}
	return RemoteErr(&wire.RemoteError{Op: OpLease, Status: r.Status, Message: r.Error})
}

// PollReq asks for the breaks of a session's leases after Ack (which
// acknowledges every break up to it), waiting at most WaitMs.
type PollReq struct {
	Session, Ack uint64
	WaitMs       uint32
}

func (r *PollReq) Encode(e *wire.Enc) { e.U64(r.Session); e.U64(r.Ack); e.U32(r.WaitMs) }
func (r *PollReq) Decode(d *wire.Dec) { r.Session, r.Ack, r.WaitMs = d.U64(), d.U64(), d.U32() }

// LeaseBreak ends a session's lease on Bucket; Seq numbers the session's
// breaks.
type LeaseBreak struct {
	Bucket uint32
	Seq    uint64
}

// PollResp lists breaks (none when the wait ran out). A nonzero HoldMs
// says the poll, as it arrived, renewed for one term every lease of the
// session that lease table Table granted within HoldMs (lease.Table.Poll);
// both are appended only when set, and a poll without them renewed
// nothing.
type PollResp struct {
	Breaks []LeaseBreak
	HoldMs uint32
	Table  uint64
}

func (r *PollResp) Encode(e *wire.Enc) {
	e.Uvarint(uint64(len(r.Breaks)))
	for _, b := range r.Breaks {
		e.U32(b.Bucket)
		e.U64(b.Seq)
	}
	if r.HoldMs != 0 {
		e.U32(r.HoldMs)
		e.U64(r.Table)
	}
}

func (r *PollResp) Decode(d *wire.Dec) {
	n := d.Count(12)
	r.Breaks = make([]LeaseBreak, 0, n)
	for range n {
		r.Breaks = append(r.Breaks, LeaseBreak{Bucket: d.U32(), Seq: d.U64()})
	}
	if d.More() {
		r.HoldMs, r.Table = d.U32(), d.U64()
	}
}
