package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/faults"

	"github.com/anishathalye/porcupine"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/simcluster"
	"github.com/atoll-fs/atoll/internal/simnet"
)

// Config configures a run.
type Config struct {
	Seed     uint64
	Duration time.Duration // of the workload under faults (the heal and checks come after)
	Exe      string        // the atoll binary (built with -tags failpoints,deadlock for tests)
	Dir      string        // scratch directory (created; roles' data and logs)
	// Clients is the number of client-library clients (default 3); Mount
	// adds a client through a FUSE mount.
	Clients int
	Mount   bool
	// NFS adds a client through an NFS gateway (go-nfs-client).
	NFS bool
	// Storage and Islands size the cluster (default 5 and 3).
	Storage, Islands int
	// FaultEvery is the mean time between faults (default 4s).
	FaultEvery time.Duration
	// Loopback runs without network namespaces (no partition faults).
	Loopback bool
	// AttrTTL is the library clients' name and attribute cache (default
	// a nanosecond: none). With the product's default second the
	// namespace history is close-to-open consistent but not linearizable,
	// and the checker says so: a way to see it catch a violation.
	AttrTTL time.Duration
	// Failpoints arms the roles' registered failpoints as one more kind
	// of fault (FaultFailpoint); Exe must be built with -tags failpoints
	// (a binary without them refuses to start with one armed).
	Failpoints bool
	// Out gets progress lines (nil: none).
	Out io.Writer
}

