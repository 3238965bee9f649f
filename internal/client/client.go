package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/atoll-fs/atoll/internal/auth"
	"hash/fnv"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/reedsolomon"

	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Sentinel errors of the client data path.
var (
	// ErrUnrecoverable: a block could not be read or rebuilt with correct
	// bytes (too many fragments lost or corrupt). Maps to EIO.
	ErrUnrecoverable = errors.New("client: block unrecoverable")
	// ErrStripeFailed: a stripe could not be made durable on enough servers.
	ErrStripeFailed = errors.New("client: stripe write failed")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("client: closed")
	// ErrUnknownSlot: a pointer names a slot the client does not know.
	ErrUnknownSlot = errors.New("client: unknown storage slot")
)

// SlotAddr is a storage slot and the address of the server holding it.
type SlotAddr struct {
	ID   uint16
	Addr string
}

// Config configures a Client.
type Config struct {
	Slots []SlotAddr
	// ClientID names this client's logs. A client restarted with the same
	// id continues its logs after their newest stripes. 0 picks a random id.
	ClientID uint64
	// Pipeline is the number of stripes per log being written at once;
	// Append blocks beyond it. Default 3.
	Pipeline int
	// ConnsPerServer is the number of TCP connections per storage server.
	ConnsPerServer int
	// ReadTimeout bounds one fragment read before the read is served
	// degraded from the other fragments. Default 3s.
	ReadTimeout time.Duration
	// WriteTimeout bounds one fragment put. Default 30s.
	WriteTimeout time.Duration
	// DownFor is how long a server that failed a request is avoided for new
	// stripes. Default 5s.
	DownFor time.Duration
	Logger  *slog.Logger
	Faults  *faults.Set
	// Key authenticates every connection to storage servers and islands
	// (nil: none, for servers started in-process without a key).
	Key *auth.Key
	// Dial, when set, connects instead of TCP (memnet in in-process
	// tests), to storage servers and islands alike.
	Dial wire.DialFunc
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if len(c.Slots) == 0 {
		return errors.New("client: config: no storage slots")
	}
	seen := map[uint16]bool{}
	for _, s := range c.Slots {
		if seen[s.ID] {
			return fmt.Errorf("client: config: slot %d listed twice", s.ID)
		}
		if s.Addr == "" {
			return fmt.Errorf("client: config: slot %d has no address", s.ID)
		}
		seen[s.ID] = true
	}
	if c.Pipeline < 0 || c.ConnsPerServer < 0 {
		return errors.New("client: config: negative pipeline or connection count")
	}
	return nil
}

// Stats counts data-path events since the client started.
type Stats struct {
	StripesWritten  uint64
	DegradedStripes uint64 // stripes written with fragments missing
	BytesWritten    uint64 // file data bytes made durable
	BlocksRead      uint64
	DegradedReads   uint64 // block reads that needed reconstruction
	CorruptDetected uint64 // fragment ranges found corrupt (by servers or by parental checksum)
	Repairs         uint64 // fragments rewritten or recreated by on-the-fly repair
	RepairFailures  uint64
}

// DegradedStripe is a stripe written or found with fragments missing,
// waiting for repair.
type DegradedStripe struct {
	Stripe  fragment.StripeID
	Missing []int    // fragment indexes
	Slots   []uint16 // placement of the stripe
	Since   time.Time
}

