package qemu

import (
	"context"
	"errors"
	"testing"
	"time"

	"keel/internal/lifecycle"
	"keel/internal/records"
	"keel/internal/store"
)

// TestConsoleOutput boots a real QEMU guest and reads what it wrote to
// its serial port, also once it is stopped and after it started again
// (appended); a guest the driver does not have is not found.
func TestConsoleOutput(t *testing.T) {
	ctx := context.Background()
	shortPowerDown(t)
	d := newDriver(t, Config{})
	inst := records.Instance{UUID: "6f0c1c6e-0000-4000-8000-00000000c0de", Name: "c1", Metadata: map[string]string{"keel_guest": "idle"},
		Flavor: records.Flavor{Name: "tiny", VCPUs: 1, RAMMB: 64}}
	spawned := make(chan error, 1)
	d.Spawn(ctx, inst, func(err error) { spawned <- err })
	if err := waitDone(t, spawned, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	boot := "keel guest: booted from its 512-byte boot sector\r\nkeel guest: mode i\r\nkeel guest: running\r\n"
	waitConsole := func(want string) {
		t.Helper()
		var out []byte
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			var err error
			if out, err = d.ConsoleOutput(ctx, inst.UUID); err != nil {
				t.Fatal(err)
			}
			if string(out) == want {
				return
			}
		}
		t.Fatalf("console log %q, want %q", out, want)
	}
	waitConsole(boot)
	if err := d.Lifecycle(ctx, inst, lifecycle.OpStop); err != nil {
		t.Fatal(err)
	}
	waitConsole(boot)
	if err := d.Lifecycle(ctx, inst, lifecycle.OpStart); err != nil {
		t.Fatal(err)
	}
	waitConsole(boot + boot)
	if _, err := d.ConsoleOutput(ctx, "6f0c1c6e-0000-4000-8000-000000000000"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("console of a guest not here: %v, want not found", err)
	}
}
