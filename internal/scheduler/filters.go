package scheduler

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"keel/internal/placement"
)

// Filter is one host predicate. Active says whether the filter has anything
// to check for this request (inactive filters are skipped for every host);
// Fits decides on the HostState (the reference; the decision's hot loop
// may read the dense row instead, see FilterSpec); Why explains a
// rejection.
type Filter interface {
	Name() string
	Active(r *Request) bool
	Fits(h *HostState, r *Request) bool
	Why(h *HostState, r *Request) string
}

// resourceFilter is Placement's check, on the view's allocations.
type resourceFilter struct{}

var resourceFilterSpec = FilterSpec{
	Name: "ResourceFilter", Always: true, row: rowResources,
	New:   func(Config) Filter { return resourceFilter{} },
	Reads: "the request fits the host's inventories given its allocations (placement's rule), and the host has the traits it asks for; with granular groups, provider trees or sharing providers, placement's candidate search finds the host's tree a candidate",
}

var _ Filter = resourceFilter{}

func (resourceFilter) Name() string         { return "ResourceFilter" }
func (resourceFilter) Active(*Request) bool { return true }
func (resourceFilter) Fits(h *HostState, r *Request) bool {
	if r.tree {
		return r.allocs[h] != nil
	}
	for i := 0; i < numStd; i++ {
		if !r.hasStd[i] {
			continue
		}
		inv := &h.inv[i]
		if !h.hasInv[i] || !placement.Admits(r.std[i], h.capacity[i]-h.used[i], inv.MinUnit, inv.MaxUnit, inv.StepSize) {
			return false
		}
	}
	return (r.other == nil || placement.Fits(h.Name, h.otherInv, h.other, r.other) == nil) &&
		(r.traits.Empty() || r.traits.Match(h.Traits))
}
func (resourceFilter) Why(h *HostState, r *Request) string {
	if r.tree {
		if r.allocs[h] != nil {
			return ""
		}
		return "no allocation candidate in its provider tree (or the providers it shares with) for " + r.query.String()
	}
	if err := placement.Fits(h.Name, h.Inventories(), h.Used(), r.unnamed); err != nil {
		var ce *placement.CapacityError
		if asCapacity(err, &ce) {
			return fmt.Sprintf("%s: %s (requested %d, used %d of %d)", ce.Class, ce.Reason, ce.Requested, ce.Used, ce.Capacity)
		}
		return err.Error()
	}
	for _, g := range r.traits.Required {
		if !(placement.TraitQuery{Required: [][]string{g}}).Match(h.Traits) {
			return "lacks required trait " + strings.Join(g, " or ")
		}
	}
	for _, f := range r.traits.Forbidden {
		if (placement.TraitQuery{Required: [][]string{{f}}}).Match(h.Traits) {
			return "has forbidden trait " + f
		}
	}
	return ""
}

// computeFilter passes hosts whose service is enabled and up.
type computeFilter struct {
	down time.Duration
}

var computeFilterSpec = FilterSpec{
	Name: "ComputeFilter", Default: true, row: rowService,
	New:   func(c Config) Filter { return computeFilter{down: c.ServiceDownTime} },
	Reads: "the host's service is enabled, not forced down and heard from within service_down_time",
}

func (computeFilter) Name() string         { return "ComputeFilter" }
func (computeFilter) Active(*Request) bool { return true }
func (f computeFilter) Fits(h *HostState, r *Request) bool {
	return h.HasService && !h.Disabled && !h.ForcedDown && heardFrom(r.now.UnixNano()-h.LastSeenUp.UnixNano(), int64(f.down))
}

// heardFrom is Nova's service_is_up on the heartbeat's age: up when it is
// within service_down_time either way (a heartbeat stamped in the future by
// a skewed clock counts as much as one in the past); down <= 0 disables
// the check.
func heardFrom(age, down int64) bool {
	return down <= 0 || (age <= down && -age <= down)
}
func (f computeFilter) Why(h *HostState, r *Request) string {
	switch {
	case !h.HasService:
		return "no compute service record"
	case h.Disabled:
		return "service disabled"
	case h.ForcedDown:
		return "service forced down"
	default:
		return fmt.Sprintf("service down: last seen %s ago (service_down_time %s)", r.now.Sub(h.LastSeenUp).Round(time.Second), f.down)
	}
}

// zoneFilter passes a host whose zone is the requested one. A host in an
// aggregate with availability_zone metadata is in the zones its aggregates
// name (as Nova's filter reads them); any other host is in its service's
// zone (keel's stand-in for Nova's default_availability_zone).
type zoneFilter struct{}

