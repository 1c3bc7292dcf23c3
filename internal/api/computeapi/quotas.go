package computeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"

	"keel/internal/quota"
	"keel/internal/records"
)

// Nova's quotas (package quota): os-quota-sets, os-quota-class-sets and
// the limits document, and the checks the compute API makes itself
// (metadata items, server groups, the up-front check of a multi-create).
// The race-safe check of every boot is the conductor's (quota.Enforcer
// through conductor.Config.Quota).

func (a *quotasAPI) quotaRoutes(route func(string, bool, func(http.ResponseWriter, *http.Request) error)) {
	route("GET /compute/v2.1/os-quota-sets/{tenant}", false, a.showQuotaSet(false))
	route("GET /compute/v2.1/os-quota-sets/{tenant}/detail", false, a.showQuotaSet(true))
	route("GET /compute/v2.1/os-quota-sets/{tenant}/defaults", false, a.showQuotaDefaults)
	route("PUT /compute/v2.1/os-quota-sets/{tenant}", true, a.updateQuotaSet)
	route("DELETE /compute/v2.1/os-quota-sets/{tenant}", true, a.deleteQuotaSet)
	route("GET /compute/v2.1/os-quota-class-sets/{class}", false, a.showQuotaClass)
	route("PUT /compute/v2.1/os-quota-class-sets/{class}", true, a.updateQuotaClass)
	route("GET /compute/v2.1/limits", false, a.showLimits)
}

func (a *base) enforcer() quota.Enforcer { return quota.Enforcer{Store: a.store} }

// quotaTenant is the project a quota request names; members may only name
// their own.
func quotaTenant(r *http.Request) (string, error) {
	t := r.PathValue("tenant")
	if c := caller(r); !c.Admin && t != c.ProjectID {
		return "", forbidden("os_compute_api:os-quota-sets:show")
	}
	return t, nil
}

// quotaView is a quota set as Nova shows it at the request's microversion.
func quotaView(r *http.Request, lim quota.Limits, id string) map[string]any {
	out := map[string]any{}
	for _, name := range quota.Names(version(r).Minor) {
		out[name] = lim[name]
	}
	if id != "" {
		out["id"] = id
	}
	return out
}

// usageOf is what a project holds of each quota keel counts.
func (a *base) usageOf(ctx context.Context, project string) (map[string]int64, error) {
	u, err := a.enforcer().Usage(ctx, project)
	if err != nil {
		return nil, err
	}
	groups, err := a.store.ListServerGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("counting server groups: %w", err)
	}
	var n int64
	for _, g := range groups {
		if g.ProjectID == project {
			n++
		}
	}
	return map[string]int64{quota.Instances: u.Instances, quota.Cores: u.Cores, quota.RAM: u.RAM, quota.ServerGroups: n}, nil
}

func (a *quotasAPI) showQuotaSet(detail bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		t, err := quotaTenant(r)
		if err != nil {
			return err
		}
		lim, err := quota.ProjectLimits(r.Context(), a.store, t)
		if err != nil {
			return err
		}
		view := quotaView(r, lim, t)
		if detail {
			used, err := a.usageOf(r.Context(), t)
			if err != nil {
				return err
			}
			for _, name := range quota.Names(version(r).Minor) {
				view[name] = map[string]int64{"limit": lim[name], "in_use": used[name], "reserved": 0}
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"quota_set": view})
		return nil
	}
}

func (a *quotasAPI) showQuotaDefaults(w http.ResponseWriter, r *http.Request) error {
	lim, err := quota.ClassLimits(r.Context(), a.store)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"quota_set": quotaView(r, lim, r.PathValue("tenant"))})
	return nil
}

// decodeQuotaBody reads {"<wrapper>": {name: limit, …}} as Nova's schema
// does: known names only (at this microversion), integers (or integer
// strings) from -1 to 2^31-1, and for quota sets an optional boolean
// "force".
func decodeQuotaBody(r *http.Request, wrapper string, allowForce bool) (map[string]int64, bool, error) {
	var body map[string]map[string]json.RawMessage
	if err := decode(r, &body); err != nil {
		return nil, false, err
	}
	set, ok := body[wrapper]
	if !ok || len(body) != 1 {
		return nil, false, badRequest(fmt.Sprintf("Invalid input for field/attribute %s. '%s' is a required property", wrapper, wrapper))
	}
	names := map[string]bool{}
	for _, n := range quota.Names(version(r).Minor) {
		names[n] = true
	}
	out := map[string]int64{}
	force := false
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		raw := set[k]
		if k == "force" && allowForce {
			if err := json.Unmarshal(raw, &force); err != nil {
				return nil, false, badRequest(fmt.Sprintf("Invalid input for field/attribute force. Value: %s. %s is not of type 'boolean'", raw, raw))
			}
			continue
		}
		if !names[k] {
			return nil, false, badRequest(fmt.Sprintf("Invalid input for field/attribute %s. Additional properties are not allowed ('%s' was unexpected)", wrapper, k))
		}
		n, err := quotaValue(raw)
		if err != nil {
			return nil, false, badRequest(fmt.Sprintf("Invalid input for field/attribute %s. Value: %s. %s", k, raw, err))
		}
		out[k] = n
	}
	return out, force, nil
}

