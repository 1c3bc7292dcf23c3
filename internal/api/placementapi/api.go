// Package placementapi serves keel's store as the OpenStack Placement API
// (under /placement, microversions 1.0–1.39): the providers, inventories,
// traits, aggregates and allocations the agents and the scheduler write,
// read and written through the shapes Placement clients expect.
//
// It serves the version document; resource providers (create, list with
// name/uuid/member_of/resources/in_tree/required filters, show, update with
// parents, delete); inventories (all at once and per class); usages and
// project usages; traits and provider traits; resource classes; provider
// aggregates; allocations (per consumer in the 1.0 and 1.12 shapes, per
// provider, several consumers at once, consumer generations from 1.28 and
// types from 1.38) and allocation candidates. Every allocation write goes
// through the store's one decision (placement.PlanWrites): the same
// generation, unit and capacity checks as the scheduler's claims; every
// other write names the generation the store checks in its transaction.
//
// Reads of many providers (lists, candidates) come from a view that
// follows the store's change stream (view.go): each request asks the
// store for its newest change and re-reads only the providers changed
// since, so what the scheduler claimed a moment ago is already there.
package placementapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

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
	st      Store
	isAdmin func(*http.Request) bool
	mux     *http.ServeMux
	views   viewCache
	methods map[string][]string // route path → its methods, in Placement's order
}

// Store is what the placement API serves: placement's side of the store,
// and the change stream its candidate views follow.
type Store interface {
	store.Placement
	store.Changes
}

