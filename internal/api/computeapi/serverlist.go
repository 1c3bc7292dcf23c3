package computeapi

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"keel/internal/records"
)

// listQuery is GET /servers' query, checked as Nova checks it.
type listQuery struct {
	all          bool
	tenant       string // with all: only this project's servers
	name         *regexp.Regexp
	host, status string
	flavor       string
	image        string
	changesSince time.Time
	// changesBefore (2.66): only servers changed at or before it.
	changesBefore time.Time
	limit         int
	marker        string
	reservation   string
	// 2.26 tag filters: comma-separated lists.
	tags, tagsAny, notTags, notTagsAny []string
}

func parseListQuery(r *http.Request) (listQuery, error) {
	q := r.URL.Query()
	c := caller(r)
	lq := listQuery{limit: -1}
	all, err := allTenants(r)
	if err != nil {
		return lq, err
	}
	lq.all = all
	if lq.all {
		// As in Nova, tenant_id counts only with all_tenants.
		lq.tenant = cmpOr(q.Get("tenant_id"), q.Get("project_id"))
	}
	if n := q.Get("name"); n != "" {
		re, err := regexp.Compile(n)
		if err != nil {
			return lq, badRequest("Invalid input for query parameter name: not a valid regular expression")
		}
		lq.name = re
	}
	if c.Admin {
		lq.host = q.Get("host")
	}
	lq.status = q.Get("status")
	lq.flavor = q.Get("flavor")
	lq.image = q.Get("image")
	if lq.changesSince, lq.changesBefore, err = changesWindow(r, 1, 66); err != nil {
		return lq, err
	}
	if err := checkListStatusAndSort(q, version(r)); err != nil {
		return lq, err
	}
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 0 {
			return lq, badRequest("Invalid input for query parameters limit. Value: " + q.Get("limit") + ". not a non-negative integer")
		}
		lq.limit = min(n, 1000)
	}
	lq.marker = q.Get("marker")
	lq.reservation = q.Get("reservation_id")
	if version(r).AtLeast(26) {
		split := func(k string) []string {
			if v := q.Get(k); v != "" {
				return strings.Split(v, ",")
			}
			return nil
		}
		lq.tags, lq.tagsAny, lq.notTags, lq.notTagsAny = split("tags"), split("tags-any"), split("not-tags"), split("not-tags-any")
	}
	return lq, nil
}

// allTenants reads all_tenants as Nova does: present and empty, or a
// true value of oslo's bool_from_string, asks for every project's
// servers, which only an admin may (403 with the index or detail policy
// otherwise); a value that is neither true nor false is a 400.
func allTenants(r *http.Request) (bool, error) {
	q := r.URL.Query()
	if !q.Has("all_tenants") {
		return false, nil
	}
	all := true
	if s := q.Get("all_tenants"); s != "" {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "1", "t", "true", "on", "y", "yes":
		case "0", "f", "false", "off", "n", "no":
			all = false
		default:
			return false, badRequest("Invalid input received: Unrecognized value '" + s + "', acceptable values are: '0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'")
		}
	}
	if all && !caller(r).Admin {
		policy := "os_compute_api:servers:index:get_all_tenants"
		if strings.HasSuffix(r.URL.Path, "/detail") {
			policy = "os_compute_api:servers:detail:get_all_tenants"
		}
		return false, forbidden(policy)
	}
	return all, nil
}

// changesWindow reads a list's changes-since (from microversion 2.since)
// and changes-before (from 2.before): each a date-time, and the window may
// not end before it starts (400, as Nova answers). A zero time is a bound
// not given.
func changesWindow(r *http.Request, since, before int) (from, to time.Time, err error) {
	q := r.URL.Query()
	for _, p := range []struct {
		name string
		dst  *time.Time
		from int
	}{{"changes-since", &from, since}, {"changes-before", &to, before}} {
		if !q.Has(p.name) || !version(r).AtLeast(p.from) {
			continue
		}
		s := q.Get(p.name)
		t, err := parseISOTime(s)
		if err != nil {
			return from, to, badRequest("Invalid input for query parameters " + p.name + ". Value: " + s + ". '" + s + "' is not a 'date-time'")
		}
		*p.dst = t
	}
	if !from.IsZero() && !to.IsZero() && to.Before(from) {
		return from, to, badRequest("The value of changes-since must be less than or equal to changes-before.")
	}
	return from, to, nil
}

