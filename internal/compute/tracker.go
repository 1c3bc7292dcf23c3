package compute

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
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

// ConsumerLister is implemented by stores that can list the consumers
// holding allocations on a provider without copying their allocations
// (the memory store, where those copies were most of an audit's cost). The
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

// GuestLister is the part of the driver the audit reads.
type GuestLister interface {
	Guests(ctx context.Context) ([]Guest, error)
}

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
	rec.FreeRAMMB = rec.MemoryMB - rec.MemoryMBUsed
	rec.FreeDiskGB = rec.LocalGB - rec.LocalGBUsed
	return rec
}

// Drift is what one audit found different and healed.
type Drift struct {
	Host string    `json:"host"`
	At   time.Time `json:"at"`
	// Record lists host-record fields that differed from the hypervisor's
	// truth ("vcpus_used 28→30").
	Record []string `json:"record,omitempty"`
	// Untracked are guests running here that the tracker did not count
	// (e.g. arrivals under the legacy policy); Vanished the reverse.
	Untracked []string `json:"untracked,omitempty"`
	Vanished  []string `json:"vanished,omitempty"`
	// MissingAllocations: guests running here with no allocation for them
	// on this host (an allocation was written). OrphanAllocations:
	// allocations here with no guest and no operation in flight (removed).
	MissingAllocations []string `json:"missing_allocations,omitempty"`
	OrphanAllocations  []string `json:"orphan_allocations,omitempty"`
	// Stray are guests that belong to no instance on this host: an
	// incoming guest no migration is bringing any more, a copy left on the
	// source, or the guest of a deleted instance. The instance and
	// migration records are the truth: the audit removes them (never
	// giving them an allocation, which would take the instance's own).
	Stray []string `json:"stray,omitempty"`
	// Lost are instances recorded on this host, active, whose guest is not
	// here. With a store that can (InstanceFaulter) the audit puts each in
	// ERROR with a fault saying so (Faulted lists those), as Nova's
	// power-state sync shows a guest the hypervisor no longer has; the next
	// audit then releases the allocation of the ERROR instance.
	Lost []string `json:"lost,omitempty"`
	// Faulted are the Lost instances this audit put in ERROR (not counted
	// again by Count).
	Faulted []string `json:"faulted,omitempty"`
}

// InstanceFaulter is implemented by stores that can put an instance whose
// guest is lost in ERROR: FaultLostInstance does it only if the instance
// is still ACTIVE on host with no task (a versioned update), and reports
// whether it did.
type InstanceFaulter interface {
	FaultLostInstance(ctx context.Context, uuid, host, fault string) (bool, error)
}

// Count is the number of differences found.
func (d Drift) Count() int {
	return len(d.Record) + len(d.Untracked) + len(d.Vanished) + len(d.MissingAllocations) + len(d.OrphanAllocations) + len(d.Stray) + len(d.Lost)
}

func (d Drift) String() string {
	if d.Count() == 0 {
		return d.Host + ": no drift"
	}
	var parts []string
	add := func(name string, xs []string) {
		if len(xs) > 0 {
			parts = append(parts, fmt.Sprintf("%s [%s]", name, strings.Join(xs, ", ")))
		}
	}
	add("record", d.Record)
	add("untracked", d.Untracked)
	add("vanished", d.Vanished)
	add("missing allocations", d.MissingAllocations)
	add("orphan allocations", d.OrphanAllocations)
	add("stray guests", d.Stray)
	add("lost guests", d.Lost)
	add("put in ERROR", d.Faulted)
	return d.Host + ": " + strings.Join(parts, "; ")
}

