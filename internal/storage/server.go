package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/wire"
)

// ServerConfig configures a storage server: a Store served over
// internal/wire with the fragment protocol.
type ServerConfig struct {
	Dir    string
	Listen string // host:port; ":0" picks a port
	// Listener, when set, is served instead of a TCP listener on Listen
	// (memnet in in-process tests).
	Listener net.Listener
	Slot     uint16
	// CapacityBytes caps stored bytes (0: the filesystem's free space).
	CapacityBytes int64
	// ScrubBytesPerSec is the scrubber's rate (0: scrubber off).
	ScrubBytesPerSec int64
	// ScrubPause is the pause between scrub passes (default 1 minute).
	ScrubPause time.Duration
	FS         vfs.FS
	Faults     *faults.Set
	Logger     *slog.Logger
	// Registerer, when set, receives the server's metrics (metrics.go).
	Registerer prometheus.Registerer
	// Key is the cluster key: every connection must authenticate with a
	// key of this cluster (package auth). nil serves unauthenticated
	// (in-process tests only; the atoll command always sets it).
	Key *auth.Key
}

// Validate checks the configuration.
func (c *ServerConfig) Validate() error {
	if c.Dir == "" {
		return errors.New("storage: server config: --dir is required")
	}
	if c.Listen == "" && c.Listener == nil {
		return errors.New("storage: server config: --listen is required")
	}
	if c.ScrubBytesPerSec < 0 {
		return errors.New("storage: server config: negative scrub rate")
	}
	return nil
}

// Server serves one Store on a TCP listener.
type Server struct {
	cfg   ServerConfig
	store *Store
	ln    net.Listener
	srv   *wire.Server
	log   *slog.Logger
	met   *serverMetrics
	// down is the set of slots the cluster map says are down (SetDown):
	// while a block's slot is down, its read token also covers its rows
	// in the stripe's other data fragments (fragment.Grant).
	down atomic.Pointer[map[uint16]bool]
}

// SetDown records the slots the newest cluster map marks down or out.
func (s *Server) SetDown(slots []uint16) {
	m := make(map[uint16]bool, len(slots))
	for _, sl := range slots {
		m[sl] = true
	}
	s.down.Store(&m)
}

func (s *Server) slotDown(slot uint16) bool {
	m := s.down.Load()
	return m != nil && (*m)[slot]
}

// NewServer opens the store (running crash recovery) and binds the listener.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ScrubPause == 0 {
		cfg.ScrubPause = time.Minute
	}
	log := cfg.Logger.With("slot", cfg.Slot)
	st, err := Open(Config{Dir: cfg.Dir, FS: cfg.FS, CapacityBytes: cfg.CapacityBytes, Faults: cfg.Faults, Logger: log,
		OnCorrupt: func(id fragment.ID, r CorruptRange) {
			log.Warn("storage: corrupt range detected", "fragment", id.String(), "range", r.String())
		}})
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, store: st, log: log}
	if s.met, err = newServerMetrics(cfg.Registerer, cfg.Slot, st, func() uint64 {
		if s.srv == nil {
			return 0
		}
		return s.srv.Refused()
	}); err != nil {
		st.Close()
		return nil, fmt.Errorf("storage: metrics: %w", err)
	}
	var verifier *auth.Verifier
	if cfg.Key != nil {
		if verifier, err = auth.NewVerifier(cfg.Key); err != nil {
			st.Close()
			return nil, fmt.Errorf("storage: %w", err)
		}
		// The data path goes unsealed for clients that offer it, unless
		// the cluster seals data too: sealing costs it a fifth of its CPU.
		verifier.AllowPlain = !auth.SealData()
	}
	s.srv, err = wire.NewServer(wire.ServerConfig{
		Auth:      verifier,
		Handler:   s.met.wrap(s.handle),
		Logger:    log,
		ErrorCode: statusOf,
		Limits:    wire.Limits{MaxPayload: MaxFragmentSize + 1<<20},
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	ln := cfg.Listener
	if ln == nil {
		ln, err = net.Listen("tcp", cfg.Listen)
	}
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("storage: listen %s: %w", cfg.Listen, err)
	}
	s.ln = ln
	return s, nil
}

// Addr is the listening address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Store returns the underlying store.
func (s *Server) Store() *Store { return s.store }

