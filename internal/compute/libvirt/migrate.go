package libvirt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"keel/internal/compute"
	"keel/internal/compute/qemu/guest"
	"keel/internal/records"
)

// fileIncoming marks, in a guest's directory on the destination, a guest
// prepared to arrive (pre_live_migration) before libvirt has created its
// domain here: keel's metadata of it.
const fileIncoming = "incoming.xml"

// ErrNoMigration is returned when there is no copy to act on.
var ErrNoMigration = errors.New("no live migration in progress for this instance")

// errDetached ends a watch when the driver closes: nothing is reported.
var errDetached = errors.New("detached from the copy")

// Job is a migration job's figures as libvirt's job stats give them.
type Job struct {
	Type      int32 // virDomainJobType: 0 none, 2 running, 3 completed, 4 failed, 5 cancelled
	Operation int32 // virDomainJobOperation: 5 migration out
	// Memory in bytes; DirtyRate in pages per second; Iteration the
	// number of passes over memory.
	MemTotal, MemProcessed, MemRemaining int64
	DirtyRate, Iteration, Bps            int64
	// Elapsed, Downtime and Setup in milliseconds (Downtime once the job
	// completed).
	Elapsed, Downtime, Setup int64
	Throttle                 int64 // auto-converge's CPU throttle, %
	ErrMsg                   string
}

func jobOf(typ int32, params []golibvirt.TypedParam) Job {
	j := Job{Type: typ}
	for _, p := range params {
		var n int64
		switch v := p.Value.I.(type) {
		case int32:
			n = int64(v)
		case uint32:
			n = int64(v)
		case int64:
			n = v
		case uint64:
			n = int64(v)
		case float64:
			n = int64(v)
		case string:
			if p.Field == golibvirt.DomainJobErrmsg {
				j.ErrMsg = v
			}
			continue
		}
		switch p.Field {
		case "operation":
			j.Operation = int32(n)
		case golibvirt.DomainJobMemoryTotal:
			j.MemTotal = n
		case golibvirt.DomainJobMemoryProcessed:
			j.MemProcessed = n
		case golibvirt.DomainJobMemoryRemaining:
			j.MemRemaining = n
		case golibvirt.DomainJobMemoryDirtyRate:
			j.DirtyRate = n
		case golibvirt.DomainJobMemoryIteration:
			j.Iteration = n
		case golibvirt.DomainJobMemoryBps:
			j.Bps = n
		case golibvirt.DomainJobTimeElapsed:
			j.Elapsed = n
		case golibvirt.DomainJobDowntime:
			j.Downtime = n
		case golibvirt.DomainJobSetupTime:
			j.Setup = n
		case golibvirt.DomainJobAutoConvergeThrottle:
			j.Throttle = n
		}
	}
	return j
}

// copyJob is one outgoing migration the driver watches.
type copyJob struct {
	migID    int64
	postCopy bool
	stopOnce sync.Once
	stopCh   chan struct{}
	mu       sync.Mutex
	detached bool
	forced   bool
	paused   bool          // the source was paused to force completion
	timedOut time.Duration // the completion timeout that cancelled it
	last     Job
	// started is when Perform was called; copying when memory first
	// flowed (the destination's QEMU had started: libvirt's Prepare).
	started, copying time.Time
}

func (j *copyJob) stop() { j.stopOnce.Do(func() { close(j.stopCh) }) }

func (j *copyJob) detach() {
	j.mu.Lock()
	j.detached = true
	j.mu.Unlock()
	j.stop()
}

