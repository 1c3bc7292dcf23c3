package conductor_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/conductor"
	"keel/internal/migration"
	"keel/internal/records"
)

func TestBoot(t *testing.T) {
	cases := []struct {
		name   string
		flavor records.Flavor
		fault  string // injected spawn failure on every host
		// wantNow is the state Boot returns; wantLater the state after the spawn.
		wantNow, wantLater records.VMState
		wantFault          string
		wantHost           string
	}{
		{name: "boot becomes active", flavor: medium, wantNow: records.VMBuilding, wantLater: records.VMActive, wantHost: "h1"},
		{name: "spawn failure ends in error and releases the claim", flavor: medium, fault: "disk image corrupt",
			wantNow: records.VMBuilding, wantLater: records.VMError, wantFault: "disk image corrupt", wantHost: "h1"},
		{name: "nothing fits", flavor: huge, wantNow: records.VMError, wantLater: records.VMError, wantFault: "No valid host"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCloud(t)
			uuid := "inst-boot"
			if tc.fault != "" {
				for _, d := range c.drivers {
					d.FailNext(compute.StepSpawn, uuid, tc.fault)
				}
			}
			in, err := c.cond.Boot(ctx, records.Instance{UUID: uuid, Name: "vm", Flavor: tc.flavor, Zone: "nova"})
			if err != nil {
				t.Fatal(err)
			}
			if in.VMState != tc.wantNow || in.Host != tc.wantHost {
				t.Fatalf("Boot returned %s on %q, want %s on %q", in.VMState, in.Host, tc.wantNow, tc.wantHost)
			}
			if tc.wantNow == records.VMBuilding {
				// Claimed in the store at once, and counted by the tracker.
				if got := c.allocations(uuid); !sameAllocations(got, only(tc.wantHost, tc.flavor)) {
					t.Fatalf("allocation while building = %v, want %v", got, only(tc.wantHost, tc.flavor))
				}
				if r := c.hostRecord(tc.wantHost); r.RunningVMs != 1 || r.VCPUsUsed != tc.flavor.VCPUs {
					t.Fatalf("host record while building: %+v", r)
				}
			}
			c.advance(spawnTime)
			got := c.instance(uuid)
			if got.VMState != tc.wantLater || got.TaskState != records.TaskNone {
				t.Fatalf("after the spawn: %s/%q, want %s with no task", got.VMState, got.TaskState, tc.wantLater)
			}
			if len(c.Builds) != 1 || c.Builds[0].VMState != tc.wantLater {
				t.Fatalf("BuildDone hook saw %v", c.Builds)
			}
			switch tc.wantLater {
			case records.VMActive:
				if got.Fault != "" {
					t.Fatalf("active instance with fault %q", got.Fault)
				}
				if a := c.allocations(uuid); !sameAllocations(a, only(tc.wantHost, tc.flavor)) {
					t.Fatalf("allocation = %v", a)
				}
				r := c.hostRecord(tc.wantHost)
				if r.RunningVMs != 1 || r.VCPUsUsed != 4 || r.MemoryMBUsed != 512+8192 || r.LocalGBUsed != 40 {
					t.Fatalf("host record after spawn: %+v", r)
				}
				if s := c.guest(tc.wantHost, uuid); s != compute.GuestRunning {
					t.Fatalf("guest is %q", s)
				}
			case records.VMError:
				wantErrorContaining(t, got.Fault, tc.wantFault)
				if a := c.allocations(uuid); a != nil {
					t.Fatalf("failed boot still holds %v", a)
				}
				for _, h := range c.hosts {
					if s := c.guest(h, uuid); s != "" {
						t.Fatalf("failed boot left a %s guest on %s", s, h)
					}
					if r := c.hostRecord(h); r.RunningVMs != 0 {
						t.Fatalf("record of %s still counts the failed boot: %+v", h, r)
					}
				}
			}
			c.checkInvariants()
		})
	}
}

