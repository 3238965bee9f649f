package wire

import (
	"strconv"

	"github.com/atoll-fs/atoll/internal/auth"
)

// OpSpec is what a protocol says about one of its operations, in one
// place: the server's capability check, its deduplication and epoch
// rules, metric labels and the codec tests (wiretest) all read it.
type OpSpec struct {
	Op   uint16
	Name string // metric label and logs
	// Req and Resp return a fresh request and response; nil when the
	// message is not a Message (a map in its own encoding).
	Req, Resp func() Message
	// Needs is the capability the connection's key must hold.
	Needs auth.Caps
	// Dedup: applied at most once per request id (ReqID).
	Dedup bool
	// AnyEpoch: served whatever cluster map epoch the request carries.
	AnyEpoch bool
}

// Schema is a protocol's table of operations.
type Schema struct {
	ops   []OpSpec
	index map[uint16]int
}

// NewSchema returns the schema of ops (op codes distinct: wiretest
// checks).
func NewSchema(ops ...OpSpec) *Schema {
	s := &Schema{ops: ops, index: make(map[uint16]int, len(ops))}
	for i, o := range ops {
		s.index[o.Op] = i
	}
	return s
}

// Ops lists the operations in their declared order.
func (s *Schema) Ops() []OpSpec { return s.ops }

// Info returns op's entry.
func (s *Schema) Info(op uint16) (OpSpec, bool) {
	if i, ok := s.index[op]; ok {
		return s.ops[i], true
	}
	return OpSpec{}, false
}

// Needs is the capability op requires; an unknown op needs every one
// (only the cluster key gets as far as its "unknown operation" answer).
func (s *Schema) Needs(op uint16) auth.Caps {
	if i, ok := s.index[op]; ok {
		return s.ops[i].Needs
	}
	return auth.AllCaps
}

// Name is op's name, or "op N" for an unknown one.
func (s *Schema) Name(op uint16) string {
	if i, ok := s.index[op]; ok {
		return s.ops[i].Name
	}
	return "op " + strconv.Itoa(int(op))
}

// Dedup reports whether op is applied at most once per request id.
func (s *Schema) Dedup(op uint16) bool {
	i, ok := s.index[op]
	return ok && s.ops[i].Dedup
}

// AnyEpoch reports whether op is served at any map epoch.
func (s *Schema) AnyEpoch(op uint16) bool {
	i, ok := s.index[op]
	return ok && s.ops[i].AnyEpoch
}

// New returns a constructor of fresh *T messages, for OpSpec.Req/Resp.
func New[T any, P interface {
	*T
	Message
}]() func() Message {
	return func() Message { return P(new(T)) }
}

// Empty is a message with no fields.
type Empty struct{}

func (Empty) Encode(*Enc) {}
func (Empty) Decode(*Dec) {}
