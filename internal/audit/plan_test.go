package audit_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"keel/internal/audit"
	"keel/internal/compute"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

var (
	t0     = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	flavor = records.Flavor{ID: "f", Name: "f", VCPUs: 2}
	opts   = audit.Options{BuildTimeout: 10 * time.Minute, MigrationTimeout: 5 * time.Minute}
)

// cloud builds Plan's inputs: hosts a and b (8 VCPUs each), at t0.
type cloud struct{ in audit.Inputs }

func newCloud() *cloud {
	c := &cloud{in: audit.Inputs{Now: t0, Consumers: map[string][]placement.Consumer{}}}
	for _, h := range []string{"a", "b"} {
		c.in.Providers = append(c.in.Providers, store.ProviderSummary{
			Provider: placement.Provider{UUID: "rp-" + h, Name: h, Inventories: placement.Inventories{placement.VCPU: placement.NewInventory(8)}},
			Usage:    placement.Resources{},
		})
	}
	return c
}

// inst adds an instance, created and last changed age before t0.
func (c *cloud) inst(uuid, host string, vm records.VMState, task records.TaskState, age time.Duration) *cloud {
	c.in.Instances = append(c.in.Instances, records.Instance{UUID: uuid, Host: host, Flavor: flavor, VMState: vm, TaskState: task,
		CreatedAt: t0.Add(-age), UpdatedAt: t0.Add(-age), Version: 1})
	return c
}

// active adds an ACTIVE instance on host holding its flavor there.
func (c *cloud) active(uuid, host string) *cloud {
	return c.inst(uuid, host, records.VMActive, records.TaskNone, time.Hour).hold(uuid, placement.ConsumerInstance, host, 2)
}

func (c *cloud) hold(consumer string, typ placement.ConsumerType, host string, vcpus int64) *cloud {
	rp := "rp-" + host
	c.in.Consumers[rp] = append(c.in.Consumers[rp], placement.Consumer{UUID: consumer, Type: typ,
		Allocations: map[string]placement.Resources{rp: {placement.VCPU: vcpus}}})
	for i := range c.in.Providers {
		if c.in.Providers[i].UUID == rp {
			c.in.Providers[i].Usage[placement.VCPU] += vcpus
		}
	}
	return c
}

// migration adds a non-final migration, last changed age before t0.
func (c *cloud) migration(id int64, inst, src, dst string, status records.MigrationStatus, age time.Duration) *cloud {
	c.in.Migrations = append(c.in.Migrations, records.Migration{ID: id, UUID: fmt.Sprintf("mig-%d", id), InstanceUUID: inst,
		SourceHost: src, DestHost: dst, Status: status, UpdatedAt: t0.Add(-age)})
	return c
}

// moving is instance uuid being live-migrated a→b by migration id, as
// the claim leaves it: the migration consumer holds a, the instance b.
func (c *cloud) moving(uuid string, id int64, age time.Duration) *cloud {
	c.inst(uuid, "a", records.VMActive, records.TaskMigrating, age)
	c.hold(fmt.Sprintf("mig-%d", id), placement.ConsumerMigration, "a", 2)
	c.hold(uuid, placement.ConsumerInstance, "b", 2)
	return c.migration(id, uuid, "a", "b", records.MigrationRunning, age)
}

func (c *cloud) guests(host string, uuids ...string) *cloud {
	if c.in.Guests == nil {
		c.in.Guests = map[string][]compute.Guest{}
	}
	gs := []compute.Guest{}
	for _, u := range uuids {
		gs = append(gs, compute.Guest{UUID: u, State: compute.GuestRunning})
	}
	c.in.Guests[host] = gs
	return c
}

