package qemu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"keel/internal/compute"
	"keel/internal/compute/qemu/qmp"
	"keel/internal/records"
)

// MigrationInfo is query-migrate's answer, decoded into keel's own types
// (every status QEMU has, new ones included, is kept as text).
type MigrationInfo struct {
	Status           string   `json:"status"`
	TotalTime        int64    `json:"total-time"` // ms
	Downtime         int64    `json:"downtime"`   // ms, once completed
	ExpectedDowntime int64    `json:"expected-downtime"`
	SetupTime        int64    `json:"setup-time"`
	ErrorDesc        string   `json:"error-desc"`
	RAM              *RAMInfo `json:"ram"`
}

// RAMInfo is query-migrate's ram section.
type RAMInfo struct {
	Transferred      int64   `json:"transferred"`
	Remaining        int64   `json:"remaining"`
	Total            int64   `json:"total"`
	Duplicate        int64   `json:"duplicate"` // zero pages
	Normal           int64   `json:"normal"`    // pages sent whole
	NormalBytes      int64   `json:"normal-bytes"`
	DirtySyncCount   int64   `json:"dirty-sync-count"`
	DirtyPagesRate   int64   `json:"dirty-pages-rate"`
	MbpsRate         float64 `json:"mbps"`
	PostcopyRequests int64   `json:"postcopy-requests"`
}

// copyJob is one outgoing migration the driver watches.
type copyJob struct {
	migID    int64
	postCopy bool
	stopOnce sync.Once
	stopCh   chan struct{}
	// detached: the agent is stopping; the copy goes on in QEMU and the
	// next agent re-attaches to it.
	detached bool
	mu       sync.Mutex
	paused   bool // the source was paused to force completion
	forced   bool
	timedOut time.Duration // the completion timeout that cancelled it
	last     MigrationInfo
}

func (j *copyJob) cancel() { j.stopOnce.Do(func() { close(j.stopCh) }) }

// errDetached ends a watch when the driver closes: nothing is reported.
var errDetached = errors.New("detached from the copy")

// ErrNoMigration is returned when there is no copy to act on.
var ErrNoMigration = errors.New("no live migration in progress for this instance")

// LiveMigration implements compute.Driver: migrate-set-capabilities and
// -parameters (bandwidth, downtime), migrate to the destination's URI,
// then watch the copy until it ends.
func (d *Driver) LiveMigration(ctx context.Context, migID int64, inst records.Instance, dest string, data map[string]string,
	progress func(total, processed, remaining int64), done func(error)) {
	returned := make(chan struct{})
	defer close(returned)
	d.mu.Lock()
	v, ok := d.vms[inst.UUID]
	var err error
	switch {
	case !ok || (v.st.Guest.State != compute.GuestRunning && v.st.Guest.State != compute.GuestPaused):
		err = fmt.Errorf("live migration of %s: guest is not running (nor paused) here", inst.UUID)
		if ok && v.job != nil {
			err = fmt.Errorf("live migration of %s: a migration of this guest is already in progress", inst.UUID)
		}
	case data["uri"] == "":
		err = fmt.Errorf("live migration of %s: the destination gave no migration URI", inst.UUID)
	}
	if err != nil {
		d.mu.Unlock()
		go func() { <-returned; done(err) }()
		return
	}
	job := &copyJob{migID: migID, stopCh: make(chan struct{}), postCopy: d.cfg.PermitPostCopy && data["post_copy"] == "true"}
	v.job = job
	// A paused guest is copied paused (Guest.Paused): a failed copy
	// leaves it paused here, a completed one arrives paused.
	v.st.Guest.Paused = v.st.Guest.State == compute.GuestPaused
	v.st.Guest.State, v.st.Guest.MigrationID, v.st.Dest, v.st.URI = compute.GuestMigrating, migID, dest, data["uri"]
	d.saveLocked(v)
	d.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	go func() {
		err := d.startCopy(bg, v, job, inst, data["uri"])
		if err == nil {
			err = d.watch(bg, v, job, progress)
		}
		if errors.Is(err, errDetached) {
			return
		}
		d.finish(bg, v, job, err)
		<-returned
		done(err)
	}()
}

