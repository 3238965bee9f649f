package filelock

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Kind is the family of a lock; locks of different kinds never conflict.
type Kind uint8

const (
	POSIX Kind = 1 // fcntl byte-range locks, OFD locks, NLM
	Flock Kind = 2 // BSD flock: whole file
	// Append is held (exclusive, whole file) by a client while it
	// appends to a file opened O_APPEND: from the end it reads under
	// it to the commit of the write, so appends of several clients
	// never take the same end. No application lock conflicts with it.
	Append Kind = 3
)

func (k Kind) String() string {
	switch k {
	case POSIX:
		return "posix"
	case Flock:
		return "flock"
	case Append:
		return "append"
	}
	return fmt.Sprintf("kind%d", uint8(k))
}

// wholeFile reports whether locks of kind k always span the whole file,
// one per owner.
func (k Kind) wholeFile() bool { return k == Flock || k == Append }

// Type is shared or exclusive.
type Type uint8

const (
	Read  Type = 1 // shared
	Write Type = 2 // exclusive
)

// MaxEnd is the End of a lock "to end of file and beyond" (l_len 0).
const MaxEnd = ^uint64(0)

// Owner identifies a lock holder: a client session and the owner the
// kernel or protocol names inside it.
type Owner struct{ Session, ID uint64 }

// Lock is one lock held, or requested, on the inode.
type Lock struct {
	Owner      Owner
	Kind       Kind
	Type       Type
	Start, End uint64 // inclusive byte range; Flock locks are always 0..MaxEnd
	Pid        uint32 // the holder's process id, reported by F_GETLK (0 unknown)
}

// Set is the locks on one inode: sorted by (Kind, Owner.Session,
// Owner.ID, Start); for one owner and kind, ranges never overlap and
// adjacent ranges of the same type are merged (as Linux keeps POSIX
// locks). An empty Set is nil.
type Set []Lock

var (
	// ErrInvalid is wrapped by the errors of Lock.Valid.
	ErrInvalid = errors.New("filelock: invalid lock")
	// ErrCorrupt is wrapped by the errors of Decode.
	ErrCorrupt = errors.New("filelock: corrupt lock set")
)

// Valid reports whether l is a well-formed request (Kind and Type known,
// Start <= End, Flock spans 0..MaxEnd), with an error wrapping ErrInvalid
// that says what is wrong.
func (l Lock) Valid() error {
	switch {
	case l.Kind != POSIX && !l.Kind.wholeFile():
		return fmt.Errorf("%w: unknown kind %d", ErrInvalid, l.Kind)
	case l.Type != Read && l.Type != Write:
		return fmt.Errorf("%w: unknown type %d", ErrInvalid, l.Type)
	case l.Start > l.End:
		return fmt.Errorf("%w: start %d after end %d", ErrInvalid, l.Start, l.End)
	case l.Kind.wholeFile() && (l.Start != 0 || l.End != MaxEnd):
		return fmt.Errorf("%w: %s lock on %d..%d, not the whole file", ErrInvalid, l.Kind, l.Start, l.End)
	}
	return nil
}

// overlaps reports whether the inclusive ranges of a and b share a byte.
func overlaps(a, b Lock) bool { return a.Start <= b.End && b.Start <= a.End }

// touches reports whether b starts right after a ends; nothing follows
// MaxEnd (a.End+1 would wrap to 0).
func touches(a, b Lock) bool { return a.End != MaxEnd && a.End+1 == b.Start }

// compare is the Set order.
func compare(a, b Lock) int {
	return cmp.Or(
		cmp.Compare(a.Kind, b.Kind),
		cmp.Compare(a.Owner.Session, b.Owner.Session),
		cmp.Compare(a.Owner.ID, b.Owner.ID),
		cmp.Compare(a.Start, b.Start),
	)
}

// Conflicts reports whether a and b conflict: same Kind, different
// Owner, overlapping ranges, and at least one is Write.
func Conflicts(a, b Lock) bool {
	return a.Kind == b.Kind && a.Owner != b.Owner && overlaps(a, b) &&
		(a.Type == Write || b.Type == Write)
}

// Conflict returns the first lock in s that conflicts with l (the one
// F_GETLK reports), and whether there is one.
func (s Set) Conflict(l Lock) (Lock, bool) {
	for _, e := range s {
		if Conflicts(e, l) {
			return e, true
		}
	}
	return Lock{}, false
}