// CheckCanLiveMigrateDestination implements compute.Driver: no domain of
// the instance is here, and its guest program is one keel runs.
func (d *Driver) CheckCanLiveMigrateDestination(_ context.Context, inst records.Instance) error {
	l, err := d.lv()
	if err != nil {
		return err
	}
	if _, err := l.DomainLookupByName(DomainName(inst.UUID)); err == nil {
		return fmt.Errorf("instance %s already has a domain on this host's libvirtd", inst.UUID)
	}
	if compute.BootsImage(inst) {
		return fmt.Errorf("instance %s boots from an uploaded image, whose disk (a local overlay) the libvirt driver does not live-migrate: migrate it cold (server migrate, resize)", inst.UUID)
	}
	if _, err := guest.Parse(inst.Metadata[guest.MetadataKey]); err != nil {
		return err
	}
	return nil
}

// CheckCanLiveMigrateSource implements compute.Driver: the guest is this
// host's and runs (or is paused: it arrives paused).
func (d *Driver) CheckCanLiveMigrateSource(_ context.Context, inst records.Instance) error {
	x, ok, err := d.lookup(inst.UUID)
	if err != nil {
		return fmt.Errorf("instance %s: %w", inst.UUID, err)
	}
	if !ok {
		return fmt.Errorf("instance %s has no domain on the source", inst.UUID)
	}
	if s := x.guest().State; s != compute.GuestRunning && s != compute.GuestPaused {
		return fmt.Errorf("instance %s is %s on the source, not running (nor paused)", inst.UUID, s)
	}
	return nil
}

// PreLiveMigration implements compute.Driver: the destination writes the
// guest's disk and marks it incoming; libvirt starts the incoming QEMU
// itself when the source's libvirtd asks. The migrate data names this
// host's libvirtd, the disk's path here, and whether post-copy is
// permitted here.
func (d *Driver) PreLiveMigration(ctx context.Context, inst records.Instance) (map[string]string, error) {
	if x, ok, err := d.lookup(inst.UUID); err != nil {
		return nil, fmt.Errorf("pre_live_migration of %s: %w", inst.UUID, err)
	} else if ok && x.m.State != stIncoming {
		return nil, fmt.Errorf("pre_live_migration of %s: its guest already runs here", inst.UUID)
	}
	if err := d.writeDisk(ctx, inst, ""); err != nil {
		return nil, fmt.Errorf("pre_live_migration of %s: %w", inst.UUID, err)
	}
	m := meta{Host: d.cfg.Host, Name: inst.Name, Program: inst.Metadata[guest.MetadataKey], State: stIncoming, Flavor: flavorMeta(inst.Flavor)}
	if err := os.WriteFile(filepath.Join(d.guestDir(inst.UUID), fileIncoming), []byte(m.element()), 0o644); err != nil {
		return nil, fmt.Errorf("pre_live_migration of %s: %w", inst.UUID, err)
	}
	addr := d.cfg.InboundAddr
	if addr == "" {
		addr = d.cfg.Host
	}
	data := map[string]string{
		"driver":    "libvirt",
		"dconnuri":  fmt.Sprintf("qemu+%s://%s/system", d.cfg.Scheme, addr),
		"disk_path": d.diskPath(inst.UUID),
		"host":      d.cfg.Host,
		"post_copy": strconv.FormatBool(d.cfg.PermitPostCopy),
	}
	if d.cfg.InboundAddr != "" {
		data["migrate_uri"] = "tcp://" + d.cfg.InboundAddr
	}
	return data, nil
}

// preparedIncoming lists the guests prepared to arrive here.
func (d *Driver) preparedIncoming() []compute.Guest {
	files, _ := filepath.Glob(filepath.Join(d.cfg.Dir, "*", fileIncoming))
	var out []compute.Guest
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		m, err := parseMeta(string(data))
		if err != nil {
			continue
		}
		out = append(out, compute.Guest{UUID: filepath.Base(filepath.Dir(f)), Name: m.Name, Flavor: m.Flavor.flavor(), State: compute.GuestIncoming})
	}
	return out
}

