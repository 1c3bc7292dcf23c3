// Package conductor drives the boot and live-migration flows: it asks the
// scheduler for hosts, writes claims and allocation moves in the store,
// calls the agents, and feeds their answers to the pure state machine in
// package migration, saving the migration record after every step so that
// recovery can finish or roll back what a restart interrupted.
package conductor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"keel/internal/boot"
	"keel/internal/clock"
	"keel/internal/flow"
	"keel/internal/lifecycle"
	"keel/internal/migration"
	"keel/internal/placement"
	"keel/internal/rebalance"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store"
)

// ComputeAPI is what the conductor asks of one agent (RPC call/cast).
type ComputeAPI interface {
	BuildAndRunInstance(ctx context.Context, inst records.Instance) error
	TerminateInstance(ctx context.Context, uuid string) error
	CheckCanLiveMigrateDestination(ctx context.Context, inst records.Instance, source string) error
	PreLiveMigration(ctx context.Context, inst records.Instance) (map[string]string, error)
	// LiveMigration and ResizeInstance carry the version of the migration
	// record they are made from: the agent refuses one older than a
	// version it has seen (no copy for a flow that moved on).
	LiveMigration(ctx context.Context, migID, version int64, inst records.Instance, dest string, data map[string]string) error
	AbortLiveMigration(ctx context.Context, uuid string) error
	// CheckCopy asks the source of migration migID whether it runs the
	// copy (or holds its unreported end); if not, the cast never reached
	// it, and it reports the copy ended, interrupted (CopyDone).
	CheckCopy(ctx context.Context, migID int64) error
	ForceCompleteLiveMigration(ctx context.Context, uuid string) error
	PostLiveMigrationAtSource(ctx context.Context, inst records.Instance) error
	PostLiveMigrationAtDestination(ctx context.Context, inst records.Instance) error
	RollbackLiveMigrationAtDestination(ctx context.Context, inst records.Instance) error

	// A cold migration's and resize's steps (Nova's names). inst carries
	// the flavor the host is to hold: the new one at the destination, the
	// old one for finish_revert_resize.
	// PrepResize answers with the destination's migrate data (where the
	// disk is to go; nil when the driver needs none), which ResizeInstance
	// hands the source.
	PrepResize(ctx context.Context, inst records.Instance, source string) (map[string]string, error)
	// ResizeInstance stops the guest and moves its disk to dest; the agent
	// reports the end as a copy's (CopyDone of migID).
	ResizeInstance(ctx context.Context, migID, version int64, inst records.Instance, dest string, data map[string]string) error
	FinishResize(ctx context.Context, inst records.Instance) error
	ConfirmResize(ctx context.Context, inst records.Instance) error
	RevertResize(ctx context.Context, inst records.Instance) error
	FinishRevertResize(ctx context.Context, inst records.Instance) error
	// RebuildInstance spawns an evacuated instance's guest on this host;
	// the agent reports the end as a copy's (CopyDone of migID).
	RebuildInstance(ctx context.Context, migID int64, inst records.Instance) error
}

// Computes finds the agent of a host.
type Computes interface {
	Compute(host string) (ComputeAPI, error)
}

// Hooks let the simulator and metrics observe the flows. Any may be nil.
type Hooks struct {
	// Decision is called after every scheduling decision.
	Decision func(kind string, inst records.Instance, sel scheduler.Selection, err error)
	// MigrationDone is called when a migration reaches a terminal status.
	MigrationDone func(m records.Migration)
	// BuildDone is called when a boot ends (ACTIVE or ERROR).
	BuildDone func(inst records.Instance)
}

