package cluster

import (
	"reflect"
	"testing"
	"time"
)

func TestHeartbeatAndStatusEncoding(t *testing.T) {
	st := MemberStats{CapacityBytes: 1, UsedBytes: 2, Degraded: 3, BytesRead: 4, BytesWritten: 5, Ops: 6,
		ScrubPassBytes: 7, ScrubPasses: 8, Corrupt: 9, Repairs: 10, MetricsAddr: "127.0.0.1:7600"}
	leased := st
	leased.Leases = &LeaseStats{Held: 1, Granted: 2, Broken: 3, Expired: 4, Exclusive: 5, Recalled: 6, Kept: 7, Sent: 8}
	hb := HeartbeatReq{Kind: KindIsland, ID: 3, Epoch: 42, Stats: leased}
	var got HeartbeatReq
	if err := Unmarshal(Marshal(&hb), &got); err != nil || !reflect.DeepEqual(got, hb) {
		t.Fatalf("heartbeat with leases round trip: %+v, %v", got, err)
	}
	hb = HeartbeatReq{Kind: KindStorage, ID: 3, Epoch: 42, Stats: st}
	got = HeartbeatReq{}
	if err := Unmarshal(Marshal(&hb), &got); err != nil || !reflect.DeepEqual(got, hb) {
		t.Fatalf("heartbeat round trip: %+v, %v", got, err)
	}
	now := time.Unix(0, time.Now().UnixNano()) // no monotonic reading
	sr := StatusResp{MapBytes: []byte{1, 2}, Status: Status{Self: "m", RaftState: "Leader", Voters: []Voter{{RaftID: "m", RaftAddr: "a:1", Voter: true}},
		Live: []MemberLive{{Key: MemberKey{KindIsland, 2}, LastHeartbeat: now, Stats: leased}, {Key: MemberKey{KindStorage, 3}, LastHeartbeat: now, Stats: st}, {Key: MemberKey{KindIsland, 1}}}}}
	var sgot StatusResp
	if err := Unmarshal(Marshal(&sr), &sgot); err != nil || !reflect.DeepEqual(sgot, sr) {
		t.Fatalf("status round trip:\n got %+v, %v\nwant %+v", sgot, err, sr)
	}
	// A short or hostile count is refused, not allocated.
	b := Marshal(&sr)
	if err := Unmarshal(b[:len(b)-1], &sgot); err == nil {
		t.Fatal("truncated status decoded")
	}
}
