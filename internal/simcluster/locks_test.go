package simcluster

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/filelock"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/simnet"
)

// TestPartitionedLockHolderLosesItsLock: a FUSE mount on its own
// simulated host holds a POSIX write lock and has a file open that
// another client then unlinks; nftables cuts the mount's host from the
// island. The other client gets the lock once the mount's lock session
// ran out its term (not before half of it), writes under it, and the
// unlinked file is reclaimed with the session. After the heal, the cut-off
// holder's write and fsync under the lock it lost fail with EIO and land
// nowhere.
func TestPartitionedLockHolderLosesItsLock(t *testing.T) {
	const term = 3 * time.Second
	needSimHostsAndFUSE(t)
	exe := buildAtoll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root := t.TempDir()
	cfg := Config{
		Exe: exe, Dir: filepath.Join(root, "data"),
		Storage: 3, Islands: 1, Mount: filepath.Join(root, "mnt"),
		IslandArgs: []string{"--lock-term", term.String()},
	}
	cl, sn := startOnSimHosts(ctx, t, "sk", &cfg)

	dir := filepath.Join(cfg.Mount, "locks")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"f", "held"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("AAAA"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fa, err := os.OpenFile(filepath.Join(dir, "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	if err := unix.FcntlFlock(fa.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK}); err != nil {
		t.Fatalf("lock through the mount: %v", err)
	}
	held, err := os.Open(filepath.Join(dir, "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(held.Fd()), &st); err != nil {
		t.Fatal(err)
	}

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
	f, err := other.FS.Resolve(ctx, metawire.Root, "/locks/f")
	if err != nil {
		t.Fatal(err)
	}
	lk := filelock.Lock{Owner: filelock.Owner{ID: 7}, Kind: filelock.POSIX, Type: filelock.Write, End: filelock.MaxEnd}
	if _, err := other.FS.SetLock(ctx, metawire.Root, f.Ino, lk, false, nil); !errors.Is(err, metawire.ErrWouldBlock) {
		t.Fatalf("the other client's lock while the mount holds it: %v, want EWOULDBLOCK", err)
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
	cut := time.Now()
	// The unlink waits out the cut-off mount's lease on the directory;
	// the inode stays while the mount's session may live.
	d, err := other.FS.Resolve(ctx, metawire.Root, "/locks")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.FS.Unlink(ctx, metawire.Root, d.Ino, "held"); err != nil {
		t.Fatalf("unlink of a file the cut-off mount has open: %v", err)
	}
	if _, err := other.FS.SetLock(ctx, metawire.Root, f.Ino, lk, true, nil); err != nil {
		t.Fatalf("the other client's blocking lock: %v", err)
	}
	took := time.Since(cut)
	t.Logf("the cut-off mount's lock released %v after the partition (term %v)", took.Round(time.Millisecond), term)
	if took < term/2 {
		t.Fatalf("released %v after the partition: before the holder's session (%v) could have run out", took, term)
	}
	fo, err := other.FS.OpenPath(ctx, metawire.Root, "/locks/f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fo.WriteAt(ctx, []byte("BBBB"), 0); err != nil {
		t.Fatal(err)
	}
	if err := fo.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	fo.Release()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := other.FS.GetAttrFresh(ctx, metawire.Root, st.Ino)
		if errors.Is(err, metawire.ErrStale) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unlinked file the cut-off mount held: %v a minute after, want reclaimed with its session", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	heal()
	_, werr := fa.WriteAt([]byte("A2A2"), 0)
	serr := fa.Sync()
	if werr == nil && serr == nil {
		t.Fatal("the cut-off holder's write and fsync under its lost lock succeeded")
	}
	for _, err := range []error{werr, serr} {
		if err != nil && !errors.Is(err, syscall.EIO) {
			t.Fatalf("write under a lost lock: %v, want EIO", err)
		}
	}
	if err := other.FS.Unlock(ctx, metawire.Root, f.Ino, lk); err != nil {
		t.Fatal(err)
	}
	b, err := other.FS.ReadFile(ctx, metawire.Root, "/locks/f")
	if err != nil || !bytes.Equal(b, []byte("BBBB")) {
		t.Fatalf("the file after the cut-off holder's failed write: %q, %v; want the other client's BBBB", b, err)
	}
}
