package libvirt

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"keel/internal/lifecycle"
	"keel/internal/store"
)

// TestConsoleOutput boots a libvirt guest and reads what it wrote to its
// serial port, also once it is stopped and after it started again
// (appended); a guest the driver does not have is not found.
// TestSpawnMigrateFindOwn reads the console on both sides of a move.
func TestConsoleOutput(t *testing.T) {
	ctx := context.Background()
	src := newDriver(t, "h01", Config{PowerDownWait: 200 * time.Millisecond})
	inst := instance("5a1f0c6e-0000-4000-8000-0000000000c1", "idle")
	spawn(t, src, inst)
	waitConsole(t, src, inst.UUID, bootLines)
	for _, op := range []string{lifecycle.OpStop, lifecycle.OpStart} {
		if err := src.Lifecycle(ctx, inst, op); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
	waitConsole(t, src, inst.UUID, bootLines+bootLines)
	if _, err := src.ConsoleOutput(ctx, "5a1f0c6e-0000-4000-8000-0000000000ff"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("console of a guest not here: %v, want not found", err)
	}
}

// bootLines is what keel's guest writes to its serial port as it boots
// (program idle).
const bootLines = "keel guest: booted from its 512-byte boot sector\r\nkeel guest: mode i\r\nkeel guest: running\r\n"

// waitConsole waits until the guest's console log on d reads want.
func waitConsole(t *testing.T, d *Driver, uuid, want string) {
	t.Helper()
	waitConsoleFor(t, d, uuid, func(s string) bool { return s == want }, fmt.Sprintf("%q", want))
}

// waitConsoleFor waits until the guest's console log on d satisfies ok
// (what describes it in the failure).
func waitConsoleFor(t *testing.T, d *Driver, uuid string, ok func(string) bool, what string) {
	t.Helper()
	var out []byte
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var err error
		if out, err = d.ConsoleOutput(context.Background(), uuid); err != nil {
			t.Fatal(err)
		}
		if ok(string(out)) {
			return
		}
	}
	t.Fatalf("console log on %s: %q, want %s", d.cfg.Host, out, what)
}