// Audit is the periodic update_available_resource: it compares the
// driver's guests with the tracked instances, the allocations and the host
// record, heals what it safely can, and returns what it found.
//
// It reads the allocations first, then the migrations in flight, then the
// guests: a claim that commits after the first read is never seen (so
// never taken for an orphan), and a migration's record exists before its
// claim. Every write names the consumer generation it read, so anything
// that changed meanwhile makes the write a conflict, which the audit
// skips. It never removes the allocation of an instance recorded on this
// host, and never allocates for a guest without an instance recorded here:
// those it reports (Lost, Stray) for an operator.
func (t *Tracker) Audit(ctx context.Context) (Drift, error) {
	d := Drift{Host: t.cfg.Host, At: t.clock.Now()}
	consumers, headers, err := t.consumersOn(ctx)
	if err != nil {
		return d, fmt.Errorf("audit of %s: listing allocations: %w", t.cfg.Host, err)
	}
	inFlight, err := t.migrationsInFlight(ctx)
	if err != nil {
		return d, err
	}
	guests, err := t.driver.Guests(ctx)
	if err != nil {
		return d, fmt.Errorf("audit of %s: listing guests: %w", t.cfg.Host, err)
	}
	here := make(map[string]*Guest, len(guests)) // into guests: a guest is a large record
	for i := range guests {
		here[guests[i].UUID] = &guests[i]
	}

	t.mu.Lock()
	before := t.record
	// The tracked instances become the guests here, with their flavors —
	// but an incoming guest, not ours until
	// post_live_migration_at_destination — and those with an operation in
	// flight and no guest yet (a spawn in flight stays counted). Updated in
	// place: an audit that finds nothing changed allocates nothing here.
	for uuid := range t.tracked {
		if g, ok := here[uuid]; (!ok || g.State == GuestIncoming) && t.busy[uuid] == 0 {
			d.Vanished = append(d.Vanished, uuid)
			delete(t.tracked, uuid)
		}
	}
	for _, g := range guests {
		if g.State == GuestIncoming {
			continue
		}
		if _, ok := t.tracked[g.UUID]; !ok {
			d.Untracked = append(d.Untracked, g.UUID)
		}
		t.tracked[g.UUID] = g.Flavor
	}
	busy := make(map[string]bool, len(t.busy))
	for u := range t.busy {
		busy[u] = true
	}
	t.mu.Unlock()

	if err := t.auditAllocations(ctx, consumers, headers, here, inFlight, busy, &d); err != nil {
		return d, err
	}
	t.faultLost(ctx, &d)
	if err := t.WriteRecord(ctx); err != nil {
		return d, err
	}
	after := t.Record()
	if before.Host != "" {
		d.Record = recordDiff(before, after)
	}
	sort.Strings(d.Untracked)
	sort.Strings(d.Vanished)
	return d, nil
}

// consumersOn lists the consumers holding allocations on this host's
// provider; headers reports that they came without their allocations
// (ConsumerLister).
func (t *Tracker) consumersOn(ctx context.Context) (consumers []placement.Consumer, headers bool, err error) {
	if l, ok := t.store.(ConsumerLister); ok {
		consumers, err = l.ConsumerHeadersOn(ctx, t.cfg.ProviderUUID)
		return consumers, true, err
	}
	consumers, err = t.store.ConsumersOn(ctx, t.cfg.ProviderUUID)
	return consumers, false, err
}

// withAllocations returns c, listed without its allocations, as stored
// now; ok is false if it has changed since it was listed (or is gone), as
// a write naming the listed generation would find.
func (t *Tracker) withAllocations(ctx context.Context, c placement.Consumer) (placement.Consumer, bool, error) {
	cur, err := t.store.GetConsumer(ctx, c.UUID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return c, false, nil
	case err != nil:
		return c, false, fmt.Errorf("audit of %s: reading allocations of %s: %w", t.cfg.Host, c.UUID, err)
	}
	return cur, cur.Generation == c.Generation, nil
}

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
	for attempt := 0; ; attempt++ {
		inst, err := f.Store.GetInstance(ctx, uuid)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("putting lost instance %s in ERROR: %w", uuid, err)
		}
		if inst.VMState != records.VMActive || inst.TaskState != records.TaskNone || inst.Host != host {
			return false, nil
		}
		inst.VMState, inst.Fault, inst.UpdatedAt = records.VMError, fault, f.Clock.Now()
		_, err = f.Store.UpdateInstance(ctx, inst)
		switch {
		case placement.IsConflict(err) && attempt < 3:
			continue
		case err != nil:
			return false, fmt.Errorf("putting lost instance %s in ERROR: %w", uuid, err)
		}
		return true, nil
	}
}

