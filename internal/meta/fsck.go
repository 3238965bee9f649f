package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"github.com/atoll-fs/atoll/internal/filelock"

	"fmt"
	"slices"
	"sort"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
	"github.com/cockroachdb/pebble/v2"
)

// Fsck page limits.
const (
	defaultFsckPage = 1000
	maxFsckPage     = 10000
	maxFsckBytes    = 512 << 10
)

// fsckPage serves OpFsck: the records after the cursor, reduced to what
// the cross-island checker needs, plus problems the island sees in its
// own records (undecodable values, entries without their cookie record
// and the reverse, blocks or xattrs of missing inodes, records of buckets
// it does not own).
func (i *Island) fsckPage(r *metawire.FsckReq) (*metawire.FsckResp, error) {
	limit := int(r.Max)
	if limit == 0 {
		limit = defaultFsckPage
	}
	limit = min(limit, maxFsckPage)
	snap := i.db.NewSnapshot()
	defer snap.Close()
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: r.Cursor})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	resp := &metawire.FsckResp{Island: uint32(i.id)}
	tab := i.cfg.Map.Table()
	size := 0
	add := func(x metawire.FsckRecord) {
		resp.Records = append(resp.Records, x)
		size += 50 + len(x.Name)
	}
	problem := func(k []byte, format string, args ...any) {
		add(metawire.FsckRecord{Kind: metawire.FsckProblem,
			Name: fmt.Sprintf("island %d key %x: ", i.id, truncKey(k)) + fmt.Sprintf(format, args...)})
	}
	// A table entry moving away or in: records of it in a bucket this
	// island does not own are the other island's copy (the destination's
	// before the flip, the source's until it drops them), not a problem,
	// and counted once, where the table says.
	var moving []bucketRange
	for _, tag := range append([]byte{gMoving}, importTags...) {
		m, err := i.marks(tag)
		if err != nil {
			return nil, err
		}
		for _, mk := range m {
			moving = append(moving, mk.r)
		}
	}
	var last []byte
	ok := it.First()
	for ; ok && len(resp.Records) < limit && size < maxFsckBytes; ok = it.Next() {
		k := it.Key()
		last = append(last[:0], k...)
		if len(k) >= 5 && k[4] < 0x80 && tab.Lookup(binary.BigEndian.Uint32(k)) != i.id &&
			slices.ContainsFunc(moving, func(r bucketRange) bool { return r.has(binary.BigEndian.Uint32(k)) }) {
			continue
		}
		if err := i.fsckRecord(snap, tab, k, it.Value(), add, problem); err != nil {
			return nil, err
		}
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	if !ok {
		resp.Done = true
	} else {
		resp.Next = append(last, 0)
	}
	return resp, nil
}

func truncKey(k []byte) []byte {
	if len(k) > 40 {
		return k[:40]
	}
	return k
}

