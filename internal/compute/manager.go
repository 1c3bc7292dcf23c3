package compute

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"keel/internal/boot"
	"keel/internal/clock"
	"keel/internal/lifecycle"
	"keel/internal/migration"
	"keel/internal/records"
	"keel/internal/store"
)

// Reporter receives the outcome of the agent's asynchronous steps (in one
// process it is the conductor; across processes, the bus).
//
// BuildDone and CopyDone return nil once the report is taken: committed
// by the conductor (which also answers nil to a report that no longer
// applies, such as a repeat), or kept durably by a reporter that delivers
// it later (Outbox). An error means the report was not taken and must be
// made again; a report is never acknowledged before it is committed. An
// error wrapping ErrReportNotKept for a success means it could not even be
// kept: the agent then fails the operation (destroys the new guest,
// reverts the copy) and reports that instead.
type Reporter interface {
	// BuildDone reports a spawn's outcome (nil buildErr: the guest runs).
	BuildDone(ctx context.Context, instanceUUID, host string, buildErr error) error
	// CopyProgress reports a live migration's memory copy (best effort:
	// the next report replaces a lost one).
	CopyProgress(ctx context.Context, migrationID int64, total, processed, remaining int64)
	// CopyDone reports the end of the memory copy (nil copyErr: copied).
	CopyDone(ctx context.Context, migrationID int64, copyErr error) error
}

// Peer is what one agent asks another (agent ↔ agent RPC).
type Peer interface {
	CheckCanLiveMigrateSource(ctx context.Context, inst records.Instance, dest string) error
	// CheckIncoming confirms the destination still holds the incoming
	// guest (a copy to a destination that died does not complete).
	CheckIncoming(ctx context.Context, instanceUUID string) error
}

// Peers finds another agent by host name.
type Peers interface {
	Peer(host string) (Peer, error)
}

// Manager is the agent side of every step, for one host (Nova's
// ComputeManager).
type Manager struct {
	host     string
	driver   Driver
	tracker  *Tracker
	peers    Peers
	reporter Reporter
	clock    clock.Clock
	log      *slog.Logger

	// res serialises every step that changes what the host runs with the
	// audit (Nova's COMPUTE_RESOURCE_SEMAPHORE): an audit never sees a step
	// half done. It is held across the driver's calls and the tracker's
	// store reads and writes (a claim, the host record, the audit's own;
	// over the bus those are calls to the keel server), but never while
	// asking another agent (the live-migration checks, the destination
	// check at a copy's end) or reporting a build's or a copy's end
	// (Reporter), so a peer or a report that hangs does not stop the
	// host's other steps.
	res sync.Mutex

	auditMu      sync.Mutex // guards onAudit, audit and auditStopped
	onAudit      func(Drift)
	audit        clock.Timer
	auditStopped bool

	copiesMu sync.Mutex
	// copies are the copies (a live migration's memory, a cold move's
	// disk) this process started or re-attached to and whose end it has
	// not reported yet, by migration ID.
	copies map[int64]string

	// startMu serialises starting a copy (its fence, then its place in
	// copies) with CheckCopy, so a cast and a check never cross.
	startMu sync.Mutex
	// ended are the migrations CheckCopy reported ended because this
	// process never started their copy: a late cast of one is refused.
	// Guarded by startMu.
	ended map[int64]bool
	// seen is, by migration ID, the newest version of its record this
	// process has seen, carried by a call or read from the store: a call
	// made from an older version is refused (the fence). Guarded by
	// startMu; one entry per migration this host was asked to copy for,
	// as ended.
	seen map[int64]int64

	metricsMu sync.Mutex // guards metrics
	metrics   metricsState
}

// MigrationReader reads a migration record: the source's fence before a
// copy (rpc.Store over the bus; store.Store in one process).
type MigrationReader interface {
	GetMigration(ctx context.Context, id int64) (records.Migration, error)
}

// InstanceLister lists the instances recorded on a host (a restarted
// agent's reconciliation): rpc.Store over the bus; store.Store in one
// process.
type InstanceLister interface {
	ListInstances(ctx context.Context, host string) ([]records.Instance, error)
}

var (
	_ MigrationReader = store.Store(nil)
	_ InstanceLister  = store.Store(nil)
)

// NewManager wires an agent.
func NewManager(host string, driver Driver, tracker *Tracker, peers Peers, reporter Reporter, clk clock.Clock, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{host: host, driver: driver, tracker: tracker, peers: peers, reporter: reporter, clock: clk, log: log.With("host", host),
		copies: map[int64]string{}, ended: map[int64]bool{}, seen: map[int64]int64{}}
}

