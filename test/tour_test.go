package test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/testenv"
)

// tourStep is what TestReadmeTour expects of one command of the README's
// tour: its exact text, and what its output must match (every pattern).
// Every command must exit 0.
type tourStep struct {
	cmd  string
	want []string
}

// tour is the README's five-minute tour, command by command. The test
// fails when the README's commands and this list differ, so a change to
// the tour comes with a change to what it is expected to print.
var tour = []tourStep{
	{"go build -o bin/atoll ./cmd/atoll", nil},
	{"./bin/atoll dev --data /tmp/atoll --islands 3 --rebuild-after 10s &", []string{`atoll dev ready: manager 127\.0\.0\.1:\d+, 5 storage servers, 3 islands`}},
	{"export ATOLL_CLUSTER=127.0.0.1:7300", nil},
	{"./bin/atoll status", []string{`epoch \d+, formatted`, `(?m)^\s+storage\s+0\s+\S+\s+up\b`, `(?m)^\s+storage\s+4\s+\S+\s+up\b`, `islands \(3\)`}},
	{"./bin/atoll cp ~/some-file atoll:/some-file", nil},
	{"./bin/atoll ls -l /", []string{`some-file`}},
	{"./bin/atoll policy set / mirror:3", []string{`/: policy \S+ \(cluster default\) -> mirror:3`}},
	{"./bin/atoll cp atoll:/some-file /tmp/back && cmp ~/some-file /tmp/back", nil},
	{"./bin/atoll df", []string{`(?i)free`}},
	{"./bin/atoll fsck", nil},
	{"nfs-cp ~/some-file 'nfs://127.0.0.1//nfs-file?nfsport=2049&mountport=2049'", nil},
	{"cmp ~/some-file /tmp/atoll/mnt/nfs-file", nil},
	{`kill -9 $(./bin/atoll status --json | jq '.members[] | select(.kind=="storage") | .pid' | head -1)`, nil},
	{"./bin/atoll cp atoll:/some-file /tmp/back2", nil},
	{"cmp ~/some-file /tmp/atoll/mnt/nfs-file", nil},
	// The reads through the mount took leases: some island reports grants.
	{"sleep 4; ./bin/atoll status", []string{`(?m)^\s+storage\s+0\s+\S+\s+down\b`, `(?m)^\s+storage\s+1\s+\S+\s+up\b`, `(?m)^\s+island\s+\d+\s+\d+\s+[1-9]\d*\s`}},
	{"sleep 40; ./bin/atoll status", []string{`(?m)^\s+storage\s+0\s+\S+\s+down\b`, `unreachable slots \[0\]`, `in all: copied [1-9]`, `stripes wait to leave drained or lost slots`}},
	{"./bin/atoll cp ~/some-file atoll:/some-file", nil},
	{"./bin/atoll clean --copy", []string{`deleted \d+`}},
	{"./bin/atoll df", []string{`(?i)free`}},
}