func (d *Driver) startCopy(ctx context.Context, v *vm, job *copyJob, inst records.Instance, uri string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.execute(ctx, v, "migrate-set-capabilities", capabilities(job.postCopy), nil); err != nil {
		return fmt.Errorf("live migration of %s: %w", inst.UUID, err)
	}
	bw := d.cfg.BandwidthMiBps << 20
	if bw <= 0 {
		bw = 1 << 40 // unlimited (QEMU's default cap is 128 MiB/s)
	}
	params := map[string]any{"max-bandwidth": bw, "downtime-limit": d.cfg.Downtime.Milliseconds()}
	if err := d.execute(ctx, v, "migrate-set-parameters", params, nil); err != nil {
		return fmt.Errorf("live migration of %s: %w", inst.UUID, err)
	}
	if err := d.execute(ctx, v, "migrate", map[string]any{"uri": uri}, nil); err != nil {
		return fmt.Errorf("live migration of %s: %w", inst.UUID, err)
	}
	d.log.Info("qemu migration started", "instance", inst.UUID, "migration", job.migID, "uri", uri,
		"bandwidth_mibps", d.cfg.BandwidthMiBps, "downtime", d.cfg.Downtime, "post_copy", job.postCopy)
	return nil
}

// completionTimeout is Nova's: live_migration_completion_timeout seconds
// per GiB of RAM, counting at least 2 GiB; 0 for none.
func (d *Driver) completionTimeout(ramMB int64) time.Duration {
	if d.cfg.CompletionTimeout <= 0 {
		return 0
	}
	gib := max(float64(ramMB)/1024, 2)
	return time.Duration(float64(d.cfg.CompletionTimeout) * gib)
}

