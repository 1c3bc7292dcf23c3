package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"keel/internal/client/clienttest"
	"keel/internal/compute"
	"keel/internal/migration"
	"keel/internal/placement"
	"keel/internal/records"
)

// TestAuditSeesWhatABugLeavesAndResetsPutItRight runs a real keel (server
// and two fake-driver agents in-process) into each state the extended
// audit must see — a lost guest, a stray guest, a boot stuck past
// instance_build_timeout, a migration stuck in its copy with its instance
// migrating, capacity held on both hosts — checks `keel audit` reports it, then puts
// it right the operator's way (os-resetState, keel migration reset) and
// checks the audit is clean again.
func TestAuditSeesWhatABugLeavesAndResetsPutItRight(t *testing.T) {
	t.Parallel()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2})
	useCloud(t, cloud)
	ctx := context.Background()
	c := cloud.Connect(t)

	auditFails := func(wants ...string) {
		t.Helper()
		out, err := run(t, "audit")
		if _, ok := err.(violationsError); !ok {
			t.Fatalf("keel audit: %v, want violations\n%s", err, out)
		}
		wantContains(t, out, wants...)
	}
	clean := func() {
		t.Helper()
		out := mustRun(t, "audit")
		wantContains(t, out, "0 violations")
		if strings.Contains(out, "not checked: guests") {
			t.Errorf("the audit did not check every host's guests:\n%s", out)
		}
	}

	st := cloud.Server.Store()
	long := time.Hour // past the audit's deadlines (about 17 and 6.5 minutes here)

	mustRun(t, "server", "create", "web1", "--flavor", "m1.tiny", "--wait")
	web1 := showServer(t, "web1")
	clean()

	// A lost guest: the instance is ACTIVE, its host has no guest.
	if err := cloud.Driver(t, web1.Host).Destroy(ctx, web1.ID); err != nil {
		t.Fatal(err)
	}
	auditFails("instance "+web1.ID+" is active on "+web1.Host+" but "+web1.Host+" has no guest for it", "1 violation")
	out, _ := run(t, "audit", "--format", "json")
	var rep struct {
		Violations []string
		Findings   []struct{ Kind, Subject, Text string }
		Unchecked  []string
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Findings) != 1 || rep.Findings[0].Kind != "lost-guest" ||
		rep.Findings[0].Subject != web1.ID || len(rep.Violations) != 1 || rep.Unchecked == nil {
		t.Errorf("audit --format json: %v\n%s", err, out)
	}
	if err := c.ResetState(ctx, web1.ID, "error"); err != nil {
		t.Fatal(err)
	}
	clean()
	mustRun(t, "server", "delete", web1.ID)

	// A stray guest: no instance has its id.
	stray := uuid.NewString()
	drv := cloud.Driver(t, cloud.Hosts[0])
	drv.AddGuest(compute.Guest{UUID: stray, Name: "stray", State: compute.GuestRunning})
	auditFails("guest " + stray + " (running) on " + cloud.Hosts[0] + ": no instance has that id")
	if err := drv.Destroy(ctx, stray); err != nil {
		t.Fatal(err)
	}
	clean()

	// A boot stuck in spawning for an hour, holding its claim (owned by
	// no replica, so no conductor ends it).
	now := time.Now().UTC()
	f, err := st.GetFlavor(ctx, "1")
	if err != nil {
		t.Fatal(err)
	}
	stuck, err := st.CreateInstance(ctx, records.Instance{UUID: uuid.NewString(), Name: "stuck", Host: cloud.Hosts[1], Flavor: f,
		VMState: records.VMBuilding, TaskState: records.TaskSpawning, CreatedAt: now.Add(-long), UpdatedAt: now.Add(-long)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: stuck.UUID, Type: placement.ConsumerInstance,
		Allocations: map[string]placement.Resources{providerOf(t, cloud, cloud.Hosts[1]): f.Resources()}}); err != nil {
		t.Fatal(err)
	}
	auditFails("instance " + stuck.UUID + " is still building (task \"spawning\") 1h")
	if err := c.ResetState(ctx, stuck.UUID, "error"); err != nil {
		t.Fatal(err)
	}
	clean()
	mustRun(t, "server", "delete", stuck.UUID)

	// A migration stuck in its copy for an hour, as a source that never
	// reports leaves it: the migration consumer holds the source, the
	// instance the destination, the instance is migrating. Its owner is a
	// live replica that is not this one, so this conductor's sweeps leave
	// it alone.
	mustRun(t, "server", "create", "db1", "--flavor", "m1.tiny", "--wait")
	db1 := showServer(t, "db1")
	src, dst := db1.Host, cloud.Hosts[0]
	if dst == src {
		dst = cloud.Hosts[1]
	}
	if err := st.PutService(ctx, records.Service{Host: records.ServerServiceHost("other"), Binary: records.ServerBinary, UpdatedAt: time.Now().UTC(), LastSeenUp: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	m, err := st.CreateMigration(ctx, records.Migration{UUID: uuid.NewString(), InstanceUUID: db1.ID, Type: "live-migration", SourceHost: src, DestHost: dst,
		Status: records.MigrationRunning, Phase: migration.PhaseCopy, Owner: "other", CreatedAt: now.Add(-long), UpdatedAt: now.Add(-long)})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := st.GetInstance(ctx, db1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.WriteAllocations(ctx,
		placement.AllocationWrite{ConsumerUUID: m.UUID, Type: placement.ConsumerMigration, Allocations: map[string]placement.Resources{providerOf(t, cloud, src): f.Resources()}},
		placement.AllocationWrite{ConsumerUUID: db1.ID, AnyConsumerGeneration: true, Allocations: map[string]placement.Resources{providerOf(t, cloud, dst): f.Resources()}},
	); err != nil {
		t.Fatal(err)
	}
	inst.TaskState, inst.UpdatedAt = records.TaskMigrating, now.Add(-long)
	if _, err := st.UpdateInstance(ctx, inst); err != nil {
		t.Fatal(err)
	}
	auditFails(fmt.Sprintf("migration %d of instance %s (%s → %s) has been running (phase \"copy\") for 1h", m.ID, db1.ID, src, dst),
		"instance "+db1.ID+" has been in task migrating for 1h", "2 violations")
	// os-resetState leaves a migration in progress to the migration reset.
	if err := c.ResetState(ctx, db1.ID, "active"); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("keel migration reset %d", m.ID)) {
		t.Fatalf("os-resetState during a stuck migration: %v, want a 409 naming keel migration reset", err)
	}
	out = mustRun(t, "migration", "reset", fmt.Sprint(m.ID))
	wantContains(t, out, fmt.Sprintf("migration %d of %s (%s → %s): error", m.ID, db1.ID, src, dst))
	clean()
	if got := showServer(t, db1.ID); got.Status != "ACTIVE" || got.Host != src {
		t.Errorf("after the reset db1 is %s on %s, want ACTIVE on %s", got.Status, got.Host, src)
	}
	acts, err := st.ListInstanceActions(ctx, db1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if last := acts[len(acts)-1]; last.Action != "reset-migration" || last.UserID == "" || last.RequestID == "" ||
		!strings.Contains(last.Message, fmt.Sprintf("migration %d (%s → %s) reset by an operator: error", m.ID, src, dst)) {
		t.Errorf("the reset's instance action: %+v", last)
	}
	if _, err := run(t, "migration", "reset", fmt.Sprint(m.ID)); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("resetting an ended migration: %v, want a 409", err)
	}
}

// providerOf is host's resource provider UUID.
func providerOf(t *testing.T, cloud *clienttest.Cloud, host string) string {
	t.Helper()
	sums, err := cloud.Server.Store().ProviderSummaries(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sums {
		if s.Name == host {
			return s.UUID
		}
	}
	t.Fatalf("no provider for %s", host)
	return ""
}
