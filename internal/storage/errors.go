package storage

import (
	"errors"
	"fmt"

	"github.com/atoll-fs/atoll/internal/fragment"
)

// Sentinel errors. Operations wrap them ("storage: put <id>: ..."), so test
// with errors.Is.
var (
	// ErrNotFound: no record exists for the fragment (never written, deleted,
	// or its put never committed).
	ErrNotFound = errors.New("storage: fragment not found")
	// ErrExists: Put of a fragment that already exists; fragments are never
	// overwritten.
	ErrExists = errors.New("storage: fragment exists")
	// ErrCorrupt: stored bytes fail their checksum, are missing, or the
	// metadata record is unreadable. A *CorruptError (which unwraps to
	// ErrCorrupt) names the sick range; the bad bytes are never returned.
	ErrCorrupt = errors.New("storage: fragment corrupt")
	// ErrOutOfRange: a read offset beyond the fragment's length, or negative.
	ErrOutOfRange = errors.New("storage: offset out of range")
	// ErrNoSpace: the write does not fit in the configured capacity or the
	// filesystem ran out of space while writing. Nothing was stored.
	ErrNoSpace = errors.New("storage: no space")
	// ErrBadData: the data does not match the sender's checksums, or is not
	// acceptable (longer than MaxFragmentSize). Nothing was stored.
	ErrBadData = errors.New("storage: bad data")
	// ErrRepairMismatch: Repair was given bytes that differ from the
	// recorded length or checksums; fragments are immutable, so a repair may
	// only rewrite identical bytes.
	ErrRepairMismatch = errors.New("storage: repair data does not match record")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("storage: store closed")
)

// CorruptRange is a logical byte range [Off, Off+Len) of a fragment.
type CorruptRange struct {
	Off, Len int64
}

func (r CorruptRange) String() string { return fmt.Sprintf("[%d,%d)", r.Off, r.Off+r.Len) }

// CorruptError reports a sick range of a fragment: the logical range of the
// chunks that failed verification (or are missing). errors.Is(err,
// ErrCorrupt) holds for it.
type CorruptError struct {
	ID     fragment.ID
	Range  CorruptRange
	Reason string // e.g. "checksum mismatch", "file missing"
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("storage: fragment %s corrupt at %v: %s", e.ID, e.Range, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }
