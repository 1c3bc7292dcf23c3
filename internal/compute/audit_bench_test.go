package compute_test

import (
	"fmt"
	"testing"

	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store/memory"
)

// BenchmarkAuditNothingToHeal: one host of 20 running instances, each with
// its allocation and guest: the simulator's common audit.
func BenchmarkAuditNothingToHeal(b *testing.B) {
	st := memory.New()
	cfg := hostConfig(func(c *compute.HostConfig) { c.VCPUs, c.MemoryMB, c.LocalGB = 128, 262144, 4000 })
	if _, err := st.CreateProvider(ctx, placement.Provider{UUID: cfg.ProviderUUID, Name: cfg.Host, Inventories: cfg.Inventories()}); err != nil {
		b.Fatal(err)
	}
	gl := &guestList{guests: map[string]compute.Guest{}}
	tr := compute.NewTracker(cfg, st, gl, clock.NewVirtual(clock.Epoch))
	for i := 0; i < 20; i++ {
		u := fmt.Sprintf("i-%02d", i)
		if _, err := st.CreateInstance(ctx, records.Instance{UUID: u, Name: u, Host: "h1", Flavor: small, VMState: records.VMActive}); err != nil {
			b.Fatal(err)
		}
		if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: u, Type: placement.ConsumerInstance, AnyConsumerGeneration: true,
			Allocations: map[string]placement.Resources{"rp-h1": small.Resources()}}); err != nil {
			b.Fatal(err)
		}
		gl.guests[u] = compute.Guest{UUID: u, Name: u, Flavor: small, State: compute.GuestRunning}
		tr.Track(u, small)
	}
	if err := tr.WriteRecord(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d, err := tr.Audit(ctx); err != nil || d.Count() != 0 {
			b.Fatal(err, d)
		}
	}
}
