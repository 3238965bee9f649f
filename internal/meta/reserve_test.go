package meta

import (
	"errors"
	"testing"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// TestCreateWithReservedIno covers what metadata write-behind sends: a
// create with an id the client reserved (OpAllocIno with a Count) and
// the attribute changes it kept back with it.
func TestCreateWithReservedIno(t *testing.T) {
	c := newCluster(t, 1)
	r := c.root()
	d := must(r.mkdir(rootIno(), "d", 0o777))
	bucket := namespace.Ino(d.Ino).Bucket()
	var ar metawire.AllocInoResp
	if err := c.call(metawire.OpAllocIno, d.Ino, &metawire.AllocInoReq{Bucket: bucket, Count: 8}, &ar); err != nil {
		t.Fatal(err)
	}
	first := namespace.Ino(ar.Ino)
	if first.Bucket() != bucket {
		t.Fatalf("reserved %v outside bucket %08x", first, bucket)
	}
	// The island's own next allocation comes after the reservation.
	other := must(r.create(d.Ino, "other", metawire.ModeFile|0o644))
	if namespace.Ino(other.Ino) <= first+7 {
		t.Fatalf("island allocated %v inside the reservation %v+8", namespace.Ino(other.Ino), first)
	}

	set := metawire.SetAttrReq{Valid: metawire.SetUID | metawire.SetGID | metawire.SetMode | metawire.SetMtime | metawire.SetAtime,
		UID: 7, GID: 8, Mode: 0o640, Atime: 1e9, Mtime: 2e9}
	resp, err := r.createReq(metawire.OpCreate, metawire.CreateReq{Dir: d.Ino, Name: "f", Mode: metawire.ModeFile | 0o600,
		Exclusive: true, Verf: 5, Ino: uint64(first + 1), Data: []byte("hello"), Set: set})
	if err != nil {
		t.Fatal(err)
	}
	a := resp.Attr
	if a.Ino != uint64(first+1) || a.UID != 7 || a.GID != 8 || a.Mode != metawire.ModeFile|0o640 || a.Mtime != 2e9 || a.Atime != 1e9 || a.Size != 5 {
		t.Fatalf("created %+v", a)
	}
	if got := must(r.getattr(a.Ino)); got != a {
		t.Fatalf("getattr %+v, create answered %+v", got, a)
	}
	if got := string(must(r.readmap(a.Ino, 0, 0)).Inline); got != "hello" {
		t.Fatalf("data %q", got)
	}
	// A retry (same verifier) is the same file.
	resp, err = r.createReq(metawire.OpCreate, metawire.CreateReq{Dir: d.Ino, Name: "f", Mode: metawire.ModeFile | 0o600,
		Exclusive: true, Verf: 5, Ino: uint64(first + 1), Data: []byte("hello"), Set: set})
	if err != nil || !resp.Existed || resp.Attr.Ino != a.Ino {
		t.Fatalf("retry: %+v %v", resp, err)
	}

	refused := []struct {
		name string
		req  metawire.CreateReq
		k    *client
		want error
	}{
		{"id in use", metawire.CreateReq{Name: "g", Ino: uint64(first + 1)}, r, metawire.ErrInvalid},
		{"id never handed out", metawire.CreateReq{Name: "g", Ino: uint64(first + 100000)}, r, nil},
		{"id of another bucket", metawire.CreateReq{Name: "g", Ino: uint64(namespace.MakeIno(bucket+1, first.Seq()+2))}, r, metawire.ErrInvalid},
		{"a directory", metawire.CreateReq{Name: "g", Ino: uint64(first + 2), Mode: metawire.ModeDir | 0o755}, r, metawire.ErrInvalid},
		{"a size change", metawire.CreateReq{Name: "g", Ino: uint64(first + 2), Set: metawire.SetAttrReq{Valid: metawire.SetSize, Size: 9}}, r, metawire.ErrInvalid},
		{"chown by a user", metawire.CreateReq{Name: "g", Ino: uint64(first + 2), Set: metawire.SetAttrReq{Valid: metawire.SetUID, UID: 0}}, c.as(1000, 1000), metawire.ErrPerm},
	}
	for _, tc := range refused {
		tc.req.Dir = d.Ino
		if tc.req.Mode == 0 {
			tc.req.Mode = metawire.ModeFile | 0o644
		}
		_, err := tc.k.createReq(metawire.OpCreate, tc.req)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if _, err := r.lookup(d.Ino, "g"); !errors.Is(err, metawire.ErrNotFound) {
			t.Errorf("%s: refused create left a name: %v", tc.name, err)
		}
	}
	// A user's own changes are allowed.
	u := c.as(1000, 1000)
	resp, err = u.createReq(metawire.OpCreate, metawire.CreateReq{Dir: d.Ino, Name: "mine", Mode: metawire.ModeFile | 0o600, Ino: uint64(first + 3),
		Set: metawire.SetAttrReq{Valid: metawire.SetMode | metawire.SetMtime, Mode: 0o604, Mtime: 3e9}})
	if err != nil || resp.Attr.Mode != metawire.ModeFile|0o604 || resp.Attr.Mtime != 3e9 || resp.Attr.UID != 1000 {
		t.Fatalf("user create: %+v %v", resp.Attr, err)
	}
	c.mustFsck()
}
