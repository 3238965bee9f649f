package torture

import (
	"fmt"
	"slices"
	"strings"
	"syscall"

	"github.com/anishathalye/porcupine"
	"golang.org/x/sys/unix"
)

// The namespace model. The checked keyspace is split into groups; group g
// is two directories, /ns/gG/x and /ns/gG/y (which usually hash to
// different islands, so renames between them are cross-island
// transactions), each with the names f0 and f1. Every operation touches
// one group only, so the checker partitions the history by group.

// Slot is one name of a group: dir 0 (x) or 1 (y), name 0 or 1.
type Slot struct{ Dir, Name uint8 }

func (s Slot) String() string { return fmt.Sprintf("%c/f%d", "xy"[s.Dir], s.Name) }

// slots of a group, in a fixed order (the state's index).
var slots = [4]Slot{{0, 0}, {0, 1}, {1, 0}, {1, 1}}

func slotIndex(s Slot) int { return int(s.Dir)*2 + int(s.Name) }

// Kinds of an entry in the model.
const (
	kAbsent uint8 = iota
	kFile
	kDir
)

// entry is one slot's state: what is there and, for a file, the id of
// the create that made it (renames carry it along) and whether its
// content (the bytes "id=ID") has been written yet. A create and the
// write of its content are two operations, as on any POSIX file system:
// a reader between them finds the file empty.
type entry struct {
	Kind   uint8
	ID     uint32
	Filled bool
}

// nsState is a group's state (a value type: Step never mutates).
type nsState [4]entry

// OpKind is a namespace operation of the model.
type OpKind uint8

const (
	OpCreate OpKind = iota // exclusive create of a file with content id
	OpUnlink
	OpMkdir
	OpRmdir
	OpRename // From -> To (rename(2) semantics)
	OpRead   // a file's content id
	OpList   // the names in one directory of the group
	OpFill   // the write (and fsync) of a created file's content, by ID
)

func (k OpKind) String() string {
	return [...]string{"create", "unlink", "mkdir", "rmdir", "rename", "read", "list", "fill"}[k]
}

// NsInput is an operation's call.
type NsInput struct {
	Group    int
	Kind     OpKind
	From, To Slot   // To only for rename
	ID       uint32 // create: the content id written
	Dir      uint8  // list: which directory
}

// NsOutput is an operation's result. Unknown means the outcome could not be
// observed (a timeout, an unavailable server): it may or may not have
// taken effect, at any time after its call.
type NsOutput struct {
	Errno   syscall.Errno // 0: success
	Unknown bool
	ID      uint32 // read: the content id found
	Names   uint8  // list: bit i set when name fi is listed
}

func (in NsInput) String() string {
	switch in.Kind {
	case OpCreate:
		return fmt.Sprintf("g%d create %s id=%d", in.Group, in.From, in.ID)
	case OpRename:
		return fmt.Sprintf("g%d rename %s -> %s", in.Group, in.From, in.To)
	case OpList:
		return fmt.Sprintf("g%d list %c", in.Group, "xy"[in.Dir])
	case OpFill:
		return fmt.Sprintf("g%d fill id=%d", in.Group, in.ID)
	}
	return fmt.Sprintf("g%d %s %s", in.Group, in.Kind, in.From)
}

func (out NsOutput) String() string {
	switch {
	case out.Unknown:
		return "unknown"
	case out.Errno != 0:
		return errnoName(out.Errno)
	}
	return fmt.Sprintf("ok id=%d names=%02b", out.ID, out.Names)
}

func errnoName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return e.Error()
}

// definite reports whether an errno is an answer about the namespace (as
// opposed to a failure to get one).
func definite(e syscall.Errno) bool {
	switch e {
	case 0, syscall.ENOENT, syscall.EEXIST, syscall.ENOTDIR, syscall.EISDIR, syscall.ENOTEMPTY:
		return true
	}
	return false
}