// Validate checks the configuration and fills defaults.
func (c *Config) Validate() error {
	if c.Duration <= 0 {
		return errors.New("torture: --duration must be positive")
	}
	if c.Exe == "" || c.Dir == "" {
		return errors.New("torture: Exe and Dir are required")
	}
	if c.Clients == 0 {
		c.Clients = 3
	}
	if c.Storage == 0 {
		c.Storage = 5
	}
	if c.Islands == 0 {
		c.Islands = 3
	}
	if c.FaultEvery == 0 {
		c.FaultEvery = 4 * time.Second
	}
	if c.AttrTTL == 0 {
		c.AttrTTL = time.Nanosecond
	}
	if c.Clients < 1 || c.Clients > 32 || c.Storage < 3 || c.Storage > 16 || c.Islands < 1 || c.Islands > 8 {
		return errors.New("torture: 1..32 clients, 3..16 storage servers, 1..8 islands")
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	return nil
}

// Report is what a run did and found. Passed is true when nothing was
// lost, every history was linearizable, every counter counted its
// acknowledged increments under locks never granted twice, every
// corruption was detected and the cluster ended clean and fully
// redundant.
type Report struct {
	Seed            uint64  `json:"seed"`
	Seconds         float64 `json:"seconds"`
	Isolated        bool    `json:"isolated"`
	Fallback        string  `json:"fallback,omitempty"`
	Operations      int64   `json:"operations"`
	NamespaceOps    int64   `json:"namespace_operations"`
	DataOps         int64   `json:"data_operations"`
	UnknownOutcomes int64   `json:"unknown_outcomes"`
	// UnknownWhy counts the unknown outcomes by client and errno (or
	// "timeout": abandoned after opTimeout).
	UnknownWhy map[string]int64 `json:"unknown_why,omitempty"`
	// UnknownExample is the first error of each UnknownWhy key.
	UnknownExample map[string]string `json:"unknown_example,omitempty"`
	FilesCreated   int64             `json:"files_created"`
	Kills          int               `json:"kills"`
	// FailpointsArmed counts roles restarted with a failpoint armed to
	// crash them; FailpointsFired those whose point fired (the process
	// had exited by the fault's end).
	FailpointsArmed     int `json:"failpoints_armed"`
	FailpointsFired     int `json:"failpoints_fired"`
	Partitions          int `json:"partitions"`
	Hangs               int `json:"hangs"`
	Corruptions         int `json:"corruptions"`
	CorruptionsDetected int `json:"corruptions_detected"`
	CorruptionsMoot     int `json:"corruptions_moot"` // their stripes died before anyone looked
	// CorruptionsProbed counts corruptions the engine asked the storage
	// server about soon after injecting them (its scrubber's verdict, not
	// waiting for the end of the run, by when most stripes have died);
	// ProbeDetected how many of them it reported sick, and the delay.
	CorruptionsProbed int      `json:"corruptions_probed"`
	ProbeDetected     int      `json:"probe_detected"`
	ProbeDelayMaxSec  float64  `json:"probe_delay_max_seconds"`
	Deletions         int      `json:"deletions"`
	DeletionsRepaired int      `json:"deletions_repaired"`
	DiskFull          int      `json:"disk_full"`
	FailedRestarts    int      `json:"failed_restarts"` // starts of a killed role that failed and were retried
	AckedBytes        int64    `json:"acked_bytes"`
	FilesChecked      int      `json:"files_checked"`
	LostBytes         int64    `json:"lost_bytes"`
	ReadChecks        int64    `json:"read_checks"`
	ReadMismatches    int64    `json:"read_mismatches"`
	HistoryViolations int      `json:"history_violations"`
	HistoryCheck      string   `json:"history_check"` // Ok, Illegal or Unknown (timed out)
	FsckClean         bool     `json:"fsck_clean"`
	FsckProblems      []string `json:"fsck_problems,omitempty"`
	FullyRedundant    bool     `json:"fully_redundant"`
	Violations        []string `json:"violations,omitempty"`
	Schedule          []Fault  `json:"schedule,omitempty"`
	FailingHistory    []string `json:"failing_history,omitempty"`
	Errors            []string `json:"errors,omitempty"`
	Passed            bool     `json:"passed"`

	// The lock workload (locks.go): locks granted, how many of them
	// after a wait for another owner and the longest acquisition, lock
	// requests that failed (by why), holds whose lock the client's
	// session may have lost, and the increments of the counters:
	// acknowledged, unknown (the write started, not confirmed) and
	// failed before their write.
	LockHolds         int64            `json:"lock_holds"`
	LockWaits         int64            `json:"lock_waits"`
	LockWaitMaxSec    float64          `json:"lock_wait_max_seconds"`
	LockWaitLongest   string           `json:"lock_wait_longest,omitempty"` // that hold
	LockFailures      int64            `json:"lock_failures"`
	LockFailWhy       map[string]int64 `json:"lock_fail_why,omitempty"`
	LocksLost         int64            `json:"locks_lost"`
	IncrementsAcked   int64            `json:"increments_acked"`
	IncrementsUnknown int64            `json:"increments_unknown"`
	IncrementsFailed  int64            `json:"increments_failed"`
	Counters          []int64          `json:"counters"` // final values
	LockViolations    int              `json:"lock_violations"`

	// The open-file workload (opens.go): files held open by one client
	// and removed (unlinked or renamed over) by another, the reads
	// through the open descriptor after the removal that returned the
	// file's bytes, that failed (by why), that returned other bytes or
	// found the file gone while the holder's session lived (violations),
	// and removed inodes not reclaimed after the heal.
	OpenRemoved     int64            `json:"open_removed"`
	OpenReadsOK     int64            `json:"open_reads_ok"`
	OpenReadsFailed int64            `json:"open_reads_failed"`
	OpenFailWhy     map[string]int64 `json:"open_fail_why,omitempty"`
	OpenMismatches  int64            `json:"open_mismatches"`
	OpenLeaked      int64            `json:"open_leaked"`
}

// Summary is the one-line form of a report.
func (r *Report) Summary() string {
	verdict := "PASS"
	if !r.Passed {
		verdict = "FAIL"
	}
	return fmt.Sprintf("torture %s seed=%d %.0fs: %d ops (%d unknown), %d kills, %d failpoints armed (%d fired), %d partitions, %d hangs, %d/%d corruptions detected (%d moot; %d/%d probed soon after were reported sick, within %.0fs), %d/%d deletions repaired, %d disk-full, %d failed restarts retried; %d bytes acked, %d lost, %d read mismatches, %d history violations (%s); %d locks taken (%d after a wait, longest %.1fs), %d lock requests failed, %d locks lost, increments %d acked, %d unknown, %d failed before the write, %d lock violations; open files removed while open %d: %d read back whole, %d failed, %d wrong or gone under a live session, %d not reclaimed; fsck clean %v, fully redundant %v",
		verdict, r.Seed, r.Seconds, r.Operations, r.UnknownOutcomes, r.Kills, r.FailpointsArmed, r.FailpointsFired, r.Partitions, r.Hangs, r.CorruptionsDetected, r.Corruptions, r.CorruptionsMoot, r.ProbeDetected, r.CorruptionsProbed, r.ProbeDelayMaxSec,
		r.DeletionsRepaired, r.Deletions, r.DiskFull, r.FailedRestarts, r.AckedBytes, r.LostBytes, r.ReadMismatches, r.HistoryViolations, r.HistoryCheck,
		r.LockHolds, r.LockWaits, r.LockWaitMaxSec, r.LockFailures, r.LocksLost, r.IncrementsAcked, r.IncrementsUnknown, r.IncrementsFailed, r.LockViolations,
		r.OpenRemoved, r.OpenReadsOK, r.OpenReadsFailed, r.OpenMismatches, r.OpenLeaked, r.FsckClean, r.FullyRedundant)
}

// groups of the namespace model.
const groups = 8

// tmpfsSize is each storage server's disk (a tmpfs, so it can be filled):
// room for a few minutes of dead stripes the cleaner may not delete yet.
const tmpfsSize = 3 << 29 // 1.5 GiB

// engine is one run.
type engine struct {
	cfg     Config
	rep     *Report
	net     *simnet.Net
	cl      *simcluster.Cluster
	ccfg    simcluster.Config
	log     *os.File
	damaged map[string]bool // stripes with a corrupted or deleted fragment (at most one each)
	mu      sync.Mutex      // rep counters, damage lists
	corrupt []damage
	deleted []damage
	tmpfs   []string
	probe   *connect.Conn  // asks storage servers about fresh corruptions
	probes  sync.WaitGroup // probe goroutines, waited for before the heal
}

// damage is a fragment the engine corrupted or deleted, with its bytes.
type damage struct {
	path string
	slot uint16
	orig []byte
}

// Run runs the workload under the seeded faults for cfg.Duration, heals
// everything and checks the invariants.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &engine{cfg: cfg, rep: &Report{Seed: cfg.Seed}, damaged: map[string]bool{}}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	var err error
	if e.log, err = os.Create(filepath.Join(cfg.Dir, "roles.log")); err != nil {
		return nil, err
	}
	defer e.log.Close()
	start := time.Now()
	defer func() { e.rep.Seconds = time.Since(start).Seconds() }()
	if err := e.setup(ctx); err != nil {
		e.teardown()
		return e.rep, err
	}
	defer e.teardown()
	return e.rep, e.run(ctx)
}

