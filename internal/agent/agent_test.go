package agent_test

import (
	"context"
	"fmt"
	"slices"
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
	"keel/internal/testenv"
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

// TestHeartbeatCarriesMetrics: an agent on a real bus sends one message a
// report interval, not two — its heartbeat carries its measured usage, the
// cadence's report — and the servers take each report. Before, every interval
// was a heartbeat and a put_host_record, each with its answer: 4 messages
// (at 5,000 hosts the reports were ~40 % of the agents' messages).
func TestHeartbeatCarriesMetrics(t *testing.T) {
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
	st := memory.New()
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

	const every = 300 * time.Millisecond
	var (
		mu    sync.Mutex
		beats []time.Time
		a     *agent.Agent
		// counts[i] are the agent's messages (in + out) at heartbeat i.
		counts []uint64
	)
	started := make(chan struct{})
	a, err = agent.Start(ctx, agent.Options{Host: "h1", DataDir: t.TempDir(), BusURL: srv.URL(), Creds: servers,
		Hardware:                compute.HostConfig{VCPUs: 4, MemoryMB: 4096, LocalGB: 40, CPUAllocationRatio: 1, RAMAllocationRatio: 1, DiskAllocationRatio: 1},
		UpdateResourcesInterval: -1, ReportInterval: every,
		// A threshold no change passes: only the cadence reports.
		Metrics: compute.MetricsConfig{Interval: every, Sample: every, Threshold: 1},
		OnHeartbeat: func(_ time.Duration, err error) {
			<-started
			in, out := a.MessageCounts()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("heartbeat failed: %v", err)
			}
			beats = append(beats, time.Now())
			counts = append(counts, in+out)
		}})
	if err != nil {
		t.Fatalf("agent h1: %v", err)
	}
	close(started)
	defer a.Stop()

	// Eight heartbeats after the first (which may follow the start's own
	// calls closely), and the record's measurements each time.
	const n = 8
	var stamps []time.Time
	testenv.Poll(t, "eight heartbeats", func() error {
		rec, err := st.GetHostRecord(ctx, "h1")
		if err == nil {
			if m, ok := rec.Metric(records.MetricCPUPercent); ok && !slices.Contains(stamps, m.Timestamp) {
				stamps = append(stamps, m.Timestamp)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(counts) < n+1 {
			return fmt.Errorf("%d heartbeats", len(counts))
		}
		return nil
	})
	mu.Lock()
	msgs := counts[n] - counts[0]
	span := beats[n].Sub(beats[0])
	mu.Unlock()
	// One heartbeat and its answer an interval; a sampler's report that
	// a late heartbeat let through may add one pair now and then.
	if perBeat := float64(msgs) / n; perBeat > 2.5 {
		t.Errorf("%d messages over %d heartbeats (%s): %.1f a report interval, want 2 (the heartbeat, carrying the report, and its answer)", msgs, n, span.Round(time.Millisecond), perBeat)
	}
	// A report rode every heartbeat (the agent's count), and the servers
	// took each: a record not taken would have been sent apart (two more
	// messages). The server stores an idle host's unchanged record every
	// 15 s only (hostRecordWriter), so the record itself shows the first.
	if _, reports := a.Manager().MetricsReports(); reports < n {
		t.Errorf("%d measured-usage reports over %d heartbeats, want one a heartbeat", reports, n)
	}
	if len(stamps) == 0 {
		t.Errorf("the host record has no cpu.percent: the reports did not reach the store")
	}
}
