package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMoveDuty is Config.MoveDuty's default. Measured with `atoll
// bench rebalance --only islands` (a third single-copy island joining two
// under 8 metadata workers, this 2-core VM): throughput while entries
// moved was 0.88–0.96 of the mean of before and after at 0.02 (five
// runs; 0.78–0.96 of before alone), 0.81–0.88 at 0.05, 0.62–0.74 at 0.1
// and 0.46–0.51 unthrottled (two runs each).
const DefaultMoveDuty = 0.02

// DefaultInlineMax is the default inline threshold.
const DefaultInlineMax = 16 << 10

// MaxInlineMax bounds Config.InlineMax (inline data lives in the inode
// record and travels in one message).
const MaxInlineMax = 256 << 10

// MapSource gives an island the cluster map: the extendible hash table
// that says which island owns a bucket, the map epoch and the islands'
// addresses. Refresh fetches a newer map (a request carried a newer
// epoch). Implementations are safe for concurrent use.
type MapSource interface {
	Epoch() uint64
	Table() namespace.Table
	IslandAddr(id namespace.IslandID) (string, bool)
	Refresh(ctx context.Context) error
}

// MoveFinisher is implemented by a MapSource whose pending entry moves an
// island can finish (cluster.IslandMap asks the manager; StaticMap does
// it itself): FinishMove gives the move's entry to its destination and
// returns the new epoch, which the source's Epoch then has at least.
type MoveFinisher interface {
	FinishMove(ctx context.Context, id uint64) (uint64, error)
}

// MoveCanceller is implemented by a MapSource whose pending moves an
// island can cancel (a source gives a frozen entry back when it cannot
// reach the destination): CancelMove forgets the move unless it was
// finished, and returns the new epoch.
type MoveCanceller interface {
	CancelMove(ctx context.Context, id uint64) (uint64, error)
}

// Config configures an island.
type Config struct {
	// Dir holds the island's pebble database; created if absent.
	Dir string
	// FS is the filesystem all I/O goes through (default vfs.Default).
	FS vfs.FS
	// Listen is the address Run serves on (":0" picks a port). Empty:
	// no listener; the island is used in-process through Handle.
	Listen string
	// Listener, when set, is served instead of a TCP listener on Listen
	// (memnet in in-process tests).
	Listener net.Listener
	// Dial, when set, connects to other islands instead of TCP.
	Dial wire.DialFunc
	// ID is this island's id in the cluster map (not 0).
	ID uint32
	// Map is the cluster map.
	Map MapSource
	// Peer reaches other islands. Nil: over internal/wire at the
	// addresses Map gives.
	Peer Peer
	// InlineMax is the largest inline file data (default DefaultInlineMax).
	InlineMax int
	// LazySync is how long lazily committed changes (creates and closes
	// from FUSE mounts) may wait for the log sync that makes them durable
	// when no fsync asks for it first (default 5ms, at most MaxLazySync).
	// Longer gathers more changes per sync; it is also how much such
	// changes a crash of the island can lose.
	LazySync time.Duration
	// LeaseTerm is how long a client's lease on a bucket lasts
	// (lease.DefaultTerm). A restarted island, or a new leader, delays
	// changes by one term once leases were ever granted.
	LeaseTerm time.Duration
	// LockTerm is how long a client's lock session lives without a
	// renewal (DefaultLockTerm): then its locks are released. Never
	// earlier: a new leader counts it from when it first sees them.
	LockTerm time.Duration
	// MoveDuty is the share of time this island spends moving table
	// entries away (their copies, freezes and drops) while others wait:
	// after a move that took d, the next starts (1/MoveDuty - 1)·d
	// later, so foreground work slows by about that share at most
	// (default DefaultMoveDuty; 1: no pause).
	MoveDuty float64
	// Faults holds failpoints; nil in production.
	Faults *faults.Set
	// Logger receives the island's logs (default slog.Default()).
	Logger *slog.Logger
	// Registerer, when set, receives the island's metrics (metrics.go).
	Registerer prometheus.Registerer
	// Key is the cluster key: every connection must authenticate with a
	// key of this cluster and each operation needs its capability (see
	// needs); peer islands are dialled with it. nil serves
	// unauthenticated: in-process tests only; the atoll command always
	// sets it.
	Key *auth.Key

	// DB, when set, is the island's database, opened by the caller with
	// PebbleOptions and left open by Close: a replica of a replicated
	// island owns it and hands it to each Island it runs while leading.
	// Dir then only names the island in logs.
	DB *pebble.DB
	// Replicator, when set (with DB), is how the island changes DB: every
	// batch it would commit is handed over instead, and is applied to DB
	// by the replica once a quorum holds it (see "Replication" in the
	// package doc). Nil: the island commits to its own database.
	Replicator Replicator
}