func (e *engine) printf(format string, args ...any) {
	fmt.Fprintf(e.cfg.Out, "torture: "+format+"\n", args...)
}

func (e *engine) setup(ctx context.Context) error {
	e.ccfg = simcluster.Config{
		Exe: e.cfg.Exe, Dir: filepath.Join(e.cfg.Dir, "roles"), Storage: e.cfg.Storage, Islands: e.cfg.Islands,
		// The cleaner's grace must exceed the clients' commit bound
		// (client.MaxCommitDelay, 2 minutes): a shorter one deletes
		// stripes whose commits are still coming, and the engine then
		// reports acknowledged bytes lost (it did, with 20 s).
		ManagerArgs: []string{"--down-after", "2s", "--clean-interval", "5s", "--clean-grace", "3m", "--rebuild-after", "10m"},
		IslandArgs:  []string{"--lock-term", lockTerm.String()},
		LogLevel:    "warn", Out: e.log,
	}
	if e.cfg.Mount {
		e.ccfg.Mount = filepath.Join(e.cfg.Dir, "mnt")
	}
	e.ccfg.NFS = e.cfg.NFS
	name := fmt.Sprintf("t%d", e.cfg.Seed%10000)
	var err error
	e.net, err = simnet.New(ctx, simnet.Config{Name: name, Hosts: simcluster.HostNames(e.ccfg), Loopback: e.cfg.Loopback})
	if err != nil {
		return err
	}
	e.rep.Isolated, e.rep.Fallback = e.net.Isolated(), e.net.Reason()
	if !e.net.Isolated() {
		e.printf("no network namespaces (%s): partition faults are skipped", e.net.Reason())
	}
	e.ccfg.Net = e.net
	// Each storage server's directory is a tmpfs of its own, so that one
	// can be filled up without filling the machine.
	for i := 0; i < e.cfg.Storage; i++ {
		d := filepath.Join(e.ccfg.Dir, fmt.Sprintf("storage%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if err := syscall.Mount("tmpfs", d, "tmpfs", 0, fmt.Sprintf("size=%d", tmpfsSize)); err != nil {
				return fmt.Errorf("torture: tmpfs for %s: %w", d, err)
			}
			e.tmpfs = append(e.tmpfs, d)
		}
	}
	e.printf("starting a cluster of %d storage servers and %d islands on %d hosts (seed %d)", e.cfg.Storage, e.cfg.Islands, len(e.net.Hosts()), e.cfg.Seed)
	e.cl, err = simcluster.Start(ctx, e.ccfg)
	return err
}

func (e *engine) teardown() {
	if e.cl != nil {
		for _, r := range e.cl.Roles {
			_ = r.Resume()
		}
		e.cl.Stop()
	}
	for _, d := range e.tmpfs {
		_ = syscall.Unmount(d, syscall.MNT_DETACH)
	}
	if e.net != nil {
		_ = e.net.Close()
	}
}

func (e *engine) topology() Topology {
	var top Topology
	for _, r := range e.cl.Roles {
		top.Roles = append(top.Roles, r.Name)
		if r.Kind == "storage" {
			top.Storage = append(top.Storage, r.Name)
		}
	}
	top.Hosts = append(top.Hosts, "local")
	for _, h := range e.net.Hosts() {
		top.Hosts = append(top.Hosts, h.Name)
	}
	top.Partition = e.net.Isolated()
	if e.cfg.Failpoints {
		top.Failpoints = map[string][]string{}
		for _, r := range e.cl.Roles {
			top.Failpoints[r.Name] = failpointsOf(r.Kind)
		}
	}
	return top
}

// failpointPackages are the packages whose registered failpoints a
// role's process passes (by the names' prefix): storage servers their
// store's, islands their transactions', moves' and replicas', the
// manager its background cleaner's, mounts and gateways the client's.
var failpointPackages = map[string][]string{
	simcluster.KindStorage: {"storage."},
	simcluster.KindIsland:  {"meta.", "replica."},
	simcluster.KindManager: {"cleaner."},
	simcluster.KindMount:   {"client."},
	simcluster.KindNFS:     {"client."},
}

// failpointsOf lists the registered failpoints a role of kind passes.
func failpointsOf(kind string) []string {
	var out []string
	for _, n := range faults.Names() {
		for _, p := range failpointPackages[kind] {
			if strings.HasPrefix(n, p) {
				out = append(out, n)
			}
		}
	}
	return out
}

