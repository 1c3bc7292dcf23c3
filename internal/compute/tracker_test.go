package compute_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/migration"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store/memory"
)

var ctx = context.Background()

// guestList is the hypervisor as the audit sees it: a map of guests.
type guestList struct {
	guests map[string]compute.Guest
	err    error
}

func (g *guestList) Guests(context.Context) ([]compute.Guest, error) {
	if g.err != nil {
		return nil, g.err
	}
	out := make([]compute.Guest, 0, len(g.guests))
	for _, x := range g.guests {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UUID < out[j].UUID })
	return out, nil
}

// Destroy and RollbackLiveMigrationAtDestination let the audit remove
// stray guests, as with a real driver.
func (g *guestList) Destroy(_ context.Context, uuid string) error {
	delete(g.guests, uuid)
	return nil
}

func (g *guestList) PostLiveMigrationAtDestination(_ context.Context, inst records.Instance) error {
	if x, ok := g.guests[inst.UUID]; ok && x.State == compute.GuestIncoming {
		x.State = compute.GuestRunning
		g.guests[inst.UUID] = x
		return nil
	}
	return fmt.Errorf("no incoming guest %s", inst.UUID)
}

func (g *guestList) RollbackLiveMigrationAtDestination(_ context.Context, uuid string) error {
	if x, ok := g.guests[uuid]; ok && x.State == compute.GuestIncoming {
		delete(g.guests, uuid)
	}
	return nil
}

var (
	small = records.Flavor{ID: "small", Name: "small", VCPUs: 2, RAMMB: 4096, DiskGB: 20}
	large = records.Flavor{ID: "large", Name: "large", VCPUs: 8, RAMMB: 16384, DiskGB: 80}
	// gpuSmall is small with a VGPU from a child and an address from a pool.
	gpuSmall = records.Flavor{ID: "gpu-small", Name: "gpu-small", VCPUs: 2, RAMMB: 4096, DiskGB: 20,
		ExtraSpecs: map[string]string{"resources1:VGPU": "1", "resources:IPV4_ADDRESS": "1"}}
)

func hostConfig(mods ...func(*compute.HostConfig)) compute.HostConfig {
	c := compute.HostConfig{Host: "h1", ProviderUUID: "rp-h1", VCPUs: 16, MemoryMB: 32768, LocalGB: 500,
		ReservedHostMemoryMB: 512, WriteDestRecord: true}
	for _, m := range mods {
		m(&c)
	}
	return c
}

func legacy(c *compute.HostConfig) { c.WriteDestRecord = false }

// env is one host's tracker on a memory store, with a second provider
// (rp-h2) for allocations elsewhere.
type env struct {
	t       *testing.T
	st      *memory.Store
	clk     *clock.Virtual
	guests  *guestList
	tracker *compute.Tracker
}

func newEnv(t *testing.T, cfg compute.HostConfig) *env {
	t.Helper()
	e := &env{t: t, st: memory.New(), clk: clock.NewVirtual(clock.Epoch), guests: &guestList{guests: map[string]compute.Guest{}}}
	for _, h := range []compute.HostConfig{cfg, hostConfig(func(c *compute.HostConfig) { c.Host, c.ProviderUUID = "h2", "rp-h2" })} {
		if _, err := e.st.CreateProvider(ctx, placement.Provider{UUID: h.ProviderUUID, Name: h.Host, Inventories: h.Inventories()}); err != nil {
			t.Fatal(err)
		}
	}
	e.tracker = compute.NewTracker(cfg, e.st, e.guests, e.clk)
	return e
}

func (e *env) instance(uuid string, f records.Flavor, vmState records.VMState, task records.TaskState) records.Instance {
	e.t.Helper()
	in, err := e.st.CreateInstance(ctx, records.Instance{UUID: uuid, Name: uuid, Host: "h1", Flavor: f, VMState: vmState, TaskState: task})
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

func (e *env) alloc(consumer string, typ placement.ConsumerType, f records.Flavor, providers ...string) {
	e.t.Helper()
	a := map[string]placement.Resources{}
	for _, p := range providers {
		a[p] = f.Resources()
	}
	if _, err := e.st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: consumer, Type: typ, AnyConsumerGeneration: true, Allocations: a}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) guest(uuid string, f records.Flavor, state compute.GuestState) {
	e.guests.guests[uuid] = compute.Guest{UUID: uuid, Name: uuid, Flavor: f, State: state}
}

func (e *env) migration(instanceUUID, uuid, src, dst string, status records.MigrationStatus) {
	e.t.Helper()
	if _, err := e.st.CreateMigration(ctx, records.Migration{UUID: uuid, InstanceUUID: instanceUUID, SourceHost: src, DestHost: dst, Status: status}); err != nil {
		e.t.Fatal(err)
	}
}

