package meta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
	"github.com/cockroachdb/pebble/v2"
)

// Key tags (see the package doc). Namespace tags are below 0x80; the
// island-global area is bucket 0xFFFFFFFF with tag 0xFF.
const (
	tagInode  = 'i'
	tagDirent = 'd'
	tagCookie = 'c'
	tagBlock  = 'b'
	tagXattr  = 'x'
	tagSeq    = 's'
	tagGlobal = 0xFF

	gMeta     = 'M'
	gIntent   = 'I'
	gPrepared = 'P'
	gLive     = 'L'
	gStats    = 'S'
	gRef      = 'R'
	gBoot     = 'B' // incarnation (8 bytes) + 1 if the island closed cleanly
	gDedup    = 'Q' // request id (16) -> applied at (i64 ns): see dedup.go
	gApplied  = 'A' // replicated islands: last raft index applied (internal/replica.AppliedKey)
	gLeases   = 'G' // present once the island granted a lease (lease.go: the next incarnation waits a term)
)

const recordVersion = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks a record that fails its checksum or does not decode.
var errCorrupt = fmt.Errorf("%w: corrupt record", metawire.ErrIO)

func bucketPrefix(b uint32, tag byte) []byte {
	k := make([]byte, 5, 32)
	binary.BigEndian.PutUint32(k, b)
	k[4] = tag
	return k
}

func inodeKey(ino namespace.Ino) []byte {
	return binary.BigEndian.AppendUint64(bucketPrefix(ino.Bucket(), tagInode), uint64(ino))
}

func direntPrefix(dir namespace.Ino) []byte {
	return binary.BigEndian.AppendUint64(bucketPrefix(dir.Bucket(), tagDirent), uint64(dir))
}

func direntKey(dir namespace.Ino, name string) []byte {
	return append(direntPrefix(dir), name...)
}

func cookiePrefix(dir namespace.Ino) []byte {
	return binary.BigEndian.AppendUint64(bucketPrefix(dir.Bucket(), tagCookie), uint64(dir))
}

func cookieKey(dir namespace.Ino, cookie uint64) []byte {
	return binary.BigEndian.AppendUint64(cookiePrefix(dir), cookie)
}

func blockPrefix(ino namespace.Ino) []byte {
	return binary.BigEndian.AppendUint64(bucketPrefix(ino.Bucket(), tagBlock), uint64(ino))
}

func blockKey(ino namespace.Ino, index uint64) []byte {
	return binary.BigEndian.AppendUint64(blockPrefix(ino), index)
}

// blockIndex returns the block index of a blockKey.
func blockIndex(key []byte) uint64 { return binary.BigEndian.Uint64(key[len(key)-8:]) }

func xattrPrefix(ino namespace.Ino) []byte {
	return binary.BigEndian.AppendUint64(bucketPrefix(ino.Bucket(), tagXattr), uint64(ino))
}

func xattrKey(ino namespace.Ino, name string) []byte {
	return append(xattrPrefix(ino), name...)
}

func seqKey(bucket uint32) []byte { return bucketPrefix(bucket, tagSeq) }

func globalKey(tag byte) []byte {
	return []byte{0xFF, 0xFF, 0xFF, 0xFF, tagGlobal, tag}
}

func intentKey(tx metawire.TxID) []byte   { return append(globalKey(gIntent), tx[:]...) }
func preparedKey(tx metawire.TxID) []byte { return append(globalKey(gPrepared), tx[:]...) }

func liveKey(s fragment.StripeID) []byte {
	k := binary.BigEndian.AppendUint64(globalKey(gLive), s.Log)
	return binary.BigEndian.AppendUint64(k, s.Seq)
}

// stripeRefPrefix is the prefix of the reverse index of stripe s: one
// empty-valued key per block pointing into it, so the cleaner finds the
// blocks to move without scanning every file.
func stripeRefPrefix(s fragment.StripeID) []byte {
	k := binary.BigEndian.AppendUint64(globalKey(gRef), s.Log)
	return binary.BigEndian.AppendUint64(k, s.Seq)
}