// apply runs in on s as a POSIX file system would: the result it must
// return and the state after.
func apply(s nsState, in NsInput) (NsOutput, nsState) {
	from := slotIndex(in.From)
	if in.Kind == OpFill {
		from = 0
	}
	e := s[from]
	switch in.Kind {
	case OpCreate:
		if e.Kind != kAbsent {
			return NsOutput{Errno: syscall.EEXIST}, s
		}
		s[from] = entry{Kind: kFile, ID: in.ID}
		return NsOutput{}, s
	case OpUnlink:
		switch e.Kind {
		case kAbsent:
			return NsOutput{Errno: syscall.ENOENT}, s
		case kDir:
			return NsOutput{Errno: syscall.EISDIR}, s
		}
		s[from] = entry{}
		return NsOutput{}, s
	case OpMkdir:
		if e.Kind != kAbsent {
			return NsOutput{Errno: syscall.EEXIST}, s
		}
		s[from] = entry{Kind: kDir}
		return NsOutput{}, s
	case OpRmdir:
		switch e.Kind {
		case kAbsent:
			return NsOutput{Errno: syscall.ENOENT}, s
		case kFile:
			return NsOutput{Errno: syscall.ENOTDIR}, s
		}
		s[from] = entry{} // the model's directories stay empty
		return NsOutput{}, s
	case OpRename:
		to := slotIndex(in.To)
		t := s[to]
		switch {
		case e.Kind == kAbsent:
			return NsOutput{Errno: syscall.ENOENT}, s
		case from == to:
			return NsOutput{}, s
		case e.Kind == kFile && t.Kind == kDir:
			return NsOutput{Errno: syscall.EISDIR}, s
		case e.Kind == kDir && t.Kind == kFile:
			return NsOutput{Errno: syscall.ENOTDIR}, s
		}
		s[to], s[from] = e, entry{}
		return NsOutput{}, s
	case OpRead:
		switch e.Kind {
		case kAbsent:
			return NsOutput{Errno: syscall.ENOENT}, s
		case kDir:
			return NsOutput{Errno: syscall.EISDIR}, s
		}
		if !e.Filled {
			return NsOutput{}, s // empty: id 0
		}
		return NsOutput{ID: e.ID}, s
	case OpFill:
		// Through the open file: wherever it is now, if still linked.
		for i := range s {
			if s[i].Kind == kFile && s[i].ID == in.ID {
				s[i].Filled = true
			}
		}
		return NsOutput{}, s
	case OpList:
		var names uint8
		for n := uint8(0); n < 2; n++ {
			if s[slotIndex(Slot{in.Dir, n})].Kind != kAbsent {
				names |= 1 << n
			}
		}
		return NsOutput{Names: names}, s
	}
	panic("torture: unknown op kind")
}

// sameResult compares what the model says with what was observed.
func sameResult(want, got NsOutput, kind OpKind) bool {
	if want.Errno != got.Errno {
		return false
	}
	if want.Errno != 0 {
		return true
	}
	switch kind {
	case OpRead:
		return want.ID == got.ID
	case OpList:
		return want.Names == got.Names
	}
	return true
}

// nsModel is the porcupine model of the namespace, partitioned by group.
var nsModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[int][]porcupine.Operation{}
		var keys []int
		for _, op := range h {
			g := op.Input.(NsInput).Group
			if _, ok := by[g]; !ok {
				keys = append(keys, g)
			}
			by[g] = append(by[g], op)
		}
		slices.Sort(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() []any { return []any{nsState{}} },
	Step: func(state, input, output any) []any {
		s, in, got := state.(nsState), input.(NsInput), output.(NsOutput)
		want, next := apply(s, in)
		if got.Unknown {
			// Applied or not: both futures stay possible. An unknown read
			// or list observed nothing.
			if next == s {
				return []any{s}
			}
			return []any{s, next}
		}
		if !sameResult(want, got, in.Kind) {
			return nil
		}
		return []any{next}
	},
	Equal: func(a, b any) bool { return a.(nsState) == b.(nsState) },
	DescribeOperation: func(input, output any) string {
		return input.(NsInput).String() + " -> " + output.(NsOutput).String()
	},
	DescribeState: func(state any) string {
		s := state.(nsState)
		var parts []string
		for i, e := range s {
			switch e.Kind {
			case kFile:
				if e.Filled {
					parts = append(parts, fmt.Sprintf("%s=file(%d)", slots[i], e.ID))
				} else {
					parts = append(parts, fmt.Sprintf("%s=file(%d, empty)", slots[i], e.ID))
				}
			case kDir:
				parts = append(parts, fmt.Sprintf("%s=dir", slots[i]))
			}
		}
		return "{" + strings.Join(parts, " ") + "}"
	},
}
