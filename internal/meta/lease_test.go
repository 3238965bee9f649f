package meta

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// mustHandle serves req at island id (epoch 1) and decodes into resp,
// failing the test on any error.
func (c *cluster) mustHandle(id namespace.IslandID, op uint16, req, resp metawire.Message) {
	c.t.Helper()
	out, err := c.isl[id].Handle(bg, op, 1, metawire.Marshal(req))
	if err != nil {
		c.t.Fatal(err)
	}
	if err := metawire.Unmarshal(out, resp); err != nil {
		c.t.Fatal(err)
	}
}

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
	call := func(op uint16, req, resp metawire.Message) { t.Helper(); c.mustHandle(1, op, req, resp) }
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

// TestCloseEndsLeasePolls: a poll waiting for breaks does not hold an
// island open. (A replica that stopped leading closes its Island; with a
// poll holding it, clients were told "not the leader" for the length of
// the poll and failed.)
func TestCloseEndsLeasePolls(t *testing.T) {
	c := newCluster(t, 1)
	isl := c.isl[1]
	polled := make(chan error, 1)
	go func() {
		_, err := isl.Handle(bg, metawire.OpLeasePoll, 1, metawire.Marshal(&metawire.PollReq{Session: 9, WaitMs: 60_000}))
		polled <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the poll start waiting
	closed := make(chan struct{})
	go func() { isl.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close still waits for a lease poll (up to 30 s) after 20 s")
	}
	if err := <-polled; err == nil {
		t.Fatal("a poll cut short by Close answered as if its wait ran out")
	}
}

// TestHandOverUnfencesTheNextLeader: an island handing the lead over
// breaks its leases, refuses new ones and drops the lease record, so the
// next incarnation is not fenced; if it stays leader (resume), leases are
// granted again and the record comes back first.
func TestHandOverUnfencesTheNextLeader(t *testing.T) {
	c := newCluster(t, 1)
	call := func(op uint16, req, resp metawire.Message) { t.Helper(); c.mustHandle(1, op, req, resp) }
	lease := func() metawire.LeaseResp {
		t.Helper()
		call(metawire.OpLeasePoll, &metawire.PollReq{Session: 9}, &metawire.PollResp{})
		var lr metawire.LeaseResp
		call(metawire.OpLease, &metawire.LeaseReq{Session: 9, Op: metawire.OpLookup, Exclusive: true,
			Msg: metawire.Marshal(&metawire.NameReq{Dir: rootIno(), Name: "x"})}, &lr)
		return lr
	}
	if lr := lease(); !lr.Granted {
		t.Fatalf("lease: %+v", lr)
	}
	// The holder acknowledges breaks as a mount does.
	stop, polled := make(chan struct{}), make(chan struct{})
	isl := c.isl[1]
	go func() {
		defer close(polled)
		var ack uint64
		for {
			select {
			case <-stop:
				return
			default:
			}
			out, err := isl.Handle(bg, metawire.OpLeasePoll, 1, metawire.Marshal(&metawire.PollReq{Session: 9, Ack: ack, WaitMs: 50}))
			if err != nil {
				continue
			}
			var pr metawire.PollResp
			if metawire.Unmarshal(out, &pr) == nil {
				for _, b := range pr.Breaks {
					ack = max(ack, b.Seq)
				}
			}
		}
	}()
	start := time.Now()
	resume, err := c.isl[1].HandOver(bg)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > c.isl[1].leases.Term()/2 {
		t.Fatalf("hand-over waited %v: the break was not acknowledged", d)
	}
	if lr := lease(); lr.Granted {
		t.Fatal("a lease granted after the hand-over began")
	}
	if _, ok, _ := get(c.isl[1].db, globalKey(gLeases)); ok {
		t.Fatal("the lease record survived the hand-over")
	}
	resume()
	if lr := lease(); !lr.Granted {
		t.Fatalf("no lease after resume: %+v", lr)
	}
	if _, ok, _ := get(c.isl[1].db, globalKey(gLeases)); !ok {
		t.Fatal("a lease granted without its record")
	}
	// Handed over again, the next incarnation serves unfenced.
	if _, err := c.isl[1].HandOver(bg); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-polled
	c.restart(1, c.fs[1])
	if c.isl[1].leases.Fenced() || c.isl[1].leases.ReadFenced() {
		t.Fatal("the next incarnation after a hand-over is fenced")
	}
}
