package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// Open files that stay open (issue "POSIX as applications see it", its
// first bullet; the locks issue's SQLite writers need it): a file one
// mount holds open and another mount unlinks or renames over stays
// readable and writable through the open descriptor until it is closed,
// then the island reclaims it. Two mounts of one cluster stand for two
// hosts, as in the lock tests.

// readAllAt reads f from offset 0 to its end.
func readAllAt(t *testing.T, f *os.File) []byte {
	t.Helper()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<30))
	if err != nil {
		t.Fatalf("read through the open descriptor: %v", err)
	}
	return b
}

// waitReclaimed waits until the island no longer has ino (the last
// holder let go), as seen by fs.
func waitReclaimed(t *testing.T, fs *client.FS, ino uint64) {
	t.Helper()
	waitEvent(t, fmt.Sprintf("inode %x reclaimed", ino), func() error {
		_, err := fs.GetAttrFresh(context.Background(), metawire.Root, ino)
		if errors.Is(err, metawire.ErrStale) {
			return nil
		}
		return fmt.Errorf("getattr: %v (want ESTALE)", err)
	})
}

// TestFUSEOpenFileOutlivesRemovalOnAnotherMount: unlink and rename over
// through mount B while mount A has the file open (a file A created,
// held under A's exclusive lease and told to the island at B's recall;
// and a file B wrote, held at the island from A's open on). A's
// descriptor keeps reading the old bytes, its writes land and read back,
// fstat says nlink 0; the name is gone (or names the new file) for both
// mounts; A's close lets the island reclaim the inode and fsck is clean
// before and after.
func TestFUSEOpenFileOutlivesRemovalOnAnotherMount(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 1)
	fsa, fsb := fc.newFS(t), fc.newFS(t)
	_, ma := mountFS(t, fsa)
	_, mb := mountFS(t, fsb)
	old := bytes.Repeat([]byte("old bytes "), 3000) // past inline: blocks in stripes

	for k, tc := range []struct {
		name      string
		createdBy string // the mount that makes the directory and writes the file
		replace   bool   // rename a new file over it instead of unlinking it
	}{
		{"unlink of a file the holder created", ma, false},
		{"unlink of a file the other mount created", mb, false},
		{"rename over a file the holder created", ma, true},
		{"rename over a file the other mount created", mb, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := fmt.Sprintf("d%d", k)
			if err := os.Mkdir(filepath.Join(tc.createdBy, dir), 0o755); err != nil {
				t.Fatal(err)
			}
			name := filepath.Join(dir, "f")
			if err := os.WriteFile(filepath.Join(tc.createdBy, name), old, 0o644); err != nil {
				t.Fatal(err)
			}
			fa, err := os.OpenFile(filepath.Join(ma, name), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer fa.Close()
			var st syscall.Stat_t
			if err := syscall.Fstat(int(fa.Fd()), &st); err != nil {
				t.Fatal(err)
			}
			ino := st.Ino
			open, told := fsa.OpenHolds()
			t.Logf("mount A holds %d files open, %d of them told to the island", open, told)
			// The two ways of holding are both exercised: a file made in
			// a directory the holder made is held under its exclusive
			// lease (told at the other mount's recall), one the other
			// mount made is told at the open.
			if wantTold := 1; tc.createdBy == ma {
				if told != 0 {
					t.Fatalf("a file the holder made: %d holds told at open, want 0 (held under its exclusive lease)", told)
				}
			} else if told != wantTold {
				t.Fatalf("a file the other mount made: %d holds told at open, want %d", told, wantTold)
			}

			pb := filepath.Join(mb, name)
			if tc.replace {
				if err := os.WriteFile(pb+".new", []byte("the new file"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(pb+".new", pb); err != nil {
					t.Fatalf("rename over through mount B: %v", err)
				}
			} else if err := os.Remove(pb); err != nil {
				t.Fatalf("unlink through mount B: %v", err)
			}
			fc.checkFsck(t)

			if got := readAllAt(t, fa); !bytes.Equal(got, old) {
				t.Fatalf("mount A's descriptor after the removal read %d bytes (%.20q), want the %d old bytes", len(got), got, len(old))
			}
			if err := syscall.Fstat(int(fa.Fd()), &st); err != nil {
				t.Fatalf("fstat after the removal: %v", err)
			}
			if st.Nlink != 0 || st.Size != int64(len(old)) {
				t.Fatalf("fstat after the removal: nlink %d size %d, want 0 and %d", st.Nlink, st.Size, len(old))
			}
			// Writes through the descriptor land in the unlinked file.
			patch := []byte("PATCHED")
			if _, err := fa.WriteAt(patch, 100); err != nil {
				t.Fatalf("write to the removed file: %v", err)
			}
			if err := fa.Sync(); err != nil {
				t.Fatalf("fsync of the removed file: %v", err)
			}
			want := append([]byte(nil), old...)
			copy(want[100:], patch)
			if got := readAllAt(t, fa); !bytes.Equal(got, want) {
				t.Fatal("the removed file's own write did not read back")
			}
			for _, m := range []string{ma, mb} {
				b, err := os.ReadFile(filepath.Join(m, name))
				switch {
				case tc.replace && (err != nil || string(b) != "the new file"):
					t.Fatalf("%s after the rename over: %q, %v", m, b, err)
				case !tc.replace && !errors.Is(err, os.ErrNotExist):
					t.Fatalf("%s after the unlink: %v, want ENOENT", m, err)
				}
			}
			if err := fa.Close(); err != nil {
				t.Fatal(err)
			}
			waitReclaimed(t, fsb, ino)
			fc.checkFsck(t)
		})
	}
}

// TestOpenFileReclaimedAfterHolderKill9: an `atoll mount` process holding
// a file open is killed -9 after another mount unlinked the file: the
// inode stays while the dead mount's session may live, and is reclaimed
// within a session term and the island's sweep after the kill.
func TestOpenFileReclaimedAfterHolderKill9(t *testing.T) {
	cl, childMnt, mnt := lockCluster(t)
	conn := dialDev(t, cl)
	name := "held"
	if err := os.WriteFile(filepath.Join(mnt, name), []byte("held by a mount that dies"), 0o644); err != nil {
		t.Fatal(err)
	}
	fa, err := os.Open(filepath.Join(childMnt, name))
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(fa.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, name)); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(fa); err != nil || string(b) != "held by a mount that dies" {
		t.Fatalf("read through the child mount after the unlink: %q, %v", b, err)
	}
	if _, err := conn.FS.GetAttrFresh(context.Background(), metawire.Root, st.Ino); err != nil {
		t.Fatalf("the unlinked inode a live mount holds: %v", err)
	}
	// `atoll status` shows it: the island keeps an unlinked inode held
	// open, the mount holds a file open at its island.
	waitEvent(t, "atoll status shows the held unlinked file", func() error {
		out, err := exec.Command(atoll(t), "status", "--json", "--cluster", cl.Manager).Output()
		if err != nil {
			return err
		}
		var s struct {
			Members []struct {
				Kind  string `json:"kind"`
				Locks *struct {
					OpenHeld     uint64 `json:"open_held"`
					OpenUnlinked uint64 `json:"open_unlinked"`
				} `json:"locks"`
			} `json:"members"`
		}
		if err := json.Unmarshal(out, &s); err != nil {
			return err
		}
		var island, mount bool
		for _, m := range s.Members {
			if m.Locks == nil {
				continue
			}
			island = island || m.Kind == "island" && m.Locks.OpenUnlinked >= 1 && m.Locks.OpenHeld >= 1
			mount = mount || m.Kind == "gateway" && m.Locks.OpenHeld >= 1 // a mount with --metrics-listen
		}
		if !island || !mount {
			return fmt.Errorf("island shows it %v, mount %v:\n%s", island, mount, out)
		}
		return nil
	})
	cl.Child("mount").Kill()
	killed := time.Now()
	waitReclaimed(t, conn.FS, st.Ino)
	took := time.Since(killed)
	t.Logf("reclaimed %v after the holder's mount was killed (term %v)", took.Round(time.Millisecond), testLockTerm)
	if took < testLockTerm/2 {
		t.Fatalf("reclaimed %v after the kill: before the session's term (%v) could have run out", took, testLockTerm)
	}
	fsckClean(t, conn)
}

