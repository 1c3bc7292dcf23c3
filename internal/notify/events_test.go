package notify

import (
	"slices"
	"strings"
	"testing"
	"time"

	"keel/internal/migration"
	"keel/internal/records"
)

var (
	t0  = time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	src = Source{Now: t0, APIHost: "ctl", Who: Initiator{UserID: "u1", ProjectID: "p1"}}
	vm  = records.Instance{
		UUID: "3f1c1f4e-5a7e-4d0c-9a55-8d3c2b1a0f00", Name: "vm1", ProjectID: "p1", UserID: "u1",
		Flavor:  records.Flavor{ID: "2", Name: "m1.small", VCPUs: 1, RAMMB: 2048, DiskGB: 20},
		VMState: records.VMBuilding, CreatedAt: t0, UpdatedAt: t0, Zone: "nova", KeyName: "k1", KeyData: "ssh-ed25519 AAAA",
		Metadata: map[string]string{"role": "db"}, Tags: []string{"a"},
	}
)

// step applies change to a copy of the record and returns the events the
// change means, by type.
func step(t *testing.T, in *records.Instance, change func(*records.Instance)) []string {
	t.Helper()
	old := *in
	change(in)
	return types(InstanceChange(src, &old, in))
}

func types(evs []Event) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, e.EventType)
	}
	return out
}

func TestInstanceFlowEvents(t *testing.T) {
	in := vm
	steps := []struct {
		name   string
		change func(*records.Instance)
		want   []string
	}{
		{"host chosen", func(i *records.Instance) { i.Host, i.TaskState = "h1", records.TaskSpawning },
			[]string{"instance.update", "instance.create.start"}},
		{"spawned", func(i *records.Instance) { i.VMState, i.TaskState = records.VMActive, records.TaskNone },
			[]string{"instance.update", "instance.create.end"}},
		{"metadata only", func(i *records.Instance) { i.Metadata = map[string]string{"x": "y"} }, []string{}},
		{"lock", func(i *records.Instance) { i.Locked, i.LockedBy = true, "admin" }, []string{"instance.lock"}},
		{"unlock", func(i *records.Instance) { i.Locked = false }, []string{"instance.unlock"}},
		{"stop begins", func(i *records.Instance) { i.Action, i.TaskState = "stop", records.TaskPoweringOff },
			[]string{"instance.update", "instance.power_off.start"}},
		{"stop ends", func(i *records.Instance) { i.Action, i.TaskState, i.VMState = "", records.TaskNone, records.VMStopped },
			[]string{"instance.update", "instance.power_off.end"}},
		{"start fails", func(i *records.Instance) { i.Action, i.TaskState = "start", records.TaskPoweringOn },
			[]string{"instance.update", "instance.power_on.start"}},
		{"start failed", func(i *records.Instance) { i.Action, i.TaskState, i.ActionError = "", records.TaskNone, "guest gone" },
			[]string{"instance.update", "compute.exception"}},
		{"reboot", func(i *records.Instance) {
			i.Action, i.TaskState, i.VMState, i.ActionError = "reboot", records.TaskRebootingHard, records.VMActive, ""
		}, []string{"instance.update", "instance.reboot.start"}},
		{"reboot failed", func(i *records.Instance) { i.Action, i.TaskState, i.ActionError = "", records.TaskNone, "boom" },
			[]string{"instance.update", "instance.reboot.error"}},
		{"shelve", func(i *records.Instance) { i.Action, i.TaskState, i.ActionError = "shelve", records.TaskShelving, "" },
			[]string{"instance.update", "instance.shelve.start"}},
		{"shelve then offload", func(i *records.Instance) {
			i.Action, i.TaskState, i.VMState = "shelveOffload", records.TaskShelvingOffloading, records.VMShelved
		}, []string{"instance.update", "instance.shelve.end", "instance.shelve_offload.start"}},
		{"offloaded", func(i *records.Instance) {
			i.Action, i.TaskState, i.VMState, i.Host = "", records.TaskNone, records.VMShelvedOffloaded, ""
		}, []string{"instance.update", "instance.shelve_offload.end"}},
		{"unshelve", func(i *records.Instance) { i.Action, i.TaskState = "unshelve", records.TaskUnshelving },
			[]string{"instance.update", "instance.unshelve.start"}},
		{"unshelved", func(i *records.Instance) {
			i.Action, i.TaskState, i.VMState, i.Host = "", records.TaskNone, records.VMActive, "h2"
		},
			[]string{"instance.update", "instance.unshelve.end"}},
		{"delete", func(i *records.Instance) { i.TaskState = records.TaskDeleting },
			[]string{"instance.update", "instance.delete.start"}},
	}
	for _, s := range steps {
		if got := step(t, &in, s.change); !slices.Equal(got, s.want) {
			t.Errorf("%s: %v, want %v", s.name, got, s.want)
		}
	}
	old := in
	if got := types(InstanceChange(src, &old, nil)); !slices.Equal(got, []string{"instance.delete.end"}) {
		t.Errorf("deleted: %v", got)
	}
	if got := types(InstanceChange(src, nil, &vm)); len(got) != 0 {
		t.Errorf("created: %v", got)
	}
	failed := vm
	if got := step(t, &failed, func(i *records.Instance) { i.VMState, i.Fault = records.VMError, "No valid host was found." }); !slices.Equal(got, []string{"instance.update", "instance.create.error"}) {
		t.Errorf("build failed: %v", got)
	}
}

