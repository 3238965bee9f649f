package test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/atoll-fs/atoll/internal/auth"
)

// locksOut is what `atoll locks --json` prints.
type locksOut struct {
	Files []struct {
		Path    string    `json:"path"`
		Held    []lockOut `json:"held"`
		Waiting []lockOut `json:"waiting"`
		OpenBy  []string  `json:"open_by"`
		Error   string    `json:"error"`
	} `json:"files"`
}

type lockOut struct {
	Kind    string  `json:"kind"`
	Type    string  `json:"type"`
	Start   uint64  `json:"start"`
	End     *uint64 `json:"end"`
	Range   string  `json:"range"`
	Session string  `json:"session"`
	Owner   string  `json:"owner"`
	Pid     uint32  `json:"pid"`
}

// TestCLILocksListAndEndSession: locks taken through a FUSE mount of a
// dev cluster are what `atoll locks` lists (the holder's kind, type,
// range, session and pid, in JSON and in the table); `atoll locks
// --end-session` with a key lacking admin is refused and releases
// nothing; with the admin key it releases the mount's locks at once (no
// waiting for the session's term), and another mount then takes the
// range.
func TestCLILocksListAndEndSession(t *testing.T) {
	fuseUsable(t)
	cl, _ := startDev(t, 3, 1, 0, nil)
	ca, cb := dialDev(t, cl), dialDev(t, cl)
	_, ma := mountFS(t, ca.FS)
	_, mb := mountFS(t, cb.FS)
	if err := os.WriteFile(filepath.Join(ma, "f"), []byte("locked data"), 0o644); err != nil {
		t.Fatal(err)
	}
	fa, fb := openRW(t, filepath.Join(ma, "f")), openRW(t, filepath.Join(mb, "f"))
	if _, err := posixLock(fa, unix.F_SETLK, unix.F_WRLCK, 100, 50); err != nil {
		t.Fatalf("write lock 100+50 through mount a: %v", err)
	}
	if _, err := posixLock(fa, unix.F_SETLK, unix.F_RDLCK, 1000, 0); err != nil {
		t.Fatalf("read lock 1000..EOF through mount a: %v", err)
	}
	if _, err := posixLock(fb, unix.F_SETLK, unix.F_WRLCK, 120, 1); errnoOf(err) != syscall.EAGAIN {
		t.Fatalf("write lock through mount b on a's range: %v, want EAGAIN", err)
	}
	session := fmt.Sprintf("%016x", ca.FS.LockSession())
	if ca.FS.LockSession() == 0 {
		t.Fatal("mount a holds locks but has no lock session")
	}

	run := func(key string, args ...string) (string, error) {
		t.Helper()
		args = append([]string{"locks", "--cluster", cl.Manager}, args...)
		if key != "" {
			args = append(args, "--key", key)
		}
		out, err := exec.Command(atoll(t), args...).CombinedOutput()
		return string(out), err
	}
	list := func() locksOut {
		t.Helper()
		out, err := run("", "--json", "/f")
		if err != nil {
			t.Fatalf("atoll locks --json /f: %v\n%s", err, out)
		}
		var lo locksOut
		if err := json.Unmarshal([]byte(out), &lo); err != nil {
			t.Fatalf("atoll locks --json: %v\n%s", err, out)
		}
		if len(lo.Files) != 1 || lo.Files[0].Path != "/f" || lo.Files[0].Error != "" {
			t.Fatalf("atoll locks --json /f: files %+v, want /f alone", lo.Files)
		}
		return lo
	}

	// Mount a's two locks, exactly.
	lo := list()
	held, pid := lo.Files[0].Held, uint32(os.Getpid())
	if len(held) != 2 || len(lo.Files[0].Waiting) != 0 {
		t.Fatalf("held %+v, waiting %+v: want mount a's two locks and no waiter", held, lo.Files[0].Waiting)
	}
	w, r := held[0], held[1]
	if w.Kind != "posix" || w.Type != "write" || w.Start != 100 || w.End == nil || *w.End != 149 || w.Range != "100-149" ||
		w.Session != session || w.Pid != pid || w.Owner == "" {
		t.Errorf("first lock %+v (end %v), want posix write 100-149 of session %s pid %d", w, w.End, session, pid)
	}
	if r.Kind != "posix" || r.Type != "read" || r.Start != 1000 || r.End != nil || r.Range != "1000-EOF" ||
		r.Session != session || r.Owner != w.Owner || r.Pid != pid {
		t.Errorf("second lock %+v, want posix read 1000-EOF (end null) of the same owner", r)
	}
	// Both mounts have it open: their sessions hold it at the island.
	if ob := lo.Files[0].OpenBy; !slices.Contains(ob, session) || len(ob) != 2 {
		t.Errorf("open_by %q, want mount a's session %s and mount b's", ob, session)
	}
	out, err := run("", "/f")
	if err != nil {
		t.Fatalf("atoll locks /f: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^/f\s+open\s+-\s+-\s+-\s+` + session).MatchString(out) {
		t.Errorf("atoll locks /f printed:\n%s\nwant an open row of session %s", out, session)
	}
	row := fmt.Sprintf(`(?m)^/f\s+held\s+posix\s+write\s+100-149\s+%s\s+%s\s+%d$`, session, w.Owner, pid)
	if !regexp.MustCompile(row).MatchString(out) || !strings.Contains(out, "1000-EOF") {
		t.Errorf("atoll locks /f printed:\n%s\nwant a row matching %s and the 1000-EOF lock", out, row)
	}

	// A mount's key (no admin) may list but not end a session.
	user, err := testKey.Derive("mount", auth.CapRead|auth.CapWrite)
	if err != nil {
		t.Fatal(err)
	}
	userPath := filepath.Join(t.TempDir(), "mount.key")
	if err := auth.Save(userPath, user); err != nil {
		t.Fatal(err)
	}
	out, err = run(userPath, "--end-session", session)
	if err == nil || !strings.Contains(out, "needs capability admin") || !strings.Contains(out, `key "mount" has read,write`) {
		t.Fatalf("--end-session with a read,write key: %v\n%s\nwant refused for lack of admin", err, out)
	}
	if got := list().Files[0].Held; len(got) != 2 {
		t.Fatalf("after a refused --end-session: held %+v, want both locks still", got)
	}

	// The admin key ends it: both locks go now.
	out, err = run("", "--end-session", session)
	if err != nil || !strings.Contains(out, "2 locks released") {
		t.Fatalf("atoll locks --end-session %s: %v\n%s\nwant 2 locks released", session, err, out)
	}
	if got := list().Files[0].Held; len(got) != 0 {
		t.Fatalf("after --end-session: held %+v, want none", got)
	}
	if _, err := posixLock(fb, unix.F_SETLK, unix.F_WRLCK, 120, 1); err != nil {
		t.Fatalf("write lock through mount b after a's session ended: %v", err)
	}
	got := list().Files[0].Held
	if b := fmt.Sprintf("%016x", cb.FS.LockSession()); len(got) != 1 || got[0].Session != b || got[0].Range != "120-120" || got[0].Type != "write" {
		t.Fatalf("after mount b locked 120: held %+v, want its write lock 120-120 of session %s", got, b)
	}
}
