package manager

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/wire"
)

// testWriter sends log lines to t.Log until the test ends.
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	lvl := slog.LevelWarn
	if os.Getenv("ATOLL_TEST_DEBUG") != "" {
		lvl = slog.LevelDebug
	}
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl}))
}

// testNode is a manager running in this process.
type testNode struct {
	*Manager
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func (n *testNode) stop(t testing.TB) {
	n.once.Do(func() {
		n.cancel()
		select {
		case err := <-n.done:
			if err != nil {
				t.Errorf("manager %s: Run: %v", n.ID(), err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("manager %s did not stop", n.ID())
		}
	})
}

func testConfig(t testing.TB, dir string) Config {
	return Config{
		Dir:                dir,
		Listen:             "127.0.0.1:0",
		RaftListen:         "127.0.0.1:0",
		DownAfter:          time.Minute,
		HeartbeatTimeout:   300 * time.Millisecond,
		ElectionTimeout:    300 * time.Millisecond,
		LeaderLeaseTimeout: 150 * time.Millisecond,
		ApplyTimeout:       5 * time.Second,
		Logger:             testLogger(t),
	}
}

func startNode(t testing.TB, cfg Config) *testNode {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &testNode{Manager: m, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- m.Run(ctx) }()
	t.Cleanup(func() { n.stop(t) })
	return n
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitLeader(t testing.TB, nodes ...*testNode) *testNode {
	t.Helper()
	var leader *testNode
	waitFor(t, 30*time.Second, "a leader", func() bool {
		for _, n := range nodes {
			if n.IsLeader() {
				leader = n
				return true
			}
		}
		return false
	})
	return leader
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lowAddrs returns n free 127.0.0.1 addresses below the ephemeral port
// range: a test that restarts a server on the same address must not lose
// the port to another process's outgoing connection in between.
func lowAddrs(t testing.TB, n int) []string {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for try := 0; try < 200; try++ {
		base := 20000 + r.IntN(12000)
		var out []string
		for i := 0; i < n; i++ {
			a := net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i))
			ln, err := net.Listen("tcp", a)
			if err != nil {
				break
			}
			ln.Close()
			out = append(out, a)
		}
		if len(out) == n {
			return out
		}
	}
	t.Fatal("no free port range")
	return nil
}

func TestSingleVoterRegisterFormatRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	addrs := lowAddrs(t, 2)
	cfg.Listen, cfg.RaftListen = addrs[0], addrs[1]
	n := startNode(t, cfg)
	waitLeader(t, n)
	ctx := ctxT(t, 30*time.Second)
	cl := cluster.NewClient([]string{n.Addr()}, nil, testLogger(t))
	defer cl.Close()

	for slot := range 3 {
		if _, err := cl.Register(ctx, cluster.KindStorage, uint32(slot), "127.0.0.1:"+itoa(7400+slot), 1000+slot); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []uint32{7, 3} {
		if _, err := cl.Register(ctx, cluster.KindIsland, id, "127.0.0.1:"+itoa(7500+int(id)), 2000+int(id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Register(ctx, cluster.KindGateway, 1, "127.0.0.1:2049", 3000); err != nil {
		t.Fatal(err)
	}
	m, err := cl.Map(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m.Formatted || len(m.Storage) != 3 || len(m.Islands) != 2 || len(m.Gateways) != 1 || m.DefaultPolicy != "ec:2+1" {
		t.Fatalf("before format: %+v", m)
	}
	if m.Islands[0].ID != 3 || m.Storage[2].Addr != "127.0.0.1:7402" || m.Storage[2].PID != 1002 || m.Storage[2].State != cluster.StateUp {
		t.Fatalf("members: %+v", m.Members())
	}
	if len(m.Managers) != 1 || m.Managers[0].ClientAddr != n.Addr() {
		t.Fatalf("managers: %+v", m.Managers)
	}
	fm, err := cl.Format(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !fm.Formatted || fm.Epoch != m.Epoch+1 || fm.Table.Depth != 5 || len(fm.Table.Entries) != 32 {
		t.Fatalf("after format: epoch %d (was %d), table depth %d", fm.Epoch, m.Epoch, fm.Table.Depth)
	}
	if sh := fm.Table.Shares(); sh[3] != 16 || sh[7] != 16 {
		t.Fatalf("shares %v", sh)
	}
	// Re-registering unchanged is not a new epoch.
	if rm, err := cl.Register(ctx, cluster.KindStorage, 1, "127.0.0.1:7401", 1001); err != nil || rm.Epoch != fm.Epoch {
		t.Fatalf("re-register: epoch %v, %v", rm, err)
	}
	// A snapshot, then more commands on top of it: restart must replay
	// both.
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if _, err := cl.SetState(ctx, cluster.KindStorage, 2, cluster.StateDraining); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SetPolicy(ctx, "mirror:3"); err != nil {
		t.Fatal(err)
	}
	want, err := cl.Map(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	addr, raftAddr := n.Addr(), n.RaftAddr()
	n.stop(t)

	// Restart on the same directory and addresses.
	cfg2 := testConfig(t, dir)
	cfg2.Listen, cfg2.RaftListen = addr, raftAddr
	n2 := startNode(t, cfg2)
	waitLeader(t, n2)
	cl2 := cluster.NewClient([]string{n2.Addr()}, nil, testLogger(t))
	defer cl2.Close()
	got, err := cl2.Map(ctx, want.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if !got.SameContent(want) {
		t.Fatalf("map after restart differs:\n got %+v\nwant %+v", got, want)
	}
	if st, _ := got.StorageSlot(2); st.State != cluster.StateDraining || got.DefaultPolicy != "mirror:3" {
		t.Fatalf("after restart: %+v", got)
	}

	// A second manager on the same directory is refused.
	if _, err := New(cfg2); err == nil || !strings.Contains(err.Error(), "lock") {
		t.Fatalf("second manager on one dir: %v", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

func TestHeartbeatsMarkDownAndUp(t *testing.T) {
	const downAfter = 500 * time.Millisecond
	cfg := testConfig(t, t.TempDir())
	cfg.DownAfter = downAfter
	n := startNode(t, cfg)
	waitLeader(t, n)
	ctx := ctxT(t, 30*time.Second)
	cl := cluster.NewClient([]string{n.Addr()}, nil, testLogger(t))
	defer cl.Close()

	// A member that registers and never heartbeats is marked down.
	start := time.Now()
	m0, err := cl.Register(ctx, cluster.KindIsland, 9, "127.0.0.1:9999", 99)
	if err != nil {
		t.Fatal(err)
	}
	var downEpoch uint64
	waitFor(t, 30*time.Second, "island 9 down", func() bool {
		m := n.Map()
		is, _ := m.Island(9)
		downEpoch = m.Epoch
		return is.State == cluster.StateDown
	})
	// Not before its grace ran out (how long after is the machine's
	// business: the race detector on a busy machine is slow).
	if el := time.Since(start); el < downAfter {
		t.Fatalf("marked down after %s (DownAfter %s)", el, downAfter)
	}
	if downEpoch <= m0.Epoch {
		t.Fatalf("down without a new epoch: %d <= %d", downEpoch, m0.Epoch)
	}

	// A member run by RunMember stays up while it heartbeats.
	var mu sync.Mutex
	var maps []*cluster.Map
	runMember := func() (stop func()) {
		mctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- cluster.RunMember(mctx, cluster.MemberConfig{
				Managers: []string{n.Addr()}, Kind: cluster.KindStorage, ID: 4, Addr: "127.0.0.1:7404", PID: 44,
				Interval: 100 * time.Millisecond,
				Stats:    func() cluster.MemberStats { return cluster.MemberStats{CapacityBytes: 1000, UsedBytes: 10} },
				OnMap: func(m *cluster.Map) {
					mu.Lock()
					maps = append(maps, m)
					mu.Unlock()
				},
				Logger: testLogger(t),
			})
		}()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("RunMember: %v", err)
			}
		}
	}
	memberState := func() (cluster.State, uint64) {
		m := n.Map()
		s, _ := m.StorageSlot(4)
		return s.State, m.Epoch
	}
	// heartbeatsUntil waits until the leader has heard from storage 4
	// after instant at, checking at every look that it is up all along.
	heartbeatsUntil := func(what string, at time.Time) {
		t.Helper()
		waitFor(t, 30*time.Second, what, func() bool {
			s, _ := n.Map().StorageSlot(4)
			if s.State != cluster.StateUp {
				t.Fatalf("heartbeating member is %s (last heartbeat %s)", s.State, s.LastHeartbeat)
			}
			return s.LastHeartbeat.After(at)
		})
	}
	memberStart := time.Now()
	stop := runMember()
	waitFor(t, 30*time.Second, "storage 4 registered", func() bool { s, _ := memberState(); return s == cluster.StateUp })
	// It stays up over three grace periods of heartbeats.
	heartbeatsUntil("heartbeats of storage 4 over 3*DownAfter", time.Now().Add(3*downAfter))
	if s, _ := n.Map().StorageSlot(4); s.CapacityBytes != 1000 || s.UsedBytes != 10 || !s.LastHeartbeat.After(memberStart) {
		t.Fatalf("heartbeat data not in the leader's map: %+v", s)
	}
	// Heartbeats do not change the epoch.
	_, e1 := memberState()
	hb1, _ := n.Map().StorageSlot(4)
	heartbeatsUntil("three more heartbeats of storage 4", hb1.LastHeartbeat.Add(300*time.Millisecond))
	if _, e2 := memberState(); e2 != e1 {
		t.Fatalf("epoch moved from %d to %d with heartbeats only", e1, e2)
	}

	// It stops: down in a new epoch, once its grace after the last
	// heartbeat has run out.
	stop()
	var epDown uint64
	var last time.Time
	waitFor(t, 30*time.Second, "storage 4 down", func() bool {
		m := n.Map()
		s, _ := m.StorageSlot(4)
		epDown, last = m.Epoch, s.LastHeartbeat
		return s.State == cluster.StateDown
	})
	if el := time.Since(last); last.IsZero() || el < downAfter {
		t.Fatalf("marked down %s after the last heartbeat (%s), DownAfter %s", el, last, downAfter)
	}
	if epDown <= e1 {
		t.Fatal("down without a new epoch")
	}
	mu.Lock()
	nmaps := len(maps)
	mu.Unlock()

	// It comes back: up in a newer epoch, and OnMap sees that map.
	stop = runMember()
	defer stop()
	waitFor(t, 30*time.Second, "OnMap with storage 4 up in a newer epoch", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range maps[nmaps:] {
			if s, _ := m.StorageSlot(4); s.State == cluster.StateUp && m.Epoch > epDown {
				return true
			}
		}
		return false
	})
	// OnMap also saw island 9's down-marking while the member was running.
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(maps); i++ {
		if maps[i].Epoch < maps[i-1].Epoch && maps[i].Epoch != 0 {
			// A re-registration may deliver the same epoch again, never an older one.
			t.Fatalf("OnMap epochs went backwards: %d then %d", maps[i-1].Epoch, maps[i].Epoch)
		}
	}
}

// TestMemberNoticesNewEpoch: a change made by someone else reaches a
// member through its heartbeat reply.
func TestMemberNoticesNewEpoch(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	n := startNode(t, cfg)
	waitLeader(t, n)
	ctx := ctxT(t, 20*time.Second)
	got := make(chan *cluster.Map, 64)
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- cluster.RunMember(mctx, cluster.MemberConfig{
			Managers: []string{n.Addr()}, Kind: cluster.KindGateway, ID: 1, Addr: "127.0.0.1:2049",
			Interval: 50 * time.Millisecond, Logger: testLogger(t),
			OnMap: func(m *cluster.Map) {
				select {
				case got <- m:
				default:
				}
			},
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	first := <-got
	cl := cluster.NewClient([]string{n.Addr()}, nil, testLogger(t))
	defer cl.Close()
	if _, err := cl.Register(ctx, cluster.KindStorage, 0, "127.0.0.1:7400", 1); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m.Epoch <= first.Epoch || len(m.Storage) != 1 {
			t.Fatalf("new map: epoch %d (first %d), storage %v", m.Epoch, first.Epoch, m.Storage)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("member never saw the new epoch in 30s")
	}
}

func TestThreeVoters(t *testing.T) {
	c1 := testConfig(t, t.TempDir())
	c1.DownAfter = time.Second
	n1 := startNode(t, c1)
	waitLeader(t, n1)
	nodes := []*testNode{n1}
	for range 2 {
		c := testConfig(t, t.TempDir())
		c.DownAfter = time.Second
		c.Join = n1.Addr()
		nodes = append(nodes, startNode(t, c))
	}
	ctx := ctxT(t, 60*time.Second)
	cl := cluster.NewClient([]string{n1.Addr()}, nil, testLogger(t))
	defer cl.Close()
	waitFor(t, 20*time.Second, "three voters with addresses", func() bool {
		st, err := cl.Status(ctx)
		if err != nil {
			return false
		}
		ok := len(st.Voters) == 3
		for _, v := range st.Voters {
			ok = ok && v.Voter && v.ClientAddr != ""
		}
		return ok && len(st.Map.Managers) == 3
	})

	// Writes through a follower are redirected to the leader.
	var follower *testNode
	for _, n := range nodes[1:] {
		if !n.IsLeader() {
			follower = n
		}
	}
	fcl := cluster.NewClient([]string{follower.Addr()}, nil, testLogger(t))
	defer fcl.Close()
	for slot := range 3 {
		if _, err := fcl.Register(ctx, cluster.KindStorage, uint32(slot), "127.0.0.1:"+itoa(7400+slot), 10+slot); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fcl.Register(ctx, cluster.KindIsland, 1, "127.0.0.1:7500", 20); err != nil {
		t.Fatal(err)
	}
	fm, err := fcl.Format(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fcl.Leader() == follower.Addr() || fcl.Leader() == "" {
		t.Fatalf("client leader hint %q", fcl.Leader())
	}
	// Every manager's own map reaches the epoch.
	for _, n := range nodes {
		waitFor(t, 30*time.Second, "replication to "+n.ID(), func() bool { return n.fsm.Epoch() >= fm.Epoch })
	}
	// A follower serves reads, and refuses an epoch it does not have.
	raw, err := wire.Dial(ctx, follower.Addr(), wire.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if rep, err := raw.Call(ctx, cluster.OpGetMap, 0, cluster.Marshal(&cluster.GetMapReq{MinEpoch: fm.Epoch}), nil, nil); err != nil {
		t.Fatalf("follower read: %v", err)
	} else if m, err := cluster.DecodeMap(rep.Msg); err != nil || m.Epoch < fm.Epoch {
		t.Fatalf("follower map: %v %v", m, err)
	}
	if _, err := raw.Call(ctx, cluster.OpGetMap, 0, cluster.Marshal(&cluster.GetMapReq{MinEpoch: fm.Epoch + 100}), nil, nil); !errors.Is(cluster.RemoteErr(err), cluster.ErrStaleEpoch) {
		t.Fatalf("follower with an older map: %v", err)
	}
	var nl *cluster.NotLeaderError
	if _, err := raw.Call(ctx, cluster.OpSetState, 0, cluster.Marshal(&cluster.SetStateReq{Kind: cluster.KindStorage, ID: 0, State: cluster.StateDraining}), nil, nil); !errors.As(cluster.RemoteErr(err), &nl) || nl.Leader == "" {
		t.Fatalf("follower write: %v", err)
	}

	// A member heartbeating through the whole failover is never marked down.
	mctx, mcancel := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() {
		mdone <- cluster.RunMember(mctx, cluster.MemberConfig{
			Managers: []string{follower.Addr()}, Kind: cluster.KindStorage, ID: 0, Addr: "127.0.0.1:7400", PID: 10,
			Interval: 100 * time.Millisecond, Logger: testLogger(t),
		})
	}()
	defer func() {
		mcancel()
		if err := <-mdone; err != nil {
			t.Error(err)
		}
	}()

	// Stop the leader.
	old := waitLeader(t, nodes...)
	old.stop(t)
	var rest []*testNode
	var addrs []string
	for _, n := range nodes {
		if n != old {
			rest = append(rest, n)
			addrs = append(addrs, n.Addr())
		}
	}
	nl2 := waitLeader(t, rest...)
	scl := cluster.NewClient(append([]string{old.Addr()}, addrs...), nil, testLogger(t))
	defer scl.Close()
	rm, err := scl.Register(ctx, cluster.KindStorage, 3, "127.0.0.1:7403", 13)
	if err != nil {
		t.Fatalf("register after failover: %v", err)
	}
	m, err := scl.Map(ctx, rm.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Formatted || len(m.Storage) != 4 || len(m.Islands) != 1 || m.Epoch <= fm.Epoch {
		t.Fatalf("map after failover: %+v", m)
	}
	// Grace: slots 1, 2 and island 1 never heartbeat and go down after
	// DownAfter on the new leader; slot 0 (heartbeating) stays up.
	waitFor(t, 30*time.Second, "silent members down on the new leader", func() bool {
		mm := nl2.Map()
		s1, _ := mm.StorageSlot(1)
		is, _ := mm.Island(1)
		return s1.State == cluster.StateDown && is.State == cluster.StateDown
	})
	// Slot 0 keeps heartbeating to the new leader for a whole grace
	// period past that, and is up all along.
	after := time.Now().Add(c1.DownAfter)
	waitFor(t, 30*time.Second, "slot 0's heartbeats on the new leader for DownAfter", func() bool {
		s0, _ := nl2.Map().StorageSlot(0)
		if s0.State != cluster.StateUp {
			t.Fatalf("heartbeating member is %s after failover", s0.State)
		}
		return s0.LastHeartbeat.After(after)
	})
	st, err := scl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Leader != nl2.Addr() || st.RaftState != "Leader" || len(st.Voters) != 3 || st.Term == 0 {
		t.Fatalf("status after failover: %+v", st)
	}
}

func TestBadInput(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	n := startNode(t, cfg)
	waitLeader(t, n)
	ctx := ctxT(t, 30*time.Second)
	raw, err := wire.Dial(ctx, n.Addr(), wire.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	expect := func(what string, op uint16, msg []byte, want error) {
		t.Helper()
		_, err := raw.Call(ctx, op, 0, msg, nil, nil)
		if err = cluster.RemoteErr(err); !errors.Is(err, want) {
			t.Errorf("%s: got %v, want %v", what, err, want)
		}
	}
	for op := cluster.OpGetMap; op <= cluster.OpSetPolicy; op++ {
		if op != cluster.OpStatus {
			expect("short message", op, []byte{1}, cluster.ErrBadRequest)
		}
		expect("trailing bytes", op, append(cluster.Marshal(&cluster.RegisterReq{Kind: cluster.KindStorage, Addr: "127.0.0.1:1"}), make([]byte, 200)...), cluster.ErrBadRequest)
	}
	expect("unknown op", 999, nil, cluster.ErrBadRequest)
	expect("unknown op 0", 0, nil, cluster.ErrBadRequest)
	expect("wrong kind", cluster.OpRegister, cluster.Marshal(&cluster.RegisterReq{Kind: 9, ID: 1, Addr: "127.0.0.1:1"}), cluster.ErrBadRequest)
	expect("kind zero", cluster.OpHeartbeat, cluster.Marshal(&cluster.HeartbeatReq{Kind: 0, ID: 1}), cluster.ErrBadRequest)
	expect("slot too big", cluster.OpRegister, cluster.Marshal(&cluster.RegisterReq{Kind: cluster.KindStorage, ID: 70000, Addr: "127.0.0.1:1"}), cluster.ErrBadRequest)
	expect("bad address", cluster.OpRegister, cluster.Marshal(&cluster.RegisterReq{Kind: cluster.KindStorage, ID: 1, Addr: "no port"}), cluster.ErrBadRequest)
	expect("negative pid", cluster.OpRegister, cluster.Marshal(&cluster.RegisterReq{Kind: cluster.KindStorage, ID: 1, Addr: "127.0.0.1:1", PID: -5}), cluster.ErrBadRequest)
	expect("huge count", cluster.OpFormat, []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, cluster.ErrBadRequest)
	expect("format without islands", cluster.OpFormat, cluster.Marshal(&cluster.FormatReq{}), cluster.ErrBadRequest)
	expect("set table unformatted", cluster.OpSetTable, cluster.Marshal(&cluster.SetTableReq{Table: cluster.Table{Entries: []uint32{1}}}), cluster.ErrNotFormatted)
	expect("bad table", cluster.OpSetTable, cluster.Marshal(&cluster.SetTableReq{Table: cluster.Table{Depth: 3, Entries: []uint32{1}}}), cluster.ErrBadRequest)
	expect("set state unknown", cluster.OpSetState, cluster.Marshal(&cluster.SetStateReq{Kind: cluster.KindStorage, ID: 5, State: cluster.StateOut}), cluster.ErrUnknownMember)
	expect("set state down", cluster.OpSetState, cluster.Marshal(&cluster.SetStateReq{Kind: cluster.KindStorage, ID: 5, State: cluster.StateDown}), cluster.ErrBadRequest)
	expect("set state garbage", cluster.OpSetState, cluster.Marshal(&cluster.SetStateReq{Kind: cluster.KindStorage, ID: 5, State: 77}), cluster.ErrBadRequest)
	expect("heartbeat unknown", cluster.OpHeartbeat, cluster.Marshal(&cluster.HeartbeatReq{Kind: cluster.KindIsland, ID: 5}), cluster.ErrUnknownMember)
	expect("future epoch", cluster.OpGetMap, cluster.Marshal(&cluster.GetMapReq{MinEpoch: 1 << 60}), cluster.ErrStaleEpoch)
	expect("bad policy", cluster.OpSetPolicy, cluster.Marshal(&cluster.SetPolicyReq{Policy: "raid5"}), cluster.ErrBadRequest)
	expect("join without id", cluster.OpJoin, cluster.Marshal(&cluster.JoinReq{RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}), cluster.ErrBadRequest)
	expect("join bad addr", cluster.OpJoin, cluster.Marshal(&cluster.JoinReq{RaftID: "x", RaftAddr: "nope", ClientAddr: "127.0.0.1:2"}), cluster.ErrBadRequest)
	expect("format unknown island", cluster.OpFormat, cluster.Marshal(&cluster.FormatReq{Islands: []uint32{4}}), cluster.ErrUnknownMember)

	// Random messages for every op never crash the manager.
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := newRand(seed)
	for i := range 400 {
		op := uint16(1 + i%9)
		if op == cluster.OpJoin {
			continue // a random but valid join would add a voter that never answers
		}
		b := make([]byte, rng.IntN(40))
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		_, err := raw.Call(ctx, op, 0, b, nil, nil)
		var re *wire.RemoteError
		if err != nil && !errors.As(err, &re) {
			t.Fatalf("op %d random message: transport error %v", op, err)
		}
	}

	// A garbage frame closes that connection only.
	c, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("GET / HTTP/1.0\r\n\r\n" + strings.Repeat("x", 100)))
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("garbage frame: connection not closed: %v", err)
		}
	}
	c.Close()

	// The manager still serves, and formatting twice is refused.
	cl := cluster.NewClient([]string{n.Addr()}, nil, testLogger(t))
	defer cl.Close()
	if _, err := cl.Register(ctx, cluster.KindIsland, 1, "127.0.0.1:7500", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Format(ctx, []uint32{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Format(ctx, nil); !errors.Is(err, cluster.ErrFormatted) {
		t.Fatalf("second format: %v", err)
	}
	if _, err := cl.SetState(ctx, cluster.KindIsland, 42, cluster.StateDraining); !errors.Is(err, cluster.ErrUnknownMember) {
		t.Fatalf("set state of an unknown member: %v", err)
	}
	if _, err := cl.Status(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestClientUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cl := cluster.NewClient([]string{addr}, nil, testLogger(t))
	defer cl.Close()
	// The client gives up by itself: its context (long, only a backstop)
	// is still running when the call returns.
	ctx := ctxT(t, 2*time.Minute)
	_, err = cl.Status(ctx)
	if !errors.Is(err, cluster.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("gave up on a refused address only when its context ended: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{Listen: "127.0.0.1:7300"},
		{Dir: "d"},
		{Dir: "d", Listen: "nope"},
		{Dir: "d", Listen: ":7300"},
		{Dir: "d", Listen: "0.0.0.0:7300"},
		{Dir: "d", Listen: "127.0.0.1:65535"},
		{Dir: "d", Listen: "127.0.0.1:7300", RaftListen: "x"},
		{Dir: "d", Listen: "127.0.0.1:7300", Join: "x"},
		{Dir: "d", Listen: "127.0.0.1:7300", DownAfter: -1},
		{Dir: "d", Listen: "127.0.0.1:7300", DownAfter: time.Microsecond},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
	c := Config{Dir: "d", Listen: "127.0.0.1:7300"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.raftListen(); r != "127.0.0.1:7301" {
		t.Fatalf("default raft listen %q", r)
	}
	c.Listen = "127.0.0.1:0"
	if r, _ := c.raftListen(); r != "127.0.0.1:0" {
		t.Fatalf("default raft listen for port 0: %q", r)
	}
}
