package libvirt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/compute/libvirt/lvhost"
	"keel/internal/lifecycle"
	"keel/internal/records"
	"keel/internal/store"
	"keel/internal/testenv"
)

// The tests share one cluster of two libvirt daemons (h01, h02) per
// package run: starting them costs seconds.
var (
	clusterOnce sync.Once
	cluster     *lvhost.Cluster
	clusterErr  error
)

// hosts returns the package's cluster, started on first use; a missing
// prerequisite (root, libvirtd, QEMU, ip, unshare) fails the test naming
// it.
func hosts(t *testing.T) *lvhost.Cluster {
	t.Helper()
	testenv.External(t, "libvirtd in namespaces (root; Debian's libvirt-daemon-system, qemu-system-x86, iproute2)")
	testenv.External(t, "libvirt daemons in namespaces of their own (root; Debian's libvirt-daemon-system, qemu-system-x86, iproute2)")
	clusterOnce.Do(func() {
		if clusterErr = lvhost.Check(); clusterErr != nil {
			return
		}
		dir, err := tempDir()
		if err != nil {
			clusterErr = err
			return
		}
		cluster, clusterErr = lvhost.Start(context.Background(), lvhost.Options{Dir: dir, Hosts: []string{"h01", "h02"}})
	})
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return cluster
}

// newDriver returns a driver for host on the cluster with a directory of
// the test's; every guest it leaves is destroyed when the test ends.
func newDriver(t *testing.T, host string, cfg Config) *Driver {
	t.Helper()
	h := hosts(t).Host(host)
	cfg.URI, cfg.Host = h.URI(), host
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(t.TempDir(), host)
	}
	d, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		gs, _ := d.Guests(context.Background())
		for _, g := range gs {
			_ = d.Destroy(context.Background(), g.UUID)
		}
		_ = d.Close()
	})
	return d
}

func waitDone(t *testing.T, ch <-chan error, within time.Duration) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(within):
		t.Fatalf("no outcome within %s", within)
		return nil
	}
}

