package metawire

import "github.com/atoll-fs/atoll/internal/wire"

// OpImportEntry carries the records of a table entry that is moving from
// the island sending it to the island receiving it (island to island,
// the cluster key). ImportReq -> Empty.
const OpImportEntry uint16 = 69

// Import phases (ImportReq.Phase).
const (
	// ImportWhole: every record of the entry; the final chunk completes
	// the move's copy (the source is frozen).
	ImportWhole uint8 = 0
	// ImportBase: every record from a snapshot taken while the source
	// still serves; a delta completes it.
	ImportBase uint8 = 1
	// ImportDelta: the records written since the base (Keys/Values set,
	// Deleted deleted), sent once the source is frozen; the receiver
	// refuses it (ErrBusy) without the base.
	ImportDelta uint8 = 2
)

// ImportReq is one chunk of a moving entry's records: namespace keys of
// buckets First..Last in key order. Chunk numbers start at 0 for each
// phase of each attempt; a chunk 0 starts that phase over (the source
// restarted), so the receiver drops what it gathered of an earlier one.
// The receiver applies a phase at once when its final chunk arrives, and
// answers a move whose copy it completed without applying it again.
type ImportReq struct {
	MoveID      uint64
	From        uint32
	First, Last uint32
	Phase       uint8
	Chunk       uint32
	Final       bool
	Keys        [][]byte // Keys[k] has value Values[k]
	Values      [][]byte
	Deleted     [][]byte // ImportDelta: keys deleted since the base
	// Boots (the final chunk of a whole copy or a delta) are the
	// source's incarnation and those it adopted: lazy changes they
	// acknowledged are in the records, and the destination answers syncs
	// with them (SyncResp.Adopted).
	Boots []uint64
}

// MaxImportChunk bounds the record bytes of one ImportReq (under the
// wire's 1 MiB message limit).
const MaxImportChunk = 768 << 10

func (r *ImportReq) Encode(e *wire.Enc) {
	e.U64(r.MoveID)
	e.U32(r.From)
	e.U32(r.First)
	e.U32(r.Last)
	e.U8(r.Phase)
	e.U32(r.Chunk)
	e.Bool(r.Final)
	e.Uvarint(uint64(len(r.Keys)))
	for k := range r.Keys {
		e.Bytes(r.Keys[k])
		e.Bytes(r.Values[k])
	}
	e.Uvarint(uint64(len(r.Deleted)))
	for _, k := range r.Deleted {
		e.Bytes(k)
	}
	e.Uvarint(uint64(len(r.Boots)))
	for _, b := range r.Boots {
		e.U64(b)
	}
}

func (r *ImportReq) Decode(d *wire.Dec) {
	r.MoveID = d.U64()
	r.From = d.U32()
	r.First = d.U32()
	r.Last = d.U32()
	r.Phase = d.U8()
	r.Chunk = d.U32()
	r.Final = d.Bool()
	n := d.Count(2)
	r.Keys, r.Values = make([][]byte, n), make([][]byte, n)
	for k := range n {
		r.Keys[k] = d.Bytes()
		r.Values[k] = d.Bytes()
	}
	n = d.Count(1)
	r.Deleted = make([][]byte, n)
	for k := range n {
		r.Deleted[k] = d.Bytes()
	}
	n = d.Count(8)
	r.Boots = make([]uint64, n)
	for k := range n {
		r.Boots[k] = d.U64()
	}
}

// OpEntryLoad asks an island how many client operations each table
// entry it owns has served since it started (Archipelago's load
// measure): EntryLoadReq -> EntryLoadResp. The rebalancer samples it
// twice and divides by the time between.
const OpEntryLoad uint16 = 70

// EntryLoadReq names the table depth the entries are counted at.
type EntryLoadReq struct{ Depth uint8 }

func (r *EntryLoadReq) Encode(e *wire.Enc) { e.U8(r.Depth) }
func (r *EntryLoadReq) Decode(d *wire.Dec) { r.Depth = d.U8() }

// EntryLoad is one entry's counts: client operations, and file bytes
// committed to its inodes.
type EntryLoad struct {
	Entry uint32
	Ops   uint64
	Bytes uint64
}

// EntryLoadResp lists the entries the island owns with their counts, and
// Boot, the island's incarnation (counts start over with a new one).
type EntryLoadResp struct {
	Boot    uint64
	Entries []EntryLoad
}

func (r *EntryLoadResp) Encode(e *wire.Enc) {
	e.U64(r.Boot)
	e.Uvarint(uint64(len(r.Entries)))
	for _, x := range r.Entries {
		e.U32(x.Entry)
		e.U64(x.Ops)
	}
	// Bytes came later: a tail in the entries' order.
	e.Uvarint(uint64(len(r.Entries)))
	for _, x := range r.Entries {
		e.U64(x.Bytes)
	}
}

func (r *EntryLoadResp) Decode(d *wire.Dec) {
	r.Boot = d.U64()
	n := d.Count(12)
	r.Entries = make([]EntryLoad, n)
	for k := range n {
		r.Entries[k] = EntryLoad{Entry: d.U32(), Ops: d.U64()}
	}
	if d.More() {
		for k := range d.Count(8) {
			if b := d.U64(); k < n {
				r.Entries[k].Bytes = b
			}
		}
	}
}