func (c *cloud) edit(f func(in *audit.Inputs)) *cloud { f(&c.in); return c }

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cloud *cloud
		opt   audit.Options
		want  []string // "kind subject", sorted
	}{
		{name: "consistent", cloud: newCloud().active("i1", "a").active("i2", "b").guests("a", "i1").guests("b", "i2")},
		{name: "a live migration in flight is legitimate", cloud: newCloud().moving("i1", 7, time.Minute).guests("a", "i1").guests("b", "i1")},
		{name: "a migration whose destination is not recorded yet", cloud: newCloud().moving("i1", 7, 0).edit(func(in *audit.Inputs) { in.Migrations[0].DestHost = "" })},
		{name: "a boot's claim before its host is recorded", cloud: newCloud().inst("i1", "", records.VMBuilding, records.TaskSpawning, time.Minute).hold("i1", placement.ConsumerInstance, "b", 2)},
		{name: "over capacity", cloud: newCloud().active("i1", "a").hold("i1", placement.ConsumerInstance, "a", 8),
			want: []string{"allocation-mismatch i1", "over-capacity a"}},
		{name: "allocation on the wrong host is held twice", cloud: newCloud().inst("i1", "a", records.VMActive, "", time.Hour).hold("i1", placement.ConsumerInstance, "b", 2),
			want: []string{"allocation-mismatch i1", "held-twice i1"}},
		{name: "a flavor's extra specs count, for each instance of its size", cloud: newCloud().active("i1", "a").active("i2", "a").
			inst("i3", "b", records.VMActive, "", time.Hour).hold("i3", placement.ConsumerInstance, "b", 4).active("i4", "b").edit(func(in *audit.Inputs) {
			for _, k := range []int{1, 2} { // i2 and i3: resources:VCPU=4 in place of the flavor's 2
				in.Instances[k].Flavor.ExtraSpecs = map[string]string{"resources:VCPU": "4"}
			}
		}), want: []string{"allocation-mismatch i2"}},
		{name: "no allocation", cloud: newCloud().inst("i1", "a", records.VMActive, "", time.Hour),
			want: []string{"allocation-mismatch i1"}},
		{name: "host without provider", cloud: newCloud().inst("i1", "c", records.VMActive, "", time.Hour),
			want: []string{"no-provider i1"}},
		{name: "error instance holding", cloud: newCloud().inst("i1", "a", records.VMError, "", time.Hour).hold("i1", placement.ConsumerInstance, "a", 2),
			want: []string{"failed-holds i1"}},
		{name: "consumer of nothing", cloud: newCloud().hold("ghost", placement.ConsumerInstance, "a", 1),
			want: []string{"unknown-consumer ghost"}},
		{name: "consumer of an ended migration", cloud: newCloud().active("i1", "a").hold("mig-3", placement.ConsumerMigration, "a", 2),
			want: []string{"ended-migration-consumer mig-3"}},
		{name: "source held by the instance and the migration", cloud: newCloud().moving("i1", 7, time.Minute).hold("i1", placement.ConsumerInstance, "a", 2),
			want: []string{"held-twice i1"}},
		{name: "instance on a third host while moving a→b", cloud: newCloud().moving("i1", 7, time.Minute).edit(func(in *audit.Inputs) {
			in.Providers = append(in.Providers, store.ProviderSummary{Provider: placement.Provider{UUID: "rp-c", Name: "c",
				Inventories: placement.Inventories{placement.VCPU: placement.NewInventory(8)}}, Usage: placement.Resources{placement.VCPU: 2}})
			in.Consumers["rp-c"] = []placement.Consumer{{UUID: "i1", Type: placement.ConsumerInstance, Allocations: map[string]placement.Resources{"rp-c": {placement.VCPU: 2}}}}
		}), want: []string{"held-twice i1"}},
		{name: "build past the deadline", opt: opts, cloud: newCloud().inst("i1", "a", records.VMBuilding, records.TaskSpawning, 11*time.Minute).hold("i1", placement.ConsumerInstance, "a", 2).
			inst("i2", "a", records.VMBuilding, records.TaskSpawning, 9*time.Minute).hold("i2", placement.ConsumerInstance, "a", 2),
			want: []string{"stuck-build i1"}},
		{name: "no deadline, no stuck build", cloud: newCloud().inst("i1", "a", records.VMBuilding, records.TaskSpawning, 24*time.Hour).hold("i1", placement.ConsumerInstance, "a", 2)},
		{name: "delete past the deadline", opt: opts, cloud: newCloud().inst("i1", "a", records.VMActive, records.TaskDeleting, 11*time.Minute).hold("i1", placement.ConsumerInstance, "a", 2),
			want: []string{"stuck-delete i1"}},
		{name: "migration without progress", opt: opts, cloud: newCloud().moving("i1", 7, 6*time.Minute),
			want: []string{"stuck-migrating i1", "stuck-migration 7"}},
		{name: "long migration with progress", opt: opts, cloud: newCloud().moving("i1", 7, time.Hour).edit(func(in *audit.Inputs) { in.Migrations[0].UpdatedAt = t0.Add(-time.Second) })},
		{name: "instance migrating with no migration", opt: opts, cloud: newCloud().inst("i1", "a", records.VMActive, records.TaskMigrating, 6*time.Minute).hold("i1", placement.ConsumerInstance, "a", 2),
			want: []string{"stuck-migrating i1"}},
		{name: "queued behind a progressing migration", opt: opts, cloud: newCloud().moving("i1", 7, time.Minute).active("i2", "a").
			migration(8, "i2", "a", "", records.MigrationQueued, time.Hour)},
		{name: "queued behind nothing", opt: opts, cloud: newCloud().active("i2", "a").migration(8, "i2", "a", "", records.MigrationQueued, time.Hour),
			want: []string{"stuck-migration 8"}},
		{name: "a resize awaiting confirm, however long", opt: opts, cloud: newCloud().
			inst("i1", "b", records.VMResized, records.TaskNone, time.Hour).hold("mig-7", placement.ConsumerMigration, "a", 2).hold("i1", placement.ConsumerInstance, "b", 4).
			migration(7, "i1", "a", "b", records.MigrationFinished, time.Hour).guests("a", "i1").guests("b", "i1")},
		{name: "a resize on its own host holds both flavors there", cloud: newCloud().
			inst("i1", "a", records.VMActive, records.TaskResizePrep, 0).hold("mig-7", placement.ConsumerMigration, "a", 2).hold("i1", placement.ConsumerInstance, "a", 4).
			migration(7, "i1", "a", "a", records.MigrationMigrating, 0)},
		{name: "a resize stuck before it finished", opt: opts, cloud: newCloud().
			inst("i1", "a", records.VMActive, records.TaskResizePrep, time.Hour).hold("mig-7", placement.ConsumerMigration, "a", 2).hold("i1", placement.ConsumerInstance, "b", 4).
			migration(7, "i1", "a", "b", records.MigrationPreMigrating, time.Hour),
			want: []string{"stuck-migrating i1", "stuck-migration 7"}},
		{name: "lost guest", cloud: newCloud().active("i1", "a").active("i2", "a").guests("a", "i2"),
			want: []string{"lost-guest i1"}},
		{name: "unchecked host: no lost guest", cloud: newCloud().active("i1", "a").guests("b")},
		{name: "guest without instance", cloud: newCloud().guests("b", "x"),
			want: []string{"stray-guest x"}},
		{name: "guest on a host its instance does not run on", cloud: newCloud().active("i1", "a").guests("a", "i1").guests("b", "i1"),
			want: []string{"stray-guest i1"}},
		{name: "guest lost in the first reading only (deleted meanwhile)", cloud: newCloud().active("i1", "a").guests("a").edit(func(in *audit.Inputs) {
			in.GuestsCheck = &audit.Recheck{Instances: []records.Instance{{UUID: "i1", Host: "a", VMState: records.VMActive, TaskState: records.TaskDeleting, Version: 2}}}
		})},
		{name: "guest whose instance appeared in the second reading", cloud: newCloud().guests("a", "i9").edit(func(in *audit.Inputs) {
			in.GuestsCheck = &audit.Recheck{Instances: []records.Instance{{UUID: "i9", Host: "a", VMState: records.VMBuilding, Version: 1}}}
		})},
		{name: "guest without instance in both readings", cloud: newCloud().guests("a", "x").edit(func(in *audit.Inputs) { in.GuestsCheck = &audit.Recheck{} }),
			want: []string{"stray-guest x"}},
		{name: "slot of an ended migration", cloud: newCloud().moving("i1", 7, time.Minute).edit(func(in *audit.Inputs) {
			in.Slots = map[string][]int64{"a": {7, 5, 6, 9}}
			in.Ended = map[int64]records.MigrationStatus{5: records.MigrationCompleted, 9: records.MigrationRunning} // 6: record gone; 9 started meanwhile
		}), want: []string{"slot-of-ended-migration 5", "slot-of-ended-migration 6"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := audit.Plan(tc.cloud.in, tc.opt)
			var got []string
			for _, f := range fs {
				got = append(got, f.Kind+" "+f.Subject)
				if f.Text == "" || !strings.Contains(f.Text, f.Subject) {
					t.Errorf("finding %s: text %q does not name its subject", f.Kind, f.Text)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				var texts []string
				for _, f := range fs {
					texts = append(texts, f.Text)
				}
				t.Errorf("findings %q, want %q:\n%s", got, tc.want, strings.Join(texts, "\n"))
			}
		})
	}
}