// dial connects a library client with the key in keyFile (the workload's
// clients the mount's user key; the checker the cluster key) that caches no names or attributes
// (Config.AttrTTL, a nanosecond): with the default second of caching a
// client's namespace view is close-to-open consistent, not linearizable,
// by design.
func (e *engine) dial(ctx context.Context, keyFile string) (*connect.Conn, error) {
	key, err := auth.Load(keyFile)
	if err != nil {
		return nil, err
	}
	return connect.DialTuned(ctx, []string{e.cl.Manager}, key, slog.New(slog.DiscardHandler), func(c *client.FSConfig) {
		c.AttrTTL = e.cfg.AttrTTL
	})
}

func (e *engine) run(ctx context.Context) error {
	hist := newHistory()
	w := &workload{hist: hist, groups: groups}
	var clients []fsOps
	var conns []*connect.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < e.cfg.Clients; i++ {
		c, err := e.dial(ctx, e.ccfg.ClientKeyPath())
		if err != nil {
			return err
		}
		conns = append(conns, c)
		clients = append(clients, &libOps{fs: c.FS})
	}
	if e.cfg.Mount {
		clients = append(clients, &posixOps{mnt: e.ccfg.Mount})
	}
	if e.cfg.NFS {
		n := &nfsOps{addr: e.cl.Role("nfs").Addr}
		defer n.close()
		clients = append(clients, n)
	}
	// The model's directories and each client's data directory.
	setup := clients[0]
	for _, d := range []string{"/ns", "/data"} {
		if err := setup.mkdir(ctx, d); err != nil {
			return fmt.Errorf("torture: mkdir %s: %w", d, err)
		}
	}
	for g := 0; g < groups; g++ {
		for _, d := range []string{fmt.Sprintf("/ns/g%d", g), groupDir(g, 0), groupDir(g, 1)} {
			if err := setup.mkdir(ctx, d); err != nil {
				return fmt.Errorf("torture: mkdir %s: %w", d, err)
			}
		}
	}
	for i, c := range clients {
		d := fmt.Sprintf("/data/c%d", i)
		var err error
		if lo, ok := setup.(*libOps); ok && isNFS(c) {
			// The gateway squashes root (its default, as deploy.md runs
			// it): the NFS client writes as nobody, in a directory of
			// its own that nobody may write.
			err = lo.mkdirMode(ctx, d, 0o777)
		} else {
			err = setup.mkdir(ctx, d)
		}
		if err != nil {
			return err
		}
	}

	lw := &lockWorkload{w: w}
	if err := lw.setup(ctx, setup.(*libOps)); err != nil {
		return err
	}
	ow := &openWorkload{w: w, clients: clients}
	if err := setup.mkdir(ctx, "/opens"); err != nil {
		return err
	}

	sched := Schedule(e.cfg.Seed, e.cfg.Duration, e.cfg.FaultEvery, e.topology())
	e.rep.Schedule = sched
	e.printf("workload: %d clients for %s, %d faults scheduled", len(clients), e.cfg.Duration, len(sched))
	wctx, stop := context.WithTimeout(ctx, e.cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		r := rand.New(rand.NewPCG(e.cfg.Seed, uint64(i)+1))
		go func() {
			defer wg.Done()
			w.run(wctx, i, c, r)
		}()
		// The lock traffic: library clients and the mount, each a
		// second loop beside its workload.
		var l locker
		switch c := c.(type) {
		case *libOps:
			l = &libLocker{fs: c.fs}
		case *posixOps:
			l = &fuseLocker{p: c}
		default:
			continue
		}
		wg.Add(1)
		lr := rand.New(rand.NewPCG(e.cfg.Seed, uint64(i)+1001))
		go func() {
			defer wg.Done()
			lw.run(wctx, i, c, l, lr)
		}()
		// The open-file traffic: the same clients hold files open that
		// any other client removes.
		if o, ok := c.(opener); ok && len(clients) > 1 {
			wg.Add(1)
			or := rand.New(rand.NewPCG(e.cfg.Seed, uint64(i)+2001))
			go func() {
				defer wg.Done()
				ow.run(wctx, i, o, or)
			}()
		}
	}
	probe, err := e.dial(ctx, e.ccfg.ClusterKeyPath())
	if err != nil {
		return err
	}
	e.probe = probe
	conns = append(conns, probe)
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		e.inject(wctx, sched)
	}()
	<-faultsDone
	wg.Wait()
	e.probes.Wait()
	e.printf("workload done: %d operations; healing", w.ops.Load())

	// Heal: every cut, pause and dead role, every full disk.
	hctx, hcancel := context.WithTimeout(ctx, 5*time.Minute)
	defer hcancel()
	if err := e.heal(hctx); err != nil {
		e.rep.Errors = append(e.rep.Errors, "heal: "+err.Error())
	}
	// Clients reconnect on their own; a fresh one reads everything back.
	vc, err := e.dial(hctx, e.ccfg.ClusterKeyPath())
	if err != nil {
		return fmt.Errorf("torture: client after the heal: %w", err)
	}
	conns = append(conns, vc)
	checker := &libOps{fs: vc.FS}
	// Final reads of the model's names (part of the checked history).
	for g := 0; g < groups; g++ {
		for _, s := range slots {
			w.namespaceOpFixed(hctx, len(clients), checker, NsInput{Group: g, Kind: OpRead, From: s})
		}
		for d := uint8(0); d < 2; d++ {
			w.namespaceOpFixed(hctx, len(clients), checker, NsInput{Group: g, Kind: OpList, Dir: d})
		}
	}
	e.verifyDamage(hctx, vc)
	e.repair(hctx)
	e.rep.FilesChecked, e.rep.LostBytes = w.verify(hctx, checker)
	e.repair(hctx) // what the reads found degraded
	e.checkDamage(hctx, vc)
	e.fsck(hctx)
	e.checkLocks(hctx, lw, checker)
	e.checkOpens(hctx, ow, vc.FS)

	ops := hist.close()
	res, short := check(ops, 5*time.Minute)
	e.rep.HistoryCheck = string(res)
	if res == porcupine.Illegal {
		e.rep.HistoryViolations = 1
		var b bytes.Buffer
		writeHistory(&b, short)
		e.rep.FailingHistory = strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	}
	e.rep.Operations, e.rep.NamespaceOps, e.rep.DataOps = w.ops.Load(), w.nsOps.Load(), w.dataOp.Load()
	e.rep.UnknownOutcomes, e.rep.FilesCreated = w.unknown.Load(), w.createdFiles.Load()
	w.unknownMu.Lock()
	e.rep.UnknownWhy, e.rep.UnknownExample = maps.Clone(w.unknownWhy), maps.Clone(w.unknownExample)
	w.unknownMu.Unlock()
	e.rep.AckedBytes, e.rep.ReadChecks, e.rep.ReadMismatches = w.ackedBytes.Load(), w.readChecks.Load(), w.mismatches.Load()
	e.rep.Violations = append(e.rep.Violations, w.violations...)
	if n := w.lostFiles.Load(); n > 0 {
		e.rep.Violations = append(e.rep.Violations, fmt.Sprintf("%d reads during the run found an acknowledged file missing", n))
	}
	e.rep.Passed = e.rep.LostBytes == 0 && e.rep.ReadMismatches == 0 && res != porcupine.Illegal && len(e.rep.Violations) == 0 &&
		w.lostFiles.Load() == 0 && e.rep.CorruptionsDetected+e.rep.CorruptionsMoot == e.rep.Corruptions && e.rep.DeletionsRepaired == e.rep.Deletions &&
		e.rep.FsckClean && e.rep.FullyRedundant
	if e.rep.Passed {
		e.rep.Schedule = nil // kept only to replay a failure
	}
	return nil
}

