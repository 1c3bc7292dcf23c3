// Package fake is a virt driver that simulates a hypervisor: guests are
// records, a spawn takes SpawnTime, a live migration takes RAM ÷ bandwidth
// and reports progress, failures can be injected per step, and with a
// state file the guests survive a restart of the agent (kill -9 included:
// every change is written to a temporary file, synced and renamed over the
// old one). A change the driver cannot save (a full disk) is undone and
// the operation fails: the driver never reports what it could not make
// durable.
package fake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/compute/workload"
	"keel/internal/records"
)

// Config configures a fake driver.
type Config struct {
	Clock clock.Clock
	// BandwidthMiBps is the memory copy speed (default 1024, i.e. 1 GiB/s).
	BandwidthMiBps float64
	// SpawnTime is how long a spawn takes (default 0: done at once, still
	// reported through the callback).
	SpawnTime time.Duration
	// ProgressEvery is how often a migration reports progress (default:
	// never, only at the end).
	ProgressEvery time.Duration
	// StateFile, if set, persists the guests.
	StateFile string
	// StepTime is how long pre_live_migration,
	// post_live_migration_at_destination and the cold moves' steps
	// (prep_resize, finish_resize, confirm_resize, finish_revert_resize)
	// take (default 0). The change they make lands at the end: a crash
	// meanwhile leaves the guest as before.
	StepTime time.Duration
	// MemoryMB is the host's physical memory; when set, a spawn or an
	// incoming migration that would need more than is free fails as a real
	// hypervisor's would (placement normally prevents it; overcommit by a
	// RAM allocation ratio above 1 is what can reach it). 0: unlimited.
	MemoryMB int64
	// LifecycleTime is how long a lifecycle operation (stop, pause,
	// reboot, …) takes (default: StepTime).
	LifecycleTime time.Duration
	// Log receives the driver's warnings (default: slog.Default()).
	Log *slog.Logger
	// HostCPUs is the host's physical CPUs, what Measure's cpu.percent is
	// a fraction of (0: measured usage unavailable).
	HostCPUs int64
	// Workload is the workload model of a guest whose instance and flavor
	// set none (package workload; empty: such a guest uses nothing).
	Workload string
	// WorkloadSeed seeds the bursty models.
	WorkloadSeed uint64
	// FrequencyMHz is the cpu.frequency Measure reports (default 2400).
	FrequencyMHz float64
	// HostMemoryMB is the host's memory Measure reports as
	// keel.memory.total (0: MemoryMB; both 0: the host's memory is
	// unavailable).
	HostMemoryMB int64
}

// Driver is the fake driver.
type Driver struct {
	cfg    Config
	mu     sync.Mutex
	closed bool // Close was called: the state file is no longer written
	guests map[string]*compute.Guest
	copies map[string]*copyJob
	faults map[string][]fault
	// interrupted holds the guests a restart caught mid-operation.
	interrupted []compute.Guest
	// consoles holds each guest's console events since this driver
	// started (see console.go).
	consoles map[string][]string
	// snapshots holds the disks captured for snapshots, by image, until
	// they are read (see snapshot.go).
	snapshots map[string][]byte
	// holds, by operation, hold the operations started while they are
	// set (Hold).
	holds map[string]chan struct{}
}

type copyJob struct {
	timer  clock.Timer
	ticker clock.Timer
	done   func(error)
	// err is the outcome the copy is heading for (an injected failure, or
	// nil); force-complete delivers it early.
	err      error
	finished bool
}

type fault struct {
	uuid string // "" matches any instance
	msg  string
}

var (
	_ compute.Driver        = (*Driver)(nil)
	_ compute.ConsoleReader = (*Driver)(nil)
)

// DefaultBandwidthMiBps is the copy speed of a driver configured with
// none (live_migration_bandwidth 0, unlimited).
const DefaultBandwidthMiBps = 1024

