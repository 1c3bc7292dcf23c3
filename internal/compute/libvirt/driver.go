package libvirt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/uuid"

	"keel/internal/compute"
	"keel/internal/compute/guestdisk"
	"keel/internal/compute/qemu/guest"
	"keel/internal/records"
)

// DefaultURI is Nova's default [libvirt] connection_uri for QEMU.
const DefaultURI = "qemu:///system"

// Config configures the driver. The migration options are Nova's
// [libvirt] ones, applied by the source.
type Config struct {
	// URI is [libvirt] connection_uri (DefaultURI).
	URI string
	// Host is the agent's host name: the owner written in its guests'
	// metadata, and the name a source reaches this host's libvirtd by
	// unless InboundAddr is set.
	Host string
	// Dir holds one directory per guest with its disk (the agent's
	// DATA_DIR/libvirt); libvirtd must see it at the same path.
	Dir string
	// VirtType is the domain type, [libvirt] virt_type: qemu (TCG, the
	// default here) or kvm.
	VirtType string
	// Scheme is live_migration_scheme (tcp) and InboundAddr
	// live_migration_inbound_addr (default Host): the destination's
	// libvirtd is reached at qemu+SCHEME://ADDR/system.
	Scheme      string
	InboundAddr string
	// BandwidthMiBps is live_migration_bandwidth (0 unlimited); Downtime
	// live_migration_downtime (default 500 ms); CompletionTimeout
	// live_migration_completion_timeout per GiB of RAM, counting at least
	// 2 GiB (0 none); TimeoutAction live_migration_timeout_action (abort
	// or force_complete); PermitPostCopy and PermitAutoConverge
	// live_migration_permit_post_copy and _permit_auto_converge.
	BandwidthMiBps     int64
	Downtime           time.Duration
	CompletionTimeout  time.Duration
	TimeoutAction      string
	PermitPostCopy     bool
	PermitAutoConverge bool
	// PowerDownWait is how long a stop waits after the ACPI shutdown
	// before it destroys the guest (default 1 s; keel's guest ignores
	// ACPI).
	PowerDownWait time.Duration
	// PollEvery is how often a copy's job is read (default 100 ms);
	// ProgressEvery how often progress is reported (default 1 s).
	PollEvery     time.Duration
	ProgressEvery time.Duration
	// ConsoleLogMax is the size past which a guest's serial console log
	// is rotated, when it is read and at each audit (default
	// compute.DefaultConsoleLogMax).
	ConsoleLogMax int64
	// Images gives the data of the uploaded images guests boot from (the
	// agent's: the servers, over the bus); without it only keel's
	// built-in guest boots.
	Images compute.ImageSource
	// QEMUImg is the qemu-img to run (default "qemu-img", on PATH).
	QEMUImg string
	Log     *slog.Logger
}

// Driver is the libvirt virt driver.
type Driver struct {
	cfg Config
	log *slog.Logger
	uri *url.URL
	// images is the host's copy of the images its guests boot from
	// (Dir/_base) and makes their overlays.
	images *guestdisk.Images

	connMu sync.Mutex
	conn   *golibvirt.Libvirt

	mu          sync.Mutex
	jobs        map[string]*copyJob // outgoing copies, by instance
	interrupted []compute.Guest
	resumable   []compute.Guest

	// sampleMu serialises Measure; lastSample is its last reading.
	// ownersMu guards owners: whether each run of an active domain is this
	// host's (its keel metadata read once).
	sampleMu   sync.Mutex
	lastSample sample
	// memWarned: the host's memory did not read once (warned once).
	memWarned bool
	ownersMu  sync.Mutex
	owners    map[domainID]bool
}

var (
	_ compute.Driver         = (*Driver)(nil)
	_ compute.DetachedCopier = (*Driver)(nil)
)

