package compute

import (
	"context"
	"fmt"
	"sync"
	"time"

	"keel/internal/clock"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// HostConfig describes a host's hardware and Nova's per-host options.
type HostConfig struct {
	Host         string
	ProviderUUID string
	VCPUs        int64
	MemoryMB     int64
	LocalGB      int64
	// Allocation ratios (Nova's cpu/ram/disk_allocation_ratio).
	CPUAllocationRatio  float64
	RAMAllocationRatio  float64
	DiskAllocationRatio float64
	// ReservedHostMemoryMB is [DEFAULT] reserved_host_memory_mb (512 by
	// default — set it explicitly; zero means zero).
	ReservedHostMemoryMB int64
	ReservedHostDiskMB   int64
	// WriteDestRecord: the destination writes its host record as soon as a
	// migration lands (false reproduces Nova's legacy behaviour, where it
	// waits for a spawn or the periodic audit).
	WriteDestRecord bool
	// LostGuestTimeout is [keel] lost_guest_timeout: how long the guest
	// of an ACTIVE instance recorded here may be missing from the audits
	// before the instance is put in ERROR and its allocation released
	// (until then each audit reports it missing and releases nothing).
	// 0 does it at the first audit that misses the guest.
	LostGuestTimeout time.Duration
}

// reservedDiskGB rounds reserved_host_disk_mb up to GiB as Nova does.
func (c HostConfig) reservedDiskGB() int64 { return (c.ReservedHostDiskMB + 1023) / 1024 }

// Inventories returns the placement inventories the host reports.
func (c HostConfig) Inventories() placement.Inventories {
	cpu := placement.NewInventory(c.VCPUs)
	cpu.AllocationRatio = ratio(c.CPUAllocationRatio)
	mem := placement.NewInventory(c.MemoryMB)
	mem.Reserved = c.ReservedHostMemoryMB
	mem.AllocationRatio = ratio(c.RAMAllocationRatio)
	disk := placement.NewInventory(c.LocalGB)
	disk.Reserved = c.reservedDiskGB()
	disk.AllocationRatio = ratio(c.DiskAllocationRatio)
	return placement.Inventories{placement.VCPU: cpu, placement.MemoryMB: mem, placement.DiskGB: disk}
}

func ratio(r float64) float64 {
	if r <= 0 {
		return 1.0
	}
	return r
}

// TrackerStore is what the tracker reads and writes.
type TrackerStore interface {
	PutHostRecord(ctx context.Context, h records.HostRecord) error
	ConsumersOn(ctx context.Context, providerUUID string) ([]placement.Consumer, error)
	GetConsumer(ctx context.Context, uuid string) (placement.Consumer, error)
	WriteAllocations(ctx context.Context, writes ...placement.AllocationWrite) (placement.WritePlan, error)
	GetInstance(ctx context.Context, uuid string) (records.Instance, error)
	ListMigrations(ctx context.Context, f store.MigrationFilter) ([]records.Migration, error)
}

// GuestLister is the part of the driver the audit reads: every Driver
// (fake.Driver, qemu.Driver). The audit also removes stray guests with a
// GuestRemover and adopts incoming ones with an ArrivalFinisher, when the
// driver it was given is one.
type GuestLister interface {
	// Guests lists the host's guests, each once (a UUID names one guest
	// on a host: PlanCount and PlanAudit count on it).
	Guests(ctx context.Context) ([]Guest, error)
}

var _ GuestLister = Driver(nil)

// Tracker is one host's resource tracker.
type Tracker struct {
	cfg    HostConfig
	store  TrackerStore
	driver GuestLister
	clock  clock.Clock

	// writeMu serialises WriteRecord, so that the record stored last is
	// the one computed last (an audit on its timer and an RPC may write at
	// once).
	writeMu sync.Mutex

	mu      sync.Mutex
	tracked map[string]records.Flavor // instances counted in the record
	busy    map[string]int            // instances with an operation in flight
	record  records.HostRecord
	// failedBuilds counts failed spawns since the last success; kept in
	// memory, as Nova keeps it: an agent restart starts again at zero.
	failedBuilds int64
	// metrics and usage are the last measurement written (WriteMetrics):
	// every record written carries them.
	metrics []records.Metric
	usage   []records.InstanceUsage
	// missing holds, for each instance whose guest the last audit missed,
	// when the first audit that missed it in a row began (kept in memory:
	// a restarted agent starts counting again, which only keeps a claim
	// longer).
	missing map[string]time.Time
}

// NewTracker returns a tracker with nothing tracked; call Load (or Audit)
// to pick up the driver's guests.
func NewTracker(cfg HostConfig, st TrackerStore, driver GuestLister, clk clock.Clock) *Tracker {
	return &Tracker{cfg: cfg, store: st, driver: driver, clock: clk,
		tracked: map[string]records.Flavor{}, busy: map[string]int{}}
}

// Config returns the host configuration.
func (t *Tracker) Config() HostConfig { return t.cfg }

// Record returns the last record the tracker wrote.
func (t *Tracker) Record() records.HostRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.record
}