// New returns the placement API over st. isAdmin tells whether the
// request's caller is an admin: as in Placement's default policy, every
// call but the version document is admin-only.
func New(st Store, isAdmin func(*http.Request) bool) *API {
	a := &API{st: st, isAdmin: isAdmin, mux: http.NewServeMux(), methods: map[string][]string{}}
	a.views.src = st
	route := func(pattern string, h func(http.ResponseWriter, *http.Request, int) error) {
		method, path, _ := strings.Cut(pattern, " ")
		a.methods[path] = append(a.methods[path], method)
		a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			minor, _ := negotiate(r) // ServeHTTP refused a bad version
			var err error
			if !a.isAdmin(r) {
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
	// In the order of Placement's route table: a 405's Allow names a
	// path's methods in this order.
	route("GET /placement/resource_classes", a.listClasses)
	route("POST /placement/resource_classes", a.postClass)
	route("GET /placement/resource_classes/{name}", a.getClass)
	route("PUT /placement/resource_classes/{name}", a.putClass)
	route("DELETE /placement/resource_classes/{name}", a.deleteClass)
	route("GET /placement/resource_providers", a.listProviders)
	route("POST /placement/resource_providers", a.createProvider)
	route("GET /placement/resource_providers/{uuid}", a.showProvider)
	route("DELETE /placement/resource_providers/{uuid}", a.deleteProvider)
	route("PUT /placement/resource_providers/{uuid}", a.updateProvider)
	route("GET /placement/resource_providers/{uuid}/inventories", a.inventories)
	route("POST /placement/resource_providers/{uuid}/inventories", a.postInventory)
	route("PUT /placement/resource_providers/{uuid}/inventories", a.putInventories)
	route("DELETE /placement/resource_providers/{uuid}/inventories", a.deleteInventories)
	route("GET /placement/resource_providers/{uuid}/inventories/{rc}", a.inventory)
	route("PUT /placement/resource_providers/{uuid}/inventories/{rc}", a.putInventory)
	route("DELETE /placement/resource_providers/{uuid}/inventories/{rc}", a.deleteInventory)
	route("GET /placement/resource_providers/{uuid}/usages", a.providerUsages)
	route("GET /placement/resource_providers/{uuid}/aggregates", a.providerAggregates)
	route("PUT /placement/resource_providers/{uuid}/aggregates", a.putProviderAggregates)
	route("GET /placement/resource_providers/{uuid}/allocations", a.providerAllocations)
	route("POST /placement/allocations", a.postAllocations)
	route("GET /placement/allocations/{consumer}", a.consumerAllocations)
	route("PUT /placement/allocations/{consumer}", a.putAllocations)
	route("DELETE /placement/allocations/{consumer}", a.deleteAllocations)
	route("GET /placement/allocation_candidates", a.candidates)
	route("GET /placement/traits", a.listTraits)
	route("GET /placement/traits/{name}", a.getTrait)
	route("PUT /placement/traits/{name}", a.putTrait)
	route("DELETE /placement/traits/{name}", a.deleteTrait)
	route("GET /placement/resource_providers/{uuid}/traits", a.providerTraits)
	route("PUT /placement/resource_providers/{uuid}/traits", a.putProviderTraits)
	route("DELETE /placement/resource_providers/{uuid}/traits", a.deleteProviderTraits)
	route("GET /placement/usages", a.projectUsages)
	route("POST /placement/reshaper", a.reshaper)
	return a
}

// ServeHTTP serves /placement: the version document at /placement and
// /placement/ (which needs no token: the caller mounts the rest behind
// one), everything else through the routes. As in Placement, the
// microversion is negotiated first (a malformed one is 400, one outside
// 1.0–1.39 406) and named in the answer's headers; a body without a
// Content-Type is 400; a path with no route is 404 and a method the path
// does not take 405 with Allow.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	requestid.Ensure(w)
	minor, err := negotiate(r)
	if err == nil {
		w.Header().Set("OpenStack-API-Version", "placement 1."+strconv.Itoa(minor))
		w.Header().Set("Vary", "OpenStack-API-Version")
	}
	if err == nil && r.ContentLength > 0 && r.Header.Get("Content-Type") == "" {
		err = errorf(http.StatusBadRequest, "content-type header required when content-length > 0")
	}
	if err == nil && r.Method == http.MethodGet && !acceptsJSON(r.Header.Values("Accept")) {
		if miss, status, _ := httproute.Miss(a.mux, r); miss && status == http.StatusNotFound && strings.TrimSuffix(r.URL.Path, "/") != "/placement" {
			// No route: Placement's router answers before its
			// negotiation, in the form the client accepts.
			notFoundPage(w, r)
			return
		}
		err = errorf(http.StatusNotAcceptable, "Only application/json is provided")
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if strings.TrimSuffix(r.URL.Path, "/") == "/placement" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET")
			writeError(w, methodNotAllowed(r.Method))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"versions": []any{map[string]any{
			"id": "v1.0", "min_version": "1.0", "max_version": "1." + strconv.Itoa(MaxMinor), "status": "CURRENT",
			"links": []any{map[string]any{"rel": "self", "href": ""}},
		}}})
		return
	}
	if miss, status, allow := httproute.Miss(a.mux, r); miss {
		if allow != "" {
			// The path's pattern, from a method it takes.
			probe := r.Clone(r.Context())
			probe.Method, _, _ = strings.Cut(allow, ",")
			if _, pattern := a.mux.Handler(probe); pattern != "" {
				_, path, _ := strings.Cut(pattern, " ")
				allow = strings.Join(a.methods[path], ", ")
			}
			w.Header().Set("Allow", allow)
			writeError(w, methodNotAllowed(r.Method))
			return
		}
		writeError(w, errorf(status, ""))
		return
	}
	a.mux.ServeHTTP(w, r)
}

// notFoundPage answers a path with no route for a client that does not
// take JSON: a 404 page in HTML when it takes HTML, in plain text
// otherwise, as Placement's web framework writes one.
func notFoundPage(w http.ResponseWriter, r *http.Request) {
	html := false
	for _, a := range r.Header.Values("Accept") {
		html = html || strings.Contains(strings.ToLower(a), "text/html")
	}
	if html {
		w.Header().Set("Content-Type", "text/html; charset=UTF-8")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "<html>\n <head>\n  <title>404 Not Found</title>\n </head>\n <body>\n  <h1>404 Not Found</h1>\n  The resource could not be found.<br /><br />\n\n\n\n </body>\n</html>")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprint(w, "404 Not Found\n\nThe resource could not be found.\n\n   ")
}

// httpError is an error with Placement's status and error code.
type httpError struct {
	status int
	code   string
	msg    string
	// bare: the request named no usable microversion, so the error has
	// no code (and a 406 names the versions there are).
	bare bool
	// method and media: what a 405 and a 415 name in their detail.
	method, media string
	// unknownTrait: a trait query named a trait that does not exist, and
	// this says so without naming the parameter (as candidates do).
	unknownTrait string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &httpError{status: status, code: codeUndefined, msg: fmt.Sprintf(format, args...)}
}

