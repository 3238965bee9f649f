// Package bench holds Atoll's benchmark workloads. Each workload runs the
// same operations against Atoll and against the local filesystem in the
// same run and reports both, so figures are always read as ratios to what
// this machine's disk and page cache can do.
package bench
