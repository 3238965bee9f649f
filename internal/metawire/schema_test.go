package metawire

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/atoll-fs/atoll/internal/wire"
	"github.com/atoll-fs/atoll/internal/wire/wiretest"
)

// fixups make random messages ones a sender could build.
var fixups = wiretest.Fixups{
	// Values pair with Keys.
	reflect.TypeFor[ImportReq](): func(m wire.Message) {
		r := m.(*ImportReq)
		r.Values = make([][]byte, len(r.Keys))
	},
	// An entry's Attr travels only with HasAttr.
	reflect.TypeFor[ReaddirResp](): func(m wire.Message) {
		for i := range m.(*ReaddirResp).Entries {
			if e := &m.(*ReaddirResp).Entries[i]; !e.HasAttr {
				e.Attr = Attr{}
			}
		}
	},
	// Live is unused.
	reflect.TypeFor[ForgetReq](): func(m wire.Message) {
		for i := range m.(*ForgetReq).Stripes {
			m.(*ForgetReq).Stripes[i].Live = 0
		}
	},
	// Set.Cred, Set.Ino and Set.Size do not travel; Set travels only
	// with a reserved Ino or bits in Set.Valid.
	reflect.TypeFor[CreateReq](): func(m wire.Message) {
		r := m.(*CreateReq)
		r.Set.Cred, r.Set.Ino, r.Set.Size = Cred{}, 0, 0
		if r.Ino == 0 && r.Set.Valid == 0 {
			r.Set = SetAttrReq{}
		}
	},
}

// An operation added without its facts fails here, not in production
// (where an unknown op needs every capability and is refused).
func TestSchemaListsEveryOperation(t *testing.T) { wiretest.CheckSchema(t, Schema, ".") }

func TestMessagesRoundTrip(t *testing.T) { wiretest.RoundTrip(t, Schema, fixups) }

func FuzzMessages(f *testing.F) { wiretest.Fuzz(f, Schema, fixups) }

// The facts the islands act on, for the operations whose facts matter
// most: a change is deduplicated and needs write, a read needs read, the
// transaction protocol needs the cluster key and flows at any epoch.
func TestOpFacts(t *testing.T) {
	for _, tc := range []struct {
		op       uint16
		needs    string
		dedup    bool
		anyEpoch bool
	}{
		{OpLookup, "read", false, false},
		{OpCreate, "write", true, false},
		{OpRename, "write", true, false},
		{OpCommit, "write", true, false},
		{OpSync, "write", false, false},
		{OpLock, "read", false, false},
		{OpLockEnd, "admin", false, false},
		{OpClean, "admin", false, false},
		{OpPrepare, "member", false, false},
		{OpDecide, "member", false, true},
		{OpFsck, "admin", false, true},
		{OpStatFS, "read", false, true},
	} {
		in, ok := Schema.Info(tc.op)
		if !ok || fmt.Sprint(in.Needs) != tc.needs || in.Dedup != tc.dedup || in.AnyEpoch != tc.anyEpoch {
			t.Errorf("op %d: %+v, want needs %s dedup %v any epoch %v", tc.op, in, tc.needs, tc.dedup, tc.anyEpoch)
		}
	}
}