// destinationXML is the source domain's migratable XML as the
// destination is to define it: the disk at the destination's path, the
// destination host's metadata (incoming, for migration migID).
func (d *Driver) destinationXML(x dom, data map[string]string, migID int64) (string, error) {
	l, err := d.lv()
	if err != nil {
		return "", err
	}
	s, err := l.DomainGetXMLDesc(x.d, golibvirt.DomainXMLMigratable)
	if err != nil {
		return "", fmt.Errorf("reading the XML of %s: %w", x.d.Name, err)
	}
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(s); err != nil {
		return "", fmt.Errorf("reading the XML of %s: %w", x.d.Name, err)
	}
	if disk := data["disk_path"]; disk != "" && dx.Devices != nil {
		for i := range dx.Devices.Disks {
			if src := dx.Devices.Disks[i].Source; src != nil && src.File != nil {
				src.File.File = disk
			}
		}
		// The console log goes on in the destination's guest directory
		// (the source's stays with the source, as Nova's does).
		for i := range dx.Devices.Serials {
			if src := dx.Devices.Serials[i].Source; src != nil && src.File != nil {
				dx.Devices.Serials[i].Source = consoleSource(disk)
			}
		}
	}
	m := x.m
	m.Host, m.State, m.Migration, m.Dest, m.Paused = data["host"], stIncoming, migID, "", false
	setMetaIn(&dx, m)
	return dx.Marshal()
}

// LiveMigration implements compute.Driver: libvirt's peer to peer
// migration to the destination's libvirtd, watched until it ends.
func (d *Driver) LiveMigration(ctx context.Context, migID int64, inst records.Instance, dest string, data map[string]string,
	progress func(total, processed, remaining int64), done func(error)) {
	returned := make(chan struct{})
	defer close(returned)
	fail := func(err error) {
		err = fmt.Errorf("live migration of %s: %w", inst.UUID, err)
		go func() { <-returned; done(err) }()
	}
	x, ok, err := d.lookup(inst.UUID)
	switch {
	case err != nil:
		fail(err)
		return
	case !ok:
		fail(errors.New("no guest of it here"))
		return
	case data["dconnuri"] == "":
		fail(errors.New("the destination gave no libvirt URI (is it running the libvirt driver?)"))
		return
	}
	state := x.guest().State
	if state != compute.GuestRunning && state != compute.GuestPaused {
		fail(fmt.Errorf("the guest is %s here, not running (nor paused)", state))
		return
	}
	dxml, err := d.destinationXML(x, data, migID)
	if err != nil {
		fail(err)
		return
	}
	job := &copyJob{migID: migID, stopCh: make(chan struct{}), postCopy: d.cfg.PermitPostCopy && data["post_copy"] == "true"}
	d.mu.Lock()
	if d.jobs[inst.UUID] != nil {
		d.mu.Unlock()
		fail(errors.New("a migration of this guest is already in progress"))
		return
	}
	d.jobs[inst.UUID] = job
	d.mu.Unlock()
	m := x.m
	m.State, m.Migration, m.Dest, m.Paused, m.PostCopy = stMigrating, migID, dest, state == compute.GuestPaused, job.postCopy
	if err := d.setMeta(x, m); err != nil {
		d.dropJob(inst.UUID, job)
		fail(err)
		return
	}
	x.m = m
	bg := context.WithoutCancel(ctx)
	go func() {
		performed := make(chan error, 1)
		start := time.Now()
		job.mu.Lock()
		job.started = start
		job.mu.Unlock()
		go func() { performed <- d.perform(x, dxml, data, job) }()
		err := d.watch(bg, x, job, performed, progress)
		if errors.Is(err, errDetached) {
			return
		}
		d.finish(x, job, err, time.Since(start))
		<-returned
		done(err)
	}()
}

