package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// EntryMove is a pending move of namespace table entry Entry (at the
// table's current depth) from island From to island To. The map records
// it from the moment an operator (or the rebalancer) asks for it until
// the source island has handed the entry's records to To and asks the
// manager to flip the entry (FinishMove); the table keeps naming From
// until then. See internal/meta's doc ("Moving table entries").
type EntryMove struct {
	ID    uint64 `json:"id"` // unique in the map's history: the epoch that added it << 16 | its index
	Entry uint32 `json:"entry"`
	From  uint32 `json:"from"`
	To    uint32 `json:"to"`
}

func (mv EntryMove) String() string {
	return fmt.Sprintf("move %d: entry %d, island %d -> %d", mv.ID, mv.Entry, mv.From, mv.To)
}

// MaxMoves bounds the moves a map holds at once (a table has at most
// 65536 entries).
const MaxMoves = 1 << 16

func encodeMoves(e *wire.Enc, mv []EntryMove) {
	e.Uvarint(uint64(len(mv)))
	for _, m := range mv {
		e.U64(m.ID)
		e.U32(m.Entry)
		e.U32(m.From)
		e.U32(m.To)
	}
}

func decodeMoves(d *wire.Dec) []EntryMove {
	n := d.Count(20)
	if n == 0 {
		return nil
	}
	out := make([]EntryMove, n)
	for i := range out {
		out[i] = EntryMove{ID: d.U64(), Entry: d.U32(), From: d.U32(), To: d.U32()}
	}
	return out
}

// validateMoves checks pending moves against the map: each names an entry
// of the table owned by From, a registered island To other than From,
// and no entry or id appears twice.
func (m *Map) validateMoves() error {
	if len(m.Moves) > MaxMoves {
		return fmt.Errorf("%w: %d pending moves", ErrBadRequest, len(m.Moves))
	}
	entries := make(map[uint32]bool, len(m.Moves))
	ids := make(map[uint64]bool, len(m.Moves))
	for _, mv := range m.Moves {
		if err := m.checkMove(mv); err != nil {
			return err
		}
		if entries[mv.Entry] || ids[mv.ID] {
			return fmt.Errorf("%w: %v: entry or id moving twice", ErrBadRequest, mv)
		}
		entries[mv.Entry], ids[mv.ID] = true, true
	}
	return nil
}

func (m *Map) checkMove(mv EntryMove) error {
	switch {
	case int(mv.Entry) >= len(m.Table.Entries):
		return fmt.Errorf("%w: %v: the table has %d entries", ErrBadRequest, mv, len(m.Table.Entries))
	case m.Table.Entries[mv.Entry] != mv.From:
		return fmt.Errorf("%w: %v: the entry is island %d's", ErrBadRequest, mv, m.Table.Entries[mv.Entry])
	case mv.From == mv.To:
		return fmt.Errorf("%w: %v: to the island that has it", ErrBadRequest, mv)
	}
	if _, ok := m.Island(mv.To); !ok {
		return fmt.Errorf("%w: %v: island %d", ErrUnknownMember, mv, mv.To)
	}
	return nil
}

// applyMoveEntries records new pending moves (their ID fields are
// assigned here). Every move must be valid; none may name an entry
// already moving. The destination must not be out.
func (m *Map) applyMoveEntries(moves []EntryMove) (bool, error) {
	if !m.Formatted {
		return false, ErrNotFormatted
	}
	if len(moves) == 0 {
		return false, nil
	}
	next := slices.Clone(m.Moves)
	for k, mv := range moves {
		mv.ID = (m.Epoch+1)<<16 | uint64(k)
		if err := m.checkMove(mv); err != nil {
			return false, err
		}
		if is, _ := m.Island(mv.To); is.State == StateOut {
			return false, fmt.Errorf("%w: %v: island %d is out", ErrBadRequest, mv, mv.To)
		}
		if slices.ContainsFunc(next, func(o EntryMove) bool { return o.Entry == mv.Entry }) {
			return false, fmt.Errorf("%w: %v: the entry is moving already", ErrBadRequest, mv)
		}
		next = append(next, mv)
	}
	if len(next) > MaxMoves {
		return false, fmt.Errorf("%w: %d pending moves", ErrBadRequest, len(next))
	}
	m.Moves = next
	return true, nil
}

// applyFinishMove gives a pending move's entry to its destination and
// forgets the move. Finishing a move the map no longer holds is an
// error (the caller looks at the table to see whether it happened).
func (m *Map) applyFinishMove(id uint64) (bool, error) {
	k := m.moveIndex(id)
	if k < 0 {
		return false, fmt.Errorf("%w: no pending move %d", ErrBadRequest, id)
	}
	mv := m.Moves[k]
	if err := m.checkMove(mv); err != nil {
		return false, err
	}
	m.Table.Entries = slices.Clone(m.Table.Entries)
	m.Table.Entries[mv.Entry] = mv.To
	m.Moves = slices.Delete(slices.Clone(m.Moves), k, k+1)
	return true, nil
}

// applyCancelMove forgets a pending move; the entry stays its source's.
func (m *Map) applyCancelMove(id uint64) (bool, error) {
	k := m.moveIndex(id)
	if k < 0 {
		return false, nil
	}
	m.Moves = slices.Delete(slices.Clone(m.Moves), k, k+1)
	return true, nil
}

