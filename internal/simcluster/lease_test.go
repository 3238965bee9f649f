package simcluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/simnet"
)

// TestPartitionedMountServesNoStaleName: a FUSE mount holds a lease on a
// directory (its kernel caches the names there), then is cut from the
// island; another client replaces a name in that directory, which the
// island applies only once the mount's lease ended unbroken. From then
// on, looking the name up through the partitioned mount must never give
// the replaced file: it fails with an error after a bounded wait (it
// cannot reach the island); after the heal it gives the new one.
func TestPartitionedMountServesNoStaleName(t *testing.T) {
	// lookupBound is far above what a lookup through the cut-off mount
	// should take (per FUSE request about wire.DefaultPeerTimeout for the
	// connection and the same for a dial; the kernel sends a stat two or
	// three): a liveness bound, not a timing.
	const lookupBound = 5 * time.Minute
	needSimHostsAndFUSE(t)
	exe := buildAtoll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root := t.TempDir()
	cfg := Config{
		Exe: exe, Dir: filepath.Join(root, "data"),
		Storage: 3, Islands: 1, Mount: filepath.Join(root, "mnt"),
	}
	cl, sn := startOnSimHosts(ctx, t, "sl", &cfg)

	dir := filepath.Join(cfg.Mount, "leased")
	name := filepath.Join(dir, "x")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	inoOf := func(fi os.FileInfo) uint64 { return fi.Sys().(*syscall.Stat_t).Ino }
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	oldIno := inoOf(fi)

	// The other client: the library in this process, on the caller's host.
	key, err := cl.Key()
	if err != nil {
		t.Fatal(err)
	}
	other, err := connect.Dial(ctx, []string{cl.Manager}, key, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	d, err := other.FS.Resolve(ctx, metawire.Root, "/leased")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.FS.WriteFile(ctx, metawire.Root, "/leased/y", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The mount reads the directory under its lease: the kernel keeps the
	// name for as long as the lease lasts (longer than --entry-timeout).
	for range 3 {
		if _, err := os.Stat(name); err != nil {
			t.Fatal(err)
		}
		if _, err := os.ReadDir(dir); err != nil {
			t.Fatal(err)
		}
	}

	// Otherwise the test proves nothing: the mount must hold leases.
	mountMetric := func(name string) string {
		t.Helper()
		resp, err := http.Get("http://" + cl.Role("mount").Metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if m := regexp.MustCompile(`(?m)^` + name + ` ([0-9.e+]+)$`).FindSubmatch(body); m != nil {
			return string(m[1])
		}
		t.Fatalf("the mount's metrics have no %s", name)
		return ""
	}
	if n := mountMetric("atoll_client_leases"); n == "0" {
		t.Fatalf("the mount holds no lease before the partition (atoll_client_leases %s)", n)
	}

	if err := sn.Partition(ctx, "cl", "i1", simnet.Both); err != nil {
		t.Fatal(err)
	}
	healed := false
	heal := func() {
		if !healed {
			healed = true
			if err := sn.Heal(ctx, "cl", "i1"); err != nil {
				t.Error(err)
			}
		}
	}
	defer heal()

	// Replace x; the island waits for the mount's lease (its break cannot
	// reach the mount) and then applies the rename.
	start := time.Now()
	if err := other.FS.Rename(ctx, metawire.RenameReq{Cred: metawire.Root, SrcDir: d.Ino, SrcName: "y", DstDir: d.Ino, DstName: "x"}); err != nil {
		t.Fatalf("rename over x while the mount holding the lease is cut off: %v", err)
	}
	replaced := time.Now()
	t.Logf("the rename waited %v for the cut-off mount's lease", replaced.Sub(start).Round(time.Millisecond))
	newAttr, err := other.FS.Resolve(ctx, metawire.Root, "/leased/x")
	if err != nil {
		t.Fatal(err)
	}

	// Look x up through the partitioned mount, several times, each in
	// its own goroutine (a lookup that needs the island may wait for it).
	type result struct {
		start time.Time
		ino   uint64
		err   error
	}
	var pending []chan result
	for range 5 {
		ch := make(chan result, 1)
		pending = append(pending, ch)
		go func() {
			r := result{start: time.Now()}
			fi, err := os.Stat(name)
			if r.err = err; err == nil {
				r.ino = inoOf(fi)
			}
			ch <- r
		}()
		time.Sleep(300 * time.Millisecond) // spread over the partition: not a synchronisation
	}
	check := func(r result, when string) {
		t.Helper()
		switch {
		case r.err != nil && errors.Is(r.err, os.ErrNotExist):
			t.Errorf("%s: stat x: %v (x exists: it was replaced, not removed)", when, r.err)
		case r.err != nil:
			t.Logf("%s: stat x through the cut-off mount failed after %v: %v", when, time.Since(r.start).Round(time.Millisecond), r.err)
		case r.ino == oldIno:
			t.Errorf("%s: stat x gave inode %d, the file replaced %v before the lookup started: a stale name", when, r.ino, r.start.Sub(replaced).Round(time.Millisecond))
		case r.ino != newAttr.Ino:
			t.Errorf("%s: stat x gave inode %d, neither the old (%d) nor the new (%d)", when, r.ino, oldIno, newAttr.Ino)
		default:
			t.Logf("%s: stat x gave the new file", when)
		}
	}
	// A lookup the mount cannot answer fails after a bounded wait (the
	// connection to the silent island is given up: wire's PeerTimeout,
	// then the client's IslandWait), not the quarter of an hour TCP
	// retransmits. The kernel serialises lookups of one name, so the
	// first one is waited for cut off, the others once healed.
	select {
	case r := <-pending[0]:
		check(r, "partitioned")
	case <-time.After(lookupBound):
		t.Fatalf("a lookup through the cut-off mount still waits after %v: want an error once the island is given up", lookupBound)
	}
	// The island is given up on now (client: unreachable.go): a lookup
	// of a name the mount never saw fails at once, counted, instead of
	// waiting as long again.
	before := mountMetric("atoll_client_unreachable_fails_total")
	if _, err := os.Stat(filepath.Join(dir, "never")); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat of a name never seen, through the cut-off mount: %v, want an I/O error", err)
	}
	if after := mountMetric("atoll_client_unreachable_fails_total"); after == before {
		t.Errorf("no request of the cut-off mount failed at once (atoll_client_unreachable_fails_total %s): its island was not given up on", after)
	}
	heal()
	for _, ch := range pending[1:] {
		select {
		case r := <-ch:
			check(r, "answered after the heal")
		case <-ctx.Done():
			t.Fatal("a lookup through the mount never returned after the heal")
		}
	}

	// Healed: the mount serves the new x (retrying while it reconnects).
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(name)
		if err == nil && string(b) == "new" {
			break
		}
		if err == nil || time.Now().After(deadline) {
			t.Fatalf("after the heal, x through the mount: %q, %v; want \"new\"", b, err)
		}
		time.Sleep(200 * time.Millisecond) // polling for the reconnect, not synchronising
	}
}