func refKey(s fragment.StripeID, ino namespace.Ino, index uint64) []byte {
	k := binary.BigEndian.AppendUint64(stripeRefPrefix(s), uint64(ino))
	return binary.BigEndian.AppendUint64(k, index)
}

// prefixEnd returns the smallest key above every key starting with p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil // p is all 0xFF: no upper bound
}

// BucketSpan returns the key range [start, end) holding every namespace
// record of buckets first..last: what a bucket migration copies.
func BucketSpan(first, last uint32) (start, end []byte) {
	start = binary.BigEndian.AppendUint32(nil, first)
	end = binary.BigEndian.AppendUint32(nil, last)
	return append(start, 0), append(end, 0x80)
}

// seal appends the CRC32C of b (which starts with the version byte).
func seal(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// open checks a sealed record and returns a decoder over its payload.
func open(v []byte) (*wire.Dec, error) {
	if len(v) < 5 || v[0] != recordVersion {
		return nil, errCorrupt
	}
	n := len(v) - 4
	if crc32.Checksum(v[:n], castagnoli) != binary.BigEndian.Uint32(v[n:]) {
		return nil, errCorrupt
	}
	return wire.NewDec(v[1:n]), nil
}

func finish(d *wire.Dec) error {
	if d.Finish() != nil {
		return errCorrupt
	}
	return nil
}

// inode is the decoded inode record.
type inode struct {
	ino        namespace.Ino
	gen        uint32
	mode       uint32
	nlink      uint32
	uid, gid   uint32
	rdev       uint32
	size       uint64
	alloc      uint64 // bytes of data blocks referenced
	atime      int64
	mtime      int64
	ctime      int64
	version    uint64
	blockSize  uint32
	policy     string
	inline     bool
	parent     namespace.Ino // directories
	path       string        // directories: creation path
	nextCookie uint64        // directories
	target     string        // symbolic links
	data       []byte        // inline files
	verf       uint64        // exclusive-create verifier
}

func (n *inode) isDir() bool  { return n.mode&metawire.ModeType == metawire.ModeDir }
func (n *inode) isReg() bool  { return n.mode&metawire.ModeType == metawire.ModeFile }
func (n *inode) isLink() bool { return n.mode&metawire.ModeType == metawire.ModeLink }
func (n *inode) typ() uint32  { return n.mode & metawire.ModeType }

func (n *inode) encode() []byte {
	e := wire.Enc{B: make([]byte, 0, 128+len(n.policy)+len(n.path)+len(n.target)+len(n.data))}
	e.U8(recordVersion)
	e.U32(n.gen)
	e.U32(n.mode)
	e.U32(n.nlink)
	e.U32(n.uid)
	e.U32(n.gid)
	e.U32(n.rdev)
	e.U64(n.size)
	e.U64(n.alloc)
	e.I64(n.atime)
	e.I64(n.mtime)
	e.I64(n.ctime)
	e.U64(n.version)
	e.U32(n.blockSize)
	e.String(n.policy)
	e.Bool(n.inline)
	e.U64(uint64(n.parent))
	e.String(n.path)
	e.U64(n.nextCookie)
	e.String(n.target)
	e.Bytes(n.data)
	e.U64(n.verf)
	return seal(e.B)
}

func decodeInode(ino namespace.Ino, v []byte) (*inode, error) {
	d, err := open(v)
	if err != nil {
		return nil, err
	}
	n := &inode{ino: ino}
	n.gen, n.mode, n.nlink, n.uid, n.gid, n.rdev = d.U32(), d.U32(), d.U32(), d.U32(), d.U32(), d.U32()
	n.size, n.alloc = d.U64(), d.U64()
	n.atime, n.mtime, n.ctime = d.I64(), d.I64(), d.I64()
	n.version, n.blockSize = d.U64(), d.U32()
	n.policy, n.inline = d.Str(), d.Bool()
	n.parent, n.path, n.nextCookie = namespace.Ino(d.U64()), d.Str(), d.U64()
	n.target = d.Str()
	// data aliases v: callers pass a value they own (get copies it) or
	// use the inode at once (fsck), so a second copy of inline data (up to
	// inline_max per inode read) is saved.
	n.data = d.Bytes()
	n.verf = d.U64()
	if err := finish(d); err != nil {
		return nil, err
	}
	if len(n.data) == 0 {
		n.data = nil
	}
	return n, nil
}

// attr converts the record to protocol attributes.
func (n *inode) attr() metawire.Attr {
	a := metawire.Attr{
		Ino: uint64(n.ino), Gen: n.gen, Mode: n.mode, Nlink: n.nlink,
		UID: n.uid, GID: n.gid, Rdev: n.rdev, Size: n.size,
		Atime: n.atime, Mtime: n.mtime, Ctime: n.ctime, Version: n.version,
		BlockSize: n.blockSize, Policy: n.policy, Inline: n.inline,
	}
	switch {
	case n.isDir():
		a.Blocks = 8
	case n.inline:
		a.Blocks = (uint64(len(n.data)) + 511) / 512
	default:
		a.Blocks = (n.alloc + 511) / 512
	}
	return a
}

// dirent is the value of a directory entry (and, with the name, of its
// cookie index record).
type dirent struct {
	ino    namespace.Ino
	typ    uint32
	cookie uint64
}

func (de dirent) encode() []byte {
	e := wire.Enc{B: make([]byte, 0, 32)}
	e.U8(recordVersion)
	e.U64(uint64(de.ino))
	e.U32(de.typ)
	e.U64(de.cookie)
	return seal(e.B)
}

func decodeDirent(v []byte) (dirent, error) {
	d, err := open(v)
	if err != nil {
		return dirent{}, err
	}
	de := dirent{ino: namespace.Ino(d.U64()), typ: d.U32(), cookie: d.U64()}
	return de, finish(d)
}

// cookieRec is the value of a cookie index record: the entry's name,
// target and type.
func encodeCookie(name string, ino namespace.Ino, typ uint32) []byte {
	e := wire.Enc{B: make([]byte, 0, 24+len(name))}
	e.U8(recordVersion)
	e.U64(uint64(ino))
	e.U32(typ)
	e.String(name)
	return seal(e.B)
}

func decodeCookie(v []byte) (name string, ino namespace.Ino, typ uint32, err error) {
	d, err := open(v)
	if err != nil {
		return "", 0, 0, err
	}
	ino, typ, name = namespace.Ino(d.U64()), d.U32(), d.Str()
	return name, ino, typ, finish(d)
}

// encodeBytes seals an opaque value (block pointers, xattr values).
func encodeBytes(b []byte) []byte {
	v := make([]byte, 0, len(b)+5)
	v = append(v, recordVersion)
	v = append(v, b...)
	return seal(v)
}

func decodeBytes(v []byte) ([]byte, error) {
	if len(v) < 5 || v[0] != recordVersion {
		return nil, errCorrupt
	}
	n := len(v) - 4
	if crc32.Checksum(v[:n], castagnoli) != binary.BigEndian.Uint32(v[n:]) {
		return nil, errCorrupt
	}
	return v[1:n], nil
}

func encodeU32(x uint32) []byte {
	return seal(binary.BigEndian.AppendUint32([]byte{recordVersion}, x))
}

func decodeU32(v []byte) (uint32, error) {
	d, err := open(v)
	if err != nil {
		return 0, err
	}
	x := d.U32()
	return x, finish(d)
}

// islandMeta is the island's identity record.
func encodeMeta(id uint32) []byte {
	e := wire.Enc{B: []byte{recordVersion}}
	e.U32(id)
	e.U32(formatVersion)
	return seal(e.B)
}

const formatVersion = 1

func decodeMeta(v []byte) (id, format uint32, err error) {
	d, err := open(v)
	if err != nil {
		return 0, 0, err
	}
	id, format = d.U32(), d.U32()
	return id, format, finish(d)
}

// Counter records (live bytes per stripe, island statistics) are vectors
// of signed 64-bit integers updated with pebble merges that add them
// element-wise, so concurrent batches never lose an update.
func encodeCounters(xs ...int64) []byte {
	e := wire.Enc{B: make([]byte, 0, 6+8*len(xs))}
	e.U8(recordVersion)
	e.Uvarint(uint64(len(xs)))
	for _, x := range xs {
		e.I64(x)
	}
	return seal(e.B)
}

func decodeCounters(v []byte) ([]int64, error) {
	d, err := open(v)
	if err != nil {
		return nil, err
	}
	n := d.Count(8)
	xs := make([]int64, n)
	for i := range xs {
		xs[i] = d.I64()
	}
	return xs, finish(d)
}

// counterMerger is the pebble merge operator ("atoll.meta.counters.v1").
var counterMerger = &pebble.Merger{
	Name: "atoll.meta.counters.v1",
	Merge: func(key, value []byte) (pebble.ValueMerger, error) {
		m := &counterSum{}
		return m, m.add(value)
	},
}

type counterSum struct{ sum []int64 }

func (m *counterSum) add(v []byte) error {
	xs, err := decodeCounters(v)
	if err != nil {
		return err
	}
	for len(m.sum) < len(xs) {
		m.sum = append(m.sum, 0)
	}
	for i, x := range xs {
		m.sum[i] += x
	}
	return nil
}

func (m *counterSum) MergeNewer(v []byte) error { return m.add(v) }
func (m *counterSum) MergeOlder(v []byte) error { return m.add(v) }
func (m *counterSum) Finish(bool) ([]byte, io.Closer, error) {
	return encodeCounters(m.sum...), nil, nil
}

// reader is what record lookups need: a DB or an indexed batch.
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

// get returns a copy of the value of key, or nil, false.
func get(r reader, key []byte) ([]byte, bool, error) {
	v, c, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", metawire.ErrIO, err)
	}
	out := append([]byte(nil), v...)
	c.Close()
	return out, true, nil
}