// Host returns the manager's host name.
func (m *Manager) Host() string { return m.host }

// Tracker returns the host's resource tracker.
func (m *Manager) Tracker() *Tracker { return m.tracker }

// Driver returns the host's virt driver.
func (m *Manager) Driver() Driver { return m.driver }

// BuildAndRunInstance claims in the tracker, spawns, and reports the
// outcome; a failed spawn releases the tracker claim.
func (m *Manager) BuildAndRunInstance(ctx context.Context, inst records.Instance) error {
	m.res.Lock()
	defer m.res.Unlock()
	// A repeated cast (the conductor resumed a boot a restart cut short)
	// is answered from the guest this host already has: building, its
	// report follows; running, it is reported again. Never a second spawn.
	if g, ok, err := m.guest(ctx, inst.UUID); err != nil {
		return fmt.Errorf("building %s on %s: %w", inst.UUID, m.host, err)
	} else if ok {
		switch g.State {
		case GuestBuilding:
			return nil
		case GuestRunning:
			bg := context.WithoutCancel(ctx)
			m.clock.AfterFunc(0, func() { // after this answer, as a spawn's report
				if rerr := m.reporter.BuildDone(bg, inst.UUID, m.host, nil); rerr != nil {
					m.log.Error("re-reporting a build that was cast again", "instance", inst.UUID, "err", rerr)
				}
			})
			return nil
		default:
			return fmt.Errorf("building %s on %s: this host already has a %s guest of it", inst.UUID, m.host, g.State)
		}
	}
	m.tracker.Busy(inst.UUID, true)
	if err := m.tracker.InstanceClaim(ctx, inst); err != nil {
		m.tracker.Busy(inst.UUID, false)
		return fmt.Errorf("building %s on %s: %w", inst.UUID, m.host, err)
	}
	m.driver.Spawn(ctx, inst, func(err error) {
		ctx := context.WithoutCancel(ctx)
		m.res.Lock()
		m.tracker.Busy(inst.UUID, false)
		if err != nil {
			m.buildFailedLocked(ctx, inst.UUID)
		} else if werr := m.tracker.BuildSucceeded(ctx); werr != nil {
			m.log.Warn("writing host record after spawn", "instance", inst.UUID, "err", werr)
		}
		m.res.Unlock()
		rerr := m.reporter.BuildDone(ctx, inst.UUID, m.host, err)
		if err == nil && errors.Is(rerr, ErrReportNotKept) {
			// The success could not be kept on disk: a kill now would
			// lose it with the guest running. The build fails instead.
			m.log.Error("the build report could not be kept; failing the build", "instance", inst.UUID, "err", rerr)
			err = fmt.Errorf("the agent on %s could not keep the build's report: %w", m.host, rerr)
			m.res.Lock()
			m.buildFailedLocked(ctx, inst.UUID)
			m.res.Unlock()
			rerr = m.reporter.BuildDone(ctx, inst.UUID, m.host, err)
		}
		if rerr != nil {
			m.log.Error("build report not taken; the agent's restart or the conductor's recovery re-reports it", "instance", inst.UUID, "err", rerr)
		}
	})
	return nil
}

// buildFailedLocked releases the tracker's claim of a failed build and
// removes its guest; called with res held.
func (m *Manager) buildFailedLocked(ctx context.Context, uuid string) {
	if rerr := m.tracker.BuildFailed(ctx, uuid); rerr != nil {
		m.log.Warn("releasing tracker claim after failed spawn", "instance", uuid, "err", rerr)
	}
	if derr := m.driver.Destroy(ctx, uuid); derr != nil {
		m.log.Warn("removing the guest of a failed spawn", "instance", uuid, "err", derr)
	}
}

// TerminateInstance destroys the guest and stops counting it.
func (m *Manager) TerminateInstance(ctx context.Context, uuid string) error {
	m.res.Lock()
	defer m.res.Unlock()
	if err := m.driver.Destroy(ctx, uuid); err != nil {
		return fmt.Errorf("terminating %s on %s: %w", uuid, m.host, err)
	}
	return m.tracker.RemoveInstance(ctx, uuid)
}

// CheckCanLiveMigrateDestination runs the destination's checks, then asks
// the source for its own.
func (m *Manager) CheckCanLiveMigrateDestination(ctx context.Context, inst records.Instance, source string) error {
	if err := m.driver.CheckCanLiveMigrateDestination(ctx, inst); err != nil {
		return fmt.Errorf("destination %s: %w", m.host, err)
	}
	peer, err := m.peers.Peer(source)
	if err != nil {
		return fmt.Errorf("destination %s reaching source %s: %w", m.host, source, err)
	}
	if err := peer.CheckCanLiveMigrateSource(ctx, inst, m.host); err != nil {
		return fmt.Errorf("source %s: %w", source, err)
	}
	return nil
}