// New returns a driver, loading the state file if there is one.
func New(cfg Config) (*Driver, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.BandwidthMiBps <= 0 {
		cfg.BandwidthMiBps = DefaultBandwidthMiBps
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	d := &Driver{cfg: cfg, guests: map[string]*compute.Guest{}, copies: map[string]*copyJob{}, faults: map[string][]fault{}, consoles: map[string][]string{}}
	if cfg.StateFile != "" {
		if err := d.load(); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// FailNext makes the next call of step fail with msg, for the instance
// uuid ("" for any instance). Several calls queue up in order.
func (d *Driver) FailNext(step, uuid, msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults[step] = append(d.faults[step], fault{uuid: uuid, msg: msg})
}

// takeFault returns the injected error for step and uuid, if any, and
// consumes it. Called with mu held.
func (d *Driver) takeFault(step, uuid string) error {
	fs := d.faults[step]
	for i, f := range fs {
		if f.uuid == "" || f.uuid == uuid {
			d.faults[step] = append(fs[:i:i], fs[i+1:]...)
			return fmt.Errorf("%s of %s: injected failure: %s", step, uuid, f.msg)
		}
	}
	return nil
}

// Spawn implements compute.Driver.
func (d *Driver) Spawn(_ context.Context, inst records.Instance, done func(error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.takeFault(compute.StepSpawn, inst.UUID); err != nil {
		d.cfg.Clock.AfterFunc(d.cfg.SpawnTime, func() { done(err) })
		return
	}
	if _, ok := d.guests[inst.UUID]; ok {
		d.cfg.Clock.AfterFunc(0, func() { done(fmt.Errorf("spawning %s: guest already exists", inst.UUID)) })
		return
	}
	if err := d.memoryFor(inst); err != nil {
		d.cfg.Clock.AfterFunc(d.cfg.SpawnTime, func() { done(fmt.Errorf("spawning %s: %w", inst.UUID, err)) })
		return
	}
	if _, err := d.modelOf(inst.Metadata[workload.Key], inst.Flavor); err != nil {
		d.cfg.Clock.AfterFunc(0, func() { done(fmt.Errorf("spawning %s: %w", inst.UUID, err)) })
		return
	}
	d.guests[inst.UUID] = &compute.Guest{UUID: inst.UUID, Name: inst.Name, Flavor: inst.Flavor, State: compute.GuestBuilding, Workload: inst.Metadata[workload.Key]}
	if err := d.saveLocked(); err != nil {
		delete(d.guests, inst.UUID)
		err = fmt.Errorf("spawning %s: %w", inst.UUID, err)
		d.cfg.Clock.AfterFunc(0, func() { done(err) })
		return
	}
	d.cfg.Clock.AfterFunc(d.cfg.SpawnTime, func() {
		d.mu.Lock()
		g, ok := d.guests[inst.UUID]
		var err error
		if !ok {
			err = fmt.Errorf("spawning %s: guest destroyed while building", inst.UUID)
		} else {
			g.State = compute.GuestRunning
			if serr := d.saveLocked(); serr != nil {
				// The guest cannot be recorded as running: the spawn
				// fails (the caller destroys what is left).
				g.State = compute.GuestBuilding
				err = fmt.Errorf("spawning %s: %w", inst.UUID, serr)
			}
		}
		d.mu.Unlock()
		done(err)
	})
}

// Destroy implements compute.Driver. Destroying a guest that is not there
// succeeds (it is gone either way); one whose removal cannot be saved
// stays, and Destroy fails.
func (d *Driver) Destroy(_ context.Context, uuid string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, ok := d.guests[uuid]
	if !ok {
		return nil
	}
	delete(d.guests, uuid)
	if err := d.saveLocked(); err != nil {
		d.guests[uuid] = g
		return fmt.Errorf("destroying %s: %w", uuid, err)
	}
	delete(d.consoles, uuid)
	return nil
}

// Guests implements compute.Driver.
func (d *Driver) Guests(_ context.Context) ([]compute.Guest, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	// Sorted by UUID through the keys: sorting the guests themselves
	// (reflective swaps of large records) was most of an audit's cost in
	// the simulator.
	ids := make([]string, 0, len(d.guests))
	for id := range d.guests {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]compute.Guest, len(ids))
	for i, id := range ids {
		out[i] = *d.guests[id]
	}
	return out, nil
}

// FindGuest implements compute.GuestFinder: the guest Guests would list
// for uuid, without copying the others.
func (d *Driver) FindGuest(_ context.Context, uuid string) (compute.Guest, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if g, ok := d.guests[uuid]; ok {
		return *g, true, nil
	}
	return compute.Guest{}, false, nil
}

// CheckCanLiveMigrateDestination implements compute.Driver.
func (d *Driver) CheckCanLiveMigrateDestination(_ context.Context, inst records.Instance) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.takeFault(compute.StepCheckDestination, inst.UUID); err != nil {
		return err
	}
	if _, ok := d.guests[inst.UUID]; ok {
		return fmt.Errorf("instance %s already has a guest on this host", inst.UUID)
	}
	return nil
}

// CheckCanLiveMigrateSource implements compute.Driver.
func (d *Driver) CheckCanLiveMigrateSource(_ context.Context, inst records.Instance) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.takeFault(compute.StepCheckSource, inst.UUID); err != nil {
		return err
	}
	if g, ok := d.guests[inst.UUID]; !ok || (g.State != compute.GuestRunning && g.State != compute.GuestPaused) {
		return fmt.Errorf("instance %s is not running (or paused) on the source", inst.UUID)
	}
	return nil
}

// PreLiveMigration implements compute.Driver.
func (d *Driver) PreLiveMigration(ctx context.Context, inst records.Instance) (map[string]string, error) {
	if err := d.takeTime(ctx); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.takeFault(compute.StepPreLiveMigration, inst.UUID); err != nil {
		return nil, err
	}
	if g, ok := d.guests[inst.UUID]; ok && g.State != compute.GuestIncoming {
		return nil, fmt.Errorf("instance %s already runs here", inst.UUID)
	}
	if _, again := d.guests[inst.UUID]; !again {
		if err := d.memoryFor(inst); err != nil {
			return nil, fmt.Errorf("pre_live_migration of %s: %w", inst.UUID, err)
		}
	}
	old, had := d.guests[inst.UUID]
	d.guests[inst.UUID] = &compute.Guest{UUID: inst.UUID, Name: inst.Name, Flavor: inst.Flavor, State: compute.GuestIncoming, Workload: inst.Metadata[workload.Key]}
	if err := d.saveLocked(); err != nil {
		if had {
			d.guests[inst.UUID] = old
		} else {
			delete(d.guests, inst.UUID)
		}
		return nil, fmt.Errorf("pre_live_migration of %s: %w", inst.UUID, err)
	}
	return map[string]string{"driver": "fake"}, nil
}

// takeTime waits StepTime on the driver's clock (nothing with the default
// of 0, as in the simulator).
func (d *Driver) takeTime(ctx context.Context) error {
	if d.cfg.StepTime <= 0 {
		return nil
	}
	done := make(chan struct{})
	t := d.cfg.Clock.AfterFunc(d.cfg.StepTime, func() { close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}

// memoryFor checks that inst's RAM fits next to every guest here
// (incoming ones included: their memory is reserved). Called with mu held.
func (d *Driver) memoryFor(inst records.Instance) error {
	if d.cfg.MemoryMB <= 0 {
		return nil
	}
	used := int64(0)
	for _, g := range d.guests {
		used += g.Flavor.RAMMB
	}
	if used+inst.Flavor.RAMMB > d.cfg.MemoryMB {
		return fmt.Errorf("not enough memory on the hypervisor: %d MiB needed, %d of %d MiB in use", inst.Flavor.RAMMB, used, d.cfg.MemoryMB)
	}
	return nil
}

// CopyTime is how long the fake driver takes to copy ramMB of memory.
func (d *Driver) CopyTime(ramMB int64) time.Duration {
	return time.Duration(float64(ramMB) / d.cfg.BandwidthMiBps * float64(time.Second))
}

// LiveMigration implements compute.Driver.
func (d *Driver) LiveMigration(_ context.Context, migID int64, inst records.Instance, dest string, _ map[string]string,
	progress func(total, processed, remaining int64), done func(error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.copies[inst.UUID]; ok && !old.finished {
		// The copy in progress keeps its job (abort and force-complete act
		// on it); this one fails without touching the guest.
		err := fmt.Errorf("live migration of %s: a migration of this guest is already in progress", inst.UUID)
		d.cfg.Clock.AfterFunc(0, func() { done(err) })
		return
	}
	fail := d.takeFault(compute.StepLiveMigration, inst.UUID)
	g, ok := d.guests[inst.UUID]
	if fail == nil && (!ok || (g.State != compute.GuestRunning && g.State != compute.GuestPaused)) {
		fail = fmt.Errorf("live migration of %s: guest is not running (or paused) here", inst.UUID)
	}
	dur := d.CopyTime(inst.Flavor.RAMMB)
	total := inst.Flavor.RAMMB << 20
	start := d.cfg.Clock.Now()
	job := &copyJob{done: done, err: fail}
	if fail != nil {
		// A failing copy still takes half its time before it fails.
		dur /= 2
	} else {
		before := g.State
		g.State, g.MigrationID, g.Paused = compute.GuestMigrating, migID, before == compute.GuestPaused
		if err := d.saveLocked(); err != nil {
			// The copy cannot be recorded: it fails at once, the guest
			// here as before.
			g.State, g.MigrationID, g.Paused = before, 0, false
			err = fmt.Errorf("live migration of %s: %w", inst.UUID, err)
			d.cfg.Clock.AfterFunc(0, func() { done(err) })
			return
		}
	}
	d.copies[inst.UUID] = job
	job.timer = d.cfg.Clock.AfterFunc(dur, func() {
		d.mu.Lock()
		ended := d.finishLocked(inst.UUID, job, job.err)
		d.mu.Unlock()
		if ended {
			job.done(job.err)
		}
	})
	if progress != nil && d.cfg.ProgressEvery > 0 && fail == nil {
		var tick func()
		tick = func() {
			d.mu.Lock()
			if job.finished {
				d.mu.Unlock()
				return
			}
			elapsed := d.cfg.Clock.Now().Sub(start)
			processed := min(total, int64(float64(total)*float64(elapsed)/float64(max(dur, 1))))
			job.ticker = d.cfg.Clock.AfterFunc(d.cfg.ProgressEvery, tick)
			d.mu.Unlock()
			progress(total, processed, total-processed)
		}
		job.ticker = d.cfg.Clock.AfterFunc(d.cfg.ProgressEvery, tick)
	}
}

// finishLocked ends a copy job with err: it stops its timers, forgets it,
// and puts a guest whose copy failed back to running. It reports false if
// the job had already ended. Called with mu held; the caller delivers
// job.done after unlocking.
func (d *Driver) finishLocked(uuid string, job *copyJob, err error) bool {
	if job.finished {
		return false
	}
	job.finished = true
	job.timer.Stop()
	if job.ticker != nil {
		job.ticker.Stop()
	}
	if d.copies[uuid] == job {
		delete(d.copies, uuid)
	}
	if g, ok := d.guests[uuid]; ok && err != nil && g.State == compute.GuestMigrating {
		g.State, g.MigrationID, g.Paused = g.Settled(), 0, false
		if serr := d.saveLocked(); serr != nil {
			// The file still says migrating: a restart reports the copy
			// interrupted and the guest running, as it is.
			d.cfg.Log.Warn("fake driver: could not save the end of a failed copy", "instance", uuid, "err", serr)
		}
	}
	return true
}

// endNow ends the copy of uuid at once with err (nil: the job's own
// outcome) and reports it through done on the clock, never before the
// caller returns: the caller (the conductor performing an abort or force
// complete) may hold the lock that done's handler needs.
func (d *Driver) endNow(uuid string, op string, err error) error {
	d.mu.Lock()
	job, ok := d.copies[uuid]
	if !ok {
		d.mu.Unlock()
		return fmt.Errorf("%s %s: %w", op, uuid, ErrNoMigration)
	}
	if err == nil {
		err = job.err
	}
	ended := d.finishLocked(uuid, job, err)
	d.mu.Unlock()
	if ended {
		d.cfg.Clock.AfterFunc(0, func() { job.done(err) })
	}
	return nil
}

// ErrNoMigration is returned when there is no copy to act on.
var ErrNoMigration = errors.New("no live migration in progress for this instance")

// AbortLiveMigration implements compute.Driver: the copy stops at once
// (the guest keeps running here) and reports failure through its done
// callback, asynchronously.
func (d *Driver) AbortLiveMigration(_ context.Context, uuid string) error {
	return d.endNow(uuid, "aborting", fmt.Errorf("migration of %s: %w", uuid, compute.ErrCopyCancelled))
}

// InterruptCopies ends every copy in progress here at once, as a restart
// of the agent does (its guests keep running here): each reports
// compute.ErrCopyRestarted through its done callback, asynchronously.
func (d *Driver) InterruptCopies() {
	d.mu.Lock()
	uuids := make([]string, 0, len(d.copies))
	for uuid := range d.copies {
		uuids = append(uuids, uuid)
	}
	d.mu.Unlock()
	sort.Strings(uuids)
	for _, uuid := range uuids {
		_ = d.endNow(uuid, "interrupting", compute.ErrCopyRestarted)
	}
}

// ForceCompleteLiveMigration implements compute.Driver: the copy finishes
// now (as a pause-and-copy would), with the outcome it was heading for (an
// injected failure still fails), reported asynchronously.
func (d *Driver) ForceCompleteLiveMigration(_ context.Context, uuid string) error {
	return d.endNow(uuid, "force-completing", nil)
}

// PostLiveMigrationAtSource implements compute.Driver. An injected
// failure leaves the source's (stale) guest in place.
func (d *Driver) PostLiveMigrationAtSource(_ context.Context, uuid string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.takeFault(compute.StepPostAtSource, uuid); err != nil {
		return err
	}
	g, ok := d.guests[uuid]
	if !ok {
		return nil
	}
	delete(d.guests, uuid)
	if err := d.saveLocked(); err != nil {
		d.guests[uuid] = g
		return fmt.Errorf("post live migration of %s at source: %w", uuid, err)
	}
	return nil
}

// RevertCopy implements compute.CopyReverter: the source guest of a copy
// taken as failed (its destination lost the guest, or the copy's report
// could not be kept) runs here again, as QEMU's source resumes its paused
// guest.
func (d *Driver) RevertCopy(_ context.Context, uuid string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, ok := d.guests[uuid]
	if !ok {
		return fmt.Errorf("reverting the copy of %s: no guest here", uuid)
	}
	if g.State != compute.GuestMigrating {
		return nil // already running (a copy that failed reverts itself)
	}
	if job, ok := d.copies[uuid]; ok && !job.finished {
		return fmt.Errorf("reverting the copy of %s: the copy is still in progress", uuid)
	}
	mig, paused := g.MigrationID, g.Paused
	g.State, g.MigrationID, g.Paused = g.Settled(), 0, false
	if err := d.saveLocked(); err != nil {
		g.State, g.MigrationID, g.Paused = compute.GuestMigrating, mig, paused
		return fmt.Errorf("reverting the copy of %s: %w", uuid, err)
	}
	return nil
}

// Copying reports whether a copy of uuid is in progress.
func (d *Driver) Copying(uuid string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	job, ok := d.copies[uuid]
	return ok && !job.finished
}

// PostLiveMigrationAtDestination implements compute.Driver. Once the
// memory copy is done the guest runs here whatever happens next, so an
// injected failure (a port binding or volume connection that fails, say)
// still leaves the incoming guest running, as a real hypervisor would.
func (d *Driver) PostLiveMigrationAtDestination(ctx context.Context, inst records.Instance) error {
	d.mu.Lock()
	g, done := d.guests[inst.UUID]
	done = done && g.State != compute.GuestIncoming
	d.mu.Unlock()
	if done {
		return nil // repeated after a restart: the guest already runs here
	}
	if err := d.takeTime(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fault := d.takeFault(compute.StepPostAtDestination, inst.UUID)
	g, ok := d.guests[inst.UUID]
	if !ok {
		if fault != nil {
			return fault
		}
		return fmt.Errorf("post live migration of %s: no incoming guest", inst.UUID)
	}
	// A paused server arrives paused (its record keeps vm_state paused
	// through the move).
	g.State = compute.GuestRunning
	if inst.VMState == records.VMPaused {
		g.State = compute.GuestPaused
	}
	if err := d.saveLocked(); err != nil {
		g.State = compute.GuestIncoming
		return fmt.Errorf("post live migration of %s at destination: %w", inst.UUID, err)
	}
	return fault
}

// RollbackLiveMigrationAtDestination implements compute.Driver.
func (d *Driver) RollbackLiveMigrationAtDestination(_ context.Context, uuid string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if g, ok := d.guests[uuid]; ok && g.State == compute.GuestIncoming {
		delete(d.guests, uuid)
		if err := d.saveLocked(); err != nil {
			d.guests[uuid] = g
			return fmt.Errorf("rollback of %s at destination: %w", uuid, err)
		}
	}
	return nil
}

// AddGuest puts a running guest in place directly (the simulator's initial
// instances).
func (d *Driver) AddGuest(g compute.Guest) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp := g
	d.guests[g.UUID] = &cp
	if err := d.saveLocked(); err != nil {
		d.cfg.Log.Warn("fake driver: could not save an added guest", "instance", g.UUID, "err", err)
	}
}

type stateFile struct {
	Guests []compute.Guest `json:"guests"`
}

func (d *Driver) load() error {
	data, err := os.ReadFile(d.cfg.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading fake driver state %s: %w", d.cfg.StateFile, err)
	}
	if err := ownerOnly(d.cfg.StateFile, d.cfg.Log); err != nil {
		return err
	}
	st, err := parseState(data)
	if err != nil {
		return fmt.Errorf("fake driver state %s is not a guest state file: %w; restore it from a copy, or move it away to start with no guests (their instances then show as lost)", d.cfg.StateFile, err)
	}
	for _, g := range st.Guests {
		g := g
		// A copy or a build in progress did not survive the restart: the
		// guest is running where it was. Interrupted tells the agent, so
		// it can report how each operation ended.
		if g.State == compute.GuestMigrating || g.State == compute.GuestBuilding {
			d.interrupted = append(d.interrupted, g)
			g.State, g.MigrationID, g.Paused = g.Settled(), 0, false
		}
		if g.State == compute.GuestResizing {
			// A disk move cut short: reported as the migration's copy
			// interrupted; the guest stays stopped until the revert
			// starts it again.
			in := g
			in.State = compute.GuestMigrating
			d.interrupted = append(d.interrupted, in)
			g.State = compute.GuestResized
		}
		d.guests[g.UUID] = &g
	}
	if len(d.interrupted) > 0 {
		// The file says what memory now says; if it cannot, the next load
		// reads the same interrupted operations the same way.
		if err := d.saveLocked(); err != nil {
			d.cfg.Log.Warn("fake driver: could not save the guests a restart found interrupted", "file", d.cfg.StateFile, "err", err)
		}
	}
	return nil
}

// parseState decodes a state file strictly: a "guests" list (possibly
// empty) of guests, each with a UUID, a known state and a flavor, and
// nothing else. Valid JSON that is not a state file (`{}`, a guest without
// its fields) is refused rather than read as no guests.
func parseState(data []byte) (stateFile, error) {
	var raw struct {
		Guests *[]compute.Guest `json:"guests"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return stateFile{}, err
	}
	if dec.More() {
		return stateFile{}, errors.New("data after the JSON object")
	}
	if raw.Guests == nil {
		return stateFile{}, errors.New(`no "guests" list`)
	}
	seen := map[string]bool{}
	for i, g := range *raw.Guests {
		switch {
		case g.UUID == "":
			return stateFile{}, fmt.Errorf("guest %d has no uuid", i)
		case seen[g.UUID]:
			return stateFile{}, fmt.Errorf("guest %s is listed twice", g.UUID)
		case !knownState(g.State):
			return stateFile{}, fmt.Errorf("guest %s has state %q (want building, running, migrating, incoming, resizing, resized, stopped, paused, suspended or rescued)", g.UUID, g.State)
		case g.Flavor.RAMMB <= 0 && g.Flavor.VCPUs <= 0 && g.Flavor.DiskGB <= 0:
			return stateFile{}, fmt.Errorf("guest %s has no flavor", g.UUID)
		case g.State == compute.GuestMigrating && g.MigrationID == 0:
			return stateFile{}, fmt.Errorf("guest %s is migrating with no migration_id", g.UUID)
		}
		seen[g.UUID] = true
	}
	return stateFile{Guests: *raw.Guests}, nil
}

func knownState(s compute.GuestState) bool {
	switch s {
	case compute.GuestBuilding, compute.GuestRunning, compute.GuestMigrating, compute.GuestIncoming,
		compute.GuestResizing, compute.GuestResized,
		compute.GuestStopped, compute.GuestPaused, compute.GuestSuspended, compute.GuestRescued:
		return true
	}
	return false
}

// Interrupted returns, once, the guests whose build or outgoing copy a
// restart interrupted, as they were (State building or migrating, with
// the MigrationID of the copy). They now run here.
func (d *Driver) Interrupted() []compute.Guest {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.interrupted
	d.interrupted = nil
	return out
}

// Close implements io.Closer: the agent is stopping. Timers already set
// still fire (a hypervisor's guests run on), but the state file is no
// longer written, as if the agent process had gone: what the file holds
// is what the next start reads.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	return nil
}

// saveLocked writes the state file atomically; called with mu held. On
// an error the file is as it was: the caller undoes its change in memory
// and fails. After Close it writes nothing.
func (d *Driver) saveLocked() error {
	if d.cfg.StateFile == "" || d.closed {
		return nil
	}
	st := stateFile{Guests: make([]compute.Guest, 0, len(d.guests))}
	for _, g := range d.guests {
		st.Guests = append(st.Guests, *g)
	}
	sort.Slice(st.Guests, func(i, j int) bool { return st.Guests[i].UUID < st.Guests[j].UUID })
	data, _ := json.MarshalIndent(st, "", "  ")
	if err := writeFileAtomic(d.cfg.StateFile, data); err != nil {
		return fmt.Errorf("saving guest state %s: %w", d.cfg.StateFile, err)
	}
	return nil
}

// ownerOnly makes the state file (it names every guest of the host)
// readable and writable by its owner only, with a log line if an older
// agent left it readable by others.
func ownerOnly(path string, log *slog.Logger) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("checking the permissions of %s: %w", path, err)
	}
	if st.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(path, st.Mode().Perm()&0o700); err != nil {
		return fmt.Errorf("making %s readable by its owner only: %w", path, err)
	}
	log.Warn("guest state file was readable by others; made it the owner's only", "file", path, "was", st.Mode().Perm().String(), "now", (st.Mode().Perm() & 0o700).String())
	return nil
}

// writeFileAtomic replaces path with data (0600) through a rename.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	// The rename is durable once the directory is synced.
	if df, err := os.Open(filepath.Dir(path)); err == nil {
		serr := df.Sync()
		df.Close()
		return serr
	}
	return nil
}
