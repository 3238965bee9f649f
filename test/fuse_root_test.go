package test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/atoll-fs/atoll/internal/fusefs"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// TestMountSubdirectory is issue #44's `atoll mount --root DIR`: the
// mount shows DIR as its root; what it makes lands in DIR; ".." of the
// mount's root is the host's, not DIR's parent.
func TestMountSubdirectory(t *testing.T) {
	fuseUsable(t)
	fc := startFSCluster(t, 3, 2)
	fs := fc.newFS(t)
	ctx := context.Background()
	root := metawire.Root
	if _, err := fs.MkdirAll(ctx, root, "/proj/a", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteFile(ctx, root, "/proj/a/f", []byte("in a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteFile(ctx, root, "/outside", []byte("not in proj\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	proj, err := fs.Resolve(ctx, root, "/proj")
	if err != nil {
		t.Fatal(err)
	}
	_, mnt := mountFSWith(t, fc.newFS(t), func(c *fusefs.Config) { c.Root = proj.Ino })
	ents, err := os.ReadDir(mnt)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if err != nil || !slices.Equal(names, []string{"a"}) {
		t.Fatalf("the mount of /proj lists %q (%v), want [a]", names, err)
	}
	var st, pst os.FileInfo
	if st, err = os.Stat(mnt); err != nil || !st.IsDir() {
		t.Fatalf("stat of the mount's root: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "a", "f")); err != nil || string(b) != "in a\n" {
		t.Fatalf("a/f through the mount: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "made"), []byte("made here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(mnt, "a", "f"), filepath.Join(mnt, "f2")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"/proj/made": "made here\n", "/proj/f2": "in a\n"} {
		if b, err := fs.ReadFile(ctx, root, p); err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", p, b, err, want)
		}
	}
	// ".." of the mount's root is the mountpoint's parent on this host.
	if pst, err = os.Stat(filepath.Join(mnt, "..")); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Stat(filepath.Dir(mnt))
	if !os.SameFile(pst, host) {
		t.Errorf(`".." of the mount's root is not the host's parent directory`)
	}
	if _, err := os.Stat(filepath.Join(mnt, "..", "outside")); err == nil {
		t.Errorf("the namespace's /outside is reachable from the mount of /proj")
	}
}