// CheckCanLiveMigrateSource is the source's half of the pre-checks.
func (m *Manager) CheckCanLiveMigrateSource(ctx context.Context, inst records.Instance, _ string) error {
	return m.driver.CheckCanLiveMigrateSource(ctx, inst)
}

// PreLiveMigration prepares this host (the destination) to receive inst.
func (m *Manager) PreLiveMigration(ctx context.Context, inst records.Instance) (map[string]string, error) {
	m.res.Lock()
	defer m.res.Unlock()
	m.tracker.Busy(inst.UUID, true)
	data, err := m.driver.PreLiveMigration(ctx, inst)
	if err != nil {
		m.tracker.Busy(inst.UUID, false)
		return nil, fmt.Errorf("pre_live_migration of %s on %s: %w", inst.UUID, m.host, err)
	}
	return data, nil
}

// LiveMigration starts the memory copy from this host (the source) and
// reports progress and the outcome for migration migID. It is fenced on
// the record's version the call carries: the copy starts only if no
// newer version of the migration record is known here (read from the
// store, or carried by an earlier call) and the record moves inst from
// this host to dest, so a call that arrives late — after the conductor
// moved the migration on, gave up on it, or another replica took it
// over — refuses instead of starting a copy nobody waits for.
func (m *Manager) LiveMigration(ctx context.Context, migID, version int64, inst records.Instance, dest string, data map[string]string) error {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	if err := m.startWanted(ctx, migID, version, inst.UUID, dest); err != nil {
		m.log.Warn("refusing a copy the migration no longer asks for", "migration", migID, "version", version, "instance", inst.UUID, "err", err)
		return fmt.Errorf("live migration %d of %s from %s: %w", migID, inst.UUID, m.host, err)
	}
	m.res.Lock()
	defer m.res.Unlock()
	m.copiesMu.Lock()
	if _, dup := m.copies[migID]; dup {
		m.copiesMu.Unlock()
		return fmt.Errorf("live migration %d of %s from %s: its copy is already running", migID, inst.UUID, m.host)
	}
	m.copies[migID] = inst.UUID
	m.copiesMu.Unlock()
	m.tracker.Busy(inst.UUID, true)
	progress, done := m.copyReports(ctx, migID, inst.UUID, dest)
	m.driver.LiveMigration(ctx, migID, inst, dest, data, progress, done)
	return nil
}

// ErrFenced is wrapped by the error of a step refused because the
// migration record no longer asks for it.
var ErrFenced = errors.New("the migration no longer asks for this step")

// fence checks a call made from version of migration migID's record,
// called with startMu held: it is refused if a newer version was seen
// here (carried by an earlier call, or stored now), or if the record does
// not move uuid from this host to dest. The record's phase is not read:
// any step the conductor saved since the call's makes it stale. Without a
// MigrationReader only the versions calls carried fence.
func (m *Manager) fence(ctx context.Context, migID, version int64, uuid, dest string) error {
	if err := m.older(migID, version); err != nil {
		return err
	}
	m.seen[migID] = version
	mr, ok := m.tracker.store.(MigrationReader)
	if !ok {
		return nil
	}
	rec, err := mr.GetMigration(ctx, migID)
	if err != nil {
		return fmt.Errorf("%w: reading migration %d: %v", ErrFenced, migID, err)
	}
	if rec.Version > version {
		m.seen[migID] = rec.Version
		return fmt.Errorf("%w: the call is from version %d of migration %d, the record moved on to version %d", ErrFenced, version, migID, rec.Version)
	}
	return movesFrom(rec, m.host, uuid, dest)
}

// older refuses a call made from version of migration migID's record
// when a newer version was seen here; called with startMu held.
func (m *Manager) older(migID, version int64) error {
	if seen := m.seen[migID]; version < seen {
		return fmt.Errorf("%w: the call is from version %d of migration %d, version %d was seen here", ErrFenced, version, migID, seen)
	}
	return nil
}