func hasAll(tags, want []string) bool {
	for _, t := range want {
		if !slices.Contains(tags, t) {
			return false
		}
	}
	return true
}

func hasAny(tags, want []string) bool {
	return slices.ContainsFunc(want, func(t string) bool { return slices.Contains(tags, t) })
}

// parseISOTime reads an ISO 8601 time as Nova's date-time checks accept
// it: with or without fractional seconds and zone (UTC when absent).
func parseISOTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02T15:04:05Z0700", "2006-01-02T15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not an ISO 8601 time", s)
}

func (lq listQuery) match(c Caller, in records.Instance) bool {
	switch {
	case !lq.all && in.ProjectID != c.ProjectID,
		lq.tenant != "" && in.ProjectID != lq.tenant,
		lq.reservation != "" && in.ReservationID != lq.reservation,
		lq.tags != nil && !hasAll(in.Tags, lq.tags),
		lq.tagsAny != nil && !hasAny(in.Tags, lq.tagsAny),
		lq.notTags != nil && hasAll(in.Tags, lq.notTags),
		lq.notTagsAny != nil && hasAny(in.Tags, lq.notTagsAny),
		lq.host != "" && in.Host != lq.host,
		lq.status != "" && !strings.EqualFold(lq.status, ServerStatus(in)),
		lq.name != nil && !lq.name.MatchString(in.Name),
		lq.flavor != "" && in.Flavor.ID != lq.flavor,
		lq.image != "" && in.ImageRef != lq.image[strings.LastIndex(lq.image, "/")+1:],
		!lq.changesSince.IsZero() && in.UpdatedAt.Before(lq.changesSince),
		!lq.changesBefore.IsZero() && in.UpdatedAt.After(lq.changesBefore):
		return false
	}
	return true
}

// project is the one project whose servers the list can show ("" when
// it may show any): the caller's own unless an admin asks for
// all_tenants, then the project_id/tenant_id filter if given. match
// applies the same rule; this lets the store read only that project.
func (lq listQuery) project(c Caller) string {
	if !lq.all {
		return c.ProjectID
	}
	return lq.tenant
}

func (a *serversAPI) listServers(detail bool) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		lq, err := parseListQuery(r)
		if err != nil {
			return err
		}
		c := caller(r)
		ins, err := a.instancesOf(r.Context(), lq.project(c))
		if err != nil {
			return err
		}
		var sel []records.Instance
		for _, in := range ins {
			if lq.match(c, in) {
				sel = append(sel, in)
			}
		}
		// Nova's default order: newest first.
		slices.SortFunc(sel, func(x, y records.Instance) int {
			if d := y.CreatedAt.Compare(x.CreatedAt); d != 0 {
				return d
			}
			return strings.Compare(y.UUID, x.UUID)
		})
		if lq.marker != "" {
			i := slices.IndexFunc(sel, func(in records.Instance) bool { return in.UUID == lq.marker })
			if i < 0 {
				return badRequest("marker [" + lq.marker + "] not found")
			}
			sel = sel[i+1:]
		}
		out := map[string]any{}
		if lq.limit >= 0 && len(sel) >= lq.limit {
			if len(sel) > lq.limit && lq.limit > 0 {
				out["servers_links"] = a.nextLink(r, "servers", sel[lq.limit-1].UUID)
			}
			sel = sel[:lq.limit]
		}
		kind := viewBrief
		if detail {
			kind = viewDetail
			if err := a.fillZones(r, sel); err != nil {
				return err
			}
		}
		list := make([]any, 0, len(sel))
		for _, in := range sel {
			list = append(list, a.serverView(r, in, kind))
		}
		out["servers"] = list
		writeJSON(w, http.StatusOK, out)
		return nil
	}
}

// nextLink is a collection's "next" link: the same query from after
// marker.
func (a links) nextLink(r *http.Request, collection, marker string) []map[string]string {
	q := r.URL.Query()
	q.Set("marker", marker)
	path := strings.TrimPrefix(r.URL.Path, "/compute")
	return []map[string]string{{"rel": "next", "href": a.baseURL + path + "?" + q.Encode()}}
}