func (i *Island) fsckRecord(snap reader, tab namespace.Table, k, v []byte,
	add func(metawire.FsckRecord), problem func([]byte, string, ...any)) error {
	if len(k) >= 6 && bytes.Equal(k[:5], globalKey(0)[:5]) {
		switch k[5] {
		case gIntent:
			st := "pending"
			if t, err := decodeIntent(v); err != nil {
				problem(k, "intent: %v", err)
				return nil
			} else if t.state == intentCommitted {
				st = "committed"
			}
			add(metawire.FsckRecord{Kind: metawire.FsckIntent, Name: fmt.Sprintf("%x %s", k[6:], st)})
		case gPrepared:
			coord, _, err := decodePrepared(v)
			if err != nil {
				problem(k, "prepared: %v", err)
				return nil
			}
			add(metawire.FsckRecord{Kind: metawire.FsckPrepared, Name: fmt.Sprintf("%x", k[6:]), Aux: uint64(coord)})
		case gLive, gStats:
			if _, err := decodeCounters(v); err != nil {
				problem(k, "counter: %v", err)
			}
		case gRef:
			if len(k) != len(globalKey(gRef))+32 {
				problem(k, "stripe reference: bad key length %d", len(k))
			}
		case gBoot:
			if len(v) != 9 {
				problem(k, "incarnation record of %d bytes", len(v))
			}
		case gDedup:
			if len(k) != len(globalKey(gDedup))+16 || len(v) != 8 {
				problem(k, "request id record: key %d, value %d bytes", len(k), len(v))
			}
		case gApplied:
			if len(v) != 8 {
				problem(k, "applied index record of %d bytes", len(v))
			}
		case gLeases:
			if len(k) != len(globalKey(gLeases)) || len(v) != 1 {
				problem(k, "lease record: key %d, value %d bytes", len(k), len(v))
			}
		case gAdopted:
			if len(k) != len(globalKey(gAdopted))+8 || len(v) != 8 {
				problem(k, "adopted incarnation record: key %d, value %d bytes", len(k), len(v))
			}
		case gMoving, gImported, gBase, gPartial:
			// A move in progress (move.go).
			if _, err := decodeMoveMark(v); err != nil || len(k) != len(globalKey(gMoving))+8 {
				problem(k, "entry move record: key %d bytes, %v", len(k), err)
			}
		case gLockIndex:
			if len(k) != len(globalKey(gLockIndex))+8 || len(v) != 0 {
				problem(k, "lock index record: key %d, value %d bytes", len(k), len(v))
			}
		case gHoldIndex:
			if len(k) != len(globalKey(gHoldIndex))+8 || len(v) != 0 {
				problem(k, "hold index record: key %d, value %d bytes", len(k), len(v))
			}
		case gLockEnded:
			if len(k) != len(globalKey(gLockEnded))+8 || len(v) != 8 {
				problem(k, "ended lock session record: key %d, value %d bytes", len(k), len(v))
			}
		case gMeta:
		default:
			problem(k, "unknown island record")
		}
		return nil
	}
	if len(k) < 5 || k[4] >= 0x80 {
		problem(k, "unknown key")
		return nil
	}
	bucket := binary.BigEndian.Uint32(k)
	if tab.Lookup(bucket) != i.id {
		problem(k, "record of bucket %08x, owned by island %d", bucket, tab.Lookup(bucket))
	}
	if k[4] == tagSeq {
		if len(k) != 5 {
			problem(k, "bad sequence key")
		} else if _, err := decodeU32(v); err != nil {
			problem(k, "sequence: %v", err)
		}
		return nil
	}
	if len(k) < 13 {
		problem(k, "short key")
		return nil
	}
	ino := namespace.Ino(binary.BigEndian.Uint64(k[5:]))
	if ino.Bucket() != bucket {
		problem(k, "inode %v under bucket %08x", ino, bucket)
	}
	rest := k[13:]
	switch k[4] {
	case tagInode:
		n, err := decodeInode(ino, v)
		if err != nil || len(rest) != 0 {
			problem(k, "inode %v: undecodable", ino)
			return nil
		}
		if n.nlink == 0 && !n.isDir() {
			// Unlinked and open somewhere: not an orphan while held.
			if hs, err := readHolds(snap, ino); err == nil && len(hs) > 0 {
				return nil
			}
		}
		add(metawire.FsckRecord{Kind: metawire.FsckInode, Ino: uint64(ino), Mode: n.mode, Nlink: n.nlink, Aux: uint64(n.parent)})
	case tagDirent:
		de, err := decodeDirent(v)
		if err != nil {
			problem(k, "entry %q of %v: %v", rest, ino, err)
			return nil
		}
		add(metawire.FsckRecord{Kind: metawire.FsckDirent, Ino: uint64(ino), Name: string(rest), Aux: uint64(de.ino), Mode: de.typ})
		cv, ok, err := get(snap, cookieKey(ino, de.cookie))
		if err != nil {
			return err
		}
		if name, cino, _, err := decodeCookie(cv); !ok || err != nil || name != string(rest) || cino != de.ino {
			problem(k, "entry %q of %v: cookie %d record missing or different", rest, ino, de.cookie)
		}
	case tagCookie:
		name, cino, _, err := decodeCookie(v)
		if err != nil || len(rest) != 8 {
			problem(k, "cookie record of %v: undecodable", ino)
			return nil
		}
		de, ok, err := readDirent(snap, ino, name)
		if err != nil || !ok || de.ino != cino || de.cookie != binary.BigEndian.Uint64(rest) {
			problem(k, "cookie %d of %v: no matching entry %q", binary.BigEndian.Uint64(rest), ino, name)
		}
	case tagBlock:
		p, err := decodeBytes(v)
		if err != nil || len(rest) != 8 {
			problem(k, "block of %v: undecodable", ino)
			return nil
		}
		ptr, _, err := decodePointer(p)
		if err != nil {
			problem(k, "block %d of %v: %v", binary.BigEndian.Uint64(rest), ino, err)
			return nil
		}
		add(metawire.FsckRecord{Kind: metawire.FsckBlock, Ino: uint64(ino), Aux: binary.BigEndian.Uint64(rest),
			Log: ptr.Stripe.Log, Seq: ptr.Stripe.Seq})
		if n, err := readInode(snap, ino); err != nil || n == nil {
			problem(k, "block of missing inode %v", ino)
		}
	case tagXattr:
		if _, err := decodeBytes(v); err != nil {
			problem(k, "xattr %q of %v: %v", rest, ino, err)
		}
		if n, err := readInode(snap, ino); err != nil || n == nil {
			problem(k, "xattr of missing inode %v", ino)
		}
	case tagLock:
		p, err := decodeBytes(v)
		if err == nil {
			_, err = filelock.Decode(p)
		}
		if err != nil || len(rest) != 0 {
			problem(k, "locks of %v: undecodable", ino)
		}
		if n, err := readInode(snap, ino); err != nil || n == nil {
			problem(k, "locks of missing inode %v", ino)
		}
	case tagHold:
		if _, err := decodeHolds(ino, v); err != nil || len(rest) != 0 {
			problem(k, "holds of %v: undecodable", ino)
		}
		if n, err := readInode(snap, ino); err != nil || n == nil {
			problem(k, "holds of missing inode %v", ino)
		}
	default:
		problem(k, "unknown record tag %q", k[4])
	}
	return nil
}