// copying records a live migration of instanceUUID in its copy (what the
// source's fence reads) and returns its ID.
func (e *env) copying(instanceUUID, src, dst string) records.Migration {
	e.t.Helper()
	m, err := e.st.CreateMigration(ctx, records.Migration{UUID: "mig-" + instanceUUID, InstanceUUID: instanceUUID, SourceHost: src, DestHost: dst,
		Status: records.MigrationRunning, Phase: migration.PhaseCopy})
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) write() {
	e.t.Helper()
	if err := e.tracker.WriteRecord(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// allocations returns a consumer's allocations, nil if it has none.
func (e *env) allocations(consumer string) map[string]placement.Resources {
	c, err := e.st.GetConsumer(ctx, consumer)
	if err != nil {
		return nil
	}
	return c.Allocations
}

func (e *env) storedRecord() records.HostRecord {
	e.t.Helper()
	r, err := e.st.GetHostRecord(ctx, "h1")
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// usage is the part of a host record the tests compare.
type usage struct {
	VCPUsUsed, MemoryMBUsed, FreeRAMMB, LocalGBUsed, FreeDiskGB, RunningVMs, NumIOOps int64
}

func usageOf(r records.HostRecord) usage {
	return usage{r.VCPUsUsed, r.MemoryMBUsed, r.FreeRAMMB, r.LocalGBUsed, r.FreeDiskGB, r.RunningVMs, r.NumIOOps}
}

func TestTrackerRecordValues(t *testing.T) {
	inst := func(uuid string, f records.Flavor) records.Instance {
		return records.Instance{UUID: uuid, Flavor: f}
	}
	cases := []struct {
		name string
		cfg  compute.HostConfig
		ops  func(e *env) error
		want usage
	}{
		{name: "empty host counts only the reserved memory", cfg: hostConfig(),
			ops:  func(e *env) error { return e.tracker.WriteRecord(ctx) },
			want: usage{VCPUsUsed: 0, MemoryMBUsed: 512, FreeRAMMB: 32256, LocalGBUsed: 0, FreeDiskGB: 500}},
		{name: "instance claim", cfg: hostConfig(),
			ops:  func(e *env) error { return e.tracker.InstanceClaim(ctx, inst("a", small)) },
			want: usage{VCPUsUsed: 2, MemoryMBUsed: 4608, FreeRAMMB: 28160, LocalGBUsed: 20, FreeDiskGB: 480, RunningVMs: 1}},
		{name: "two claims", cfg: hostConfig(),
			ops: func(e *env) error {
				if err := e.tracker.InstanceClaim(ctx, inst("a", small)); err != nil {
					return err
				}
				return e.tracker.InstanceClaim(ctx, inst("b", large))
			},
			want: usage{VCPUsUsed: 10, MemoryMBUsed: 512 + 4096 + 16384, FreeRAMMB: 32768 - 512 - 4096 - 16384, LocalGBUsed: 100, FreeDiskGB: 400, RunningVMs: 2}},
		{name: "claiming the same instance twice counts it once", cfg: hostConfig(),
			ops: func(e *env) error {
				if err := e.tracker.InstanceClaim(ctx, inst("a", small)); err != nil {
					return err
				}
				return e.tracker.InstanceClaim(ctx, inst("a", small))
			},
			want: usage{VCPUsUsed: 2, MemoryMBUsed: 4608, FreeRAMMB: 28160, LocalGBUsed: 20, FreeDiskGB: 480, RunningVMs: 1}},
		{name: "claim then remove", cfg: hostConfig(),
			ops: func(e *env) error {
				if err := e.tracker.InstanceClaim(ctx, inst("a", small)); err != nil {
					return err
				}
				if err := e.tracker.InstanceClaim(ctx, inst("b", large)); err != nil {
					return err
				}
				return e.tracker.RemoveInstance(ctx, "b")
			},
			want: usage{VCPUsUsed: 2, MemoryMBUsed: 4608, FreeRAMMB: 28160, LocalGBUsed: 20, FreeDiskGB: 480, RunningVMs: 1}},
		{name: "removing an unknown instance changes nothing", cfg: hostConfig(),
			ops:  func(e *env) error { return e.tracker.RemoveInstance(ctx, "nobody") },
			want: usage{MemoryMBUsed: 512, FreeRAMMB: 32256, FreeDiskGB: 500}},
		{name: "reserved disk is rounded up to GiB", cfg: hostConfig(func(c *compute.HostConfig) { c.ReservedHostDiskMB = 1500 }),
			ops:  func(e *env) error { return e.tracker.InstanceClaim(ctx, inst("a", small)) },
			want: usage{VCPUsUsed: 2, MemoryMBUsed: 4608, FreeRAMMB: 28160, LocalGBUsed: 22, FreeDiskGB: 478, RunningVMs: 1}},
		{name: "migration arrived writes the destination record", cfg: hostConfig(),
			ops:  func(e *env) error { return e.tracker.MigrationArrived(ctx, inst("a", large)) },
			want: usage{VCPUsUsed: 8, MemoryMBUsed: 16896, FreeRAMMB: 32768 - 16896, LocalGBUsed: 80, FreeDiskGB: 420, RunningVMs: 1}},
		{name: "migration arrived under legacy leaves the record as it was", cfg: hostConfig(legacy),
			ops: func(e *env) error {
				if err := e.tracker.WriteRecord(ctx); err != nil {
					return err
				}
				return e.tracker.MigrationArrived(ctx, inst("a", large))
			},
			want: usage{MemoryMBUsed: 512, FreeRAMMB: 32256, FreeDiskGB: 500}},
		{name: "legacy arrival is not counted by the next spawn either", cfg: hostConfig(legacy),
			ops: func(e *env) error {
				if err := e.tracker.MigrationArrived(ctx, inst("a", large)); err != nil {
					return err
				}
				return e.tracker.InstanceClaim(ctx, inst("b", small))
			},
			want: usage{VCPUsUsed: 2, MemoryMBUsed: 4608, FreeRAMMB: 28160, LocalGBUsed: 20, FreeDiskGB: 480, RunningVMs: 1}},
		{name: "removing an instance that migrated away", cfg: hostConfig(),
			ops: func(e *env) error {
				if err := e.tracker.MigrationArrived(ctx, inst("a", large)); err != nil {
					return err
				}
				return e.tracker.RemoveInstance(ctx, "a")
			},
			want: usage{MemoryMBUsed: 512, FreeRAMMB: 32256, FreeDiskGB: 500}},
		{name: "a busy tracked instance counts an io op", cfg: hostConfig(),
			ops: func(e *env) error {
				e.tracker.Busy("a", true)
				e.tracker.Busy("b", true) // not tracked here: no io op
				return e.tracker.InstanceClaim(ctx, inst("a", small))
			},
			want: usage{VCPUsUsed: 2, MemoryMBUsed: 4608, FreeRAMMB: 28160, LocalGBUsed: 20, FreeDiskGB: 480, RunningVMs: 1, NumIOOps: 1}},
		{name: "busy is counted per operation", cfg: hostConfig(),
			ops: func(e *env) error {
				e.tracker.Busy("a", true)
				e.tracker.Busy("a", true)
				e.tracker.Busy("a", false)
				return e.tracker.InstanceClaim(ctx, inst("a", small))
			},
			want: usage{VCPUsUsed: 2, MemoryMBUsed: 4608, FreeRAMMB: 28160, LocalGBUsed: 20, FreeDiskGB: 480, RunningVMs: 1, NumIOOps: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			e.clk.Advance(90 * time.Second)
			if err := tc.ops(e); err != nil {
				t.Fatal(err)
			}
			rec := e.tracker.Record()
			if got := usageOf(rec); got != tc.want {
				t.Fatalf("record usage\n got %+v\nwant %+v", got, tc.want)
			}
			if stored := e.storedRecord(); !reflect.DeepEqual(stored, rec) {
				t.Fatalf("stored record %+v differs from the tracker's %+v", stored, rec)
			}
			if rec.Host != "h1" || rec.ProviderUUID != "rp-h1" || rec.VCPUs != 16 || rec.MemoryMB != 32768 || rec.LocalGB != 500 {
				t.Fatalf("record totals wrong: %+v", rec)
			}
			if rec.CPUAllocationRatio != 1 || rec.RAMAllocationRatio != 1 || rec.DiskAllocationRatio != 1 {
				t.Fatalf("default allocation ratios not 1: %+v", rec)
			}
			if !rec.UpdatedAt.Equal(clock.Epoch.Add(90 * time.Second)) {
				t.Fatalf("updated_at = %v, want the clock's now", rec.UpdatedAt)
			}
		})
	}
}

func TestRecordUsedMatchesAllocations(t *testing.T) {
	e := newEnv(t, hostConfig(func(c *compute.HostConfig) { c.ReservedHostDiskMB = 2048 }))
	if err := e.tracker.InstanceClaim(ctx, records.Instance{UUID: "a", Flavor: small}); err != nil {
		t.Fatal(err)
	}
	if err := e.tracker.InstanceClaim(ctx, records.Instance{UUID: "b", Flavor: large}); err != nil {
		t.Fatal(err)
	}
	got := e.tracker.Record().Used(512, 2)
	want := small.Resources().Add(large.Resources())
	if !got.Equal(want) {
		t.Fatalf("record used %v, want %v (the instances' allocations)", got, want)
	}
}

func TestAudit(t *testing.T) {
	cases := []struct {
		name  string
		cfg   compute.HostConfig
		setup func(e *env)
		want  compute.Drift // Host and At are filled in
		after func(t *testing.T, e *env)
		// persistent: what was found cannot be healed by the audit and is
		// reported again by the next one.
		persistent bool
	}{
		{name: "nothing to heal",
			setup: func(e *env) {
				e.instance("a", small, records.VMActive, records.TaskNone)
				e.alloc("a", placement.ConsumerInstance, small, "rp-h1")
				e.guest("a", small, compute.GuestRunning)
				e.tracker.Track("a", small)
				e.write()
			},
			after: func(t *testing.T, e *env) {
				if r := e.tracker.Record(); r.RunningVMs != 1 || r.VCPUsUsed != 2 {
					t.Fatalf("record %+v", usageOf(r))
				}
			}},
		{name: "untracked guest (legacy arrival) is counted and the record drift reported", cfg: hostConfig(legacy),
			setup: func(e *env) {
				e.write()
				in := e.instance("a", small, records.VMActive, records.TaskNone)
				e.alloc("a", placement.ConsumerInstance, small, "rp-h1")
				e.guest("a", small, compute.GuestRunning)
				if err := e.tracker.MigrationArrived(ctx, in); err != nil {
					e.t.Fatal(err)
				}
			},
			want: compute.Drift{Untracked: []string{"a"},
				Record: []string{"vcpus_used 0→2", "memory_mb_used 512→4608", "local_gb_used 0→20", "running_vms 0→1"}},
			after: func(t *testing.T, e *env) {
				want := usage{VCPUsUsed: 2, MemoryMBUsed: 4608, FreeRAMMB: 28160, LocalGBUsed: 20, FreeDiskGB: 480, RunningVMs: 1}
				if got := usageOf(e.storedRecord()); got != want {
					t.Fatalf("stored record %+v, want %+v", got, want)
				}
			}},
		{name: "first audit of a fresh tracker reports untracked guests but no record drift",
			setup: func(e *env) {
				e.instance("a", small, records.VMActive, records.TaskNone)
				e.alloc("a", placement.ConsumerInstance, small, "rp-h1")
				e.guest("a", small, compute.GuestRunning)
			},
			want: compute.Drift{Untracked: []string{"a"}}},
		{name: "vanished instance stops being counted",
			setup: func(e *env) {
				e.tracker.Track("a", small)
				e.tracker.Track("b", large)
				e.instance("b", large, records.VMActive, records.TaskNone)
				e.alloc("b", placement.ConsumerInstance, large, "rp-h1")
				e.guest("b", large, compute.GuestRunning)
				e.write()
			},
			want: compute.Drift{Vanished: []string{"a"},
				Record: []string{"vcpus_used 10→8", "memory_mb_used 20992→16896", "local_gb_used 100→80", "running_vms 2→1"}},
			after: func(t *testing.T, e *env) {
				if r := e.storedRecord(); r.RunningVMs != 1 || r.VCPUsUsed != 8 {
					t.Fatalf("stored record %+v", usageOf(r))
				}
			}},
		{name: "a busy instance with no guest yet stays counted",
			setup: func(e *env) {
				e.instance("a", small, records.VMBuilding, records.TaskSpawning)
				e.alloc("a", placement.ConsumerInstance, small, "rp-h1")
				e.tracker.Busy("a", true)
				if err := e.tracker.InstanceClaim(ctx, records.Instance{UUID: "a", Flavor: small}); err != nil {
					e.t.Fatal(err)
				}
			},
			after: func(t *testing.T, e *env) {
				if r := e.tracker.Record(); r.RunningVMs != 1 {
					t.Fatalf("busy instance dropped from the record: %+v", usageOf(r))
				}
			}},
		{name: "missing allocation is written",
			setup: func(e *env) {
				e.instance("a", small, records.VMActive, records.TaskNone)
				e.guest("a", small, compute.GuestRunning)
				e.tracker.Track("a", small)
				e.write()
			},
			want: compute.Drift{MissingAllocations: []string{"a"}},
			after: func(t *testing.T, e *env) {
				want := map[string]placement.Resources{"rp-h1": small.Resources()}
				if got := e.allocations("a"); !reflect.DeepEqual(got, want) {
					t.Fatalf("allocations of a = %v, want %v", got, want)
				}
				c, _ := e.st.GetConsumer(ctx, "a")
				if c.Type != placement.ConsumerInstance {
					t.Fatalf("healed consumer type %q", c.Type)
				}
			}},
		{name: "missing allocation on a provider tree is written in the tree's shape",
			setup: func(e *env) {
				// h1 has a GPU child and shares a pool of addresses; the
				// flavor asks a VGPU as a granular group and an address.
				const agg = "a66a66a6-0000-4000-8000-000000000001"
				if _, err := e.st.CreateProvider(ctx, placement.Provider{UUID: "rp-h1-gpu", Name: "h1-gpu", ParentUUID: "rp-h1",
					Inventories: placement.Inventories{"VGPU": placement.NewInventory(2)}}); err != nil {
					e.t.Fatal(err)
				}
				if _, err := e.st.CreateProvider(ctx, placement.Provider{UUID: "rp-pool", Name: "pool",
					Inventories: placement.Inventories{"IPV4_ADDRESS": placement.NewInventory(4)},
					Traits:      []string{placement.SharesViaAggregate}, Aggregates: []string{agg}}); err != nil {
					e.t.Fatal(err)
				}
				if _, err := e.st.SetProviderAggregates(ctx, "rp-h1", nil, []string{agg}); err != nil {
					e.t.Fatal(err)
				}
				e.instance("a", gpuSmall, records.VMActive, records.TaskNone)
				e.alloc("a", placement.ConsumerInstance, gpuSmall, "rp-h2") // held elsewhere by mistake
				e.guest("a", gpuSmall, compute.GuestRunning)
				e.tracker.Track("a", gpuSmall)
				e.write()
			},
			want: compute.Drift{MissingAllocations: []string{"a"}},
			after: func(t *testing.T, e *env) {
				want := map[string]placement.Resources{"rp-h1": small.Resources(), "rp-h1-gpu": {"VGPU": 1}, "rp-pool": {"IPV4_ADDRESS": 1}}
				if got := e.allocations("a"); !reflect.DeepEqual(got, want) {
					t.Fatalf("allocations of a = %v, want %v", got, want)
				}
			}},
		{name: "an incoming guest is not this host's yet",
			setup: func(e *env) {
				e.instance("a", small, records.VMActive, records.TaskMigrating)
				e.alloc("a", placement.ConsumerInstance, small, "rp-h1")
				e.alloc("mig-a", placement.ConsumerMigration, small, "rp-h2")
				e.migration("a", "mig-a", "h2", "h1", records.MigrationRunning)
				e.guest("a", small, compute.GuestIncoming)
				e.write()
			},
			after: func(t *testing.T, e *env) {
				if r := e.tracker.Record(); r.RunningVMs != 0 {
					t.Fatalf("incoming guest counted: %+v", usageOf(r))
				}
				if e.allocations("a") == nil {
					t.Fatal("destination claim removed")
				}
			}},
		{name: "an active instance recorded here whose guest is gone keeps its allocation, reported lost", persistent: true,
			setup: func(e *env) {
				e.instance("a", small, records.VMActive, records.TaskNone)
				e.alloc("a", placement.ConsumerInstance, small, "rp-h1")
				e.write()
			},
			want: compute.Drift{Lost: []string{"a"}},
			after: func(t *testing.T, e *env) {
				want := map[string]placement.Resources{"rp-h1": small.Resources()}
				if got := e.allocations("a"); !reflect.DeepEqual(got, want) {
					t.Fatalf("allocations of a lost guest = %v, want them kept: %v", got, want)
				}
			}},
		{name: "an instance recorded on another host loses its allocation here only",
			setup: func(e *env) {
				in := e.instance("a", small, records.VMActive, records.TaskNone)
				in.Host = "h2"
				if _, err := e.st.UpdateInstance(ctx, in); err != nil {
					e.t.Fatal(err)
				}
				e.alloc("a", placement.ConsumerInstance, small, "rp-h1", "rp-h2")
				e.write()
			},
			want: compute.Drift{OrphanAllocations: []string{"a"}},
			after: func(t *testing.T, e *env) {
				want := map[string]placement.Resources{"rp-h2": small.Resources()}
				if got := e.allocations("a"); !reflect.DeepEqual(got, want) {
					t.Fatalf("allocations of a = %v, want %v", got, want)
				}
			}},
		{name: "orphan allocation of a deleted instance is removed",
			setup: func(e *env) {
				e.alloc("gone", placement.ConsumerInstance, small, "rp-h1")
				e.write()
			},
			want: compute.Drift{OrphanAllocations: []string{"gone"}}},
		{name: "orphan migration consumer is removed",
			setup: func(e *env) {
				e.alloc("mig-old", placement.ConsumerMigration, small, "rp-h1")
				e.migration("a", "mig-old", "h1", "h2", records.MigrationCompleted)
				e.write()
			},
			want: compute.Drift{OrphanAllocations: []string{"mig-old"}}},
		{name: "allocation of an instance being built is left alone",
			setup: func(e *env) {
				e.instance("a", small, records.VMBuilding, records.TaskSpawning)
				e.alloc("a", placement.ConsumerInstance, small, "rp-h1")
				e.write()
			},
			after: func(t *testing.T, e *env) {
				if e.allocations("a") == nil {
					t.Fatal("allocation of a building instance removed")
				}
			}},
		{name: "allocation of an instance with a task in flight is left alone",
			setup: func(e *env) {
				e.instance("a", small, records.VMActive, records.TaskDeleting)
				e.alloc("a", placement.ConsumerInstance, small, "rp-h1")
				e.write()
			}},
		{name: "allocations of an active migration are left alone",
			setup: func(e *env) {
				// The instance record says nothing (task already cleared): only
				// the migration record protects the allocations.
				e.instance("a", small, records.VMActive, records.TaskNone)
				e.alloc("a", placement.ConsumerInstance, small, "rp-h1")
				e.alloc("mig-a", placement.ConsumerMigration, small, "rp-h2")
				e.migration("a", "mig-a", "h2", "h1", records.MigrationPreparing)
				e.write()
			},
			after: func(t *testing.T, e *env) {
				if e.allocations("a") == nil {
					t.Fatal("destination claim of an active migration removed")
				}
			}},
		{name: "source-side migration consumer of an active migration is left alone",
			setup: func(e *env) {
				e.instance("a", small, records.VMActive, records.TaskMigrating)
				e.alloc("mig-a", placement.ConsumerMigration, small, "rp-h1")
				e.alloc("a", placement.ConsumerInstance, small, "rp-h2")
				e.migration("a", "mig-a", "h1", "h2", records.MigrationRunning)
				e.guest("a", small, compute.GuestMigrating)
				e.tracker.Track("a", small)
				e.write()
			},
			after: func(t *testing.T, e *env) {
				if e.allocations("mig-a") == nil || e.allocations("a")["rp-h1"] != nil {
					t.Fatalf("allocations changed: mig-a %v, a %v", e.allocations("mig-a"), e.allocations("a"))
				}
			}},
		{name: "incoming guest of a migration that ended is removed as stray",
			setup: func(e *env) {
				in := e.instance("a", small, records.VMActive, records.TaskNone)
				in.Host = "h2" // the migration failed: the instance stayed on its source
				if _, err := e.st.UpdateInstance(ctx, in); err != nil {
					e.t.Fatal(err)
				}
				e.alloc("a", placement.ConsumerInstance, small, "rp-h2")
				e.migration("a", "mig-a", "h2", "h1", records.MigrationFailed)
				e.guest("a", small, compute.GuestIncoming)
				e.write()
			},
			want: compute.Drift{Stray: []string{"a"}},
			after: func(t *testing.T, e *env) {
				if r := e.tracker.Record(); r.RunningVMs != 0 {
					t.Fatalf("stray incoming guest counted: %+v", usageOf(r))
				}
				if got := e.allocations("a"); !reflect.DeepEqual(got, map[string]placement.Resources{"rp-h2": small.Resources()}) {
					t.Fatalf("allocations of a = %v, want them left on h2", got)
				}
			}},
		{name: "incoming guest of an instance settled here is adopted (the post step never ran)",
			setup: func(e *env) {
				e.instance("a", small, records.VMActive, records.TaskNone) // recorded on h1, this host
				e.alloc("a", placement.ConsumerInstance, small, "rp-h1")
				e.migration("a", "mig-a", "h2", "h1", records.MigrationError)
				e.guest("a", small, compute.GuestIncoming)
				e.write()
			},
			want: compute.Drift{Untracked: []string{"a"},
				Record: []string{"vcpus_used 0→2", "memory_mb_used 512→4608", "local_gb_used 0→20", "running_vms 0→1"}},
			after: func(t *testing.T, e *env) {
				if g := e.guests.guests["a"]; g.State != compute.GuestRunning {
					t.Fatalf("adopted guest is %q, want running", g.State)
				}
				if r := e.tracker.Record(); r.RunningVMs != 1 {
					t.Fatalf("adopted guest not counted: %+v", usageOf(r))
				}
			}},
		{name: "guest of an instance recorded elsewhere is removed as stray and its allocation is not taken",
			setup: func(e *env) {
				in := e.instance("a", small, records.VMActive, records.TaskNone)
				in.Host = "h2"
				if _, err := e.st.UpdateInstance(ctx, in); err != nil {
					e.t.Fatal(err)
				}
				e.alloc("a", placement.ConsumerInstance, small, "rp-h2")
				e.guest("a", small, compute.GuestMigrating) // post at source failed
				e.tracker.Track("a", small)
				e.write()
			},
			want: compute.Drift{Stray: []string{"a"},
				Record: []string{"vcpus_used 2→0", "memory_mb_used 4608→512", "local_gb_used 20→0", "running_vms 1→0"}},
			after: func(t *testing.T, e *env) {
				if got := e.allocations("a"); !reflect.DeepEqual(got, map[string]placement.Resources{"rp-h2": small.Resources()}) {
					t.Fatalf("allocations of a = %v, want them left on h2", got)
				}
				if _, still := e.guests.guests["a"]; still {
					t.Fatal("the stray copy is still on the host")
				}
				if r := e.tracker.Record(); r.RunningVMs != 0 {
					t.Fatalf("the removed guest is still counted: %+v", usageOf(r))
				}
			}},
		{name: "allocation of a busy instance is left alone",
			setup: func(e *env) {
				e.instance("a", small, records.VMActive, records.TaskNone)
				e.alloc("a", placement.ConsumerInstance, small, "rp-h1")
				e.tracker.Busy("a", true)
				e.write()
			}},
	}
	for _, tc := range cases {
		for _, listing := range []string{"headers", "consumers"} {
			t.Run(tc.name+"/"+listing, func(t *testing.T) {
				cfg := tc.cfg
				if cfg.Host == "" {
					cfg = hostConfig()
				}
				e := newEnv(t, cfg)
				if listing == "consumers" {
					e.tracker = compute.NewTracker(cfg, listingAll{Store: e.st}, e.guests, e.clk)
				}
				tc.setup(e)
				e.clk.Advance(time.Minute)
				d, err := e.tracker.Audit(ctx)
				if err != nil {
					t.Fatal(err)
				}
				want := tc.want
				want.Host, want.At = "h1", clock.Epoch.Add(time.Minute)
				if !reflect.DeepEqual(normDrift(d), normDrift(want)) {
					t.Fatalf("drift\n got %+v\nwant %+v", d, want)
				}
				if d.Count() != len(want.Record)+len(want.Untracked)+len(want.Vanished)+len(want.MissingAllocations)+len(want.OrphanAllocations)+len(want.Stray)+len(want.Lost) {
					t.Fatalf("Count() = %d for %+v", d.Count(), d)
				}
				if tc.after != nil {
					tc.after(t, e)
				}
				if stored := e.storedRecord(); !reflect.DeepEqual(stored, e.tracker.Record()) {
					t.Fatalf("audit did not write its record: stored %+v, tracker %+v", stored, e.tracker.Record())
				}
				again, err := e.tracker.Audit(ctx)
				if err != nil {
					t.Fatal(err)
				}
				wantAgain := compute.Drift{}
				if tc.persistent {
					wantAgain = compute.Drift{Stray: want.Stray, Lost: want.Lost}
				}
				again.Host, again.At = "", time.Time{}
				if !reflect.DeepEqual(normDrift(again), normDrift(wantAgain)) {
					t.Fatalf("second audit found %s, want %+v", again, wantAgain)
				}
			})
		}
	}
}

var _ compute.ConsumerLister = (*memory.Store)(nil)

// listingAll is the memory store as a store without ConsumerHeadersOn (its
// field of that name hides the method): the audit then lists consumers
// with ConsumersOn, as it does over the agents' RPC store and the SQL
// stores.
type listingAll struct {
	*memory.Store
	ConsumerHeadersOn struct{}
}

// claimsDuring is a store on which a new claim by the consumer "a"
// commits right after the audit listed the allocations (when it reads
// instance "a").
type claimsDuring struct {
	*memory.Store
	claimed bool
}

func (c *claimsDuring) GetInstance(ctx context.Context, uuid string) (records.Instance, error) {
	if uuid == "a" && !c.claimed {
		c.claimed = true
		if _, err := c.Store.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "a", Type: placement.ConsumerInstance,
			AnyConsumerGeneration: true, Allocations: map[string]placement.Resources{"rp-h1": large.Resources()}}); err != nil {
			return records.Instance{}, err
		}
	}
	return c.Store.GetInstance(ctx, uuid)
}

// An allocation that looked orphaned when listed but changed before the
// audit released it is left to its new owner, whether the audit listed
// the consumers with or without their allocations.
func TestAuditLeavesAnAllocationThatChangedAfterTheListing(t *testing.T) {
	for _, listing := range []string{"headers", "consumers"} {
		t.Run(listing, func(t *testing.T) {
			e := newEnv(t, hostConfig())
			e.alloc("a", placement.ConsumerInstance, small, "rp-h1") // no instance, no guest: an orphan
			var st compute.TrackerStore = &claimsDuring{Store: e.st}
			if listing == "consumers" {
				st = struct{ compute.TrackerStore }{st} // TrackerStore's methods only
			}
			e.tracker = compute.NewTracker(hostConfig(), st, e.guests, e.clk)
			d, err := e.tracker.Audit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.OrphanAllocations) != 0 {
				t.Errorf("the audit released %v", d.OrphanAllocations)
			}
			want := map[string]placement.Resources{"rp-h1": large.Resources()}
			if got := e.allocations("a"); !reflect.DeepEqual(got, want) {
				t.Fatalf("allocations of a = %v, want the new claim %v", got, want)
			}
		})
	}
}