// migrateFlags are the flags of keel's migrations: live, peer to peer,
// the destination made persistent; the source's definition stays (shut
// off, "migrated") until post_live_migration_at_source undefines it, so
// a copy the destination then loses can be undone here. The disk is the
// guest's own per host (written by pre_live_migration, as the qemu
// driver's), which libvirt cannot know is safe: unsafe.
func (d *Driver) migrateFlags(job *copyJob) golibvirt.DomainMigrateFlags {
	f := golibvirt.MigrateLive | golibvirt.MigratePeer2peer | golibvirt.MigratePersistDest | golibvirt.MigrateUnsafe
	if job.postCopy {
		f |= golibvirt.MigratePostcopy
	} else if d.cfg.PermitAutoConverge {
		// Nova's rule: auto-converge only when post-copy is not used.
		f |= golibvirt.MigrateAutoConverge
	}
	return f
}

func (d *Driver) perform(x dom, dxml string, data map[string]string, job *copyJob) error {
	l, err := d.lv()
	if err != nil {
		return err
	}
	params := []golibvirt.TypedParam{
		{Field: golibvirt.MigrateParamDestXML, Value: *golibvirt.NewTypedParamValueString(dxml)},
		{Field: golibvirt.MigrateParamPersistXML, Value: *golibvirt.NewTypedParamValueString(dxml)},
	}
	if d.cfg.BandwidthMiBps > 0 {
		params = append(params, golibvirt.TypedParam{Field: golibvirt.MigrateParamBandwidth, Value: *golibvirt.NewTypedParamValueUllong(uint64(d.cfg.BandwidthMiBps))})
	}
	if u := data["migrate_uri"]; u != "" {
		params = append(params, golibvirt.TypedParam{Field: golibvirt.MigrateParamURI, Value: *golibvirt.NewTypedParamValueString(u)})
	}
	d.log.Info("libvirt migration started", "instance", x.uuid, "migration", job.migID, "dconnuri", data["dconnuri"],
		"bandwidth_mibps", d.cfg.BandwidthMiBps, "downtime", d.cfg.Downtime, "post_copy", job.postCopy, "auto_converge", d.cfg.PermitAutoConverge && !job.postCopy)
	_, err = l.DomainMigratePerform3Params(x.d, golibvirt.OptString{data["dconnuri"]}, params, nil, d.migrateFlags(job))
	return describe(err)
}

// completionTimeout is Nova's: live_migration_completion_timeout seconds
// per GiB of RAM, counting at least 2 GiB; 0 for none.
func (d *Driver) completionTimeout(ramMB int64) time.Duration {
	if d.cfg.CompletionTimeout <= 0 {
		return 0
	}
	return time.Duration(float64(d.cfg.CompletionTimeout) * max(float64(ramMB)/1024, 2))
}

// watch follows a copy until it ends: the Perform call's return when this
// agent started it (performed), else the job's end in libvirtd. It reads
// the job's figures every PollEvery, reports progress every
// ProgressEvery, sets the downtime limit once the job runs, and applies
// the completion timeout.
func (d *Driver) watch(ctx context.Context, x dom, job *copyJob, performed <-chan error, progress func(total, processed, remaining int64)) error {
	var timeout <-chan time.Time
	limit := d.completionTimeout(x.m.Flavor.RAMMB)
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		timeout = t.C
	}
	tick := time.NewTicker(d.cfg.PollEvery)
	defer tick.Stop()
	var lastReport time.Time
	downtimeSet := false
	for {
		select {
		case err := <-performed:
			return d.outcome(x, job, err)
		case <-job.stopCh:
			job.mu.Lock()
			detached := job.detached
			job.mu.Unlock()
			if detached {
				return errDetached
			}
			return fmt.Errorf("live migration of %s: the guest was destroyed", x.uuid)
		case <-timeout:
			timeout = nil
			d.onTimeout(x, job, limit)
			continue
		case <-tick.C:
		}
		l, err := d.lv()
		if err != nil {
			d.log.Warn("reading the migration's job", "instance", x.uuid, "err", err)
			continue
		}
		typ, params, err := l.DomainGetJobStats(x.d, 0)
		if isCode(err, golibvirt.ErrOperationInvalid) {
			// The domain has stopped here: the copy completed.
			if performed == nil {
				return d.outcome(x, job, nil)
			}
			continue // Perform's return says how
		}
		if err != nil {
			d.log.Warn("reading the migration's job", "instance", x.uuid, "err", err)
			continue
		}
		j := jobOf(typ, params)
		if j.Type == int32(golibvirt.DomainJobNone) {
			if performed == nil { // re-attached: the job ended in libvirtd
				return d.outcome(x, job, nil)
			}
			continue // not yet begun, or ended: Perform says how
		}
		job.mu.Lock()
		job.last = j
		if job.copying.IsZero() && j.MemProcessed > 0 {
			job.copying = time.Now()
		}
		job.mu.Unlock()
		if !downtimeSet && j.MemTotal > 0 {
			downtimeSet = true
			if err := l.DomainMigrateSetMaxDowntime(x.d, uint64(d.cfg.Downtime.Milliseconds()), 0); err != nil {
				d.log.Warn("setting live_migration_downtime", "instance", x.uuid, "err", err)
			}
		}
		if j.MemTotal > 0 && time.Since(lastReport) >= d.cfg.ProgressEvery {
			lastReport = time.Now()
			d.log.Info("libvirt migration progress", "instance", x.uuid, "migration", job.migID, "memory_processed", j.MemProcessed,
				"memory_remaining", j.MemRemaining, "memory_total", j.MemTotal, "dirty_rate_pages_s", j.DirtyRate, "iteration", j.Iteration,
				"throttle_pct", j.Throttle)
			if progress != nil {
				progress(j.MemTotal, j.MemProcessed, j.MemRemaining)
			}
		}
	}
}

