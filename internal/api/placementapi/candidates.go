package placementapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"keel/internal/placement"
)

// candidates is GET /allocation_candidates (1.10): the ways to satisfy
// the request groups (resources, required, member_of, in_tree, each
// unnamed or suffixed from 1.25), combined per provider tree with the
// providers sharing with it, as Placement combines them (see
// placement.Forest.Candidates), cut at limit. (Placement returns its first
// N too unless randomize_allocation_candidates is configured; keel does
// not randomise, so equal requests get equal answers.)
//
// When only the unnamed group is asked for and no provider has a parent
// or shares its inventory, every candidate is one provider: that common
// case takes a faster path whose per-provider findings are remembered
// across requests (memo).
func (a *API) candidates(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 10); err != nil {
		return err
	}
	cq, err := a.parseCandidates(r, minor)
	if err != nil {
		return err
	}
	v, err := a.views.get(r.Context())
	if err != nil {
		return err
	}
	noCache(w)
	buf := answers.get()
	var body []byte
	if len(cq.Groups) == 1 && cq.Groups[0].Suffix == "" && v.simple() {
		body = a.simpleCandidates((*buf)[:0], v, cq, minor)
	} else {
		f := v.forest()
		sc := scratches.get()
		reqs, sums := f.CandidatesIn(*cq, sc)
		body = encodeForest((*buf)[:0], v, reqs, sums, cq, minor)
		scratches.put(sc)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	// The answer is written (or the write failed): the buffer is free.
	*buf = body
	answers.put(buf)
	return nil
}

// simpleCandidates answers the unnamed group over providers that are
// each a tree of their own: the filters but resources are cheap; the
// resource check and the answer's two parts per provider are remembered
// on the provider's entry for this request (see memo), so after a claim
// only the claimed provider is checked and rendered again.
func (a *API) simpleCandidates(b []byte, v *view, cq *placement.CandidateQuery, minor int) []byte {
	g := cq.Groups[0]
	others := providerFilter{inTree: g.InTree, traits: g.Traits, rootTraits: cq.RootTraits, aggregates: g.MemberOf}
	key := memoKey(g.Resources, minor)
	var found []*entry
	for _, s := range v.sorted {
		if cq.Limit > 0 && len(found) == cq.Limit {
			break
		}
		if others.match(v, s) && s.memoFor(key, v, g.Resources, minor).fits {
			found = append(found, s)
		}
	}
	return encodeCandidates(b, v, found, key, g.Resources, minor)
}

// groupKey splits a granular query key (resources1, required_NET, …) into
// its parameter and suffix; ok is false for any other key. Suffixes are
// numbers before 1.33, then 1–64 of [a-zA-Z0-9_-].
func groupKey(k string, minor int) (param, suffix string, ok bool) {
	for _, p := range []string{"resources", "required", "member_of", "in_tree"} {
		if !strings.HasPrefix(k, p) {
			continue
		}
		if p == "in_tree" && minor < 31 {
			return "", "", false
		}
		sfx := k[len(p):]
		if sfx == "" {
			return p, "", true
		}
		if minor < 25 {
			return "", "", false
		}
		if minor < 33 {
			if sfx[0] < '1' || sfx[0] > '9' || strings.TrimLeft(sfx, "0123456789") != "" {
				return "", "", false
			}
			return p, sfx, true
		}
		if len(sfx) > 64 || strings.TrimLeft(sfx, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
			return "", "", false
		}
		return p, sfx, true
	}
	return "", "", false
}

// parseCandidates reads GET /allocation_candidates' query as Placement's
// schema and request-group parsing do at minor, in the same order, with
// the same status and error codes: each step below is one of Placement's
// checks, and the first to fail answers.
func (a *API) parseCandidates(r *http.Request, minor int) (*placement.CandidateQuery, error) {
	q := r.URL.Query()
	if err := checkCandidateKeys(r.URL.RawQuery, minor); err != nil {
		return nil, err
	}
	cq := &placement.CandidateQuery{NestedAware: minor >= 29}
	policy, err := parseLimitAndPolicy(q, cq)
	if err != nil {
		return nil, err
	}
	if vals := q["root_required"]; len(vals) > 0 {
		if cq.RootTraits, err = a.parseRootRequired(r, vals, minor); err != nil {
			return nil, err
		}
	}
	inSubtree, err := parseSameSubtree(q, cq)
	if err != nil {
		return nil, err
	}
	groups, err := a.parseRequestGroups(r, q, minor)
	if err != nil {
		return nil, err
	}
	sfxs := slices.Sorted(maps.Keys(groups))
	if minor >= 36 {
		err = checkResourcelessGroups(groups, sfxs, inSubtree)
	} else {
		err = checkGroupsHaveResources(groups, sfxs)
	}
	if err != nil {
		return nil, err
	}
	if minor >= 22 {
		if err := checkTraitConflicts(groups, sfxs); err != nil {
			return nil, err
		}
	}
	if policy == "" && len(groups)-btoi(groups[""] != nil) > 1 {
		return nil, errorf(http.StatusBadRequest, "The \"group_policy\" parameter is required when specifying more than one \"resources{N}\" parameter.")
	}
	for _, sfx := range sfxs {
		g := groups[sfx]
		if err := a.knownClasses(r, g.Resources); err != nil {
			return nil, err
		}
		cq.Groups = append(cq.Groups, *g)
	}
	return cq, nil
}

