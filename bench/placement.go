package bench

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"

	_ "modernc.org/sqlite" // Placement's database, loaded before gunicorn starts

	"keel/internal/placementpeer"
)

// placementMicroversion is the one both systems are asked for: ≥ 1.28, so
// PUT /allocations takes consumer_generation, project_id and user_id, and
// below 1.38, which would add consumer_type.
const placementMicroversion = "placement 1.36"

// candidatesQuery is the request.
const candidatesQuery = "/allocation_candidates?resources=VCPU:2,MEMORY_MB:4096,DISK_GB:20&limit=1000"

// claimResources is what each claim asks for (the candidates' request).
var claimResources = map[string]int64{"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 20}

// debPython is Debian's interpreter: the packages are installed for it.
const debPython = "/usr/bin/python3"

// needPackages fails, naming the Debian packages, when a peer is missing.
func needPackages(module string, pkgs string) error {
	out, err := exec.Command(debPython, "-c", "import "+module).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s cannot import %s (%v: %s): install Debian's %s (apt-get install -y --no-install-recommends %s)",
			debPython, module, err, strings.TrimSpace(string(out)), pkgs, pkgs)
	}
	return nil
}

// startPlacement starts Placement 8.0 (placementpeer) with the providers
// loaded straight into its database (2,000 API calls at Placement's ~30 a
// second would take a minute; the rows are the ones its API writes:
// provider at generation 1, root itself, three inventories).
func startPlacement(ctx context.Context, providers []provider) (*placementpeer.Peer, error) {
	if err := placementpeer.Available(); err != nil {
		return nil, err
	}
	return placementpeer.StartSeeded(ctx, func(ctx context.Context, db string) error {
		return loadPlacementDB(ctx, db, providers)
	})
}

