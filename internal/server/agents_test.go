package server

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"keel/internal/store"
	"keel/internal/store/memory"
)

// TestAgentRegistry: a revocation holds once the registry refreshed (and
// the change is announced); a host enrolled again is served at once, before
// the next refresh; unknown hosts are at epoch 0.
func TestAgentRegistry(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	var moved []string
	r := &agentRegistry{st: st, log: slog.New(slog.DiscardHandler), onMoved: func(h string) { moved = append(moved, h) }}
	if err := r.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if e, rev, err := r.AgentState(ctx, "h1"); e != 0 || rev || err != nil {
		t.Fatalf("a host never enrolled: epoch %d revoked %v %v", e, rev, err)
	}
	if err := st.PutAgentCredential(ctx, store.AgentCredential{Host: "h1", Epoch: 1, Revoked: true}); err != nil {
		t.Fatal(err)
	}
	if r.revoked(ctx, "h1") {
		t.Fatal("revoked before the registry refreshed (the bound is one refresh)")
	}
	if e, rev, _ := r.AgentState(ctx, "h1"); e != 1 || !rev {
		t.Fatalf("the bus's view of h1: epoch %d revoked %v; want 1, true at once", e, rev)
	}
	if err := r.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if !r.revoked(ctx, "h1") || r.revoked(ctx, "h2") {
		t.Fatal("after the refresh: h1 not revoked, or h2 revoked")
	}
	if !slices.Equal(moved, []string{"h1"}) {
		t.Fatalf("announced changes %v, want [h1]", moved)
	}
	if err := st.PutAgentCredential(ctx, store.AgentCredential{Host: "h1", Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	if r.revoked(ctx, "h1") {
		t.Fatal("h1 enrolled again is still refused before the next refresh")
	}
	if err := r.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if len(moved) != 1 {
		t.Fatalf("announced changes %v: the re-enrollment, already seen, was announced again (its connections would be dropped)", moved)
	}
}
