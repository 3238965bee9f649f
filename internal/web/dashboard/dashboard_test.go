package dashboard

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/manager"
)

type fakeSource struct{ sn manager.Snapshot }

func (f fakeSource) Snapshot() manager.Snapshot { return f.sn }

func testSnapshot() manager.Snapshot {
	now := time.Unix(1_800_000_000, 0)
	mp := &cluster.Map{
		Epoch: 12, Formatted: true, DefaultPolicy: "ec:2+1",
		Storage: []cluster.Storage{
			{Slot: 0, Addr: "127.0.0.1:7400", State: cluster.StateUp, PID: 100},
			{Slot: 1, Addr: "127.0.0.1:7401", State: cluster.StateDown, PID: 101},
		},
		Islands:  []cluster.Island{{ID: 1, Addr: "127.0.0.1:7500", State: cluster.StateUp}, {ID: 2, Addr: "127.0.0.1:7501", State: cluster.StateUp}},
		Gateways: []cluster.Gateway{{ID: 7, Addr: "</script><script>alert(1)</script>:1", State: cluster.StateUp}},
		Table:    cluster.Table{Depth: 2, Entries: []uint32{1, 2, 1, 2}},
	}
	k0, k1 := cluster.MemberKey{Kind: cluster.KindStorage, ID: 0}, cluster.MemberKey{Kind: cluster.KindStorage, ID: 1}
	return manager.Snapshot{
		Status: cluster.Status{Map: mp, Self: "m1", RaftState: "Leader", LeaderID: "m1", Leader: "127.0.0.1:7300", Term: 3,
			Live: []cluster.MemberLive{
				{Key: k0, LastHeartbeat: now.Add(-time.Second), Stats: cluster.MemberStats{CapacityBytes: 1000, UsedBytes: 400,
					ScrubPassBytes: 100, ScrubPasses: 2, Repairs: 1, MetricsAddr: "127.0.0.1:7600"}},
				{Key: k1, LastHeartbeat: now.Add(-9 * time.Second), Stats: cluster.MemberStats{CapacityBytes: 1000, UsedBytes: 600}},
				{Key: cluster.MemberKey{Kind: cluster.KindGateway, ID: 7}, LastHeartbeat: now, Stats: cluster.MemberStats{Degraded: 5, Role: "mount at /mnt on h1",
					Leases: &cluster.LeaseStats{Held: 3, Broken: 1, Kept: 30, Sent: 10},
					Locks:  &cluster.LockStats{Locks: 2, OpenHeld: 5, OpenLocal: 1}}},
			}},
		Now:   now,
		Rates: map[cluster.MemberKey]manager.Rates{k0: {WriteBytesPerSec: 50}, k1: {WriteBytesPerSec: 70}},
		Throughput: []manager.ThroughputPoint{
			{Time: now.Add(-2 * time.Second), WriteBytesPerSec: 120},
			{Time: now, ReadBytesPerSec: 10},
		},
	}
}