// Track counts an instance without writing the record (initial state).
func (t *Tracker) Track(uuid string, f records.Flavor) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tracked[uuid] = f
}

// Busy marks an operation on an instance in flight (or done, with
// on=false); the audit leaves busy instances' allocations alone.
func (t *Tracker) Busy(uuid string, on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if on {
		t.busy[uuid]++
		return
	}
	if t.busy[uuid]--; t.busy[uuid] <= 0 {
		delete(t.busy, uuid)
	}
}

// isBusy reports whether an operation on uuid is in flight.
func (t *Tracker) isBusy(uuid string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.busy[uuid] > 0
}

// InstanceClaim counts a spawning instance and writes the record (Nova's
// instance_claim).
func (t *Tracker) InstanceClaim(ctx context.Context, inst records.Instance) error {
	t.mu.Lock()
	t.tracked[inst.UUID] = inst.Flavor
	t.mu.Unlock()
	return t.WriteRecord(ctx)
}

// BuildFailed stops counting an instance whose spawn failed, counts the
// failure and writes the record; BuildSucceeded resets the count (Nova's
// build_failed / build_succeeded: a host that keeps failing builds weighs
// less under BuildFailureWeigher until one succeeds).
func (t *Tracker) BuildFailed(ctx context.Context, uuid string) error {
	t.mu.Lock()
	delete(t.tracked, uuid)
	t.failedBuilds++
	t.mu.Unlock()
	return t.WriteRecord(ctx)
}

// BuildSucceeded resets the failed-build count and writes the record.
func (t *Tracker) BuildSucceeded(ctx context.Context) error {
	t.mu.Lock()
	t.failedBuilds = 0
	t.mu.Unlock()
	return t.WriteRecord(ctx)
}

// RemoveInstance stops counting an instance (deleted, failed to spawn, or
// moved away by a live migration) and writes the record.
func (t *Tracker) RemoveInstance(ctx context.Context, uuid string) error {
	t.mu.Lock()
	delete(t.tracked, uuid)
	t.mu.Unlock()
	return t.WriteRecord(ctx)
}

// MigrationArrived counts an instance that a live migration brought here
// (post_live_migration_at_destination) and writes the record — unless the
// host reproduces the legacy behaviour, in which case nothing happens until
// the next spawn or audit.
func (t *Tracker) MigrationArrived(ctx context.Context, inst records.Instance) error {
	if !t.cfg.WriteDestRecord {
		return nil
	}
	t.mu.Lock()
	t.tracked[inst.UUID] = inst.Flavor
	t.mu.Unlock()
	return t.WriteRecord(ctx)
}

// WriteRecord recomputes the host record from the tracked instances and
// writes it.
func (t *Tracker) WriteRecord(ctx context.Context) error {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	t.mu.Lock()
	rec := t.computeLocked()
	t.record = rec
	t.mu.Unlock()
	if err := t.store.PutHostRecord(ctx, rec); err != nil {
		return fmt.Errorf("writing host record of %s: %w", t.cfg.Host, err)
	}
	return nil
}

func (t *Tracker) computeLocked() records.HostRecord {
	c := t.cfg
	rec := records.HostRecord{
		Host: c.Host, ProviderUUID: c.ProviderUUID,
		VCPUs: c.VCPUs, MemoryMB: c.MemoryMB, LocalGB: c.LocalGB,
		MemoryMBUsed: c.ReservedHostMemoryMB, LocalGBUsed: c.reservedDiskGB(),
		CPUAllocationRatio: ratio(c.CPUAllocationRatio), RAMAllocationRatio: ratio(c.RAMAllocationRatio),
		DiskAllocationRatio: ratio(c.DiskAllocationRatio),
		UpdatedAt:           t.clock.Now(),
	}
	for uuid, f := range t.tracked {
		rec.VCPUsUsed += f.VCPUs
		rec.MemoryMBUsed += f.RAMMB
		rec.LocalGBUsed += f.DiskGB
		rec.RunningVMs++
		if t.busy[uuid] > 0 {
			rec.NumIOOps++
		}
	}
	rec.FailedBuilds = t.failedBuilds
	rec.Metrics, rec.InstanceUsage = t.metrics, t.usage
	rec.FreeRAMMB = rec.MemoryMB - rec.MemoryMBUsed
	rec.FreeDiskGB = rec.LocalGB - rec.LocalGBUsed
	return rec
}
