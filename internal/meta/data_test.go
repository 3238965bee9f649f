package meta

import (
	"bytes"
	"testing"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

func liveOf(t *testing.T, isl *Island) map[fragment.StripeID]int64 {
	t.Helper()
	lb := must(isl.LiveBytes())
	for s, n := range lb {
		if n == 0 {
			delete(lb, s)
		}
	}
	return lb
}

func sameLive(t *testing.T, what string, got map[fragment.StripeID]int64, want map[fragment.StripeID]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: live bytes %v, want %v", what, got, want)
	}
	for s, n := range want {
		if got[s] != n {
			t.Fatalf("%s: live bytes %v, want %v", what, got, want)
		}
	}
}

func TestInlineCommitReadMap(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	f := must(r.create(rootIno(), "f", 0o644))
	data := []byte("hello, inline world")
	resp := must(r.commit(metawire.FileWrite{Ino: f.Ino, Size: uint64(len(data)), Mtime: 777, SetInline: true, Inline: data}))
	a := resp.Attrs[0]
	if a.Size != uint64(len(data)) || !a.Inline || a.Mtime != 777 || a.Version <= f.Version || a.Blocks != 1 {
		t.Fatalf("commit attrs %+v", a)
	}
	m := must(r.readmap(f.Ino, 0, 0))
	if !bytes.Equal(m.Inline, data) || !m.Attr.Inline || len(m.Blocks) != 0 {
		t.Fatalf("readmap %+v", m)
	}
	// Truncate within the inline threshold extends with zeros.
	must(r.setattr(metawire.SetAttrReq{Ino: f.Ino, Valid: metawire.SetSize, Size: 100}))
	m = must(r.readmap(f.Ino, 0, 0))
	if len(m.Inline) != 100 || !bytes.Equal(m.Inline[:len(data)], data) || m.Inline[99] != 0 {
		t.Fatalf("inline after extension: %d bytes", len(m.Inline))
	}
	must(r.setattr(metawire.SetAttrReq{Ino: f.Ino, Valid: metawire.SetSize, Size: 5}))
	m = must(r.readmap(f.Ino, 0, 0))
	if string(m.Inline) != "hello" || m.Attr.Size != 5 {
		t.Fatalf("inline after shrink: %q", m.Inline)
	}
	// An empty inline file grown past the threshold becomes holes.
	g := must(r.create(rootIno(), "g", 0o644))
	ga := must(r.setattr(metawire.SetAttrReq{Ino: g.Ino, Valid: metawire.SetSize, Size: 1 << 20}))
	if ga.Inline || ga.Size != 1<<20 {
		t.Fatalf("big truncate of empty file: %+v", ga)
	}
	// Too much inline data; data and blocks together; bad pointers.
	_, err := r.commit(metawire.FileWrite{Ino: f.Ino, Size: 1 << 20, SetInline: true, Inline: make([]byte, DefaultInlineMax+1)})
	wantErr(t, err, metawire.ErrFileTooBig, "inline data past InlineMax")
	_, err = r.commit(metawire.FileWrite{Ino: f.Ino, Size: 10, SetInline: true, Inline: []byte("x"),
		Blocks: []metawire.Block{{Index: 0, Ptr: ptr(1, 1, 0, 10)}}})
	wantErr(t, err, metawire.ErrInvalid, "inline and blocks")
	_, err = r.commit(metawire.FileWrite{Ino: f.Ino, Size: 10, Blocks: []metawire.Block{{Index: 0, Ptr: []byte{1, 2, 3}}}})
	wantErr(t, err, metawire.ErrInvalid, "bad pointer")
	_, err = r.commit(metawire.FileWrite{Ino: f.Ino, Size: 3, SetInline: true, Inline: []byte("toolong")})
	wantErr(t, err, metawire.ErrInvalid, "size below inline data")
	d := must(r.mkdir(rootIno(), "d", 0o755))
	_, err = r.commit(metawire.FileWrite{Ino: d.Ino, Size: 1})
	wantErr(t, err, metawire.ErrIsDir, "commit to a directory")
	// Nothing of a failed batch is applied.
	_, err = r.commit(
		metawire.FileWrite{Ino: f.Ino, Size: 1, SetInline: true, Inline: []byte("Z")},
		metawire.FileWrite{Ino: d.Ino, Size: 1})
	wantErr(t, err, metawire.ErrIsDir, "batch with a bad write")
	if m := must(r.readmap(f.Ino, 0, 0)); string(m.Inline) != "hello" {
		t.Fatalf("partial batch applied: %q", m.Inline)
	}
	// A non-root write clears set-user-id.
	must(r.setattr(metawire.SetAttrReq{Ino: f.Ino, Valid: metawire.SetMode | metawire.SetUID, Mode: 0o4777, UID: 1000}))
	res := must(c.as(1000, 1000).commit(metawire.FileWrite{Ino: f.Ino, Size: 1, SetInline: true, Inline: []byte("Y")}))
	if res.Attrs[0].Mode&modeSUID != 0 {
		t.Fatal("write by non-root kept set-user-id")
	}
}

