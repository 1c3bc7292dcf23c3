package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

var recordTests = []subtest{
	{"HostRecords", testHostRecords},
	{"PutHostRecords", testPutHostRecords},
	{"GetByHosts", testGetByHosts},
	{"Services", testServices},
	{"Instances", testInstances},
	{"ProjectInstances", testProjectInstances},
	{"InstanceVersions", testInstanceVersions},
	{"Migrations", testMigrations},
	{"ListMigrations", testListMigrations},
	{"BeginMove", testBeginMove},
	{"Flavors", testFlavors},
	{"UpdateService", testUpdateService},
	{"UpdateServices", testUpdateServices},
	{"InstanceActions", testInstanceActions},
	{"UpdateFlavor", testUpdateFlavor},
	{"DeleteService", testDeleteService},
}

// t0 is a fixed instant in UTC with microsecond precision, which every store
// can keep exactly.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC)

func hostRecord(host string, n int64) records.HostRecord {
	return records.HostRecord{
		Host: host, ProviderUUID: providerUUID(int(n)),
		VCPUs: 32, VCPUsUsed: n, MemoryMB: 131072, MemoryMBUsed: 512 + n*1024,
		LocalGB: 2000, LocalGBUsed: n * 10, FreeRAMMB: 131072 - 512 - n*1024, FreeDiskGB: 2000 - n*10,
		RunningVMs: n, NumIOOps: n % 3,
		CPUAllocationRatio: 4, RAMAllocationRatio: 1.5, DiskAllocationRatio: 1,
		UpdatedAt: t0.Add(time.Duration(n) * time.Second),
	}
}

func testHostRecords(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.GetHostRecord(ctx, "nope")
	wantNotFound(t, "GetHostRecord of an unknown host", err)
	if l, err := s.ListHostRecords(ctx); err != nil || len(l) != 0 {
		t.Errorf("ListHostRecords on an empty store = %v, %v", l, err)
	}

	want := map[string]records.HostRecord{}
	for i, h := range []string{"cmp-3", "cmp-1", "cmp-2"} {
		want[h] = hostRecord(h, int64(i+1))
		if err := s.PutHostRecord(ctx, want[h]); err != nil {
			t.Fatalf("PutHostRecord %s: %v", h, err)
		}
	}
	// Overwrite one.
	want["cmp-1"] = hostRecord("cmp-1", 9)
	if err := s.PutHostRecord(ctx, want["cmp-1"]); err != nil {
		t.Fatalf("PutHostRecord overwrite: %v", err)
	}
	for h, w := range want {
		got, err := s.GetHostRecord(ctx, h)
		if err != nil {
			t.Fatalf("GetHostRecord %s: %v", h, err)
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("GetHostRecord %s:\n got %+v\nwant %+v", h, got, w)
		}
	}
	list, err := s.ListHostRecords(ctx)
	if err != nil {
		t.Fatalf("ListHostRecords: %v", err)
	}
	if len(list) != len(want) {
		t.Fatalf("ListHostRecords returned %d records, want %d", len(list), len(want))
	}
	for _, got := range list {
		if !reflect.DeepEqual(got, want[got.Host]) {
			t.Errorf("ListHostRecords entry %s:\n got %+v\nwant %+v", got.Host, got, want[got.Host])
		}
	}
}

func testServices(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.GetService(ctx, "nope")
	wantNotFound(t, "GetService of an unknown host", err)

	want := map[string]records.Service{
		"cmp-1": {Host: "cmp-1", Binary: "keel-compute", Zone: "az1", LastSeenUp: t0, UpdatedAt: t0},
		"cmp-2": {Host: "cmp-2", Binary: "keel-compute", Disabled: true, DisabledReason: "maintenance", Zone: "az2", LastSeenUp: t0.Add(time.Minute), UpdatedAt: t0},
	}
	for _, sv := range want {
		if err := s.PutService(ctx, sv); err != nil {
			t.Fatalf("PutService %s: %v", sv.Host, err)
		}
	}
	sv := want["cmp-1"]
	sv.ForcedDown = true
	sv.LastSeenUp = t0.Add(time.Hour)
	want["cmp-1"] = sv
	if err := s.PutService(ctx, sv); err != nil {
		t.Fatalf("PutService overwrite: %v", err)
	}
	for h, w := range want {
		got, err := s.GetService(ctx, h)
		if err != nil {
			t.Fatalf("GetService %s: %v", h, err)
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("GetService %s:\n got %+v\nwant %+v", h, got, w)
		}
	}
	list, err := s.ListServices(ctx)
	if err != nil {
		t.Fatalf("ListServices: %v", err)
	}
	if len(list) != 2 {
		t.Fatalf("ListServices returned %d services, want 2", len(list))
	}
	for _, got := range list {
		if !reflect.DeepEqual(got, want[got.Host]) {
			t.Errorf("ListServices entry %s:\n got %+v\nwant %+v", got.Host, got, want[got.Host])
		}
	}
}