// BenchmarkPlan: 1,000 hosts with 20 instances each, their guests, 100
// migrations in flight and their slots.
func BenchmarkPlan(b *testing.B) {
	c := &cloud{in: audit.Inputs{Now: t0, Consumers: map[string][]placement.Consumer{}, Guests: map[string][]compute.Guest{}, Slots: map[string][]int64{}}}
	for h := range 1000 {
		name := fmt.Sprintf("h%04d", h)
		c.in.Providers = append(c.in.Providers, store.ProviderSummary{
			Provider: placement.Provider{UUID: "rp-" + name, Name: name, Inventories: placement.Inventories{placement.VCPU: placement.NewInventory(64)}},
			Usage:    placement.Resources{},
		})
	}
	for h := range 1000 {
		name := fmt.Sprintf("h%04d", h)
		var uuids []string
		for i := range 20 {
			u := fmt.Sprintf("%s-i%02d", name, i)
			c.active(u, name)
			uuids = append(uuids, u)
		}
		c.guests(name, uuids...)
	}
	for m := range 100 {
		src, dst := fmt.Sprintf("h%04d", m), fmt.Sprintf("h%04d", m+1)
		c.migration(int64(m+1), fmt.Sprintf("%s-i00", src), src, dst, records.MigrationRunning, time.Second)
		c.in.Slots[src] = append(c.in.Slots[src], int64(m+1))
	}
	b.ResetTimer()
	for b.Loop() {
		if fs := audit.Plan(c.in, opts); len(fs) != 0 {
			b.Fatalf("a consistent cloud has %d findings, first %s", len(fs), fs[0].Text)
		}
	}
}