// startWanted is the fence of a copy's start, called with startMu held:
// besides the record's (fence), a copy CheckCopy reported ended, or whose
// end a report still pending tells, is not started (again).
func (m *Manager) startWanted(ctx context.Context, migID, version int64, uuid, dest string) error {
	if m.ended[migID] {
		return fmt.Errorf("%w: its copy was reported ended, never started here (the conductor asked after a restart)", ErrFenced)
	}
	if pending, ok := m.reporter.(ReportKeeper); ok && pending.HasCopy(migID) {
		return fmt.Errorf("%w: the end of its copy is already reported", ErrFenced)
	}
	return m.fence(ctx, migID, version, uuid, dest)
}

// movesFrom checks that rec moves uuid from host to dest ("": any).
func movesFrom(rec records.Migration, host, uuid, dest string) error {
	if rec.SourceHost != host || rec.InstanceUUID != uuid || (dest != "" && rec.DestHost != dest) {
		return fmt.Errorf("%w: migration %d moves %s from %s to %s", ErrFenced, rec.ID, rec.InstanceUUID, rec.SourceHost, rec.DestHost)
	}
	return nil
}

// CheckCopy answers a conductor that resumed migration migID in its copy
// (after a restart of the server, or taking it over from another
// replica) and cannot tell whether the copy's cast reached this host, its
// source. A copy this process runs, or whose end it still holds
// unreported, reports its end on its own: nothing to do. Otherwise the
// cast never came: the copy is reported ended, interrupted
// (ErrCopyRestarted: keel's restart, not the destination, is at fault),
// so the conductor rolls the migration back at once instead of waiting
// for migration_stall_timeout, and a late cast of it is refused from now
// on. The agent answers only for its own host: a migration this host is
// not the source of is refused. Calling it again changes nothing.
func (m *Manager) CheckCopy(ctx context.Context, migID int64) error {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	m.copiesMu.Lock()
	_, running := m.copies[migID]
	m.copiesMu.Unlock()
	pending, keeps := m.reporter.(ReportKeeper)
	if running || m.ended[migID] || (keeps && pending.HasCopy(migID)) {
		return nil
	}
	mr, ok := m.tracker.store.(MigrationReader)
	if !ok {
		return nil // no record to check against: the stall timeout decides
	}
	rec, err := mr.GetMigration(ctx, migID)
	if err != nil {
		return fmt.Errorf("checking the copy of migration %d on %s: %w", migID, m.host, err)
	}
	if rec.SourceHost != m.host || rec.Type == records.MigrationTypeEvac {
		return fmt.Errorf("checking the copy of migration %d on %s: %s %d copies from %s, not from this host",
			migID, m.host, rec.Type, migID, rec.SourceHost)
	}
	if !migration.SourceCopying(rec) {
		return nil // past its copy: its end was taken
	}
	m.ended[migID] = true
	m.log.Info("the conductor resumed a copy this host never started; reporting it ended", "migration", migID, "instance", rec.InstanceUUID)
	cerr := RestartedError(fmt.Sprintf("copy interrupted: the source %s runs no copy for this migration (keel restarted before its cast reached the source)", m.host))
	bg := context.WithoutCancel(ctx)
	if keeps {
		// Kept on disk now and delivered later: the conductor waits for
		// this answer while it holds the migration.
		if err := m.reporter.CopyDone(bg, migID, cerr); err != nil {
			return fmt.Errorf("reporting the copy of migration %d ended on %s: %w", migID, m.host, err)
		}
		return nil
	}
	m.clock.AfterFunc(0, func() { // after this answer, as a copy's report
		if err := m.reporter.CopyDone(bg, migID, cerr); err != nil {
			m.log.Error("copy report not taken", "migration", migID, "err", err)
		}
	})
	return nil
}

// ResumeCopies re-attaches to the copies that outlived a restart of the
// agent (drivers that are DetachedCopiers), so each reports its outcome;
// it returns how many.
func (m *Manager) ResumeCopies(ctx context.Context) int {
	r, ok := m.driver.(DetachedCopier)
	if !ok {
		return 0
	}
	gs := r.Resumable()
	m.res.Lock()
	defer m.res.Unlock()
	for _, g := range gs {
		m.log.Info("re-attaching to a copy that outlived the agent", "instance", g.UUID, "migration", g.MigrationID)
		m.copiesMu.Lock()
		m.copies[g.MigrationID] = g.UUID
		m.copiesMu.Unlock()
		m.tracker.Busy(g.UUID, true)
		progress, done := m.copyReports(ctx, g.MigrationID, g.UUID, m.destinationOf(g))
		r.Reattach(ctx, g.UUID, progress, done)
	}
	return len(gs)
}