// Config holds the conductor's options.
type Config struct {
	// MaxConcurrentLiveMigrations per source host (Nova's
	// max_concurrent_live_migrations; default 1, 0 means 1).
	MaxConcurrentLiveMigrations int
	// MaxAttempts is how many destinations a migration claims and checks
	// ([scheduler] max_attempts, default 3).
	MaxAttempts int
	// NewID makes UUIDs for new instances and migrations (default: random
	// v4; the simulator passes a counter so runs replay exactly).
	NewID func() string

	// Owner is this keel server replica's name ([keel] server_name). When
	// set, the conductor heartbeats it in the store (a service record of
	// binary records.ServerBinary), records it as the owner of the
	// migrations it creates or takes over, and resumes only migrations
	// that are unowned, its own, or owned by a replica whose heartbeat is
	// older than ServiceDownTime (see Recover, Sweep and RunOwnership).
	// Empty turns ownership off: Recover resumes every active migration
	// (one server alone).
	Owner string
	// ServiceDownTime is how old a replica's heartbeat must be for its
	// migrations to be taken over ([DEFAULT] service_down_time); 0 means
	// replicas are never judged dead.
	ServiceDownTime time.Duration
	// AllowResizeToSameHost lets a resize keep the instance on its host
	// (Nova's allow_resize_to_same_host).
	AllowResizeToSameHost bool
	// ResizeConfirmWindow confirms a resize or cold migration left in
	// VERIFY_RESIZE this long (Nova's resize_confirm_window); 0 never does.
	ResizeConfirmWindow time.Duration
	// BuildTimeout is how long a boot may build before it ends in ERROR
	// ([DEFAULT] instance_build_timeout); 0 turns it off.
	BuildTimeout time.Duration
	// CopyStallTimeout is how long a live migration's memory copy may go
	// without a report from its source before it is aborted and rolled
	// back ([keel] migration_stall_timeout); 0 turns it off.
	CopyStallTimeout time.Duration
	// StallAfter is how long a flow this replica owns may stay in a step
	// with nothing in flight (an action could not be done: the store or an
	// agent failed) before the sweep resumes it; 0 means ServiceDownTime,
	// or 60 s.
	StallAfter time.Duration
	// HeartbeatInterval is how often RunOwnership heartbeats ([DEFAULT]
	// report_interval; 0 means ServiceDownTime/3, or 10s).
	HeartbeatInterval time.Duration
	// Quota checks boots against the projects' quotas; nil admits all.
	Quota Admission
	// MaxConcurrentIncomingLiveMigrations caps the live migrations into
	// one destination ([keel] max_concurrent_incoming_live_migrations),
	// MaxConcurrentLiveMigrationsTotal those of the whole cloud ([keel]
	// max_concurrent_live_migrations_total); 0 means unlimited. Both hold
	// for single migrations (their slots) and for plans' moves.
	MaxConcurrentIncomingLiveMigrations int
	MaxConcurrentLiveMigrationsTotal    int
	// PlanTick is how often the plan executor looks at its plans when
	// nothing woke it (0: 1 s).
	PlanTick time.Duration
	// RebalanceInterval turns the periodic rebalance on ([keel]
	// rebalance_interval; 0: off): RunRebalance plans a rebalance this
	// often and applies it. RebalanceThreshold and RebalanceMaxMoves are
	// the planner's threshold (0: 0.10) and move cap (0: none).
	RebalanceInterval  time.Duration
	RebalanceThreshold float64
	RebalanceMaxMoves  int
	// RebalanceBy is what the periodic rebalance balances ([keel]
	// rebalance_by): "measured" for the hosts' measured use, anything
	// else the RAM claimed.
	RebalanceBy string
	// ShelvedOffloadTime is [DEFAULT] shelved_offload_time: 0 offloads a
	// shelved server at once, a negative value never, a positive one
	// after that long (see lifecycle.go).
	ShelvedOffloadTime time.Duration
	// Images is where snapshots (createImage, createBackup, shelve) are
	// written; nil fails them.
	Images Images
}

// Admission is the quota check the conductor makes (quota.Enforcer). Its
// refusals wrap quota.ErrExceeded and are returned to the caller with the
// instance record deleted.
type Admission interface {
	// AdmitBoot is called with a new instance's record already in the
	// store (so racing boots see each other's) and before it joins a
	// group or is scheduled. A resize or unshelve that adds usage calls
	// it the same way once the instance's record counts the new usage.
	AdmitBoot(ctx context.Context, inst records.Instance) error
	// AdmitResize is called for a resize that adds usage, with the
	// resized instance's record already carrying its new flavor
	// (ResizeFlavor) in the store, so racing resizes and boots see each
	// other's, and before anything is claimed.
	AdmitResize(ctx context.Context, inst records.Instance) error
	// GroupMembersLimit is the most members a server group of the project
	// may have (-1: unlimited), checked as the member joins.
	GroupMembersLimit(ctx context.Context, project string) (int64, error)
}

// Store is the part of the store the conductor reads and writes: the
// allocations it claims and moves, the records its flows drive, and what a
// rebalance plan reads of the cloud.
type Store interface {
	store.Allocations
	rebalance.Source
	store.Hosts
	store.Instances
	store.Migrations
	store.Groups
	store.Plans
}

