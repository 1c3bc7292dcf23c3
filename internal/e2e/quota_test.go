package e2e

import (
	"fmt"
	"sync"
	"testing"

	"keel/internal/identity"
)

// checkQuotaRace sets the admin project's instances quota to two above
// what it holds and fires boots at every replica at once: however the
// replicas interleave on the shared database, at most two are admitted
// (each boot counts after its own record is written, so the later of two
// racing counts sees both), every other one gets Nova's 403, and the
// project ends with no more instances than its quota.
func checkQuotaRace(t *testing.T, sc *scaleCloud) {
	t.Helper()
	a := sc.replicas[0]
	project := identity.ProjectID(identity.DefaultDomainID, "admin")
	var list struct {
		Servers []map[string]any `json:"servers"`
	}
	a.call("GET", "/compute/v2.1/servers", nil, &list)
	have := len(list.Servers)
	limit := have + 2
	if st := a.call("PUT", "/compute/v2.1/os-quota-sets/"+project, map[string]any{"quota_set": map[string]any{"instances": limit}}, nil); st != 200 {
		t.Fatalf("setting the admin project's instances quota: %d", st)
	}
	const n = 9
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := sc.replicas[i%len(sc.replicas)]
			st := r.tryCall("POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{
				"name": fmt.Sprintf("quota%d", i), "flavorRef": "1", "networks": "none"}}, nil)
			mu.Lock()
			statuses[st]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses[202]+statuses[403] != n || statuses[202] > 2 || statuses[202] == 0 {
		t.Fatalf("%d boots racing for 2 places over %d replicas answered %v; want at most 2 (and at least 1) 202s, the rest 403",
			n, len(sc.replicas), statuses)
	}
	sc.replicas[len(sc.replicas)-1].call("GET", "/compute/v2.1/servers", nil, &list)
	if len(list.Servers) != have+statuses[202] || len(list.Servers) > limit {
		t.Fatalf("the project holds %d servers after the race (%d before, %d admitted, quota %d)", len(list.Servers), have, statuses[202], limit)
	}
	t.Logf("quota race: %d boots over %d replicas for 2 places: %v", n, len(sc.replicas), statuses)
}
