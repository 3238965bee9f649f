package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/storage"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Raw storage-protocol helpers, shared with crash_test.go.

var rawCRCTable = crc32.MakeTable(crc32.Castagnoli)

// chunkCRCs is the sender's CRC32C per chunk of data.
func rawChunkCRCs(data []byte, chunk int) []uint32 {
	out := []uint32{}
	for len(data) > 0 {
		n := min(len(data), chunk)
		out = append(out, crc32.Checksum(data[:n], rawCRCTable))
		data = data[n:]
	}
	return out
}

// rawDial opens a protocol connection closed at the end of the test.
func rawDial(t *testing.T, addr string) *wire.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := wire.Dial(ctx, addr, wire.ClientConfig{Key: testKey, IOTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawCall sends one request with an already encoded message and maps
// error statuses to the fragment sentinels.
func rawCall(c *wire.Client, op uint16, msg, payload []byte) (wire.Reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.Call(ctx, op, 0, msg, payload, nil)
	return r, fragment.RemoteErr(err)
}

func rawPutReq(c *wire.Client, req *fragment.PutReq, data []byte) error {
	_, err := rawCall(c, fragment.OpPut, fragment.Marshal(req), data)
	return err
}

// rawPut stores data as id with correct 64 KiB chunk checksums.
func rawPut(c *wire.Client, id fragment.ID, data []byte, repair bool) error {
	return rawPutReq(c, &fragment.PutReq{ID: id, Repair: repair, ChunkSize: storage.DefaultChunkSize,
		CRCs: rawChunkCRCs(data, storage.DefaultChunkSize)}, data)
}

func rawAppend(c *wire.Client, id fragment.ID, data []byte) (uint64, error) {
	r, err := rawCall(c, fragment.OpAppend, fragment.Marshal(&fragment.IDReq{ID: id}), data)
	if err != nil {
		return 0, err
	}
	var resp fragment.AppendResp
	if err := fragment.Unmarshal(r.Msg, &resp); err != nil {
		return 0, err
	}
	return resp.Length, nil
}

func rawInfo(c *wire.Client, id fragment.ID) (fragment.Info, error) {
	r, err := rawCall(c, fragment.OpInfo, fragment.Marshal(&fragment.IDReq{ID: id}), nil)
	if err != nil {
		return fragment.Info{}, err
	}
	var info fragment.Info
	err = fragment.Unmarshal(r.Msg, &info)
	return info, err
}

// rawRead reads n bytes at off and returns them with the fragment length.
func rawRead(c *wire.Client, id fragment.ID, off uint64, n uint32) ([]byte, uint64, error) {
	r, err := rawCall(c, fragment.OpRead, fragment.Marshal(&fragment.ReadReq{ID: id, Off: off, Len: n}), nil)
	if err != nil {
		return nil, 0, err
	}
	var resp fragment.ReadResp
	if err := fragment.Unmarshal(r.Msg, &resp); err != nil {
		return nil, 0, err
	}
	return r.Payload, resp.Length, nil
}

// rawReadAll reads a whole fragment through Info and Read.
func rawReadAll(c *wire.Client, id fragment.ID) ([]byte, error) {
	info, err := rawInfo(c, id)
	if err != nil {
		return nil, err
	}
	b, n, err := rawRead(c, id, 0, uint32(info.Length))
	if err != nil {
		return nil, err
	}
	if n != info.Length || uint64(len(b)) != info.Length {
		return nil, errors.New("short read")
	}
	return b, nil
}

func rawStat(c *wire.Client) (fragment.Stats, error) {
	r, err := rawCall(c, fragment.OpStat, nil, nil)
	if err != nil {
		return fragment.Stats{}, err
	}
	var st fragment.Stats
	err = fragment.Unmarshal(r.Msg, &st)
	return st, err
}

func rawVerify(c *wire.Client, id fragment.ID) ([]fragment.Range, error) {
	r, err := rawCall(c, fragment.OpVerify, fragment.Marshal(&fragment.IDReq{ID: id}), nil)
	if err != nil {
		return nil, err
	}
	var resp fragment.VerifyResp
	err = fragment.Unmarshal(r.Msg, &resp)
	return resp.Sick, err
}

func rawList(c *wire.Client, log uint64) (fragment.ListResp, error) {
	r, err := rawCall(c, fragment.OpList, fragment.Marshal(&fragment.ListReq{Log: log, Limit: 10000}), nil)
	if err != nil {
		return fragment.ListResp{}, err
	}
	var resp fragment.ListResp
	err = fragment.Unmarshal(r.Msg, &resp)
	return resp, err
}

// mustContent fails unless id holds exactly want.
func rawMustContent(t *testing.T, c *wire.Client, id fragment.ID, want []byte) {
	t.Helper()
	got, err := rawReadAll(c, id)
	if err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %s: %d bytes differ from the %d written", id, len(got), len(want))
	}
}

func rawMustNotFound(t *testing.T, c *wire.Client, id fragment.ID) {
	t.Helper()
	if info, err := rawInfo(c, id); !errors.Is(err, fragment.ErrNotFound) {
		t.Fatalf("info %s = %+v, %v; want ErrNotFound", id, info, err)
	}
}

func rawMustStat(t *testing.T, c *wire.Client) fragment.Stats {
	t.Helper()
	st, err := rawStat(c)
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	return st
}

// frame builds a request frame with a correct header checksum.
func rawFrame(op uint16, reqID uint64, msg []byte, payloadLen uint32) []byte {
	b := make([]byte, wire.HeaderSize, wire.HeaderSize+len(msg))
	wire.PutHeader(b, &wire.Header{Kind: wire.KindRequest, Op: op, ID: reqID, PayloadLen: payloadLen}, msg)
	return append(b, msg...)
}

// reseal recomputes the header checksum of a frame whose fixed header was
// edited (so that only the edit is wrong).
func rawReseal(b []byte, msgLen int) []byte {
	c := crc32.Update(crc32.Checksum(b[:36], rawCRCTable), rawCRCTable, b[wire.HeaderSize:wire.HeaderSize+msgLen])
	binary.BigEndian.PutUint32(b[36:], c)
	return b
}

// expectClosed sends b on a fresh connection and checks that the server
// closes it without answering.
func rawExpectClosed(t *testing.T, addr string, b []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 256)
	n, err := conn.Read(buf)
	if n != 0 {
		t.Fatalf("server answered a bad frame with %d bytes: %x", n, buf[:n])
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("server kept the connection open after a bad frame")
	}
	if err == nil {
		t.Fatal("read returned neither bytes nor an error")
	}
	// io.EOF, or a reset when the server closed with our bytes unread.
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after bad frame: %v", err)
	}
}

