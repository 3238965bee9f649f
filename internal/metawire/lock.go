package metawire

import (
	"github.com/atoll-fs/atoll/internal/filelock"
	"github.com/atoll-fs/atoll/internal/wire"
)

// File locks (DESIGN.md "Sessions, locks and open files"): POSIX byte
// ranges, OFD locks and flock, held by (lock session, owner) on the
// inode's island, in its replicated state (internal/filelock). None of
// these operations is deduplicated: setting a lock an owner already
// holds, unlocking what it does not hold and cancelling a waiter that
// is gone change nothing, so a retry after a lost answer is harmless.
const (
	OpLock        uint16 = 29 // LockReq -> LockResp (get, set, wait, unlock, cancel, list)
	OpLockSession uint16 = 30 // LockSessionReq -> LockSessionResp (renew)
	OpLockEnd     uint16 = 31 // LockSessionReq -> LockSessionResp (an operator ends a session: its locks go)
)

// Lock commands (LockReq.Cmd).
const (
	LockGet         uint8 = 1 // F_GETLK: the first conflicting lock, if any
	LockSet         uint8 = 2 // F_SETLK: grant now or ErrWouldBlock
	LockWait        uint8 = 3 // F_SETLKW: grant, or wait up to WaitMs and answer Waiting
	LockUnlock      uint8 = 4 // F_UNLCK of the range (of Kind)
	LockUnlockOwner uint8 = 5 // every lock of the owner, both kinds (close, release)
	LockCancel      uint8 = 6 // stop the wait of request Waiter (an interrupted F_SETLKW)
	LockList        uint8 = 7 // every lock and waiter of the inode (atoll locks)
	// LockReplace replaces every lock of the session on the inode by
	// LockReq.Locks (a client that granted locks itself under an
	// exclusive lease hands them over before the lease ends).
	LockReplace uint8 = 8
	// LockHold and LockUnhold add and remove the session's hold on the
	// inode: the client has it open. An inode whose last link goes
	// while a live session holds it stays, with no name, until the last
	// hold goes (an unhold, or the end of the holding session); then it
	// is reclaimed. Holding twice or unholding what is not held changes
	// nothing, so they need no deduplication either.
	LockHold   uint8 = 9
	LockUnhold uint8 = 10
)

// MaxReplaceLocks bounds LockReq.Locks.
const MaxReplaceLocks = 4096

// MaxLockWait bounds how long an island holds a LockWait request before
// answering Waiting (the client asks again): a held request occupies one
// of the connection's handlers.
const MaxLockWaitMs = 10_000

// LockReq asks the island of Ino about its locks. Lock names the owner
// (Lock.Owner.Session is the client's lock session) and, for get, set,
// wait and unlock, the kind, type and range. Waiter names a LockWait
// request (random, nonzero) so that LockCancel can end its wait.
type LockReq struct {
	Cred   Cred
	Ino    uint64
	Cmd    uint8
	Lock   filelock.Lock
	WaitMs uint32
	Waiter uint64
	// Locks is LockReplace's set (appended only when not empty).
	Locks []filelock.Lock
}

func encodeLock(e *wire.Enc, l *filelock.Lock) {
	e.U64(l.Owner.Session)
	e.U64(l.Owner.ID)
	e.U8(uint8(l.Kind))
	e.U8(uint8(l.Type))
	e.U64(l.Start)
	e.U64(l.End)
	e.U32(l.Pid)
}

func decodeLock(d *wire.Dec) filelock.Lock {
	var l filelock.Lock
	l.Owner.Session, l.Owner.ID = d.U64(), d.U64()
	l.Kind, l.Type = filelock.Kind(d.U8()), filelock.Type(d.U8())
	l.Start, l.End, l.Pid = d.U64(), d.U64(), d.U32()
	return l
}

// encodeLocks writes a counted list of locks.
func encodeLocks(e *wire.Enc, ls []filelock.Lock) {
	e.Uvarint(uint64(len(ls)))
	for k := range ls {
		encodeLock(e, &ls[k])
	}
}

// decodeLocks reads a counted list of locks.
func decodeLocks(d *wire.Dec) []filelock.Lock {
	n := d.Count(lockSize)
	ls := make([]filelock.Lock, 0, n)
	for range n {
		ls = append(ls, decodeLock(d))
	}
	return ls
}

