// Package store declares keel's store: placement's providers, inventories
// and allocations, the compute records (host records, services, instances,
// migrations, flavors, groups, key pairs, quotas, plans), the identity
// directory, and a change stream the scheduler's host view follows.
//
// The interface is split into roles (Providers, Allocations, Hosts,
// Instances, …; see below), composed into Store, so that each user names
// what it reads and writes. Implementations live in subpackages (memory,
// sqlite, postgres) and all pass the conformance suite in storetest; the
// two SQL stores share sqlstore (the schema-migration runner, the
// JSON-record tables and the provider rules) and storetest.RunDurable.
// Allocation writes are decided by placement.PlanWrites inside each
// implementation's transaction, so the semantics (generations, capacity,
// atomic moves) are written once.
package store

import (
	"context"
	"errors"
	"fmt"

	"keel/internal/placement"
	"keel/internal/records"
)

// Errors shared by every implementation; they wrap or equal placement's.
var (
	ErrNotFound = placement.ErrNotFound
	ErrExists   = placement.ErrExists
	// ErrInUse: a trait or resource class still in use.
	ErrInUse = placement.ErrInUse
	// ErrHasChildren: a provider that is another's parent.
	ErrHasChildren = placement.ErrHasChildren
	// ErrForbidden: the servers refused an agent's store call about a
	// record that does not concern the agent's host.
	ErrForbidden = errors.New("the record does not concern this host")
	// ErrHostHasInstances: DeleteService refused, an instance is on the
	// host.
	ErrHostHasInstances = errors.New("the host has instances")
	// ErrHostHasMigrations: DeleteService refused, a migration in
	// progress involves the host.
	ErrHostHasMigrations = errors.New("the host has migrations in progress")
)

// ChangeKind says what a change-stream entry refers to.
type ChangeKind string

// Kinds of change.
const (
	ChangeProvider  ChangeKind = "provider"  // Key: provider UUID (inventories, usage, generation)
	ChangeHost      ChangeKind = "host"      // Key: host name (host record)
	ChangeService   ChangeKind = "service"   // Key: host name (service record)
	ChangeAggregate ChangeKind = "aggregate" // Key: aggregate ID (compute host aggregate)
)

// Change is one entry of the change stream. Seq increases strictly.
type Change struct {
	Seq  int64
	Kind ChangeKind
	Key  string
}

// ErrChangesTrimmed is returned by Changes when entries after since were
// already discarded: the reader must reload everything.
var ErrChangesTrimmed = errors.New("change stream trimmed past the requested position; reload")

// ProviderSummary is a provider with its usage.
type ProviderSummary struct {
	placement.Provider
	Usage placement.Resources
}

// TreeProviders returns sums as placement.TreeForest and
// placement.Reclaim take them.
func TreeProviders(sums []ProviderSummary) []placement.TreeProvider {
	out := make([]placement.TreeProvider, len(sums))
	for i, s := range sums {
		out[i] = placement.TreeProvider{UUID: s.UUID, ParentUUID: s.ParentUUID, Inventories: s.Inventories, Usage: s.Usage,
			Traits: s.Traits, Aggregates: s.Aggregates}
	}
	return out
}

// MigrationFilter selects migrations; zero fields match everything.
type MigrationFilter struct {
	UUID         string // the migration's own UUID (also its consumer's)
	InstanceUUID string
	Host         string // source or destination
	Status       records.MigrationStatus
	ActiveOnly   bool // not in a terminal status
}

// The store's roles. A user takes the roles it needs rather than Store:
// the placement API takes Placement and Changes (placementapi.Store), the
// conductor Allocations and the records its flows drive (conductor.Store),
// the quota enforcer Quotas and Instances (quota.Store); the scheduler's
// host view (scheduler.Source) and a host's tracker (compute.TrackerStore)
// name the few reads and writes they make. Store composes every role. Each
// store (memory, sqlite, postgres) asserts each role at compile time, and
// sqlstore.Records implements Records once for both SQL stores. Every
// method is safe for concurrent use.