// destinationOf is the host a resumed copy goes to, as the driver kept
// it with the copy (a DetachedCopier); "" when the driver cannot tell,
// and the copy's end is then reported without asking the destination for
// its guest.
func (m *Manager) destinationOf(g Guest) string {
	if dl, ok := m.driver.(DetachedCopier); ok {
		return dl.DestinationOf(g.UUID)
	}
	return ""
}

// copyReports returns the callbacks of a copy: progress goes to the
// reporter; the end releases the tracker's busy mark and reports the
// outcome, checked with the destination (a copy to a destination that
// lost its guest did not complete; a failed one says why the
// destination's side ended, if it knows).
func (m *Manager) copyReports(ctx context.Context, migID int64, uuid, dest string) (func(total, processed, remaining int64), func(error)) {
	bg := context.WithoutCancel(ctx)
	progress := func(total, processed, remaining int64) {
		m.reporter.CopyProgress(bg, migID, total, processed, remaining)
	}
	done := func(err error) {
		if dest != "" {
			if err == nil {
				// As a real hypervisor's copy does, fail when the
				// destination is gone: ask it for the guest it receives.
				err = m.checkDestination(bg, dest, uuid)
				if err == nil {
					// A copy that ran while the migration gave up on it
					// (its start outran the fence) is not a success.
					err = m.stillWanted(bg, migID, uuid, dest)
				}
				if err != nil {
					m.revertCopy(bg, uuid)
				}
			} else if !errors.Is(err, ErrCopyCancelled) {
				if cerr := m.checkDestination(bg, dest, uuid); cerr != nil {
					err = fmt.Errorf("%w; %v", err, cerr)
				}
			}
		}
		m.res.Lock()
		m.tracker.Busy(uuid, false)
		m.res.Unlock()
		// The copy counts as running until its report is made: an abort
		// meanwhile must not report it ended a second time.
		defer func() {
			m.copiesMu.Lock()
			delete(m.copies, migID)
			m.copiesMu.Unlock()
		}()
		rerr := m.reporter.CopyDone(bg, migID, err)
		if err == nil && errors.Is(rerr, ErrReportNotKept) {
			// The success could not be kept on disk: the copy is taken
			// as failed, the source guest runs on here.
			m.log.Error("the copy report could not be kept; taking the copy as failed", "migration", migID, "err", rerr)
			m.revertCopy(bg, uuid)
			rerr = m.reporter.CopyDone(bg, migID, fmt.Errorf("the source %s could not keep the copy's report: %w", m.host, rerr))
		}
		if rerr != nil {
			m.log.Error("copy report not taken; the agent's restart or the conductor's recovery re-reports it", "migration", migID, "err", rerr)
		}
	}
	return progress, done
}

// stillWanted re-checks the fence at the end of a copy; a store that
// cannot be read does not turn a finished copy into a failure.
func (m *Manager) stillWanted(ctx context.Context, migID int64, uuid, dest string) error {
	mr, ok := m.tracker.store.(MigrationReader)
	if !ok {
		return nil
	}
	rec, err := mr.GetMigration(ctx, migID)
	if err != nil {
		return nil
	}
	if err := movesFrom(rec, m.host, uuid, dest); err != nil {
		return err
	}
	// The record moved on with the copy's progress reports, so its
	// version tells nothing here: the migration must still wait for the
	// copy. An abort that came too late to stop the copy is not a reason
	// to undo it (Nova completes such a move); anything else is.
	if !migration.SourceCopying(rec) && !(rec.AbortRequested && migration.LiveCopying(rec)) {
		return fmt.Errorf("%w: migration %d no longer waits for its copy (phase %s, status %s)", ErrFenced, rec.ID, rec.Phase, rec.Status)
	}
	return nil
}

// revertCopy makes the source guest of a copy taken as failed run here
// again.
func (m *Manager) revertCopy(ctx context.Context, uuid string) {
	if rerr := m.driver.RevertCopy(ctx, uuid); rerr != nil {
		m.log.Error("resuming the source guest of a copy taken as failed", "instance", uuid, "err", rerr)
	}
}

func (m *Manager) checkDestination(ctx context.Context, dest, uuid string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	peer, err := m.peers.Peer(dest)
	if err == nil {
		err = peer.CheckIncoming(ctx, uuid)
	}
	if err != nil {
		return fmt.Errorf("the destination %s lost the incoming guest: %w", dest, err)
	}
	return nil
}

// CheckIncoming is the destination's answer to the source at the end of a
// copy: it still holds the incoming (or already running) guest.
func (m *Manager) CheckIncoming(ctx context.Context, uuid string) error {
	if ic, ok := m.driver.(DetachedCopier); ok {
		if err := ic.CheckIncoming(ctx, uuid); err != nil {
			return fmt.Errorf("destination %s: %w", m.host, err)
		}
		return nil
	}
	_, ok, err := m.guest(ctx, uuid)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	return fmt.Errorf("no incoming guest %s on %s", uuid, m.host)
}

