package compute

import (
	"context"
	"errors"
	"fmt"

	"keel/internal/clock"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Optional capabilities: what the tracker and the manager use when the
// store or the reporter they were given has it, and do without otherwise
// (ConsumerLister, ProviderLister, InstanceFaulter, ReportKeeper here;
// MigrationReader and InstanceLister in manager.go). Each names its
// implementers, which assert it at compile time (`var _ compute.X =
// (*T)(nil)`). A driver chooses between two (driver.go): ConsoleReader
// and DetachedCopier; the rest of what it does is Driver.

// ConsumerLister is implemented by stores that can list the consumers
// holding allocations on a provider without copying their allocations:
// memory.Store (where those copies were most of an audit's cost). The
// audit then reads each consumer's UUID, type and generation, and fetches
// the allocations only of one it is about to release, going on only if
// its generation is still the one listed — what a write naming that
// generation would check — so it decides exactly as with ConsumersOn.
type ConsumerLister interface {
	// ConsumerHeadersOn is ConsumersOn without the allocations: the
	// consumers holding allocations on providerUUID, sorted by UUID, each
	// with a nil Allocations.
	ConsumerHeadersOn(ctx context.Context, providerUUID string) ([]placement.Consumer, error)
}

// ProviderLister is implemented by stores that list providers with their
// tree and usage: every store.Store (memory, sqlite, postgres), not the
// agents' rpc.Store (over the bus there are no trees to heal against).
// The audit reads a provider's parents to tell whether a consumer already
// holds its claim on this host's tree (HeldInTree), and the whole tree to
// shape a claim it writes (ClaimAllocation).
type ProviderLister interface {
	ProviderSummaries(ctx context.Context, uuids []string) ([]store.ProviderSummary, error)
}

var _ ProviderLister = store.Store(nil)

// InstanceFaulter is implemented by stores that can put an instance whose
// guest is lost in ERROR, and bring it back when its guest is found:
// FaultLostInstance puts it in ERROR only if it is still ACTIVE on host
// with no task (a versioned update); RestoreFoundInstance makes it ACTIVE
// again, its fault cleared, only if it is in ERROR on host with no task
// and the fault LostFault's (IsLostFault) — no other ERROR is undone.
// Each reports whether it did. Implementers: rpc.Store (over the bus; the
// server applies it with StoreFaulter) and StoreFaulter (in one process:
// a test's store or the simulator's).
type InstanceFaulter interface {
	FaultLostInstance(ctx context.Context, uuid, host, fault string) (bool, error)
	RestoreFoundInstance(ctx context.Context, uuid, host string) (bool, error)
}

var _ InstanceFaulter = StoreFaulter{}

// StoreFaulter implements InstanceFaulter on a store that updates
// instances (the server's, for the agents' calls over the bus; a test's or
// the simulator's in one process).
type StoreFaulter struct {
	Store interface {
		GetInstance(ctx context.Context, uuid string) (records.Instance, error)
		UpdateInstance(ctx context.Context, in records.Instance) (records.Instance, error)
	}
	Clock clock.Clock
}

// FaultLostInstance implements InstanceFaulter: a versioned update, judged
// again from what is there when another writer got in first (a move or a
// delete that started meanwhile wins).
func (f StoreFaulter) FaultLostInstance(ctx context.Context, uuid, host, fault string) (bool, error) {
	return f.update(ctx, uuid, "putting lost instance %s in ERROR", func(inst *records.Instance) bool {
		if inst.VMState != records.VMActive || inst.TaskState != records.TaskNone || inst.Host != host {
			return false
		}
		inst.VMState, inst.Fault = records.VMError, fault
		return true
	})
}

// RestoreFoundInstance implements InstanceFaulter, as FaultLostInstance.
func (f StoreFaulter) RestoreFoundInstance(ctx context.Context, uuid, host string) (bool, error) {
	return f.update(ctx, uuid, "making found instance %s ACTIVE", func(inst *records.Instance) bool {
		if inst.VMState != records.VMError || inst.TaskState != records.TaskNone || inst.Host != host || !IsLostFault(inst.Fault) {
			return false
		}
		inst.VMState, inst.Fault = records.VMActive, ""
		return true
	})
}

// update applies change to instance uuid if change says it applies, with
// a versioned update tried again (from a fresh read) on a conflict;
// doing names the update in its errors.
func (f StoreFaulter) update(ctx context.Context, uuid, doing string, change func(*records.Instance) bool) (bool, error) {
	for attempt := 0; ; attempt++ {
		inst, err := f.Store.GetInstance(ctx, uuid)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf(doing+": %w", uuid, err)
		}
		if !change(&inst) {
			return false, nil
		}
		inst.UpdatedAt = f.Clock.Now()
		_, err = f.Store.UpdateInstance(ctx, inst)
		switch {
		case placement.IsConflict(err) && attempt < 3:
			continue
		case err != nil:
			return false, fmt.Errorf(doing+": %w", uuid, err)
		}
		return true, nil
	}
}

// GuestRemover is what the audit needs of its driver (a GuestLister) to
// remove a stray guest: every Driver (fake.Driver, qemu.Driver) has it;
// with a driver that only lists guests the audit reports strays and
// leaves them.
type GuestRemover interface {
	Destroy(ctx context.Context, uuid string) error
	RollbackLiveMigrationAtDestination(ctx context.Context, uuid string) error
}

// ArrivalFinisher is what the audit needs of its driver to adopt an
// incoming guest whose instance the records settled here: every Driver
// (fake.Driver, qemu.Driver) has it.
type ArrivalFinisher interface {
	PostLiveMigrationAtDestination(ctx context.Context, inst records.Instance) error
}

var (
	_ GuestRemover    = Driver(nil)
	_ ArrivalFinisher = Driver(nil)
)

// CopyDestination is the part of DetachedCopier that keeps a memory
// copy's destination host with the copy, so that a copy resumed after a
// restart reports its end having asked the destination for its guest.
type CopyDestination interface {
	DestinationOf(uuid string) string
}

// ReportKeeper is implemented by reporters that keep reports durably and
// deliver them later (Outbox): they tell which reports they still hold,
// so a restarted agent does not report a build or a copy twice, and an
// abort of a copy whose end is already kept does not end it again.
type ReportKeeper interface {
	HasBuild(instanceUUID string) bool
	HasCopy(migID int64) bool
}