// Providers is placement's providers: inventories, provider trees,
// traits, aggregates and custom resource classes.
type Providers interface {
	// CreateProvider creates a provider (generation 0, or 1 if it comes with
	// inventories). ErrExists if the UUID or name is taken.
	CreateProvider(ctx context.Context, p placement.Provider) (placement.Provider, error)
	GetProvider(ctx context.Context, uuid string) (placement.Provider, error)
	// ProviderSummaries returns the named providers with usages; nil uuids
	// means all providers. Unknown UUIDs are left out.
	ProviderSummaries(ctx context.Context, uuids []string) ([]ProviderSummary, error)
	// SetInventories replaces a provider's inventories if gen is current
	// and returns the provider with its new generation.
	SetInventories(ctx context.Context, uuid string, gen int64, invs placement.Inventories) (placement.Provider, error)
	// DeleteProvider removes a provider that holds no allocations.
	DeleteProvider(ctx context.Context, uuid string) error

	// Placement's provider trees, traits, aggregates and custom resource
	// classes. CreateProvider takes the new provider's ParentUUID (which
	// must exist), Traits (which must exist) and Aggregates too, and
	// DeleteProvider refuses a provider with children (ErrHasChildren).

	// UpdateProvider renames a provider and sets its parent ("" for none).
	// Giving a parent to a root is always allowed; changing or removing a
	// parent only with reparent (placement 1.37). The parent must exist and
	// not be in the provider's own subtree (InvalidError). The generation
	// is not bumped, as in Placement. ErrExists if the name is taken.
	UpdateProvider(ctx context.Context, uuid, name, parent string, reparent bool) (placement.Provider, error)
	// SetProviderTraits replaces a provider's traits if gen is current and
	// bumps its generation. Every trait must be standard or created
	// (InvalidError naming the others).
	SetProviderTraits(ctx context.Context, uuid string, gen int64, traits []string) (placement.Provider, error)
	// SetProviderAggregates replaces a provider's aggregates (UUIDs) and
	// bumps its generation. gen nil skips the generation check (placement
	// before 1.19, and keel mirroring Nova's host aggregates).
	SetProviderAggregates(ctx context.Context, uuid string, gen *int64, aggregates []string) (placement.Provider, error)
	// CreateTrait creates a custom trait; created is false if it existed.
	CreateTrait(ctx context.Context, name string) (created bool, err error)
	// CustomTraits lists the created traits, sorted.
	CustomTraits(ctx context.Context) ([]string, error)
	// DeleteTrait deletes a created trait: ErrNotFound, or ErrInUse while a
	// provider has it.
	DeleteTrait(ctx context.Context, name string) error
	// CreateResourceClass creates a custom class; ErrExists if it exists.
	CreateResourceClass(ctx context.Context, rc placement.ResourceClass) error
	// CustomResourceClasses lists the created classes, sorted.
	CustomResourceClasses(ctx context.Context) ([]placement.ResourceClass, error)
	// DeleteResourceClass deletes a created class: ErrNotFound, or
	// ErrInUse while an inventory has it.
	DeleteResourceClass(ctx context.Context, rc placement.ResourceClass) error
}

// Allocations is placement's consumers and their allocations, written
// atomically and decided by placement.PlanWrites (or PlanReshape).
type Allocations interface {
	GetConsumer(ctx context.Context, uuid string) (placement.Consumer, error)
	// ConsumersOn lists the consumers holding allocations on a provider.
	ConsumersOn(ctx context.Context, providerUUID string) ([]placement.Consumer, error)
	// WriteAllocations applies the writes atomically (all or none), deciding
	// them with placement.PlanWrites, and returns the plan it applied.
	WriteAllocations(ctx context.Context, writes ...placement.AllocationWrite) (placement.WritePlan, error)
	// Reshape replaces the inventories of the providers invs names and
	// applies the allocation writes, atomically (all or none), deciding
	// them with placement.PlanReshape (POST /reshaper): allocations may
	// move off classes that go and onto classes that come in one step.
	Reshape(ctx context.Context, invs []placement.InventoryWrite, writes []placement.AllocationWrite) (placement.ReshapePlan, error)
}

// Placement is the resource-provider side of the store.
type Placement interface {
	Providers
	Allocations
}