// FsckSource pages through one island's records (OpFsck).
type FsckSource interface {
	FsckPage(ctx context.Context, cursor []byte) (*metawire.FsckResp, error)
}

// IslandFsckSource reads an in-process island.
func IslandFsckSource(isl *Island) FsckSource { return islandSource{isl} }

type islandSource struct{ isl *Island }

func (s islandSource) FsckPage(ctx context.Context, cursor []byte) (*metawire.FsckResp, error) {
	out, err := s.isl.Handle(ctx, metawire.OpFsck, 0, metawire.Marshal(&metawire.FsckReq{Cursor: cursor}))
	if err != nil {
		return nil, err
	}
	var resp metawire.FsckResp
	return &resp, metawire.Unmarshal(out, &resp)
}

// WireFsckSource reads island id at addr over internal/wire.
func WireFsckSource(pool *wire.Pool, id namespace.IslandID, addr string) FsckSource {
	return wireSource{pool, id, addr}
}

type wireSource struct {
	pool *wire.Pool
	id   namespace.IslandID
	addr string
}

func (s wireSource) FsckPage(ctx context.Context, cursor []byte) (*metawire.FsckResp, error) {
	reply, err := s.pool.CallRoute(ctx, s.addr, uint32(s.id), wire.ReqID{}, metawire.OpFsck, 0, metawire.Marshal(&metawire.FsckReq{Cursor: cursor}), nil, nil)
	if err != nil {
		return nil, metawire.RemoteErr(err)
	}
	var resp metawire.FsckResp
	return &resp, metawire.Unmarshal(reply.Msg, &resp)
}

