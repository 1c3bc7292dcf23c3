package qemu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/lifecycle"
	"keel/internal/records"
	"keel/internal/store"
)

// TestConsoleLogRotation: a log past the bound moves to console.log.0 and
// the live one empties; a writer holding it open in append mode (as QEMU
// does with append=on) goes on at its start; the read joins both, the
// old part first, and keeps only the last MaxConsoleBytes.
func TestConsoleLogRotation(t *testing.T) {
	dir := t.TempDir()
	w, err := os.OpenFile(filepath.Join(dir, fileConsole), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString("line one\nline two\n"); err != nil {
		t.Fatal(err)
	}
	if err := rotateConsole(dir, 100); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, fileConsole)); len(b) != 18 {
		t.Fatalf("a log under the bound was rotated: %q left", b)
	}
	if _, err := w.WriteString(strings.Repeat("x", 100) + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := rotateConsole(dir, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("after\n"); err != nil {
		t.Fatal(err)
	}
	cur, _ := os.ReadFile(filepath.Join(dir, fileConsole))
	old, _ := os.ReadFile(filepath.Join(dir, fileConsoleOld))
	if string(cur) != "after\n" || !strings.HasPrefix(string(old), "line one\n") || len(old) != 119 {
		t.Fatalf("after rotation: live %q, old %d bytes %q…", cur, len(old), old[:min(len(old), 20)])
	}
	all, err := compute.TailFiles(compute.MaxConsoleBytes, filepath.Join(dir, fileConsoleOld), filepath.Join(dir, fileConsole))
	if err != nil || string(all) != string(old)+"after\n" {
		t.Fatalf("read: %q %v", all, err)
	}
	tail, err := compute.TailFiles(10, filepath.Join(dir, fileConsoleOld), filepath.Join(dir, fileConsole))
	if err != nil || string(tail) != "xxx\nafter\n" {
		t.Fatalf("last 10 bytes: %q %v", tail, err)
	}
}

// TestConsoleOutput boots a real QEMU guest and reads what it wrote to
// its serial port, also once it is stopped and after it started again
// (appended); a guest the driver does not have is not found.
func TestConsoleOutput(t *testing.T) {
	ctx := context.Background()
	was := PowerDownWait
	PowerDownWait = 200 * time.Millisecond
	t.Cleanup(func() { PowerDownWait = was })
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
