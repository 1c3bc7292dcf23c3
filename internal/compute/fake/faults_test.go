package fake_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/compute/fake"
	"keel/internal/testdisk"
)

// reload opens the state file again, as a restarted agent would.
func reload(t *testing.T, path string) *fake.Driver {
	t.Helper()
	d, err := fake.New(fake.Config{Clock: clock.NewVirtual(clock.Epoch), StateFile: path})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A driver that cannot save its state fails the operation and leaves
// memory and file as they were; once the disk has room again the same
// operations succeed (issue row 6).
func TestFullDiskFailsTheOperation(t *testing.T) {
	disk := testdisk.Mount(t, 64)
	state := filepath.Join(disk.Dir, "guests.json")
	d, clk := newDriver(t, fake.Config{StateFile: state})
	var ok outcome
	d.Spawn(ctx, instance("a", 1024), ok.done(clk))
	clk.Advance(0)
	if ok.calls != 1 || ok.err != nil {
		t.Fatalf("spawn with room: %+v", ok)
	}
	disk.Fill()

	var sp outcome
	d.Spawn(ctx, instance("b", 1024), sp.done(clk))
	clk.Advance(0)
	if sp.calls != 1 || sp.err == nil || !strings.Contains(sp.err.Error(), "saving guest state") {
		t.Fatalf("spawn on a full disk reported %+v, want a failure saying the state could not be saved", sp)
	}
	if st := guestState(t, d, "b"); st != "" {
		t.Fatalf("guest b is %q after its failed spawn, want none", st)
	}

	var cp outcome
	d.LiveMigration(ctx, 7, instance("a", 1024), "h2", nil, nil, cp.done(clk))
	clk.Advance(0)
	if cp.calls != 1 || cp.err == nil {
		t.Fatalf("copy on a full disk reported %+v, want a failure", cp)
	}
	if st := guestState(t, d, "a"); st != compute.GuestRunning {
		t.Fatalf("guest a is %q after a copy that could not start, want running", st)
	}
	if err := d.PostLiveMigrationAtSource(ctx, "a"); err == nil {
		t.Fatal("post at source succeeded without saving the removal")
	}
	if _, err := d.PreLiveMigration(ctx, instance("c", 512)); err == nil {
		t.Fatal("pre_live_migration succeeded without saving the incoming guest")
	}
	if err := d.Destroy(ctx, "a"); err == nil {
		t.Fatal("destroy succeeded without saving the removal")
	}
	if gs, _ := d.Guests(ctx); len(gs) != 1 || gs[0].UUID != "a" || gs[0].State != compute.GuestRunning {
		t.Fatalf("guests after the failures: %+v, want only a, running", gs)
	}
	// The file says what memory says.
	if gs, _ := reload(t, state).Guests(ctx); len(gs) != 1 || gs[0].UUID != "a" || gs[0].State != compute.GuestRunning {
		t.Fatalf("state file after the failures: %+v, want only a, running", gs)
	}

	disk.Free()
	var again outcome
	d.Spawn(ctx, instance("b", 1024), again.done(clk))
	clk.Advance(0)
	if again.err != nil {
		t.Fatalf("spawn once the disk has room: %v", again.err)
	}
	if _, err := d.PreLiveMigration(ctx, instance("c", 512)); err != nil {
		t.Fatal(err)
	}
	if err := d.RollbackLiveMigrationAtDestination(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if gs, _ := reload(t, state).Guests(ctx); len(gs) != 2 {
		t.Fatalf("state file once the disk has room: %+v, want a and b", gs)
	}
}

// A spawn whose end (building → running) cannot be saved fails too.
func TestFullDiskDuringASpawnFailsIt(t *testing.T) {
	disk := testdisk.Mount(t, 64)
	d, clk := newDriver(t, fake.Config{StateFile: filepath.Join(disk.Dir, "guests.json"), SpawnTime: 10e9})
	var sp outcome
	d.Spawn(ctx, instance("a", 1024), sp.done(clk))
	clk.Advance(1e9)
	disk.Fill()
	clk.Advance(10e9)
	if sp.calls != 1 || sp.err == nil {
		t.Fatalf("spawn that could not save its end reported %+v, want a failure", sp)
	}
	if st := guestState(t, d, "a"); st == compute.GuestRunning {
		t.Fatal("guest reported failed but left running")
	}
}

// RevertCopy puts the source guest of a completed copy back to running,
// durably; the guest can then be copied again.
func TestRevertCopy(t *testing.T) {
	state := filepath.Join(t.TempDir(), "guests.json")
	d, clk := newDriver(t, fake.Config{StateFile: state})
	running(d, "a", 1024)
	var cp outcome
	d.LiveMigration(ctx, 3, instance("a", 1024), "h2", nil, nil, cp.done(clk))
	if err := d.RevertCopy(ctx, "a"); err == nil {
		t.Fatal("revert of a copy still in progress accepted")
	}
	clk.Advance(d.CopyTime(1024))
	if cp.err != nil {
		t.Fatal(cp.err)
	}
	if st := guestState(t, d, "a"); st != compute.GuestMigrating {
		t.Fatalf("after the copy the source guest is %q, want migrating", st)
	}
	if err := d.RevertCopy(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if st := guestState(t, d, "a"); st != compute.GuestRunning {
		t.Fatalf("after the revert the source guest is %q, want running", st)
	}
	if gs, _ := reload(t, state).Guests(ctx); len(gs) != 1 || gs[0].State != compute.GuestRunning {
		t.Fatalf("state file after the revert: %+v", gs)
	}
	if err := d.CheckCanLiveMigrateSource(ctx, instance("a", 1024)); err != nil {
		t.Fatalf("the reverted guest cannot be migrated again: %v", err)
	}
	if err := d.RevertCopy(ctx, "nope"); err == nil {
		t.Fatal("revert of a guest that is not here accepted")
	}
}

// Valid JSON that is not a state file is refused, naming the file and
// what to do; an empty list is an agent with no guests.
func TestStateFileThatIsNotAGuestStateIsRefused(t *testing.T) {
	cases := []struct{ name, data, want string }{
		{"empty object", `{}`, `no "guests" list`},
		{"null guests", `{"guests": null}`, `no "guests" list`},
		{"unknown field", `{"guests": [], "vms": []}`, `unknown field`},
		{"guest without fields", `{"guests": [{}]}`, "no uuid"},
		{"guest without state", `{"guests": [{"uuid": "a", "flavor": {"ram": 512}}]}`, `state ""`},
		{"guest without flavor", `{"guests": [{"uuid": "a", "state": "running"}]}`, "no flavor"},
		{"migrating without migration", `{"guests": [{"uuid": "a", "state": "migrating", "flavor": {"ram": 512}}]}`, "no migration_id"},
		{"duplicate guest", `{"guests": [{"uuid": "a", "state": "running", "flavor": {"ram": 512}}, {"uuid": "a", "state": "running", "flavor": {"ram": 512}}]}`, "twice"},
		{"two objects", `{"guests": []} {}`, "after the JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "guests.json")
			if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := fake.New(fake.Config{Clock: clock.NewVirtual(clock.Epoch), StateFile: path})
			if err == nil {
				t.Fatalf("%s accepted as a guest state", tc.data)
			}
			for _, want := range []string{path, tc.want, "move it away"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not say %q", err, want)
				}
			}
		})
	}
	path := filepath.Join(t.TempDir(), "guests.json")
	if err := os.WriteFile(path, []byte(`{"guests": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if gs, _ := reload(t, path).Guests(ctx); len(gs) != 0 {
		t.Fatalf("guests from an empty list: %v", gs)
	}
}
