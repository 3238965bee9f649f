// Package islandload measures how busy each namespace table entry is:
// it asks every island for the client operations it counted per entry
// it owns (metawire.OpEntryLoad), twice, a window apart, and turns the
// differences into operations per second. The island rebalancer plans
// with it (namespace.PlanByLoad); `atoll island rebalance --by-load`
// prints and applies that plan.
//
// An island that restarted between the two samples (a new incarnation,
// its counters start over) is counted from zero; an island that does not
// answer fails the sample (a plan on partial load would move entries
// toward it).
package islandload
