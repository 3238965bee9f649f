package cluster

import (
	"errors"
	"reflect"
	"testing"
)

// TestEntryMoves: pending moves are recorded, validated, survive the map
// encoding (an optional tail) and the raft command encoding, flip their
// entry when finished, and block table replacement while pending.
func TestEntryMoves(t *testing.T) {
	m := sampleMap()
	m.Islands[1].State = StateUp
	m.Islands = append(m.Islands, Island{ID: 3, Addr: "127.0.0.1:7502", State: StateUp})
	e1 := uint32(slicesIndex(m.Table.Entries, 1))
	e2 := uint32(slicesIndex(m.Table.Entries, 2))
	apply := func(c Command) (bool, error) { t.Helper(); return applyEncoded(t, m, c) }
	for _, bad := range [][]EntryMove{
		{{Entry: e1, From: 2, To: 3}},                              // not From's
		{{Entry: e1, From: 1, To: 1}},                              // to itself
		{{Entry: e1, From: 1, To: 9}},                              // unknown island
		{{Entry: e1, From: 1, To: 2}, {Entry: e1, From: 1, To: 3}}, // twice
		{{Entry: uint32(len(m.Table.Entries)), From: 1, To: 3}},    // no such entry
	} {
		if _, err := apply(Command{Type: CmdMoveEntries, Moves: bad}); err == nil {
			t.Fatalf("moves %v accepted", bad)
		}
	}
	if len(m.Moves) != 0 {
		t.Fatalf("refused moves left %v", m.Moves)
	}
	if _, err := apply(Command{Type: CmdMoveEntries, Moves: []EntryMove{{Entry: e1, From: 1, To: 2}, {Entry: e2, From: 2, To: 3}}}); err != nil {
		t.Fatal(err)
	}
	if len(m.Moves) != 2 || m.Moves[0].ID == m.Moves[1].ID || m.Moves[0].ID == 0 {
		t.Fatalf("moves %+v", m.Moves)
	}
	if _, err := apply(Command{Type: CmdMoveEntries, Moves: []EntryMove{{Entry: e1, From: 1, To: 3}}}); err == nil {
		t.Fatal("a second move of a moving entry accepted")
	}
	// The map carries them through its encoding.
	got, err := DecodeMap(EncodeMap(m))
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, m)
	}
	if mv, ok := m.Moving(e2); !ok || mv.To != 3 {
		t.Fatalf("Moving(%d) = %+v, %v", e2, mv, ok)
	}
	// No new table while moves are pending.
	if _, err := apply(Command{Type: CmdSetTable, Table: InitialTable([]uint32{1, 2, 3})}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("set-table with moves pending: %v", err)
	}
	// Finish one, cancel the other.
	id1, id2 := m.Moves[0].ID, m.Moves[1].ID
	if changed, err := apply(Command{Type: CmdFinishMove, MoveID: id1}); !changed || err != nil {
		t.Fatalf("finish: %v %v", changed, err)
	}
	if m.Table.Entries[e1] != 2 || len(m.Moves) != 1 {
		t.Fatalf("after finish: entry %d is %d's, moves %v", e1, m.Table.Entries[e1], m.Moves)
	}
	if _, err := apply(Command{Type: CmdFinishMove, MoveID: id1}); err == nil {
		t.Fatal("a finished move finished again")
	}
	if changed, err := apply(Command{Type: CmdCancelMove, MoveID: id2}); !changed || err != nil {
		t.Fatalf("cancel: %v %v", changed, err)
	}
	if m.Table.Entries[e2] != 2 || len(m.Moves) != 0 {
		t.Fatalf("after cancel: entry %d is %d's, moves %v", e2, m.Table.Entries[e2], m.Moves)
	}
	if changed, err := apply(Command{Type: CmdCancelMove, MoveID: id2}); changed || err != nil {
		t.Fatalf("cancel again: %v %v", changed, err)
	}
	// A map naming a move of an entry its From does not own is damage.
	bad := m.Clone()
	bad.Moves = []EntryMove{{ID: 1, Entry: e1, From: 1, To: 3}}
	if _, err := DecodeMap(EncodeMap(bad)); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("bad move decoded: %v", err)
	}
}

// TestPlanIslandMoves: removing an island moves all its entries to the
// others, evenly; adding one gives it its share; nothing when balanced.
func TestPlanIslandMoves(t *testing.T) {
	m := sampleMap()
	m.Islands = []Island{{ID: 1, State: StateUp}, {ID: 2, State: StateUp}, {ID: 3, State: StateUp}}
	m.Table = InitialTable([]uint32{1, 2, 3})
	after := func(split Table, moves []EntryMove) map[uint32]int {
		e := append([]uint32(nil), split.Entries...)
		for _, mv := range moves {
			if e[mv.Entry] != mv.From {
				t.Fatalf("move %v: entry is %d's", mv, e[mv.Entry])
			}
			e[mv.Entry] = mv.To
		}
		out := map[uint32]int{}
		for _, id := range e {
			out[id]++
		}
		return out
	}
	split, moves, err := PlanIslandMoves(m, []uint32{2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if c := after(split, moves); c[1] != 0 || c[2]-c[3] > 1 || c[3]-c[2] > 1 {
		t.Fatalf("remove 1: %v", c)
	}
	split, moves, err = PlanIslandMoves(m, []uint32{1, 2, 3})
	if err != nil || len(moves) != 0 {
		t.Fatalf("balanced: %v moves, %v", moves, err)
	}
	m.Islands = append(m.Islands, Island{ID: 4, State: StateUp})
	split, moves, err = PlanIslandMoves(m, []uint32{1, 2, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	c := after(split, moves)
	lo, hi := len(split.Entries), 0
	for _, id := range []uint32{1, 2, 3, 4} {
		lo, hi = min(lo, c[id]), max(hi, c[id])
	}
	if hi-lo > 1 {
		t.Fatalf("add 4: %v (depth %d -> %d)", c, m.Table.Depth, split.Depth)
	}
	if _, _, err := PlanIslandMoves(m, []uint32{1, 9}); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("unknown island: %v", err)
	}
}

func slicesIndex(s []uint32, v uint32) int {
	for k, x := range s {
		if x == v {
			return k
		}
	}
	return -1
}

// applyEncoded applies c to m after a trip through its raft encoding and
// checks that the epoch moved exactly when the map changed.
func applyEncoded(t *testing.T, m *Map, c Command) (bool, error) {
	t.Helper()
	d, err := DecodeCommand(c.Encode())
	if err != nil {
		t.Fatalf("%s: decode: %v", c.Type, err)
	}
	before := m.Epoch
	changed, err := m.Apply(d)
	if changed != (m.Epoch == before+1) {
		t.Fatalf("%s: changed %v, epoch %d -> %d", c.Type, changed, before, m.Epoch)
	}
	return changed, err
}