// Client is the logical and physical layer of the data path: it writes
// blocks into per-policy logs striped over storage servers and reads them
// back by pointer. It is safe for concurrent use.
type Client struct {
	cfg  Config
	log  *slog.Logger
	pool *wire.Pool
	// slots is replaced whole when the cluster map changes (SetSlots).
	slots atomic.Pointer[slotTable]
	// avoid are slots new stripes skip while enough others are up
	// (Avoid); nil: none.
	avoid atomic.Pointer[map[uint16]bool]

	encMu lockcheck.Mutex
	encs  map[[2]int]reedsolomon.Encoder

	mu struct {
		lockcheck.Mutex
		logs     map[string]*Log
		degraded map[fragment.StripeID]*DegradedStripe
		closed   bool
	}
	stats struct {
		stripes, degradedStripes, bytes, blocksRead, degradedReads, corrupt, repairs, repairFail atomic.Uint64
		// degradedWarned is when a degraded write was last logged (Unix
		// ns): one line every 10 s at most, with the running count.
		degradedWarned atomic.Int64
	}

	repairQ    chan repairJob
	repairMu   lockcheck.Mutex
	repairSeen map[fragment.ID]bool
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

// New returns a Client. It does not contact any server until used.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Pipeline == 0 {
		cfg.Pipeline = 3
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 3 * time.Second
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if cfg.DownFor == 0 {
		cfg.DownFor = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ClientID == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.ClientID = binary.BigEndian.Uint64(b[:]) | 1
	}
	c := &Client{
		cfg: cfg,
		log: cfg.Logger,
		// Storage connections carry every byte of file data: unsealed
		// unless the cluster seals data too (auth.SealData).
		pool:       wire.NewPool(wire.ClientConfig{Key: cfg.Key, PlainOK: !auth.SealData(), Dial: cfg.Dial}, cfg.ConnsPerServer),
		encs:       map[[2]int]reedsolomon.Encoder{},
		repairQ:    make(chan repairJob, 1024),
		repairSeen: map[fragment.ID]bool{},
	}
	c.slots.Store(newSlotTable(cfg.Slots, nil))
	c.mu.logs = map[string]*Log{}
	c.mu.degraded = map[fragment.StripeID]*DegradedStripe{}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.repairLoop()
	}()
	return c, nil
}

// Close flushes nothing: callers Flush their logs first. It stops the
// repair worker and closes connections.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil
	}
	c.mu.closed = true
	logs := make([]*Log, 0, len(c.mu.logs))
	for _, l := range c.mu.logs {
		logs = append(logs, l)
	}
	c.mu.Unlock()
	for _, l := range logs {
		l.wait()
	}
	c.cancel()
	c.wg.Wait()
	c.pool.Close()
	return nil
}

// ClientID returns the id naming this client's logs.
func (c *Client) ClientID() uint64 { return c.cfg.ClientID }

