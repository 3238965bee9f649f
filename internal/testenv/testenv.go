// Package testenv is what Atoll's tests in several packages share about
// their environment: whether they run under CI, how a test ends when a
// prerequisite is missing, and the atoll binary that multi-process tests
// start their roles from. Only tests import it.
package testenv

import (
	"fmt"
	"github.com/atoll-fs/atoll/internal/auth"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// UnderCI reports whether the tests run in CI ($CI set, as CI services
// do, and not "false" or "0"), where every prerequisite is installed.
func UnderCI() bool {
	ci := os.Getenv("CI")
	return ci != "" && ci != "false" && ci != "0"
}

// Missing ends a test that cannot run here: it skips with the reason, or
// fails under CI, where a missing prerequisite must not turn tests into
// silent skips.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if UnderCI() {
		t.Fatalf("%s (CI is set: prerequisites must be installed, not skipped)", msg)
	}
	t.Skip(msg)
}

var builds struct {
	sync.Mutex
	dir string
	bin map[string]*build // by tags
}

type build struct {
	once sync.Once
	path string
	err  error
}

// Atoll builds cmd/atoll with the given build tags once per test process
// and returns its path. Multi-process tests use -tags failpoints,deadlock
// (test/doc.go). Call RemoveBinaries from TestMain.
func Atoll(t testing.TB, tags ...string) string {
	t.Helper()
	key := strings.Join(tags, ",")
	builds.Lock()
	if builds.bin == nil {
		builds.bin = map[string]*build{}
	}
	b := builds.bin[key]
	if b == nil {
		b = &build{}
		builds.bin[key] = b
	}
	builds.Unlock()
	b.once.Do(func() {
		dir, err := binDir()
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "atoll-"+strings.ReplaceAll(key, ",", "-"))
		args := []string{"build", "-o", b.path}
		if key != "" {
			args = append(args, "-tags", key)
		}
		out, err := exec.Command("go", append(args, "github.com/atoll-fs/atoll/cmd/atoll")...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func binDir() (string, error) {
	builds.Lock()
	defer builds.Unlock()
	if builds.dir == "" {
		d, err := os.MkdirTemp("", "atoll-test-bin-")
		if err != nil {
			return "", err
		}
		builds.dir = d
	}
	return builds.dir, nil
}

// RemoveBinaries deletes what Atoll built (from TestMain, after m.Run).
func RemoveBinaries() {
	builds.Lock()
	defer builds.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
}

var keys struct {
	sync.Mutex
	key  *auth.Key
	path string
	dir  string
}

// ClusterKey returns the test process's cluster key and its file, made on
// the first call. It also points $ATOLL_KEY at the file, so every role,
// `atoll dev` and CLI command the tests start authenticates with it, and
// $XDG_CONFIG_HOME at a scratch directory, so `atoll dev` never writes the
// real user's ~/.config/atoll/admin.key. Call it from TestMain, before any
// test runs (it changes the environment); Cleanup removes the file.
func ClusterKey() (*auth.Key, string) {
	keys.Lock()
	defer keys.Unlock()
	if keys.key != nil {
		return keys.key, keys.path
	}
	d, err := os.MkdirTemp("", "atoll-test-key-")
	if err == nil {
		keys.key, err = auth.NewClusterKey()
	}
	if err == nil {
		keys.path = filepath.Join(d, "cluster.key")
		err = auth.Save(keys.path, keys.key)
	}
	if err != nil {
		panic(fmt.Sprintf("testenv: making the test cluster key: %v", err))
	}
	keys.dir = d
	os.Setenv(auth.EnvVar, keys.path)
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(d, "config"))
	return keys.key, keys.path
}

// Main is a test package's TestMain: its tests run with the test cluster
// key in place (ClusterKey), and what they built is removed after
// (Cleanup).
func Main(m *testing.M) {
	ClusterKey()
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// Cleanup deletes what Atoll and ClusterKey made (from TestMain, after
// m.Run).
func Cleanup() {
	RemoveBinaries()
	keys.Lock()
	defer keys.Unlock()
	if keys.dir != "" {
		os.RemoveAll(keys.dir)
	}
}
