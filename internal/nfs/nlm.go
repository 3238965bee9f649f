package nfs

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/atoll-fs/atoll/internal/filelock"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/nfs/xdr"
)

// NLM v4 (the Network Lock Manager of NFSv3 clients, XNFS / RFC 1813
// appendix) and the NSM status monitor's NOTIFY, over the islands' file
// locks (client.FS.SetLock): a lock an NFS client takes through any
// gateway conflicts with the FUSE mounts' and other gateways' locks.
//
// An NLM owner (caller_name, svid, oh) is one island lock owner of the
// gateway's lock session (the hash of the three). The session is the
// gateway's own (Config.LockSession: by default derived from its listen
// address), so a gateway restarted within the islands' lock term finds
// its clients' locks still held; for Config.NLMGrace after it starts it
// refuses new locks (NLM4_DENIED_GRACE_PERIOD) and serves reclaims.
//
// A blocking LOCK waits at the island for up to nlmBlockHold and is
// answered GRANTED; past that it is answered BLOCKED and the wait goes
// on in the gateway: when the lock is granted the gateway calls the
// client's NLM GRANTED (found through the client host's portmapper); a
// client that cannot be reached gets its lock released again. CANCEL
// ends such a wait. FREE_ALL and NSM NOTIFY (a client host rebooted)
// release every lock the gateway holds for that host, at every island
// (the host is in the top bits of its owners' ids), so also the locks a
// run of the gateway before a restart took for it. The asynchronous
// _MSG procedures and SHARE/UNSHARE are not served (PROC_UNAVAIL).
const (
	progNLM = 100021
	progNSM = 100024

	nlmProcTest    = 1
	nlmProcLock    = 2
	nlmProcCancel  = 3
	nlmProcUnlock  = 4
	nlmProcGranted = 5
	nlmProcNMLock  = 22
	nlmProcFreeAll = 23

	nsmProcNotify = 6

	nlm4Granted          = 0
	nlm4Denied           = 1
	nlm4DeniedNoLocks    = 2
	nlm4Blocked          = 3
	nlm4DeniedGrace      = 4
	nlm4Deadlock         = 5
	nlm4ROFS             = 6
	nlm4StaleFH          = 7
	nlm4FBig             = 8
	nlm4Failed           = 9
	nlmMaxStr            = 1024
	nlmMaxObj            = 1024
	nlmBlockHold         = 5 * time.Second
	nlmDefaultGrace      = 10 * time.Second
	nlmGrantedCallWithin = 10 * time.Second
)

var nlmProcs = [...]procFunc{
	0:              procNull,
	nlmProcTest:    nlmTest,
	nlmProcLock:    nlmLock,
	nlmProcCancel:  nlmCancel,
	nlmProcUnlock:  nlmUnlock,
	nlmProcNMLock:  nlmLock,
	nlmProcFreeAll: freeHostProc,
}

var nsmProcs = [...]procFunc{
	0:             procNull,
	nsmProcNotify: freeHostProc,
}

// nlmState is the gateway's NLM bookkeeping.
type nlmState struct {
	graceUntil time.Time
	mu         struct {
		lockcheck.Mutex
		// waits: blocked LOCKs waiting in the gateway, by owner and range.
		waits map[nlmWaitKey]context.CancelFunc
	}
	bg sync.WaitGroup // background waits, joined by Run
}

type nlmWaitKey struct {
	ino, owner uint64
	start, end uint64
	exclusive  bool
}

func (st *nlmState) init(grace time.Duration) {
	st.graceUntil = time.Now().Add(grace)
	st.mu.waits = map[nlmWaitKey]context.CancelFunc{}
}

// nlmLockArg is nlm4_lock.
type nlmLockArg struct {
	caller string
	fh     fh
	fhRaw  []byte
	oh     []byte
	svid   int32
	off    uint64
	len    uint64
}

func (c *call) getNLMLock() nlmLockArg {
	var l nlmLockArg
	l.caller = c.args.String(nlmMaxStr)
	l.fhRaw = c.args.Opaque(fhSize3)
	if err := c.args.Err(); err != nil {
		l.fh = fh{err: err}
	} else {
		l.fh = c.s.decodeFH(l.fhRaw)
	}
	l.oh = c.args.Opaque(nlmMaxObj)
	l.svid = c.args.Int32()
	l.off, l.len = c.args.Uint64(), c.args.Uint64()
	return l
}

// owner is the island lock owner of an NLM owner: its host's hash in
// the top 32 bits (hostBits: FREE_ALL and NOTIFY release by host at the
// islands, even locks an earlier run of the gateway took), the svid's
// and owner handle's below.
func (l *nlmLockArg) owner() uint64 {
	h := fnv.New32a()
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(l.svid))
	h.Write(b[:])
	h.Write(l.oh)
	return hostBits(l.caller) | uint64(h.Sum32())
}