// loadPlacementDB writes providers into Placement's schema in one
// transaction.
func loadPlacementDB(ctx context.Context, path string, providers []provider) error {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return fmt.Errorf("opening placement.db: %w", err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("placement.db: %w", err)
	}
	defer tx.Rollback()
	now := time.Now().UTC().Format("2006-01-02 15:04:05.000000")
	// Placement's standard resource classes have fixed ids (their index
	// in os-resource-classes): VCPU 0, MEMORY_MB 1, DISK_GB 2.
	for i, p := range providers {
		id := i + 1
		if _, err := tx.ExecContext(ctx, `INSERT INTO resource_providers (created_at, updated_at, id, uuid, name, generation, root_provider_id, parent_provider_id) VALUES (?, ?, ?, ?, ?, 1, ?, NULL)`,
			now, now, id, p.UUID, p.Name, id); err != nil {
			return fmt.Errorf("placement.db: provider %s: %w", p.Name, err)
		}
		for _, inv := range []struct {
			rc    int
			total int64
			ratio float64
		}{{0, p.VCPUs, p.CPURatio}, {1, p.MemoryMB, 1}, {2, p.DiskGB, 1}} {
			if _, err := tx.ExecContext(ctx, `INSERT INTO inventories (created_at, updated_at, resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, step_size, allocation_ratio) VALUES (?, NULL, ?, ?, ?, 0, 1, 2147483647, 1, ?)`,
				now, id, inv.rc, inv.total, inv.ratio); err != nil {
				return fmt.Errorf("placement.db: inventory of %s: %w", p.Name, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("placement.db: %w", err)
	}
	return nil
}

// provider is one of the side-by-side's providers.
type provider = hostShape

// placementProviders returns the n providers: VCPU 64 at ratio 4.0,
// MEMORY_MB 262144, DISK_GB 2000, nothing allocated.
func placementProviders(n int) []provider {
	ps := make([]provider, n)
	for i := range ps {
		ps[i] = provider{Name: fmt.Sprintf("cn%05d", i), UUID: fmt.Sprintf("5e1ec7ed-0000-4000-8000-%012d", i),
			VCPUs: 64, CPURatio: 4, MemoryMB: 262144, DiskGB: 2000}
	}
	return ps
}

// loadKeelPlacement creates the providers through keel's Placement API.
func loadKeelPlacement(ctx context.Context, c *httpClient, providers []provider) error {
	for _, p := range providers {
		var created struct {
			Generation int64 `json:"generation"`
		}
		if _, err := c.do(ctx, "POST", "/resource_providers", map[string]any{"uuid": p.UUID, "name": p.Name}, &created); err != nil {
			return err
		}
		if _, err := c.do(ctx, "PUT", "/resource_providers/"+p.UUID+"/inventories", map[string]any{
			"resource_provider_generation": created.Generation,
			"inventories": map[string]any{
				"VCPU":      map[string]any{"total": p.VCPUs, "allocation_ratio": p.CPURatio},
				"MEMORY_MB": map[string]any{"total": p.MemoryMB},
				"DISK_GB":   map[string]any{"total": p.DiskGB},
			},
		}, nil); err != nil {
			return err
		}
	}
	return nil
}

// candidatesAnswer is the part of GET /allocation_candidates a scheduler
// reads: the allocation requests, to claim the first.
type candidatesAnswer struct {
	AllocationRequests []struct {
		Allocations map[string]struct {
			Resources map[string]int64 `json:"resources"`
		} `json:"allocations"`
	} `json:"allocation_requests"`
	ProviderSummaries map[string]any `json:"provider_summaries"`
}

// timeCandidates times GET query on each client, side by side, and
// returns each one's median and how many candidates its last answer
// held. After one warm-up request each, the harness's garbage is
// collected (the keel server shares this process's heap), then reps
// rounds ask each client once, in turn — the first client first in even
// rounds, last in odd ones — so that both meet the same load. Each
// request is timed from being sent until the last byte of the answer is
// read, into the same buffer each time; decoding it is the client's
// work, left out.
func timeCandidates(ctx context.Context, clients []*httpClient, query string, reps int) ([]float64, []int, error) {
	bufs := make([][]byte, len(clients))
	ds := make([][]time.Duration, len(clients))
	for i, c := range clients {
		_, body, err := c.rawInto(ctx, "GET", query, nil, nil)
		if err != nil {
			return nil, nil, err
		}
		bufs[i] = body
	}
	runtime.GC()
	for r := range reps {
		for k := range clients {
			i := k
			if r%2 == 1 {
				i = len(clients) - 1 - k
			}
			t0 := time.Now()
			_, body, err := clients[i].rawInto(ctx, "GET", query, nil, bufs[i])
			if err != nil {
				return nil, nil, err
			}
			ds[i] = append(ds[i], time.Since(t0))
			bufs[i] = body
		}
	}
	medians := make([]float64, len(clients))
	counts := make([]int, len(clients))
	for i := range clients {
		var ans candidatesAnswer
		if err := json.Unmarshal(bufs[i], &ans); err != nil {
			return nil, nil, fmt.Errorf("decoding allocation candidates: %w", err)
		}
		medians[i], counts[i] = ms(percentile(ds[i], 50)), len(ans.AllocationRequests)
	}
	return medians, counts, nil
}

// firstCandidate returns the provider of the first allocation request,
// reading only as far into the answer as it must (a scheduler that wants
// one host need not decode 1,000).
func firstCandidate(body []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", fmt.Errorf("allocation candidates: not a JSON object (%v)", err)
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("reading allocation candidates: %w", err)
		}
		if key != "allocation_requests" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", fmt.Errorf("reading allocation candidates: %w", err)
			}
			continue
		}
		if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
			return "", fmt.Errorf("allocation_requests: not a list (%v)", err)
		}
		if !dec.More() {
			return "", errors.New("no allocation candidates left")
		}
		var first struct {
			Allocations map[string]json.RawMessage `json:"allocations"`
		}
		if err := dec.Decode(&first); err != nil {
			return "", fmt.Errorf("reading the first allocation request: %w", err)
		}
		for rp := range first.Allocations {
			return rp, nil
		}
		return "", errors.New("the first allocation request names no provider")
	}
	return "", errors.New("no allocation_requests in the answer")
}

