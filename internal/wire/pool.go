package wire

import (
	"math/bits"
	"sync"
)

// Buffers are pooled in power-of-two size classes from 4 KiB to 64 MiB so
// that steady-state fragment traffic allocates nothing.
const (
	minClass = 12 // 4 KiB
	maxClass = 26 // 64 MiB
)

var pools [maxClass + 1]sync.Pool

// GetBuf returns a buffer of length n, from a pool when n fits a class.
func GetBuf(n int) []byte {
	c := class(n)
	if c > maxClass {
		return make([]byte, n)
	}
	if v := pools[c].Get(); v != nil {
		b := *(v.(*[]byte))
		return b[:n]
	}
	return make([]byte, n, 1<<c)
}

// PutBuf returns a buffer obtained from GetBuf to its pool. Buffers of other
// capacities are dropped.
func PutBuf(b []byte) {
	c := class(cap(b))
	if c > maxClass || cap(b) != 1<<c {
		return
	}
	b = b[:0]
	pools[c].Put(&b)
}

func class(n int) int {
	if n <= 1<<minClass {
		return minClass
	}
	return bits.Len(uint(n - 1))
}
