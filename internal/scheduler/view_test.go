package scheduler

import (
	"context"
	"fmt"
	"testing"

	"keel/internal/placement"
	"keel/internal/records"
)

func TestViewFollowsAHostReRegisteredUnderANewProvider(t *testing.T) {
	ctx := context.Background()
	c := newCloud(t, 3)
	s := c.scheduler(t, DefaultConfig(), PolicyClaim, 1)
	if err := s.View().Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	// Between two refreshes h02's provider is deleted and created again
	// under a new UUID.
	if err := c.st.DeleteProvider(ctx, "rp-h02"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.st.CreateProvider(ctx, placement.Provider{UUID: "rp-h02-new", Name: "h02", Inventories: placement.Inventories{placement.VCPU: placement.NewInventory(4)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.View().Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	h, ok := s.View().Host("h02")
	if s.View().Len() != 3 || !ok || h.ProviderUUID != "rp-h02-new" {
		t.Fatalf("view has %d hosts; h02 present=%v with provider %q", s.View().Len(), ok, h.ProviderUUID)
	}
}

func TestClaimLoopSurvivesAHostRemovedMidDecision(t *testing.T) {
	ctx := context.Background()
	c := newCloud(t, 5)
	cfg := DefaultConfig()
	cfg.MaxAttempts = 4
	s := c.scheduler(t, cfg, PolicyClaim, 1)
	var tried []string
	_, err := s.Select(ctx, &Request{Resources: small()}, func(_ context.Context, cand Candidate) (int64, error) {
		tried = append(tried, cand.Host)
		if len(tried) == 2 {
			// h01, already tried, disappears while h02 is tried: the view's
			// host list shrinks under the decision.
			if err := c.st.DeleteProvider(ctx, "rp-h01"); err != nil {
				t.Fatal(err)
			}
		}
		return 0, &placement.ConflictError{Kind: placement.ProviderGeneration}
	})
	if !IsNoValidHost(err) {
		t.Fatalf("want NoValidHost after refused claims, got %v", err)
	}
	seen := map[string]bool{}
	for _, h := range tried {
		if seen[h] {
			t.Fatalf("host %s tried twice: %v", h, tried)
		}
		seen[h] = true
	}
	// Equal hosts rank in name order; the decision keeps its ranking of
	// host_subset_size (1) + max_attempts (4) hosts.
	if fmt.Sprint(tried) != "[h01 h02 h03 h04 h05]" {
		t.Fatalf("tried %v, want [h01 h02 h03 h04 h05]", tried)
	}
}

// candidates returns the hosts that pass the filters for req, in name
// order.
func candidates(t *testing.T, s *Scheduler, req *Request) []string {
	t.Helper()
	exp, err := s.Explain(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range exp.Hosts {
		if h.RejectedBy == "" {
			out = append(out, h.Host)
		}
	}
	return out
}

func TestViewFollowsAggregates(t *testing.T) {
	ctx := context.Background()
	c := newCloud(t, 3)
	cfg := DefaultConfig()
	cfg.EnabledFilters = append(cfg.EnabledFilters, "AggregateInstanceExtraSpecsFilter")
	s := c.scheduler(t, cfg, PolicyClaim, 1)
	inAZ1 := &Request{Resources: small(), Zone: "az1"}
	if got := candidates(t, s, inAZ1); got != nil {
		t.Fatalf("no host is in az1 yet, but %v pass", got)
	}
	a, err := c.st.CreateAggregate(ctx, records.Aggregate{Name: "rack", Metadata: map[string]string{"availability_zone": "az1", "ssd": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.st.UpdateAggregate(ctx, a.ID, func(x *records.Aggregate) error { x.Hosts = []string{"h02", "h03"}; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(candidates(t, s, inAZ1)); got != "[h02 h03]" {
		t.Fatalf("az1 after adding h02 and h03: %s", got)
	}
	if got := fmt.Sprint(candidates(t, s, &Request{Resources: small(), Zone: "nova"})); got != "[h01]" {
		t.Fatalf("nova (the default zone): %s", got)
	}
	ssd := &Request{Resources: small(), ExtraSpecs: map[string]string{"aggregate_instance_extra_specs:ssd": "true"}}
	if got := fmt.Sprint(candidates(t, s, ssd)); got != "[h02 h03]" {
		t.Fatalf("ssd=true: %s", got)
	}
	if _, err := c.st.UpdateAggregate(ctx, a.ID, func(x *records.Aggregate) error { x.Hosts = []string{"h03"}; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(candidates(t, s, inAZ1)); got != "[h03]" {
		t.Fatalf("az1 after removing h02: %s", got)
	}
	if err := c.st.DeleteAggregate(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if got := candidates(t, s, ssd); got != nil {
		t.Fatalf("ssd=true after deleting the aggregate: %v", got)
	}
}

func TestAggregateWeightMultipliers(t *testing.T) {
	ctx := context.Background()
	c := newCloud(t, 3)
	s := c.scheduler(t, DefaultConfig(), PolicyClaim, 1)
	best := func() string {
		exp, err := s.Explain(ctx, &Request{Resources: small()})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range exp.Hosts {
			if h.Rank == 1 {
				return h.Host
			}
		}
		return ""
	}
	c.use(t, "h01", "x", placement.Resources{placement.MemoryMB: 1024})
	if got := best(); got != "h02" {
		t.Fatalf("equal hosts but h01's RAM: best %s, want h02", got)
	}
	// An aggregate's ram_weight_multiplier applies to its hosts only:
	// with 3 on h03, h03's RAM term triples and it wins.
	a, err := c.st.CreateAggregate(ctx, records.Aggregate{Name: "big", Hosts: []string{"h03"}, Metadata: map[string]string{"ram_weight_multiplier": "3"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := best(); got != "h03" {
		t.Fatalf("h03's aggregate sets ram_weight_multiplier 3: best %s, want h03", got)
	}
	if _, err := c.st.UpdateAggregate(ctx, a.ID, func(x *records.Aggregate) error { x.Metadata["ram_weight_multiplier"] = "three"; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := best(); got != "h02" {
		t.Fatalf("a multiplier that is not a number is ignored (Nova): best %s, want h02", got)
	}
}