// Hosts is the per-host compute records: the host record each agent
// reports and the compute service. Every write appends a ChangeHost or
// ChangeService entry to the change stream.
type Hosts interface {
	PutHostRecord(ctx context.Context, h records.HostRecord) error
	GetHostRecord(ctx context.Context, host string) (records.HostRecord, error)
	ListHostRecords(ctx context.Context) ([]records.HostRecord, error)

	PutService(ctx context.Context, s records.Service) error
	// UpdateService applies fn to a service record atomically (a heartbeat
	// and an admin's disable never undo each other); ErrNotFound if the
	// service does not exist. An error from fn aborts the update.
	UpdateService(ctx context.Context, host string, fn func(*records.Service) error) (records.Service, error)
	GetService(ctx context.Context, host string) (records.Service, error)
	ListServices(ctx context.Context) ([]records.Service, error)

	// DeleteService deletes a compute host's service record and what
	// belongs to the host, in one transaction (os-services DELETE): its
	// host record, every provider of its tree (the root provider named
	// host and its descendants; sharing pools stay) and its membership of
	// the compute aggregates. It returns the deleted record, and notes a
	// change for each record it removes or changes. ErrNotFound if there
	// is no such service. Nothing is deleted, and the error wraps
	// ErrHostHasInstances, while an instance's Host is host;
	// ErrHostHasMigrations while a migration in progress
	// (records.MigrationInProgress) comes from or goes to it; or a
	// *placement.InUseError while a provider of the tree holds
	// allocations (a build not yet on the host, a consumer of placement's
	// API).
	DeleteService(ctx context.Context, host string) (records.Service, error)
}

// ServiceBatch is implemented by the stores that apply UpdateService to
// many services in one write transaction: the agents' heartbeats that
// arrive together commit once, not once each.
type ServiceBatch interface {
	// UpdateServices applies fn to the service of each of hosts (i its
	// index in hosts), in that order, in one transaction: every one is
	// written or none is. A missing service is ErrNotFound, and an error
	// from fn aborts the whole update. Callers that may run at once pass
	// hosts sorted, so that stores locking rows lock them in one order.
	UpdateServices(ctx context.Context, hosts []string, fn func(i int, s *records.Service) error) ([]records.Service, error)
}

// HostRecordBatch is implemented by the stores that write many host
// records in one write transaction: the agents' metrics reports that
// arrive together commit once, not once each.
type HostRecordBatch interface {
	// PutHostRecords writes each of recs, in that order, as PutHostRecord
	// does (each notes a ChangeHost), in one transaction: every one is
	// written or none is. Callers that may run at once pass recs sorted
	// by host, so that stores locking rows lock them in one order.
	PutHostRecords(ctx context.Context, recs []records.HostRecord) error
}

// HostBatchReader is implemented by the stores that read many host
// records or services by host in one query: a view that follows the
// change stream re-reads the hosts that changed without a round trip
// for each.
type HostBatchReader interface {
	// GetHostRecords returns the host records of hosts, sorted by host
	// and each once; a host without one is left out.
	GetHostRecords(ctx context.Context, hosts []string) ([]records.HostRecord, error)
	// GetServices returns the services of hosts, sorted by host and each
	// once; a host without one is left out.
	GetServices(ctx context.Context, hosts []string) ([]records.Service, error)
}

// Instances is the instance records and their action log.
type Instances interface {
	// CreateInstance stores a new instance with Version 1.
	CreateInstance(ctx context.Context, in records.Instance) (records.Instance, error)
	GetInstance(ctx context.Context, uuid string) (records.Instance, error)
	// UpdateInstance writes in if in.Version is the stored version, and
	// returns it with the next version; otherwise a *placement.ConflictError.
	UpdateInstance(ctx context.Context, in records.Instance) (records.Instance, error)
	DeleteInstance(ctx context.Context, uuid string) error
	// ListInstances lists instances, on one host if host is not empty.
	ListInstances(ctx context.Context, host string) ([]records.Instance, error)
	// ListProjectInstances lists one project's instances (indexed in the
	// SQL stores: a quota count reads only its project's).
	ListProjectInstances(ctx context.Context, project string) ([]records.Instance, error)

	// Instance actions (os-instance-actions): an append-only log per
	// instance, kept after the instance is deleted.

	// CreateInstanceAction records an action; ErrExists if the instance
	// already has one with the same request ID.
	CreateInstanceAction(ctx context.Context, a records.InstanceAction) error
	// ListInstanceActions lists an instance's actions, oldest first (empty,
	// not ErrNotFound, for an instance without any).
	ListInstanceActions(ctx context.Context, instanceUUID string) ([]records.InstanceAction, error)
}