func TestBlocksTruncateAndLiveBytes(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	isl := c.isl[1]
	f := must(r.create(rootIno(), "f", 0o644))
	g := must(r.create(rootIno(), "g", 0o644))
	const bs = 65536
	s1, s2 := fragment.StripeID{Log: 7, Seq: 1}, fragment.StripeID{Log: 7, Seq: 2}
	// f: blocks 0..3 in stripe 1; g: block 0 in stripe 1, 1 in stripe 2.
	var blocks []metawire.Block
	for k := range 4 {
		blocks = append(blocks, metawire.Block{Index: uint64(k), Ptr: ptr(7, 1, uint32(k*bs), bs)})
	}
	a := must(r.commit(
		metawire.FileWrite{Ino: f.Ino, Size: 4 * bs, Blocks: blocks},
		metawire.FileWrite{Ino: g.Ino, Size: 2 * bs, Blocks: []metawire.Block{
			{Index: 0, Ptr: ptr(7, 1, 4*bs, bs)}, {Index: 1, Ptr: ptr(7, 2, 0, 1000)}}},
	)).Attrs
	if a[0].Inline || a[0].Blocks != 4*bs/512 || a[1].Blocks != (bs+1000+511)/512 {
		t.Fatalf("attrs after commit %+v", a)
	}
	sameLive(t, "after commit", liveOf(t, isl), map[fragment.StripeID]int64{s1: 5 * bs, s2: 1000})
	m := must(r.readmap(f.Ino, 1, 2))
	if len(m.Blocks) != 2 || m.Blocks[0].Index != 1 || !bytes.Equal(m.Blocks[1].Ptr, blocks[2].Ptr) {
		t.Fatalf("readmap range: %+v", m.Blocks)
	}
	// Overwrite block 1 of f with a pointer into stripe 2; punch block 3.
	must(r.commit(metawire.FileWrite{Ino: f.Ino, Size: 4 * bs, Blocks: []metawire.Block{
		{Index: 1, Ptr: ptr(7, 2, 1000, 500)}, {Index: 3, Ptr: nil}}}))
	sameLive(t, "after overwrite", liveOf(t, isl), map[fragment.StripeID]int64{s1: 3 * bs, s2: 1500})
	// Truncate f into block 1: blocks 2.. go (block 3 was a hole).
	must(r.setattr(metawire.SetAttrReq{Ino: f.Ino, Valid: metawire.SetSize, Size: bs + 10}))
	m = must(r.readmap(f.Ino, 0, 0))
	if len(m.Blocks) != 2 || m.Attr.Size != bs+10 {
		t.Fatalf("after truncate: %+v", m.Blocks)
	}
	sameLive(t, "after truncate", liveOf(t, isl), map[fragment.StripeID]int64{s1: 2 * bs, s2: 1500})
	// Unlinking g releases its blocks.
	wantErr(t, r.unlink(rootIno(), "g"), nil, "unlink g")
	sameLive(t, "after unlink", liveOf(t, isl), map[fragment.StripeID]int64{s1: bs, s2: 500})
	st := metawire.StatFSResp{}
	if err := c.call(metawire.OpStatFS, rootIno(), &metawire.Empty{}, &st); err != nil || st.Bytes != bs+10 || st.Inodes != 2 {
		t.Fatalf("statfs %+v %v", st, err)
	}
	// Back to inline: every block goes.
	must(r.commit(metawire.FileWrite{Ino: f.Ino, Size: 3, SetInline: true, Inline: []byte("abc")}))
	sameLive(t, "after inline", liveOf(t, isl), nil)
	c.mustFsck()
}