// outcome is how a copy ended: Perform's error when this agent made the
// call; else (re-attached) the source domain's state says it — shut off
// as migrated is a success, still here running or paused a failure,
// with the job's own error message.
func (d *Driver) outcome(x dom, job *copyJob, perr error) error {
	job.mu.Lock()
	timedOut := job.timedOut
	job.mu.Unlock()
	if perr != nil {
		if errors.Is(perr, compute.ErrCopyCancelled) && timedOut > 0 {
			return fmt.Errorf("live migration of %s did not complete within live_migration_completion_timeout (%s for %d MiB): %w",
				x.uuid, timedOut, x.m.Flavor.RAMMB, compute.ErrCopyCancelled)
		}
		return fmt.Errorf("live migration of %s: %w", x.uuid, perr)
	}
	cur, ok, err := d.lookup(x.uuid)
	if err != nil {
		return fmt.Errorf("live migration of %s: %w", x.uuid, err)
	}
	if !ok || (cur.state == stateShutoff && cur.reason == int32(golibvirt.DomainShutoffMigrated)) {
		return nil
	}
	l, err := d.lv()
	if err == nil {
		if typ, params, err := l.DomainGetJobStats(x.d, golibvirt.DomainJobStatsCompleted); err == nil {
			j := jobOf(typ, params)
			switch j.Type {
			case int32(golibvirt.DomainJobCancelled):
				return fmt.Errorf("live migration of %s: the job was cancelled in libvirt: %w", x.uuid, compute.ErrCopyCancelled)
			case int32(golibvirt.DomainJobFailed):
				return fmt.Errorf("live migration of %s failed in libvirt: %s", x.uuid, orUnknown(j.ErrMsg))
			}
		}
	}
	return fmt.Errorf("live migration of %s ended with the guest still %s on the source", x.uuid, cur.guest().State)
}

