package scheduler

import (
	"time"

	"keel/internal/placement"
)

// Group is the server group a request's instance belongs to.
type Group struct {
	// Policy is affinity, anti-affinity, soft-affinity or
	// soft-anti-affinity.
	Policy string
	// Members counts the group's other instances per host.
	Members map[string]int
	// MaxServerPerHost is the anti-affinity rule's limit (default 1).
	MaxServerPerHost int
}

// Allows reports whether the group's hard policy lets one more member on
// host: under anti-affinity while the host has fewer than
// max_server_per_host members, under affinity when no member is placed yet
// or some are on host; soft policies always allow (they only weigh). The
// group filters decide with it, and the conductor's late check after a
// claim asks it again.
func (g *Group) Allows(host string) bool {
	switch g.Policy {
	case "anti-affinity":
		return g.Members[host] < maxPerHost(g)
	case "affinity":
		return len(g.Members) == 0 || g.Members[host] > 0
	}
	return true
}

// Request is one placement request (Nova's RequestSpec, reduced to what the
// filters and weighers read).
type Request struct {
	InstanceUUID string
	// Flavor is the flavor's name, for messages only (a No valid host
	// names the `keel schedule explain --flavor …` that says why).
	Flavor    string
	Resources placement.Resources
	// ExtraSpecs are the flavor's extra specs (capabilities:…,
	// aggregate_instance_extra_specs:…, and the request groups Nova
	// builds from resources:CLASS=N, resourcesN:CLASS=N,
	// trait:NAME=required|forbidden, traitN:NAME=… and group_policy;
	// see placement.FlavorQuery).
	ExtraSpecs map[string]string
	// ImageProps are image properties (hw_architecture, img_hv_type,
	// hw_vm_mode, trait:NAME=required|forbidden).
	ImageProps map[string]string
	// Zone is the requested availability zone ("" for any).
	Zone string
	// IgnoreHosts are never chosen (a migration's source, hosts already
	// tried).
	IgnoreHosts []string
	// RequestedHost, when set, is the only host considered (it is still
	// filtered, unless Force is set).
	RequestedHost string
	Force         bool
	// SameHost / DifferentHost are the hosts of the instances named in the
	// same_host / different_host scheduler hints. A non-nil empty SameHost
	// (the hint named instances that are on no host) passes no host, as in
	// Nova.
	SameHost      []string
	DifferentHost []string
	Group         *Group
	// PickSeed, when not 0, seeds the host_subset_size pick: Select uses it
	// instead of drawing one (and reports the one it used in
	// Selection.PickSeed), and Explain names the host it picks.
	PickSeed uint64

	// Set by prepare at the start of each decision, read by the hot loop.
	std    [numStd]int64
	hasStd [numStd]bool
	other  placement.Resources
	traits placement.TraitQuery // from trait:NAME specs; checked with the resources
	now    time.Time
	// query is the request's placement groups (placement.FlavorQuery);
	// unnamed its unnamed group's resources, what a flat host is asked
	// for; queryErr a flavor Placement would refuse.
	query    placement.CandidateQuery
	unnamed  placement.Resources
	queryErr error
	// tree is set when the decision asks placement's candidate search
	// (granular groups, or a view with provider trees or sharing
	// providers); allocs then holds, per host that has a candidate, the
	// first candidate's allocation (provider UUID → resources).
	tree   bool
	allocs map[*HostState]map[string]placement.Resources
	// metrics are MetricsWeigher's settings when it weighs (nil
	// otherwise), metricsMult its multiplier; metricErr a required
	// metric a candidate lacks (the decision fails, as Nova's).
	metrics     *MetricsConfig
	metricsMult float64
	metricErr   error
}

// prepare caches what every host's checks read.
func (r *Request) prepare(now time.Time) {
	r.now = now
	r.metricErr = nil
	r.other = nil
	r.tree, r.allocs = false, nil
	r.query, r.queryErr = placement.FlavorQuery(r.Resources, r.ExtraSpecs, r.ImageProps)
	u, _ := r.query.Unnamed()
	r.unnamed, r.traits = u.Resources, u.Traits
	if r.unnamed == nil {
		r.unnamed = placement.Resources{}
	}
	for i := range r.std {
		r.std[i], r.hasStd[i] = 0, false
	}
	for rc, n := range r.unnamed {
		if i := stdIndex(rc); i >= 0 {
			r.std[i], r.hasStd[i] = n, true
			continue
		}
		if r.other == nil {
			r.other = placement.Resources{}
		}
		r.other[rc] = n
	}
}

func (r *Request) ignored(host string) bool {
	if r.RequestedHost != "" && host != r.RequestedHost {
		return true
	}
	for _, h := range r.IgnoreHosts {
		if h == host {
			return true
		}
	}
	return false
}
