package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/records"
)

// TestHostEvacuatePlan: keel host evacuate HOST --plan refuses while the
// host is up (Nova's "still in use"); once it is forced down, one
// evacuate-all plan rebuilds each of its servers on another host, printing
// a line per move, and keel plan show has it done.
func TestHostEvacuatePlan(t *testing.T) {
	t.Parallel()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 3})
	useCloud(t, cloud)
	ctx := context.Background()
	c := cloud.Connect(t)
	fl, err := c.FindFlavor(ctx, "m1.small")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		s, err := servers.Create(ctx, c.ComputeClient(), servers.CreateOpts{Name: fmt.Sprintf("e%d", i), FlavorRef: fl.ID,
			AvailabilityZone: "nova:h01"}, nil).Extract()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	for _, id := range ids {
		if _, err := c.WaitServer(ctx, id, 50*time.Millisecond, func(s client.Server) bool { return s.Status == "ACTIVE" || s.Status == "ERROR" }); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := run(t, "host", "evacuate", "h01", "--plan"); err == nil || !strings.Contains(err.Error(), "still in use") {
		t.Fatalf("evacuating h01 while it is up: %v\n%s", err, out)
	}
	if _, err := cloud.Server.Store().UpdateService(ctx, "h01", func(s *records.Service) error { s.ForcedDown = true; return nil }); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, "host", "evacuate", "h01", "--plan", "--parallel", "2", "--wait")
	wantContains(t, out, "plan 1: evacuating h01: 3 moves (2 at once: --parallel 2)", "[3/3] ", "done")
	for _, name := range []string{"e0", "e1", "e2"} {
		if !regexp.MustCompile(name + ` \([0-9a-f]+\) h01 → h0[23]: done`).MatchString(out) {
			t.Errorf("no move line for %s:\n%s", name, out)
		}
	}
	for _, id := range ids {
		s, err := c.GetServer(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Status != "ACTIVE" || s.Host == "h01" || s.Host == "" {
			t.Errorf("server %s: %s on %q after the evacuation", id, s.Status, s.Host)
		}
	}
	wantContains(t, mustRun(t, "plan", "show", "1"), "evacuate-all", "done")
}
