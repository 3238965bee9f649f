package namespace

import "errors"

// Sentinel errors. Every error returned by this package wraps exactly one of
// them (test with errors.Is) and names the offending value.
var (
	// ErrBadPath is returned for a pathname that is empty, relative or
	// contains a NUL byte, and by Join for a directory that is not clean.
	ErrBadPath = errors.New("namespace: bad path")

	// ErrBadName is returned for a directory entry name that is empty, "."
	// or "..", or contains '/' or NUL.
	ErrBadName = errors.New("namespace: bad name")

	// ErrNameTooLong is returned for a component longer than MaxName bytes
	// or a pathname longer than MaxPath bytes (ENAMETOOLONG).
	ErrNameTooLong = errors.New("namespace: name too long")

	// ErrBadIno is returned by ParseIno for text that is not an inode id.
	ErrBadIno = errors.New("namespace: bad inode id")

	// ErrBadHandle is returned by DecodeHandle for bytes that are not a
	// file handle of this format: wrong size, magic, version, checksum or
	// an invalid inode id. An NFS gateway answers NFS3ERR_BADHANDLE.
	ErrBadHandle = errors.New("namespace: bad file handle")

	// ErrBadTable is returned for an extendible hash table that is
	// malformed (depth, size, reserved island id, encoding, checksum) and
	// for arguments that cannot make a valid table.
	ErrBadTable = errors.New("namespace: bad hash table")

	// ErrBadMove is returned by Apply for a move that does not fit the
	// table (entry out of range, wrong current owner, reserved target).
	ErrBadMove = errors.New("namespace: bad move")

	// ErrBadRebalance is returned by PlanRebalance for an island list that
	// is empty, holds NoIsland or duplicates, or is too large for a table,
	// and for loads that are negative, NaN or infinite.
	ErrBadRebalance = errors.New("namespace: bad rebalance input")
)
