package bench

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/atoll-fs/atoll/internal/simcluster"
	"github.com/atoll-fs/atoll/internal/simnet"
)

// Host kinds of the scale model besides simcluster's roles.
const (
	kindClient = "client"
	// kindCalibrate is the host of the CPU speed probe (RunCalibrator).
	kindCalibrate = "calibrate"
)

// calibrateCPU is the probe host's budget: a small share, always busy.
const calibrateCPU = 0.04

// DefaultBudgets is the modelled machine of each kind: small enough that
// the largest point of every experiment leaves this 2-core box idle time.
func DefaultBudgets() map[string]simnet.Budget {
	return map[string]simnet.Budget{
		simcluster.KindManager: {CPU: 0.1},
		simcluster.KindStorage: {CPU: 0.06, DiskBps: 10e6, DiskIOPS: 2000, LinkBits: 100e6},
		simcluster.KindIsland:  {CPU: 0.06, DiskBps: 10e6, DiskIOPS: 2000, LinkBits: 100e6},
		kindClient:             {CPU: 0.15, LinkBits: 400e6},
		// A mount host runs the FUSE mount and the writing application:
		// a link faster than the five storage servers' together, so that
		// theirs are what the mount experiment is measured against.
		simcluster.KindMount: {CPU: 0.6, LinkBits: 1e9},
	}
}

// ScaleConfig is a run of `atoll bench scale`.
type ScaleConfig struct {
	Exe string // the atoll binary (roles and workers)
	Dir string // scratch directory ("" = a temporary one)
	// Experiments to run: "storage", "metadata", "replicas", "clients"
	// (nil: all).
	Experiments []string
	// Small runs two points per experiment at a small size (CI).
	Small   bool
	Size    int64 // storage: bytes written and read per point, over all clients
	Files   int   // metadata: files per island (spread over the clients)
	Budgets map[string]simnet.Budget
	// MaxCPU is the share of the machine's cores the budgets of a point
	// may add up to (default 0.75).
	MaxCPU float64
	Logger *slog.Logger
	Out    io.Writer // roles' and workers' output ("" = a log file in Dir)
}

// ScaleResult is the report: every table, and the worst of each.
type ScaleResult struct {
	Budgets  map[string]simnet.Budget `json:"budgets"`
	Storage  []ScalePoint             `json:"storage,omitempty"`
	Metadata []ScalePoint             `json:"metadata,omitempty"`
	Replicas []ScalePoint             `json:"replicas,omitempty"`
	Clients  []ScalePoint             `json:"clients,omitempty"`
	Failover []ScalePoint             `json:"failover,omitempty"`
	Growth   []ScalePoint             `json:"growth,omitempty"`
	Mount    []ScalePoint             `json:"mount,omitempty"`
	// The worst point of each experiment (nil: not run).
	StorageEfficiency  *float64 `json:"storage_efficiency"`
	MetadataEfficiency *float64 `json:"metadata_efficiency"`
	// ReplicasRatio is durable creates and lookups with 3 replicas of
	// each island, each replica on a host of its own (9 island servers),
	// against one replica (3); ReplicasRatioShared the same with the 3
	// replicas of the 3 islands on 3 hosts, each host leading one island
	// and following two (full runs only).
	ReplicasRatio       *float64 `json:"replicas_ratio"`
	ReplicasRatioShared *float64 `json:"replicas_ratio_shared_hosts,omitempty"`
	// The same at equal CPU speed (PhaseResult.NormEfficiency).
	StorageEfficiencyNorm  *float64 `json:"storage_efficiency_at_equal_cpu_speed"`
	MetadataEfficiencyNorm *float64 `json:"metadata_efficiency_at_equal_cpu_speed"`
	ReplicasRatioNorm      *float64 `json:"replicas_ratio_at_equal_cpu_speed"`
	// ClientsAfterPeak is the clients experiment's worst rate after its
	// best against that best (1: no drop once the servers saturate).
	ClientsAfterPeak *float64 `json:"clients_after_peak"`
	// FailoverSeconds is the longest time back to full speed after a
	// kill -9 (-1: one did not get back within its run).
	FailoverSeconds *float64 `json:"failover_s"`
	// MigrationPenalty is the growth experiment's worst Growth.Penalty:
	// the share of throughput lost while data or table entries moved
	// onto an added server, against the mean of before and after.
	MigrationPenalty *float64 `json:"migration_penalty"`
	// MountLinkShare is the mount experiment's write rate against what
	// the storage servers' links carry together, in file bytes (their
	// rate times 4/5 for ec:4+1's parity).
	MountLinkShare *float64 `json:"mount_write_link_share"`
	// IdleFraction is the machine's least idle fraction over the phases.
	IdleFraction float64 `json:"idle_fraction"`
	Seconds      float64 `json:"seconds"`
}