// checkCandidateKeys checks the query's parameters against Placement's
// schema of minor: one it does not have, resources missing before 1.25,
// a limit that is not a positive integer.
func checkCandidateKeys(raw string, minor int) error {
	return validateQuery(raw, candidatesSchemas[minor])
}

// parseLimitAndPolicy sets cq's limit and isolation from limit and
// group_policy (the last of each wins) and returns the policy asked for
// ("" if none).
func parseLimitAndPolicy(q url.Values, cq *placement.CandidateQuery) (string, error) {
	if q.Has("limit") {
		l := q["limit"][len(q["limit"])-1]
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || l[0] == '0' || strings.TrimLeft(l, "0123456789") != "" {
			return "", errorf(http.StatusBadRequest, "Invalid query string parameters: %s does not match '^[1-9][0-9]*$'", pyStr(l))
		}
		cq.Limit = n
	}
	policy := ""
	if q.Has("group_policy") {
		policy = q["group_policy"][len(q["group_policy"])-1]
		if policy != "none" && policy != "isolate" {
			return "", errorf(http.StatusBadRequest, "Invalid query string parameters: '%s' is not one of ['none', 'isolate']", policy)
		}
		cq.Isolate = policy == "isolate"
	}
	return policy, nil
}

// parseRootRequired reads root_required (1.35): given once, without in:
// before 1.39, and no trait both required and forbidden.
func (a *API) parseRootRequired(r *http.Request, vals []string, minor int) (placement.TraitQuery, error) {
	if len(vals) > 1 {
		return placement.TraitQuery{}, &httpError{status: http.StatusBadRequest, code: codeDuplicateKey,
			msg: "Query parameter 'root_required' may be specified only once."}
	}
	if strings.HasPrefix(vals[0], "in:") {
		return placement.TraitQuery{}, errorf(http.StatusBadRequest, "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since microversion 1.39. Got: %s", vals[0])
	}
	rt, err := a.parseRequired(r, vals, "root_required", minor)
	if he, ok := err.(*httpError); ok && he.unknownTrait != "" {
		err = &httpError{status: he.status, code: he.code, msg: he.unknownTrait}
	}
	if err != nil {
		return placement.TraitQuery{}, err
	}
	var conflicts []string
	for _, t := range rt.Required {
		if slices.Contains(rt.Forbidden, t[0]) {
			conflicts = append(conflicts, t[0])
		}
	}
	if len(conflicts) > 0 {
		return placement.TraitQuery{}, &httpError{status: http.StatusBadRequest, code: codeQueryBadValue,
			msg: "Conflicting required and forbidden traits found in root_required: " + strings.Join(conflicts, ", ")}
	}
	return rt, nil
}

// parseSameSubtree sets cq's same_subtree sets (1.36) and returns every
// suffix they name.
func parseSameSubtree(q url.Values, cq *placement.CandidateQuery) (map[string]bool, error) {
	inSubtree := map[string]bool{}
	for _, v := range q["same_subtree"] {
		var set []string
		for _, sfx := range strings.Split(v, ",") {
			sfx = strings.TrimSpace(sfx)
			if sfx == "" {
				return nil, &httpError{status: http.StatusBadRequest, code: codeQueryBadValue,
					msg: "Empty string (unsuffixed group) can not be specified in `same_subtree` "}
			}
			if !slices.Contains(set, sfx) {
				set = append(set, sfx)
			}
			inSubtree[sfx] = true
		}
		cq.SameSubtree = append(cq.SameSubtree, set)
	}
	return inSubtree, nil
}