func instance(n int, host string) records.Instance {
	return records.Instance{
		UUID: uuidFor(kindInstance, n), Name: fmt.Sprintf("vm-%d", n), ProjectID: "proj", UserID: "user",
		Host: host, Zone: "az1",
		Flavor:  records.Flavor{ID: "m1.small", Name: "m1.small", VCPUs: 1, RAMMB: 2048, DiskGB: 20, ExtraSpecs: map[string]string{"hw:cpu_policy": "shared"}},
		VMState: records.VMActive, CreatedAt: t0, UpdatedAt: t0,
	}
}

// testProjectInstances: ListProjectInstances lists one project's
// instances in UUID order, through updates and up to their deletion.
func testProjectInstances(t *testing.T, s store.Store) {
	ctx := context.Background()
	projects := []string{"p-a", "p-b", "p-a", "p-c", "p-a"}
	want := map[string][]string{}
	for i, p := range projects {
		in := instance(20+i, "cmp-1")
		in.ProjectID = p
		if _, err := s.CreateInstance(ctx, in); err != nil {
			t.Fatalf("CreateInstance %d: %v", i, err)
		}
		want[p] = append(want[p], in.UUID)
	}
	list := func(p string) []string {
		t.Helper()
		l, err := s.ListProjectInstances(ctx, p)
		if err != nil {
			t.Fatalf("ListProjectInstances(%s): %v", p, err)
		}
		var out []string
		for _, in := range l {
			if in.ProjectID != p {
				t.Errorf("ListProjectInstances(%s) lists %s of project %s", p, in.UUID, in.ProjectID)
			}
			out = append(out, in.UUID)
		}
		return out
	}
	for _, p := range []string{"p-a", "p-b", "p-c"} {
		if got := list(p); !equalStrings(got, sortedStrings(want[p])) {
			t.Errorf("ListProjectInstances(%s) = %v, want %v (in UUID order)", p, got, sortedStrings(want[p]))
		}
	}
	if got := list("p-none"); len(got) != 0 {
		t.Errorf("ListProjectInstances(a project without instances) = %v, want none", got)
	}
	moved, err := s.GetInstance(ctx, want["p-b"][0])
	if err != nil {
		t.Fatal(err)
	}
	moved.Host = "cmp-2"
	if _, err := s.UpdateInstance(ctx, moved); err != nil {
		t.Fatalf("UpdateInstance: %v", err)
	}
	if got := list("p-b"); !equalStrings(got, want["p-b"]) {
		t.Errorf("ListProjectInstances(p-b) after a move = %v, want %v", got, want["p-b"])
	}
	if err := s.DeleteInstance(ctx, want["p-a"][1]); err != nil {
		t.Fatal(err)
	}
	if got := list("p-a"); !equalStrings(got, sortedStrings([]string{want["p-a"][0], want["p-a"][2]})) {
		t.Errorf("ListProjectInstances(p-a) after a delete = %v", got)
	}
}

func testInstances(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.GetInstance(ctx, uuidFor(kindInstance, 99))
	wantNotFound(t, "GetInstance of an unknown instance", err)

	hosts := []string{"cmp-1", "cmp-2", "cmp-1", "", "cmp-3"}
	byHost := map[string][]string{}
	for i, h := range hosts {
		in := instance(i, h)
		in.Version = 42 // ignored: a new instance starts at version 1
		got, err := s.CreateInstance(ctx, in)
		if err != nil {
			t.Fatalf("CreateInstance %d: %v", i, err)
		}
		in.Version = 1
		if !reflect.DeepEqual(got, in) {
			t.Errorf("CreateInstance returned %+v, want %+v", got, in)
		}
		byHost[h] = append(byHost[h], in.UUID)
	}
	if _, err := s.CreateInstance(ctx, instance(0, "cmp-9")); !errors.Is(err, store.ErrExists) {
		t.Errorf("duplicate CreateInstance: err = %v, want ErrExists", err)
	}
	got, err := s.GetInstance(ctx, uuidFor(kindInstance, 0))
	if err != nil {
		t.Fatalf("GetInstance: %v", err)
	}
	want := instance(0, "cmp-1")
	want.Version = 1
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GetInstance:\n got %+v\nwant %+v", got, want)
	}

	uuidsOf := func(l []records.Instance) []string {
		var out []string
		for _, in := range l {
			out = append(out, in.UUID)
		}
		return sortedStrings(out)
	}
	for _, h := range []string{"cmp-1", "cmp-2", "cmp-3"} {
		l, err := s.ListInstances(ctx, h)
		if err != nil {
			t.Fatalf("ListInstances(%s): %v", h, err)
		}
		if got, want := uuidsOf(l), sortedStrings(byHost[h]); !equalStrings(got, want) {
			t.Errorf("ListInstances(%s) = %v, want %v", h, got, want)
		}
		for _, in := range l {
			if in.Host != h || in.Version != 1 || in.Flavor.RAMMB != 2048 {
				t.Errorf("ListInstances(%s) entry %+v", h, in)
			}
		}
	}
	if l, err := s.ListInstances(ctx, "cmp-9"); err != nil || len(l) != 0 {
		t.Errorf("ListInstances(host without instances) = %v, %v; want none", l, err)
	}
	all, err := s.ListInstances(ctx, "")
	if err != nil {
		t.Fatalf("ListInstances(all): %v", err)
	}
	if len(all) != len(hosts) {
		t.Errorf("ListInstances(all) returned %d instances, want %d", len(all), len(hosts))
	}

	if err := s.DeleteInstance(ctx, uuidFor(kindInstance, 1)); err != nil {
		t.Fatalf("DeleteInstance: %v", err)
	}
	_, err = s.GetInstance(ctx, uuidFor(kindInstance, 1))
	wantNotFound(t, "GetInstance after delete", err)
	wantNotFound(t, "deleting a deleted instance", s.DeleteInstance(ctx, uuidFor(kindInstance, 1)))
	if l, err := s.ListInstances(ctx, "cmp-2"); err != nil || len(l) != 0 {
		t.Errorf("ListInstances(cmp-2) after delete = %v, %v; want none", l, err)
	}
}

