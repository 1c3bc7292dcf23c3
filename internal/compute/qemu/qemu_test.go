package qemu

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/records"
	"keel/internal/testenv"
)

// newDriver returns a driver on a fresh directory; every QEMU it started
// is killed when the test ends. Missing QEMU fails the test.
func newDriver(t *testing.T, cfg Config) *Driver {
	testenv.External(t, "QEMU (Debian's qemu-system-x86)")
	t.Helper()
	cfg.Dir = t.TempDir()
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("qemu driver: %v", err)
	}
	t.Cleanup(func() { KillAll(cfg.Dir) })
	return d
}

// shortPowerDown sets PowerDownWait, how long a stop waits after the
// ACPI power button before it kills the guest's QEMU, to 200 ms until the
// test ends.
func shortPowerDown(t *testing.T) {
	was := PowerDownWait
	PowerDownWait = 200 * time.Millisecond
	t.Cleanup(func() { PowerDownWait = was })
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

func heartbeatOf(d *Driver, uuid string) (uint32, error) {
	sock, err := PeekSocket(d.cfg.Dir, uuid)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return ReadHeartbeat(ctx, sock)
}

// waitRising waits until the guest's heartbeat passes from (the guest may
// still be booting at first).
func waitRising(t *testing.T, d *Driver, uuid string, from uint32) uint32 {
	t.Helper()
	var hb uint32
	testenv.Poll(t, "the heartbeat of "+uuid+" rises", func() error {
		var err error
		if hb, err = heartbeatOf(d, uuid); err == nil && hb <= from {
			err = fmt.Errorf("stuck at %d", hb)
		}
		return err
	})
	return hb
}

// TestSpawnMigrateAdopt boots an idle guest, migrates it between two
// drivers (two hosts' agents in one process), checks the heartbeat went on
// from where it was, then restarts the destination's driver and checks it
// adopted the running QEMU.
func TestSpawnMigrateAdopt(t *testing.T) {
	ctx := context.Background()
	src := newDriver(t, Config{})
	dst := newDriver(t, Config{})
	inst := records.Instance{UUID: "6f0c1c6e-0000-4000-8000-000000000001", Name: "g1", Metadata: map[string]string{"keel_guest": "fill-8"},
		Flavor: records.Flavor{Name: "tiny", VCPUs: 1, RAMMB: 64}}

	spawned := make(chan error, 1)
	src.Spawn(ctx, inst, func(err error) { spawned <- err })
	if err := waitDone(t, spawned, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	hb := waitRising(t, src, inst.UUID, 0)

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
	copied := make(chan error, 1)
	var reports int
	src.LiveMigration(ctx, 7, inst, "dst", data, func(total, processed, remaining int64) { reports++ }, func(err error) { copied <- err })
	if err := waitDone(t, copied, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if reports == 0 {
		t.Error("no progress reported")
	}
	if err := dst.PostLiveMigrationAtDestination(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if err := src.PostLiveMigrationAtSource(ctx, inst.UUID); err != nil {
		t.Fatal(err)
	}
	after := waitRising(t, dst, inst.UUID, hb)
	t.Logf("heartbeat %d on the source, %d on the destination", hb, after)
	if gs, _ := src.Guests(ctx); len(gs) != 0 {
		t.Errorf("source still has guests: %+v", gs)
	}

	// A new driver on the same directory (the agent restarted) adopts the
	// running QEMU.
	again, err := New(Config{Dir: dst.cfg.Dir})
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := again.Guests(ctx)
	if len(gs) != 1 || gs[0].UUID != inst.UUID || gs[0].State != compute.GuestRunning {
		t.Fatalf("adopted guests: %+v", gs)
	}
	waitRising(t, again, inst.UUID, after)
	if err := again.Destroy(ctx, inst.UUID); err != nil {
		t.Fatal(err)
	}
	if n := KillAll(dst.cfg.Dir); n != 0 {
		t.Errorf("Destroy left %d QEMU running", n)
	}
}

// TestDestinationFailureKeepsStderr starts the destination with more RAM
// than the source (extra -m): QEMU refuses the stream, and its stderr
// comes back as the reason; the source guest runs on.
func TestDestinationFailureKeepsStderr(t *testing.T) {
	ctx := context.Background()
	src := newDriver(t, Config{})
	dst := newDriver(t, Config{ExtraArgs: []string{"-m", "80"}})
	inst := records.Instance{UUID: "6f0c1c6e-0000-4000-8000-000000000002", Name: "g2", Flavor: records.Flavor{VCPUs: 1, RAMMB: 64}}
	spawned := make(chan error, 1)
	src.Spawn(ctx, inst, func(err error) { spawned <- err })
	if err := waitDone(t, spawned, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	data, err := dst.PreLiveMigration(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	copied := make(chan error, 1)
	src.LiveMigration(ctx, 8, inst, "dst", data, nil, func(err error) { copied <- err })
	err = waitDone(t, copied, 60*time.Second)
	if err == nil {
		t.Fatal("migration to a mismatched destination succeeded")
	}
	var ierr error
	for i := 0; i < 100; i++ {
		if ierr = dst.CheckIncoming(ctx, inst.UUID); ierr != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("source: %v; destination: %v", err, ierr)
	if ierr == nil || !containsAny(ierr.Error(), "Length mismatch", "load of migration failed") {
		t.Fatalf("destination's reason = %v, want QEMU's stderr", ierr)
	}
	if errors.Is(err, compute.ErrCopyCancelled) {
		t.Error("a failure reported as a cancel")
	}
	if err := dst.RollbackLiveMigrationAtDestination(ctx, inst.UUID); err != nil {
		t.Fatal(err)
	}
	hb := waitRising(t, src, inst.UUID, 0)
	waitRising(t, src, inst.UUID, hb)
	if gs, _ := src.Guests(ctx); len(gs) != 1 || gs[0].State != compute.GuestRunning {
		t.Fatalf("source guests after the failure: %+v", gs)
	}
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
