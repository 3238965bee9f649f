package metawire

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Every Op constant of the package is in Ops once, with a name of its
// own and both message types: an operation added without its facts fails
// here, not in production (where an unknown op needs the cluster key and
// is refused).
func TestOpsListsEveryOperation(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if len(n.Name) > 2 && strings.HasPrefix(n.Name, "Op") && n.Name[2] >= 'A' && n.Name[2] <= 'Z' {
						declared[n.Name] = true
					}
				}
			}
		}
	}
	if len(declared) < 30 {
		t.Fatalf("found only %d Op constants: the scan is broken", len(declared))
	}
	if len(Ops) != len(declared) {
		t.Errorf("%d Op constants, %d entries in Ops", len(declared), len(Ops))
	}
	ops, names := map[uint16]bool{}, map[string]bool{}
	for _, o := range Ops {
		if ops[o.Op] || names[o.Name] || o.Name == "" {
			t.Errorf("op %d (%q) listed twice or unnamed", o.Op, o.Name)
		}
		ops[o.Op], names[o.Name] = true, true
		if o.Req == nil || o.Resp == nil || o.Needs == 0 {
			t.Errorf("op %s lacks a message type or capability", o.Name)
		}
		if in, ok := Info(o.Op); !ok || in.Name != o.Name {
			t.Errorf("Info(%d) = %v, %v", o.Op, in.Name, ok)
		}
	}
	if _, ok := Info(999); ok || Deduplicated(999) || AnyEpoch(999) || Needs(999) == 0 {
		t.Error("an unknown op has facts")
	}
}

// messages are every distinct request and response type of Ops.
func messages() []Message {
	seen := map[reflect.Type]bool{}
	var out []Message
	for _, o := range Ops {
		for _, m := range []Message{o.Req(), o.Resp()} {
			if t := reflect.TypeOf(m); !seen[t] {
				seen[t] = true
				out = append(out, m)
			}
		}
	}
	return out
}

// fill sets every exported field of v to random values, as an encoder
// would see them (bounded lengths, no nil inside slices).
func fill(r *rand.Rand, v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(r.Uint64() >> (64 - v.Type().Bits())))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(r.Uint64() >> (64 - v.Type().Bits()))
	case reflect.String:
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		v.SetString(string(b))
	case reflect.Slice:
		n := 0
		if depth < 4 {
			n = r.IntN(4)
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fill(r, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			fill(r, v.Index(i), depth+1)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(r, v.Field(i), depth+1)
			}
		}
	case reflect.Pointer:
		if depth < 4 && r.IntN(2) == 1 {
			p := reflect.New(v.Type().Elem())
			fill(r, p.Elem(), depth+1)
			v.Set(p)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range r.IntN(3) {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(r, k, depth+1)
			fill(r, e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	}
}

// fixups make a random message one its sender could build: parallel
// slices of equal length, no values in fields the type's doc says do
// not travel.
var fixups = map[reflect.Type]func(Message){
	reflect.TypeFor[ReaddirResp](): func(m Message) {
		for i := range m.(*ReaddirResp).Entries {
			if e := &m.(*ReaddirResp).Entries[i]; !e.HasAttr {
				e.Attr = Attr{}
			}
		}
	},
	reflect.TypeFor[ForgetReq](): func(m Message) {
		for i := range m.(*ForgetReq).Stripes {
			m.(*ForgetReq).Stripes[i].Live = 0 // unused
		}
	},
	reflect.TypeFor[CreateReq](): func(m Message) {
		r := m.(*CreateReq)
		r.Set.Cred, r.Set.Ino, r.Set.Size = Cred{}, 0, 0
		if r.Ino == 0 && r.Set.Valid == 0 {
			r.Set = SetAttrReq{}
		}
	},
	reflect.TypeFor[ImportReq](): func(m Message) {
		r := m.(*ImportReq)
		r.Values = make([][]byte, len(r.Keys))
	},
}

// random is a message of typ with random contents.
func random(r *rand.Rand, typ reflect.Type) Message {
	m := reflect.New(typ)
	fill(r, m.Elem(), 0)
	msg := m.Interface().(Message)
	if fix := fixups[typ]; fix != nil {
		fix(msg)
	}
	return msg
}

// Every message of the protocol survives encode -> decode -> encode
// byte for byte, for random contents. Values a decoder refuses (enums,
// limits) are skipped, but every type must decode a fifth of its samples:
// a type whose encoder and decoder disagree fails.
func TestMessagesRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, proto := range messages() {
		typ := reflect.TypeOf(proto).Elem()
		decoded := 0
		const samples = 200
		for range samples {
			m := random(r, typ)
			b := Marshal(m)
			back := reflect.New(typ).Interface().(Message)
			if err := Unmarshal(b, back); err != nil {
				continue
			}
			decoded++
			if b2 := Marshal(back); !bytes.Equal(b, b2) {
				t.Errorf("%s: re-encoding differs:\n%x\n%x\nfrom %+v", typ.Name(), b, b2, m)
				break
			}
			// Every field travels: the decoded message equals the
			// original (nil and empty slices alike).
			if !equalMsg(reflect.ValueOf(m), reflect.ValueOf(back)) {
				t.Errorf("%s: decoded differs:\n%+v\n%+v", typ.Name(), m, back)
				break
			}
		}
		if decoded < samples/5 {
			t.Errorf("%s: only %d of %d random messages decoded", typ.Name(), decoded, samples)
		}
	}
}

// equalMsg is reflect.DeepEqual with nil and empty slices and maps equal.
func equalMsg(a, b reflect.Value) bool {
	if a.Kind() != b.Kind() {
		return false
	}
	switch a.Kind() {
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !equalMsg(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			if v := b.MapIndex(k); !v.IsValid() || !equalMsg(a.MapIndex(k), v) {
				return false
			}
		}
		return true
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return equalMsg(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Type().Field(i).IsExported() && !equalMsg(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Array:
		for i := range a.Len() {
			if !equalMsg(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	}
	return a.Equal(b)
}

// Decoding garbage into any message is an error or a message that
// encodes back to the same bytes; never a panic.
func FuzzMessages(f *testing.F) {
	msgs := messages()
	r := rand.New(rand.NewPCG(3, 4))
	for i, proto := range msgs {
		f.Add(uint8(i), Marshal(random(r, reflect.TypeOf(proto).Elem())))
		f.Add(uint8(i), []byte{})
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		typ := reflect.TypeOf(msgs[int(which)%len(msgs)]).Elem()
		m := reflect.New(typ).Interface().(Message)
		if err := Unmarshal(b, m); err != nil {
			return
		}
		b2 := Marshal(m)
		m2 := reflect.New(typ).Interface().(Message)
		if err := Unmarshal(b2, m2); err != nil {
			t.Fatalf("%s: decoded %x, re-encoded %x fails: %v", typ.Name(), b, b2, err)
		}
		if b3 := Marshal(m2); !bytes.Equal(b2, b3) {
			t.Fatalf("%s: not stable: %x then %x", typ.Name(), b2, b3)
		}
	})
}

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
		in, ok := Info(tc.op)
		if !ok || fmt.Sprint(in.Needs) != tc.needs || in.Dedup != tc.dedup || in.AnyEpoch != tc.anyEpoch {
			t.Errorf("op %d: %+v, want needs %s dedup %v any epoch %v", tc.op, in, tc.needs, tc.dedup, tc.anyEpoch)
		}
	}
}
