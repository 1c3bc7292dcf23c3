package placement

import (
	"strings"
	"testing"
)

// TestHardwareSpecs: the CPU policy specs pass when Nova's API would take
// them; any other hw: key is refused by name; other namespaces are not
// looked at.
func TestHardwareSpecs(t *testing.T) {
	for _, c := range []struct {
		specs map[string]string
		err   string
	}{
		{nil, ""},
		{map[string]string{"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate", "hw:emulator_threads_policy": "isolate"}, ""},
		{map[string]string{"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-2,^1"}, ""},
		{map[string]string{"quota:cpu_shares": "10", "aggregate_instance_extra_specs:ssd": "true", "resources1:VGPU": "1"}, ""},
		{map[string]string{"hw:numa_nodes": "1"}, "hw:numa_nodes"},
		{map[string]string{"hw:cpu_policy": "dedicated", "hw:mem_page_size": "large"}, "hw:mem_page_size"},
		{map[string]string{"hw:cpu_sockets": "2"}, "hw:cpu_sockets"},
		{map[string]string{"hw:cpu_thread_policy": "require"}, "needs pinned CPUs"},
		{map[string]string{"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-1,x"}, "not a CPU number"},
		{map[string]string{"hw:emulator_threads_policy": "spread"}, "not one of share or isolate"},
	} {
		err := HardwareSpecs(4, c.specs)
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%v: %v, want %q", c.specs, err, c.err)
		}
	}
	// 0-2 without 1: CPUs 0 and 2 dedicated.
	r, err := readCPUSpecs(4, map[string]string{"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-2,^1"})
	if err != nil || r.pcpus != 2 || r.vcpus != 2 {
		t.Errorf("mixed 0-2,^1 of 4: %v %v", r, err)
	}
}
