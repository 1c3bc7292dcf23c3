package computeapi_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"keel/internal/audit"
	"keel/internal/placement"
	"keel/internal/records"
)

// TestResetStateRestoresATreeAllocation: a server whose claim spans its
// host's provider, a child (VGPU) and a pool sharing with the host
// (IPV4_ADDRESS) is reset to active after something overwrote its
// allocation with the plain flavor on the host: os-resetState writes the
// tree's shape back (what the scheduler claims), the audit is clean, and
// a second reset leaves the right allocation alone.
func TestResetStateRestoresATreeAllocation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const agg = "a66a66a6-0000-4000-8000-000000000001"
	gpu, pool := "rp-h1-gpu0", "rp-pool"
	if _, err := e.st.CreateProvider(ctx, placement.Provider{UUID: gpu, Name: "h1-gpu0", ParentUUID: "rp-h1",
		Inventories: placement.Inventories{"VGPU": placement.NewInventory(2)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.CreateProvider(ctx, placement.Provider{UUID: pool, Name: "pool",
		Inventories: placement.Inventories{"IPV4_ADDRESS": placement.NewInventory(10)},
		Traits:      []string{placement.SharesViaAggregate}, Aggregates: []string{agg}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SetProviderAggregates(ctx, "rp-h1", nil, []string{agg}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.CreateFlavor(ctx, records.Flavor{ID: "7", Name: "g1", VCPUs: 1, RAMMB: 512, DiskGB: 1,
		ExtraSpecs: map[string]string{"resources1:VGPU": "1", "resources:IPV4_ADDRESS": "1"}}); err != nil {
		t.Fatal(err)
	}
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "g", "flavorRef": "7"}}, &created)
	id := created.Server.ID
	e.clk.Advance(2 * time.Second)
	inst, err := e.st.GetInstance(ctx, id)
	if err != nil || inst.VMState != records.VMActive || inst.Host != "h1" {
		t.Fatalf("booted instance: %s on %q, %v", inst.VMState, inst.Host, err)
	}
	show := func(a map[string]placement.Resources) string {
		var out []string
		for _, p := range slices.Sorted(maps.Keys(a)) {
			out = append(out, p+"="+a[p].String())
		}
		return strings.Join(out, " ")
	}
	held := func() (map[string]placement.Resources, int64) {
		t.Helper()
		c, err := e.st.GetConsumer(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return c.Allocations, c.Generation
	}
	claimed, _ := held()
	want := "rp-h1=DISK_GB:1,MEMORY_MB:512,VCPU:1 rp-h1-gpu0=VGPU:1 rp-pool=IPV4_ADDRESS:1"
	if show(claimed) != want {
		t.Fatalf("the scheduler's claim: %s, want %s", show(claimed), want)
	}

	// What reset-state and the tracker's repair used to write: the plain
	// flavor on the host's provider.
	if _, err := e.st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: id, AnyConsumerGeneration: true, Type: placement.ConsumerInstance,
		ProjectID: inst.ProjectID, UserID: inst.UserID, Allocations: map[string]placement.Resources{"rp-h1": inst.Flavor.Resources()}}); err != nil {
		t.Fatal(err)
	}
	if v, err := audit.Check(ctx, e.st); err != nil || len(v) == 0 {
		t.Fatalf("audit of the flat allocation: %q, %v; want it reported", v, err)
	}
	reset := func() {
		t.Helper()
		if r := e.call("POST", "/compute/v2.1/servers/"+id+"/action", "admin", "", map[string]any{"os-resetState": map[string]any{"state": "active"}}, nil); r.StatusCode != 202 {
			t.Fatalf("reset to active: %d", r.StatusCode)
		}
	}
	reset()
	got, gen := held()
	if show(got) != want {
		t.Errorf("after reset to active: %s, want %s", show(got), want)
	}
	if v, err := audit.Check(ctx, e.st); err != nil || len(v) != 0 {
		t.Errorf("audit after reset to active: %q, %v", v, err)
	}
	reset()
	if again, gen2 := held(); show(again) != want || gen2 != gen {
		t.Errorf("a second reset rewrote a right allocation: %s (generation %d → %d)", show(again), gen, gen2)
	}
	acts, err := e.st.ListInstanceActions(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if msg := acts[len(acts)-1].Message; strings.Contains(msg, "put right") {
		t.Errorf("the second reset says it put something right: %q", msg)
	}
	if msg := acts[len(acts)-2].Message; !strings.Contains(msg, "VGPU:1 on h1-gpu0") || !strings.Contains(msg, "IPV4_ADDRESS:1 on pool") {
		t.Errorf("the first reset's action: %q, want the tree's parts named", msg)
	}

	// The GPU child taken by another consumer once the instance lost its
	// share: the flavor fits nowhere on h1's tree any more.
	if _, err := e.st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: id, AnyConsumerGeneration: true, Type: placement.ConsumerInstance,
		ProjectID: inst.ProjectID, UserID: inst.UserID, Allocations: map[string]placement.Resources{"rp-h1": inst.Flavor.Resources(), "rp-h2": {placement.VCPU: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: uuid.NewString(), Allocations: map[string]placement.Resources{gpu: {"VGPU": 2}}}); err != nil {
		t.Fatal(err)
	}
	var fault map[string]any
	if r := e.call("POST", "/compute/v2.1/servers/"+id+"/action", "admin", "", map[string]any{"os-resetState": map[string]any{"state": "active"}}, &fault); r.StatusCode != 409 ||
		!strings.Contains(fmt.Sprint(fault), "does not fit on h1") {
		t.Errorf("reset to active with the GPU taken: %d %v, want 409 does not fit", r.StatusCode, fault)
	}
}