func TestProtocolBadFramesCloseOnlyTheirConnection(t *testing.T) {
	s := startServers(t, 1)[0]
	good := rawDial(t, s.addr)
	r := rand.New(rand.NewPCG(20, 20))
	idA := fragment.ID{Log: 1, Seq: 1}
	dataA := randBytes(r, 100_000)
	if err := rawPut(good, idA, dataA, false); err != nil {
		t.Fatal(err)
	}
	infoMsg := fragment.Marshal(&fragment.IDReq{ID: idA})
	maxPayload := uint32(storage.MaxFragmentSize + 1<<20)

	garbage := randBytes(r, 64)
	garbage[0] = 0x00

	cases := map[string][]byte{
		"garbage":      garbage,
		"zeros":        make([]byte, 200),
		"http request": []byte("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n" + string(make([]byte, 40))),
		"bad version": func() []byte {
			b := rawFrame(fragment.OpInfo, 1, infoMsg, 0)
			b[2] = 2
			return rawReseal(b, len(infoMsg))
		}(),
		"bad kind": func() []byte {
			b := rawFrame(fragment.OpInfo, 1, infoMsg, 0)
			b[3] = 7
			return rawReseal(b, len(infoMsg))
		}(),
		"response frame to server": func() []byte {
			b := rawFrame(fragment.OpInfo, 1, infoMsg, 0)
			b[3] = wire.KindResponse
			return rawReseal(b, len(infoMsg))
		}(),
		"reserved flags": func() []byte {
			b := rawFrame(fragment.OpInfo, 1, infoMsg, 0)
			b[7] = 1
			return rawReseal(b, len(infoMsg))
		}(),
		"bad header checksum": func() []byte {
			b := rawFrame(fragment.OpInfo, 1, infoMsg, 0)
			b[36] ^= 0x01
			return b
		}(),
		"corrupted op": func() []byte {
			b := rawFrame(fragment.OpInfo, 1, infoMsg, 0)
			b[5] ^= 0x01 // Info (5) -> Delete (4): the checksum must catch it
			return b
		}(),
		"corrupted message": func() []byte {
			b := rawFrame(fragment.OpInfo, 1, infoMsg, 0)
			b[wire.HeaderSize+3] ^= 0x10
			return b
		}(),
		"corrupted payload length": func() []byte {
			b := rawFrame(fragment.OpInfo, 1, infoMsg, 0)
			b[35] = 0x20
			return b
		}(),
		"oversized payload": func() []byte {
			b := rawFrame(fragment.OpPut, 1, nil, maxPayload+1)
			return append(b, make([]byte, 1024)...)
		}(),
		"max payload length": rawFrame(fragment.OpPut, 1, nil, math.MaxUint32),
		"oversized message": func() []byte {
			b := rawFrame(fragment.OpInfo, 1, nil, 0)
			binary.BigEndian.PutUint32(b[28:], 1<<20+1)
			return rawReseal(b, 0)
		}(),
		"max message length": func() []byte {
			b := rawFrame(fragment.OpInfo, 1, nil, 0)
			binary.BigEndian.PutUint32(b[28:], math.MaxUint32)
			return rawReseal(b, 0)
		}(),
		"good frame then garbage": append(rawFrame(fragment.OpStat, 1, nil, 0), garbage...),
	}
	names := make([]string, 0, len(cases))
	for n := range cases {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if name == "good frame then garbage" {
				// The Stat answer may arrive before the close: accept one
				// well-formed response, then the close.
				rawExpectAnswerThenClosed(t, s.addr, cases[name])
			} else {
				rawExpectClosed(t, s.addr, cases[name])
			}
			// The well-behaved connection is untouched.
			st := rawMustStat(t, good)
			if st.Fragments != 1 || st.UsedBytes != uint64(len(dataA)) {
				t.Fatalf("stats changed by a bad frame: %+v", st)
			}
			rawMustContent(t, good, idA, dataA)
		})
	}
	// Nothing was deleted by the corrupted-op frame, and a new connection
	// is served.
	fresh := rawDial(t, s.addr)
	st := rawMustStat(t, fresh)
	if st.Fragments != 1 || st.Slot != s.slot {
		t.Fatalf("stats after bad frames: %+v", st)
	}
	rawMustContent(t, fresh, idA, dataA)
	if good.Err() != nil {
		t.Fatalf("well-behaved connection broken: %v", good.Err())
	}
}

