package nfs

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/nfs/xdr"
)

// Every sentinel of metawire.Table has exactly one NFS status.
func TestStatusTableCoversMetawire(t *testing.T) {
	for _, e := range metawire.Table {
		n := 0
		for _, s := range StatusTable {
			if s.Err == e.Err {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%v: %d rows in StatusTable", e.Err, n)
		}
	}
	for _, tc := range []struct {
		err  error
		want uint32
	}{
		{nil, nfs3OK},
		{fmt.Errorf("lookup: %w", metawire.ErrNotFound), nfs3ErrNoEnt},
		{&metawire.StatusError{Sentinel: metawire.ErrStale, Message: "x"}, nfs3ErrStale},
		{&metawire.StatusError{Sentinel: metawire.ErrInternal, Message: "x"}, nfs3ErrServerFault},
		{metawire.ErrBusy, nfs3ErrJukebox},
		{fmt.Errorf("%w: bad", namespace.ErrBadHandle), nfs3ErrBadHandle},
		{errors.New("something else"), nfs3ErrIO},
	} {
		if got := statusOf(tc.err); got != tc.want {
			t.Errorf("statusOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestReadRecord(t *testing.T) {
	frag := func(last bool, b []byte) []byte {
		v := uint32(len(b))
		if last {
			v |= lastFragment
		}
		return append(binary.BigEndian.AppendUint32(nil, v), b...)
	}
	var stream []byte
	stream = append(stream, frag(true, []byte("one"))...)
	stream = append(stream, frag(false, []byte("tw"))...)
	stream = append(stream, frag(false, nil)...)
	stream = append(stream, frag(true, []byte("o"))...)
	stream = append(stream, frag(true, nil)...)
	br := bufio.NewReader(bytes.NewReader(stream))
	for _, want := range []string{"one", "two", ""} {
		got, err := readRecord(br, 100)
		if err != nil || string(got) != want {
			t.Fatalf("record %q: %q %v", want, got, err)
		}
	}
	if _, err := readRecord(br, 100); err != io.EOF {
		t.Fatalf("clean end: %v", err)
	}
	// Over the limit, across fragments.
	br = bufio.NewReader(bytes.NewReader(append(frag(false, make([]byte, 60)), frag(true, make([]byte, 60))...)))
	if _, err := readRecord(br, 100); !errors.Is(err, errRecordTooLong) {
		t.Fatalf("long record: %v", err)
	}
	// Truncated.
	br = bufio.NewReader(bytes.NewReader(frag(true, []byte("abcdef"))[:7]))
	if _, err := readRecord(br, 100); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated record: %v", err)
	}
}

// A record header announcing a megabyte that is followed by a few bytes
// costs about what arrived, not the megabyte (1,000 such connections
// would otherwise hold a gigabyte).
func TestReadRecordAllocatesAsBytesArrive(t *testing.T) {
	var in bytes.Buffer
	binary.Write(&in, binary.BigEndian, uint32(lastFragment|MaxRecord-8))
	in.Write(make([]byte, 100))
	br := bufio.NewReader(&in)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := readRecord(br, MaxRecord)
	runtime.ReadMemStats(&after)
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated record: %v, want unexpected EOF", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4*recordStep {
		t.Errorf("a record that announced %d bytes and sent 100 allocated %d bytes", MaxRecord-8, got)
	}
	// A whole record of that size still reads back exact.
	in.Reset()
	want := make([]byte, MaxRecord-8)
	for i := range want {
		want[i] = byte(i * 7)
	}
	binary.Write(&in, binary.BigEndian, uint32(lastFragment|len(want)))
	in.Write(want)
	got, err := readRecord(bufio.NewReader(&in), MaxRecord)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("whole record: %d bytes (%v), want %d", len(got), err, len(want))
	}
}

func TestXDRRoundTrip(t *testing.T) {
	var w xdr.Writer
	w.Uint32(7)
	w.Uint64(1 << 40)
	w.Bool(true)
	w.String("abcde")
	w.Opaque([]byte{1, 2, 3})
	w.Fixed([]byte{9, 9, 9, 9, 9, 9, 9, 9})
	if w.Len()%4 != 0 {
		t.Fatalf("unaligned: %d", w.Len())
	}
	r := xdr.NewReader(w.B)
	if r.Uint32() != 7 || r.Uint64() != 1<<40 || !r.Bool() || r.String(10) != "abcde" || !bytes.Equal(r.Opaque(3), []byte{1, 2, 3}) || len(r.Fixed(8)) != 8 {
		t.Fatal("round trip")
	}
	if err := r.Finish(); err != nil {
		t.Fatal(err)
	}
	// Strictness.
	for name, b := range map[string][]byte{
		"bool 2":          {0, 0, 0, 2},
		"nonzero padding": {0, 0, 0, 1, 'a', 0, 1, 0},
		"over the limit":  {0, 0, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0},
		"truncated":       {0, 0, 0, 8, 1, 2},
	} {
		r := xdr.NewReader(b)
		if name == "bool 2" {
			r.Bool()
		} else {
			r.Opaque(8)
		}
		if !errors.Is(r.Err(), xdr.ErrGarbage) {
			t.Errorf("%s: %v", name, r.Err())
		}
	}
	r = xdr.NewReader([]byte{0xff, 0xff, 0xff, 0xff})
	if n := r.Count(1<<30, 4); n != 0 || r.Err() == nil {
		t.Fatalf("hostile count accepted: %d", n)
	}
}

// FuzzXDR decodes arbitrary bytes with a sequence of operations chosen by
// the input: no panic, no allocation beyond the input, sticky errors.
func FuzzXDR(f *testing.F) {
	var w xdr.Writer
	w.Uint32(3)
	w.String("name")
	w.Opaque(bytes.Repeat([]byte{7}, 33))
	w.Uint64(42)
	f.Add([]byte{0, 1, 2, 3, 4}, w.B)
	f.Add([]byte{5, 5, 5}, []byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, ops, data []byte) {
		r := xdr.NewReader(data)
		for _, op := range ops {
			before := r.Remaining()
			switch op % 7 {
			case 0:
				r.Uint32()
			case 1:
				r.Uint64()
			case 2:
				r.Bool()
			case 3:
				if b := r.Opaque(int(op)); len(b) > int(op) || len(b) > before {
					t.Fatalf("opaque of %d bytes over max %d / remaining %d", len(b), op, before)
				}
			case 4:
				if s := r.String(64); len(s) > 64 {
					t.Fatal("string over max")
				}
			case 5:
				if n := r.Count(1<<20, 4); n*4 > before {
					t.Fatalf("count %d over the %d bytes left", n, before)
				}
			case 6:
				if b := r.Fixed(int(op % 16)); r.Err() == nil && len(b) != int(op%16) {
					t.Fatal("fixed length")
				}
			}
			if r.Remaining() < 0 || r.Remaining() > before {
				t.Fatalf("remaining went from %d to %d", before, r.Remaining())
			}
			if r.Err() != nil && r.Uint32() != 0 {
				t.Fatal("read after an error returned data")
			}
		}
		_ = r.Finish()
		// Whatever decoded as an opaque encodes back to the same bytes.
		r = xdr.NewReader(data)
		if b := r.Opaque(len(data)); r.Err() == nil {
			var w xdr.Writer
			w.Opaque(b)
			if !bytes.Equal(w.B, data[:r.Offset()]) {
				t.Fatal("opaque round trip")
			}
		}
	})
}

