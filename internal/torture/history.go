package torture

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// history records every namespace operation's call, return and result.
// Times are nanoseconds since the run's start (monotonic).
type history struct {
	start time.Time
	mu    struct {
		sync.Mutex
		ops []porcupine.Operation
	}
}

func newHistory() *history { return &history{start: time.Now()} }

func (h *history) now() int64 { return int64(time.Since(h.start)) }

// add records one finished operation. An operation with an unknown
// outcome stays open until the end of the history (its Return is set by
// close): its effect may land at any time after its call.
func (h *history) add(client int, in NsInput, call int64, out NsOutput) {
	ret := h.now()
	if out.Unknown {
		ret = -1
	}
	h.mu.Lock()
	h.mu.ops = append(h.mu.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

// close returns the operations, open ones ending after every other.
func (h *history) close() []porcupine.Operation {
	end := h.now() + 1
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := append([]porcupine.Operation(nil), h.mu.ops...)
	for i := range ops {
		if ops[i].Return < 0 {
			ops[i].Return = end
		}
	}
	return ops
}

// check runs the linearizability checker; on a violation it cuts the
// failing group's history down (shrink) and returns it.
func check(ops []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, []porcupine.Operation) {
	m := nsModel.ToModel()
	res := porcupine.CheckOperationsTimeout(m, ops, timeout)
	if res != porcupine.Illegal {
		return res, nil
	}
	// The model is partitioned by group: find a failing group first.
	for _, part := range m.Partition(ops) {
		if porcupine.CheckOperationsTimeout(m, part, timeout) == porcupine.Illegal {
			return res, shrink(m, part, timeout)
		}
	}
	return res, nil
}

// shrink cuts a non-linearizable history (of one group) down to its
// shortest failing prefix: the operations called up to the first moment
// the history can no longer be linearized. (Dropping operations from
// the middle would make almost any history illegal and tell nothing.)
func shrink(m porcupine.Model, ops []porcupine.Operation, timeout time.Duration) []porcupine.Operation {
	var times []int64
	for _, op := range ops {
		times = append(times, op.Call, op.Return)
	}
	slices.Sort(times)
	times = slices.Compact(times)
	// upTo(t): what had been called by t, with the outcomes not yet seen
	// at t left open.
	upTo := func(t int64) []porcupine.Operation {
		var out []porcupine.Operation
		for _, op := range ops {
			if op.Call > t {
				continue
			}
			if op.Return > t {
				op.Output = NsOutput{Unknown: true}
				op.Return = t + 1
			}
			out = append(out, op)
		}
		return out
	}
	illegal := func(i int) bool {
		return porcupine.CheckOperationsTimeout(m, upTo(times[i]), timeout) == porcupine.Illegal
	}
	lo, hi := 0, len(times)-1
	if !illegal(hi) {
		return ops
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if illegal(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return upTo(times[hi])
}

// writeHistory prints operations, one per line, ordered by call.
func writeHistory(w io.Writer, ops []porcupine.Operation) {
	sorted := append([]porcupine.Operation(nil), ops...)
	for i := 1; i < len(sorted); i++ {
		for j := i; j > 0 && sorted[j].Call < sorted[j-1].Call; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	for _, op := range sorted {
		fmt.Fprintf(w, "  client %d  [%9.3fs, %9.3fs]  %s -> %s\n", op.ClientId,
			float64(op.Call)/1e9, float64(op.Return)/1e9, op.Input.(NsInput), op.Output.(NsOutput))
	}
}
