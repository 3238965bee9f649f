package manager

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/hashicorp/raft"
)

// applyCmd runs a command through encode, decode and the FSM.
func applyCmd(t *testing.T, f *fsm, c *cluster.Command) *applyResult {
	t.Helper()
	b := c.Encode()
	d, err := cluster.DecodeCommand(b)
	if err != nil {
		t.Fatalf("decode %s: %v", c.Type, err)
	}
	if !bytes.Equal(d.Encode(), b) {
		t.Fatalf("%s: command does not round-trip", c.Type)
	}
	return f.Apply(&raft.Log{Type: raft.LogCommand, Data: b}).(*applyResult)
}

func TestFSMCommands(t *testing.T) {
	f := newFSM()
	st := func(k cluster.Kind, id uint32) cluster.State {
		v, ok := f.Map().Member(cluster.MemberKey{Kind: k, ID: id})
		if !ok {
			t.Fatalf("%s/%d missing", k, id)
		}
		return v.State
	}
	steps := []struct {
		cmd     cluster.Command
		changed bool
		err     error
	}{
		{cluster.Command{Type: cluster.CmdRegister, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 0}, Addr: "127.0.0.1:1", PID: 1}, true, nil},
		{cluster.Command{Type: cluster.CmdRegister, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 0}, Addr: "127.0.0.1:1", PID: 1}, false, nil}, // no-op: same epoch
		{cluster.Command{Type: cluster.CmdRegister, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 0}, Addr: "127.0.0.1:1", PID: 2}, true, nil},  // restart: new pid
		{cluster.Command{Type: cluster.CmdRegister, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 70000}, Addr: "127.0.0.1:1"}, false, cluster.ErrBadRequest},
		{cluster.Command{Type: cluster.CmdRegister, Key: cluster.MemberKey{Kind: 9, ID: 1}, Addr: "127.0.0.1:1"}, false, cluster.ErrBadRequest},
		{cluster.Command{Type: cluster.CmdRegister, Key: cluster.MemberKey{Kind: cluster.KindIsland, ID: 5}, Addr: "nonsense"}, false, cluster.ErrBadRequest},
		{cluster.Command{Type: cluster.CmdRegister, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 2}, Addr: "127.0.0.1:3", PID: 3}, true, nil},
		{cluster.Command{Type: cluster.CmdRegister, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 1}, Addr: "127.0.0.1:2", PID: 3}, true, nil},
		{cluster.Command{Type: cluster.CmdRegister, Key: cluster.MemberKey{Kind: cluster.KindIsland, ID: 5}, Addr: "127.0.0.1:5"}, true, nil},
		{cluster.Command{Type: cluster.CmdRegister, Key: cluster.MemberKey{Kind: cluster.KindGateway, ID: 1}, Addr: "127.0.0.1:6"}, true, nil},
		{cluster.Command{Type: cluster.CmdMarkDown, Keys: []cluster.MemberKey{{Kind: cluster.KindStorage, ID: 1}, {Kind: cluster.KindIsland, ID: 5}, {Kind: cluster.KindIsland, ID: 77}}}, true, nil},
		{cluster.Command{Type: cluster.CmdMarkDown, Keys: []cluster.MemberKey{{Kind: cluster.KindStorage, ID: 1}}}, false, nil},
		{cluster.Command{Type: cluster.CmdMarkUp, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 1}}, true, nil},
		{cluster.Command{Type: cluster.CmdMarkUp, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 1}}, false, nil},
		{cluster.Command{Type: cluster.CmdMarkUp, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 9}}, false, cluster.ErrUnknownMember},
		{cluster.Command{Type: cluster.CmdRegister, Key: cluster.MemberKey{Kind: cluster.KindIsland, ID: 5}, Addr: "127.0.0.1:5"}, true, nil}, // down -> up
		{cluster.Command{Type: cluster.CmdSetState, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 2}, State: cluster.StateDraining}, true, nil},
		{cluster.Command{Type: cluster.CmdSetState, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 2}, State: cluster.StateDraining}, false, nil},
		{cluster.Command{Type: cluster.CmdSetState, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 2}, State: cluster.StateDown}, false, cluster.ErrBadRequest},
		{cluster.Command{Type: cluster.CmdSetState, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 3}, State: cluster.StateOut}, false, cluster.ErrUnknownMember},
		{cluster.Command{Type: cluster.CmdRegister, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 2}, Addr: "127.0.0.1:3", PID: 4}, true, nil}, // stays draining
		{cluster.Command{Type: cluster.CmdSetTable, Table: cluster.InitialTable([]uint32{5})}, false, cluster.ErrNotFormatted},
		{cluster.Command{Type: cluster.CmdFormat, Islands: []uint32{6}}, false, cluster.ErrUnknownMember},
		{cluster.Command{Type: cluster.CmdFormat}, true, nil},
		{cluster.Command{Type: cluster.CmdFormat}, false, cluster.ErrFormatted},
		{cluster.Command{Type: cluster.CmdSetTable, Table: cluster.Table{Depth: 1, Entries: []uint32{5}}}, false, cluster.ErrBadRequest},
		{cluster.Command{Type: cluster.CmdSetTable, Table: cluster.Table{Depth: 1, Entries: []uint32{5, 8}}}, false, cluster.ErrUnknownMember},
		{cluster.Command{Type: cluster.CmdSetTable, Table: cluster.Table{Depth: 1, Entries: []uint32{5, 5}}}, true, nil},
		{cluster.Command{Type: cluster.CmdSetPolicy, Policy: "ec:4+1"}, false, cluster.ErrBadRequest}, // 3 slots only
		{cluster.Command{Type: cluster.CmdSetPolicy, Policy: "bogus"}, false, cluster.ErrBadRequest},
		{cluster.Command{Type: cluster.CmdSetPolicy, Policy: "mirror:3"}, true, nil},
		{cluster.Command{Type: cluster.CmdSetPolicy, Policy: "mirror:3"}, false, nil},
		{cluster.Command{Type: cluster.CmdManager, Manager: cluster.ManagerNode{RaftID: "m1", RaftAddr: "127.0.0.1:11", ClientAddr: "127.0.0.1:10"}}, true, nil},
		{cluster.Command{Type: cluster.CmdManager, Manager: cluster.ManagerNode{RaftID: "m1", RaftAddr: "127.0.0.1:11", ClientAddr: "127.0.0.1:10"}}, false, nil},
		{cluster.Command{Type: cluster.CmdManager, Manager: cluster.ManagerNode{RaftID: "m2", RaftAddr: "127.0.0.1:11", ClientAddr: "127.0.0.1:12"}}, true, nil}, // replaces m1
		{cluster.Command{Type: cluster.CmdManager, Manager: cluster.ManagerNode{RaftID: "", RaftAddr: "127.0.0.1:11", ClientAddr: "127.0.0.1:12"}}, false, cluster.ErrBadRequest},
	}
	for i, s := range steps {
		before := f.Map()
		res := applyCmd(t, f, &s.cmd)
		after := f.Map()
		if s.err != nil {
			if !errors.Is(res.Err, s.err) {
				t.Fatalf("step %d (%s): err %v, want %v", i, s.cmd.Type, res.Err, s.err)
			}
		} else if res.Err != nil {
			t.Fatalf("step %d (%s): %v", i, s.cmd.Type, res.Err)
		}
		if res.Changed != s.changed {
			t.Fatalf("step %d (%s): changed %v, want %v", i, s.cmd.Type, res.Changed, s.changed)
		}
		wantEpoch := before.Epoch
		if s.changed {
			wantEpoch++
		} else if !reflect.DeepEqual(before, after) {
			t.Fatalf("step %d (%s): map changed without an epoch", i, s.cmd.Type)
		}
		if after.Epoch != wantEpoch || res.Epoch != wantEpoch {
			t.Fatalf("step %d (%s): epoch %d/%d, want %d", i, s.cmd.Type, after.Epoch, res.Epoch, wantEpoch)
		}
		if err := after.Validate(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	m := f.Map()
	if st(cluster.KindStorage, 2) != cluster.StateDraining || st(cluster.KindStorage, 1) != cluster.StateUp || st(cluster.KindIsland, 5) != cluster.StateUp {
		t.Fatalf("states: %+v", m.Members())
	}
	if !m.Formatted || m.DefaultPolicy != "mirror:3" || !m.PolicyPinned || len(m.Managers) != 1 || m.Managers[0].RaftID != "m2" {
		t.Fatalf("map: %+v", m)
	}
	if len(m.Storage) != 3 || m.Storage[0].Slot != 0 || m.Storage[2].Slot != 2 {
		t.Fatalf("storage not sorted: %+v", m.Storage)
	}

	// Snapshot and restore into a fresh FSM.
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := newFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.Map(), f.Map()) {
		t.Fatal("restored map differs")
	}
	corrupt := slices2(sink.Bytes())
	corrupt[10] ^= 1
	if err := g.Restore(io.NopCloser(bytes.NewReader(corrupt))); err == nil {
		t.Fatal("corrupt snapshot restored")
	}

	// Garbage commands change nothing.
	before := f.Map()
	for _, b := range [][]byte{nil, {1}, {2, 1}, {1, 99}, {1, byte(cluster.CmdRegister), 1}, append((&cluster.Command{Type: cluster.CmdFormat}).Encode(), 0)} {
		res := f.Apply(&raft.Log{Type: raft.LogCommand, Data: b}).(*applyResult)
		if !errors.Is(res.Err, cluster.ErrBadRequest) {
			t.Errorf("garbage %x: %v", b, res.Err)
		}
	}
	if !reflect.DeepEqual(before, f.Map()) {
		t.Fatal("garbage changed the map")
	}
}

