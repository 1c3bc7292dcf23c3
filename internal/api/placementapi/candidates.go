package placementapi

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"keel/internal/placement"
)

// candidatesSince says from which microversion GET /allocation_candidates
// takes each parameter. group_policy is accepted and has nothing to do:
// keel answers only the unnamed request group.
var candidatesSince = map[string]int{
	"resources": 10, "limit": 16, "required": 17, "member_of": 21, "group_policy": 25,
	"in_tree": 31, "root_required": 35,
}

// candidates is GET /allocation_candidates (1.10): every provider that can
// hold the whole request on its own, passes the trait, aggregate and tree
// filters, in name order, cut at limit. (Placement returns its first N
// too unless randomize_allocation_candidates is configured; keel does not
// randomise, so equal requests get equal answers.) Providers do not share
// a request across a tree: each allocation request names one provider.
func (a *API) candidates(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 10); err != nil {
		return err
	}
	for k := range r.URL.Query() {
		if granular(k) && minor >= 25 {
			return errorf(http.StatusBadRequest, "Invalid query string parameters: keel answers only the unnamed request group; %q names a granular group", k)
		}
	}
	f, err := a.parseFilter(r, minor, candidatesSince)
	if err != nil {
		return err
	}
	if !f.hasResources {
		return errorf(http.StatusBadRequest, "'resources' is a required query parameter")
	}
	limit := -1
	if l := r.URL.Query().Get("limit"); r.URL.Query().Has("limit") {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 {
			return errorf(http.StatusBadRequest, "Invalid query string parameters: limit must be a positive integer, got %q", l)
		}
	}
	v, err := a.views.get(r.Context())
	if err != nil {
		return err
	}
	var found []*entry
	for _, s := range v.sorted {
		if limit >= 0 && len(found) == limit {
			break
		}
		if f.match(v, s) {
			found = append(found, s)
		}
	}
	body := encodeCandidates(make([]byte, 0, 512*len(found)+64), v, found, f.resources, minor)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	return nil
}

// granular reports whether a query key names a numbered or suffixed
// request group (resources1, required_NET, …).
func granular(k string) bool {
	for _, p := range []string{"resources", "required", "member_of", "in_tree"} {
		if strings.HasPrefix(k, p) && len(k) > len(p) && k != "required" {
			return true
		}
	}
	return false
}

// encodeCandidates writes the response by hand: it is the one large
// answer (about 470 bytes per provider), and building maps for
// encoding/json would cost more than everything else in the request.
func encodeCandidates(b []byte, v *view, found []*entry, want placement.Resources, minor int) []byte {
	classes := slices.Sorted(maps.Keys(want))
	writeRes := func(b []byte) []byte {
		b = append(b, '{')
		for i, rc := range classes {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, string(rc))
			b = append(b, ':')
			b = strconv.AppendInt(b, want[rc], 10)
		}
		return append(b, '}')
	}
	b = append(b, `{"allocation_requests":[`...)
	for i, s := range found {
		if i > 0 {
			b = append(b, ',')
		}
		if minor >= 12 {
			b = append(b, `{"allocations":{`...)
			b = appendString(b, s.UUID)
			b = append(b, `:{"resources":`...)
			b = writeRes(b)
			b = append(b, `}}`...)
		} else {
			b = append(b, `{"allocations":[{"resource_provider":{"uuid":`...)
			b = appendString(b, s.UUID)
			b = append(b, `},"resources":`...)
			b = writeRes(b)
			b = append(b, `}]`...)
		}
		if minor >= 34 {
			b = append(b, `,"mappings":{"":[`...)
			b = appendString(b, s.UUID)
			b = append(b, `]}`...)
		}
		b = append(b, '}')
	}
	b = append(b, `],"provider_summaries":{`...)
	for i, s := range found {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s.UUID)
		b = append(b, `:{"resources":{`...)
		// From 1.27 every class the provider has; before, the requested ones.
		first := true
		for j, rc := range s.classes {
			if minor < 27 && want[rc] == 0 {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendString(b, string(rc))
			b = append(b, `:{"capacity":`...)
			b = strconv.AppendInt(b, s.caps[j], 10)
			b = append(b, `,"used":`...)
			b = strconv.AppendInt(b, s.Usage[rc], 10)
			b = append(b, '}')
		}
		b = append(b, '}')
		if minor >= 17 {
			b = append(b, `,"traits":[`...)
			for j, t := range s.Traits {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendString(b, t)
			}
			b = append(b, ']')
		}
		if minor >= 29 {
			b = append(b, `,"parent_provider_uuid":`...)
			if s.ParentUUID == "" {
				b = append(b, "null"...)
			} else {
				b = appendString(b, s.ParentUUID)
			}
			b = append(b, `,"root_provider_uuid":`...)
			b = appendString(b, v.root(s.UUID))
		}
		b = append(b, '}')
	}
	return append(b, "}}\n"...)
}

// appendString appends s as a JSON string: directly when it holds only
// characters that need no escaping (UUIDs, class and trait names), through
// encoding/json otherwise.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
