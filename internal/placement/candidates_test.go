package placement

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// testForest is cn (no inventory, TRUSTED, in agg A) with numa0 (VCPU 4,
// 3 used) and numa1 (VCPU 4, GOLD), each with a pf (pf0 4 VFs with
// PHYS_A, pf1 2 VFs); flat (VCPU 8, DISK 100, in agg B); and ss (DISK
// 1000, shares via agg A).
func testForest() *Forest {
	inv := func(kv ...any) Inventories {
		out := Inventories{}
		for i := 0; i < len(kv); i += 2 {
			out[ResourceClass(kv[i].(string))] = NewInventory(int64(kv[i+1].(int)))
		}
		return out
	}
	ps := []CandidateProvider{
		{UUID: "cn", Parent: -1, Root: 0, Inventories: Inventories{}, Traits: []string{"TRUSTED"}, Aggregates: []string{"A"}},
		{UUID: "numa0", Parent: 0, Root: 0, Inventories: inv("VCPU", 4), Usage: Resources{"VCPU": 3}},
		{UUID: "numa1", Parent: 0, Root: 0, Inventories: inv("VCPU", 4), Traits: []string{"GOLD"}},
		{UUID: "pf0", Parent: 1, Root: 0, Inventories: inv("VF", 4), Traits: []string{"PHYS_A"}},
		{UUID: "pf1", Parent: 2, Root: 0, Inventories: inv("VF", 2)},
		{UUID: "flat", Parent: -1, Root: 5, Inventories: inv("VCPU", 8, "DISK", 100), Aggregates: []string{"B"}},
		{UUID: "ss", Parent: -1, Root: 6, Inventories: inv("DISK", 1000), Traits: []string{SharesViaAggregate}, Aggregates: []string{"A"}},
	}
	return NewForest(ps)
}

// render writes each request as "p:CLASS=n+…|sfx=p,…" (providers by
// UUID), sorted.
func render(f *Forest, q CandidateQuery, reqs []AllocationRequest) string {
	var out []string
	for _, r := range reqs {
		var parts, maps []string
		for _, p := range r.Parts {
			parts = append(parts, fmt.Sprintf("%s:%s=%d", f.Providers[p.Provider].UUID, p.Class, p.Amount))
		}
		for gi, ps := range r.Mappings {
			sfx := q.Groups[gi].Suffix
			var names []string
			for _, p := range ps {
				names = append(names, f.Providers[p].UUID)
			}
			maps = append(maps, sfx+"="+strings.Join(names, ","))
		}
		slices.Sort(maps)
		out = append(out, strings.Join(parts, "+")+"|"+strings.Join(maps, ";"))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func TestCandidatesOverTreesAndSharing(t *testing.T) {
	f := testForest()
	g := func(sfx string, kv ...any) RequestGroup {
		r := Resources{}
		for i := 0; i < len(kv); i += 2 {
			r[ResourceClass(kv[i].(string))] = int64(kv[i+1].(int))
		}
		return RequestGroup{Suffix: sfx, Resources: r}
	}
	withTraits := func(rg RequestGroup, req ...string) RequestGroup {
		for _, t := range req {
			if t[0] == '!' {
				rg.Traits.Forbidden = append(rg.Traits.Forbidden, t[1:])
			} else {
				rg.Traits.Required = append(rg.Traits.Required, []string{t})
			}
		}
		return rg
	}
	cases := []struct {
		what string
		q    CandidateQuery
		want string
	}{
		{"one class from NUMA children and a flat host", CandidateQuery{Groups: []RequestGroup{g("", "VCPU", 2)}, NestedAware: true},
			"flat:VCPU=2|=flat numa1:VCPU=2|=numa1"},
		{"VCPU and VFs across a tree's levels", CandidateQuery{Groups: []RequestGroup{g("", "VCPU", 1, "VF", 3)}, NestedAware: true},
			"numa0:VCPU=1+pf0:VF=3|=numa0,pf0 numa1:VCPU=1+pf0:VF=3|=numa1,pf0"},
		{"before 1.29 one provider per tree", CandidateQuery{Groups: []RequestGroup{g("", "VCPU", 1, "VF", 3)}},
			""},
		{"disk from the sharing provider for the tree in its aggregate", CandidateQuery{Groups: []RequestGroup{g("", "VCPU", 2, "DISK", 10)}, NestedAware: true},
			"flat:DISK=10+flat:VCPU=2|=flat numa1:VCPU=2+ss:DISK=10|=numa1,ss"},
		{"the sharing provider alone, once", CandidateQuery{Groups: []RequestGroup{g("", "DISK", 500)}, NestedAware: true},
			"ss:DISK=500|=ss"},
		{"traits held together by the providers used", CandidateQuery{Groups: []RequestGroup{withTraits(g("", "VCPU", 1, "VF", 1), "GOLD", "PHYS_A")}, NestedAware: true},
			"numa1:VCPU=1+pf0:VF=1|=numa1,pf0"},
		{"a forbidden trait on any provider used", CandidateQuery{Groups: []RequestGroup{withTraits(g("", "VCPU", 1, "VF", 1), "!GOLD")}, NestedAware: true},
			"numa0:VCPU=1+pf0:VF=1|=numa0,pf0 numa0:VCPU=1+pf1:VF=1|=numa0,pf1"},
		{"granular groups isolated", CandidateQuery{Groups: []RequestGroup{g("1", "VCPU", 1), g("2", "VCPU", 1)}, Isolate: true, NestedAware: true},
			"numa0:VCPU=1+numa1:VCPU=1|1=numa0;2=numa1 numa0:VCPU=1+numa1:VCPU=1|1=numa1;2=numa0"},
		{"granular groups may share with none", CandidateQuery{Groups: []RequestGroup{g("1", "VCPU", 1), g("2", "VCPU", 1)}, NestedAware: true},
			"flat:VCPU=2|1=flat;2=flat numa0:VCPU=1+numa1:VCPU=1|1=numa0;2=numa1 numa0:VCPU=1+numa1:VCPU=1|1=numa1;2=numa0 numa1:VCPU=2|1=numa1;2=numa1"},
		{"same_subtree keeps the VF under the NUMA cell", CandidateQuery{Groups: []RequestGroup{g("C", "VCPU", 1), g("N", "VF", 1)}, SameSubtree: [][]string{{"C", "N"}}, NestedAware: true},
			"numa0:VCPU=1+pf0:VF=1|C=numa0;N=pf0 numa1:VCPU=1+pf1:VF=1|C=numa1;N=pf1"},
		{"root_required", CandidateQuery{Groups: []RequestGroup{g("", "VCPU", 1)}, RootTraits: TraitQuery{Required: [][]string{{"TRUSTED"}}}, NestedAware: true},
			"numa0:VCPU=1|=numa0 numa1:VCPU=1|=numa1"},
		{"member_of on the root counts for its children", CandidateQuery{Groups: []RequestGroup{{Resources: Resources{"VCPU": 1}, MemberOf: AggregateQuery{AnyOf: [][]string{{"A"}}}}}, NestedAware: true},
			"numa0:VCPU=1|=numa0 numa1:VCPU=1|=numa1"},
		{"a granular group's member_of is its provider's own", CandidateQuery{Groups: []RequestGroup{{Suffix: "1", Resources: Resources{"VCPU": 1}, MemberOf: AggregateQuery{AnyOf: [][]string{{"A"}}}}}, NestedAware: true},
			""},
		{"in_tree", CandidateQuery{Groups: []RequestGroup{{Resources: Resources{"VCPU": 1}, InTree: "pf1"}}, NestedAware: true},
			"numa0:VCPU=1|=numa0 numa1:VCPU=1|=numa1"},
		{"the sums of two groups over capacity", CandidateQuery{Groups: []RequestGroup{g("1", "VCPU", 3), g("2", "VCPU", 3)}, NestedAware: true},
			"flat:VCPU=6|1=flat;2=flat"},
	}
	for _, c := range cases {
		reqs, _ := f.Candidates(c.q)
		if got := render(f, c.q, reqs); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.what, got, c.want)
		}
	}
	// The summaries show whole trees: cn's five providers and ss.
	_, sums := f.Candidates(CandidateQuery{Groups: []RequestGroup{g("", "VCPU", 1, "DISK", 1)}, NestedAware: true, Limit: 1})
	if !slices.Equal(sums, []int{0, 1, 2, 3, 4, 6}) {
		t.Errorf("summaries of cn's candidate: %v", sums)
	}
}