// expectAnswerThenClosed sends b (a valid Stat request followed by junk)
// and checks that at most the Stat answer comes back before the close.
func rawExpectAnswerThenClosed(t *testing.T, addr string, b []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("server kept the connection open after a bad frame")
	}
	if len(got) == 0 {
		return
	}
	if len(got) < wire.HeaderSize {
		t.Fatalf("partial response of %d bytes", len(got))
	}
	h := got[:wire.HeaderSize]
	if h[3] != wire.KindResponse || binary.BigEndian.Uint16(h[4:]) != fragment.OpStat || binary.BigEndian.Uint32(h[24:]) != 0 {
		t.Fatalf("unexpected response header %x", h)
	}
	if want := wire.HeaderSize + int(binary.BigEndian.Uint32(h[28:])) + int(binary.BigEndian.Uint32(h[32:])); len(got) != want {
		t.Fatalf("got %d bytes after the Stat request, want exactly its %d-byte answer", len(got), want)
	}
}

func TestProtocolMalformedMessages(t *testing.T) {
	s := startServers(t, 1)[0]
	c := rawDial(t, s.addr)
	r := rand.New(rand.NewPCG(21, 21))
	kept := fragment.ID{Log: 2, Seq: 1}
	keptData := randBytes(r, 70_000)
	if err := rawPut(c, kept, keptData, false); err != nil {
		t.Fatal(err)
	}
	target := fragment.ID{Log: 2, Seq: 9, Index: 1}
	payload := randBytes(r, 5000)
	putMsg := fragment.Marshal(&fragment.PutReq{ID: target, ChunkSize: storage.DefaultChunkSize, CRCs: rawChunkCRCs(payload, storage.DefaultChunkSize)})
	idMsg := fragment.Marshal(&fragment.IDReq{ID: target})
	keptMsg := fragment.Marshal(&fragment.IDReq{ID: kept})

	type req struct {
		op      uint16
		msg     []byte
		payload []byte
	}
	valid := map[string]req{
		"put":    {fragment.OpPut, putMsg, payload},
		"append": {fragment.OpAppend, idMsg, payload},
		"read":   {fragment.OpRead, fragment.Marshal(&fragment.ReadReq{ID: kept, Off: 0, Len: 100}), nil},
		"delete": {fragment.OpDelete, keptMsg, nil},
		"info":   {fragment.OpInfo, keptMsg, nil},
		"list":   {fragment.OpList, fragment.Marshal(&fragment.ListReq{Log: 2, FromSeq: 0, Limit: 10}), nil},
		"newest": {fragment.OpNewest, fragment.Marshal(&fragment.LogReq{Log: 2}), nil},
		"verify": {fragment.OpVerify, keptMsg, nil},
	}
	type badCase struct {
		name string
		req  req
	}
	var bad []badCase
	for _, op := range []string{"put", "append", "read", "delete", "info", "list", "newest", "verify"} {
		v := valid[op]
		bad = append(bad,
			badCase{op + "/empty", req{v.op, nil, v.payload}},
			badCase{op + "/truncated by 1", req{v.op, v.msg[:len(v.msg)-1], v.payload}},
			badCase{op + "/half", req{v.op, v.msg[:len(v.msg)/2], v.payload}},
			badCase{op + "/trailing byte", req{v.op, append(slices.Clone(v.msg), 0), v.payload}},
			badCase{op + "/trailing junk", req{v.op, append(slices.Clone(v.msg), randBytes(r, 100)...), v.payload}},
		)
	}
	// PutReq is the request with an element count.
	putHead := putMsg[:fragment.EncodedLen+1+4]
	for _, n := range []uint64{2, 1 << 20, 1 << 40, math.MaxUint64} {
		m := binary.AppendUvarint(slices.Clone(putHead), n)
		m = binary.BigEndian.AppendUint32(m, rawChunkCRCs(payload, storage.DefaultChunkSize)[0])
		bad = append(bad, badCase{fmt.Sprintf("put/hostile count %d", n), req{fragment.OpPut, m, payload}})
	}
	overlong := append(slices.Clone(putHead), bytes.Repeat([]byte{0xff}, 10)...)
	bad = append(bad, badCase{"put/overlong count", req{fragment.OpPut, append(overlong, 1), payload}})
	badBool := slices.Clone(putMsg)
	badBool[fragment.EncodedLen] = 7
	bad = append(bad, badCase{"put/bad repair flag", req{fragment.OpPut, badBool, payload}})
	for _, op := range []uint16{0, 10, 100, 0x8001, math.MaxUint16} {
		bad = append(bad, badCase{fmt.Sprintf("unknown op %d", op), req{op, idMsg, payload}})
	}
	bad = append(bad, badCase{"read/huge offset", req{fragment.OpRead, fragment.Marshal(&fragment.ReadReq{ID: kept, Off: math.MaxUint64, Len: 1}), nil}})
	bad = append(bad, badCase{"read/huge length", req{fragment.OpRead, fragment.Marshal(&fragment.ReadReq{ID: kept, Off: 0, Len: math.MaxUint32}), nil}})

	before := rawMustStat(t, c)
	for _, bc := range bad {
		t.Run(bc.name, func(t *testing.T) {
			_, err := rawCall(c, bc.req.op, bc.req.msg, bc.req.payload)
			if !errors.Is(err, fragment.ErrBadRequest) {
				t.Fatalf("op %d msg %x: %v; want ErrBadRequest", bc.req.op, bc.req.msg, err)
			}
			if c.Err() != nil {
				t.Fatalf("connection broken by a malformed message: %v", c.Err())
			}
			// The same connection keeps working and nothing changed.
			st := rawMustStat(t, c)
			if st.Fragments != before.Fragments || st.UsedBytes != before.UsedBytes {
				t.Fatalf("stats changed: %+v -> %+v", before, st)
			}
			rawMustNotFound(t, c, target)
			rawMustContent(t, c, kept, keptData)
		})
	}
	// The valid forms of the same requests work on the same connection.
	for _, op := range []string{"info", "read", "list", "newest", "verify", "put"} {
		v := valid[op]
		if _, err := rawCall(c, v.op, v.msg, v.payload); err != nil {
			t.Fatalf("valid %s after malformed ones: %v", op, err)
		}
	}
	rawMustContent(t, c, target, payload)
}