func TestDelete(t *testing.T) {
	c := newCloud(t)
	a := c.seed("h1", "a", medium)
	m := c.migrate(a, "")
	var inv *conductor.InvalidStateError
	if err := c.cond.Delete(ctx, a.UUID); !errors.As(err, &inv) {
		t.Fatalf("delete during a migration: %v, want InvalidStateError", err)
	}
	c.advance(copyTime)
	if got := c.migration(m.ID).Status; got != records.MigrationCompleted {
		t.Fatalf("migration %s", got)
	}
	if err := c.cond.Delete(ctx, a.UUID); err != nil {
		t.Fatal(err)
	}
	if c.allocations(a.UUID) != nil || c.guest("h2", a.UUID) != "" {
		t.Fatal("delete left the allocation or the guest")
	}
	if r := c.hostRecord("h2"); r.RunningVMs != 0 {
		t.Fatalf("record of h2 still counts the deleted instance: %+v", r)
	}
	c.checkInvariants()
}

func TestLiveMigrationHappyPath(t *testing.T) {
	cases := []struct {
		name   string
		legacy bool
	}{
		{name: "destination writes its record"},
		{name: "legacy destination waits for the audit", legacy: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := []option{hosts(3)}
			if tc.legacy {
				opts = append(opts, legacyHosts())
			}
			c := newCloud(t, opts...)
			in := c.seed("h1", "a", medium)
			c.seed("h3", "filler", small) // h2 is the clear choice
			before := c.usages()

			m := c.migrate(in, "")
			if m.Status != records.MigrationRunning || m.Phase != migration.PhaseCopy || m.DestHost != "h2" || m.SourceHost != "h1" {
				t.Fatalf("after LiveMigrate: %s/%s %s→%s", m.Status, m.Phase, m.SourceHost, m.DestHost)
			}
			if got := c.instance(in.UUID); got.TaskState != records.TaskMigrating || got.Host != "h1" {
				t.Fatalf("instance during the copy: task %q on %s", got.TaskState, got.Host)
			}

			c.advance(3 * time.Second)
			// Mid-copy: the source side is held by the migration consumer, the
			// destination is claimed by the instance.
			if got := c.allocations(m.UUID); !sameAllocations(got, only("h1", medium)) {
				t.Fatalf("migration consumer holds %v, want the source side", got)
			}
			if got := c.allocations(in.UUID); !sameAllocations(got, only("h2", medium)) {
				t.Fatalf("instance holds %v, want the destination claim", got)
			}
			if got := c.usage("h1"); !got.Equal(before["h1"]) {
				t.Fatalf("source usage %v during the copy, want %v", got, before["h1"])
			}
			if got, want := c.usage("h2"), before["h2"].Clone().Add(medium.Resources()); !got.Equal(want) {
				t.Fatalf("destination usage %v during the copy, want %v", got, want)
			}
			mid := c.migration(m.ID)
			if mid.Status != records.MigrationRunning || mid.MemoryProcessedBytes != mid.MemoryTotalBytes*3/8 {
				t.Fatalf("mid-copy record: %s, %d of %d bytes", mid.Status, mid.MemoryProcessedBytes, mid.MemoryTotalBytes)
			}
			if c.guest("h1", in.UUID) != compute.GuestMigrating || c.guest("h2", in.UUID) != compute.GuestIncoming {
				t.Fatalf("guests mid-copy: source %q, destination %q", c.guest("h1", in.UUID), c.guest("h2", in.UUID))
			}
			c.checkInvariants()

			c.advance(time.Minute)
			done := c.migration(m.ID)
			if done.Status != records.MigrationCompleted || done.Error != "" || done.MemoryRemainingBytes != 0 {
				t.Fatalf("migration ended %s (%q), %d bytes remaining", done.Status, done.Error, done.MemoryRemainingBytes)
			}
			if at := done.UpdatedAt.Sub(m.CreatedAt); at != copyTime {
				t.Fatalf("completed %v after the start, want %v", at, copyTime)
			}
			got := c.instance(in.UUID)
			if got.Host != "h2" || got.TaskState != records.TaskNone || got.VMState != records.VMActive {
				t.Fatalf("instance after: %s/%q on %s", got.VMState, got.TaskState, got.Host)
			}
			if a := c.allocations(m.UUID); a != nil {
				t.Fatalf("migration consumer still holds %v", a)
			}
			if got := c.usage("h1"); !got.Equal(nil) {
				t.Fatalf("source usage %v after, want nothing", got)
			}
			if c.guest("h1", in.UUID) != "" || c.guest("h2", in.UUID) != compute.GuestRunning {
				t.Fatalf("guests after: source %q, destination %q", c.guest("h1", in.UUID), c.guest("h2", in.UUID))
			}
			if r := c.hostRecord("h1"); r.RunningVMs != 0 || r.VCPUsUsed != 0 {
				t.Fatalf("source record still counts the instance: %+v", r)
			}
			dst := c.hostRecord("h2")
			if tc.legacy {
				if dst.RunningVMs != 0 {
					t.Fatalf("legacy destination wrote its record: %+v", dst)
				}
				d, err := c.agents["h2"].Audit(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(d.Untracked, []string{in.UUID}) || len(d.Record) == 0 {
					t.Fatalf("audit of the legacy destination found %s", d)
				}
				dst = c.hostRecord("h2")
			}
			if dst.RunningVMs != 1 || dst.VCPUsUsed != 4 || dst.MemoryMBUsed != 512+8192 {
				t.Fatalf("destination record: %+v", dst)
			}
			if !reflect.DeepEqual(c.doneStatuses(), []string{"1:completed"}) {
				t.Fatalf("MigrationDone hook saw %v", c.doneStatuses())
			}
			c.checkInvariants()
		})
	}
}

