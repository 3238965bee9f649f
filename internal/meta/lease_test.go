package meta

import (
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/atoll-fs/atoll/internal/metawire"
)

// TestLeasesFenceTheNextIncarnation: once an island granted a lease, the
// next incarnation (a restart, even after a crash right after the grant;
// a new leader reads the same replicated record) delays changes by one
// term; an island that never granted one does not.
func TestLeasesFenceTheNextIncarnation(t *testing.T) {
	c := newCluster(t, 1)
	c.restart(1, c.fs[1])
	if c.isl[1].leases.Fenced() {
		t.Fatal("fenced without ever granting a lease")
	}
	call := func(op uint16, req, resp metawire.Message) {
		t.Helper()
		out, err := c.isl[1].Handle(bg, op, 1, metawire.Marshal(req))
		if err != nil {
			t.Fatal(err)
		}
		if err := metawire.Unmarshal(out, resp); err != nil {
			t.Fatal(err)
		}
	}
	call(metawire.OpLeasePoll, &metawire.PollReq{Session: 9}, &metawire.PollResp{})
	var lr metawire.LeaseResp
	call(metawire.OpLease, &metawire.LeaseReq{Session: 9, Op: metawire.OpLookup,
		Msg: metawire.Marshal(&metawire.NameReq{Dir: rootIno(), Name: "x"})}, &lr)
	if !lr.Granted || lr.Term <= 0 || lr.Status != metawire.StatusOf(metawire.ErrNotFound) {
		t.Fatalf("leased lookup of a missing name: %+v", lr)
	}
	crashed := c.fs[1].CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(3, 4))})
	c.restart(1, crashed)
	if !c.isl[1].leases.Fenced() {
		t.Fatal("an island restarted after granting a lease is not fenced")
	}
	c.mustFsck()
}
