package nfs

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/nfs/xdr"
)

// ftype3.
const (
	nf3Reg  = 1
	nf3Dir  = 2
	nf3Blk  = 3
	nf3Chr  = 4
	nf3Lnk  = 5
	nf3Sock = 6
	nf3FIFO = 7
)

const fhSize3 = 64 // NFS3_FHSIZE

func ftype(mode uint32) uint32 {
	switch mode & metawire.ModeType {
	case metawire.ModeDir:
		return nf3Dir
	case metawire.ModeLink:
		return nf3Lnk
	case metawire.ModeBlock:
		return nf3Blk
	case metawire.ModeChar:
		return nf3Chr
	case metawire.ModeSock:
		return nf3Sock
	case metawire.ModeFIFO:
		return nf3FIFO
	}
	return nf3Reg
}

// Device numbers: Attr.Rdev is Linux's 32-bit new_encode_dev form.
func makedev(major, minor uint32) uint32 {
	return minor&0xff | (major&0xfff)<<8 | (minor&^0xff)<<12
}

func devMajor(rdev uint32) uint32 { return (rdev & 0xfff00) >> 8 }
func devMinor(rdev uint32) uint32 { return rdev&0xff | (rdev>>12)&0xfff00 }

// nfstime3 from nanoseconds since the epoch (times before 1970 clamp to 0).
func putTime(w *xdr.Writer, ns int64) {
	if ns < 0 {
		ns = 0
	}
	sec := ns / 1e9
	if sec > 1<<32-1 {
		sec = 1<<32 - 1
	}
	w.Uint32(uint32(sec))
	w.Uint32(uint32(ns % 1e9))
}

func getTime(r *xdr.Reader) int64 {
	sec, nsec := r.Uint32(), r.Uint32()
	if nsec >= 1e9 {
		r.Fail(xdr.ErrGarbage)
	}
	return int64(sec)*1e9 + int64(nsec)
}

// fattr3.
func (s *Server) putFattr(w *xdr.Writer, a *metawire.Attr) {
	w.Uint32(ftype(a.Mode))
	w.Uint32(a.Mode & metawire.ModePerm)
	w.Uint32(a.Nlink)
	w.Uint32(a.UID)
	w.Uint32(a.GID)
	w.Uint64(a.Size)
	w.Uint64(a.Blocks * 512)
	w.Uint32(devMajor(a.Rdev))
	w.Uint32(devMinor(a.Rdev))
	w.Uint64(s.fsid)
	w.Uint64(a.Ino)
	putTime(w, a.Atime)
	putTime(w, a.Mtime)
	putTime(w, a.Ctime)
}

// post_op_attr: a nil attr is "no attributes".
func (s *Server) putPostAttr(w *xdr.Writer, a *metawire.Attr) {
	if a == nil || a.Ino == 0 {
		w.Bool(false)
		return
	}
	w.Bool(true)
	s.putFattr(w, a)
}

// pre_op_attr.
func putPreAttr(w *xdr.Writer, a *metawire.Attr) {
	if a == nil || a.Ino == 0 {
		w.Bool(false)
		return
	}
	w.Bool(true)
	w.Uint64(a.Size)
	putTime(w, a.Mtime)
	putTime(w, a.Ctime)
}

// wcc_data.
func (s *Server) putWcc(w *xdr.Writer, pre, post *metawire.Attr) {
	putPreAttr(w, pre)
	s.putPostAttr(w, post)
}

// handleOf is the nfs_fh3 of a: namespace.Handle, followed on a confined
// export by its tag.
func (s *Server) handleOf(a *metawire.Attr) []byte {
	b := namespace.Handle{Ino: namespace.Ino(a.Ino), Gen: a.Gen}.AppendBinary(make([]byte, 0, namespace.HandleSize+handleTagSize))
	if s.tagged() {
		b = append(b, s.handleTag(b)...)
	}
	return b
}

// tagged reports whether handles carry a tag: always with a HandleKey (the
// atoll command derives one from the gateway's key), so a handle made by
// hand is stale. Without, a client that crafts one (the inode number of a
// file in a 0700 directory it cannot search) reaches the file past the
// directory (issue #43).
func (s *Server) tagged() bool { return len(s.exp.HandleKey) > 0 }

// handleLen is the length of the handles handleOf makes.
func (s *Server) handleLen() int {
	if s.tagged() {
		return namespace.HandleSize + handleTagSize
	}
	return namespace.HandleSize
}