// quotaValue reads one limit: an integer, or a string of one, -1 … 2^31-1.
func quotaValue(raw json.RawMessage) (int64, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, err
	}
	var n int64
	switch x := v.(type) {
	case float64:
		if x != math.Trunc(x) {
			return 0, fmt.Errorf("%v is not of type 'integer', 'string'", x)
		}
		n = int64(x)
		if x < -1 || x > math.MaxInt32 {
			return 0, fmt.Errorf("%v is out of range -1 to %d", x, math.MaxInt32)
		}
	case string:
		p, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("'%s' does not match '^-?[0-9]+$'", x)
		}
		n = p
	default:
		return 0, fmt.Errorf("%s is not of type 'integer', 'string'", raw)
	}
	if n < -1 || n > math.MaxInt32 {
		return 0, fmt.Errorf("%d is out of range -1 to %d", n, math.MaxInt32)
	}
	return n, nil
}

func (a *quotasAPI) updateQuotaSet(w http.ResponseWriter, r *http.Request) error {
	t := r.PathValue("tenant")
	set, force, err := decodeQuotaBody(r, "quota_set", true)
	if err != nil {
		return err
	}
	if !force {
		used, err := a.usageOf(r.Context(), t)
		if err != nil {
			return err
		}
		for _, name := range quota.Names(version(r).Minor) {
			if v, ok := set[name]; ok && v >= 0 && v < used[name] {
				return badRequest(fmt.Sprintf("Quota limit %d for %s must be greater than or equal to already used and reserved %d.", v, name, used[name]))
			}
		}
	}
	if _, err := a.store.SetQuotaLimits(r.Context(), t, set); err != nil {
		return err
	}
	lim, err := quota.ProjectLimits(r.Context(), a.store, t)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"quota_set": quotaView(r, lim, "")})
	return nil
}

func (a *quotasAPI) deleteQuotaSet(w http.ResponseWriter, r *http.Request) error {
	if err := a.store.DeleteQuotaLimits(r.Context(), r.PathValue("tenant")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// keel keeps one quota class, Nova's "default": every other name shows
// the defaults and cannot be set.
const defaultQuotaClass = "default"

func (a *quotasAPI) showQuotaClass(w http.ResponseWriter, r *http.Request) error {
	lim, err := quota.ClassLimits(r.Context(), a.store)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"quota_class_set": quotaView(r, lim, r.PathValue("class"))})
	return nil
}

func (a *quotasAPI) updateQuotaClass(w http.ResponseWriter, r *http.Request) error {
	if c := r.PathValue("class"); c != defaultQuotaClass {
		return badRequest("keel has one quota class, 'default'; '" + c + "' cannot be set")
	}
	set, _, err := decodeQuotaBody(r, "quota_class_set", false)
	if err != nil {
		return err
	}
	if _, err := a.store.SetQuotaLimits(r.Context(), "", set); err != nil {
		return err
	}
	lim, err := quota.ClassLimits(r.Context(), a.store)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"quota_class_set": quotaView(r, lim, "")})
	return nil
}

