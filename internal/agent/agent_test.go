package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"keel/internal/agent"
	"keel/internal/bus"
	"keel/internal/compute"
	"keel/internal/records"
	"keel/internal/rpc"
	"keel/internal/store"
	"keel/internal/store/memory"
)

// droppingStore is the servers' store, which drops the agent's bus
// connection (as a server does when the agent's identity changes, a
// moment after `keel agent enroll`) the first time each of the calls in
// drop arrives, before it answers: the agent's call loses its answer.
type droppingStore struct {
	*memory.Store
	drop func()

	mu      sync.Mutex
	dropped map[string]bool
}

func (s *droppingStore) once(what string) {
	s.mu.Lock()
	first := !s.dropped[what]
	s.dropped[what] = true
	s.mu.Unlock()
	if first {
		s.drop()
	}
}

func (s *droppingStore) ListMigrations(ctx context.Context, f store.MigrationFilter) ([]records.Migration, error) {
	s.once("list migrations")
	return s.Store.ListMigrations(ctx, f)
}

func (s *droppingStore) ListInstances(ctx context.Context, host string) ([]records.Instance, error) {
	s.once("list instances")
	return s.Store.ListInstances(ctx, host)
}

func (s *droppingStore) UpdateService(ctx context.Context, host string, fn func(*records.Service) error) (records.Service, error) {
	s.once("heartbeat")
	return s.Store.UpdateService(ctx, host, fn)
}

type noReports struct{ compute.Reporter }

func (noReports) AuditDrift(context.Context, compute.Drift) {}

// TestStartSurvivesDroppedConnections: the servers drop the agent's bus
// connection while it starts — at its first read of its migrations (the
// evacuations to clean up), of its instances (the reconciliation) and at
// its first heartbeat. Each step waits for the bus to reconnect and asks
// again: the agent starts and its service is up. (It failed before:
// "agent h1: reading the evacuations from this host: … connection to the
// bus lost", and a `keel agent` enrolled a moment before exited — the
// e2e TestAgentRevokeOneHost's "waiting for agent h1 to be up" under load.)
func TestStartSurvivesDroppedConnections(t *testing.T) {
	// No deadline, as `keel agent` starts it (its context ends at a
	// signal): a call without one is tried once.
	ctx := t.Context()
	servers := bus.Credentials{User: "keel-servers", Password: "a-long-random-password-for-this-test", DeriveAgents: true}
	srv, err := bus.StartServer(ctx, bus.ServerOptions{Creds: servers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	conn, err := bus.Connect(ctx, srv.URL(), servers, "keel-server", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	st := &droppingStore{Store: memory.New(), dropped: map[string]bool{}, drop: func() { srv.DisconnectAgent("h1") }}
	subs, err := rpc.ServeConductor(conn, rpc.ConductorHandlers{Store: st, Reporter: noReports{},
		NewProviderUUID: func() string { return "00000000-0000-0000-0000-0000000000a1" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	})

	start := time.Now()
	a, err := agent.Start(ctx, agent.Options{Host: "h1", DataDir: t.TempDir(), BusURL: srv.URL(), Creds: servers,
		Hardware:                compute.HostConfig{VCPUs: 4, MemoryMB: 4096, LocalGB: 40, CPUAllocationRatio: 1, RAMAllocationRatio: 1, DiskAllocationRatio: 1},
		UpdateResourcesInterval: -1, ReportInterval: time.Hour})
	if err != nil {
		t.Fatalf("agent h1 did not start through its dropped connections: %v", err)
	}
	defer a.Stop()
	for _, what := range []string{"list migrations", "list instances", "heartbeat"} {
		if !st.dropped[what] {
			t.Errorf("the connection was not dropped at %s: the test did not test it", what)
		}
	}
	svc, err := st.GetService(ctx, "h1")
	if err != nil {
		t.Fatalf("h1 has no service record: %v", err)
	}
	if svc.LastSeenUp.Before(start) {
		t.Errorf("h1's first heartbeat was not taken: last seen up %v, started %v", svc.LastSeenUp, start)
	}
}