func orUnknown(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

func (d *Driver) onTimeout(x dom, job *copyJob, limit time.Duration) {
	if d.cfg.TimeoutAction == "force_complete" {
		d.log.Info("live_migration_completion_timeout: forcing completion", "instance", x.uuid, "post_copy", job.postCopy)
		if err := d.force(x, job); err != nil {
			d.log.Warn("forcing the migration's completion", "instance", x.uuid, "err", err)
		}
		return
	}
	d.log.Info("live_migration_completion_timeout: aborting", "instance", x.uuid)
	job.mu.Lock()
	job.timedOut = limit
	job.mu.Unlock()
	if err := d.abortJob(x); err != nil {
		d.log.Warn("aborting the migration", "instance", x.uuid, "err", err)
	}
}

func (d *Driver) abortJob(x dom) error {
	l, err := d.lv()
	if err != nil {
		return err
	}
	return describe(l.DomainAbortJob(x.d))
}

// finish ends a copy here: a failed one leaves the guest as it was (a
// guest paused to force completion runs again; keel's migration state is
// cleared); a completed one leaves the source domain shut off until
// post_live_migration_at_source. It logs the job's figures.
func (d *Driver) finish(x dom, job *copyJob, err error, wall time.Duration) {
	job.mu.Lock()
	paused, last := job.paused, job.last
	prepare := int64(-1)
	if !job.started.IsZero() && !job.copying.IsZero() {
		prepare = job.copying.Sub(job.started).Milliseconds()
	}
	job.mu.Unlock()
	d.dropJob(x.uuid, job)
	attrs := []any{"instance", x.uuid, "migration", job.migID, "wall_ms", wall.Milliseconds(), "prepare_ms", prepare,
		"memory_processed", last.MemProcessed, "memory_total", last.MemTotal, "iterations", last.Iteration}
	if err == nil {
		if l, lerr := d.lv(); lerr == nil {
			if typ, params, serr := l.DomainGetJobStats(x.d, golibvirt.DomainJobStatsCompleted); serr == nil && typ == int32(golibvirt.DomainJobCompleted) {
				c := jobOf(typ, params)
				attrs = append(attrs, "downtime_ms", c.Downtime, "total_ms", c.Elapsed, "setup_ms", c.Setup)
			}
		}
		d.log.Info("libvirt migration completed", attrs...)
		return
	}
	d.log.Info("libvirt migration ended", append(attrs, "err", err)...)
	cur, ok, lerr := d.lookup(x.uuid)
	if lerr != nil || !ok {
		return
	}
	if paused && cur.state == statePaused && !x.m.Paused {
		if l, lerr := d.lv(); lerr == nil {
			if rerr := l.DomainResume(cur.d); rerr != nil {
				d.log.Warn("resuming the source guest after a failed forced migration", "instance", x.uuid, "err", rerr)
			}
		}
	}
	if cur.m.State == stMigrating {
		if serr := d.settle(cur); serr != nil {
			d.log.Warn("clearing the failed migration's state", "instance", x.uuid, "err", serr)
		}
	}
}

func (d *Driver) dropJob(uuid string, job *copyJob) {
	d.mu.Lock()
	if d.jobs[uuid] == job {
		delete(d.jobs, uuid)
	}
	d.mu.Unlock()
}

func (d *Driver) copying(uuid, op string) (dom, *copyJob, error) {
	d.mu.Lock()
	job := d.jobs[uuid]
	d.mu.Unlock()
	if job == nil {
		return dom{}, nil, fmt.Errorf("%s %s: %w", op, uuid, ErrNoMigration)
	}
	x, ok, err := d.lookup(uuid)
	if err != nil || !ok {
		return dom{}, nil, fmt.Errorf("%s %s: %w", op, uuid, ErrNoMigration)
	}
	return x, job, nil
}

// AbortLiveMigration implements compute.Driver: libvirt aborts the job
// (and cleans up the destination); the copy reports its end, cancelled,
// through its done callback.
func (d *Driver) AbortLiveMigration(_ context.Context, uuid string) error {
	x, _, err := d.copying(uuid, "aborting")
	if err != nil {
		return err
	}
	if err := d.abortJob(x); err != nil {
		return fmt.Errorf("aborting the migration of %s: %w", uuid, err)
	}
	return nil
}

// ForceCompleteLiveMigration implements compute.Driver: post-copy when
// both hosts permit it (the migration started with it enabled), else the
// source guest is paused so the last pass fits the downtime; libvirt
// records the pause as the migration's and resumes the guest on the
// destination.
func (d *Driver) ForceCompleteLiveMigration(_ context.Context, uuid string) error {
	x, job, err := d.copying(uuid, "force-completing")
	if err != nil {
		return err
	}
	return d.force(x, job)
}

func (d *Driver) force(x dom, job *copyJob) error {
	job.mu.Lock()
	defer job.mu.Unlock()
	if job.forced {
		return nil
	}
	job.forced = true
	if x.m.Paused && !job.postCopy {
		return nil // a paused guest dirties nothing: its copy completes as it is
	}
	l, err := d.lv()
	if err != nil {
		return err
	}
	if job.postCopy {
		if err := l.DomainMigrateStartPostCopy(x.d, 0); err != nil {
			return fmt.Errorf("switching the migration of %s to post-copy: %w", x.uuid, describe(err))
		}
		return nil
	}
	if err := l.DomainSuspend(x.d); err != nil {
		return fmt.Errorf("pausing %s to complete its migration: %w", x.uuid, describe(err))
	}
	job.paused = true
	return nil
}

// Reattach implements compute.Resumer: it follows again a copy that
// outlived a restart of the agent (one of Resumable) to its end in the
// source's libvirtd, reporting as LiveMigration would.
func (d *Driver) Reattach(ctx context.Context, uuid string, progress func(total, processed, remaining int64), done func(error)) {
	returned := make(chan struct{})
	defer close(returned)
	x, ok, err := d.lookup(uuid)
	if err == nil && (!ok || x.m.State != stMigrating) {
		err = errors.New("no such copy here")
	}
	d.mu.Lock()
	if err == nil && d.jobs[uuid] != nil {
		err = errors.New("already followed")
	}
	var job *copyJob
	if err == nil {
		job = &copyJob{migID: x.m.Migration, postCopy: x.m.PostCopy, stopCh: make(chan struct{})}
		d.jobs[uuid] = job
	}
	d.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("re-attaching to the migration of %s: %w", uuid, err)
		go func() { <-returned; done(err) }()
		return
	}
	if x.state == statePaused && x.reason == int32(golibvirt.DomainPausedUser) && !x.m.Paused {
		job.paused, job.forced = true, true
	}
	d.log.Info("re-attached to a migration that outlived the agent", "instance", uuid, "migration", job.migID)
	bg := context.WithoutCancel(ctx)
	go func() {
		start := time.Now()
		err := d.watch(bg, x, job, nil, progress)
		if errors.Is(err, errDetached) {
			return
		}
		d.finish(x, job, err, time.Since(start))
		<-returned
		done(err)
	}()
}