func TestProtocolDataErrors(t *testing.T) {
	s := startServers(t, 1)[0]
	c := rawDial(t, s.addr)
	r := rand.New(rand.NewPCG(22, 22))
	const cs = storage.DefaultChunkSize
	orig := fragment.ID{Log: 3, Seq: 1}
	origData := randBytes(r, 2*cs+1234)
	if err := rawPut(c, orig, origData, false); err != nil {
		t.Fatal(err)
	}
	origInfo, err := rawInfo(c, orig)
	if err != nil {
		t.Fatal(err)
	}
	if origInfo.Length != uint64(len(origData)) || !slices.Equal(origInfo.CRCs, rawChunkCRCs(origData, cs)) {
		t.Fatalf("info after put: %+v", origInfo)
	}

	t.Run("put with checksums that do not match", func(t *testing.T) {
		data := randBytes(r, 2*cs+10)
		good := rawChunkCRCs(data, cs)
		flipped := slices.Clone(data)
		flipped[cs+5] ^= 0x40
		for i, tc := range []struct {
			req  fragment.PutReq
			data []byte
		}{
			{fragment.PutReq{ChunkSize: cs, CRCs: append([]uint32{good[0], good[1] ^ 1}, good[2])}, data},
			{fragment.PutReq{ChunkSize: cs, CRCs: good}, flipped},
			{fragment.PutReq{ChunkSize: cs, CRCs: good[:2]}, data},
			{fragment.PutReq{ChunkSize: cs, CRCs: append(slices.Clone(good), 0)}, data},
			{fragment.PutReq{ChunkSize: cs, CRCs: []uint32{}}, data},
			{fragment.PutReq{ChunkSize: 0, CRCs: good}, data},
			{fragment.PutReq{ChunkSize: 4096, CRCs: good}, data},
			{fragment.PutReq{ChunkSize: cs, CRCs: []uint32{0}}, nil},
			{fragment.PutReq{ChunkSize: cs, CRCs: good, Repair: true}, flipped},
		} {
			id := fragment.ID{Log: 3, Seq: 100 + uint64(i)}
			tc.req.ID = id
			if err := rawPutReq(c, &tc.req, tc.data); !errors.Is(err, fragment.ErrBadData) {
				t.Errorf("case %d: put = %v; want ErrBadData", i, err)
			}
			rawMustNotFound(t, c, id)
		}
		st := rawMustStat(t, c)
		if st.Fragments != 1 || st.UsedBytes != uint64(len(origData)) {
			t.Fatalf("bad puts stored something: %+v", st)
		}
		// The same data with a sender chunk size of 4 KiB is fine.
		id := fragment.ID{Log: 3, Seq: 200}
		if err := rawPutReq(c, &fragment.PutReq{ID: id, ChunkSize: 4096, CRCs: rawChunkCRCs(data, 4096)}, data); err != nil {
			t.Fatalf("put with 4 KiB chunks: %v", err)
		}
		rawMustContent(t, c, id, data)
		if _, err := rawCall(c, fragment.OpDelete, fragment.Marshal(&fragment.IDReq{ID: id}), nil); err != nil {
			t.Fatal(err)
		}
		rawMustNotFound(t, c, id)
	})

	t.Run("read beyond the end", func(t *testing.T) {
		L := uint64(len(origData))
		for _, off := range []uint64{L + 1, L + 1000, 2 * L, storage.MaxFragmentSize} {
			if b, n, err := rawRead(c, orig, off, 10); !errors.Is(err, fragment.ErrOutOfRange) {
				t.Errorf("read at %d of %d: %d bytes, length %d, %v; want ErrOutOfRange", off, L, len(b), n, err)
			}
		}
		b, n, err := rawRead(c, orig, L, 10)
		if err != nil || len(b) != 0 || n != L {
			t.Errorf("read at the end: %d bytes, length %d, %v; want 0 bytes", len(b), n, err)
		}
		b, n, err = rawRead(c, orig, L-5, 100)
		if err != nil || !bytes.Equal(b, origData[L-5:]) || n != L {
			t.Errorf("read across the end: %d bytes, length %d, %v; want the last 5", len(b), n, err)
		}
		if _, _, err := rawRead(c, fragment.ID{Log: 3, Seq: 999}, 0, 10); !errors.Is(err, fragment.ErrNotFound) {
			t.Errorf("read of a missing fragment: %v; want ErrNotFound", err)
		}
	})

	t.Run("repair with different bytes", func(t *testing.T) {
		other := slices.Clone(origData)
		other[len(other)-1] ^= 1
		for i, data := range [][]byte{other, origData[:len(origData)-1], append(slices.Clone(origData), 0), randBytes(r, len(origData)), nil} {
			if err := rawPut(c, orig, data, true); !errors.Is(err, fragment.ErrRepairMismatch) {
				t.Errorf("case %d: repair = %v; want ErrRepairMismatch", i, err)
			}
		}
		if err := rawPut(c, fragment.ID{Log: 3, Seq: 998}, origData, true); !errors.Is(err, fragment.ErrNotFound) {
			t.Errorf("repair of a missing fragment: %v; want ErrNotFound", err)
		}
		rawMustContent(t, c, orig, origData)
		if st := rawMustStat(t, c); st.Repairs != 0 {
			t.Fatalf("failed repairs counted: %+v", st)
		}
		// Identical bytes are accepted.
		if err := rawPut(c, orig, origData, true); err != nil {
			t.Fatalf("repair with identical bytes: %v", err)
		}
		if st := rawMustStat(t, c); st.Repairs != 1 {
			t.Fatalf("repairs = %d, want 1", st.Repairs)
		}
		rawMustContent(t, c, orig, origData)
	})

	t.Run("put of an existing id", func(t *testing.T) {
		for i, data := range [][]byte{randBytes(r, len(origData)), randBytes(r, 10), origData, nil} {
			if err := rawPut(c, orig, data, false); !errors.Is(err, fragment.ErrExists) {
				t.Errorf("case %d: put over an existing fragment = %v; want ErrExists", i, err)
			}
		}
		rawMustContent(t, c, orig, origData)
		info, err := rawInfo(c, orig)
		if err != nil || info.Length != origInfo.Length || !slices.Equal(info.CRCs, origInfo.CRCs) || !info.Created.Equal(origInfo.Created) {
			t.Fatalf("info changed: %+v -> %+v (%v)", origInfo, info, err)
		}
		if sick, err := rawVerify(c, orig); err != nil || len(sick) != 0 {
			t.Fatalf("verify: %v %v", sick, err)
		}
	})

	st := rawMustStat(t, c)
	if st.Fragments != 1 || st.UsedBytes != uint64(len(origData)) || st.CorruptFound != 0 {
		t.Fatalf("final stats: %+v", st)
	}
}