// Conductor runs the flows.
type Conductor struct {
	cfg    Config
	store  Store
	sched  *scheduler.Scheduler
	agents agents
	place  *placer
	// moves performs the move machines' actions (moveeffects.go),
	// builds the boot machine's (boot.go), lifeFx the lifecycle
	// machine's (lifecycle.go, snapshot.go).
	moves   *moveEffects
	builds  *bootEffects
	lifeFx  *lifecycleEffects
	machine migration.Machine
	boots   boot.Machine
	// flows is the flow driver: recovery, take-over and deadlines of
	// every flow, and the one per-record lock map (see flows.go).
	flows *flow.Driver
	// lifecycles is the lifecycle actions' flow (its machine, records and
	// effect table), which the driver's loop runs.
	lifecycles *flow.Flow[records.Instance, lifecycle.Event, lifecycle.Action]
	// bootRuns is the boots' flow, which the driver's loop runs
	// (StepBoot).
	bootRuns *flow.Flow[records.Instance, boot.Event, boot.Action]
	// plans is the plan API and executor (drain, rebalance,
	// evacuate-all), with their flow (plans.go).
	plans *Plans
	// migrations is the moves' flow (live, cold, resize, evacuation),
	// which the driver's loop runs (Handle).
	migrations *flow.Flow[records.Migration, migration.Event, migration.Action]
	clock      clock.Clock
	log        *slog.Logger
	hooks      Hooks

	// slots counts the live-migration slots this replica holds and the
	// migrations waiting for one.
	slots *slots

	// tasks are the goroutines and timers the conductor started, which
	// Close waits for.
	tasks *tasks
}

// New returns a conductor.
func New(cfg Config, st Store, sched *scheduler.Scheduler, computes Computes, clk clock.Clock, log *slog.Logger, hooks Hooks) *Conductor {
	if cfg.MaxConcurrentLiveMigrations <= 0 {
		cfg.MaxConcurrentLiveMigrations = 1
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 3
	}
	if log == nil {
		log = slog.Default()
	}
	if cfg.NewID == nil {
		cfg.NewID = uuid.NewString
	}
	c := &Conductor{cfg: cfg, store: st, sched: sched, agents: agents{computes}, clock: clk, log: log, hooks: hooks,
		slots: &slots{tab: newSlotTable(cfg.MaxConcurrentLiveMigrations, cfg.MaxConcurrentIncomingLiveMigrations, cfg.MaxConcurrentLiveMigrationsTotal)},
		tasks: newTasks()}
	stall := c.stallAfter()
	c.machine = migration.Machine{MaxAttempts: cfg.MaxAttempts, CopyStallTimeout: cfg.CopyStallTimeout,
		ConfirmWindow: cfg.ResizeConfirmWindow, StallAfter: stall}
	c.boots = boot.Machine{MaxLateChecks: lateCheckAttempts, BuildTimeout: cfg.BuildTimeout, StallAfter: stall}
	c.flows = c.newDriver()
	return c
}

// Plans is the conductor's plan API and executor.
func (c *Conductor) Plans() *Plans { return c.plans }

// requestFor builds the scheduler request for an instance.
func requestFor(inst records.Instance) *scheduler.Request {
	return &scheduler.Request{InstanceUUID: inst.UUID, Flavor: inst.Flavor.Name, Resources: inst.Flavor.Resources(), ExtraSpecs: inst.Flavor.ExtraSpecs}
}

// retryConflicts runs f up to 5 times while it fails with a generation
// conflict (someone else wrote the same consumer between our read and
// write).
func retryConflicts(f func() error) error {
	var err error
	for i := 0; i < 5; i++ {
		if err = f(); err == nil || !placement.IsConflict(err) {
			return err
		}
	}
	return err
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

// agents reaches the hosts' agents; every effect type calls them
// through it.
type agents struct{ computes Computes }

func (a agents) compute(host string) (ComputeAPI, error) {
	api, err := a.computes.Compute(host)
	if err != nil {
		return nil, fmt.Errorf("reaching the agent of %s: %w", host, err)
	}
	return api, nil
}

// call runs f on host's agent.
func (a agents) call(host string, f func(ComputeAPI) error) error {
	api, err := a.compute(host)
	if err != nil {
		return err
	}
	return f(api)
}
