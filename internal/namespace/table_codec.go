package namespace

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

const (
	tableMagic   = "AXHT"
	tableVersion = 1
	tableHeader  = 4 + 1 + 1 + 8 + 4 // magic, version, depth, epoch, runs
	tableRun     = 4 + 2             // island, length-1
)

// AppendBinary appends the run-length form of the table described in the
// package doc. t must Validate; the encoding of an invalid table does not
// decode.
func (t Table) AppendBinary(b []byte) []byte {
	start := len(b)
	b = append(b, tableMagic...)
	b = append(b, tableVersion, t.Depth)
	b = binary.BigEndian.AppendUint64(b, t.Epoch)
	runsAt := len(b)
	b = append(b, 0, 0, 0, 0)
	var runs uint32
	for i := 0; i < len(t.Entries); {
		j := i + 1
		for j < len(t.Entries) && t.Entries[j] == t.Entries[i] && j-i < 1<<16 {
			j++
		}
		b = binary.BigEndian.AppendUint32(b, uint32(t.Entries[i]))
		b = binary.BigEndian.AppendUint16(b, uint16(j-i-1))
		runs++
		i = j
	}
	binary.BigEndian.PutUint32(b[runsAt:], runs)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// DecodeTable decodes a table from the front of b and returns the rest. It
// accepts only the canonical encoding AppendBinary produces (maximal runs)
// of a table that Validates.
func DecodeTable(b []byte) (Table, []byte, error) {
	if len(b) < tableHeader+4 {
		return Table{}, nil, fmt.Errorf("%w: %d bytes", ErrBadTable, len(b))
	}
	if string(b[:4]) != tableMagic {
		return Table{}, nil, fmt.Errorf("%w: magic %q", ErrBadTable, b[:4])
	}
	if b[4] != tableVersion {
		return Table{}, nil, fmt.Errorf("%w: version %d", ErrBadTable, b[4])
	}
	depth := b[5]
	if depth > MaxDepth {
		return Table{}, nil, fmt.Errorf("%w: depth %d (max %d)", ErrBadTable, depth, MaxDepth)
	}
	epoch := binary.BigEndian.Uint64(b[6:])
	runs := binary.BigEndian.Uint32(b[14:])
	n := 1 << depth
	if runs == 0 || runs > uint32(n) {
		return Table{}, nil, fmt.Errorf("%w: %d runs for %d entries", ErrBadTable, runs, n)
	}
	end := tableHeader + int(runs)*tableRun
	if len(b) < end+4 {
		return Table{}, nil, fmt.Errorf("%w: %d bytes for %d runs", ErrBadTable, len(b), runs)
	}
	if got, want := binary.BigEndian.Uint32(b[end:]), crc32.Checksum(b[:end], castagnoli); got != want {
		return Table{}, nil, fmt.Errorf("%w: checksum %#08x, computed %#08x", ErrBadTable, got, want)
	}
	t := Table{Depth: depth, Entries: make([]IslandID, 0, n), Epoch: epoch}
	for r := 0; r < int(runs); r++ {
		p := b[tableHeader+r*tableRun:]
		id := IslandID(binary.BigEndian.Uint32(p))
		length := int(binary.BigEndian.Uint16(p[4:])) + 1
		if id == NoIsland {
			return Table{}, nil, fmt.Errorf("%w: run %d has no island", ErrBadTable, r)
		}
		if r > 0 && t.Entries[len(t.Entries)-1] == id {
			return Table{}, nil, fmt.Errorf("%w: run %d continues run %d", ErrBadTable, r, r-1)
		}
		if len(t.Entries)+length > n {
			return Table{}, nil, fmt.Errorf("%w: runs exceed %d entries", ErrBadTable, n)
		}
		for range length {
			t.Entries = append(t.Entries, id)
		}
	}
	if len(t.Entries) != n {
		return Table{}, nil, fmt.Errorf("%w: runs cover %d of %d entries", ErrBadTable, len(t.Entries), n)
	}
	return t, b[end+4:], nil
}
