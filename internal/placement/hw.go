package placement

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The hw: extra specs keel reads. Nova turns these into Placement
// requests (its scheduler's request-spec translation); the rest of Nova's
// hw: namespace configures a guest NUMA topology, huge pages, real-time
// CPUs, PCI NUMA affinity, persistent memory, memory encryption, a vTPM
// or guest devices — none of which keel models — and HardwareSpecs
// refuses it.
const (
	specCPUPolicy       = "hw:cpu_policy"
	specCPUThreadPolicy = "hw:cpu_thread_policy"
	specDedicatedMask   = "hw:cpu_dedicated_mask"
	specEmulatorThreads = "hw:emulator_threads_policy"
)

// numberedSpec is a resources or trait extra spec of the unnamed group or
// a numbered one: the keys Nova looks at when it checks CPU specs.
var numberedSpec = regexp.MustCompile(`^(resources|trait)([1-9][0-9]*)?:(.+)$`)

// PCPU is the class of dedicated (pinned) host CPUs.
const PCPU ResourceClass = "PCPU"

// Hyperthreading is the trait of hosts whose CPUs have SMT siblings.
const Hyperthreading = "HW_CPU_HYPERTHREADING"

// cpuRequest is what a flavor's hw: CPU specs ask of Placement.
type cpuRequest struct {
	policy string // "", shared, dedicated or mixed
	vcpus  int64  // VCPU for a mixed flavor (its shared CPUs)
	pcpus  int64  // PCPU for dedicated and mixed
	trait  string // HW_CPU_HYPERTHREADING's "required" or "forbidden", or ""
}

// HardwareSpecs checks a flavor's hw: extra specs as Nova's API checks
// them when a server is created or resized with it, and refuses those keel
// cannot honour. vcpus is the flavor's CPU count. The error says what is
// wrong; it is nil for a flavor without hw: specs.
func HardwareSpecs(vcpus int64, specs map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(specs)) {
		if !strings.HasPrefix(k, "hw:") {
			continue
		}
		switch k {
		case specCPUPolicy, specCPUThreadPolicy, specDedicatedMask, specEmulatorThreads:
		default:
			return invalidf("keel cannot honour the flavor's extra spec %s: it has no model of guest NUMA topology, huge pages, "+
				"real-time CPUs or guest devices; it reads only %s, %s, %s and %s", k,
				specCPUPolicy, specCPUThreadPolicy, specDedicatedMask, specEmulatorThreads)
		}
	}
	_, err := readCPUSpecs(vcpus, specs)
	return err
}