// Run serves until ctx is done, then stops the scrubber, waits for
// in-flight requests and closes the store.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if s.cfg.ScrubBytesPerSec > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.store.Scrub(ctx, s.cfg.ScrubBytesPerSec, s.cfg.ScrubPause); err != nil && ctx.Err() == nil {
				s.log.Error("storage: scrubber stopped", "err", err)
			}
		}()
	}
	s.log.Info("storage: serving", "addr", s.Addr(), "dir", s.cfg.Dir)
	err := s.srv.Serve(ctx, s.ln)
	cancel()
	wg.Wait()
	if cerr := s.store.Close(); err == nil {
		err = cerr
	}
	return err
}

// statusTable maps store sentinels to protocol status codes (one table, at
// the edge).
var statusTable = []struct {
	err    error
	status uint32
}{
	{ErrNotFound, fragment.StatusNotFound},
	{ErrExists, fragment.StatusExists},
	{ErrCorrupt, fragment.StatusCorrupt},
	{ErrOutOfRange, fragment.StatusOutOfRange},
	{ErrNoSpace, fragment.StatusNoSpace},
	{ErrBadData, fragment.StatusBadData},
	{ErrRepairMismatch, fragment.StatusRepairMismatch},
	{fragment.ErrBadRequest, fragment.StatusBadRequest},
	{ErrClosed, fragment.StatusUnavailable},
	{auth.ErrForbidden, fragment.StatusForbidden},
}

func statusOf(err error) uint32 {
	for _, e := range statusTable {
		if errors.Is(err, e.err) {
			return e.status
		}
	}
	return fragment.StatusInternal
}

// ownLog lets a key that is not an admin one put and append only in its
// own logs (auth.WritesOwnLogs): a put of another log's missing fragment
// could plant bytes its readers check only against CRC32C ("Who may
// repair" in doc.go). The cluster key and admin keys write anywhere.
func (s *Server) ownLog(p auth.Peer, op string, log uint64) error {
	if !auth.WritesOwnLogs(p.Name, p.Caps) || auth.OwnsLog(p.Name, log) {
		return nil
	}
	return fmt.Errorf("storage slot %d: %s in log %016x: %w: key %q may write only its own logs (the cleaner repairs the others)", s.cfg.Slot, op, log, auth.ErrForbidden, p.Name)
}

// tenantLog lets a key limited to identities (a tenant's) reach only its
// own logs (auth.OwnsLog): fragment infos and newest stripes elsewhere are
// refused. Other keys are trusted to read every log, as before.
func (s *Server) tenantLog(p auth.Peer, op string, log uint64) error {
	if !p.Scope.Tenant() || auth.OwnsLog(p.Name, log) {
		return nil
	}
	return fmt.Errorf("storage slot %d: %s in log %016x: %w: key %q may reach only its own logs", s.cfg.Slot, op, log, auth.ErrForbidden, p.Name)
}

// tenantRead lets a tenant's key read a fragment of its own logs, or the
// rows of a block an island gave it a read token for (after checking the
// file's permissions for the key's identity; fragment.Grant).
func (s *Server) tenantRead(p auth.Peer, m *fragment.ReadReq) error {
	if !p.Scope.Tenant() || auth.OwnsLog(p.Name, m.ID.Log) || s.cfg.Key == nil {
		return nil // (a server without keys has only unscoped peers)
	}
	switch {
	case len(m.Token) == 0:
		return fmt.Errorf("storage slot %d: read %s: %w: key %q needs a read token for another log's fragment", s.cfg.Slot, m.ID, auth.ErrForbidden, p.Name)
	case !s.cfg.Key.CheckReadToken(p.Name, m.Grant.Canonical(m.ID.Stripe()), m.Token):
		return fmt.Errorf("storage slot %d: read %s: %w: bad read token for key %q", s.cfg.Slot, m.ID, auth.ErrForbidden, p.Name)
	case !m.Grant.Allows(m.ID.Index, m.Off, m.Len, s.slotDown):
		return fmt.Errorf("storage slot %d: read %s [%d,+%d): %w: outside the block its token grants", s.cfg.Slot, m.ID, m.Off, m.Len, auth.ErrForbidden)
	}
	return nil
}