// New connects to libvirtd and finds the guests of an earlier agent on
// this host: builds and copies a restart cut short are Interrupted, copies
// still running in libvirtd Resumable.
func New(ctx context.Context, cfg Config) (*Driver, error) {
	if cfg.URI == "" {
		cfg.URI = DefaultURI
	}
	if cfg.VirtType == "" {
		cfg.VirtType = "qemu"
	}
	if cfg.Scheme == "" {
		cfg.Scheme = "tcp"
	}
	if cfg.Downtime <= 0 {
		cfg.Downtime = 500 * time.Millisecond
	}
	if cfg.TimeoutAction == "" {
		cfg.TimeoutAction = "abort"
	}
	if cfg.PowerDownWait <= 0 {
		cfg.PowerDownWait = time.Second
	}
	if cfg.ConsoleLogMax <= 0 {
		cfg.ConsoleLogMax = compute.DefaultConsoleLogMax
	}
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = 100 * time.Millisecond
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Host == "" {
		return nil, errors.New("libvirt driver: the agent's host name is needed")
	}
	u, err := url.Parse(cfg.URI)
	if err != nil {
		return nil, fmt.Errorf("[libvirt] connection_uri %q: %w", cfg.URI, err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("libvirt driver directory: %w", err)
	}
	if abs, err := filepath.Abs(cfg.Dir); err == nil {
		cfg.Dir = abs
	}
	d := &Driver{cfg: cfg, log: cfg.Log.With("driver", "libvirt"), uri: u, jobs: map[string]*copyJob{},
		images: &guestdisk.Images{Dir: cfg.Dir, Source: cfg.Images, QEMUImg: cfg.QEMUImg}}
	if _, err := d.lv(); err != nil {
		return nil, err
	}
	if err := d.adopt(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// lv returns the connection to libvirtd, connecting again if it was lost
// (a libvirtd restart).
func (d *Driver) lv() (*golibvirt.Libvirt, error) {
	d.connMu.Lock()
	defer d.connMu.Unlock()
	if d.conn != nil && d.conn.IsConnected() {
		return d.conn, nil
	}
	l, err := golibvirt.ConnectToURI(d.uri)
	if err != nil {
		return nil, fmt.Errorf("connecting to libvirtd at %s ([libvirt] connection_uri): %w; is libvirtd running and its socket reachable?", d.cfg.URI, err)
	}
	d.conn = l
	return l, nil
}

// Close disconnects from libvirtd; guests and copies go on in libvirtd
// (the next agent re-attaches), and the copies' watchers stop unreported.
func (d *Driver) Close() error {
	d.mu.Lock()
	for _, j := range d.jobs {
		j.detach()
	}
	d.mu.Unlock()
	d.connMu.Lock()
	defer d.connMu.Unlock()
	if d.conn != nil {
		err := d.conn.Disconnect()
		d.conn = nil
		return err
	}
	return nil
}

// dom is one of this host's domains as read from libvirtd.
type dom struct {
	d       golibvirt.Domain
	uuid    string
	m       meta
	state   int32
	reason  int32
	managed bool
}

func (x dom) guest() compute.Guest { return guestOf(x.uuid, x.m, x.state, x.reason, x.managed) }

// libvirt's domain states (virDomainState).
const (
	stateRunning  = int32(golibvirt.DomainRunning)
	statePaused   = int32(golibvirt.DomainPaused)
	stateShutdown = int32(golibvirt.DomainShutdown)
	stateShutoff  = int32(golibvirt.DomainShutoff)
	stateCrashed  = int32(golibvirt.DomainCrashed)
)

// lookup finds the instance's domain, if it is this host's: ok false
// when there is none (or it is another agent's).
func (d *Driver) lookup(id string) (dom, bool, error) {
	l, err := d.lv()
	if err != nil {
		return dom{}, false, err
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return dom{}, false, fmt.Errorf("instance UUID %q: %w", id, err)
	}
	ld, err := l.DomainLookupByUUID(golibvirt.UUID(u))
	if golibvirt.IsNotFound(err) {
		return dom{}, false, nil
	}
	if err != nil {
		return dom{}, false, fmt.Errorf("looking up %s in libvirt: %w", DomainName(id), err)
	}
	x, ok, err := d.read(l, ld)
	if err != nil || !ok {
		return dom{}, false, err
	}
	return x, true, nil
}

// read reads a domain's keel metadata and state; ok false for a domain
// that is not keel's or not this host's, or that went meanwhile.
func (d *Driver) read(l *golibvirt.Libvirt, ld golibvirt.Domain) (dom, bool, error) {
	x := dom{d: ld, uuid: uuid.UUID(ld.UUID).String()}
	s, err := l.DomainGetMetadata(ld, int32(golibvirt.DomainMetadataElement), golibvirt.OptString{MetaNS}, golibvirt.DomainAffectCurrent)
	if golibvirt.IsNotFound(err) || isCode(err, golibvirt.ErrNoDomainMetadata) {
		return x, false, nil
	}
	if err != nil {
		return x, false, fmt.Errorf("reading the metadata of %s: %w", ld.Name, err)
	}
	if x.m, err = parseMeta(s); err != nil {
		d.log.Warn("ignoring a domain whose keel metadata does not parse", "domain", ld.Name, "err", err)
		return x, false, nil
	}
	if x.m.Host != d.cfg.Host {
		return x, false, nil
	}
	x.state, x.reason, err = l.DomainGetState(ld, 0)
	if golibvirt.IsNotFound(err) {
		return x, false, nil
	}
	if err != nil {
		return x, false, fmt.Errorf("reading the state of %s: %w", ld.Name, err)
	}
	if x.state == stateShutoff {
		n, err := l.DomainHasManagedSaveImage(ld, 0)
		if err == nil {
			x.managed = n == 1
		}
	}
	return x, true, nil
}

// domains lists this host's domains.
func (d *Driver) domains() ([]dom, error) {
	l, err := d.lv()
	if err != nil {
		return nil, err
	}
	lds, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, fmt.Errorf("listing libvirt's domains: %w", err)
	}
	var out []dom
	for _, ld := range lds {
		x, ok, err := d.read(l, ld)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, x)
		}
	}
	return out, nil
}