// claim writes one consumer's allocation at microversion 1.28+.
func claim(ctx context.Context, c *httpClient, consumer, rp string) error {
	_, err := c.do(ctx, "PUT", "/allocations/"+consumer, map[string]any{
		"allocations":         map[string]any{rp: map[string]any{"resources": claimResources}},
		"project_id":          "5e1ec7ed-0000-4000-8000-00000000000a",
		"user_id":             "5e1ec7ed-0000-4000-8000-00000000000b",
		"consumer_generation": nil,
	}, nil)
	return err
}

// timeClaims writes n new consumers one at a time, round-robin over the
// providers, and returns claims per second.
func timeClaims(ctx context.Context, c *httpClient, providers []provider, n int) (float64, error) {
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if err := claim(ctx, c, fmt.Sprintf("c1a1a000-0000-4000-8000-%012d", i), providers[i%len(providers)].UUID); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// timeSchedules does n rounds of what a scheduler does per boot with
// Placement — GET the candidates, PUT /allocations on the first — and
// returns rounds per second.
func timeSchedules(ctx context.Context, c *httpClient, n int) (float64, error) {
	t0 := time.Now()
	for i := 0; i < n; i++ {
		_, body, err := c.raw(ctx, "GET", candidatesQuery, nil)
		if err != nil {
			return 0, err
		}
		rp, err := firstCandidate(body)
		if err != nil {
			return 0, err
		}
		if err := claim(ctx, c, fmt.Sprintf("5c4ed000-0000-4000-8000-%012d", i), rp); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// candidateReps is how many timed requests each allocation candidates
// figure is the median of: at 5 one descheduled request on this 2-core
// machine moved the median by a factor of 3.
const candidateReps = 21

// placement runs the side by sides with OpenStack Placement 8.0: the
// flat providers' case, then the trees', each with its own pair of
// servers (the first pair is stopped before the second starts, so the
// trees' keel does not share its process with a server left running).
func (r *run) placement(ctx context.Context) error {
	if err := r.placementFlat(ctx); err != nil {
		return err
	}
	return r.placementTrees(ctx)
}

// placementFlat times candidates, claims and both over flat providers.
func (r *run) placementFlat(ctx context.Context) error {
	n := r.size(1000, 20)
	reps := r.size(candidateReps, 3)
	claims := r.size(300, 10)
	keelScheds, peerScheds := r.size(300, 5), r.size(30, 2)
	providers := placementProviders(n)

	r.progress("placement: configuring OpenStack Placement with %d providers", n)
	peer, kc, pc, stop, err := startPlacementPair(ctx, providers)
	if err != nil {
		return err
	}
	defer stop()
	t0 := time.Now()
	if err := loadKeelPlacement(ctx, kc, providers); err != nil {
		return fmt.Errorf("loading keel: %w", err)
	}
	r.progress("placement: %d providers created through keel's Placement API in %.1f s", n, time.Since(t0).Seconds())
	for _, side := range []struct {
		name string
		c    *httpClient
	}{{"keel", kc}, {"Placement", pc}} {
		var list struct {
			Providers []struct {
				UUID string `json:"uuid"`
			} `json:"resource_providers"`
		}
		if _, err := side.c.do(ctx, "GET", "/resource_providers", nil, &list); err != nil {
			return fmt.Errorf("%s: %w", side.name, err)
		}
		if len(list.Providers) != n {
			return fmt.Errorf("%s lists %d providers, want %d", side.name, len(list.Providers), n)
		}
	}

	var kt, pt struct {
		candidatesMS, claimsPerSec, schedPerSec float64
		candidates                              int
	}
	r.progress("placement: timing allocation candidates")
	took, got, err := timeCandidates(ctx, []*httpClient{kc, pc}, candidatesQuery, reps)
	if err != nil {
		return err
	}
	kt.candidatesMS, kt.candidates, pt.candidatesMS, pt.candidates = took[0], got[0], took[1], got[1]
	if kt.candidates != pt.candidates || kt.candidates != min(n, 1000) {
		return fmt.Errorf("keel answered %d allocation candidates, Placement %d; want %d", kt.candidates, pt.candidates, min(n, 1000))
	}
	r.progress("placement: timing claims")
	if kt.claimsPerSec, err = timeClaims(ctx, kc, providers, claims); err != nil {
		return fmt.Errorf("keel: %w", err)
	}
	if pt.claimsPerSec, err = timeClaims(ctx, pc, providers, claims); err != nil {
		return fmt.Errorf("placement: %w", err)
	}
	// Both hold the same claims now: the two did the same work.
	if err := sameUsages(ctx, kc, pc, providers); err != nil {
		return err
	}
	r.progress("placement: timing candidates + claim")
	if kt.schedPerSec, err = timeSchedules(ctx, kc, keelScheds); err != nil {
		return fmt.Errorf("keel: %w", err)
	}
	if pt.schedPerSec, err = timeSchedules(ctx, pc, peerScheds); err != nil {
		return fmt.Errorf("placement: %w", err)
	}

	candRatio := pt.candidatesMS / kt.candidatesMS
	claimRatio := kt.claimsPerSec / pt.claimsPerSec
	schedRatio := kt.schedPerSec / pt.schedPerSec
	r.figure("placement_candidates_ms_keel", kt.candidatesMS)
	r.figure("placement_candidates_ms_placement", pt.candidatesMS)
	r.figure("placement_candidates_ratio", candRatio)
	r.figure("placement_claims_per_s_keel", kt.claimsPerSec)
	r.figure("placement_claims_per_s_placement", pt.claimsPerSec)
	r.figure("placement_claims_ratio", claimRatio)
	r.figure("placement_schedule_per_s_keel", kt.schedPerSec)
	r.figure("placement_schedule_per_s_placement", pt.schedPerSec)
	r.figure("placement_schedule_ratio", schedRatio)
	fair := fmt.Sprintf("one gunicorn worker (Placement %s, max microversion %s) vs one keel server, both on SQLite (local disk), both on loopback, same client; %s providers (VCPU 64 ×4.0, MEMORY_MB 262144, DISK_GB 2000); microversion %s",
		placementPackageVersion(), peer.Version, commas(int64(n)), strings.TrimPrefix(placementMicroversion, "placement "))
	r.row("4", "GET /allocation_candidates (VCPU:2, MEMORY_MB:4096, DISK_GB:20, limit=1000)",
		fmt.Sprintf("keel %s, Placement %s: keel %.0f× faster (%s)", fmtMS(kt.candidatesMS), fmtMS(pt.candidatesMS), candRatio, r.goal("placement_candidates_ratio", candRatio >= 100, "≥ 100×")),
		fmt.Sprintf("median of %d after a warm-up, asked of keel and Placement in turn, %d candidates each, timed until the whole answer is read; ", reps, kt.candidates)+fair)
	r.row("4", "sequential PUT /allocations/{consumer}",
		fmt.Sprintf("keel %s, Placement %s: keel %.0f× (%s)", fmtRate(kt.claimsPerSec, "/s"), fmtRate(pt.claimsPerSec, "/s"), claimRatio, r.goal("placement_claims_ratio", claimRatio >= 50, "≥ 50×")),
		fmt.Sprintf("%d new consumers each, one at a time, round-robin over the providers, consumer_generation null, project_id/user_id set; ", claims)+fair)
	r.row("4", "candidates + claim (a Placement-style schedule)",
		fmt.Sprintf("keel %s, Placement %s: keel %.0f× (%s)", fmtRate(kt.schedPerSec, "/s"), fmtRate(pt.schedPerSec, "/s"), schedRatio, r.goal("placement_schedule_ratio", schedRatio >= 300, "≥ 300×")),
		fmt.Sprintf("GET the candidates, then PUT /allocations on the first; keel %d rounds, Placement %d; ", keelScheds, peerScheds)+fair)
	r.progress("placement: candidates %.1f×, claims %.1f×, candidates+claim %.1f×", candRatio, claimRatio, schedRatio)
	return nil
}

// startPlacementPair starts OpenStack Placement with providers in its
// database and a keel server, and returns a client of each one's
// Placement API and a function that stops both.
func startPlacementPair(ctx context.Context, providers []provider) (peer *placementpeer.Peer, kc, pc *httpClient, stop func(), err error) {
	if peer, err = startPlacement(ctx, providers); err != nil {
		return nil, nil, nil, nil, err
	}
	k, err := startKeel(ctx, nil)
	if err != nil {
		peer.Stop()
		return nil, nil, nil, nil, err
	}
	kc = newHTTPClient(k.srv.URL()+"/placement", k.token, placementMicroversion)
	pc = newHTTPClient(peer.URL, "admin", placementMicroversion)
	return peer, kc, pc, func() { k.stop(); peer.Stop() }, nil
}

// treeCandidatesQuery is the nested case: a NUMA cell's CPU and memory as
// one granular group, disk from a sharing provider as another. (Disk in
// the unnamed group would not compare: Placement 8.0 then keeps one tree
// per sharing provider.)
const treeCandidatesQuery = "/allocation_candidates?resources1=VCPU:2,MEMORY_MB:4096&resources2=DISK_GB:20&group_policy=none"

// placementTrees times treeCandidatesQuery on keel and on Placement 8.0
// over the same provider trees, loaded through each one's API: compute
// nodes with no inventory of their own and two NUMA children each (VCPU
// 32 ×4.0, MEMORY_MB 131072), and one provider per 100 nodes sharing
// DISK_GB 100000 with them through an aggregate. Every node answers two
// candidates (either cell), each spanning its tree and its pool.
func (r *run) placementTrees(ctx context.Context) error {
	nodes := r.size(1000, 20)
	reps := r.size(candidateReps, 2)
	r.progress("placement trees: configuring OpenStack Placement")
	_, kc, pc, stop, err := startPlacementPair(ctx, nil)
	if err != nil {
		return err
	}
	defer stop()
	for _, side := range []struct {
		name string
		c    *httpClient
	}{{"keel", kc}, {"Placement", pc}} {
		t0 := time.Now()
		if err := loadTrees(ctx, side.c, nodes); err != nil {
			return fmt.Errorf("%s: loading provider trees: %w", side.name, err)
		}
		r.progress("placement trees: %d trees loaded through %s's API in %.1f s", nodes, side.name, time.Since(t0).Seconds())
	}
	took, got, err := timeCandidates(ctx, []*httpClient{kc, pc}, treeCandidatesQuery, reps)
	if err != nil {
		return err
	}
	if got[0] != got[1] || got[0] != 2*nodes {
		return fmt.Errorf("keel answered %d candidates over the trees, Placement %d; want %d", got[0], got[1], 2*nodes)
	}
	ratio := took[1] / took[0]
	r.figure("placement_tree_candidates_ms_keel", took[0])
	r.figure("placement_tree_candidates_ms_placement", took[1])
	r.figure("placement_tree_candidates_ratio", ratio)
	r.row("4", "GET /allocation_candidates over provider trees (resources1=VCPU:2,MEMORY_MB:4096 & resources2=DISK_GB:20, group_policy=none)",
		fmt.Sprintf("keel %s, Placement %s: keel %.0f× faster (%s)", fmtMS(took[0]), fmtMS(took[1]), ratio, r.goal("placement_tree_candidates_ratio", ratio >= 100, "≥ 100×")),
		fmt.Sprintf("median of %d after a warm-up, asked of keel and Placement in turn, each timed until the whole answer is read, %d candidates each; %s compute nodes with two NUMA children (VCPU 32 ×4.0, MEMORY_MB 131072) and one DISK_GB 100000 provider shared per 100 nodes, loaded through each API; one gunicorn worker (Placement %s) vs one keel server, both on SQLite; microversion %s",
			reps, got[0], commas(int64(nodes)), placementPackageVersion(), strings.TrimPrefix(placementMicroversion, "placement ")))
	r.progress("placement trees: candidates %.1f×", ratio)
	return nil
}

// loadTrees creates treeCandidatesQuery's providers through a Placement
// API, as an operator's tooling or Nova's report client would.
func loadTrees(ctx context.Context, c *httpClient, nodes int) error {
	vcpu := map[string]any{"total": 32, "allocation_ratio": 4.0}
	mem := map[string]any{"total": 131072}
	put := func(path string, body any) error {
		_, err := c.do(ctx, "PUT", path, body, nil)
		return err
	}
	for s := 0; s*100 < nodes; s++ {
		agg := fmt.Sprintf("a66a66a6-0000-4000-8000-%012d", s)
		shared := fmt.Sprintf("5ba5ed00-0000-4000-8000-%012d", s)
		if _, err := c.do(ctx, "POST", "/resource_providers", map[string]any{"uuid": shared, "name": fmt.Sprintf("shared%02d", s)}, nil); err != nil {
			return err
		}
		if err := put("/resource_providers/"+shared+"/inventories", map[string]any{"resource_provider_generation": 0,
			"inventories": map[string]any{"DISK_GB": map[string]any{"total": 100000}}}); err != nil {
			return err
		}
		if err := put("/resource_providers/"+shared+"/traits", map[string]any{"resource_provider_generation": 1, "traits": []string{"MISC_SHARES_VIA_AGGREGATE"}}); err != nil {
			return err
		}
		if err := put("/resource_providers/"+shared+"/aggregates", map[string]any{"resource_provider_generation": 2, "aggregates": []string{agg}}); err != nil {
			return err
		}
		for i := s * 100; i < min(nodes, s*100+100); i++ {
			root := fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
			if _, err := c.do(ctx, "POST", "/resource_providers", map[string]any{"uuid": root, "name": fmt.Sprintf("cn%04d", i)}, nil); err != nil {
				return err
			}
			if err := put("/resource_providers/"+root+"/aggregates", map[string]any{"resource_provider_generation": 0, "aggregates": []string{agg}}); err != nil {
				return err
			}
			for n := range 2 {
				child := fmt.Sprintf("%08x-0000-4000-8000-00000000000%d", i, n+1)
				if _, err := c.do(ctx, "POST", "/resource_providers", map[string]any{"uuid": child, "name": fmt.Sprintf("cn%04d-numa%d", i, n), "parent_provider_uuid": root}, nil); err != nil {
					return err
				}
				if err := put("/resource_providers/"+child+"/inventories", map[string]any{"resource_provider_generation": 0,
					"inventories": map[string]any{"VCPU": vcpu, "MEMORY_MB": mem}}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// sameUsages checks that keel and Placement agree on every provider's
// usage after the same claims: the two did the same work.
func sameUsages(ctx context.Context, kc, pc *httpClient, providers []provider) error {
	for i, p := range providers {
		if i%max(1, len(providers)/20) != 0 {
			continue // a sample keeps this cheap against Placement
		}
		var ku, pu struct {
			Usages map[string]int64 `json:"usages"`
		}
		if _, err := kc.do(ctx, "GET", "/resource_providers/"+p.UUID+"/usages", nil, &ku); err != nil {
			return fmt.Errorf("keel: %w", err)
		}
		if _, err := pc.do(ctx, "GET", "/resource_providers/"+p.UUID+"/usages", nil, &pu); err != nil {
			return fmt.Errorf("placement: %w", err)
		}
		if fmt.Sprint(sortedUsage(ku.Usages)) != fmt.Sprint(sortedUsage(pu.Usages)) {
			return fmt.Errorf("provider %s: keel's usages %v, Placement's %v", p.Name, ku.Usages, pu.Usages)
		}
	}
	return nil
}

func sortedUsage(m map[string]int64) []string {
	var out []string
	for k, v := range m {
		if v != 0 {
			out = append(out, fmt.Sprintf("%s=%d", k, v))
		}
	}
	sort.Strings(out)
	return out
}

// placementPackageVersion asks dpkg for python3-placement's version.
func placementPackageVersion() string {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "python3-placement").Output()
	if err != nil || len(out) == 0 {
		return "8.0"
	}
	return string(out)
}