func isNFS(c fsOps) bool { _, ok := c.(*nfsOps); return ok }

// namespaceOpFixed runs one given namespace operation and records it.
func (w *workload) namespaceOpFixed(ctx context.Context, client int, c fsOps, in NsInput) {
	call := w.hist.now()
	var res NsOutput
	err, finished := do(ctx, func(ctx context.Context) error {
		if in.Kind != OpRead && in.Kind != OpList {
			return errors.New("torture: namespaceOpFixed: only reads and lists")
		}
		return w.observe(ctx, client, c, in, &res)
	})
	out := NsOutput{Unknown: true}
	if finished {
		out = res
		out.Errno = errnoOf(err)
	}
	if !finished || !definite(out.Errno) {
		out = NsOutput{Unknown: true}
		w.violation("after the heal: %s could not be answered: %v", in, err)
	}
	w.hist.add(client, in, call, out)
}

// inject applies the schedule until ctx ends, undoing each timed fault
// when its time is up.
func (e *engine) inject(ctx context.Context, sched []Fault) {
	start := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, f := range sched {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(f.At))):
		}
		undo, err := e.apply(ctx, f)
		if err != nil {
			e.printf("fault %s: %v", f, err)
			continue
		}
		e.printf("fault %s", f)
		if undo == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
			case <-time.After(f.Duration):
			}
			// Undone after the workload too: the heal redoes every undo.
			uctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := undo(uctx); err != nil {
				e.printf("undo %s: %v", f, err)
			}
		}()
	}
}