// ScalePoint is one cluster shape and what its workers did.
type ScalePoint struct {
	Storage  int `json:"storage_servers"`
	Islands  int `json:"islands"`
	Replicas int `json:"replicas"`
	// IslandServers is the hosts running island servers (Islands unless
	// the replicas have hosts of their own).
	IslandServers int           `json:"island_servers"`
	Clients       int           `json:"clients"`
	Phases        []PhaseResult `json:"phases"`
	Failover      *Failover     `json:"failover,omitempty"`
	Growth        *Growth       `json:"growth,omitempty"`
}

// Growth is what adding a server in the middle of a run did: its phases
// (PhaseResult) are the windows before the server joined, while data or
// table entries moved onto it, and after.
type Growth struct {
	Added string `json:"added"` // the host and role
	Moved string `json:"moved"` // what moved onto it
	Unit  string `json:"unit"`
	// Rates over the windows: Before ends when the server is started,
	// During runs from the first move to the last, After from then to
	// the end of the run.
	Before float64 `json:"rate_before"`
	During float64 `json:"rate_during"`
	After  float64 `json:"rate_after"`
	// Penalty is 1 - During / ((Before + After) / 2): the throughput the
	// moves cost, beyond the change the new server itself brings
	// (Archipelago §5: 4.5%). Negative: none.
	Penalty float64 `json:"penalty"`
	// JoinSeconds is from starting the server to its being up in the
	// map (for an island server: to its island serving); MoveSeconds the
	// moves' length.
	JoinSeconds float64 `json:"join_s"`
	MoveSeconds float64 `json:"move_s"`
	// MoveCPUSeconds is the moves' own cost: the CPU-seconds all server
	// hosts (manager, storage, islands: the rebalancing pass runs on the
	// manager's) used while the moves ran, beyond their mean rate before
	// and after.
	MoveCPUSeconds float64   `json:"move_cpu_s"`
	JoinAt         float64   `json:"join_at_s"` // seconds into the run
	MoveAt         float64   `json:"move_at_s"`
	MovedAt        float64   `json:"moved_at_s"`
	PerSecond      []float64 `json:"per_second"`
}

// Failover is what a kill -9 in the middle of a run did to its rate.
type Failover struct {
	Killed string  `json:"killed"` // the role
	Unit   string  `json:"unit"`
	Before float64 `json:"rate_before"` // from the run's second second to the kill
	Lowest float64 `json:"lowest_rate"` // the worst half second after the kill
	// After is the rate the cluster settles at without the killed role:
	// the last third of the run after the kill.
	After float64 `json:"rate_after"`
	// FullSpeedAfter is the seconds from the kill to the end of the first
	// half second at 90% of After or more after the worst half second
	// (-1: none, or After is below a tenth of Before: the cluster did not
	// recover within the run).
	FullSpeedAfter float64 `json:"full_speed_after_s"`
	// KillAt is the second of the run the kill came in; PerSecond is the
	// rate in each second of the run.
	KillAt    float64   `json:"kill_at_s"`
	PerSecond []float64 `json:"per_second"`
}

// PhaseResult is one phase of a point.
type PhaseResult struct {
	Name    string  `json:"name"`
	Rate    float64 `json:"rate"`
	Unit    string  `json:"unit"` // "MB/s" or "ops/s"
	Seconds float64 `json:"seconds"`
	// Efficiency is Rate against perfect scaling from the experiment's
	// first point (1 = perfect); for replicas, against one replica.
	Efficiency float64 `json:"efficiency"`
	// Bottleneck names the host and budget most used: "s3 cpu 98%".
	Bottleneck string  `json:"bottleneck"`
	Idle       float64 `json:"idle_fraction"` // the machine's, during the phase
	// CPUSpeed is the probe's work per CPU-second during the phase (the
	// VM's CPU-second is not a fixed amount of work: it swings with the
	// host machine's load), and NormEfficiency is Efficiency with each
	// point's rate scaled to the first point's CPU speed.
	CPUSpeed       float64   `json:"cpu_speed"`
	NormEfficiency float64   `json:"efficiency_at_equal_cpu_speed"`
	Hosts          []HostUse `json:"hosts"`
}

// HostUse is one host's use of its budget in a phase.
type HostUse struct {
	Host       string  `json:"host"`
	Kind       string  `json:"kind"`
	CPUSeconds float64 `json:"cpu_s"`
	CPU        float64 `json:"cpu_used"`            // of its budget (0..1)
	Disk       float64 `json:"disk_used,omitempty"` // of its disk rate
	Link       float64 `json:"link_used,omitempty"` // of its link rate, the busier way
}

// pointSpec is one cluster shape to run.
type pointSpec struct {
	storage, islands, replicas, clients int
	clientCPU                           float64       // the client hosts' CPU budget (0: the kind's)
	threads                             int           // meta: requests in flight per client (0: 16)
	duration                            time.Duration // a run phase's length (failover)
	kill                                string        // the role killed a quarter into the run
	kind                                string        // worker kind
	size                                int64         // data: per client
	files                               int           // meta: per client
	grow                                string        // "island" or "storage": a server added in the middle of the run
	ownHosts                            bool          // every island replica on a host of its own
	// diskOverLink gives the storage hosts disks faster than their links
	// (the mount experiment is measured against the links).
	diskOverLink bool
}

