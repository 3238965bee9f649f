package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/cleaner"
	"github.com/atoll-fs/atoll/internal/testenv"
)

// TestMain gives the benchmarks' clusters the test cluster key and
// removes the binary atoll built.
func TestMain(m *testing.M) { testenv.Main(m) }

// atoll builds the atoll binary (the benchmarks start their servers as
// child processes of it) once per test run.
func atoll(t *testing.T) string { return testenv.Atoll(t) }

// freeBasePort returns a port p, below the ephemeral range, such that the
// ports a benchmark cluster takes from BasePort p are free: the manager
// (p) and its raft port (p+1), storage servers from p+100 and islands
// from p+200.
func freeBasePort(t *testing.T, storage, islands int) int {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	var ports []int
	for try := 0; try < 200; try++ {
		base := 20000 + r.IntN(12000)
		ports = append(ports[:0], base, base+1)
		for i := 0; i < storage; i++ {
			ports = append(ports, base+100+i)
		}
		for i := 0; i < islands; i++ {
			ports = append(ports, base+200+i)
		}
		free := true
		for _, p := range ports {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

func positive(t *testing.T, figures map[string]float64) {
	t.Helper()
	for name, v := range figures {
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v, want a positive figure", name, v)
		}
	}
}

// RunData on 5 storage servers (ec:4+1): it writes, reads back and
// compares every byte, reads again degraded with slot 0 killed, and
// writes and spot-checks small blocks; the figures say so.
func TestRunData(t *testing.T) {
	const size = 8 << 20
	res, err := RunData(context.Background(), DataConfig{Servers: 5, Policy: "ec:4+1", Size: size, SmallBlocks: 300,
		ReadWorkers: 2, Exe: atoll(t), Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Policy != "ec:4+1" || res.Servers != 5 || res.SizeBytes != size || res.SmallBlocks != 300 {
		t.Errorf("settings: %+v", res)
	}
	if res.VerifiedReadBytes != size {
		t.Errorf("verified %d bytes, want %d", res.VerifiedReadBytes, size)
	}
	// The degraded read went through reconstruction: slot 0 holds a
	// fragment of every stripe.
	if res.DegradedReads == 0 {
		t.Errorf("no degraded reads with slot 0 killed: %+v", res)
	}
	positive(t, map[string]float64{
		"write_mbps": res.WriteMBps, "read_mbps": res.ReadMBps, "degraded_read_mbps": res.DegradedReadMBps,
		"degraded_read_ratio": res.DegradedRatio, "local_write_mbps": res.LocalWriteMBps, "local_read_mbps": res.LocalReadMBps,
		"write_vs_local": res.WriteVsLocal, "read_vs_local": res.ReadVsLocal, "small_blocks_per_s": res.SmallBlocksPerS,
		"max_storage_rss_mib": res.MaxStorageRSSMiB,
	})
}

// RunMeta on 2 islands: the tree is built and torn down without an
// error, every figure is positive, and the entries counted per island
// add up to the directories and files made.
func TestRunMeta(t *testing.T) {
	const islands, storage = 2, 3
	cfg := MetaConfig{Islands: islands, Storage: storage, Dirs: 20, Files: 200, SmallFiles: 40, Clients: 4,
		Exe: atoll(t), Dir: t.TempDir(), BasePort: freeBasePort(t, storage, islands)}
	res, err := RunMeta(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Islands != islands || res.Clients != 4 || res.Dirs != 20 || res.Files != 200 {
		t.Errorf("settings: %+v", res)
	}
	if len(res.EntriesPerIsland) != islands {
		t.Fatalf("entries per island %v, want %d islands", res.EntriesPerIsland, islands)
	}
	sum := 0
	for _, n := range res.EntriesPerIsland {
		sum += n
	}
	if sum != cfg.Dirs+cfg.Files {
		t.Errorf("entries per island %v add up to %d, want %d directories and files", res.EntriesPerIsland, sum, cfg.Dirs+cfg.Files)
	}
	// Directories hash over both islands, so some mkdirs cross islands;
	// files never do, so most operations do not.
	if !(res.CrossIslandFraction > 0 && res.CrossIslandFraction < 0.5) {
		t.Errorf("cross-island fraction %v", res.CrossIslandFraction)
	}
	if !(res.Imbalance >= 0) || math.IsInf(res.Imbalance, 0) {
		t.Errorf("imbalance %v", res.Imbalance)
	}
	positive(t, map[string]float64{
		"mkdir_per_s": res.MkdirPerS, "create_per_s": res.CreatePerS, "create_durable_per_s": res.CreateDurablePerS,
		"stat_per_s": res.StatPerS, "readdir_entries_per_s": res.ReaddirEntriesPerS, "unlink_per_s": res.UnlinkPerS,
		"small_files_per_s": res.SmallFilesPerS, "small_files_fsync_per_s": res.SmallFilesFsyncPerS,
		"small_files_one_call_per_s": res.SmallFilesOneCallPerS, "local_create_per_s": res.LocalCreatePerS,
		"local_stat_per_s": res.LocalStatPerS, "local_small_files_per_s": res.LocalSmallFilesPerS,
	})
}

// RunClean on the smallest working set: the cleaner reclaims the space
// the overwrites freed, and the rebuild puts fragments back on the
// replaced slot (RunClean fails if any could not be rebuilt).
func TestRunClean(t *testing.T) {
	const storage = 5
	cfg := CleanConfig{Storage: storage, WorkingSet: 16 << 20, Rounds: 1, Foreground: 16 << 20, RebuildData: 8 << 20,
		Rate: 1 << 30, Share: 1, Exe: atoll(t), Dir: t.TempDir(), BasePort: freeBasePort(t, storage, 1)}
	res, err := RunClean(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.LiveBytes != cfg.WorkingSet {
		t.Errorf("live bytes %d, want the working set's %d", res.LiveBytes, cfg.WorkingSet)
	}
	if res.DiskBeforeBytes <= 0 || res.ReclaimedBytes <= 0 || res.CopiedBytes < 0 {
		t.Errorf("cleaning: disk before %d, reclaimed %d, copied %d", res.DiskBeforeBytes, res.ReclaimedBytes, res.CopiedBytes)
	}
	// What is left after cleaning holds at least the live data (with
	// parity) and less than before.
	if res.DiskAfterBytes < res.LiveBytes || res.DiskAfterBytes >= res.DiskBeforeBytes {
		t.Errorf("disk after cleaning %d bytes: live %d, before %d", res.DiskAfterBytes, res.LiveBytes, res.DiskBeforeBytes)
	}
	if res.WriteAmplification < 0 || math.IsInf(res.WriteAmplification, 0) || math.IsNaN(res.WriteAmplification) {
		t.Errorf("write amplification %v", res.WriteAmplification)
	}
	if res.CopiedPhysical != res.CopiedBytes*5/4 {
		t.Errorf("copied %d bytes but %d on disk, want the ec:4+1 share", res.CopiedBytes, res.CopiedPhysical)
	}
	if res.CleanOverlap < 0 || res.CleanOverlap > 1 {
		t.Errorf("clean overlap %v, want a fraction", res.CleanOverlap)
	}
	// Slot 2 held a fragment of every ec:4+1 stripe: the rebuild put
	// back at least a fifth of the rebuild data and working set.
	if min := (cfg.RebuildData + cfg.WorkingSet) / 5; res.RebuildBytes < min {
		t.Errorf("rebuilt %d bytes onto slot 2, want at least %d", res.RebuildBytes, min)
	}
	positive(t, map[string]float64{
		"clean_seconds": res.CleanSeconds, "foreground_mbps": res.ForegroundMBps,
		"foreground_during_clean_mbps": res.ForegroundCleanMBs, "foreground_ratio_during_clean": res.ForegroundRatio,
		"rebuild_seconds": res.RebuildSeconds, "rebuild_mbps": res.RebuildMBps,
	})
}

// RunIslandGrow: a third island joins two under a metadata workload,
// takes its share of the table (moves unthrottled), the table ends even,
// and the figures are filled in.
func TestRunIslandGrow(t *testing.T) {
	cfg := IslandGrowConfig{Islands: 2, Workers: 4, Phase: 2 * time.Second, MoveDuty: 1,
		Exe: atoll(t), Dir: t.TempDir(), BasePort: freeBasePort(t, 5, 3)}
	res, err := RunIslandGrow(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.EntriesMoved == 0 || res.ImbalanceBefore < 0.5 || res.ImbalanceAfter > 0.1 {
		t.Errorf("%d entries moved; table imbalance %.3f before, %.3f after", res.EntriesMoved, res.ImbalanceBefore, res.ImbalanceAfter)
	}
	positive(t, map[string]float64{"ops_before": res.BeforeOps, "ops_during": res.DuringOps, "ops_after": res.AfterOps,
		"balance_seconds": res.BalanceSeconds, "ops_during_ratio": res.DuringRatio})
}

// RunRebalance on a small cluster: a sixth server joins, the passes
// balance it within the tolerance while the writer runs, and the figures
// are filled in.
func TestRunRebalance(t *testing.T) {
	const storage = 5
	cfg := RebalanceConfig{Storage: storage, Data: 64 << 20, Foreground: 16 << 20, Rate: 1 << 30, Share: 1,
		Exe: atoll(t), Dir: t.TempDir(), BasePort: freeBasePort(t, storage+1, 1), Only: "storage"}
	res, err := RunRebalance(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.ImbalanceBefore <= cleaner.DefaultTolerance || res.ImbalanceAfter > cleaner.DefaultTolerance {
		t.Errorf("imbalance %.3f before, %.3f after", res.ImbalanceBefore, res.ImbalanceAfter)
	}
	if res.Passes < 1 || res.MovedBytes <= 0 || res.BalanceSeconds <= 0 {
		t.Errorf("passes %d, moved %d bytes in %.1fs", res.Passes, res.MovedBytes, res.BalanceSeconds)
	}
	if res.BeforeMBps <= 0 || res.AfterMBps <= 0 || res.DuringMBps < 0 {
		t.Errorf("writer: %.0f MB/s before, %.0f during, %.0f after", res.BeforeMBps, res.DuringMBps, res.AfterMBps)
	}
}
