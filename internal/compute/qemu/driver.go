package qemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"keel/internal/compute"
	"keel/internal/compute/guestdisk"
	"keel/internal/compute/qemu/guest"
	"keel/internal/compute/qemu/qmp"
	"keel/internal/records"
)

// DefaultBinary is the QEMU the driver runs unless told otherwise.
const DefaultBinary = "qemu-system-x86_64"

// Config configures the driver. The migration options are Nova's [libvirt]
// ones, applied by the source.
type Config struct {
	// Dir holds one directory per guest (the agent's DATA_DIR/qemu).
	Dir string
	// Binary is the QEMU to run (DefaultBinary, found on PATH).
	Binary string
	// ExtraArgs are appended to every QEMU command line; they must be the
	// same on every host a guest migrates between.
	ExtraArgs []string
	// BandwidthMiBps caps a migration's copy (live_migration_bandwidth);
	// 0 is unlimited.
	BandwidthMiBps int64
	// Downtime is the most the guest may be paused for the last pass
	// (live_migration_downtime; default 500 ms).
	Downtime time.Duration
	// CompletionTimeout is live_migration_completion_timeout: per GiB of
	// guest RAM, counting at least 2 GiB; 0 disables it.
	CompletionTimeout time.Duration
	// PermitPostCopy is live_migration_permit_post_copy.
	PermitPostCopy bool
	// TimeoutAction is live_migration_timeout_action: "abort" (default)
	// or "force_complete".
	TimeoutAction string
	// PollEvery is how often a copy's state is read when no event wakes
	// the driver first (default 100 ms); ProgressEvery how often progress
	// is reported (default 1 s).
	PollEvery     time.Duration
	ProgressEvery time.Duration
	// ConsoleLogMax is the size past which a guest's serial console log
	// is rotated (default DefaultConsoleLogMax): at each start of its
	// QEMU, each console read, and each audit.
	ConsoleLogMax int64
	// Images gives the data of the uploaded images guests boot from (the
	// agent's: the servers, over the bus); without it only keel's
	// built-in guest boots.
	Images compute.ImageSource
	// QEMUImg is the qemu-img to run (default "qemu-img", on PATH).
	QEMUImg string
	Log     *slog.Logger
}

// Driver is the QEMU virt driver.
type Driver struct {
	cfg Config
	log *slog.Logger
	// images is the host's copy of the images its guests boot from
	// (Dir/_base) and makes their overlays.
	images *guestdisk.Images

	mu  sync.Mutex
	vms map[string]*vm
	// gone keeps why a guest's QEMU ended (its stderr), for the
	// destination's answer to the source after a failed copy.
	gone        map[string]string
	interrupted []compute.Guest
	resumable   []compute.Guest

	// measureMu serialises Measure; lastSample is its last reading.
	measureMu  sync.Mutex
	lastSample sample
}

// vm is one guest and its QEMU process.
type vm struct {
	dir string
	st  vmState // guarded by Driver.mu
	pid int
	// exited is closed when a QEMU this agent started has exited (nil for
	// an adopted one, whose parent is not this process).
	exited chan struct{}
	monMu  sync.Mutex
	mon    *qmp.Conn
	job    *copyJob // guarded by Driver.mu
}

var (
	_ compute.Driver         = (*Driver)(nil)
	_ compute.DetachedCopier = (*Driver)(nil)
	_ compute.ConsoleReader  = (*Driver)(nil)
)

// ErrNoQEMU says the QEMU binary is missing, and which package has it.
var ErrNoQEMU = errors.New("qemu-system-x86_64 not found: install Debian's qemu-system-x86 package (apt-get install qemu-system-x86)")