// faultLost puts the lost instances in ERROR, if the store can.
func (t *Tracker) faultLost(ctx context.Context, d *Drift) {
	f, ok := t.store.(InstanceFaulter)
	if !ok {
		return
	}
	for _, uuid := range d.Lost {
		fault := fmt.Sprintf("the guest of this instance is gone from its host %s (found by the host's periodic audit at %s); "+
			"its allocation is released — delete the instance, or rebuild it", t.cfg.Host, d.At.UTC().Format(time.RFC3339))
		done, err := f.FaultLostInstance(ctx, uuid, t.cfg.Host, fault)
		if err != nil {
			// The next audit finds it again.
			continue
		}
		if done {
			d.Faulted = append(d.Faulted, uuid)
		}
	}
}

// migrationsInFlight returns the active migrations touching this host by
// instance UUID and by migration UUID.
func (t *Tracker) migrationsInFlight(ctx context.Context) (map[string]bool, error) {
	migs, err := t.store.ListMigrations(ctx, store.MigrationFilter{Host: t.cfg.Host, ActiveOnly: true})
	if err != nil {
		return nil, fmt.Errorf("audit of %s: listing migrations: %w", t.cfg.Host, err)
	}
	out := map[string]bool{}
	for _, m := range migs {
		out[m.InstanceUUID] = true
		out[m.UUID] = true
	}
	return out, nil
}

// auditAllocations heals the allocations on this host's provider against
// the guests: orphans (deleted or errored instances, instances recorded
// elsewhere, finished migrations) lose their allocation here; guests of
// instances recorded here with no allocation here get one. headers: the
// consumers were listed without their allocations (consumersOn).
func (t *Tracker) auditAllocations(ctx context.Context, consumers []placement.Consumer, headers bool, here map[string]*Guest, inFlight, busy map[string]bool, d *Drift) error {
	rp := t.cfg.ProviderUUID
	held := map[string]bool{}
	for _, c := range consumers {
		held[c.UUID] = true
		if _, ok := here[c.UUID]; ok || inFlight[c.UUID] || busy[c.UUID] {
			continue
		}
		orphan, lost, err := t.isOrphan(ctx, c)
		if err != nil {
			return err
		}
		if lost {
			d.Lost = append(d.Lost, c.UUID)
		}
		if !orphan {
			continue
		}
		if headers {
			var same bool
			if c, same, err = t.withAllocations(ctx, c); err != nil {
				return err
			} else if !same {
				continue // it changed since we listed it: leave it to its owner
			}
		}
		rest := map[string]placement.Resources{}
		for p, r := range c.Allocations {
			if p != rp {
				rest[p] = r
			}
		}
		gen := c.Generation
		_, err = t.store.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: c.UUID, ConsumerGeneration: &gen, Allocations: rest, Type: c.Type})
		switch {
		case placement.IsConflict(err):
			continue // it changed since we read it: leave it to its owner
		case err != nil:
			return fmt.Errorf("audit of %s: removing orphan allocation of %s: %w", t.cfg.Host, c.UUID, err)
		}
		d.OrphanAllocations = append(d.OrphanAllocations, c.UUID)
	}
	for uuid, gp := range here {
		g := *gp
		// An incoming guest is protected by its migration being in
		// flight, not by a busy mark: a pre_live_migration that ran after
		// its migration had given up (and rolled back) leaves one.
		if (held[uuid] && g.State != GuestIncoming) || inFlight[uuid] || (busy[uuid] && g.State != GuestIncoming) {
			continue
		}
		inst, err := t.store.GetInstance(ctx, uuid)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// No instance: a leftover of a delete this host missed.
			t.removeStray(ctx, g, d)
			continue
		case errors.Is(err, store.ErrForbidden):
			// The servers say the instance has nothing to do with this
			// host (it runs elsewhere, nothing moves it here, nothing of
			// it is allocated here): a copy left behind.
			t.removeStray(ctx, g, d)
			continue
		case err != nil:
			return fmt.Errorf("audit of %s: reading instance %s: %w", t.cfg.Host, uuid, err)
		case inst.VMState == records.VMBuilding || inst.TaskState != records.TaskNone:
			continue // something is happening to it (a move settles last)
		case inst.Host != t.cfg.Host:
			// A migration that ended without rollback here, or a copy left
			// behind: the instance runs where its record says.
			t.removeStray(ctx, g, d)
			continue
		case g.State == GuestIncoming:
			// The migration settled the instance here but its last step
			// (post_live_migration_at_destination) never ran: finish it.
			if !t.adopt(ctx, inst, d) || held[uuid] {
				continue
			}
		case inst.VMState != records.VMActive:
			continue
		}
		// The instance runs here with nothing allocated here: allocate,
		// replacing whatever it holds elsewhere by mistake — unless that
		// changed since we read it.
		var (
			gen  *int64
			held map[string]placement.Resources
		)
		if c, err := t.store.GetConsumer(ctx, uuid); err == nil {
			gen, held = &c.Generation, c.Allocations
			if t.heldInTree(ctx, c) {
				continue // its claim is on this host's provider tree, below the host's own provider
			}
		} else if !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("audit of %s: reading allocations of %s: %w", t.cfg.Host, uuid, err)
		}
		_, err = t.store.WriteAllocations(ctx, placement.AllocationWrite{
			ConsumerUUID: uuid, ConsumerGeneration: gen, Type: placement.ConsumerInstance,
			ProjectID: inst.ProjectID, UserID: inst.UserID,
			Allocations: t.claimHere(ctx, inst, g, held),
		})
		switch {
		case placement.IsConflict(err):
			continue
		case err != nil && !placement.IsCapacity(err):
			return fmt.Errorf("audit of %s: writing missing allocation of %s: %w", t.cfg.Host, uuid, err)
		}
		d.MissingAllocations = append(d.MissingAllocations, uuid)
	}
	sort.Strings(d.OrphanAllocations)
	sort.Strings(d.MissingAllocations)
	sort.Strings(d.Stray)
	sort.Strings(d.Lost)
	return nil
}

