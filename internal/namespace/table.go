package namespace

import (
	"fmt"
	"slices"
)

// IslandID names a metadata island in the cluster map.
type IslandID uint32

// NoIsland is the reserved zero IslandID: no table entry ever holds it.
const NoIsland IslandID = 0

const (
	// MaxDepth is the largest table depth: 65536 entries.
	MaxDepth = 16
	// MinEntriesPerIsland is the granularity PlanRebalance and DepthFor
	// aim for: with at least this many entries per island, a share that is
	// off by one entry is off by at most 1/16 of a fair share.
	MinEntriesPerIsland = 16
)

// Table is the extendible hash table of the cluster map. Entry i owns the
// buckets whose top Depth bits are i, that is the contiguous bucket range
// EntryRange(Depth, i). Epoch is the cluster map epoch the table was made
// in; this package never changes it (callers bump it when they install a
// new table).
type Table struct {
	Depth   uint8
	Entries []IslandID // len 1<<Depth
	Epoch   uint64
	// Moves are the entries being moved to another island (the cluster
	// map's pending moves): each stays its From's until the move
	// finishes and the table names To.
	Moves []PendingMove
}

// PendingMove is a move of entry Entry (at the table's depth) from island
// From to island To that has not finished; ID names it in the cluster map.
type PendingMove struct {
	ID       uint64
	Entry    uint32
	From, To IslandID
}

// Move returns the pending move with id, if the table has it.
func (t Table) Move(id uint64) (PendingMove, bool) {
	for _, m := range t.Moves {
		if m.ID == id {
			return m, true
		}
	}
	return PendingMove{}, false
}

// DepthFor returns the smallest depth giving n islands MinEntriesPerIsland
// entries each, capped at MaxDepth.
func DepthFor(n int) uint8 {
	var d uint8
	for d < MaxDepth && 1<<d < MinEntriesPerIsland*n {
		d++
	}
	return d
}

// NewTable returns a table of the given depth whose entries are shared out
// among the islands in contiguous runs, in ascending island order: island
// k of n gets entries [k*N/n, (k+1)*N/n) of N, so shares differ by at most
// one entry and each island owns one contiguous bucket range (one pebble
// key range to copy when it moves, and runs that Merge can fold). The
// order of islands does not matter; it must be non-empty, without
// NoIsland or duplicates, and no larger than the number of entries.
func NewTable(islands []IslandID, depth uint8) (Table, error) {
	ids, err := sortedIslands(islands)
	if err != nil {
		return Table{}, fmt.Errorf("%w: %w", ErrBadTable, err)
	}
	if depth > MaxDepth {
		return Table{}, fmt.Errorf("%w: depth %d (max %d)", ErrBadTable, depth, MaxDepth)
	}
	n := 1 << depth
	if len(ids) > n {
		return Table{}, fmt.Errorf("%w: %d islands for %d entries", ErrBadTable, len(ids), n)
	}
	t := Table{Depth: depth, Entries: make([]IslandID, n)}
	for k, id := range ids {
		lo, hi := k*n/len(ids), (k+1)*n/len(ids)
		for i := lo; i < hi; i++ {
			t.Entries[i] = id
		}
	}
	return t, nil
}

// sortedIslands returns a sorted copy of islands, rejecting an empty list,
// NoIsland and duplicates.
func sortedIslands(islands []IslandID) ([]IslandID, error) {
	if len(islands) == 0 {
		return nil, fmt.Errorf("no islands")
	}
	ids := slices.Clone(islands)
	slices.Sort(ids)
	for i, id := range ids {
		if id == NoIsland {
			return nil, fmt.Errorf("island id %d is reserved", NoIsland)
		}
		if i > 0 && ids[i-1] == id {
			return nil, fmt.Errorf("island %d listed twice", id)
		}
	}
	return ids, nil
}

// Validate checks the table's depth, size and entries.
func (t Table) Validate() error {
	if t.Depth > MaxDepth {
		return fmt.Errorf("%w: depth %d (max %d)", ErrBadTable, t.Depth, MaxDepth)
	}
	if len(t.Entries) != 1<<t.Depth {
		return fmt.Errorf("%w: %d entries at depth %d", ErrBadTable, len(t.Entries), t.Depth)
	}
	if i := slices.Index(t.Entries, NoIsland); i >= 0 {
		return fmt.Errorf("%w: entry %d has no island", ErrBadTable, i)
	}
	return nil
}

// Lookup returns the island owning bucket. It returns NoIsland, rather than
// panicking, for a table that does not Validate.
func (t Table) Lookup(bucket uint32) IslandID {
	i := uint64(bucket) >> (32 - uint(t.Depth)) // Depth > 32 shifts to 0
	if i >= uint64(len(t.Entries)) || len(t.Entries) != 1<<t.Depth {
		return NoIsland
	}
	return t.Entries[i]
}

// EntryRange returns the first and last bucket of entry i at depth d.
func EntryRange(d uint8, i uint32) (first, last uint32) {
	if d == 0 {
		return 0, ^uint32(0)
	}
	shift := 32 - uint(min(d, 32))
	first = uint32(uint64(i) << shift)
	return first, first | uint32(1<<shift-1)
}

// Clone returns a copy of t that shares no memory with it.
func (t Table) Clone() Table {
	t.Entries = slices.Clone(t.Entries)
	t.Moves = slices.Clone(t.Moves)
	return t
}

// Split returns the table at depth+1: entry i becomes entries 2i and 2i+1,
// both with i's owner, so every bucket keeps its island.
func (t Table) Split() (Table, error) {
	if err := t.Validate(); err != nil {
		return Table{}, err
	}
	if t.Depth == MaxDepth {
		return Table{}, fmt.Errorf("%w: cannot split past depth %d", ErrBadTable, MaxDepth)
	}
	return t.splitTo(t.Depth + 1), nil
}

// splitTo returns t (valid) at depth d >= t.Depth.
func (t Table) splitTo(d uint8) Table {
	k := d - t.Depth
	u := Table{Depth: d, Entries: make([]IslandID, 1<<d), Epoch: t.Epoch}
	for i, id := range t.Entries {
		for j := i << k; j < (i+1)<<k; j++ {
			u.Entries[j] = id
		}
	}
	return u
}

// Merge returns the table at depth-1 and true when every pair of entries
// 2i, 2i+1 has one owner (so no bucket changes island); otherwise, or at
// depth 0, it returns t and false.
func (t Table) Merge() (Table, bool) {
	if t.Depth == 0 || t.Validate() != nil {
		return t, false
	}
	for i := 0; i < len(t.Entries); i += 2 {
		if t.Entries[i] != t.Entries[i+1] {
			return t, false
		}
	}
	u := Table{Depth: t.Depth - 1, Entries: make([]IslandID, len(t.Entries)/2), Epoch: t.Epoch}
	for i := range u.Entries {
		u.Entries[i] = t.Entries[2*i]
	}
	return u, true
}

// Counts returns the number of entries each island owns.
func (t Table) Counts() map[IslandID]int {
	c := make(map[IslandID]int)
	for _, id := range t.Entries {
		c[id]++
	}
	return c
}

// Islands returns the islands owning at least one entry, ascending.
func (t Table) Islands() []IslandID {
	ids := slices.Clone(t.Entries)
	slices.Sort(ids)
	return slices.Compact(ids)
}
