package fake_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"keel/internal/compute"
	"keel/internal/compute/fake"
	"keel/internal/lifecycle"
	"keel/internal/records"
	"keel/internal/store"
)

// TestConsoleOutput: the fake guest's log names it, grows with each
// lifecycle operation (a stopped guest keeps it), and is gone with the
// guest.
func TestConsoleOutput(t *testing.T) {
	ctx := context.Background()
	d, err := fake.New(fake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d.AddGuest(compute.Guest{UUID: "g1", Name: "vm1", Flavor: records.Flavor{VCPUs: 2, RAMMB: 512}, State: compute.GuestRunning})
	out, err := d.ConsoleOutput(ctx, "g1")
	if err != nil || !strings.Contains(string(out), "vm1 (g1)") || strings.Count(string(out), "\n") < 4 {
		t.Fatalf("console of a running guest: %q %v", out, err)
	}
	if err := d.Lifecycle(ctx, records.Instance{UUID: "g1"}, lifecycle.OpStop); err != nil {
		t.Fatal(err)
	}
	out, err = d.ConsoleOutput(ctx, "g1")
	if err != nil || !strings.HasSuffix(string(out), "keel fake guest: "+lifecycle.OpStop+", now stopped\n") {
		t.Fatalf("console of the stopped guest: %q %v", out, err)
	}
	if err := d.Destroy(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ConsoleOutput(ctx, "g1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("console of a destroyed guest: %v, want not found", err)
	}
}