var zoneFilterSpec = FilterSpec{
	Name: "AvailabilityZoneFilter", Default: true,
	New:   func(Config) Filter { return zoneFilter{} },
	Reads: "the host is in the requested availability zone (its aggregates', else its service's)",
}

func (zoneFilter) Name() string           { return "AvailabilityZoneFilter" }
func (zoneFilter) Active(r *Request) bool { return r.Zone != "" }
func (zoneFilter) Fits(h *HostState, r *Request) bool {
	if azs, ok := h.AggregateMetadata[ZoneKey]; ok {
		return contains(azs, r.Zone)
	}
	return h.Zone == r.Zone
}
func (zoneFilter) Why(h *HostState, r *Request) string {
	if azs, ok := h.AggregateMetadata[ZoneKey]; ok {
		return fmt.Sprintf("host's aggregates put it in zone(s) %q, request wants %q", azs, r.Zone)
	}
	return fmt.Sprintf("host is in zone %q, request wants %q", h.Zone, r.Zone)
}

// ZoneKey is the aggregate metadata key that sets its hosts' availability
// zone.
const ZoneKey = "availability_zone"

// capabilitiesFilter matches "capabilities:KEY" extra specs against the
// host's capabilities.
type capabilitiesFilter struct{}

var capabilitiesFilterSpec = FilterSpec{
	Name: "ComputeCapabilitiesFilter", Default: true,
	New:   func(Config) Filter { return capabilitiesFilter{} },
	Reads: "the flavor's capabilities:KEY extra specs against the host's capabilities",
}

func (capabilitiesFilter) Name() string { return "ComputeCapabilitiesFilter" }
func (capabilitiesFilter) Active(r *Request) bool {
	return hasScope(r.ExtraSpecs, "capabilities:")
}
func (f capabilitiesFilter) Fits(h *HostState, r *Request) bool { return f.Why(h, r) == "" }
func (capabilitiesFilter) Why(h *HostState, r *Request) string {
	for k, want := range r.ExtraSpecs {
		key, ok := strings.CutPrefix(k, "capabilities:")
		if !ok {
			continue
		}
		have, ok := h.Capabilities[key]
		if !ok || !matchSpec(have, want) {
			return fmt.Sprintf("capability %s is %q, flavor wants %q", key, have, want)
		}
	}
	return ""
}

// imagePropsFilter matches image properties against host capabilities.
type imagePropsFilter struct{}

var imagePropsFilterSpec = FilterSpec{
	Name: "ImagePropertiesFilter", Default: true,
	New:   func(Config) Filter { return imagePropsFilter{} },
	Reads: "the image's hw_architecture, img_hv_type and hw_vm_mode against the host's capabilities",
}

var imagePropCapability = map[string]string{
	"hw_architecture": "cpu_info.arch",
	"img_hv_type":     "hypervisor_type",
	"hw_vm_mode":      "vm_mode",
}

func (imagePropsFilter) Name() string { return "ImagePropertiesFilter" }
func (imagePropsFilter) Active(r *Request) bool {
	for k := range r.ImageProps {
		if _, ok := imagePropCapability[k]; ok {
			return true
		}
	}
	return false
}
func (f imagePropsFilter) Fits(h *HostState, r *Request) bool { return f.Why(h, r) == "" }
func (imagePropsFilter) Why(h *HostState, r *Request) string {
	for prop, cap := range imagePropCapability {
		want, ok := r.ImageProps[prop]
		if !ok {
			continue
		}
		if have, ok := h.Capabilities[cap]; ok && !strings.EqualFold(have, want) {
			return fmt.Sprintf("image %s=%s, host %s=%s", prop, want, cap, have)
		}
	}
	return ""
}

type antiAffinityFilter struct{}

var antiAffinityFilterSpec = FilterSpec{
	Name: "ServerGroupAntiAffinityFilter", Default: true,
	New:   func(Config) Filter { return antiAffinityFilter{} },
	Reads: "fewer than max_server_per_host members of the request's anti-affinity group on the host",
}

func (antiAffinityFilter) Name() string { return "ServerGroupAntiAffinityFilter" }
func (antiAffinityFilter) Active(r *Request) bool {
	return r.Group != nil && r.Group.Policy == "anti-affinity"
}
func (antiAffinityFilter) Fits(h *HostState, r *Request) bool {
	return r.Group.Allows(h.Name)
}
func (antiAffinityFilter) Why(h *HostState, r *Request) string {
	return fmt.Sprintf("anti-affinity: %d group members already on host (max_server_per_host %d)", r.Group.Members[h.Name], maxPerHost(r.Group))
}

