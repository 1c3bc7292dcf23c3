package compute

import (
	"context"
	"errors"

	"keel/internal/records"
)

// GuestState is a guest's state on its hypervisor.
type GuestState string

// Guest states.
const (
	GuestBuilding  GuestState = "building"
	GuestRunning   GuestState = "running"
	GuestMigrating GuestState = "migrating" // running here, being copied away
	GuestIncoming  GuestState = "incoming"  // prepared to receive a migration
)

// Guest is one instance as the hypervisor sees it.
type Guest struct {
	UUID   string         `json:"uuid"`
	Name   string         `json:"name"`
	Flavor records.Flavor `json:"flavor"`
	State  GuestState     `json:"state"`
	// MigrationID is the live migration copying the guest away, while
	// State is migrating.
	MigrationID int64 `json:"migration_id,omitempty"`
	// Paused, while State is migrating, says the guest was paused when
	// its copy began (Nova live-migrates paused servers too): a failed
	// copy leaves it paused here, a completed one paused there.
	Paused bool `json:"paused,omitempty"`
	// Workload is the guest's instance metadata keel:workload, which the
	// fake driver's workload model reads before its flavor's extra spec
	// (package workload).
	Workload string `json:"workload,omitempty"`
	// Rescue is what the guest boots while rescued (its instance's
	// Rescue at the rescue; nil when not rescued).
	Rescue *records.Rescue `json:"rescue,omitempty"`
}

// Settled is the state a migrating guest returns to here when its copy
// fails or is reverted: paused if it was, else running.
func (g Guest) Settled() GuestState {
	if g.Paused {
		return GuestPaused
	}
	return GuestRunning
}

// Driver is the virt driver interface: what the agent asks of a hypervisor.
// Spawn and LiveMigration return at once and report through done (and
// progress); every other call completes before it returns. done is never
// called before the call that starts or stops the operation (Spawn,
// LiveMigration, AbortLiveMigration, ForceCompleteLiveMigration) has
// returned: the caller may hold a lock that done's handler takes.
type Driver interface {
	Spawn(ctx context.Context, inst records.Instance, done func(error))
	Destroy(ctx context.Context, uuid string) error
	Guests(ctx context.Context) ([]Guest, error)

	CheckCanLiveMigrateDestination(ctx context.Context, inst records.Instance) error
	CheckCanLiveMigrateSource(ctx context.Context, inst records.Instance) error
	// PreLiveMigration prepares the destination to receive inst and returns
	// the migrate data the source's LiveMigration needs.
	PreLiveMigration(ctx context.Context, inst records.Instance) (map[string]string, error)
	// LiveMigration copies inst to dest for migration migID (which the
	// driver keeps with the guest, so an agent restarted mid-copy can
	// report which migration it interrupted).
	LiveMigration(ctx context.Context, migID int64, inst records.Instance, dest string, data map[string]string,
		progress func(total, processed, remaining int64), done func(error))
	AbortLiveMigration(ctx context.Context, uuid string) error
	ForceCompleteLiveMigration(ctx context.Context, uuid string) error
	// PostLiveMigrationAtSource removes the guest that moved away.
	PostLiveMigrationAtSource(ctx context.Context, uuid string) error
	// PostLiveMigrationAtDestination makes the incoming guest the running
	// one.
	PostLiveMigrationAtDestination(ctx context.Context, inst records.Instance) error
	RollbackLiveMigrationAtDestination(ctx context.Context, uuid string) error

	// LifecycleDriver: stop, start, reboot, pause, suspend, rescue,
	// rebuild and shelve the guests (see lifecycle.go).
	LifecycleDriver
	// ColdMover: cold migration and resize (see coldmove.go).
	ColdMover
	// Interrupter: what an agent restart cut short.
	Interrupter
	// CopyReverter: the source guest of a copy taken as failed runs again.
	CopyReverter
	// Measurer: what the host and its guests use (ErrUnmeasured when the
	// driver cannot tell).
	Measurer
	// Snapshotter: a guest's disk captured for an image (see snapshot.go).
	Snapshotter
	// ConsoleReader: the end of a guest's serial console log (see
	// console.go; a driver that keeps none answers ErrNoConsole).
	ConsoleReader
}

// A driver's one optional capability, the choice it makes beyond Driver:
//
//   - DetachedCopier: its memory copies run outside the agent (a real
//     hypervisor's: qemu.Driver, libvirt.Driver), so they outlive an agent
//     restart, keep their destination, and the destination's hypervisor
//     says why an incoming guest is gone. Without it (fake.Driver) a copy
//     ends with the agent, and the destination answers from its guests.
//
//   - GuestFinder: one guest found by its UUID without listing them all
//     (fake.Driver: the simulator's 100,000 hosts ask for one guest at
//     each boot and each copy's end); without it, Guests is listed.
//
// The other optional interfaces in this package are the store's and the
// reporter's (capability.go).

// GuestFinder is implemented by drivers that find one guest by its UUID
// for less than listing them all: the guest as Guests would list it, and
// whether there is one.
type GuestFinder interface {
	FindGuest(ctx context.Context, uuid string) (Guest, bool, error)
}

// DetachedCopier is implemented by drivers whose memory copies run outside
// the agent: IncomingChecker, Resumer and CopyDestination together.
type DetachedCopier interface {
	IncomingChecker
	Resumer
	CopyDestination
}

// Steps that can fail, named as Nova's RPC methods; the fake driver's
// fault injection uses them.
const (
	StepSpawn             = "spawn"
	StepCheckDestination  = "check_can_live_migrate_destination"
	StepCheckSource       = "check_can_live_migrate_source"
	StepPreLiveMigration  = "pre_live_migration"
	StepLiveMigration     = "live_migration"
	StepPostAtSource      = "post_live_migration_at_source"
	StepPostAtDestination = "post_live_migration_at_destination"
)

// Interrupter is the part of Driver that tells, after a restart of
// the agent, which operations the restart cut short: guests that were
// building, or being copied away (with the migration's ID). The agent
// reports how each ended so the conductor can finish or roll back.
type Interrupter interface {
	Interrupted() []Guest
}

// IncomingChecker is the part of DetachedCopier that tells why an incoming
// guest is gone (a real hypervisor's process exited, with its stderr):
// the destination's answer to the source after a copy, which becomes the
// migration's fault message.
type IncomingChecker interface {
	CheckIncoming(ctx context.Context, uuid string) error
}

// Resumer is the part of DetachedCopier for memory copies that outlive the agent
// (a real hypervisor keeps copying while the agent restarts). After a
// restart the agent asks for the copies still in progress and re-attaches
// to each, so it reports its outcome as LiveMigration would have.
type Resumer interface {
	// Resumable returns, once, the guests (State migrating, with their
	// MigrationID) whose copy outlived the restart.
	Resumable() []Guest
	// Reattach watches such a copy again; progress and done as for
	// LiveMigration.
	Reattach(ctx context.Context, uuid string, progress func(total, processed, remaining int64), done func(error))
}

// CopyReverter is the part of Driver that undoes a completed copy whose
// destination turns out to have lost the guest after all: the copy is
// taken as failed and RevertCopy makes the source guest run again (a real
// hypervisor's completed copy leaves it stopped; the fake's, as it was).
type CopyReverter interface {
	RevertCopy(ctx context.Context, uuid string) error
}

// ErrCopyCancelled is wrapped by the error a driver reports for a copy
// that was cancelled (an abort, or the completion timeout's abort).
var ErrCopyCancelled = errors.New("memory copy cancelled")
