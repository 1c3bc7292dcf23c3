package rpc

import (
	"context"
	"testing"

	"keel/internal/compute"
)

// TestAgentMethodsHaveDistinctNames: ServeAgent refuses two handlers with
// one name (an evacuation's rebuild once shadowed the lifecycle's), so it
// serves every method of every family.
func TestAgentMethodsHaveDistinctNames(t *testing.T) {
	m := &compute.Manager{}
	names := map[string]string{}
	life := map[string]func(ctx context.Context, a computeArgs) (any, error){}
	lifecycleHandlers(m, life)
	for family, hs := range map[string]map[string]func(ctx context.Context, a computeArgs) (any, error){"resize": resizeHandlers(m), "lifecycle": life} {
		for name := range hs {
			if other, dup := names[name]; dup {
				t.Fatalf("agent method %s is in both %s and %s", name, other, family)
			}
			names[name] = family
		}
	}
	if names[mRebuildInstance] != "resize" || len(names) < 8 {
		t.Fatalf("methods %v", names)
	}
}
