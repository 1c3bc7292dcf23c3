// Package compute is keel's agent side, one per hypervisor host: the
// resource tracker (the host record Nova keeps, written on spawn, after a
// live migration on the source, on the destination unless the policy is
// legacy, and by the periodic audit), the virt driver interface, and the
// Manager that answers every agent-side step of a boot or a live
// migration.
//
// Long driver operations (spawn, the memory copy) are asynchronous: they
// report through a callback, so the same code runs on the wall clock in
// `keel agent` and on the simulator's virtual clock.
package compute