const hostMask = 0xFFFFFFFF_00000000

// hostBits is a client host's part of its owners' ids.
func hostBits(caller string) uint64 {
	h := fnv.New32a()
	h.Write([]byte(caller))
	return uint64(h.Sum32()) << 32
}

// lock is the island form of l (type by exclusive).
func (l *nlmLockArg) lock(exclusive bool) (filelock.Lock, bool) {
	end := filelock.MaxEnd
	if l.len != 0 {
		if l.off+l.len < l.off {
			return filelock.Lock{}, false // the range wraps
		}
		end = l.off + l.len - 1
	}
	typ := filelock.Read
	if exclusive {
		typ = filelock.Write
	}
	return filelock.Lock{Owner: filelock.Owner{ID: l.owner()}, Kind: filelock.POSIX, Type: typ, Start: l.off, End: end, Pid: uint32(l.svid)}, true
}

// nlmStat maps an island answer to an nlm4_stats.
func nlmStat(err error) uint32 {
	switch {
	case err == nil:
		return nlm4Granted
	case errors.Is(err, metawire.ErrWouldBlock):
		return nlm4Denied
	case errors.Is(err, metawire.ErrDeadlock):
		return nlm4Deadlock
	case errors.Is(err, metawire.ErrStale), errors.Is(err, metawire.ErrNotFound):
		return nlm4StaleFH
	case errors.Is(err, metawire.ErrReadOnly):
		return nlm4ROFS
	case errors.Is(err, metawire.ErrSessionEnded):
		return nlm4DeniedNoLocks
	}
	return nlm4Failed
}

func (s *Server) inGrace() bool { return time.Now().Before(s.nlm.graceUntil) }

// refused answers the refusals TEST, LOCK and UNLOCK share (ok: the
// range did not wrap; grace: the grace period refuses this call) and
// reports whether it answered.
func (c *call) refused(ok bool, l *nlmLockArg, grace bool) bool {
	switch {
	case !ok:
		c.res.Uint32(nlm4FBig)
	case l.fh.err != nil:
		c.res.Uint32(nlm4StaleFH)
	case grace:
		c.res.Uint32(nlm4DeniedGrace)
	default:
		return false
	}
	return true
}

// nlmTest serves TEST: the conflicting holder, if any.
func nlmTest(c *call) error {
	cookie := c.args.Opaque(nlmMaxObj)
	exclusive := c.args.Bool()
	l := c.getNLMLock()
	if err := done(c.args); err != nil {
		return err
	}
	c.res.Opaque(cookie)
	lk, ok := l.lock(exclusive)
	if c.refused(ok, &l, c.s.inGrace()) {
		return nil
	}
	holder, found, err := c.s.fs.GetLock(c.ctx, c.cred(), l.fh.ino(), lk)
	if err != nil {
		c.res.Uint32(nlmStat(err))
		return nil
	}
	if !found {
		c.res.Uint32(nlm4Granted)
		return nil
	}
	c.res.Uint32(nlm4Denied)
	c.res.Bool(holder.Type == filelock.Write)
	c.res.Int32(int32(holder.Pid))
	var oh [8]byte
	binary.BigEndian.PutUint64(oh[:], holder.Owner.ID)
	c.res.Opaque(oh[:])
	c.res.Uint64(holder.Start)
	n := uint64(0) // to the end
	if holder.End != filelock.MaxEnd {
		n = holder.End - holder.Start + 1
	}
	c.res.Uint64(n)
	return nil
}

