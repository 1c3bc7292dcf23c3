package inproc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/conductor"
	"keel/internal/inproc"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store"
	"keel/internal/store/memory"
)

func host(name string) inproc.Host {
	return inproc.Host{Config: compute.HostConfig{Host: name, ProviderUUID: "rp-" + name, VCPUs: 8, MemoryMB: 16384, LocalGB: 100, WriteDestRecord: true}}
}

// TestSpecBuildsTheCloud builds a cloud with a custom trait, a child
// provider, a sharing provider in a placement aggregate, a host aggregate
// and seeded instances, and reads each back from the store; then boots
// through the conductor onto the host the seeding left room on.
func TestSpecBuildsTheCloud(t *testing.T) {
	ctx := context.Background()
	small := records.Flavor{ID: "s", Name: "s", VCPUs: 2, RAMMB: 4096, DiskGB: 10}
	a, b := host("a"), host("b")
	a.Traits = []string{"CUSTOM_FAST", "HW_CPU_X86_AVX2"}
	a.Children = []placement.Provider{{UUID: "rp-a-gpu", Name: "a_gpu", Inventories: placement.Inventories{"CUSTOM_GPU": placement.NewInventory(2)}}}
	a.Aggregates = []string{"agg-pool"}
	var built []records.VMState // what the BuildDone hook saw
	sp := inproc.Spec{
		Hosts:           []inproc.Host{a, b},
		ResourceClasses: []placement.ResourceClass{"CUSTOM_GPU", "CUSTOM_POOL"},
		Shared: []inproc.Shared{{Provider: placement.Provider{UUID: "rp-pool", Name: "pool",
			Inventories: placement.Inventories{"CUSTOM_POOL": placement.NewInventory(10)}, Traits: []string{placement.SharesViaAggregate}}, Aggregates: []string{"agg-pool"}}},
		Aggregates: []records.Aggregate{{Name: "fast", Hosts: []string{"a"}}},
		Populate: func(ctx context.Context, c *inproc.Cloud) error {
			// a is full by RAM (four of 16 GiB), b is left for Populate's
			// default: its record written after.
			insts := make([]records.Instance, 4)
			for i := range insts {
				insts[i] = records.Instance{Name: "seeded", Flavor: small}
			}
			return c.Seed(ctx, "a", insts)
		},
		Hooks: conductor.Hooks{BuildDone: func(in records.Instance) { built = append(built, in.VMState) }},
	}
	c, err := inproc.New(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	if c.Store == nil || c.Backing == nil || len(c.Hosts) != 2 || c.Hosts[0] != "a" {
		t.Fatalf("cloud: store %v, hosts %v", c.Store, c.Hosts)
	}
	p, err := c.Store.GetProvider(ctx, "rp-a")
	if err != nil || !strings.Contains(strings.Join(p.Traits, ","), "CUSTOM_FAST") {
		t.Fatalf("host a's provider: %+v, %v", p, err)
	}
	child, err := c.Store.GetProvider(ctx, "rp-a-gpu")
	if err != nil || child.ParentUUID != "rp-a" {
		t.Fatalf("child: %+v, %v", child, err)
	}
	if p, err := c.Store.GetProvider(ctx, "rp-a"); err != nil || len(p.Aggregates) != 1 || p.Aggregates[0] != "agg-pool" {
		t.Fatalf("host a's placement aggregates: %v, %v", p.Aggregates, err)
	}
	if ags, err := c.Store.ListAggregates(ctx); err != nil || len(ags) != 1 || ags[0].Name != "fast" {
		t.Fatalf("host aggregates: %v, %v", ags, err)
	}
	insts, err := c.Store.ListInstances(ctx, "a")
	if err != nil || len(insts) != 4 {
		t.Fatalf("seeded: %d, %v", len(insts), err)
	}
	if insts[0].UUID != inproc.UUID(1) || insts[0].VMState != records.VMActive || insts[0].CreatedAt.IsZero() {
		t.Fatalf("seeded instance: %+v", insts[0])
	}
	for _, h := range []string{"a", "b"} {
		rec, err := c.Store.GetHostRecord(ctx, h)
		if err != nil {
			t.Fatalf("record of %s: %v", h, err)
		}
		if want := map[string]int64{"a": 4, "b": 0}[h]; rec.RunningVMs != want {
			t.Fatalf("record of %s: %d running, want %d", h, rec.RunningVMs, want)
		}
	}
	in, err := c.Cond.Boot(ctx, records.Instance{Name: "booted", Flavor: small})
	if err != nil {
		t.Fatal(err)
	}
	c.Clock.(interface{ Advance(time.Duration) }).Advance(time.Minute)
	got, err := c.Store.GetInstance(ctx, in.UUID)
	if err != nil || got.Host != "b" || got.VMState != records.VMActive || len(built) != 1 {
		t.Fatalf("booted: %+v, %v (hook saw %v)", got, err, built)
	}
}

// TestSpecErrors: a bad spec is an error, not a panic or a test failure.
func TestSpecErrors(t *testing.T) {
	ctx := context.Background()
	bad := scheduler.DefaultConfig()
	bad.EnabledFilters = []string{"NoSuchFilter"}
	for _, tc := range []struct {
		name string
		sp   inproc.Spec
		want string
	}{
		{"seed on no host", inproc.Spec{Hosts: []inproc.Host{host("a")}, Populate: func(ctx context.Context, c *inproc.Cloud) error {
			return c.Seed(ctx, "z", []records.Instance{{Name: "x"}})
		}}, `no host "z"`},
		{"bad trait", inproc.Spec{Hosts: []inproc.Host{host("a")}, Traits: []string{"lower"}}, "creating trait lower"},
		{"bad scheduler", inproc.Spec{Hosts: []inproc.Host{host("a")}, Scheduler: &bad}, "scheduler"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := inproc.New(ctx, tc.sp); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// TestUUID is the counter's form, widened past twelve digits.
func TestUUID(t *testing.T) {
	for n, want := range map[int64]string{
		1:             "00000000-0000-4000-8000-000000000001",
		1234567:       "00000000-0000-4000-8000-000001234567",
		1234567890123: "00000000-0000-4000-8000-1234567890123",
	} {
		if got := inproc.UUID(n); got != want {
			t.Errorf("UUID(%d) = %s, want %s", n, got, want)
		}
	}
}

// A conductor store wrapper is given the memory store, so a Spec that
// replaces the memory store cannot have one.
func TestConductorStoreNeedsTheMemoryStore(t *testing.T) {
	_, err := inproc.New(context.Background(), inproc.Spec{Store: memory.New(),
		ConductorStore: func(m *memory.Store) store.Store { return m }})
	if err == nil || !strings.Contains(err.Error(), "one or the other") {
		t.Fatalf("New with both Store and ConductorStore: %v, want a refusal", err)
	}
}
