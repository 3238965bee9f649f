package fragment

import (
	"reflect"
	"testing"

	"github.com/atoll-fs/atoll/internal/wire"
	"github.com/atoll-fs/atoll/internal/wire/wiretest"
)

// fixups make random messages ones a sender could build.
var fixups = wiretest.Fixups{
	// Grant travels only with a Token.
	reflect.TypeFor[ReadReq](): func(m wire.Message) {
		if r := m.(*ReadReq); len(r.Token) == 0 {
			r.Grant = Grant{}
		}
	},
	// Lengths pair with IDs.
	reflect.TypeFor[ListResp](): func(m wire.Message) {
		r := m.(*ListResp)
		r.Lengths = make([]uint64, len(r.IDs))
	},
}

func TestSchemaListsEveryOperation(t *testing.T) { wiretest.CheckSchema(t, Schema, ".") }

func TestMessagesRoundTrip(t *testing.T) { wiretest.RoundTrip(t, Schema, fixups) }

func FuzzMessages(f *testing.F) { wiretest.Fuzz(f, Schema, fixups) }