// Report is the result of Fsck.
type Report struct {
	Islands  []uint32
	Inodes   int
	Dirents  int
	Blocks   int
	Intents  int // open intents (coordinator side)
	Prepared int // open prepared transactions (participant side)
	// Stripes are the stripes block pointers reference, sorted; the caller
	// checks that they exist.
	Stripes []fragment.StripeID
	// Problems found, at most MaxProblems; ProblemCount counts them all.
	Problems     []string
	ProblemCount int
}

// MaxProblems bounds Report.Problems.
const MaxProblems = 1000

// Clean reports whether no problem was found.
func (r *Report) Clean() bool { return r.ProblemCount == 0 }

func (r *Report) problem(format string, args ...any) {
	r.ProblemCount++
	if len(r.Problems) < MaxProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

type fsckInode struct {
	island uint32
	mode   uint32
	nlink  uint32
	parent namespace.Ino
	refs   int // entries pointing at it
	subdir int // entries of type directory in it (directories)
}

type fsckEntry struct {
	dir    namespace.Ino
	name   string
	target namespace.Ino
	typ    uint32
}

// Fsck reads every record of the given islands (all islands of the
// cluster) and checks the namespace across them: no entry without its
// inode, no inode without an entry (but the root), link counts equal to
// the entries naming the inode (directories: 2 plus their
// subdirectories), each directory named by exactly one entry in its
// parent, entry types equal to inode types, and no open intent or
// prepared transaction. Run it on a quiet cluster: records are read page
// by page, not from one snapshot across islands. It keeps one small
// record per inode and entry in memory.
func Fsck(ctx context.Context, islands []FsckSource) (Report, error) {
	var rep Report
	inodes := map[namespace.Ino]*fsckInode{}
	var entries []fsckEntry
	stripes := map[fragment.StripeID]bool{}
	for _, src := range islands {
		var cursor []byte
		first := true
		for {
			page, err := src.FsckPage(ctx, cursor)
			if err != nil {
				return rep, fmt.Errorf("meta: fsck: %w", err)
			}
			if first {
				rep.Islands = append(rep.Islands, page.Island)
				first = false
			}
			for _, x := range page.Records {
				switch x.Kind {
				case metawire.FsckInode:
					ino := namespace.Ino(x.Ino)
					if prev := inodes[ino]; prev != nil {
						rep.problem("inode %v held by islands %d and %d", ino, prev.island, page.Island)
						continue
					}
					inodes[ino] = &fsckInode{island: page.Island, mode: x.Mode, nlink: x.Nlink, parent: namespace.Ino(x.Aux)}
					rep.Inodes++
				case metawire.FsckDirent:
					entries = append(entries, fsckEntry{namespace.Ino(x.Ino), x.Name, namespace.Ino(x.Aux), x.Mode})
					rep.Dirents++
				case metawire.FsckBlock:
					stripes[fragment.StripeID{Log: x.Log, Seq: x.Seq}] = true
					rep.Blocks++
				case metawire.FsckIntent:
					rep.Intents++
					rep.problem("island %d: open intent %s", page.Island, x.Name)
				case metawire.FsckPrepared:
					rep.Prepared++
					rep.problem("island %d: open prepared transaction %s (coordinator %d)", page.Island, x.Name, x.Aux)
				case metawire.FsckProblem:
					rep.problem("%s", x.Name)
				default:
					rep.problem("island %d: unknown fsck record kind %d", page.Island, x.Kind)
				}
			}
			if page.Done {
				break
			}
			if len(page.Next) == 0 || (cursor != nil && bytes.Compare(page.Next, cursor) <= 0) {
				return rep, fmt.Errorf("meta: fsck: island %d: cursor does not advance", page.Island)
			}
			cursor = page.Next
		}
	}

	// Entries: each must name an existing inode of its type; count links.
	dirOf := map[namespace.Ino]namespace.Ino{} // directory -> the parent naming it
	for _, e := range entries {
		d := inodes[e.dir]
		switch {
		case d == nil:
			rep.problem("entry %q of missing directory %v", e.name, e.dir)
		case d.mode&metawire.ModeType != metawire.ModeDir:
			rep.problem("entry %q in non-directory %v", e.name, e.dir)
		}
		n := inodes[e.target]
		if n == nil {
			rep.problem("dangling entry %q in %v: inode %v does not exist", e.name, e.dir, e.target)
			continue
		}
		n.refs++
		if t := n.mode & metawire.ModeType; t != e.typ {
			rep.problem("entry %q in %v says type %o, inode %v is %o", e.name, e.dir, e.typ, e.target, t)
		}
		if n.mode&metawire.ModeType == metawire.ModeDir {
			if prev, dup := dirOf[e.target]; dup {
				rep.problem("directory %v named in %v and in %v", e.target, prev, e.dir)
			}
			dirOf[e.target] = e.dir
			if d != nil {
				d.subdir++
			}
		}
	}
	root := inodes[namespace.RootIno]
	if root == nil {
		rep.problem("root directory %v missing", namespace.RootIno)
	}
	inos := make([]namespace.Ino, 0, len(inodes))
	for ino := range inodes {
		inos = append(inos, ino)
	}
	slices.Sort(inos)
	for _, ino := range inos {
		n := inodes[ino]
		isDir := n.mode&metawire.ModeType == metawire.ModeDir
		if ino == namespace.RootIno {
			if !isDir || n.parent != namespace.RootIno {
				rep.problem("root %v is not a directory that is its own parent", ino)
			}
			if n.refs != 0 {
				rep.problem("root %v is named by %d entries", ino, n.refs)
			}
		} else if n.refs == 0 {
			rep.problem("orphan inode %v (mode %o, nlink %d) on island %d", ino, n.mode, n.nlink, n.island)
			continue
		}
		if isDir {
			if want := uint32(2 + n.subdir); n.nlink != want {
				rep.problem("directory %v has nlink %d, want %d", ino, n.nlink, want)
			}
			if ino != namespace.RootIno {
				if p, ok := dirOf[ino]; ok && p != n.parent {
					rep.problem("directory %v is in %v but its parent says %v", ino, p, n.parent)
				}
			}
		} else if n.nlink != uint32(n.refs) {
			rep.problem("inode %v has nlink %d but %d entries", ino, n.nlink, n.refs)
		}
	}
	// Every directory must hang off the root: a cycle of directories
	// naming each other has entries but no way in.
	children := map[namespace.Ino][]namespace.Ino{}
	for _, e := range entries {
		if n := inodes[e.target]; n != nil && n.mode&metawire.ModeType == metawire.ModeDir {
			children[e.dir] = append(children[e.dir], e.target)
		}
	}
	reached := map[namespace.Ino]bool{namespace.RootIno: true}
	queue := []namespace.Ino{namespace.RootIno}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		for _, ch := range children[d] {
			if !reached[ch] {
				reached[ch] = true
				queue = append(queue, ch)
			}
		}
	}
	for _, ino := range inos {
		if n := inodes[ino]; n.mode&metawire.ModeType == metawire.ModeDir && n.refs > 0 && !reached[ino] {
			rep.problem("directory %v is not reachable from the root (a cycle)", ino)
		}
	}
	for s := range stripes {
		rep.Stripes = append(rep.Stripes, s)
	}
	sort.Slice(rep.Stripes, func(a, b int) bool {
		x, y := rep.Stripes[a], rep.Stripes[b]
		return x.Log < y.Log || x.Log == y.Log && x.Seq < y.Seq
	})
	return rep, nil
}