// New returns a driver, adopting the QEMU processes an earlier agent left
// running in cfg.Dir.
func New(cfg Config) (*Driver, error) {
	if cfg.Binary == "" {
		cfg.Binary = DefaultBinary
	}
	if cfg.Downtime <= 0 {
		cfg.Downtime = 500 * time.Millisecond
	}
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = 100 * time.Millisecond
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = time.Second
	}
	if cfg.ConsoleLogMax <= 0 {
		cfg.ConsoleLogMax = DefaultConsoleLogMax
	}
	if cfg.TimeoutAction == "" {
		cfg.TimeoutAction = "abort"
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	bin, err := exec.LookPath(cfg.Binary)
	if err != nil {
		if cfg.Binary == DefaultBinary {
			return nil, ErrNoQEMU
		}
		return nil, fmt.Errorf("qemu binary %s: %w", cfg.Binary, err)
	}
	cfg.Binary = bin
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("qemu driver directory: %w", err)
	}
	if abs, err := filepath.Abs(cfg.Dir); err == nil {
		cfg.Dir = abs
	}
	d := &Driver{cfg: cfg, log: cfg.Log.With("driver", "qemu"), vms: map[string]*vm{}, gone: map[string]string{},
		images: &guestdisk.Images{Dir: cfg.Dir, Source: cfg.Images, QEMUImg: cfg.QEMUImg}}
	if err := d.adopt(); err != nil {
		return nil, err
	}
	return d, nil
}

// adopt finds the guests of an earlier agent: a live QEMU is kept (a copy
// it was running is resumable), a dead one is forgotten.
func (d *Driver) adopt() error {
	entries, err := os.ReadDir(d.cfg.Dir)
	if err != nil {
		return fmt.Errorf("reading %s: %w", d.cfg.Dir, err)
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == guestdisk.BaseDir {
			continue
		}
		dir := filepath.Join(d.cfg.Dir, e.Name())
		st, pid, err := readState(dir)
		if err != nil {
			d.log.Warn("ignoring a guest directory without a readable state", "dir", dir, "err", err)
			continue
		}
		g := st.Guest
		if !processIn(pid, dir) && keepsNoProcess(g.State) {
			// Stopped, shelved or suspended: no QEMU is expected.
			d.vms[g.UUID] = &vm{dir: dir, st: st}
			continue
		}
		if !processIn(pid, dir) {
			d.log.Warn("the QEMU of a guest is gone; forgetting the guest", "instance", g.UUID, "state", g.State, "qemu", logTail(dir))
			d.gone[g.UUID] = logTail(dir)
			if g.State == compute.GuestBuilding || g.State == compute.GuestMigrating {
				// Reported as interrupted; the guest did not survive.
				d.interrupted = append(d.interrupted, g)
			}
			_ = os.RemoveAll(dir)
			continue
		}
		v := &vm{dir: dir, st: st, pid: pid}
		d.vms[g.UUID] = v
		switch g.State {
		case compute.GuestBuilding:
			// QEMU runs the guest from its first instruction: the build
			// is done.
			d.interrupted = append(d.interrupted, g)
			v.st.Guest.State = compute.GuestRunning
			d.saveLocked(v)
		case compute.GuestMigrating:
			d.resumable = append(d.resumable, g)
		}
		d.log.Info("adopted a running QEMU", "instance", g.UUID, "pid", pid, "state", g.State)
	}
	return nil
}

func (d *Driver) saveLocked(v *vm) {
	if err := writeState(v.dir, v.st); err != nil {
		d.log.Warn("saving guest state", "dir", v.dir, "err", err)
	}
}

// Interrupted implements compute.Interrupter: the builds an agent restart
// cut short (the guest runs: QEMU had started it) and the outgoing copies
// whose QEMU died with the agent. Copies whose QEMU lives on are
// Resumable instead.
func (d *Driver) Interrupted() []compute.Guest {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.interrupted
	d.interrupted = nil
	return out
}

// Resumable implements compute.Resumer: the outgoing copies a restart of
// the agent found still in QEMU's hands, once.
func (d *Driver) Resumable() []compute.Guest {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.resumable
	d.resumable = nil
	return out
}

func (d *Driver) guestDir(uuid string) string { return filepath.Join(d.cfg.Dir, uuid) }

// socket is the path to reach a socket in a guest's directory: the plain
// path when it fits a unix socket address, else through the QEMU
// process's working directory in /proc (the same directory, a short name).
func socket(v *vm, name string) string {
	p := filepath.Join(v.dir, name)
	if len(p) < 100 {
		return p
	}
	return fmt.Sprintf("/proc/%d/cwd/%s", v.pid, name)
}

