package fragment

import (
	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Schema is the storage protocol's table of operations. Reading takes
// read, writing log stripes write, and what only the cleaner, repair,
// drain and fsck do (listing every fragment, deleting, verifying) admin.
// Storage servers deduplicate nothing (a put of an existing fragment id
// is refused or, for a repair, checked against what is there) and check
// no epochs.
var Schema = wire.NewSchema([]wire.OpSpec{
	{Op: OpPut, Name: "put", Req: wire.New[PutReq](), Resp: wire.New[wire.Empty](), Needs: auth.CapWrite},
	{Op: OpAppend, Name: "append", Req: wire.New[IDReq](), Resp: wire.New[AppendResp](), Needs: auth.CapWrite},
	{Op: OpRead, Name: "read", Req: wire.New[ReadReq](), Resp: wire.New[ReadResp](), Needs: auth.CapRead},
	{Op: OpDelete, Name: "delete", Req: wire.New[IDReq](), Resp: wire.New[wire.Empty](), Needs: auth.CapAdmin},
	{Op: OpInfo, Name: "info", Req: wire.New[IDReq](), Resp: wire.New[Info](), Needs: auth.CapRead},
	{Op: OpList, Name: "list", Req: wire.New[ListReq](), Resp: wire.New[ListResp](), Needs: auth.CapAdmin},
	{Op: OpNewest, Name: "newest", Req: wire.New[LogReq](), Resp: wire.New[NewestResp](), Needs: auth.CapRead},
	{Op: OpVerify, Name: "verify", Req: wire.New[IDReq](), Resp: wire.New[VerifyResp](), Needs: auth.CapAdmin},
	{Op: OpStat, Name: "stat", Req: wire.New[wire.Empty](), Resp: wire.New[Stats](), Needs: auth.CapRead},
	{Op: OpScan, Name: "scan", Req: wire.New[ScanReq](), Resp: wire.New[ScanResp](), Needs: auth.CapAdmin},
}...)
