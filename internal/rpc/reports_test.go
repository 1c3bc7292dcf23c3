package rpc_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"keel/internal/bus"
	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/conductor"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/rpc"
	"keel/internal/store/memory"
)

// handedOn records which reports reach the conductor, and hands each to
// the real one.
type handedOn struct {
	*conductor.Conductor
	mu   sync.Mutex
	seen []string
}

func (h *handedOn) note(what string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, what)
}

func (h *handedOn) BuildDone(ctx context.Context, uuid, host string, err error) error {
	h.note("build_done " + uuid)
	return h.Conductor.BuildDone(ctx, uuid, host, err)
}

func (h *handedOn) CopyDone(ctx context.Context, id int64, err error) error {
	h.note("copy_done")
	return h.Conductor.CopyDone(ctx, id, err)
}

func (h *handedOn) CopyProgress(ctx context.Context, id int64, total, processed, remaining int64) {
	h.note("copy_progress")
	h.Conductor.CopyProgress(ctx, id, total, processed, remaining)
}

// noComputes reaches no agent (the conductor's calls to hosts fail).
type noComputes struct{}

func (noComputes) Compute(host string) (conductor.ComputeAPI, error) {
	return nil, errors.New("no agents in this test")
}

// TestReportsAboutAnotherHostAreRefused: agent A sends every kind of
// report (build, copy progress, copy done, audit drift, lost instance)
// naming what the store places on host B — a consumer that is no instance
// holding VCPU on B, the consumer of a migration from B to C, B's
// instance, an instance moving from B to C, B's migration, a migration
// that does not exist. Each is refused (forbidden) and logged, none
// reaches the conductor, and nothing of B's changes. A's own reports —
// its instance, a deleted instance whose leftover allocation is on A, a
// name nothing is stored under — reach the conductor.
func TestReportsAboutAnotherHostAreRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	servers, conn := startBus(ctx, t)
	st := memory.New()
	cond := conductor.New(conductor.Config{}, st, nil, noComputes{}, clock.Real{}, slog.New(slog.DiscardHandler), conductor.Hooks{})
	rep := &handedOn{Conductor: cond}
	var logged bytes.Buffer
	var logMu sync.Mutex
	n := 0
	subs, err := rpc.ServeConductor(conn(servers), rpc.ConductorHandlers{Store: st, Reporter: rep,
		Log: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil)),
		NewProviderUUID: func() string {
			n++
			return []string{"00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b", "00000000-0000-0000-0000-00000000000c"}[n-1]
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	})
	conns := map[string]*bus.Conn{}
	providers := map[string]string{}
	for _, host := range []string{"A", "B", "C"} {
		conns[host] = conn(mustAgent(t, servers, host))
		uuid, err := (&rpc.Store{Conn: conns[host], Host: host}).RegisterHost(ctx, compute.HostConfig{Host: host, VCPUs: 8, MemoryMB: 8192, LocalGB: 40,
			CPUAllocationRatio: 1, RAMAllocationRatio: 1, DiskAllocationRatio: 1}, "")
		if err != nil {
			t.Fatalf("%s registers: %v", host, err)
		}
		providers[host] = uuid
	}
	alloc := func(consumer, host string, typ placement.ConsumerType, vcpus int64) {
		t.Helper()
		if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: consumer, ProjectID: "p", UserID: "u", Type: typ,
			Allocations: map[string]placement.Resources{providers[host]: {placement.VCPU: vcpus}}}); err != nil {
			t.Fatal(err)
		}
	}
	inst := func(uuid, host string, vm records.VMState) {
		t.Helper()
		if _, err := st.CreateInstance(ctx, records.Instance{UUID: uuid, ProjectID: "p", UserID: "u", Host: host, VMState: vm}); err != nil {
			t.Fatal(err)
		}
	}
	// B's: a consumer that is no instance, an instance, an instance live
	// migrating to C (its migration's consumer holds the source on B).
	alloc("held-on-b", "B", placement.ConsumerInstance, 2)
	inst("on-b", "B", records.VMActive)
	alloc("on-b", "B", placement.ConsumerInstance, 1)
	inst("moving", "B", records.VMActive)
	alloc("moving", "C", placement.ConsumerInstance, 1)
	alloc("mig-b-to-c", "B", placement.ConsumerMigration, 1)
	m, err := st.CreateMigration(ctx, records.Migration{UUID: "mig-b-to-c", InstanceUUID: "moving", Type: records.MigrationTypeLive,
		SourceHost: "B", DestHost: "C", Status: records.MigrationRunning})
	if err != nil {
		t.Fatal(err)
	}
	// A's: an instance building there, a leftover allocation of a deleted
	// instance.
	inst("building-on-a", "A", records.VMBuilding)
	alloc("building-on-a", "A", placement.ConsumerInstance, 1)
	alloc("deleted-on-a", "A", placement.ConsumerInstance, 1)

	before := map[string]placement.Consumer{}
	for _, c := range []string{"held-on-b", "on-b", "moving", "mig-b-to-c"} {
		if before[c], err = st.GetConsumer(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	call := func(method string, args any) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return conns["A"].Call(ctx, bus.AgentConductorSubject("A", method), args, nil)
	}
	type build struct {
		InstanceUUID string `json:"instance_uuid"`
		Host         string `json:"host"`
		Error        string `json:"error,omitempty"`
	}
	type copyReport struct {
		MigrationID int64 `json:"migration_id"`
		Total       int64 `json:"total,omitempty"`
	}
	type fault struct {
		UUID  string `json:"uuid"`
		Host  string `json:"host"`
		Fault string `json:"fault"`
	}
	for _, c := range []struct {
		what, method string
		args         any
	}{
		{"a build of a consumer that is no instance, holding VCPU on B", "build_done", build{InstanceUUID: "held-on-b", Host: "A"}},
		{"a failed build of it", "build_done", build{InstanceUUID: "held-on-b", Host: "A", Error: "boom"}},
		{"a build of the consumer of a migration from B to C", "build_done", build{InstanceUUID: "mig-b-to-c", Host: "A"}},
		{"a build of B's instance", "build_done", build{InstanceUUID: "on-b", Host: "A"}},
		{"a build of an instance moving from B to C", "build_done", build{InstanceUUID: "moving", Host: "A", Error: "boom"}},
		{"a build that names no instance", "build_done", build{Host: "A"}},
		{"a build on B", "build_done", build{InstanceUUID: "on-b", Host: "B"}},
		{"copy progress of the migration from B to C", "copy_progress", copyReport{MigrationID: m.ID, Total: 1}},
		{"copy done of the migration from B to C", "copy_done", copyReport{MigrationID: m.ID}},
		{"copy done of a migration that does not exist", "copy_done", copyReport{MigrationID: m.ID + 1000}},
		{"an audit of B", "audit_drift", compute.Drift{Host: "B"}},
		{"B's instance lost, as A's", "fault_lost_instance", fault{UUID: "on-b", Host: "A", Fault: "lost"}},
		{"B's instance lost, as B's", "fault_lost_instance", fault{UUID: "on-b", Host: "B", Fault: "lost"}},
		{"the migration's consumer lost", "fault_lost_instance", fault{UUID: "mig-b-to-c", Host: "A", Fault: "lost"}},
		{"B's instance found, as A's", "restore_found_instance", fault{UUID: "on-b", Host: "A"}},
		{"B's instance found, as B's", "restore_found_instance", fault{UUID: "on-b", Host: "B"}},
	} {
		if err := call(c.method, c.args); !bus.IsCode(err, bus.CodeForbidden) {
			t.Errorf("A reports %s (%s): %v, want forbidden", c.what, c.method, err)
		}
	}
	rep.mu.Lock()
	if len(rep.seen) != 0 {
		t.Errorf("reports about another host reached the conductor: %v", rep.seen)
	}
	rep.mu.Unlock()
	for c, b := range before {
		got, err := st.GetConsumer(ctx, c)
		if err != nil || got.Generation != b.Generation || !sameAllocations(got.Allocations, b.Allocations) {
			t.Errorf("consumer %s after A's reports: %+v, %v; want %+v", c, got, err, b)
		}
	}
	if i, err := st.GetInstance(ctx, "on-b"); err != nil || i.VMState != records.VMActive || i.Fault != "" {
		t.Errorf("B's instance after A's reports: %+v, %v", i, err)
	}
	if got, err := st.GetMigration(ctx, m.ID); err != nil || got.Status != records.MigrationRunning || got.Version != m.Version {
		t.Errorf("the migration from B to C after A's reports: %+v, %v", got, err)
	}
	logMu.Lock()
	for _, want := range []string{"held-on-b", "mig-b-to-c", "moving", "on-b"} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("no refusal logged names %s:\n%s", want, logged.String())
		}
	}
	logMu.Unlock()

	// A's own reports pass.
	for _, uuid := range []string{"building-on-a", "deleted-on-a", "never-stored"} {
		if err := call("build_done", build{InstanceUUID: uuid, Host: "A", Error: "boom"}); err != nil {
			t.Errorf("A's build report of %s: %v", uuid, err)
		}
	}
	rep.mu.Lock()
	if got := strings.Join(rep.seen, ", "); got != "build_done building-on-a, build_done deleted-on-a, build_done never-stored" {
		t.Errorf("A's own reports reached the conductor as %q", got)
	}
	rep.mu.Unlock()
	if c, err := st.GetConsumer(ctx, "deleted-on-a"); err == nil {
		t.Errorf("the deleted instance's leftover on A is still there: %+v", c)
	}
}

func sameAllocations(a, b map[string]placement.Resources) bool {
	if len(a) != len(b) {
		return false
	}
	for p, r := range a {
		s, ok := b[p]
		if !ok || len(s) != len(r) {
			return false
		}
		for k, v := range r {
			if s[k] != v {
				return false
			}
		}
	}
	return true
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
