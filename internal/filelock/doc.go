// Package filelock is the lock table of one inode as a metadata island
// holds it: POSIX byte-range locks (fcntl F_SETLK/F_GETLK, OFD locks,
// NLM) and BSD flock locks, as pure functions over a sorted Set that the
// island stores per inode in its database (Encode, Decode).
//
// # Owners and kinds
//
// A lock belongs to an Owner: the client session and, inside it, the
// owner the kernel or protocol names (a files_struct, an open file
// description for OFD and flock locks, an NLM owner handle). Locks of
// different owners never merge; an owner never conflicts with itself.
//
// The two kinds are independent, as on Linux: a Flock lock never
// conflicts with a POSIX lock, even of another owner on the same bytes.
// Flock locks always cover the whole file (0..MaxEnd); an owner holds at
// most one, which Apply upgrades or downgrades in place.
//
// A third kind, Append, is no application's: a client holds it, whole
// file and exclusive, while it appends to a file opened O_APPEND (from
// reading the file's end to committing the write), so that appends from
// several clients never land on the same end. It behaves as Flock and
// conflicts only with itself.
//
// # POSIX semantics
//
// For one owner the POSIX locks follow Linux (fs/locks.c,
// posix_lock_inode): setting a lock replaces whatever the owner held in
// its range (a lock of the other type that extends past either end is
// split and keeps its type outside the range), and the result is merged
// with the owner's adjacent or overlapping locks of the same type; so the
// owner's locks never overlap and no two of the same type touch.
// Unlocking a range splits locks the same way, and unlocking a range that
// holds nothing is a no-op. Ranges are inclusive; End == MaxEnd means "to
// end of file and beyond" (l_len 0), and nothing is adjacent after it.
//
// Conflicts are decided per pair (Conflicts): same kind, different owner,
// overlapping ranges, at least one Write. The island checks Set.Conflict
// (what F_GETLK reports, and whether F_SETLK fails) before Set.Apply, and
// for a waiting request (F_SETLKW) asks Waits whether waiting for
// Set.Blockers would deadlock (EDEADLK).
//
// # Set
//
// A Set is sorted by (Kind, Owner.Session, Owner.ID, Start), which keeps
// each owner's locks contiguous and makes the encoding of equal sets
// equal. An empty Set is nil. No function modifies its argument, and the
// Sets returned never share memory with it, so a Set read from the
// database can be kept while a new one is computed.
//
// # Encoding
//
// Set.Encode writes, and Decode accepts only, exactly this:
//
//	u8       format version, 1
//	uvarint  count of locks, minimally encoded (encoding/binary)
//	count times, 38 bytes each, all big-endian fixed width:
//	  u64  Owner.Session
//	  u64  Owner.ID
//	  u8   Kind (1 POSIX, 2 Flock, 3 Append)
//	  u8   Type (1 Read, 2 Write)
//	  u64  Start
//	  u64  End
//	  u32  Pid
//
// with no bytes after the last lock. Decode rejects, with an error
// wrapping ErrCorrupt, a wrong version, a count the remaining bytes
// cannot hold (checked before allocating), trailing bytes, a lock that is
// not Valid, locks out of order or repeated, and locks of one owner and
// kind that overlap or that touch with the same type (unmerged). So every
// Set Decode returns satisfies the invariants the other functions rely
// on, and Encode gives back the very bytes decoded.
package filelock
