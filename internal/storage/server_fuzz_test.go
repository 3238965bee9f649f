package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/wire"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// fuzzStatuses are the statuses a healthy store may answer to any request:
// client mistakes and honest refusals. Internal, Corrupt and Unavailable
// would mean that input alone broke the server or its data.
var fuzzStatuses = map[uint32]error{
	fragment.StatusNotFound:       ErrNotFound,
	fragment.StatusExists:         ErrExists,
	fragment.StatusOutOfRange:     ErrOutOfRange,
	fragment.StatusNoSpace:        ErrNoSpace,
	fragment.StatusBadData:        ErrBadData,
	fragment.StatusRepairMismatch: ErrRepairMismatch,
	fragment.StatusBadRequest:     fragment.ErrBadRequest,
}

// fuzzCRCsMatch is an independent check of a PutReq's sender checksums.
func fuzzCRCsMatch(data []byte, chunk uint32, crcs []uint32) bool {
	if chunk == 0 {
		return len(crcs) == 0
	}
	var want []uint32
	for off := 0; off < len(data); off += int(chunk) {
		want = append(want, checksum(data[off:min(off+int(chunk), len(data))]))
	}
	if len(want) != len(crcs) {
		return false
	}
	for i := range want {
		if want[i] != crcs[i] {
			return false
		}
	}
	return true
}

// fuzzContent reads a whole fragment through the store, or nil if absent.
func fuzzContent(t testing.TB, s *Store, id fragment.ID) ([]byte, bool) {
	t.Helper()
	in, err := s.Info(bg, id)
	if errors.Is(err, ErrNotFound) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("info %s: %v", id, err)
	}
	buf := make([]byte, in.Length)
	n, err := s.Read(bg, id, 0, buf)
	if err != nil || int64(n) != in.Length {
		t.Fatalf("read %s: %d of %d bytes, %v", id, n, in.Length, err)
	}
	return buf, true
}

// fuzzVerifyAll checks every fragment the store holds and its counters.
func fuzzVerifyAll(t testing.TB, s *Store) {
	t.Helper()
	var after *fragment.ID
	var n, used int64
	for {
		infos, err := s.ListAll(bg, after, 500)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if len(infos) == 0 {
			break
		}
		for _, in := range infos {
			sick, err := s.Verify(bg, in.ID)
			if err != nil || len(sick) != 0 {
				t.Fatalf("verify %s: sick %v, %v", in.ID, sick, err)
			}
			n++
			used += in.Length
		}
		last := infos[len(infos)-1].ID
		after = &last
	}
	if st := s.Stat(); st.Fragments != n || st.UsedBytes != used || st.CorruptDetected != 0 {
		t.Fatalf("stats %+v; listed %d fragments, %d bytes", st, n, used)
	}
}

