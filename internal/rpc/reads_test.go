package rpc_test

import (
	"context"
	"errors"
	"slices"
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

// TestServersRefuseReadsForAnotherHost: through the store calls, over a
// real (embedded) NATS with per-agent identities, agent A reads what
// concerns host A — its instances, an instance moving to it or scheduled
// there, their consumers, the consumers on its provider, its migrations —
// and is refused (forbidden, store.ErrForbidden on A's side) everything
// else: B's instance, B's consumers and provider, a migration between B
// and C. Migration lists are narrowed to A's.
func TestServersRefuseReadsForAnotherHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	servers, conn := startBus(ctx, t)
	var err error
	st := memory.New()
	uuids := []string{"00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b", "00000000-0000-0000-0000-00000000000c"}
	n := 0
	subs, err := rpc.ServeConductor(conn(servers), rpc.ConductorHandlers{Store: st, Reporter: &builds{}, NewProviderUUID: func() string {
		n++
		return uuids[n-1]
	}})
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
	a, b, c := agent("A"), agent("B"), agent("C")
	providers := map[string]string{}
	for host, s := range map[string]*rpc.Store{"A": a, "B": b, "C": c} {
		uuid, err := s.RegisterHost(ctx, compute.HostConfig{Host: host, VCPUs: 8, MemoryMB: 8192, LocalGB: 40,
			CPUAllocationRatio: 1, RAMAllocationRatio: 1, DiskAllocationRatio: 1}, "")
		if err != nil {
			t.Fatalf("%s registers: %v", host, err)
		}
		providers[host] = uuid
	}
	alloc := func(consumer, host string, typ placement.ConsumerType) {
		t.Helper()
		if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: consumer, ProjectID: "p", UserID: "u", Type: typ,
			Allocations: map[string]placement.Resources{providers[host]: {placement.VCPU: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	inst := func(uuid, host string) {
		t.Helper()
		if _, err := st.CreateInstance(ctx, records.Instance{UUID: uuid, ProjectID: "p", UserID: "u", Host: host}); err != nil {
			t.Fatal(err)
		}
	}
	mig := func(uuid, instance, src, dst string) records.Migration {
		t.Helper()
		m, err := st.CreateMigration(ctx, records.Migration{UUID: uuid, InstanceUUID: instance, Type: records.MigrationTypeLive,
			SourceHost: src, DestHost: dst, Status: records.MigrationRunning})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	inst("on-a", "A")
	alloc("on-a", "A", placement.ConsumerInstance)
	inst("on-b", "B")
	alloc("on-b", "B", placement.ConsumerInstance)
	inst("sched-to-a", "")
	alloc("sched-to-a", "A", placement.ConsumerInstance)
	inst("b-to-a", "B")
	alloc("b-to-a", "B", placement.ConsumerInstance)
	toA := mig("mig-b-to-a", "b-to-a", "B", "A")
	alloc("mig-b-to-a", "B", placement.ConsumerMigration)
	inst("b-to-c", "B")
	bToC := mig("mig-b-to-c", "b-to-c", "B", "C")
	alloc("mig-b-to-c", "B", placement.ConsumerMigration)

	refused := func(what string, err error) {
		t.Helper()
		if !bus.IsCode(err, bus.CodeForbidden) || !errors.Is(err, store.ErrForbidden) {
			t.Errorf("%s: err = %v, want forbidden (store.ErrForbidden)", what, err)
		}
	}
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v, want it answered", what, err)
		}
	}
	_, err = a.GetInstance(ctx, "on-b")
	refused("A reads B's instance", err)
	_, err = a.GetInstance(ctx, "b-to-c")
	refused("A reads an instance moving from B to C", err)
	_, err = a.GetConsumer(ctx, "on-b")
	refused("A reads B's instance's allocations", err)
	_, err = a.GetConsumer(ctx, "mig-b-to-c")
	refused("A reads the allocations of a migration from B to C", err)
	_, err = a.ConsumersOn(ctx, providers["B"])
	refused("A lists the consumers on B's provider", err)
	_, err = a.ConsumersOn(ctx, "no-such-provider")
	refused("A lists the consumers on a provider that is not there", err)
	_, err = a.GetMigration(ctx, bToC.ID)
	refused("A reads the migration from B to C", err)
	_, err = a.ListMigrations(ctx, store.MigrationFilter{Host: "B"})
	refused("A lists B's migrations", err)

	for _, uuid := range []string{"on-a", "sched-to-a", "b-to-a"} {
		got, err := a.GetInstance(ctx, uuid)
		allowed("A reads instance "+uuid, err)
		if err == nil && got.UUID != uuid {
			t.Errorf("A read %s as %+v", uuid, got)
		}
		_, err = a.GetConsumer(ctx, uuid)
		allowed("A reads the allocations of "+uuid, err)
	}
	_, err = a.GetConsumer(ctx, "mig-b-to-a")
	allowed("A reads the allocations of the migration from B to it", err)
	on, err := a.ConsumersOn(ctx, providers["A"])
	allowed("A lists the consumers on its provider", err)
	var names []string
	for _, c := range on {
		names = append(names, c.UUID)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"on-a", "sched-to-a"}) {
		t.Errorf("consumers on A: %v", names)
	}
	m, err := a.GetMigration(ctx, toA.ID)
	allowed("A reads the migration to it", err)
	if m.UUID != "mig-b-to-a" {
		t.Errorf("migration %d read as %+v", toA.ID, m)
	}
	for what, f := range map[string]store.MigrationFilter{
		"all":                  {},
		"by the B→C UUID":      {UUID: "mig-b-to-c"},
		"of the B→C instance":  {InstanceUUID: "b-to-c"},
		"its own, active only": {Host: "A", ActiveOnly: true},
	} {
		ms, err := a.ListMigrations(ctx, f)
		allowed("A lists migrations "+what, err)
		for _, m := range ms {
			if m.SourceHost != "A" && m.DestHost != "A" {
				t.Errorf("A listing migrations %s got %s (%s → %s)", what, m.UUID, m.SourceHost, m.DestHost)
			}
		}
	}
	if ms, _ := a.ListMigrations(ctx, store.MigrationFilter{}); len(ms) != 1 {
		t.Errorf("A lists %d migrations, want 1 (B → A)", len(ms))
	}
	if _, err := a.GetInstance(ctx, "no-such-instance"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an instance that is not there: %v, want ErrNotFound", err)
	}
	// B and C read their own.
	_, err = b.GetInstance(ctx, "on-b")
	allowed("B reads its instance", err)
	_, err = c.GetMigration(ctx, bToC.ID)
	allowed("C reads the migration to it", err)

	// Once the migration to A has ended, the instance still on B is no
	// longer A's business.
	toA.Status = records.MigrationCompleted
	if _, err := st.UpdateMigration(ctx, toA); err != nil {
		t.Fatal(err)
	}
	if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "mig-b-to-a", AnyConsumerGeneration: true}); err != nil {
		t.Fatal(err)
	}
	// While a task is still at work on it (the record ended before the
	// instance settled), A may read it: its audit leaves the guest alone
	// then instead of taking it for a stray.
	busy, err := st.GetInstance(ctx, "b-to-a")
	if err != nil {
		t.Fatal(err)
	}
	busy.TaskState = records.TaskMigrating
	if busy, err = st.UpdateInstance(ctx, busy); err != nil {
		t.Fatal(err)
	}
	_, err = a.GetInstance(ctx, "b-to-a")
	allowed("A reads an instance with a task whose migration to it ended", err)
	other, err := st.GetInstance(ctx, "b-to-c")
	if err != nil {
		t.Fatal(err)
	}
	other.TaskState = records.TaskMigrating
	if _, err := st.UpdateInstance(ctx, other); err != nil {
		t.Fatal(err)
	}
	_, err = a.GetInstance(ctx, "b-to-c")
	refused("A reads an instance moving from B to C (a task, no migration of A's)", err)
	busy.TaskState = records.TaskNone
	if _, err := st.UpdateInstance(ctx, busy); err != nil {
		t.Fatal(err)
	}
	_, err = a.GetInstance(ctx, "b-to-a")
	refused("A reads an instance whose migration to it ended", err)
}
