package placementapi_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"keel/internal/api/placementapi"
	"keel/internal/placement"
	"keel/internal/store"
	"keel/internal/store/memory"
)

var updateAnswers = flag.Bool("update-answers", false, "rewrite testdata/candidate_answers.txt from this tree's answers")

// TestCandidateAnswerBytes: GET /allocation_candidates answers byte for
// byte what testdata/candidate_answers.txt recorded (each answer's size
// and SHA-256), over provider trees with sharing pools, granular groups
// and flat providers, at every microversion that changes the answer's
// form. The encoders and the search are tuned for speed; this test keeps
// their output what it was when the file was written (go test -run
// TestCandidateAnswerBytes -update-answers rewrites it, for a change
// meant to alter answers).
func TestCandidateAnswerBytes(t *testing.T) {
	ctx := context.Background()
	trees := memory.New()
	loadAnswerTrees(t, ctx, trees, 60)
	// Some usage, so that summaries show it and some cells no longer fit.
	for k := range 150 {
		cell := fmt.Sprintf("%08x-0000-4000-8000-00000000000%d", k%60, k%2+1)
		if _, err := trees.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: fmt.Sprintf("%08x-3333-4000-8000-000000000000", k), ProjectID: "p", UserID: "u",
			Allocations: map[string]placement.Resources{cell: {placement.VCPU: int64(8 + k%4*8)}}}); err != nil && !placement.IsCapacity(err) {
			t.Fatal(err)
		}
	}
	flat := memory.New()
	for i := range 50 {
		vcpu := placement.NewInventory(int64(8 + i%4*8))
		vcpu.AllocationRatio = 4
		p := placement.Provider{UUID: fmt.Sprintf("%08x-0000-4000-8000-0000000000f0", i), Name: fmt.Sprintf("flat%03d", i),
			Inventories: placement.Inventories{placement.VCPU: vcpu, placement.MemoryMB: placement.NewInventory(int64(4096 * (1 + i%3))), placement.DiskGB: placement.NewInventory(200)}}
		if i%5 == 0 {
			p.Traits = []string{"HW_CPU_X86_AVX2"}
		}
		if _, err := flat.CreateProvider(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	treeQueries := []string{
		"resources1=VCPU:2,MEMORY_MB:4096&resources2=DISK_GB:20&group_policy=none",
		"resources1=VCPU:2,MEMORY_MB:4096&resources2=DISK_GB:20&group_policy=isolate",
		"resources=VCPU:2,MEMORY_MB:4096,DISK_GB:20",
		"resources=VCPU:40",
		"resources=VCPU:4&resources1=MEMORY_MB:1024&group_policy=none",
		"resources_A=VCPU:1&resources_B=VCPU:1&group_policy=isolate&limit=7",
		"resources=VCPU:1&required=CUSTOM_GOLD",
		"resources=VCPU:1&required=!CUSTOM_GOLD&limit=5",
		"resources1=VCPU:1&required1=CUSTOM_GOLD&resources2=DISK_GB:1&group_policy=none",
		"resources=VCPU:1,DISK_GB:1&member_of=a66a66a6-0000-4000-8000-000000000001",
		"resources=VCPU:1&in_tree=00000003-0000-4000-8000-000000000000",
		"resources=DISK_GB:50",
	}
	flatQueries := []string{
		"resources=VCPU:2,MEMORY_MB:4096,DISK_GB:20",
		"resources=VCPU:2,MEMORY_MB:4096,DISK_GB:20&limit=10",
		"resources=VCPU:100",
		"resources=VCPU:1&required=HW_CPU_X86_AVX2",
		"resources=MEMORY_MB:8192",
	}
	versions := []string{"1.10", "1.11", "1.12", "1.16", "1.17", "1.26", "1.27", "1.28", "1.29", "1.33", "1.34", "1.36", "1.39"}
	var got []string
	for _, set := range []struct {
		name    string
		st      store.Store
		queries []string
	}{{"trees", trees, treeQueries}, {"flat", flat, flatQueries}} {
		srv := httptest.NewServer(placementapi.New(set.st, func(*http.Request) bool { return true }))
		for _, q := range set.queries {
			for _, v := range versions {
				// Twice: the second answer comes from what the first
				// left remembered (memos, summaries).
				var first string
				for round := range 2 {
					status, body := answerOf(t, srv.URL, q, v)
					sum := sha256.Sum256(body)
					line := fmt.Sprintf("%s %s %s %d %d %s", set.name, v, q, status, len(body), hex.EncodeToString(sum[:8]))
					if status != http.StatusOK {
						// (A refusal carries a request id.)
						line = fmt.Sprintf("%s %s %s %d", set.name, v, q, status)
					}
					if round == 0 {
						first = line
						got = append(got, line)
					} else if line != first {
						t.Errorf("asked again, a different answer:\n %s\n %s", first, line)
					}
				}
			}
		}
		srv.Close()
	}
	path := filepath.Join("testdata", "candidate_answers.txt")
	if *updateAnswers {
		if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		want = append(want, sc.Text())
	}
	if len(want) != len(got) {
		t.Fatalf("%d answers, %s records %d", len(got), path, len(want))
	}
	for i := range want {
		if want[i] != got[i] {
			t.Errorf("answer differs from the recorded one:\n want %s\n got  %s", want[i], got[i])
		}
	}
}

func answerOf(t *testing.T, base, q, v string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/placement/allocation_candidates?"+q, nil)
	req.Header.Set("OpenStack-API-Version", "placement "+v)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// loadAnswerTrees is treeBench's shape at n compute nodes (a sharing
// DISK_GB pool per 20), with CUSTOM_GOLD on every third node's second
// cell and the pools' aggregate on the roots.
func loadAnswerTrees(t *testing.T, ctx context.Context, st store.Store, n int) {
	vcpu := placement.NewInventory(32)
	vcpu.AllocationRatio = 4
	if _, err := st.CreateTrait(ctx, "CUSTOM_GOLD"); err != nil {
		t.Fatal(err)
	}
	for s := 0; s*20 < n; s++ {
		agg := fmt.Sprintf("a66a66a6-0000-4000-8000-%012d", s)
		if _, err := st.CreateProvider(ctx, placement.Provider{UUID: fmt.Sprintf("5ba5ed00-0000-4000-8000-%012d", s), Name: fmt.Sprintf("shared%02d", s),
			Inventories: placement.Inventories{placement.DiskGB: placement.NewInventory(int64(100 + 1000*s))},
			Traits:      []string{placement.SharesViaAggregate}, Aggregates: []string{agg}}); err != nil {
			t.Fatal(err)
		}
		for i := s * 20; i < min(n, s*20+20); i++ {
			root := fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
			if _, err := st.CreateProvider(ctx, placement.Provider{UUID: root, Name: fmt.Sprintf("cn%04d", i),
				Inventories: placement.Inventories{}, Aggregates: []string{agg}}); err != nil {
				t.Fatal(err)
			}
			for c := range 2 {
				p := placement.Provider{UUID: fmt.Sprintf("%08x-0000-4000-8000-00000000000%d", i, c+1), Name: fmt.Sprintf("cn%04d-numa%d", i, c),
					ParentUUID: root, Inventories: placement.Inventories{placement.VCPU: vcpu, placement.MemoryMB: placement.NewInventory(131072)}}
				if c == 1 && i%3 == 0 {
					p.Traits = []string{"CUSTOM_GOLD"}
				}
				if _, err := st.CreateProvider(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}
