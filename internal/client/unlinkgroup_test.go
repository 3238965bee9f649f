package client

import (
	"fmt"
	"testing"

	"github.com/atoll-fs/atoll/internal/metawire"
)

// TestGroupUnlinks: kept-back unlinks go one request per directory and
// caller, in the order they were kept back, at most wbUnlinkMany each;
// one each when an island does not know OpUnlinkMany.
func TestGroupUnlinks(t *testing.T) {
	var batch []*pendingUnlink
	add := func(dir uint64, uid uint32, n int) {
		for range n {
			batch = append(batch, &pendingUnlink{req: metawire.NameReq{Cred: metawire.Cred{UID: uid}, Dir: dir, Name: fmt.Sprint(len(batch))}})
		}
	}
	add(1, 0, 3)
	add(2, 0, wbUnlinkMany+5)
	add(1, 1000, 2) // another caller: checked with its own credentials
	add(1, 0, 1)
	got := groupUnlinks(batch, true)
	var sizes []string
	for _, g := range got {
		for _, p := range g[1:] {
			if p.req.Dir != g[0].req.Dir || p.req.Cred.UID != g[0].req.Cred.UID {
				t.Fatalf("a group mixes %v and %v", g[0].req, p.req)
			}
		}
		sizes = append(sizes, fmt.Sprintf("%d/%d:%d", g[0].req.Dir, g[0].req.Cred.UID, len(g)))
	}
	if want := fmt.Sprintf("[1/0:4 2/0:%d 2/0:5 1/1000:2]", wbUnlinkMany); fmt.Sprint(sizes) != want {
		t.Fatalf("groups %v, want %s", sizes, want)
	}
	var order []string
	for _, p := range got[0] {
		order = append(order, p.req.Name)
	}
	if want := fmt.Sprint([]string{"0", "1", "2", fmt.Sprint(len(batch) - 1)}); fmt.Sprint(order) != want {
		t.Fatalf("order within a group: %v, want %s", order, want)
	}
	if one := groupUnlinks(batch, false); len(one) != len(batch) {
		t.Fatalf("%d requests without OpUnlinkMany, want %d", len(one), len(batch))
	}
}
