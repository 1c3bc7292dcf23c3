// Package agent is `keel agent`: one hypervisor host's compute service.
// It connects to the bus, registers its host (resource provider and
// inventory, service record) through the servers, heartbeats, runs the
// periodic audit, and answers every agent-side step of a boot or a live
// migration with its virt driver: the fake one, whose guests live in a
// state file in the agent's data dir so that a `kill -9` loses nothing, or
// the QEMU one, whose guests are QEMU processes that outlive the agent and
// are adopted again when it restarts.
package agent

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"keel/internal/bus"
	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/compute/fake"
	"keel/internal/compute/libvirt"
	"keel/internal/compute/qemu"
	"keel/internal/records"
	"keel/internal/rpc"
	"keel/internal/store"
)

// Options configure an agent.
type Options struct {
	// Host names the hypervisor (one bus subject token: no dots).
	Host string
	Zone string
	// DataDir holds the fake driver's state file (guests.json) and the
	// reports not yet taken by the conductor (reports/).
	DataDir string
	// BusURL is the NATS URL (several comma-separated for a cluster);
	// Creds the bus credentials: the host's own identity (keel agent
	// enroll), or the servers' credentials, from which the agent derives
	// its host's identity (bus.Credentials.ForAgent) and connects as that.
	BusURL string
	Creds  bus.Credentials
	// Hardware and Nova's per-host options. ProviderUUID is filled in by
	// registration.
	Hardware compute.HostConfig
	// UpdateResourcesInterval is the periodic audit's interval (0 = 60 s,
	// negative disables it); ReportInterval the heartbeat's (default 10 s).
	UpdateResourcesInterval time.Duration
	ReportInterval          time.Duration
	// SpawnTime, StepTime and BandwidthMiBps configure the fake driver;
	// Workload is its guests' default workload model ([keel]
	// fake_workload).
	SpawnTime      time.Duration
	StepTime       time.Duration
	BandwidthMiBps float64
	Workload       string
	// Metrics is when the agent reports measured usage ([metrics]); the
	// zero value is compute.DefaultMetricsConfig.
	Metrics compute.MetricsConfig
	// Driver is the virt driver: "fake" (default), "qemu", configured by
	// QEMU (its Dir defaults to DataDir/qemu; its Log to the agent's), or
	// "libvirt", configured by Libvirt (its Dir defaults to
	// DataDir/libvirt, its Host to Host, "{host}" in its URI to Host).
	Driver  string
	QEMU    qemu.Config
	Libvirt libvirt.Config
	Clock   clock.Clock
	Log     *slog.Logger
	// OnHeartbeat, if set, is told each periodic heartbeat's round trip
	// and outcome (a load generator times the servers with it).
	OnHeartbeat func(took time.Duration, err error)
}

// Agent is a running agent.
type Agent struct {
	opts    Options
	conn    *bus.Conn
	mgr     *compute.Manager
	subs    []bus.Subscription
	outbox  *compute.Outbox
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	log     *slog.Logger
	stopped bool
	// hc is the host as registered, with its provider's UUID: what the
	// heartbeat registers again if the host's service was deleted.
	hc compute.HostConfig
}

// Start connects, registers and starts serving. It returns once the agent
// answers on the bus.
func Start(ctx context.Context, opts Options) (*Agent, error) {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.ReportInterval <= 0 {
		opts.ReportInterval = 10 * time.Second
	}
	if err := bus.ValidHostName(opts.Host); err != nil {
		return nil, fmt.Errorf("agent host name: %w", err)
	}
	log := opts.Log.With("host", opts.Host)
	if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("agent data dir: %w", err)
	}
	creds, err := opts.Creds.ForAgent(opts.Host)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", opts.Host, err)
	}
	conn, err := bus.Connect(ctx, opts.BusURL, creds, "keel-agent-"+opts.Host, log)
	if err != nil {
		return nil, fmt.Errorf("agent %s connecting to the bus: %w", opts.Host, err)
	}
	a := &Agent{opts: opts, conn: conn, log: log}
	if err := a.start(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return a, nil
}

