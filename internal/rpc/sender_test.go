package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"keel/internal/bus"
	"keel/internal/compute"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/rpc"
	"keel/internal/store"
	"keel/internal/store/memory"
)

// builds records the build reports the conductor side was handed.
type builds struct {
	compute.Reporter
	mu     sync.Mutex
	hosts  []string
	copies []int64 // the migrations whose copy reports were handed on
}

func (b *builds) BuildDone(_ context.Context, _, host string, _ error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hosts = append(b.hosts, host)
	return nil
}

func (b *builds) AuditDrift(context.Context, compute.Drift) {}

func (b *builds) CopyDone(_ context.Context, id int64, _ error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.copies = append(b.copies, id)
	return nil
}

// startBus starts an embedded NATS server with per-agent identities for
// the test and returns the servers' credentials and a way to connect with
// any credentials (closed when the test ends).
func startBus(ctx context.Context, t *testing.T) (bus.Credentials, func(bus.Credentials) *bus.Conn) {
	t.Helper()
	servers := bus.Credentials{User: "keel-servers", Password: "a-long-random-password-for-this-test", DeriveAgents: true}
	srv, err := bus.StartServer(ctx, bus.ServerOptions{Creds: servers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return servers, func(creds bus.Credentials) *bus.Conn {
		t.Helper()
		c, err := bus.Connect(ctx, srv.URL(), creds, creds.User, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
}

// TestServersRefuseCallsForAnotherHost: an agent whose bus identity is
// host A sends, under its own subjects (the only ones the bus lets it
// use), reports and store calls that concern host B. The servers refuse
// each, and nothing of B's changes; A's own calls pass.
func TestServersRefuseCallsForAnotherHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	servers, conn := startBus(ctx, t)
	var err error
	st := memory.New()
	rep := &builds{}
	n := 0
	subs, err := rpc.ServeConductor(conn(servers), rpc.ConductorHandlers{Store: st, Reporter: rep, NewProviderUUID: func() string {
		n++
		return []string{"00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b", "00000000-0000-0000-0000-00000000000c"}[n-1]
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	agent := func(host string) (*rpc.Store, *rpc.Reporter) {
		c, err := servers.ForAgent(host)
		if err != nil {
			t.Fatal(err)
		}
		bc := conn(c)
		return &rpc.Store{Conn: bc, Host: host}, &rpc.Reporter{Conn: bc, Host: host}
	}
	a, aRep := agent("A")
	b, _ := agent("B")
	hc := func(host string) compute.HostConfig {
		return compute.HostConfig{Host: host, VCPUs: 8, MemoryMB: 8192, LocalGB: 40, CPUAllocationRatio: 1, RAMAllocationRatio: 1, DiskAllocationRatio: 1}
	}
	rpA, err := a.RegisterHost(ctx, hc("A"), "")
	if err != nil {
		t.Fatalf("A registers itself: %v", err)
	}
	rpB, err := b.RegisterHost(ctx, hc("B"), "")
	if err != nil {
		t.Fatalf("B registers itself: %v", err)
	}
	then := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := b.Heartbeat(ctx, "B", then); err != nil {
		t.Fatal(err)
	}
	// A tenant's instance on B, with its allocation there.
	vcpu := func(n int64) placement.Resources { return placement.Resources{placement.VCPU: n} }
	if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "c-on-b", ProjectID: "p", UserID: "u",
		Allocations: map[string]placement.Resources{rpB: vcpu(2)}}); err != nil {
		t.Fatal(err)
	}
	onB, err := st.GetConsumer(ctx, "c-on-b")
	if err != nil {
		t.Fatal(err)
	}

	forbidden := func(what string, err error) {
		t.Helper()
		if !bus.IsCode(err, bus.CodeForbidden) {
			t.Errorf("%s: err = %v, want forbidden", what, err)
		}
	}
	_, err = a.RegisterHost(ctx, hc("rogue"), "")
	forbidden("A registers a rogue host", err)
	_, err = a.RegisterHost(ctx, hc("B"), "")
	forbidden("A re-registers B", err)
	forbidden("A heartbeats for B", a.Heartbeat(ctx, "B", then.Add(time.Hour)))
	forbidden("A writes B's host record", a.PutHostRecord(ctx, records.HostRecord{Host: "B"}))
	_, err = a.ListInstances(ctx, "B")
	forbidden("A lists B's instances", err)
	_, err = a.FaultLostInstance(ctx, "c-on-b", "B", "lost")
	forbidden("A faults B's instance", err)
	gen := onB.Generation
	_, err = a.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "c-on-b", ConsumerGeneration: &gen})
	forbidden("A deletes an allocation on B", err)
	_, err = a.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "c-on-b", ConsumerGeneration: &gen,
		Allocations: map[string]placement.Resources{rpB: vcpu(8)}})
	forbidden("A grows an allocation on B", err)
	_, err = a.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "new-on-b", ProjectID: "p", UserID: "u",
		Allocations: map[string]placement.Resources{rpB: vcpu(1)}})
	forbidden("A allocates on B", err)
	_, err = a.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "c-on-b", AnyConsumerGeneration: true,
		Allocations: map[string]placement.Resources{rpA: vcpu(1)}})
	forbidden("A writes without a generation", err)
	if err := aRep.BuildDone(ctx, "c-on-b", "B", nil); err != nil {
		t.Errorf("a refused report is answered for good (nil) so the outbox drops it: %v", err)
	}
	// A sending under B's subject is refused by the bus itself.
	posing := &rpc.Store{Conn: conn(mustAgent(t, servers, "A")), Host: "B"}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	if err := posing.Heartbeat(short, "B", then.Add(2*time.Hour)); err == nil {
		t.Error("A's heartbeat under B's subject was answered")
	}
	cancelShort()

	// Nothing of B's changed.
	if c, err := st.GetConsumer(ctx, "c-on-b"); err != nil || c.Generation != onB.Generation || c.Allocations[rpB][placement.VCPU] != 2 {
		t.Errorf("B's consumer after the attacks: %+v, %v", c, err)
	}
	if _, err := st.GetConsumer(ctx, "new-on-b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("A's allocation on B exists: %v", err)
	}
	if svc, err := st.GetService(ctx, "B"); err != nil || !svc.LastSeenUp.Equal(then) {
		t.Errorf("B's service: %+v, %v; want last seen %s", svc, err, then)
	}
	if _, err := st.GetService(ctx, "rogue"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the rogue host has a service: %v", err)
	}
	if sums, err := st.ProviderSummaries(ctx, nil); err != nil || len(sums) != 2 {
		t.Errorf("providers: %d, %v; want A's and B's", len(sums), err)
	}

	// A's own calls pass, including taking back what an instance that runs
	// on A holds on B by mistake (the audit's repair).
	if err := a.Heartbeat(ctx, "A", then); err != nil {
		t.Errorf("A's own heartbeat: %v", err)
	}
	if _, err := st.CreateInstance(ctx, records.Instance{UUID: "runs-on-a", ProjectID: "p", UserID: "u", Host: "A"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "runs-on-a", ProjectID: "p", UserID: "u",
		Allocations: map[string]placement.Resources{rpB: vcpu(1)}}); err != nil {
		t.Fatal(err)
	}
	c, err := st.GetConsumer(ctx, "runs-on-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "runs-on-a", ConsumerGeneration: &c.Generation, ProjectID: "p", UserID: "u",
		Allocations: map[string]placement.Resources{rpA: vcpu(1)}}); err != nil {
		t.Errorf("A moves its own instance's allocation home: %v", err)
	}
	if err := aRep.BuildDone(ctx, "runs-on-a", "A", nil); err != nil {
		t.Errorf("A's own build report: %v", err)
	}
	// Copy reports: the host doing a migration's work may report on it —
	// the source of a live migration, the destination of an evacuation
	// (its source is down) — and no other.
	mig := func(typ, src, dst string) int64 {
		m, err := st.CreateMigration(ctx, records.Migration{UUID: "m-" + typ + src + dst, InstanceUUID: "runs-on-a", Type: typ, SourceHost: src, DestHost: dst})
		if err != nil {
			t.Fatal(err)
		}
		return m.ID
	}
	liveFromA, liveFromB := mig(records.MigrationTypeLive, "A", "B"), mig(records.MigrationTypeLive, "B", "A")
	evacToA, evacToB := mig(records.MigrationTypeEvac, "B", "A"), mig(records.MigrationTypeEvac, "A", "B")
	for _, id := range []int64{liveFromA, liveFromB, evacToA, evacToB} {
		if err := aRep.CopyDone(ctx, id, nil); err != nil {
			t.Errorf("copy report of migration %d: %v (a refused one is answered nil, for good)", id, err)
		}
	}
	rep.mu.Lock()
	defer rep.mu.Unlock()
	if len(rep.hosts) != 1 || rep.hosts[0] != "A" {
		t.Errorf("build reports handed to the conductor: %v, want only A's own", rep.hosts)
	}
	if want := []int64{liveFromA, evacToA}; fmt.Sprint(rep.copies) != fmt.Sprint(want) {
		t.Errorf("copy reports handed to the conductor: %v, want %v (A's live migration, the evacuation onto A)", rep.copies, want)
	}
}

func mustAgent(t *testing.T, servers bus.Credentials, host string) bus.Credentials {
	t.Helper()
	c, err := bus.AgentCredentials(servers, host)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