// TestEventFields: what consumers read is where Nova puts it.
func TestEventFields(t *testing.T) {
	in := vm
	in.Host, in.VMState, in.TaskState = "h1", records.VMActive, records.TaskNone
	old := in
	old.VMState, old.TaskState = records.VMBuilding, records.TaskSpawning
	evs := InstanceChange(src, &old, &in)
	if len(evs) != 2 {
		t.Fatalf("events %v", types(evs))
	}
	end := evs[1]
	if end.Publisher != "nova-compute:h1" || end.Priority != "INFO" || end.Key != in.UUID || end.Payload.Name != "InstanceCreatePayload" || end.Payload.Version != "1.12" {
		t.Errorf("create.end: %+v", end)
	}
	d := end.Payload.Data.(map[string]any)
	fl := d["flavor"].(Object).Data.(map[string]any)
	if d["uuid"] != in.UUID || d["host"] != "h1" || d["node"] != "h1" || d["state"] != "active" || d["power_state"] != "running" ||
		d["tenant_id"] != "p1" || d["display_name"] != "vm1" || d["action_initiator_user"] != "u1" || d["task_state"] != nil ||
		fl["memory_mb"] != int64(2048) || fl["vcpus"] != int64(1) || fl["root_gb"] != int64(20) {
		t.Errorf("payload %v", d)
	}
	up := evs[0].Payload.Data.(map[string]any)["state_update"].(Object).Data.(map[string]any)
	if up["old_state"] != "building" || up["state"] != "active" || up["old_task_state"] != "spawning" || up["new_task_state"] != nil {
		t.Errorf("state_update %v", up)
	}
	m := message(end)
	if m.Timestamp != "2026-12-06 05:00:00.000000" || len(m.MessageID) != 36 {
		t.Errorf("message %+v", m)
	}
	b, err := envelope(m)
	if err != nil || !strings.HasPrefix(string(b), `{"oslo.message":"{\"message_id\":`) || !strings.Contains(string(b), `"oslo.version":"2.0"`) {
		t.Errorf("envelope %s %v", b, err)
	}
}

func liveSeq(t *testing.T, steps [][2]any) [][]string {
	t.Helper()
	in := vm
	in.Host, in.VMState = "h1", records.VMActive
	var out [][]string
	var prev *records.Migration
	for _, s := range steps {
		m := records.Migration{ID: 1, InstanceUUID: in.UUID, Type: records.MigrationTypeLive, SourceHost: "h1", DestHost: "h2",
			Phase: s[0].(records.MigrationPhase), Status: s[1].(records.MigrationStatus)}
		if prev != nil {
			m.AbortRequested, m.ForceComplete = prev.AbortRequested, prev.ForceComplete
		}
		switch s[0] {
		case records.MigrationPhase("abort"):
			m = *prev
			m.AbortRequested = true
		case records.MigrationPhase("force"):
			m = *prev
			m.ForceComplete = true
		}
		out = append(out, types(MigrationChange(src, prev, m, in)))
		prev = &m
	}
	return out
}

