package metawire

import "github.com/atoll-fs/atoll/internal/wire"

// OpImportEntry carries the records of a table entry that is moving from
// the island sending it to the island receiving it (island to island,
// the cluster key). ImportReq -> Empty.
const OpImportEntry uint16 = 69

// ImportReq is one chunk of a moving entry's records: the namespace keys
// of buckets First..Last in key order, and with the chunk that has Final
// set, the entry is complete. Chunk numbers start at 0 for each attempt;
// a chunk 0 starts the move over (the source restarted), so the receiver
// drops what it gathered of an earlier attempt. The receiver applies the
// whole entry at once when the final chunk arrives, and answers a move it
// already applied without applying it again.
type ImportReq struct {
	MoveID      uint64
	From        uint32
	First, Last uint32
	Chunk       uint32
	Final       bool
	Keys        [][]byte // Keys[k] has value Values[k]
	Values      [][]byte
	// Boots (final chunk) are the source's incarnation and those it
	// adopted: lazy changes they acknowledged are in the records, and
	// the destination answers syncs with them (SyncResp.Adopted).
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
	e.U32(r.Chunk)
	e.Bool(r.Final)
	e.Uvarint(uint64(len(r.Keys)))
	for k := range r.Keys {
		e.Bytes(r.Keys[k])
		e.Bytes(r.Values[k])
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
	r.Chunk = d.U32()
	r.Final = d.Bool()
	n := d.Count(2)
	r.Keys, r.Values = make([][]byte, n), make([][]byte, n)
	for k := range n {
		r.Keys[k] = d.Bytes()
		r.Values[k] = d.Bytes()
	}
	n = d.Count(8)
	r.Boots = make([]uint64, n)
	for k := range n {
		r.Boots[k] = d.U64()
	}
}