func TestLiveMigrationChoosesAnotherHostAfterAFailedCheck(t *testing.T) {
	cases := []struct {
		name      string
		failOn    string // host whose driver refuses
		step      string
		times     int
		attempts  int
		wantDest  string
		wantTried []string
		wantErr   string
	}{
		{name: "destination check fails on the first choice", failOn: "h2", step: compute.StepCheckDestination, times: 1,
			attempts: 3, wantDest: "h3", wantTried: []string{"h2"}},
		{name: "source check fails twice", failOn: "h1", step: compute.StepCheckSource, times: 2,
			attempts: 3, wantDest: "h4", wantTried: []string{"h2", "h3"}},
		{name: "every attempt fails", failOn: "h1", step: compute.StepCheckSource, times: 3,
			attempts: 3, wantTried: []string{"h2", "h3", "h4"}, wantErr: "after 3 attempts"},
		{name: "max attempts 1", failOn: "h2", step: compute.StepCheckDestination, times: 1,
			attempts: 1, wantTried: []string{"h2"}, wantErr: "after 1 attempts"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCloud(t, hosts(4), maxAttempts(tc.attempts))
			in := c.seed("h1", "a", medium)
			c.seed("h3", "f3", small)
			c.seed("h4", "f4a", small)
			c.seed("h4", "f4b", small) // preference: h2, h3, h4
			before := c.usages()
			for i := 0; i < tc.times; i++ {
				c.drivers[tc.failOn].FailNext(tc.step, in.UUID, "cpu flags differ")
			}
			m := c.migrate(in, "")
			if !reflect.DeepEqual(m.TriedHosts, tc.wantTried) {
				t.Fatalf("tried %v, want %v", m.TriedHosts, tc.wantTried)
			}
			if tc.wantErr != "" {
				if m.Status != records.MigrationError {
					t.Fatalf("status %s, want error", m.Status)
				}
				wantErrorContaining(t, m.Error, tc.wantErr)
				wantErrorContaining(t, m.Error, "cpu flags differ")
				if got := c.usages(); !reflect.DeepEqual(normUsages(got), normUsages(before)) {
					t.Fatalf("usages %v after the failure, want %v", got, before)
				}
				if got := c.instance(in.UUID); got.Host != "h1" || got.TaskState != records.TaskNone {
					t.Fatalf("instance %q on %s", got.TaskState, got.Host)
				}
				c.checkInvariants()
				return
			}
			if m.DestHost != tc.wantDest || m.Status != records.MigrationRunning || m.Attempts != len(tc.wantTried)+1 {
				t.Fatalf("migration to %s (%s, %d attempts), want %s running", m.DestHost, m.Status, m.Attempts, tc.wantDest)
			}
			// The refused hosts got their claim back at once.
			for _, h := range tc.wantTried {
				if got := c.usage(h); !got.Equal(before[h]) {
					t.Fatalf("refused host %s still shows %v, want %v", h, got, before[h])
				}
			}
			c.advance(time.Minute)
			if got := c.instance(in.UUID); got.Host != tc.wantDest || c.migration(m.ID).Status != records.MigrationCompleted {
				t.Fatalf("instance on %s, migration %s", got.Host, c.migration(m.ID).Status)
			}
			c.checkInvariants()
		})
	}
}

