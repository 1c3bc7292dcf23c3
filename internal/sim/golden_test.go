package sim

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"keel/internal/sim/scenario"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/generated-*.json from this run")

// TestGeneratedReportIsUnchanged pins the generated scenario's report (a
// smaller `keel sim --generate`: 150 hosts, 1 simulated hour, every
// policy) byte for byte: a change made for speed must not change a single
// decision. Only a change meant to alter the simulation may rewrite the
// file (go test ./internal/sim -run TestGeneratedReportIsUnchanged
// -update-golden), saying why in its commit.
func TestGeneratedReportIsUnchanged(t *testing.T) {
	sc := scenario.Generate(150, 1, 1)
	rep, err := Run(context.Background(), sc, Options{Parallel: true})
	if err != nil {
		t.Fatal(err)
	}
	got := reportJSON(t, rep)
	path := filepath.Join("testdata", "generated-150-hosts-1h.json")
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the generated scenario's report changed (want %s):\n%s", path, got)
	}
	for _, p := range rep.Policies {
		if p.Decisions < 5000 || len(p.Inconsistencies) > 0 {
			t.Errorf("%s: %d decisions, %d inconsistencies; want a real workload kept exact", p.Policy, p.Decisions, len(p.Inconsistencies))
		}
	}
}

// id formats as fmt's %012d would, past 12 digits too.
func TestIDIsTheCounter(t *testing.T) {
	for _, n := range []int{0, 1, 9, 10, 12345, 999999999999, 1000000000000, 1234567890123456} {
		w := &world{nextID: n}
		want := fmt.Sprintf("00000000-0000-4000-8000-%012d", n+1)
		if got := w.id(); got != want {
			t.Errorf("id after %d = %s, want %s", n, got, want)
		}
	}
}
