package torture

import (
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func op(client int, call, ret int64, in NsInput, out NsOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

var (
	xf0 = Slot{0, 0}
	yf1 = Slot{1, 1}
)

func TestModelLinearizable(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"create, fill, read", []porcupine.Operation{
			op(0, 0, 10, NsInput{Kind: OpCreate, From: xf0, ID: 7}, NsOutput{}),
			op(0, 11, 15, NsInput{Kind: OpFill, ID: 7}, NsOutput{}),
			op(1, 20, 30, NsInput{Kind: OpRead, From: xf0}, NsOutput{ID: 7}),
		}, true},
		{"empty between create and fill", []porcupine.Operation{
			op(0, 0, 10, NsInput{Kind: OpCreate, From: xf0, ID: 7}, NsOutput{}),
			op(1, 11, 12, NsInput{Kind: OpRead, From: xf0}, NsOutput{}),
			op(0, 13, 15, NsInput{Kind: OpFill, ID: 7}, NsOutput{}),
		}, true},
		{"empty after the fill returned", []porcupine.Operation{
			op(0, 0, 10, NsInput{Kind: OpCreate, From: xf0, ID: 7}, NsOutput{}),
			op(0, 11, 15, NsInput{Kind: OpFill, ID: 7}, NsOutput{}),
			op(1, 20, 30, NsInput{Kind: OpRead, From: xf0}, NsOutput{}),
		}, false},
		{"read misses an acknowledged create", []porcupine.Operation{
			op(0, 0, 10, NsInput{Kind: OpCreate, From: xf0, ID: 7}, NsOutput{}),
			op(1, 20, 30, NsInput{Kind: OpRead, From: xf0}, NsOutput{Errno: syscall.ENOENT}),
		}, false},
		{"concurrent read may miss", []porcupine.Operation{
			op(0, 0, 10, NsInput{Kind: OpCreate, From: xf0, ID: 7}, NsOutput{}),
			op(1, 5, 30, NsInput{Kind: OpRead, From: xf0}, NsOutput{Errno: syscall.ENOENT}),
		}, true},
		{"cross-directory rename carries the file", []porcupine.Operation{
			op(0, 0, 10, NsInput{Kind: OpCreate, From: xf0, ID: 7}, NsOutput{}),
			op(0, 10, 10, NsInput{Kind: OpFill, ID: 7}, NsOutput{}),
			op(0, 11, 20, NsInput{Kind: OpRename, From: xf0, To: yf1}, NsOutput{}),
			op(1, 21, 30, NsInput{Kind: OpRead, From: yf1}, NsOutput{ID: 7}),
			op(1, 31, 40, NsInput{Kind: OpList, Dir: 0}, NsOutput{Names: 0}),
		}, true},
		{"half a rename: source gone, target missing", []porcupine.Operation{
			op(0, 0, 10, NsInput{Kind: OpCreate, From: xf0, ID: 7}, NsOutput{}),
			op(0, 11, 20, NsInput{Kind: OpRename, From: xf0, To: yf1}, NsOutput{}),
			op(1, 21, 30, NsInput{Kind: OpRead, From: yf1}, NsOutput{Errno: syscall.ENOENT}),
		}, false},
		{"unknown create may land later", []porcupine.Operation{
			op(0, 0, 100, NsInput{Kind: OpCreate, From: xf0, ID: 7}, NsOutput{Unknown: true}),
			op(0, 0, 100, NsInput{Kind: OpFill, ID: 7}, NsOutput{Unknown: true}),
			op(1, 20, 30, NsInput{Kind: OpRead, From: xf0}, NsOutput{Errno: syscall.ENOENT}),
			op(1, 40, 50, NsInput{Kind: OpRead, From: xf0}, NsOutput{ID: 7}),
		}, true},
		{"a retried create answering EEXIST to itself", []porcupine.Operation{
			op(0, 0, 10, NsInput{Kind: OpCreate, From: xf0, ID: 7}, NsOutput{Errno: syscall.EEXIST}),
			op(1, 20, 30, NsInput{Kind: OpRead, From: xf0}, NsOutput{ID: 7}),
		}, false},
		{"rmdir of a file", []porcupine.Operation{
			op(0, 0, 10, NsInput{Kind: OpCreate, From: xf0, ID: 1}, NsOutput{}),
			op(0, 11, 20, NsInput{Kind: OpRmdir, From: xf0}, NsOutput{Errno: syscall.ENOTDIR}),
			op(0, 21, 30, NsInput{Kind: OpRename, From: yf1, To: xf0}, NsOutput{Errno: syscall.ENOENT}),
		}, true},
	} {
		res, short := check(c.ops, 10*time.Second)
		if (res == porcupine.Ok) != c.ok {
			t.Errorf("%s: %s, want ok=%v", c.name, res, c.ok)
		}
		if !c.ok && (len(short) == 0 || len(short) > len(c.ops)) {
			t.Errorf("%s: shrunk history %d ops", c.name, len(short))
		}
	}
}

// Shrinking cuts the history at the first moment it cannot be
// linearized: what came after does not matter.
func TestShrink(t *testing.T) {
	ops := []porcupine.Operation{
		op(0, 0, 10, NsInput{Kind: OpCreate, From: xf0, ID: 9}, NsOutput{}),
		op(1, 20, 30, NsInput{Kind: OpList, Dir: 0}, NsOutput{Names: 0}),
	}
	for i := int64(0); i < 40; i++ { // later noise: reads of another slot
		ops = append(ops, op(2, 100+i*10, 100+i*10+5, NsInput{Kind: OpRead, From: yf1}, NsOutput{Errno: syscall.ENOENT}))
	}
	res, short := check(ops, 10*time.Second)
	if res != porcupine.Illegal {
		t.Fatalf("check: %s", res)
	}
	if len(short) != 2 {
		t.Fatalf("shrunk to %d ops, want the 2 that conflict", len(short))
	}
}