// TestFUSEOpenFileOutlivesRemovalOnTheSameMount: unlink and rename over
// through the mount that has the file open, as generic/035 and every
// "write a new version, rename it over" application do. The descriptor
// keeps the old bytes and takes writes; the directory shows no hidden
// name (the island keeps the inode, no rename aside), so it can be
// removed while the file is still open, as on ext4; the close lets the
// island reclaim the inode.
func TestFUSEOpenFileOutlivesRemovalOnTheSameMount(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 5, 1)
	fs, other := fc.newFS(t), fc.newFS(t)
	_, m := mountFS(t, fs)
	old := bytes.Repeat([]byte("same mount "), 2000)
	for _, replace := range []bool{false, true} {
		t.Run(fmt.Sprintf("replace=%v", replace), func(t *testing.T) {
			d := filepath.Join(m, fmt.Sprintf("d-%v", replace))
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(d, "f")
			if err := os.WriteFile(p, old, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var st syscall.Stat_t
			if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
				t.Fatal(err)
			}
			if replace {
				if err := os.WriteFile(p+".new", []byte("new version"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(p+".new", p); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if got := readAllAt(t, f); !bytes.Equal(got, old) {
				t.Fatalf("the descriptor read %d bytes after the removal, want the %d old ones", len(got), len(old))
			}
			if _, err := f.WriteAt([]byte("NEW"), 5); err != nil {
				t.Fatalf("write after the removal: %v", err)
			}
			if err := f.Sync(); err != nil {
				t.Fatalf("fsync after the removal: %v", err)
			}
			var st2 syscall.Stat_t
			if err := syscall.Fstat(int(f.Fd()), &st2); err != nil || st2.Nlink != 0 {
				t.Fatalf("fstat after the removal: nlink %d, %v (want 0)", st2.Nlink, err)
			}
			want := []string(nil)
			if replace {
				want = []string{"f"}
			}
			if got := dirNames(t, d); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("directory after the removal: %q, want %q (no hidden name)", got, want)
			}
			if replace {
				if b, err := os.ReadFile(p); err != nil || string(b) != "new version" {
					t.Fatalf("the name after the rename over: %q, %v", b, err)
				}
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Remove(d); err != nil {
				t.Fatalf("rmdir of the directory of a removed, still open file: %v", err)
			}
			if got := readAllAt(t, f); string(got[5:8]) != "NEW" || len(got) != len(old) {
				t.Fatalf("read back after rmdir: %d bytes, %q at 5", len(got), got[5:8])
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			waitReclaimed(t, fs, st.Ino)
			waitReclaimed(t, other, st.Ino)
			fc.checkFsck(t)
		})
	}
}