// parseRequestGroups reads the request groups' parameters (resources,
// required, member_of, in_tree, each with its suffix), in the order of
// their keys, into one group per suffix.
func (a *API) parseRequestGroups(r *http.Request, q url.Values, minor int) (map[string]*placement.RequestGroup, error) {
	groups := map[string]*placement.RequestGroup{}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		param, sfx, ok := groupKey(k, minor)
		if !ok {
			continue
		}
		vals := q[k]
		g := groups[sfx]
		if g == nil {
			g = &placement.RequestGroup{Suffix: sfx}
			groups[sfx] = g
		}
		switch param {
		case "resources":
			for _, v := range vals {
				res, err := parseResources(v)
				if err != nil {
					return nil, err
				}
				g.Resources = res
			}
		case "required":
			t, err := a.parseRequired(r, vals, k, minor)
			if he, ok := err.(*httpError); ok && he.unknownTrait != "" {
				err = &httpError{status: he.status, code: he.code, msg: he.unknownTrait}
			}
			if err != nil {
				return nil, err
			}
			g.Traits = t
		case "member_of":
			m, err := parseMemberOf(vals, minor)
			if err != nil {
				return nil, err
			}
			g.MemberOf = m
		case "in_tree":
			for _, v := range vals {
				u := strings.TrimSpace(v)
				if _, err := uuid.Parse(u); err != nil {
					return nil, errorf(http.StatusBadRequest, "Invalid query string parameters: Expected 'in_tree' parameter to be a format of uuid. Got: %s", v)
				}
				g.InTree = u
			}
		}
	}
	return groups, nil
}

// checkResourcelessGroups is 1.36's rule: some group asks for resources,
// every resourceless group is in a same_subtree set, and every suffix a
// set names is a group.
func checkResourcelessGroups(groups map[string]*placement.RequestGroup, sfxs []string, inSubtree map[string]bool) error {
	var resourceless []string
	for _, sfx := range sfxs {
		if len(groups[sfx].Resources) == 0 {
			resourceless = append(resourceless, sfx)
		}
	}
	if len(resourceless) == len(groups) {
		return &httpError{status: http.StatusBadRequest, code: codeQueryMissingValue,
			msg: "There must be at least one resources or resources[$S] parameter."}
	}
	var bad []string
	for _, sfx := range resourceless {
		if !inSubtree[sfx] {
			bad = append(bad, sfx)
		}
	}
	if len(bad) > 0 {
		return &httpError{status: http.StatusBadRequest, code: codeQueryBadValue,
			msg: fmt.Sprintf("Resourceless suffixed group request should be specified in `same_subtree` query param: bad group(s) - %s.", pyList(bad))}
	}
	for _, sfx := range slices.Sorted(maps.Keys(inSubtree)) {
		if groups[sfx] == nil {
			bad = append(bad, sfx)
		}
	}
	if len(bad) > 0 {
		return &httpError{status: http.StatusBadRequest, code: codeQueryBadValue,
			msg: fmt.Sprintf("Real suffixes should be specified in `same_subtree`: %s not found in %s.", pyList(bad), pyList(sfxs))}
	}
	return nil
}

// checkGroupsHaveResources is the rule before 1.36: no traits or member_of
// without resources in their group, every group asks for resources, and
// there is a group.
func checkGroupsHaveResources(groups map[string]*placement.RequestGroup, sfxs []string) error {
	var orphans []string
	for _, sfx := range sfxs {
		if g := groups[sfx]; len(g.Traits.Required) > 0 && len(g.Resources) == 0 {
			orphans = append(orphans, "required"+sfx)
		}
	}
	if len(orphans) > 0 {
		return errorf(http.StatusBadRequest, "All traits parameters must be associated with resources.  Found the following orphaned traits keys: %s", strings.Join(orphans, ", "))
	}
	for _, sfx := range sfxs {
		if g := groups[sfx]; !g.MemberOf.Empty() && len(g.Resources) == 0 {
			orphans = append(orphans, "member_of"+sfx)
		}
	}
	if len(orphans) > 0 {
		return errorf(http.StatusBadRequest, "All member_of parameters must be associated with resources. Found the following orphaned member_of keys: %s", strings.Join(orphans, ", "))
	}
	for _, sfx := range sfxs {
		if len(groups[sfx].Resources) == 0 {
			return errorf(http.StatusBadRequest, "All request groups must specify resources.")
		}
	}
	if len(groups) == 0 {
		return errorf(http.StatusBadRequest, "At least one request group (`resources` or `resources{$S}`) is required.")
	}
	return nil
}