// lockSize is an encoded lock's size.
const lockSize = 8 + 8 + 1 + 1 + 8 + 8 + 4

func (r *LockReq) Encode(e *wire.Enc) {
	r.Cred.Encode(e)
	e.U64(r.Ino)
	e.U8(r.Cmd)
	encodeLock(e, &r.Lock)
	e.U32(r.WaitMs)
	e.U64(r.Waiter)
	if len(r.Locks) > 0 {
		encodeLocks(e, r.Locks)
	}
}

func (r *LockReq) Decode(d *wire.Dec) {
	r.Cred.Decode(d)
	r.Ino, r.Cmd = d.U64(), d.U8()
	r.Lock = decodeLock(d)
	r.WaitMs, r.Waiter = d.U32(), d.U64()
	if d.More() {
		r.Locks = decodeLocks(d)
	}
}

// LockResp answers OpLock. Granted: set and wait got the lock. Waiting:
// a wait ran out of WaitMs (ask again). Found and Conflict: get's
// answer (the conflicting lock; Found false: F_UNLCK). Attr: the
// inode's attributes after a grant, so the client revalidates its
// cached data without another request. Locks and Waiters: list's
// answer (Waiters are the requests queued, as locks); Holders the
// sessions holding the inode open (list; appended only when any).
type LockResp struct {
	Granted  bool
	Waiting  bool
	Found    bool
	Conflict filelock.Lock
	Attr     Attr
	Locks    []filelock.Lock
	Waiters  []filelock.Lock
	Holders  []uint64
}

func (r *LockResp) Encode(e *wire.Enc) {
	e.Bool(r.Granted)
	e.Bool(r.Waiting)
	e.Bool(r.Found)
	encodeLock(e, &r.Conflict)
	r.Attr.Encode(e)
	encodeLocks(e, r.Locks)
	encodeLocks(e, r.Waiters)
	if len(r.Holders) > 0 {
		e.Uvarint(uint64(len(r.Holders)))
		for _, h := range r.Holders {
			e.U64(h)
		}
	}
}

func (r *LockResp) Decode(d *wire.Dec) {
	r.Granted, r.Waiting, r.Found = d.Bool(), d.Bool(), d.Bool()
	r.Conflict = decodeLock(d)
	r.Attr.Decode(d)
	r.Locks = decodeLocks(d)
	r.Waiters = decodeLocks(d)
	if d.More() {
		n := d.Count(8)
		r.Holders = make([]uint64, 0, n)
		for range n {
			r.Holders = append(r.Holders, d.U64())
		}
	}
}

// LockSessionReq names a lock session: OpLockSession renews it at one
// island (a client holding locks there sends one about four times a
// term), OpLockEnd ends it now and releases its locks (an operator
// breaking a dead client's session: admin capability).
//
// A renewal with a nonzero ReleaseMask also releases, on every inode of
// the island, the session's locks whose owner id ANDed with ReleaseMask
// is ReleaseBits (a gateway freeing the locks of one of its client
// hosts, whose id is in the owners' top bits). Both are appended only
// when set.
type LockSessionReq struct {
	Session                  uint64
	ReleaseMask, ReleaseBits uint64
}

func (r *LockSessionReq) Encode(e *wire.Enc) {
	e.U64(r.Session)
	if r.ReleaseMask != 0 {
		e.U64(r.ReleaseMask)
		e.U64(r.ReleaseBits)
	}
}

func (r *LockSessionReq) Decode(d *wire.Dec) {
	r.Session = d.U64()
	if d.More() {
		r.ReleaseMask, r.ReleaseBits = d.U64(), d.U64()
	}
}

// LockSessionResp: Ended says the island ended the session (its term
// ran out unrenewed, or an operator ended it): its locks are gone.
// TermMs is the island's session term; Locks how many locks the
// session holds there; Released how many an End released.
type LockSessionResp struct {
	Ended    bool
	TermMs   uint32
	Locks    uint32
	Released uint32
}

func (r *LockSessionResp) Encode(e *wire.Enc) {
	e.Bool(r.Ended)
	e.U32(r.TermMs)
	e.U32(r.Locks)
	e.U32(r.Released)
}

func (r *LockSessionResp) Decode(d *wire.Dec) {
	r.Ended, r.TermMs, r.Locks, r.Released = d.Bool(), d.U32(), d.U32(), d.U32()
}
