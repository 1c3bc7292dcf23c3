package computeapi

import (
	"context"

	"keel/internal/lifecycle"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Store is what the compute API reads and writes of keel's store: the
// compute records it serves (hosts and services, instances and their
// actions, migrations, flavors, aggregates and server groups, key pairs,
// quota limits) and, of placement, the provider reads and the aggregate
// write with which os-aggregates mirrors a host's membership. It writes
// no allocations: the conductor does (boots, moves, os-resetState).
// store.Store implements it.
type Store interface {
	store.Hosts
	store.Instances
	store.Migrations
	store.Flavors
	store.Groups
	store.KeyPairs
	store.Quotas
	GetProvider(ctx context.Context, uuid string) (placement.Provider, error)
	ProviderSummaries(ctx context.Context, uuids []string) ([]store.ProviderSummary, error)
	SetProviderAggregates(ctx context.Context, uuid string, gen *int64, aggregates []string) (placement.Provider, error)
}

// Conductor is what the compute API asks of the conductor: the intents it
// hands on (boots and deletes, lifecycle actions, moves and their ends,
// state resets with the allocation repair they take) and the one read
// that needs an agent (the console log).
// *conductor.Conductor implements it (the server wires it; its refusals
// are told apart by their HTTPStatus, see refusal).
type Conductor interface {
	booter
	mover
	// Act starts a lifecycle action (stop, start, reboot, shelve, …) on
	// an instance, edits applied to the record it saves first; the
	// channel reports the action's end.
	Act(ctx context.Context, uuid string, req lifecycle.Request, edits ...func(*records.Instance)) (records.Instance, <-chan error, error)
	// ConsoleOutput reads an instance's console log from its agent.
	ConsoleOutput(ctx context.Context, inst records.Instance) ([]byte, error)
	// ResetState sets an instance's vm_state to active or error, clears
	// its task and puts its allocations right (os-resetState); it returns
	// a line for each allocation it put right.
	ResetState(ctx context.Context, uuid string, state records.VMState) ([]string, error)
}

// booter starts and deletes servers (POST and DELETE /servers).
type booter interface {
	// StartBoot schedules and claims inst (on host when not empty: an
	// admin's host in the request) and answers; its build goes on behind.
	StartBoot(ctx context.Context, inst records.Instance, host string) (records.Instance, error)
	// Delete deletes an instance and what it holds.
	Delete(ctx context.Context, uuid string) error
}

// mover starts the moves (live and cold migration, resize, evacuation)
// and ends them (confirm, revert, abort, force-complete).
type mover interface {
	// LiveMigrate runs the pre-checks before it answers (before 2.34);
	// StartLiveMigration answers once the destination is claimed.
	LiveMigrate(ctx context.Context, instanceUUID, requestedHost string) (records.Migration, error)
	StartLiveMigration(ctx context.Context, instanceUUID, requestedHost string) (records.Migration, error)
	// The cold moves answer once scheduled and claimed, as Nova's do;
	// the first agent calls go on behind. StartResize applies edits (the
	// request's disk config) to the record it saves with the migration,
	// so a refused resize changes nothing.
	StartColdMigration(ctx context.Context, instanceUUID, requestedHost string) (records.Migration, error)
	StartResize(ctx context.Context, instanceUUID string, flavor records.Flavor, edits ...func(*records.Instance)) (records.Migration, error)
	StartEvacuation(ctx context.Context, instanceUUID, requestedHost string) (records.Migration, error)
	ConfirmResize(ctx context.Context, instanceUUID string) error
	RevertResize(ctx context.Context, instanceUUID string) error
	Abort(ctx context.Context, migID int64) error
	ForceComplete(ctx context.Context, migID int64) error
}

var _ Store = store.Store(nil)
