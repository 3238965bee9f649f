package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/fusefs"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/smb"
	"github.com/atoll-fs/atoll/internal/testenv"
	"golang.org/x/sys/unix"
)

// smbGateway is an `atoll smb` process of a test.
type smbGateway struct {
	cmd  *exec.Cmd
	dir  string
	addr string
	done chan error
}

func needSMB(t *testing.T) string {
	t.Helper()
	fuseUsable(t)
	lookTool(t, "smbd")
	lookTool(t, "pdbedit")
	if err := (&smb.Config{Managers: []string{"x"}, Key: testKey, Listen: "127.0.0.1:1", Dir: "x"}).Validate(); err != nil {
		testenv.Missing(t, "%v (make setup installs it)", err)
	}
	return lookTool(t, "smbclient")
}

// startSMB starts a gateway serving the namespace's path as share
// "atoll" and waits until alice can list it.
func startSMB(t *testing.T, cl *devcluster.Cluster, dir, addr, path string) *smbGateway {
	t.Helper()
	g := &smbGateway{dir: dir, addr: addr, done: make(chan error, 1)}
	g.cmd = exec.Command(atoll(t), "smb", "--cluster", cl.Manager, "--dir", dir, "--listen", addr, "--path", path, "--log-level", "warn")
	g.cmd.Stdout, g.cmd.Stderr = os.Stderr, os.Stderr
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { g.done <- g.cmd.Wait() }()
	t.Cleanup(func() { g.stop(t) })
	waitEvent(t, "the SMB gateway serving", func() error {
		select {
		case err := <-g.done:
			g.done <- err
			t.Fatalf("atoll smb exited: %v", err)
		default:
		}
		_, err := g.client(t, "alice%pw-alice", "ls")
		return err
	})
	return g
}

