// Package placementapi serves keel's store as the OpenStack Placement API
// (under /placement): the providers, inventories and usages the agents and
// the scheduler write, read through the shapes Placement clients expect.
//
// It serves the version document, resource providers (create, list with
// name/uuid/resources filters, show, delete), inventories (all at once),
// usages, project usages, allocations (per consumer, per provider, several
// consumers at once) and allocation candidates. Every write goes through
// the store's one decision (placement.PlanWrites): the same generation,
// unit and capacity checks as the scheduler's claims.
package placementapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"keel/internal/httproute"
	"keel/internal/placement"
	"keel/internal/requestid"
	"keel/internal/store"
)

// MaxMinor is the newest placement microversion keel answers (1.39, as
// Placement 8.0).
const MaxMinor = 39

// API is the placement HTTP handler.
type API struct {
	st      store.Store
	isAdmin func(*http.Request) bool
	mux     *http.ServeMux
}

// New returns the placement API over st. isAdmin tells whether the
// request's caller is an admin: as in Placement's default policy, every
// call but the version document is admin-only.
func New(st store.Store, isAdmin func(*http.Request) bool) *API {
	a := &API{st: st, isAdmin: isAdmin, mux: http.NewServeMux()}
	route := func(pattern string, h func(http.ResponseWriter, *http.Request, int) error) {
		a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			minor, err := negotiate(r)
			w.Header().Set("OpenStack-API-Version", "placement 1."+strconv.Itoa(minor))
			w.Header().Set("Vary", "OpenStack-API-Version")
			if err == nil && !a.isAdmin(r) {
				err = errorf(http.StatusForbidden, "Policy does not allow %s to be performed.", "placement:"+r.URL.Path)
			}
			if err == nil {
				err = h(w, r, minor)
			}
			if err != nil {
				writeError(w, err)
			}
		})
	}
	route("GET /placement/resource_providers", a.listProviders)
	route("GET /placement/resource_providers/{uuid}", a.showProvider)
	route("GET /placement/resource_providers/{uuid}/inventories", a.inventories)
	route("GET /placement/resource_providers/{uuid}/usages", a.providerUsages)
	route("GET /placement/usages", a.projectUsages)
	route("GET /placement/allocation_candidates", a.candidates)
	route("POST /placement/resource_providers", a.createProvider)
	route("DELETE /placement/resource_providers/{uuid}", a.deleteProvider)
	route("PUT /placement/resource_providers/{uuid}/inventories", a.putInventories)
	route("GET /placement/resource_providers/{uuid}/allocations", a.providerAllocations)
	route("GET /placement/allocations/{consumer}", a.consumerAllocations)
	route("PUT /placement/allocations/{consumer}", a.putAllocations)
	route("DELETE /placement/allocations/{consumer}", a.deleteAllocations)
	route("POST /placement/allocations", a.postAllocations)
	route("/placement/", func(http.ResponseWriter, *http.Request, int) error {
		return errorf(http.StatusNotFound, "The resource could not be found.")
	})
	return a
}

// ServeHTTP serves /placement: the version document at /placement and
// /placement/ (which needs no token: the caller mounts the rest behind
// one), everything else through the routes.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	requestid.Ensure(w)
	if strings.TrimSuffix(r.URL.Path, "/") == "/placement" {
		writeJSON(w, http.StatusOK, map[string]any{"versions": []any{map[string]any{
			"id": "v1.0", "min_version": "1.0", "max_version": "1." + strconv.Itoa(MaxMinor), "status": "CURRENT",
			"links": []any{map[string]any{"rel": "self", "href": ""}},
		}}})
		return
	}
	if miss, status, allow := httproute.Miss(a.mux, r); miss {
		if allow != "" {
			w.Header().Set("Allow", allow)
		}
		writeError(w, errorf(status, "The resource could not be found or does not take %s.", r.Method))
		return
	}
	a.mux.ServeHTTP(w, r)
}

// httpError is an error with Placement's status and error code.
type httpError struct {
	status int
	code   string
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &httpError{status: status, code: codeUndefined, msg: fmt.Sprintf(format, args...)}
}

// negotiate reads "OpenStack-API-Version: placement 1.N" (default 1.0,
// "latest" the newest).
func negotiate(r *http.Request) (int, error) {
	for _, v := range r.Header.Values("OpenStack-API-Version") {
		svc, ver, _ := strings.Cut(strings.TrimSpace(v), " ")
		if !strings.EqualFold(svc, "placement") {
			continue
		}
		ver = strings.TrimSpace(ver)
		if ver == "latest" {
			return MaxMinor, nil
		}
		major, minor, ok := strings.Cut(ver, ".")
		n, err := strconv.Atoi(minor)
		if !ok || major != "1" || err != nil || n < 0 || n > MaxMinor {
			return 0, &httpError{status: http.StatusNotAcceptable, code: codeUndefined,
				msg: fmt.Sprintf("Unacceptable version header: %s (this placement answers 1.0 to 1.%d)", ver, MaxMinor)}
		}
		return n, nil
	}
	return 0, nil
}