// watch polls query-migrate (woken early by QEMU's MIGRATION events)
// until the copy ends, reporting progress and applying the completion
// timeout.
func (d *Driver) watch(ctx context.Context, v *vm, job *copyJob, progress func(total, processed, remaining int64)) error {
	uuid := v.st.Guest.UUID
	var timeout <-chan time.Time
	limit := d.completionTimeout(v.st.Guest.Flavor.RAMMB)
	if limit > 0 {
		timer := time.NewTimer(limit)
		defer timer.Stop()
		timeout = timer.C
	}
	tick := time.NewTicker(d.cfg.PollEvery)
	defer tick.Stop()
	lastReport := time.Time{}
	for {
		var events <-chan qmpEvent
		if mon, err := d.monitor(ctx, v); err == nil {
			events = mon.Events()
		}
		info, err := d.queryMigrate(ctx, v)
		if err != nil {
			if !v.alive() {
				return fmt.Errorf("live migration of %s: the source QEMU exited: %s", uuid, logTail(v.dir))
			}
			d.log.Warn("reading the migration's state", "instance", uuid, "err", err)
		} else {
			job.mu.Lock()
			job.last = info
			job.mu.Unlock()
			switch info.Status {
			case "completed":
				info = d.finalFigures(ctx, v, info)
				job.mu.Lock()
				job.last = info
				job.mu.Unlock()
				if progress != nil && info.RAM != nil {
					progress(info.RAM.Total, info.RAM.Transferred, 0)
				}
				return nil
			case "failed":
				return fmt.Errorf("live migration of %s failed in QEMU: %s", uuid, orUnknown(info.ErrorDesc))
			case "cancelled":
				job.mu.Lock()
				timedOut := job.timedOut
				job.mu.Unlock()
				if timedOut > 0 {
					return fmt.Errorf("live migration of %s did not complete within live_migration_completion_timeout (%s for %d MiB): %w",
						uuid, timedOut, v.st.Guest.Flavor.RAMMB, compute.ErrCopyCancelled)
				}
				return fmt.Errorf("live migration of %s: %w", uuid, compute.ErrCopyCancelled)
			}
			if progress != nil && info.RAM != nil && time.Since(lastReport) >= d.cfg.ProgressEvery {
				lastReport = time.Now()
				progress(info.RAM.Total, info.RAM.Transferred, info.RAM.Remaining)
			}
		}
		select {
		case <-job.stopCh:
			job.mu.Lock()
			detached := job.detached
			job.mu.Unlock()
			if detached {
				return errDetached
			}
			return fmt.Errorf("live migration of %s: the guest was destroyed", uuid)
		case <-timeout:
			timeout = nil
			d.onTimeout(ctx, v, job, limit)
		case _, ok := <-events:
			if !ok { // the session ended: poll (and reconnect) on the tick
				<-tick.C
			}
		case <-tick.C:
		}
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

func (d *Driver) onTimeout(ctx context.Context, v *vm, job *copyJob, limit time.Duration) {
	uuid := v.st.Guest.UUID
	if d.cfg.TimeoutAction == "force_complete" {
		d.log.Info("live_migration_completion_timeout: forcing completion", "instance", uuid, "post_copy", job.postCopy)
		if err := d.force(ctx, v, job); err != nil {
			d.log.Warn("forcing the migration's completion", "instance", uuid, "err", err)
		}
		return
	}
	d.log.Info("live_migration_completion_timeout: aborting", "instance", uuid)
	job.mu.Lock()
	job.timedOut = limit
	job.mu.Unlock()
	if err := d.execute(ctx, v, "migrate_cancel", nil, nil); err != nil {
		d.log.Warn("cancelling the migration", "instance", uuid, "err", err)
	}
}

// finalFigures re-reads a completed migration's figures while QEMU has
// not yet filled them in (it sets the status a moment before the times).
func (d *Driver) finalFigures(ctx context.Context, v *vm, info MigrationInfo) MigrationInfo {
	for i := 0; i < 25 && info.TotalTime == 0; i++ {
		time.Sleep(2 * time.Millisecond)
		if again, err := d.queryMigrate(ctx, v); err == nil && again.Status == "completed" {
			info = again
		}
	}
	return info
}

func (d *Driver) queryMigrate(ctx context.Context, v *vm) (MigrationInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var info MigrationInfo
	err := d.execute(ctx, v, "query-migrate", nil, &info)
	return info, err
}

// finish ends a copy: a failed one leaves the guest running here (resumed
// if it was paused to force completion); a completed one leaves the
// source QEMU (postmigrate) until post_live_migration_at_source.
func (d *Driver) finish(ctx context.Context, v *vm, job *copyJob, err error) {
	job.mu.Lock()
	paused, last := job.paused, job.last
	job.mu.Unlock()
	if err != nil && paused && v.alive() {
		if cerr := d.execute(ctx, v, "cont", nil, nil); cerr != nil {
			d.log.Warn("resuming the source guest after a failed forced migration", "instance", v.st.Guest.UUID, "err", cerr)
		}
	}
	d.mu.Lock()
	if v.job == job {
		v.job = nil
	}
	if err != nil && v.st.Guest.State == compute.GuestMigrating && d.vms[v.st.Guest.UUID] == v {
		v.st.Guest.State, v.st.Guest.MigrationID, v.st.Dest, v.st.URI = v.st.Guest.Settled(), 0, "", ""
		v.st.Guest.Paused = false
		d.saveLocked(v)
	}
	d.mu.Unlock()
	attrs := []any{"instance", v.st.Guest.UUID, "migration", job.migID, "status", last.Status,
		"total_ms", last.TotalTime, "downtime_ms", last.Downtime}
	if last.RAM != nil {
		attrs = append(attrs, "ram_transferred", last.RAM.Transferred, "ram_total", last.RAM.Total)
	}
	if err != nil {
		d.log.Info("qemu migration ended", append(attrs, "err", err)...)
	} else {
		d.log.Info("qemu migration completed", attrs...)
	}
}

// AbortLiveMigration implements compute.Driver: migrate_cancel. The copy
// reports its end (cancelled, the guest running here) through its done
// callback.
func (d *Driver) AbortLiveMigration(ctx context.Context, uuid string) error {
	v, _, err := d.copying(uuid, "aborting")
	if err != nil {
		return err
	}
	if err := d.execute(ctx, v, "migrate_cancel", nil, nil); err != nil {
		return fmt.Errorf("aborting the migration of %s: %w", uuid, err)
	}
	return nil
}

// ForceCompleteLiveMigration implements compute.Driver: post-copy when
// both hosts permit it, else the source guest is paused so that the last
// pass fits the downtime (resumed on the destination, or here if the copy
// fails after all).
func (d *Driver) ForceCompleteLiveMigration(ctx context.Context, uuid string) error {
	v, job, err := d.copying(uuid, "force-completing")
	if err != nil {
		return err
	}
	return d.force(ctx, v, job)
}

func (d *Driver) force(ctx context.Context, v *vm, job *copyJob) error {
	paused := d.copiedPaused(v) // before job.mu: Close takes d.mu, then job.mu
	job.mu.Lock()
	defer job.mu.Unlock()
	if job.forced {
		return nil
	}
	job.forced = true
	if paused && !job.postCopy {
		return nil // a paused guest dirties nothing: its copy completes as it is
	}
	if job.postCopy {
		if err := d.execute(ctx, v, "migrate-start-postcopy", nil, nil); err != nil {
			return fmt.Errorf("switching the migration of %s to post-copy: %w", v.st.Guest.UUID, err)
		}
		return nil
	}
	if err := d.execute(ctx, v, "stop", nil, nil); err != nil {
		return fmt.Errorf("pausing %s to complete its migration: %w", v.st.Guest.UUID, err)
	}
	job.paused = true
	return nil
}

// copiedPaused reports whether v's copy began with the guest paused.
func (d *Driver) copiedPaused(v *vm) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return v.st.Guest.Paused
}

func (d *Driver) copying(uuid, op string) (*vm, *copyJob, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.vms[uuid]
	if !ok || v.job == nil {
		return nil, nil, fmt.Errorf("%s %s: %w", op, uuid, ErrNoMigration)
	}
	return v, v.job, nil
}

// Reattach implements compute.Resumer: it watches again a copy that
// outlived a restart of the agent (one of Resumable), reporting as
// LiveMigration would.
func (d *Driver) Reattach(ctx context.Context, uuid string, progress func(total, processed, remaining int64), done func(error)) {
	returned := make(chan struct{})
	defer close(returned)
	d.mu.Lock()
	v, ok := d.vms[uuid]
	if !ok || v.st.Guest.State != compute.GuestMigrating || v.job != nil {
		d.mu.Unlock()
		go func() { <-returned; done(fmt.Errorf("re-attaching to the migration of %s: no such copy here", uuid)) }()
		return
	}
	job := &copyJob{migID: v.st.Guest.MigrationID, stopCh: make(chan struct{})}
	v.job = job
	d.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	go func() {
		// Learn whether the copy runs in post-copy and whether the guest
		// was paused for it, as the lost agent knew.
		var caps []struct {
			Capability string `json:"capability"`
			State      bool   `json:"state"`
		}
		if err := d.execute(bg, v, "query-migrate-capabilities", nil, &caps); err == nil {
			for _, c := range caps {
				if c.Capability == "postcopy-ram" {
					job.postCopy = c.State
				}
			}
		}
		var st struct{ Status string }
		if err := d.execute(bg, v, "query-status", nil, &st); err == nil && st.Status == "paused" && !d.copiedPaused(v) {
			job.paused, job.forced = true, true
		}
		d.log.Info("re-attached to a migration that outlived the agent", "instance", uuid, "migration", job.migID)
		err := d.watch(bg, v, job, progress)
		if errors.Is(err, errDetached) {
			return
		}
		d.finish(bg, v, job, err)
		<-returned
		done(err)
	}()
}

type qmpEvent = qmp.Event

// DestinationOf returns the host the guest's outgoing copy goes to ("" if
// none): the manager needs it to re-attach after a restart.
func (d *Driver) DestinationOf(uuid string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.vms[uuid]; ok {
		return v.st.Dest
	}
	return ""
}

// ReadHeartbeat reads a guest's heartbeat word from its memory through the
// QMP socket at sock (a guest's peek.sock: see PeekSocket), with the magic
// word that proves it is keel's guest.
func ReadHeartbeat(ctx context.Context, sock string) (uint32, error) {
	c, err := qmp.Dial(ctx, sock)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return heartbeat(ctx, c)
}

// Close lets go of the guests without stopping them (the agent is
// stopping): copies in progress go on in QEMU, unreported, for the next
// agent to re-attach to; the monitor sessions close.
func (d *Driver) Close() error {
	d.mu.Lock()
	vms := make([]*vm, 0, len(d.vms))
	for _, v := range d.vms {
		vms = append(vms, v)
		if v.job != nil {
			v.job.mu.Lock()
			v.job.detached = true
			v.job.mu.Unlock()
			v.job.cancel()
		}
	}
	d.mu.Unlock()
	for _, v := range vms {
		v.monMu.Lock()
		if v.mon != nil {
			v.mon.Close()
			v.mon = nil
		}
		v.monMu.Unlock()
	}
	return nil
}

// RevertCopy implements compute.CopyReverter: the copy completed in QEMU
// but the destination lost the guest, so the source guest (postmigrate)
// runs again here.
func (d *Driver) RevertCopy(ctx context.Context, uuid string) error {
	d.mu.Lock()
	v, ok := d.vms[uuid]
	ok = ok && v.st.Guest.State == compute.GuestMigrating && v.job == nil
	d.mu.Unlock()
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var st struct{ Status string }
	if err := d.execute(ctx, v, "query-status", nil, &st); err != nil {
		return fmt.Errorf("reverting the copy of %s: %w", uuid, err)
	}
	// A guest copied paused stays paused here (unpause's cont resumes it
	// from postmigrate as from paused).
	if st.Status != "running" && !d.copiedPaused(v) {
		if err := d.execute(ctx, v, "cont", nil, nil); err != nil {
			return fmt.Errorf("resuming %s (%s) after its destination was lost: %w", uuid, st.Status, err)
		}
	}
	d.mu.Lock()
	v.st.Guest.State, v.st.Guest.MigrationID, v.st.Dest, v.st.URI = v.st.Guest.Settled(), 0, "", ""
	v.st.Guest.Paused = false
	d.saveLocked(v)
	d.mu.Unlock()
	d.log.Info("the destination lost the guest after the copy: it runs here again", "instance", uuid, "was", st.Status)
	return nil
}