// apply injects one fault and returns how to undo it (nil: nothing to undo).
func (e *engine) apply(ctx context.Context, f Fault) (func(context.Context) error, error) {
	switch f.Kind {
	case FaultKill:
		r := e.cl.Role(f.Target)
		if r == nil || !r.Running() {
			return nil, notRunning(r, f.Target)
		}
		r.Kill()
		e.count(&e.rep.Kills)
		return func(ctx context.Context) error { return e.restartUntilUp(ctx, r) }, nil
	case FaultFailpoint:
		r := e.cl.Role(f.Target)
		if r == nil || !r.Running() {
			return nil, notRunning(r, f.Target)
		}
		r.Kill()
		if err := r.RestartWith(ctx, faults.EnvVar+"="+f.Point+"=crash"); err != nil {
			return func(ctx context.Context) error { return e.restartUntilUp(ctx, r) }, fmt.Errorf("restart with %s armed: %w", f.Point, err)
		}
		e.count(&e.rep.FailpointsArmed)
		// Undo: a process whose point has not fired by then is killed;
		// either way it starts again without it.
		return func(ctx context.Context) error {
			if r.Running() {
				r.Kill()
			} else if code, _ := r.ExitCode(); code == 128+int(syscall.SIGKILL) {
				e.count(&e.rep.FailpointsFired) // it crashed itself there
				e.printf("%s crashed at %s", r.Name, f.Point)
			} else {
				e.printf("%s exited with code %d while %s was armed", r.Name, code, f.Point)
			}
			return e.restartUntilUp(ctx, r)
		}, nil
	case FaultPause:
		r := e.cl.Role(f.Target)
		if r == nil || !r.Running() {
			return nil, notRunning(r, f.Target)
		}
		if err := r.Pause(); err != nil {
			return nil, err
		}
		e.count(&e.rep.Hangs)
		return func(context.Context) error { return r.Resume() }, nil
	case FaultPartition:
		mode := simnet.Both
		if f.OneWay {
			mode = simnet.OneWay
		}
		if err := e.net.Partition(ctx, f.Target, f.Peer, mode); err != nil {
			return nil, err
		}
		e.count(&e.rep.Partitions)
		return func(ctx context.Context) error { return e.net.Heal(ctx, f.Target, f.Peer) }, nil
	case FaultCorrupt, FaultDelete:
		d, err := e.damage(f)
		if err == nil && f.Kind == FaultCorrupt && e.probe != nil {
			e.probes.Add(1)
			go func() {
				defer e.probes.Done()
				e.probeCorruption(d)
			}()
		}
		return nil, err
	case FaultDiskFull:
		r := e.cl.Role(f.Target)
		if r == nil || len(e.tmpfs) == 0 {
			return nil, errors.New("no tmpfs disks (not root)")
		}
		path := filepath.Join(r.Dir, ".torture-ballast")
		if err := fill(path); err != nil {
			return nil, err
		}
		e.count(&e.rep.DiskFull)
		return func(context.Context) error {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		}, nil
	}
	return nil, fmt.Errorf("unknown fault kind %q", f.Kind)
}

// notRunning says that role r (named target) is not running, and how
// it exited: a role the schedule did not kill that exited on its own.
func notRunning(r *simcluster.Role, target string) error {
	if r == nil {
		return fmt.Errorf("%s is not running", target)
	}
	code, _ := r.ExitCode()
	return fmt.Errorf("%s is not running (exit code %d)", target, code)
}

func (e *engine) count(n *int) {
	e.mu.Lock()
	*n++
	e.mu.Unlock()
}

// restartUntilUp restarts a killed role the way deploy/'s units do
// (Restart=on-failure, RestartSec=2): a start that fails, say because the
// role it needs is itself down or cut off at that moment, is retried
// every two seconds until ctx ends. Each failed start is counted.
func (e *engine) restartUntilUp(ctx context.Context, r *simcluster.Role) error {
	for {
		err := e.restart(ctx, r)
		if err == nil {
			return nil
		}
		e.count(&e.rep.FailedRestarts)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(2 * time.Second):
		}
	}
}

// restart starts a killed role again (a FUSE mount is unmounted first).
func (e *engine) restart(ctx context.Context, r *simcluster.Role) error {
	if r.Running() {
		return nil
	}
	if r.Kind == "mount" {
		_ = exec.CommandContext(ctx, "fusermount3", "-u", "-z", e.ccfg.Mount).Run()
	}
	return r.Restart(ctx)
}

// fill writes a ballast file until its disk is full.
func fill(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return err
		}
	}
}

