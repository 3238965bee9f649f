package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// MetaConfig configures the metadata benchmark.
type MetaConfig struct {
	Islands int
	// Replicas of each island (1, 3 or 5; 0 means 1): above 1 the
	// islands run on island servers (as many as Islands).
	Replicas int
	// Failovers is how many times to kill the island server leading
	// island 1 and time the first create that succeeds after it
	// (replicated islands only).
	Failovers  int
	Storage    int
	Dirs       int // directories in the generated tree
	Files      int // empty files spread over them
	SmallFiles int // 4 KiB files created, written and closed
	Clients    int // concurrent clients
	Dir        string
	Exe        string
	BasePort   int // first port of the started cluster
	Logger     *slog.Logger
}

// Validate checks the configuration.
func (c *MetaConfig) Validate() error {
	switch {
	case c.Islands < 1 || c.Islands > 16:
		return fmt.Errorf("bench: --islands must be 1..16")
	case c.Dirs < 1 || c.Files < 0 || c.SmallFiles < 0:
		return fmt.Errorf("bench: --dirs must be positive, --files and --small-files not negative")
	case c.Clients < 1 || c.Clients > 256:
		return fmt.Errorf("bench: --clients must be 1..256")
	case c.Exe == "":
		return fmt.Errorf("bench: no atoll binary")
	case c.Replicas != 0 && c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5:
		return fmt.Errorf("bench: --replicas must be 1, 3 or 5")
	case c.Replicas > 1 && c.Islands < c.Replicas:
		return fmt.Errorf("bench: --replicas %d needs --islands %d or more (one island server each)", c.Replicas, c.Replicas)
	case c.Failovers < 0 || (c.Failovers > 0 && c.Replicas < 3):
		return fmt.Errorf("bench: --failovers needs --replicas 3 or 5")
	}
	return nil
}

// MetaResult holds the figures; JSON names are stable.
type MetaResult struct {
	Islands             int     `json:"islands"`
	Replicas            int     `json:"replicas"`
	Clients             int     `json:"clients"`
	Dirs                int     `json:"dirs"`
	Files               int     `json:"files"`
	MkdirPerS           float64 `json:"mkdir_per_s"`
	CreatePerS          float64 `json:"create_per_s"`         // as the FUSE mount creates: durable at close/fsync
	CreateDurablePerS   float64 `json:"create_durable_per_s"` // as the NFS gateway creates: durable when answered
	StatPerS            float64 `json:"stat_per_s"`
	ReaddirEntriesPerS  float64 `json:"readdir_entries_per_s"`
	UnlinkPerS          float64 `json:"unlink_per_s"`
	SmallFilesPerS      float64 `json:"small_files_per_s"`       // as the FUSE mount: close-to-open, durable at fsync
	SmallFilesFsyncPerS float64 `json:"small_files_fsync_per_s"` // create+write+fsync+close: durable at once
	// SmallFilesOneCallPerS is the same files written with one
	// CreateWithData each (FS.WriteFile, atoll cp): durable as the mount's.
	SmallFilesOneCallPerS float64 `json:"small_files_one_call_per_s"`
	CrossIslandFraction   float64 `json:"cross_island_fraction"`
	Imbalance             float64 `json:"imbalance"`
	EntriesPerIsland      []int   `json:"entries_per_island"`
	LocalCreatePerS       float64 `json:"local_create_per_s"`
	LocalStatPerS         float64 `json:"local_stat_per_s"`
	LocalSmallFilesPerS   float64 `json:"local_small_files_per_s"`
	// FailoverMS: for each kill -9 of island 1's leader, the time until
	// a create in a directory of island 1 succeeded (milliseconds).
	FailoverMS []int64 `json:"failover_ms,omitempty"`
	// CreateLatencyMS is the islands' mean time to serve a create;
	// ReplicateLatencyMS their mean time from a change handed to raft to
	// applied on the leader (replicated islands), from their /metrics.
	CreateLatencyMS    float64 `json:"create_latency_ms"`
	ReplicateLatencyMS float64 `json:"replicate_latency_ms,omitempty"`
	FailoverMedianMS   int64   `json:"failover_median_ms,omitempty"`
}

