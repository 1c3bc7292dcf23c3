package placementapi

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

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
	// The filters but resources are cheap; the resource check and the
	// answer's two parts per provider are remembered on the provider's
	// entry for this request (see memo), so after a claim only the claimed
	// provider is checked and rendered again.
	others := *f
	others.hasResources = false
	key := memoKey(f.resources, minor)
	var found []*entry
	for _, s := range v.sorted {
		if limit >= 0 && len(found) == limit {
			break
		}
		if others.match(v, s) && s.memoFor(key, v, f.resources, minor).fits {
			found = append(found, s)
		}
	}
	buf := answers.Get().(*[]byte)
	body := encodeCandidates((*buf)[:0], v, found, key, f.resources, minor)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	// The answer is written (or the write failed): the buffer is free.
	*buf = body
	answers.Put(buf)
	return nil
}

// answers holds buffers for candidate answers (about 470 bytes per
// provider): a fresh half-megabyte buffer per request would be zeroed and
// collected each time.
var answers = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

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
// encoding/json would cost more than everything else in the request. Each
// provider's two parts come from its memo when it has them.
func encodeCandidates(b []byte, v *view, found []*entry, key string, want placement.Resources, minor int) []byte {
	b = append(b, `{"allocation_requests":[`...)
	for i, s := range found {
		if i > 0 {
			b = append(b, ',')
		}
		if m := s.memo.Load(); m != nil && m.key == key && m.request != nil {
			b = append(b, m.request...)
		} else {
			b = appendRequest(b, s, want, minor)
		}
	}
	b = append(b, `],"provider_summaries":{`...)
	for i, s := range found {
		if i > 0 {
			b = append(b, ',')
		}
		if m := s.memo.Load(); m != nil && m.key == key && m.summary != nil {
			b = append(b, m.summary...)
		} else {
			b = appendSummary(b, v, s, want, minor)
		}
	}
	return append(b, "}}\n"...)
}

// memo is what one candidates request derived from one provider: whether
// the resources fit and, if so, its allocation request and summary as
// JSON. An entry is replaced whenever its provider changes, so a memo is
// valid for as long as its entry is in the view; key names the request
// (resources and microversion) it answers.
type memo struct {
	key     string
	fits    bool
	request []byte // the allocation request, {…}
	summary []byte // "uuid":{…} in provider_summaries; nil when not kept
}

// memoKey names a request's resources and microversion.
func memoKey(want placement.Resources, minor int) string {
	b := strconv.AppendInt(nil, int64(minor), 10)
	for _, rc := range slices.Sorted(maps.Keys(want)) {
		b = append(b, ',')
		b = append(b, rc...)
		b = append(b, ':')
		b = strconv.AppendInt(b, want[rc], 10)
	}
	return string(b)
}

// memoFor returns the entry's memo for key, making (and keeping) it when
// the entry holds one for another request or none. Concurrent requests may
// both make it; they make the same one.
func (s *entry) memoFor(key string, v *view, want placement.Resources, minor int) *memo {
	if m := s.memo.Load(); m != nil && m.key == key {
		return m
	}
	m := &memo{key: key, fits: placement.Fits(s.UUID, s.Inventories, s.Usage, want) == nil}
	if m.fits {
		m.request = appendRequest(nil, s, want, minor)
		// A root's summary depends on the entry alone; a child's names
		// its root, which can change while the entry stays.
		if s.ParentUUID == "" {
			m.summary = appendSummary(nil, v, s, want, minor)
		}
	}
	s.memo.Store(m)
	return m
}

// appendRequest appends s's allocation request for want.
func appendRequest(b []byte, s *entry, want placement.Resources, minor int) []byte {
	writeRes := func(b []byte) []byte {
		b = append(b, '{')
		for i, rc := range slices.Sorted(maps.Keys(want)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, string(rc))
			b = append(b, ':')
			b = strconv.AppendInt(b, want[rc], 10)
		}
		return append(b, '}')
	}
	if minor >= 12 {
		b = append(b, `{"allocations":{`...)
		b = append(b, s.quoted...)
		b = append(b, `:{"resources":`...)
		b = writeRes(b)
		b = append(b, `}}`...)
	} else {
		b = append(b, `{"allocations":[{"resource_provider":{"uuid":`...)
		b = append(b, s.quoted...)
		b = append(b, `},"resources":`...)
		b = writeRes(b)
		b = append(b, `}]`...)
	}
	if minor >= 34 {
		b = append(b, `,"mappings":{"":[`...)
		b = append(b, s.quoted...)
		b = append(b, `]}`...)
	}
	return append(b, '}')
}

// appendSummary appends s's entry in provider_summaries.
func appendSummary(b []byte, v *view, s *entry, want placement.Resources, minor int) []byte {
	b = append(b, s.quoted...)
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
		if s.ParentUUID == "" {
			b = append(b, s.quoted...)
		} else {
			b = appendString(b, v.root(s.UUID))
		}
	}
	return append(b, '}')
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