// AbortLiveMigration cancels the copy of inst.
// When this host runs no copy of uuid although the store shows one of its
// migrations in its copy from here (the copy's end was lost, or never
// began), the abort still ends it: the copy is reported failed, so the
// conductor rolls the migration back instead of waiting for a report
// that cannot come.
func (m *Manager) AbortLiveMigration(ctx context.Context, uuid string) error {
	if m.copying(uuid) {
		return m.driver.AbortLiveMigration(ctx, uuid)
	}
	migs, err := m.tracker.store.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: uuid, Host: m.host, ActiveOnly: true})
	if err != nil {
		// Cannot tell: ask the driver, as before.
		return m.driver.AbortLiveMigration(ctx, uuid)
	}
	// Only through a reporter that keeps reports (an Outbox) and delivers
	// them later: the conductor waits for this call while holding the
	// migration, so a report made synchronously from here would wait for it.
	pending, ok := m.reporter.(ReportKeeper)
	if !ok {
		return m.driver.AbortLiveMigration(ctx, uuid)
	}
	for _, mg := range migs {
		if mg.SourceHost != m.host || !migration.LiveCopying(mg) || pending.HasCopy(mg.ID) {
			continue
		}
		m.log.Info("abort of a copy this host does not run; reporting it ended", "migration", mg.ID, "instance", uuid)
		cerr := fmt.Errorf("memory copy aborted: the source %s was running no copy for this migration", m.host)
		if err := m.reporter.CopyDone(context.WithoutCancel(ctx), mg.ID, cerr); err != nil {
			return fmt.Errorf("aborting migration %d of %s on %s: %w", mg.ID, uuid, m.host, err)
		}
		return nil
	}
	return m.driver.AbortLiveMigration(ctx, uuid)
}

// copying reports whether this process runs (or re-attached to) a copy of
// uuid whose end it has not reported.
func (m *Manager) copying(uuid string) bool {
	m.copiesMu.Lock()
	defer m.copiesMu.Unlock()
	for _, u := range m.copies {
		if u == uuid {
			return true
		}
	}
	return false
}

// ForceCompleteLiveMigration makes the copy of inst finish now.
func (m *Manager) ForceCompleteLiveMigration(ctx context.Context, uuid string) error {
	return m.driver.ForceCompleteLiveMigration(ctx, uuid)
}

// PostLiveMigrationAtSource is the source's part of _post_live_migration:
// drop the guest, stop counting it, write the record.
func (m *Manager) PostLiveMigrationAtSource(ctx context.Context, inst records.Instance) error {
	m.res.Lock()
	defer m.res.Unlock()
	if err := m.driver.PostLiveMigrationAtSource(ctx, inst.UUID); err != nil {
		return fmt.Errorf("post live migration of %s at source %s: %w", inst.UUID, m.host, err)
	}
	if err := m.tracker.RemoveInstance(ctx, inst.UUID); err != nil {
		return err
	}
	m.reportAfter(ctx, false)
	return nil
}

// PostLiveMigrationAtDestination makes the guest this host's, and — the
// fix this project exists for — updates the tracker and host record at
// once (unless reproducing the legacy behaviour). The instance is counted
// even when the driver's step fails: the copy is done, so the guest runs
// here and the conductor settles the instance and its allocation here
// either way (the audit corrects the count if the guest is in fact gone).
func (m *Manager) PostLiveMigrationAtDestination(ctx context.Context, inst records.Instance) error {
	m.res.Lock()
	defer m.res.Unlock()
	derr := m.driver.PostLiveMigrationAtDestination(ctx, inst)
	// The move is over before the record is written, so the record does
	// not count it as an I/O-heavy operation in progress.
	m.tracker.Busy(inst.UUID, false)
	terr := m.tracker.MigrationArrived(ctx, inst)
	if derr == nil && terr == nil {
		m.reportAfter(ctx, false)
	}
	if derr != nil {
		return fmt.Errorf("post_live_migration_at_destination of %s on %s: %w", inst.UUID, m.host, derr)
	}
	return terr
}

// RollbackLiveMigrationAtDestination removes what pre_live_migration set
// up.
func (m *Manager) RollbackLiveMigrationAtDestination(ctx context.Context, inst records.Instance) error {
	m.res.Lock()
	defer m.res.Unlock()
	defer m.tracker.Busy(inst.UUID, false)
	if err := m.driver.RollbackLiveMigrationAtDestination(ctx, inst.UUID); err != nil {
		return fmt.Errorf("rollback of %s on %s: %w", inst.UUID, m.host, err)
	}
	return nil
}

