package placement

import (
	"fmt"
	"sort"
	"strings"
)

// ResourceClass names a kind of resource, e.g. VCPU or CUSTOM_FPGA.
type ResourceClass string

// The standard resource classes keel's hosts report.
const (
	VCPU     ResourceClass = "VCPU"
	MemoryMB ResourceClass = "MEMORY_MB"
	DiskGB   ResourceClass = "DISK_GB"
)

// standardClasses are the classes Placement knows without creating them.
var standardClasses = map[ResourceClass]bool{
	VCPU: true, MemoryMB: true, DiskGB: true,
	"PCI_DEVICE": true, "SRIOV_NET_VF": true, "NUMA_SOCKET": true,
	"NUMA_CORE": true, "NUMA_THREAD": true, "NUMA_MEMORY_MB": true,
	"IPV4_ADDRESS": true, "VGPU": true, "VGPU_DISPLAY_HEAD": true,
	"NET_BW_EGR_KILOBIT_PER_SEC": true, "NET_BW_IGR_KILOBIT_PER_SEC": true,
	"PCPU": true, "MEM_ENCRYPTION_CONTEXT": true, "FPGA": true, "PGPU": true,
	"NET_PACKET_RATE_KILOPACKET_PER_SEC": true, "NET_PACKET_RATE_EGR_KILOPACKET_PER_SEC": true,
	"NET_PACKET_RATE_IGR_KILOPACKET_PER_SEC": true,
}

// IsCustom reports whether rc is a custom class (CUSTOM_*).
func (rc ResourceClass) IsCustom() bool { return strings.HasPrefix(string(rc), "CUSTOM_") }

// IsStandard reports whether rc is one of the standard classes.
func (rc ResourceClass) IsStandard() bool { return standardClasses[rc] }

// Validate checks that rc is a standard class or a well-formed custom one.
func (rc ResourceClass) Validate() error {
	if standardClasses[rc] {
		return nil
	}
	if len(rc) <= 255 && customNameRE.MatchString(string(rc)) {
		return nil
	}
	return invalidf("resource class %q is neither standard nor CUSTOM_[A-Z0-9_]+", rc)
}

// StandardClasses lists the standard resource classes, sorted.
func StandardClasses() []ResourceClass {
	out := make([]ResourceClass, 0, len(standardClasses))
	for rc := range standardClasses {
		out = append(out, rc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Resources is an amount per resource class.
type Resources map[ResourceClass]int64

// Clone returns a copy of r.
func (r Resources) Clone() Resources {
	out := make(Resources, len(r))
	for k, v := range r {
		out[k] = v
	}
	return out
}

// Add adds o to r in place and returns r (a nil r is allocated).
func (r Resources) Add(o Resources) Resources {
	if r == nil {
		r = Resources{}
	}
	for k, v := range o {
		r[k] = AddAmounts(r[k], v)
	}
	return r
}

// Sub subtracts o from r in place, dropping classes that reach zero.
func (r Resources) Sub(o Resources) Resources {
	if r == nil {
		r = Resources{}
	}
	for k, v := range o {
		r[k] -= v
		if r[k] == 0 {
			delete(r, k)
		}
	}
	return r
}

// Equal reports whether r and o hold the same non-zero amounts.
func (r Resources) Equal(o Resources) bool {
	for k, v := range r {
		if v != 0 && o[k] != v {
			return false
		}
	}
	for k, v := range o {
		if v != 0 && r[k] != v {
			return false
		}
	}
	return true
}

// String renders r as "DISK_GB:20,MEMORY_MB:2048,VCPU:1" (sorted by class).
func (r Resources) String() string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%d", k, r[ResourceClass(k)])
	}
	return b.String()
}

// ParseResources parses Placement's query form "VCPU:2,MEMORY_MB:4096".
func ParseResources(s string) (Resources, error) {
	out := Resources{}
	if strings.TrimSpace(s) == "" {
		return nil, invalidf("empty resources string")
	}
	for _, part := range strings.Split(s, ",") {
		name, amount, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, invalidf("resources %q: %q is not CLASS:AMOUNT", s, part)
		}
		rc := ResourceClass(name)
		if err := rc.Validate(); err != nil {
			return nil, err
		}
		var n int64
		if _, err := fmt.Sscanf(amount, "%d", &n); err != nil || n < 1 || fmt.Sprint(n) != amount {
			return nil, invalidf("resources %q: amount %q of %s must be a positive integer", s, amount, rc)
		}
		if _, dup := out[rc]; dup {
			return nil, invalidf("resources %q: %s given twice", s, rc)
		}
		out[rc] = n
	}
	return out, nil
}
