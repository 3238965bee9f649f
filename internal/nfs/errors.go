package nfs

import (
	"context"
	"errors"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// nfsstat3 values (RFC 1813 §2.6).
const (
	nfs3OK             uint32 = 0
	nfs3ErrPerm        uint32 = 1
	nfs3ErrNoEnt       uint32 = 2
	nfs3ErrIO          uint32 = 5
	nfs3ErrNXIO        uint32 = 6
	nfs3ErrAcces       uint32 = 13
	nfs3ErrExist       uint32 = 17
	nfs3ErrXDev        uint32 = 18
	nfs3ErrNoDev       uint32 = 19
	nfs3ErrNotDir      uint32 = 20
	nfs3ErrIsDir       uint32 = 21
	nfs3ErrInval       uint32 = 22
	nfs3ErrFBig        uint32 = 27
	nfs3ErrNoSpc       uint32 = 28
	nfs3ErrROFS        uint32 = 30
	nfs3ErrMLink       uint32 = 31
	nfs3ErrNameTooLong uint32 = 63
	nfs3ErrNotEmpty    uint32 = 66
	nfs3ErrDQuot       uint32 = 69
	nfs3ErrStale       uint32 = 70
	nfs3ErrRemote      uint32 = 71
	nfs3ErrBadHandle   uint32 = 10001
	nfs3ErrNotSync     uint32 = 10002
	nfs3ErrBadCookie   uint32 = 10003
	nfs3ErrNotSupp     uint32 = 10004
	nfs3ErrTooSmall    uint32 = 10005
	nfs3ErrServerFault uint32 = 10006
	nfs3ErrBadType     uint32 = 10007
	nfs3ErrJukebox     uint32 = 10008
)

// StatusTable is the one mapping of Atoll's error sentinels (those of
// metawire.Table) to NFSv3 status codes. Transient cluster conditions
// (a map change in progress, a busy cross-island operation, an island
// that cannot be reached) are NFS3ERR_JUKEBOX: the client waits and
// retries, which is what they need. Every sentinel of metawire.Table has
// a row (a test checks it).
var StatusTable = []struct {
	Err    error
	Status uint32
}{
	{metawire.ErrNotFound, nfs3ErrNoEnt},
	{metawire.ErrExists, nfs3ErrExist},
	{metawire.ErrNotDir, nfs3ErrNotDir},
	{metawire.ErrIsDir, nfs3ErrIsDir},
	{metawire.ErrNotEmpty, nfs3ErrNotEmpty},
	{metawire.ErrAccess, nfs3ErrAcces},
	{metawire.ErrPerm, nfs3ErrPerm},
	{metawire.ErrInvalid, nfs3ErrInval},
	{metawire.ErrNameTooLong, nfs3ErrNameTooLong},
	{metawire.ErrStale, nfs3ErrStale},
	{metawire.ErrNoSpace, nfs3ErrNoSpc},
	{metawire.ErrIO, nfs3ErrIO},
	{metawire.ErrLoop, nfs3ErrInval}, // NFSv3 has no ELOOP
	{metawire.ErrTooManyLinks, nfs3ErrMLink},
	{metawire.ErrNoData, nfs3ErrNoEnt},
	{metawire.ErrRange, nfs3ErrInval},
	{metawire.ErrReadOnly, nfs3ErrROFS},
	{metawire.ErrNotSupported, nfs3ErrNotSupp},
	{metawire.ErrFileTooBig, nfs3ErrFBig},
	{metawire.ErrBadRequest, nfs3ErrInval},
	{metawire.ErrStaleEpoch, nfs3ErrJukebox},
	{metawire.ErrWrongIsland, nfs3ErrJukebox},
	{metawire.ErrBusy, nfs3ErrJukebox},
	{metawire.ErrUnavailable, nfs3ErrJukebox},
	{metawire.ErrInternal, nfs3ErrServerFault},
	// Lock errors: NFSv3 itself has no lock calls (NLM does, with its
	// own statuses); a data call under a lock session that ended is EIO.
	{metawire.ErrWouldBlock, nfs3ErrJukebox},
	{metawire.ErrDeadlock, nfs3ErrIO},
	{metawire.ErrSessionEnded, nfs3ErrIO},
	{metawire.ErrInterrupted, nfs3ErrIO},
	// Gateway-side conditions.
	{namespace.ErrBadHandle, nfs3ErrBadHandle},
	{errNotSync, nfs3ErrNotSync},
	{errBadCookie, nfs3ErrBadCookie},
	{errTooSmall, nfs3ErrTooSmall},
	{errBadType, nfs3ErrBadType},
	{context.DeadlineExceeded, nfs3ErrJukebox},
}

// Gateway-side errors with their own NFS status.
var (
	errNotSync   = errors.New("nfs: guard ctime mismatch")
	errBadCookie = errors.New("nfs: stale cookie verifier")
	errTooSmall  = errors.New("nfs: reply buffer too small for one entry")
	errBadType   = errors.New("nfs: bad file type")
)

// statusOf maps err to an NFSv3 status; unknown errors are NFS3ERR_IO.
func statusOf(err error) uint32 {
	if err == nil {
		return nfs3OK
	}
	for _, e := range StatusTable {
		if e.Err != metawire.ErrInternal && errors.Is(err, e.Err) {
			return e.Status
		}
	}
	if errors.Is(err, metawire.ErrInternal) {
		return nfs3ErrServerFault
	}
	return nfs3ErrIO
}
