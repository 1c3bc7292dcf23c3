package conductor_test

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"keel/internal/conductor"
	"keel/internal/records"
	"keel/internal/scheduler"
)

func (c *cloud) group(policy string, max int) records.ServerGroup {
	c.t.Helper()
	g, err := c.st.CreateServerGroup(ctx, records.ServerGroup{UUID: c.newID(), Name: policy, Policy: policy, MaxServerPerHost: max})
	if err != nil {
		c.t.Fatal(err)
	}
	return g
}

func (c *cloud) bootIn(g records.ServerGroup) records.Instance {
	c.t.Helper()
	in, err := c.cond.Boot(ctx, records.Instance{Name: "vm", Flavor: small, Hints: &records.SchedulerHints{Group: g.UUID}})
	if err != nil {
		c.t.Fatal(err)
	}
	return in
}

func (c *cloud) members(g records.ServerGroup) []string {
	c.t.Helper()
	got, err := c.st.GetServerGroup(ctx, g.UUID)
	if err != nil {
		c.t.Fatal(err)
	}
	return got.Members
}

func TestServerGroupPolicies(t *testing.T) {
	t.Run("anti-affinity spreads, then no valid host; the failed server leaves the group", func(t *testing.T) {
		c := newCloud(t, hosts(3))
		g := c.group(records.PolicyAntiAffinity, 0)
		var placed []string
		for i := 0; i < 3; i++ {
			placed = append(placed, c.bootIn(g).Host)
		}
		slices.Sort(placed)
		if fmt.Sprint(placed) != "[h1 h2 h3]" {
			t.Fatalf("anti-affinity placed on %v, want one per host", placed)
		}
		failed := c.bootIn(g)
		if failed.VMState != records.VMError || !strings.Contains(failed.Fault, "No valid host") || !strings.Contains(failed.Fault, "ServerGroupAntiAffinityFilter") {
			t.Fatalf("a 4th member: state %s, fault %q; want ERROR with No valid host naming the filter", failed.VMState, failed.Fault)
		}
		if m := c.members(g); len(m) != 3 || slices.Contains(m, failed.UUID) {
			t.Fatalf("members %v: the failed server must have left, the 3 others stay", m)
		}
	})
	t.Run("max_server_per_host 2 allows two per host", func(t *testing.T) {
		c := newCloud(t, hosts(2))
		g := c.group(records.PolicyAntiAffinity, 2)
		count := map[string]int{}
		for i := 0; i < 4; i++ {
			in := c.bootIn(g)
			if in.VMState == records.VMError {
				t.Fatalf("member %d failed: %s", i, in.Fault)
			}
			count[in.Host]++
		}
		if count["h1"] != 2 || count["h2"] != 2 {
			t.Fatalf("per host %v, want 2 and 2", count)
		}
		if in := c.bootIn(g); in.VMState != records.VMError {
			t.Fatalf("a 5th member landed on %s", in.Host)
		}
	})
	t.Run("affinity packs where claims alone would spread", func(t *testing.T) {
		c := newCloud(t, hosts(3))
		g := c.group(records.PolicyAffinity, 0)
		first := c.bootIn(g)
		for i := 0; i < 3; i++ {
			if in := c.bootIn(g); in.Host != first.Host {
				t.Fatalf("member %d on %s, the first on %s", i+2, in.Host, first.Host)
			}
		}
	})
	t.Run("soft-anti-affinity spreads and then still places", func(t *testing.T) {
		c := newCloud(t, hosts(2))
		g := c.group(records.PolicySoftAntiAffinity, 0)
		count := map[string]int{}
		for i := 0; i < 4; i++ {
			in := c.bootIn(g)
			if in.VMState == records.VMError {
				t.Fatalf("member %d failed: %s", i, in.Fault)
			}
			count[in.Host]++
		}
		if count["h1"] != 2 || count["h2"] != 2 {
			t.Fatalf("per host %v, want 2 and 2", count)
		}
	})
	t.Run("soft-affinity packs while the host has room", func(t *testing.T) {
		// Builds finish between boots: a build in flight is an I/O
		// operation, and IoOpsWeigher (-1.0) would outweigh the group.
		c := newCloud(t, hosts(3))
		g := c.group(records.PolicySoftAffinity, 0)
		first := c.bootIn(g)
		for i := 0; i < 3; i++ {
			c.advance(spawnTime)
			if in := c.bootIn(g); in.Host != first.Host {
				t.Fatalf("member %d on %s, the first on %s", i+2, in.Host, first.Host)
			}
		}
	})
	t.Run("a deleted server leaves the group and frees its host", func(t *testing.T) {
		c := newCloud(t, hosts(2))
		g := c.group(records.PolicyAntiAffinity, 0)
		a, b := c.bootIn(g), c.bootIn(g)
		c.advance(spawnTime)
		if err := c.cond.Delete(ctx, a.UUID); err != nil {
			t.Fatal(err)
		}
		if m := c.members(g); fmt.Sprint(m) != fmt.Sprint([]string{b.UUID}) {
			t.Fatalf("members after deleting %s: %v", a.UUID, m)
		}
		if in := c.bootIn(g); in.VMState == records.VMError || in.Host != a.Host {
			t.Fatalf("a new member: %s on %q (%s); want it on %s, freed by the delete", in.VMState, in.Host, in.Fault, a.Host)
		}
	})
}

