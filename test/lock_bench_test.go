package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/atoll-fs/atoll/internal/fusefs"
)

// Lock benchmarks (make bench-locks), each beside the same on a local
// directory and on a mount keeping its locks in the kernel
// (fusefs.Config.LocalLocks: how locks behaved before they reached the
// islands), in one run:
//
//	go test -run XXX -bench Lock -benchtime 2000x ./test/
//
// BenchmarkLockUnlock: uncontended F_SETLK + F_UNLCK round trips.
// BenchmarkLockHandOver: one mount unlocks, the other's F_SETLKW waiting
// for it returns (two mounts: two hosts).
// BenchmarkSQLite: one sqlite3 writer's one-row transactions, rollback
// journal (b.N transactions); BenchmarkSQLiteThree: three writers on
// three mounts (b.N transactions each).

// lockBenchDirs returns the directories a lock benchmark runs in by name:
// local, mount with kernel-local locks, mount with cluster locks.
func lockBenchDirs(b *testing.B, mounts int) map[string][]string {
	b.Helper()
	fuseUsable(b)
	fc := startFSCluster(b, 5, 1)
	dirs := map[string][]string{"local": {b.TempDir()}}
	for _, local := range []bool{true, false} {
		name := "cluster-locks"
		if local {
			name = "kernel-locks"
		}
		for range mounts {
			_, m := mountFSWith(b, fc.newFS(b), func(c *fusefs.Config) { c.LocalLocks = local })
			dirs[name] = append(dirs[name], m)
		}
	}
	return dirs
}

var benchKinds = []string{"local", "kernel-locks", "cluster-locks"}

func BenchmarkLockUnlock(b *testing.B) {
	dirs := lockBenchDirs(b, 1)
	for _, kind := range benchKinds {
		b.Run(kind, func(b *testing.B) {
			p := filepath.Join(benchSubdir(b, dirs[kind][0]), "lockbench")
			f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			cpu := cpuTime()
			b.ResetTimer()
			for range b.N {
				if _, err := posixLock(f, unix.F_SETLK, unix.F_WRLCK, 0, 0); err != nil {
					b.Fatal(err)
				}
				if _, err := posixLock(f, unix.F_SETLK, unix.F_UNLCK, 0, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lock+unlock/s")
			b.ReportMetric((cpuTime()-cpu).Seconds()*1e6/float64(b.N), "cpu-us/op")
		})
	}
}

func BenchmarkLockHandOver(b *testing.B) {
	dirs := lockBenchDirs(b, 2)
	for _, kind := range []string{"cluster-locks"} {
		b.Run(kind, func(b *testing.B) {
			var fs []*os.File
			for _, d := range dirs[kind] {
				f, err := os.OpenFile(filepath.Join(d, "handover"), os.O_RDWR|os.O_CREATE, 0o644)
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				fs = append(fs, f)
			}
			if _, err := posixLock(fs[0], unix.F_SETLK, unix.F_WRLCK, 0, 0); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			var total time.Duration
			for k := range b.N {
				holder, waiter := fs[k%2], fs[(k+1)%2]
				got := make(chan time.Time, 1)
				go func() {
					if _, err := posixLock(waiter, unix.F_SETLKW, unix.F_WRLCK, 0, 0); err != nil {
						b.Error(err)
					}
					got <- time.Now()
				}()
				time.Sleep(2 * time.Millisecond) // the wait reaches the island
				start := time.Now()
				if _, err := posixLock(holder, unix.F_SETLK, unix.F_UNLCK, 0, 0); err != nil {
					b.Fatal(err)
				}
				total += (<-got).Sub(start)
			}
			b.StopTimer()
			b.ReportMetric(float64(total.Microseconds())/float64(b.N), "handover-us")
		})
	}
}

func sqliteBench(b *testing.B, writers int) {
	sqlite, err := exec.LookPath("sqlite3")
	if err != nil {
		b.Skip("sqlite3 not installed")
	}
	dirs := lockBenchDirs(b, writers)
	for _, kind := range benchKinds {
		b.Run(kind, func(b *testing.B) {
			ds := dirs[kind]
			if kind == "local" {
				ds = []string{ds[0], ds[0], ds[0]}[:writers]
			}
			// The database in a directory of its own, as an application's
			// (its first writer's mount may hold it exclusively).
			sub := filepath.Base(benchSubdir(b, ds[0]))
			db := filepath.Join(sub, "bench.db")
			create := exec.Command(sqlite, filepath.Join(ds[0], db), "CREATE TABLE t(w INTEGER, k INTEGER);")
			if out, err := create.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			cpu := cpuTime()
			b.ResetTimer()
			errs := make(chan error, writers)
			for w, d := range ds {
				var s strings.Builder
				s.WriteString(".timeout 120000\n")
				for k := range b.N {
					fmt.Fprintf(&s, "BEGIN IMMEDIATE; INSERT INTO t VALUES(%d, %d); COMMIT;\n", w, k)
				}
				go func() {
					cmd := exec.Command(sqlite, filepath.Join(d, db))
					cmd.Stdin = strings.NewReader(s.String())
					out, err := cmd.CombinedOutput()
					if err != nil || len(strings.TrimSpace(string(out))) > 0 {
						err = fmt.Errorf("writer on %s: %v: %.1000s", d, err, out)
					}
					errs <- err
				}()
			}
			for range writers {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(writers*b.N)/b.Elapsed().Seconds(), "txn/s")
			b.ReportMetric((cpuTime()-cpu).Seconds()*1e6/float64(writers*b.N), "mount-cpu-us/txn")
		})
	}
}

func BenchmarkSQLite(b *testing.B)      { sqliteBench(b, 1) }
func BenchmarkSQLiteThree(b *testing.B) { sqliteBench(b, 3) }

// benchSubdir makes a new directory in dir for one benchmark run.
func benchSubdir(b *testing.B, dir string) string {
	b.Helper()
	d, err := os.MkdirTemp(dir, "run")
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// cpuTime is this process's CPU time (the in-process cluster and mounts).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
