package main

import (
	"strings"
	"testing"

	"keel/internal/client"
)

// TestPrintCandidatesOne: with one candidate, explain names it as picked
// without weighing, with no WEIGHT 0.000 column and no empty multipliers.
func TestPrintCandidatesOne(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	one := []client.HostExplanation{{Rank: 1, Host: "h01"}}
	if err := printCandidates(&b, one, 1); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	if strings.Contains(got, "0.000") || strings.Contains(got, "multipliers:") || !strings.Contains(got, "h01 is the only candidate") {
		t.Fatalf("one candidate printed:\n%s", got)
	}
}