func normDrift(d compute.Drift) compute.Drift {
	for _, s := range []*[]string{&d.Record, &d.Untracked, &d.Vanished, &d.MissingAllocations, &d.OrphanAllocations, &d.Stray, &d.Lost} {
		if len(*s) == 0 {
			*s = nil
		}
	}
	return d
}

func TestAuditFailsClearlyWhenTheDriverFails(t *testing.T) {
	e := newEnv(t, hostConfig())
	e.guests.err = errors.New("hypervisor unreachable")
	_, err := e.tracker.Audit(ctx)
	if err == nil || !strings.Contains(err.Error(), "h1") || !strings.Contains(err.Error(), "hypervisor unreachable") {
		t.Fatalf("err = %v, want one naming the host and the cause", err)
	}
}

func TestDriftString(t *testing.T) {
	cases := []struct {
		name string
		d    compute.Drift
		want string
	}{
		{name: "none", d: compute.Drift{Host: "h1"}, want: "h1: no drift"},
		{name: "some", d: compute.Drift{Host: "h1", Record: []string{"running_vms 0→1"}, Untracked: []string{"a"}, OrphanAllocations: []string{"x", "y"}, Stray: []string{"z"}},
			want: "h1: record [running_vms 0→1]; untracked [a]; orphan allocations [x, y]; stray guests [z]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.d.String(); got != tc.want {
				t.Fatalf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestInventoriesFromHostConfig(t *testing.T) {
	cfg := hostConfig(func(c *compute.HostConfig) {
		c.CPUAllocationRatio, c.RAMAllocationRatio = 4, 1.5
		c.ReservedHostDiskMB = 1025
	})
	inv := cfg.Inventories()
	if got := inv[placement.VCPU].Capacity(); got != 64 {
		t.Errorf("VCPU capacity %d, want 64", got)
	}
	if got := inv[placement.MemoryMB].Capacity(); got != int64(float64(32768-512)*1.5) {
		t.Errorf("MEMORY_MB capacity %d, want %d", got, int64(float64(32768-512)*1.5))
	}
	if got := inv[placement.DiskGB].Reserved; got != 2 {
		t.Errorf("DISK_GB reserved %d, want 2 (1025 MB rounded up)", got)
	}
}

func TestPeriodicAudit(t *testing.T) {
	e := newEnv(t, hostConfig())
	m := compute.NewManager("h1", nil, e.tracker, nil, nil, e.clk, nil)
	var at []time.Duration
	m.StartPeriodicAudit(ctx, 0, 5*time.Second, func(d compute.Drift) {
		at = append(at, d.At.Sub(clock.Epoch))
	})
	e.clk.Advance(2 * time.Minute)
	m.StopPeriodicAudit()
	e.clk.Advance(10 * time.Minute)
	want := []time.Duration{5 * time.Second, 65 * time.Second}
	if !reflect.DeepEqual(at, want) {
		t.Fatalf("audits at %v, want %v (first after 5s, then every 60s, none after stop)", at, want)
	}
}

// gatedStore holds the first host-record write until released, so a test
// can interleave two writers.
type gatedStore struct {
	*memory.Store
	mu      sync.Mutex
	puts    int
	entered chan struct{} // closed when the first write arrives
	release chan struct{} // the first write proceeds once closed
	second  chan struct{} // closed when a second write arrives
}

func (g *gatedStore) PutHostRecord(ctx context.Context, h records.HostRecord) error {
	g.mu.Lock()
	g.puts++
	n := g.puts
	g.mu.Unlock()
	switch n {
	case 1:
		close(g.entered)
		<-g.release
	case 2:
		close(g.second)
	}
	return g.Store.PutHostRecord(ctx, h)
}

// TestConcurrentWritesStoreTheLatestRecord: two writers race (a claim on
// an RPC goroutine and a removal, as the periodic audit's timer goroutine
// would); the record stored last must be the tracker's latest, never an
// older one overtaking it.
func TestConcurrentWritesStoreTheLatestRecord(t *testing.T) {
	gs := &gatedStore{Store: memory.New(), entered: make(chan struct{}), release: make(chan struct{}), second: make(chan struct{})}
	tr := compute.NewTracker(hostConfig(), gs, &guestList{}, clock.NewVirtual(clock.Epoch))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := tr.InstanceClaim(ctx, records.Instance{UUID: "a", Flavor: small}); err != nil {
			t.Error(err)
		}
	}()
	<-gs.entered // the claim's record (with a) is computed and being written
	go func() {
		defer wg.Done()
		if err := tr.RemoveInstance(ctx, "a"); err != nil {
			t.Error(err)
		}
	}()
	// Give the removal every chance to write first (it must wait instead).
	for i := 0; i < 10000; i++ {
		select {
		case <-gs.second:
			i = 10000
		default:
			runtime.Gosched()
		}
	}
	close(gs.release)
	wg.Wait()
	stored, err := gs.GetHostRecord(ctx, "h1")
	if err != nil {
		t.Fatal(err)
	}
	if stored.RunningVMs != 0 || !reflect.DeepEqual(stored, tr.Record()) {
		t.Fatalf("stored record counts %d VMs, tracker's latest %d: an older record overtook the newer", stored.RunningVMs, tr.Record().RunningVMs)
	}
}