// Slots returns the placement view of the storage slots: up unless a
// recent request failed or SetDown marked them.
func (c *Client) Slots() []layout.Slot {
	now := time.Now().UnixNano()
	t := c.slots.Load()
	out := make([]layout.Slot, 0, len(t.list))
	for _, s := range t.list {
		out = append(out, layout.Slot{ID: s.ID, Up: t.down[s.ID].Load() <= now})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Avoid makes new stripes skip slots (the cleaner's rebalancer steers
// its copies away from over-full servers and onto a new one) as long as
// at least a stripe's width of other slots are up; a stripe is never
// placed degraded to avoid a slot. Avoid(nil) clears the set.
func (c *Client) Avoid(slots []uint16) {
	if len(slots) == 0 {
		c.avoid.Store(nil)
		return
	}
	m := make(map[uint16]bool, len(slots))
	for _, s := range slots {
		m[s] = true
	}
	c.avoid.Store(&m)
}

// placementSlots is the slot view a new stripe of the given width is
// placed on: Slots, with the avoided ones marked down when at least
// width others are up.
func (c *Client) placementSlots(width int) []layout.Slot {
	slots := c.Slots()
	av := c.avoid.Load()
	if av == nil {
		return slots
	}
	up := 0
	for _, s := range slots {
		if s.Up && !(*av)[s.ID] {
			up++
		}
	}
	if up < width {
		return slots
	}
	for k := range slots {
		if (*av)[slots[k].ID] {
			slots[k].Up = false
		}
	}
	return slots
}

// SetDown marks a slot down (or up again) for new stripes, as a cluster
// map update would.
func (c *Client) SetDown(slot uint16, down bool) {
	if d, ok := c.slots.Load().down[slot]; ok {
		if down {
			d.Store(1 << 62)
		} else {
			d.Store(0)
		}
	}
}

func (c *Client) markFailed(slot uint16) {
	if d, ok := c.slots.Load().down[slot]; ok {
		until := time.Now().Add(c.cfg.DownFor).UnixNano()
		if d.Load() < until {
			d.Store(until)
		}
	}
}

// slotTable is an immutable view of the storage slots.
type slotTable struct {
	list []SlotAddr
	addr map[uint16]string
	down map[uint16]*atomic.Int64 // unix nanos until which the slot is avoided
}

func newSlotTable(slots []SlotAddr, prev *slotTable) *slotTable {
	t := &slotTable{list: append([]SlotAddr(nil), slots...), addr: map[uint16]string{}, down: map[uint16]*atomic.Int64{}}
	sort.Slice(t.list, func(i, j int) bool { return t.list[i].ID < t.list[j].ID })
	for _, s := range t.list {
		t.addr[s.ID] = s.Addr
		if prev != nil && prev.down[s.ID] != nil {
			t.down[s.ID] = prev.down[s.ID] // keep failure memory across map updates
		} else {
			t.down[s.ID] = new(atomic.Int64)
		}
	}
	return t
}

// SetSlots installs the storage slots of a new cluster map: their
// addresses, and which are down (not Up) for placement.
func (c *Client) SetSlots(slots []SlotAddr, down []uint16) error {
	cfg := Config{Slots: slots}
	if err := cfg.Validate(); err != nil {
		return err
	}
	prev := c.slots.Load()
	t := newSlotTable(slots, prev)
	for _, s := range slots {
		if old, ok := prev.addr[s.ID]; ok && old != s.Addr {
			c.pool.Forget(old) // a replacement server took over the slot
		}
	}
	c.slots.Store(t)
	isDown := map[uint16]bool{}
	for _, d := range down {
		isDown[d] = true
	}
	for _, s := range t.list {
		if isDown[s.ID] {
			c.SetDown(s.ID, true)
		} else if t.down[s.ID].Load() == 1<<62 {
			c.SetDown(s.ID, false) // was marked down by a map; now up
		}
	}
	return nil
}

// Stats returns the data-path counters.
func (c *Client) Stats() Stats {
	return Stats{
		StripesWritten:  c.stats.stripes.Load(),
		DegradedStripes: c.stats.degradedStripes.Load(),
		BytesWritten:    c.stats.bytes.Load(),
		BlocksRead:      c.stats.blocksRead.Load(),
		DegradedReads:   c.stats.degradedReads.Load(),
		CorruptDetected: c.stats.corrupt.Load(),
		Repairs:         c.stats.repairs.Load(),
		RepairFailures:  c.stats.repairFail.Load(),
	}
}

// DegradedStripes lists stripes known to miss fragments, oldest first.
func (c *Client) DegradedStripes() []DegradedStripe {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]DegradedStripe, 0, len(c.mu.degraded))
	for _, d := range c.mu.degraded {
		cp := *d
		cp.Missing = append([]int(nil), d.Missing...)
		out = append(out, cp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Since.Before(out[j].Since) })
	return out
}

func (c *Client) recordDegraded(s fragment.StripeID, slots []uint16, missing []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.mu.degraded[s]
	if d == nil {
		d = &DegradedStripe{Stripe: s, Slots: append([]uint16(nil), slots...), Since: time.Now()}
		c.mu.degraded[s] = d
	}
	for _, m := range missing {
		dup := false
		for _, x := range d.Missing {
			dup = dup || x == m
		}
		if !dup {
			d.Missing = append(d.Missing, m)
		}
	}
	sort.Ints(d.Missing)
}

func (c *Client) clearDegraded(s fragment.StripeID, idx int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.mu.degraded[s]
	if d == nil {
		return
	}
	out := d.Missing[:0]
	for _, m := range d.Missing {
		if m != idx {
			out = append(out, m)
		}
	}
	d.Missing = out
	if len(out) == 0 {
		delete(c.mu.degraded, s)
	}
}

func (c *Client) encoder(k, m int) (reedsolomon.Encoder, error) {
	c.encMu.Lock()
	defer c.encMu.Unlock()
	if e, ok := c.encs[[2]int{k, m}]; ok {
		return e, nil
	}
	e, err := reedsolomon.New(k, m)
	if err != nil {
		return nil, fmt.Errorf("client: reed-solomon %d+%d: %w", k, m, err)
	}
	c.encs[[2]int{k, m}] = e
	return e, nil
}

// logID derives a stable log id from the client id and the policy class.
// Under any key but an admin one (a tenant's, a mount host's) the high 32
// bits are the key's log prefix (auth.LogPrefix, auth.WritesOwnLogs):
// storage servers let such a key put and append only in its own logs (and
// a tenant's key read freely only those).
func logID(client uint64, pol layout.Policy, key *auth.Key) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], client)
	h.Write(b[:])
	h.Write([]byte(pol.String()))
	id := h.Sum64()
	if key != nil && auth.WritesOwnLogs(key.Name, key.Caps) {
		id = auth.TenantID(key.Name, id)
	}
	return id
}