// Blockers returns the distinct owners of locks in s that conflict with l
// (for a wait-for graph), in Set order.
func (s Set) Blockers(l Lock) []Owner {
	var out []Owner
	for _, e := range s {
		if Conflicts(e, l) && !slices.Contains(out, e.Owner) {
			out = append(out, e.Owner)
		}
	}
	return out
}

// cut appends to out what remains of e outside [start, end]: nothing, e
// itself, or one or two pieces that keep e's type and pid. The bounds
// checks keep start-1 and end+1 from wrapping.
func cut(out Set, e Lock, start, end uint64) Set {
	if start > end || e.Start > end || e.End < start {
		return append(out, e)
	}
	if e.Start < start {
		left := e
		left.End = start - 1
		out = append(out, left)
	}
	if e.End > end {
		right := e
		right.Start = end + 1
		out = append(out, right)
	}
	return out
}

// nilIfEmpty keeps the "empty Set is nil" rule, so equal sets compare
// equal with reflect.DeepEqual whichever function made them.
func nilIfEmpty(s Set) Set {
	if len(s) == 0 {
		return nil
	}
	return s
}

// Apply returns the set with l granted to l.Owner (the caller checked
// Conflict first; Apply does not check). POSIX: the owner's own locks of
// the same kind in [l.Start, l.End] are replaced by l (splitting a lock
// that extends past either end, which keeps its type), then l is merged
// with the owner's adjacent or overlapping locks of the same type; the
// merged lock takes l's Pid. Flock: the owner's flock lock is replaced
// (upgrade/downgrade in place). Returns a new slice; s is not modified.
// l must be Valid; an invalid l leaves the set unchanged (a copy), so
// that a bad request cannot break the Set invariants.
func (s Set) Apply(l Lock) Set {
	out := make(Set, 0, len(s)+2)
	if l.Valid() != nil {
		return nilIfEmpty(append(out, s...))
	}
	merged := l
	for _, e := range s {
		switch {
		case e.Owner != l.Owner || e.Kind != l.Kind:
			out = append(out, e)
		case l.Kind.wholeFile():
			// The owner's one flock (or append) lock: dropped, l takes
			// its place.
		case e.Type == l.Type && (overlaps(e, l) || touches(e, l) || touches(l, e)):
			// Same type touching the request: absorbed into it, as Linux
			// extends one lock rather than keeping neighbours. Tested against
			// l, not merged: by the Set invariant no other same-type lock
			// touches e, so growing merged cannot reach further locks.
			merged.Start = min(merged.Start, e.Start)
			merged.End = max(merged.End, e.End)
		default:
			// The other type: the request wins inside its range only.
			out = cut(out, e, l.Start, l.End)
		}
	}
	out = append(out, merged)
	// Only the owner's contiguous run is out of place; a full sort is
	// simplest and lock tables are short.
	slices.SortFunc(out, compare)
	return out
}

// Unlock removes the owner's locks of kind k in [start, end] (splitting
// locks that extend past it). For Flock the range is ignored (the whole
// flock lock goes). An empty range (start > end) or one holding nothing
// changes nothing.
func (s Set) Unlock(o Owner, k Kind, start, end uint64) Set {
	out := make(Set, 0, len(s)+1)
	for _, e := range s {
		switch {
		case e.Owner != o || e.Kind != k:
			out = append(out, e)
		case k.wholeFile():
			// dropped
		default:
			// Pieces come out in order, so the Set stays sorted.
			out = cut(out, e, start, end)
		}
	}
	return nilIfEmpty(out)
}

// UnlockOwner removes every lock of the owner, both kinds.
func (s Set) UnlockOwner(o Owner) Set {
	out := make(Set, 0, len(s))
	for _, e := range s {
		if e.Owner != o {
			out = append(out, e)
		}
	}
	return nilIfEmpty(out)
}

// DropSession removes every lock of every owner of the session, and
// reports how many were removed.
func (s Set) DropSession(session uint64) (Set, int) {
	out := make(Set, 0, len(s))
	for _, e := range s {
		if e.Owner.Session != session {
			out = append(out, e)
		}
	}
	return nilIfEmpty(out), len(s) - len(out)
}

// Held returns the locks of owner o (both kinds), in order: POSIX locks
// by Start, then its flock lock.
func (s Set) Held(o Owner) []Lock {
	var out []Lock
	for _, e := range s {
		if e.Owner == o {
			out = append(out, e)
		}
	}
	return out
}