// rpcCall builds a call record body.
func rpcCall(xid, prog, vers, proc uint32, args []byte) []byte {
	var w xdr.Writer
	w.Uint32(xid)
	w.Uint32(msgCall)
	w.Uint32(rpcVersion)
	w.Uint32(prog)
	w.Uint32(vers)
	w.Uint32(proc)
	var cred xdr.Writer
	cred.Uint32(1)
	cred.String("fuzz")
	cred.Uint32(0)
	cred.Uint32(0)
	cred.Uint32(1)
	cred.Uint32(0)
	w.Uint32(authSys)
	w.Opaque(cred.B)
	w.Uint32(authNone)
	w.Uint32(0)
	return append(w.B, args...)
}

// checkReply checks that out is one well-formed reply record to a call
// with xid, and returns its accept status (or 100+reject status).
func checkReply(t *testing.T, out []byte, xid uint32) uint32 {
	t.Helper()
	if len(out) < 16 || binary.BigEndian.Uint32(out) != lastFragment|uint32(len(out)-4) {
		t.Fatalf("bad record mark on a %d-byte reply", len(out))
	}
	r := xdr.NewReader(out[4:])
	if got := r.Uint32(); got != xid {
		t.Fatalf("reply xid %x, call %x", got, xid)
	}
	if r.Uint32() != msgReply {
		t.Fatal("not a reply")
	}
	if r.Uint32() == replyDenied {
		return 100 + r.Uint32()
	}
	r.Uint32()
	r.Opaque(400)
	st := r.Uint32()
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	return st
}

