package rebalance

import (
	"context"
	"testing"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store/memory"
)

// TestFromStoreReadsTheCloud: providers with their usage, services, host
// records, aggregates, instances (pinned unless ACTIVE and idle) and
// groups, read from a real (memory) store, and planned on.
func TestFromStoreReadsTheCloud(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	for _, name := range []string{"h1", "h2", "h3"} {
		h := seedHost(name)
		if _, err := st.CreateProvider(ctx, placement.Provider{UUID: "rp-" + name, Name: name, Inventories: h.Inventories}); err != nil {
			t.Fatal(err)
		}
		if err := st.PutService(ctx, records.Service{Host: name, Binary: "nova-compute", Zone: "nova", Disabled: name == "h3", LastSeenUp: now}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutHostRecord(ctx, records.HostRecord{Host: "h1", RunningVMs: 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateAggregate(ctx, records.Aggregate{Name: "fast", Hosts: []string{"h2"}, Metadata: map[string]string{"ssd": "true"}}); err != nil {
		t.Fatal(err)
	}
	g, err := st.CreateServerGroup(ctx, records.ServerGroup{UUID: "g1", Name: "apart", Policy: "anti-affinity"})
	if err != nil {
		t.Fatal(err)
	}
	var writes []placement.AllocationWrite
	for i, f := range []records.Flavor{large, large, large, large, large, large, small} {
		in := records.Instance{UUID: "i" + string(rune('a'+i)), Host: "h1", Flavor: f, VMState: records.VMActive}
		if i == 5 {
			in.TaskState = records.TaskMigrating
		}
		if i == 6 {
			in.Hints = &records.SchedulerHints{Group: g.UUID}
		}
		if _, err := st.CreateInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
		writes = append(writes, placement.AllocationWrite{ConsumerUUID: in.UUID, Type: placement.ConsumerInstance,
			Allocations: map[string]placement.Resources{"rp-h1": f.Resources()}})
	}
	if _, err := st.WriteAllocations(ctx, writes...); err != nil {
		t.Fatal(err)
	}
	c, err := FromStore(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Hosts) != 3 || len(c.Instances) != 7 || len(c.Groups) != 1 {
		t.Fatalf("read %d hosts, %d instances, %d groups", len(c.Hosts), len(c.Instances), len(c.Groups))
	}
	h1, h2, h3 := c.Hosts[0], c.Hosts[1], c.Hosts[2]
	if h1.Used[placement.MemoryMB] != 6*8192+2048 || h1.Record == nil || h1.Record.RunningVMs != 7 {
		t.Errorf("h1: used %v, record %+v", h1.Used, h1.Record)
	}
	if len(h2.Aggregates) != 1 || h2.Aggregates[0]["ssd"] != "true" || !h3.Disabled || h1.Disabled {
		t.Errorf("h2 aggregates %v, h3 disabled %v, h1 disabled %v", h2.Aggregates, h3.Disabled, h1.Disabled)
	}
	if !c.Instances[5].Pinned || c.Instances[0].Pinned || c.Instances[6].Group != "g1" {
		t.Errorf("instances: %+v", c.Instances)
	}
	plan := mustPlan(t, c, Options{})
	if len(plan.Moves) == 0 || plan.Hosts != 2 {
		t.Fatalf("%d moves over %d hosts: %s", len(plan.Moves), plan.Hosts, plan.Stopped)
	}
	for _, m := range plan.Moves {
		if m.Instance == "if" || m.Destination != "h2" {
			t.Errorf("move %+v: the migrating instance moved, or to the disabled host", m)
		}
	}
}