func fuzzSeedPayload(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// FuzzStorageRequests feeds arbitrary requests to the storage server's
// handler. Every request must be answered with a defined, non-internal
// status or a well-formed response; a refused request changes nothing; a
// successful one does exactly what it says; and the store stays verifiable.
func FuzzStorageRequests(f *testing.F) {
	// An in-memory filesystem: fsyncs on a real disk would hold fuzzing to
	// a few dozen executions a second, and the handler is what is under
	// test here (the disk layer has its own crash and corruption tests).
	srv, err := NewServer(ServerConfig{Dir: "/fuzz-store", FS: vfs.NewMem(), Listen: "127.0.0.1:0", Slot: 3,
		CapacityBytes: 256 << 20, Logger: quietLogger()})
	if err != nil {
		f.Fatal(err)
	}
	st := srv.Store()
	f.Cleanup(func() {
		fuzzVerifyAll(f, st)
		_ = srv.ln.Close()
		if err := st.Close(); err != nil {
			f.Errorf("close: %v", err)
		}
	})

	const cs = DefaultChunkSize
	a, b, c := fid(1, 1, 0), fid(1, 2, 0), fid(1, 3, 7)
	pa := fuzzSeedPayload(70_000, 1)
	put := func(id fragment.ID, repair bool, chunk uint32, crcs []uint32) []byte {
		return fragment.Marshal(&fragment.PutReq{ID: id, Repair: repair, ChunkSize: chunk, CRCs: crcs})
	}
	idm := func(id fragment.ID) []byte { return fragment.Marshal(&fragment.IDReq{ID: id}) }
	badCRCs := crcsOf(pa, cs)
	badCRCs[1] ^= 1
	hostile := binary.AppendUvarint(put(b, false, cs, nil)[:fragment.EncodedLen+5], math.MaxUint64)
	other := fuzzSeedPayload(70_000, 2)

	f.Add(fragment.OpPut, put(a, false, cs, crcsOf(pa, cs)), pa)
	f.Add(fragment.OpPut, put(a, true, cs, crcsOf(pa, cs)), pa)
	f.Add(fragment.OpPut, put(a, true, cs, crcsOf(other, cs)), other)
	f.Add(fragment.OpPut, put(a, false, cs, crcsOf(other, cs)), other)
	f.Add(fragment.OpPut, put(b, false, cs, badCRCs), pa)
	f.Add(fragment.OpPut, put(b, false, 0, nil), []byte{})
	f.Add(fragment.OpPut, put(c, false, 1, crcsOf([]byte("0123456789"), 1)), []byte("0123456789"))
	f.Add(fragment.OpPut, hostile, []byte("x"))
	f.Add(fragment.OpPut, put(a, false, cs, nil)[:10], []byte("x"))
	f.Add(fragment.OpAppend, idm(b), fuzzSeedPayload(1000, 3))
	f.Add(fragment.OpAppend, idm(b), fuzzSeedPayload(65_000, 4))
	f.Add(fragment.OpAppend, idm(b), []byte{})
	f.Add(fragment.OpAppend, append(idm(b), 0), []byte("trailing"))
	f.Add(fragment.OpRead, fragment.Marshal(&fragment.ReadReq{ID: a, Off: 100, Len: 65536}), []byte(nil))
	f.Add(fragment.OpRead, fragment.Marshal(&fragment.ReadReq{ID: a, Off: 69_990, Len: 100}), []byte(nil))
	f.Add(fragment.OpRead, fragment.Marshal(&fragment.ReadReq{ID: a, Off: 70_001, Len: 1}), []byte(nil))
	f.Add(fragment.OpRead, fragment.Marshal(&fragment.ReadReq{ID: a, Off: math.MaxUint64, Len: math.MaxUint32}), []byte(nil))
	f.Add(fragment.OpRead, fragment.Marshal(&fragment.ReadReq{ID: b, Off: 0, Len: 0}), []byte(nil))
	f.Add(fragment.OpInfo, idm(a), []byte(nil))
	f.Add(fragment.OpInfo, idm(fid(9, 9, 9)), []byte(nil))
	f.Add(fragment.OpList, fragment.Marshal(&fragment.ListReq{Log: 1, FromSeq: 0, Limit: 0}), []byte(nil))
	f.Add(fragment.OpList, fragment.Marshal(&fragment.ListReq{Log: 1, FromSeq: 2, Limit: math.MaxUint32}), []byte(nil))
	f.Add(fragment.OpNewest, fragment.Marshal(&fragment.LogReq{Log: 1}), []byte(nil))
	f.Add(fragment.OpNewest, fragment.Marshal(&fragment.LogReq{Log: 2}), []byte(nil))
	f.Add(fragment.OpVerify, idm(a), []byte(nil))
	f.Add(fragment.OpVerify, idm(fid(2, 2, 2)), []byte(nil))
	f.Add(fragment.OpStat, []byte(nil), []byte(nil))
	f.Add(fragment.OpDelete, idm(b), []byte(nil))
	f.Add(fragment.OpDelete, idm(b), []byte(nil))
	f.Add(fragment.OpDelete, idm(c)[:5], []byte(nil))
	f.Add(uint16(0), idm(a), []byte("x"))
	f.Add(uint16(77), []byte(nil), []byte(nil))
	f.Add(uint16(math.MaxUint16), idm(a), pa)

	f.Fuzz(func(t *testing.T, op uint16, msg, payload []byte) {
		// What the request names, and the store's state before it.
		var id fragment.ID
		var decodeErr error
		var put fragment.PutReq
		var read fragment.ReadReq
		known := true
		switch op {
		case fragment.OpPut:
			decodeErr = fragment.Unmarshal(msg, &put)
			id = put.ID
		case fragment.OpAppend, fragment.OpDelete, fragment.OpInfo, fragment.OpVerify:
			var m fragment.IDReq
			decodeErr = fragment.Unmarshal(msg, &m)
			id = m.ID
		case fragment.OpRead:
			decodeErr = fragment.Unmarshal(msg, &read)
			id = read.ID
		case fragment.OpList:
			decodeErr = fragment.Unmarshal(msg, &fragment.ListReq{})
		case fragment.OpNewest:
			decodeErr = fragment.Unmarshal(msg, &fragment.LogReq{})
		case fragment.OpStat:
		default:
			known = false
		}
		hasID := decodeErr == nil && op != fragment.OpList && op != fragment.OpNewest && op != fragment.OpStat && known
		var old []byte
		var existed bool
		if hasID {
			old, existed = fuzzContent(t, st, id)
		}
		st0 := st.Stat()

		resp, err := srv.handle(context.Background(), &wire.Request{Op: op, Msg: msg, Payload: payload, RemoteAddr: "fuzz", Peer: wire.Unauthenticated})
		if resp.Release != nil {
			defer resp.Release()
		}
		st1 := st.Stat()

		if !known || decodeErr != nil {
			if statusOf(err) != fragment.StatusBadRequest || !errors.Is(err, fragment.ErrBadRequest) {
				t.Fatalf("op %d msg %x (decode: %v): %v (status %d); want ErrBadRequest", op, msg, decodeErr, err, statusOf(err))
			}
		}
		if err != nil {
			status := statusOf(err)
			sentinel, ok := fuzzStatuses[status]
			if !ok || !errors.Is(err, sentinel) {
				t.Fatalf("op %d msg %x: %v maps to status %d", op, msg, err, status)
			}
			// The client sees the matching fragment sentinel.
			ce := fragment.RemoteErr(&wire.RemoteError{Op: op, Status: status, Message: err.Error()})
			if status == fragment.StatusBadRequest && !errors.Is(ce, fragment.ErrBadRequest) ||
				status == fragment.StatusNotFound && !errors.Is(ce, fragment.ErrNotFound) {
				t.Fatalf("status %d reaches the client as %v", status, ce)
			}
			if st1.Fragments != st0.Fragments || st1.UsedBytes != st0.UsedBytes || st1.Repairs != st0.Repairs {
				t.Fatalf("op %d failed (%v) but changed the store: %+v -> %+v", op, err, st0, st1)
			}
			if hasID {
				now, exists := fuzzContent(t, st, id)
				if exists != existed || !bytes.Equal(now, old) {
					t.Fatalf("op %d failed (%v) but changed %s", op, err, id)
				}
			}
			switch {
			case errors.Is(err, ErrExists) && (op != fragment.OpPut || !existed):
				t.Fatalf("op %d: ErrExists for %s, which existed=%v", op, id, existed)
			case errors.Is(err, ErrNotFound) && hasID && existed:
				t.Fatalf("op %d: ErrNotFound for existing %s", op, id)
			case errors.Is(err, ErrOutOfRange) && (op != fragment.OpRead || !existed || read.Off <= uint64(len(old))):
				t.Fatalf("op %d: ErrOutOfRange for %s at %d (existed=%v, %d bytes)", op, id, read.Off, existed, len(old))
			case errors.Is(err, ErrBadData) && op == fragment.OpPut && put.ChunkSize != 0 &&
				fuzzCRCsMatch(payload, put.ChunkSize, put.CRCs) && len(payload) <= MaxFragmentSize:
				// (A put without a chunk size may be refused: checksums are
				// required end to end.)
				t.Fatalf("put %s: ErrBadData with matching checksums: %v", id, err)
			}
			return
		}

		// Success: the response decodes and the store changed exactly as
		// the operation says.
		same := st1.Fragments == st0.Fragments && st1.UsedBytes == st0.UsedBytes
		switch op {
		case fragment.OpPut:
			if !fuzzCRCsMatch(payload, put.ChunkSize, put.CRCs) {
				t.Fatalf("put %s accepted bad checksums", id)
			}
			if len(resp.Msg) != 0 || len(resp.Payload) != 0 {
				t.Fatalf("put: non-empty response")
			}
			if put.Repair {
				if !existed || !bytes.Equal(old, payload) || !same || st1.Repairs != st0.Repairs+1 {
					t.Fatalf("repair %s accepted: existed=%v identical=%v stats %+v -> %+v", id, existed, bytes.Equal(old, payload), st0, st1)
				}
			} else if existed || st1.Fragments != st0.Fragments+1 || st1.UsedBytes != st0.UsedBytes+int64(len(payload)) {
				t.Fatalf("put %s accepted: existed=%v stats %+v -> %+v", id, existed, st0, st1)
			}
			if now, _ := fuzzContent(t, st, id); !bytes.Equal(now, payload) {
				t.Fatalf("put %s: stored bytes differ", id)
			}
		case fragment.OpAppend:
			var r fragment.AppendResp
			if err := fragment.Unmarshal(resp.Msg, &r); err != nil {
				t.Fatalf("append response: %v", err)
			}
			want := append(append([]byte(nil), old...), payload...)
			if r.Length != uint64(len(want)) {
				t.Fatalf("append %s: length %d, want %d", id, r.Length, len(want))
			}
			if now, _ := fuzzContent(t, st, id); !bytes.Equal(now, want) {
				t.Fatalf("append %s: stored bytes differ", id)
			}
			created := int64(0)
			if !existed {
				created = 1
			}
			if st1.Fragments != st0.Fragments+created || st1.UsedBytes != st0.UsedBytes+int64(len(payload)) {
				t.Fatalf("append %s: stats %+v -> %+v", id, st0, st1)
			}
		case fragment.OpRead:
			var r fragment.ReadResp
			if err := fragment.Unmarshal(resp.Msg, &r); err != nil {
				t.Fatalf("read response: %v", err)
			}
			if !existed || r.Length != uint64(len(old)) || read.Off > r.Length {
				t.Fatalf("read %s at %d: ok with length %d (existed=%v, %d bytes)", id, read.Off, r.Length, existed, len(old))
			}
			end := min(read.Off+uint64(read.Len), r.Length)
			if !bytes.Equal(resp.Payload, old[read.Off:end]) {
				t.Fatalf("read %s [%d,+%d): %d bytes differ from the stored %d", id, read.Off, read.Len, len(resp.Payload), end-read.Off)
			}
			if !same {
				t.Fatal("read changed the store")
			}
		case fragment.OpDelete:
			if !existed || st1.Fragments != st0.Fragments-1 || st1.UsedBytes != st0.UsedBytes-int64(len(old)) {
				t.Fatalf("delete %s: existed=%v stats %+v -> %+v", id, existed, st0, st1)
			}
			if _, ok := fuzzContent(t, st, id); ok {
				t.Fatalf("delete %s: still there", id)
			}
		case fragment.OpInfo:
			var r fragment.Info
			if err := fragment.Unmarshal(resp.Msg, &r); err != nil || r.ID != id || r.Length != uint64(len(old)) || !existed || !same {
				t.Fatalf("info %s: %+v, %v (existed=%v, %d bytes)", id, r, err, existed, len(old))
			}
			if !fuzzCRCsMatch(old, r.ChunkSize, r.CRCs) {
				t.Fatalf("info %s: checksums do not match the content", id)
			}
		case fragment.OpList:
			var r fragment.ListResp
			if err := fragment.Unmarshal(resp.Msg, &r); err != nil || len(r.IDs) != len(r.Lengths) || !same {
				t.Fatalf("list: %+v, %v", r, err)
			}
		case fragment.OpNewest:
			if err := fragment.Unmarshal(resp.Msg, &fragment.NewestResp{}); err != nil || !same {
				t.Fatalf("newest: %v", err)
			}
		case fragment.OpVerify:
			var r fragment.VerifyResp
			if err := fragment.Unmarshal(resp.Msg, &r); err != nil || len(r.Sick) != 0 || !existed || !same {
				t.Fatalf("verify %s: %+v, %v (existed=%v)", id, r, err, existed)
			}
		case fragment.OpStat:
			var r fragment.Stats
			if err := fragment.Unmarshal(resp.Msg, &r); err != nil || r.Slot != 3 || r.Fragments != uint64(st1.Fragments) || !same {
				t.Fatalf("stat: %+v, %v", r, err)
			}
		default:
			t.Fatalf("unknown op %d succeeded", op)
		}
		if hasID {
			if sick, err := st.Verify(bg, id); err != nil && !errors.Is(err, ErrNotFound) || len(sick) != 0 {
				t.Fatalf("verify %s after op %d: %v %v", id, op, sick, err)
			}
		}
	})
}