// Migrations is the migration records (live, cold, resize, evacuation).
type Migrations interface {
	// CreateMigration stores a new migration, assigning ID and Version 1.
	CreateMigration(ctx context.Context, m records.Migration) (records.Migration, error)
	GetMigration(ctx context.Context, id int64) (records.Migration, error)
	// UpdateMigration is UpdateInstance's counterpart for migrations.
	UpdateMigration(ctx context.Context, m records.Migration) (records.Migration, error)
	ListMigrations(ctx context.Context, f MigrationFilter) ([]records.Migration, error)
	// BeginMove starts a move in one write: it writes in as
	// UpdateInstance does (ErrNotFound for an unknown instance, a
	// *placement.ConflictError if in.Version is not the stored version)
	// and stores m as CreateMigration does, in one transaction — both or
	// neither, so no reader, and no restart, finds the instance in its
	// move's task without the migration that carries it.
	BeginMove(ctx context.Context, in records.Instance, m records.Migration) (records.Instance, records.Migration, error)
}

// Flavors is the flavor records.
type Flavors interface {
	// CreateFlavor stores a flavor; ErrExists if its ID or name is taken.
	CreateFlavor(ctx context.Context, f records.Flavor) (records.Flavor, error)
	GetFlavor(ctx context.Context, id string) (records.Flavor, error)
	// ListFlavors lists flavors sorted by ID.
	ListFlavors(ctx context.Context) ([]records.Flavor, error)
	DeleteFlavor(ctx context.Context, id string) error

	// Flavor extra specs (os-extra_specs writes).

	// UpdateFlavor applies fn to a flavor atomically; its ID and name stay
	// as they are. ErrNotFound if there is no such flavor; an error from fn
	// aborts the update.
	UpdateFlavor(ctx context.Context, id string, fn func(*records.Flavor) error) (records.Flavor, error)
}

// Groups is the compute API's host aggregates and server groups.
type Groups interface {
	// Compute host aggregates and server groups (os-aggregates,
	// os-server-groups). Aggregate writes append a ChangeAggregate entry to
	// the change stream (the scheduler's view reads zones and metadata
	// from them).

	// CreateAggregate stores a new aggregate, assigning its ID;
	// ErrExists if its name is taken.
	CreateAggregate(ctx context.Context, a records.Aggregate) (records.Aggregate, error)
	GetAggregate(ctx context.Context, id int64) (records.Aggregate, error)
	// ListAggregates lists aggregates sorted by ID.
	ListAggregates(ctx context.Context) ([]records.Aggregate, error)
	// UpdateAggregate applies fn to an aggregate atomically; ErrNotFound if
	// it does not exist, ErrExists if fn renames it to a taken name. An
	// error from fn aborts the update.
	UpdateAggregate(ctx context.Context, id int64, fn func(*records.Aggregate) error) (records.Aggregate, error)
	DeleteAggregate(ctx context.Context, id int64) error

	// CreateServerGroup stores a new server group; ErrExists if its UUID
	// is taken.
	CreateServerGroup(ctx context.Context, g records.ServerGroup) (records.ServerGroup, error)
	GetServerGroup(ctx context.Context, uuid string) (records.ServerGroup, error)
	// ListServerGroups lists server groups sorted by UUID.
	ListServerGroups(ctx context.Context) ([]records.ServerGroup, error)
	// UpdateServerGroup applies fn to a server group atomically (members
	// join and leave through it); ErrNotFound if it does not exist.
	UpdateServerGroup(ctx context.Context, uuid string, fn func(*records.ServerGroup) error) (records.ServerGroup, error)
	DeleteServerGroup(ctx context.Context, uuid string) error
}