// negotiate reads "OpenStack-API-Version: placement 1.N" (default 1.0,
// "latest" the newest): a version that does not parse is 400, one keel
// does not serve 406.
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
		maj, err1 := strconv.Atoi(major)
		n, err2 := strconv.Atoi(minor)
		if !ok || err1 != nil || err2 != nil || maj < 0 || n < 0 {
			msg := fmt.Sprintf("Invalid microversion: invalid version string: %s", ver)
			// Placement's parser reads each of the two parts as a
			// Python int and says which one is not.
			for _, part := range strings.SplitN(ver, ".", 2) {
				if _, err := strconv.Atoi(part); err != nil {
					msg += "; invalid literal for int() with base 10: " + pyStr(part)
					break
				}
			}
			return 0, &httpError{status: http.StatusBadRequest, code: codeUndefined, bare: true, msg: msg}
		}
		if maj != 1 || n > MaxMinor {
			return 0, &httpError{status: http.StatusNotAcceptable, code: codeUndefined, bare: true,
				msg: fmt.Sprintf("Invalid microversion: Unacceptable version header: %s", ver)}
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
	var conflict *placement.ConflictError
	fault := func(status int, code, msg string) *httpError { return &httpError{status: status, code: code, msg: msg} }
	switch {
	case errors.As(err, &he):
		return he
	case errors.As(err, &conflict) && conflict.Kind == placement.ConsumerGeneration:
		return fault(http.StatusConflict, codeConcurrentUpdate, fmt.Sprintf(
			"consumer generation conflict - expected %s but got %s", genString(conflict.Actual), givenString(conflict.Expected)))
	case errors.As(err, &conflict) && conflict.Kind == placement.ProviderGeneration:
		return fault(http.StatusConflict, codeConcurrentUpdate, "resource provider generation conflict: "+err.Error())
	case placement.IsConflict(err):
		return fault(http.StatusConflict, codeConcurrentUpdate, err.Error())
	case errors.As(err, &inUse):
		return fault(http.StatusConflict, codeInventoryInUse, inUseMessage(inUse))
	case placement.IsCapacity(err), isUnitError(err):
		return fault(http.StatusConflict, codeUndefined, "Unable to allocate inventory: "+allocationMessage(err))
	case placement.IsInvalid(err):
		return fault(http.StatusBadRequest, codeUndefined, err.Error())
	case errors.Is(err, store.ErrExists):
		return fault(http.StatusConflict, codeDuplicateName, err.Error())
	case errors.Is(err, store.ErrInUse), errors.Is(err, store.ErrHasChildren):
		return fault(http.StatusConflict, codeUndefined, err.Error())
	case errors.Is(err, store.ErrNotFound):
		return fault(http.StatusNotFound, codeUndefined, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fault(http.StatusServiceUnavailable, codeUndefined, err.Error())
	}
	return fault(http.StatusInternalServerError, codeUndefined, "internal error: "+err.Error())
}

// inUseMessage is Placement's text for an inventory that cannot go
// while allocations hold it.
func inUseMessage(e *placement.InUseError) string {
	return fmt.Sprintf("Inventory for '%s' on resource provider '%s' in use.", e.Class, e.Provider)
}

// isUnitError reports whether err is an amount outside an inventory's
// min_unit, max_unit or step_size.
func isUnitError(err error) bool {
	var inv *placement.InvalidError
	return errors.As(err, &inv) && inv.Class != ""
}

// allocationMessage is Placement's text for an allocation that does not
// fit (its capacity, its unit constraints, or no inventory of the
// class), err's own otherwise.
func allocationMessage(err error) string {
	var capErr *placement.CapacityError
	var inv *placement.InvalidError
	switch {
	case errors.As(err, &capErr) && capErr.Capacity == 0 && capErr.Used == 0 && capErr.Reason == "no inventory of this class":
		return fmt.Sprintf("Inventory for '%s' on resource provider '%s' invalid.", capErr.Class, capErr.Provider)
	case errors.As(err, &capErr):
		return fmt.Sprintf("Unable to create allocation for '%s' on resource provider '%s'. The requested amount would exceed the capacity.", capErr.Class, capErr.Provider)
	case errors.As(err, &inv) && inv.Class != "":
		return fmt.Sprintf("Unable to create allocation for '%s' on resource provider '%s'. The requested amount would violate inventory constraints.", inv.Class, inv.Provider)
	}
	return err.Error()
}

// Placement's error codes.
const (
	codeUndefined        = "placement.undefined_code"
	codeConcurrentUpdate = "placement.concurrent_update"
	codeInventoryInUse   = "placement.inventory.inuse"
	codeDuplicateName    = "placement.duplicate_name"
	// Deleting a provider with allocations, or with children.
	codeProviderInUse      = "placement.resource_provider.inuse"
	codeCannotDeleteParent = "placement.resource_provider.cannot_delete_parent"
	// Query parameters: given twice, a bad value, a missing value.
	codeDuplicateKey      = "placement.query.duplicate_key"
	codeQueryBadValue     = "placement.query.bad_value"
	codeQueryMissingValue = "placement.query.missing_value"
	codeProviderNotFound  = "placement.resource_provider.not_found"
)

// normUUID returns u in the canonical dashed lower-case form when it is a
// UUID in any form Placement accepts (dashless among them), u otherwise.
func normUUID(u string) string {
	if id, err := uuid.Parse(u); err == nil {
		return id.String()
	}
	return u
}

// genString renders a generation for a conflict message ("null" for
// none, as Placement's JSON would).
func genString(g *int64) string {
	if g == nil {
		return "null"
	}
	return strconv.FormatInt(*g, 10)
}

// givenString renders the generation a request gave for a conflict
// message ("None" for null, as Placement prints it).
func givenString(g *int64) string {
	if g == nil {
		return "None"
	}
	return strconv.FormatInt(*g, 10)
}

func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil
}

