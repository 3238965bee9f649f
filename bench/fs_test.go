package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// RunFS on a local directory: every phase runs, reads back what it wrote
// (RunFS compares every byte and the listed count) and reports a positive
// figure, and leaves nothing behind; impossible settings are refused.
func TestRunFSLocal(t *testing.T) {
	dir := t.TempDir()
	res, err := RunFS(context.Background(), FSConfig{Dir: dir, Size: 3 << 20, SmallFiles: 37, Jobs: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]float64{
		"seq_write_mbps": res.SeqWriteMBps, "cold_read_mbps": res.ColdReadMBps,
		"small_files_per_s": res.SmallFilesPerS, "small_files_parallel_per_s": res.SmallParallelPerS,
		"small_files_fsync_per_s": res.SmallFsyncPerS, "stat_per_s": res.StatPerS,
	} {
		if !(v > 0) {
			t.Errorf("%s = %v", name, v)
		}
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
}
