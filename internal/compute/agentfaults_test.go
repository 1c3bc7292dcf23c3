package compute_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"keel/internal/boot"
	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/compute/fake"
	"keel/internal/migration"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store/memory"
	"keel/internal/testdisk"
)

// agentEnv is one agent (h1) as `keel agent` wires it, in one process: the
// fake driver with its state file, the tracker, an outbox in front of a
// stub conductor, on a memory store with a faulter (what the servers do
// for the agents over the bus).
type agentEnv struct {
	t      *testing.T
	st     *memory.Store
	clk    *clock.Virtual
	drv    *fake.Driver
	cond   *conductorStub
	outbox *compute.Outbox
	mgr    *compute.Manager
}

// faultingStore is the memory store with the servers' fault_lost_instance.
type faultingStore struct {
	*memory.Store
	compute.StoreFaulter
}

func newAgentEnv(t *testing.T, outboxDir string, mods ...func(*compute.HostConfig)) *agentEnv {
	t.Helper()
	e := &agentEnv{t: t, st: memory.New(), clk: clock.NewVirtual(clock.Epoch), cond: &conductorStub{}}
	for _, h := range []compute.HostConfig{hostConfig(), hostConfig(func(c *compute.HostConfig) { c.Host, c.ProviderUUID = "h2", "rp-h2" })} {
		if _, err := e.st.CreateProvider(ctx, placement.Provider{UUID: h.ProviderUUID, Name: h.Host, Inventories: h.Inventories()}); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	e.drv, err = fake.New(fake.Config{Clock: e.clk, StateFile: filepath.Join(t.TempDir(), "guests.json"), SpawnTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if outboxDir == "" {
		outboxDir = filepath.Join(t.TempDir(), "reports")
	}
	e.outbox, err = compute.NewOutbox(outboxDir, e.cond, e.clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := faultingStore{Store: e.st, StoreFaulter: compute.StoreFaulter{Store: e.st, Clock: e.clk}}
	tr := compute.NewTracker(hostConfig(mods...), st, e.drv, e.clk)
	e.mgr = compute.NewManager("h1", e.drv, tr, peers{}, e.outbox, e.clk, nil)
	return e
}

func (e *agentEnv) instance(uuid, host string, vmState records.VMState, task records.TaskState) records.Instance {
	e.t.Helper()
	in, err := e.st.CreateInstance(ctx, records.Instance{UUID: uuid, Name: uuid, Host: host, Flavor: small, VMState: vmState, TaskState: task})
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

func (e *agentEnv) migration(m records.Migration) records.Migration {
	e.t.Helper()
	m.UUID = "mig-" + m.InstanceUUID
	if m.Status == "" {
		m.Status = records.MigrationRunning
	}
	m, err := e.st.CreateMigration(ctx, m)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *agentEnv) guest(uuid string) compute.GuestState {
	gs, _ := e.drv.Guests(ctx)
	for _, g := range gs {
		if g.UUID == uuid {
			return g.State
		}
	}
	return ""
}

// A spawn whose report of success cannot be kept on disk fails: the guest
// is removed, the host stops counting it, and the failure is what the
// conductor hears (issue row 6's cause, on the agent's report side).
func TestBuildFailsWhenItsReportCannotBeKept(t *testing.T) {
	disk := testdisk.Mount(t, 64)
	e := newAgentEnv(t, filepath.Join(disk.Dir, "reports"))
	disk.Fill()
	inst := e.instance("i1", "h1", records.VMBuilding, records.TaskSpawning)
	if err := e.mgr.BuildAndRunInstance(ctx, inst); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(2 * time.Second)
	got := e.cond.got()
	if len(got) != 1 || !strings.HasPrefix(got[0], "build i1 failed") || !strings.Contains(got[0], "could not keep") {
		t.Fatalf("the conductor heard %v, want one build failure saying the report could not be kept", got)
	}
	if st := e.guest("i1"); st != "" {
		t.Fatalf("the guest of the failed build is %s, want it removed", st)
	}
	if rec := e.mgr.Tracker().Record(); rec.RunningVMs != 0 {
		t.Fatalf("the host record counts %d guests after the failed build", rec.RunningVMs)
	}
	disk.Free()
	ok := e.instance("i2", "h1", records.VMBuilding, records.TaskSpawning)
	if err := e.mgr.BuildAndRunInstance(ctx, ok); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(2 * time.Second)
	if got := e.cond.got(); len(got) != 2 || got[1] != "build i2 ok" {
		t.Fatalf("once the disk has room the conductor heard %v", got)
	}
}

// A copy whose report of success cannot be kept is taken as failed: the
// source guest runs on, and can be moved again.
func TestCopyFailsWhenItsReportCannotBeKept(t *testing.T) {
	disk := testdisk.Mount(t, 64)
	e := newAgentEnv(t, filepath.Join(disk.Dir, "reports"))
	e.drv.AddGuest(compute.Guest{UUID: "i1", Flavor: small, State: compute.GuestRunning})
	inst := e.instance("i1", "h1", records.VMActive, records.TaskMigrating)
	m := e.migration(records.Migration{InstanceUUID: "i1", SourceHost: "h1", DestHost: "h2", Phase: migration.PhaseCopy})
	if err := e.mgr.LiveMigration(ctx, m.ID, m.Version, inst, "h2", nil); err != nil {
		t.Fatal(err)
	}
	disk.Fill()
	e.clk.Advance(e.drv.CopyTime(small.RAMMB) + time.Second)
	got := e.cond.got()
	if len(got) != 1 || !strings.HasPrefix(got[0], "copy failed") || !strings.Contains(got[0], "could not keep") {
		t.Fatalf("the conductor heard %v, want one copy failure saying the report could not be kept", got)
	}
	if st := e.guest("i1"); st != compute.GuestRunning {
		t.Fatalf("the source guest is %q, want running again", st)
	}
	if err := e.drv.CheckCanLiveMigrateSource(ctx, inst); err != nil {
		t.Fatalf("the guest cannot be moved again: %v", err)
	}
}

// The source starts a copy only for a call made from the newest version
// of the migration record it knows: a late call, made before the
// conductor saved a later step (whatever its phase, even one keeping the
// phase and status, as another replica's take-over does), refuses and
// leaves the guest alone (issue row 7), as does a call for a record that
// does not move this guest from here to there.
func TestLateCopyIsRefused(t *testing.T) {
	copying := records.Migration{SourceHost: "h1", DestHost: "h2", Phase: migration.PhaseCopy}
	cases := []struct {
		name string
		m    records.Migration
		// moveOn, when set, is the step the conductor saved after the call
		// was made; the call then carries the version before it.
		moveOn func(m *records.Migration)
		want   string
	}{
		{"rolled back meanwhile", copying, func(m *records.Migration) { m.Phase = migration.PhaseRollbackDest }, "moved on to version 2"},
		{"failed meanwhile", copying, func(m *records.Migration) { m.Phase, m.Status = migration.PhaseDone, records.MigrationFailed }, "moved on to version 2"},
		{"aborted", copying, func(m *records.Migration) { m.AbortRequested = true }, "moved on to version 2"},
		{"taken over by another replica", copying, func(m *records.Migration) { m.Owner = "r2" }, "moved on to version 2"},
		{"another source", records.Migration{SourceHost: "h3", DestHost: "h2", Phase: migration.PhaseCopy}, nil, "from h3"},
		{"another destination", records.Migration{SourceHost: "h1", DestHost: "h3", Phase: migration.PhaseCopy}, nil, "to h3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newAgentEnv(t, "")
			e.drv.AddGuest(compute.Guest{UUID: "i1", Flavor: small, State: compute.GuestRunning})
			inst := e.instance("i1", "h1", records.VMActive, records.TaskMigrating)
			c.m.InstanceUUID = "i1"
			m := e.migration(c.m)
			called := m.Version
			if c.moveOn != nil {
				c.moveOn(&m)
				if _, err := e.st.UpdateMigration(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			err := e.mgr.LiveMigration(ctx, m.ID, called, inst, "h2", nil)
			if !errors.Is(err, compute.ErrFenced) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("LiveMigration: %v, want a fenced refusal saying %q", err, c.want)
			}
			if e.drv.Copying("i1") || e.guest("i1") != compute.GuestRunning {
				t.Fatal("a refused copy touched the guest")
			}
			e.clk.Advance(time.Minute)
			if got := e.cond.got(); len(got) != 0 {
				t.Fatalf("a refused copy reported %v", got)
			}
		})
	}
	t.Run("unknown migration", func(t *testing.T) {
		e := newAgentEnv(t, "")
		e.drv.AddGuest(compute.Guest{UUID: "i1", Flavor: small, State: compute.GuestRunning})
		if err := e.mgr.LiveMigration(ctx, 42, 1, records.Instance{UUID: "i1", Flavor: small}, "h2", nil); !errors.Is(err, compute.ErrFenced) {
			t.Fatalf("LiveMigration of a migration that does not exist: %v", err)
		}
	})
}

// A call older than one the agent already took is refused by the version
// it carries, even where the stored record would let it through (a store
// read that lags, or no store to read): the agent remembers the newest
// version each call carried. Live copies and disk copies alike.
func TestStaleCallAfterANewerOneIsRefused(t *testing.T) {
	e := newAgentEnv(t, "")
	e.drv.AddGuest(compute.Guest{UUID: "i1", Flavor: small, State: compute.GuestRunning})
	e.drv.AddGuest(compute.Guest{UUID: "c1", Flavor: small, State: compute.GuestRunning})
	inst := e.instance("i1", "h1", records.VMActive, records.TaskMigrating)
	cold := e.instance("c1", "h1", records.VMActive, records.TaskResizePrep)
	m := e.migration(records.Migration{InstanceUUID: "i1", SourceHost: "h1", DestHost: "h2", Phase: migration.PhaseCopy})
	mc := e.migration(records.Migration{InstanceUUID: "c1", Type: records.MigrationTypeCold, SourceHost: "h1", DestHost: "h2",
		Phase: migration.PhaseResizeSource, Status: records.MigrationMigrating, NewFlavor: &small})
	// The newer calls come first: made from a version the store has not
	// shown the agent yet (the conductor saved it; the agent's read lags).
	if err := e.mgr.LiveMigration(ctx, m.ID, m.Version+1, inst, "h2", nil); err != nil {
		t.Fatalf("the newer live_migration: %v", err)
	}
	if err := e.mgr.ResizeInstance(ctx, mc.ID, mc.Version+1, cold, "h2", nil); err != nil {
		t.Fatalf("the newer resize_instance: %v", err)
	}
	err := e.mgr.LiveMigration(ctx, m.ID, m.Version, inst, "h2", nil)
	if !errors.Is(err, compute.ErrFenced) || !strings.Contains(err.Error(), "version 2 was seen here") {
		t.Fatalf("a stale live_migration after a newer one: %v, want refused by its version", err)
	}
	err = e.mgr.ResizeInstance(ctx, mc.ID, mc.Version, cold, "h2", nil)
	if !errors.Is(err, compute.ErrFenced) || !strings.Contains(err.Error(), "version 2 was seen here") {
		t.Fatalf("a stale resize_instance after a newer one: %v, want refused by its version", err)
	}
}

// The agent decides from the record's version and the machines' own
// predicates (migration.SourceCopying, boot.Spawning, …), never from the
// machines' phase names: a phase the conductor renames or adds needs no
// change here. No non-test file of the agent's packages names a phase.
func TestAgentNamesNoPhase(t *testing.T) {
	for _, dir := range []string{".", "../agent"} {
		pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, pkg := range pkgs {
			for name, f := range pkg.Files {
				ast.Inspect(f, func(n ast.Node) bool {
					sel, ok := n.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					if x, ok := sel.X.(*ast.Ident); ok && (x.Name == "migration" || x.Name == "boot") && strings.HasPrefix(sel.Sel.Name, "Phase") {
						t.Errorf("%s names %s.%s: decide from the record's version or the machine's predicates", name, x.Name, sel.Sel.Name)
					}
					return true
				})
			}
		}
	}
}

// A copy that ran while its migration gave up on it (its start outran the
// fence) ends reverted and reported failed, never as a success.
func TestZombieCopyIsReverted(t *testing.T) {
	e := newAgentEnv(t, "")
	e.drv.AddGuest(compute.Guest{UUID: "i1", Flavor: small, State: compute.GuestRunning})
	inst := e.instance("i1", "h1", records.VMActive, records.TaskMigrating)
	m := e.migration(records.Migration{InstanceUUID: "i1", SourceHost: "h1", DestHost: "h2", Phase: migration.PhaseCopy})
	if err := e.mgr.LiveMigration(ctx, m.ID, m.Version, inst, "h2", nil); err != nil {
		t.Fatal(err)
	}
	// The conductor's call timed out: it rolled the migration back.
	m.Phase, m.Status = migration.PhaseDone, records.MigrationFailed
	if _, err := e.st.UpdateMigration(ctx, m); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(e.drv.CopyTime(small.RAMMB) + time.Second)
	if got := e.cond.got(); len(got) != 1 || !strings.Contains(got[0], "copy failed") {
		t.Fatalf("the zombie copy reported %v, want a failure", got)
	}
	if st := e.guest("i1"); st != compute.GuestRunning {
		t.Fatalf("the zombie copy left the source guest %q, want running", st)
	}
}

// A restarted agent reports what the store shows in flight on its host,
// whatever its guests' saved state (issue rows 3 and 4).
func TestReconcileReportsWhatTheStoreShowsInFlight(t *testing.T) {
	e := newAgentEnv(t, "")
	for _, u := range []string{"built", "copying", "aborted"} {
		e.drv.AddGuest(compute.Guest{UUID: u, Flavor: small, State: compute.GuestRunning})
	}
	e.instance("built", "h1", records.VMBuilding, records.TaskSpawning) // its report was lost with the agent
	e.instance("lost", "h1", records.VMBuilding, records.TaskSpawning)  // no guest at all
	casting := e.instance("casting", "h1", records.VMBuilding, records.TaskSpawning)
	casting.BuildPhase = boot.PhaseCast // no guest yet: the cast may still come
	if _, err := e.st.UpdateInstance(ctx, casting); err != nil {
		t.Fatal(err)
	}
	e.instance("elsewhere", "h2", records.VMBuilding, records.TaskSpawning)
	e.instance("kept", "h1", records.VMBuilding, records.TaskSpawning) // its report is in the outbox
	e.cond.setDown(true)
	if err := e.outbox.BuildDone(ctx, "kept", "h1", nil); err != nil {
		t.Fatal(err)
	}
	copying := e.instance("copying", "h1", records.VMActive, records.TaskMigrating)
	e.instance("aborted", "h1", records.VMActive, records.TaskMigrating)
	e.instance("inbound", "h2", records.VMActive, records.TaskMigrating)
	mc := e.migration(records.Migration{InstanceUUID: "copying", SourceHost: "h1", DestHost: "h2", Phase: migration.PhaseCopy})
	e.migration(records.Migration{InstanceUUID: "aborted", SourceHost: "h1", DestHost: "h2", Phase: migration.PhaseCopy, AbortRequested: true})
	e.migration(records.Migration{InstanceUUID: "inbound", SourceHost: "h2", DestHost: "h1", Phase: migration.PhaseCopy})
	if err := e.mgr.LiveMigration(ctx, mc.ID, mc.Version, copying, "h2", nil); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Millisecond)
	e.cond.setDown(false)

	n, err := e.mgr.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("Reconcile made %d reports, want 3 (built, lost, the aborted copy)", n)
	}
	e.clk.Advance(6 * time.Second) // the outbox delivers, the kept report included
	got := strings.Join(e.cond.got(), " | ")
	if strings.Contains(got, "[restarted]") {
		t.Errorf("the conductor heard %q: the aborted copy was reported as ended by a restart, not as the abort asked", got)
	}
	for _, want := range []string{"build built ok", "build lost failed: no guest on h1", "copy failed: memory copy interrupted", "build kept ok"} {
		if !strings.Contains(got, want) {
			t.Errorf("the conductor heard %q, missing %q", got, want)
		}
	}
	if strings.Contains(got, "elsewhere") || strings.Contains(got, "casting") || strings.Count(got, "copy failed") != 1 || strings.Count(got, "build kept") != 1 {
		t.Errorf("the conductor heard %q: a report for another host's instance, the running copy, or the kept report twice", got)
	}
}

// The audit puts an ACTIVE instance whose guest is gone from its host in
// ERROR with a fault and releases its allocation (issue row 6 after the
// restart, row 8's removed guest) — with lost_guest_timeout 0, at the
// first audit that misses it.
func TestAuditPutsALostGuestInError(t *testing.T) {
	e := newAgentEnv(t, "")
	e.instance("gone", "h1", records.VMActive, records.TaskNone)
	e.instance("here", "h1", records.VMActive, records.TaskNone)
	e.drv.AddGuest(compute.Guest{UUID: "here", Flavor: small, State: compute.GuestRunning})
	for _, u := range []string{"gone", "here"} {
		e.allocate(u, small.Resources())
	}
	d, err := e.mgr.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Lost) != 1 || d.Lost[0] != "gone" || len(d.Faulted) != 1 || len(d.OrphanAllocations) != 0 {
		t.Fatalf("drift %s, want gone lost, put in ERROR, and no orphan", d)
	}
	inst, _ := e.st.GetInstance(ctx, "gone")
	if inst.VMState != records.VMError || !strings.Contains(inst.Fault, "gone from its host h1") {
		t.Fatalf("the lost instance is %s with fault %q, want ERROR saying its guest is gone", inst.VMState, inst.Fault)
	}
	if other, _ := e.st.GetInstance(ctx, "here"); other.VMState != records.VMActive {
		t.Fatalf("the instance with its guest is %s", other.VMState)
	}
	e.wantHeld("gone", nil)
	if d, err = e.mgr.Audit(ctx); err != nil || d.Count() != 0 {
		t.Fatalf("second audit %s, %v: want nothing left to heal", d, err)
	}
}

// Issue 24 item 4: a guest missing once is not lost. With
// lost_guest_timeout 3 minutes, audits that miss a guest report it
// missing and keep its claim; one that shows again changes nothing; one
// missing for the whole timeout puts its instance in ERROR and releases
// the claim; when that guest runs again the next audit makes the
// instance ACTIVE and claims it back — or, the host having no room left,
// stops the guest and leaves the instance in ERROR saying so. Before, the
// first audit that missed the guest faulted the instance, the next
// released its claim, and the guest that came back ran with none.
func TestAuditMissingGuestIsNotLostAtOnce(t *testing.T) {
	e := newAgentEnv(t, "", func(c *compute.HostConfig) { c.LostGuestTimeout = 3 * time.Minute })
	guest := compute.Guest{UUID: "a", Flavor: small, State: compute.GuestRunning}
	e.instance("a", "h1", records.VMActive, records.TaskNone)
	e.drv.AddGuest(guest)
	e.allocate("a", small.Resources())
	audit := func(step string) compute.Drift {
		t.Helper()
		d, err := e.mgr.Audit(ctx)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return d
	}
	state := func(step string, want records.VMState) records.Instance {
		t.Helper()
		inst, err := e.st.GetInstance(ctx, "a")
		if err != nil || inst.VMState != want {
			t.Fatalf("%s: instance a is %s (%q), %v; want %s", step, inst.VMState, inst.Fault, err, want)
		}
		return inst
	}

	// Missing once (a stale state file, a listing that glitched), then back.
	if err := e.drv.Destroy(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if d := audit("first miss"); !slices.Equal(d.Missing, []string{"a"}) || len(d.Lost)+len(d.Faulted)+len(d.OrphanAllocations) != 0 {
		t.Fatalf("first audit missing the guest: %s; want it missing, nothing lost or released", d)
	}
	state("first miss", records.VMActive)
	e.wantHeld("a", small.Resources())
	e.drv.AddGuest(guest)
	e.clk.Advance(time.Minute)
	if d := audit("back"); len(d.Missing)+len(d.Lost)+len(d.Found) != 0 {
		t.Fatalf("audit with the guest back: %s", d)
	}
	state("back", records.VMActive)

	// Missing for the whole timeout, counted from the first audit that
	// missed it this time.
	if err := e.drv.Destroy(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	since := e.clk.Now()
	audit("missing again")
	e.clk.Advance(2*time.Minute + 59*time.Second)
	if d := audit("almost lost"); !slices.Equal(d.Missing, []string{"a"}) || len(d.Lost) != 0 {
		t.Fatalf("audit 2m59s after the first miss: %s; want still missing", d)
	}
	e.wantHeld("a", small.Resources())
	e.clk.Advance(time.Second)
	if d := audit("lost"); !slices.Equal(d.Lost, []string{"a"}) || !slices.Equal(d.Faulted, []string{"a"}) || len(d.Missing) != 0 {
		t.Fatalf("audit 3m after the first miss: %s; want a lost and put in ERROR", d)
	}
	inst := state("lost", records.VMError)
	if !strings.Contains(inst.Fault, "since "+since.UTC().Format(time.RFC3339)) || !strings.Contains(inst.Fault, "claims it back") {
		t.Fatalf("the lost fault %q does not say since when the guest is missing and what happens if it runs again", inst.Fault)
	}
	e.wantHeld("a", nil)

	// The guest runs again: the instance is ACTIVE again, claimed back.
	e.drv.AddGuest(guest)
	if d := audit("found"); !slices.Equal(d.Found, []string{"a"}) || len(d.Fenced) != 0 {
		t.Fatalf("audit with the lost guest back: %s; want it found", d)
	}
	if inst := state("found", records.VMActive); inst.Fault != "" {
		t.Fatalf("the found instance keeps its fault %q", inst.Fault)
	}
	e.wantHeld("a", small.Resources())
	if d := audit("settled"); d.Count() != 0 {
		t.Fatalf("audit after the reclaim: %s", d)
	}

	// Lost again, and while it was gone its room was given away: the
	// guest that runs again is stopped, the instance stays in ERROR.
	if err := e.drv.Destroy(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	audit("missing, third time")
	e.clk.Advance(3 * time.Minute)
	audit("lost again")
	state("lost again", records.VMError)
	rest := placement.Resources{placement.MemoryMB: 32768 - 512} // every MiB the host offers
	e.instance("filler", "h1", records.VMActive, records.TaskNone)
	e.drv.AddGuest(compute.Guest{UUID: "filler", Flavor: small, State: compute.GuestRunning})
	e.allocate("filler", rest)
	e.drv.AddGuest(guest)
	if d := audit("found, no room"); !slices.Equal(d.Found, []string{"a"}) || !slices.Equal(d.Fenced, []string{"a"}) {
		t.Fatalf("audit with the lost guest back and no room: %s; want it found and fenced", d)
	}
	if inst := state("fenced", records.VMError); !strings.Contains(inst.Fault, "no room left") || !strings.Contains(inst.Fault, "stopped") {
		t.Fatalf("the fenced instance's fault %q does not say why its guest is stopped", inst.Fault)
	}
	e.wantHeld("a", nil)
	gs, _ := e.drv.Guests(ctx)
	if len(gs) != 2 || gs[0].UUID != "a" || gs[0].State != compute.GuestStopped {
		t.Fatalf("guests after the fence: %+v; want a stopped", gs)
	}
	if d := audit("fenced, settled"); d.Count() != 0 {
		t.Fatalf("audit after the fence: %s; want nothing to do", d)
	}
}

// allocate writes uuid's instance allocation r on h1's provider.
func (e *agentEnv) allocate(uuid string, r placement.Resources) {
	e.t.Helper()
	if _, err := e.st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: uuid, Type: placement.ConsumerInstance,
		Allocations: map[string]placement.Resources{"rp-h1": r}}); err != nil {
		e.t.Fatal(err)
	}
}

// wantHeld fails unless uuid holds exactly want on h1's provider (nil:
// nothing anywhere).
func (e *agentEnv) wantHeld(uuid string, want placement.Resources) {
	e.t.Helper()
	c, err := e.st.GetConsumer(ctx, uuid)
	if want == nil {
		if err == nil && len(c.Allocations) != 0 {
			e.t.Fatalf("%s still holds %v", uuid, c.Allocations)
		}
		return
	}
	if err != nil || len(c.Allocations) != 1 || !reflect.DeepEqual(c.Allocations["rp-h1"], want) {
		e.t.Fatalf("%s holds %v (%v), want %v on rp-h1", uuid, c.Allocations, err, want)
	}
}

// A busy mark does not protect an incoming guest nobody brings any more
// (a pre_live_migration that ran after its migration gave up): the audit
// removes it and clears the mark, and the instance can come here again.
func TestAuditRemovesALateIncomingGuest(t *testing.T) {
	e := newAgentEnv(t, "")
	inst := e.instance("i1", "h2", records.VMActive, records.TaskNone)
	if _, err := e.mgr.PreLiveMigration(ctx, inst); err != nil {
		t.Fatal(err)
	}
	d, err := e.mgr.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Stray) != 1 || e.guest("i1") != "" {
		t.Fatalf("drift %s, guest %q: want the incoming guest removed", d, e.guest("i1"))
	}
	if err := e.drv.CheckCanLiveMigrateDestination(ctx, inst); err != nil {
		t.Fatalf("the instance cannot come here again: %v", err)
	}
	if rec := e.mgr.Tracker().Record(); rec.NumIOOps != 0 {
		t.Fatalf("the busy mark is still counted: %d I/O ops", rec.NumIOOps)
	}
}

// An abort of a migration whose copy this source does not run (its end
// was lost, or it never began) still ends it: the copy is reported failed
// (issue row 4: "abort answers 202 and does nothing"). With a copy
// running, the abort stops it, and it is reported once.
func TestAbortWithoutACopyEndsTheMigration(t *testing.T) {
	e := newAgentEnv(t, "")
	e.drv.AddGuest(compute.Guest{UUID: "idle", Flavor: small, State: compute.GuestRunning})
	e.drv.AddGuest(compute.Guest{UUID: "busy", Flavor: small, State: compute.GuestRunning})
	e.instance("idle", "h1", records.VMActive, records.TaskMigrating)
	busy := e.instance("busy", "h1", records.VMActive, records.TaskMigrating)
	e.migration(records.Migration{InstanceUUID: "idle", SourceHost: "h1", DestHost: "h2", Phase: migration.PhaseCopy, AbortRequested: true})
	mb := e.migration(records.Migration{InstanceUUID: "busy", SourceHost: "h1", DestHost: "h2", Phase: migration.PhaseCopy})
	if err := e.mgr.LiveMigration(ctx, mb.ID, mb.Version, busy, "h2", nil); err != nil {
		t.Fatal(err)
	}
	if err := e.mgr.AbortLiveMigration(ctx, "idle"); err != nil {
		t.Fatalf("abort of a copy that is not running: %v", err)
	}
	if err := e.mgr.AbortLiveMigration(ctx, "busy"); err != nil {
		t.Fatalf("abort of a running copy: %v", err)
	}
	e.clk.Advance(time.Second)
	got := strings.Join(e.cond.got(), " | ")
	if strings.Count(got, "copy failed") != 2 || !strings.Contains(got, "was running no copy") || !strings.Contains(got, "cancelled") {
		t.Fatalf("the conductor heard %q, want the idle copy reported aborted and the running one cancelled, once each", got)
	}
	if e.guest("busy") != compute.GuestRunning || e.guest("idle") != compute.GuestRunning {
		t.Fatal("an aborted copy left its guest not running")
	}
}

// A conductor that resumes a migration in its copy after a restart asks
// the source (CheckCopy): a copy the source never started (the server was
// killed before its cast went out) is reported ended, interrupted, once,
// and its cast, arriving late, is refused; a copy that runs is left to
// report on its own; a migration whose source is another host is not
// answered for. Live and cold moves alike.
func TestCheckCopyEndsACopyNeverStarted(t *testing.T) {
	e := newAgentEnv(t, "")
	for _, uuid := range []string{"lost", "busy", "cold"} {
		e.drv.AddGuest(compute.Guest{UUID: uuid, Flavor: small, State: compute.GuestRunning})
	}
	lost := e.instance("lost", "h1", records.VMActive, records.TaskMigrating)
	busy := e.instance("busy", "h1", records.VMActive, records.TaskMigrating)
	cold := e.instance("cold", "h1", records.VMActive, records.TaskResizePrep)
	e.instance("other", "h2", records.VMActive, records.TaskMigrating)
	ml := e.migration(records.Migration{InstanceUUID: "lost", SourceHost: "h1", DestHost: "h2", Phase: migration.PhaseCopy})
	mb := e.migration(records.Migration{InstanceUUID: "busy", SourceHost: "h1", DestHost: "h2", Phase: migration.PhaseCopy})
	mc := e.migration(records.Migration{InstanceUUID: "cold", Type: records.MigrationTypeCold, SourceHost: "h1", DestHost: "h2",
		Phase: migration.PhaseResizeSource, Status: records.MigrationMigrating})
	mo := e.migration(records.Migration{InstanceUUID: "other", SourceHost: "h2", DestHost: "h1", Phase: migration.PhaseCopy})
	if err := e.mgr.LiveMigration(ctx, mb.ID, mb.Version, busy, "h2", nil); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a repeat changes nothing
		for _, id := range []int64{ml.ID, mb.ID, mc.ID} {
			if err := e.mgr.CheckCopy(ctx, id); err != nil {
				t.Fatalf("check of migration %d: %v", id, err)
			}
		}
	}
	if err := e.mgr.CheckCopy(ctx, mo.ID); err == nil {
		t.Fatal("h1 answered for a copy from h2")
	}
	if err := e.mgr.LiveMigration(ctx, ml.ID, ml.Version, lost, "h2", nil); !errors.Is(err, compute.ErrFenced) {
		t.Fatalf("a late live_migration cast of a copy reported ended: %v, want refused", err)
	}
	if err := e.mgr.ResizeInstance(ctx, mc.ID, mc.Version, cold, "h2", nil); !errors.Is(err, compute.ErrFenced) {
		t.Fatalf("a late resize_instance cast of a copy reported ended: %v, want refused", err)
	}
	e.clk.Advance(10 * time.Second) // the running copy ends
	got := strings.Join(e.cond.got(), " | ")
	if strings.Count(got, "runs no copy for this migration") != 2 {
		t.Fatalf("the conductor heard %q, want the two copies never started reported ended, once each", got)
	}
	if !strings.Contains(got, "copy ok") || len(e.cond.got()) != 3 {
		t.Fatalf("the conductor heard %q, want the running copy's own end besides", got)
	}
	if e.guest("lost") != compute.GuestRunning || e.guest("cold") != compute.GuestRunning {
		t.Fatal("a refused late cast touched its guest")
	}
}

// A restarted source agent reports the cold moves' and resizes' disk
// copies the store shows in flight from it but it no longer runs, as it
// does live copies: the conductor rolls them back at once instead of
// waiting for migration_stall_timeout. A disk copy running here, one
// into this host, and a live copy's own report are left alone.
func TestReconcileReportsInterruptedDiskCopies(t *testing.T) {
	e := newAgentEnv(t, "")
	for _, u := range []string{"cold", "resize", "running", "inbound"} {
		e.drv.AddGuest(compute.Guest{UUID: u, Flavor: small, State: compute.GuestRunning})
	}
	e.instance("cold", "h1", records.VMActive, records.TaskResizePrep)
	e.instance("resize", "h1", records.VMActive, records.TaskResizePrep)
	running := e.instance("running", "h1", records.VMActive, records.TaskResizePrep)
	e.instance("inbound", "h2", records.VMActive, records.TaskResizePrep)
	coldMove := func(uuid, src, dst string, typ string) records.Migration {
		return e.migration(records.Migration{InstanceUUID: uuid, Type: typ, SourceHost: src, DestHost: dst,
			Phase: migration.PhaseResizeSource, Status: records.MigrationMigrating, NewFlavor: &small})
	}
	coldMove("cold", "h1", "h2", records.MigrationTypeCold)
	coldMove("resize", "h1", "h1", records.MigrationTypeResize)
	mr := coldMove("running", "h1", "h2", records.MigrationTypeCold)
	coldMove("inbound", "h2", "h1", records.MigrationTypeCold)
	if err := e.mgr.ResizeInstance(ctx, mr.ID, mr.Version, running, "h2", nil); err != nil {
		t.Fatal(err)
	}
	n, err := e.mgr.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(6 * time.Second) // the reports are delivered
	got := strings.Join(e.cond.got(), " | ")
	if n != 2 || strings.Count(got, "copy failed: disk copy interrupted: the source h1 restarted") != 2 {
		t.Fatalf("Reconcile made %d reports (%q), want the cold move's and the resize's disk copies reported interrupted", n, got)
	}
	if strings.Count(got, "copy failed") != 2 {
		t.Fatalf("the conductor heard %q: the running disk copy or the inbound one reported failed", got)
	}
	if strings.Count(got, "[restarted]") != 2 {
		t.Fatalf("the conductor heard %q, want both reported as ended by keel's restart (the move does not count them)", got)
	}
}
