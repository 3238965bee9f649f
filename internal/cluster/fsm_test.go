package cluster

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
)

// applyCmd runs a command through encode, decode and the FSM.
func applyCmd(t *testing.T, f *fsm, c *command) *applyResult {
	t.Helper()
	b := c.encode()
	d, err := decodeCommand(b)
	if err != nil {
		t.Fatalf("decode %s: %v", c.Type, err)
	}
	if !bytes.Equal(d.encode(), b) {
		t.Fatalf("%s: command does not round-trip", c.Type)
	}
	return f.Apply(&raft.Log{Type: raft.LogCommand, Data: b}).(*applyResult)
}

func TestFSMCommands(t *testing.T) {
	f := newFSM()
	st := func(k Kind, id uint32) State {
		v, ok := f.Map().Member(MemberKey{k, id})
		if !ok {
			t.Fatalf("%s/%d missing", k, id)
		}
		return v.State
	}
	steps := []struct {
		cmd     command
		changed bool
		err     error
	}{
		{command{Type: cmdRegister, Key: MemberKey{KindStorage, 0}, Addr: "127.0.0.1:1", PID: 1}, true, nil},
		{command{Type: cmdRegister, Key: MemberKey{KindStorage, 0}, Addr: "127.0.0.1:1", PID: 1}, false, nil}, // no-op: same epoch
		{command{Type: cmdRegister, Key: MemberKey{KindStorage, 0}, Addr: "127.0.0.1:1", PID: 2}, true, nil},  // restart: new pid
		{command{Type: cmdRegister, Key: MemberKey{KindStorage, 70000}, Addr: "127.0.0.1:1"}, false, ErrBadRequest},
		{command{Type: cmdRegister, Key: MemberKey{9, 1}, Addr: "127.0.0.1:1"}, false, ErrBadRequest},
		{command{Type: cmdRegister, Key: MemberKey{KindIsland, 5}, Addr: "nonsense"}, false, ErrBadRequest},
		{command{Type: cmdRegister, Key: MemberKey{KindStorage, 2}, Addr: "127.0.0.1:3", PID: 3}, true, nil},
		{command{Type: cmdRegister, Key: MemberKey{KindStorage, 1}, Addr: "127.0.0.1:2", PID: 3}, true, nil},
		{command{Type: cmdRegister, Key: MemberKey{KindIsland, 5}, Addr: "127.0.0.1:5"}, true, nil},
		{command{Type: cmdRegister, Key: MemberKey{KindGateway, 1}, Addr: "127.0.0.1:6"}, true, nil},
		{command{Type: cmdMarkDown, Keys: []MemberKey{{KindStorage, 1}, {KindIsland, 5}, {KindIsland, 77}}}, true, nil},
		{command{Type: cmdMarkDown, Keys: []MemberKey{{KindStorage, 1}}}, false, nil},
		{command{Type: cmdMarkUp, Key: MemberKey{KindStorage, 1}}, true, nil},
		{command{Type: cmdMarkUp, Key: MemberKey{KindStorage, 1}}, false, nil},
		{command{Type: cmdMarkUp, Key: MemberKey{KindStorage, 9}}, false, ErrUnknownMember},
		{command{Type: cmdRegister, Key: MemberKey{KindIsland, 5}, Addr: "127.0.0.1:5"}, true, nil}, // down -> up
		{command{Type: cmdSetState, Key: MemberKey{KindStorage, 2}, State: StateDraining}, true, nil},
		{command{Type: cmdSetState, Key: MemberKey{KindStorage, 2}, State: StateDraining}, false, nil},
		{command{Type: cmdSetState, Key: MemberKey{KindStorage, 2}, State: StateDown}, false, ErrBadRequest},
		{command{Type: cmdSetState, Key: MemberKey{KindStorage, 3}, State: StateOut}, false, ErrUnknownMember},
		{command{Type: cmdRegister, Key: MemberKey{KindStorage, 2}, Addr: "127.0.0.1:3", PID: 4}, true, nil}, // stays draining
		{command{Type: cmdSetTable, Table: InitialTable([]uint32{5})}, false, ErrNotFormatted},
		{command{Type: cmdFormat, Islands: []uint32{6}}, false, ErrUnknownMember},
		{command{Type: cmdFormat}, true, nil},
		{command{Type: cmdFormat}, false, ErrFormatted},
		{command{Type: cmdSetTable, Table: Table{Depth: 1, Entries: []uint32{5}}}, false, ErrBadRequest},
		{command{Type: cmdSetTable, Table: Table{Depth: 1, Entries: []uint32{5, 8}}}, false, ErrUnknownMember},
		{command{Type: cmdSetTable, Table: Table{Depth: 1, Entries: []uint32{5, 5}}}, true, nil},
		{command{Type: cmdSetPolicy, Policy: "ec:4+1"}, false, ErrBadRequest}, // 3 slots only
		{command{Type: cmdSetPolicy, Policy: "bogus"}, false, ErrBadRequest},
		{command{Type: cmdSetPolicy, Policy: "mirror:3"}, true, nil},
		{command{Type: cmdSetPolicy, Policy: "mirror:3"}, false, nil},
		{command{Type: cmdManager, Manager: ManagerNode{"m1", "127.0.0.1:11", "127.0.0.1:10"}}, true, nil},
		{command{Type: cmdManager, Manager: ManagerNode{"m1", "127.0.0.1:11", "127.0.0.1:10"}}, false, nil},
		{command{Type: cmdManager, Manager: ManagerNode{"m2", "127.0.0.1:11", "127.0.0.1:12"}}, true, nil}, // replaces m1
		{command{Type: cmdManager, Manager: ManagerNode{"", "127.0.0.1:11", "127.0.0.1:12"}}, false, ErrBadRequest},
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
	if st(KindStorage, 2) != StateDraining || st(KindStorage, 1) != StateUp || st(KindIsland, 5) != StateUp {
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
	for _, b := range [][]byte{nil, {1}, {2, 1}, {1, 99}, {1, byte(cmdRegister), 1}, append((&command{Type: cmdFormat}).encode(), 0)} {
		res := f.Apply(&raft.Log{Type: raft.LogCommand, Data: b}).(*applyResult)
		if !errors.Is(res.Err, ErrBadRequest) {
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
		applyCmd(t, f, &command{Type: cmdRegister, Key: MemberKey{KindStorage, uint32(i)}, Addr: "127.0.0.1:1"})
		if got := f.Map().DefaultPolicy; got != w {
			t.Fatalf("%d slots: %q, want %q", i+1, got, w)
		}
	}
	// Out slots do not count.
	applyCmd(t, f, &command{Type: cmdSetState, Key: MemberKey{KindStorage, 0}, State: StateOut})
	applyCmd(t, f, &command{Type: cmdSetState, Key: MemberKey{KindStorage, 1}, State: StateOut})
	if got := f.Map().DefaultPolicy; got != "ec:3+1" {
		t.Fatalf("4 active slots: %q", got)
	}
	applyCmd(t, f, &command{Type: cmdSetPolicy, Policy: "mirror:2"})
	applyCmd(t, f, &command{Type: cmdSetState, Key: MemberKey{KindStorage, 2}, State: StateOut})
	if got := f.Map().DefaultPolicy; got != "mirror:2" {
		t.Fatalf("pinned policy changed: %q", got)
	}
	applyCmd(t, f, &command{Type: cmdSetPolicy, Policy: ""})
	if m := f.Map(); m.PolicyPinned || m.DefaultPolicy != "ec:2+1" {
		t.Fatalf("unpinned: %q pinned=%v", m.DefaultPolicy, m.PolicyPinned)
	}
}

type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

func slices2(b []byte) []byte { return append([]byte(nil), b...) }