func (a *Agent) start(ctx context.Context) error {
	opts := a.opts
	st := &rpc.Store{Conn: a.conn, Host: opts.Host}
	hc := opts.Hardware
	hc.Host = opts.Host
	uuid, err := a.register(ctx, st, hc)
	if err != nil {
		return err
	}
	hc.ProviderUUID = uuid
	a.hc = hc
	drv, err := a.newDriver(hc, st)
	if err != nil {
		return err
	}
	if err := a.untilAnswered(ctx, "waiting for the servers to list the evacuations from this host", func(ctx context.Context) error {
		_, err := compute.DestroyEvacuated(ctx, st, drv, opts.Host, a.log)
		return err
	}); err != nil {
		return err
	}
	tr := compute.NewTracker(hc, st, drv, opts.Clock)
	// The guests that survived a restart are counted again at once; the
	// first audit (right below) reconciles them with the allocations.
	guests, err := drv.Guests(ctx)
	if err != nil {
		return err
	}
	for _, g := range guests {
		if g.State == compute.GuestRunning || g.State == compute.GuestMigrating {
			tr.Track(g.UUID, g.Flavor)
		}
	}
	reporter := &rpc.Reporter{Conn: a.conn, Host: opts.Host, Log: a.log}
	// Every build and copy report is kept on disk until a server took it.
	a.outbox, err = compute.NewOutbox(filepath.Join(opts.DataDir, "reports"), reporter, opts.Clock, a.log)
	if err != nil {
		return fmt.Errorf("agent %s: %w", opts.Host, err)
	}
	a.mgr = compute.NewManager(opts.Host, drv, tr, rpc.Agents{Conn: a.conn}, a.outbox, opts.Clock, a.log)
	a.subs, err = rpc.ServeAgent(a.conn, a.mgr)
	if err != nil {
		return err
	}
	// Reports a previous run kept and no server took yet go first: the
	// outcome they record is the one that happened.
	if _, err := a.outbox.Replay(ctx); err != nil {
		return fmt.Errorf("agent %s: %w", opts.Host, err)
	}
	// Operations a restart cut short are reported as ended, so the
	// conductor finishes the build or rolls the migration back.
	for _, g := range drv.Interrupted() {
		switch g.State {
		case compute.GuestBuilding:
			var rebuilding bool
			if err := a.untilAnswered(ctx, "waiting for the servers to list an interrupted build's migrations", func(ctx context.Context) error {
				var err error
				rebuilding, err = a.rebuildingHere(ctx, st, g.UUID)
				return err
			}); err != nil {
				return err
			}
			if rebuilding {
				continue // an evacuation's rebuild: Reconcile reports it below
			}
			a.log.Info("reporting a build the restart interrupted (the guest runs)", "instance", g.UUID)
			if err := a.outbox.BuildDone(ctx, g.UUID, opts.Host, nil); err != nil {
				a.log.Error("build report not kept", "instance", g.UUID, "err", err)
			}
		case compute.GuestMigrating:
			a.log.Info("reporting a copy the restart interrupted", "instance", g.UUID, "migration", g.MigrationID)
			_ = a.outbox.CopyDone(ctx, g.MigrationID, compute.ErrCopyRestarted)
		}
	}
	// Copies that outlived the restart (a real hypervisor's) report again.
	a.mgr.ResumeCopies(ctx)
	// Whatever the guests' saved state, what the store still shows in
	// flight here is reported: builds whose report was lost, copies this
	// host no longer runs (an abort's, or one whose end was lost).
	var reconciled int
	if err := a.untilAnswered(ctx, "waiting for the servers to reconcile what is in flight on this host", func(ctx context.Context) error {
		var err error
		reconciled, err = a.mgr.Reconcile(ctx)
		return err
	}); err != nil {
		return fmt.Errorf("agent %s: %w", opts.Host, err)
	}
	if reconciled > 0 {
		a.log.Info("reported what the store showed in flight on this host", "reports", reconciled)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	if err := a.untilAnswered(ctx, "waiting for the servers to take the first heartbeat", func(ctx context.Context) error {
		return st.Heartbeat(ctx, opts.Host, opts.Clock.Now())
	}); err != nil {
		return fmt.Errorf("agent %s: first heartbeat: %w", opts.Host, err)
	}
	if d, err := a.mgr.Audit(ctx); err != nil {
		a.log.Warn("first audit failed; the periodic one will retry", "err", err)
	} else if d.Count() > 0 {
		a.log.Info("first audit healed drift", "drift", d.String())
		reporter.AuditDrift(ctx, d)
	}
	a.wg.Add(1)
	go a.heartbeat(runCtx, st)
	mc := opts.Metrics
	if mc == (compute.MetricsConfig{}) {
		mc = compute.DefaultMetricsConfig()
	}
	a.mgr.SetMetricsConfig(mc)
	// The heartbeat carries the measured usage's cadence reports: one
	// message a host and report_interval, not two.
	a.mgr.CarryMetricsOnHeartbeat(opts.ReportInterval)
	a.mgr.StartMetrics(runCtx)
	a.mgr.StartPeriodicAudit(runCtx, opts.UpdateResourcesInterval, opts.UpdateResourcesInterval, func(d compute.Drift) {
		if d.Count() > 0 {
			a.log.Info("audit healed drift", "drift", d.String())
			reporter.AuditDrift(runCtx, d)
		}
	})
	a.log.Info("agent started", "provider", uuid, "guests", len(guests))
	return nil
}

// rebuildingHere reports whether instance uuid is being evacuated to this
// host (its guest here is the rebuild's, not a boot's).
func (a *Agent) rebuildingHere(ctx context.Context, st *rpc.Store, uuid string) (bool, error) {
	ms, err := st.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: uuid, Host: a.opts.Host, ActiveOnly: true})
	if err != nil {
		return false, fmt.Errorf("agent %s: reading the migrations of the interrupted build of %s: %w", a.opts.Host, uuid, err)
	}
	for _, m := range ms {
		if m.Type == records.MigrationTypeEvac && m.DestHost == a.opts.Host {
			return true, nil
		}
	}
	return false, nil
}