// writeError writes err in Placement's error shape, with the status and
// code Placement gives the store's typed errors.
func writeError(w http.ResponseWriter, err error) {
	writeFault(w, asHTTPError(err))
}

func asHTTPError(err error) *httpError {
	var he *httpError
	var inUse *placement.InUseError
	fault := func(status int, code, msg string) *httpError { return &httpError{status: status, code: code, msg: msg} }
	switch {
	case errors.As(err, &he):
		return he
	case placement.IsConflict(err):
		return fault(http.StatusConflict, codeConcurrentUpdate, err.Error())
	case errors.As(err, &inUse):
		return fault(http.StatusConflict, codeInventoryInUse, err.Error())
	case placement.IsCapacity(err):
		return fault(http.StatusConflict, codeUndefined, "Unable to allocate inventory: "+err.Error())
	case placement.IsInvalid(err):
		return fault(http.StatusBadRequest, codeUndefined, err.Error())
	case errors.Is(err, store.ErrExists):
		return fault(http.StatusConflict, codeDuplicateName, err.Error())
	case errors.Is(err, store.ErrNotFound):
		return fault(http.StatusNotFound, codeUndefined, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fault(http.StatusServiceUnavailable, codeUndefined, err.Error())
	}
	return fault(http.StatusInternalServerError, codeUndefined, "internal error: "+err.Error())
}

// Placement's error codes.
const (
	codeUndefined        = "placement.undefined_code"
	codeConcurrentUpdate = "placement.concurrent_update"
	codeInventoryInUse   = "placement.inventory.inuse"
	codeDuplicateName    = "placement.duplicate_name"
)

// WriteStatus writes a bare status and message in Placement's error shape
// (for the token check in front of the API).
func WriteStatus(w http.ResponseWriter, status int, msg string) {
	writeFault(w, &httpError{status: status, code: codeUndefined, msg: msg})
}

func writeFault(w http.ResponseWriter, he *httpError) {
	writeJSON(w, he.status, map[string]any{"errors": []any{map[string]any{
		"status": he.status, "title": http.StatusText(he.status), "detail": he.msg, "code": he.code,
		"request_id": requestid.Ensure(w),
	}}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (a *API) providerView(p placement.Provider, minor int) map[string]any {
	self := "/resource_providers/" + p.UUID
	links := []any{
		map[string]any{"rel": "self", "href": self},
		map[string]any{"rel": "inventories", "href": self + "/inventories"},
		map[string]any{"rel": "usages", "href": self + "/usages"},
	}
	v := map[string]any{"uuid": p.UUID, "name": p.Name, "generation": p.Generation, "links": links}
	if minor >= 14 {
		v["parent_provider_uuid"], v["root_provider_uuid"] = nil, p.UUID
	}
	return v
}

func (a *API) listProviders(w http.ResponseWriter, r *http.Request, minor int) error {
	q := r.URL.Query()
	want, err := parseResources(q.Get("resources"))
	if err != nil {
		return err
	}
	sums, err := a.st.ProviderSummaries(r.Context(), nil)
	if err != nil {
		return err
	}
	out := []any{}
	for _, s := range sortByName(sums) {
		if n := q.Get("name"); n != "" && n != s.Name {
			continue
		}
		if u := q.Get("uuid"); u != "" && u != s.UUID {
			continue
		}
		if len(want) > 0 && placement.Fits(s.UUID, s.Inventories, s.Usage, want) != nil {
			continue
		}
		out = append(out, a.providerView(s.Provider, minor))
	}
	writeJSON(w, http.StatusOK, map[string]any{"resource_providers": out})
	return nil
}

func (a *API) showProvider(w http.ResponseWriter, r *http.Request, minor int) error {
	p, err := a.provider(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a.providerView(p.Provider, minor))
	return nil
}

func (a *API) provider(r *http.Request) (store.ProviderSummary, error) {
	u := r.PathValue("uuid")
	sums, err := a.st.ProviderSummaries(r.Context(), []string{u})
	if err != nil {
		return store.ProviderSummary{}, err
	}
	if len(sums) == 0 {
		return store.ProviderSummary{}, errorf(http.StatusNotFound, "No resource provider with uuid %s found", u)
	}
	return sums[0], nil
}

func (a *API) inventories(w http.ResponseWriter, r *http.Request, _ int) error {
	p, err := a.provider(r)
	if err != nil {
		return err
	}
	invs := map[string]any{}
	for rc, inv := range p.Inventories {
		invs[string(rc)] = inv
	}
	writeJSON(w, http.StatusOK, map[string]any{"inventories": invs, "resource_provider_generation": p.Generation})
	return nil
}

func (a *API) providerUsages(w http.ResponseWriter, r *http.Request, _ int) error {
	p, err := a.provider(r)
	if err != nil {
		return err
	}
	usages := map[string]int64{}
	for rc := range p.Inventories {
		usages[string(rc)] = p.Usage[rc]
	}
	writeJSON(w, http.StatusOK, map[string]any{"usages": usages, "resource_provider_generation": p.Generation})
	return nil
}

// projectUsages is GET /usages?project_id=[&user_id=] (1.9): what a
// project's consumers hold, summed over every provider.
func (a *API) projectUsages(w http.ResponseWriter, r *http.Request, minor int) error {
	if minor < 9 {
		return errorf(http.StatusNotFound, "The resource could not be found.")
	}
	q := r.URL.Query()
	project, user := q.Get("project_id"), q.Get("user_id")
	if project == "" {
		return errorf(http.StatusBadRequest, "'project_id' is a required property")
	}
	sums, err := a.st.ProviderSummaries(r.Context(), nil)
	if err != nil {
		return err
	}
	// From 1.38 usages are grouped by consumer type, each with its
	// consumer_count; before, one flat sum.
	seen := map[string]bool{}
	flat := map[string]int64{}
	byType := map[string]map[string]int64{}
	for _, s := range sums {
		cs, err := a.st.ConsumersOn(r.Context(), s.UUID)
		if err != nil {
			return err
		}
		for _, c := range cs {
			if seen[c.UUID] || c.ProjectID != project || (user != "" && c.UserID != user) {
				continue
			}
			seen[c.UUID] = true
			t := byType[string(c.Type)]
			if t == nil {
				t = map[string]int64{}
				byType[string(c.Type)] = t
			}
			t["consumer_count"]++
			for _, res := range c.Allocations {
				for rc, n := range res {
					flat[string(rc)] += n
					t[string(rc)] += n
				}
			}
		}
	}
	if minor >= 38 {
		writeJSON(w, http.StatusOK, map[string]any{"usages": byType})
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]any{"usages": flat})
	return nil
}

// candidates is GET /allocation_candidates?resources=…[&limit=] (1.10):
// every provider the request fits on whole, as one allocation request each.
func (a *API) candidates(w http.ResponseWriter, r *http.Request, minor int) error {
	if minor < 10 {
		return errorf(http.StatusNotFound, "The resource could not be found.")
	}
	q := r.URL.Query()
	want, err := parseResources(q.Get("resources"))
	if err != nil {
		return err
	}
	if len(want) == 0 {
		return errorf(http.StatusBadRequest, "'resources' is a required query parameter")
	}
	limit := -1
	if l := q.Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 {
			return errorf(http.StatusBadRequest, "Invalid query string parameters: limit must be a positive integer, got %q", l)
		}
	}
	sums, err := a.st.ProviderSummaries(r.Context(), nil)
	if err != nil {
		return err
	}
	reqs, summaries := []any{}, map[string]any{}
	for _, s := range sortByName(sums) {
		if limit >= 0 && len(reqs) == limit {
			break
		}
		if placement.Fits(s.UUID, s.Inventories, s.Usage, want) != nil {
			continue
		}
		res := map[string]int64{}
		for rc, n := range want {
			res[string(rc)] = n
		}
		// 1.10 and 1.11 list the allocations; 1.12 keys them by provider.
		var allocs any = []any{map[string]any{"resource_provider": map[string]any{"uuid": s.UUID}, "resources": res}}
		if minor >= 12 {
			allocs = map[string]any{s.UUID: map[string]any{"resources": res}}
		}
		req := map[string]any{"allocations": allocs}
		if minor >= 34 {
			req["mappings"] = map[string]any{"": []string{s.UUID}}
		}
		reqs = append(reqs, req)
		classes := map[string]any{}
		caps := s.Capacities()
		for rc := range s.Inventories {
			classes[string(rc)] = map[string]int64{"capacity": caps[rc], "used": s.Usage[rc]}
		}
		sum := map[string]any{"resources": classes}
		if minor >= 17 {
			sum["traits"] = []string{}
		}
		if minor >= 29 {
			sum["parent_provider_uuid"], sum["root_provider_uuid"] = nil, s.UUID
		}
		summaries[s.UUID] = sum
	}
	writeJSON(w, http.StatusOK, map[string]any{"allocation_requests": reqs, "provider_summaries": summaries})
	return nil
}

// parseResources reads "VCPU:1,MEMORY_MB:512".
func parseResources(s string) (placement.Resources, error) {
	out := placement.Resources{}
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		rc, n, ok := strings.Cut(part, ":")
		v, err := strconv.ParseInt(n, 10, 64)
		if !ok || rc == "" || err != nil || v < 1 {
			return nil, errorf(http.StatusBadRequest, "Badly formed resources parameter. Expected resources query string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: %s.", s)
		}
		out[placement.ResourceClass(rc)] += v
	}
	return out, nil
}

func sortByName(sums []store.ProviderSummary) []store.ProviderSummary {
	sort.Slice(sums, func(i, j int) bool { return sums[i].Name < sums[j].Name })
	return sums
}