// FuzzRPC feeds arbitrary record streams to a gateway over a real
// (in-process) cluster: every record is answered with a well-formed reply
// or ignored, never a crash or a SYSTEM_ERR.
func FuzzRPC(f *testing.F) {
	root := namespace.Handle{Ino: namespace.RootIno, Gen: 1}.AppendBinary(nil)
	arg := func(vals ...any) []byte {
		var w xdr.Writer
		for _, v := range vals {
			switch v := v.(type) {
			case uint32:
				w.Uint32(v)
			case uint64:
				w.Uint64(v)
			case []byte:
				w.Opaque(v)
			case string:
				w.String(v)
			}
		}
		return w.B
	}
	sattr := arg(uint32(1), uint32(0o644), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0))
	seeds := [][]byte{
		rpcCall(1, progNFS, 3, nfsProcNull, nil),
		rpcCall(2, progNFS, 3, nfsProcGetattr, arg(root)),
		rpcCall(3, progNFS, 3, nfsProcLookup, arg(root, "x")),
		rpcCall(4, progNFS, 3, nfsProcCreate, append(arg(root, "f", uint32(0)), sattr...)),
		rpcCall(5, progNFS, 3, nfsProcMkdir, append(arg(root, "d"), sattr...)),
		rpcCall(6, progNFS, 3, nfsProcReaddirplus, arg(root, uint64(0), uint64(0), uint32(4096), uint32(4096))),
		rpcCall(7, progNFS, 3, nfsProcReaddir, arg(root, uint64(0), uint64(0), uint32(100))),
		rpcCall(8, progNFS, 3, nfsProcFsinfo, arg(root)),
		rpcCall(9, progNFS, 3, nfsProcWrite, arg(root, uint64(0), uint32(3), uint32(0), []byte("abc"))),
		rpcCall(10, progNFS, 3, nfsProcSetattr, append(append(arg(root), sattr...), arg(uint32(0))...)),
		rpcCall(11, progNFS, 3, nfsProcRename, arg(root, "a", root, "b")),
		rpcCall(12, progNFS, 3, nfsProcMknod, append(arg(root, "n", uint32(nf3FIFO)), sattr...)),
		rpcCall(13, progNFS, 3, nfsProcSymlink, append(append(arg(root, "s"), sattr...), arg("t")...)),
		rpcCall(14, progNFS, 3, nfsProcCommit, arg(root, uint64(0), uint32(0))),
		rpcCall(15, progMount, 3, mountProcMnt, arg("/")),
		rpcCall(16, progMount, 3, mountProcExport, nil),
		rpcCall(17, progPortmap, 2, pmapProcGetPort, arg(uint32(progNFS), uint32(3), uint32(6), uint32(0))),
		rpcCall(18, progPortmap, 4, rpcbProcGetAddr, arg(uint32(progMount), uint32(3), "tcp", "", "")),
		rpcCall(19, progNFS, 2, 0, nil),
		{0, 0, 0, 1},
	}
	for _, s := range seeds {
		f.Add(append(binary.BigEndian.AppendUint32(nil, lastFragment|uint32(len(s))), s...))
	}
	s := testServer(f)
	f.Fuzz(func(t *testing.T, stream []byte) {
		cn := testConn()
		br := bufio.NewReader(bytes.NewReader(stream))
		for {
			rec, err := readRecord(br, MaxRecord)
			if err != nil {
				return // a broken stream closes the connection
			}
			out := s.handle(cn, rec)
			if out == nil {
				continue
			}
			if len(rec) < 4 {
				t.Fatal("answered a record without an xid")
			}
			if st := checkReply(t, out, binary.BigEndian.Uint32(rec)); st == acceptSystemErr {
				t.Fatalf("SYSTEM_ERR for %x", rec)
			}
		}
	})
}
