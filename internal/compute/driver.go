package compute

import (
	"context"

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

// Interrupter is implemented by drivers that can tell, after a restart of
// the agent, which operations the restart cut short: guests that were
// building, or being copied away (with the migration's ID). The agent
// reports how each ended so the conductor can finish or roll back.
type Interrupter interface {
	Interrupted() []Guest
}