// checkTraitConflicts refuses (from 1.22) a group whose required any-of
// set holds only forbidden traits.
func checkTraitConflicts(groups map[string]*placement.RequestGroup, sfxs []string) error {
	var conflicts []string
	for _, sfx := range sfxs {
		g := groups[sfx]
		for _, anyOf := range g.Traits.Required {
			if !slices.ContainsFunc(anyOf, func(t string) bool { return !slices.Contains(g.Traits.Forbidden, t) }) {
				conflicts = append(conflicts, fmt.Sprintf("required%s: (%s)", sfx, strings.Join(slices.Sorted(slices.Values(anyOf)), ", ")))
			}
		}
	}
	if len(conflicts) > 0 {
		slices.Sort(conflicts)
		return errorf(http.StatusBadRequest, "Conflicting required and forbidden traits found in the following traits keys: %s", strings.Join(conflicts, ", "))
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// answers holds buffers for candidate answers (about 470 bytes per
// provider, 600 per candidate over trees): a fresh megabyte buffer per
// request would be grown, zeroed and collected each time. (Not a
// sync.Pool: that drops its buffers at every garbage collection, and
// answers this size cause one every few requests.)
var answers = bufferList{free: make(chan *[]byte, 4)}

// bufferList keeps up to cap(free) buffers between requests.
type bufferList struct{ free chan *[]byte }

// get returns a kept buffer, or a new one.
func (l bufferList) get() *[]byte {
	select {
	case b := <-l.free:
		return b
	default:
		b := make([]byte, 0, 64<<10)
		return &b
	}
}

// scratches keeps searches' working memory between requests, as answers
// keeps their buffers.
var scratches = scratchList{free: make(chan *placement.Scratch, 4)}

type scratchList struct{ free chan *placement.Scratch }

func (l scratchList) get() *placement.Scratch {
	select {
	case sc := <-l.free:
		return sc
	default:
		return new(placement.Scratch)
	}
}

func (l scratchList) put(sc *placement.Scratch) {
	select {
	case l.free <- sc:
	default:
	}
}

// put keeps b for a later get unless enough are kept already (or it is
// over 64 MB, an answer too rare to hold memory for).
func (l bufferList) put(b *[]byte) {
	if cap(*b) > 64<<20 {
		return
	}
	select {
	case l.free <- b:
	default:
	}
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

// encodeForest writes the answer of a search over the view's forest:
// each allocation request keyed by provider (a list before 1.12) with the
// groups' mappings from 1.34, and the summaries of the providers sums
// names.
func encodeForest(b []byte, v *view, reqs []placement.AllocationRequest, sums []int, cq *placement.CandidateQuery, minor int) []byte {
	want := placement.Resources{}
	for _, g := range cq.Groups {
		for rc, n := range g.Resources {
			want[rc] += n
		}
	}
	b = append(b, `{"allocation_requests":[`...)
	for i, r := range reqs {
		if i > 0 {
			b = append(b, ',')
		}
		if minor >= 12 {
			b = append(b, `{"allocations":{`...)
		} else {
			b = append(b, `{"allocations":[`...)
		}
		for j := 0; j < len(r.Parts); {
			p := r.Parts[j].Provider
			if j > 0 {
				b = append(b, ',')
			}
			if minor >= 12 {
				b = append(b, v.sorted[p].quoted...)
				b = append(b, `:{"resources":{`...)
			} else {
				b = append(b, `{"resource_provider":{"uuid":`...)
				b = append(b, v.sorted[p].quoted...)
				b = append(b, `},"resources":{`...)
			}
			for k := j; j < len(r.Parts) && r.Parts[j].Provider == p; j++ {
				if j > k {
					b = append(b, ',')
				}
				b = appendString(b, string(r.Parts[j].Class))
				b = append(b, ':')
				b = strconv.AppendInt(b, r.Parts[j].Amount, 10)
			}
			b = append(b, "}}"...)
		}
		if minor >= 12 {
			b = append(b, '}')
		} else {
			b = append(b, ']')
		}
		if minor >= 34 {
			b = append(b, `,"mappings":{`...)
			for gi, g := range cq.Groups {
				if gi > 0 {
					b = append(b, ',')
				}
				b = appendString(b, g.Suffix)
				b = append(b, ":["...)
				for k, p := range r.Mappings[gi] {
					if k > 0 {
						b = append(b, ',')
					}
					b = append(b, v.sorted[p].quoted...)
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	b = append(b, `],"provider_summaries":{`...)
	for i, p := range sums {
		if i > 0 {
			b = append(b, ',')
		}
		e := v.sorted[p]
		if minor < 29 {
			b = appendSummary(b, v, e, want, minor)
			continue
		}
		// From 1.29 a summary does not depend on the request: each
		// entry keeps its own, checked against its root (which can
		// change while the entry stays).
		root := v.trees.rootOf[p]
		sf := e.summary.Load()
		if sf == nil || sf.root != root {
			sf = &summaryFragment{root: root, b: appendSummary(nil, v, e, want, minor)}
			e.summary.Store(sf)
		}
		b = append(b, sf.b...)
	}
	return append(b, "}}\n"...)
}