// TestCandidatesFirstPerTreeAndRoots: FirstPerTree keeps each tree's first
// candidate (in the full answer's order) and Roots asks for some trees
// only: asking tree by tree gives the same candidates as asking for all.
func TestCandidatesFirstPerTreeAndRoots(t *testing.T) {
	f := testForest()
	for _, q := range []CandidateQuery{
		{Groups: []RequestGroup{{Resources: Resources{"VCPU": 1, "DISK": 10}}}, NestedAware: true},
		{Groups: []RequestGroup{{Suffix: "1", Resources: Resources{"VCPU": 1}}, {Suffix: "2", Resources: Resources{"DISK": 5}}}, NestedAware: true},
	} {
		all, _ := f.Candidates(q)
		firsts := map[int]AllocationRequest{}
		for _, r := range all {
			for _, p := range r.Parts {
				if root := f.Providers[p.Provider].Root; !f.shares[p.Provider] {
					if _, ok := firsts[root]; !ok {
						firsts[root] = r
					}
					break
				}
			}
		}
		q.FirstPerTree = true
		one, _ := f.Candidates(q)
		var want []AllocationRequest
		for _, root := range []int{0, 5} {
			if r, ok := firsts[root]; ok {
				want = append(want, r)
			}
		}
		if render(f, q, one) != render(f, q, want) || len(want) != 2 {
			t.Errorf("FirstPerTree: %s, want %s", render(f, q, one), render(f, q, want))
		}
		var byTree []AllocationRequest
		for _, root := range []int{0, 5} {
			q.Roots = map[int]bool{root: true}
			got, _ := f.Candidates(q)
			byTree = append(byTree, got...)
		}
		if render(f, q, byTree) != render(f, q, one) {
			t.Errorf("tree by tree: %s, want %s", render(f, q, byTree), render(f, q, one))
		}
	}
}

// TestForestUpdate: a search reads the inventories and usage Update gave
// a provider, not the ones the forest was made with.
func TestForestUpdate(t *testing.T) {
	f := testForest()
	q := CandidateQuery{Groups: []RequestGroup{{Resources: Resources{"VCPU": 2}}}, NestedAware: true}
	if got, want := render(f, q, must(f.Candidates(q))), "flat:VCPU=2|=flat numa1:VCPU=2|=numa1"; got != want {
		t.Fatalf("before: %s, want %s", got, want)
	}
	f.Update(2, f.Providers[2].Inventories, Resources{"VCPU": 3})           // numa1 nearly full
	f.Update(1, Inventories{"VCPU": NewInventory(8)}, Resources{"VCPU": 3}) // numa0 grew
	if got, want := render(f, q, must(f.Candidates(q))), "flat:VCPU=2|=flat numa0:VCPU=2|=numa0"; got != want {
		t.Errorf("after: %s, want %s", got, want)
	}
}

func must(reqs []AllocationRequest, _ []int) []AllocationRequest { return reqs }
