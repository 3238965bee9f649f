package metawire

import "github.com/atoll-fs/atoll/internal/auth"

// OpInfo is what the protocol says about one operation, in one place:
// the islands' capability check, their deduplication and epoch rules,
// their metric labels and the codec tests all read it from Ops.
type OpInfo struct {
	Op   uint16
	Name string // metric label and logs
	// Req and Resp return a fresh request and response.
	Req, Resp func() Message
	// Needs is the capability the connection's key must hold: reading
	// names, attributes and block maps takes read; changing them (acting
	// for a user, whose uid/gid the request asserts) write; the cleaner's
	// and fsck's operations admin; the cross-island transaction protocol
	// member (only peer islands hold the cluster key).
	Needs auth.Caps
	// Dedup: applied at most once per request id (wire.ReqID). The
	// operations that change names, attributes or data, which a client
	// retries after a lost answer.
	Dedup bool
	// AnyEpoch: served whatever map epoch the request carries.
	// Transaction decisions and recovery must flow whatever the maps
	// say; statfs and fsck are not tied to buckets.
	AnyEpoch bool
}

func newOf[T any, P interface {
	*T
	Message
}]() func() Message {
	return func() Message { return P(new(T)) }
}

// Ops lists every operation, by op code.
var Ops = []OpInfo{
	{Op: OpLookup, Name: "lookup", Req: newOf[NameReq](), Resp: newOf[AttrResp](), Needs: auth.CapRead},
	{Op: OpGetAttr, Name: "getattr", Req: newOf[InoReq](), Resp: newOf[AttrResp](), Needs: auth.CapRead},
	{Op: OpSetAttr, Name: "setattr", Req: newOf[SetAttrReq](), Resp: newOf[AttrResp](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpCreate, Name: "create", Req: newOf[CreateReq](), Resp: newOf[CreateResp](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpMkdir, Name: "mkdir", Req: newOf[CreateReq](), Resp: newOf[CreateResp](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpSymlink, Name: "symlink", Req: newOf[CreateReq](), Resp: newOf[CreateResp](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpReadlink, Name: "readlink", Req: newOf[InoReq](), Resp: newOf[ReadlinkResp](), Needs: auth.CapRead},
	{Op: OpUnlink, Name: "unlink", Req: newOf[NameReq](), Resp: newOf[Empty](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpRmdir, Name: "rmdir", Req: newOf[NameReq](), Resp: newOf[Empty](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpRename, Name: "rename", Req: newOf[RenameReq](), Resp: newOf[Empty](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpLink, Name: "link", Req: newOf[LinkReq](), Resp: newOf[AttrResp](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpReaddir, Name: "readdir", Req: newOf[ReaddirReq](), Resp: newOf[ReaddirResp](), Needs: auth.CapRead},
	{Op: OpGetXattr, Name: "getxattr", Req: newOf[XattrReq](), Resp: newOf[XattrResp](), Needs: auth.CapRead},
	{Op: OpSetXattr, Name: "setxattr", Req: newOf[XattrReq](), Resp: newOf[Empty](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpListXattr, Name: "listxattr", Req: newOf[InoReq](), Resp: newOf[XattrResp](), Needs: auth.CapRead},
	{Op: OpRemoveXattr, Name: "removexattr", Req: newOf[XattrReq](), Resp: newOf[Empty](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpReadMap, Name: "readmap", Req: newOf[ReadMapReq](), Resp: newOf[ReadMapResp](), Needs: auth.CapRead},
	{Op: OpCommit, Name: "commit", Req: newOf[CommitReq](), Resp: newOf[CommitResp](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpClean, Name: "clean", Req: newOf[CleanReq](), Resp: newOf[CleanResp](), Needs: auth.CapAdmin},
	{Op: OpStatFS, Name: "statfs", Req: newOf[Empty](), Resp: newOf[StatFSResp](), Needs: auth.CapRead, AnyEpoch: true},
	{Op: OpAccess, Name: "access", Req: newOf[AccessReq](), Resp: newOf[Empty](), Needs: auth.CapRead},
	{Op: OpLiveBytes, Name: "livebytes", Req: newOf[LiveReq](), Resp: newOf[LiveResp](), Needs: auth.CapAdmin},
	{Op: OpStripeRefs, Name: "striperefs", Req: newOf[RefsReq](), Resp: newOf[RefsResp](), Needs: auth.CapRead},
	{Op: OpSync, Name: "sync", Req: newOf[Empty](), Resp: newOf[SyncResp](), Needs: auth.CapWrite},
	{Op: OpForget, Name: "forget", Req: newOf[ForgetReq](), Resp: newOf[ForgetResp](), Needs: auth.CapAdmin},
	{Op: OpLease, Name: "lease", Req: newOf[LeaseReq](), Resp: newOf[LeaseResp](), Needs: auth.CapRead},
	{Op: OpLeasePoll, Name: "leasepoll", Req: newOf[PollReq](), Resp: newOf[PollResp](), Needs: auth.CapRead},
	{Op: OpUnlinkMany, Name: "unlinkmany", Req: newOf[UnlinkManyReq](), Resp: newOf[Empty](), Needs: auth.CapWrite, Dedup: true},
	// Locks are advisory and change no file: a read-only key may lock
	// what it reads (Linux lets a read-only descriptor flock).
	{Op: OpLock, Name: "lock", Req: newOf[LockReq](), Resp: newOf[LockResp](), Needs: auth.CapRead},
	{Op: OpLockSession, Name: "locksession", Req: newOf[LockSessionReq](), Resp: newOf[LockSessionResp](), Needs: auth.CapRead},
	{Op: OpLockEnd, Name: "lockend", Req: newOf[LockSessionReq](), Resp: newOf[LockSessionResp](), Needs: auth.CapAdmin},

	{Op: OpPrepare, Name: "prepare", Req: newOf[PrepareReq](), Resp: newOf[Empty](), Needs: auth.CapMember},
	{Op: OpDecide, Name: "decide", Req: newOf[DecideReq](), Resp: newOf[Empty](), Needs: auth.CapMember, AnyEpoch: true},
	{Op: OpOutcome, Name: "outcome", Req: newOf[TxReq](), Resp: newOf[OutcomeResp](), Needs: auth.CapMember, AnyEpoch: true},
	{Op: OpFsck, Name: "fsck", Req: newOf[FsckReq](), Resp: newOf[FsckResp](), Needs: auth.CapAdmin, AnyEpoch: true},
	{Op: OpAllocIno, Name: "allocino", Req: newOf[AllocInoReq](), Resp: newOf[AllocInoResp](), Needs: auth.CapMember},
	{Op: OpImportEntry, Name: "importentry", Req: newOf[ImportReq](), Resp: newOf[Empty](), Needs: auth.CapMember, AnyEpoch: true},
	{Op: OpEntryLoad, Name: "entryload", Req: newOf[EntryLoadReq](), Resp: newOf[EntryLoadResp](), Needs: auth.CapAdmin, AnyEpoch: true},
}

// opIndex finds an operation's entry of Ops by op code.
var opIndex = func() map[uint16]*OpInfo {
	m := make(map[uint16]*OpInfo, len(Ops))
	for i := range Ops {
		m[Ops[i].Op] = &Ops[i]
	}
	return m
}()

// Info returns op's entry of Ops.
func Info(op uint16) (OpInfo, bool) {
	if in := opIndex[op]; in != nil {
		return *in, true
	}
	return OpInfo{}, false
}

// Needs is the capability op requires (CapMember for an unknown op: only
// the cluster key reaches its "unknown op" answer).
func Needs(op uint16) auth.Caps {
	if in := opIndex[op]; in != nil {
		return in.Needs
	}
	return auth.CapMember
}

// Deduplicated reports whether the islands apply op at most once per
// request id (wire.ReqID).
func Deduplicated(op uint16) bool {
	in := opIndex[op]
	return in != nil && in.Dedup
}

// AnyEpoch reports whether op is served whatever epoch it carries.
func AnyEpoch(op uint16) bool {
	in := opIndex[op]
	return in != nil && in.AnyEpoch
}
