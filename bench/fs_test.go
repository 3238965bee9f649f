package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// noDrop replaces dropCaches for the test: nothing in a test may drop the
// page cache of a machine other tests share. It counts the calls.
func noDrop(t *testing.T) *int {
	calls := new(int)
	old := dropCaches
	dropCaches = func() error { *calls++; return nil }
	t.Cleanup(func() { dropCaches = old })
	return calls
}

// RunFS on a local directory: every phase runs, reads back what it wrote
// (RunFS compares every byte and the listed count) and reports a positive
// figure, and leaves nothing behind; impossible settings are refused.
// With KeepCache it leaves the caches alone; without, it drops them
// twice, before the cold read and before the cold stat.
func TestRunFSLocal(t *testing.T) {
	drops := noDrop(t)
	dir := t.TempDir()
	res, err := RunFS(context.Background(), FSConfig{Dir: dir, Size: 3 << 20, SmallFiles: 37, Jobs: 4, KeepCache: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *drops != 0 || res.ColdCache || res.StatColdCache {
		t.Errorf("KeepCache: caches dropped %d times, cold_cache %v, stat_cold_cache %v", *drops, res.ColdCache, res.StatColdCache)
	}
	for name, v := range map[string]float64{
		"seq_write_mbps": res.SeqWriteMBps, "cold_read_mbps": res.ColdReadMBps,
		"small_files_per_s": res.SmallFilesPerS, "small_files_parallel_per_s": res.SmallParallelPerS,
		"small_files_fsync_per_s": res.SmallFsyncPerS, "stat_per_s": res.StatPerS,
		"second_read_mbps": res.SecondReadMBps, "stat_cold_per_s": res.StatColdPerS,
		"stat_warm_per_s": res.StatWarmPerS,
	} {
		if !(v > 0) {
			t.Errorf("%s = %v", name, v)
		}
	}
	if res.StatPerS != res.StatColdPerS {
		t.Errorf("stat_per_s %v, want the cold figure %v", res.StatPerS, res.StatColdPerS)
	}
	if res.Jobs != 4 || res.SmallFiles != 37 {
		t.Errorf("jobs %d, small files %d", res.Jobs, res.SmallFiles)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	for _, bad := range []FSConfig{
		{Dir: "", Size: 1 << 20, SmallFiles: 1},
		{Dir: filepath.Join(dir, "missing"), Size: 1 << 20, SmallFiles: 1},
		{Dir: dir, Size: 1000, SmallFiles: 1},
		{Dir: dir, Size: 1 << 20, SmallFiles: 0},
		{Dir: dir, Size: 1 << 20, SmallFiles: 1, Jobs: -1},
		{Dir: dir, Size: 1 << 20, SmallFiles: 1, Jobs: 1000},
	} {
		if _, err := RunFS(context.Background(), bad, nil); err == nil {
			t.Errorf("RunFS(%+v) accepted", bad)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	// The default (what `atoll bench fs` does unless told otherwise)
	// drops the caches, here through the test's stand-in.
	res, err = RunFS(context.Background(), FSConfig{Dir: dir, Size: 1 << 20, SmallFiles: 1, Jobs: 1}, nil)
	if err != nil || *drops != 2 || !res.ColdCache || !res.StatColdCache {
		t.Errorf("default: caches dropped %d times, cold_cache %v, stat_cold_cache %v, err %v", *drops, res.ColdCache, res.StatColdCache, err)
	}
	// A refused drop (not root) is reported, not hidden.
	dropCaches = func() error { return os.ErrPermission }
	res, err = RunFS(context.Background(), FSConfig{Dir: dir, Size: 1 << 20, SmallFiles: 1, Jobs: 1}, nil)
	if err != nil || res.ColdCache || res.StatColdCache {
		t.Errorf("drop refused: cold_cache %v, stat_cold_cache %v, err %v", res.ColdCache, res.StatColdCache, err)
	}
}
