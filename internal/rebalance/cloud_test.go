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

// TestFromStoreAssumesMovesSinceTheReports: an instance that moved since
// the hosts' last reports counts, as the scheduler assumes a claim, on its
// new host with the usage its previous host measured, and no longer on a
// host whose report still lists it; the host's memory in use is the
// kernel's (keel.memory.total − available) where reported, else its
// guests' resident memory.
func TestFromStoreAssumesMovesSinceTheReports(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	for _, name := range []string{"h1", "h2", "h3"} {
		h := seedHost(name) // 32 CPUs
		if _, err := st.CreateProvider(ctx, placement.Provider{UUID: "rp-" + name, Name: name, Inventories: h.Inventories}); err != nil {
			t.Fatal(err)
		}
		if err := st.PutService(ctx, records.Service{Host: name, Binary: "nova-compute", Zone: "nova", LastSeenUp: now}); err != nil {
			t.Fatal(err)
		}
	}
	metrics := func(cpu, total, avail float64) []records.Metric {
		ms := []records.Metric{{Name: records.MetricCPUPercent, Value: cpu, Timestamp: now}}
		if total > 0 {
			ms = append(ms, records.Metric{Name: records.MetricMemoryTotal, Value: total, Timestamp: now},
				records.Metric{Name: records.MetricMemoryAvailable, Value: avail, Timestamp: now})
		}
		return ms
	}
	use := func(uuid string, busy float64, mem int64) records.InstanceUsage {
		return records.InstanceUsage{UUID: uuid, VCPUsBusy: busy, MemoryMB: mem, Timestamp: now}
	}
	// a moved h1 → h2 and b h1 → h3 since h1's report; h3 has reported
	// since b arrived, h2 not since a did.
	for _, r := range []records.HostRecord{
		{Host: "h1", Metrics: metrics(0.5, 65536, 32768), InstanceUsage: []records.InstanceUsage{use("a", 4, 8192), use("b", 2, 4096)}},
		{Host: "h2", Metrics: metrics(0.1, 65536, 60000)},
		{Host: "h3", Metrics: metrics(0.2, 0, 0), InstanceUsage: []records.InstanceUsage{use("b", 2, 4096), use("c", 1, 2048)}},
	} {
		if err := st.PutHostRecord(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for uuid, host := range map[string]string{"a": "h2", "b": "h3", "c": "h3"} {
		if _, err := st.CreateInstance(ctx, records.Instance{UUID: uuid, Host: host, Flavor: small, VMState: records.VMActive}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := FromStore(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Measured{
		"h1": {CPUPercent: 0.5 - 6.0/32, MemoryMB: 32768 - 8192 - 4096, MemoryTotalMB: 65536, Assumed: true},
		"h2": {CPUPercent: 0.1 + 4.0/32, MemoryMB: 5536 + 8192, MemoryTotalMB: 65536, Assumed: true},
		"h3": {CPUPercent: 0.2, MemoryMB: 4096 + 2048}, // no kernel memory: the guests'
	}
	for _, h := range c.Hosts {
		w := want[h.Name]
		w.At = now
		if h.Measured == nil || *h.Measured != w {
			t.Errorf("%s measured %+v, want %+v", h.Name, h.Measured, w)
		}
	}
	for _, in := range c.Instances {
		if in.UUID == "a" && (!in.HasBusy || in.BusyCPUs != 4 || in.ResidentMB != 8192) {
			t.Errorf("a, moved since h2's report: %+v, want its usage on h1 (4 CPUs, 8192 MiB)", in)
		}
	}
}