func TestDefaultPolicyFollowsSlots(t *testing.T) {
	f := newFSM()
	want := []string{"none", "mirror:2", "ec:2+1", "ec:3+1", "ec:4+1", "ec:4+1"}
	for i, w := range want {
		applyCmd(t, f, &cluster.Command{Type: cluster.CmdRegister, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: uint32(i)}, Addr: "127.0.0.1:1"})
		if got := f.Map().DefaultPolicy; got != w {
			t.Fatalf("%d slots: %q, want %q", i+1, got, w)
		}
	}
	// Out slots do not count.
	applyCmd(t, f, &cluster.Command{Type: cluster.CmdSetState, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 0}, State: cluster.StateOut})
	applyCmd(t, f, &cluster.Command{Type: cluster.CmdSetState, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 1}, State: cluster.StateOut})
	if got := f.Map().DefaultPolicy; got != "ec:3+1" {
		t.Fatalf("4 active slots: %q", got)
	}
	applyCmd(t, f, &cluster.Command{Type: cluster.CmdSetPolicy, Policy: "mirror:2"})
	applyCmd(t, f, &cluster.Command{Type: cluster.CmdSetState, Key: cluster.MemberKey{Kind: cluster.KindStorage, ID: 2}, State: cluster.StateOut})
	if got := f.Map().DefaultPolicy; got != "mirror:2" {
		t.Fatalf("pinned policy changed: %q", got)
	}
	applyCmd(t, f, &cluster.Command{Type: cluster.CmdSetPolicy, Policy: ""})
	if m := f.Map(); m.PolicyPinned || m.DefaultPolicy != "ec:2+1" {
		t.Fatalf("unpinned: %q pinned=%v", m.DefaultPolicy, m.PolicyPinned)
	}
}

type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

func slices2(b []byte) []byte { return append([]byte(nil), b...) }