func TestLiveMigrationRequestedHost(t *testing.T) {
	c := newCloud(t, hosts(3))
	a := c.seed("h1", "a", medium)
	m := c.migrate(a, "h3") // h2 would be the scheduler's choice
	if m.DestHost != "h3" || m.Status != records.MigrationRunning {
		t.Fatalf("migration to %s (%s), want h3 running", m.DestHost, m.Status)
	}
	c.advance(time.Minute)
	if got := c.instance(a.UUID); got.Host != "h3" {
		t.Fatalf("instance on %s, want h3", got.Host)
	}
	c.checkInvariants()

	// A requested host that refuses ends the migration; no other host is tried.
	c.drivers["h1"].FailNext(compute.StepCheckDestination, a.UUID, "hugepages missing")
	before := c.usages()
	m = c.migrate(c.instance(a.UUID), "h1")
	if m.Status != records.MigrationError || m.Attempts != 1 || !reflect.DeepEqual(m.TriedHosts, []string{"h1"}) {
		t.Fatalf("migration %s after %d attempts, tried %v; want error after 1", m.Status, m.Attempts, m.TriedHosts)
	}
	wantErrorContaining(t, m.Error, "hugepages missing")
	if got := c.usages(); !reflect.DeepEqual(normUsages(got), normUsages(before)) {
		t.Fatalf("usages %v, want %v", got, before)
	}
	c.checkInvariants()

	// A requested host that does not exist.
	m = c.migrate(c.instance(a.UUID), "h9")
	if m.Status != records.MigrationError {
		t.Fatalf("migration to an unknown host: %s", m.Status)
	}
	wantErrorContaining(t, m.Error, "No valid host")
	c.checkInvariants()
}

func TestLiveMigrateRefusals(t *testing.T) {
	c := newCloud(t)
	a := c.seed("h1", "a", medium)
	b := c.seed("h1", "b", medium)
	c.migrate(b, "")
	building, err := c.cond.Boot(ctx, records.Instance{Name: "new", Flavor: small, Zone: "nova"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, uuid, host string
	}{
		{name: "to its own host", uuid: a.UUID, host: "h1"},
		{name: "while migrating", uuid: b.UUID},
		{name: "while building", uuid: building.UUID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.cond.LiveMigrate(ctx, tc.uuid, tc.host)
			var inv *conductor.InvalidStateError
			if !errors.As(err, &inv) {
				t.Fatalf("err = %v, want InvalidStateError", err)
			}
		})
	}
	if _, err := c.cond.LiveMigrate(ctx, "no-such-instance", ""); err == nil {
		t.Fatal("migration of an unknown instance accepted")
	}
	c.advance(time.Minute)
	c.checkInvariants()
}

