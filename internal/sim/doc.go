// Package sim is keel's discrete-event simulator. It builds a cloud from a
// scenario on keel's in-process cloud (package inproc, the one the
// conductor's and the API's tests use too: an in-memory store, one
// fake-driver agent per host, the real scheduler, resource trackers and
// conductor) and drives it on a virtual clock, once per host-view policy,
// reporting how destinations spread, how often the scheduler decided on a
// stale view, and how evenly the hosts end up used.
//
// Nothing here schedules or tracks resources itself, nor wires the cloud:
// world.go and trees.go translate the scenario into an inproc.Spec (host
// shapes, ratios and reservations, traits, trees, aggregates, fake-driver
// settings, policy, scheduler options and seeds) and seed the initial
// instances through inproc's Seed; the rest fires the scenario's workload
// at its times and reads the results from the store.
package sim