// nlmLock serves LOCK (and NM_LOCK, whose arguments are the same).
func nlmLock(c *call) error {
	cookie := c.args.Opaque(nlmMaxObj)
	block := c.args.Bool()
	exclusive := c.args.Bool()
	l := c.getNLMLock()
	reclaim := c.args.Bool()
	_ = c.args.Int32() // the client's NSM state
	if err := done(c.args); err != nil {
		return err
	}
	c.res.Opaque(cookie)
	lk, ok := l.lock(exclusive)
	if c.refused(ok, &l, c.s.inGrace() && !reclaim) {
		return nil
	}
	ino := l.fh.ino()
	if !block || c.hdr.proc == nlmProcNMLock {
		at, err := c.s.fs.SetLock(c.ctx, c.cred(), ino, lk, false, nil)
		c.s.lockGranted(err, &at)
		c.res.Uint32(nlmStat(err))
		return nil
	}
	// Blocking: wait here a while, then in the background.
	key := nlmWaitKey{ino: ino, owner: lk.Owner.ID, start: lk.Start, end: lk.End, exclusive: exclusive}
	wctx, cancel := context.WithCancel(c.s.ctx)
	c.s.nlm.mu.Lock()
	if old := c.s.nlm.mu.waits[key]; old != nil {
		old() // a retransmitted LOCK replaces the wait it repeats
	}
	c.s.nlm.mu.waits[key] = cancel
	c.s.nlm.mu.Unlock()
	result := make(chan error, 1)
	cred := c.cred()
	c.s.nlm.bg.Add(1)
	go func() {
		defer c.s.nlm.bg.Done()
		stop := make(chan struct{})
		context.AfterFunc(wctx, func() { close(stop) })
		at, err := c.s.fs.SetLock(context.WithoutCancel(wctx), cred, ino, lk, true, stop)
		c.s.lockGranted(err, &at)
		result <- err
	}()
	hold := time.NewTimer(nlmBlockHold)
	defer hold.Stop()
	select {
	case err := <-result:
		c.s.endWait(key, cancel)
		c.res.Uint32(nlmStat(err))
		return nil
	case <-hold.C:
	}
	// Answered BLOCKED; the grant is sent to the client later.
	c.res.Uint32(nlm4Blocked)
	host := c.conn.remote.String()
	c.s.nlm.bg.Add(1)
	go func() {
		defer c.s.nlm.bg.Done()
		err := <-result
		c.s.endWait(key, cancel)
		if err != nil {
			return // cancelled, or refused: the client asks again
		}
		cctx, ccancel := context.WithTimeout(c.s.ctx, nlmGrantedCallWithin)
		defer ccancel()
		if gerr := callGranted(cctx, host, cookie, exclusive, &l); gerr != nil {
			c.s.log.Warn("nfs: NLM client cannot be told its blocked lock was granted; releasing it", "host", host, "caller", l.caller, "err", gerr)
			uctx, ucancel := context.WithTimeout(c.s.ctx, 30*time.Second)
			defer ucancel()
			_ = c.s.fs.Unlock(uctx, cred, ino, lk)
		}
	}()
	return nil
}

// lockGranted lets the open File of a file just locked follow the island
// (another client may have written it under the lock it held before).
func (s *Server) lockGranted(err error, at *metawire.Attr) {
	if err == nil && at.Ino != 0 {
		s.files.noteAttr(at)
	}
}

func (s *Server) endWait(key nlmWaitKey, cancel context.CancelFunc) {
	s.nlm.mu.Lock()
	defer s.nlm.mu.Unlock()
	if s.nlm.mu.waits[key] != nil {
		delete(s.nlm.mu.waits, key)
	}
	cancel()
}

// nlmCancel serves CANCEL: a blocked LOCK's wait ends.
func nlmCancel(c *call) error {
	cookie := c.args.Opaque(nlmMaxObj)
	_ = c.args.Bool() // block
	exclusive := c.args.Bool()
	l := c.getNLMLock()
	if err := done(c.args); err != nil {
		return err
	}
	c.res.Opaque(cookie)
	lk, ok := l.lock(exclusive)
	if !ok || l.fh.err != nil {
		c.res.Uint32(nlm4Denied)
		return nil
	}
	key := nlmWaitKey{ino: l.fh.ino(), owner: lk.Owner.ID, start: lk.Start, end: lk.End, exclusive: exclusive}
	c.s.nlm.mu.Lock()
	cancel := c.s.nlm.mu.waits[key]
	delete(c.s.nlm.mu.waits, key)
	c.s.nlm.mu.Unlock()
	if cancel == nil {
		c.res.Uint32(nlm4Denied) // nothing waited
		return nil
	}
	cancel()
	c.res.Uint32(nlm4Granted)
	return nil
}

// nlmUnlock serves UNLOCK, after writing back what the gateway buffered
// of the file (the client's writes under the lock).
func nlmUnlock(c *call) error {
	cookie := c.args.Opaque(nlmMaxObj)
	l := c.getNLMLock()
	if err := done(c.args); err != nil {
		return err
	}
	c.res.Opaque(cookie)
	lk, ok := l.lock(true)
	if c.refused(ok, &l, c.s.inGrace()) {
		return nil
	}
	ino := l.fh.ino()
	if o := c.s.files.peek(ino); o != nil {
		err := c.s.files.flush(c.ctx, o)
		o.mu.RUnlock() // peek returned it held
		if err != nil {
			c.res.Uint32(nlm4Failed)
			return nil
		}
	}
	c.res.Uint32(nlmStat(c.s.fs.Unlock(c.ctx, c.cred(), ino, lk)))
	return nil
}