// TestLiveMigrationRollback: whatever stops a migration before the guest
// moves, the instance stays on the source with its allocation, the
// destination gets its claim back and has no leftover guest, and the
// source's slot is free for the next migration.
func TestLiveMigrationRollback(t *testing.T) {
	cases := []struct {
		name       string
		inject     func(c *cloud, in records.Instance)
		act        func(c *cloud, m records.Migration) // after 3 s of copy
		wantStatus records.MigrationStatus
		wantErr    string
		wantAt     time.Duration
	}{
		{name: "copy failure", wantStatus: records.MigrationFailed, wantErr: "link down", wantAt: copyTime / 2,
			inject: func(c *cloud, in records.Instance) {
				c.drivers["h1"].FailNext(compute.StepLiveMigration, in.UUID, "link down")
			}},
		{name: "abort during the copy", wantStatus: records.MigrationCancelled, wantErr: "aborted", wantAt: 3 * time.Second,
			act: func(c *cloud, m records.Migration) {
				if err := c.cond.Abort(ctx, m.ID); err != nil {
					c.t.Fatal(err)
				}
			}},
		{name: "abort of a failing copy", wantStatus: records.MigrationCancelled, wantErr: "aborted", wantAt: 3 * time.Second,
			inject: func(c *cloud, in records.Instance) {
				c.drivers["h1"].FailNext(compute.StepLiveMigration, in.UUID, "link down")
			},
			act: func(c *cloud, m records.Migration) {
				if err := c.cond.Abort(ctx, m.ID); err != nil {
					c.t.Fatal(err)
				}
			}},
		{name: "pre_live_migration failure", wantStatus: records.MigrationFailed, wantErr: "no volume path", wantAt: 0,
			inject: func(c *cloud, in records.Instance) {
				c.drivers["h2"].FailNext(compute.StepPreLiveMigration, in.UUID, "no volume path")
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCloud(t, maxConcurrent(1))
			in := c.seed("h1", "a", medium)
			c.seed("h3", "filler", small)
			before := c.usages()
			beforeRec := c.hostRecord("h2")
			if tc.inject != nil {
				tc.inject(c, in)
			}
			m := c.migrate(in, "")
			if m.DestHost != "h2" {
				t.Fatalf("destination %s, want h2", m.DestHost)
			}
			c.advance(3 * time.Second)
			if tc.act != nil {
				tc.act(c, m)
			}
			c.advance(0)
			c.advance(time.Minute)

			got := c.migration(m.ID)
			if got.Status != tc.wantStatus {
				t.Fatalf("migration ended %s (%q), want %s", got.Status, got.Error, tc.wantStatus)
			}
			wantErrorContaining(t, got.Error, tc.wantErr)
			if at := got.UpdatedAt.Sub(m.CreatedAt); at != tc.wantAt {
				t.Fatalf("ended %v after the start, want %v", at, tc.wantAt)
			}
			inst := c.instance(in.UUID)
			if inst.Host != "h1" || inst.TaskState != records.TaskNone || inst.VMState != records.VMActive {
				t.Fatalf("instance %s/%q on %s, want active on h1", inst.VMState, inst.TaskState, inst.Host)
			}
			if a := c.allocations(in.UUID); !sameAllocations(a, only("h1", medium)) {
				t.Fatalf("instance holds %v, want its source allocation", a)
			}
			if a := c.allocations(m.UUID); a != nil {
				t.Fatalf("migration consumer still holds %v", a)
			}
			if got := c.usages(); !reflect.DeepEqual(normUsages(got), normUsages(before)) {
				t.Fatalf("usages %v, want as before %v", got, before)
			}
			if s := c.guest("h2", in.UUID); s != "" {
				t.Fatalf("destination keeps a %s guest", s)
			}
			if s := c.guest("h1", in.UUID); s != compute.GuestRunning {
				t.Fatalf("source guest is %q, want running", s)
			}
			if r := c.hostRecord("h2"); r.RunningVMs != beforeRec.RunningVMs {
				t.Fatalf("destination record changed: %+v", r)
			}
			if r := c.hostRecord("h1"); r.RunningVMs != 1 {
				t.Fatalf("source record lost the instance: %+v", r)
			}
			if !reflect.DeepEqual(c.doneStatuses(), []string{"1:" + string(tc.wantStatus)}) {
				t.Fatalf("MigrationDone hook saw %v", c.doneStatuses())
			}
			c.checkInvariants()

			// The source's only slot is free again: the next migration runs.
			again := c.migrate(c.instance(in.UUID), "")
			if again.Status != records.MigrationRunning {
				t.Fatalf("next migration %s, want running (slot lost?)", again.Status)
			}
			c.advance(time.Minute)
			if s := c.migration(again.ID).Status; s != records.MigrationCompleted {
				t.Fatalf("next migration ended %s", s)
			}
			c.checkInvariants()
		})
	}
}