// TestServerGroupLateCheckAcrossServers: two keel servers (two conductors,
// each with its own scheduler and view, on one store) place the two members
// of an anti-affinity group at the same moment — the second boot runs in
// full while the first has claimed a host but not yet recorded it. Each
// picks the fuller host (the RAM, CPU and disk weighers packing), so both pick h1; the late
// check makes the one that confirms second schedule again, onto h2.
func TestServerGroupLateCheckAcrossServers(t *testing.T) {
	pack := func(o *cloudOptions) {
		o.schedulerConfig = func(cfg *scheduler.Config) {
			cfg.Options["ram_weight_multiplier"], cfg.Options["cpu_weight_multiplier"], cfg.Options["disk_weight_multiplier"] = -1, -1, -1
		}
	}
	c := newCloud(t, hosts(2), pack)
	g := c.group(records.PolicyAntiAffinity, 0)
	// A little usage on h1 makes it the fuller host for both servers.
	c.seed("h1", "filler", small)

	sched := c.newScheduler(3) // the first server's own scheduler and view
	var other records.Instance
	fired := false
	first := conductor.New(conductor.Config{NewID: c.newID}, c.st, sched, c.agents, c.clk, slog.New(slog.DiscardHandler), conductor.Hooks{
		Decision: func(kind string, in records.Instance, sel scheduler.Selection, err error) {
			if fired || err != nil {
				return
			}
			fired = true
			if sel.Host != "h1" {
				t.Errorf("the first server chose %s, want h1 (the fuller host)", sel.Host)
			}
			other = c.bootIn(g) // the second server, start to finish
		},
	})
	in, err := first.Boot(ctx, records.Instance{Name: "vm", Flavor: small, Hints: &records.SchedulerHints{Group: g.UUID}})
	if err != nil {
		t.Fatal(err)
	}
	if other.Host != "h1" {
		t.Fatalf("the second server placed its member on %q, want h1", other.Host)
	}
	if in.VMState != records.VMBuilding || in.Host != "h2" {
		t.Fatalf("the first server's member: %s on %q (fault %q), want building on h2 after the late check", in.VMState, in.Host, in.Fault)
	}
	if a := c.allocations(in.UUID); !sameAllocations(a, only("h2", small)) {
		t.Fatalf("its allocations = %v, want only h2", a)
	}
	c.advance(spawnTime)
	c.checkInvariants()
}
