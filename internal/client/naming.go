package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/leaderhint"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// MapView is what the naming layer needs of the cluster map. It is declared
// here, where it is used; StaticMapView is the in-memory version and the
// cluster-map client provides the real one.
type MapView interface {
	Epoch() uint64
	// IslandAddr returns the address of the island owning bucket.
	IslandAddr(bucket uint32) (string, bool)
	// IslandFor returns the id and address of the island owning bucket
	// (requests name the island: one server may host several).
	IslandFor(bucket uint32) (namespace.IslandID, string, bool)
	// Refresh fetches a newer map (after a stale-epoch or wrong-island reply).
	Refresh(ctx context.Context) error
	// DefaultPolicy is the cluster's policy for files without one.
	DefaultPolicy() string
}

// StaticMapView is a fixed map: a table and island addresses.
type StaticMapView struct {
	MapEpoch uint64
	Table    namespace.Table
	Addrs    map[namespace.IslandID]string
	Policy   string
}

func (m *StaticMapView) Epoch() uint64                     { return m.MapEpoch }
func (m *StaticMapView) Refresh(ctx context.Context) error { return nil }
func (m *StaticMapView) DefaultPolicy() string {
	if m.Policy == "" {
		return layout.Default().String()
	}
	return m.Policy
}
func (m *StaticMapView) IslandAddr(bucket uint32) (string, bool) {
	a, ok := m.Addrs[m.Table.Lookup(bucket)]
	return a, ok
}

func (m *StaticMapView) IslandFor(bucket uint32) (namespace.IslandID, string, bool) {
	id := m.Table.Lookup(bucket)
	a, ok := m.Addrs[id]
	return id, a, ok
}

// Islands returns every island's address by id.
func (m *StaticMapView) Islands() map[namespace.IslandID]string { return maps.Clone(m.Addrs) }

// FSConfig configures the naming and cache layers.
type FSConfig struct {
	Data *Client // the logical/physical layers
	Map  MapView
	// AttrTTL is how long attributes and name lookups are cached. Changes
	// made through this FS invalidate them at once; other clients' changes
	// are seen after at most AttrTTL, and file data is revalidated on open
	// (close-to-open consistency). Default 1s.
	AttrTTL time.Duration
	// InlineMax is the size below which file data lives in the inode.
	// Default 16 KiB; must match the islands' setting.
	InlineMax int
	// DirtyMax bounds the dirty bytes buffered per open file before they
	// are written back. Default 64 MiB.
	DirtyMax int
	// DirtyTotalMax bounds the dirty bytes of all files together: past
	// it, a writer holding at least 8 MiB (or DirtyMax) of dirty data
	// writes its file back before going on. Default 512 MiB.
	DirtyTotalMax int64
	// ReadAheadMax bounds the bytes of read-ahead windows and prefetches
	// of all open files together (each sequential reader uses up to two
	// 16 MiB windows); past it readers fetch only what they read.
	// Default 256 MiB.
	ReadAheadMax int64
	// IslandWait bounds how long a request waits for an unavailable
	// island (down, restarting, or a replicated island electing a new
	// leader) before it fails with ErrUnavailable (EIO): counted from the
	// first "unavailable" answer in a row, so time an island spent on an
	// attempt (a new leader holding changes back for a lease term,
	// internal/lease) does not count. Default 6s: a failover takes a few
	// seconds.
	IslandWait time.Duration
	// Root is the directory this FS calls "/" (Resolve, MkdirAll, the
	// mount's root). Default: the top of the data client's key's subtree
	// if the key is confined to one (auth.Scope.Root), else the
	// namespace's root.
	Root   uint64
	Logger *slog.Logger
}

// Validate checks the configuration.
func (c *FSConfig) Validate() error {
	if c.Data == nil || c.Map == nil {
		return errors.New("client: fs config: Data and Map are required")
	}
	if c.AttrTTL < 0 || c.InlineMax < 0 || c.DirtyMax < 0 || c.ReadAheadMax < 0 || c.DirtyTotalMax < 0 || c.IslandWait < 0 {
		return errors.New("client: fs config: negative duration or size")
	}
	return nil
}

// FS is the naming and cache layers: an inode-based file system API over
// the metadata islands and the data path, shared by the FUSE adapter, the
// NFS gateway and the CLI. It is safe for concurrent use.
type FS struct {
	cfg  FSConfig
	data *Client
	pool *wire.Pool
	log  *slog.Logger
	ctr  fsCounters // metrics.go
	// lazyCreate: regular files are created with CreateReq.Lazy (see
	// SetLazyCreate); lazyClose: Flush and Close commit with
	// CommitReq.Lazy (SetLazyClose). lazy holds the files with such
	// changes not yet made durable by a synced commit or an OpSync.
	prefetches sync.WaitGroup // read-ahead goroutines (File.prefetchLocked)
	raUsed     atomic.Int64   // bytes of live read-ahead windows (FSConfig.ReadAheadMax)
	dirtyTotal atomic.Int64   // dirty bytes of all files (FSConfig.DirtyTotalMax)
	lazyCreate atomic.Bool
	lazyClose  atomic.Bool
	// noUnlinkMany: an island refused metawire.OpUnlinkMany as unknown
	// (an older version); kept-back unlinks go one per request.
	noUnlinkMany atomic.Bool
	lazy         struct {
		lockcheck.Mutex
		m   map[uint64]lazyChange // by ino: its last unsettled change
		gen uint64
	}
	cache struct {
		lockcheck.Mutex
		attrs  map[uint64]cachedAttr
		dentry map[dentryKey]cachedDentry
		blocks map[uint64]*blockMap // per inode, valid for one data version
		// inlineBytes is the inline data the block maps hold, at most
		// inlineCacheMax: a map with more is not kept (setBlocksLocked).
		inlineBytes int
		hits        uint64
		misses      uint64
		// Leases (leases.go): session 0 means off.
		session  uint64
		leases   map[uint32]*heldLease
		maxBreak map[namespace.IslandID]uint64 // highest break number received per island
		pollers  map[namespace.IslandID]bool
		hold     map[namespace.IslandID]time.Duration // what the last poll said polls renew (PollResp.HoldMs)
		epoch    uint64                               // moves when a lease is acquired, broken or dropped
		nextGen  uint64
		breaks   uint64
		onBreak  func(buckets []uint32)
		seq      uint64           // own changes begun and ended (cacheMark)
		touched  map[uint64]touch // per key, its last own change
		made     map[uint64]bool  // directories made here, not yet looked in (Mkdir)
	}
	wb    writeBehind       // writebehind.go
	locks lockState         // locks.go
	opens openState         // opens.go
	down  unreachable       // unreachable.go: islands given up on
	hints *leaderhint.Hints // leaderhint.go: leaders the map does not name (nil: none)
	// pollers listen for lease breaks (leases.go); Close ends them.
	pollers    sync.WaitGroup
	renewals   sync.WaitGroup // leases.go: hitLocked
	pollCtx    context.Context
	pollCancel context.CancelFunc
	closing    atomic.Bool
}