func TestForceComplete(t *testing.T) {
	c := newCloud(t)
	in := c.seed("h1", "a", medium)
	m := c.migrate(in, "")
	c.advance(2 * time.Second)
	if err := c.cond.ForceComplete(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	c.advance(0)
	got := c.migration(m.ID)
	if got.Status != records.MigrationCompleted {
		t.Fatalf("status %s after force complete", got.Status)
	}
	if at := got.UpdatedAt.Sub(m.CreatedAt); at != 2*time.Second {
		t.Fatalf("completed after %v, want 2s", at)
	}
	if c.instance(in.UUID).Host != "h2" {
		t.Fatal("instance did not move")
	}
	var inv *conductor.InvalidStateError
	if err := c.cond.ForceComplete(ctx, m.ID); !errors.As(err, &inv) {
		t.Fatalf("force complete of a completed migration: %v", err)
	}
	if err := c.cond.Abort(ctx, m.ID); !errors.As(err, &inv) {
		t.Fatalf("abort of a completed migration: %v", err)
	}
	if err := c.cond.Abort(ctx, 999); err == nil {
		t.Fatal("abort of an unknown migration accepted")
	}
	c.advance(time.Minute)
	c.checkInvariants()
}

func TestMaxConcurrentLiveMigrations(t *testing.T) {
	cases := []struct {
		name          string
		max           int
		wantSecond    records.MigrationStatus // status right after LiveMigrate
		wantSecondEnd time.Duration
	}{
		{name: "one slot: the second waits for the first copy", max: 1, wantSecond: records.MigrationQueued, wantSecondEnd: 2 * copyTime},
		{name: "two slots: both copy at once", max: 2, wantSecond: records.MigrationRunning, wantSecondEnd: copyTime},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCloud(t, hosts(3), maxConcurrent(tc.max))
			a := c.seed("h1", "a", medium)
			b := c.seed("h1", "b", medium)
			ma := c.migrate(a, "")
			mb := c.migrate(b, "")
			if ma.Status != records.MigrationRunning || mb.Status != tc.wantSecond {
				t.Fatalf("statuses %s, %s; want running, %s", ma.Status, mb.Status, tc.wantSecond)
			}
			// Each decision saw the other's claim.
			if ma.DestHost == mb.DestHost {
				t.Fatalf("both migrations chose %s", ma.DestHost)
			}
			if tc.wantSecond == records.MigrationQueued {
				c.advance(copyTime - time.Second)
				if s := c.migration(mb.ID); s.Status != records.MigrationQueued || c.guest(mb.DestHost, b.UUID) != "" {
					t.Fatalf("second migration %s before the first copy ended", s.Status)
				}
				c.checkInvariants()
				c.advance(time.Second)
				if s := c.migration(ma.ID).Status; s != records.MigrationCompleted {
					t.Fatalf("first migration %s", s)
				}
				if s := c.migration(mb.ID).Status; s != records.MigrationRunning {
					t.Fatalf("second migration %s once the slot is free, want running", s)
				}
			}
			c.advance(time.Minute)
			for _, m := range []records.Migration{ma, mb} {
				got := c.migration(m.ID)
				if got.Status != records.MigrationCompleted {
					t.Fatalf("migration %d ended %s", m.ID, got.Status)
				}
			}
			if at := c.migration(mb.ID).UpdatedAt.Sub(mb.CreatedAt); at != tc.wantSecondEnd {
				t.Fatalf("second migration completed after %v, want %v", at, tc.wantSecondEnd)
			}
			c.checkInvariants()
		})
	}
}

