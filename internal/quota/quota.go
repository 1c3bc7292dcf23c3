// Package quota is keel's compute quotas, as Nova's: per-project limits on
// instances, cores, ram, metadata_items, server_groups and
// server_group_members (and the limits Nova lists but keel has nothing to
// count for: key_pairs, injected files, and before microversion 2.36
// floating_ips, fixed_ips, security_groups and security_group_rules).
//
// A project's limit for a resource is its own (os-quota-sets PUT), else
// the default quota class's (os-quota-class-sets/default PUT), else
// Defaults; -1 means unlimited. Limits live in the store, so every keel
// server replica enforces the same ones.
//
// Usage is counted, never kept: an instance counts until its record is
// deleted, with its flavor's vcpus and ram (Nova's default,
// count_usage_from_placement = False: a boot counts from the moment its
// record exists, before the scheduler has claimed anything in placement).
//
// Race safety: Enforcer.AdmitBoot runs after the instance's record is
// written and counts every record of the project, the new one included.
// Of two boots racing on one project (on one replica or two), each writes
// its record and then counts; the later count of the two sees both
// records, so at most one of two boots that together exceed a limit is
// admitted (both may be refused, as Nova's recheck may refuse both). The
// store's reads see every committed write (SQLite, PostgreSQL read
// committed, the memory store's lock), which is all this needs.
// Enforcer.AdmitResize does the same for a resize: the instance's record
// counts the larger flavor (ResizeFlavor) before the count is taken, so
// of two resizes (or a resize and a boot) that together exceed a limit,
// at most one is admitted.
package quota

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"keel/internal/records"
	"keel/internal/store"
)

// The quota names, Nova's.
const (
	Instances          = "instances"
	Cores              = "cores"
	RAM                = "ram"
	MetadataItems      = "metadata_items"
	KeyPairs           = "key_pairs"
	ServerGroups       = "server_groups"
	ServerGroupMembers = "server_group_members"
	InjectedFiles      = "injected_files"
	InjectedFileBytes  = "injected_file_content_bytes"
	InjectedPathBytes  = "injected_file_path_bytes"
	FloatingIPs        = "floating_ips"
	FixedIPs           = "fixed_ips"
	SecurityGroups     = "security_groups"
	SecurityGroupRules = "security_group_rules"
)

// Limits maps quota names to limits (-1: unlimited).
type Limits map[string]int64

// Counted reports whether any of the limits that counting instances
// checks (instances, cores, ram) is set. When none is (the admin
// project's default), a check passes without reading the instance
// records: each boot of 10,000 at once reading all of them made the
// scale test quadratic.
func (l Limits) Counted() bool {
	return l[Instances] >= 0 || l[Cores] >= 0 || l[RAM] >= 0
}

// Defaults are Nova's default quotas, the limits of a project that has
// none of its own when the default class sets none either.
var Defaults = Limits{
	Instances: 10, Cores: 20, RAM: 51200, MetadataItems: 128, KeyPairs: 100,
	ServerGroups: 10, ServerGroupMembers: 10,
	InjectedFiles: 5, InjectedFileBytes: 10240, InjectedPathBytes: 255,
	FloatingIPs: 10, FixedIPs: -1, SecurityGroups: 10, SecurityGroupRules: 20,
}

// Names lists the quotas shown at microversion minor (2.minor), in
// Nova's order: 2.36 drops the network ones, 2.57 the injected files.
func Names(minor int) []string {
	out := []string{Instances, Cores, RAM, MetadataItems, KeyPairs, ServerGroups, ServerGroupMembers}
	if minor < 57 {
		out = append(out, InjectedFiles, InjectedFileBytes, InjectedPathBytes)
	}
	if minor < 36 {
		out = append(out, FloatingIPs, FixedIPs, SecurityGroups, SecurityGroupRules)
	}
	return out
}

// Known reports whether name is a quota keel knows.
func Known(name string) bool {
	_, ok := Defaults[name]
	return ok
}

