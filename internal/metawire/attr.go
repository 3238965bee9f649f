package metawire

import "github.com/atoll-fs/atoll/internal/wire"

// File type bits of Attr.Mode (POSIX S_IFMT values).
const (
	ModeType  = 0o170000
	ModeDir   = 0o040000
	ModeFile  = 0o100000
	ModeLink  = 0o120000
	ModeFIFO  = 0o010000
	ModeSock  = 0o140000
	ModeChar  = 0o020000
	ModeBlock = 0o060000
	ModePerm  = 0o7777 // permission, setuid, setgid and sticky bits
)

// Limits enforced by islands.
const (
	MaxNameLen    = 255
	MaxPathLen    = 4096
	MaxSymlinkLen = 4096
	MaxXattrName  = 255
	MaxXattrValue = 64 << 10
	MaxLinks      = 65000
)

// Cred is the caller's identity used for permission checks.
type Cred struct {
	UID, GID uint32
	Groups   []uint32
}

// InGroup reports whether c's primary or supplementary groups hold gid.
func (c *Cred) InGroup(gid uint32) bool {
	if c.GID == gid {
		return true
	}
	for _, g := range c.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// MayAccess applies the POSIX permission bits of a to c for mask (R=4,
// W=2, X=1): the islands' check, which a client holding a's attributes
// under a lease can make itself. Root passes read and write always, and
// execute on directories or when any execute bit is set.
func MayAccess(a *Attr, c *Cred, mask uint32) bool {
	if mask == 0 {
		return true
	}
	if c.UID == 0 {
		if mask&1 == 0 || a.IsDir() {
			return true
		}
		return a.Mode&0o111 != 0
	}
	var bits uint32
	switch {
	case c.UID == a.UID:
		bits = a.Mode >> 6 & 7
	case c.InGroup(a.GID):
		bits = a.Mode >> 3 & 7
	default:
		bits = a.Mode & 7
	}
	return bits&mask == mask
}

// KillSetID is mode with the set-user-id bit cleared, and the
// set-group-id bit when group execute is set, as Linux does on chown and
// on writes and truncation by the unprivileged.
func KillSetID(mode uint32) uint32 {
	mode &^= ModeSetUID
	if mode&0o010 != 0 {
		mode &^= ModeSetGID
	}
	return mode
}

// The set-id and sticky bits of a mode.
const (
	ModeSetUID = 0o4000
	ModeSetGID = 0o2000
	ModeSticky = 0o1000
)

// NewGID is the group of an inode c creates in a directory of mode
// dirMode and group dirGID: the directory's when it is set-group-id,
// else c's. The islands' create rule; a client creating under a lease
// applies it too.
func NewGID(dirMode, dirGID uint32, c *Cred) uint32 {
	if dirMode&ModeSetGID != 0 {
		return dirGID
	}
	return c.GID
}

// NewFilePerm is the permission bits of a file c creates with perm in a
// directory of mode dirMode, the file's group being gid (NewGID): a
// group-executable set-group-id file made by c, neither root nor in gid,
// in a set-group-id directory loses the set-group-id bit.
func NewFilePerm(perm, dirMode, gid uint32, c *Cred) uint32 {
	if perm&(ModeSetGID|0o010) == ModeSetGID|0o010 && dirMode&ModeSetGID != 0 && c.UID != 0 && !c.InGroup(gid) {
		perm &^= ModeSetGID
	}
	return perm
}

// StickyApplies reports whether removing entries of dir by c depends on
// who owns them (sticky directory, c neither root nor its owner).
func StickyApplies(dir *Attr, c *Cred) bool {
	return dir.Mode&ModeSticky != 0 && c.UID != 0 && c.UID != dir.UID
}

// StickyDenies reports whether the sticky bit of dir forbids c to remove
// or rename an entry whose inode is owned by victimUID.
func StickyDenies(dir *Attr, c *Cred, victimUID uint32) bool {
	return StickyApplies(dir, c) && c.UID != victimUID
}

// Credentialed is a request that carries the identity it acts as
// (islands check it against the connection key's scope).
type Credentialed interface{ Credential() *Cred }

func (r *InoReq) Credential() *Cred        { return &r.Cred }
func (r *NameReq) Credential() *Cred       { return &r.Cred }
func (r *UnlinkManyReq) Credential() *Cred { return &r.Cred }
func (r *SetAttrReq) Credential() *Cred    { return &r.Cred }
func (r *CreateReq) Credential() *Cred     { return &r.Cred }
func (r *RenameReq) Credential() *Cred     { return &r.Cred }
func (r *LinkReq) Credential() *Cred       { return &r.Cred }
func (r *ReaddirReq) Credential() *Cred    { return &r.Cred }
func (r *XattrReq) Credential() *Cred      { return &r.Cred }
func (r *AccessReq) Credential() *Cred     { return &r.Cred }
func (r *ReadMapReq) Credential() *Cred    { return &r.Cred }
func (r *CommitReq) Credential() *Cred     { return &r.Cred }
func (r *LockReq) Credential() *Cred       { return &r.Cred }

// Root is the superuser credential.
var Root = Cred{}

func (c *Cred) Encode(e *wire.Enc) {
	e.U32(c.UID)
	e.U32(c.GID)
	e.Uvarint(uint64(len(c.Groups)))
	for _, g := range c.Groups {
		e.U32(g)
	}
}

func (c *Cred) Decode(d *wire.Dec) {
	c.UID, c.GID = d.U32(), d.U32()
	n := d.Count(4)
	c.Groups = make([]uint32, n)
	for i := range c.Groups {
		c.Groups[i] = d.U32()
	}
}

// Attr are a file's attributes.
type Attr struct {
	Ino     uint64
	Gen     uint32 // generation: bumped when an inode number is reused
	Mode    uint32 // type and permission bits
	Nlink   uint32
	UID     uint32
	GID     uint32
	Rdev    uint32
	Size    uint64
	Blocks  uint64 // 512-byte units allocated (for stat)
	Atime   int64  // nanoseconds since the epoch
	Mtime   int64
	Ctime   int64
	Version uint64 // bumped by every data change; caches compare it
	// BlockSize is the file's block size (from its policy) for data files.
	BlockSize uint32
	// Policy is the file's redundancy policy text (files) or the policy
	// new files inherit (directories; "" = cluster default).
	Policy string
	Inline bool // data lives in the inode
}

func (a *Attr) IsDir() bool     { return a.Mode&ModeType == ModeDir }
func (a *Attr) IsRegular() bool { return a.Mode&ModeType == ModeFile }
func (a *Attr) IsSymlink() bool { return a.Mode&ModeType == ModeLink }

func (a *Attr) Encode(e *wire.Enc) {
	e.U64(a.Ino)
	e.U32(a.Gen)
	e.U32(a.Mode)
	e.U32(a.Nlink)
	e.U32(a.UID)
	e.U32(a.GID)
	e.U32(a.Rdev)
	e.U64(a.Size)
	e.U64(a.Blocks)
	e.I64(a.Atime)
	e.I64(a.Mtime)
	e.I64(a.Ctime)
	e.U64(a.Version)
	e.U32(a.BlockSize)
	e.String(a.Policy)
	e.Bool(a.Inline)
}

func (a *Attr) Decode(d *wire.Dec) {
	a.Ino, a.Gen, a.Mode, a.Nlink = d.U64(), d.U32(), d.U32(), d.U32()
	a.UID, a.GID, a.Rdev = d.U32(), d.U32(), d.U32()
	a.Size, a.Blocks = d.U64(), d.U64()
	a.Atime, a.Mtime, a.Ctime = d.I64(), d.I64(), d.I64()
	a.Version, a.BlockSize = d.U64(), d.U32()
	a.Policy = d.Str()
	a.Inline = d.Bool()
}

// InodeNamer is a request that names inodes (directories it works in,
// files it reads or changes): islands serve a request of a key confined
// to a subtree only when every inode it names lies inside it.
type InodeNamer interface{ NamedInodes() []uint64 }

func (r *InoReq) NamedInodes() []uint64        { return []uint64{r.Ino} }
func (r *NameReq) NamedInodes() []uint64       { return []uint64{r.Dir} }
func (r *UnlinkManyReq) NamedInodes() []uint64 { return []uint64{r.Dir} }
func (r *SetAttrReq) NamedInodes() []uint64    { return []uint64{r.Ino} }
func (r *CreateReq) NamedInodes() []uint64     { return []uint64{r.Dir} }
func (r *RenameReq) NamedInodes() []uint64     { return []uint64{r.SrcDir, r.DstDir} }
func (r *LinkReq) NamedInodes() []uint64       { return []uint64{r.Ino, r.Dir} }
func (r *ReaddirReq) NamedInodes() []uint64    { return []uint64{r.Dir} }
func (r *XattrReq) NamedInodes() []uint64      { return []uint64{r.Ino} }
func (r *AccessReq) NamedInodes() []uint64     { return []uint64{r.Ino} }
func (r *ReadMapReq) NamedInodes() []uint64    { return []uint64{r.Ino} }
func (r *LockReq) NamedInodes() []uint64       { return []uint64{r.Ino} }
func (r *CommitReq) NamedInodes() []uint64 {
	out := make([]uint64, len(r.Writes))
	for i := range r.Writes {
		out[i] = r.Writes[i].Ino
	}
	return out
}
