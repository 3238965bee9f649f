package metawire

import (
	"errors"
	"syscall"

	"github.com/atoll-fs/atoll/internal/wire"
)

// Errors returned by islands and seen by clients. Each maps to one status
// code on the wire and one errno at the edges (FUSE, NFS, CLI).
var (
	ErrNotFound     = errors.New("no such file or directory")
	ErrExists       = errors.New("file exists")
	ErrNotDir       = errors.New("not a directory")
	ErrIsDir        = errors.New("is a directory")
	ErrNotEmpty     = errors.New("directory not empty")
	ErrAccess       = errors.New("permission denied")
	ErrPerm         = errors.New("operation not permitted")
	ErrInvalid      = errors.New("invalid argument")
	ErrNameTooLong  = errors.New("file name too long")
	ErrStale        = errors.New("stale file handle")
	ErrNoSpace      = errors.New("no space left on device")
	ErrIO           = errors.New("input/output error")
	ErrLoop         = errors.New("too many levels of symbolic links")
	ErrTooManyLinks = errors.New("too many links")
	ErrNoData       = errors.New("no such attribute")
	ErrRange        = errors.New("result too large")
	ErrReadOnly     = errors.New("read-only file system")
	ErrNotSupported = errors.New("operation not supported")
	ErrFileTooBig   = errors.New("file too large")
	ErrBadRequest   = errors.New("malformed metadata request")
	// ErrStaleEpoch: the island has a newer cluster map; refresh and retry.
	ErrStaleEpoch = errors.New("stale cluster map epoch")
	// ErrWrongIsland: the island does not own the bucket; refresh the map.
	ErrWrongIsland = errors.New("bucket not owned by this island")
	// ErrBusy: a conflicting cross-island operation is in progress; retry.
	ErrBusy = errors.New("operation in progress, retry")
	// ErrUnavailable: the island (or a participant) cannot be reached.
	ErrUnavailable = errors.New("metadata island unavailable")
	// Lock errors (lock.go). ErrWouldBlock: a lock another owner holds
	// (EAGAIN, as F_SETLK answers); ErrDeadlock: a wait that would close
	// a cycle of waiting owners; ErrSessionEnded: the island ended the
	// lock session after its term without renewal, its locks are gone
	// (ENOLCK; writes under them fail EIO); ErrInterrupted: a wait the
	// client cancelled.
	ErrWouldBlock   = errors.New("resource temporarily unavailable: lock held by another owner")
	ErrDeadlock     = errors.New("resource deadlock avoided")
	ErrSessionEnded = errors.New("lock session ended")
	ErrInterrupted  = errors.New("interrupted")
	// ErrInternal: anything else; the message says what.
	ErrInternal = errors.New("metadata island internal error")
)

// Table is the one mapping of errors to wire status codes and errnos.
var Table = []struct {
	Err    error
	Status uint32
	Errno  syscall.Errno
}{
	{ErrInternal, 1, syscall.EIO},
	{ErrNotFound, 2, syscall.ENOENT},
	{ErrExists, 3, syscall.EEXIST},
	{ErrNotDir, 4, syscall.ENOTDIR},
	{ErrIsDir, 5, syscall.EISDIR},
	{ErrNotEmpty, 6, syscall.ENOTEMPTY},
	{ErrAccess, 7, syscall.EACCES},
	{ErrPerm, 8, syscall.EPERM},
	{ErrInvalid, 9, syscall.EINVAL},
	{ErrNameTooLong, 10, syscall.ENAMETOOLONG},
	{ErrStale, 11, syscall.ESTALE},
	{ErrNoSpace, 12, syscall.ENOSPC},
	{ErrIO, 13, syscall.EIO},
	{ErrLoop, 14, syscall.ELOOP},
	{ErrTooManyLinks, 15, syscall.EMLINK},
	{ErrNoData, 16, syscall.ENODATA},
	{ErrRange, 17, syscall.ERANGE},
	{ErrReadOnly, 18, syscall.EROFS},
	{ErrNotSupported, 19, syscall.ENOTSUP},
	{ErrFileTooBig, 20, syscall.EFBIG},
	{ErrBadRequest, 21, syscall.EINVAL},
	{ErrStaleEpoch, 22, syscall.EAGAIN},
	{ErrWrongIsland, 23, syscall.EAGAIN},
	{ErrBusy, 24, syscall.EAGAIN},
	{ErrUnavailable, 25, syscall.EIO},
	{ErrWouldBlock, 26, syscall.EAGAIN},
	{ErrDeadlock, 27, syscall.EDEADLK},
	{ErrSessionEnded, 28, syscall.ENOLCK},
	{ErrInterrupted, 29, syscall.EINTR},
}

// StatusOf maps an island error to its status code (ErrInternal's for
// anything unknown).
func StatusOf(err error) uint32 {
	for _, e := range Table {
		if e.Err != ErrInternal && errors.Is(err, e.Err) {
			return e.Status
		}
	}
	return 1
}

// Errno maps any error (after RemoteErr) to a POSIX errno; EIO for unknown.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	for _, e := range Table {
		if e.Err != ErrInternal && errors.Is(err, e.Err) {
			return e.Errno
		}
	}
	return syscall.EIO
}

// StatusError carries a remote error's text and its sentinel.
type StatusError struct {
	Sentinel error
	Message  string
}

func (e *StatusError) Error() string { return e.Message }
func (e *StatusError) Unwrap() error { return e.Sentinel }

// RemoteErr turns a *wire.RemoteError into a *StatusError wrapping the
// sentinel for its status. Other errors pass through unchanged.
func RemoteErr(err error) error {
	var re *wire.RemoteError
	if !errors.As(err, &re) {
		return err
	}
	for _, e := range Table {
		if e.Status == re.Status {
			return &StatusError{Sentinel: e.Err, Message: re.Message}
		}
	}
	return &StatusError{Sentinel: ErrInternal, Message: re.Message}
}