func testInstanceVersions(t *testing.T, s store.Store) {
	ctx := context.Background()
	in, err := s.CreateInstance(ctx, instance(1, "cmp-1"))
	if err != nil {
		t.Fatalf("CreateInstance: %v", err)
	}

	in.Host, in.TaskState = "cmp-2", records.TaskMigrating
	up, err := s.UpdateInstance(ctx, in)
	if err != nil {
		t.Fatalf("UpdateInstance at version 1: %v", err)
	}
	if up.Version != 2 || up.Host != "cmp-2" {
		t.Errorf("UpdateInstance returned %+v, want version 2 on cmp-2", up)
	}

	stale := in // still version 1
	stale.VMState = records.VMError
	_, err = s.UpdateInstance(ctx, stale)
	ce := wantConflict(t, "UpdateInstance with a stale version", err, "", in.UUID)
	if ce != nil && (ce.Expected == nil || *ce.Expected != 1 || ce.Actual == nil || *ce.Actual != 2) {
		t.Errorf("conflict = %v, want expected 1, actual 2", ce)
	}
	got, err := s.GetInstance(ctx, in.UUID)
	if err != nil {
		t.Fatalf("GetInstance: %v", err)
	}
	if !reflect.DeepEqual(got, up) {
		t.Errorf("after refused update GetInstance = %+v, want %+v", got, up)
	}
	// The host index follows the update.
	if l, _ := s.ListInstances(ctx, "cmp-1"); len(l) != 0 {
		t.Errorf("ListInstances(cmp-1) after the move = %+v, want none", l)
	}
	if l, _ := s.ListInstances(ctx, "cmp-2"); len(l) != 1 || l[0].Version != 2 {
		t.Errorf("ListInstances(cmp-2) after the move = %+v, want the instance at version 2", l)
	}

	up.TaskState = records.TaskNone
	up2, err := s.UpdateInstance(ctx, up)
	if err != nil || up2.Version != 3 {
		t.Errorf("UpdateInstance at version 2 = %+v, %v; want version 3", up2, err)
	}
	missing := instance(2, "cmp-1")
	missing.Version = 1
	_, err = s.UpdateInstance(ctx, missing)
	wantNotFound(t, "UpdateInstance of an unknown instance", err)
}

// migration returns migration number n of instance inst.
func migration(n, inst int, src, dst string, status records.MigrationStatus) records.Migration {
	return records.Migration{
		UUID: uuidFor(kindMigration, n), InstanceUUID: uuidFor(kindInstance, inst),
		Type: "live-migration", SourceHost: src, DestHost: dst, Status: status, Phase: "start",
		TriedHosts: []string{"cmp-x"}, Attempts: 1,
		MemoryTotalBytes: 1 << 30, CreatedAt: t0, UpdatedAt: t0,
	}
}

