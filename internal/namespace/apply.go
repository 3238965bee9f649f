package namespace

import "fmt"

// Apply returns t with the moves applied in order; t is not changed. It
// first splits the table to the largest depth among the moves. Each move
// must name an entry that exists at its depth, an owner From that owns all
// of it at that point, and a target To that is neither NoIsland nor From.
// The caller bumps the epoch of the result; Merge may fold it afterwards.
func Apply(t Table, moves []Move) (Table, error) {
	if err := t.Validate(); err != nil {
		return Table{}, err
	}
	d := t.Depth
	for _, m := range moves {
		if m.Depth > MaxDepth {
			return Table{}, fmt.Errorf("%w: %v: depth above %d", ErrBadMove, m, MaxDepth)
		}
		d = max(d, m.Depth)
	}
	u := t.splitTo(d)
	for _, m := range moves {
		if m.To == NoIsland || m.To == m.From || uint64(m.Entry) >= 1<<m.Depth {
			return Table{}, fmt.Errorf("%w: %v", ErrBadMove, m)
		}
		k := d - m.Depth
		lo, hi := int(m.Entry)<<k, int(m.Entry+1)<<k
		for i := lo; i < hi; i++ {
			if u.Entries[i] != m.From {
				return Table{}, fmt.Errorf("%w: %v: entry %d/%d belongs to island %d", ErrBadMove, m, i, d, u.Entries[i])
			}
			u.Entries[i] = m.To
		}
	}
	return u, nil
}

// Diff returns the moves that turn table a into table b, at the larger of
// their depths, in entry order: Apply(a, Diff(a, b)) has b's entries.
func Diff(a, b Table) ([]Move, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	d := max(a.Depth, b.Depth)
	a, b = a.splitTo(d), b.splitTo(d)
	var moves []Move
	for i := range a.Entries {
		if a.Entries[i] != b.Entries[i] {
			moves = append(moves, Move{Depth: d, Entry: uint32(i), From: a.Entries[i], To: b.Entries[i]})
		}
	}
	return moves, nil
}