// RunMeta starts a cluster (1 manager, Storage servers, Islands islands,
// each a child process), builds a tree of Dirs directories and Files files
// with Clients concurrent clients, and measures each operation; then runs
// the same create/stat/small-file loops on the local filesystem.
func RunMeta(ctx context.Context, cfg MetaConfig, progress io.Writer) (MetaResult, error) {
	if err := cfg.Validate(); err != nil {
		return MetaResult{}, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Storage == 0 {
		cfg.Storage = 3
	}
	if cfg.BasePort == 0 {
		cfg.BasePort = 17300
	}
	say := sayer(progress)
	dir, done, err := scratch(cfg.Dir, "meta")
	if err != nil {
		return MetaResult{}, err
	}
	defer done()
	res := MetaResult{Islands: cfg.Islands, Replicas: max(cfg.Replicas, 1), Clients: cfg.Clients, Dirs: cfg.Dirs, Files: cfg.Files}
	cl, stop, err := startCluster(ctx, dir, cfg.Exe, cfg.BasePort, cfg.Storage, cfg.Islands, func(c *devcluster.Config) {
		c.IslandReplicas = cfg.Replicas
		c.MetricsListen = fmt.Sprintf("127.0.0.1:%d", cfg.BasePort+400)
	})
	if err != nil {
		return res, err
	}
	defer stop()

	mc := cluster.NewClient([]string{cl.Manager}, cl.Key, cfg.Logger)
	defer mc.Close()
	view, err := cluster.NewView(ctx, mc)
	if err != nil {
		return res, err
	}
	// One FS (with its own caches and connections) per simulated client.
	fss := make([]*client.FS, cfg.Clients)
	for i := range fss {
		slots, _ := view.StorageSlots()
		var sa []client.SlotAddr
		for _, s := range slots {
			sa = append(sa, client.SlotAddr{ID: s.Slot, Addr: s.Addr})
		}
		data, err := client.New(client.Config{Slots: sa, Logger: cfg.Logger, Key: cl.Key})
		if err != nil {
			return res, err
		}
		defer data.Close()
		fs, err := client.NewFS(client.FSConfig{Data: data, Map: view, Logger: cfg.Logger})
		if err != nil {
			return res, err
		}
		defer fs.Close()
		fss[i] = fs
	}
	cred := metawire.Root

	// The tree: /b/dNNNN directories, two levels (top-level groups of 50),
	// files spread round robin.
	paths := make([]string, cfg.Dirs)
	for i := range paths {
		paths[i] = fmt.Sprintf("/b/g%03d/d%05d", i/50, i)
	}
	if _, err := fss[0].MkdirAll(ctx, cred, "/b", 0o755); err != nil {
		return res, err
	}
	for g := 0; g*50 < cfg.Dirs; g++ {
		if _, err := fss[0].MkdirAll(ctx, cred, fmt.Sprintf("/b/g%03d", g), 0o755); err != nil {
			return res, err
		}
	}
	table := view.Map().Table
	owner := func(bucket uint32) uint32 { id, _ := table.Owner(bucket); return id }
	var crossOps, totalOps atomic.Int64
	dirIno := make([]uint64, cfg.Dirs)
	parentOf := func(i int) string { return fmt.Sprintf("/b/g%03d", i/50) }
	parentIno := map[string]uint64{}
	for g := 0; g*50 < cfg.Dirs; g++ {
		p := fmt.Sprintf("/b/g%03d", g)
		a, err := fss[0].Resolve(ctx, cred, p)
		if err != nil {
			return res, err
		}
		parentIno[p] = a.Ino
	}

	// mkdir
	start := time.Now()
	err = parallel(ctx, cfg.Clients, cfg.Dirs, func(w, i int) error {
		p := parentIno[parentOf(i)]
		r, err := fss[w].Mkdir(ctx, metawire.CreateReq{Cred: cred, Dir: p, Name: fmt.Sprintf("d%05d", i), Mode: 0o755})
		if err != nil {
			return fmt.Errorf("mkdir %s: %w", paths[i], err)
		}
		dirIno[i] = r.Attr.Ino
		totalOps.Add(1)
		if owner(namespace.Ino(p).Bucket()) != owner(namespace.Ino(r.Attr.Ino).Bucket()) {
			crossOps.Add(1)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.MkdirPerS = float64(cfg.Dirs) / time.Since(start).Seconds()
	say("  mkdir        %9.0f /s", res.MkdirPerS)

	// Durable creates, as the NFS gateway makes them (each synced on its
	// island before the answer; concurrent ones share a log sync).
	nDurable := max(cfg.Files/4, 1)
	start = time.Now()
	err = parallel(ctx, cfg.Clients, nDurable, func(w, i int) error {
		_, err := fss[w].Create(ctx, metawire.CreateReq{Cred: cred, Dir: dirIno[i%cfg.Dirs], Name: fmt.Sprintf("n%06d", i), Mode: 0o644})
		if err != nil {
			return fmt.Errorf("create %d: %w", i, err)
		}
		totalOps.Add(1)
		return nil
	})
	if err != nil {
		return res, err
	}
	res.CreateDurablePerS = float64(nDurable) / time.Since(start).Seconds()
	say("  create (durable at once, NFS) %9.0f /s", res.CreateDurablePerS)

	// From here on the clients create and close as the FUSE mount does:
	// POSIX semantics, a create or a closed file's data is durable once
	// it is fsynced (or its directory is), and within one island log sync
	// anyway.
	for _, fs := range fss {
		fs.SetLazyCreate(true)
		fs.SetLazyClose(true)
	}
	// create (files live in their directory's bucket: never cross-island)
	fileIno := make([]uint64, cfg.Files)
	start = time.Now()
	err = parallel(ctx, cfg.Clients, cfg.Files, func(w, i int) error {
		r, err := fss[w].Create(ctx, metawire.CreateReq{Cred: cred, Dir: dirIno[i%cfg.Dirs], Name: fmt.Sprintf("f%06d", i), Mode: 0o644})
		if err != nil {
			return fmt.Errorf("create %d: %w", i, err)
		}
		fileIno[i] = r.Attr.Ino
		totalOps.Add(1)
		return nil
	})
	if err != nil {
		return res, err
	}
	res.CreatePerS = float64(cfg.Files) / time.Since(start).Seconds()
	say("  create       %9.0f /s (durable at close/fsync, as the FUSE mount)", res.CreatePerS)

	// stat (fresh from the island, not the client cache)
	start = time.Now()
	err = parallel(ctx, cfg.Clients, cfg.Files, func(w, i int) error {
		_, err := fss[w].GetAttrFresh(ctx, cred, fileIno[i])
		totalOps.Add(1)
		return err
	})
	if err != nil {
		return res, err
	}
	res.StatPerS = float64(cfg.Files) / time.Since(start).Seconds()
	say("  stat         %9.0f /s", res.StatPerS)

	// readdir with attributes
	var entries atomic.Int64
	start = time.Now()
	err = parallel(ctx, cfg.Clients, cfg.Dirs, func(w, i int) error {
		var cookie uint64
		for {
			r, err := fss[w].Readdir(ctx, cred, dirIno[i], cookie, 256, true)
			if err != nil {
				return err
			}
			totalOps.Add(1)
			for _, e := range r.Entries {
				if e.Name != "." && e.Name != ".." {
					entries.Add(1)
				}
				cookie = e.Cookie
			}
			if r.EOF || len(r.Entries) == 0 {
				return nil
			}
		}
	})
	if err != nil {
		return res, err
	}
	res.ReaddirEntriesPerS = float64(entries.Load()) / time.Since(start).Seconds()
	say("  readdir+attr %9.0f entries/s", res.ReaddirEntriesPerS)

	// Entries per island: every directory and file counted where its inode lives.
	counts := make(map[uint32]int)
	for _, ino := range dirIno {
		counts[owner(namespace.Ino(ino).Bucket())]++
	}
	for _, ino := range fileIno {
		counts[owner(namespace.Ino(ino).Bucket())]++
	}
	var fl []float64
	for _, is := range view.Map().Islands {
		res.EntriesPerIsland = append(res.EntriesPerIsland, counts[is.ID])
		fl = append(fl, float64(counts[is.ID]))
	}
	res.Imbalance = namespace.Imbalance(fl)

	// small files: create + write 4 KiB + close (as the FUSE mount: the
	// close is lazy), then a quarter as many made durable at once (fsync
	// before close), then as many again written with one request each
	// (create with data).
	block := make([]byte, 4096)
	smallFiles := func(n int, prefix string, fsync bool) (float64, error) {
		start := time.Now()
		err := parallel(ctx, cfg.Clients, n, func(w, i int) error {
			req := metawire.CreateReq{Cred: cred, Dir: dirIno[i%cfg.Dirs], Name: fmt.Sprintf("%s%06d", prefix, i), Mode: 0o644}
			if prefix == "o" {
				totalOps.Add(1)
				_, err := fss[w].CreateWithData(ctx, req, block)
				return err
			}
			r, err := fss[w].Create(ctx, req)
			if err != nil {
				return err
			}
			fh, err := fss[w].OpenWithAttr(ctx, cred, r.Attr)
			if err != nil {
				return err
			}
			if _, err := fh.WriteAt(ctx, block, 0); err != nil {
				return err
			}
			if fsync {
				if err := fh.Fsync(ctx); err != nil {
					return err
				}
			}
			totalOps.Add(3)
			return fh.Close(ctx)
		})
		return float64(n) / time.Since(start).Seconds(), err
	}
	if res.SmallFilesPerS, err = smallFiles(cfg.SmallFiles, "s", false); err != nil {
		return res, err
	}
	say("  small files  %9.0f /s (4 KiB create+write+close, as the FUSE mount)", res.SmallFilesPerS)
	if res.SmallFilesFsyncPerS, err = smallFiles(max(cfg.SmallFiles/4, 1), "y", true); err != nil {
		return res, err
	}
	say("  small files  %9.0f /s (4 KiB create+write+fsync+close)", res.SmallFilesFsyncPerS)
	if res.SmallFilesOneCallPerS, err = smallFiles(cfg.SmallFiles, "o", false); err != nil {
		return res, err
	}
	say("  small files  %9.0f /s (4 KiB, one create with data each)", res.SmallFilesOneCallPerS)

	// unlink
	start = time.Now()
	err = parallel(ctx, cfg.Clients, cfg.Files, func(w, i int) error {
		totalOps.Add(1)
		return fss[w].Unlink(ctx, cred, dirIno[i%cfg.Dirs], fmt.Sprintf("f%06d", i))
	})
	if err != nil {
		return res, err
	}
	res.UnlinkPerS = float64(cfg.Files) / time.Since(start).Seconds()
	say("  unlink       %9.0f /s", res.UnlinkPerS)
	res.CrossIslandFraction = float64(crossOps.Load()) / float64(totalOps.Load())
	say("  cross-island %9.4f of operations; imbalance %.3f over %d islands %v", res.CrossIslandFraction, res.Imbalance, cfg.Islands, res.EntriesPerIsland)

	if lat, err := islandLatencies(ctx, cl); err == nil {
		res.CreateLatencyMS, res.ReplicateLatencyMS = lat.create, lat.replicate
		say("  island create latency (mean) %.2f ms; replication (mean) %.2f ms", lat.create, lat.replicate)
	} else {
		say("  island latencies: %v", err)
	}
	if cfg.Failovers > 0 {
		if err := failovers(ctx, cfg, cl, view, fss[0], &res, say); err != nil {
			return res, err
		}
	}
	if err := localMeta(ctx, filepath.Join(dir, "local"), cfg, &res); err != nil {
		return res, err
	}
	say("  local fs: create %.0f /s, stat %.0f /s, small files %.0f /s", res.LocalCreatePerS, res.LocalStatPerS, res.LocalSmallFilesPerS)
	return res, nil
}

// localMeta runs the create, stat and small-file loops on the local
// filesystem with the same concurrency.
func localMeta(ctx context.Context, dir string, cfg MetaConfig, res *MetaResult) error {
	for i := 0; i < cfg.Dirs; i++ {
		if err := os.MkdirAll(filepath.Join(dir, fmt.Sprintf("d%05d", i)), 0o755); err != nil {
			return err
		}
	}
	name := func(i int, p string) string {
		return filepath.Join(dir, fmt.Sprintf("d%05d", i%cfg.Dirs), fmt.Sprintf("%s%06d", p, i))
	}
	start := time.Now()
	err := parallel(ctx, cfg.Clients, cfg.Files, func(_, i int) error {
		f, err := os.OpenFile(name(i, "f"), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		return f.Close()
	})
	if err != nil {
		return err
	}
	res.LocalCreatePerS = float64(cfg.Files) / time.Since(start).Seconds()
	start = time.Now()
	err = parallel(ctx, cfg.Clients, cfg.Files, func(_, i int) error {
		_, err := os.Stat(name(i, "f"))
		return err
	})
	if err != nil {
		return err
	}
	res.LocalStatPerS = float64(cfg.Files) / time.Since(start).Seconds()
	block := make([]byte, 4096)
	start = time.Now()
	err = parallel(ctx, cfg.Clients, cfg.SmallFiles, func(_, i int) error {
		return os.WriteFile(name(i, "s"), block, 0o644)
	})
	if err != nil {
		return err
	}
	res.LocalSmallFilesPerS = float64(cfg.SmallFiles) / time.Since(start).Seconds()
	return nil
}

// parallel runs fn(worker, i) for i in [0, n) over workers goroutines and
// returns the first error.
func parallel(ctx context.Context, workers, n int, fn func(w, i int) error) error {
	var next atomic.Int64
	next.Store(-1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(w, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(math.MaxInt32)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// failovers kills -9 the island server leading island 1, times the first
// create in a directory of island 1 that succeeds after the kill (the
// client retries an unavailable island for FSConfig.IslandWait), restarts
// the server and waits for it to lead island 1 again; cfg.Failovers times.
func failovers(ctx context.Context, cfg MetaConfig, cl *devcluster.Cluster, view *cluster.View, fs *client.FS, res *MetaResult, say func(string, ...any)) error {
	cred := metawire.Root
	var dir uint64
	for k := 0; dir == 0; k++ {
		if k == 500 {
			return fmt.Errorf("bench: no directory landed on island 1")
		}
		r, err := fs.Mkdir(ctx, metawire.CreateReq{Cred: cred, Dir: uint64(namespace.RootIno), Name: fmt.Sprintf("failover%d", k), Mode: 0o755})
		if err != nil {
			return err
		}
		if id, _, _ := view.IslandFor(namespace.Ino(r.Attr.Ino).Bucket()); id == 1 {
			dir = r.Attr.Ino
		}
	}
	leaderOf := func() *devcluster.Child {
		if err := view.Refresh(ctx); err != nil {
			return nil
		}
		is, ok := view.Map().Island(1)
		if !ok {
			return nil
		}
		for _, c := range cl.Children {
			if c.PID() == is.PID {
				return c
			}
		}
		return nil
	}
	for round := range cfg.Failovers {
		// Wait for island 1's preferred leader (island server 1) to lead.
		deadline := time.Now().Add(time.Minute)
		for c := leaderOf(); c == nil || c.Name != "island1"; c = leaderOf() {
			if time.Now().After(deadline) {
				return fmt.Errorf("bench: island 1 not back on island server 1")
			}
			time.Sleep(200 * time.Millisecond)
		}
		victim := cl.Child("island1")
		victim.Kill()
		start := time.Now()
		for try := 0; ; try++ {
			_, err := fs.Create(ctx, metawire.CreateReq{Cred: cred, Dir: dir, Name: fmt.Sprintf("after-kill-%d-%d", round, try), Mode: 0o644})
			if err == nil {
				break
			}
			if time.Since(start) > time.Minute {
				return fmt.Errorf("bench: no create succeeded within a minute of the kill: %w", err)
			}
		}
		took := time.Since(start)
		res.FailoverMS = append(res.FailoverMS, took.Milliseconds())
		say("  failover %d: first create %v after kill -9 of island 1's leader", round+1, took.Round(time.Millisecond))
		if _, err := cl.Restart(ctx, "island1"); err != nil {
			return err
		}
	}
	ms := slices.Clone(res.FailoverMS)
	slices.Sort(ms)
	res.FailoverMedianMS = ms[len(ms)/2]
	say("  failover     median %d ms over %d kills", res.FailoverMedianMS, len(ms))
	return nil
}

// islandLatencies reads every island process's /metrics and returns the
// mean create time and the mean replication time over all islands.
func islandLatencies(ctx context.Context, cl *devcluster.Cluster) (struct{ create, replicate float64 }, error) {
	var out struct{ create, replicate float64 }
	var cSum, cN, rSum, rN float64
	for _, c := range cl.Children {
		if !strings.HasPrefix(c.Name, "island") || c.MetricsAddr == "" {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.MetricsAddr+"/metrics", nil)
		if err != nil {
			return out, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return out, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return out, err
		}
		for _, line := range strings.Split(string(body), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				continue
			}
			switch {
			case strings.HasPrefix(f[0], "atoll_meta_op_duration_seconds_sum{") && strings.Contains(f[0], `op="create"`):
				cSum += v
			case strings.HasPrefix(f[0], "atoll_meta_op_duration_seconds_count{") && strings.Contains(f[0], `op="create"`):
				cN += v
			case strings.HasPrefix(f[0], "atoll_island_replicate_seconds_sum{"):
				rSum += v
			case strings.HasPrefix(f[0], "atoll_island_replicate_seconds_count{"):
				rN += v
			}
		}
	}
	if cN > 0 {
		out.create = 1000 * cSum / cN
	}
	if rN > 0 {
		out.replicate = 1000 * rSum / rN
	}
	return out, nil
}
