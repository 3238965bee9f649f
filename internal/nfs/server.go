package nfs

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/netip"
	"path"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/nfs/xdr"
)

// Export is the gateway's one export: every directory of the namespace
// can be mounted, with these options.
type Export struct {
	// Allow lists the client addresses allowed to mount and use the
	// export; empty allows everyone.
	Allow []netip.Prefix
	// ReadOnly refuses every change with NFS3ERR_ROFS.
	ReadOnly bool
	// SecurePort answers NFS and MOUNT calls (but NULL) only from source
	// ports below 1024, which only root can bind on a client host (knfsd's
	// "secure"): a user on an allowed host cannot then assert any uid
	// with a hand-made AUTH_SYS credential. Others get AUTH_TOOWEAK.
	SecurePort bool
	// RootSquash maps uid 0 (and gid 0) to AnonUID (AnonGID).
	RootSquash bool
	// AnonUID and AnonGID are the identity of AUTH_NONE callers and of
	// squashed root. Default 65534 (nobody).
	AnonUID, AnonGID uint32
	// Path, when not "" or "/", is the only directory clients may mount,
	// and they are confined to it: handles carry a tag (an HMAC under
	// HandleKey) so a forged or foreign handle is NFS3ERR_STALE, and
	// LOOKUP ".." of the export's root is the root itself.
	Path string
	// HandleKey keys the tags every handle carries (HMAC-SHA256 of the
	// export path and the handle): a forged handle is NFS3ERR_STALE.
	// Gateways with the same key and Path accept each other's handles.
	// Required with Path; without it (in-process tests) handles are bare.
	HandleKey []byte
}

// confined reports whether the export is a subdirectory its clients
// cannot leave.
func (e *Export) confined() bool { return e.Path != "" && e.Path != "/" }