// setMeta writes a domain's keel metadata, to its live definition if it
// runs and to its persistent one if it has one.
func (d *Driver) setMeta(x dom, m meta) error {
	l, err := d.lv()
	if err != nil {
		return err
	}
	active, err := l.DomainIsActive(x.d)
	if err != nil {
		return fmt.Errorf("updating the metadata of %s: %w", x.d.Name, err)
	}
	persistent, err := l.DomainIsPersistent(x.d)
	if err != nil {
		return fmt.Errorf("updating the metadata of %s: %w", x.d.Name, err)
	}
	var flags golibvirt.DomainModificationImpact
	if active == 1 {
		flags |= golibvirt.DomainAffectLive
	}
	if persistent == 1 {
		flags |= golibvirt.DomainAffectConfig
	}
	m.Flavor = x.m.Flavor
	if err := l.DomainSetMetadata(x.d, int32(golibvirt.DomainMetadataElement), golibvirt.OptString{m.element()},
		golibvirt.OptString{metaKey}, golibvirt.OptString{MetaNS}, flags); err != nil {
		return fmt.Errorf("updating the metadata of %s: %w", x.d.Name, err)
	}
	return nil
}

// adopt reads the guests an earlier agent left: a build whose domain runs
// is done (Interrupted, building); one that never started is started; a
// copy still running in libvirtd is Resumable, one that ended with the
// guest still here is Interrupted (it is settled here again).
func (d *Driver) adopt(ctx context.Context) error {
	xs, err := d.domains()
	if err != nil {
		return err
	}
	l, err := d.lv()
	if err != nil {
		return err
	}
	for _, x := range xs {
		g := x.guest()
		switch x.m.State {
		case stBuilding:
			if x.state != stateRunning {
				if _, err := l.DomainCreateWithFlags(x.d, 0); err != nil {
					d.log.Warn("starting a guest whose build the restart cut short", "instance", x.uuid, "err", err)
					continue
				}
			}
			m := x.m
			m.State = ""
			if err := d.setMeta(x, m); err != nil {
				return err
			}
			d.interrupted = append(d.interrupted, g)
		case stMigrating:
			typ, _, err := l.DomainGetJobStats(x.d, 0)
			if err != nil {
				return fmt.Errorf("reading the job of %s: %w", x.d.Name, err)
			}
			if typ != int32(golibvirt.DomainJobNone) || (x.state == stateShutoff && x.reason == int32(golibvirt.DomainShutoffMigrated)) {
				d.resumable = append(d.resumable, g)
				d.log.Info("found a migration still in libvirt's hands", "instance", x.uuid, "migration", x.m.Migration, "job", typ)
				continue
			}
			// The copy ended and the guest is still here: it failed.
			if err := d.settle(x); err != nil {
				return err
			}
			d.interrupted = append(d.interrupted, g)
		}
	}
	_ = ctx
	return nil
}

// settle clears a failed copy's state from a guest that stayed here.
func (d *Driver) settle(x dom) error {
	m := x.m
	m.State, m.Migration, m.Dest, m.Paused = "", 0, "", false
	return d.setMeta(x, m)
}

// Interrupted implements compute.Interrupter.
func (d *Driver) Interrupted() []compute.Guest {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.interrupted
	d.interrupted = nil
	return out
}

// Resumable implements compute.Resumer: the copies a restart of the agent
// found still in libvirtd's hands (or completed there), once.
func (d *Driver) Resumable() []compute.Guest {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.resumable
	d.resumable = nil
	return out
}

func (d *Driver) guestDir(uuid string) string { return filepath.Join(d.cfg.Dir, uuid) }