// Reconcile settles, after a restart of the agent, every operation the
// store still shows in flight on this host, whatever the guests' saved
// state: an instance BUILDING here is reported built if its guest runs
// (the report was lost with the agent) or failed if there is no guest
// once its cast was answered (boot phase spawn); a
// live migration in its copy, or a cold move or resize in its disk copy
// (resize_instance), with this host as the source and no copy running
// here is reported interrupted, so the conductor rolls it back (aborted
// or not) at once rather than after migration_stall_timeout. Reports still pending in an outbox are left to it. It
// returns how many reports it made; it needs a store that lists instances
// (InstanceLister).
func (m *Manager) Reconcile(ctx context.Context) (int, error) {
	il, ok := m.tracker.store.(InstanceLister)
	if !ok {
		return 0, nil
	}
	insts, err := il.ListInstances(ctx, m.host)
	if err != nil {
		return 0, fmt.Errorf("reconciling %s: listing its instances: %w", m.host, err)
	}
	migs, err := m.tracker.store.ListMigrations(ctx, store.MigrationFilter{Host: m.host, ActiveOnly: true})
	if err != nil {
		return 0, fmt.Errorf("reconciling %s: listing its migrations: %w", m.host, err)
	}
	pending, _ := m.reporter.(ReportKeeper)
	m.res.Lock()
	guests, err := m.driver.Guests(ctx)
	if err != nil {
		m.res.Unlock()
		return 0, fmt.Errorf("reconciling %s: listing its guests: %w", m.host, err)
	}
	here := map[string]Guest{}
	for _, g := range guests {
		here[g.UUID] = g
	}
	type build struct {
		uuid string
		err  error
	}
	var builds []build
	for _, inst := range insts {
		if inst.VMState != records.VMBuilding || inst.Host != m.host || m.tracker.isBusy(inst.UUID) {
			continue // not building here, or its spawn is in flight
		}
		if pending != nil && pending.HasBuild(inst.UUID) {
			continue
		}
		switch g, ok := here[inst.UUID]; {
		case ok && g.State == GuestRunning:
			builds = append(builds, build{uuid: inst.UUID})
		case ok:
			continue // building: the driver reports its end
		case boot.Spawning(inst):
			// The cast was answered, so this host had the guest: lost.
			builds = append(builds, build{inst.UUID, fmt.Errorf("no guest on %s when its agent restarted: the spawn was lost", m.host)})
		default:
			continue // the cast may still reach us; the conductor settles its own phase
		}
	}
	// Evacuations rebuilding here whose end no one will report: the
	// spawn a restart cut short (the guest runs, as an interrupted build
	// does) or lost (no guest).
	type rebuild struct {
		mig records.Migration
		err error
	}
	var rebuilds []rebuild
	for _, mg := range migs {
		if !migration.Rebuilding(mg) || mg.DestHost != m.host ||
			m.tracker.isBusy(mg.InstanceUUID) || (pending != nil && pending.HasCopy(mg.ID)) {
			continue
		}
		if _, ok := here[mg.InstanceUUID]; ok {
			rebuilds = append(rebuilds, rebuild{mig: mg})
		} else {
			rebuilds = append(rebuilds, rebuild{mg, fmt.Errorf("no guest on %s when its agent restarted: the rebuild was lost", m.host)})
		}
	}
	var copies []records.Migration
	m.copiesMu.Lock()
	for _, mg := range migs {
		// A live copy, or a cold move's or resize's disk copy
		// (resize_instance), that this host is the source of.
		if mg.SourceHost != m.host || !migration.SourceCopying(mg) {
			continue
		}
		if _, running := m.copies[mg.ID]; running || (pending != nil && pending.HasCopy(mg.ID)) {
			continue
		}
		copies = append(copies, mg)
	}
	m.copiesMu.Unlock()
	for _, mg := range copies {
		if g, ok := here[mg.InstanceUUID]; ok && g.State == GuestMigrating {
			m.revertCopy(ctx, g.UUID)
		}
	}
	m.res.Unlock()

	n := 0
	for _, b := range builds {
		m.log.Info("reporting a build the store still shows in flight", "instance", b.uuid, "failed", b.err != nil)
		if err := m.reporter.BuildDone(ctx, b.uuid, m.host, b.err); err != nil {
			m.log.Error("build report not taken", "instance", b.uuid, "err", err)
			continue
		}
		n++
	}
	for _, r := range rebuilds {
		err := r.err
		if err == nil && migration.StartedStopped(r.mig) {
			// Evacuated stopped: powered off, as the rebuild would have.
			if serr := m.driver.Lifecycle(ctx, records.Instance{UUID: r.mig.InstanceUUID, Flavor: flavorOf(r.mig)}, lifecycle.OpStop); serr != nil {
				err = fmt.Errorf("powering off rebuilt %s on %s: %w", r.mig.InstanceUUID, m.host, serr)
			}
		}
		m.log.Info("reporting an evacuation's rebuild the restart cut short", "migration", r.mig.ID, "instance", r.mig.InstanceUUID, "failed", err != nil)
		if rerr := m.reporter.CopyDone(ctx, r.mig.ID, err); rerr != nil {
			m.log.Error("rebuild report not taken", "migration", r.mig.ID, "err", rerr)
			continue
		}
		n++
	}
	for _, mg := range copies {
		m.log.Info("reporting a copy the store still shows in flight but this host does not run", "migration", mg.ID, "instance", mg.InstanceUUID, "type", mg.Type)
		what := "memory"
		if mg.Type == records.MigrationTypeCold || mg.Type == records.MigrationTypeResize {
			what = "disk"
		}
		// keel's own restart ended it (the agent's, or the server's
		// before its cast reached this host): the move does not count
		// the attempt, as for a copy the agent's restart cut short. An
		// abort the user asked for stays an abort.
		msg := fmt.Sprintf("%s copy interrupted: the source %s restarted and runs no copy for this migration", what, m.host)
		err := RestartedError(msg)
		if mg.AbortRequested {
			err = errors.New(msg)
		}
		if err := m.reporter.CopyDone(ctx, mg.ID, err); err != nil {
			m.log.Error("copy report not taken", "migration", mg.ID, "err", err)
			continue
		}
		n++
	}
	return n, nil
}

