// Package metaserver is an island server (`atoll meta --server-id`): it
// hosts one replica (internal/replica) of each island the placement puts
// on it and, for every island whose replica leads, runs a meta.Island on
// the replica's database, registers the island with the managers at the
// server's own address and serves it.
//
// # Placement
//
// The first island servers of a cluster are given the same list of
// island servers (id and raft address), number of islands and replicas
// per island. Island k's replicas are on the Replicas servers that
// follow, in id order, the (k-1) mod n-th of the n servers (Placement);
// the first is its preferred leader. Every server registers with the
// managers when it starts (cluster.IslandServer), and the first
// registration records that static placement in the map. From then on
// the map decides (cluster.ReplicaSet): a server started with Join
// (`atoll meta --join`) has no static placement at all.
//
// A server opens a replica of every island the map places on it, and of
// every island it has a directory for (so that a replica the placement
// moved away serves until its leader removes it). It bootstraps the
// group only while the map's set for the island is the set the group was
// formed with (ReplicaSet.Origin: a cluster's first start, or a disk lost
// before any move);
// otherwise the replica joins and waits for the leader to add it. A new
// island (`atoll island create`) is a set whose origin is itself: its
// servers bootstrap it together, as the first servers did. Once
// the map no longer places an island here and that island's leader
// (asked over the raft port: replica.ProbeReplica) no longer has this
// server in its configuration, the server closes the replica and deletes
// its directory and raft log. All this runs once a second.
//
// # Moving replicas
//
// An island's leader makes its raft configuration follow the map's set,
// one step per second: a server of the set that is not a member is added
// as a non-voter; a non-voter whose replica has applied within 64
// entries of the leader (probed over the raft port) is promoted to
// voter; only once every server of the set votes are the members the set
// dropped removed. The group so never has fewer voters than the set, and
// a new replica votes only once it has caught up. A leader the set
// dropped is not removed by itself: it hands the lead to the set's first
// server (below), which then removes it.
//
// A replica leading an island whose preferred server (the set's first)
// is another voter offers that server the lead after LeadBackAfter (5 s,
// --lead-back-after), and every 10 s after that, so that leaders spread
// over the servers and return to their place after a failover. An offer
// is made only when the preferred server answers a probe saying it has
// the formatted cluster map and the managers' leader answered a
// heartbeat of this server within 3 s: the new leader serves only with
// the map, and is found most easily once it has registered the island
// with the managers (without them, clients and islands must look for it:
// internal/leaderhint).
//
// # Requests
//
// One wire listener serves every island: a request's route
// (wire.Request.Route) names its island. A request for an island this
// server does not lead, or leads in another term than the one its Island
// was opened in, is answered ErrUnavailable; clients refresh their map
// (the leader registered the island at its own address) and retry.
//
// # Leadership
//
// Each hosted replica has a loop following its leadership signals. Every
// signal closes the Island it runs, if any; gaining the lead then: waits
// for the cluster map (and for the namespace to be formatted, registering
// the island meanwhile so that `atoll format` can include it), applies a
// raft barrier, opens a meta.Island on the replica's database with the
// replica as its Replicator (which recovers open transactions through the
// log), and serves it. Losing the lead closes it: requests in flight fail
// with ErrUnavailable (the entry they proposed may still commit under
// the next leader).
//
// # Metrics
//
//	atoll_island_replica_leader{island}         1 while this server serves the island
//	atoll_island_replica_applied_index{island}  raft index applied to the replica's database
//	atoll_island_replica_commit_index{island}   commit index known here
//	atoll_island_replica_term{island}           raft term
//	atoll_island_replicate_seconds{island}      histogram: a change from handed to raft to applied on the leader
//	atoll_island_raft_refused_connections_total connections to the raft port that did not authenticate as members
//
// and every served Island's own metrics (internal/meta).
//
// # Locks
//
// One mutex, Server.hostsMu: it orders the copy-and-replace of the
// hosted replicas' map (setHost), which readers load without a lock.
// Nothing nests inside it, and nothing under it does I/O or waits.
package metaserver