type jsonRaw = json.RawMessage

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// acceptsJSON reports whether Accept headers (none: anything) take
// application/json.
func acceptsJSON(accept []string) bool {
	if len(accept) == 0 {
		return true
	}
	for _, a := range accept {
		for _, part := range strings.Split(a, ",") {
			mt, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			mt = strings.ToLower(strings.TrimSpace(mt))
			if mt != "application/json" && mt != "application/*" && mt != "*/*" {
				continue
			}
			q := 1.0
			for _, p := range strings.Split(params, ";") {
				if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.TrimSpace(k) == "q" {
					if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
						q = f
					}
				}
			}
			if q > 0 {
				return true
			}
		}
	}
	return false
}

// noCache sets Placement's cache headers (1.15+) on an answer.
func noCache(w http.ResponseWriter) {
	if minor, ok := answeredMinor(w); ok && minor >= 15 {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
	}
}

// location is the absolute URL of path (under /placement) for a
// Location header, as Placement sends it.
func location(r *http.Request, path string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/placement" + path
}

// WriteStatus writes a bare status and message in Placement's error shape
// (for the token check in front of the API).
func WriteStatus(w http.ResponseWriter, status int, msg string) {
	writeFault(w, &httpError{status: status, code: codeUndefined, msg: msg})
}

// writeFault writes he in Placement's error shape: the code from 1.23
// (the microversion the answer's header names), none when the request's
// version was unusable, and then, for a 406, the versions there are.
func writeFault(w http.ResponseWriter, he *httpError) {
	e := map[string]any{"status": he.status, "title": http.StatusText(he.status), "detail": detailText(he),
		"request_id": requestid.Ensure(w)}
	if minor, ok := answeredMinor(w); !he.bare && (!ok || minor >= 23) {
		e["code"] = he.code
	}
	if he.bare && he.status == http.StatusNotAcceptable {
		e["min_version"], e["max_version"] = "1.0", "1."+strconv.Itoa(MaxMinor)
	}
	writeJSON(w, he.status, map[string]any{"errors": []any{e}})
}

// explanations are what Placement's web framework says of a status
// before an error's message.
var explanations = map[int]string{
	http.StatusBadRequest:            "The server could not comply with the request since it is either malformed or otherwise incorrect.",
	http.StatusForbidden:             "Access was denied to this resource.",
	http.StatusNotFound:              "The resource could not be found.",
	http.StatusConflict:              "There was a conflict when trying to complete your request.",
	http.StatusRequestEntityTooLarge: "The request is too large.",
}