// newDriver makes the configured virt driver; the real ones read the
// uploaded images their guests boot from through images.
func (a *Agent) newDriver(hc compute.HostConfig, images compute.ImageSource) (compute.Driver, error) {
	opts := a.opts
	switch opts.Driver {
	case "", "fake":
		drv, err := fake.New(fake.Config{Clock: opts.Clock, SpawnTime: opts.SpawnTime, StepTime: opts.StepTime, BandwidthMiBps: opts.BandwidthMiBps,
			ProgressEvery: time.Second, StateFile: filepath.Join(opts.DataDir, "guests.json"), MemoryMB: physicalMemory(hc), Log: a.log,
			HostCPUs: hc.VCPUs, HostMemoryMB: hc.MemoryMB, Workload: opts.Workload, WorkloadSeed: workloadSeed(opts.Host)})
		return drv, err
	case "qemu":
		qc := opts.QEMU
		if qc.Dir == "" {
			qc.Dir = filepath.Join(opts.DataDir, "qemu")
		}
		if qc.Log == nil {
			qc.Log = a.log
		}
		if qc.Images == nil {
			qc.Images = images
		}
		drv, err := qemu.New(qc)
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", opts.Host, err)
		}
		return drv, nil
	case "libvirt":
		lc := opts.Libvirt
		if lc.Dir == "" {
			lc.Dir = filepath.Join(opts.DataDir, "libvirt")
		}
		if lc.Host == "" {
			lc.Host = opts.Host
		}
		lc.URI = strings.ReplaceAll(lc.URI, "{host}", opts.Host)
		if lc.Log == nil {
			lc.Log = a.log
		}
		if lc.Images == nil {
			lc.Images = images
		}
		drv, err := libvirt.New(context.Background(), lc)
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", opts.Host, err)
		}
		return drv, nil
	}
	return nil, fmt.Errorf("agent %s: unknown virt driver %q (fake, qemu or libvirt)", opts.Host, opts.Driver)
}

