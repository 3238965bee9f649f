package test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// BenchmarkMetaCreateUnlink creates and unlinks files with 16 concurrent
// clients against one in-process island; run with -cpuprofile. LAZY=1
// creates as the FUSE mount does.
func BenchmarkMetaCreateUnlink(b *testing.B) {
	fc := startFSCluster(b, 3, 1)
	fs := fc.newFS(b)
	fs.SetLazyCreate(os.Getenv("LAZY") != "")
	ctx := context.Background()
	dirs := benchDirs(b, fs, 16)
	b.ResetTimer()
	per := b.N/16 + 1
	fanOut(16, func(w int) {
		for i := 0; i < per; i++ {
			if _, err := fs.Create(ctx, metawire.CreateReq{Cred: root, Dir: dirs[w], Name: fmt.Sprintf("f%d", i), Mode: 0o644}); err != nil {
				b.Error(err)
				return
			}
		}
		if os.Getenv("NOUNLINK") != "" {
			return
		}
		for i := 0; i < per; i++ {
			if err := fs.Unlink(ctx, root, dirs[w], fmt.Sprintf("f%d", i)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkMetaStat stats files with 16 concurrent clients against one
// in-process island, bypassing the client cache.
func BenchmarkMetaStat(b *testing.B) {
	fc := startFSCluster(b, 3, 1)
	fs := fc.newFS(b)
	ctx := context.Background()
	d, err := fs.MkdirAll(ctx, root, "/s", 0o755)
	if err != nil {
		b.Fatal(err)
	}
	var inos []uint64
	for i := 0; i < 1000; i++ {
		r, err := fs.Create(ctx, metawire.CreateReq{Cred: root, Dir: d.Ino, Name: fmt.Sprintf("f%d", i), Mode: 0o644})
		if err != nil {
			b.Fatal(err)
		}
		inos = append(inos, r.Attr.Ino)
	}
	b.ResetTimer()
	per := b.N/16 + 1
	fanOut(16, func(w int) {
		for i := 0; i < per; i++ {
			if _, err := fs.GetAttrFresh(ctx, root, inos[(w*per+i)%len(inos)]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkMetaSmallFiles creates, writes (4 KiB) and closes files with 16
// (WORKERS) concurrent clients against one in-process island, creating and
// closing lazily as the FUSE mount does (each file durable at fsync);
// SYNCCREATE=1 creates and closes as the NFS gateway does (durable at once);
// ONECALL=1 sends each file's data with its create (CreateWithData).
func BenchmarkMetaSmallFiles(b *testing.B) {
	fc := startFSCluster(b, 3, 1)
	fs := fc.newFS(b)
	fs.SetLazyCreate(os.Getenv("SYNCCREATE") == "")
	fs.SetLazyClose(os.Getenv("SYNCCREATE") == "")
	ctx := context.Background()
	workers := benchWorkers()
	dirs := benchDirs(b, fs, workers)
	block := make([]byte, 4096)
	oneCall := os.Getenv("ONECALL") != ""
	b.ResetTimer()
	per := b.N/workers + 1
	fanOut(workers, func(w int) {
		for i := 0; i < per; i++ {
			req := metawire.CreateReq{Cred: root, Dir: dirs[w], Name: fmt.Sprintf("f%d", i), Mode: 0o644}
			if oneCall {
				if _, err := fs.CreateWithData(ctx, req, block); err != nil {
					b.Error(err)
					return
				}
				continue
			}
			r, err := fs.Create(ctx, req)
			if err != nil {
				b.Error(err)
				return
			}
			fh, err := fs.OpenWithAttr(ctx, root, r.Attr)
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := fh.WriteAt(ctx, block, 0); err != nil {
				b.Error(err)
				return
			}
			if err := fh.Close(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// benchDirs makes directories /d0../d(n-1), one per benchmark worker.
func benchDirs(b *testing.B, fs *client.FS, n int) []uint64 {
	b.Helper()
	dirs := make([]uint64, n)
	for i := range dirs {
		a, err := fs.MkdirAll(context.Background(), root, fmt.Sprintf("/d%d", i), 0o755)
		if err != nil {
			b.Fatal(err)
		}
		dirs[i] = a.Ino
	}
	return dirs
}

// fanOut runs fn(0..n-1) on n goroutines and waits for them.
func fanOut(n int, fn func(w int)) {
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(w)
		}()
	}
	wg.Wait()
}

// benchWorkers is the number of concurrent clients: WORKERS, else 16.
func benchWorkers() int {
	if n, err := strconv.Atoi(os.Getenv("WORKERS")); err == nil && n > 0 {
		return n
	}
	return 16
}