func maxPerHost(g *Group) int {
	if g.MaxServerPerHost > 0 {
		return g.MaxServerPerHost
	}
	return 1
}

type affinityFilter struct{}

var affinityFilterSpec = FilterSpec{
	Name: "ServerGroupAffinityFilter", Default: true,
	New:   func(Config) Filter { return affinityFilter{} },
	Reads: "the request's affinity group has members on the host, or none placed yet",
}

func (affinityFilter) Name() string { return "ServerGroupAffinityFilter" }
func (affinityFilter) Active(r *Request) bool {
	return r.Group != nil && r.Group.Policy == "affinity" && len(r.Group.Members) > 0
}
func (affinityFilter) Fits(h *HostState, r *Request) bool { return r.Group.Allows(h.Name) }
func (affinityFilter) Why(*HostState, *Request) string {
	return "affinity: the group's members are on other hosts"
}

type sameHostFilter struct{}

var sameHostFilterSpec = FilterSpec{
	Name:  "SameHostFilter",
	New:   func(Config) Filter { return sameHostFilter{} },
	Reads: "the host holds an instance the same_host hint names",
}

func (sameHostFilter) Name() string                       { return "SameHostFilter" }
func (sameHostFilter) Active(r *Request) bool             { return r.SameHost != nil }
func (sameHostFilter) Fits(h *HostState, r *Request) bool { return contains(r.SameHost, h.Name) }
func (sameHostFilter) Why(*HostState, *Request) string {
	return "same_host: none of the named instances is on this host"
}

type differentHostFilter struct{}

var differentHostFilterSpec = FilterSpec{
	Name:  "DifferentHostFilter",
	New:   func(Config) Filter { return differentHostFilter{} },
	Reads: "the host holds no instance the different_host hint names",
}

func (differentHostFilter) Name() string           { return "DifferentHostFilter" }
func (differentHostFilter) Active(r *Request) bool { return len(r.DifferentHost) > 0 }
func (differentHostFilter) Fits(h *HostState, r *Request) bool {
	return !contains(r.DifferentHost, h.Name)
}
func (differentHostFilter) Why(*HostState, *Request) string {
	return "different_host: a named instance is on this host"
}

// aggregateSpecsFilter matches unscoped and
// "aggregate_instance_extra_specs:" extra specs against aggregate metadata.
type aggregateSpecsFilter struct{}

var aggregateSpecsFilterSpec = FilterSpec{
	Name:  "AggregateInstanceExtraSpecsFilter",
	New:   func(Config) Filter { return aggregateSpecsFilter{} },
	Reads: "the flavor's unscoped and aggregate_instance_extra_specs: extra specs against the host's aggregates' metadata",
}

func (aggregateSpecsFilter) Name() string { return "AggregateInstanceExtraSpecsFilter" }
func (aggregateSpecsFilter) Active(r *Request) bool {
	for k := range r.ExtraSpecs {
		if _, ok := aggregateSpecKey(k); ok {
			return true
		}
	}
	return false
}
func (f aggregateSpecsFilter) Fits(h *HostState, r *Request) bool { return f.Why(h, r) == "" }
func (aggregateSpecsFilter) Why(h *HostState, r *Request) string {
	for k, want := range r.ExtraSpecs {
		key, ok := aggregateSpecKey(k)
		if !ok {
			continue
		}
		vals := h.AggregateMetadata[key]
		matched := false
		for _, v := range vals {
			if matchSpec(v, want) {
				matched = true
				break
			}
		}
		if !matched {
			return fmt.Sprintf("no aggregate of the host has %s matching %q", key, want)
		}
	}
	return ""
}

func aggregateSpecKey(k string) (string, bool) {
	if key, ok := strings.CutPrefix(k, "aggregate_instance_extra_specs:"); ok {
		return key, true
	}
	if !strings.Contains(k, ":") {
		return k, true
	}
	return "", false
}

type numInstancesFilter struct{ max int64 }

var numInstancesFilterSpec = FilterSpec{
	Name: "NumInstancesFilter",
	Options: []Option{{Name: "max_instances_per_host", Default: 50, Integer: true, HasMin: true, Min: 1,
		Help: "NumInstancesFilter skips hosts with this many instances or more."}},
	New:   func(c Config) Filter { return numInstancesFilter{max: int64(c.Option("max_instances_per_host"))} },
	Reads: "fewer than max_instances_per_host instances on the host (host record)",
}