// DestinationOf implements compute.CopyDestination: the host the guest's
// outgoing copy goes to, from its metadata.
func (d *Driver) DestinationOf(uuid string) string {
	x, ok, err := d.lookup(uuid)
	if err != nil || !ok || x.m.State != stMigrating {
		return ""
	}
	return x.m.Dest
}

// CheckIncoming implements compute.IncomingChecker: nil while the guest
// is prepared here, arriving or arrived.
func (d *Driver) CheckIncoming(_ context.Context, uuid string) error {
	_, ok, err := d.lookup(uuid)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	if _, err := os.Stat(filepath.Join(d.guestDir(uuid), fileIncoming)); err == nil {
		return nil
	}
	return fmt.Errorf("no incoming guest %s: libvirt has no domain of it here", uuid)
}

// PostLiveMigrationAtSource implements compute.Driver: the source's shut
// off definition and its disk go.
func (d *Driver) PostLiveMigrationAtSource(ctx context.Context, uuid string) error {
	return d.Destroy(ctx, uuid)
}

// PostLiveMigrationAtDestination implements compute.Driver: the arrived
// domain becomes this host's running guest (paused if the instance is
// paused), its migration state cleared; the job's figures (downtime,
// total time) are logged.
func (d *Driver) PostLiveMigrationAtDestination(_ context.Context, inst records.Instance) error {
	x, ok, err := d.lookup(inst.UUID)
	if err != nil {
		return fmt.Errorf("post live migration of %s: %w", inst.UUID, err)
	}
	if !ok {
		return fmt.Errorf("post live migration of %s: libvirt has no domain of it here", inst.UUID)
	}
	_ = os.Remove(filepath.Join(d.guestDir(inst.UUID), fileIncoming))
	if x.m.State != stIncoming {
		return nil // repeated after a restart
	}
	l, err := d.lv()
	if err != nil {
		return err
	}
	if typ, params, err := l.DomainGetJobStats(x.d, golibvirt.DomainJobStatsCompleted); err == nil && typ == int32(golibvirt.DomainJobCompleted) {
		j := jobOf(typ, params)
		d.log.Info("libvirt migration arrived", "instance", inst.UUID, "migration", x.m.Migration, "downtime_ms", j.Downtime,
			"total_ms", j.Elapsed, "memory_processed", j.MemProcessed, "iterations", j.Iteration)
	}
	keepPaused := inst.VMState == records.VMPaused
	switch {
	case x.state == statePaused && !keepPaused:
		if err := l.DomainResume(x.d); err != nil {
			return fmt.Errorf("post live migration of %s: resuming the guest: %w", inst.UUID, describe(err))
		}
	case x.state == stateRunning && keepPaused:
		if err := l.DomainSuspend(x.d); err != nil {
			return fmt.Errorf("post live migration of %s: pausing the guest: %w", inst.UUID, describe(err))
		}
	case x.state != stateRunning && x.state != statePaused:
		return fmt.Errorf("post live migration of %s: the arrived guest is not running (libvirt state %d, reason %d)", inst.UUID, x.state, x.reason)
	}
	m := x.m
	m.State, m.Migration, m.Dest, m.Paused, m.PostCopy = "", 0, "", false, false
	return d.setMeta(x, m)
}