func testMigrations(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.GetMigration(ctx, 12345)
	wantNotFound(t, "GetMigration of an unknown id", err)

	var last int64
	var created []records.Migration
	for i := 0; i < 4; i++ {
		m := migration(i, i, "cmp-1", "cmp-2", records.MigrationQueued)
		m.ID, m.Version = 999, 7 // both assigned by the store
		got, err := s.CreateMigration(ctx, m)
		if err != nil {
			t.Fatalf("CreateMigration %d: %v", i, err)
		}
		if got.ID <= last {
			t.Errorf("migration %d got id %d, not above the previous %d", i, got.ID, last)
		}
		if got.Version != 1 {
			t.Errorf("new migration version = %d, want 1", got.Version)
		}
		last = got.ID
		created = append(created, got)
	}
	m := created[2]
	got, err := s.GetMigration(ctx, m.ID)
	if err != nil {
		t.Fatalf("GetMigration: %v", err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("GetMigration:\n got %+v\nwant %+v", got, m)
	}

	m.Status, m.Phase = records.MigrationRunning, "copy"
	m.TriedHosts = append(m.TriedHosts, "cmp-2")
	m.MemoryProcessedBytes = 1 << 20
	up, err := s.UpdateMigration(ctx, m)
	if err != nil {
		t.Fatalf("UpdateMigration at version 1: %v", err)
	}
	if up.Version != 2 || up.ID != m.ID {
		t.Errorf("UpdateMigration returned version %d id %d, want 2 and %d", up.Version, up.ID, m.ID)
	}
	m.Status = records.MigrationFailed // m is still at version 1
	_, err = s.UpdateMigration(ctx, m)
	wantConflict(t, "UpdateMigration with a stale version", err, "", "")
	got, err = s.GetMigration(ctx, m.ID)
	if err != nil {
		t.Fatalf("GetMigration: %v", err)
	}
	if !reflect.DeepEqual(got, up) {
		t.Errorf("after refused update GetMigration:\n got %+v\nwant %+v", got, up)
	}
	// A record read back must not alias the stored one.
	got.TriedHosts[0] = "mutated"
	if again, _ := s.GetMigration(ctx, m.ID); again.TriedHosts[0] != "cmp-x" {
		t.Errorf("store aliases TriedHosts: %v", again.TriedHosts)
	}
	missing := migration(9, 9, "a", "b", records.MigrationQueued)
	missing.ID, missing.Version = last+100, 1
	_, err = s.UpdateMigration(ctx, missing)
	wantNotFound(t, "UpdateMigration of an unknown id", err)

	// IDs keep increasing after updates.
	next, err := s.CreateMigration(ctx, migration(5, 5, "cmp-1", "cmp-3", records.MigrationAccepted))
	if err != nil || next.ID <= last {
		t.Errorf("CreateMigration after updates = id %d, %v; want an id above %d", next.ID, err, last)
	}
}

// testBeginMove: BeginMove writes the instance and creates its migration
// in one write — both, or, refused (a stale instance version, an unknown
// instance), neither: no instance left in its move's task without a
// migration, no migration of a move that did not start.
func testBeginMove(t *testing.T, s store.Store) {
	ctx := context.Background()
	in, err := s.CreateInstance(ctx, instance(1, "cmp-1"))
	if err != nil {
		t.Fatalf("CreateInstance: %v", err)
	}
	before, err := s.CreateMigration(ctx, migration(1, 2, "cmp-1", "cmp-2", records.MigrationCompleted))
	if err != nil {
		t.Fatalf("CreateMigration: %v", err)
	}
	moving := in
	moving.TaskState, moving.Owner, moving.UpdatedAt = records.TaskMigrating, "r1", t0.Add(time.Second)
	m := migration(2, 1, "cmp-1", "", records.MigrationAccepted)
	m.ID, m.Version = 999, 7 // both assigned by the store

	// Refused: the instance changed since it was read.
	bumped := in
	bumped.Name = "renamed"
	if bumped, err = s.UpdateInstance(ctx, bumped); err != nil {
		t.Fatalf("UpdateInstance: %v", err)
	}
	_, _, err = s.BeginMove(ctx, moving, m)
	wantConflict(t, "BeginMove with a stale instance version", err, placement.InstanceVersion, in.UUID)
	if got, _ := s.GetInstance(ctx, in.UUID); !reflect.DeepEqual(got, bumped) {
		t.Errorf("after a refused BeginMove GetInstance = %+v, want %+v", got, bumped)
	}
	if ms, _ := s.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: in.UUID}); len(ms) != 0 {
		t.Errorf("after a refused BeginMove the instance has migrations %+v, want none", ms)
	}
	// Refused: no such instance.
	ghost := instance(3, "cmp-1")
	ghost.Version = 1
	gm := migration(3, 3, "cmp-1", "", records.MigrationAccepted)
	_, _, err = s.BeginMove(ctx, ghost, gm)
	wantNotFound(t, "BeginMove of an unknown instance", err)
	if ms, _ := s.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: ghost.UUID}); len(ms) != 0 {
		t.Errorf("after BeginMove of an unknown instance it has migrations %+v, want none", ms)
	}

	// Both written.
	moving = bumped
	moving.TaskState, moving.Owner, moving.UpdatedAt = records.TaskMigrating, "r1", t0.Add(time.Second)
	gotIn, gotM, err := s.BeginMove(ctx, moving, m)
	if err != nil {
		t.Fatalf("BeginMove: %v", err)
	}
	wantIn := moving
	wantIn.Version = bumped.Version + 1
	if !reflect.DeepEqual(gotIn, wantIn) {
		t.Errorf("BeginMove returned instance %+v, want %+v", gotIn, wantIn)
	}
	if gotM.ID <= before.ID || gotM.Version != 1 {
		t.Errorf("BeginMove returned migration id %d version %d, want an id above %d and version 1", gotM.ID, gotM.Version, before.ID)
	}
	if got, err := s.GetInstance(ctx, in.UUID); err != nil || !reflect.DeepEqual(got, wantIn) {
		t.Errorf("after BeginMove GetInstance = %+v, %v; want %+v", got, err, wantIn)
	}
	if got, err := s.GetMigration(ctx, gotM.ID); err != nil || !reflect.DeepEqual(got, gotM) {
		t.Errorf("after BeginMove GetMigration:\n got %+v, %v\nwant %+v", got, err, gotM)
	}
	active, err := s.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: in.UUID, ActiveOnly: true})
	if err != nil || len(active) != 1 || active[0].ID != gotM.ID {
		t.Errorf("after BeginMove the instance's active migrations = %+v, %v; want migration %d", active, err, gotM.ID)
	}
	// The instance's version moved on: the next write of it goes from there.
	_, err = s.UpdateInstance(ctx, moving)
	wantConflict(t, "UpdateInstance at the version before BeginMove", err, placement.InstanceVersion, in.UUID)
	if next, err := s.CreateMigration(ctx, migration(4, 4, "cmp-1", "cmp-2", records.MigrationAccepted)); err != nil || next.ID <= gotM.ID {
		t.Errorf("CreateMigration after BeginMove = id %d, %v; want an id above %d", next.ID, err, gotM.ID)
	}
}