func TestAbortQueuedMigrationKeepsTheSlot(t *testing.T) {
	c := newCloud(t, hosts(4), maxConcurrent(1))
	a := c.seed("h1", "a", medium)
	b := c.seed("h1", "b", medium)
	d := c.seed("h1", "d", medium)
	before := c.usages()
	ma := c.migrate(a, "")
	mb := c.migrate(b, "")
	if mb.Status != records.MigrationQueued {
		t.Fatalf("second migration %s, want queued", mb.Status)
	}
	if err := c.cond.Abort(ctx, mb.ID); err != nil {
		t.Fatal(err)
	}
	got := c.migration(mb.ID)
	if got.Status != records.MigrationCancelled {
		t.Fatalf("aborted queued migration is %s", got.Status)
	}
	if inst := c.instance(b.UUID); inst.Host != "h1" || inst.TaskState != records.TaskNone {
		t.Fatalf("instance b %q on %s", inst.TaskState, inst.Host)
	}
	if a := c.allocations(b.UUID); !sameAllocations(a, only("h1", medium)) {
		t.Fatalf("b holds %v", a)
	}
	if got := c.usage(mb.DestHost); !got.Equal(before[mb.DestHost]) {
		t.Fatalf("destination %s of the aborted migration shows %v, want %v", mb.DestHost, got, before[mb.DestHost])
	}
	// A third migration queues behind the first, and runs once it ends.
	md := c.migrate(d, "")
	if md.Status != records.MigrationQueued {
		t.Fatalf("third migration %s, want queued", md.Status)
	}
	c.advance(copyTime)
	if s := c.migration(ma.ID).Status; s != records.MigrationCompleted {
		t.Fatalf("first migration %s", s)
	}
	if s := c.migration(md.ID).Status; s != records.MigrationRunning {
		t.Fatalf("third migration %s after the first ended, want running", s)
	}
	c.advance(copyTime)
	if s := c.migration(md.ID).Status; s != records.MigrationCompleted {
		t.Fatalf("third migration %s", s)
	}
	// And b can still go.
	mb2 := c.migrate(c.instance(b.UUID), "")
	if mb2.Status != records.MigrationRunning {
		t.Fatalf("b's new migration %s", mb2.Status)
	}
	c.advance(time.Minute)
	if s := c.migration(mb2.ID).Status; s != records.MigrationCompleted {
		t.Fatalf("b's new migration %s", s)
	}
	want := []string{"1:completed", "2:cancelled", "3:completed", "4:completed"}
	if !reflect.DeepEqual(c.doneStatuses(), want) {
		t.Fatalf("MigrationDone hook saw %v, want %v", c.doneStatuses(), want)
	}
	c.checkInvariants()
}

func TestPostAtDestinationFailure(t *testing.T) {
	c := newCloud(t)
	in := c.seed("h1", "a", medium)
	c.drivers["h2"].FailNext(compute.StepPostAtDestination, in.UUID, "network plug failed")
	m := c.migrate(in, "")
	c.advance(time.Minute)
	got := c.migration(m.ID)
	if got.Status != records.MigrationError {
		t.Fatalf("migration %s, want error", got.Status)
	}
	wantErrorContaining(t, got.Error, "network plug failed")
	inst := c.instance(in.UUID)
	if inst.Host != "h2" || inst.TaskState != records.TaskNone {
		t.Fatalf("instance %q on %s, want settled on h2", inst.TaskState, inst.Host)
	}
	if a := c.allocations(m.UUID); a != nil {
		t.Fatalf("source side still held: %v", a)
	}
	if a := c.allocations(in.UUID); !sameAllocations(a, only("h2", medium)) {
		t.Fatalf("instance holds %v", a)
	}
	c.checkInvariants()
}

