// Package sim is keel's discrete-event simulator. It builds a cloud from a
// scenario — an in-memory store, one fake-driver agent per host, the real
// scheduler, resource trackers and conductor — and drives it on a virtual
// clock, once per host-view policy, reporting how destinations spread,
// how often the scheduler decided on a stale view, and how evenly the
// hosts end up used.
//
// Nothing here schedules or tracks resources itself: the simulator only
// creates the world, fires the scenario's workload at its times, and reads
// the results from the store.
package sim