// TestReadmeTour runs the README's five-minute tour, every command in
// order in one shell (so `export` and `&` work as for a reader), against
// the fixed addresses the README uses, and checks what each command
// prints. Only the scratch paths are moved: /tmp/X becomes a temporary
// directory, and ~ a home holding some-file (4 MiB and a bit). It needs
// nfs-cp, jq and FUSE, and fails without them under CI (make setup
// installs them).
func TestReadmeTour(t *testing.T) {
	for _, tool := range []string{"nfs-cp", "jq", "fusermount3"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "%s is not installed (make setup installs it)", tool)
		}
	}
	if ok, why := devcluster.FuseUsable(); !ok {
		testenv.Missing(t, "FUSE: %s", why)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	cmds := tourCommands(t, string(readme))
	if len(cmds) != len(tour) {
		t.Fatalf("the README's tour has %d commands, the test expects %d: update `tour` in tour_test.go\nREADME:\n%s", len(cmds), len(tour), strings.Join(cmds, "\n"))
	}
	for i := range cmds {
		if cmds[i] != tour[i].cmd {
			t.Fatalf("tour command %d is %q in the README, the test expects %q: update `tour` in tour_test.go", i+1, cmds[i], tour[i].cmd)
		}
	}
	// The tour runs on free ports, not the defaults (another cluster may
	// hold them): its commands are rewritten to name them. Layout from
	// base: manager (and its raft port), dashboard, NFS, 5 storage
	// servers at +10, 3 islands at +20 (their raft ports 50 above), 10
	// metrics ports at +30.
	base := freeBase(t, 80)
	at := func(off int) string { return fmt.Sprintf("127.0.0.1:%d", base+off) }
	ports := strings.NewReplacer("127.0.0.1:7300", at(0), "nfsport=2049&mountport=2049", fmt.Sprintf("nfsport=%d&mountport=%d", base+3, base+3))
	devFlags := fmt.Sprintf(" --manager-listen %s --web-listen %s --nfs-listen %s --storage-listen %s --island-listen %s --metrics-listen %s",
		at(0), at(2), at(3), at(10), at(20), at(30))

	tmp := t.TempDir()
	home := filepath.Join(tmp, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "some-file"), randBytes(newRand(2026), 4<<20+1234), 0o644); err != nil {
		t.Fatal(err)
	}
	devLog, devPid := filepath.Join(tmp, "dev.log"), filepath.Join(tmp, "dev.pid")
	t.Cleanup(func() { stopTourDev(t, devPid, filepath.Join(tmp, "atoll", "mnt")) })

	var sb strings.Builder
	sb.WriteString("set -u\n")
	for i, c := range cmds {
		c = ports.Replace(strings.ReplaceAll(c, "/tmp/", tmp+"/"))
		fmt.Fprintf(&sb, "echo '@@@ begin %d'\n", i)
		if bg, ok := strings.CutSuffix(c, "&"); ok {
			bg = strings.TrimSpace(bg) + devFlags
			// The background cluster's output goes to a file the test reads;
			// the next command starts once it is ready, as a reader waits.
			fmt.Fprintf(&sb, "%s >%q 2>&1 &\necho $! >%q\n", bg, devLog, devPid)
			fmt.Fprintf(&sb, "for _ in $(seq 1200); do grep -q 'atoll dev ready' %q && break; kill -0 $! 2>/dev/null || break; sleep 0.25; done\n", devLog)
			fmt.Fprintf(&sb, "grep -q 'atoll dev ready' %q\n", devLog)
		} else {
			sb.WriteString(c + "\n")
		}
		fmt.Fprintf(&sb, "echo \"@@@ end %d rc=$?\"\n", i)
	}
	script := filepath.Join(tmp, "tour.sh")
	if err := os.WriteFile(script, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", script)
	cmd.Dir = ".."
	// Go keeps its caches where they were, not under the tour's HOME.
	cmd.Env = append(os.Environ(), "HOME="+home, "ATOLL_CLUSTER=")
	for _, v := range []string{"GOPATH", "GOMODCACHE", "GOCACHE"} {
		if out, err := exec.Command("go", "env", v).Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
			cmd.Env = append(cmd.Env, v+"="+string(bytes.TrimSpace(out)))
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the tour's shell: %v\n%s", err, out)
	}
	devOut, _ := os.ReadFile(devLog)
	for i, step := range tour {
		got, rc, ok := tourOutput(out, i)
		if !ok {
			t.Fatalf("tour command %d (%s) did not run\nscript:\n%s\nwhole output:\n%s", i+1, step.cmd, sb.String(), out)
		}
		if strings.HasSuffix(step.cmd, "&") {
			// got is a slice of out: appending in place would overwrite
			// the commands after it.
			got = append(bytes.Clone(got), devOut...)
		}
		t.Logf("$ %s\n%s", step.cmd, tail(got, 1500))
		if rc != 0 {
			t.Fatalf("tour command %d (%s) exited %d:\n%s", i+1, step.cmd, rc, got)
		}
		for _, w := range step.want {
			if !regexp.MustCompile(w).Match(got) {
				t.Fatalf("tour command %d (%s): output does not match %q:\n%s", i+1, step.cmd, w, got)
			}
		}
	}
}

// tourCommands returns the commands of the README's tour: the lines of its
// first sh block that are neither blank nor comments.
func tourCommands(t *testing.T, readme string) []string {
	_, after, ok := strings.Cut(readme, "## A five-minute tour")
	if !ok {
		t.Fatal("README.md has no \"## A five-minute tour\" section")
	}
	_, after, ok = strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatal("the tour has no sh block")
	}
	block, _, ok := strings.Cut(after, "```")
	if !ok {
		t.Fatal("the tour's sh block does not end")
	}
	var cmds []string
	for _, l := range strings.Split(block, "\n") {
		if s := strings.TrimSpace(l); s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		if i := strings.Index(l, " # "); i >= 0 { // a trailing comment
			l = l[:i]
		}
		cmds = append(cmds, strings.TrimSpace(l))
	}
	return cmds
}

// tourOutput is command i's output and exit status in the tour's shell
// output.
func tourOutput(out []byte, i int) ([]byte, int, bool) {
	begin := []byte(fmt.Sprintf("@@@ begin %d\n", i))
	_, rest, ok := bytes.Cut(out, begin)
	if !ok {
		return nil, 0, false
	}
	m := regexp.MustCompile(fmt.Sprintf(`(?m)^@@@ end %d rc=(\d+)$`, i)).FindSubmatchIndex(rest)
	if m == nil {
		return rest, 0, false
	}
	rc, _ := strconv.Atoi(string(rest[m[2]:m[3]]))
	return rest[:m[0]], rc, true
}

// stopTourDev stops the tour's `atoll dev` (SIGTERM: it unmounts and stops
// its roles), and kills it and lazily unmounts if it has not within a
// minute.
func stopTourDev(t *testing.T, pidFile, mnt string) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 240; i++ {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Errorf("atoll dev (pid %d) did not stop within a minute of SIGTERM; killing it", pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	_ = exec.Command("fusermount3", "-u", "-z", mnt).Run()
}