// RunScale runs the experiments, each point on a fresh simulated cluster.
func RunScale(ctx context.Context, cfg ScaleConfig, progress io.Writer) (ScaleResult, error) {
	began := time.Now()
	if why := simnet.BudgetsAvailable(); why != "" {
		return ScaleResult{}, fmt.Errorf("bench scale: %s", why)
	}
	if cfg.Budgets == nil {
		cfg.Budgets = DefaultBudgets()
	}
	if cfg.MaxCPU == 0 {
		cfg.MaxCPU = 0.75
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Size == 0 {
		cfg.Size = 1 << 30
		if cfg.Small {
			cfg.Size = 32 << 20
		}
	}
	if cfg.Files == 0 {
		cfg.Files = 3000
		if cfg.Small {
			cfg.Files = 500
		}
	}
	if len(cfg.Experiments) == 0 {
		cfg.Experiments = slices.Clone(experiments)
	}
	for _, e := range cfg.Experiments {
		if !slices.Contains(experiments, e) {
			return ScaleResult{}, fmt.Errorf("bench scale: unknown experiment %q (%s)", e, strings.Join(experiments, ", "))
		}
	}
	say := sayer(progress)
	dir, done, err := scratch(cfg.Dir, "scale")
	if err != nil {
		return ScaleResult{}, err
	}
	defer done()
	if cfg.Out == nil {
		f, err := os.Create(filepath.Join(dir, "roles.log"))
		if err != nil {
			return ScaleResult{}, err
		}
		defer f.Close()
		cfg.Out = f
	}
	res := ScaleResult{Budgets: cfg.Budgets, IdleFraction: 1}
	for k, b := range cfg.Budgets {
		say("budget %-8s %s", k, b)
	}

	for _, exp := range cfg.Experiments {
		var specs []pointSpec
		switch exp {
		case "storage": // ec:4+1, servers 5 -> 10, a client per server
			// A client writes a few stripes at a time, so its rate is
			// bound by their round trips (about 14 MB/s here), not by
			// its CPU: with 2/5 of a client per server, rounded, 6
			// servers got the 5's two clients and wrote at 83% of
			// perfect while their disks ran at 59%. One small client per
			// server keeps
			// the offered load in step with the servers.
			servers := []int{5, 6, 8, 10}
			if cfg.Small {
				servers = []int{5, 10}
			}
			for _, s := range servers {
				specs = append(specs, pointSpec{storage: s, islands: 1, replicas: 1, clients: s, clientCPU: 0.06, kind: "data", size: cfg.Size / int64(s)})
			}
		case "metadata": // islands 1 -> 8, a client per two islands (a client needs about a third of an island's CPU per create)
			islands := []int{1, 2, 4, 8}
			if cfg.Small {
				islands = []int{1, 2}
			}
			for _, n := range islands {
				// Each island sees the same requests in flight as the one
				// island did (16): an island's group commit makes a create
				// cheaper the more wait together.
				c := max(1, n/2)
				specs = append(specs, pointSpec{storage: 1, islands: n, replicas: 1, clients: c, threads: 16 * n / c, kind: "meta", files: cfg.Files * n / c})
			}
		case "replicas": // three islands, one replica against three, each replica on its own host; then three sharing hosts
			specs = append(specs, pointSpec{storage: 1, islands: 3, replicas: 1, clients: 3, kind: "meta", files: cfg.Files},
				pointSpec{storage: 1, islands: 3, replicas: 3, clients: 3, kind: "meta", files: cfg.Files, ownHosts: true})
			if !cfg.Small {
				specs = append(specs, pointSpec{storage: 1, islands: 3, replicas: 3, clients: 3, kind: "meta", files: cfg.Files})
			}
		case "failover": // kill -9 a quarter into a run: an island's leader (3 replicas), a storage server (ec:4+1 on 6)
			d := 24 * time.Second
			if cfg.Small {
				d = 10 * time.Second
			}
			specs = append(specs,
				pointSpec{storage: 1, islands: 3, replicas: 3, clients: 3, kind: "meta-run", duration: d, kill: "island1"},
				pointSpec{storage: 6, islands: 1, replicas: 1, clients: 2, kind: "data-run", duration: d, kill: "storage0", size: 64 << 20})
		case "growth": // Archipelago §5, Sigma: a server added while serving; a run ends once the moves are over
			d := 10 * time.Minute // at most
			specs = append(specs,
				pointSpec{storage: 1, islands: 2, replicas: 1, clients: 2, threads: 16, kind: "meta-run", duration: d, grow: "island"},
				pointSpec{storage: 5, islands: 1, replicas: 1, clients: 2, kind: "files-run", duration: d, grow: "storage"})
		case "mount": // write and read through a FUSE mount on its own host, 5 storage servers (ec:4+1)
			specs = append(specs, pointSpec{storage: 5, islands: 1, replicas: 1, clients: 1, kind: "mount", size: max(cfg.Size/4, 16<<20), diskOverLink: true})
		case "clients": // Sigma's NetBench curve: 1 -> 16 small clients on 4 islands, the same total work
			counts := []int{1, 2, 4, 8, 16}
			if cfg.Small {
				counts = []int{1, 4}
			}
			for _, c := range counts {
				specs = append(specs, pointSpec{storage: 1, islands: 4, replicas: 1, clients: c, clientCPU: 0.04, kind: "meta", files: max(1, cfg.Files*4/c)})
			}
		}
		say("\n== %s ==", exp)
		if exp == "mount" {
			say("  (storage hosts' disks at twice their link's rate, so that the links bound the servers)")
		}
		var points []ScalePoint
		for _, sp := range specs {
			p, err := runScalePoint(ctx, cfg, dir, sp, say)
			if err != nil {
				return res, fmt.Errorf("bench scale: %s, %d servers, %d islands x%d, %d clients: %w", exp, sp.storage, sp.islands, sp.replicas, sp.clients, err)
			}
			points = append(points, p)
			for _, ph := range p.Phases {
				res.IdleFraction = min(res.IdleFraction, ph.Idle)
			}
		}
		var worst, norm float64
		if exp != "failover" && exp != "growth" && exp != "mount" {
			worst, norm = efficiencies(exp, points)
		}
		switch exp {
		case "growth":
			worst = math.Inf(-1)
			for _, p := range points {
				worst = max(worst, p.Growth.Penalty)
			}
			res.Growth, res.MigrationPenalty = points, &worst
			printGrowth(say, points)
			continue
		case "failover":
			worst = 0
			for _, p := range points {
				if p.Failover.FullSpeedAfter < 0 {
					worst = -1
					break
				}
				worst = max(worst, p.Failover.FullSpeedAfter)
			}
			res.Failover, res.FailoverSeconds = points, &worst
			printFailover(say, points)
			continue
		case "mount":
			// Against the servers' links: each phase's rate over what they
			// carry together in file bytes.
			link := float64(cfg.Budgets[simcluster.KindStorage].LinkBits) / 8 / 1e6 * 4 / 5
			for i := range points {
				for j := range points[i].Phases {
					ph := &points[i].Phases[j]
					if link > 0 {
						ph.Efficiency = ph.Rate / (link * float64(points[i].Storage))
						ph.NormEfficiency = ph.Efficiency
					}
				}
			}
			w := points[0].Phases[0].Efficiency
			res.Mount, res.MountLinkShare = points, &w
		case "clients":
			after := afterPeak(points)
			res.Clients, res.ClientsAfterPeak = points, &after
		case "storage":
			res.Storage, res.StorageEfficiency, res.StorageEfficiencyNorm = points, &worst, &norm
		case "metadata":
			res.Metadata, res.MetadataEfficiency, res.MetadataEfficiencyNorm = points, &worst, &norm
		case "replicas":
			// The ratio is the own-hosts point's (the second); the
			// shared-hosts point has its own figure.
			own, ownNorm := pointWorst(points[1])
			res.Replicas, res.ReplicasRatio, res.ReplicasRatioNorm = points, &own, &ownNorm
			if len(points) > 2 {
				shared, _ := pointWorst(points[2])
				res.ReplicasRatioShared = &shared
			}
		}
		printTable(say, exp, points)
	}
	res.Seconds = time.Since(began).Seconds()
	say("\nleast idle fraction of the machine during a phase: %.0f%%", 100*res.IdleFraction)
	return res, nil
}

var experiments = []string{"storage", "metadata", "replicas", "clients", "failover", "growth", "mount"}

// afterPeak is, over the phases, the worst rate of a point after the
// phase's best point against that best.
func afterPeak(points []ScalePoint) float64 {
	worst := 1.0
	for j := range points[0].Phases {
		best := 0.0
		for _, p := range points {
			r := p.Phases[j].Rate
			if best > 0 && r < best {
				worst = min(worst, r/best)
			}
			best = max(best, r)
		}
	}
	return worst
}

// efficiencies fills each phase's efficiency against the first point and
// returns the worst over the points after the first.
func efficiencies(exp string, points []ScalePoint) (worst, worstNorm float64) {
	worst, worstNorm = 1.0, 1.0
	if len(points) == 0 {
		return 0, 0
	}
	base := points[0]
	scale := func(p ScalePoint) float64 {
		switch exp {
		case "storage":
			return float64(p.Storage)
		case "metadata":
			return float64(p.Islands)
		}
		return 1
	}
	for i := range points {
		for j := range points[i].Phases {
			ph := &points[i].Phases[j]
			b := base.Phases[j].Rate * scale(points[i]) / scale(base)
			if b > 0 {
				ph.Efficiency = ph.Rate / b
				ph.NormEfficiency = ph.Efficiency
				if bs := base.Phases[j].CPUSpeed; bs > 0 && ph.CPUSpeed > 0 {
					ph.NormEfficiency = ph.Efficiency * bs / ph.CPUSpeed
				}
			}
			if i > 0 {
				worst = min(worst, ph.Efficiency)
				worstNorm = min(worstNorm, ph.NormEfficiency)
			}
		}
	}
	return worst, worstNorm
}

// pointWorst is a point's lowest efficiency over its phases, and the
// same at equal CPU speed.
func pointWorst(p ScalePoint) (worst, norm float64) {
	worst, norm = math.Inf(1), math.Inf(1)
	for _, ph := range p.Phases {
		worst, norm = min(worst, ph.Efficiency), min(norm, ph.NormEfficiency)
	}
	return worst, norm
}

func printTable(say func(string, ...any), exp string, points []ScalePoint) {
	for _, p := range points {
		head := fmt.Sprintf("%2d servers, %d clients", p.Storage, p.Clients)
		if exp != "storage" {
			head = fmt.Sprintf("%d islands x%d, %d clients", p.Islands, p.Replicas, p.Clients)
			if p.IslandServers != p.Islands {
				head = fmt.Sprintf("%d islands x%d on %d hosts, %d clients", p.Islands, p.Replicas, p.IslandServers, p.Clients)
			}
		}
		for _, ph := range p.Phases {
			eff := "of perfect scaling"
			switch exp {
			case "replicas":
				eff = "against one replica"
			case "clients":
				eff = "against one client"
			case "mount":
				eff = "of the servers' links"
			}
			say("  %-28s %-6s %9.1f %-5s %4.0f%% %s, %4.0f%% at equal CPU speed  (%.1f s; busiest: %s; machine idle %.0f%%; CPU speed %.0f)",
				head, ph.Name, ph.Rate, ph.Unit, 100*ph.Efficiency, eff, 100*ph.NormEfficiency, ph.Seconds, ph.Bottleneck, 100*ph.Idle, ph.CPUSpeed)
			head = ""
		}
	}
}

// runScalePoint starts a cluster on budgeted hosts, runs the workers
// phase by phase, and stops it.
func runScalePoint(ctx context.Context, cfg ScaleConfig, dir string, sp pointSpec, say func(string, ...any)) (ScalePoint, error) {
	pt := ScalePoint{Storage: sp.storage, Islands: sp.islands, Replicas: sp.replicas, Clients: sp.clients, IslandServers: sp.islands}
	pdir, err := os.MkdirTemp(dir, "point-")
	if err != nil {
		return pt, err
	}
	defer os.RemoveAll(pdir)
	ccfg := simcluster.Config{Exe: cfg.Exe, Dir: filepath.Join(pdir, "data"), Storage: sp.storage, Islands: sp.islands,
		IslandReplicas: sp.replicas, LogLevel: "warn", Out: cfg.Out, OwnDisks: 4 << 30}
	switch sp.grow {
	case "island":
		ccfg.SpareIslandServers = 1
		if cfg.Small {
			// CI: entries move ten times faster than the islands'
			// default duty (2% of their time) lets them.
			ccfg.IslandArgs = []string{"--move-duty", "0.2"}
		}
	case "storage":
		ccfg.SpareStorage = 1
	}
	if sp.ownHosts {
		ccfg.SpareIslandServers = sp.islands * (sp.replicas - 1)
	}
	hosts := simcluster.HostNames(ccfg)
	kinds := simcluster.HostKinds(ccfg)
	budgets := maps.Clone(cfg.Budgets)
	if sb := budgets[simcluster.KindStorage]; sp.diskOverLink && sb.LinkBits > 0 {
		// Twice the link's rate, and IOPS to match.
		sb.DiskBps, sb.DiskIOPS = max(sb.DiskBps, sb.LinkBits/4), max(sb.DiskIOPS, 2*sb.DiskIOPS)
		budgets[simcluster.KindStorage] = sb
	}
	workerHost := func(i int) string { return fmt.Sprintf("c%d", i) }
	if sp.kind == "mount" {
		// The writing application runs on the mount's host, in its
		// budget, as it would on a real client machine.
		ccfg.Mount = filepath.Join(pdir, "mnt")
		hosts, kinds = simcluster.HostNames(ccfg), simcluster.HostKinds(ccfg)
		workerHost = func(int) string { return "cl" }
	} else {
		for i := 0; i < sp.clients; i++ {
			h := workerHost(i)
			hosts = append(hosts, h)
			kinds[h] = kindClient
		}
	}
	hosts = append(hosts, "cal")
	kinds["cal"] = kindCalibrate
	budgetOf := func(h string) simnet.Budget {
		if kinds[h] == kindCalibrate {
			return simnet.Budget{CPU: calibrateCPU}
		}
		b := budgets[kinds[h]]
		if kinds[h] == kindClient && sp.clientCPU > 0 {
			b.CPU = sp.clientCPU
		}
		return b
	}
	var quotas []simnet.Budget
	for _, h := range hosts {
		quotas = append(quotas, budgetOf(h))
	}
	if err := simnet.CheckQuotas(quotas, cfg.MaxCPU); err != nil {
		return pt, err
	}
	n, err := simnet.New(ctx, simnet.Config{Name: fmt.Sprintf("sc%d", os.Getpid()%10000), Hosts: hosts})
	if err != nil {
		return pt, err
	}
	defer n.Close()
	if !n.Isolated() {
		return pt, fmt.Errorf("no isolated hosts: %s", n.Reason())
	}
	ccfg.Net = n
	ccfg.Budgets = map[string]simnet.Budget{}
	for k, b := range budgets {
		if k != kindClient {
			ccfg.Budgets[k] = b
		}
	}
	cl, err := simcluster.Start(ctx, ccfg)
	if err != nil {
		return pt, err
	}
	defer cl.Stop()
	if sp.ownHosts {
		// As an operator spreads replicas over new machines: island
		// servers join, and `atoll island server rebalance` evens out
		// replicas and preferred leaders (one replica per server).
		for range ccfg.SpareIslandServers {
			if _, err := cl.AddIslandServer(ctx); err != nil {
				return pt, err
			}
		}
		if _, err := adminOn(ctx, n, cfg.Exe, cl.Manager, ccfg.ClusterKeyPath(), "island", "server", "rebalance", "--timeout", "5m"); err != nil {
			return pt, err
		}
		pt.IslandServers += ccfg.SpareIslandServers
	}
	for _, h := range hosts {
		if k := kinds[h]; k == kindClient || k == kindCalibrate {
			if err := n.SetBudget(ctx, h, budgetOf(h), ""); err != nil {
				return pt, err
			}
		}
	}

	sync := filepath.Join(pdir, "sync")
	if err := os.MkdirAll(sync, 0o755); err != nil {
		return pt, err
	}
	type worker struct {
		cmd  *exec.Cmd
		out  bytes.Buffer
		done chan error
	}
	workers := make([]*worker, sp.clients)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The CPU speed probe: its work per CPU-second in a phase says how
	// fast a CPU-second of this shared VM was then.
	calFile := filepath.Join(pdir, "calibrate")
	calCmd := n.Host("cal").Command(wctx, cfg.Exe, "bench", "scale-calibrate", "--out", calFile)
	calCmd.Stderr = cfg.Out
	if err := calCmd.Start(); err != nil {
		return pt, err
	}
	defer func() { cancel(); _ = calCmd.Wait() }()
	for i := range workers {
		args := []string{"bench", "scale-worker", "--cluster", cl.Manager, "--key", ccfg.ClusterKeyPath(),
			"--kind", sp.kind, "--id", strconv.Itoa(i), "--sync", sync, "--size", strconv.FormatInt(sp.size, 10),
			"--files", strconv.Itoa(sp.files), "--threads", strconv.Itoa(cmp.Or(sp.threads, 16)), "--policy", "ec:4+1", "--duration", sp.duration.String()}
		if p := os.Getenv("ATOLL_SCALE_PIPELINE"); p != "" {
			args = append(args, "--pipeline", p)
		}
		if sp.kind == "mount" {
			d := filepath.Join(ccfg.Mount, "bench")
			if err := os.MkdirAll(d, 0o755); err != nil {
				return pt, err
			}
			args = append(args, "--dir", d)
		}
		w := &worker{cmd: n.Host(workerHost(i)).Command(wctx, cfg.Exe, args...), done: make(chan error, 1)}
		w.cmd.Stdout, w.cmd.Stderr = &w.out, cfg.Out
		if err := w.cmd.Start(); err != nil {
			return pt, err
		}
		go func() { w.done <- w.cmd.Wait() }()
		workers[i] = w
	}
	defer func() {
		cancel()
		for _, w := range workers {
			<-w.done
		}
	}()

	// waitAll waits until every worker left ready-<phase>-<id>, failing
	// on a worker's error or exit.
	waitAll := func(phase string) error {
		deadline := time.Now().Add(30 * time.Minute)
		for {
			all := true
			for i, w := range workers {
				if b, err := os.ReadFile(filepath.Join(sync, fmt.Sprintf("error-%d", i))); err == nil {
					return fmt.Errorf("worker %d: %s", i, b)
				}
				if _, err := os.Stat(filepath.Join(sync, fmt.Sprintf("ready-%s-%d", phase, i))); err != nil {
					all = false
					select {
					case err := <-w.done:
						w.done <- err
						return fmt.Errorf("worker %d exited before %s: %v", i, phase, err)
					default:
					}
				}
			}
			if all {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("workers not ready for %s after 30 minutes", phase)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	take := func() (scaleSample, error) {
		s := scaleSample{at: time.Now(), host: map[string]simnet.Usage{}}
		var err error
		b, _ := os.ReadFile(calFile)
		s.cal, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if s.cpu, err = simnet.ReadCPUTimes(); err != nil {
			return s, err
		}
		for _, h := range hosts {
			if s.host[h], err = n.Usage(ctx, h); err != nil {
				return s, err
			}
		}
		return s, nil
	}
	phases := workerPhases[sp.kind]
	var samples []scaleSample
	var killAt time.Time
	var marks *growMarks
	for _, ph := range append(slices.Clone(phases), "end") {
		if err := waitAll(ph); err != nil {
			return pt, err
		}
		s, err := take()
		if err != nil {
			return pt, err
		}
		samples = append(samples, s)
		if ph != "end" {
			if err := os.WriteFile(filepath.Join(sync, "go-"+ph), nil, 0o644); err != nil {
				return pt, err
			}
			if sp.kill != "" {
				r := cl.Role(sp.kill)
				if r == nil {
					return pt, fmt.Errorf("no role %q", sp.kill)
				}
				killAt = time.Now().Add(sp.duration / 4)
				go func() {
					select {
					case <-time.After(time.Until(killAt)):
						r.Kill()
					case <-wctx.Done():
					}
				}()
			}
			if sp.grow != "" {
				g := growEnv{cfg: cfg, sp: sp, cl: cl, net: n, key: ccfg.ClusterKeyPath(), kind: kinds, take: take, say: say}
				marks, err = growDuring(ctx, g)
				// The workers stop either way (an error is reported once
				// they have).
				if werr := os.WriteFile(filepath.Join(sync, "stop-run"), nil, 0o644); werr != nil && err == nil {
					err = werr
				}
				if err != nil {
					return pt, err
				}
			}
		}
	}
	var results [][]WorkerPhase
	for i, w := range workers {
		if err := <-w.done; err != nil {
			return pt, fmt.Errorf("worker %d: %v", i, err)
		}
		w.done <- nil
		var r []WorkerPhase
		if err := json.Unmarshal(w.out.Bytes(), &r); err != nil || len(r) != len(phases) {
			return pt, fmt.Errorf("worker %d printed %q: %v", i, w.out.String(), err)
		}
		results = append(results, r)
	}
	// use fills a phase's host use, busiest budget, idle fraction and
	// CPU speed between two samples.
	use := func(pr *PhaseResult, s0, s1 scaleSample) {
		pr.Idle = simnet.IdleSince(s0.cpu, s1.cpu)
		if cs := s1.host["cal"].Sub(s0.host["cal"]).CPUSeconds; cs > 0 {
			pr.CPUSpeed = float64(s1.cal-s0.cal) / cs
		}
		wall := s1.at.Sub(s0.at).Seconds()
		var busiest float64
		for _, h := range hosts {
			u := s1.host[h].Sub(s0.host[h])
			b := budgetOf(h)
			hu := HostUse{Host: h, Kind: kinds[h], CPUSeconds: u.CPUSeconds}
			if b.CPU > 0 {
				hu.CPU = u.CPUSeconds / wall / b.CPU
			}
			if b.DiskBps > 0 {
				hu.Disk = float64(u.DiskBytes) / wall / float64(b.DiskBps)
			}
			if b.LinkBits > 0 {
				hu.Link = float64(max(u.SentBytes, u.ReceivedBytes)) * 8 / wall / float64(b.LinkBits)
			}
			pr.Hosts = append(pr.Hosts, hu)
			if kinds[h] == kindCalibrate {
				continue // always busy: that is its job
			}
			for _, v := range []struct {
				what string
				f    float64
			}{{"cpu", hu.CPU}, {"disk", hu.Disk}, {"link", hu.Link}} {
				if v.f > busiest {
					busiest, pr.Bottleneck = v.f, fmt.Sprintf("%s %s %.0f%%", h, v.what, 100*v.f)
				}
			}
		}
	}
	for k, name := range phases {
		var start, end int64
		var ops, nbytes int64
		for _, r := range results {
			if start == 0 || r[k].Start < start {
				start = r[k].Start
			}
			end = max(end, r[k].End)
			ops += r[k].Ops
			nbytes += r[k].Bytes
		}
		secs := float64(end-start) / 1e9
		pr := PhaseResult{Name: name, Seconds: secs}
		if strings.HasPrefix(sp.kind, "data") || sp.kind == "files-run" || sp.kind == "mount" {
			pr.Rate, pr.Unit = float64(nbytes)/1e6/secs, "MB/s"
		} else {
			pr.Rate, pr.Unit = float64(ops)/secs, "ops/s"
		}
		use(&pr, samples[k], samples[k+1])
		pt.Phases = append(pt.Phases, pr)
	}
	if sp.kill != "" {
		pt.Failover = failoverOf(results, killAt, sp.kill, pt.Phases[0].Unit)
	}
	if marks != nil {
		pt.Growth, pt.Phases = growthOf(results, marks, pt.Phases[0].Unit, use)
	}
	say("  %d servers, %d islands x%d, %d clients: %s", sp.storage, sp.islands, sp.replicas, sp.clients, phaseLine(pt.Phases))
	return pt, nil
}

func phaseLine(ps []PhaseResult) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, fmt.Sprintf("%s %.1f %s (%s)", p.Name, p.Rate, p.Unit, p.Bottleneck))
	}
	return strings.Join(parts, ", ")
}

// failoverOf merges the workers' timelines by wall clock and measures the
// rate before the kill, the dip, and the time back to full speed.
func failoverOf(results [][]WorkerPhase, killAt time.Time, killed, unit string) *Failover {
	f := &Failover{Killed: killed, Unit: unit, FullSpeedAfter: -1}
	t0, bins := mergeTimelines(results)
	mean := binMean(bins, unit)
	kill := int(killAt.Sub(time.Unix(0, t0)) / Tick)
	second := int(time.Second / Tick)
	half := second / 2
	end := len(bins) - half // the last half second is cut short by the run's end
	f.Before = mean(second, kill)
	// After the kill the cluster has a host less: full speed is what it
	// settles at (the last third of the run), not the rate before.
	f.After = mean(end-(end-kill)/3, end)
	f.KillAt = float64(kill) * Tick.Seconds()
	f.PerSecond = perSecond(bins, unit)
	// The dip comes a moment after the kill (requests in flight finish
	// first): back to full speed is the first half second at 90% of After
	// once past the worst one.
	f.Lowest = f.Before
	dip := kill
	for b := kill; b+half <= end; b++ {
		if r := mean(b, b+half); r < f.Lowest {
			f.Lowest, dip = r, b
		}
	}
	if f.After >= 0.1*f.Before {
		if f.Lowest >= 0.9*f.After {
			f.FullSpeedAfter = 0
		}
		for b := dip; f.FullSpeedAfter < 0 && b+half <= end; b++ {
			if mean(b, b+half) >= 0.9*f.After {
				f.FullSpeedAfter = float64(b+half-kill) * Tick.Seconds()
			}
		}
	}
	return f
}

// mergeTimelines adds the workers' timelines of their first phase up by
// wall clock: the work of all of them in each tick from t0 (unix ns).
func mergeTimelines(results [][]WorkerPhase) (t0 int64, bins []float64) {
	for _, r := range results {
		if t0 == 0 || r[0].Start < t0 {
			t0 = r[0].Start
		}
	}
	for _, r := range results {
		off := int((r[0].Start - t0) / int64(Tick))
		for k, v := range r[0].Timeline {
			for len(bins) <= off+k {
				bins = append(bins, 0)
			}
			bins[off+k] += float64(v)
		}
	}
	return t0, bins
}

// binMean is the rate over the ticks [lo, hi) of bins in unit (MB/s or
// ops/s).
func binMean(bins []float64, unit string) func(lo, hi int) float64 {
	scale := 1 / Tick.Seconds()
	if unit == "MB/s" {
		scale /= 1e6
	}
	return func(lo, hi int) float64 {
		lo, hi = max(lo, 0), min(hi, len(bins))
		if hi <= lo {
			return 0
		}
		var sum float64
		for _, v := range bins[lo:hi] {
			sum += v
		}
		return sum / float64(hi-lo) * scale
	}
}

// perSecond is the rate in each whole second of bins.
func perSecond(bins []float64, unit string) []float64 {
	mean := binMean(bins, unit)
	second := int(time.Second / Tick)
	var out []float64
	for b := 0; b+second <= len(bins); b += second {
		out = append(out, math.Round(10*mean(b, b+second))/10)
	}
	return out
}

func printFailover(say func(string, ...any), points []ScalePoint) {
	for _, p := range points {
		f := p.Failover
		back := "not within the run"
		if f.FullSpeedAfter >= 0 {
			back = fmt.Sprintf("%.1f s", f.FullSpeedAfter)
		}
		say("  kill -9 %-9s %8.1f %-5s before, lowest half second %8.1f, settles at %.1f (%.0f%%), 90%% of that after %s",
			f.Killed, f.Before, f.Unit, f.Lowest, f.After, 100*f.After/max(f.Before, 1e-9), back)
		say("    per second (kill in second %d): %v", int(f.KillAt), f.PerSecond)
	}
}

// RunCalibrator is the CPU speed probe: it hashes a fixed 64 KiB block
// over and over and writes how many times to out every 100 ms, until ctx
// ends.
func RunCalibrator(ctx context.Context, out string) error {
	block := make([]byte, 64<<10)
	for i := range block {
		block[i] = byte(i * 7)
	}
	var n int64
	last := time.Now()
	for ctx.Err() == nil {
		sum := sha256.Sum256(block)
		block[0] ^= sum[0]
		n++
		if time.Since(last) >= Tick {
			last = time.Now()
			tmp := out + ".tmp"
			if err := os.WriteFile(tmp, []byte(strconv.FormatInt(n, 10)), 0o644); err != nil {
				return err
			}
			if err := os.Rename(tmp, out); err != nil {
				return err
			}
		}
	}
	return nil
}