// TestPostAtSourceFailure: the source cannot clean up after the copy. The
// destination still takes the guest (and counts it), the migration ends in
// error with the instance on the destination, and the source's audit does
// not pull the allocation back to the stale guest it still sees.
func TestPostAtSourceFailure(t *testing.T) {
	c := newCloud(t)
	in := c.seed("h1", "a", medium)
	c.drivers["h1"].FailNext(compute.StepPostAtSource, in.UUID, "libvirt hung")
	m := c.migrate(in, "")
	c.advance(time.Minute)
	got := c.migration(m.ID)
	if got.Status != records.MigrationError {
		t.Fatalf("migration %s, want error", got.Status)
	}
	wantErrorContaining(t, got.Error, "libvirt hung")
	if inst := c.instance(in.UUID); inst.Host != "h2" || inst.TaskState != records.TaskNone {
		t.Fatalf("instance %q on %s, want settled on h2", inst.TaskState, inst.Host)
	}
	if s := c.guest("h2", in.UUID); s != compute.GuestRunning {
		t.Fatalf("destination guest %q, want running", s)
	}
	if r := c.hostRecord("h2"); r.RunningVMs != 1 {
		t.Fatalf("destination record does not count the instance: %+v", r)
	}
	d, err := c.agents["h1"].Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.Stray, []string{in.UUID}) {
		t.Fatalf("source audit found %s, want the stale guest reported as stray", d)
	}
	if a := c.allocations(in.UUID); !sameAllocations(a, only("h2", medium)) {
		t.Fatalf("instance holds %v after the source audit, want h2 only", a)
	}
	// The operator removes the stale guest; then everything is consistent.
	if err := c.agents["h1"].TerminateInstance(ctx, in.UUID); err != nil {
		t.Fatal(err)
	}
	c.checkInvariants()
}

// TestFailedBuildsSteerTheScheduler: each failed spawn counts in the
// host's record (failed_builds) and BuildFailureWeigher sends the next
// boot elsewhere; a successful spawn there resets the count.
func TestFailedBuildsSteerTheScheduler(t *testing.T) {
	c := newCloud(t)
	for i, uuid := range []string{"fail-1", "fail-2"} {
		c.drivers["h1"].FailNext(compute.StepSpawn, uuid, "disk image corrupt")
		if _, err := c.cond.BootOn(ctx, records.Instance{UUID: uuid, Name: uuid, Flavor: medium, Zone: "nova"}, "h1"); err != nil {
			t.Fatal(err)
		}
		c.advance(spawnTime)
		if got := c.hostRecord("h1").FailedBuilds; got != int64(i+1) {
			t.Fatalf("after %d failed spawns h1 records failed_builds %d", i+1, got)
		}
	}
	// h1 is otherwise the best host (the others are no emptier), but the
	// weigher's default multiplier (1e6) outweighs everything else.
	in, err := c.cond.Boot(ctx, records.Instance{UUID: "next", Name: "next", Flavor: medium, Zone: "nova"})
	if err != nil {
		t.Fatal(err)
	}
	if in.Host == "" || in.Host == "h1" {
		t.Fatalf("the boot after two failures on h1 went to %q", in.Host)
	}
	c.advance(spawnTime)
	if _, err := c.cond.BootOn(ctx, records.Instance{UUID: "ok", Name: "ok", Flavor: medium, Zone: "nova"}, "h1"); err != nil {
		t.Fatal(err)
	}
	c.advance(spawnTime)
	if got := c.instance("ok"); got.VMState != records.VMActive {
		t.Fatalf("forced boot on h1: %s %q", got.VMState, got.Fault)
	}
	if got := c.hostRecord("h1").FailedBuilds; got != 0 {
		t.Fatalf("after a successful spawn h1 records failed_builds %d, want 0", got)
	}
}