// waitRising waits until the guest's heartbeat passes from.
func waitRising(t *testing.T, d *Driver, uuid string, from uint32) uint32 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		hb, err := d.Heartbeat(context.Background(), uuid)
		if err == nil && hb > from {
			return hb
		}
		if time.Now().After(deadline) {
			t.Fatalf("heartbeat of %s: stuck at %d (%v)", uuid, hb, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func spawn(t *testing.T, d *Driver, inst records.Instance) {
	t.Helper()
	ch := make(chan error, 1)
	d.Spawn(context.Background(), inst, func(err error) { ch <- err })
	if err := waitDone(t, ch, 60*time.Second); err != nil {
		t.Fatal(err)
	}
}

func stateOf(t *testing.T, d *Driver, uuid string) compute.GuestState {
	t.Helper()
	gs, err := d.Guests(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if g.UUID == uuid {
			return g.State
		}
	}
	return ""
}

func instance(uuid, program string) records.Instance {
	return records.Instance{UUID: uuid, Name: "vm-" + uuid[len(uuid)-2:], Metadata: map[string]string{"keel_guest": program},
		Flavor: records.Flavor{ID: "q64", Name: "q64", VCPUs: 1, RAMMB: 64}}
}

// migrate runs a live migration from src to dst the way the manager does
// and returns the copy's error and its progress reports.
func migrate(t *testing.T, src, dst *Driver, migID int64, inst records.Instance, during func()) (error, int) {
	t.Helper()
	ctx := context.Background()
	if err := dst.CheckCanLiveMigrateDestination(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if err := src.CheckCanLiveMigrateSource(ctx, inst); err != nil {
		t.Fatal(err)
	}
	data, err := dst.PreLiveMigration(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	if s := stateOf(t, dst, inst.UUID); s != compute.GuestIncoming {
		t.Fatalf("prepared guest on the destination is %q, want incoming", s)
	}
	copied := make(chan error, 1)
	var mu sync.Mutex
	reports := 0
	src.LiveMigration(ctx, migID, inst, dst.cfg.Host, data, func(total, processed, remaining int64) {
		mu.Lock()
		reports++
		mu.Unlock()
	}, func(err error) { copied <- err })
	if during != nil {
		during()
	}
	err = waitDone(t, copied, 120*time.Second)
	mu.Lock()
	defer mu.Unlock()
	return err, reports
}

// TestSpawnMigrateFindOwn boots a guest on h01, migrates it live to h02
// (libvirt peer to peer) and checks the heartbeat went on there from where
// it was and the source has nothing left; then a driver restarted on h02
// finds the guest, and a second agent's driver on the same daemon (another
// host name) finds none of it.
func TestSpawnMigrateFindOwn(t *testing.T) {
	ctx := context.Background()
	src := newDriver(t, "h01", Config{})
	dst := newDriver(t, "h02", Config{})
	inst := instance("5a1f0c6e-0000-4000-8000-000000000001", "fill-8")
	spawn(t, src, inst)
	const running = "keel guest: running\r\n"
	waitConsoleFor(t, src, inst.UUID, func(s string) bool { return strings.HasSuffix(s, running) }, "the guest's boot lines")
	if s := stateOf(t, src, inst.UUID); s != compute.GuestRunning {
		t.Fatalf("spawned guest is %q", s)
	}
	hb := waitRising(t, src, inst.UUID, 0)

	start := time.Now()
	err, reports := migrate(t, src, dst, 7, inst, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("migrated in %s, %d progress reports", time.Since(start).Round(time.Millisecond), reports)
	if s := stateOf(t, src, inst.UUID); s != compute.GuestMigrating {
		t.Fatalf("source guest after the copy is %q, want migrating (shut off until post_live_migration_at_source)", s)
	}
	if err := dst.CheckIncoming(ctx, inst.UUID); err != nil {
		t.Fatal(err)
	}
	if err := dst.PostLiveMigrationAtDestination(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if err := src.PostLiveMigrationAtSource(ctx, inst.UUID); err != nil {
		t.Fatal(err)
	}
	after := waitRising(t, dst, inst.UUID, hb)
	t.Logf("heartbeat %d on h01, %d on h02", hb, after)
	if gs, _ := src.Guests(ctx); len(gs) != 0 {
		t.Fatalf("source still lists %+v", gs)
	}
	// The console log goes on in the destination's directory (the guest
	// wrote nothing since); the source has no guest to read.
	waitConsole(t, dst, inst.UUID, "")
	if _, err := src.ConsoleOutput(ctx, inst.UUID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("console on the source after the move: %v, want not found", err)
	}
	if s := stateOf(t, dst, inst.UUID); s != compute.GuestRunning {
		t.Fatalf("arrived guest is %q", s)
	}

	again, err := New(ctx, Config{URI: dst.cfg.URI, Host: "h02", Dir: dst.cfg.Dir})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if gs, _ := again.Guests(ctx); len(gs) != 1 || gs[0].UUID != inst.UUID || gs[0].State != compute.GuestRunning || gs[0].Flavor.RAMMB != 64 {
		t.Fatalf("restarted driver finds %+v", gs)
	}
	other, err := New(ctx, Config{URI: dst.cfg.URI, Host: "h02-other", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if gs, _ := other.Guests(ctx); len(gs) != 0 {
		t.Fatalf("another agent on the same libvirtd finds %+v", gs)
	}
	if err := other.Destroy(ctx, inst.UUID); err != nil {
		t.Fatal(err)
	}
	waitRising(t, dst, inst.UUID, after) // the other agent's destroy left it alone
}

// TestLifecycle runs every lifecycle operation on a libvirt guest and
// reads its heartbeat: pause holds it, suspend (managed save) and resume
// keep it, stop then start boot it again.
func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, "h01", Config{PowerDownWait: 200 * time.Millisecond})
	inst := instance("5a1f0c6e-0000-4000-8000-000000000002", "idle")
	spawn(t, d, inst)
	hb := waitRising(t, d, inst.UUID, 0)
	op := func(name string, want compute.GuestState) {
		t.Helper()
		start := time.Now()
		if err := d.Lifecycle(ctx, inst, name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s := stateOf(t, d, inst.UUID); s != want {
			t.Fatalf("%s: guest %s, want %s", name, s, want)
		}
		t.Logf("%s: %s", name, time.Since(start).Round(time.Millisecond))
	}
	op(lifecycle.OpPause, compute.GuestPaused)
	a, _ := d.Heartbeat(ctx, inst.UUID)
	time.Sleep(300 * time.Millisecond)
	if b, _ := d.Heartbeat(ctx, inst.UUID); b != a {
		t.Fatalf("paused guest's heartbeat moved %d → %d", a, b)
	}
	op(lifecycle.OpUnpause, compute.GuestRunning)
	hb = waitRising(t, d, inst.UUID, a)
	op(lifecycle.OpSuspend, compute.GuestSuspended)
	op(lifecycle.OpResume, compute.GuestRunning)
	if r, err := d.Heartbeat(ctx, inst.UUID); err != nil || r < hb {
		t.Fatalf("resumed guest's heartbeat %d (%v), want at least %d", r, err, hb)
	}
	op(lifecycle.OpReboot, compute.GuestRunning)
	op(lifecycle.OpRescue, compute.GuestRescued)
	op(lifecycle.OpUnrescue, compute.GuestRunning)
	op(lifecycle.OpStop, compute.GuestStopped)
	op(lifecycle.OpStop, compute.GuestStopped) // idempotent
	op(lifecycle.OpStart, compute.GuestRunning)
	waitRising(t, d, inst.UUID, 0)
	op(lifecycle.OpRebootHard, compute.GuestRunning)
	op(lifecycle.OpRebuild, compute.GuestRunning)
	waitRising(t, d, inst.UUID, 0)
}

// TestReattachAfterAgentLoss starts a slow copy (2 MiB/s), drops the
// source driver (its connection closes, as when the agent is killed),
// and a new driver on the same host finds the copy still running in
// libvirtd, follows it to its end and reports it completed.
func TestReattachAfterAgentLoss(t *testing.T) {
	ctx := context.Background()
	src := newDriver(t, "h01", Config{BandwidthMiBps: 2})
	dst := newDriver(t, "h02", Config{})
	inst := instance("5a1f0c6e-0000-4000-8000-000000000003", "fill-16")
	spawn(t, src, inst)
	hb := waitRising(t, src, inst.UUID, 0)
	data, err := dst.PreLiveMigration(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	progressed := make(chan struct{}, 100)
	src.LiveMigration(ctx, 9, inst, "h02", data, func(total, processed, remaining int64) { progressed <- struct{}{} },
		func(err error) { t.Errorf("the lost driver reported %v", err) })
	select {
	case <-progressed:
	case <-time.After(60 * time.Second):
		t.Fatal("no progress within 60 s")
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := New(ctx, Config{URI: src.cfg.URI, Host: "h01", Dir: src.cfg.Dir})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	rs := again.Resumable()
	if len(rs) != 1 || rs[0].UUID != inst.UUID || rs[0].MigrationID != 9 {
		t.Fatalf("resumable after the restart: %+v (interrupted %+v)", rs, again.Interrupted())
	}
	if again.DestinationOf(inst.UUID) != "h02" {
		t.Fatalf("destination %q", again.DestinationOf(inst.UUID))
	}
	done := make(chan error, 1)
	again.Reattach(ctx, inst.UUID, nil, func(err error) { done <- err })
	if err := waitDone(t, done, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := dst.PostLiveMigrationAtDestination(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if err := again.PostLiveMigrationAtSource(ctx, inst.UUID); err != nil {
		t.Fatal(err)
	}
	waitRising(t, dst, inst.UUID, hb)
}

// TestFailedCopiesStayOnTheSource: a destination libvirtd that cannot be
// reached, and a destination QEMU killed mid-copy, each fail the copy
// with words an operator understands; the guest runs on at its source,
// settled, and nothing is left on the destination once rolled back.
func TestFailedCopiesStayOnTheSource(t *testing.T) {
	ctx := context.Background()
	src := newDriver(t, "h01", Config{BandwidthMiBps: 2})
	dst := newDriver(t, "h02", Config{})
	inst := instance("5a1f0c6e-0000-4000-8000-000000000004", "fill-16")
	spawn(t, src, inst)
	hb := waitRising(t, src, inst.UUID, 0)

	data, err := dst.PreLiveMigration(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{}
	for k, v := range data {
		bad[k] = v
	}
	bad["dconnuri"] = "qemu+tcp://no-such-host.invalid/system"
	done := make(chan error, 1)
	src.LiveMigration(ctx, 11, inst, "h02", bad, nil, func(err error) { done <- err })
	err = waitDone(t, done, 60*time.Second)
	t.Logf("unreachable destination: %v", err)
	if err == nil || !strings.Contains(err.Error(), "could not reach the destination's") {
		t.Fatalf("unreachable destination: %v", err)
	}
	if s := stateOf(t, src, inst.UUID); s != compute.GuestRunning {
		t.Fatalf("source guest after the failure is %q", s)
	}

	// The destination's QEMU killed once memory flows.
	pidFile := filepath.Join(hosts(t).Host("h02").Dir, "run", "qemu", DomainName(inst.UUID)+".pid")
	progressed := make(chan struct{}, 100)
	src.LiveMigration(ctx, 12, inst, "h02", data, func(total, processed, remaining int64) { progressed <- struct{}{} },
		func(err error) { done <- err })
	select {
	case <-progressed:
	case <-time.After(60 * time.Second):
		t.Fatal("no progress within 60 s")
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = waitDone(t, done, 60*time.Second)
	t.Logf("destination QEMU killed: %v", err)
	if err == nil || errors.Is(err, compute.ErrCopyCancelled) {
		t.Fatalf("a killed destination QEMU: %v", err)
	}
	if err := dst.RollbackLiveMigrationAtDestination(ctx, inst.UUID); err != nil {
		t.Fatal(err)
	}
	if gs, _ := dst.Guests(ctx); len(gs) != 0 {
		t.Fatalf("the destination keeps %+v", gs)
	}
	if s := stateOf(t, src, inst.UUID); s != compute.GuestRunning {
		t.Fatalf("source guest after the failure is %q", s)
	}
	waitRising(t, src, inst.UUID, hb)
}