func testListMigrations(t *testing.T, s store.Store) {
	ctx := context.Background()
	specs := []records.Migration{
		migration(1, 1, "cmp-1", "cmp-2", records.MigrationRunning),
		migration(2, 1, "cmp-2", "cmp-3", records.MigrationCompleted),
		migration(3, 2, "cmp-3", "cmp-1", records.MigrationQueued),
		migration(4, 3, "cmp-4", "cmp-5", records.MigrationFailed),
		migration(5, 3, "cmp-4", "cmp-6", records.MigrationError),
		migration(6, 4, "cmp-5", "cmp-2", records.MigrationCancelled),
		migration(7, 5, "cmp-6", "cmp-4", records.MigrationPreparing),
	}
	var all []records.Migration
	for _, m := range specs {
		got, err := s.CreateMigration(ctx, m)
		if err != nil {
			t.Fatalf("CreateMigration: %v", err)
		}
		all = append(all, got)
	}
	// Make one terminal by update, so the filter follows updates.
	upd := all[6]
	upd.Status = records.MigrationCompleted
	upd, err := s.UpdateMigration(ctx, upd)
	if err != nil {
		t.Fatalf("UpdateMigration: %v", err)
	}
	all[6] = upd

	filters := []store.MigrationFilter{
		{},
		{InstanceUUID: uuidFor(kindInstance, 1)},
		{InstanceUUID: uuidFor(kindInstance, 3)},
		{Host: "cmp-2"},
		{Host: "cmp-4"},
		{Status: records.MigrationQueued},
		{Status: records.MigrationCompleted},
		{ActiveOnly: true},
		{ActiveOnly: true, Host: "cmp-1"},
		{ActiveOnly: true, InstanceUUID: uuidFor(kindInstance, 3)},
		{InstanceUUID: uuidFor(kindInstance, 1), Host: "cmp-3", Status: records.MigrationCompleted},
		{InstanceUUID: uuidFor(kindInstance, 77)},
	}
	for _, f := range filters {
		var want []int64
		for _, m := range all {
			if store.MatchMigration(m, f) {
				want = append(want, m.ID)
			}
		}
		got, err := s.ListMigrations(ctx, f)
		if err != nil {
			t.Fatalf("ListMigrations(%+v): %v", f, err)
		}
		var ids []int64
		for _, m := range got {
			ids = append(ids, m.ID)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		if fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Errorf("ListMigrations(%+v) = ids %v, want %v", f, ids, want)
		}
		for _, m := range got {
			for _, w := range all {
				if w.ID == m.ID && !reflect.DeepEqual(m, w) {
					t.Errorf("ListMigrations entry %d:\n got %+v\nwant %+v", m.ID, m, w)
				}
			}
		}
	}
	// Sanity of the expectations themselves.
	active, _ := s.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
	if len(active) != 2 {
		t.Errorf("ActiveOnly listed %d migrations, want 2 (running and queued)", len(active))
	}
	// By the migration's own UUID.
	everything, err := s.ListMigrations(ctx, store.MigrationFilter{})
	if err != nil || len(everything) == 0 {
		t.Fatalf("listing all migrations: %v, %d", err, len(everything))
	}
	one, err := s.ListMigrations(ctx, store.MigrationFilter{UUID: everything[0].UUID})
	if err != nil || len(one) != 1 || one[0].ID != everything[0].ID {
		t.Fatalf("by UUID %s: %+v, %v", everything[0].UUID, one, err)
	}
}

