package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/devcluster"
	"github.com/atoll-fs/atoll/internal/testenv"
	"github.com/atoll-fs/atoll/internal/web/dashboard"
)

// TestDashboard drives the manager's dashboard in headless Chromium
// against a cluster of child processes (manager, 3 storage servers, 1
// island): the page lists every member "up" and renders (the screenshot
// is not blank); after a storage server is killed with SIGKILL the page
// shows it "down" and the others still up. It also scrapes /metrics of
// the manager, a storage server and the island after a file was written
// through the client library.
//
// Chromium is Debian's `chromium` (or `chromium-browser`); without it the
// test is skipped, unless $CI is set (CI installs it:
// make setup). Set ATOLL_TEST_ARTIFACTS=DIR to keep the
// screenshots.
func TestDashboard(t *testing.T) {
	chrome := findChromium(t)
	exe := atoll(t)
	dir := t.TempDir()
	const nStorage, nIslands = 3, 1
	// manager + its raft port, storage, islands, the dashboard, then the
	// children's metrics ports (storage, islands, and the NFS gateway's
	// and mount's, reserved though unused here).
	base := freeBase(t, 2+nStorage+nIslands+1+nStorage+nIslands+2)
	webAddr := fmt.Sprintf("127.0.0.1:%d", base+2+nStorage+nIslands)
	dev, err := devcluster.New(devcluster.Config{
		DataDir: filepath.Join(dir, "cluster"), Storage: nStorage, Islands: nIslands, Exe: exe, LogLevel: "warn",
		ManagerListen: fmt.Sprintf("127.0.0.1:%d", base),
		StorageListen: fmt.Sprintf("127.0.0.1:%d", base+2),
		IslandListen:  fmt.Sprintf("127.0.0.1:%d", base+2+nStorage),
		WebListen:     webAddr,
		MetricsListen: fmt.Sprintf("127.0.0.1:%d", base+3+nStorage+nIslands),
		DownAfter:     2 * time.Second,
		Out:           os.Stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl, err := dev.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	pageURL := "http://" + webAddr + "/"
	apiURL := "http://" + webAddr + "/api/cluster"
	names := []string{"storage-0", "storage-1", "storage-2", "island-1"}

	// Every member heartbeats with its metrics address.
	v := waitView(t, apiURL, 30*time.Second, "every member up with its metrics address", func(v dashboard.View) bool {
		if len(v.Members) != len(names) {
			return false
		}
		for _, m := range v.Members {
			if m.State != "up" || m.MetricsAddr == "" || m.HeartbeatAgeMS < 0 {
				return false
			}
		}
		return true
	})
	metricsOf := map[string]string{}
	for _, m := range v.Members {
		metricsOf[m.Name] = m.MetricsAddr
	}

	// Write a file through the client library, then check the counters.
	conn, err := connect.Dial(ctx, []string{cl.Manager}, testKey, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(newRand(77), 3<<20+123)
	if err := conn.FS.WriteFile(ctx, root, "/dashboard-file", data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := conn.FS.ReadFile(ctx, root, "/dashboard-file"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}
	conn.Close()

	mgr := scrape(t, "http://"+webAddr+"/metrics")
	wantMetric(t, "manager", mgr, "atoll_manager_leader", func(x float64) bool { return x == 1 })
	wantMetric(t, "manager", mgr, "atoll_manager_map_epoch", func(x float64) bool { return x > 0 })
	wantMetric(t, "manager", mgr, `atoll_manager_members{kind="storage",state="up"}`, func(x float64) bool { return x == nStorage })
	wantMetric(t, "manager", mgr, `atoll_manager_raft_state{state="Leader"}`, func(x float64) bool { return x == 1 })
	wantMetric(t, "manager", mgr, "go_goroutines", func(x float64) bool { return x > 0 })
	written := 0.0
	for i := 0; i < nStorage; i++ {
		name := fmt.Sprintf("storage-%d", i)
		st := scrape(t, "http://"+metricsOf[name]+"/metrics")
		slot := fmt.Sprintf(`{slot="%d"}`, i)
		// ec:2+1 over three servers: every stripe has a fragment on each.
		wantMetric(t, name, st, "atoll_storage_written_bytes_total"+slot, func(x float64) bool { written += x; return x > 0 })
		wantMetric(t, name, st, "atoll_storage_used_bytes"+slot, func(x float64) bool { return x > 0 })
		wantMetric(t, name, st, fmt.Sprintf(`atoll_storage_ops_total{op="put",result="ok",slot="%d"}`, i), func(x float64) bool { return x > 0 })
		wantMetric(t, name, st, fmt.Sprintf(`atoll_storage_op_duration_seconds_count{op="put",slot="%d"}`, i), func(x float64) bool { return x > 0 })
		wantMetric(t, name, st, "atoll_storage_scrub_progress_ratio"+slot, func(x float64) bool { return x >= 0 && x <= 1 })
		wantMetric(t, name, st, "process_resident_memory_bytes", func(x float64) bool { return x > 1<<20 })
	}
	if want := 1.5 * float64(len(data)); written < want {
		t.Errorf("storage servers wrote %.0f bytes in all, want at least %.0f (the file with ec:2+1 parity)", written, want)
	}
	isl := scrape(t, "http://"+metricsOf["island-1"]+"/metrics")
	wantMetric(t, "island-1", isl, `atoll_meta_ops_total{island="1",op="create",result="ok"}`, func(x float64) bool { return x >= 1 })
	wantMetric(t, "island-1", isl, `atoll_meta_ops_total{island="1",op="commit",result="ok"}`, func(x float64) bool { return x >= 1 })

	// The leader turns the heartbeat counters into throughput.
	waitView(t, apiURL, 15*time.Second, "write throughput in the series", func(v dashboard.View) bool {
		for _, p := range v.Throughput.Points {
			if p.Write > 0 {
				return v.Totals.UsedBytes > 0
			}
		}
		return false
	})

	// The page: every member listed and up, polling live, not blank.
	shots := os.Getenv("ATOLL_TEST_ARTIFACTS")
	if shots == "" {
		shots = t.TempDir()
	}
	dom := dumpDOM(t, chrome, pageURL)
	checkRows(t, dom, names, "")
	if m := regexp.MustCompile(`data-polls="(\d+)"`).FindStringSubmatch(dom); m == nil || m[1] == "0" {
		t.Errorf("the page never polled /api/cluster (body data-polls %v)", m)
	}
	if !strings.Contains(dom, `data-island="island-1"`) {
		t.Errorf("the islands table does not list island-1")
	}
	// At 1400 px (issue #42) neither the page nor the members table
	// overflows sideways (the page measures both after each poll).
	wide := string(runChromium(t, chrome, "--dump-dom", "--window-size=1400,900", pageURL))
	for _, attr := range []string{"data-page-overflow", "data-members-overflow"} {
		if m := regexp.MustCompile(attr + `="(\d+)"`).FindStringSubmatch(wide); m == nil || m[1] != "0" {
			t.Errorf("at 1400 px %s is %v, want 0", attr, m)
		}
	}
	shot := filepath.Join(shots, "dashboard-up.png")
	screenshot(t, chrome, pageURL, shot)
	checkNotBlank(t, shot)
	t.Logf("screenshot, all up: %s", shot)

	// Kill a storage server: the page shows it down, the others up.
	victim := cl.Child("storage1")
	victim.Kill()
	waitView(t, apiURL, 20*time.Second, "storage-1 down", func(v dashboard.View) bool {
		for _, m := range v.Members {
			if m.Name == "storage-1" {
				return m.State == "down"
			}
		}
		return false
	})
	dom = dumpDOM(t, chrome, pageURL)
	checkRows(t, dom, names, "storage-1")
	// The bad news in red, the rest plain: "1 down" is the members card's
	// value (class bad), not "N up".
	if !regexp.MustCompile(`class="card bad"><div class="label">members</div><div class="value">1 down</div>`).MatchString(dom) {
		t.Errorf("the members card does not lead with \"1 down\" in red:\n%s", tail([]byte(dom), 3000))
	}
	shot = filepath.Join(shots, "dashboard-storage-1-down.png")
	screenshot(t, chrome, pageURL, shot)
	checkNotBlank(t, shot)
	t.Logf("screenshot, storage-1 down: %s", shot)
	mgr = scrape(t, "http://"+webAddr+"/metrics")
	wantMetric(t, "manager", mgr, `atoll_manager_members{kind="storage",state="down"}`, func(x float64) bool { return x == 1 })
}

// findChromium returns Chromium's path, or skips the test (fails it under
// CI, which installs Chromium).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Missing(t, "chromium not found (make setup installs it): dashboard test")
	return ""
}

// runChromium runs headless Chromium with a fresh profile, killing its
// whole process group after it exits or when it overruns its deadline.
// Its stderr is noise on most machines: the caller judges by the output.
func runChromium(t *testing.T, chrome string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	all := append([]string{
		"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=8000",
	}, args...)
	cmd := exec.CommandContext(ctx, chrome, all...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // helpers left behind
	}
	if ctx.Err() != nil {
		t.Fatalf("chromium %v: no result within 90s\nstderr tail: %s", args, tail(stderr.Bytes(), 2000))
	}
	if err != nil {
		t.Logf("chromium %v: %v (judging by its output)\nstderr tail: %s", args, err, tail(stderr.Bytes(), 2000))
	}
	return stdout.Bytes()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func dumpDOM(t *testing.T, chrome, url string) string {
	t.Helper()
	dom := string(runChromium(t, chrome, "--dump-dom", url))
	if !strings.Contains(dom, "</html>") {
		t.Fatalf("chromium --dump-dom %s: no document:\n%s", url, tail([]byte(dom), 2000))
	}
	return dom
}

func screenshot(t *testing.T, chrome, url, path string) {
	t.Helper()
	_ = os.Remove(path)
	runChromium(t, chrome, "--screenshot="+path, "--window-size=1280,900", url)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("chromium wrote no screenshot: %v", err)
	}
}

// checkNotBlank fails unless the PNG at path is 1280x900 and shows a real
// page: many distinct colours, and no single colour covering nearly all
// of it.
func checkNotBlank(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	b := img.Bounds()
	if b.Dx() != 1280 || b.Dy() != 900 {
		t.Errorf("screenshot %s is %dx%d, want 1280x900", path, b.Dx(), b.Dy())
	}
	counts := map[[4]uint32]int{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			counts[[4]uint32{r >> 8, g >> 8, bl >> 8, a >> 8}]++
		}
	}
	top := 0
	for _, n := range counts {
		top = max(top, n)
	}
	total := b.Dx() * b.Dy()
	if len(counts) < 64 || top > total*97/100 {
		t.Errorf("screenshot %s looks blank: %d distinct colours, the commonest covers %.1f%%", path, len(counts), 100*float64(top)/float64(total))
	}
}

var rowRE = regexp.MustCompile(`(?s)<tr([^>]*\bdata-member="([^"]+)"[^>]*)>(.*?)</tr>`)

// checkRows checks that the member table lists exactly names, with down
// "down" (its data-state and its badge) and every other member "up".
func checkRows(t *testing.T, dom string, names []string, down string) {
	t.Helper()
	rows := map[string]string{}
	for _, m := range rowRE.FindAllStringSubmatch(dom, -1) {
		attrs, name, cells := m[1], m[2], m[3]
		st := regexp.MustCompile(`data-state="([^"]+)"`).FindStringSubmatch(attrs)
		if st == nil {
			t.Errorf("row %s has no data-state: %s", name, attrs)
			continue
		}
		badge := regexp.MustCompile(`class="badge ([a-z]+)">([a-z]+)<`).FindStringSubmatch(cells)
		if badge == nil || badge[1] != st[1] || badge[2] != st[1] {
			t.Errorf("row %s: data-state %q but badge %v", name, st[1], badge)
		}
		rows[name] = st[1]
	}
	if len(rows) != len(names) {
		t.Errorf("the page lists members %v, want %v", rows, names)
	}
	for _, n := range names {
		want := "up"
		if n == down {
			want = "down"
		}
		if got, ok := rows[n]; !ok {
			t.Errorf("the page does not list %s", n)
		} else if got != want {
			t.Errorf("the page shows %s %q, want %q", n, got, want)
		}
	}
}

// waitView polls /api/cluster until ok holds.
func waitView(t *testing.T, url string, timeout time.Duration, what string, ok func(dashboard.View) bool) dashboard.View {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var v dashboard.View
	var last error
	for time.Now().Before(deadline) {
		v, last = getView(url)
		if last == nil && ok(v) {
			return v
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("waiting %s for %s: last view %v (err %v): %+v", timeout, what, v, last, v.Members)
	return v
}

func getView(url string) (dashboard.View, error) {
	var v dashboard.View
	resp, err := http.Get(url)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// scrape reads a Prometheus text exposition into "name{labels}" -> value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if x, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = x
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func wantMetric(t *testing.T, who string, m map[string]float64, name string, ok func(float64) bool) {
	t.Helper()
	x, found := m[name]
	switch {
	case !found:
		t.Errorf("%s /metrics: no %s", who, name)
	case !ok(x):
		t.Errorf("%s /metrics: %s = %g, implausible", who, name, x)
	}
}
