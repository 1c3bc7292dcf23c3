package main

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"

	"keel/internal/client/clienttest"
	"keel/internal/compute"
)

// TestAuditSeesWhatABugLeavesAndResetsPutItRight runs a real keel (server
// and two fake-driver agents in-process) into each state the extended
// audit must see — a lost guest, a stray guest — checks `keel audit` reports it, then puts
// it right the operator's way (os-resetState, keel migration reset) and
// checks the audit is clean again.
func TestAuditSeesWhatABugLeavesAndResetsPutItRight(t *testing.T) {
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

	mustRun(t, "server", "create", "web1", "--flavor", "m1.tiny", "--wait")
	web1 := showServer(t, "web1")
	clean()

	// A lost guest: the instance is ACTIVE, its host has no guest.
	if err := cloud.Driver(t, web1.Host).Destroy(ctx, web1.ID); err != nil {
		t.Fatal(err)
	}
	auditFails("instance "+web1.ID+" is active on "+web1.Host+" but "+web1.Host+" has no guest for it", "1 violation")
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
