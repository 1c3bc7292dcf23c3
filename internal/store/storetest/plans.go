package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

var planTests = []subtest{
	{"CreateGetUpdate", testPlans},
	{"ListActive", testListPlans},
}

func drainPlan(n int) records.Plan {
	return records.Plan{
		UUID: uuidFor(0x91a5, n), Purpose: records.PlanDrain, State: records.PlanApproved,
		Hosts:   []string{"h01", "h02"},
		Options: records.PlanOptions{Parallel: 8, Order: "largest", ColdFallback: true},
		Moves: []records.PlanMove{
			{Instance: uuidFor(0x1757, 1), Source: "h01", RAMMB: 4096, State: records.MovePending},
			{Instance: uuidFor(0x1757, 2), Source: "h02", Dest: "h07", RAMMB: 2048, State: records.MoveRunning,
				Migration: 12, Attempts: 1, BytesCopied: 1 << 30, StartedAt: t0.Add(time.Second)},
		},
		Owner: "keel-a", CreatedAt: t0, UpdatedAt: t0,
	}
}

func testPlans(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GetPlan(ctx, 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetPlan of none = %v, want ErrNotFound", err)
	}
	p, err := s.CreatePlan(ctx, drainPlan(1))
	if err != nil {
		t.Fatal(err)
	}
	if p.ID <= 0 || p.Version != 1 {
		t.Fatalf("created plan ID %d version %d, want ID > 0, version 1", p.ID, p.Version)
	}
	got, err := s.GetPlan(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Fatalf("GetPlan = %+v\nwant %+v", got, p)
	}
	// The stored plan is not the caller's: changing what Create returned
	// changes nothing stored.
	p.Moves[0].State = records.MoveDone
	if got, _ := s.GetPlan(ctx, p.ID); got.Moves[0].State != records.MovePending {
		t.Fatalf("stored move changed through the caller's slice: %q", got.Moves[0].State)
	}
	p.Moves[0].State = records.MovePending

	next := p
	next.State, next.Moves = records.PlanRunning, append([]records.PlanMove(nil), p.Moves...)
	next.Moves[0].State, next.Moves[0].Migration = records.MoveStarting, 13
	upd, err := s.UpdatePlan(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	if upd.Version != 2 {
		t.Fatalf("updated version %d, want 2", upd.Version)
	}
	// A writer naming the old version conflicts.
	_, err = s.UpdatePlan(ctx, p)
	var conflict *placement.ConflictError
	if !errors.As(err, &conflict) || conflict.Kind != placement.PlanVersion {
		t.Fatalf("stale UpdatePlan = %v, want a plan version conflict", err)
	}
	got, _ = s.GetPlan(ctx, p.ID)
	if got.State != records.PlanRunning || got.Moves[0].Migration != 13 || got.Version != 2 {
		t.Fatalf("after update: state %s move0 migration %d version %d", got.State, got.Moves[0].Migration, got.Version)
	}
	missing := p
	missing.ID = p.ID + 100
	if _, err := s.UpdatePlan(ctx, missing); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("UpdatePlan of a missing plan = %v, want ErrNotFound", err)
	}
	second, err := s.CreatePlan(ctx, drainPlan(2))
	if err != nil {
		t.Fatal(err)
	}
	if second.ID <= p.ID {
		t.Fatalf("second plan ID %d not above %d", second.ID, p.ID)
	}
}

func testListPlans(t *testing.T, s store.Store) {
	ctx := context.Background()
	all, err := s.ListPlans(ctx, false)
	if err != nil || len(all) != 0 {
		t.Fatalf("ListPlans of none = %v, %v", all, err)
	}
	var ids []int64
	for i, st := range []records.PlanState{records.PlanRunning, records.PlanDone, records.PlanRecommended, records.PlanCancelled} {
		p := drainPlan(i)
		p.State = st
		c, err := s.CreatePlan(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	all, _ = s.ListPlans(ctx, false)
	if len(all) != 4 || all[0].ID != ids[0] || all[3].ID != ids[3] {
		t.Fatalf("ListPlans(all) = %d plans, want 4 in ID order", len(all))
	}
	active, _ := s.ListPlans(ctx, true)
	if len(active) != 2 || active[0].ID != ids[0] || active[1].ID != ids[2] {
		t.Fatalf("ListPlans(active) = %+v, want the running and the recommended plan", active)
	}
	// A plan that ends leaves the active list.
	p := active[0]
	p.State = records.PlanDone
	if _, err := s.UpdatePlan(ctx, p); err != nil {
		t.Fatal(err)
	}
	if active, _ = s.ListPlans(ctx, true); len(active) != 1 || active[0].ID != ids[2] {
		t.Fatalf("after the running plan ended, active = %d plans", len(active))
	}
}