// TestProtocolStatRejectsMessage: OpStat is "empty -> Stats"; a Stat
// request carrying a message is malformed and should get ErrBadRequest like
// every other malformed request (Invariant 5).
func TestProtocolStatRejectsMessage(t *testing.T) {
	s := startServers(t, 1)[0]
	c := rawDial(t, s.addr)
	if _, err := rawCall(c, fragment.OpStat, []byte("junk"), nil); !errors.Is(err, fragment.ErrBadRequest) {
		t.Errorf("stat with a 4-byte message: %v; want ErrBadRequest", err)
	}
	rawMustStat(t, c)
}

// TestProtocolReadAllocationBoundedByFragment: a read names how many bytes
// it wants, but the server should not need more memory than the fragment
// can return. Otherwise any client can make a storage server allocate 64
// MiB per request (32 requests in flight per connection) by reading a
// tiny fragment with Len = MaxFragmentSize, outside the MaxInflightBytes
// budget that bounds request payloads (Invariant 5: no input crashes a
// server).
func TestProtocolReadAllocationBoundedByFragment(t *testing.T) {
	s := startServers(t, 1)[0]
	c := rawDial(t, s.addr)
	id := fragment.ID{Log: 4, Seq: 1}
	data := []byte("a small fragment")
	if err := rawPut(c, id, data, false); err != nil {
		t.Fatal(err)
	}
	least := uint64(math.MaxUint64)
	for range 3 {
		runtime.GC() // two collections empty the buffer pools
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		b, n, err := rawRead(c, id, 0, storage.MaxFragmentSize)
		runtime.ReadMemStats(&m1)
		if err != nil || !bytes.Equal(b, data) || n != uint64(len(data)) {
			t.Fatalf("read: %q, length %d, %v", b, n, err)
		}
		least = min(least, m1.TotalAlloc-m0.TotalAlloc)
	}
	if least > 4<<20 {
		t.Errorf("reading a %d-byte fragment with Len %d allocated %d MiB in the server", len(data), storage.MaxFragmentSize, least>>20)
	}
}