// register registers the host, waiting for a server to answer (the agent
// may start first).
func (a *Agent) register(ctx context.Context, st *rpc.Store, hc compute.HostConfig) (string, error) {
	var uuid string
	err := a.untilAnswered(ctx, "waiting for a keel server to register with", func(ctx context.Context) error {
		var err error
		uuid, err = st.RegisterHost(ctx, hc, a.opts.Zone)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("agent %s registering: %w", hc.Host, err)
	}
	return uuid, nil
}

// untilAnswered runs step, a part of the start that asks the servers and
// may be asked again, until it ends without a bus failure (bus.
// ErrUnavailable: no server answers yet, or the connection dropped while
// it waited — the servers drop an agent's connections when its identity
// changes, which a start right after `keel agent enroll` meets) or ctx
// ends. A call without a deadline is tried once (rpc.Store), so each step
// would otherwise end the start at the first dropped connection.
func (a *Agent) untilAnswered(ctx context.Context, waiting string, step func(context.Context) error) error {
	wait := 200 * time.Millisecond
	for {
		err := step(ctx)
		if err == nil || !errors.Is(err, bus.ErrUnavailable) {
			return err
		}
		a.log.Info(waiting, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (a *Agent) heartbeat(ctx context.Context, st *rpc.Store) {
	defer a.wg.Done()
	t := time.NewTicker(a.opts.ReportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			hctx, cancel := context.WithTimeout(ctx, a.opts.ReportInterval)
			t0 := time.Now()
			err := a.mgr.Heartbeat(hctx, func(ctx context.Context, rec *records.HostRecord) (bool, error) {
				return st.HeartbeatWithRecord(ctx, a.opts.Host, a.opts.Clock.Now(), rec)
			})
			cancel()
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, store.ErrNotFound) {
				err = a.registerAgain(ctx, st)
			}
			if err != nil {
				a.log.Warn("heartbeat failed", "err", err)
			}
			if a.opts.OnHeartbeat != nil {
				a.opts.OnHeartbeat(time.Since(t0), err)
			}
		}
	}
}

// registerAgain registers the host again after its service was deleted
// (os-services DELETE) while the agent ran, as a restarted nova-compute
// does: the provider comes back under the UUID the tracker holds, the
// service record (enabled, in the agent's zone) and the host record (the
// audit writes it) with it, and a heartbeat marks the service up. The
// host's aggregates and a disabled state do not come back: the delete
// dropped them, as Nova's does.
func (a *Agent) registerAgain(ctx context.Context, st *rpc.Store) error {
	a.log.Warn("the servers have no service record for this host (deleted while the agent ran): registering again", "provider", a.hc.ProviderUUID)
	rctx, cancel := context.WithTimeout(ctx, a.opts.ReportInterval)
	defer cancel()
	if _, err := st.RegisterHost(rctx, a.hc, a.opts.Zone); err != nil {
		return fmt.Errorf("registering again: %w", err)
	}
	if err := st.Heartbeat(rctx, a.opts.Host, a.opts.Clock.Now()); err != nil {
		return fmt.Errorf("first heartbeat after registering again: %w", err)
	}
	if _, err := a.mgr.Audit(rctx); err != nil {
		a.log.Warn("audit after registering again failed; the periodic one will retry", "err", err)
	}
	a.log.Info("registered again", "provider", a.hc.ProviderUUID)
	return nil
}

// workloadSeed seeds a host's fake workload models from its name, so a
// host's bursts are the same after a restart.
func workloadSeed(host string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(host))
	return h.Sum64()
}

// physicalMemory caps the fake hypervisor at its RAM unless the host
// overcommits RAM.
func physicalMemory(hc compute.HostConfig) int64 {
	if hc.RAMAllocationRatio > 1 {
		return 0
	}
	return hc.MemoryMB
}

// MessageCounts are the bus messages the agent's connection has received
// and sent.
func (a *Agent) MessageCounts() (in, out uint64) { return a.conn.MessageCounts() }

// Manager returns the agent's compute manager.
func (a *Agent) Manager() *compute.Manager { return a.mgr }

// Stop stops serving and disconnects. The guests stay in the state file.
func (a *Agent) Stop() {
	if a.stopped {
		return
	}
	a.stopped = true
	if a.cancel != nil {
		a.cancel()
	}
	if a.mgr != nil {
		a.mgr.StopPeriodicAudit()
		a.mgr.StopMetrics()
	}
	if a.outbox != nil {
		a.outbox.Stop() // what is pending stays on disk for the next start
	}
	for _, s := range a.subs {
		_ = s.Unsubscribe()
	}
	if a.mgr != nil {
		if c, ok := a.mgr.Driver().(io.Closer); ok {
			_ = c.Close() // a real hypervisor's guests run on
		}
	}
	a.wg.Wait()
	a.conn.Close()
}
