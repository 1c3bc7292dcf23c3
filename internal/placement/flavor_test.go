package placement

import (
	"strings"
	"testing"
)

// TestFlavorQuery: a flavor's extra specs become the request groups Nova
// asks Placement for.
func TestFlavorQuery(t *testing.T) {
	base := Resources{VCPU: 2, MemoryMB: 4096, DiskGB: 20}
	cases := []struct {
		name  string
		specs []map[string]string
		want  string // CandidateQuery.String
		err   string
	}{
		{"flavor alone", nil, "resources=DISK_GB:20,MEMORY_MB:4096,VCPU:2", ""},
		{"override and drop", []map[string]string{{"resources:VCPU": "8", "resources:DISK_GB": "0"}}, "resources=MEMORY_MB:4096,VCPU:8", ""},
		{"granular with trait", []map[string]string{{"resources1:CUSTOM_X": "1", "trait1:CUSTOM_T": "required", "trait:HW_CPU_X86_AVX2": "forbidden"}},
			"resources=DISK_GB:20,MEMORY_MB:4096,VCPU:2&required=!HW_CPU_X86_AVX2&resources1=CUSTOM_X:1&required1=CUSTOM_T", ""},
		{"string suffixes", []map[string]string{{"resources_gpu:VGPU": "1", "trait_gpu:CUSTOM_T": "required"}}, "resources=DISK_GB:20,MEMORY_MB:4096,VCPU:2&resources_gpu=VGPU:1&required_gpu=CUSTOM_T", ""},
		{"ignored as Nova ignores them", []map[string]string{{"resources:NOPE": "1", "resources1:VCPU": "-1", "resources2:VCPU": "x", "trait:CUSTOM_T": "preferred"}},
			"resources=DISK_GB:20,MEMORY_MB:4096,VCPU:2", ""},
		{"a granular group of traits alone is dropped", []map[string]string{{"trait1:CUSTOM_T": "required"}}, "resources=DISK_GB:20,MEMORY_MB:4096,VCPU:2", ""},
		{"the image's traits, the flavor's winning", []map[string]string{{"trait:CUSTOM_A": "required"}, {"trait:CUSTOM_A": "forbidden", "trait:CUSTOM_B": "required", "resources:VCPU": "9"}},
			"resources=DISK_GB:20,MEMORY_MB:4096,VCPU:2&required=CUSTOM_A,CUSTOM_B", ""},
		{"isolate", []map[string]string{{"resources1:VCPU": "1", "resources2:VCPU": "1", "group_policy": "isolate"}},
			"resources=DISK_GB:20,MEMORY_MB:4096&resources1=VCPU:1&resources2=VCPU:1&group_policy=isolate", ""},
		{"a class a granular group asks for is not the flavor's too", []map[string]string{{"resources1:MEMORY_MB": "1024", "resources1:VCPU": "0"}},
			"resources=DISK_GB:20&resources1=MEMORY_MB:1024", ""},
		{"shared CPUs are the default", []map[string]string{{"hw:cpu_policy": "shared", "hw:emulator_threads_policy": "share"}}, "resources=DISK_GB:20,MEMORY_MB:4096,VCPU:2", ""},
		{"dedicated CPUs", []map[string]string{{"hw:cpu_policy": "dedicated"}}, "resources=DISK_GB:20,MEMORY_MB:4096,PCPU:2", ""},
		{"dedicated without hyperthreads, an emulator thread of its own", []map[string]string{{"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate", "hw:emulator_threads_policy": "isolate"}},
			"resources=DISK_GB:20,MEMORY_MB:4096,PCPU:3&required=!HW_CPU_HYPERTHREADING", ""},
		{"dedicated on hyperthreads", []map[string]string{{"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "require"}},
			"resources=DISK_GB:20,MEMORY_MB:4096,PCPU:2&required=HW_CPU_HYPERTHREADING", ""},
		{"prefer asks nothing", []map[string]string{{"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "prefer"}}, "resources=DISK_GB:20,MEMORY_MB:4096,PCPU:2", ""},
		{"mixed", []map[string]string{{"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "1"}}, "resources=DISK_GB:20,MEMORY_MB:4096,PCPU:1,VCPU:1", ""},
		{"mixed, a mask of exclusions", []map[string]string{{"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0"}}, "resources=DISK_GB:20,MEMORY_MB:4096,PCPU:1,VCPU:1", ""},
		{"PCPU asked for directly", []map[string]string{{"resources:PCPU": "2"}}, "resources=DISK_GB:20,MEMORY_MB:4096,PCPU:2", ""},
		{"PCPU asked for directly, without hyperthreads", []map[string]string{{"resources:PCPU": "2", "hw:cpu_thread_policy": "isolate"}},
			"resources=DISK_GB:20,MEMORY_MB:4096,PCPU:2&required=!HW_CPU_HYPERTHREADING", ""},
		{"PCPU for some of the CPUs", []map[string]string{{"resources:PCPU": "1"}}, "", "must be the flavor's 2 CPUs"},
		{"VCPU and PCPU", []map[string]string{{"resources:PCPU": "2", "resources1:VCPU": "1"}}, "", "use one or the other"},
		{"a bogus CPU policy", []map[string]string{{"hw:cpu_policy": "pinned"}}, "", "not one of shared, dedicated or mixed"},
		{"a thread policy without pinning", []map[string]string{{"hw:cpu_thread_policy": "isolate"}}, "", "needs pinned CPUs"},
		{"an isolated emulator thread without pinning", []map[string]string{{"hw:cpu_policy": "shared", "hw:emulator_threads_policy": "isolate"}}, "", "needs pinned CPUs"},
		{"mixed without a mask", []map[string]string{{"hw:cpu_policy": "mixed"}}, "", "needs hw:cpu_dedicated_mask"},
		{"a mask dedicating every CPU", []map[string]string{{"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-1"}}, "", "some shared"},
		{"a mask past the flavor's CPUs", []map[string]string{{"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "2"}}, "", "CPUs are 0-1"},
		{"a mask without mixed", []map[string]string{{"hw:cpu_policy": "dedicated", "hw:cpu_dedicated_mask": "1"}}, "", "only for hw:cpu_policy=mixed"},
		{"the policy and resources:VCPU", []map[string]string{{"hw:cpu_policy": "dedicated", "resources:VCPU": "2"}}, "", "use one or the other"},
		{"the thread policy and the trait", []map[string]string{{"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate", "trait:HW_CPU_HYPERTHREADING": "forbidden"}}, "", "use one or the other"},
		{"two groups need a policy", []map[string]string{{"resources1:VCPU": "1", "resources2:VCPU": "1"}}, "", "no group_policy"},
		{"a bogus policy", []map[string]string{{"resources1:VCPU": "1", "resources2:VCPU": "1", "group_policy": "spread"}}, "", "neither none nor isolate"},
	}
	for _, tc := range cases {
		q, err := FlavorQuery(base, tc.specs...)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || q.String() != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.name, q.String(), err, tc.want)
		}
	}
	q, _ := FlavorQuery(base, map[string]string{"resources1:VCPU": "1", "resources:VCPU": "3"})
	if got := q.Total(); !got.Equal(Resources{VCPU: 4, MemoryMB: 4096, DiskGB: 20}) {
		t.Errorf("Total %v", got)
	}
	if _, only := q.Unnamed(); only {
		t.Error("Unnamed says there is no granular group")
	}
}
