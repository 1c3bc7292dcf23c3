package rpc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"keel/internal/bus"
	"keel/internal/compute"
	"keel/internal/rpc"
	"keel/internal/store"
	"keel/internal/store/memory"
)

// TestServersRefuseRevokedAgent: with host A's identity revoked, the
// servers refuse every call A sends (its registration, heartbeat, reads)
// whatever bus connection it came through; B, not revoked, is served.
func TestServersRefuseRevokedAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	servers, conn := startBus(ctx, t)
	var err error
	st := memory.New()
	subs, err := rpc.ServeConductor(conn(servers), rpc.ConductorHandlers{Store: st, Reporter: &builds{},
		NewProviderUUID: func() string { return "00000000-0000-0000-0000-0000000000b1" },
		Revoked:         func(_ context.Context, host string) bool { return host == "A" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	})
	agent := func(host string) *rpc.Store {
		c, err := servers.ForAgent(host)
		if err != nil {
			t.Fatal(err)
		}
		return &rpc.Store{Conn: conn(c), Host: host}
	}
	a, b := agent("A"), agent("B")
	hc := func(host string) compute.HostConfig {
		return compute.HostConfig{Host: host, VCPUs: 8, MemoryMB: 8192, LocalGB: 40, CPUAllocationRatio: 1, RAMAllocationRatio: 1, DiskAllocationRatio: 1}
	}
	if _, err := a.RegisterHost(ctx, hc("A"), ""); !bus.IsCode(err, bus.CodeForbidden) {
		t.Errorf("revoked A registers: %v, want forbidden", err)
	}
	if err := a.Heartbeat(ctx, "A", time.Now()); !errors.Is(err, store.ErrForbidden) {
		t.Errorf("revoked A heartbeats: %v, want forbidden", err)
	}
	if _, err := a.ListMigrations(ctx, store.MigrationFilter{Host: "A"}); !errors.Is(err, store.ErrForbidden) {
		t.Errorf("revoked A lists its migrations: %v, want forbidden", err)
	}
	if _, err := st.GetService(ctx, "A"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoked A has a service record: %v", err)
	}
	if _, err := b.RegisterHost(ctx, hc("B"), ""); err != nil {
		t.Fatalf("B registers: %v", err)
	}
	if err := b.Heartbeat(ctx, "B", time.Now()); err != nil {
		t.Errorf("B heartbeats: %v", err)
	}
}
