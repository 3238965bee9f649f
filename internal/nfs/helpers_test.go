package nfs

import (
	"context"
	"github.com/atoll-fs/atoll/internal/auth"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/meta"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/storage"
)

// testServer is a gateway (not serving: requests go to handle directly)
// over one in-process storage server and one island.
func testServer(t testing.TB) *Server {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("ATOLL_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	// Authenticated like a real cluster: the servers hold the cluster
	// key, the gateway a user key derived from it.
	ck, err := auth.NewClusterKey()
	if err != nil {
		t.Fatal(err)
	}
	uk, err := ck.Derive("gateway", auth.CapRead|auth.CapWrite)
	if err != nil {
		t.Fatal(err)
	}
	st, err := storage.NewServer(storage.ServerConfig{Key: ck, Dir: t.TempDir(), Listen: "127.0.0.1:0", Slot: 0, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stDone := make(chan error, 1)
	go func() { stDone <- st.Run(ctx) }()
	tab, err := namespace.NewTable([]namespace.IslandID{1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	tab.Epoch = 1
	smap := meta.NewStaticMap(tab, nil)
	is, err := meta.New(meta.Config{Key: ck, Dir: t.TempDir(), Listen: "127.0.0.1:0", ID: 1, Map: smap, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	smap.SetAddr(1, is.Addr())
	isDone := make(chan error, 1)
	go func() { isDone <- is.Run(ctx) }()
	data, err := client.New(client.Config{Key: uk, Slots: []client.SlotAddr{{ID: 0, Addr: st.Addr()}}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := client.NewFS(client.FSConfig{Data: data, Logger: log,
		Map: &client.StaticMapView{MapEpoch: 1, Table: tab, Addrs: map[namespace.IslandID]string{1: is.Addr()}, Policy: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{FS: fs, Listen: "127.0.0.1:0", Logger: log, FlushIdle: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		_ = s.files.closeAll(context.Background())
		fs.Close()
		data.Close()
		cancel()
		<-isDone
		<-stDone
	})
	return s
}

// testConn is a connection identity for handle.
func testConn() *conn {
	c1, c2 := net.Pipe()
	c1.Close()
	c2.Close()
	return &conn{nc: c1, allowed: true}
}