func TestLiveMigrationEvents(t *testing.T) {
	got := liveSeq(t, [][2]any{
		{migration.PhaseSchedule, records.MigrationAccepted},
		{migration.PhaseQueue, records.MigrationQueued},
		{migration.PhasePrepare, records.MigrationPreparing},
		{migration.PhaseCopy, records.MigrationRunning},
		{records.MigrationPhase("force"), records.MigrationRunning},
		{migration.PhasePostSource, records.MigrationRunning},
		{migration.PhasePostDest, records.MigrationRunning},
		{migration.PhaseFinish, records.MigrationRunning},
		{migration.PhaseDone, records.MigrationCompleted},
	})
	want := [][]string{{}, {}, {"instance.live_migration_pre.start"}, {"instance.live_migration_pre.end"},
		{"instance.live_migration_force_complete.start"},
		{"instance.live_migration_post.start", "instance.live_migration_force_complete.end"},
		{"instance.live_migration_post_dest.start"},
		{"instance.live_migration_post_dest.end", "instance.live_migration_post.end"}, {}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("completed:\n got %v\nwant %v", got, want)
	}
	got = liveSeq(t, [][2]any{
		{migration.PhaseCopy, records.MigrationRunning},
		{records.MigrationPhase("abort"), records.MigrationRunning},
		{migration.PhaseRollbackDest, records.MigrationRunning},
		{migration.PhaseRevert, records.MigrationRunning},
		{migration.PhaseDone, records.MigrationCancelled},
	})
	want = [][]string{{"instance.live_migration_pre.start", "instance.live_migration_pre.end"},
		{"instance.live_migration_abort.start"},
		{"instance.live_migration_rollback.start", "instance.live_migration_rollback_dest.start"},
		{"instance.live_migration_rollback_dest.end"},
		{"instance.live_migration_rollback.end", "instance.live_migration_abort.end"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("aborted:\n got %v\nwant %v", got, want)
	}
}

func TestColdMigrationEvents(t *testing.T) {
	in := vm
	in.Host, in.VMState = "h1", records.VMActive
	in.ResizeFlavor = &records.Flavor{ID: "3", Name: "m1.medium", VCPUs: 2, RAMMB: 4096, DiskGB: 40}
	var prev *records.Migration
	var got [][]string
	for _, st := range []records.MigrationStatus{records.MigrationPreMigrating, records.MigrationMigrating,
		records.MigrationFinished, records.MigrationConfirming, records.MigrationConfirmed} {
		m := records.Migration{ID: 2, InstanceUUID: in.UUID, Type: records.MigrationTypeResize, SourceHost: "h1", DestHost: "h2", Status: st}
		got = append(got, types(MigrationChange(src, prev, m, in)))
		prev = &m
	}
	want := [][]string{{"instance.resize_prep.start"}, {"instance.resize_prep.end", "instance.resize.start"},
		{"instance.resize.end", "instance.resize_finish.start", "instance.resize_finish.end"},
		{"instance.resize_confirm.start"}, {"instance.resize_confirm.end"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("resize:\n got %v\nwant %v", got, want)
	}
	fin := records.Migration{Type: records.MigrationTypeResize, Status: records.MigrationFinished, SourceHost: "h1", DestHost: "h2"}
	rev := fin
	rev.Status = records.MigrationReverted
	if got := types(MigrationChange(src, &fin, rev, in)); !slices.Equal(got, []string{"instance.resize_revert.start", "instance.resize_revert.end"}) {
		t.Errorf("revert: %v", got)
	}
	mig := fin
	mig.Status = records.MigrationMigrating
	bad := mig
	bad.Status, bad.Error = records.MigrationError, "disk copy failed"
	evs := MigrationChange(src, &mig, bad, in)
	if got := types(evs); !slices.Equal(got, []string{"instance.resize.error"}) || evs[0].Priority != "ERROR" {
		t.Errorf("error: %v", got)
	}
	prep := MigrationChange(src, nil, records.Migration{Type: records.MigrationTypeCold, Status: records.MigrationPreMigrating, DestHost: "h2"}, in)
	if nf := prep[0].Payload.Data.(map[string]any)["new_flavor"].(Object); nf.Name != "FlavorPayload" || prep[0].Publisher != "nova-compute:h2" {
		t.Errorf("resize_prep: %+v", prep[0])
	}
	ev := records.Migration{Type: records.MigrationTypeEvac, Status: records.MigrationAccepted, DestHost: "h3"}
	done := ev
	done.Status = records.MigrationDone
	if got := types(MigrationChange(src, &ev, done, in)); !slices.Equal(got, []string{"instance.evacuate"}) {
		t.Errorf("evacuate: %v", got)
	}
}

func TestServiceEvents(t *testing.T) {
	s := records.Service{Host: "h1", Binary: "nova-compute", Zone: "nova", LastSeenUp: t0}
	if got := types(ServiceChange(src, nil, s)); !slices.Equal(got, []string{"service.create"}) {
		t.Errorf("create: %v", got)
	}
	beat := s
	beat.LastSeenUp = t0.Add(time.Minute)
	if got := ServiceChange(src, &s, beat); len(got) != 0 {
		t.Errorf("a heartbeat: %v", types(got))
	}
	off := beat
	off.Disabled, off.DisabledReason = true, "maintenance"
	evs := ServiceChange(src, &beat, off)
	if len(evs) != 1 || evs[0].EventType != "service.update" || evs[0].Publisher != "nova-compute:h1" {
		t.Fatalf("disable: %+v", evs)
	}
	d := evs[0].Payload.Data.(map[string]any)
	if d["disabled"] != true || d["disabled_reason"] != "maintenance" || d["host"] != "h1" || d["uuid"] != ServiceUUID("h1") {
		t.Errorf("payload %v", d)
	}
	if got := ServiceChange(src, nil, records.Service{Host: records.ServerServiceHost("a"), Binary: records.ServerBinary}); len(got) != 0 {
		t.Errorf("a server replica: %v", types(got))
	}
	del := ServiceDeleted(src, off)
	if len(del) != 1 || del[0].EventType != "service.delete" || del[0].Publisher != "nova-compute:h1" {
		t.Fatalf("delete: %+v", del)
	}
	if d := del[0].Payload.Data.(map[string]any); d["disabled"] != true || d["uuid"] != ServiceUUID("h1") {
		t.Errorf("delete payload %v", d)
	}
	if got := ServiceDeleted(src, records.Service{Host: records.ServerServiceHost("a"), Binary: records.ServerBinary}); len(got) != 0 {
		t.Errorf("a server replica's delete: %v", types(got))
	}
}

// TestSnapshotEvents: a createImage (and a createBackup) is Nova's
// instance.snapshot.start and .end from the guest's host, each naming the
// image written (InstanceActionSnapshotPayload's snapshot_image_id; the
// end's record no longer holds it); a failed one is compute.exception.
func TestSnapshotEvents(t *testing.T) {
	for _, action := range []string{"createImage", "createBackup"} {
		in := vm
		in.Host, in.VMState = "h1", records.VMActive
		sn := &records.Snapshot{ImageID: "5a9e3c1d-7b2f-4e8a-9c6d-0f1e2d3c4b5a"}
		steps := []struct {
			change func(*records.Instance)
			want   string
			task   any
		}{
			{func(i *records.Instance) { i.Action, i.TaskState, i.Snapshot = action, records.TaskImageSnapshot, sn }, "instance.snapshot.start", "image_snapshot"},
			{func(i *records.Instance) { i.TaskState = records.TaskImageUploading }, "", nil},
			{func(i *records.Instance) { i.Action, i.TaskState, i.Snapshot = "", records.TaskNone, nil }, "instance.snapshot.end", nil},
		}
		for _, s := range steps {
			old := in
			s.change(&in)
			var got []Event
			for _, e := range InstanceChange(src, &old, &in) {
				if e.EventType != "instance.update" {
					got = append(got, e)
				}
			}
			if s.want == "" {
				if len(got) != 0 {
					t.Errorf("%s: %v, want only instance.update", action, types(got))
				}
				continue
			}
			if len(got) != 1 || got[0].EventType != s.want {
				t.Fatalf("%s: %v, want %s", action, types(got), s.want)
			}
			e := got[0]
			d := e.Payload.Data.(map[string]any)
			if e.Publisher != "nova-compute:h1" || e.Payload.Name != "InstanceActionSnapshotPayload" || e.Payload.Version != "1.9" ||
				d["snapshot_image_id"] != sn.ImageID || d["task_state"] != s.task {
				t.Errorf("%s %s: %s %s %s %v %v", action, s.want, e.Publisher, e.Payload.Name, e.Payload.Version, d["snapshot_image_id"], d["task_state"])
			}
		}
		in.Action, in.TaskState, in.Snapshot = action, records.TaskImageSnapshot, sn
		old2 := in
		in.Action, in.TaskState, in.Snapshot, in.ActionError = "", records.TaskNone, nil, "disk unreadable"
		if got := types(InstanceChange(src, &old2, &in)); !slices.Equal(got, []string{"instance.update", "compute.exception"}) {
			t.Errorf("%s failed: %v", action, got)
		}
	}
}
