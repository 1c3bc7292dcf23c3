package conductor_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"keel/internal/cloudtest"
	"keel/internal/conductor"
	"keel/internal/records"
	"keel/internal/store"
	"keel/internal/store/memory"
)

// planRacer is a store on which another replica records a rebalance plan
// just before this one's periodic plan is recorded (the race the periodic
// rebalance on every replica must survive).
type planRacer struct {
	*memory.Store
	once  sync.Once
	other records.Plan
}

func (s *planRacer) CreatePlan(ctx context.Context, p records.Plan) (records.Plan, error) {
	s.once.Do(func() {
		o := p
		o.UUID += "-other-replica"
		var err error
		if s.other, err = s.Store.CreatePlan(ctx, o); err != nil {
			panic(err)
		}
	})
	return s.Store.CreatePlan(ctx, p)
}

// TestPeriodicRebalanceOnReplicas: of two periodic rebalance plans made at
// once by two replicas, the one recorded first stands and the later one is
// superseded at once (it is never approved); and a rebalance plan an
// operator has yet to approve makes the periodic run plan nothing (it is
// not superseded by one of the periodic run's).
func TestPeriodicRebalanceOnReplicas(t *testing.T) {
	ctx := context.Background()
	var racer *planRacer
	c := cloudtest.New(t, cloudtest.Options{Hosts: 4, NoProgress: true,
		Conductor: conductor.Config{RebalanceInterval: 10 * time.Minute},
		Store: func(m *memory.Store) store.Store {
			racer = &planRacer{Store: m}
			return racer
		}})
	for i := 0; i < 3; i++ {
		c.Seed("h1", "packed", cloudtest.Medium)
	}
	p, err := c.Cond.Plans().PeriodicRebalance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != 0 {
		t.Fatalf("the later of two plans made at once was kept: plan %d (%s)", p.ID, p.State)
	}
	ps, err := c.Store.ListPlans(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].ID != racer.other.ID || ps[0].State != records.PlanRecommended || ps[1].State != records.PlanSuperseded {
		t.Fatalf("plans after the race: %+v; want the other replica's first (recommended, left to it) and this one's superseded", ps)
	}

	// An operator's pending plan (the first one, still recommended): the
	// next periodic runs plan nothing and leave it as it is.
	for i := 0; i < 3; i++ {
		if p, err := c.Cond.Plans().PeriodicRebalance(ctx); err != nil || p.ID != 0 {
			t.Fatalf("periodic run over a pending plan: plan %d, %v", p.ID, err)
		}
	}
	if got, _ := c.Store.GetPlan(ctx, racer.other.ID); got.State != records.PlanRecommended {
		t.Fatalf("the pending plan is %s after periodic runs, want recommended", got.State)
	}
	if ps, _ := c.Store.ListPlans(ctx, false); len(ps) != 2 {
		t.Fatalf("periodic runs over a pending plan made %d more plans", len(ps)-2)
	}
}

// TestPeriodicRebalanceByMeasured: [keel] rebalance_by = measured makes
// the periodic rebalance balance measured use. h1 holds two guests of one
// flavor, h2–h4 one each: by the claims no move helps (moving one off h1
// only moves the pair), so a periodic run by claims plans nothing. h1's
// guests are measured spinning 3 of its 16 CPUs in all, the others
// idling: a run by measured use plans moving one of h1's guests and
// approves the plan (its first move takes one of h1's guests away).
func TestPeriodicRebalanceByMeasured(t *testing.T) {
	ctx := context.Background()
	for _, by := range []string{"claims", "measured"} {
		t.Run(by, func(t *testing.T) {
			c := cloudtest.New(t, cloudtest.Options{Hosts: 4, NoProgress: true,
				Conductor: conductor.Config{RebalanceInterval: 10 * time.Minute, RebalanceBy: by, RebalanceThreshold: 0.05}})
			guests := map[string][]float64{"h1": {1.5, 1.5}, "h2": {0.1}, "h3": {0.1}, "h4": {0.1}}
			var h1 []string
			for _, h := range []string{"h1", "h2", "h3", "h4"} {
				var usage []records.InstanceUsage
				sum := 0.0
				for k, b := range guests[h] {
					in := c.Seed(h, fmt.Sprintf("guest-%s-%d", h, k), cloudtest.Medium)
					usage = append(usage, records.InstanceUsage{UUID: in.UUID, VCPUsBusy: b, MemoryMB: 1024, Timestamp: c.Clock.Now()})
					sum += b
					if h == "h1" {
						h1 = append(h1, in.UUID)
					}
				}
				rec, err := c.Store.GetHostRecord(ctx, h)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					t.Fatal(err)
				}
				rec.Host, rec.InstanceUsage = h, usage
				rec.Metrics = []records.Metric{{Name: records.MetricCPUPercent, Value: sum / 16, Timestamp: c.Clock.Now(), Source: "test"}}
				if err := c.Store.PutHostRecord(ctx, rec); err != nil {
					t.Fatal(err)
				}
			}
			p, err := c.Cond.Plans().PeriodicRebalance(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if by == "claims" {
				if p.ID != 0 {
					t.Fatalf("by claims: planned %d moves (%+v), want none (no move lowers the RAM CV)", len(p.Moves), p.Moves)
				}
				return
			}
			if p.ID == 0 || p.State != records.PlanApproved || !strings.HasPrefix(p.Reason, "measured CV") {
				t.Fatalf("by measured: plan %d %s (%q), want an approved plan on measured CV", p.ID, p.State, p.Reason)
			}
			if len(p.Moves) == 0 || p.Moves[0].Source != "h1" || !slices.Contains(h1, p.Moves[0].Instance) {
				t.Fatalf("by measured: moves %+v, want one of h1's busy guests %v moved off h1 first", p.Moves, h1)
			}
		})
	}
}
