package audit_test

import (
	"context"
	"strings"
	"testing"

	"keel/internal/audit"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store/memory"
)

func TestCheckFindsEachKindOfViolation(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	for _, h := range []string{"a", "b"} {
		if _, err := st.CreateProvider(ctx, placement.Provider{UUID: "rp-" + h, Name: h, Inventories: placement.Inventories{placement.VCPU: placement.NewInventory(8)}}); err != nil {
			t.Fatal(err)
		}
	}
	flavor := records.Flavor{ID: "f", Name: "f", VCPUs: 2}
	put := func(consumer string, typ placement.ConsumerType, allocs map[string]placement.Resources) {
		if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: consumer, Type: typ, AnyConsumerGeneration: true, Allocations: allocs}); err != nil {
			t.Fatal(err)
		}
	}
	inst := func(uuid, host string, vm records.VMState) {
		if _, err := st.CreateInstance(ctx, records.Instance{UUID: uuid, Host: host, Flavor: flavor, VMState: vm}); err != nil {
			t.Fatal(err)
		}
	}
	// A consistent instance: no violation.
	inst("ok", "a", records.VMActive)
	put("ok", placement.ConsumerInstance, map[string]placement.Resources{"rp-a": {placement.VCPU: 2}})
	if v, err := audit.Check(ctx, st); err != nil || len(v) != 0 {
		t.Fatalf("consistent store: %v, %v", v, err)
	}
	inst("wrong-host", "a", records.VMActive)
	put("wrong-host", placement.ConsumerInstance, map[string]placement.Resources{"rp-b": {placement.VCPU: 2}})
	inst("two-hosts", "a", records.VMActive)
	put("two-hosts", placement.ConsumerInstance, map[string]placement.Resources{"rp-a": {placement.VCPU: 2}, "rp-b": {placement.VCPU: 2}})
	inst("none", "b", records.VMActive)
	inst("errored", "b", records.VMError)
	put("errored", placement.ConsumerInstance, map[string]placement.Resources{"rp-b": {placement.VCPU: 1}})
	put("mig-leak", placement.ConsumerMigration, map[string]placement.Resources{"rp-a": {placement.VCPU: 1}})
	put("ghost", placement.ConsumerInstance, map[string]placement.Resources{"rp-b": {placement.VCPU: 1}})
	v, err := audit.Check(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"instance wrong-host on a holds VCPU:2 on b",
		"instance two-hosts holds VCPU:2 on b, where it neither runs",
		"instance none on b holds no allocation",
		"instance errored is error but still holds",
		"migration consumer mig-leak holds VCPU:1 on a but its migration is not in progress",
		"consumer ghost holds VCPU:1 on b but no instance or migration has that id",
	} {
		found := false
		for _, line := range v {
			found = found || strings.Contains(line, want)
		}
		if !found {
			t.Errorf("no violation %q in:\n%s", want, strings.Join(v, "\n"))
		}
	}
	// An active migration makes its consumer and the instance's second
	// host legitimate.
	if _, err := st.CreateMigration(ctx, records.Migration{UUID: "mig-leak", InstanceUUID: "two-hosts", Status: records.MigrationRunning}); err != nil {
		t.Fatal(err)
	}
	v, _ = audit.Check(ctx, st)
	for _, line := range v {
		if strings.Contains(line, "mig-leak") || strings.Contains(line, "two-hosts holds") {
			t.Errorf("violation reported during an active migration: %s", line)
		}
	}
}