// ClassLimits are the default class's limits: Defaults overlaid with the
// class's own.
func ClassLimits(ctx context.Context, st store.Quotas) (Limits, error) {
	class, err := st.GetQuotaLimits(ctx, "")
	if err != nil {
		return nil, err
	}
	out := Limits{}
	for k, v := range Defaults {
		out[k] = v
	}
	for k, v := range class {
		if Known(k) {
			out[k] = v
		}
	}
	return out, nil
}

// ProjectLimits are the limits in force for project.
func ProjectLimits(ctx context.Context, st store.Quotas, project string) (Limits, error) {
	out, err := ClassLimits(ctx, st)
	if err != nil {
		return nil, err
	}
	own, err := st.GetQuotaLimits(ctx, project)
	if err != nil {
		return nil, err
	}
	for k, v := range own {
		if Known(k) {
			out[k] = v
		}
	}
	return out, nil
}

// Usage is what a project holds, or what a request asks for.
type Usage struct {
	Instances, Cores, RAM int64
}

func (u Usage) get(name string) int64 {
	switch name {
	case Instances:
		return u.Instances
	case Cores:
		return u.Cores
	case RAM:
		return u.RAM
	}
	return 0
}

// Of is what one instance counts for: its flavor's vcpus and ram, and
// while it is resized the larger of its two flavors' (ResizeFlavor), so a
// resize counts its growth from the moment it is recorded until it is
// confirmed or reverted.
func Of(in records.Instance) Usage {
	u := Usage{Instances: 1, Cores: in.Flavor.VCPUs, RAM: in.Flavor.RAMMB}
	if f := in.ResizeFlavor; f != nil {
		u.Cores, u.RAM = max(u.Cores, f.VCPUs), max(u.RAM, f.RAMMB)
	}
	return u
}

// Growth is what a resize from old to new adds to the count: the cores
// and ram the new flavor has beyond the old one's.
func Growth(old, new records.Flavor) Usage {
	return Usage{Cores: max(0, new.VCPUs-old.VCPUs), RAM: max(0, new.RAMMB-old.RAMMB)}
}

// Count adds up the instances of project.
func Count(ins []records.Instance, project string) Usage {
	var u Usage
	for _, in := range ins {
		if in.ProjectID == project {
			o := Of(in)
			u.Instances += o.Instances
			u.Cores += o.Cores
			u.RAM += o.RAM
		}
	}
	return u
}

// ErrExceeded is what every quota refusal wraps (errors.Is).
var ErrExceeded = errors.New("quota exceeded")

// ExceededError is a request over one or more limits; its text is Nova's.
type ExceededError struct {
	// Overs are the quotas exceeded, in Names order; the other slices are
	// parallel to it.
	Overs           []string
	Requested, Used []int64
	Allowed         []int64
	custom          string
}

func (e *ExceededError) Error() string {
	if e.custom != "" {
		return e.custom
	}
	join := func(v []int64) string {
		s := make([]string, len(v))
		for i, n := range v {
			s[i] = fmt.Sprint(n)
		}
		return strings.Join(s, ", ")
	}
	overs := strings.Join(e.Overs, ", ")
	return fmt.Sprintf("Quota exceeded for %s: Requested %s, but already used %s of %s %s",
		overs, join(e.Requested), join(e.Used), join(e.Allowed), overs)
}

// Is makes errors.Is(err, ErrExceeded) true.
func (e *ExceededError) Is(target error) bool { return target == ErrExceeded }

// Check refuses req on top of used where it passes a limit of lim.
func Check(lim Limits, used, req Usage) error {
	var e ExceededError
	for _, name := range []string{Instances, Cores, RAM} {
		l, r := lim[name], req.get(name)
		if l < 0 || r == 0 {
			continue
		}
		if u := used.get(name); u+r > l {
			e.Overs = append(e.Overs, name)
			e.Requested, e.Used, e.Allowed = append(e.Requested, r), append(e.Used, u), append(e.Allowed, l)
		}
	}
	if len(e.Overs) == 0 {
		return nil
	}
	return &e
}

