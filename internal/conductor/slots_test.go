package conductor

import (
	"slices"
	"testing"
)

// TestSlotTable: the per-source cap with its FIFO queue, per-destination
// and cluster-wide caps, holds that bypass the caps, and forgetting a
// waiter, as plain data.
func TestSlotTable(t *testing.T) {
	s := newSlotTable(1, 0, 0)
	if !s.acquire("h1", "h2", 1) || s.acquire("h1", "h3", 2) || s.acquire("h1", "h2", 3) {
		t.Fatal("per source: the first takes the slot, the next two wait")
	}
	if !s.acquire("h4", "h2", 4) {
		t.Fatal("another source's migration waits behind h1's queue")
	}
	if !s.acquire("h1", "h2", 1) || s.acquire("h1", "h3", 2) {
		t.Fatal("a repeat changed the table")
	}
	s.forget(2) // aborted while queued
	if got := s.release(1); !slices.Equal(got, []int64{3}) {
		t.Fatalf("release handed the slot to %v, want [3] (2 was forgotten)", got)
	}
	if got := s.release(99); got != nil {
		t.Fatalf("releasing a slot not held handed %v", got)
	}
	if w, h := s.counts(); w != 0 || h != 2 {
		t.Fatalf("counts %d waiting %d held, want 0 and 2", w, h)
	}
	if got := s.heldBySource(); !slices.Equal(got["h1"], []int64{3}) || !slices.Equal(got["h4"], []int64{4}) {
		t.Fatalf("held by source %v", got)
	}

	d := newSlotTable(4, 1, 0)
	if !d.acquire("a", "x", 1) || d.acquire("b", "x", 2) || !d.acquire("c", "y", 3) {
		t.Fatal("per destination: two into x at once")
	}
	if got := d.release(1); !slices.Equal(got, []int64{2}) {
		t.Fatalf("freed room in x went to %v", got)
	}

	all := newSlotTable(4, 0, 2)
	all.acquire("a", "x", 1)
	all.acquire("b", "y", 2)
	if all.acquire("c", "z", 3) {
		t.Fatal("cluster-wide: a third at once")
	}
	all.hold("d", "w", 4) // a copy found running after a restart counts whatever the caps
	if !all.holds(4) || !all.isWaiting(3) {
		t.Fatal("hold or queue lost")
	}
	if got := all.release(1); got != nil {
		t.Fatalf("with 3 held of 2 a release granted %v", got)
	}
	if got := all.release(2); !slices.Equal(got, []int64{3}) {
		t.Fatalf("freed room went to %v, want [3]", got)
	}
}