// detailText is an error's detail as Placement writes it: its web
// framework's explanation of the status, a blank line, then the message
// (a 405 and a 415 name the method or the media type first).
func detailText(he *httpError) string {
	switch {
	case he.status == http.StatusNotAcceptable && he.bare:
		return "The resource could not be generated that was acceptable to your browser (content of type application/json. \n\n " + he.msg
	case he.status == http.StatusMethodNotAllowed && he.method != "":
		return "The method " + he.method + " is not allowed for this resource. \n\n " + he.msg
	case he.status == http.StatusUnsupportedMediaType && he.media != "":
		return "The request media type " + he.media + " is not supported by this server. \n\n " + he.msg
	}
	if ex, ok := explanations[he.status]; ok {
		return ex + "\n\n " + he.msg + "  "
	}
	return he.msg
}

// methodNotAllowed is a 405 for method, in Placement's words.
func methodNotAllowed(method string) error {
	return &httpError{status: http.StatusMethodNotAllowed, code: codeUndefined, method: method,
		msg: "The method specified is not allowed for this resource."}
}

// answeredMinor reads the microversion an answer names in its
// OpenStack-API-Version header, if it names one.
func answeredMinor(w http.ResponseWriter) (int, bool) {
	_, minor, ok := strings.Cut(w.Header().Get("OpenStack-API-Version"), "placement 1.")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(minor)
	return n, err == nil
}

// writeJSON writes v; a 200 from 1.15 says it may not be cached, as
// Placement's do.
func writeJSON(w http.ResponseWriter, status int, v any) {
	if status == http.StatusOK || status == http.StatusCreated {
		noCache(w)
	}
	writeJSONAsIs(w, status, v)
}

// writeJSONAsIs writes v with the headers w has.
func writeJSONAsIs(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// projectUsages is GET /usages?project_id=[&user_id=] (1.9): what a
// project's consumers hold, summed over every provider.
func (a *API) projectUsages(w http.ResponseWriter, r *http.Request, minor int) error {
	if minor < 9 {
		return errorf(http.StatusNotFound, "")
	}
	q := r.URL.Query()
	project, user := q.Get("project_id"), q.Get("user_id")
	if err := validateQuery(r.URL.RawQuery, usagesSchemas[minor]); err != nil {
		return err
	}
	// consumer_type (1.38): one type, "unknown", or "all" (one group).
	only, group := q.Get("consumer_type"), ""
	if only == "all" {
		only, group = "", "all"
	}
	v, err := a.views.get(r.Context())
	if err != nil {
		return err
	}
	// From 1.38 usages are grouped by consumer type, each with its
	// consumer_count; before, one flat sum.
	seen := map[string]bool{}
	flat := map[string]int64{}
	byType := map[string]map[string]int64{}
	for _, s := range v.sorted {
		if len(s.Usage) == 0 {
			continue // nobody holds anything there
		}
		cs, err := a.st.ConsumersOn(r.Context(), s.UUID)
		if err != nil {
			return err
		}
		for _, c := range cs {
			if seen[c.UUID] || c.ProjectID != project || (user != "" && c.UserID != user) ||
				(only != "" && string(c.Type) != only) {
				continue
			}
			seen[c.UUID] = true
			key := string(c.Type)
			if group != "" {
				key = group
			}
			t := byType[key]
			if t == nil {
				t = map[string]int64{}
				byType[key] = t
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

// parseResources reads "VCPU:1,MEMORY_MB:512" as Placement does (a
// class given twice counts once, the last amount).
func parseResources(s string) (placement.Resources, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errorf(http.StatusBadRequest, "Badly formed resources parameter. Expected resources query string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: empty string.")
	}
	out := placement.Resources{}
	for _, part := range strings.Split(s, ",") {
		parts := strings.Split(part, ":")
		if len(parts) != 2 {
			return nil, errorf(http.StatusBadRequest, "Badly formed resources parameter. Expected resources query string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: %s.", part)
		}
		rc, n := parts[0], parts[1]
		v, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "Requested resource %s expected positive integer amount. Got: %s.", rc, n)
		}
		if v < 1 {
			return nil, errorf(http.StatusBadRequest, "Requested resource %s requires amount >= 1. Got: %d.", rc, v)
		}
		out[placement.ResourceClass(rc)] = v
	}
	return out, nil
}