// Fit is how many of n instances of one flavor (each counting for one)
// fit in lim on top of used.
func Fit(lim Limits, used, one Usage, n int) int {
	for k := n; k > 0; k-- {
		req := Usage{Instances: one.Instances * int64(k), Cores: one.Cores * int64(k), RAM: one.RAM * int64(k)}
		if Check(lim, used, req) == nil {
			return k
		}
	}
	return 0
}

// Refusal is a quota error with a text of its own (Nova's words for
// metadata items and server groups).
func Refusal(msg string) error { return &ExceededError{custom: msg} }

// Store is what an Enforcer reads: the limits and the instances it counts.
type Store interface {
	store.Quotas
	store.Instances
}

// Enforcer counts and checks a project's usage in a store.
type Enforcer struct {
	Store Store
}

// Usage counts project's instances in the store (only that project's are
// read).
func (e Enforcer) Usage(ctx context.Context, project string) (Usage, error) {
	ins, err := e.Store.ListProjectInstances(ctx, project)
	if err != nil {
		return Usage{}, fmt.Errorf("counting the instances of project %s: %w", project, err)
	}
	return Count(ins, project), nil
}

// countedUsage reads project's limits and, when they limit anything
// counted (Limits.Counted), its usage; counted is false (and nothing is
// read) otherwise.
func (e Enforcer) countedUsage(ctx context.Context, project string) (Limits, Usage, bool, error) {
	lim, err := ProjectLimits(ctx, e.Store, project)
	if err != nil {
		return nil, Usage{}, false, fmt.Errorf("reading the quotas of project %s: %w", project, err)
	}
	if !lim.Counted() {
		return lim, Usage{}, false, nil
	}
	total, err := e.Usage(ctx, project)
	return lim, total, err == nil, err
}

// AdmitBoot is the race-safe check of a boot: call it once inst's record
// is in the store and before anything is claimed for it; on an error
// (wrapping ErrExceeded when over quota) delete the record and fail the
// boot. The count includes inst itself.
func (e Enforcer) AdmitBoot(ctx context.Context, inst records.Instance) error {
	lim, total, counted, err := e.countedUsage(ctx, inst.ProjectID)
	if err != nil || !counted {
		return err
	}
	req := Of(inst)
	used := Usage{Instances: total.Instances - req.Instances, Cores: total.Cores - req.Cores, RAM: total.RAM - req.RAM}
	return Check(lim, used, req)
}

// AdmitResize is the race-safe check of a resize, as AdmitBoot's of a
// boot: call it once inst's record carries the new flavor as its
// ResizeFlavor (so the count includes the growth) and before anything is
// claimed; on an error clear ResizeFlavor and refuse the resize. Only the
// growth is checked (Nova checks a resize's cores and ram deltas): a
// resize that grows nothing is admitted.
func (e Enforcer) AdmitResize(ctx context.Context, inst records.Instance) error {
	if inst.ResizeFlavor == nil {
		return nil
	}
	add := Growth(inst.Flavor, *inst.ResizeFlavor)
	if add.Cores == 0 && add.RAM == 0 {
		return nil
	}
	lim, total, counted, err := e.countedUsage(ctx, inst.ProjectID)
	if err != nil || !counted {
		return err
	}
	used := Usage{Cores: total.Cores - add.Cores, RAM: total.RAM - add.RAM}
	return Check(lim, used, add)
}

// GroupMembersLimit is the most members a server group of project may
// have (-1: unlimited).
func (e Enforcer) GroupMembersLimit(ctx context.Context, project string) (int64, error) {
	lim, err := ProjectLimits(ctx, e.Store, project)
	if err != nil {
		return 0, fmt.Errorf("reading the quotas of project %s: %w", project, err)
	}
	return lim[ServerGroupMembers], nil
}

// GroupMembersExceeded is Nova's refusal of one member too many.
func GroupMembersExceeded() error { return Refusal("Quota exceeded, too many servers in group") }
