package namespace

import (
	"bytes"
	"errors"
	"testing"
)

func TestIno(t *testing.T) {
	i := MakeIno(0xdeadbeef, 42)
	if i.Bucket() != 0xdeadbeef || i.Seq() != 42 || !i.Valid() || uint64(i) != 0xdeadbeef0000002a {
		t.Fatalf("MakeIno: %#x", uint64(i))
	}
	if s := i.String(); s != "deadbeef:0000002a" {
		t.Errorf("String = %q", s)
	}
	for _, tc := range []struct {
		in   string
		want Ino
	}{
		{"deadbeef:0000002a", i},
		{"DEADBEEF:0000002A", i},
		{"16045690981097406506", i},
		{RootIno.String(), RootIno},
		{"00000000:00000001", 1},
		{"1", 1},
	} {
		got, err := ParseIno(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseIno(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, s := range []string{"", "0", "deadbeef:00000000", "deadbeef:0000002", "deadbeef-0000002a",
		"+1", "-1", "0x10", "18446744073709551616", "deadbeeg:0000002a", "deadbeef:+000002a", " 1"} {
		if got, err := ParseIno(s); !errors.Is(err, ErrBadIno) {
			t.Errorf("ParseIno(%q) = %v, %v; want ErrBadIno", s, got, err)
		}
	}
	if RootIno.Bucket() != Bucket("/") || RootIno.Seq() != RootSeq || FirstSeq <= RootSeq {
		t.Error("root inode rule")
	}
}

func TestHandle(t *testing.T) {
	h := Handle{Ino: MakeIno(0x01020304, 0x05060708), Gen: 0x090a0b0c}
	b := h.AppendBinary([]byte("prefix"))
	want := []byte{'A', 'H', 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	if len(b) != 6+HandleSize || !bytes.Equal(b[6:22], want) {
		t.Fatalf("encoding % x", b)
	}
	got, err := DecodeHandle(b[6:])
	if err != nil || got != h {
		t.Fatalf("DecodeHandle = %+v, %v", got, err)
	}
	bad := func(name string, mut func([]byte) []byte) {
		t.Helper()
		c := mut(append([]byte(nil), b[6:]...))
		if _, err := DecodeHandle(c); !errors.Is(err, ErrBadHandle) {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad("short", func(c []byte) []byte { return c[:HandleSize-1] })
	bad("long", func(c []byte) []byte { return append(c, 0) })
	bad("empty", func(c []byte) []byte { return nil })
	bad("magic", func(c []byte) []byte { c[0] = 'X'; return c })
	bad("version", func(c []byte) []byte { c[2] = 2; return c })
	bad("flags", func(c []byte) []byte { c[3] = 1; return c })
	for i := 4; i < HandleSize; i++ {
		bad("bit flip", func(c []byte) []byte { c[i] ^= 0x10; return c })
	}
	zero := Handle{Ino: MakeIno(7, 0)}.AppendBinary(nil)
	if _, err := DecodeHandle(zero); !errors.Is(err, ErrBadHandle) {
		t.Errorf("sequence 0 accepted: %v", err)
	}
}