// KeyPairs is the compute API's key pairs.
type KeyPairs interface {
	// Key pairs (the compute API's os-keypairs), each a user's, unique
	// by (UserID, Name). CreateKeyPair assigns the ID and returns the
	// record; ErrExists if the user has a pair of that name.
	// ListKeyPairs returns a user's pairs by name; GetKeyPair and
	// DeleteKeyPair answer ErrNotFound for a name the user has none of.
	CreateKeyPair(ctx context.Context, kp records.KeyPair) (records.KeyPair, error)
	GetKeyPair(ctx context.Context, userID, name string) (records.KeyPair, error)
	ListKeyPairs(ctx context.Context, userID string) ([]records.KeyPair, error)
	DeleteKeyPair(ctx context.Context, userID, name string) error
}

// Quotas is the compute API's quota limits.
type Quotas interface {
	// Quota limits (the compute API's os-quota-sets): the limits a project
	// has of its own, or with project "" those of the default quota class,
	// by Nova's names (instances, cores, ram, …). GetQuotaLimits returns an
	// empty map if none are set; SetQuotaLimits sets the named ones, keeps
	// the others, and returns them all; DeleteQuotaLimits drops them (no
	// error if there were none).
	GetQuotaLimits(ctx context.Context, project string) (map[string]int64, error)
	SetQuotaLimits(ctx context.Context, project string, limits map[string]int64) (map[string]int64, error)
	DeleteQuotaLimits(ctx context.Context, project string) error
}

// Plans is the move plans.
type Plans interface {
	// Move plans (drain, rebalance, evacuate-all; see records.Plan).

	// CreatePlan stores a new plan, assigning ID (increasing, never
	// reused) and Version 1.
	CreatePlan(ctx context.Context, p records.Plan) (records.Plan, error)
	GetPlan(ctx context.Context, id int64) (records.Plan, error)
	// UpdatePlan writes p if p.Version is the stored version and returns
	// it with the next version; otherwise a *placement.ConflictError.
	UpdatePlan(ctx context.Context, p records.Plan) (records.Plan, error)
	// ListPlans lists plans sorted by ID; activeOnly keeps those not in a
	// final state.
	ListPlans(ctx context.Context, activeOnly bool) ([]records.Plan, error)
}

// Records is every compute record: the rows the SQL stores keep as JSON
// (sqlstore.Records implements it once for both).
type Records interface {
	Hosts
	Instances
	Migrations
	Flavors
	Groups
	KeyPairs
	Quotas
	Plans
}

// Changes is the change stream the scheduler's host view follows.
type Changes interface {
	// Changes returns up to limit entries with Seq > since, oldest first.
	Changes(ctx context.Context, since int64, limit int) ([]Change, error)
	// LastChange returns the newest Seq (0 if none).
	LastChange(ctx context.Context) (int64, error)
}

// Store is keel's persistent state: every role.
type Store interface {
	Placement
	Records
	// Users, projects, roles, token revocations and agent credentials.
	IdentityStore
	Changes
	Close() error
}

// VersionConflict builds the conflict error for a stale record version
// (kind is placement.InstanceVersion, MigrationVersion or PlanVersion).
func VersionConflict(kind placement.ConflictKind, id string, expected, actual int64) error {
	return fmt.Errorf("updating %s %s: %w", kind, id,
		&placement.ConflictError{Kind: kind, UUID: id, Expected: &expected, Actual: &actual})
}

// MatchMigration reports whether m passes f.
func MatchMigration(m records.Migration, f MigrationFilter) bool {
	if f.UUID != "" && m.UUID != f.UUID {
		return false
	}
	if f.InstanceUUID != "" && m.InstanceUUID != f.InstanceUUID {
		return false
	}
	if f.Host != "" && m.SourceHost != f.Host && m.DestHost != f.Host {
		return false
	}
	if f.Status != "" && m.Status != f.Status {
		return false
	}
	if f.ActiveOnly && records.MigrationTerminal(m.Status) {
		return false
	}
	return true
}
