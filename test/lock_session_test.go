package test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/devcluster"
)

// Lock sessions end with their term, never before: a dead client's
// locks are released after it, a client cut off for longer learns it
// lost them before it writes under them, and an island's failover keeps
// every lock and waiter. Real processes: a dev cluster, an `atoll mount`
// child that holds the locks, and a mount in this process.

const testLockTerm = 3 * time.Second

// lockCluster starts a dev cluster of one island with a short lock term
// and an `atoll mount` child; it returns the child's mountpoint and a
// mount of the same cluster in this process.
func lockCluster(t *testing.T) (cl *devcluster.Cluster, childMnt, mnt string) {
	t.Helper()
	fuseUsable(t)
	cl, _ = startDev(t, 5, 1, 1, func(c *devcluster.Config) {
		c.Mount = filepath.Join(t.TempDir(), "mnt")
		c.LockTerm = testLockTerm
		c.CleanInterval = -1
		// A member (it reports its figures to `atoll status`).
		c.MountArgs = []string{"--metrics-listen", "127.0.0.1:0"}
	})
	childMnt = cl.Child("mount").Addr
	// A killed mount leaves its mountpoint dead (ENOTCONN) until it is
	// unmounted.
	t.Cleanup(func() { _ = syscall.Unmount(childMnt, syscall.MNT_DETACH) })
	conn := dialDev(t, cl)
	_, mnt = mountFS(t, conn.FS)
	return cl, childMnt, mnt
}

// TestLockReleasedAfterMountKill9: a mount process killed -9 while one
// of its processes holds a lock: the other mount still cannot take it
// right after (the session lives its term), and gets it within a term
// and the island's sweep.
func TestLockReleasedAfterMountKill9(t *testing.T) {
	cl, ma, mb := lockCluster(t)
	if err := os.WriteFile(filepath.Join(ma, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	fa, err := os.OpenFile(filepath.Join(ma, "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	if _, err := posixLock(fa, unix.F_SETLK, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	fb := openRW(t, filepath.Join(mb, "f"))
	_, err = posixLock(fb, unix.F_SETLK, unix.F_WRLCK, 0, 0)
	wantErrno(t, "lock held through the other mount", err, syscall.EAGAIN)

	cl.Child("mount").Kill()
	killed := time.Now()
	_, err = posixLock(fb, unix.F_SETLK, unix.F_WRLCK, 0, 0)
	if early := time.Since(killed); early < testLockTerm/2 {
		wantErrno(t, "lock of a killed mount right after the kill", err, syscall.EAGAIN)
	}
	waitEvent(t, "the killed mount's lock released", func() error {
		_, err := posixLock(fb, unix.F_SETLK, unix.F_WRLCK, 0, 0)
		return err
	})
	took := time.Since(killed)
	t.Logf("lock released %v after the holder's mount was killed (term %v)", took.Round(time.Millisecond), testLockTerm)
	if took < testLockTerm/2 {
		t.Fatalf("released %v after the kill: before the session's term (%v) could have run out", took, testLockTerm)
	}
	if took > testLockTerm+15*time.Second {
		t.Fatalf("released only %v after the kill (term %v)", took, testLockTerm)
	}
}

// TestLockLostByAStoppedMountFailsItsWrites: the mount holding a lock
// stops (SIGSTOP: its renewals stop as in a partition) for longer than
// the term; the island ends its session and the other mount takes the
// lock and writes. When the holder's mount runs again, its process's
// next write under the lock it lost fails with EIO and lands nowhere.
func TestLockLostByAStoppedMountFailsItsWrites(t *testing.T) {
	cl, ma, mb := lockCluster(t)
	p := "f"
	if err := os.WriteFile(filepath.Join(ma, p), []byte("AAAA"), 0o644); err != nil {
		t.Fatal(err)
	}
	fa, err := os.OpenFile(filepath.Join(ma, p), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	if _, err := posixLock(fa, unix.F_SETLK, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	child := cl.Child("mount")
	if err := child.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			_ = child.Signal(syscall.SIGCONT)
		}
	}()
	fb := openRW(t, filepath.Join(mb, p))
	waitEvent(t, "the stopped mount's lock released", func() error {
		_, err := posixLock(fb, unix.F_SETLK, unix.F_WRLCK, 0, 0)
		return err
	})
	t.Logf("lock of the stopped mount released after %v", time.Since(stopped).Round(time.Millisecond))
	if _, err := fb.WriteAt([]byte("BBBB"), 0); err != nil {
		t.Fatal(err)
	}
	if err := fb.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := child.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
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
	if _, err := posixLock(fb, unix.F_SETLK, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	// The other mount's bytes stand, through both mounts.
	for _, dir := range []string{mb, ma} {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != "BBBB" {
			t.Fatalf("through %s after the lost lock's write: %q, want BBBB", dir, b)
		}
	}
}

// TestLocksSurviveIslandLeaderKill9: the leader of the island holding a
// lock and a waiter is killed; the new leader has the lock (another
// description is refused it), the waiter is granted only when the
// holder unlocks, and then the holder cannot take it back: nothing is
// granted twice.
func TestLocksSurviveIslandLeaderKill9(t *testing.T) {
	fuseUsable(t)
	cl, conn, ma := mountReplicated(t, nil)
	conn2, err := connect.Dial(context.Background(), []string{cl.Manager}, testKey, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn2.Close() })
	_, mb := mountFS(t, conn2.FS)
	dir := dirOnIsland(t, conn, ma, 2)
	name := filepath.Base(dir)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	fa := openRW(t, filepath.Join(dir, "f"))
	if _, err := posixLock(fa, unix.F_SETLK, unix.F_WRLCK, 0, 10); err != nil {
		t.Fatal(err)
	}
	fb := openRW(t, filepath.Join(mb, name, "f"))
	granted := make(chan error, 1)
	go func() {
		_, err := posixLock(fb, unix.F_SETLKW, unix.F_WRLCK, 5, 1)
		granted <- err
	}()
	time.Sleep(time.Second) // the wait reaches the island
	cl.Child("island2").Kill()
	probe := openRW(t, filepath.Join(mb, name, "f"))
	waitEvent(t, "the lock answered by island 2's new leader", func() error {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 0}
		if err := unix.FcntlFlock(probe.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
			return err
		}
		if lk.Type != unix.F_WRLCK || lk.Start != 0 || lk.Len != 10 {
			t.Fatalf("after the failover the lock is %+v, want the holder's write lock 0+10", lk)
		}
		leaders := islandLeaders(t, cl, conn)
		if c := leaders[2]; c == nil || c.Name == "island2" {
			return errors.New("island 2 not failed over yet")
		}
		return nil
	})
	select {
	case err := <-granted:
		t.Fatalf("the waiter was granted (%v) while the holder still held the lock", err)
	default:
	}
	if _, err := posixLock(fa, unix.F_SETLK, unix.F_UNLCK, 0, 10); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatalf("the waiter: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was not granted 30 s after the unlock")
	}
	_, err = posixLock(fa, unix.F_SETLK, unix.F_WRLCK, 0, 10)
	wantErrno(t, "the old holder asking again while the waiter holds byte 5", err, syscall.EAGAIN)
}