// showLimits is GET /limits: the caller's project's limits (an admin may
// name another with ?tenant_id=) and what it uses.
func (a *quotasAPI) showLimits(w http.ResponseWriter, r *http.Request) error {
	project := caller(r).ProjectID
	if t := r.URL.Query().Get("tenant_id"); t != "" && caller(r).Admin {
		project = t
	}
	lim, err := quota.ProjectLimits(r.Context(), a.store, project)
	if err != nil {
		return err
	}
	used, err := a.usageOf(r.Context(), project)
	if err != nil {
		return err
	}
	abs := map[string]any{
		"maxTotalInstances": lim[quota.Instances], "maxTotalCores": lim[quota.Cores], "maxTotalRAMSize": lim[quota.RAM],
		"maxServerMeta": lim[quota.MetadataItems], "maxTotalKeypairs": lim[quota.KeyPairs],
		"maxServerGroups": lim[quota.ServerGroups], "maxServerGroupMembers": lim[quota.ServerGroupMembers],
		"totalInstancesUsed": used[quota.Instances], "totalCoresUsed": used[quota.Cores], "totalRAMUsed": used[quota.RAM],
		"totalServerGroupsUsed": used[quota.ServerGroups],
	}
	if !version(r).AtLeast(57) {
		abs["maxPersonality"], abs["maxPersonalitySize"] = lim[quota.InjectedFiles], lim[quota.InjectedFileBytes]
	}
	if !version(r).AtLeast(39) {
		abs["maxImageMeta"] = lim[quota.MetadataItems]
	}
	if !version(r).AtLeast(36) {
		abs["maxSecurityGroups"], abs["maxSecurityGroupRules"] = lim[quota.SecurityGroups], lim[quota.SecurityGroupRules]
		abs["maxTotalFloatingIps"], abs["totalFloatingIpsUsed"], abs["totalSecurityGroupsUsed"] = lim[quota.FloatingIPs], 0, 0
	}
	writeJSON(w, http.StatusOK, map[string]any{"limits": map[string]any{"rate": []any{}, "absolute": abs}})
	return nil
}

// checkMetadataQuota refuses more metadata items than the project may
// have, as Nova does (403).
func (a *base) checkMetadataQuota(ctx context.Context, project string, n int) error {
	if n == 0 {
		return nil
	}
	lim, err := quota.ProjectLimits(ctx, a.store, project)
	if err != nil {
		return err
	}
	if l := lim[quota.MetadataItems]; l >= 0 && int64(n) > l {
		return quota.Refusal(fmt.Sprintf("Quota exceeded for metadata_items: Requested %d, but already used 0 of %d metadata_items", n, l))
	}
	return nil
}

// fitCount is the up-front check of a create of min…max servers of
// flavor f: how many to boot (the most that fit, at least min), or Nova's
// 403 if not even min fit. Each boot is checked again, race-safely, by the
// conductor.
func (a *serversAPI) fitCount(ctx context.Context, project string, f records.Flavor, lo, hi int) (int, error) {
	lim, err := quota.ProjectLimits(ctx, a.store, project)
	if err != nil {
		return 0, err
	}
	if !lim.Counted() {
		return hi, nil
	}
	used, err := a.enforcer().Usage(ctx, project)
	if err != nil {
		return 0, err
	}
	one := quota.Usage{Instances: 1, Cores: f.VCPUs, RAM: f.RAMMB}
	if n := quota.Fit(lim, used, one, hi); n >= lo {
		return n, nil
	}
	req := quota.Usage{Instances: int64(lo), Cores: f.VCPUs * int64(lo), RAM: f.RAMMB * int64(lo)}
	return 0, quota.Check(lim, used, req)
}

// checkServerGroupQuota is run once a new group's record exists: it counts
// the project's groups, the new one included, so two racing creates
// cannot both take the last place; over the limit, the caller deletes
// the group.
func (a *serverGroupsAPI) checkServerGroupQuota(ctx context.Context, g records.ServerGroup) error {
	lim, err := quota.ProjectLimits(ctx, a.store, g.ProjectID)
	if err != nil {
		return err
	}
	l := lim[quota.ServerGroups]
	if l < 0 {
		return nil
	}
	used, err := a.usageOf(ctx, g.ProjectID)
	if err != nil {
		return err
	}
	if used[quota.ServerGroups] > l {
		return quota.Refusal("Quota exceeded, too many server groups.")
	}
	return nil
}

// quotaRefused reports whether err is a quota refusal.
func quotaRefused(err error) bool { return errors.Is(err, quota.ErrExceeded) }

// checkResizeQuota refuses a resize whose new flavor would take the
// project past its cores or ram quota (what it adds over the old flavor),
// before anything is written. The race-safe check is the conductor's
// (quota.Enforcer.AdmitResize, once the instance's record counts the
// larger flavor): of two resizes racing past the quota, both may pass
// this one, at most one passes that one.
func (a *serverActionsAPI) checkResizeQuota(ctx context.Context, in records.Instance, f records.Flavor) error {
	add := quota.Growth(in.Flavor, f)
	if add.Cores == 0 && add.RAM == 0 {
		return nil
	}
	lim, err := quota.ProjectLimits(ctx, a.store, in.ProjectID)
	if err != nil || !lim.Counted() {
		return err
	}
	used, err := a.enforcer().Usage(ctx, in.ProjectID)
	if err != nil {
		return err
	}
	return quota.Check(lim, used, add)
}