// claimHere returns the allocation the audit writes for instance inst
// (guest g) found running here without one, holding held elsewhere: what
// keel's scheduler would claim for its flavor on this host's provider
// tree — children such as NUMA cells or GPUs, pools sharing with the
// host — through placement.Reclaim, when the store lists providers; the
// guest's flavor on the host's provider otherwise, or when it does not
// fit (the store then refuses the write, as it refused before trees).
func (t *Tracker) claimHere(ctx context.Context, inst records.Instance, g Guest, held map[string]placement.Resources) map[string]placement.Resources {
	flat := map[string]placement.Resources{t.cfg.ProviderUUID: g.Flavor.Resources()}
	ps, ok := t.store.(interface {
		ProviderSummaries(ctx context.Context, uuids []string) ([]store.ProviderSummary, error)
	})
	if !ok {
		return flat
	}
	q, err := placement.FlavorQuery(inst.Flavor.Resources(), inst.Flavor.ExtraSpecs)
	if err != nil || len(q.Groups) == 0 {
		return flat
	}
	sums, err := ps.ProviderSummaries(ctx, nil)
	if err != nil {
		return flat
	}
	if alloc, ok := placement.Reclaim(store.TreeProviders(sums), q, t.cfg.ProviderUUID, held); ok {
		return alloc
	}
	return flat
}

// heldInTree reports whether c holds anything on a provider of this
// host's tree below its own (a NUMA cell, a GPU: placement's candidates
// may put a whole claim there). It asks only a store that lists
// providers; others have no trees.
func (t *Tracker) heldInTree(ctx context.Context, c placement.Consumer) bool {
	ps, ok := t.store.(interface {
		ProviderSummaries(ctx context.Context, uuids []string) ([]store.ProviderSummary, error)
	})
	if !ok || len(c.Allocations) == 0 {
		return false
	}
	for p := range c.Allocations {
		for cur, depth := p, 0; cur != "" && depth < 1000; depth++ {
			if cur == t.cfg.ProviderUUID {
				return true
			}
			sums, err := ps.ProviderSummaries(ctx, []string{cur})
			if err != nil || len(sums) == 0 {
				break
			}
			cur = sums[0].ParentUUID
		}
	}
	return false
}