// PeekSocket returns the path of the observers' QMP socket of the guest
// uuid in a driver directory (tests read guest memory through it).
func PeekSocket(dir, uuid string) (string, error) {
	gdir := filepath.Join(dir, uuid)
	_, pid, err := readState(gdir)
	if err != nil {
		return "", err
	}
	return socket(&vm{dir: gdir, pid: pid}, sockPeek), nil
}

// args is the QEMU command line for inst; the destination of a migration
// uses the same one plus -incoming defer.
func (d *Driver) args(inst records.Instance, incoming bool) []string {
	vcpus := max(inst.Flavor.VCPUs, 1)
	format := "raw"
	if imageOf(inst) != "" {
		format = "qcow2" // an overlay on the image's base
	}
	a := []string{
		"-name", "keel-" + inst.UUID,
		"-machine", "pc", "-accel", "tcg,tb-size=32",
		"-nodefaults", "-no-user-config", "-display", "none",
		"-m", strconv.FormatInt(inst.Flavor.RAMMB, 10),
		"-smp", strconv.FormatInt(vcpus, 10),
	}
	d.mu.Lock()
	var rescue *records.Rescue
	if v := d.vms[inst.UUID]; v != nil {
		rescue = v.st.Guest.Rescue // the rescue disk (rescue.go)
	}
	d.mu.Unlock()
	a = append(a, diskArgs(format, rescue)...)
	a = append(a,
		"-qmp", "unix:"+sockQMP+",server=on,wait=off",
		"-qmp", "unix:"+sockPeek+",server=on,wait=off",
	)
	a = append(a, consoleArgs()...)
	if incoming {
		a = append(a, "-incoming", "defer")
	}
	return append(a, d.cfg.ExtraArgs...)
}

// launch starts v's QEMU on a boot disk written afresh from the guest's
// program and waits until its monitor answers (or it dies, then the error
// carries its stderr).
func (d *Driver) launch(ctx context.Context, v *vm, inst records.Instance, incoming bool) error {
	return d.launchDisk(ctx, v, inst, incoming, false)
}