// allowed reports whether a client at addr may use the export.
func (e *Export) allowed(addr netip.Addr) bool {
	if len(e.Allow) == 0 {
		return true
	}
	addr = addr.Unmap()
	for _, p := range e.Allow {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// ParseAllow parses a comma-separated list of addresses and CIDR prefixes.
func ParseAllow(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("nfs: %q is neither an address nor a CIDR prefix", s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// FSStat is what FSSTAT reports.
type FSStat struct {
	TotalBytes, FreeBytes uint64
	TotalFiles, FreeFiles uint64
}

// Config configures a gateway.
type Config struct {
	FS *client.FS
	// Listen is the NFS and MOUNT address. Default 127.0.0.1:2049.
	Listen string
	// PortmapListen, when set, serves a minimal portmapper (rpcbind v2
	// GETPORT, v3/v4 GETADDR) there, e.g. 127.0.0.1:111.
	PortmapListen string
	Export        Export
	// FlushIdle is how long a file's buffered unstable writes wait after
	// the last write before the background flusher makes them durable.
	// Default 2s.
	FlushIdle time.Duration
	// FlushMaxAge bounds how long any write stays buffered (for files
	// written continuously). Default 10s.
	FlushMaxAge time.Duration
	// MaxOpenFiles bounds the open files cached; clean ones are closed
	// first. Default 256.
	MaxOpenFiles int
	// MaxDirtyBytes bounds buffered unstable writes across all files; a
	// WRITE past it flushes its file first. Default 1 GiB.
	MaxDirtyBytes int64
	// MaxInFlight is the number of requests handled at once per
	// connection. Default 64.
	MaxInFlight int
	// MaxConns bounds the connections served at once, MaxConnsPerSource
	// those from one address (defaults 4096 and 256: far above what NFS
	// clients open, one or a few per host, far below what exhausts the
	// gateway's descriptors). Beyond them a connection is closed at once.
	MaxConns, MaxConnsPerSource int
	// IdleTimeout closes a connection that has sent nothing for this long
	// (default 6 minutes, as Linux's nfsd; negative: never). Clients
	// reconnect when they next need the server.
	IdleTimeout time.Duration
	// StatFS, when set, supplies FSSTAT figures.
	StatFS func(ctx context.Context) (FSStat, error)
	// Verifier is the write verifier; 0 picks a random one (it changes at
	// every start, so clients resend writes they did not commit).
	Verifier uint64
	// NLMGrace is how long after it starts the gateway refuses new NLM
	// locks and serves only reclaims (default 10s; negative: none).
	NLMGrace time.Duration
	// LockSession is the gateway's lock session at the islands (NLM
	// locks are held under it); 0 derives one from the listen address,
	// so a gateway restarted within the islands' lock term takes its
	// clients' locks back.
	LockSession uint64
	Logger      *slog.Logger
	// Registerer, when set, receives the gateway's metrics (metrics.go).
	Registerer prometheus.Registerer
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.FS == nil {
		return errors.New("nfs: config: FS is required")
	}
	if c.FlushIdle < 0 || c.FlushMaxAge < 0 || c.MaxOpenFiles < 0 || c.MaxDirtyBytes < 0 || c.MaxInFlight < 0 || c.MaxConns < 0 || c.MaxConnsPerSource < 0 {
		return errors.New("nfs: config: negative duration or limit")
	}
	return nil
}

// Server is an NFSv3 + MOUNT v3 gateway over a client.FS.
type Server struct {
	cfg   Config
	fs    *client.FS
	log   *slog.Logger
	exp   Export
	verf  [8]byte
	fsid  uint64
	files *fileCache
	mnt   *mountTable
	met   *gatewayMetrics
	nlm   nlmState // nlm.go

	ln, pmln net.Listener
	debug    bool // log every call
	// rootIno is a confined export's root directory (0: not confined).
	rootIno uint64

	ctx    context.Context // cancelled when Run stops
	cancel context.CancelFunc

	mu    lockcheck.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup // accept loops and connections
	// gate bounds connections per source and in all.
	gate auth.Gate
	// refused counts connections refused by gate (logged at most once a
	// second), acceptWarned when an accept failure was last logged.
	refused      auth.Refusals
	acceptWarned atomic.Int64 // Unix ns; the two accept loops share it
}

// New binds the listeners and returns a Server; Run serves.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:2049"
	}
	if cfg.FlushIdle == 0 {
		cfg.FlushIdle = 2 * time.Second
	}
	if cfg.FlushMaxAge == 0 {
		cfg.FlushMaxAge = 10 * time.Second
	}
	if cfg.MaxOpenFiles == 0 {
		cfg.MaxOpenFiles = 256
	}
	if cfg.MaxDirtyBytes == 0 {
		cfg.MaxDirtyBytes = 1 << 30
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 64
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 4096
	}
	if cfg.MaxConnsPerSource == 0 {
		cfg.MaxConnsPerSource = 256
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 6 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Export.AnonUID == 0 {
		cfg.Export.AnonUID = 65534
	}
	if cfg.Export.AnonGID == 0 {
		cfg.Export.AnonGID = 65534
	}
	s := &Server{cfg: cfg, fs: cfg.FS, log: cfg.Logger, exp: cfg.Export, conns: map[net.Conn]struct{}{}, fsid: 0xa7011,
		gate: auth.Gate{Max: cfg.MaxConns, PerSource: cfg.MaxConnsPerSource}}
	if cfg.Verifier != 0 {
		binary.BigEndian.PutUint64(s.verf[:], cfg.Verifier)
	} else {
		binary.BigEndian.PutUint64(s.verf[:], uint64(time.Now().UnixNano()))
		if _, err := rand.Read(s.verf[4:]); err != nil {
			return nil, err
		}
	}
	s.debug = cfg.Logger.Enabled(context.Background(), slog.LevelDebug)
	if s.exp.confined() {
		if len(s.exp.HandleKey) < 16 {
			return nil, errors.New("nfs: an export of a subdirectory needs a HandleKey of at least 16 bytes")
		}
		s.exp.Path = path.Clean("/" + s.exp.Path)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		a, err := cfg.FS.Resolve(ctx, metawire.Root, s.exp.Path)
		cancel()
		if err == nil && !a.IsDir() {
			err = metawire.ErrNotDir
		}
		if err != nil {
			return nil, fmt.Errorf("nfs: export %s: %w", s.exp.Path, err)
		}
		s.rootIno = a.Ino
	}
	s.files = newFileCache(s)
	s.mnt = newMountTable()
	var err error
	if s.met, err = newGatewayMetrics(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("nfs: metrics: %w", err)
	}
	if s.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("nfs: listen %s: %w", cfg.Listen, err)
	}
	if cfg.PortmapListen != "" {
		if s.pmln, err = net.Listen("tcp", cfg.PortmapListen); err != nil {
			s.ln.Close()
			return nil, fmt.Errorf("nfs: portmap listen %s: %w", cfg.PortmapListen, err)
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	grace := cfg.NLMGrace
	if grace == 0 {
		grace = nlmDefaultGrace
	}
	s.nlm.init(max(grace, 0))
	if s.cfg.LockSession == 0 {
		h := fnv.New64a()
		h.Write([]byte("atoll nfs gateway lock session\x00" + s.ln.Addr().String()))
		s.cfg.LockSession = h.Sum64() | 1
	}
	if err := s.fs.SetLockSession(s.cfg.LockSession); err != nil {
		s.ln.Close()
		if s.pmln != nil {
			s.pmln.Close()
		}
		return nil, fmt.Errorf("nfs: %w", err)
	}
	return s, nil
}

// Addr is the NFS and MOUNT address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// PortmapAddr is the portmapper's address ("" without one).
func (s *Server) PortmapAddr() string {
	if s.pmln == nil {
		return ""
	}
	return s.pmln.Addr().String()
}

func (s *Server) port() uint32 { return uint32(s.ln.Addr().(*net.TCPAddr).Port) }

// Run serves until ctx is done, then closes every connection, waits for
// the requests in progress, flushes every buffered write and returns.
func (s *Server) Run(ctx context.Context) error {
	flusherDone := make(chan struct{})
	go func() { defer close(flusherDone); s.files.flusher(s.ctx) }()
	for _, ln := range []net.Listener{s.ln, s.pmln} {
		if ln == nil {
			continue
		}
		s.wg.Add(1)
		portmapOnly := ln == s.pmln
		go func() { defer s.wg.Done(); s.accept(ln, portmapOnly) }()
	}
	s.log.Info("nfs: serving", "addr", s.Addr(), "portmap", s.PortmapAddr(), "read_only", s.exp.ReadOnly, "root_squash", s.exp.RootSquash)
	s.nlm.bg.Add(1)
	go func() {
		defer s.nlm.bg.Done()
		// The locks an earlier run of this gateway took for its clients
		// are renewed again (they end a term after that run stopped).
		n, err := s.fs.ResumeLockSession(s.ctx)
		if err != nil {
			s.log.Warn("nfs: taking back this gateway's lock session", "err", err)
		} else if n > 0 {
			s.log.Info("nfs: took back this gateway's lock session", "locks", n)
		}
	}()
	<-ctx.Done()
	s.shutdown()
	s.nlm.bg.Wait()
	<-flusherDone
	fctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.files.closeAll(fctx); err != nil {
		return fmt.Errorf("nfs: flushing buffered writes at shutdown: %w", err)
	}
	return nil
}

// Close releases the listeners of a Server whose Run was never called.
func (s *Server) Close() error {
	s.shutdown()
	return nil
}

func (s *Server) shutdown() {
	s.ln.Close()
	if s.pmln != nil {
		s.pmln.Close()
	}
	s.cancel()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// accept serves ln; a portmapOnly listener (the portmapper's own port,
// 111) answers only the portmapper program.
func (s *Server) accept(ln net.Listener, portmapOnly bool) {
	backoff := 5 * time.Millisecond
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			if now, last := time.Now().UnixNano(), s.acceptWarned.Load(); now-last >= int64(time.Second) && s.acceptWarned.CompareAndSwap(last, now) {
				s.log.Warn("nfs: accept failed; retrying", "err", err, "retry_in", backoff)
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		src := auth.Source(nc)
		if !s.gate.Enter(src) {
			s.refused.Add(s.log, "nfs: refused connection", nc.RemoteAddr().String(),
				fmt.Errorf("too many connections (%d from one address, %d in all at most)", s.gate.PerSource, s.gate.Max))
			nc.Close()
			continue
		}
		s.mu.Lock()
		if s.ctx.Err() != nil {
			s.mu.Unlock()
			s.gate.Leave(src)
			nc.Close()
			return
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serveConn(nc, portmapOnly)
			s.mu.Lock()
			delete(s.conns, nc)
			s.mu.Unlock()
			s.gate.Leave(src)
		}()
	}
}

// conn is one client connection.
type conn struct {
	nc      net.Conn
	remote  netip.Addr
	local   netip.Addr
	allowed bool
	// privileged: the client's source port is below 1024.
	privileged bool
	// portmapOnly: accepted on the portmapper's listener, which serves
	// nothing but the portmapper.
	portmapOnly bool
	wmu         lockcheck.Mutex
}

// recordTimeout bounds reading one call record once its first byte came.
const recordTimeout = 2 * time.Minute

// sendTimeout bounds writing one reply: a client that stops reading is
// disconnected rather than holding its requests' goroutines forever.
const sendTimeout = 2 * time.Minute

func (c *conn) send(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(sendTimeout))
	_, err := c.nc.Write(b)
	return err
}

func (s *Server) serveConn(nc net.Conn, portmapOnly bool) {
	defer nc.Close()
	c := &conn{nc: nc, portmapOnly: portmapOnly}
	if ap, err := netip.ParseAddrPort(nc.RemoteAddr().String()); err == nil {
		c.remote = ap.Addr().Unmap()
		c.privileged = ap.Port() < 1024
	}
	if ap, err := netip.ParseAddrPort(nc.LocalAddr().String()); err == nil {
		c.local = ap.Addr().Unmap()
	}
	c.allowed = s.exp.allowed(c.remote)
	br := bufio.NewReaderSize(nc, 64<<10)
	sem := make(chan struct{}, s.cfg.MaxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		// Idle between records up to IdleTimeout; once a record has
		// begun it must arrive within recordTimeout, so a client that
		// sends half a record and stalls lets go of its goroutine and
		// buffer.
		if br.Buffered() == 0 {
			var idle time.Time
			if s.cfg.IdleTimeout > 0 {
				idle = time.Now().Add(s.cfg.IdleTimeout)
			}
			_ = nc.SetReadDeadline(idle)
			if _, err := br.Peek(1); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() && len(sem) > 0 {
					continue // idle only once nothing is in flight
				}
				return
			}
		}
		_ = nc.SetReadDeadline(time.Now().Add(recordTimeout))
		rec, err := readRecord(br, MaxRecord)
		if err != nil {
			if s.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) && err.Error() != "EOF" {
				s.log.Debug("nfs: connection closed", "remote", c.remote, "err", err)
			}
			return
		}
		select {
		case sem <- struct{}{}:
		case <-s.ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out := s.handle(c, rec)
			if out != nil {
				if err := c.send(out); err != nil {
					nc.Close() // the reader notices and stops
				}
				putBuf(out)
			}
		}()
	}
}

// reply buffers: most replies are small; READ replies are up to 1 MiB.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

func getBuf() []byte { return (*bufPool.Get().(*[]byte))[:0] }

func putBuf(b []byte) {
	if cap(b) > 4<<20 {
		return
	}
	b = b[:0]
	bufPool.Put(&b)
}

// call is one request being handled.
type call struct {
	s    *Server
	ctx  context.Context
	conn *conn
	hdr  callHeader
	args *xdr.Reader
	res  *xdr.Writer // results, after the accepted-reply header
}

// errGarbage from a procedure means its arguments did not decode.
var errGarbage = errors.New("nfs: garbage arguments")

type procFunc func(c *call) error

// handle answers one record; nil means no reply.
func (s *Server) handle(cn *conn, rec []byte) (out []byte) {
	r := xdr.NewReader(rec)
	hdr, err := parseCall(r)
	w := &xdr.Writer{B: getBuf()}
	var he *headerError
	switch {
	case errors.As(err, &he):
		deniedReply(w, hdr.xid, he)
		finishRecord(w)
		return w.B
	case err != nil:
		putBuf(w.B)
		return nil
	}
	proc, stat, low, high := s.lookupProc(&hdr)
	if cn.portmapOnly && hdr.prog != progPortmap {
		stat = acceptProgUnavail
	}
	if stat == acceptSuccess && hdr.proc != 0 && hdr.prog != progPortmap &&
		(!cn.allowed && (hdr.prog != progMount || hdr.proc != mountProcMnt) || s.exp.SecurePort && !cn.privileged) {
		// Not in the export's allow list: NFS answers only NULL, MOUNT
		// only NULL and MNT (which says MNT3ERR_ACCES); DUMP, EXPORT
		// and UMNT would tell a stranger who mounts what. NLM and NSM
		// (locks) are refused like NFS. From an unprivileged port of a
		// secure export: only NULL.
		deniedReply(w, hdr.xid, &headerError{stat: rejectAuthError, auth: authTooWeak})
		finishRecord(w)
		return w.B
	}
	acceptedReply(w, hdr.xid, stat)
	switch stat {
	case acceptProgMismatch:
		w.Uint32(low)
		w.Uint32(high)
		finishRecord(w)
		return w.B
	case acceptSuccess:
	default:
		finishRecord(w)
		return w.B
	}
	resStart := w.Len()
	c := &call{s: s, ctx: s.ctx, conn: cn, hdr: hdr, args: r, res: w}
	start := time.Now()
	err = s.runProc(proc, c)
	s.met.observe(&hdr, w.B[resStart:], err, start)
	if err != nil {
		// Replace the results with GARBAGE_ARGS or SYSTEM_ERR.
		w.Truncate(resStart - 4)
		if errors.Is(err, errGarbage) {
			w.Uint32(acceptGarbageArgs)
		} else {
			s.log.Warn("nfs: procedure failed", "prog", hdr.prog, "proc", hdr.proc, "err", err)
			w.Uint32(acceptSystemErr)
		}
	}
	if s.debug {
		s.log.Debug("nfs: call", "remote", cn.remote, "xid", hdr.xid, "prog", hdr.prog, "vers", hdr.vers, "proc", hdr.proc, "uid", hdr.uid, "err", err, "reply_bytes", w.Len())
	}
	finishRecord(w)
	return w.B
}

// runProc runs a procedure, turning a panic into SYSTEM_ERR.
func (s *Server) runProc(p procFunc, c *call) (err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("nfs: panic in procedure", "prog", c.hdr.prog, "proc", c.hdr.proc, "panic", v, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return p(c)
}

// lookupProc finds the procedure for a call, or the accept status that
// says why there is none (with the supported version range for
// PROG_MISMATCH).
func (s *Server) lookupProc(h *callHeader) (procFunc, uint32, uint32, uint32) {
	var table []procFunc
	var low, high uint32
	switch h.prog {
	case progNFS:
		low, high = 3, 3
		table = nfsProcs[:]
	case progMount:
		low, high = 3, 3
		table = mountProcs[:]
	case progPortmap:
		low, high = 2, 4
		table = pmapProcs(h.vers)
	case progNLM:
		low, high = 4, 4
		table = nlmProcs[:]
	case progNSM:
		low, high = 1, 1
		table = nsmProcs[:]
	default:
		return nil, acceptProgUnavail, 0, 0
	}
	if h.vers < low || h.vers > high {
		return nil, acceptProgMismatch, low, high
	}
	if int(h.proc) >= len(table) || table[h.proc] == nil {
		return nil, acceptProcUnavail, 0, 0
	}
	return table[h.proc], acceptSuccess, 0, 0
}

// Port is the NFS and MOUNT port.
func (s *Server) Port() int { return int(s.port()) }