// handleTagSize is the tag a confined export appends to its handles.
const handleTagSize = 16

// handleTag is HMAC-SHA256(HandleKey, export path, handle), truncated.
func (s *Server) handleTag(h []byte) []byte {
	m := hmac.New(sha256.New, s.exp.HandleKey)
	m.Write([]byte(s.exp.Path))
	m.Write([]byte{0})
	m.Write(h)
	return m.Sum(nil)[:handleTagSize]
}

// post_op_fh3.
func (s *Server) putPostFH(w *xdr.Writer, a *metawire.Attr) {
	if a == nil || a.Ino == 0 {
		w.Bool(false)
		return
	}
	w.Bool(true)
	w.Opaque(s.handleOf(a))
}

// fh is a decoded nfs_fh3: the handle, or the error to answer with
// (NFS3ERR_BADHANDLE) if it does not decode.
type fh struct {
	h   namespace.Handle
	err error
}

func (f fh) ino() uint64 { return uint64(f.h.Ino) }

// getFH reads an nfs_fh3. On a confined export a handle without this
// export's tag (forged, or issued by an unconfined gateway) is stale:
// the client may not reach that inode through this export.
func (s *Server) getFH(r *xdr.Reader) fh {
	b := r.Opaque(fhSize3)
	if r.Err() != nil {
		return fh{err: r.Err()}
	}
	return s.decodeFH(b)
}

// decodeFH decodes the bytes of an nfs_fh3 (getFH): what does not decode
// is BADHANDLE, a well-formed handle without this gateway's tag STALE.
func (s *Server) decodeFH(b []byte) fh {
	h, err := namespace.DecodeHandle(b[:min(len(b), namespace.HandleSize)])
	if err != nil {
		return fh{err: err}
	}
	if s.tagged() {
		if len(b) != namespace.HandleSize+handleTagSize || !hmac.Equal(b[namespace.HandleSize:], s.handleTag(b[:namespace.HandleSize])) {
			return fh{err: fmt.Errorf("%w: handle not issued by a gateway with this key for export %s", metawire.ErrStale, s.exp.Path)}
		}
	} else if len(b) != namespace.HandleSize {
		_, err = namespace.DecodeHandle(b) // the length error
		return fh{err: err}
	}
	return fh{h: h}
}

// sattr3.
type sattr struct {
	valid        uint32 // metawire.Set* bits
	mode         uint32
	uid, gid     uint32
	size         uint64
	atime, mtime int64
}

const (
	timeDontChange = 0
	timeServer     = 1
	timeClient     = 2
)

func getSattr(r *xdr.Reader) sattr {
	var s sattr
	if r.Bool() {
		s.valid |= metawire.SetMode
		s.mode = r.Uint32() & metawire.ModePerm
	}
	if r.Bool() {
		s.valid |= metawire.SetUID
		s.uid = r.Uint32()
	}
	if r.Bool() {
		s.valid |= metawire.SetGID
		s.gid = r.Uint32()
	}
	if r.Bool() {
		s.valid |= metawire.SetSize
		s.size = r.Uint64()
	}
	switch r.Uint32() {
	case timeDontChange:
	case timeServer:
		s.valid |= metawire.SetAtimeNow
	case timeClient:
		s.valid |= metawire.SetAtime
		s.atime = getTime(r)
	default:
		r.Fail(xdr.ErrGarbage)
	}
	switch r.Uint32() {
	case timeDontChange:
	case timeServer:
		s.valid |= metawire.SetMtimeNow
	case timeClient:
		s.valid |= metawire.SetMtime
		s.mtime = getTime(r)
	default:
		r.Fail(xdr.ErrGarbage)
	}
	return s
}

// request turns s into a SetAttrReq for ino (only the bits in mask).
func (s sattr) request(cred metawire.Cred, ino uint64, mask uint32) metawire.SetAttrReq {
	return metawire.SetAttrReq{
		Cred: cred, Ino: ino, Valid: s.valid & mask,
		Mode: s.mode, UID: s.uid, GID: s.gid, Size: s.size, Atime: s.atime, Mtime: s.mtime,
	}
}

// Permission bits.
const (
	accR = 4
	accW = 2
	accX = 1
)

// mayAccess checks mode bits as the islands do (metawire.MayAccess).
func mayAccess(a *metawire.Attr, c *metawire.Cred, want uint32) bool {
	return metawire.MayAccess(a, c, want)
}
