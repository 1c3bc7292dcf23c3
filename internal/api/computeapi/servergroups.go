package computeapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"keel/internal/records"
)

// os-server-groups: groups of servers the scheduler keeps together or
// apart. Before 2.64 a group has a list of one policy; from 2.64 one
// policy and, for anti-affinity, the rule max_server_per_host. The soft
// policies exist from 2.15.

func (a *serverGroupsAPI) serverGroupRoutes(route routeFunc) {
	route("GET /compute/v2.1/os-server-groups", false, a.listServerGroups)
	route("POST /compute/v2.1/os-server-groups", false, a.createServerGroup)
	route("GET /compute/v2.1/os-server-groups/{id}", false, a.showServerGroup)
	route("DELETE /compute/v2.1/os-server-groups/{id}", false, a.deleteServerGroup)
}

func serverGroupView(r *http.Request, g records.ServerGroup) map[string]any {
	members := g.Members
	if members == nil {
		members = []string{}
	}
	v := map[string]any{"id": g.UUID, "name": g.Name, "members": members}
	if version(r).AtLeast(64) {
		rules := map[string]any{}
		if g.MaxServerPerHost > 0 {
			rules["max_server_per_host"] = g.MaxServerPerHost
		}
		v["policy"], v["rules"] = g.Policy, rules
	} else {
		v["policies"], v["metadata"] = []string{g.Policy}, map[string]any{}
	}
	if version(r).AtLeast(13) {
		v["project_id"], v["user_id"] = g.ProjectID, g.UserID
	}
	return v
}

// serverGroup loads a group the caller may see (its project's, or any for
// an admin).
func (a *base) serverGroup(r *http.Request, id string) (records.ServerGroup, error) {
	g, err := a.store.GetServerGroup(r.Context(), id)
	c := caller(r)
	if isNotFound(err) || (err == nil && !c.Admin && g.ProjectID != c.ProjectID) {
		return records.ServerGroup{}, notFoundf("Instance group %s could not be found.", id)
	}
	return g, err
}

func (a *serverGroupsAPI) listServerGroups(w http.ResponseWriter, r *http.Request) error {
	gs, err := a.store.ListServerGroups(r.Context())
	if err != nil {
		return err
	}
	c := caller(r)
	q := r.URL.Query()
	all := c.Admin && q.Has("all_projects") && !strings.EqualFold(q.Get("all_projects"), "false") && q.Get("all_projects") != "0"
	out := []any{}
	for _, g := range gs {
		if all || g.ProjectID == c.ProjectID {
			out = append(out, serverGroupView(r, g))
		}
	}
	offset, limit := 0, len(out)
	if s := q.Get("offset"); s != "" {
		if offset, err = strconv.Atoi(s); err != nil || offset < 0 {
			return badRequest("Invalid input for query parameters offset: " + s)
		}
	}
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 0 {
			return badRequest("Invalid input for query parameters limit: " + s)
		}
	}
	offset = min(offset, len(out))
	out = out[offset:min(len(out), offset+limit)]
	writeJSON(w, http.StatusOK, map[string]any{"server_groups": out})
	return nil
}

func (a *serverGroupsAPI) showServerGroup(w http.ResponseWriter, r *http.Request) error {
	g, err := a.serverGroup(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"server_group": serverGroupView(r, g)})
	return nil
}

