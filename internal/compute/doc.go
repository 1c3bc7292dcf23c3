// Package compute is keel's agent side, one per hypervisor host: the
// resource tracker (the host record Nova keeps, written on spawn, after a
// live migration on the source, on the destination unless the policy is
// legacy, and by the periodic audit), the virt driver interface, and the
// Manager that answers every agent-side step the conductor asks for: a
// boot, a live migration (manager.go), a cold migration or resize and an
// evacuation's rebuild (coldmove.go), and the lifecycle actions
// (lifecycle.go).
//
// The periodic audit (Tracker.Audit, Nova's update_available_resource)
// is split as the move machines are: audit.go reads — the allocations on
// the host's provider, the migrations in flight, the driver's guests, then
// the instance and migration records of the consumers and guests whose
// fate depends on them — into an AuditInputs; PlanAudit (auditplan.go,
// pure, tested on plain data) decides an AuditPlan: allocations to
// release at the generation they were listed at, claims, incoming guests
// to adopt, stray guests to remove, lost instances to put in ERROR; the
// tracker applies it. Every allocation write names the generation read,
// so a race loses safely: the write is a conflict, and the audit leaves
// that consumer to its owner.
//
// What a store or a reporter may offer beyond the interfaces the package
// requires (ConsumerLister, ProviderLister, InstanceFaulter, ReportKeeper,
// MigrationReader, InstanceLister) is a named interface whose doc names
// its implementers, each of which asserts it at compile time. A driver is
// a Driver (spawn, the live and cold moves, the lifecycle, snapshots,
// console logs, what a restart cut short, measuring) and chooses one thing
// beyond it: DetachedCopier (its copies run outside the agent and outlive
// it).
//
// Long driver operations (spawn, the memory copy) are asynchronous: they
// report through a callback, so the same code runs on the wall clock in
// `keel agent` and on the simulator's virtual clock.
package compute