// readCPUSpecs reads the CPU policy specs as Nova's scheduler translates
// them: dedicated asks PCPU for every CPU instead of VCPU; mixed asks
// PCPU for the CPUs of hw:cpu_dedicated_mask and VCPU for the rest; an
// isolated emulator thread one PCPU more; hw:cpu_thread_policy isolate
// forbids HW_CPU_HYPERTHREADING and require requires it (prefer asks
// nothing). It refuses what Nova's API refuses: unknown values, a thread
// or emulator policy or a mask without pinning, a mixed flavor without a
// valid mask, and resources:VCPU/PCPU or trait:HW_CPU_HYPERTHREADING
// together with the policy that sets them.
func readCPUSpecs(vcpus int64, specs map[string]string) (cpuRequest, error) {
	var r cpuRequest
	policy, thread, mask, emu := specs[specCPUPolicy], specs[specCPUThreadPolicy], specs[specDedicatedMask], specs[specEmulatorThreads]
	switch policy {
	case "", "shared", "dedicated", "mixed":
	default:
		return r, invalidf("%s=%s is not one of shared, dedicated or mixed", specCPUPolicy, policy)
	}
	switch thread {
	case "", "prefer", "isolate", "require":
	default:
		return r, invalidf("%s=%s is not one of prefer, isolate or require", specCPUThreadPolicy, thread)
	}
	switch emu {
	case "", "share", "isolate":
	default:
		return r, invalidf("%s=%s is not one of share or isolate", specEmulatorThreads, emu)
	}
	// As Nova counts them: resources:VCPU/PCPU in the unnamed or a
	// numbered group, amounts that parse summed (a nonzero sum asks).
	var explicitVCPU, explicitPCPU int64
	for k, v := range specs {
		m := numberedSpec.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		if m[1] == "trait" {
			if m[3] == Hyperthreading && thread != "" {
				return r, invalidf("trait:%s and %s both say whether hyperthreads may be used: use one or the other", Hyperthreading, specCPUThreadPolicy)
			}
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		switch ResourceClass(m[3]) {
		case VCPU:
			explicitVCPU += n
		case PCPU:
			explicitPCPU += n
		}
	}
	if policy != "" && (explicitVCPU != 0 || explicitPCPU != 0) {
		return r, invalidf("resources:VCPU or resources:PCPU and %s both say which CPUs to claim: use one or the other", specCPUPolicy)
	}
	if explicitVCPU != 0 && explicitPCPU != 0 {
		return r, invalidf("resources:VCPU and resources:PCPU both ask for the flavor's CPUs: use one or the other")
	}
	if explicitPCPU != 0 {
		// PCPU asked for directly pins every CPU (and the emulator thread
		// when it is isolated).
		want := vcpus
		if emu == "isolate" {
			want++
		}
		if explicitPCPU != want {
			return r, invalidf("resources:PCPU=%d must be the flavor's %d CPUs (one more with %s=isolate)", explicitPCPU, vcpus, specEmulatorThreads)
		}
	}
	pinned := policy == "dedicated" || policy == "mixed" || explicitPCPU != 0
	switch {
	case !pinned && thread != "":
		return r, invalidf("%s=%s needs pinned CPUs (%s=dedicated or mixed)", specCPUThreadPolicy, thread, specCPUPolicy)
	case !pinned && emu == "isolate":
		return r, invalidf("%s=isolate needs pinned CPUs (%s=dedicated or mixed)", specEmulatorThreads, specCPUPolicy)
	case policy != "mixed" && mask != "":
		return r, invalidf("%s is only for %s=mixed", specDedicatedMask, specCPUPolicy)
	}
	r.policy = policy
	switch policy {
	case "dedicated":
		r.pcpus = vcpus
	case "mixed":
		if mask == "" {
			return r, invalidf("%s=mixed needs %s to say which CPUs are dedicated", specCPUPolicy, specDedicatedMask)
		}
		n, err := dedicatedCount(vcpus, mask)
		if err != nil {
			return r, err
		}
		r.pcpus, r.vcpus = n, vcpus-n
	}
	if pinned && emu == "isolate" && explicitPCPU == 0 {
		r.pcpus++
	}
	r.trait = map[string]string{"isolate": "forbidden", "require": "required"}[thread]
	return r, nil
}

// dedicatedCount returns how many of a flavor's vcpus CPUs the mask
// hw:cpu_dedicated_mask names: CPU numbers and ranges ("0-1,4"), an
// element "^N" leaving N out, and a mask starting with "^" counting from
// all the flavor's CPUs ("^0": all but CPU 0). Some, but not all, must
// be dedicated, and all must be CPUs of the flavor.
func dedicatedCount(vcpus int64, mask string) (int64, error) {
	mask = strings.TrimSpace(mask)
	set := map[int64]bool{}
	if strings.HasPrefix(mask, "^") {
		for c := range vcpus {
			set[c] = true
		}
	}
	for _, part := range strings.Split(mask, ",") {
		part = strings.TrimSpace(part)
		exclude := strings.HasPrefix(part, "^")
		lo, hi, isRange := strings.Cut(strings.TrimPrefix(part, "^"), "-")
		a, err1 := strconv.ParseInt(strings.TrimSpace(lo), 10, 64)
		b, err2 := a, error(nil)
		if isRange {
			b, err2 = strconv.ParseInt(strings.TrimSpace(hi), 10, 64)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a || (exclude && isRange) {
			return 0, invalidf("%s=%s: %q is not a CPU number, a range or ^number", specDedicatedMask, mask, part)
		}
		if b >= vcpus {
			return 0, invalidf("%s=%s names CPU %d, but the flavor's CPUs are 0-%d", specDedicatedMask, mask, b, vcpus-1)
		}
		for c := a; c <= b; c++ {
			if exclude {
				delete(set, c)
			} else {
				set[c] = true
			}
		}
	}
	n := int64(len(set))
	if n == 0 || n == vcpus {
		return 0, invalidf("%s=%s must leave some of the flavor's %d CPUs dedicated and some shared", specDedicatedMask, mask, vcpus)
	}
	return n, nil
}

// String describes r, for tests and messages.
func (r cpuRequest) String() string {
	return fmt.Sprintf("policy=%q VCPU=%d PCPU=%d hyperthreading=%q", r.policy, r.vcpus, r.pcpus, r.trait)
}