func (d *Driver) diskPath(uuid string) string {
	return filepath.Join(d.guestDir(uuid), guestdisk.File)
}

// writeDisk writes the guest's boot disk afresh: keel's guest's boot
// sector from its program, or for an uploaded image (image, the
// metadata's) a qcow2 overlay on the image's base copy on this host,
// fetched first if the host has none.
func (d *Driver) writeDisk(ctx context.Context, inst records.Instance, image string) error {
	if err := os.MkdirAll(d.guestDir(inst.UUID), 0o755); err != nil {
		return err
	}
	if image != "" {
		base, err := d.images.Base(ctx, inst.UUID, image)
		if err != nil {
			return err
		}
		if err := d.images.Overlay(ctx, base, d.diskPath(inst.UUID)); err != nil {
			return err
		}
		if image == inst.ShelvedImage {
			// Off the shelve's snapshot, which the unshelve deletes.
			return d.images.Unshelved(ctx, inst.UUID, d.diskPath(inst.UUID), compute.OriginalImage(inst))
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
	if err := os.WriteFile(d.diskPath(inst.UUID), spec.Image(), 0o644); err != nil {
		return fmt.Errorf("writing the boot disk: %w", err)
	}
	return nil
}

// imageOf is the uploaded image inst's guest disk is a qcow2 of ("" for
// keel's guest, whose disk is raw — also once unshelved from a snapshot).
func imageOf(inst records.Instance) string { return compute.OriginalImage(inst) }

// define defines (or redefines) the instance's persistent domain.
func (d *Driver) define(inst records.Instance, m meta) (golibvirt.Domain, error) {
	l, err := d.lv()
	if err != nil {
		return golibvirt.Domain{}, err
	}
	m.Host, m.Name = d.cfg.Host, inst.Name
	if m.Program == "" {
		m.Program = inst.Metadata[guest.MetadataKey]
	}
	if m.Image == "" {
		m.Image = imageOf(inst)
	}
	x, err := d.domainXML(inst.UUID, inst.Flavor, d.diskPath(inst.UUID), m)
	if err != nil {
		return golibvirt.Domain{}, fmt.Errorf("building the domain XML: %w", err)
	}
	ld, err := l.DomainDefineXMLFlags(x, 0)
	if err != nil {
		return golibvirt.Domain{}, fmt.Errorf("defining %s: %w", DomainName(inst.UUID), err)
	}
	return ld, nil
}

// Spawn implements compute.Driver: it writes the disk, defines the
// domain (state building) and starts it, and reports once libvirt says it
// runs.
func (d *Driver) Spawn(ctx context.Context, inst records.Instance, done func(error)) {
	returned := make(chan struct{})
	defer close(returned)
	report := func(err error) {
		if err != nil {
			err = fmt.Errorf("spawning %s: %w", inst.UUID, err)
		}
		go func() { <-returned; done(err) }()
	}
	if x, ok, err := d.lookup(inst.UUID); err != nil || ok {
		if err == nil {
			err = fmt.Errorf("guest already exists (%s)", x.guest().State)
		}
		report(err)
		return
	}
	boot := ""
	if compute.BootsImage(inst) {
		boot = inst.DiskImage() // an unshelve's: its shelve's snapshot
	}
	if err := d.writeDisk(ctx, inst, boot); err != nil {
		report(err)
		return
	}
	ld, err := d.define(inst, meta{State: stBuilding})
	if err != nil {
		report(err)
		return
	}
	go func() {
		err := d.start(ld, inst.UUID)
		if err != nil {
			err = fmt.Errorf("spawning %s: %w", inst.UUID, err)
		}
		<-returned
		done(err)
	}()
}

// start starts a defined domain and clears its building state.
func (d *Driver) start(ld golibvirt.Domain, uuid string) error {
	l, err := d.lv()
	if err != nil {
		return err
	}
	if _, err := l.DomainCreateWithFlags(ld, 0); err != nil {
		return fmt.Errorf("starting %s: %w", ld.Name, describe(err))
	}
	x, ok, err := d.lookup(uuid)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s vanished as it started", ld.Name)
	}
	m := x.m
	m.State = ""
	return d.setMeta(x, m)
}

// Destroy implements compute.Driver: the domain is destroyed and
// undefined (with a managed save image), and its directory removed. A
// guest that is not there is gone already.
func (d *Driver) Destroy(_ context.Context, uuid string) error {
	d.mu.Lock()
	if j := d.jobs[uuid]; j != nil {
		j.stop()
	}
	d.mu.Unlock()
	x, ok, err := d.lookup(uuid)
	if err != nil {
		return fmt.Errorf("destroying %s: %w", uuid, err)
	}
	if ok {
		if err := d.undefine(x); err != nil {
			return fmt.Errorf("destroying %s: %w", uuid, err)
		}
	}
	if err := os.RemoveAll(d.guestDir(uuid)); err != nil {
		return fmt.Errorf("destroying %s: %w", uuid, err)
	}
	return nil
}

// undefine destroys a domain if it runs and removes its definition.
func (d *Driver) undefine(x dom) error {
	l, err := d.lv()
	if err != nil {
		return err
	}
	if err := l.DomainDestroyFlags(x.d, 0); err != nil && !isCode(err, golibvirt.ErrOperationInvalid) && !golibvirt.IsNotFound(err) {
		return fmt.Errorf("destroying %s: %w", x.d.Name, err)
	}
	err = l.DomainUndefineFlags(x.d, golibvirt.DomainUndefineManagedSave)
	if err != nil && !golibvirt.IsNotFound(err) && !isCode(err, golibvirt.ErrOperationInvalid) {
		return fmt.Errorf("undefining %s: %w", x.d.Name, err)
	}
	return nil
}

// Guests implements compute.Driver: this host's domains, and the guests
// prepared to arrive here whose domain has not yet appeared.
func (d *Driver) Guests(_ context.Context) ([]compute.Guest, error) {
	xs, err := d.domains()
	if err != nil {
		return nil, err
	}
	out := make([]compute.Guest, 0, len(xs))
	seen := map[string]bool{}
	for _, x := range xs {
		out = append(out, x.guest())
		seen[x.uuid] = true
		if err := compute.RotateConsoleLog(d.guestDir(x.uuid), d.cfg.ConsoleLogMax); err != nil {
			d.log.Warn("bounding a guest's console log", "instance", x.uuid, "err", err)
		}
	}
	for _, g := range d.preparedIncoming() {
		if !seen[g.UUID] {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b compute.Guest) int { return strings.Compare(a.UUID, b.UUID) })
	return out, nil
}

// Heartbeat reads the guest's heartbeat from its memory through
// libvirt's monitor passthrough (virsh qemu-monitor-command --hmp).
func (d *Driver) Heartbeat(_ context.Context, uuid string) (uint32, error) {
	x, ok, err := d.lookup(uuid)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("no guest %s on %s", uuid, d.cfg.Host)
	}
	l, err := d.lv()
	if err != nil {
		return 0, err
	}
	return heartbeat(l, x.d)
}