// moveIndex is the index of pending move id in m.Moves, -1 if none.
func (m *Map) moveIndex(id uint64) int {
	return slices.IndexFunc(m.Moves, func(mv EntryMove) bool { return mv.ID == id })
}

// Moving returns the pending move of entry, if any.
func (m *Map) Moving(entry uint32) (EntryMove, bool) {
	k := slices.IndexFunc(m.Moves, func(mv EntryMove) bool { return mv.Entry == entry })
	if k < 0 {
		return EntryMove{}, false
	}
	return m.Moves[k], true
}

// MoveEntriesReq asks for entry moves (their ID fields are ignored).
type MoveEntriesReq struct{ Moves []EntryMove }

func (r *MoveEntriesReq) Encode(e *wire.Enc) { encodeMoves(e, r.Moves) }
func (r *MoveEntriesReq) Decode(d *wire.Dec) { r.Moves = decodeMoves(d) }

// MoveIDReq names a pending move (finish, cancel).
type MoveIDReq struct{ ID uint64 }

func (r *MoveIDReq) Encode(e *wire.Enc) { e.U64(r.ID) }
func (r *MoveIDReq) Decode(d *wire.Dec) { r.ID = d.U64() }

// MoveEntries records pending moves of table entries; the source islands
// carry them out. It returns the resulting epoch.
func (c *Client) MoveEntries(ctx context.Context, moves []EntryMove) (uint64, error) {
	return c.callEpoch(ctx, OpMoveEntries, Marshal(&MoveEntriesReq{Moves: moves}))
}

// FinishMove flips a pending move's entry to its destination (the source
// island calls it once the destination holds the entry's records) and
// returns the resulting epoch.
func (c *Client) FinishMove(ctx context.Context, id uint64) (uint64, error) {
	return c.callEpoch(ctx, OpFinishMove, Marshal(&MoveIDReq{ID: id}))
}

// CancelMove forgets a pending move; its source island then serves the
// entry again. It returns the resulting epoch.
func (c *Client) CancelMove(ctx context.Context, id uint64) (uint64, error) {
	return c.callEpoch(ctx, OpCancelMove, Marshal(&MoveIDReq{ID: id}))
}

// NamespaceTable is the map's table as the namespace package has it: its
// entries, the map's epoch and the pending moves.
func (m *Map) NamespaceTable() namespace.Table {
	t := namespace.Table{Depth: m.Table.Depth, Epoch: m.Epoch, Entries: make([]namespace.IslandID, len(m.Table.Entries))}
	for k, e := range m.Table.Entries {
		t.Entries[k] = namespace.IslandID(e)
	}
	for _, mv := range m.Moves {
		t.Moves = append(t.Moves, namespace.PendingMove{ID: mv.ID, Entry: mv.Entry, From: namespace.IslandID(mv.From), To: namespace.IslandID(mv.To)})
	}
	return t
}

// PlanIslandMoves plans the entry moves that share the namespace table
// evenly among islands (namespace.PlanRebalance, by entry counts): an
// island of the list with no entry is being added, an owner missing
// from it is being removed and gives all its entries away. The plan may
// work at a greater depth than the map's table: split is then the table
// to install first (every bucket keeps its island), else the current
// table. Moves already pending make it an error.
func PlanIslandMoves(m *Map, islands []uint32) (split Table, moves []EntryMove, err error) {
	if !m.Formatted {
		return Table{}, nil, ErrNotFormatted
	}
	if len(m.Moves) > 0 {
		return Table{}, nil, fmt.Errorf("%w: %d entry moves pending", ErrBadRequest, len(m.Moves))
	}
	for _, id := range islands {
		if _, ok := m.Island(id); !ok {
			return Table{}, nil, fmt.Errorf("%w: island %d", ErrUnknownMember, id)
		}
	}
	t := m.NamespaceTable()
	keep := make([]namespace.IslandID, len(islands))
	for k, id := range islands {
		keep[k] = namespace.IslandID(id)
	}
	plan, err := namespace.PlanRebalance(t, nil, keep)
	if err != nil {
		return Table{}, nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	split = m.Table.Clone()
	for _, mv := range plan {
		for split.Depth < mv.Depth {
			next := Table{Depth: split.Depth + 1, Entries: make([]uint32, 2*len(split.Entries))}
			for k, id := range split.Entries {
				next.Entries[2*k], next.Entries[2*k+1] = id, id
			}
			split = next
		}
		moves = append(moves, EntryMove{Entry: mv.Entry, From: uint32(mv.From), To: uint32(mv.To)})
	}
	return split, moves, nil
}

// RunIslandMoves installs split if it is deeper than the map's table,
// records moves and waits (until ctx ends) for the islands to carry them
// out, calling progress with the moves left after every look at the map.
func RunIslandMoves(ctx context.Context, c *Client, split Table, moves []EntryMove, progress func(left int)) error {
	m, err := c.Map(ctx, 0)
	if err != nil {
		return err
	}
	if split.Depth > m.Table.Depth {
		if _, err := c.SetTable(ctx, split); err != nil {
			return fmt.Errorf("splitting the table to depth %d: %w", split.Depth, err)
		}
	}
	if len(moves) > 0 {
		if _, err := c.MoveEntries(ctx, moves); err != nil {
			return err
		}
	}
	for {
		m, err := c.Map(ctx, 0)
		if err != nil {
			return err
		}
		if progress != nil {
			progress(len(m.Moves))
		}
		if len(m.Moves) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d entry moves still pending: %w", len(m.Moves), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
