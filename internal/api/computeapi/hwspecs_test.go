package computeapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
)

// TestHardwareExtraSpecs: a flavor's hw: specs are stored as Nova stores
// them (Tempest sets hw:numa_nodes); booting or resizing with one keel
// cannot honour is 400 naming it, as is a CPU policy Nova's API refuses;
// hw:cpu_policy=dedicated claims PCPU instead of VCPU (only the host
// with PCPU inventory takes it) and a thread policy adds the
// hyperthreading trait.
func TestHardwareExtraSpecs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	flavor := func(id string, specs map[string]string) {
		t.Helper()
		if r := e.call("POST", "/compute/v2.1/flavors", "admin", "", map[string]any{"flavor": map[string]any{"name": "f" + id, "id": id, "ram": 512, "vcpus": 2, "disk": 1}}, nil); r.StatusCode != 200 {
			t.Fatalf("flavor %s: %d", id, r.StatusCode)
		}
		if r := e.call("POST", "/compute/v2.1/flavors/"+id+"/os-extra_specs", "admin", "", map[string]any{"extra_specs": specs}, nil); r.StatusCode != 200 {
			t.Fatalf("extra specs of %s: %d", id, r.StatusCode)
		}
	}
	flavor("50", map[string]string{"hw:numa_nodes": "1", "hw:cpu_policy": "shared"})
	flavor("51", map[string]string{"hw:cpu_thread_policy": "isolate"})
	flavor("52", map[string]string{"hw:cpu_policy": "dedicated"})
	flavor("53", map[string]string{"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "require"})
	boot := func(flavorID string) (int, string, string) {
		t.Helper()
		var out struct {
			Server     struct{ ID string }
			BadRequest struct{ Message string } `json:"badRequest"`
		}
		r := e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "s" + flavorID, "flavorRef": flavorID}}, &out)
		return r.StatusCode, out.Server.ID, out.BadRequest.Message
	}
	if code, _, msg := boot("50"); code != 400 || !strings.Contains(msg, "hw:numa_nodes") {
		t.Errorf("boot with hw:numa_nodes: %d %q, want 400 naming it", code, msg)
	}
	if code, _, msg := boot("51"); code != 400 || !strings.Contains(msg, "needs pinned CPUs") {
		t.Errorf("boot with a thread policy and shared CPUs: %d %q, want 400", code, msg)
	}

	// h2 gets 4 dedicated CPUs besides its shared ones.
	sums, err := e.st.ProviderSummaries(ctx, []string{"rp-h2"})
	if err != nil || len(sums) != 1 {
		t.Fatalf("rp-h2: %v %v", sums, err)
	}
	invs := sums[0].Inventories.Clone()
	invs[placement.PCPU] = placement.NewInventory(4)
	if _, err := e.st.SetInventories(ctx, "rp-h2", sums[0].Generation, invs); err != nil {
		t.Fatal(err)
	}
	code, id, msg := boot("52")
	if code != 202 {
		t.Fatalf("boot dedicated: %d %q", code, msg)
	}
	e.clk.Advance(2 * time.Second)
	e.waitStatus(id, "member", "ACTIVE")
	inst, err := e.st.GetInstance(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.st.GetConsumer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(c.Allocations); inst.Host != "h2" || got != "map[rp-h2:DISK_GB:1,MEMORY_MB:512,PCPU:2]" {
		t.Errorf("dedicated server on %s holds %s, want PCPU:2 (no VCPU) on h2", inst.Host, got)
	}
	// Resizing it to a flavor keel cannot honour is refused before anything moves.
	var fault struct {
		BadRequest struct{ Message string } `json:"badRequest"`
	}
	if r := e.call("POST", "/compute/v2.1/servers/"+id+"/action", "member", "", map[string]any{"resize": map[string]any{"flavorRef": "50"}}, &fault); r.StatusCode != 400 ||
		!strings.Contains(fault.BadRequest.Message, "hw:numa_nodes") {
		t.Errorf("resize to hw:numa_nodes: %d %q, want 400", r.StatusCode, fault.BadRequest.Message)
	}
	// No host has hyperthreads: the required trait leaves none.
	code, id2, msg := boot("53")
	if code != 202 {
		t.Fatalf("boot dedicated on hyperthreads: %d %q", code, msg)
	}
	e.clk.Advance(2 * time.Second)
	show := e.waitStatus(id2, "member", "ERROR")
	if f, _ := show["fault"].(map[string]any); !strings.Contains(fmt.Sprint(f["message"]), "No valid host") {
		t.Errorf("fault of a server needing HW_CPU_HYPERTHREADING: %v", f)
	}
	if got, _ := e.st.GetInstance(ctx, id2); got.VMState != records.VMError {
		t.Errorf("state %s", got.VMState)
	}
}