// heartbeat reads a domain's guest heartbeat with the human monitor
// command (VIR_DOMAIN_QEMU_MONITOR_COMMAND_HMP).
func heartbeat(l *golibvirt.Libvirt, ld golibvirt.Domain) (uint32, error) {
	out, err := l.QEMUDomainMonitorCommand(ld, guest.HeartbeatCommand, 1)
	if err != nil {
		return 0, fmt.Errorf("reading the memory of %s: %w", ld.Name, err)
	}
	return guest.ParseHeartbeat(out)
}

func isCode(err error, code golibvirt.ErrorNumber) bool {
	var e golibvirt.Error
	return errors.As(err, &e) && e.Code == uint32(code)
}

// ReadHeartbeat reads the heartbeat of instance uuid's guest on the
// libvirtd at uri, whoever's agent it belongs to (tests and operators
// watching a guest: what `virsh qemu-monitor-command keel-UUID --hmp
// 'xp /2wx 0x1000'` shows).
func ReadHeartbeat(uri, uuid string) (uint32, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return 0, err
	}
	l, err := golibvirt.ConnectToURI(u)
	if err != nil {
		return 0, err
	}
	defer l.Disconnect()
	ld, err := l.DomainLookupByName(DomainName(uuid))
	if err != nil {
		return 0, err
	}
	return heartbeat(l, ld)
}

// ConsoleOutput implements compute.ConsoleReader: the end of the guest's
// console log, the rotated part first, whether it runs or not (a stopped
// guest keeps its directory and log).
func (d *Driver) ConsoleOutput(_ context.Context, uuid string) ([]byte, error) {
	if _, ok, err := d.lookup(uuid); err != nil {
		return nil, fmt.Errorf("console output of %s: %w", uuid, err)
	} else if !ok {
		return nil, compute.NoGuest(uuid)
	}
	return compute.GuestConsoleLog(d.guestDir(uuid), d.cfg.ConsoleLogMax, d.log)
}