// adopt finishes the arrival of an incoming guest whose instance is
// recorded here, and counts it.
func (t *Tracker) adopt(ctx context.Context, inst records.Instance, d *Drift) bool {
	finisher, ok := t.driver.(interface {
		PostLiveMigrationAtDestination(ctx context.Context, inst records.Instance) error
	})
	if !ok {
		return false
	}
	if err := finisher.PostLiveMigrationAtDestination(ctx, inst); err != nil {
		return false
	}
	t.mu.Lock()
	t.tracked[inst.UUID] = inst.Flavor
	t.mu.Unlock()
	d.Untracked = append(d.Untracked, inst.UUID)
	return true
}

// removeStray removes a guest that belongs to no instance on this host —
// the instance and migration records are the truth — and reports it.
func (t *Tracker) removeStray(ctx context.Context, g Guest, d *Drift) {
	d.Stray = append(d.Stray, g.UUID)
	cleaner, ok := t.driver.(interface {
		Destroy(ctx context.Context, uuid string) error
		RollbackLiveMigrationAtDestination(ctx context.Context, uuid string) error
	})
	if !ok {
		return
	}
	var err error
	if g.State == GuestIncoming {
		err = cleaner.RollbackLiveMigrationAtDestination(ctx, g.UUID)
	} else {
		err = cleaner.Destroy(ctx, g.UUID)
	}
	if err != nil {
		d.Stray[len(d.Stray)-1] += " (removal failed: " + err.Error() + ")"
		return
	}
	t.mu.Lock()
	delete(t.tracked, g.UUID)
	delete(t.busy, g.UUID) // what marked it busy is over
	t.mu.Unlock()
}

// isOrphan decides whether an allocation here with no guest here and no
// operation in flight should go. lost reports an instance recorded here,
// active, whose guest is gone: its allocation stays (an operator decides).
func (t *Tracker) isOrphan(ctx context.Context, c placement.Consumer) (orphan, lost bool, err error) {
	if c.Type == placement.ConsumerMigration {
		ms, err := t.store.ListMigrations(ctx, store.MigrationFilter{UUID: c.UUID, Host: t.cfg.Host})
		if err != nil {
			return false, false, fmt.Errorf("audit of %s: reading migration %s: %w", t.cfg.Host, c.UUID, err)
		}
		// A migration that started after we listed those in flight is
		// still active: not an orphan.
		return len(ms) == 0 || records.MigrationTerminal(ms[0].Status), false, nil
	}
	inst, err := t.store.GetInstance(ctx, c.UUID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return true, false, nil // the instance is gone
	case err != nil:
		return false, false, fmt.Errorf("audit of %s: reading instance %s: %w", t.cfg.Host, c.UUID, err)
	case inst.VMState == records.VMBuilding || inst.TaskState != records.TaskNone:
		return false, false, nil // scheduled here, or being moved or deleted
	case inst.VMState == records.VMError || inst.VMState == records.VMDeleted:
		return true, false, nil
	case inst.Host != t.cfg.Host:
		return true, false, nil // it lives elsewhere, and is not moving
	}
	return false, true, nil
}

func recordDiff(a, b records.HostRecord) []string {
	var out []string
	cmp := func(name string, x, y int64) {
		if x != y {
			out = append(out, fmt.Sprintf("%s %d→%d", name, x, y))
		}
	}
	cmp("vcpus_used", a.VCPUsUsed, b.VCPUsUsed)
	cmp("memory_mb_used", a.MemoryMBUsed, b.MemoryMBUsed)
	cmp("local_gb_used", a.LocalGBUsed, b.LocalGBUsed)
	cmp("running_vms", a.RunningVMs, b.RunningVMs)
	return out
}
