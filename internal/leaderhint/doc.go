// Package leaderhint finds a replicated island's leader at an address
// the cluster map does not name.
//
// A replicated island's new leader registers the island at its own
// address with the managers, and clients and other islands find it
// through the map. While the managers are away (a lost quorum, a
// restart) it cannot register: the map keeps naming the former leader,
// which answers "unavailable" or nothing, and every request to the
// island would fail until the managers return.
//
// So when the address the map names for an island answers "unavailable"
// and a refreshed map names the same one, the caller asks the other
// island servers it knows (the addresses the map gives the other
// islands, and those it named for any island before: a server serves
// every island it leads on one address, and one that came back from a
// crash may lead nothing the map shows) whether they lead the island,
// and sends the island's requests to the one that
// answers, until the map names another address or that one answers
// "unavailable" in turn. An island server answers for an island only
// while it leads it, in the term it opened it in (internal/metaserver),
// so a hint may go stale but never sends a request to a server that
// would serve it wrongly; an unreplicated island answers a request for
// another island "wrong island", which is no answer either. Scans are
// bounded: one per island per Every, each server given Wait.
//
// internal/client uses it for its requests, internal/meta for calls
// between islands (cross-island operations).
//
// # Locks
//
// One mutex, Hints.mu: the hints by island, the count of leaders found
// and the addresses seen. find lets it go while the servers are asked
// and takes it again for the answer, so it is never held across a call
// or a wait. Only the Map's Islands runs under it (cluster.View takes
// its read lock there).
package leaderhint
