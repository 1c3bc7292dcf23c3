package conductor_test

import (
	"context"
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
	p, err := c.Cond.PeriodicRebalance(ctx)
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
		if p, err := c.Cond.PeriodicRebalance(ctx); err != nil || p.ID != 0 {
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
