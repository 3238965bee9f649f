// Package wiretest checks a protocol's schema (wire.Schema) and its
// codecs: every Op constant of the protocol's package has an entry, and
// every message round-trips random contents field for field and survives
// fuzzed bytes. Each protocol package's tests call it with its schema.
package wiretest

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/atoll-fs/atoll/internal/wire"
)

// Fixups make a random message one its sender could build: parallel
// slices of equal length, no values in fields the type's doc says do not
// travel. Keyed by the message's struct type.
type Fixups map[reflect.Type]func(wire.Message)

// CheckSchema fails t unless every constant named OpX declared in the Go
// files of dir (the protocol's package) has one entry in s, each with a
// distinct name and code, a capability, and message types.
func CheckSchema(t *testing.T, s *wire.Schema, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
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
			for _, sp := range g.Specs {
				for _, n := range sp.(*ast.ValueSpec).Names {
					if len(n.Name) > 2 && strings.HasPrefix(n.Name, "Op") && n.Name[2] >= 'A' && n.Name[2] <= 'Z' {
						declared[n.Name] = true
					}
				}
			}
		}
	}
	if len(declared) == 0 {
		t.Fatalf("no Op constants in %s: the scan is broken", dir)
	}
	if len(s.Ops()) != len(declared) {
		t.Errorf("%d Op constants in %s, %d entries in the schema", len(declared), dir, len(s.Ops()))
	}
	ops, names := map[uint16]bool{}, map[string]bool{}
	for _, o := range s.Ops() {
		if ops[o.Op] || names[o.Name] || o.Name == "" {
			t.Errorf("op %d (%q) listed twice or unnamed", o.Op, o.Name)
		}
		ops[o.Op], names[o.Name] = true, true
		if o.Needs == 0 {
			t.Errorf("op %s needs no capability", o.Name)
		}
		if in, ok := s.Info(o.Op); !ok || in.Name != o.Name {
			t.Errorf("Info(%d) = %q, %v", o.Op, in.Name, ok)
		}
	}
	const unknown = 65535
	if _, ok := s.Info(unknown); ok || s.Dedup(unknown) || s.AnyEpoch(unknown) || s.Needs(unknown) == 0 {
		t.Error("an unknown op has facts")
	}
}

// Messages are the distinct request and response types of s.
func Messages(s *wire.Schema) []reflect.Type {
	seen := map[reflect.Type]bool{}
	var out []reflect.Type
	for _, o := range s.Ops() {
		for _, mk := range []func() wire.Message{o.Req, o.Resp} {
			if mk == nil {
				continue
			}
			if t := reflect.TypeOf(mk()); !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	return out
}

// Random is a message of typ (a pointer type) with random contents.
func Random(r *rand.Rand, typ reflect.Type, fix Fixups) wire.Message {
	m := reflect.New(typ.Elem())
	fill(r, m.Elem(), 0)
	msg := m.Interface().(wire.Message)
	if f := fix[typ.Elem()]; f != nil {
		f(msg)
	}
	return msg
}

// fill sets every exported field of v to random values, as an encoder
// would see them (bounded lengths).
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

// RoundTrip checks that every message of s survives encode -> decode ->
// encode byte for byte and decodes equal to the original, field for
// field, for random contents. Random values a decoder refuses (enums,
// limits) are skipped, but each type must decode a fifth of its samples:
// a type whose encoder and decoder disagree fails.
func RoundTrip(t *testing.T, s *wire.Schema, fix Fixups) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	for _, typ := range Messages(s) {
		decoded := 0
		const samples = 200
		for range samples {
			m := Random(r, typ, fix)
			b := wire.Marshal(m)
			back := reflect.New(typ.Elem()).Interface().(wire.Message)
			if err := wire.Unmarshal(b, back); err != nil {
				continue
			}
			decoded++
			if b2 := wire.Marshal(back); !bytes.Equal(b, b2) {
				t.Errorf("%s: re-encoding differs:\n%x\n%x\nfrom %+v", typ.Elem().Name(), b, b2, m)
				break
			}
			// Every field travels: the decoded message equals the
			// original (nil and empty slices alike).
			if !Equal(reflect.ValueOf(m), reflect.ValueOf(back)) {
				t.Errorf("%s: decoded differs:\n%+v\n%+v", typ.Elem().Name(), m, back)
				break
			}
		}
		if decoded < samples/5 {
			t.Errorf("%s: only %d of %d random messages decoded", typ.Elem().Name(), decoded, samples)
		}
	}
}

// Fuzz runs a fuzz target over every message of s: decoding any bytes is
// an error or a message that encodes back to bytes that decode to the
// same; never a panic.
func Fuzz(f *testing.F, s *wire.Schema, fix Fixups) {
	msgs := Messages(s)
	r := rand.New(rand.NewPCG(3, 4))
	for i, typ := range msgs {
		f.Add(uint8(i), wire.Marshal(Random(r, typ, fix)))
		f.Add(uint8(i), []byte{})
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		typ := msgs[int(which)%len(msgs)]
		m := reflect.New(typ.Elem()).Interface().(wire.Message)
		if err := wire.Unmarshal(b, m); err != nil {
			return
		}
		b2 := wire.Marshal(m)
		m2 := reflect.New(typ.Elem()).Interface().(wire.Message)
		if err := wire.Unmarshal(b2, m2); err != nil {
			t.Fatalf("%s: decoded %x, re-encoded %x fails: %v", typ.Elem().Name(), b, b2, err)
		}
		if b3 := wire.Marshal(m2); !bytes.Equal(b2, b3) {
			t.Fatalf("%s: not stable: %x then %x", typ.Elem().Name(), b2, b3)
		}
	})
}

// Equal is reflect.DeepEqual over exported fields, with nil and empty
// slices and maps equal.
func Equal(a, b reflect.Value) bool {
	if a.Kind() != b.Kind() {
		return false
	}
	switch a.Kind() {
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !Equal(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			if v := b.MapIndex(k); !v.IsValid() || !Equal(a.MapIndex(k), v) {
				return false
			}
		}
		return true
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return Equal(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Type().Field(i).IsExported() && !Equal(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	}
	return a.Equal(b)
}
