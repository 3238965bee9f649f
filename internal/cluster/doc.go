// Package cluster is the cluster map and its protocol: the map's types,
// its binary format, the deterministic commands that change it (the raft
// log's entries, applied by Map.Apply), the managers' wire protocol and
// the client side that members (storage servers, islands, gateways) and
// the CLI use (Client, RunMember, View). The managers themselves (the raft
// group, the heartbeat monitor, the handlers) are internal/manager, which
// imports this package; nothing here imports raft, so every member of the
// map links only the map.
//
// # The cluster map
//
// A Map lists the storage slots, metadata islands and gateways with their
// address, pid and state (up, down, draining, out), the managers (raft id,
// raft address, client address), the namespace's extendible hash table
// (Table: entry i is the island owning the buckets whose top Depth bits
// are i), the default redundancy policy and whether the cluster is
// formatted (the table exists).
//
// Invariants:
//
//   - The map changes only through raft commands, applied deterministically
//     (no clock, no randomness) by every manager. A command that changes the
//     map increases Epoch by exactly one; a command that changes nothing
//     (a repeated registration, marking down a member already down) or fails
//     (an unknown member, a second format) leaves map and epoch untouched,
//     identically on every manager.
//   - Heartbeat times and usage statistics (LastHeartbeat, CapacityBytes,
//     UsedBytes, Degraded) are never replicated and never move the epoch.
//     The leader keeps them in memory and overlays them on the maps it
//     serves; a follower serves zeros.
//   - Members are sorted by id without duplicates; Formatted holds exactly
//     when the table has entries; every table entry names a registered
//     island; len(Entries) == 2^Depth, Depth <= 16.
//   - Draining and out are operator states: a restart (re-registration)
//     keeps them, and the monitor does not mark such members down. Down is
//     the monitor's: it is set only for up members that stopped
//     heartbeating, and cleared by a heartbeat or a registration.
//   - What a tenant can add is bounded (every member fetches the whole map,
//     and one frame carries it): a gateway or mount registered with a key
//     other than the cluster key records that key as its Owner; a key has
//     at most MaxGatewaysPerKey, the map at most MaxGateways and
//     MaxMapBytes encoded; a key cannot register over another key's entry
//     (ErrLimit). Gateways silent for GatewayExpiry are removed by the
//     leader (remove), and an admin removes one at once (OpRemove, `atoll
//     member remove`). Storage servers and islands are never removed:
//     they hold data and leave by drain and out.
//   - Revoked lists key names whose generations below Below are refused
//     (OpRevoke, `atoll key revoke`). Every serving process hands the
//     revocations of each map it gets to its key verifier
//     (FollowRevocations): a revoked key is refused at its next
//     handshake and its open connections at their next request, within a
//     heartbeat of the revocation.
//   - Unless an operator pinned it (SetPolicy), DefaultPolicy follows the
//     number of storage slots that are not out: ec:4+1 capped to what the
//     slots allow (DefaultPolicyFor).
//
// # Epochs
//
// Every change a member must observe is a new epoch. Members learn of a
// newer map from the epoch in each heartbeat reply and fetch it
// (RunMember). Servers stamp their requests with their map epoch and apply
// CheckEpoch: an older epoch than the server's is answered ErrStaleEpoch
// (the sender refreshes and retries); a newer one gives ErrNeedRefresh, and
// the server fetches a map of at least that epoch (Client.Map(ctx, epoch))
// before serving.
//
// # Map binary format (integers big-endian, strings uvarint-length-prefixed)
//
//	u32 magic "ATMP" (0x41544D50)
//	u8  version (1)
//	u64 epoch
//	u8  formatted (0/1)
//	u8  policy pinned (0/1)
//	str default policy
//	uvarint n, then n storage: u16 slot, str addr, u8 state, i64 pid,
//	        i64 last heartbeat (unix ns, 0 = unknown), u64 capacity,
//	        u64 used, u64 degraded
//	uvarint n, then n islands:  u32 id, str addr, u8 state, i64 pid, i64 last heartbeat
//	uvarint n, then n gateways: u32 id, str addr, u8 state, i64 pid, i64 last heartbeat
//	uvarint n, then n managers: str raft id, str raft addr, str client addr
//	u8  table depth, uvarint n, then n u32 island ids
//	optional tails (present when non-empty, in this order; an absent
//	tail is read as empty):
//	uvarint n, then n pending entry moves: u64 id, u32 entry, u32 from, u32 to
//	uvarint n, then n island servers: u32 id, str raft addr, u8 out;
//	        uvarint n, then n replica sets: u32 island, uvarint k, k × u32
//	        server (the first is the preferred leader), uvarint k, k × u32
//	        origin server (the set the group was formed with)
//	uvarint n, then n gateway owners: u32 gateway id, str key name (the
//	        key that registered it when not the cluster key; listed
//	        gateways only, each once)
//	uvarint n, then n revoked key names: str name, u32 lowest valid
//	        generation (sorted by name; auth.Revocations)
//	u32 CRC32C (Castagnoli) of every byte above
//
// States are 1 up, 2 down, 3 draining, 4 out; kinds are 1 storage,
// 2 island, 3 gateway. DecodeMap checks the checksum, then every field and
// the invariants above; anything else is ErrBadRequest. The same encoding
// is the raft snapshot (with the heartbeat fields zero) and the reply of
// GetMap, Register and Format.
//
// # Raft command encoding
//
//	u8 version (1), u8 type, then by type:
//	1 register   u8 kind, u32 id, str addr, i64 pid[, str owner (a
//	             gateway's registering key when not the cluster key)]
//	2 mark-down  uvarint n, then n × (u8 kind, u32 id)
//	3 mark-up    u8 kind, u32 id
//	4 set-state  u8 kind, u32 id, u8 state (up, draining or out)
//	5 set-table  u8 depth, uvarint n, n × u32 island id
//	6 set-policy str policy (layout syntax; "" = back to automatic)
//	7 format     uvarint n, n × u32 island id (none: every island not out);
//	             the FSM builds InitialTable itself
//	8 manager    str raft id, str raft addr, str client addr (upsert;
//	             replaces an entry with the same raft address)
//	9 move-entries  uvarint n, n × (u64 id, u32 entry, u32 from, u32 to)
//	10 finish-move  u64 move id (the entry goes to its destination)
//	11 cancel-move  u64 move id
//	12 island-server uvarint n, n × (u32 id, str raft addr, u8 out), then
//	             a seed placement as in the map; the first server is the
//	             caller (its address is taken), the others are added only
//	             when absent, the seed only when the map has no placement
//	13 set-replicas  replica sets as in the map (replacing those islands';
//	             the origin sent is ignored: a placed island keeps its own,
//	             a new island's is its servers), uvarint n, n × u32 server
//	             marked out
//	14 remove    uvarint n, then n × (u8 kind, u32 id): gateways only
//	15 revoke    str key name: its lowest valid generation goes up by one
//
// # Replica placement
//
// Replicated islands (internal/metaserver) are placed by the map:
// IslandServers are the island servers, Replicas each island's replica
// set. The first island server to start records the placement its flags
// give (every server is started with the same); later `atoll island
// server add|remove|rebalance` plan a new one (PlanReplicas: replicas on
// a removed server go to the emptiest, then replicas and preferred
// leaders are spread within one of each other) and record it with
// SetReplicas. Each island's leader carries the change out; the map only
// says where replicas are to be, and ReplicasUnsettled compares that with
// the leaders' heartbeats.
//
// # Wire protocol
//
// Managers serve internal/wire frames; messages are encoded with wire.Enc
// (see proto.go for each layout). Operations:
//
//	1 GetMap    {min epoch}                  -> map      any manager
//	2 Register  {kind, id, addr, pid}        -> map      leader
//	3 Heartbeat {kind, id, epoch, stats}     -> {epoch, state}  leader
//	            stats: u64 capacity, used, degraded, bytes read, bytes
//	            written, ops, scrub pass bytes, scrub passes, corrupt,
//	            repairs; str metrics address (the fields after degraded
//	            were appended later, in this order)
//	4 SetState  {kind, id, state}            -> {epoch}  leader
//	5 Format    {islands}                    -> map      leader
//	6 Join      {raft id, raft addr, client addr} -> {epoch}  leader
//	7 Status    {}                           -> {map, raft view, heartbeat table}  leader when known
//	            (the heartbeat table, appended after the voters: uvarint n,
//	            n × {u8 kind, u32 id, i64 last heartbeat, stats})
//	8 SetTable  {table}                      -> {epoch}  leader
//	9 SetPolicy {policy}                     -> {epoch}  leader
//	10 MoveEntries {moves}                   -> {epoch}  leader
//	11 FinishMove  {move id}                 -> {epoch}  leader (islands)
//	12 CancelMove  {move id}                 -> {epoch}  leader
//	13 IslandServer {servers, seed}          -> {epoch}  leader (island servers)
//	14 SetReplicas {sets, out}               -> {epoch}  leader
//
// Error responses carry a status and the error text:
//
//	1 internal  2 bad request  3 not leader  4 stale epoch  5 not formatted
//	6 unknown member  7 already formatted  8 unavailable
//
// A follower answers leader operations with status 3 and the text
// "...; leader=HOST:PORT" (the leader's client address) or "...; no
// leader known". Client follows the redirect, waits out elections
// (LeaderWait, default 10s), skips unreachable managers and learns every
// manager address from the maps it receives. A GetMap that a manager
// cannot satisfy because its map is older than the requested epoch gets
// status 4; the client retries, preferring the leader. Malformed
// messages, unknown operations and invalid kinds, states, addresses or
// tables get status 2 and change nothing; a malformed frame closes only
// its connection.
//
// Writes are at-least-once: a command whose leader is lost before it
// answers may have been committed, and the client retries it elsewhere.
// Every command is idempotent except Format, whose retry then reports
// ErrFormatted.
//
// # Locks
//
// Two mutexes, neither taken inside the other nor held across a call to
// the managers:
//
//   - Client.mu: the manager addresses known, the rotation, the last
//     leader and the highest epoch seen. call takes it around each step
//     and lets it go before the request (pool.Call) and the backoff
//     sleeps.
//   - View.mu (RW): the current map and when it was last refreshed.
//     Refresh lets it go before fetching a map; Update runs the OnChange
//     callbacks after letting it go.
package cluster