// RollbackLiveMigrationAtDestination implements compute.Driver: an
// incoming domain libvirt left here (it removes its own on a failed
// job) and the prepared disk go.
func (d *Driver) RollbackLiveMigrationAtDestination(_ context.Context, uuid string) error {
	x, ok, err := d.lookup(uuid)
	if err != nil {
		return err
	}
	if ok && x.m.State != stIncoming {
		return nil // the guest is this host's: nothing to roll back
	}
	if ok {
		if err := d.undefine(x); err != nil {
			return fmt.Errorf("rollback of %s: %w", uuid, err)
		}
	}
	if err := os.RemoveAll(d.guestDir(uuid)); err != nil {
		return fmt.Errorf("rollback of %s: %w", uuid, err)
	}
	return nil
}

// RevertCopy implements compute.CopyReverter: libvirt completed the copy
// but the destination's agent lost the guest, so the migration is rolled
// back and the source's (shut off) guest boots again here. Unlike the
// qemu driver's, libvirt's source QEMU is gone once the copy completes:
// the guest restarts rather than resumes.
func (d *Driver) RevertCopy(_ context.Context, uuid string) error {
	x, ok, err := d.lookup(uuid)
	if err != nil || !ok || x.m.State != stMigrating {
		return err
	}
	d.mu.Lock()
	busy := d.jobs[uuid] != nil
	d.mu.Unlock()
	if busy {
		return nil
	}
	if x.state == stateShutoff {
		l, err := d.lv()
		if err != nil {
			return err
		}
		flags := uint32(0)
		if x.m.Paused {
			flags = 1 // VIR_DOMAIN_START_PAUSED
		}
		if _, err := l.DomainCreateWithFlags(x.d, flags); err != nil {
			return fmt.Errorf("starting %s again after its destination was lost: %w", uuid, describe(err))
		}
		d.log.Warn("the destination lost the guest after the copy: it boots again here", "instance", uuid)
		x, _, _ = d.lookup(uuid)
	}
	return d.settle(x)
}