func testFlavors(t *testing.T, s store.Store) {
	ctx := context.Background()
	small := records.Flavor{ID: "2", Name: "m1.small", VCPUs: 1, RAMMB: 2048, DiskGB: 20, ExtraSpecs: map[string]string{"hw:cpu_policy": "shared"}}
	tiny := records.Flavor{ID: "1", Name: "m1.tiny", VCPUs: 1, RAMMB: 512, DiskGB: 1}
	for _, f := range []records.Flavor{small, tiny} {
		if _, err := s.CreateFlavor(ctx, f); err != nil {
			t.Fatalf("CreateFlavor(%s): %v", f.Name, err)
		}
	}
	if _, err := s.CreateFlavor(ctx, records.Flavor{ID: "2", Name: "other", VCPUs: 1, RAMMB: 1}); !errors.Is(err, store.ErrExists) {
		t.Errorf("duplicate flavor id: %v, want ErrExists", err)
	}
	if _, err := s.CreateFlavor(ctx, records.Flavor{ID: "9", Name: "m1.tiny", VCPUs: 1, RAMMB: 1}); !errors.Is(err, store.ErrExists) {
		t.Errorf("duplicate flavor name: %v, want ErrExists", err)
	}
	if _, err := s.CreateFlavor(ctx, records.Flavor{ID: "", Name: "x"}); err == nil {
		t.Errorf("flavor without an id accepted")
	}
	got, err := s.GetFlavor(ctx, "2")
	if err != nil || got.Name != "m1.small" || got.RAMMB != 2048 || got.ExtraSpecs["hw:cpu_policy"] != "shared" {
		t.Fatalf("GetFlavor = %+v, %v", got, err)
	}
	list, err := s.ListFlavors(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "1" || list[1].ID != "2" {
		t.Fatalf("ListFlavors = %+v, %v; want ids 1, 2 in order", list, err)
	}
	if err := s.DeleteFlavor(ctx, "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetFlavor(ctx, "1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleted flavor still there: %v", err)
	}
	if err := s.DeleteFlavor(ctx, "1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
}

// testPutHostRecords checks the batched host record write (metrics
// reports committed together): every record is written, replacing the
// one before, an empty batch writes nothing, and each record notes its
// own change, in the batch's order.
func testPutHostRecords(t *testing.T, s store.Store) {
	ctx := context.Background()
	b, ok := s.(store.HostRecordBatch)
	if !ok {
		t.Fatalf("%T does not batch host records (store.HostRecordBatch)", s)
	}
	if err := s.PutHostRecord(ctx, hostRecord("cmp-2", 1)); err != nil {
		t.Fatal(err)
	}
	since, err := s.LastChange(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PutHostRecords(ctx, nil); err != nil {
		t.Fatalf("PutHostRecords of nothing: %v", err)
	}
	if got := changesSince(t, s, since); len(got) != 0 {
		t.Errorf("an empty batch noted %v", got)
	}
	m := hostRecord("cmp-2", 7)
	m.Metrics = []records.Metric{{Name: records.MetricCPUPercent, Value: 0.25, Timestamp: t0, Source: "test"}}
	batch := []records.HostRecord{hostRecord("cmp-1", 5), m, hostRecord("cmp-3", 6)}
	if err := b.PutHostRecords(ctx, batch); err != nil {
		t.Fatalf("PutHostRecords: %v", err)
	}
	for _, w := range batch {
		got, err := s.GetHostRecord(ctx, w.Host)
		if err != nil || !reflect.DeepEqual(got, w) {
			t.Errorf("GetHostRecord %s = %+v, %v\nwant %+v", w.Host, got, err, w)
		}
	}
	if list, err := s.ListHostRecords(ctx); err != nil || len(list) != 3 {
		t.Errorf("ListHostRecords: %d records, %v; want 3", len(list), err)
	}
	var keys []string
	for _, c := range changesSince(t, s, since) {
		keys = append(keys, string(c.Kind)+":"+c.Key)
	}
	h := string(store.ChangeHost) + ":"
	want := []string{h + "cmp-1", h + "cmp-2", h + "cmp-3"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("changes of the batch = %v, want %v", keys, want)
	}
}

// testGetByHosts checks the reads of many host records and services by
// host (store.HostBatchReader): more hosts than one statement takes, given
// out of order, some twice and some missing, come back sorted, once each,
// the missing left out; no hosts read nothing.
func testGetByHosts(t *testing.T, s store.Store) {
	ctx := context.Background()
	b, ok := s.(store.HostBatchReader)
	if !ok {
		t.Fatalf("%T does not read by many hosts (store.HostBatchReader)", s)
	}
	const n = 250
	var recs []records.HostRecord
	var svcs []records.Service
	for i := range n {
		h := fmt.Sprintf("cmp-%03d", i)
		recs = append(recs, hostRecord(h, int64(i)))
		if i%2 == 0 {
			sv := records.Service{Host: h, Binary: "nova-compute", Zone: "nova", LastSeenUp: t0.Add(time.Duration(i) * time.Second)}
			if err := s.PutService(ctx, sv); err != nil {
				t.Fatal(err)
			}
			svcs = append(svcs, sv)
		}
	}
	if err := s.(store.HostRecordBatch).PutHostRecords(ctx, recs); err != nil {
		t.Fatal(err)
	}
	// Every host backwards, every tenth twice, and two that are not there.
	var ask []string
	for i := n - 1; i >= 0; i-- {
		ask = append(ask, recs[i].Host)
		if i%10 == 0 {
			ask = append(ask, recs[i].Host)
		}
	}
	ask = append(ask, "nowhere", "cmp-999")
	gotRecs, err := b.GetHostRecords(ctx, ask)
	if err != nil {
		t.Fatalf("GetHostRecords: %v", err)
	}
	if !reflect.DeepEqual(gotRecs, recs) {
		t.Errorf("GetHostRecords of %d hosts: %d records, want the %d stored, sorted", len(ask), len(gotRecs), len(recs))
	}
	gotSvcs, err := b.GetServices(ctx, ask)
	if err != nil {
		t.Fatalf("GetServices: %v", err)
	}
	if !reflect.DeepEqual(gotSvcs, svcs) {
		t.Errorf("GetServices of %d hosts: %d services, want the %d stored, sorted", len(ask), len(gotSvcs), len(svcs))
	}
	// One host, a short batch.
	one, err := b.GetHostRecords(ctx, []string{"cmp-007", "nowhere"})
	if err != nil || len(one) != 1 || one[0].Host != "cmp-007" {
		t.Errorf("GetHostRecords(cmp-007, nowhere) = %+v, %v; want cmp-007's", one, err)
	}
	if none, err := b.GetServices(ctx, nil); err != nil || len(none) != 0 {
		t.Errorf("GetServices(nil) = %+v, %v; want none", none, err)
	}
}

// testUpdateServices checks the batched service update (heartbeats
// committed together): each service gets its own change, all are written,
// and a missing one writes none.
func testUpdateServices(t *testing.T, s store.Store) {
	ctx := context.Background()
	b, ok := s.(store.ServiceBatch)
	if !ok {
		t.Fatalf("%T does not batch service updates (store.ServiceBatch)", s)
	}
	hosts := []string{"h1", "h2", "h3"}
	for _, h := range hosts {
		if err := s.PutService(ctx, records.Service{Host: h, Binary: "nova-compute", Zone: "nova", LastSeenUp: t0}); err != nil {
			t.Fatal(err)
		}
	}
	seen := func(i int, sv *records.Service) error {
		sv.LastSeenUp = t0.Add(time.Duration(i+1) * time.Second)
		return nil
	}
	out, err := b.UpdateServices(ctx, hosts, seen)
	if err != nil || len(out) != 3 {
		t.Fatalf("UpdateServices: %d services, %v", len(out), err)
	}
	for i, h := range hosts {
		sv, err := s.GetService(ctx, h)
		want := t0.Add(time.Duration(i+1) * time.Second)
		if err != nil || !sv.LastSeenUp.Equal(want) || out[i].Host != h || !out[i].LastSeenUp.Equal(want) {
			t.Errorf("%s: stored %v (%v), returned %+v, want last seen up %v", h, sv.LastSeenUp, err, out[i], want)
		}
	}
	// A missing service: ErrNotFound, and h1 keeps its heartbeat.
	if _, err := b.UpdateServices(ctx, []string{"h1", "nowhere"}, func(_ int, sv *records.Service) error {
		sv.LastSeenUp = t0.Add(time.Hour)
		return nil
	}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a batch with a missing service: %v, want ErrNotFound", err)
	}
	if sv, _ := s.GetService(ctx, "h1"); !sv.LastSeenUp.Equal(t0.Add(time.Second)) {
		t.Errorf("h1 after a failed batch: last seen up %v, want %v (unchanged)", sv.LastSeenUp, t0.Add(time.Second))
	}
}

func testUpdateService(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.UpdateService(ctx, "nowhere", func(*records.Service) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of a missing service: %v, want ErrNotFound", err)
	}
	if err := s.PutService(ctx, records.Service{Host: "h1", Binary: "nova-compute", Zone: "nova", LastSeenUp: t0}); err != nil {
		t.Fatal(err)
	}
	// Heartbeats and an admin's disable interleave; neither undoes the
	// other.
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(2)
		go func(i int) {
			defer wg.Done()
			if _, err := s.UpdateService(ctx, "h1", func(sv *records.Service) error {
				if sv.LastSeenUp.Before(t0.Add(time.Duration(i) * time.Second)) {
					sv.LastSeenUp = t0.Add(time.Duration(i) * time.Second)
				}
				return nil
			}); err != nil {
				t.Error(err)
			}
		}(i)
		go func() {
			defer wg.Done()
			if _, err := s.UpdateService(ctx, "h1", func(sv *records.Service) error {
				sv.Disabled, sv.DisabledReason = true, "maintenance"
				return nil
			}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, err := s.GetService(ctx, "h1")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Disabled || got.DisabledReason != "maintenance" || !got.LastSeenUp.Equal(t0.Add(19*time.Second)) || got.Zone != "nova" {
		t.Fatalf("after concurrent updates: %+v", got)
	}
	boom := errors.New("refused")
	if _, err := s.UpdateService(ctx, "h1", func(sv *records.Service) error { sv.Disabled = false; return boom }); !errors.Is(err, boom) {
		t.Fatalf("fn error not returned: %v", err)
	}
	if got, _ := s.GetService(ctx, "h1"); !got.Disabled {
		t.Fatal("an update whose fn failed was written")
	}
}

// testInstanceActions: actions come back per instance in the order they
// were recorded, with every field; a repeated request ID is ErrExists and
// changes nothing; they do not depend on the instance existing.
func testInstanceActions(t *testing.T, s store.Store) {
	ctx := context.Background()
	got, err := s.ListInstanceActions(ctx, "nobody")
	if err != nil || len(got) != 0 {
		t.Fatalf("ListInstanceActions(unknown) = %v, %v; want empty, nil", got, err)
	}
	a := records.InstanceAction{InstanceUUID: "i1", RequestID: "req-b", Action: "create", UserID: "u", ProjectID: "p", StartTime: t0}
	b := records.InstanceAction{InstanceUUID: "i1", RequestID: "req-a", Action: "live-migration", UserID: "u2", ProjectID: "p",
		StartTime: t0.Add(time.Second), MigrationID: 7, Message: "no valid host"}
	c := records.InstanceAction{InstanceUUID: "i2", RequestID: "req-b", Action: "delete", UserID: "u", ProjectID: "p", StartTime: t0}
	for _, x := range []records.InstanceAction{a, b, c} {
		if err := s.CreateInstanceAction(ctx, x); err != nil {
			t.Fatalf("CreateInstanceAction(%+v): %v", x, err)
		}
	}
	dup := a
	dup.Action = "delete"
	if err := s.CreateInstanceAction(ctx, dup); !errors.Is(err, store.ErrExists) {
		t.Errorf("CreateInstanceAction(same instance and request id) = %v, want ErrExists", err)
	}
	got, err = s.ListInstanceActions(ctx, "i1")
	if err != nil {
		t.Fatal(err)
	}
	if want := []records.InstanceAction{a, b}; !reflect.DeepEqual(got, want) {
		t.Errorf("ListInstanceActions(i1) = %+v, want %+v", got, want)
	}
	if got, err = s.ListInstanceActions(ctx, "i2"); err != nil || !reflect.DeepEqual(got, []records.InstanceAction{c}) {
		t.Errorf("ListInstanceActions(i2) = %+v, %v; want [%+v]", got, err, c)
	}
}

// testUpdateFlavor: fn's changes to extra specs are kept (ID and name are
// not changeable); an error from fn changes nothing; an unknown flavor is
// ErrNotFound.
func testUpdateFlavor(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.CreateFlavor(ctx, records.Flavor{ID: "1", Name: "m1.tiny", VCPUs: 1, RAMMB: 512, DiskGB: 1,
		ExtraSpecs: map[string]string{"a": "1"}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.UpdateFlavor(ctx, "1", func(f *records.Flavor) error {
		f.ExtraSpecs["b"] = "2"
		delete(f.ExtraSpecs, "a")
		f.ID, f.Name = "9", "renamed"
		return nil
	})
	want := records.Flavor{ID: "1", Name: "m1.tiny", VCPUs: 1, RAMMB: 512, DiskGB: 1, ExtraSpecs: map[string]string{"b": "2"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("UpdateFlavor = %+v, %v; want %+v", got, err, want)
	}
	boom := errors.New("boom")
	if _, err := s.UpdateFlavor(ctx, "1", func(f *records.Flavor) error {
		f.ExtraSpecs["c"] = "3"
		return boom
	}); !errors.Is(err, boom) {
		t.Errorf("UpdateFlavor with a failing fn: %v, want boom", err)
	}
	if f, err := s.GetFlavor(ctx, "1"); err != nil || !reflect.DeepEqual(f, want) {
		t.Errorf("GetFlavor after the updates = %+v, %v; want %+v", f, err, want)
	}
	if _, err := s.UpdateFlavor(ctx, "nope", func(*records.Flavor) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateFlavor(unknown) = %v, want ErrNotFound", err)
	}
}