// launchDisk is launch; with keepDisk the disk already in v's directory
// (one a cold move brought) is booted as it is. A guest of an uploaded
// image (compute.BootsImage) boots a qcow2 overlay on the image's base
// copy on this host (fetched first if the host has none), made if the
// guest has no disk yet; its disk is kept across its QEMU's restarts.
func (d *Driver) launchDisk(ctx context.Context, v *vm, inst records.Instance, incoming, keepDisk bool) error {
	if err := d.prepareDisk(ctx, v, inst, keepDisk); err != nil {
		return err
	}
	for _, s := range []string{sockQMP, sockPeek, sockIncoming} {
		_ = os.Remove(filepath.Join(v.dir, s))
	}
	if err := compute.RotateConsoleLog(v.dir, d.cfg.ConsoleLogMax); err != nil {
		d.log.Warn("bounding a guest's console log", "instance", inst.UUID, "err", err)
	}
	logf, err := os.Create(filepath.Join(v.dir, fileLog))
	if err != nil {
		return fmt.Errorf("qemu log: %w", err)
	}
	cmd := exec.Command(d.cfg.Binary, d.args(inst, incoming)...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = v.dir, logf, logf
	// Its own session: QEMU outlives the agent (and a Ctrl-C meant for it).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return fmt.Errorf("starting qemu: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	d.mu.Lock()
	v.pid, v.exited = cmd.Process.Pid, exited
	d.mu.Unlock()
	if err := writeFileAtomic(filepath.Join(v.dir, filePID), []byte(strconv.Itoa(v.pid)+"\n")); err != nil {
		_ = killIn(v.pid, v.dir, exited)
		return fmt.Errorf("writing the pid file: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		mon, err := d.monitor(ctx, v)
		if err == nil {
			var st struct{ Status string }
			if err = mon.Execute(ctx, "query-status", nil, &st); err == nil {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("qemu exited at start: %s", logTail(v.dir))
		case <-ctx.Done():
			_ = killIn(v.pid, v.dir, exited)
			return fmt.Errorf("qemu's monitor did not answer within 20 s: %w (stderr: %s)", err, logTail(v.dir))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// prepareDisk makes the disk v's QEMU boots: keel's built-in guest's
// boot sector, written afresh unless keepDisk; or for an uploaded
// image, an overlay on its base (an unshelved guest's rebased off its
// shelve's snapshot), unless the guest has its disk already, whose base
// is fetched then.
func (d *Driver) prepareDisk(ctx context.Context, v *vm, inst records.Instance, keepDisk bool) error {
	disk := filepath.Join(v.dir, fileDisk)
	if compute.BootsImage(inst) {
		if _, err := os.Stat(disk); err == nil {
			// The guest's own disk (a moved one too): the base it names.
			_, err := d.images.BaseOf(ctx, inst.UUID, disk)
			return err
		}
		base, err := d.images.Base(ctx, inst.UUID, inst.DiskImage())
		if err != nil {
			return err
		}
		if err := d.images.Overlay(ctx, base, disk); err != nil {
			return err
		}
		if inst.ShelvedImage != "" {
			return d.images.Unshelved(ctx, inst.UUID, disk, compute.OriginalImage(inst))
		}
		return nil
	}
	spec, err := guest.Parse(inst.Metadata[guest.MetadataKey])
	if err != nil {
		return err
	}
	if inst.Flavor.RAMMB < spec.MinRAMMB() {
		return fmt.Errorf("%s=%s needs at least %d MiB of RAM, flavor %s has %d", guest.MetadataKey, spec, spec.MinRAMMB(), inst.Flavor.Name, inst.Flavor.RAMMB)
	}
	if _, serr := os.Stat(disk); !keepDisk || serr != nil {
		if err := os.WriteFile(disk, spec.Image(), 0o644); err != nil {
			return fmt.Errorf("writing the boot disk: %w", err)
		}
	}
	return nil
}

// imageOf is the uploaded image inst's guest disk is a qcow2 of ("" for
// keel's guest, whose disk is raw — also once unshelved from a snapshot).
func imageOf(inst records.Instance) string { return compute.OriginalImage(inst) }

// monitor returns v's QMP session, connecting if there is none (or the
// last one broke).
func (d *Driver) monitor(ctx context.Context, v *vm) (*qmp.Conn, error) {
	v.monMu.Lock()
	defer v.monMu.Unlock()
	if v.mon != nil {
		select {
		case <-v.mon.Done():
			v.mon = nil
		default:
			return v.mon, nil
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := qmp.Dial(dctx, socket(v, sockQMP))
	if err != nil {
		return nil, err
	}
	v.mon = c
	return c, nil
}

// execute runs one QMP command on v's monitor.
func (d *Driver) execute(ctx context.Context, v *vm, cmd string, args, out any) error {
	mon, err := d.monitor(ctx, v)
	if err != nil {
		return fmt.Errorf("qemu monitor of %s: %w", v.st.Guest.UUID, err)
	}
	return mon.Execute(ctx, cmd, args, out)
}

func (v *vm) alive() bool {
	if v.exited != nil {
		select {
		case <-v.exited:
			return false
		default:
			return true
		}
	}
	return processIn(v.pid, v.dir)
}

// stop kills v's QEMU, closes its monitor and removes its directory.
func (d *Driver) stop(v *vm) error {
	v.monMu.Lock()
	if v.mon != nil {
		v.mon.Close()
		v.mon = nil
	}
	v.monMu.Unlock()
	if err := killIn(v.pid, v.dir, v.exited); err != nil {
		return err
	}
	return os.RemoveAll(v.dir)
}

// Spawn implements compute.Driver: it starts the guest's QEMU and reports
// once its monitor says it runs.
func (d *Driver) Spawn(ctx context.Context, inst records.Instance, done func(error)) {
	returned := make(chan struct{})
	defer close(returned)
	report := func(err error) {
		go func() { <-returned; done(err) }()
	}
	d.mu.Lock()
	if _, ok := d.vms[inst.UUID]; ok {
		d.mu.Unlock()
		report(fmt.Errorf("spawning %s: guest already exists", inst.UUID))
		return
	}
	v := &vm{dir: d.guestDir(inst.UUID), st: vmState{Program: inst.Metadata[guest.MetadataKey], Image: imageOf(inst),
		Guest: compute.Guest{UUID: inst.UUID, Name: inst.Name, Flavor: inst.Flavor, State: compute.GuestBuilding}}}
	if err := os.MkdirAll(v.dir, 0o755); err != nil {
		d.mu.Unlock()
		report(fmt.Errorf("spawning %s: %w", inst.UUID, err))
		return
	}
	_ = os.Remove(filepath.Join(v.dir, fileDisk)) // a new guest boots a new disk
	d.vms[inst.UUID] = v
	d.saveLocked(v)
	d.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	go func() {
		err := d.launch(bg, v, inst, false)
		d.mu.Lock()
		if d.vms[inst.UUID] != v {
			err = fmt.Errorf("guest destroyed while building")
		} else if err == nil {
			v.st.Guest.State = compute.GuestRunning
			d.saveLocked(v)
		}
		d.mu.Unlock()
		if err != nil {
			err = fmt.Errorf("spawning %s: %w", inst.UUID, err)
		}
		<-returned
		done(err)
	}()
}

// Destroy implements compute.Driver: it kills the guest's QEMU. A guest
// that is not there is gone already.
func (d *Driver) Destroy(_ context.Context, uuid string) error {
	d.mu.Lock()
	v := d.vms[uuid]
	delete(d.vms, uuid)
	var job *copyJob
	if v != nil {
		job, v.job = v.job, nil
	}
	d.mu.Unlock()
	if v == nil {
		// A cold move's disk may have arrived here for a guest that was
		// never started (prep_resize made the directory): it goes too.
		if err := os.RemoveAll(d.guestDir(uuid)); err != nil {
			return fmt.Errorf("destroying %s: %w", uuid, err)
		}
		return nil
	}
	if job != nil {
		job.cancel()
	}
	if err := d.stop(v); err != nil {
		return fmt.Errorf("destroying %s: %w", uuid, err)
	}
	return nil
}

// Guests implements compute.Driver. A guest whose QEMU has died is
// dropped (the audit then heals the records).
func (d *Driver) Guests(_ context.Context) ([]compute.Guest, error) {
	d.rotateConsoles()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]compute.Guest, 0, len(d.vms))
	for uuid, v := range d.vms {
		if v.pid != 0 && !v.alive() {
			d.log.Warn("a guest's QEMU has exited", "instance", uuid, "state", v.st.Guest.State, "qemu", logTail(v.dir))
			d.gone[uuid] = logTail(v.dir)
			delete(d.vms, uuid)
			_ = os.RemoveAll(v.dir)
			continue
		}
		out = append(out, v.st.Guest)
	}
	slices.SortFunc(out, func(a, b compute.Guest) int {
		if a.UUID < b.UUID {
			return -1
		}
		if a.UUID > b.UUID {
			return 1
		}
		return 0
	})
	return out, nil
}

// CheckCanLiveMigrateDestination implements compute.Driver.
func (d *Driver) CheckCanLiveMigrateDestination(_ context.Context, inst records.Instance) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.vms[inst.UUID]; ok {
		return fmt.Errorf("instance %s already has a guest on this host", inst.UUID)
	}
	if compute.BootsImage(inst) {
		return fmt.Errorf("instance %s boots from an uploaded image, whose disk (a local overlay) the QEMU driver does not live-migrate: migrate it cold (server migrate, resize)", inst.UUID)
	}
	if _, err := guest.Parse(inst.Metadata[guest.MetadataKey]); err != nil {
		return err
	}
	return nil
}

// CheckCanLiveMigrateSource implements compute.Driver: the guest is ours,
// and QEMU says it runs (query-status), or is paused for a paused guest
// (Nova live-migrates paused servers too: QEMU copies a paused guest,
// which arrives paused).
func (d *Driver) CheckCanLiveMigrateSource(ctx context.Context, inst records.Instance) error {
	d.mu.Lock()
	v, ok := d.vms[inst.UUID]
	var state compute.GuestState
	if ok {
		state = v.st.Guest.State
	}
	ok = ok && (state == compute.GuestRunning || state == compute.GuestPaused) && v.alive()
	d.mu.Unlock()
	if !ok {
		return fmt.Errorf("instance %s is not running (nor paused) on the source", inst.UUID)
	}
	var st struct{ Status string }
	if err := d.execute(ctx, v, "query-status", nil, &st); err != nil {
		return fmt.Errorf("instance %s: %w", inst.UUID, err)
	}
	want := "running"
	if state == compute.GuestPaused {
		want = "paused"
	}
	if st.Status != want {
		return fmt.Errorf("instance %s is %s in QEMU, not %s", inst.UUID, st.Status, want)
	}
	return nil
}

// PreLiveMigration implements compute.Driver: it starts the incoming QEMU
// (-incoming defer), enables post-copy if this host permits it, and
// listens on a unix socket in the guest's directory. The migrate data
// carries the URI and whether post-copy is possible.
func (d *Driver) PreLiveMigration(ctx context.Context, inst records.Instance) (map[string]string, error) {
	d.mu.Lock()
	if v, ok := d.vms[inst.UUID]; ok {
		st := v.st
		d.mu.Unlock()
		if st.Guest.State == compute.GuestIncoming && v.alive() {
			return migrateData(st), nil // asked again after a restart
		}
		return nil, fmt.Errorf("instance %s already runs here", inst.UUID)
	}
	v := &vm{dir: d.guestDir(inst.UUID), st: vmState{Program: inst.Metadata[guest.MetadataKey],
		Guest: compute.Guest{UUID: inst.UUID, Name: inst.Name, Flavor: inst.Flavor, State: compute.GuestIncoming}}}
	if err := os.MkdirAll(v.dir, 0o755); err != nil {
		d.mu.Unlock()
		return nil, fmt.Errorf("pre_live_migration of %s: %w", inst.UUID, err)
	}
	d.vms[inst.UUID] = v
	d.saveLocked(v)
	delete(d.gone, inst.UUID)
	d.mu.Unlock()
	fail := func(err error) (map[string]string, error) {
		d.mu.Lock()
		if d.vms[inst.UUID] == v {
			delete(d.vms, inst.UUID)
		}
		d.gone[inst.UUID] = logTail(v.dir)
		d.mu.Unlock()
		_ = d.stop(v)
		return nil, fmt.Errorf("pre_live_migration of %s: %w", inst.UUID, err)
	}
	start := time.Now()
	if err := d.launch(ctx, v, inst, true); err != nil {
		return fail(err)
	}
	postCopy := false
	if d.cfg.PermitPostCopy {
		err := d.execute(ctx, v, "migrate-set-capabilities", capabilities(true), nil)
		if err != nil {
			d.log.Warn("post-copy is permitted but QEMU cannot enable it here (userfaultfd?); migrating without", "instance", inst.UUID, "err", err)
		}
		postCopy = err == nil
	}
	if err := d.execute(ctx, v, "migrate-incoming", map[string]string{"uri": "unix:" + sockIncoming}, nil); err != nil {
		return fail(err)
	}
	d.mu.Lock()
	v.st.URI, v.st.PostCopy = "unix:"+socket(v, sockIncoming), postCopy
	d.saveLocked(v)
	st := v.st
	d.mu.Unlock()
	d.log.Info("incoming qemu ready", "instance", inst.UUID, "start_ms", time.Since(start).Milliseconds(), "post_copy", postCopy)
	return migrateData(st), nil
}

func migrateData(st vmState) map[string]string {
	return map[string]string{"driver": "qemu", "uri": st.URI, "post_copy": strconv.FormatBool(st.PostCopy)}
}

func capabilities(postCopy bool) map[string]any {
	return map[string]any{"capabilities": []map[string]any{
		{"capability": "events", "state": true},
		{"capability": "postcopy-ram", "state": postCopy},
	}}
}

// CheckIncoming implements compute.IncomingChecker: nil while the
// incoming (or arrived) guest's QEMU runs; else why it ended, with its
// stderr. An incoming QEMU whose load failed is given a moment to exit
// (the source may notice the broken stream first) so its stderr is
// complete.
func (d *Driver) CheckIncoming(ctx context.Context, uuid string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for {
		d.mu.Lock()
		v, ok := d.vms[uuid]
		msg, gone := d.gone[uuid]
		d.mu.Unlock()
		switch {
		case !ok && gone:
			return fmt.Errorf("the incoming QEMU exited: %s", msg)
		case !ok:
			return fmt.Errorf("no incoming guest %s", uuid)
		case v.pid == 0:
			return nil // still starting
		case !v.alive():
			return fmt.Errorf("the incoming QEMU exited: %s", logTail(v.dir))
		}
		qctx, qcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		var info MigrationInfo
		err := d.execute(qctx, v, "query-migrate", nil, &info)
		qcancel()
		if err == nil && info.Status != "failed" {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				return fmt.Errorf("the incoming migration failed: %s", orUnknown(logTail(v.dir)))
			}
			return nil // the monitor does not answer, but QEMU runs
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// PostLiveMigrationAtSource implements compute.Driver: the source's QEMU
// (postmigrate) goes.
func (d *Driver) PostLiveMigrationAtSource(ctx context.Context, uuid string) error {
	return d.Destroy(ctx, uuid)
}

// PostLiveMigrationAtDestination implements compute.Driver: it waits for
// the incoming QEMU to finish loading, resumes it if the copy ended with
// the guest paused (a forced completion), and makes it the running guest.
// A paused instance's guest (inst's vm_state paused) arrives paused and
// stays so.
func (d *Driver) PostLiveMigrationAtDestination(ctx context.Context, inst records.Instance) error {
	keepPaused := inst.VMState == records.VMPaused
	final := compute.GuestRunning
	if keepPaused {
		final = compute.GuestPaused
	}
	d.mu.Lock()
	v, ok := d.vms[inst.UUID]
	running := ok && v.st.Guest.State == final
	d.mu.Unlock()
	if !ok {
		return fmt.Errorf("post live migration of %s: no incoming guest", inst.UUID)
	}
	if running {
		return nil // repeated after a restart
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		var st struct{ Status string }
		if err := d.execute(ctx, v, "query-status", nil, &st); err != nil {
			if !v.alive() {
				return fmt.Errorf("post live migration of %s: the incoming QEMU exited: %s", inst.UUID, logTail(v.dir))
			}
			return fmt.Errorf("post live migration of %s: %w", inst.UUID, err)
		}
		switch st.Status {
		case "running":
		case "paused":
			if keepPaused {
				break
			}
			if err := d.execute(ctx, v, "cont", nil, nil); err != nil {
				return fmt.Errorf("post live migration of %s: resuming the guest: %w", inst.UUID, err)
			}
		case "inmigrate", "postmigrate", "finish-migrate":
			select {
			case <-ctx.Done():
				return fmt.Errorf("post live migration of %s: the guest is still %s", inst.UUID, st.Status)
			case <-time.After(20 * time.Millisecond):
			}
			continue
		default:
			return fmt.Errorf("post live migration of %s: the incoming guest is %s: %s", inst.UUID, st.Status, logTail(v.dir))
		}
		break
	}
	d.mu.Lock()
	v.st.Guest.State, v.st.URI, v.st.PostCopy = final, "", false
	d.saveLocked(v)
	d.mu.Unlock()
	return nil
}

// RollbackLiveMigrationAtDestination implements compute.Driver: the
// incoming QEMU goes.
func (d *Driver) RollbackLiveMigrationAtDestination(ctx context.Context, uuid string) error {
	d.mu.Lock()
	v, ok := d.vms[uuid]
	incoming := ok && v.st.Guest.State == compute.GuestIncoming
	d.mu.Unlock()
	if !incoming {
		return nil
	}
	return d.Destroy(ctx, uuid)
}