func TestBuild(t *testing.T) {
	v := Build(testSnapshot())
	if v.Epoch != 12 || !v.Raft.Heartbeats || v.Raft.Leader != "127.0.0.1:7300" {
		t.Fatalf("header: %+v", v)
	}
	names := []string{}
	for _, m := range v.Members {
		names = append(names, m.Name+":"+m.State)
	}
	if got := strings.Join(names, " "); got != "storage-0:up storage-1:down island-1:up island-2:up gateway-7:up" {
		t.Fatalf("members: %s", got)
	}
	s0, s1 := v.Members[0], v.Members[1]
	if s0.MetricsAddr != "127.0.0.1:7600" || s0.HeartbeatAgeMS != 1000 || s0.ScrubProgress != 0.25 || s0.WriteBps != 50 || s0.Repairs != 1 {
		t.Errorf("storage-0: %+v", s0)
	}
	if s1.WriteBps != 0 {
		t.Errorf("a down member shows a rate: %+v", s1)
	}
	if v.Members[2].ScrubProgress != -1 || v.Members[2].HeartbeatAgeMS != -1 || v.Members[2].Leases != nil {
		t.Errorf("island without heartbeats: %+v", v.Members[2])
	}
	if v.Members[4].Role != "mount at /mnt on h1" {
		t.Errorf("gateway-7 role %q", v.Members[4].Role)
	}
	if k := v.Members[4].Locks; k == nil || k.Locks != 2 || k.OpenHeld != 5 || k.OpenLocal != 1 {
		t.Errorf("gateway-7 locks: %+v", k)
	}
	if v.Members[2].Locks != nil {
		t.Errorf("a member that reports no locks shows %+v", v.Members[2].Locks)
	}
	if l := v.Members[4].Leases; l == nil || l.Held != 3 || l.Broken != 1 || l.Kept != 30 || l.Sent != 10 {
		t.Errorf("gateway-7 leases: %+v", l)
	}
	tot := v.Totals
	if tot.Members != 5 || tot.Up != 4 || tot.Down != 1 || tot.CapacityBytes != 2000 || tot.UsedBytes != 1000 ||
		tot.Degraded != 5 || tot.WriteBps != 50 || tot.ScrubProgress != 0.25 || tot.ScrubPasses != 2 {
		t.Errorf("totals: %+v", tot)
	}
	if len(v.Islands) != 2 || len(v.Islands[0].Entries) != 2 || v.Islands[0].Entries[1] != 2 || v.Islands[1].Share != 0.5 {
		t.Errorf("islands: %+v", v.Islands)
	}
	if len(v.Throughput.Points) != 2 || v.Throughput.Points[0].Write != 120 || v.Throughput.StepSeconds != manager.ThroughputStep.Seconds() {
		t.Errorf("throughput: %+v", v.Throughput)
	}

	// A gateway a tenant's key registered: its figures are marked as its
	// word, and its degraded stripes stay out of the total.
	sn := testSnapshot()
	sn.Status.Map.Gateways[0].Owner = "alice"
	tv := Build(sn)
	if g := tv.Members[4]; g.ReportedBy != "alice" || tv.Totals.Degraded != 0 || tv.Totals.DegradedReported != 5 {
		t.Errorf("tenant's gateway: reported by %q, totals %+v", g.ReportedBy, tv.Totals)
	}

	// A follower (or a manager before any registration) still renders.
	empty := Build(manager.Snapshot{Status: cluster.Status{RaftState: "Follower"}})
	if empty.Raft.Heartbeats || empty.Members == nil || empty.Islands == nil || empty.Table.Owners == nil || empty.Throughput.Points == nil {
		t.Errorf("empty view has nulls: %+v", empty)
	}
}

func TestHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "atoll_test_total", Help: "x"}))
	srv := httptest.NewServer(Handler(fakeSource{testSnapshot()}, reg))
	defer srv.Close()

	page, h := fetch(t, srv.URL+"/", http.StatusOK)
	if !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("page headers: %v", h)
	}
	if strings.Contains(page, "ATOLL_INITIAL") || !strings.Contains(page, `"name":"storage-1","kind":"storage"`) {
		t.Errorf("the page does not carry the current view")
	}
	// Member-supplied strings cannot end the script element.
	if strings.Count(page, "</script>") != 2 || strings.Contains(page, "<script>alert") {
		t.Errorf("the inlined view escapes its <script>")
	}
	// Self-contained: nothing is loaded from anywhere (the only URLs are
	// the SVG namespace and links to the members' /metrics).
	for _, banned := range []string{"https://", "<link", "src=", "@import", "url(", "@font-face"} {
		if strings.Contains(page, banned) {
			t.Errorf("the page loads something: it contains %q", banned)
		}
	}

	body, h := fetch(t, srv.URL+"/api/cluster", http.StatusOK)
	var v View
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Epoch != 12 || len(v.Members) != 5 {
		t.Fatalf("/api/cluster: %v %+v", err, v)
	}
	if h.Get("Cache-Control") != "no-store" {
		t.Errorf("/api/cluster may be cached: %v", h)
	}
	if m, _ := fetch(t, srv.URL+"/metrics", http.StatusOK); !strings.Contains(m, "atoll_test_total 0") {
		t.Errorf("/metrics: %s", m)
	}
	fetch(t, srv.URL+"/nope", http.StatusNotFound)
	resp, err := http.Post(srv.URL+"/api/cluster", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /api/cluster: %s", resp.Status)
	}
}

func fetch(t *testing.T, url string, want int) (string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %s, want %d", url, resp.Status, want)
	}
	return string(b), resp.Header
}