func (numInstancesFilter) Name() string         { return "NumInstancesFilter" }
func (numInstancesFilter) Active(*Request) bool { return true }
func (f numInstancesFilter) Fits(h *HostState, _ *Request) bool {
	return h.NumInstances < f.max
}
func (f numInstancesFilter) Why(h *HostState, _ *Request) string {
	return fmt.Sprintf("%d instances, max_instances_per_host %d", h.NumInstances, f.max)
}

type ioOpsFilter struct{ max int64 }

var ioOpsFilterSpec = FilterSpec{
	Name: "IoOpsFilter",
	Options: []Option{{Name: "max_io_ops_per_host", Default: 8, Integer: true, HasMin: true, Min: 0,
		Help: "IoOpsFilter skips hosts with this many I/O-heavy operations in flight or more."}},
	New:   func(c Config) Filter { return ioOpsFilter{max: int64(c.Option("max_io_ops_per_host"))} },
	Reads: "fewer than max_io_ops_per_host I/O-heavy operations in flight on the host (host record)",
}

func (ioOpsFilter) Name() string                         { return "IoOpsFilter" }
func (ioOpsFilter) Active(*Request) bool                 { return true }
func (f ioOpsFilter) Fits(h *HostState, _ *Request) bool { return h.NumIOOps < f.max }
func (f ioOpsFilter) Why(h *HostState, _ *Request) string {
	return fmt.Sprintf("%d I/O-heavy operations, max_io_ops_per_host %d", h.NumIOOps, f.max)
}

func hasScope(specs map[string]string, prefix string) bool {
	for k := range specs {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// specOps are Nova's extra-spec operators (nova/scheduler/filters/
// extra_specs_ops.py): each compares a host's value with the operator's
// argument.
var specOps = map[string]func(have string, args []string) bool{
	"=":        numOp(func(a, b float64) bool { return a >= b }),
	">=":       numOp(func(a, b float64) bool { return a >= b }),
	"==":       numOp(func(a, b float64) bool { return a == b }),
	"!=":       numOp(func(a, b float64) bool { return a != b }),
	"<=":       numOp(func(a, b float64) bool { return a <= b }),
	"s==":      func(have string, args []string) bool { return have == args[0] },
	"s!=":      func(have string, args []string) bool { return have != args[0] },
	"s<":       func(have string, args []string) bool { return have < args[0] },
	"s<=":      func(have string, args []string) bool { return have <= args[0] },
	"s>":       func(have string, args []string) bool { return have > args[0] },
	"s>=":      func(have string, args []string) bool { return have >= args[0] },
	"<in>":     func(have string, args []string) bool { return strings.Contains(have, args[0]) },
	"<all-in>": allIn,
}

// numOp compares numerically; a value or argument that is not a number
// does not match (Nova raises and fails the request instead).
func numOp(cmp func(a, b float64) bool) func(string, []string) bool {
	return func(have string, args []string) bool {
		a, err1 := strconv.ParseFloat(strings.TrimSpace(have), 64)
		b, err2 := strconv.ParseFloat(args[0], 64)
		return err1 == nil && err2 == nil && cmp(a, b)
	}
}

func allIn(have string, args []string) bool {
	for _, w := range args {
		if !strings.Contains(have, w) {
			return false
		}
	}
	return true
}

// matchSpec evaluates one extra-spec requirement against a value as Nova
// does. The requirement is split into words; when the first is an
// operator, it applies to the second word only ("<all-in>" to every
// following word; "<or> A <or> B" compares whole words with the value);
// an operator without an argument matches nothing; anything else is plain
// string equality with the whole requirement.
func matchSpec(have, want string) bool {
	words := strings.Fields(want)
	if len(words) == 0 {
		return have == want
	}
	op, args := words[0], words[1:]
	if op == "<or>" {
		for len(args) > 0 {
			if args[0] == have {
				return true
			}
			args = args[1:]
			if len(args) == 0 {
				break
			}
			args = args[1:] // the next "<or>" (whatever the word is, as Nova)
		}
		return false
	}
	f, ok := specOps[op]
	if !ok {
		return have == want
	}
	return len(args) > 0 && f(have, args)
}

func asCapacity(err error, target **placement.CapacityError) bool { return errors.As(err, target) }
