package conductor_test

import (
	"log/slog"
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