// Replicator makes an island's batch durable and applies it (replicated
// islands, internal/replica). Replicate returns once batch (a
// pebble.Batch representation) is applied to the island's DB, or fails;
// it must not return while the batch may still be applied later without
// the caller knowing whether it was (the island holds its inode locks
// until it returns), except when the island stops leading, which the
// error says (wrapping metawire.ErrUnavailable).
type Replicator interface {
	Replicate(ctx context.Context, batch []byte) error
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("meta: config: Dir is empty")
	case c.Replicator != nil && c.DB == nil:
		return errors.New("meta: config: a Replicator needs DB")
	case c.ID == uint32(namespace.NoIsland):
		return errors.New("meta: config: ID must not be 0")
	case c.Map == nil:
		return errors.New("meta: config: Map is nil")
	case c.MoveDuty < 0 || c.MoveDuty > 1:
		return fmt.Errorf("meta: config: MoveDuty %v not in [0, 1]", c.MoveDuty)
	case c.LazySync < 0 || c.LazySync > MaxLazySync:
		return fmt.Errorf("meta: config: LazySync %v not in [0, %v]", c.LazySync, MaxLazySync)
	case c.InlineMax < 0 || c.InlineMax > MaxInlineMax:
		return fmt.Errorf("meta: config: InlineMax %d not in [0, %d]", c.InlineMax, MaxInlineMax)
	}
	if err := c.Map.Table().Validate(); err != nil {
		return fmt.Errorf("meta: config: map: %w", err)
	}
	return nil
}

// StaticMap is a MapSource that changes only when told (tests, the CLI's
// --static-map). Refresh is a no-op.
type StaticMap struct {
	mu struct {
		lockcheck.RWMutex
		table namespace.Table
		addrs map[namespace.IslandID]string
	}
}

// NewStaticMap returns a map with table t (whose Epoch is the map epoch)
// and the given addresses (may be nil).
func NewStaticMap(t namespace.Table, addrs map[namespace.IslandID]string) *StaticMap {
	m := &StaticMap{}
	m.mu.table = t.Clone()
	m.mu.addrs = map[namespace.IslandID]string{}
	for k, v := range addrs {
		m.mu.addrs[k] = v
	}
	return m
}

func (m *StaticMap) Epoch() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.mu.table.Epoch
}

func (m *StaticMap) Table() namespace.Table {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.mu.table
}

func (m *StaticMap) IslandAddr(id namespace.IslandID) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	a, ok := m.mu.addrs[id]
	return a, ok
}

func (m *StaticMap) Refresh(context.Context) error { return nil }

// Set replaces the table (and epoch).
func (m *StaticMap) Set(t namespace.Table) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.table = t.Clone()
}

// FinishMove gives pending move id's entry to its destination, with a new
// epoch (MoveFinisher).
func (m *StaticMap) FinishMove(_ context.Context, id uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.mu.table.Clone()
	mv, ok := t.Move(id)
	if !ok || int(mv.Entry) >= len(t.Entries) || t.Entries[mv.Entry] != mv.From {
		return 0, fmt.Errorf("%w: no pending move %d", metawire.ErrInvalid, id)
	}
	t.Entries[mv.Entry] = mv.To
	t.Moves = slices.DeleteFunc(t.Moves, func(o namespace.PendingMove) bool { return o.ID == id })
	t.Epoch++
	m.mu.table = t
	return t.Epoch, nil
}

// CancelMove forgets pending move id (MoveCanceller).
func (m *StaticMap) CancelMove(_ context.Context, id uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.mu.table.Clone()
	if _, ok := t.Move(id); !ok {
		return t.Epoch, nil
	}
	t.Moves = slices.DeleteFunc(t.Moves, func(o namespace.PendingMove) bool { return o.ID == id })
	t.Epoch++
	m.mu.table = t
	return t.Epoch, nil
}

// SetAddr records the address of island id.
func (m *StaticMap) SetAddr(id namespace.IslandID, addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.addrs[id] = addr
}

// mapFile is the JSON form read by LoadMapFile.
type mapFile struct {
	Epoch   uint64            `json:"epoch"`
	Depth   uint8             `json:"depth"`
	Entries []uint32          `json:"entries"`
	Islands map[string]string `json:"islands"`
}

// ParseMapJSON parses a static cluster map:
//
//	{"epoch": 1, "depth": 2, "entries": [1, 1, 2, 3],
//	 "islands": {"1": "127.0.0.1:7500", "2": "127.0.0.1:7501", "3": "127.0.0.1:7502"}}
//
// entries has 1<<depth island ids (table entry i owns the buckets whose
// top depth bits are i); islands maps island ids to wire addresses. The
// epoch must not be 0.
func ParseMapJSON(b []byte) (*StaticMap, error) {
	var f mapFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("meta: map file: %w", err)
	}
	if f.Epoch == 0 {
		return nil, errors.New("meta: map file: epoch must not be 0")
	}
	t := namespace.Table{Depth: f.Depth, Epoch: f.Epoch, Entries: make([]namespace.IslandID, len(f.Entries))}
	for i, e := range f.Entries {
		t.Entries[i] = namespace.IslandID(e)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("meta: map file: %w", err)
	}
	addrs := map[namespace.IslandID]string{}
	for k, v := range f.Islands {
		id, err := strconv.ParseUint(k, 10, 32)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("meta: map file: bad island id %q", k)
		}
		addrs[namespace.IslandID(id)] = v
	}
	return NewStaticMap(t, addrs), nil
}

// LoadMapFile reads a static map from a JSON file (see ParseMapJSON).
func LoadMapFile(path string) (*StaticMap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("meta: map file: %w", err)
	}
	return ParseMapJSON(b)
}