// readInode returns the inode record of ino, or nil if absent.
func readInode(r reader, ino namespace.Ino) (*inode, error) {
	v, ok, err := get(r, inodeKey(ino))
	if err != nil || !ok {
		return nil, err
	}
	n, err := decodeInode(ino, v)
	if err != nil {
		return nil, fmt.Errorf("inode %v: %w", ino, err)
	}
	return n, nil
}

// readDirent returns entry name of dir, or false if absent.
func readDirent(r reader, dir namespace.Ino, name string) (dirent, bool, error) {
	v, ok, err := get(r, direntKey(dir, name))
	if err != nil || !ok {
		return dirent{}, false, err
	}
	de, err := decodeDirent(v)
	if err != nil {
		return dirent{}, false, fmt.Errorf("entry %q of %v: %w", name, dir, err)
	}
	return de, true, nil
}

type writer interface {
	Set(key, value []byte, o *pebble.WriteOptions) error
	Delete(key []byte, o *pebble.WriteOptions) error
	Merge(key, value []byte, o *pebble.WriteOptions) error
	DeleteRange(start, end []byte, o *pebble.WriteOptions) error
}

func putInode(w writer, n *inode) error {
	return w.Set(inodeKey(n.ino), n.encode(), nil)
}

// pointerStripe decodes an encoded block pointer's stripe and length.
func pointerStripe(p []byte) (fragment.StripeID, uint32, error) {
	ptr, rest, err := decodePointer(p)
	if err != nil {
		return fragment.StripeID{}, 0, err
	}
	_ = rest
	return ptr.Stripe, ptr.Length, nil
}