func (a *serverGroupsAPI) deleteServerGroup(w http.ResponseWriter, r *http.Request) error {
	g, err := a.serverGroup(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := a.store.DeleteServerGroup(r.Context(), g.UUID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// policiesAt lists the policies a microversion accepts.
func policiesAt(r *http.Request) []string {
	ps := []string{records.PolicyAntiAffinity, records.PolicyAffinity}
	if version(r).AtLeast(15) {
		ps = append(ps, records.PolicySoftAntiAffinity, records.PolicySoftAffinity)
	}
	return ps
}

func (a *serverGroupsAPI) createServerGroup(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Group *struct {
			Name     *string                    `json:"name"`
			Policies []string                   `json:"policies"`
			Policy   *string                    `json:"policy"`
			Rules    map[string]json.RawMessage `json:"rules"`
		} `json:"server_group"`
	}
	if err := decodeStrict(r, &body); err != nil {
		return err
	}
	b := body.Group
	if b == nil {
		return badRequest("Invalid input for field/attribute server_group. Value: None. 'server_group' is a required property")
	}
	if err := checkAggregateName("name", b.Name, true); err != nil {
		return err
	}
	allowed := policiesAt(r)
	g := records.ServerGroup{UUID: uuid.NewString(), Name: *b.Name, ProjectID: caller(r).ProjectID, UserID: caller(r).UserID,
		Members: []string{}, CreatedAt: a.clock.Now()}
	if version(r).AtLeast(64) {
		if b.Policies != nil {
			return badRequest("Invalid input for field/attribute server_group. Additional properties are not allowed ('policies' was unexpected)")
		}
		if b.Policy == nil || !slices.Contains(allowed, *b.Policy) {
			return badRequest(fmt.Sprintf("Invalid input for field/attribute policy. 'policy' is required and must be one of %v", allowed))
		}
		g.Policy = *b.Policy
		for k, raw := range b.Rules {
			if k != "max_server_per_host" {
				return badRequest(fmt.Sprintf("Invalid input for field/attribute rules. Additional properties are not allowed (%q was unexpected)", k))
			}
			n, err := strconv.Atoi(string(raw))
			if err != nil || n < 1 {
				return badRequest("Invalid input for field/attribute max_server_per_host. Value: " + string(raw) + ". It must be an integer of at least 1")
			}
			if g.Policy != records.PolicyAntiAffinity {
				return badRequest("Only anti-affinity policy supports rules.")
			}
			g.MaxServerPerHost = n
		}
	} else {
		if b.Policy != nil || b.Rules != nil {
			return badRequest("Invalid input for field/attribute server_group. Additional properties are not allowed ('policy' and 'rules' need microversion 2.64)")
		}
		if len(b.Policies) != 1 || !slices.Contains(allowed, b.Policies[0]) {
			return badRequest(fmt.Sprintf("Invalid input for field/attribute policies. It must be a list of one of %v", allowed))
		}
		g.Policy = b.Policies[0]
	}
	g, err := a.store.CreateServerGroup(r.Context(), g)
	if err != nil {
		return err
	}
	if err := a.checkServerGroupQuota(r.Context(), g); err != nil {
		return errors.Join(err, a.store.DeleteServerGroup(r.Context(), g.UUID))
	}
	writeJSON(w, http.StatusOK, map[string]any{"server_group": serverGroupView(r, g)})
	return nil
}

// parseSchedulerHints reads a server create's os:scheduler_hints (or the
// older OS-SCH-HNT:scheduler_hints): group (a server group's UUID, which
// resolveGroup then looks up), same_host and different_host (an instance
// UUID or a list of them). Other hints are accepted and ignored, as by a
// Nova without their filters.
func parseSchedulerHints(raw json.RawMessage) (*records.SchedulerHints, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, badRequest("Invalid input for field/attribute os:scheduler_hints: " + err.Error())
	}
	h := &records.SchedulerHints{}
	if g, ok := body["group"]; ok {
		if err := json.Unmarshal(g, &h.Group); err != nil || uuid.Validate(h.Group) != nil {
			return nil, badRequest(fmt.Sprintf("Invalid input for field/attribute group. Value: %s. It is not a valid UUID", g))
		}
	}
	for key, dst := range map[string]*[]string{"same_host": &h.SameHost, "different_host": &h.DifferentHost} {
		v, ok := body[key]
		if !ok {
			continue
		}
		var one string
		var many []string
		if json.Unmarshal(v, &one) == nil {
			many = []string{one}
		} else if err := json.Unmarshal(v, &many); err != nil {
			return nil, badRequest(fmt.Sprintf("Invalid input for field/attribute %s. Value: %s. It must be an instance UUID or a list of them", key, v))
		}
		for _, u := range many {
			if uuid.Validate(u) != nil {
				return nil, badRequest(fmt.Sprintf("Invalid input for field/attribute %s. Value: %s. It is not a valid UUID", key, u))
			}
		}
		*dst = many
	}
	if h.Group == "" && h.SameHost == nil && h.DifferentHost == nil {
		return nil, nil
	}
	return h, nil
}

// resolveGroup replaces the hints' group by the server group the caller
// may use (its UUID as stored); an unknown group is a 400.
func (a *serversAPI) resolveGroup(r *http.Request, h *records.SchedulerHints) error {
	if h == nil || h.Group == "" {
		return nil
	}
	grp, err := a.serverGroup(r, h.Group)
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return badRequest(fmt.Sprintf("Invalid input: server group %s could not be found.", h.Group))
		}
		return err
	}
	h.Group = grp.UUID
	return nil
}

// serverGroupsOf is a server's server_groups field (2.71): the group it
// was booted into, if any.
func serverGroupsOf(in records.Instance) []string {
	if in.Hints != nil && in.Hints.Group != "" {
		return []string{in.Hints.Group}
	}
	return []string{}
}