// flavorOf is the flavor a migration moves (its new one).
func flavorOf(mg records.Migration) records.Flavor {
	if mg.NewFlavor != nil {
		return *mg.NewFlavor
	}
	return records.Flavor{}
}

// Audit runs the periodic audit now.
func (m *Manager) Audit(ctx context.Context) (Drift, error) {
	m.res.Lock()
	d, err := m.tracker.Audit(ctx)
	m.res.Unlock()
	m.auditMu.Lock()
	onAudit := m.onAudit
	m.auditMu.Unlock()
	if err == nil {
		m.reportAfter(ctx, true)
	}
	if err == nil && onAudit != nil {
		onAudit(d)
	}
	return d, err
}

// StartPeriodicAudit runs the audit every interval, the first one after
// first (Nova's update_available_resource; interval 0 means 60 s, negative
// disables it). onAudit, if not nil, receives every audit's drift.
func (m *Manager) StartPeriodicAudit(ctx context.Context, interval, first time.Duration, onAudit func(Drift)) {
	if interval < 0 {
		return
	}
	if interval == 0 {
		interval = 60 * time.Second
	}
	m.auditMu.Lock()
	defer m.auditMu.Unlock()
	m.onAudit, m.auditStopped = onAudit, false
	var run func()
	run = func() {
		if ctx.Err() != nil {
			return
		}
		if d, err := m.Audit(ctx); err != nil {
			m.log.Warn("periodic audit failed", "err", err)
		} else if d.Count() > 0 {
			m.log.Info("periodic audit healed drift", "drift", d.String())
		}
		m.auditMu.Lock()
		defer m.auditMu.Unlock()
		if !m.auditStopped {
			m.audit = m.clock.AfterFunc(interval, run)
		}
	}
	m.audit = m.clock.AfterFunc(first, run)
}

// StopPeriodicAudit stops the periodic audit.
func (m *Manager) StopPeriodicAudit() {
	m.auditMu.Lock()
	defer m.auditMu.Unlock()
	m.auditStopped = true
	if m.audit != nil {
		m.audit.Stop()
	}
}

// guest returns the driver's guest of uuid, if it has one.
func (m *Manager) guest(ctx context.Context, uuid string) (Guest, bool, error) {
	if f, ok := m.driver.(GuestFinder); ok {
		return f.FindGuest(ctx, uuid)
	}
	gs, err := m.driver.Guests(ctx)
	if err != nil {
		return Guest{}, false, err
	}
	for _, g := range gs {
		if g.UUID == uuid {
			return g, true, nil
		}
	}
	return Guest{}, false, nil
}
