package cloudtest

import (
	"context"
	"strings"
	"testing"

	"keel/internal/placement"
)

// TestViolationsSeeWhatIsWrong: a fresh cloud with an instance is
// consistent; a claim nobody owns, and a host record that disagrees with
// the allocations, are each named.
func TestViolationsSeeWhatIsWrong(t *testing.T) {
	c := New(t, Options{Hosts: 2})
	c.Seed("h1", "a", Medium)
	if v := c.Violations(); len(v) != 0 {
		t.Fatalf("a consistent cloud has violations: %v", v)
	}
	if _, err := c.Store.WriteAllocations(context.Background(), placement.AllocationWrite{ConsumerUUID: "ghost", Type: placement.ConsumerInstance,
		Allocations: map[string]placement.Resources{"rp-h2": Small.Resources()}}); err != nil {
		t.Fatal(err)
	}
	v := strings.Join(c.Violations(), "\n")
	for _, want := range []string{"consumer ghost holds", "host record of h2 says", "audit: "} {
		if !strings.Contains(v, want) {
			t.Errorf("violations do not say %q:\n%s", want, v)
		}
	}
}
