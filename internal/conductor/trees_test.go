package conductor_test

import (
	"testing"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
)

// gpu flavors ask for one VGPU in a granular group, which only the hosts'
// child providers (rp-hN-gpu) hold.
var (
	gpuSmall  = records.Flavor{ID: "gsmall", Name: "gsmall", VCPUs: 1, RAMMB: 2048, DiskGB: 20, ExtraSpecs: map[string]string{"resources1:VGPU": "1"}}
	gpuMedium = records.Flavor{ID: "gmedium", Name: "gmedium", VCPUs: 4, RAMMB: 8192, DiskGB: 40, ExtraSpecs: map[string]string{"resources1:VGPU": "1"}}
)

// tree is the allocation of a gpu flavor on host: the flavor on its
// provider, the VGPU on its child.
func tree(host string, f records.Flavor) map[string]placement.Resources {
	return map[string]placement.Resources{"rp-" + host: f.Resources(), "rp-" + host + "-gpu": {"VGPU": 1}}
}

// TestMovesKeepTheTreeShape: an instance whose flavor takes a VGPU from a
// host's child provider keeps that shape through a boot, a live
// migration, a cold migration, a resize and an evacuation — the
// destination's claim names its own child, the migration consumer holds
// the source's — and every provider's usage is its consumers' sum at each
// step; a delete leaves nothing.
func TestMovesKeepTheTreeShape(t *testing.T) {
	c := newCloud(t, hosts(3), sweeps(0, 0, 2*time.Second))
	c.runSweeps(t)
	for _, h := range c.hosts {
		if _, err := c.st.CreateProvider(ctx, placement.Provider{UUID: "rp-" + h + "-gpu", Name: h + "_pgpu0", ParentUUID: "rp-" + h,
			Inventories: placement.Inventories{"VGPU": placement.NewInventory(1)}}); err != nil {
			t.Fatal(err)
		}
	}
	exact := func(when string) {
		t.Helper()
		sums, err := c.st.ProviderSummaries(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sums {
			cs, err := c.st.ConsumersOn(ctx, s.UUID)
			if err != nil {
				t.Fatal(err)
			}
			sum := placement.Resources{}
			for _, cons := range cs {
				sum.Add(cons.Allocations[s.UUID])
			}
			if !sum.Equal(s.Usage) {
				t.Fatalf("%s: %s uses %v, its consumers hold %v", when, s.Name, s.Usage, sum)
			}
		}
	}
	holds := func(when, consumer string, want map[string]placement.Resources) {
		t.Helper()
		if got := c.allocations(consumer); !sameAllocations(got, want) {
			t.Fatalf("%s: %s holds %v, want %v", when, consumer, got, want)
		}
		exact(when)
	}
	until := func(id int64, status records.MigrationStatus) records.Migration {
		t.Helper()
		for i := 0; i < 300; i++ {
			if m := c.migration(id); m.Status == status {
				return m
			}
			c.advance(time.Second)
		}
		m := c.migration(id)
		t.Fatalf("migration %d is %s (%s), want %s", id, m.Status, m.Error, status)
		return m
	}

	a, err := c.cond.Boot(ctx, records.Instance{UUID: "inst-a", Name: "a", Flavor: gpuSmall, Zone: "nova"})
	if err != nil {
		t.Fatal(err)
	}
	c.advance(spawnTime)
	a = c.instance(a.UUID)
	if a.VMState != records.VMActive {
		t.Fatalf("boot: %s (%s)", a.VMState, a.Fault)
	}
	holds("booted", a.UUID, tree(a.Host, gpuSmall))

	live := c.migrate(a, "")
	holds("live migration claimed", a.UUID, tree(live.DestHost, gpuSmall))
	holds("live migration claimed", live.UUID, tree(a.Host, gpuSmall))
	until(live.ID, records.MigrationCompleted)
	holds("live migration done", a.UUID, tree(live.DestHost, gpuSmall))
	a = c.instance(a.UUID)

	cold, err := c.cond.ColdMigrate(ctx, a.UUID, "")
	if err != nil {
		t.Fatal(err)
	}
	holds("cold migration claimed", cold.UUID, tree(a.Host, gpuSmall))
	until(cold.ID, records.MigrationFinished)
	holds("cold migration in VERIFY_RESIZE", a.UUID, tree(cold.DestHost, gpuSmall))
	if err := c.cond.ConfirmResize(ctx, a.UUID); err != nil {
		t.Fatal(err)
	}
	until(cold.ID, records.MigrationConfirmed)
	holds("cold migration confirmed", a.UUID, tree(cold.DestHost, gpuSmall))
	a = c.instance(a.UUID)

	rs, err := c.cond.Resize(ctx, a.UUID, gpuMedium)
	if err != nil {
		t.Fatal(err)
	}
	holds("resize claimed", rs.UUID, tree(a.Host, gpuSmall))
	holds("resize claimed", a.UUID, tree(rs.DestHost, gpuMedium))
	until(rs.ID, records.MigrationFinished)
	if err := c.cond.ConfirmResize(ctx, a.UUID); err != nil {
		t.Fatal(err)
	}
	until(rs.ID, records.MigrationConfirmed)
	holds("resize confirmed", a.UUID, tree(rs.DestHost, gpuMedium))
	a = c.instance(a.UUID)

	c.forceDown(a.Host, true)
	ev, err := c.cond.Evacuate(ctx, a.UUID, "")
	if err != nil {
		t.Fatal(err)
	}
	c.advance(spawnTime + time.Second)
	ev = c.migration(ev.ID)
	if ev.Status != records.MigrationDone || ev.DestHost == a.Host {
		t.Fatalf("evacuation: %s (%s) to %q", ev.Status, ev.Error, ev.DestHost)
	}
	holds("evacuated", a.UUID, tree(ev.DestHost, gpuMedium))
	holds("evacuated", ev.UUID, tree(a.Host, gpuMedium))
	c.forceDown(a.Host, false)
	until(ev.ID, records.MigrationCompleted)
	holds("evacuation completed", ev.UUID, nil)

	if err := c.cond.Delete(ctx, a.UUID); err != nil {
		t.Fatal(err)
	}
	c.advance(5 * time.Second)
	holds("deleted", a.UUID, nil)
	for _, h := range c.hosts {
		for _, u := range []string{"rp-" + h, "rp-" + h + "-gpu"} {
			sums, err := c.st.ProviderSummaries(ctx, []string{u})
			if err != nil || len(sums) != 1 || len(sums[0].Usage) != 0 {
				t.Fatalf("after the delete: %s %v %v, want nothing used", u, sums, err)
			}
		}
	}
}
