//go:build !deadlock

package lockcheck

import "sync"

// Mutex is sync.Mutex.
type Mutex = sync.Mutex

// RWMutex is sync.RWMutex.
type RWMutex = sync.RWMutex

// Enabled reports whether this build checks locks.
const Enabled = false