func (s *Server) handle(ctx context.Context, req *wire.Request) (wire.Response, error) {
	if err := req.Peer.Allow(fragment.Schema.Needs(req.Op), fragment.Schema.Name(req.Op)); err != nil {
		return wire.Response{}, fmt.Errorf("storage slot %d: %w", s.cfg.Slot, err)
	}
	switch req.Op {
	case fragment.OpPut:
		var m fragment.PutReq
		if err := fragment.Unmarshal(req.Msg, &m); err != nil {
			return wire.Response{}, err
		}
		if err := s.ownLog(req.Peer, "put", m.ID.Log); err != nil {
			return wire.Response{}, err
		}
		if m.Repair {
			// A repair replaces stored bytes that readers check only
			// against CRC32C, which anyone can forge: it is for the
			// cluster's own repairers (the cleaner, members), never for a
			// tenant's key (storage/doc.go, "Who may repair").
			if err := req.Peer.Allow(auth.CapAdmin, "repair"); err != nil {
				return wire.Response{}, fmt.Errorf("storage slot %d: put %s: %w", s.cfg.Slot, m.ID, err)
			}
		}
		if m.Repair || int(m.ChunkSize) != s.store.ChunkSize() {
			if err := checkCRCs(req.Payload, m.ChunkSize, m.CRCs); err != nil {
				return wire.Response{}, fmt.Errorf("storage: put %s: %w", m.ID, err)
			}
		}
		if m.Repair {
			return wire.Response{}, s.store.Repair(ctx, m.ID, req.Payload)
		}
		if int(m.ChunkSize) == s.store.ChunkSize() {
			// The store checks the sender's checksums as it computes its
			// own: one pass over the bytes instead of two.
			return wire.Response{}, s.store.Put(ctx, m.ID, req.Payload, m.CRCs)
		}
		return wire.Response{}, s.store.Put(ctx, m.ID, req.Payload, nil) // checked above
	case fragment.OpAppend:
		var m fragment.IDReq
		if err := fragment.Unmarshal(req.Msg, &m); err != nil {
			return wire.Response{}, err
		}
		if err := s.ownLog(req.Peer, "append", m.ID.Log); err != nil {
			return wire.Response{}, err
		}
		n, err := s.store.Append(ctx, m.ID, req.Payload)
		if err != nil {
			return wire.Response{}, err
		}
		return wire.Response{Msg: fragment.Marshal(&fragment.AppendResp{Length: uint64(n)})}, nil
	case fragment.OpRead:
		var m fragment.ReadReq
		if err := fragment.Unmarshal(req.Msg, &m); err != nil {
			return wire.Response{}, err
		}
		if m.Len > MaxFragmentSize || m.Off > MaxFragmentSize {
			return wire.Response{}, fmt.Errorf("storage: read %s: %w: range [%d,+%d)", m.ID, fragment.ErrBadRequest, m.Off, m.Len)
		}
		if err := s.tenantRead(req.Peer, &m); err != nil {
			return wire.Response{}, err
		}
		info, err := s.store.Info(ctx, m.ID)
		if err != nil {
			return wire.Response{}, err
		}
		// Size the buffer by what the fragment can return, not by what was
		// asked: a huge Len on a small fragment must not cost memory.
		want := int64(m.Len)
		if rest := info.Length - int64(m.Off); rest < want {
			want = max(rest, 0)
		}
		buf := wire.GetBuf(int(want))
		n, err := s.store.Read(ctx, m.ID, int64(m.Off), buf)
		if err != nil {
			wire.PutBuf(buf)
			return wire.Response{}, err
		}
		return wire.Response{
			Msg:     fragment.Marshal(&fragment.ReadResp{Length: uint64(info.Length)}),
			Payload: buf[:n],
			Release: func() { wire.PutBuf(buf) },
		}, nil
	case fragment.OpDelete:
		var m fragment.IDReq
		if err := fragment.Unmarshal(req.Msg, &m); err != nil {
			return wire.Response{}, err
		}
		return wire.Response{}, s.store.Delete(ctx, m.ID)
	case fragment.OpInfo:
		var m fragment.IDReq
		if err := fragment.Unmarshal(req.Msg, &m); err != nil {
			return wire.Response{}, err
		}
		if err := s.tenantLog(req.Peer, "info", m.ID.Log); err != nil {
			return wire.Response{}, err
		}
		info, err := s.store.Info(ctx, m.ID)
		if err != nil {
			return wire.Response{}, err
		}
		return wire.Response{Msg: fragment.Marshal(&fragment.Info{ID: info.ID, Length: uint64(info.Length),
			ChunkSize: uint32(info.ChunkSize), Created: info.Created, CRCs: info.CRCs})}, nil
	case fragment.OpList:
		var m fragment.ListReq
		if err := fragment.Unmarshal(req.Msg, &m); err != nil {
			return wire.Response{}, err
		}
		limit := int(min(m.Limit, 10000))
		if limit == 0 {
			limit = 1000
		}
		infos, err := s.store.List(ctx, m.Log, m.FromSeq, limit)
		if err != nil {
			return wire.Response{}, err
		}
		var r fragment.ListResp
		for _, in := range infos {
			r.IDs = append(r.IDs, in.ID)
			r.Lengths = append(r.Lengths, uint64(in.Length))
		}
		return wire.Response{Msg: fragment.Marshal(&r)}, nil
	case fragment.OpScan:
		var m fragment.ScanReq
		if err := fragment.Unmarshal(req.Msg, &m); err != nil {
			return wire.Response{}, err
		}
		limit := int(min(max(m.Limit, 1), 10000))
		var after *fragment.ID
		if !m.First {
			after = &m.After
		}
		infos, err := s.store.ListAll(ctx, after, limit+1)
		if err != nil {
			return wire.Response{}, err
		}
		var r fragment.ScanResp
		if len(infos) > limit {
			infos, r.More = infos[:limit], true
		}
		r.Entries = make([]fragment.ScanEntry, len(infos))
		for i, in := range infos {
			r.Entries[i] = fragment.ScanEntry{ID: in.ID, Length: uint64(in.Length), Created: in.Created}
		}
		if m.First {
			if r.Suspect, err = s.store.Suspects(ctx, 10000); err != nil {
				return wire.Response{}, err
			}
		}
		return wire.Response{Msg: fragment.Marshal(&r)}, nil
	case fragment.OpNewest:
		var m fragment.LogReq
		if err := fragment.Unmarshal(req.Msg, &m); err != nil {
			return wire.Response{}, err
		}
		if err := s.tenantLog(req.Peer, "newest", m.Log); err != nil {
			return wire.Response{}, err
		}
		seq, ok, err := s.store.Newest(ctx, m.Log)
		if err != nil {
			return wire.Response{}, err
		}
		return wire.Response{Msg: fragment.Marshal(&fragment.NewestResp{Found: ok, Seq: seq})}, nil
	case fragment.OpVerify:
		var m fragment.IDReq
		if err := fragment.Unmarshal(req.Msg, &m); err != nil {
			return wire.Response{}, err
		}
		sick, err := s.store.Verify(ctx, m.ID)
		if err != nil {
			return wire.Response{}, err
		}
		var r fragment.VerifyResp
		for _, c := range sick {
			r.Sick = append(r.Sick, fragment.Range{Off: uint64(c.Off), Len: uint64(c.Len)})
		}
		return wire.Response{Msg: fragment.Marshal(&r)}, nil
	case fragment.OpStat:
		if len(req.Msg) != 0 {
			return wire.Response{}, fmt.Errorf("storage: stat: %w: %d unexpected message bytes", fragment.ErrBadRequest, len(req.Msg))
		}
		st := s.store.Stat()
		return wire.Response{Msg: fragment.Marshal(&fragment.Stats{
			Slot: s.cfg.Slot, CapacityBytes: uint64(st.CapacityBytes), UsedBytes: uint64(st.UsedBytes),
			FreeBytes: uint64(st.FreeBytes), Fragments: uint64(st.Fragments),
			ScrubPasses: uint64(st.Scrub.Passes), ScrubBytes: uint64(st.Scrub.PassBytes),
			CorruptFound: uint64(st.CorruptDetected), Repairs: uint64(st.Repairs), Disk: st.Disk,
		})}, nil
	}
	return wire.Response{}, fmt.Errorf("storage: %w: unknown op %d", fragment.ErrBadRequest, req.Op)
}

// checkCRCs verifies the sender's per-chunk checksums over the payload, so
// bytes damaged between the client's memory and ours are refused.
func checkCRCs(data []byte, chunk uint32, crcs []uint32) error {
	if chunk == 0 {
		// Every put carries checksums: bytes crossing the network are
		// checked end to end, never taken on trust.
		return fmt.Errorf("%w: no chunk checksums sent", ErrBadData)
	}
	want := (len(data) + int(chunk) - 1) / int(chunk)
	if len(crcs) != want {
		return fmt.Errorf("%w: %d checksums for %d chunks", ErrBadData, len(crcs), want)
	}
	for i := range crcs {
		lo := i * int(chunk)
		if checksum(data[lo:min(lo+int(chunk), len(data))]) != crcs[i] {
			return fmt.Errorf("%w: chunk %d checksum mismatch", ErrBadData, i)
		}
	}
	return nil
}