type cachedAttr struct {
	attr    metawire.Attr
	expires time.Time
	lease   uint64 // generation of the lease it was read under (0: none)
}

type dentryKey struct {
	dir  uint64
	name string
}

type cachedDentry struct {
	ino     uint64 // 0: the name does not exist (only under a lease)
	expires time.Time
	lease   uint64
}

// NewFS returns an FS.
func NewFS(cfg FSConfig) (*FS, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.AttrTTL == 0 {
		cfg.AttrTTL = time.Second
	}
	if cfg.IslandWait == 0 {
		cfg.IslandWait = DefaultIslandWait
	}
	if cfg.InlineMax == 0 {
		cfg.InlineMax = 16 << 10
	}
	if cfg.DirtyMax == 0 {
		cfg.DirtyMax = 64 << 20
	}
	if cfg.ReadAheadMax == 0 {
		cfg.ReadAheadMax = 256 << 20
	}
	if cfg.DirtyTotalMax == 0 {
		cfg.DirtyTotalMax = 512 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Root == 0 {
		cfg.Root = uint64(namespace.RootIno)
		if k := cfg.Data.cfg.Key; k != nil && k.Scope.Confined() {
			cfg.Root = k.Scope.Root
		}
	}
	f := &FS{cfg: cfg, data: cfg.Data, pool: wire.NewPool(wire.ClientConfig{Key: cfg.Data.cfg.Key, Dial: cfg.Data.cfg.Dial}, 2), log: cfg.Logger}
	f.cache.attrs = map[uint64]cachedAttr{}
	f.cache.dentry = map[dentryKey]cachedDentry{}
	f.cache.blocks = map[uint64]*blockMap{}
	f.cache.touched = map[uint64]touch{}
	f.locks.init()
	f.locks.mu.session = f.newSession()
	f.opens.init()
	f.pollCtx, f.pollCancel = context.WithCancel(context.Background())
	f.hints = f.newHints()
	return f, nil
}

// Close closes the island connections (not the data client).
func (f *FS) Close() error {
	if f.wb.on.Load() {
		// Also waits for a flush under way (the timer's).
		ctx, cancel := context.WithTimeout(context.Background(), 2*f.cfg.IslandWait)
		f.flushKept(ctx, nil)
		cancel()
		f.wb.async.Wait()
	}
	f.closing.Store(true)
	f.pollCancel()
	f.pollers.Wait()
	f.stopProbing()
	f.renewals.Wait()
	f.prefetches.Wait()
	f.pool.Close()
	return nil
}

// Root is the directory this FS calls "/" (FSConfig.Root).
func (f *FS) Root() uint64 { return f.cfg.Root }

// Data returns the data-path client.
func (f *FS) Data() *Client { return f.data }

// DefaultIslandWait is FSConfig.IslandWait's default.
const DefaultIslandWait = 6 * time.Second

// call sends one request to the island owning route's bucket, refreshing
// the map and retrying on stale-epoch and wrong-island answers and backing
// off on busy ones.
func (f *FS) call(ctx context.Context, route uint64, op uint16, req, resp metawire.Message) error {
	if !metawire.Schema.Dedup(op) {
		// Changes flushed in beginChange (or run beside the flush).
		f.flushBeforeCall(ctx, op)
	}
	msg := metawire.Marshal(req)
	// A change carries one id across its attempts: an island that
	// applied it (the answer was lost with a connection or a leader)
	// answers the retry without applying it twice.
	var reqID wire.ReqID
	if metawire.Schema.Dedup(op) || f.wb.on.Load() {
		// Under write-behind reads carry the session too: an island
		// recalls an exclusive lease before anyone else's request.
		reqID = f.reqIDFor()
	}
	backoff := 5 * time.Millisecond
	var last error
	// Busy and stale answers are retried 12 times and for at least
	// IslandWait (a table entry's move that lost an island to a crash
	// takes a few seconds to reach the map, and 12 quick attempts, 3 s,
	// surfaced EAGAIN to a user during it); an unavailable island
	// for up to IslandWait from the first "unavailable" answer in a row,
	// however few attempts that allowed (each may wait for a dial or a
	// silent connection: wire's PeerTimeout). Time an island spent
	// serving an attempt does not count: a new leader holding changes
	// back for a lease term is not unavailable. Whatever happens, a
	// request gives up after 4 × IslandWait of unavailable answers.
	var unavailSince time.Time
	start := time.Now()
	retry := func(attempt int) bool {
		if !errors.Is(last, metawire.ErrUnavailable) {
			return attempt < 12 || time.Since(start) < f.cfg.IslandWait
		}
		return time.Since(unavailSince) < f.cfg.IslandWait && time.Since(start) < 4*f.cfg.IslandWait
	}
	var island namespace.IslandID // the one last asked
	for attempt := 0; attempt == 0 || retry(attempt); attempt++ {
		id, addr, ok := f.islandFor(namespace.Ino(route).Bucket())
		if ok && attempt == 0 && op != metawire.OpLeasePoll {
			// (A lease poll keeps trying on its own, with a backoff.)
			if err := f.givenUp(id); err != nil {
				return err
			}
		}
		if !ok {
			last = fmt.Errorf("client: no island for inode %s: %w", namespace.Ino(route), metawire.ErrUnavailable)
			if unavailSince.IsZero() {
				unavailSince = time.Now()
			}
		} else {
			island = id
			rep, err := f.callOnce(ctx, addr, id, reqID, op, msg)
			if err == nil {
				if resp == nil {
					return nil
				}
				return metawire.Unmarshal(rep.Msg, resp)
			}
			switch {
			case errors.Is(err, metawire.ErrUnavailable):
				if unavailSince.IsZero() {
					unavailSince = time.Now()
				}
				f.unavailableAt(ctx, id, addr, namespace.Ino(route).Bucket())
			case errors.Is(err, metawire.ErrStaleEpoch), errors.Is(err, metawire.ErrWrongIsland):
				unavailSince = time.Time{}
				f.refreshMap(ctx)
			case errors.Is(err, metawire.ErrBusy):
			default:
				return err
			}
			last = err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
	if island != 0 && errors.Is(last, metawire.ErrUnavailable) {
		f.giveUp(island, namespace.Ino(route).Bucket())
	}
	return last
}

// callOnce sends one request to island id at addr. An island's answer
// comes back as its status error (metawire.RemoteErr); any transport
// failure as ErrUnavailable (the island may be restarting or moved).
func (f *FS) callOnce(ctx context.Context, addr string, id namespace.IslandID, reqID wire.ReqID, op uint16, msg []byte) (wire.Reply, error) {
	rep, err := f.pool.CallRoute(ctx, addr, uint32(id), reqID, op, f.cfg.Map.Epoch(), msg, nil, nil)
	if err == nil {
		return rep, nil
	}
	if err = metawire.RemoteErr(err); !errors.As(err, new(*metawire.StatusError)) {
		err = fmt.Errorf("%w: island %s: %v", metawire.ErrUnavailable, addr, err)
	}
	return rep, err
}

// refreshMap fetches a newer map after an answer that says this one is
// out of date (or an island that did not answer); a failure is only
// logged: the next attempt uses the map there is.
func (f *FS) refreshMap(ctx context.Context) {
	if err := f.cfg.Map.Refresh(ctx); err != nil {
		f.log.Debug("client: map refresh failed", "err", err)
	}
}

// noMark stamps nothing: records cached with it live AttrTTL.
var noMark = cacheMark{}

func (f *FS) cacheAttr(a metawire.Attr) { f.cacheAttrAt(a, noMark) }

// cacheAttrAt caches attributes read by a request sent at lease epoch
// mark (leaseMark).
func (f *FS) cacheAttrAt(a metawire.Attr, mark cacheMark) {
	f.cache.Lock()
	defer f.cache.Unlock()
	f.cacheAttrLocked(a, mark, false)
}

// cacheAttrLocked is cacheAttrAt with f.cache held; keepLeased keeps
// attributes cached under a live lease when a cannot carry one.
func (f *FS) cacheAttrLocked(a metawire.Attr, mark cacheMark, keepLeased bool) {
	if f.keptBackLocked(a.Ino) {
		return // the cache holds the attributes after the kept-back change
	}
	now := time.Now()
	bucket := namespace.Ino(a.Ino).Bucket()
	stamp := f.stampLocked(bucket, a.Ino, mark, now)
	if c, ok := f.cache.attrs[a.Ino]; ok && keepLeased && stamp == 0 && f.leaseLeftLocked(bucket, c.lease, now) > 0 {
		return
	}
	f.cache.attrs[a.Ino] = cachedAttr{a, now.Add(f.cfg.AttrTTL), stamp}
	if bm := f.cache.blocks[a.Ino]; bm != nil && bm.version != a.Version {
		f.dropBlocksLocked(a.Ino)
	}
}

func (f *FS) cacheDentry(dir uint64, name string, ino uint64) {
	f.cacheDentryAt(dir, name, ino, noMark)
}

// cacheDentryAt caches dir/name -> ino (0: missing) as read by a request
// sent at lease epoch mark. A name that cannot carry the lease makes its
// directory's listing incomplete: it would expire before the others.
func (f *FS) cacheDentryAt(dir uint64, name string, ino uint64, mark cacheMark) {
	f.cache.Lock()
	defer f.cache.Unlock()
	now := time.Now()
	bucket := namespace.Ino(dir).Bucket()
	stamp := f.stampLocked(bucket, dir, mark, now)
	if stamp == 0 {
		f.incompleteLocked(dir)
		if ino == 0 {
			return
		}
	}
	f.cache.dentry[dentryKey{dir, name}] = cachedDentry{ino, now.Add(f.cfg.AttrTTL), stamp}
}

// incompleteLocked forgets that every name of dir is cached.
func (f *FS) incompleteLocked(dir uint64) {
	if l := f.cache.leases[namespace.Ino(dir).Bucket()]; l != nil {
		delete(l.complete, dir)
	}
}

// forgetBlocks drops ino's cached block map: the cleaner moved blocks, or
// a read found a stripe gone.
func (f *FS) forgetBlocks(ino uint64) {
	f.cache.Lock()
	defer f.cache.Unlock()
	f.dropBlocksLocked(ino)
}

// inlineCacheMax bounds the inline file data the cached block maps hold
// (a mount that writes or reads millions of small files would otherwise
// keep them all).
const inlineCacheMax = 64 << 20

// setBlocksLocked caches bm as ino's block map, unless its inline data
// would take the cache past inlineCacheMax.
func (f *FS) setBlocksLocked(ino uint64, bm *blockMap) {
	f.dropBlocksLocked(ino)
	if f.cache.inlineBytes+len(bm.inline) > inlineCacheMax {
		return
	}
	f.cache.inlineBytes += len(bm.inline)
	f.cache.blocks[ino] = bm
}

// dropBlocksLocked forgets ino's cached block map.
func (f *FS) dropBlocksLocked(ino uint64) {
	if bm := f.cache.blocks[ino]; bm != nil {
		f.cache.inlineBytes -= len(bm.inline)
		delete(f.cache.blocks, ino)
	}
}

// cacheInline caches the block map of a file whose whole content a
// request of this FS just set inline (a create with its data, a commit
// of inline data), at the data version its answer a gave: reading it
// back then costs no ReadMap.
func (f *FS) cacheInline(a metawire.Attr, data []byte) {
	if !a.Inline || a.Size != uint64(len(data)) || len(data) == 0 {
		return
	}
	f.cache.Lock()
	defer f.cache.Unlock()
	if bm := f.cache.blocks[a.Ino]; bm != nil && bm.version > a.Version {
		return // a later version is cached already
	}
	f.setBlocksLocked(a.Ino, &blockMap{version: a.Version, inline: bytes.Clone(data)})
}

// Invalidate drops everything cached about ino (and, with a name, the
// dentry dir/name).
func (f *FS) Invalidate(ino uint64) {
	f.cache.Lock()
	defer f.cache.Unlock()
	delete(f.cache.attrs, ino)
	f.dropBlocksLocked(ino)
}

func (f *FS) invalidateDentry(dir uint64, name string) {
	f.cache.Lock()
	defer f.cache.Unlock()
	f.forgetNameLocked(dir, name)
	f.incompleteLocked(dir)
}

// forgetName drops dir/name before a change to it; unlike
// invalidateDentry it keeps dir's listing complete: the change's answer
// (or its failure, through invalidateDentry) says what the name is now.
func (f *FS) forgetName(dir uint64, name string) {
	f.cache.Lock()
	defer f.cache.Unlock()
	f.forgetNameLocked(dir, name)
}

func (f *FS) forgetNameLocked(dir uint64, name string) {
	delete(f.cache.dentry, dentryKey{dir, name})
	delete(f.cache.attrs, dir)
	f.namesChangedLocked(dir)
}

// ForgetStale drops what the cache knows of ino, which its island says is
// gone (ESTALE): its attributes, block map and every name cached as
// pointing to it, so that a lookup of such a name asks the island again.
// (The kernel retries an open that failed ESTALE with a fresh lookup; a
// name another client removed, cached here without a lease for its
// timeout, would otherwise send it to the same inode again: SQLite's
// journal, made and removed by each writer in turn, failed "disk I/O
// error" so.)
func (f *FS) ForgetStale(ino uint64) {
	f.cache.Lock()
	defer f.cache.Unlock()
	delete(f.cache.attrs, ino)
	f.dropBlocksLocked(ino)
	for k, d := range f.cache.dentry {
		if d.ino == ino {
			f.forgetNameLocked(k.dir, k.name)
		}
	}
}

// CacheStats returns attribute/name cache hits and misses.
func (f *FS) CacheStats() (hits, misses uint64) {
	f.cache.Lock()
	defer f.cache.Unlock()
	return f.cache.hits, f.cache.misses
}

// maySearchLocked reports whether cred may search dir as far as the cache
// knows: root always; anyone else by the x bits of dir's attributes
// cached now (the island's own check, metawire.MayAccess).
func (f *FS) maySearchLocked(dir uint64, cred metawire.Cred, now time.Time) bool {
	if cred.UID == 0 {
		return true
	}
	a, ok := f.cache.attrs[dir]
	return ok && f.validLocked(namespace.Ino(dir).Bucket(), a.lease, a.expires, now) && metawire.MayAccess(&a.attr, &cred, 1)
}

// Lookup resolves name in dir.
//
// Answers come from the cache when the caller may search dir as far as
// the cache knows (root, or the x bits of dir's cached attributes: the
// island's own check). Under a lease a name found missing stays missing,
// and once every name of dir is cached (completeDir) any other name is
// missing without asking.
func (f *FS) Lookup(ctx context.Context, cred metawire.Cred, dir uint64, name string) (metawire.Attr, error) {
	now := time.Now()
	bucket := namespace.Ino(dir).Bucket()
	f.cache.Lock()
	if name == "." && f.maySearchLocked(dir, cred, now) {
		// The island answers "." with dir's own attributes (NFS clients
		// look it up to walk a path from the export's root).
		if a, ok := f.cache.attrs[dir]; ok && a.attr.IsDir() && f.validLocked(bucket, a.lease, a.expires, now) {
			f.hitLocked(dir, now)
			f.cache.Unlock()
			return a.attr, nil
		}
	}
	complete := false
	// An impossible name is the island's to refuse (ENAMETOOLONG, EINVAL),
	// never a cached "missing".
	if f.maySearchLocked(dir, cred, now) && namespace.ValidName(name) == nil {
		d, ok := f.cache.dentry[dentryKey{dir, name}]
		if ok && f.validLocked(bucket, d.lease, d.expires, now) {
			if d.ino == 0 {
				f.hitLocked(dir, now)
				f.cache.Unlock()
				return metawire.Attr{}, fmt.Errorf("client: lookup %q in %x: %w", name, dir, metawire.ErrNotFound)
			}
			if a, ok := f.cache.attrs[d.ino]; ok && f.validLocked(namespace.Ino(d.ino).Bucket(), a.lease, a.expires, now) {
				f.hitLocked(dir, now)
				f.cache.Unlock()
				return a.attr, nil
			}
		} else if l := f.liveLeaseLocked(bucket, now); l != nil {
			if l.complete[dir] {
				f.hitLocked(dir, now)
				f.cache.Unlock()
				return metawire.Attr{}, fmt.Errorf("client: lookup %q in %x: %w", name, dir, metawire.ErrNotFound)
			}
			// A second missing name under one lease: list the directory
			// once, if it is small, and answer the next ones here (an
			// unpack creates every name of a new directory).
			complete = l.misses > 0 && l.complete == nil
		} else if f.cache.made[dir] {
			// A directory this FS just made: its listing is one
			// request, which takes the lease and its attributes too.
			delete(f.cache.made, dir)
			complete = true
		}
	}
	f.cache.misses++
	f.cache.Unlock()
	if complete && f.completeDir(ctx, cred, dir) {
		return f.Lookup(ctx, cred, dir, name)
	}
	return f.lookupIsland(ctx, cred, dir, name)
}

// lookupIsland asks dir's island for name, under a lease, and caches the
// answer.
func (f *FS) lookupIsland(ctx context.Context, cred metawire.Cred, dir uint64, name string) (metawire.Attr, error) {
	bucket := namespace.Ino(dir).Bucket()
	var resp metawire.AttrResp
	m, err := f.leasedCall(ctx, dir, metawire.OpLookup, &metawire.NameReq{Cred: cred, Dir: dir, Name: name}, &resp)
	if err != nil {
		if errors.Is(err, metawire.ErrNotFound) && m.stamp != 0 {
			f.cache.Lock()
			if l := f.cache.leases[bucket]; l != nil && l.gen == m.stamp && f.stampLocked(bucket, dir, m.route, time.Now()) == l.gen {
				l.misses++
				f.cache.dentry[dentryKey{dir, name}] = cachedDentry{0, time.Time{}, m.stamp}
			}
			f.cache.Unlock()
		}
		return metawire.Attr{}, err
	}
	f.cacheAttrAt(resp.Attr, m.forIno(resp.Attr.Ino))
	f.cacheDentryAt(dir, name, resp.Attr.Ino, m.route)
	return resp.Attr, nil
}

// completeDirMax is the largest directory completeDir lists.
const completeDirMax = 512

// completeDir lists dir under its lease; when every name fits in one
// page it records that the cache holds them all. It reports success.
func (f *FS) completeDir(ctx context.Context, cred metawire.Cred, dir uint64) bool {
	bucket := namespace.Ino(dir).Bucket()
	f.cache.Lock()
	if l := f.cache.leases[bucket]; l != nil {
		l.complete = map[uint64]bool{} // tried under this lease (see Lookup)
	}
	f.cache.Unlock()
	var resp metawire.ReaddirResp
	m, err := f.leasedCall(ctx, dir, metawire.OpReaddir, &metawire.ReaddirReq{Cred: cred, Dir: dir, MaxEntries: completeDirMax}, &resp)
	if err != nil || m.stamp == 0 || !resp.EOF {
		return false
	}
	f.cache.Lock()
	defer f.cache.Unlock()
	l := f.cache.leases[bucket]
	now := time.Now()
	if l == nil || l.gen != m.stamp || f.stampLocked(bucket, dir, m.route, now) != l.gen {
		return false
	}
	for _, e := range resp.Entries {
		if e.Name != "." && e.Name != ".." {
			f.cache.dentry[dentryKey{dir, e.Name}] = cachedDentry{e.Ino, now.Add(f.cfg.AttrTTL), m.stamp}
		}
	}
	if resp.DirAttr.Ino == dir && !f.keptBackLocked(dir) {
		f.cache.attrs[dir] = cachedAttr{resp.DirAttr, now.Add(f.cfg.AttrTTL), m.stamp}
	}
	if l.complete == nil {
		l.complete = map[uint64]bool{}
	}
	l.complete[dir] = true
	keepListingLocked(l, dir, 0, resp.Entries, true)
	return true
}

// GetAttr returns ino's attributes, from the cache when fresh enough.
func (f *FS) GetAttr(ctx context.Context, cred metawire.Cred, ino uint64) (metawire.Attr, error) {
	now := time.Now()
	f.cache.Lock()
	if a, ok := f.cache.attrs[ino]; ok && f.validLocked(namespace.Ino(ino).Bucket(), a.lease, a.expires, now) {
		f.hitLocked(ino, now)
		f.cache.Unlock()
		return a.attr, nil
	}
	f.cache.misses++
	f.cache.Unlock()
	return f.GetAttrFresh(ctx, cred, ino)
}

// GetAttrFresh returns ino's current attributes (open revalidates with
// it): from the cache only when they were read under a lease that still
// holds (another client's change would have broken it first), else from
// the island.
func (f *FS) GetAttrFresh(ctx context.Context, cred metawire.Cred, ino uint64) (metawire.Attr, error) {
	now := time.Now()
	f.cache.Lock()
	if a, ok := f.cache.attrs[ino]; ok && f.leaseLeftLocked(namespace.Ino(ino).Bucket(), a.lease, now) > 0 {
		f.hitLocked(ino, now)
		f.cache.Unlock()
		return a.attr, nil
	}
	f.cache.Unlock()
	var resp metawire.AttrResp
	m, err := f.leasedCall(ctx, ino, metawire.OpGetAttr, &metawire.InoReq{Cred: cred, Ino: ino}, &resp)
	if err != nil {
		return metawire.Attr{}, err
	}
	f.cacheAttrAt(resp.Attr, m.forIno(resp.Attr.Ino))
	return resp.Attr, nil
}

// SetAttr changes attributes (see metawire.SetAttrReq). Truncation of a
// file with dirty cached data must go through the open File instead.
func (f *FS) SetAttr(ctx context.Context, req metawire.SetAttrReq) (metawire.Attr, error) {
	if a, ok := f.keepBack(req); ok {
		return a, nil
	}
	var resp metawire.AttrResp
	f.Invalidate(req.Ino)
	ch := f.beginChange(ctx, req.Ino)
	if err := f.call(ctx, req.Ino, metawire.OpSetAttr, &req, &resp); err != nil {
		f.endChange(ch)
		return metawire.Attr{}, err
	}
	f.cacheAttrAt(resp.Attr, ch.mark)
	f.endChange(ch)
	a := resp.Attr
	if req.Valid&metawire.SetSize != 0 && a.IsRegular() && !a.Inline {
		if err := f.rewriteTail(ctx, req.Cred, a); err != nil {
			return a, err
		}
	}
	return a, nil
}

// rewriteTail rewrites the block holding the end of a file truncated to a
// size inside it. Islands keep such a block whole (its pointer's checksum
// covers all of it), so without this a later extension would bring the
// cut-off bytes back; rewritten, the block is stored short and the bytes
// past the end read as zeros.
func (f *FS) rewriteTail(ctx context.Context, cred metawire.Cred, a metawire.Attr) error {
	bs := uint64(a.BlockSize)
	if bs == 0 {
		bs = layout.DefaultBlockSize
	}
	if a.Size%bs == 0 {
		return nil
	}
	fh, err := f.OpenWithAttr(ctx, cred, a)
	if err != nil {
		return err
	}
	start := a.Size / bs * bs
	buf := make([]byte, a.Size-start)
	if _, err := fh.ReadAt(ctx, buf, int64(start)); err != nil {
		return err
	}
	if _, err := fh.WriteAt(ctx, buf, int64(start)); err != nil {
		return err
	}
	return fh.Fsync(ctx) // part of a setattr, which is durable when answered
}

func (f *FS) create(ctx context.Context, op uint16, req metawire.CreateReq) (metawire.CreateResp, error) {
	if op == metawire.OpCreate {
		if resp, ok := f.createBehind(ctx, req); ok {
			return resp, nil
		}
	}
	var resp metawire.CreateResp
	f.forgetName(req.Dir, req.Name)
	req.Lazy = op == metawire.OpCreate && !req.Exclusive && f.lazyCreate.Load() &&
		req.Mode&metawire.ModeType == metawire.ModeFile && (len(req.Data) == 0 || f.lazyClose.Load())
	if op == metawire.OpCreate && req.Exclusive && req.Verf == 0 {
		// call retries a request whose answer was lost (a connection
		// cut after the island applied it): with a verifier the island
		// answers the retry with the file it made, instead of EEXIST
		// for a create that succeeded (the fault engine caught that).
		req.Verf = rand.Uint64() | 1
	}
	mark := f.lazyMark()
	ch := f.beginChange(ctx, req.Dir)
	defer f.endChange(ch)
	if err := f.call(ctx, req.Dir, op, &req, &resp); err != nil {
		f.invalidateDentry(req.Dir, req.Name) // it may exist after all (EEXIST, a lost answer)
		return resp, err
	}
	if req.Exclusive && resp.Existed {
		// An exclusive create answers "existed" only when the verifier
		// matched: the file is the one this create made (a retry).
		resp.Existed = false
	}
	switch {
	case req.Lazy && !resp.Existed:
		f.addLazy(ctx, resp.Attr.Ino, resp.Boot)
	case !req.Lazy && resp.Boot != 0:
		// A synced create makes what its island acknowledged before durable.
		isl := f.islandOf(req.Dir)
		f.settleIsland(isl, mark, resp.Boot, nil, false)
	}
	f.cacheAttrAt(resp.Attr, ch.mark)
	f.cacheAttrAt(resp.DirAttr, ch.mark)
	f.cacheDentryAt(req.Dir, req.Name, resp.Attr.Ino, ch.mark)
	return resp, nil
}

// Create makes a regular or special file.
func (f *FS) Create(ctx context.Context, req metawire.CreateReq) (metawire.CreateResp, error) {
	if req.Mode&metawire.ModeType == 0 {
		req.Mode |= metawire.ModeFile
	}
	return f.create(ctx, metawire.OpCreate, req)
}

// CreateWithData creates the regular file req.Name in req.Dir holding data
// in one island request: create, write and close at once, for small files
// (data of at most FSConfig.InlineMax bytes, which the island keeps in the
// inode). When the name exists nothing is written and the reply says
// Existed; the caller then writes the usual way. It is as durable as a
// create followed by a close: at once unless both SetLazyCreate and
// SetLazyClose are on.
func (f *FS) CreateWithData(ctx context.Context, req metawire.CreateReq, data []byte) (metawire.CreateResp, error) {
	if len(data) > f.cfg.InlineMax {
		return metawire.CreateResp{}, fmt.Errorf("client: create %q with %d bytes (inline max %d): %w", req.Name, len(data), f.cfg.InlineMax, metawire.ErrFileTooBig)
	}
	if t := req.Mode & metawire.ModeType; t != 0 && t != metawire.ModeFile {
		return metawire.CreateResp{}, fmt.Errorf("client: create %q with data and type %#o: %w", req.Name, t, metawire.ErrInvalid)
	}
	req.Mode |= metawire.ModeFile
	req.Data = data
	return f.create(ctx, metawire.OpCreate, req)
}

// SetLazyCreate makes this FS create regular files lazily (POSIX
// semantics, for the FUSE mount): a create returns before the island's log
// is synced, and the file is durable once its Flush, Fsync or Close
// returns (which commit or sync) — or within one island log sync anyway.
// Exclusive creates stay durable at once (lock files rely on them). An NFS
// gateway leaves this off: NFS CREATE must be stable when answered.
func (f *FS) SetLazyCreate(on bool) { f.lazyCreate.Store(on) }

// SetLazyClose makes File.Flush and File.Close commit without waiting for
// the island's log sync (CommitReq.Lazy; the FUSE mount): the data is on
// the storage servers and the commit applied and visible to every client
// when they return (close-to-open), but an island crash right after may
// lose the commit, as a local file system may lose data closed but not
// fsynced. File.Fsync is always durable: it commits synced, or syncs the
// island when an earlier lazy commit or create of the file is unsettled.
func (f *FS) SetLazyClose(on bool) { f.lazyClose.Store(on) }

// maxLazy bounds the unsettled files remembered; past it the islands of
// all of them are synced and the list starts over.
const maxLazy = 4096

// lazyChange is a file's last lazily acknowledged change: its generation
// (lazyMark) and the incarnation of the island that acknowledged it.
// lazyChange is a file's unsettled lazy changes: the last lazy
// generation, the incarnation that acknowledged the latest and, if an
// earlier one went to another incarnation (a crash between, or the
// file's table entry moved to another island), that one too (0: none;
// suspect: more than two).
type lazyChange struct {
	gen, boot, prev uint64
	suspect         bool
}

// then is ch after a further lazy change at generation gen acknowledged
// by incarnation boot. An older change that went to another incarnation
// settles only where that one is known durable too.
func (ch lazyChange) then(gen, boot uint64) lazyChange {
	next := lazyChange{gen: gen, boot: boot, prev: ch.prev, suspect: ch.suspect}
	if ch.boot != boot {
		next.suspect = next.suspect || ch.prev != 0 && ch.prev != boot // a third incarnation
		next.prev = ch.boot
	}
	return next
}

// durableAt reports whether ch's changes are durable on an island whose
// synced answer came from incarnation boot, adopting adopted.
func (ch lazyChange) durableAt(boot uint64, adopted []uint64) bool {
	ok := func(b uint64) bool { return b == boot || slices.Contains(adopted, b) }
	return !ch.suspect && ok(ch.boot) && (ch.prev == 0 || ok(ch.prev))
}

// errLazyLost reports lazily acknowledged changes of ino that an island
// crash may have lost before anything made them durable.
func errLazyLost(ino uint64) error {
	return fmt.Errorf("client: %x: its island restarted after a crash before the last changes were durable; they may be lost: %w", ino, metawire.ErrIO)
}

// lazyMark returns the current lazy generation: a file added after it has
// a larger one. A synced write sent after lazyMark covers every change
// acknowledged before it, by the same incarnation of that island.
func (f *FS) lazyMark() uint64 {
	f.lazy.Lock()
	defer f.lazy.Unlock()
	return f.lazy.gen
}

// addLazy records that ino has a change acknowledged, not yet synced, by
// incarnation boot of its island.
func (f *FS) addLazy(ctx context.Context, ino, boot uint64) {
	f.lazy.Lock()
	if f.lazy.m == nil {
		f.lazy.m = map[uint64]lazyChange{}
	}
	f.lazy.gen++
	ch := lazyChange{gen: f.lazy.gen, boot: boot}
	if old, ok := f.lazy.m[ino]; ok {
		ch = old.then(f.lazy.gen, boot)
	}
	f.lazy.m[ino] = ch
	over := len(f.lazy.m) > maxLazy
	f.lazy.Unlock()
	// Forgetting files without syncing their islands would let a later
	// fsync skip its sync.
	if over {
		// Not SyncLazy: this may be a kept-back create's flush, which
		// must not wait for a flush (itself).
		if err := f.syncLazyIslands(ctx); err != nil {
			f.log.Warn("client: settling lazily committed files", "err", err)
		}
	}
}

// SyncLazy makes every lazy create and commit this FS made so far durable:
// one OpSync to each island concerned (unmount). It fails if an island
// restarted after a crash before syncing some of them (errLazyLost).
func (f *FS) SyncLazy(ctx context.Context) error {
	f.flushKept(ctx, nil) // synced setattrs
	if err := f.takeKeptErr(); err != nil {
		return err
	}
	return f.syncLazyIslands(ctx)
}

// syncLazyIslands is SyncLazy without sending what is kept back first.
func (f *FS) syncLazyIslands(ctx context.Context) error {
	one := map[namespace.IslandID]uint64{} // a file per island, to route the sync
	for _, ino := range f.lazyInos(^uint64(0)) {
		isl := f.islandOf(ino)
		one[isl] = ino
	}
	var lost error
	for _, ino := range one {
		l, err := f.syncIsland(ctx, ino)
		if err != nil {
			return fmt.Errorf("client: sync of %x: %w", ino, err) // keep them: a later fsync syncs each
		}
		if lost == nil {
			lost = l
		}
	}
	return lost
}

// syncIsland syncs the log of the island owning route and settles this
// FS's lazy changes there (settleIsland, reporting those lost); err is the
// sync's own failure.
func (f *FS) syncIsland(ctx context.Context, route uint64) (lost, err error) {
	isl := f.islandOf(route)
	mark := f.lazyMark()
	var resp metawire.SyncResp
	if err := f.call(ctx, route, metawire.OpSync, metawire.Empty{}, &resp); err != nil {
		return nil, err
	}
	return f.settleIsland(isl, mark, resp.Boot, resp.Adopted, true), nil
}

// durable records that a synced write to ino's island, sent after mark
// (lazyMark), was answered by incarnation boot with the incarnations it
// adopted (settleIsland); it reports ino's own changes if they may be
// lost.
func (f *FS) durable(ino, mark, boot uint64, adopted []uint64) error {
	isl := f.islandOf(ino)
	f.lazy.Lock()
	var lost error
	if ch, ok := f.lazy.m[ino]; ok && ch.gen <= mark {
		delete(f.lazy.m, ino)
		if !ch.durableAt(boot, adopted) {
			lost = errLazyLost(ino)
		}
	}
	f.lazy.Unlock()
	f.settleIsland(isl, mark, boot, adopted, false) // others' losses are theirs to report
	return lost
}

// durableAfterWrite is durable for a synced write whose answer carries no
// adopted incarnations: when ino's lazy change was acknowledged by
// another incarnation (a crash, or its table entry moved to another
// island since), one OpSync asks which incarnations the island adopted.
func (f *FS) durableAfterWrite(ctx context.Context, ino, mark, boot uint64) error {
	f.lazy.Lock()
	ch, ok := f.lazy.m[ino]
	f.lazy.Unlock()
	if !ok || ch.gen > mark || ch.durableAt(boot, nil) {
		return f.durable(ino, mark, boot, nil)
	}
	var resp metawire.SyncResp
	if err := f.call(ctx, ino, metawire.OpSync, metawire.Empty{}, &resp); err != nil {
		return fmt.Errorf("client: sync of %x: %w", ino, err)
	}
	return f.durable(ino, mark, resp.Boot, resp.Adopted)
}

// islandOf returns the island owning ino's bucket. Lazy changes are
// tracked by island, not address: one server may serve several islands,
// and an island's address moves with its leader.
func (f *FS) islandOf(ino uint64) namespace.IslandID {
	id, _, _ := f.cfg.Map.IslandFor(namespace.Ino(ino).Bucket())
	return id
}

// settleIsland records that a synced write to island isl, sent after
// mark, was answered by incarnation boot: every change there up to mark
// that the same incarnation acknowledged is durable. One another
// incarnation acknowledged may be lost: with takeLost it is reported
// (once, as fsync reports a failed write-back) and forgotten, else kept
// for its own file's fsync to report.
func (f *FS) settleIsland(isl namespace.IslandID, mark, boot uint64, adopted []uint64, takeLost bool) error {
	// The map is another component: it is asked with f.lazy released.
	var here []uint64
	for _, ino := range f.lazyInos(mark) {
		if f.islandOf(ino) == isl {
			here = append(here, ino)
		}
	}
	f.lazy.Lock()
	defer f.lazy.Unlock()
	var lost error
	for _, ino := range here {
		ch, ok := f.lazy.m[ino]
		if !ok || ch.gen > mark {
			continue // settled or changed again meanwhile
		}
		if !ch.durableAt(boot, adopted) {
			if !takeLost {
				continue
			}
			if lost == nil {
				lost = errLazyLost(ino)
			}
		}
		delete(f.lazy.m, ino)
	}
	return lost
}

// lazyInos lists the files with unsettled lazy changes up to mark.
func (f *FS) lazyInos(mark uint64) []uint64 {
	f.lazy.Lock()
	defer f.lazy.Unlock()
	out := make([]uint64, 0, len(f.lazy.m))
	for ino, ch := range f.lazy.m {
		if ch.gen <= mark {
			out = append(out, ino)
		}
	}
	return out
}

// settle makes ino's lazy changes durable if nothing did yet: one OpSync
// to its island.
func (f *FS) settle(ctx context.Context, ino uint64) error {
	f.lazy.Lock()
	_, pending := f.lazy.m[ino]
	mark := f.lazy.gen
	f.lazy.Unlock()
	if !pending {
		return nil
	}
	var resp metawire.SyncResp
	if err := f.call(ctx, ino, metawire.OpSync, metawire.Empty{}, &resp); err != nil {
		return fmt.Errorf("client: sync of %x: %w", ino, err)
	}
	return f.durable(ino, mark, resp.Boot, resp.Adopted)
}

// SyncDir makes every change acknowledged so far by the island owning
// directory dir durable, lazy creates of its files included (fsync on a
// directory).
func (f *FS) SyncDir(ctx context.Context, dir uint64) error {
	f.flushKept(ctx, nil) // kept-back creates and changes first
	if err := f.takeKeptErr(); err != nil {
		return err
	}
	lost, err := f.syncIsland(ctx, dir)
	if err != nil {
		return fmt.Errorf("client: sync of directory %x: %w", dir, err)
	}
	return lost
}

// Mkdir makes a directory.
func (f *FS) Mkdir(ctx context.Context, req metawire.CreateReq) (metawire.CreateResp, error) {
	req.Mode = req.Mode&metawire.ModePerm | metawire.ModeDir
	resp, err := f.create(ctx, metawire.OpMkdir, req)
	if err == nil && f.wb.on.Load() {
		// An unpack fills it next: the first missing name lists it
		// (Lookup), under a lease and with its attributes.
		f.cache.Lock()
		if len(f.cache.made) >= 1024 {
			clear(f.cache.made)
		}
		f.cache.made[resp.Attr.Ino] = true
		f.cache.Unlock()
	}
	return resp, err
}

// Symlink makes a symbolic link to req.Target.
func (f *FS) Symlink(ctx context.Context, req metawire.CreateReq) (metawire.CreateResp, error) {
	req.Mode = 0o777 | metawire.ModeLink
	return f.create(ctx, metawire.OpSymlink, req)
}

// Readlink returns a symlink's target.
func (f *FS) Readlink(ctx context.Context, cred metawire.Cred, ino uint64) (string, error) {
	var resp metawire.ReadlinkResp
	if err := f.call(ctx, ino, metawire.OpReadlink, &metawire.InoReq{Cred: cred, Ino: ino}, &resp); err != nil {
		return "", err
	}
	return resp.Target, nil
}

func (f *FS) remove(ctx context.Context, op uint16, cred metawire.Cred, dir uint64, name string) error {
	// The victim's cached attributes (nlink) change too.
	keys := []uint64{dir, unknownKey}
	f.cache.Lock()
	if d, ok := f.cache.dentry[dentryKey{dir, name}]; ok && d.ino != 0 {
		delete(f.cache.attrs, d.ino)
		keys[1] = d.ino
	}
	f.cache.Unlock()
	f.forgetName(dir, name)
	ch := f.beginChange(ctx, keys...)
	defer f.endChange(ch)
	if err := f.call(ctx, dir, op, &metawire.NameReq{Cred: cred, Dir: dir, Name: name}, nil); err != nil {
		f.invalidateDentry(dir, name)
		return err
	}
	return nil
}

// Unlink removes a non-directory entry.
//
// Under write-behind the unlink of a file whose create is still kept back
// drops that create instead (removeBehind): neither reaches the island;
// another file's unlink may be kept back (unlinkBehind).
// A file open here stays readable and writable after its last name goes
// only if the island holds it for this FS (HoldOpen, then KeepOpen
// before the unlink); otherwise a File still open on it fails its next
// flush.
func (f *FS) Unlink(ctx context.Context, cred metawire.Cred, dir uint64, name string) error {
	if f.unlinkBehind(ctx, cred, dir, name) {
		return nil
	}
	return f.remove(ctx, metawire.OpUnlink, cred, dir, name)
}

// Rmdir removes an empty directory.
func (f *FS) Rmdir(ctx context.Context, cred metawire.Cred, dir uint64, name string) error {
	return f.remove(ctx, metawire.OpRmdir, cred, dir, name)
}

// Rename moves an entry with POSIX semantics.
func (f *FS) Rename(ctx context.Context, req metawire.RenameReq) error {
	f.cache.Lock()
	var moved uint64 // the renamed inode, if cached
	if d, ok := f.cache.dentry[dentryKey{req.SrcDir, req.SrcName}]; ok {
		moved = d.ino
	}
	// The moved inode and one it replaces change too (".." of a
	// directory, nlink): by number when cached, else as unknownKey.
	keys := []uint64{req.SrcDir, req.DstDir}
	for _, k := range []dentryKey{{req.SrcDir, req.SrcName}, {req.DstDir, req.DstName}} {
		if d, ok := f.cache.dentry[k]; ok && d.ino != 0 {
			delete(f.cache.attrs, d.ino)
			keys = append(keys, d.ino)
		} else if !ok {
			keys = append(keys, unknownKey)
		}
		delete(f.cache.dentry, k)
	}
	delete(f.cache.attrs, req.SrcDir)
	delete(f.cache.attrs, req.DstDir)
	f.namesChangedLocked(req.SrcDir)
	f.namesChangedLocked(req.DstDir)
	f.cache.Unlock()
	ch := f.beginChange(ctx, keys...)
	defer f.endChange(ch)
	err := f.call(ctx, req.SrcDir, metawire.OpRename, &req, nil)
	if err != nil || req.Flags&metawire.RenameExchange != 0 {
		// Unknown after a failure; after an exchange SrcName holds what
		// DstName held.
		f.invalidateDentry(req.SrcDir, req.SrcName)
		f.invalidateDentry(req.DstDir, req.DstName)
		return err
	}
	if moved != 0 {
		f.cacheDentryAt(req.DstDir, req.DstName, moved, ch.mark)
	} else {
		f.invalidateDentry(req.DstDir, req.DstName)
	}
	return nil
}

// Link makes a hard link.
func (f *FS) Link(ctx context.Context, req metawire.LinkReq) (metawire.Attr, error) {
	f.forgetName(req.Dir, req.Name)
	f.Invalidate(req.Ino)
	ch := f.beginChange(ctx, req.Dir, req.Ino)
	defer f.endChange(ch)
	// Either island may serve a link. A key confined to a subtree sends
	// it to the file's: the island checks the file's recorded parent
	// itself and asks only the directory's island for its parent (other
	// islands tell directories' parents, not files').
	route := req.Dir
	if k := f.data.cfg.Key; k != nil && k.Scope.Confined() {
		route = req.Ino
	}
	var resp metawire.AttrResp
	if err := f.call(ctx, route, metawire.OpLink, &req, &resp); err != nil {
		f.invalidateDentry(req.Dir, req.Name)
		return metawire.Attr{}, err
	}
	f.cacheAttrAt(resp.Attr, ch.mark)
	f.cacheDentryAt(req.Dir, req.Name, resp.Attr.Ino, ch.mark)
	return resp.Attr, nil
}

// Readdir returns one page of dir's entries after cookie. With plus, every
// entry carries attributes (fetched from other islands when needed).
func (f *FS) Readdir(ctx context.Context, cred metawire.Cred, dir, cookie uint64, max uint32, plus bool) (metawire.ReaddirResp, error) {
	resp, cached := f.cachedReaddir(cred, dir, cookie, max, plus)
	if !cached {
		m, err := f.leasedCall(ctx, dir, metawire.OpReaddir, &metawire.ReaddirReq{Cred: cred, Dir: dir, Cookie: cookie, MaxEntries: max, Plus: plus}, &resp)
		if err != nil {
			return resp, err
		}
		f.cacheReaddir(dir, cookie, resp, m)
	}
	for i := range resp.Entries {
		e := &resp.Entries[i]
		if !e.HasAttr && plus && e.Name != "." && e.Name != ".." {
			a, err := f.GetAttr(ctx, cred, e.Ino)
			if err != nil {
				continue // raced with a removal; the entry goes without attributes
			}
			e.Attr, e.HasAttr = a, true
		}
	}
	return resp, nil
}

// cacheReaddir caches what an island's page of dir's listing says, with
// the marks leasedCall gave.
func (f *FS) cacheReaddir(dir, cookie uint64, resp metawire.ReaddirResp, m leaseMarks) {
	f.cacheAttrAt(resp.DirAttr, m.route)
	for i := range resp.Entries {
		e := &resp.Entries[i]
		if e.HasAttr {
			f.cacheAttrAt(e.Attr, m.forIno(e.Attr.Ino))
		}
		if e.Name != "." && e.Name != ".." {
			f.cacheDentryAt(dir, e.Name, e.Ino, m.route)
		}
	}
	if m.stamp != 0 {
		f.keepListing(dir, cookie, m, resp.Entries, resp.EOF)
	}
}

// GetXattr, SetXattr, ListXattr and RemoveXattr manage extended attributes.
func (f *FS) GetXattr(ctx context.Context, cred metawire.Cred, ino uint64, name string) ([]byte, error) {
	var resp metawire.XattrResp
	if err := f.call(ctx, ino, metawire.OpGetXattr, &metawire.XattrReq{Cred: cred, Ino: ino, Name: name}, &resp); err != nil {
		return nil, err
	}
	return resp.Value, nil
}

func (f *FS) SetXattr(ctx context.Context, cred metawire.Cred, ino uint64, name string, value []byte, flags uint32) error {
	f.Invalidate(ino)
	ch := f.beginChange(ctx, ino)
	err := f.call(ctx, ino, metawire.OpSetXattr, &metawire.XattrReq{Cred: cred, Ino: ino, Name: name, Value: value, Flags: flags}, nil)
	f.endChange(ch)
	if err != nil {
		return err
	}
	if name == PolicyXattr {
		// A file's new policy applies to the bytes it already holds too.
		if _, err := f.Restripe(ctx, cred, ino); err != nil {
			return err
		}
	}
	return nil
}

func (f *FS) ListXattr(ctx context.Context, cred metawire.Cred, ino uint64) ([]string, error) {
	var resp metawire.XattrResp
	if err := f.call(ctx, ino, metawire.OpListXattr, &metawire.InoReq{Cred: cred, Ino: ino}, &resp); err != nil {
		return nil, err
	}
	return resp.Names, nil
}

func (f *FS) RemoveXattr(ctx context.Context, cred metawire.Cred, ino uint64, name string) error {
	f.Invalidate(ino)
	ch := f.beginChange(ctx, ino)
	defer f.endChange(ch)
	return f.call(ctx, ino, metawire.OpRemoveXattr, &metawire.XattrReq{Cred: cred, Ino: ino, Name: name}, nil)
}

// Access checks permission bits (4 read, 2 write, 1 execute).
func (f *FS) Access(ctx context.Context, cred metawire.Cred, ino uint64, mask uint32) error {
	return f.call(ctx, ino, metawire.OpAccess, &metawire.AccessReq{Cred: cred, Ino: ino, Mask: mask}, nil)
}
