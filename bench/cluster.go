package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/devcluster"
)

// sayer prints one progress line per call to progress (nil: nothing).
func sayer(progress io.Writer) func(format string, a ...any) {
	return func(format string, a ...any) {
		if progress != nil {
			fmt.Fprintf(progress, format+"\n", a...)
		}
	}
}

// scratch returns dir, or a fresh temporary directory named for the
// benchmark that done removes.
func scratch(dir, name string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", "atoll-bench-"+name+"-")
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}

// startCluster starts a benchmark's cluster of child processes in
// dir/cluster: the manager on basePort, storage servers from basePort+100,
// islands from basePort+200; tune adjusts the rest of the config. stop
// ends it.
func startCluster(ctx context.Context, dir, exe string, basePort, storage, islands int, tune func(*devcluster.Config)) (cl *devcluster.Cluster, stop func(), err error) {
	cfg := devcluster.Config{
		DataDir: filepath.Join(dir, "cluster"), Storage: storage, Islands: islands, Exe: exe, LogLevel: "warn",
		ManagerListen: fmt.Sprintf("127.0.0.1:%d", basePort),
		StorageListen: fmt.Sprintf("127.0.0.1:%d", basePort+100),
		IslandListen:  fmt.Sprintf("127.0.0.1:%d", basePort+200),
		Out:           os.Stderr,
	}
	if tune != nil {
		tune(&cfg)
	}
	dev, err := devcluster.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	if cl, err = dev.Start(ctx); err != nil {
		dev.Close()
		return nil, nil, err
	}
	return cl, func() { cl.Stop(); dev.Close() }, nil
}

// startWatched is startCluster plus a client that follows the map every
// 200ms (moves and joins change it under the benchmark); stop ends all.
func startWatched(ctx context.Context, dir, exe string, basePort, storage, islands int, log *slog.Logger, tune func(*devcluster.Config)) (cl *devcluster.Cluster, conn *connect.Conn, stop func(), err error) {
	cl, stopCluster, err := startCluster(ctx, dir, exe, basePort, storage, islands, tune)
	if err != nil {
		return nil, nil, nil, err
	}
	if conn, err = connect.Dial(ctx, []string{cl.Manager}, cl.Key, log); err != nil {
		stopCluster()
		return nil, nil, nil, err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); conn.Watch(wctx, 200*time.Millisecond) }()
	return cl, conn, func() { stopWatch(); <-watched; conn.Close(); stopCluster() }, nil
}
