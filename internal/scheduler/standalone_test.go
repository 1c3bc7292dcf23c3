package scheduler

import (
	"context"
	"testing"

	"keel/internal/clock"
	"keel/internal/placement"
	"keel/internal/records"
)

// TestFiltersAgreeWithExplain: a HostState built by NewHostState from what
// the view holds, checked by Filters, is rejected by the same filter with
// the same reason as Explain gives on the view — disabled, full, wrong zone,
// anti-affinity, and a candidate.
func TestFiltersAgreeWithExplain(t *testing.T) {
	ctx := context.Background()
	c := newCloud(t, 5)
	c.use(t, "h02", "big", placement.Resources{placement.MemoryMB: 130000})
	if err := c.st.PutService(ctx, records.Service{Host: "h03", Binary: "nova-compute", Zone: "nova", Disabled: true, LastSeenUp: c.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := c.st.PutService(ctx, records.Service{Host: "h04", Binary: "nova-compute", Zone: "other", LastSeenUp: c.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	s := c.scheduler(t, cfg, PolicyClaim, 1)
	req := func() *Request {
		return &Request{Resources: small(), Zone: "nova",
			Group: &Group{Policy: "anti-affinity", Members: map[string]int{"h05": 1}}}
	}
	exp, err := s.Explain(ctx, req())
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFilters(cfg)
	if err != nil {
		t.Fatal(err)
	}
	check := f.For(req(), c.clk.Now())
	sums, err := c.st.ProviderSummaries(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]HostInput{}
	for _, sum := range sums {
		svc, err := c.st.GetService(ctx, sum.Name)
		if err != nil {
			t.Fatal(err)
		}
		byName[sum.Name] = HostInput{Name: sum.Name, ProviderUUID: sum.UUID, Inventories: sum.Inventories, Used: sum.Usage, Service: &svc}
	}
	want := map[string]string{"h01": "", "h02": "ResourceFilter", "h03": "ComputeFilter", "h04": "AvailabilityZoneFilter", "h05": "ServerGroupAntiAffinityFilter"}
	for _, he := range exp.Hosts {
		h := NewHostState(byName[he.Host])
		name, why := check.Rejects(h)
		if name != he.RejectedBy || why != he.Reason {
			t.Errorf("%s: Filters say %q (%s), Explain %q (%s)", he.Host, name, why, he.RejectedBy, he.Reason)
		}
		if name != want[he.Host] {
			t.Errorf("%s rejected by %q, want %q", he.Host, name, want[he.Host])
		}
		if check.Passes(h) != (name == "") {
			t.Errorf("%s: Passes disagrees with Rejects", he.Host)
		}
	}
}

// TestAddInstanceFillsTheHost: AddInstance counts against the resource
// check and NumInstancesFilter; RemoveInstance gives it back.
func TestAddInstanceFillsTheHost(t *testing.T) {
	cpu := placement.NewInventory(4)
	h := NewHostState(HostInput{Name: "h1", Inventories: placement.Inventories{placement.VCPU: cpu, placement.MemoryMB: placement.NewInventory(4096)},
		Service: &records.Service{Host: "h1"}, Record: &records.HostRecord{Host: "h1", RunningVMs: 0}})
	cfg := DefaultConfig()
	cfg.EnabledFilters = append(cfg.EnabledFilters, "NumInstancesFilter")
	cfg.Options["max_instances_per_host"] = 2
	cfg.ServiceDownTime = 0
	f, err := NewFilters(cfg)
	if err != nil {
		t.Fatal(err)
	}
	one := placement.Resources{placement.VCPU: 1, placement.MemoryMB: 1024}
	check := f.For(&Request{Resources: one}, c0)
	h.AddInstance(one)
	if !check.Passes(h) {
		t.Fatalf("one instance on the host: rejected: %v", fmtRejects(check, h))
	}
	h.AddInstance(one)
	if name, _ := check.Rejects(h); name != "NumInstancesFilter" {
		t.Fatalf("two instances, max 2: rejected by %q, want NumInstancesFilter", name)
	}
	h.RemoveInstance(one)
	big := f.For(&Request{Resources: placement.Resources{placement.MemoryMB: 3073}}, c0)
	if name, _ := big.Rejects(h); name != "ResourceFilter" {
		t.Fatalf("3073 MiB on a host with 3072 free: rejected by %q, want ResourceFilter", name)
	}
	h.RemoveInstance(one)
	if !big.Passes(h) {
		t.Fatalf("empty host refuses 3073 MiB of 4096: %v", fmtRejects(big, h))
	}
	if got := h.Used()[placement.MemoryMB]; got != 0 {
		t.Fatalf("usage after removing both: %d MiB", got)
	}
}

var c0 = clock.Epoch

func fmtRejects(c *FilterCheck, h *HostState) string {
	n, w := c.Rejects(h)
	return n + ": " + w
}
