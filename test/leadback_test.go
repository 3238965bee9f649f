package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/replica"
)

// TestLeadNotHandedBackWhileManagersAway: the replica that took island 2
// over from its killed preferred server does not hand the lead back while
// the managers are down, although the preferred server has returned and
// caught up. A new leader registers the island's address with the
// managers, and clients find an island's leader only through the map: a
// lead handed over then leaves the island served by nobody clients can
// find until the managers return (a fault run's island answered nothing
// for 12 s that way). Every operation on island 2 through the mount
// succeeds while the managers are away, past the moment the lead would go
// back, and the lead goes back once they return.
func TestLeadNotHandedBackWhileManagersAway(t *testing.T) {
	fuseUsable(t)
	// Long enough for the killed server to restart and catch up before
	// its lead is offered back, with a margin for a slow machine.
	const leadBack = 15 * time.Second
	cl, conn, mnt := mountReplicated(t, func(c *devcluster.Config) { c.LeadBackAfter = leadBack })
	ctx := context.Background()
	dir := dirOnIsland(t, conn, mnt, 2)
	sv2, ok := conn.View.Map().IslandServer(2)
	if !ok {
		t.Fatal("island server 2 is not in the map")
	}

	cl.Child("island2").Kill()
	var led time.Time
	waitEvent(t, "island 2 led by another server", func() error {
		if c := islandLeaders(t, cl, conn)[2]; c == nil || c.Name == "island2" {
			return fmt.Errorf("led by %v", c)
		}
		led = time.Now()
		return nil
	})
	if _, err := cl.Restart(ctx, "island2"); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, "island server 2's replica of island 2 ready", func() error {
		p, ok, err := replica.ProbeReplica(sv2.RaftAddr, testKey, 2, time.Second)
		if err != nil || !ok || !p.Ready || p.Applied == 0 {
			return fmt.Errorf("%+v %v %v", p, ok, err)
		}
		return nil
	})
	cl.Child("manager").Kill()
	if p, _, err := replica.ProbeReplica(sv2.RaftAddr, testKey, 2, time.Second); err != nil || p.Leader {
		t.Fatalf("island server 2 led island 2 again before the managers went (%v after the failover; the test needs less): %v", time.Since(led).Round(time.Millisecond), err)
	}
	t.Logf("managers killed %v after island 2 failed over; its lead would go back at %v", time.Since(led).Round(time.Millisecond), leadBack)

	// Past the offer, and past a client's wait for an unavailable
	// island (IslandWait, 6 s), every operation succeeds.
	n := 0
	for time.Since(led) < leadBack+10*time.Second {
		p, data := numbered(dir, n)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatalf("write %d, %v after the failover, managers away: %v", n, time.Since(led).Round(time.Millisecond), err)
		}
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %d back: %d bytes, %v", n, len(got), err)
		}
		n++
		time.Sleep(50 * time.Millisecond)
	}
	if p, _, err := replica.ProbeReplica(sv2.RaftAddr, testKey, 2, time.Second); err != nil || p.Leader {
		t.Fatalf("island server 2 took island 2's lead while the managers were away: %v", err)
	}
	t.Logf("%d files written and read on island 2 with the managers away", n)

	if _, err := cl.Restart(ctx, "manager"); err != nil {
		t.Fatal(err)
	}
	waitPreferredLeaders(t, cl, conn, 3)
	checkNumbered(t, dir, n, "after the lead went back")
}

// TestFailoverWhileManagersAway: with the managers down, island 2's
// leader is killed. Its new leader cannot register the island's address
// (the map keeps naming the dead server), and clients and the other
// islands find it by asking the island servers (internal/leaderhint):
// every operation on island 2 through the mount succeeds across the
// failover, with the managers away throughout: writes and reads, mkdirs
// in island 2's directory and in one on island 1 (new directories mostly
// live on other islands than their parent's, so the islands call each
// other) and renames from island 1 to island 2; everything reads back
// once the managers and the killed server return.
func TestFailoverWhileManagersAway(t *testing.T) {
	fuseUsable(t)
	cl, conn, mnt := mountReplicated(t, nil)
	ctx := context.Background()
	dir := dirOnIsland(t, conn, mnt, 2)
	other := dirOnIsland(t, conn, mnt, 1)

	n := 0
	write := func(during string) {
		t.Helper()
		p, data := numbered(dir, n)
		if n%10 == 9 {
			// Written on island 1, then renamed to island 2: island 1
			// calls island 2.
			q := filepath.Join(other, fmt.Sprintf("f%04d", n))
			if err := os.WriteFile(q, data, 0o644); err != nil {
				t.Fatalf("write %d on island 1 %s: %v", n, during, err)
			}
			if err := os.Rename(q, p); err != nil {
				t.Fatalf("rename %d to island 2 %s: %v", n, during, err)
			}
		} else if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatalf("write %d %s: %v", n, during, err)
		}
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %d back %s: %d bytes, %v", n, during, len(got), err)
		}
		if n%5 == 4 {
			// New directories on island 2 and in island 2's directory:
			// some live on other islands, which call island 2 or are
			// called by it.
			for _, d := range []string{dir, other} {
				if err := os.Mkdir(filepath.Join(d, fmt.Sprintf("d%04d", n)), 0o755); err != nil {
					t.Fatalf("mkdir %d in %s %s: %v", n, d, during, err)
				}
			}
		}
		n++
	}
	cl.Child("manager").Kill()
	for range 20 {
		write("with the managers away")
	}
	cl.Child("island2").Kill()
	killed := time.Now()
	for time.Since(killed) < 15*time.Second {
		write("after island 2's leader was killed, the managers away")
		time.Sleep(20 * time.Millisecond)
	}
	if conn.FS.LeaderHints() == 0 {
		t.Fatal("no island leader found beside the map, yet island 2 served after its leader died with the managers away")
	}
	t.Logf("%d files written and read on island 2; %d unregistered leaders found", n, conn.FS.LeaderHints())

	if _, err := cl.Restart(ctx, "manager"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Restart(ctx, "island2"); err != nil {
		t.Fatal(err)
	}
	waitPreferredLeaders(t, cl, conn, 3)
	checkNumbered(t, dir, n, "after the managers and island server 2 returned")
	for k := 4; k < n; k += 5 { // the mkdirs
		for _, d := range []string{dir, other} {
			if fi, err := os.Stat(filepath.Join(d, fmt.Sprintf("d%04d", k))); err != nil || !fi.IsDir() {
				t.Fatalf("directory %d in %s after the managers and island server 2 returned: %v", k, d, err)
			}
		}
	}
	fsckClean(t, conn)
}

// numbered is file k of a test's series in dir: its path and contents.
func numbered(dir string, k int) (string, []byte) {
	return filepath.Join(dir, fmt.Sprintf("f%04d", k)), bytes.Repeat([]byte{byte(k)}, 100+k)
}

// checkNumbered fails the test unless files 0..n-1 of dir's series read
// back whole.
func checkNumbered(t *testing.T, dir string, n int, when string) {
	t.Helper()
	for k := range n {
		p, data := numbered(dir, k)
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s %s: %d bytes, %v", p, when, len(got), err)
		}
	}
}
