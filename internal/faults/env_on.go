//go:build failpoints

package faults

// Enabled reports whether this binary was built with -tags failpoints, and
// so honours ATOLL_FAILPOINTS (see FromEnv).
const Enabled = true