// TestCleanDeltas follows Zebra's Table 1: a cleaner delta applies only
// when the block still holds the pointer the cleaner copied.
func TestCleanDeltas(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	isl := c.isl[1]
	f := must(r.create(rootIno(), "f", 0o644))
	old0, old1 := ptr(1, 1, 0, 4096), ptr(1, 1, 4096, 4096)
	must(r.commit(metawire.FileWrite{Ino: f.Ino, Size: 8192, Blocks: []metawire.Block{{Index: 0, Ptr: old0}, {Index: 1, Ptr: old1}}}))
	// The client overwrites block 1 after the cleaner copied it.
	newer := ptr(2, 1, 0, 4096)
	must(r.commit(metawire.FileWrite{Ino: f.Ino, Size: 8192, Blocks: []metawire.Block{{Index: 1, Ptr: newer}}}))
	before := must(r.getattr(f.Ino))
	clean := metawire.CleanReq{Deltas: []metawire.CleanDelta{
		{Ino: f.Ino, Index: 0, Old: old0, New: ptr(9, 1, 0, 4096)},                                                         // still current: applied
		{Ino: f.Ino, Index: 1, Old: old1, New: ptr(9, 1, 4096, 4096)},                                                      // overwritten: rejected
		{Ino: f.Ino, Index: 5, Old: old1, New: ptr(9, 1, 8192, 4096)},                                                      // no such block: rejected
		{Ino: uint64(namespace.MakeIno(namespace.Ino(f.Ino).Bucket(), 0xfff0)), Index: 0, Old: old0, New: ptr(9, 1, 0, 1)}, // deleted file: rejected
	}}
	var resp metawire.CleanResp
	if err := c.call(metawire.OpClean, f.Ino, &clean, &resp); err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, false, false}; len(resp.Applied) != 4 || resp.Applied[0] != want[0] || resp.Applied[1] || resp.Applied[2] || resp.Applied[3] {
		t.Fatalf("applied %v, want %v", resp.Applied, want)
	}
	m := must(r.readmap(f.Ino, 0, 0))
	if !bytes.Equal(m.Blocks[0].Ptr, clean.Deltas[0].New) || !bytes.Equal(m.Blocks[1].Ptr, newer) {
		t.Fatal("wrong pointers after cleaning")
	}
	if m.Attr.Version != before.Version {
		t.Fatal("cleaning changed the file version")
	}
	sameLive(t, "after clean", liveOf(t, isl), map[fragment.StripeID]int64{
		{Log: 2, Seq: 1}: 4096, {Log: 9, Seq: 1}: 4096,
	})
	bad := metawire.CleanReq{Deltas: []metawire.CleanDelta{{Ino: f.Ino, Index: 0, Old: old0, New: []byte{9}}}}
	wantErr(t, c.call(metawire.OpClean, f.Ino, &bad, &resp), metawire.ErrInvalid, "clean with a bad new pointer")
	c.mustFsck()
}