// freeHostProc serves NLM FREE_ALL (nlm4_notify) and the status
// monitor's NOTIFY (stat_chge), which decode alike: a client host's name
// and its new state. The host restarted: its locks are released. No
// reply body.
func freeHostProc(c *call) error {
	name := c.args.String(nlmMaxStr)
	_ = c.args.Int32()
	if err := done(c.args); err != nil {
		return err
	}
	c.s.freeHost(c.ctx, name)
	return nil
}

// freeHost releases every lock and wait of the owners of host, at every
// island (its owners carry the host in their ids' top bits).
func (s *Server) freeHost(ctx context.Context, host string) {
	bits := hostBits(host)
	s.nlm.mu.Lock()
	for k, cancel := range s.nlm.mu.waits {
		if k.owner&hostMask == bits {
			cancel()
			delete(s.nlm.mu.waits, k)
		}
	}
	s.nlm.mu.Unlock()
	n, err := s.fs.ReleaseOwners(ctx, hostMask, bits)
	if err != nil {
		s.log.Warn("nfs: releasing the NLM locks of a restarted client host", "host", host, "released", n, "err", err)
		return
	}
	s.log.Info("nfs: released the NLM locks of a restarted client host", "host", host, "locks", n)
}

// callGranted calls NLM4 GRANTED on host's lock manager (found through
// its portmapper), telling it the blocked lock l is its now.
func callGranted(ctx context.Context, host string, cookie []byte, exclusive bool, l *nlmLockArg) error {
	port, err := getPort(ctx, host, progNLM, 4)
	if err != nil {
		return err
	}
	var args xdr.Writer
	args.Opaque(cookie)
	args.Bool(exclusive)
	args.String(l.caller)
	args.Opaque(l.fhRaw)
	args.Opaque(l.oh)
	args.Int32(l.svid)
	args.Uint64(l.off)
	args.Uint64(l.len)
	res, err := dialRPC(ctx, net.JoinHostPort(host, strconv.Itoa(int(port))), progNLM, 4, nlmProcGranted, args.B)
	if err != nil {
		return err
	}
	r := xdr.NewReader(res)
	r.Opaque(nlmMaxObj)
	if st := r.Uint32(); r.Err() != nil || st != nlm4Granted {
		return fmt.Errorf("nfs: GRANTED answered %d (%v)", st, r.Err())
	}
	return nil
}

// getPort asks host's portmapper (port 111) where prog/vers listens
// over TCP.
func getPort(ctx context.Context, host string, prog, vers uint32) (uint32, error) {
	var args xdr.Writer
	args.Uint32(prog)
	args.Uint32(vers)
	args.Uint32(ipprotoTCP)
	args.Uint32(0)
	res, err := dialRPC(ctx, net.JoinHostPort(host, "111"), progPortmap, 2, pmapProcGetPort, args.B)
	if err != nil {
		return 0, err
	}
	r := xdr.NewReader(res)
	port := r.Uint32()
	if r.Err() != nil || port == 0 || port > 65535 {
		return 0, fmt.Errorf("nfs: %s's portmapper has no TCP port for program %d v%d", host, prog, vers)
	}
	return port, nil
}

// dialRPC makes one ONC RPC call (AUTH_NONE) over a new TCP connection
// and returns the results of an accepted, successful reply.
func dialRPC(ctx context.Context, addr string, prog, vers, proc uint32, args []byte) ([]byte, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	var w xdr.Writer
	w.Uint32(0) // record mark, set below
	xid := uint32(time.Now().UnixNano())
	w.Uint32(xid)
	w.Uint32(0) // call
	w.Uint32(2) // RPC version
	w.Uint32(prog)
	w.Uint32(vers)
	w.Uint32(proc)
	w.Uint32(0) // AUTH_NONE credential
	w.Uint32(0)
	w.Uint32(0) // AUTH_NONE verifier
	w.Uint32(0)
	w.B = append(w.B, args...)
	w.PutUint32(0, 0x80000000|uint32(len(w.B)-4))
	if _, err := conn.Write(w.B); err != nil {
		return nil, err
	}
	rec, err := readRecord(bufio.NewReader(conn), 1<<20)
	if err != nil {
		return nil, err
	}
	r := xdr.NewReader(rec)
	if r.Uint32() != xid || r.Uint32() != 1 || r.Uint32() != 0 {
		return nil, fmt.Errorf("nfs: %s: not an accepted reply to call %d", addr, xid)
	}
	r.Uint32() // verifier flavor
	r.Opaque(400)
	if st := r.Uint32(); r.Err() != nil || st != acceptSuccess {
		return nil, fmt.Errorf("nfs: %s: call not accepted (%d, %v)", addr, st, r.Err())
	}
	return r.Rest(), nil
}
