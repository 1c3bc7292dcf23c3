package qemu

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/lifecycle"
	"keel/internal/records"
)

// TestLifecycleOperations runs the lifecycle operations on a real QEMU
// guest and reads its heartbeat: pause stops it and unpause lets it go
// on; suspend ends the process with the state in a file and resume goes
// on from the saved heartbeat (the RAM came back); stop ends the process
// and a driver restarted meanwhile keeps the stopped guest; start boots
// it again (its heartbeat starts over).
func TestLifecycleOperations(t *testing.T) {
	ctx := context.Background()
	shortPowerDown(t)
	d := newDriver(t, Config{})
	inst := records.Instance{UUID: "6f0c1c6e-0000-4000-8000-00000000000a", Name: "g1", Metadata: map[string]string{"keel_guest": "idle"},
		Flavor: records.Flavor{Name: "tiny", VCPUs: 1, RAMMB: 64}}
	spawned := make(chan error, 1)
	d.Spawn(ctx, inst, func(err error) { spawned <- err })
	if err := waitDone(t, spawned, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	hb := waitRising(t, d, inst.UUID, 0)
	state := func(d *Driver) compute.GuestState {
		gs, _ := d.Guests(ctx)
		for _, g := range gs {
			if g.UUID == inst.UUID {
				return g.State
			}
		}
		return ""
	}
	op := func(d *Driver, name string, want compute.GuestState) {
		t.Helper()
		if err := d.Lifecycle(ctx, inst, name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s := state(d); s != want {
			t.Fatalf("%s: guest %s, want %s", name, s, want)
		}
	}

	op(d, lifecycle.OpPause, compute.GuestPaused)
	a, _ := heartbeatOf(d, inst.UUID)
	time.Sleep(300 * time.Millisecond)
	if b, _ := heartbeatOf(d, inst.UUID); b != a {
		t.Fatalf("paused guest's heartbeat moved %d → %d", a, b)
	}
	op(d, lifecycle.OpUnpause, compute.GuestRunning)
	hb = waitRising(t, d, inst.UUID, a)

	op(d, lifecycle.OpSuspend, compute.GuestSuspended)
	if _, err := os.Stat(filepath.Join(d.cfg.Dir, inst.UUID, fileSuspend)); err != nil {
		t.Fatalf("suspended guest's state file: %v", err)
	}
	if n := KillAll(d.cfg.Dir); n != 0 {
		t.Fatalf("a suspended guest left %d QEMU running", n)
	}
	op(d, lifecycle.OpResume, compute.GuestRunning)
	resumed, err := heartbeatOf(d, inst.UUID)
	if err != nil || resumed < hb {
		t.Fatalf("resumed guest's heartbeat %d (%v), want at least %d from before the suspend", resumed, err, hb)
	}
	waitRising(t, d, inst.UUID, resumed)

	op(d, lifecycle.OpStop, compute.GuestStopped)
	if n := KillAll(d.cfg.Dir); n != 0 {
		t.Fatalf("a stopped guest left %d QEMU running", n)
	}
	again, err := New(Config{Dir: d.cfg.Dir})
	if err != nil {
		t.Fatal(err)
	}
	if s := state(again); s != compute.GuestStopped {
		t.Fatalf("a restarted driver sees the stopped guest as %q", s)
	}
	op(again, lifecycle.OpStop, compute.GuestStopped) // a repeat does nothing
	op(again, lifecycle.OpStart, compute.GuestRunning)
	waitRising(t, again, inst.UUID, 0)
	op(again, lifecycle.OpRebootHard, compute.GuestRunning)
	waitRising(t, again, inst.UUID, 0)
	if err := again.Destroy(ctx, inst.UUID); err != nil {
		t.Fatal(err)
	}
}

// TestPausedLiveMigration live-migrates a paused guest between two
// drivers, as Nova allows: the source check accepts it, QEMU copies it
// paused, it arrives paused (its heartbeat frozen at the value it had on
// the source) and goes on from there once unpaused. A second copy that
// fails leaves it paused on its source.
func TestPausedLiveMigration(t *testing.T) {
	ctx := context.Background()
	src := newDriver(t, Config{})
	dst := newDriver(t, Config{})
	inst := records.Instance{UUID: "6f0c1c6e-0000-4000-8000-00000000000b", Name: "g1", Metadata: map[string]string{"keel_guest": "idle"},
		Flavor: records.Flavor{Name: "tiny", VCPUs: 1, RAMMB: 64}}
	spawned := make(chan error, 1)
	src.Spawn(ctx, inst, func(err error) { spawned <- err })
	if err := waitDone(t, spawned, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitRising(t, src, inst.UUID, 0)
	if err := src.Lifecycle(ctx, inst, lifecycle.OpPause); err != nil {
		t.Fatal(err)
	}
	inst.VMState = records.VMPaused
	frozen, err := heartbeatOf(src, inst.UUID)
	if err != nil {
		t.Fatal(err)
	}
	guestState := func(d *Driver) compute.GuestState {
		gs, _ := d.Guests(ctx)
		for _, g := range gs {
			if g.UUID == inst.UUID {
				return g.State
			}
		}
		return ""
	}
	migrate := func(from, to *Driver, data map[string]string) error {
		t.Helper()
		if err := from.CheckCanLiveMigrateSource(ctx, inst); err != nil {
			t.Fatalf("source check of a paused guest: %v", err)
		}
		copied := make(chan error, 1)
		from.LiveMigration(ctx, 9, inst, "dst", data, nil, func(err error) { copied <- err })
		return waitDone(t, copied, 60*time.Second)
	}

	// A copy to a destination that refuses the stream (more RAM) fails:
	// the guest stays paused on its source.
	bad := newDriver(t, Config{ExtraArgs: []string{"-m", "80"}})
	data, err := bad.PreLiveMigration(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate(src, bad, data); err == nil {
		t.Fatal("a copy to a mismatched destination succeeded")
	}
	_ = bad.RollbackLiveMigrationAtDestination(ctx, inst.UUID)
	if s := guestState(src); s != compute.GuestPaused {
		t.Fatalf("after the failed copy the source guest is %q, want paused", s)
	}
	time.Sleep(200 * time.Millisecond)
	if hb, _ := heartbeatOf(src, inst.UUID); hb != frozen {
		t.Fatalf("the guest ran on its source after the failed copy: heartbeat %d → %d", frozen, hb)
	}

	if data, err = dst.PreLiveMigration(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if err := migrate(src, dst, data); err != nil {
		t.Fatal(err)
	}
	if err := dst.PostLiveMigrationAtDestination(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if err := src.PostLiveMigrationAtSource(ctx, inst.UUID); err != nil {
		t.Fatal(err)
	}
	if s := guestState(dst); s != compute.GuestPaused {
		t.Fatalf("the guest arrived %q, want paused", s)
	}
	time.Sleep(200 * time.Millisecond)
	if hb, err := heartbeatOf(dst, inst.UUID); err != nil || hb != frozen {
		t.Fatalf("arrived heartbeat %d (%v), want %d, frozen since the pause", hb, err, frozen)
	}
	var st struct{ Status string }
	dst.mu.Lock()
	v := dst.vms[inst.UUID]
	dst.mu.Unlock()
	if err := dst.execute(ctx, v, "query-status", nil, &st); err != nil || st.Status != "paused" {
		t.Fatalf("QEMU says the arrived guest is %q (%v), want paused", st.Status, err)
	}
	if err := dst.Lifecycle(ctx, inst, lifecycle.OpUnpause); err != nil {
		t.Fatal(err)
	}
	waitRising(t, dst, inst.UUID, frozen)
}
