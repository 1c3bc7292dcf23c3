package placementapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"reflect"
	"testing"

	"keel/internal/api/placementapi"
	"keel/internal/placement"
	"keel/internal/placementpeer"
	"keel/internal/store/memory"
	"keel/internal/testenv"
)

// TestNovaReportClient drives keel's Placement with Nova 26's own report
// client (testdata/nova_report.py): a compute node's provider and
// inventory, a claim, a reshape moving VCPU and the claim's allocation of
// it into two NUMA children, then a flavor's granular groups as Nova
// builds them, a claim of the first candidate with its mappings, and
// what keel's store then holds.
func TestNovaReportClient(t *testing.T) {
	testenv.External(t, "Nova 26's report client and Placement 8.0 (Debian's python3-nova, python3-placement, gunicorn)")
	if out, err := exec.Command("/usr/bin/python3", "-c", "import nova.scheduler.client.report").CombinedOutput(); err != nil {
		t.Fatalf("Nova 26's report client (Debian's python3-nova) is needed: %v: %s", err, out)
	}
	st := memory.New()
	api := placementapi.New(st, func(*http.Request) bool { return true })
	// Refusals are logged: Nova's client reports them only by status.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, r)
		if rec.Code >= 400 {
			t.Logf("%s %s (%s): %d %s", r.Method, r.URL, r.Header.Get("OpenStack-API-Version"), rec.Code, rec.Body.Bytes())
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	defer srv.Close()
	ctx := testenv.Context(t)
	run := func(url string) []byte {
		raw, err := exec.CommandContext(ctx, "/usr/bin/python3", "testdata/nova_report.py", url).Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("nova_report.py against %s: %v\n%s", url, err, stderr)
		}
		return raw
	}
	raw := run(srv.URL + "/placement")
	// The same client, the same steps, against Placement 8.0: the same
	// answers (candidates in any order).
	peer, err := placementpeer.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Stop()
	ref := run(peer.URL)
	var a, b any
	if err := json.Unmarshal(ref, &a); err != nil {
		t.Fatalf("%v: %s", err, ref)
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	if !reflect.DeepEqual(normalise(a), normalise(b)) {
		t.Errorf("Nova's report client read\nfrom Placement %s\nfrom keel      %s", ref, raw)
	}
	var out struct {
		Claim1, Claim2 bool
		Querystring    string
		Candidates     []struct {
			Allocations map[string]struct {
				Resources map[string]int64 `json:"resources"`
			} `json:"allocations"`
			Mappings map[string][]string `json:"mappings"`
		}
		Summaries []string
		Version   string
		VM1, VM2  struct {
			Allocations map[string]struct {
				Resources map[string]int64 `json:"resources"`
			} `json:"allocations"`
		}
		Tree []string
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	const (
		cn    = "c2000001-0000-4000-8000-000000000000"
		numa0 = "c2000001-0000-4000-8000-000000000010"
		numa1 = "c2000001-0000-4000-8000-000000000011"
	)
	if !out.Claim1 || !out.Claim2 {
		t.Errorf("claims: %v %v", out.Claim1, out.Claim2)
	}
	if len(out.Tree) != 3 || len(out.Summaries) != 3 {
		t.Errorf("tree %v, summaries %v", out.Tree, out.Summaries)
	}
	// The reshape: VM1's VCPU on numa0, its memory on the node.
	if out.VM1.Allocations[numa0].Resources["VCPU"] != 2 || out.VM1.Allocations[cn].Resources["MEMORY_MB"] != 512 ||
		out.VM1.Allocations[cn].Resources["VCPU"] != 0 {
		t.Errorf("vm1 after the reshape: %+v", out.VM1)
	}
	p, err := st.GetProvider(context.Background(), cn)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Inventories[placement.VCPU]; ok {
		t.Errorf("the node still has VCPU: %v", p.Inventories)
	}
	// Two isolated one-VCPU groups over two NUMA cells: two candidates,
	// each using both cells and the node's memory.
	if len(out.Candidates) != 2 {
		t.Fatalf("candidates for %s: %+v", out.Querystring, out.Candidates)
	}
	for _, c := range out.Candidates {
		if c.Allocations[numa0].Resources["VCPU"] != 1 || c.Allocations[numa1].Resources["VCPU"] != 1 ||
			c.Allocations[cn].Resources["MEMORY_MB"] != 256 || len(c.Mappings["1"]) != 1 || len(c.Mappings["2"]) != 1 ||
			c.Mappings["1"][0] == c.Mappings["2"][0] {
			t.Errorf("candidate %+v", c)
		}
	}
	if out.VM2.Allocations[numa0].Resources["VCPU"] != 1 || out.VM2.Allocations[numa1].Resources["VCPU"] != 1 {
		t.Errorf("vm2: %+v", out.VM2)
	}
	sums, err := st.ProviderSummaries(context.Background(), []string{numa0, numa1, cn})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]placement.Resources{}
	for _, s := range sums {
		used[s.UUID] = s.Usage
	}
	if used[numa0][placement.VCPU] != 3 || used[numa1][placement.VCPU] != 1 || used[cn][placement.MemoryMB] != 768 {
		t.Errorf("usage: %v", used)
	}
}
