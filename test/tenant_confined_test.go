package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// TestKeyConfinedToSubtree is issue #43's path scope: a key made with
// `atoll key new --path /home/alice` reaches /home/alice and nothing
// else, through the CLI, the client library, a FUSE mount and an NFS
// gateway run with it, whatever the permission bits outside say. Its
// clients see /home/alice as "/"; bob's world-readable file, found by
// inode id, is stale to it, and nothing it does lands outside.
func TestKeyConfinedToSubtree(t *testing.T) {
	cl, _ := startDev(t, 3, 2, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := dialDev(t, cl)
	root := metawire.Root
	alice := metawire.Cred{UID: 1000, GID: 1000}
	for _, d := range []string{"/home/alice", "/home/bob"} {
		if _, err := admin.FS.MkdirAll(ctx, root, d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ah, err := admin.FS.Resolve(ctx, root, "/home/alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.FS.SetAttr(ctx, metawire.SetAttrReq{Cred: root, Ino: ah.Ino, Valid: metawire.SetUID | metawire.SetGID, UID: 1000, GID: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := admin.FS.WriteFile(ctx, root, "/home/bob/secret", []byte("bob's, readable by all\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := admin.FS.WriteFile(ctx, alice, "/home/alice/notes", []byte("alice's notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bobFile, err := admin.FS.Resolve(ctx, root, "/home/bob/secret")
	if err != nil {
		t.Fatal(err)
	}

	// The operator makes the key with the CLI.
	keyPath := filepath.Join(t.TempDir(), "alice.key")
	out, err := exec.Command(atoll(t), "key", "new", "--name", "alice", "--path", "/home/alice/", "--out", keyPath,
		"--cluster", cl.Manager, "--key", testKeyPath).CombinedOutput()
	if err != nil {
		t.Fatalf("atoll key new --path: %v\n%s", err, out)
	}
	key, err := auth.Load(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if key.Scope.Root != ah.Ino || key.Scope.Path != "/home/alice" || !strings.Contains(string(out), "path=/home/alice") {
		t.Fatalf("key scope %+v (printed %q), want root %x path /home/alice", key.Scope, out, ah.Ino)
	}
	out, err = exec.Command(atoll(t), "key", "new", "--name", "x", "--path", "/home/bob/secret", "--cluster", cl.Manager, "--key", testKeyPath).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not a directory") {
		t.Errorf("key new --path of a file: %v\n%s", err, out)
	}

	// The CLI with the key, as alice would run it: "/" is her directory.
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(atoll(t), append(args, "--cluster", cl.Manager, "--key", keyPath)...)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	if out, err := cli("ls", "/"); err != nil || !strings.Contains(out, "notes") || strings.Contains(out, "home") {
		t.Errorf("atoll ls / with alice's key: %v\n%s\nwant her notes, not /home", err, out)
	}
	stolen := filepath.Join(t.TempDir(), "stolen")
	if out, err := cli("cp", "atoll:/home/bob/secret", stolen); err == nil {
		t.Errorf("atoll cp atoll:/home/bob/secret with alice's key: %s", out)
	}
	if b, err := os.ReadFile(stolen); err == nil && strings.Contains(string(b), "bob's") {
		t.Errorf("alice's key copied bob's file out: %q", b)
	}

	// The library: by inode id, outside is stale, whatever the bits.
	ac, err := connect.Dial(ctx, []string{cl.Manager}, key, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	if ac.FS.Root() != ah.Ino {
		t.Fatalf("confined FS root %x, want /home/alice %x", ac.FS.Root(), ah.Ino)
	}
	errno := func(what string, err error, want syscall.Errno) {
		t.Helper()
		if got := metawire.Errno(err); got != want {
			t.Errorf("%s: %v (errno %v), want %v", what, err, got, want)
		}
	}
	_, err = ac.FS.GetAttr(ctx, alice, bobFile.Ino)
	errno("getattr of bob's file by inode", err, syscall.ESTALE)
	_, err = ac.FS.GetAttr(ctx, alice, uint64(namespace.RootIno))
	errno("getattr of the namespace's root", err, syscall.ESTALE)
	_, err = ac.FS.Lookup(ctx, alice, ah.Ino, "..")
	errno(`lookup ".." of /home/alice`, err, syscall.EACCES)
	_, err = ac.FS.SetAttr(ctx, metawire.SetAttrReq{Cred: alice, Ino: bobFile.Ino, Valid: metawire.SetMode, Mode: 0o666})
	errno("chmod bob's file by inode", err, syscall.ESTALE)
	_, err = ac.FS.Link(ctx, metawire.LinkReq{Cred: alice, Ino: bobFile.Ino, Dir: ah.Ino, Name: "stolen"})
	errno("hard-link bob's file into /home/alice", err, syscall.ESTALE)
	if b, err := ac.FS.ReadFile(ctx, alice, "/notes"); err != nil || string(b) != "alice's notes\n" {
		t.Errorf("alice reading /notes: %q %v", b, err)
	}
	if err := ac.FS.WriteFile(ctx, alice, "/lib", []byte("through the library\n"), 0o644); err != nil {
		t.Errorf("alice writing /lib: %v", err)
	}

	// A FUSE mount with the key: its root is /home/alice.
	fuseUsable(t)
	fc, err := connect.Dial(ctx, []string{cl.Manager}, key, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	_, mnt := mountFS(t, fc.FS)
	ents, err := os.ReadDir(mnt)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if err != nil || !slices.Contains(names, "notes") || !slices.Contains(names, "lib") || slices.Contains(names, "home") {
		t.Errorf("the confined mount's root lists %q (%v), want alice's directory", names, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "via-mount"), []byte("through the mount\n"), 0o644); err != nil {
		t.Errorf("writing through the confined mount: %v", err)
	}
	if err := os.Mkdir(filepath.Join(mnt, "sub"), 0o755); err != nil {
		t.Errorf("mkdir through the confined mount: %v", err)
	}
	if err := os.Rename(filepath.Join(mnt, "via-mount"), filepath.Join(mnt, "sub", "moved")); err != nil {
		t.Errorf("rename through the confined mount: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "sub", "moved")); err != nil || string(b) != "through the mount\n" {
		t.Errorf("reading back through the confined mount: %q %v", b, err)
	}
	// ".." of the mount's root is the mount's root (the kernel's), never /home.
	if ents, err := os.ReadDir(filepath.Join(mnt, "sub", "..", "..")); err == nil {
		for _, e := range ents {
			if e.Name() == "bob" {
				t.Errorf("the confined mount reached /home through ..")
			}
		}
	}

	// An NFS gateway run with the key exports her directory as "/".
	g := startGateway(t, ac.FS, "", nil)
	c := dialRPC(t, g.addr)
	c.asUser(1000, 1000)
	fh := c.mount("/")
	if st, _ := c.lookup(fh, "notes"); st != sOK {
		t.Errorf("NFS lookup of notes under the confined export: status %d", st)
	}
	if st, _ := c.lookup(fh, "home"); st == sOK {
		t.Errorf("NFS lookup of home under the confined export succeeded")
	}
	// A handle of bob's file that an unconfined gateway with the same
	// handle key issued carries a good tag: the islands still refuse it.
	wide := dialRPC(t, startGateway(t, admin.FS, "", nil).addr)
	wide.asUser(0, 0)
	_, hh := wide.lookup(wide.mount("/"), "home")
	_, bh := wide.lookup(hh, "bob")
	st, sh := wide.lookup(bh, "secret")
	if st != sOK {
		t.Fatalf("unconfined gateway: lookup of bob's file: %d", st)
	}
	if st, data, _ := c.read(sh, 0, 100); st != sStale {
		t.Errorf("NFS read of bob's file through the confined gateway: status %d %q, want STALE", st, data)
	}

	// Nothing landed outside; everything alice made is under her directory.
	if got, err := admin.FS.ReadFile(ctx, root, "/home/bob/secret"); err != nil || string(got) != "bob's, readable by all\n" {
		t.Errorf("bob's file after alice's attempts: %q %v", got, err)
	}
	for _, p := range []string{"/home/alice/lib", "/home/alice/sub/moved"} {
		if _, err := admin.FS.Resolve(ctx, root, p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, p := range []string{"/home/alice/stolen", "/lib", "/via-mount", "/sub"} {
		if _, err := admin.FS.Resolve(ctx, root, p); err == nil {
			t.Errorf("%s exists", p)
		}
	}
}
