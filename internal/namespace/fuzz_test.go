package namespace

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func FuzzClean(f *testing.F) {
	for _, s := range []string{"/", "", "a", "/a//b/../c/.", "/..", "/a\x00", "//x/./y/", strings.Repeat("/abc", 1100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c, err := Clean(p)
		if err != nil {
			if !errors.Is(err, ErrBadPath) && !errors.Is(err, ErrNameTooLong) {
				t.Fatalf("Clean(%q): unexpected error %v", p, err)
			}
			if IsClean(p) {
				t.Fatalf("IsClean(%q) but Clean fails: %v", p, err)
			}
			return
		}
		if !IsClean(c) {
			t.Fatalf("Clean(%q) = %q is not clean", p, c)
		}
		if c2, err := Clean(c); err != nil || c2 != c {
			t.Fatalf("Clean not idempotent: %q -> %q -> %q, %v", p, c, c2, err)
		}
		if IsClean(p) != (p == c) {
			t.Fatalf("IsClean(%q) = %v but Clean gives %q", p, IsClean(p), c)
		}
		// Every clean path but "/" is Join of its SplitPath.
		if c != "/" {
			dir, name := SplitPath(c)
			if j, err := Join(dir, name); err != nil || j != c {
				t.Fatalf("Join(SplitPath(%q)) = %q, %v", c, j, err)
			}
		}
		_ = Bucket(c)
	})
}

func FuzzDecodeTable(f *testing.F) {
	tab, _ := NewTable([]IslandID{3, 1, 2}, 5)
	f.Add(tab.AppendBinary(nil))
	f.Add(Table{Entries: []IslandID{9}, Epoch: 1}.AppendBinary(nil))
	f.Add(Table{Depth: 2, Entries: []IslandID{1, 2, 1, 2}}.AppendBinary(nil))
	f.Add([]byte("AXHT\x01\x10"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, rest, err := DecodeTable(b)
		if err != nil {
			if !errors.Is(err, ErrBadTable) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if err := tab.Validate(); err != nil {
			t.Fatalf("decoded an invalid table: %v", err)
		}
		enc := tab.AppendBinary(nil)
		if !bytes.Equal(enc, b[:len(b)-len(rest)]) {
			t.Fatalf("re-encoding differs:\n% x\n% x", enc, b[:len(b)-len(rest)])
		}
		// Anything decoded can be planned on without trouble.
		if _, err := PlanRebalance(tab, nil, []IslandID{1, 2}); err != nil {
			t.Fatalf("PlanRebalance: %v", err)
		}
	})
}

func FuzzDecodeHandle(f *testing.F) {
	f.Add(Handle{Ino: RootIno, Gen: 1}.AppendBinary(nil))
	f.Add(Handle{Ino: MakeIno(0xffffffff, 0xffffffff), Gen: 0xffffffff}.AppendBinary(nil))
	f.Add([]byte("AH\x01\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHandle(b)
		if err != nil {
			if !errors.Is(err, ErrBadHandle) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if !h.Ino.Valid() {
			t.Fatalf("decoded invalid inode %v", h.Ino)
		}
		if enc := h.AppendBinary(nil); !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs:\n% x\n% x", enc, b)
		}
	})
}

func FuzzParseIno(f *testing.F) {
	for _, s := range []string{"deadbeef:0000002a", "1", "0", "", "ffffffff:ffffffff", "18446744073709551615"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		i, err := ParseIno(s)
		if err != nil {
			if !errors.Is(err, ErrBadIno) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if !i.Valid() {
			t.Fatalf("parsed invalid inode %v", i)
		}
		if j, err := ParseIno(i.String()); err != nil || j != i {
			t.Fatalf("ParseIno(%q) = %v, %v", i.String(), j, err)
		}
	})
}