// stop ends the gateway as its supervisor would (SIGTERM) and checks it
// took its smbd and its mount with it.
func (g *smbGateway) stop(t *testing.T) {
	if g.cmd.ProcessState != nil || g.cmd.Process == nil {
		return
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-g.done:
		g.done <- err
		if err != nil {
			t.Errorf("atoll smb after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = g.cmd.Process.Kill()
		t.Errorf("atoll smb did not stop within 30s of SIGTERM")
	}
}

// client runs smbclient's commands as user ("name%password").
func (g *smbGateway) client(t *testing.T, user, commands string) (string, error) {
	t.Helper()
	host, port, _ := strings.Cut(g.addr, ":")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "smbclient", "//"+host+"/atoll", "-p", port, "-U", user, "-c", commands).CombinedOutput()
	s := string(out)
	if err == nil && strings.Contains(s, "NT_STATUS_") {
		err = fmt.Errorf("smbclient: %s", strings.TrimSpace(s))
	}
	if err != nil {
		return s, fmt.Errorf("smbclient %q as %s: %v: %s", commands, strings.Split(user, "%")[0], err, strings.TrimSpace(s))
	}
	return s, nil
}

// TestSMBGateway: a dev cluster's namespace over SMB through `atoll smb`
// (smbd over the gateway's own mount), with the cluster's users: files
// written over SMB are alice's and read back exactly through the client
// library and a FUSE mount, and the other way round; wrong passwords,
// unknown and removed users are refused; POSIX permissions hold for SMB
// users as for any other; SIGTERM and kill -9 of the gateway leave no
// smbd or mount behind, and a new gateway on the same directory serves.
func TestSMBGateway(t *testing.T) {
	needSMB(t)
	cl, base := startDev(t, 3, 1, 2, nil)
	ctx := context.Background()
	conn := dialDev(t, cl)
	alice, bob := metawire.Cred{UID: 1000, GID: 1000}, metawire.Cred{UID: 2000, GID: 2000}
	share, err := conn.FS.MkdirAll(ctx, metawire.Root, "/share", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.FS.SetAttr(ctx, metawire.SetAttrReq{Cred: metawire.Root, Ino: share.Ino, Valid: metawire.SetUID | metawire.SetGID, UID: 1000, GID: 1000}); err != nil {
		t.Fatal(err)
	}
	users := func(stdin string, args ...string) {
		t.Helper()
		cmd := exec.Command(atoll(t), append(append([]string{"smb", "user"}, args...), "--cluster", cl.Manager)...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("atoll smb user %v: %v: %s", args, err, out)
		}
	}
	users("pw-alice\n", "add", "alice", "--uid", "1000", "--gid", "1000")
	users("", "add", "carol", "--uid", "3000", "--gid", "3000", "--password", "pw-carol")

	dir := filepath.Join(t.TempDir(), "smb")
	searchableToAll(t, dir)
	addr := fmt.Sprintf("127.0.0.1:%d", base+2+3+1)
	g := startSMB(t, cl, dir, addr, "/share")
	waitEvent(t, "the SMB gateway listed by atoll status", func() error {
		out, err := exec.Command(atoll(t), "status", "--json", "--cluster", cl.Manager).Output()
		if err != nil {
			return err
		}
		var st struct {
			Members []struct{ Kind, Addr, State, Role string }
		}
		if err := json.Unmarshal(out, &st); err != nil {
			return err
		}
		for _, m := range st.Members {
			if m.Kind == "gateway" && m.Addr == addr && m.State == "up" && strings.HasPrefix(m.Role, "SMB gateway at "+addr) {
				return nil
			}
		}
		return fmt.Errorf("no SMB gateway at %s among %+v", addr, st.Members)
	})

	// Over SMB, then read through the library and a FUSE mount.
	data := make([]byte, 3<<20+12345)
	rand.Read(data)
	local := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(t.TempDir(), "back.bin")
	if _, err := g.client(t, "alice%pw-alice", fmt.Sprintf("put %s big.bin; mkdir d; rename big.bin d/big2.bin; put %s gone.bin; del gone.bin; get d/big2.bin %s", local, local, back)); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("SMB get of what SMB put: %d bytes, %v", len(got), err)
	}
	f, err := conn.FS.OpenPath(ctx, metawire.Root, "/share/d/big2.bin")
	if err != nil {
		t.Fatal(err)
	}
	a := f.Attr()
	got := make([]byte, len(data)+1)
	n, _ := f.ReadAt(ctx, got, 0)
	f.Release()
	if n != len(data) || !bytes.Equal(got[:n], data) || a.UID != 1000 || a.GID != 1000 {
		t.Fatalf("the file SMB wrote, through the library: %d bytes (right: %v), uid %d gid %d", n, bytes.Equal(got[:n], data), a.UID, a.GID)
	}
	if _, err := conn.FS.Resolve(ctx, metawire.Root, "/share/gone.bin"); metawire.Errno(err) != syscall.ENOENT {
		t.Fatalf("a file deleted over SMB: %v", err)
	}
	_, mnt := mountFS(t, conn.FS)
	if got, err := os.ReadFile(filepath.Join(mnt, "share", "d", "big2.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the file SMB wrote, through a FUSE mount: %d bytes, %v", len(got), err)
	}

	// Written elsewhere (the library as alice), read over SMB.
	other := bytes.Repeat([]byte("from the library. "), 5000)
	if err := conn.FS.WriteFile(ctx, alice, "/share/lib.txt", other, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := g.client(t, "alice%pw-alice", "get lib.txt "+back); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, other) {
		t.Fatalf("SMB get of a file the library wrote: %d bytes", len(got))
	}

	// POSIX permissions hold for SMB users: bob's 0600 file is not
	// alice's to read; carol may not write in alice's 0755 directory.
	if err := conn.FS.WriteFile(ctx, metawire.Root, "/share/bob.txt", []byte("bob's"), 0o600); err != nil {
		t.Fatal(err)
	}
	ba, err := conn.FS.Resolve(ctx, metawire.Root, "/share/bob.txt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.FS.SetAttr(ctx, metawire.SetAttrReq{Cred: metawire.Root, Ino: ba.Ino, Valid: metawire.SetUID | metawire.SetGID, UID: bob.UID, GID: bob.GID}); err != nil {
		t.Fatal(err)
	}
	if out, err := g.client(t, "alice%pw-alice", "get bob.txt "+back); err == nil || !strings.Contains(out, "NT_STATUS_ACCESS_DENIED") {
		t.Errorf("alice reading bob's 0600 file over SMB: %v", err)
	}
	if out, err := g.client(t, "carol%pw-carol", "put "+local+" carol.bin"); err == nil || !strings.Contains(out, "NT_STATUS_ACCESS_DENIED") {
		t.Errorf("carol writing in alice's 0755 directory over SMB: %v", err)
	}

	// Logons: a wrong password, an unknown user; a removed user within
	// the gateway's users refresh.
	for _, u := range []string{"alice%wrong", "mallory%pw-alice"} {
		if out, err := g.client(t, u, "ls"); err == nil || !strings.Contains(out, "NT_STATUS_LOGON_FAILURE") {
			t.Errorf("logon as %s: %v", u, err)
		}
	}
	users("", "remove", "carol")
	waitEvent(t, "carol refused after her removal", func() error {
		if out, err := g.client(t, "carol%pw-carol", "ls"); err == nil || !strings.Contains(out, "NT_STATUS_LOGON_FAILURE") {
			return fmt.Errorf("carol's logon: %v", err)
		}
		return nil
	})

	// SIGTERM: the gateway stops its smbd and its mount.
	mntDir := filepath.Join(dir, "mnt")
	g.stop(t)
	checkGone := func(why string) {
		t.Helper()
		waitEvent(t, "no smbd or mount left "+why, func() error {
			if out, _ := exec.Command("pgrep", "-f", "smbd -s "+filepath.Join(dir, "smb.conf")).Output(); len(out) > 0 {
				return fmt.Errorf("smbd still running: %s", out)
			}
			if fusefs.IsMountpoint(mntDir) {
				return fmt.Errorf("%s still mounted", mntDir)
			}
			return nil
		})
	}
	checkGone("after SIGTERM")

	// kill -9: its children follow it, and a new gateway serves.
	g = startSMB(t, cl, dir, addr, "/share")
	_ = g.cmd.Process.Kill()
	<-g.done
	g.done <- nil
	checkGone("after kill -9")
	g = startSMB(t, cl, dir, addr, "/share")
	if _, err := g.client(t, "alice%pw-alice", "get d/big2.bin "+back); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Fatal("the file after the gateway's restart differs")
	}
}

