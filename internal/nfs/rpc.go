package nfs

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/nfs/xdr"
)

// ONC RPC (RFC 5531) constants.
const (
	rpcVersion = 2

	msgCall  = 0
	msgReply = 1

	replyAccepted = 0
	replyDenied   = 1

	acceptSuccess      = 0
	acceptProgUnavail  = 1
	acceptProgMismatch = 2
	acceptProcUnavail  = 3
	acceptGarbageArgs  = 4
	acceptSystemErr    = 5

	rejectRPCMismatch = 0
	rejectAuthError   = 1

	authBadCred      = 1
	authRejectedCred = 2
	authBadVerf      = 3
	authTooWeak      = 5

	authNone = 0
	authSys  = 1

	maxAuthBody    = 400 // RFC 5531: opaque body<400>
	maxMachineName = 255
	maxAuxGIDs     = 16
)

// Program numbers served.
const (
	progPortmap = 100000
	progNFS     = 100003
	progMount   = 100005
)

// Record marking (RFC 5531 §11).
const (
	lastFragment = 1 << 31
	// MaxRecord bounds one call record: a 1 MiB WRITE plus headers, with
	// room to spare. A longer record closes the connection.
	MaxRecord = maxData + 64<<10
)

var errRecordTooLong = errors.New("nfs: rpc record over the size limit")

// readRecord reads one record (all its fragments) from r. It allocates
// only as bytes arrive (in steps of at most recordStep beyond what has
// arrived, so a header announcing 1 MiB that is followed by nothing costs
// recordStep, not 1 MiB), never more than limit bytes in all. io.EOF means
// the stream ended cleanly between records.
func readRecord(r *bufio.Reader, limit int) ([]byte, error) {
	var rec []byte
	var hdr [4]byte
	for first := true; ; first = false {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF && first {
				return nil, io.EOF
			}
			return nil, io.ErrUnexpectedEOF
		}
		v := binary.BigEndian.Uint32(hdr[:])
		n := int(v &^ lastFragment)
		if len(rec)+n > limit {
			return nil, fmt.Errorf("%w: %d bytes", errRecordTooLong, len(rec)+n)
		}
		for end := len(rec) + n; len(rec) < end; {
			step := min(end-len(rec), max(len(rec), recordStep))
			start := len(rec)
			rec = slices.Grow(rec, step)[:start+step]
			if _, err := io.ReadFull(r, rec[start:]); err != nil {
				return nil, io.ErrUnexpectedEOF
			}
		}
		if v&lastFragment != 0 {
			return rec, nil
		}
	}
}

// recordStep is the most readRecord allocates ahead of the bytes that
// have arrived, while a record is small (then it grows by doubling).
const recordStep = 4 << 10

// callHeader is a parsed RPC call header.
type callHeader struct {
	xid, prog, vers, proc uint32
	flavor                uint32 // credential flavor
	uid, gid              uint32
	gids                  []uint32
	machine               string
}

// headerError is a call that must be answered with a rejection.
type headerError struct {
	stat uint32 // rejectRPCMismatch or rejectAuthError
	auth uint32 // auth_stat when stat is rejectAuthError
}

func (e *headerError) Error() string {
	if e.stat == rejectRPCMismatch {
		return "nfs: rpc version mismatch"
	}
	return fmt.Sprintf("nfs: rpc auth error %d", e.auth)
}

// errDrop: the record is not a call we can answer at all (too short to
// hold an xid, or a reply); it is ignored.
var errDrop = errors.New("nfs: record dropped")

// parseCall parses the call header of a record; r is left at the
// procedure's arguments. Errors: errDrop (nothing to answer), or a
// *headerError to answer with (hdr.xid is then valid).
func parseCall(r *xdr.Reader) (hdr callHeader, err error) {
	hdr.xid = r.Uint32()
	mtype := r.Uint32()
	if r.Err() != nil || mtype != msgCall {
		return hdr, errDrop
	}
	vers := r.Uint32()
	if r.Err() != nil {
		return hdr, errDrop
	}
	if vers != rpcVersion {
		return hdr, &headerError{stat: rejectRPCMismatch}
	}
	hdr.prog, hdr.vers, hdr.proc = r.Uint32(), r.Uint32(), r.Uint32()
	hdr.flavor = r.Uint32()
	body := r.Opaque(maxAuthBody)
	r.Uint32() // verifier flavor: AUTH_NONE or anything; not checked
	r.Opaque(maxAuthBody)
	if r.Err() != nil {
		return hdr, &headerError{stat: rejectAuthError, auth: authBadCred}
	}
	switch hdr.flavor {
	case authNone:
	case authSys:
		a := xdr.NewReader(body)
		a.Uint32() // stamp
		hdr.machine = a.String(maxMachineName)
		hdr.uid, hdr.gid = a.Uint32(), a.Uint32()
		n := a.Count(maxAuxGIDs, 4)
		if a.Err() == nil && n > 0 {
			hdr.gids = make([]uint32, n)
			for i := range hdr.gids {
				hdr.gids[i] = a.Uint32()
			}
		}
		if a.Finish() != nil {
			return hdr, &headerError{stat: rejectAuthError, auth: authBadCred}
		}
	default:
		return hdr, &headerError{stat: rejectAuthError, auth: authRejectedCred}
	}
	return hdr, nil
}

// reply starts a reply record in w: the record mark (patched by
// finishRecord), xid and REPLY.
func replyStart(w *xdr.Writer, xid uint32) {
	w.Uint32(0) // record mark, set by finishRecord
	w.Uint32(xid)
	w.Uint32(msgReply)
}

// acceptedReply writes the accepted-reply header with an AUTH_NONE
// verifier and stat.
func acceptedReply(w *xdr.Writer, xid, stat uint32) {
	replyStart(w, xid)
	w.Uint32(replyAccepted)
	w.Uint32(authNone)
	w.Uint32(0)
	w.Uint32(stat)
}

// deniedReply writes a rejection for e.
func deniedReply(w *xdr.Writer, xid uint32, e *headerError) {
	replyStart(w, xid)
	w.Uint32(replyDenied)
	w.Uint32(e.stat)
	if e.stat == rejectRPCMismatch {
		w.Uint32(rpcVersion)
		w.Uint32(rpcVersion)
	} else {
		w.Uint32(e.auth)
	}
}

// finishRecord sets the record mark of a reply that starts at offset 0 of
// w: one fragment, the last.
func finishRecord(w *xdr.Writer) {
	w.PutUint32(0, lastFragment|uint32(w.Len()-4))
}

// squash applies an export's identity mapping to a credential.
func (e *Export) cred(h *callHeader) metawire.Cred {
	if h.flavor != authSys {
		return metawire.Cred{UID: e.AnonUID, GID: e.AnonGID}
	}
	c := metawire.Cred{UID: h.uid, GID: h.gid}
	if len(h.gids) > 0 {
		c.Groups = append([]uint32(nil), h.gids...)
	}
	if e.RootSquash {
		if c.UID == 0 {
			c.UID = e.AnonUID
		}
		if c.GID == 0 {
			c.GID = e.AnonGID
		}
		for i, g := range c.Groups {
			if g == 0 {
				c.Groups[i] = e.AnonGID
			}
		}
	}
	return c
}