// fragmentFiles lists the regular files of a storage server's directory
// that hold fragments (not its journal or the ballast), sorted.
func fragmentFiles(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if _, err := fragment.ParseID(d.Name()); err == nil {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// slotOf is the slot of storage role "storageN".
func slotOf(role string) uint16 {
	n, _ := strconv.Atoi(strings.TrimPrefix(role, "storage"))
	return uint16(n)
}

// stripeOf is the stripe part of a fragment file name (STRIPE-INDEX...).
func stripeOf(path string) string {
	base := filepath.Base(path)
	if i := strings.LastIndexByte(base, '.'); i > 0 {
		base = base[:i]
	}
	if i := strings.LastIndexByte(base, '-'); i > 0 {
		return base[:i]
	}
	return base
}

// damage corrupts or deletes one fragment file of f.Target, never two of
// one stripe in a run (the policy tolerates one lost fragment per stripe;
// more is beyond what any redundancy promises).
func (e *engine) damage(f Fault) (damage, error) {
	r := e.cl.Role(f.Target)
	if r == nil {
		return damage{}, fmt.Errorf("no role %s", f.Target)
	}
	files := fragmentFiles(r.Dir)
	e.mu.Lock()
	defer e.mu.Unlock()
	var cands []string
	for _, p := range files {
		if !e.damaged[stripeOf(p)] {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return damage{}, errors.New("no undamaged fragment to damage")
	}
	p := cands[f.Pick%uint64(len(cands))]
	orig, err := os.ReadFile(p)
	if err != nil {
		return damage{}, err
	}
	d := damage{p, slotOf(r.Name), orig}
	if f.Kind == FaultDelete {
		if err := os.Remove(p); err != nil {
			return damage{}, err
		}
		e.deleted = append(e.deleted, d)
		e.rep.Deletions++
	} else {
		bad := slices.Clone(orig)
		off := int(f.Pick>>20) % len(bad)
		for i := off; i < min(off+16, len(bad)); i++ {
			bad[i] ^= 0xA5
		}
		if err := os.WriteFile(p, bad, 0o644); err != nil {
			return damage{}, err
		}
		e.corrupt = append(e.corrupt, d)
		e.rep.Corruptions++
	}
	e.damaged[stripeOf(p)] = true
	return d, nil
}

// probeCorruption asks d's storage server, a few seconds after the
// corruption, to verify the fragment (what its scrubber does on its next
// pass): a server that calls it sound is a violation. While the server is
// down, paused or cut off the engine keeps asking for up to probeWindow;
// then the end-of-run check has the last word.
func (e *engine) probeCorruption(d damage) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), probeWindow)
	defer cancel()
	verdict := func() (done, detected bool, violation string) {
		vctx, vcancel := context.WithTimeout(ctx, 10*time.Second)
		defer vcancel()
		st, sick, err := e.examine(vctx, e.probe, d)
		switch {
		case st == fragMoot:
			return true, false, ""
		case st == fragVanished || err != nil:
			return false, false, "" // ask again: its stripe may be dying, its server away
		case st == fragRestored:
			return true, true, "" // a read found and repaired it already
		case len(sick) == 0:
			return true, false, fmt.Sprintf("storage slot %d called corrupted fragment %s sound", d.slot, d.path)
		}
		return true, true, ""
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(2 * time.Second):
	}
	for ctx.Err() == nil {
		done, detected, violation := verdict()
		if done {
			e.mu.Lock()
			e.rep.CorruptionsProbed++
			if detected {
				e.rep.ProbeDetected++
				e.rep.ProbeDelayMaxSec = max(e.rep.ProbeDelayMaxSec, time.Since(start).Seconds())
			}
			if violation != "" {
				e.rep.Violations = append(e.rep.Violations, violation)
			}
			e.mu.Unlock()
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

// fragState is what became of a corrupted fragment file.
type fragState int

const (
	fragMoot     fragState = iota // gone with its whole stripe
	fragVanished                  // gone while its stripe lives on
	fragRestored                  // holds its original bytes again (repaired)
	fragOnDisk                    // still holds other bytes: examine verified it
)

// examine finds what became of the corrupted fragment d and, while it is
// still on disk with other bytes, asks its storage server to verify it
// (the scrubber's check) through vc: the sick ranges, or why it could not
// ask. The run's probes and the final check both judge by it.
func (e *engine) examine(ctx context.Context, vc *connect.Conn, d damage) (fragState, []fragment.Range, error) {
	got, err := os.ReadFile(d.path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && e.stripeGone(d.path):
		return fragMoot, nil, nil
	case errors.Is(err, fs.ErrNotExist):
		return fragVanished, nil, nil
	case err == nil && bytes.Equal(got, d.orig):
		return fragRestored, nil, nil
	}
	id, err := fragment.ParseID(filepath.Base(d.path))
	if err != nil {
		return fragOnDisk, nil, err
	}
	sick, err := vc.Data.VerifyFragment(ctx, d.slot, id)
	return fragOnDisk, sick, err
}

// probeWindow bounds how long the engine keeps asking about one
// corruption while its server is unreachable.
const probeWindow = 90 * time.Second

// heal undoes every fault and waits for every role to serve again.
func (e *engine) heal(ctx context.Context) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	keep(e.net.HealAll(ctx))
	for _, r := range e.cl.Roles {
		_ = r.Resume()
		if r.Kind == "storage" {
			_ = os.Remove(filepath.Join(r.Dir, ".torture-ballast"))
		}
	}
	for _, r := range e.cl.Roles {
		if !r.Running() {
			keep(e.restart(ctx, r))
		}
	}
	// Every member up in the manager's view.
	for ctx.Err() == nil {
		out, err := exec.CommandContext(ctx, e.cfg.Exe, "status", "--json", "--cluster", e.cl.Manager, "--key", e.ccfg.ClusterKeyPath()).Output()
		var st struct {
			Members []struct{ Kind, State string }
		}
		if err == nil && json.Unmarshal(out, &st) == nil {
			up := 0
			for _, m := range st.Members {
				if m.State == "up" {
					up++
				}
			}
			if up == len(st.Members) && len(st.Members) > 0 {
				return first
			}
		}
		time.Sleep(time.Second)
	}
	return errors.Join(first, ctx.Err())
}

// repair runs cleaner passes (repairs of missing and corrupt fragments)
// until one has nothing left to repair.
func (e *engine) repair(ctx context.Context) {
	e.rep.FullyRedundant = false
	var last []string
	// Up to a minute of passes: the manager's own cleaner runs beside
	// these (the two may race on one stripe: one pass fails, the next
	// finds it done), and servers that just restarted may still be
	// loading their records.
	deadline := time.Now().Add(time.Minute)
	for i := 0; ctx.Err() == nil && (i < 3 || time.Now().Before(deadline)); i++ {
		if i > 0 {
			time.Sleep(2 * time.Second)
		}
		out, err := exec.CommandContext(ctx, e.cfg.Exe, "clean", "--json", "--cluster", e.cl.Manager, "--key", e.ccfg.ClusterKeyPath()).CombinedOutput()
		var rep struct {
			Repaired      int      `json:"repaired_fragments"`
			RepairFailed  int      `json:"repair_failed"`
			RepairPending int      `json:"repair_pending"`
			Errors        []string `json:"errors"`
		}
		if jerr := json.Unmarshal(lastJSON(out), &rep); jerr != nil {
			last = []string{fmt.Sprintf("clean: %v: %s", err, lastLine(out))}
			continue
		}
		last = rep.Errors
		if err == nil && rep.Repaired == 0 && rep.RepairFailed == 0 && rep.RepairPending == 0 && len(rep.Errors) == 0 {
			e.rep.FullyRedundant = true
			return
		}
	}
	for _, l := range last {
		e.rep.Errors = append(e.rep.Errors, "last cleaner pass: "+l)
	}
}

// verifyDamage asks the storage servers about every fragment the engine
// corrupted that is still corrupt (what their scrubbers would find on
// their next pass): each must be reported sick. A corruption counts as
// detected when the servers report it now, or when it was found and
// repaired during the run already (the file has its original bytes).
// Fragments deleted with their dead stripes count as moot.
func (e *engine) verifyDamage(ctx context.Context, vc *connect.Conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, d := range e.corrupt {
		st, sick, err := e.examine(ctx, vc, d)
		switch {
		case st == fragMoot:
			e.rep.CorruptionsMoot++
		case st == fragVanished:
			e.rep.Violations = append(e.rep.Violations, fmt.Sprintf("corrupted fragment %s vanished while its stripe lives on", d.path))
		case st == fragRestored:
			e.rep.CorruptionsDetected++
		case err != nil || len(sick) == 0:
			e.rep.Violations = append(e.rep.Violations, fmt.Sprintf("corrupted fragment %s (slot %d) not detected: verify says %v, %v", d.path, d.slot, sick, err))
		default:
			e.rep.CorruptionsDetected++
		}
	}
	// A deleted fragment file is found by the scrubber, a read or a
	// restart: ask now, as the scrubber would on its next pass.
	for _, d := range e.deleted {
		got, err := os.ReadFile(d.path)
		if (err == nil && bytes.Equal(got, d.orig)) || (errors.Is(err, fs.ErrNotExist) && e.stripeGone(d.path)) {
			continue
		}
		id, perr := fragment.ParseID(filepath.Base(d.path))
		sick, verr := vc.Data.VerifyFragment(ctx, d.slot, id)
		if perr != nil || verr != nil || len(sick) == 0 {
			e.rep.Violations = append(e.rep.Violations, fmt.Sprintf("deleted fragment %s (slot %d) not detected: verify says %v, %v", d.path, d.slot, sick, errors.Join(perr, verr)))
		}
	}
}

// checkDamage, after the repair passes: every damaged fragment of a live
// stripe (one a block pointer still refers to) has its original bytes
// again. A dead stripe is not repaired (its data is garbage the cleaner
// deletes once older than its grace), so damage there is moot.
func (e *engine) checkDamage(ctx context.Context, vc *connect.Conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	live := func(path string) bool {
		id, err := fragment.ParseID(filepath.Base(path))
		if err != nil {
			return true
		}
		refs, err := vc.FS.StripeRefs(ctx, id.Stripe())
		return err != nil || len(refs) > 0 // unknown counts as live
	}
	for _, d := range e.corrupt {
		got, err := os.ReadFile(d.path)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && bytes.Equal(got, d.orig)) || !live(d.path) {
			continue
		}
		e.rep.Violations = append(e.rep.Violations, fmt.Sprintf("corrupted fragment %s of a live stripe was not repaired (%v)", d.path, err))
	}
	for _, d := range e.deleted {
		got, err := os.ReadFile(d.path)
		switch {
		case err == nil && bytes.Equal(got, d.orig):
			e.rep.DeletionsRepaired++
		case errors.Is(err, fs.ErrNotExist) && (e.stripeGone(d.path) || !live(d.path)):
			e.rep.DeletionsRepaired++ // the stripe died: nothing to repair
		default:
			e.rep.Violations = append(e.rep.Violations, fmt.Sprintf("deleted fragment %s was not recreated (%v)", d.path, err))
		}
	}
}

// stripeGone reports whether no storage server holds a fragment of the
// stripe of path any more (it was deleted as dead).
func (e *engine) stripeGone(path string) bool {
	s := stripeOf(path)
	for _, r := range e.cl.Roles {
		if r.Kind != "storage" {
			continue
		}
		for _, p := range fragmentFiles(r.Dir) {
			if stripeOf(p) == s {
				return false
			}
		}
	}
	return true
}

func (e *engine) fsck(ctx context.Context) {
	out, err := exec.CommandContext(ctx, e.cfg.Exe, "fsck", "--json", "--cluster", e.cl.Manager, "--key", e.ccfg.ClusterKeyPath()).Output()
	var rep struct {
		Clean    bool     `json:"clean"`
		Problems []string `json:"problems"`
	}
	if jerr := json.Unmarshal(lastJSON(out), &rep); jerr != nil {
		e.rep.FsckProblems = []string{fmt.Sprintf("fsck: %v %v: %s", err, jerr, lastLine(out))}
		return
	}
	e.rep.FsckClean, e.rep.FsckProblems = rep.Clean, rep.Problems
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// lastJSON is the last line of a command's output that is a JSON object.
func lastJSON(b []byte) []byte {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "{") {
			return []byte(lines[i])
		}
	}
	return nil
}