// smbLocker runs testdata/smblock.py: an SMB2 client that takes an
// exclusive byte-range lock through a gateway and holds it until
// release.
type smbLocker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	first string // "granted" or "conflict STATUS"
}

func smbLock(t *testing.T, g *smbGateway, user, pass, name string, off, n int64) *smbLocker {
	t.Helper()
	host, port, _ := strings.Cut(g.addr, ":")
	l := &smbLocker{cmd: exec.Command("python3", filepath.Join("testdata", "smblock.py"), host, port, "atoll", user, pass, name, fmt.Sprint(off), fmt.Sprint(n))}
	var err error
	if l.stdin, err = l.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := l.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	l.cmd.Stderr = &errb
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	l.first = strings.TrimSpace(line)
	if l.first == "" {
		_ = l.cmd.Wait()
		t.Fatalf("smblock.py printed nothing: %s", errb.String())
	}
	t.Cleanup(l.release)
	return l
}

func (l *smbLocker) release() {
	if l.cmd.ProcessState == nil {
		l.stdin.Close()
		_ = l.cmd.Wait()
	}
}

// TestSMBLocksAcrossGatewaysAndMounts: SMB byte-range locks are the
// cluster's locks. A lock held through a FUSE mount refuses the same
// range to an SMB client (another range is granted); a lock held through
// one gateway refuses the range through a second gateway and through the
// mount; released, the other gateway gets it.
func TestSMBLocksAcrossGatewaysAndMounts(t *testing.T) {
	needSMB(t)
	if err := exec.Command("python3", "-c", "import smbprotocol").Run(); err != nil {
		testenv.Missing(t, "python3's smbprotocol is not installed (make setup installs it)")
	}
	cl, base := startDev(t, 3, 1, 3, nil)
	ctx := context.Background()
	conn := dialDev(t, cl)
	share, err := conn.FS.MkdirAll(ctx, metawire.Root, "/share", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	_ = share
	cmd := exec.Command(atoll(t), "smb", "user", "add", "alice", "--uid", "1000", "--gid", "1000", "--password", "pw-alice", "--cluster", cl.Manager)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := conn.FS.WriteFile(ctx, metawire.Cred{UID: 1000, GID: 1000}, "/share/lock.dat", bytes.Repeat([]byte("x"), 4096), 0o666); err != nil {
		t.Fatal(err)
	}
	var gws []*smbGateway
	for i := range 2 {
		dir := filepath.Join(t.TempDir(), "smb")
		searchableToAll(t, dir)
		gws = append(gws, startSMB(t, cl, dir, fmt.Sprintf("127.0.0.1:%d", base+2+3+1+i), "/share"))
	}
	_, mnt := mountFS(t, conn.FS)
	f := openRW(t, filepath.Join(mnt, "share", "lock.dat"))

	// Held through the mount: refused over SMB, another range granted.
	if _, err := posixLock(f, unix.F_SETLK, unix.F_WRLCK, 0, 100); err != nil {
		t.Fatal(err)
	}
	if l := smbLock(t, gws[0], "alice", "pw-alice", "lock.dat", 50, 10); !strings.HasPrefix(l.first, "conflict") {
		t.Fatalf("SMB lock over a range the mount holds: %s", l.first)
	}
	other := smbLock(t, gws[0], "alice", "pw-alice", "lock.dat", 200, 10)
	if other.first != "granted" {
		t.Fatalf("SMB lock beside the mount's range: %s", other.first)
	}
	other.release()
	if _, err := posixLock(f, unix.F_SETLK, unix.F_UNLCK, 0, 100); err != nil {
		t.Fatal(err)
	}

	// Held through gateway 1: refused through gateway 2 and the mount.
	held := smbLock(t, gws[0], "alice", "pw-alice", "lock.dat", 1000, 100)
	if held.first != "granted" {
		t.Fatalf("SMB lock through gateway 1: %s", held.first)
	}
	if l := smbLock(t, gws[1], "alice", "pw-alice", "lock.dat", 1050, 10); !strings.HasPrefix(l.first, "conflict") {
		t.Fatalf("the same range through gateway 2: %s", l.first)
	}
	wantErrno(t, "the same range through the mount", func() error {
		_, err := posixLock(f, unix.F_SETLK, unix.F_WRLCK, 1090, 20)
		return err
	}(), syscall.EAGAIN)
	held.release()
	waitEvent(t, "gateway 2 granted the range gateway 1 released", func() error {
		l := smbLock(t, gws[1], "alice", "pw-alice", "lock.dat", 1050, 10)
		defer l.release()
		if l.first != "granted" {
			return fmt.Errorf("%s", l.first)
		}
		return nil
	})

	// A lock holder's gateway killed with -9: its smbd goes with it, so
	// the lock is released (its mount's lock session ends) and the range
	// is granted through the other gateway; what was written through the
	// killed gateway reads whole through the other.
	data := make([]byte, 1<<20+7)
	rand.Read(data)
	local := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := gws[0].client(t, "alice%pw-alice", "put "+local+" written.bin"); err != nil {
		t.Fatal(err)
	}
	held = smbLock(t, gws[0], "alice", "pw-alice", "lock.dat", 3000, 100)
	if held.first != "granted" {
		t.Fatalf("SMB lock through gateway 1: %s", held.first)
	}
	_ = gws[0].cmd.Process.Kill()
	<-gws[0].done
	gws[0].done <- nil
	waitEvent(t, "gateway 2 granted the range of the killed gateway's client", func() error {
		l := smbLock(t, gws[1], "alice", "pw-alice", "lock.dat", 3000, 100)
		defer l.release()
		if l.first != "granted" {
			return fmt.Errorf("%s", l.first)
		}
		return nil
	})
	back := filepath.Join(t.TempDir(), "back.bin")
	if _, err := gws[1].client(t, "alice%pw-alice", "get written.bin "+back); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Fatalf("a file written through the killed gateway, through the other: %d bytes", len(got))
	}
}
