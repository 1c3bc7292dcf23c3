// Package qemu is keel's real virt driver: every instance is a
// qemu-system-x86_64 process (TCG, no KVM needed) started by the agent,
// running the project's own tiny guest (package guest), controlled over
// QMP (package qmp), and live-migrated by QEMU itself between agents.
//
// Each guest has a directory under Config.Dir named by its UUID, holding
// the boot disk, the QMP sockets (qmp.sock for the driver, peek.sock for
// anyone else: tests, an operator's socat), qemu.pid, qemu.log (QEMU's
// stderr) and guest.json (what the driver knows: state, migration). QEMU
// runs in its own session, so it outlives the agent: an agent restarted
// after kill -9 adopts every live QEMU it finds there, and re-attaches to
// a migration still copying (see Resumable and Reattach).
//
// A live migration follows the state machine the conductor drives:
// pre_live_migration starts a QEMU on the destination with the same
// machine options and -incoming defer, then migrate-incoming on a unix
// socket in its directory; live_migration on the source sets bandwidth and
// downtime (Nova's [libvirt] options), runs migrate and polls
// query-migrate (woken by MIGRATION events), reporting RAM progress; when
// live_migration_completion_timeout (seconds per GiB of guest RAM,
// counting at least 2 GiB, as Nova) runs out it cancels, or
// force-completes: post-copy when both hosts permit it, else it pauses
// the source so the last pass fits the downtime.
package qemu
