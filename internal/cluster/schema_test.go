package cluster

import (
	"reflect"
	"testing"

	"github.com/atoll-fs/atoll/internal/wire"
	"github.com/atoll-fs/atoll/internal/wire/wiretest"
)

// fixups make random messages ones a sender could build.
var fixups = wiretest.Fixups{
	// The map travels in MapBytes; job counts are clamped to 0..2^31.
	reflect.TypeFor[StatusResp](): func(m wire.Message) {
		r := m.(*StatusResp)
		r.Map = nil
		for i := range r.Jobs {
			r.Jobs[i].Done, r.Jobs[i].Total = r.Jobs[i].Done&(1<<31-1), r.Jobs[i].Total&(1<<31-1)
		}
	},
}

func TestSchemaListsEveryOperation(t *testing.T) { wiretest.CheckSchema(t, Schema, ".") }

func TestMessagesRoundTrip(t *testing.T) { wiretest.RoundTrip(t, Schema, fixups) }

func FuzzMessages(f *testing.F) { wiretest.Fuzz(f, Schema, fixups) }
