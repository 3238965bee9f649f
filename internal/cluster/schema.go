package cluster

import (
	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Schema is the managers' protocol's table of operations. Anyone with a
// key of the cluster reads the map and the status; members register and
// heartbeat (write, and the cluster key unless a gateway: the manager's
// memberAllowed); island servers and joining managers need the cluster
// key; admin keys change the map. A nil Resp is the map in its own
// checksummed encoding (EncodeMap). Managers deduplicate nothing (every
// command is idempotent but Format, whose retry reports ErrFormatted) and
// serve at any epoch.
var Schema = wire.NewSchema([]wire.OpSpec{
	{Op: OpGetMap, Name: "get-map", Req: wire.New[GetMapReq](), Needs: auth.CapRead, AnyEpoch: true},
	{Op: OpRegister, Name: "register", Req: wire.New[RegisterReq](), Needs: auth.CapWrite, AnyEpoch: true},
	{Op: OpHeartbeat, Name: "heartbeat", Req: wire.New[HeartbeatReq](), Resp: wire.New[HeartbeatResp](), Needs: auth.CapWrite, AnyEpoch: true},
	{Op: OpSetState, Name: "set-state", Req: wire.New[SetStateReq](), Resp: wire.New[EpochResp](), Needs: auth.CapAdmin, AnyEpoch: true},
	{Op: OpFormat, Name: "format", Req: wire.New[FormatReq](), Needs: auth.CapAdmin, AnyEpoch: true},
	{Op: OpJoin, Name: "join", Req: wire.New[JoinReq](), Resp: wire.New[EpochResp](), Needs: auth.CapMember, AnyEpoch: true},
	{Op: OpStatus, Name: "status", Req: wire.New[wire.Empty](), Resp: wire.New[StatusResp](), Needs: auth.CapRead, AnyEpoch: true},
	{Op: OpSetTable, Name: "set-table", Req: wire.New[SetTableReq](), Resp: wire.New[EpochResp](), Needs: auth.CapAdmin, AnyEpoch: true},
	{Op: OpSetPolicy, Name: "set-policy", Req: wire.New[SetPolicyReq](), Resp: wire.New[EpochResp](), Needs: auth.CapAdmin, AnyEpoch: true},
	{Op: OpMoveEntries, Name: "move-entries", Req: wire.New[MoveEntriesReq](), Resp: wire.New[EpochResp](), Needs: auth.CapAdmin, AnyEpoch: true},
	{Op: OpFinishMove, Name: "finish-move", Req: wire.New[MoveIDReq](), Resp: wire.New[EpochResp](), Needs: auth.CapMember, AnyEpoch: true},
	{Op: OpCancelMove, Name: "cancel-move", Req: wire.New[MoveIDReq](), Resp: wire.New[EpochResp](), Needs: auth.CapAdmin, AnyEpoch: true},
	{Op: OpIslandServer, Name: "island-server", Req: wire.New[IslandServerReq](), Resp: wire.New[EpochResp](), Needs: auth.CapMember, AnyEpoch: true},
	{Op: OpSetReplicas, Name: "set-replicas", Req: wire.New[SetReplicasReq](), Resp: wire.New[EpochResp](), Needs: auth.CapAdmin, AnyEpoch: true},
	{Op: OpRemove, Name: "remove", Req: wire.New[RemoveReq](), Resp: wire.New[EpochResp](), Needs: auth.CapAdmin, AnyEpoch: true},
	{Op: OpRevoke, Name: "revoke", Req: wire.New[RevokeReq](), Resp: wire.New[EpochResp](), Needs: auth.CapAdmin, AnyEpoch: true},
}...)
