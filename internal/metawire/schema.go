package metawire

import (
	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Schema is the island protocol's table of operations. The capabilities:
// reading names, attributes and block maps takes read; changing them
// (acting for a user, whose uid/gid the request asserts) write; the
// cleaner's and fsck's operations admin; the cross-island transaction
// protocol member (only peer islands hold the cluster key). Dedup marks
// the changes a client retries after a lost answer. AnyEpoch: transaction
// decisions and recovery must flow whatever the maps say; statfs and
// fsck are not tied to buckets.
var Schema = wire.NewSchema([]wire.OpSpec{
	{Op: OpLookup, Name: "lookup", Req: wire.New[NameReq](), Resp: wire.New[AttrResp](), Needs: auth.CapRead},
	{Op: OpGetAttr, Name: "getattr", Req: wire.New[InoReq](), Resp: wire.New[AttrResp](), Needs: auth.CapRead},
	{Op: OpSetAttr, Name: "setattr", Req: wire.New[SetAttrReq](), Resp: wire.New[AttrResp](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpCreate, Name: "create", Req: wire.New[CreateReq](), Resp: wire.New[CreateResp](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpMkdir, Name: "mkdir", Req: wire.New[CreateReq](), Resp: wire.New[CreateResp](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpSymlink, Name: "symlink", Req: wire.New[CreateReq](), Resp: wire.New[CreateResp](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpReadlink, Name: "readlink", Req: wire.New[InoReq](), Resp: wire.New[ReadlinkResp](), Needs: auth.CapRead},
	{Op: OpUnlink, Name: "unlink", Req: wire.New[NameReq](), Resp: wire.New[Empty](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpRmdir, Name: "rmdir", Req: wire.New[NameReq](), Resp: wire.New[Empty](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpRename, Name: "rename", Req: wire.New[RenameReq](), Resp: wire.New[Empty](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpLink, Name: "link", Req: wire.New[LinkReq](), Resp: wire.New[AttrResp](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpReaddir, Name: "readdir", Req: wire.New[ReaddirReq](), Resp: wire.New[ReaddirResp](), Needs: auth.CapRead},
	{Op: OpGetXattr, Name: "getxattr", Req: wire.New[XattrReq](), Resp: wire.New[XattrResp](), Needs: auth.CapRead},
	{Op: OpSetXattr, Name: "setxattr", Req: wire.New[XattrReq](), Resp: wire.New[Empty](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpListXattr, Name: "listxattr", Req: wire.New[InoReq](), Resp: wire.New[XattrResp](), Needs: auth.CapRead},
	{Op: OpRemoveXattr, Name: "removexattr", Req: wire.New[XattrReq](), Resp: wire.New[Empty](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpReadMap, Name: "readmap", Req: wire.New[ReadMapReq](), Resp: wire.New[ReadMapResp](), Needs: auth.CapRead},
	{Op: OpCommit, Name: "commit", Req: wire.New[CommitReq](), Resp: wire.New[CommitResp](), Needs: auth.CapWrite, Dedup: true},
	{Op: OpClean, Name: "clean", Req: wire.New[CleanReq](), Resp: wire.New[CleanResp](), Needs: auth.CapAdmin},
	{Op: OpStatFS, Name: "statfs", Req: wire.New[Empty](), Resp: wire.New[StatFSResp](), Needs: auth.CapRead, AnyEpoch: true},
	{Op: OpAccess, Name: "access", Req: wire.New[AccessReq](), Resp: wire.New[Empty](), Needs: auth.CapRead},
	{Op: OpLiveBytes, Name: "livebytes", Req: wire.New[LiveReq](), Resp: wire.New[LiveResp](), Needs: auth.CapAdmin},
	{Op: OpStripeRefs, Name: "striperefs", Req: wire.New[RefsReq](), Resp: wire.New[RefsResp](), Needs: auth.CapRead},
	{Op: OpSync, Name: "sync", Req: wire.New[Empty](), Resp: wire.New[SyncResp](), Needs: auth.CapWrite},
	{Op: OpForget, Name: "forget", Req: wire.New[ForgetReq](), Resp: wire.New[ForgetResp](), Needs: auth.CapAdmin},
	{Op: OpLease, Name: "lease", Req: wire.New[LeaseReq](), Resp: wire.New[LeaseResp](), Needs: auth.CapRead},
	{Op: OpLeasePoll, Name: "leasepoll", Req: wire.New[PollReq](), Resp: wire.New[PollResp](), Needs: auth.CapRead},
	{Op: OpUnlinkMany, Name: "unlinkmany", Req: wire.New[UnlinkManyReq](), Resp: wire.New[Empty](), Needs: auth.CapWrite, Dedup: true},
	// Locks are advisory and change no file: a read-only key may lock
	// what it reads (Linux lets a read-only descriptor flock).
	{Op: OpLock, Name: "lock", Req: wire.New[LockReq](), Resp: wire.New[LockResp](), Needs: auth.CapRead},
	{Op: OpLockSession, Name: "locksession", Req: wire.New[LockSessionReq](), Resp: wire.New[LockSessionResp](), Needs: auth.CapRead},
	{Op: OpLockEnd, Name: "lockend", Req: wire.New[LockSessionReq](), Resp: wire.New[LockSessionResp](), Needs: auth.CapAdmin},

	{Op: OpPrepare, Name: "prepare", Req: wire.New[PrepareReq](), Resp: wire.New[Empty](), Needs: auth.CapMember},
	{Op: OpDecide, Name: "decide", Req: wire.New[DecideReq](), Resp: wire.New[Empty](), Needs: auth.CapMember, AnyEpoch: true},
	{Op: OpOutcome, Name: "outcome", Req: wire.New[TxReq](), Resp: wire.New[OutcomeResp](), Needs: auth.CapMember, AnyEpoch: true},
	{Op: OpFsck, Name: "fsck", Req: wire.New[FsckReq](), Resp: wire.New[FsckResp](), Needs: auth.CapAdmin, AnyEpoch: true},
	{Op: OpAllocIno, Name: "allocino", Req: wire.New[AllocInoReq](), Resp: wire.New[AllocInoResp](), Needs: auth.CapMember},
	{Op: OpImportEntry, Name: "importentry", Req: wire.New[ImportReq](), Resp: wire.New[Empty](), Needs: auth.CapMember, AnyEpoch: true},
	{Op: OpEntryLoad, Name: "entryload", Req: wire.New[EntryLoadReq](), Resp: wire.New[EntryLoadResp](), Needs: auth.CapAdmin, AnyEpoch: true},
}...)
