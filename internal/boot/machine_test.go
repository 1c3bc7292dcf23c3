package boot

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"keel/internal/records"
)

// in builds an instance in a phase.
func in(phase records.BuildPhase, mods ...func(*records.Instance)) records.Instance {
	i := records.Instance{UUID: "i1", VMState: records.VMBuilding, BuildPhase: phase, Host: "h1", TaskState: records.TaskSpawning}
	if phase == "" || phase == PhaseSchedule {
		i.Host, i.TaskState = "", records.TaskScheduling
	}
	for _, m := range mods {
		m(&i)
	}
	return i
}

func inGroup(i *records.Instance) { i.Hints = &records.SchedulerHints{Group: "g1"} }

func acts(as []Action) string {
	var out []string
	for _, a := range as {
		s := string(a.Kind)
		if a.GiveBack {
			s = "give-back+" + s
		}
		if a.Host != "" {
			s += "@" + a.Host
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

// TestTransitions is the machine as a table: every accepted (phase, event)
// pair, the phase, vm_state and host it leads to, and the actions.
func TestTransitions(t *testing.T) {
	cases := []struct {
		name  string
		from  records.Instance
		ev    Event
		phase records.BuildPhase
		vm    records.VMState
		host  string
		acts  string
		fault string
	}{
		{"start schedules", records.Instance{UUID: "i1", VMState: records.VMBuilding, Zone: "az1"}, Event{Kind: Start}, PhaseSchedule, records.VMBuilding, "", "schedule", ""},
		{"scheduled casts", in(PhaseSchedule), Event{Kind: Scheduled, Host: "h2", Zone: "nova"}, PhaseCast, records.VMBuilding, "h2", "cast-build@h2", ""},
		{"scheduled in a group confirms first", in(PhaseSchedule, inGroup), Event{Kind: Scheduled, Host: "h2"}, PhaseConfirm, records.VMBuilding, "h2", "confirm-group", ""},
		{"no valid host releases", in(PhaseSchedule), Event{Kind: NoValidHost, Err: "No valid host was found."}, PhaseRelease, records.VMBuilding, "", "release-claim", "No valid host was found."},
		{"group confirmed casts", in(PhaseConfirm, inGroup), Event{Kind: GroupConfirmed}, PhaseCast, records.VMBuilding, "h1", "cast-build@h1", ""},
		{"group refused schedules again", in(PhaseConfirm, inGroup, func(i *records.Instance) { i.BuildAttempts = 1 }), Event{Kind: GroupRefused}, PhaseSchedule, records.VMBuilding, "", "give-back+schedule", ""},
		{"group refused too often fails", in(PhaseConfirm, inGroup, func(i *records.Instance) { i.BuildAttempts = 3 }), Event{Kind: GroupRefused}, PhaseRelease, records.VMBuilding, "", "release-claim", "No valid host was found. Server group g1"},
		{"cast waits for the report", in(PhaseCast), Event{Kind: Cast}, PhaseSpawn, records.VMBuilding, "h1", "", ""},
		{"cast failed releases", in(PhaseCast), Event{Kind: CastFailed, Err: "agent gone"}, PhaseRelease, records.VMBuilding, "h1", "release-claim", "agent gone"},
		{"a report may outrun the cast's answer", in(PhaseCast), Event{Kind: Spawned}, "", records.VMActive, "h1", "", ""},
		{"spawned is active", in(PhaseSpawn), Event{Kind: Spawned}, "", records.VMActive, "h1", "", ""},
		{"spawn failed releases", in(PhaseSpawn), Event{Kind: SpawnFailed, Err: "disk full"}, PhaseRelease, records.VMBuilding, "h1", "release-claim", "build on h1 failed: disk full"},
		{"timed out terminates and leaves the host", in(PhaseSpawn), Event{Kind: TimedOut, Err: "no report in 15m0s"}, PhaseRelease, records.VMBuilding, "", "terminate@h1,release-claim", "build on h1 timed out: no report in 15m0s"},
		{"timed out while scheduling", in(PhaseSchedule), Event{Kind: TimedOut, Err: "no host in 15m0s"}, PhaseRelease, records.VMBuilding, "", "terminate,release-claim", "timed out"},
		{"released is error", in(PhaseRelease, func(i *records.Instance) { i.Fault = "x" }), Event{Kind: Released}, "", records.VMError, "h1", "", "x"},
		{"resume repeats scheduling", in(PhaseSchedule), Event{Kind: Resume}, PhaseSchedule, records.VMBuilding, "", "give-back+schedule", ""},
		{"resume repeats the group check", in(PhaseConfirm, inGroup), Event{Kind: Resume}, PhaseConfirm, records.VMBuilding, "h1", "confirm-group", ""},
		{"resume repeats the cast", in(PhaseCast), Event{Kind: Resume}, PhaseCast, records.VMBuilding, "h1", "cast-build@h1", ""},
		{"resume waits for the agent's report", in(PhaseSpawn), Event{Kind: Resume}, PhaseSpawn, records.VMBuilding, "h1", "", ""},
		{"resume repeats the release", in(PhaseRelease), Event{Kind: Resume}, PhaseRelease, records.VMBuilding, "h1", "release-claim", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := fmt.Sprintf("%+v", tc.from)
			next, as, err := Machine{}.Step(tc.from, tc.ev, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%+v", tc.from) != before {
				t.Fatal("Step mutated its input")
			}
			if next.BuildPhase != tc.phase || next.VMState != tc.vm || next.Host != tc.host || acts(as) != tc.acts {
				t.Fatalf("got phase %q vm %s host %q acts %q; want %q %s %q %q", next.BuildPhase, next.VMState, next.Host, acts(as), tc.phase, tc.vm, tc.host, tc.acts)
			}
			if !strings.Contains(next.Fault, tc.fault) {
				t.Fatalf("fault %q does not contain %q", next.Fault, tc.fault)
			}
			if Building(next) != (next.VMState == records.VMBuilding) {
				t.Fatalf("Building(%+v) disagrees with its vm_state", next)
			}
		})
	}
}

// TestZoneFollowsTheHost: an instance booted without a zone takes its
// host's; one asked for a zone keeps it, and a reschedule asks again for
// what the request asked.
func TestZoneFollowsTheHost(t *testing.T) {
	m := Machine{}
	i, _, _ := m.Step(records.Instance{UUID: "i1", VMState: records.VMBuilding, Hints: &records.SchedulerHints{Group: "g"}}, Event{Kind: Start}, time.Time{})
	i, _, _ = m.Step(i, Event{Kind: Scheduled, Host: "h1", Zone: "az-of-h1"}, time.Time{})
	if i.Zone != "az-of-h1" || i.RequestedZone != "" {
		t.Fatalf("zone %q requested %q", i.Zone, i.RequestedZone)
	}
	i, _, _ = m.Step(i, Event{Kind: GroupRefused}, time.Time{})
	if i.Zone != "" || i.Host != "" {
		t.Fatalf("a reschedule kept zone %q host %q", i.Zone, i.Host)
	}
	j, _, _ := m.Step(records.Instance{UUID: "i2", VMState: records.VMBuilding, Zone: "az1"}, Event{Kind: Start}, time.Time{})
	j, _, _ = m.Step(j, Event{Kind: Scheduled, Host: "h1", Zone: "az-of-h1"}, time.Time{})
	if j.Zone != "az1" {
		t.Fatalf("zone %q, want the asked az1", j.Zone)
	}
}

// TestIllegal: events a phase does not expect, and anything after the
// end, are errors and change nothing.
func TestIllegal(t *testing.T) {
	cases := []struct {
		from records.Instance
		ev   EventKind
	}{
		{in(PhaseSchedule), Spawned},
		{in(PhaseSchedule), Released},
		{in(PhaseCast), GroupConfirmed},
		{in(PhaseSpawn), Cast},
		{in(PhaseRelease), TimedOut},
		{in(PhaseRelease), Spawned},
		{in("", func(i *records.Instance) { i.VMState = records.VMActive }), Spawned},
		{in("", func(i *records.Instance) { i.VMState = records.VMActive }), Resume},
		{in("", func(i *records.Instance) { i.VMState = records.VMError }), TimedOut},
		{in(PhaseSpawn), Start},
	}
	for _, tc := range cases {
		next, as, err := Machine{}.Step(tc.from, Event{Kind: tc.ev}, time.Time{})
		var ill *IllegalError
		if !errors.As(err, &ill) || len(as) != 0 || next.BuildPhase != tc.from.BuildPhase || next.VMState != tc.from.VMState {
			t.Errorf("%s in %q/%s: err %v acts %v", tc.ev, tc.from.BuildPhase, tc.from.VMState, err, as)
		}
	}
}

// TestEveryPathEnds walks every sequence of answers the machine can get
// (up to a depth) and checks that each path that stops answering is in a
// phase Resume or the timeout can end, and that no action names a
// phase-less boot.
func TestEveryPathEnds(t *testing.T) {
	answers := map[ActionKind][]Event{
		Schedule:     {{Kind: Scheduled, Host: "h1"}, {Kind: NoValidHost, Err: "none"}},
		ConfirmGroup: {{Kind: GroupConfirmed}, {Kind: GroupRefused}},
		CastBuild:    {{Kind: Cast}, {Kind: CastFailed, Err: "x"}},
		ReleaseClaim: {{Kind: Released}},
	}
	m := Machine{}
	var walk func(i records.Instance, as []Action, depth int)
	ends := 0
	walk = func(i records.Instance, as []Action, depth int) {
		if depth > 20 {
			t.Fatalf("a path did not end within 20 steps: %+v", i)
		}
		if !Building(i) {
			ends++
			if i.VMState != records.VMActive && i.VMState != records.VMError {
				t.Fatalf("ended in %s", i.VMState)
			}
			return
		}
		var next []Event
		for _, a := range as {
			next = append(next, answers[a.Kind]...)
		}
		if len(as) == 0 { // waiting for the agent
			next = []Event{{Kind: Spawned}, {Kind: SpawnFailed, Err: "x"}, {Kind: TimedOut, Err: "t"}}
		}
		for _, ev := range next {
			n, nas, err := m.Step(i, ev, time.Time{})
			if err != nil {
				t.Fatalf("%s in %s: %v", ev.Kind, i.BuildPhase, err)
			}
			walk(n, nas, depth+1)
		}
	}
	for _, hints := range []*records.SchedulerHints{nil, {Group: "g"}} {
		i, as, _ := m.Step(records.Instance{UUID: "i", VMState: records.VMBuilding, Hints: hints}, Event{Kind: Start}, time.Time{})
		walk(i, as, 0)
	}
	if ends < 10 {
		t.Fatalf("only %d paths walked", ends)
	}
}

// TestDeadline: the boot machine owns its timeouts: what fires when
// nothing happens, for every phase.
func TestDeadline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mc := Machine{BuildTimeout: 10 * time.Minute, StallAfter: time.Minute}
	at := func(phase records.BuildPhase, updated time.Duration) records.Instance {
		i := in(phase)
		i.CreatedAt, i.UpdatedAt = t0, t0.Add(updated)
		return i
	}
	for _, tc := range []struct {
		name string
		inst records.Instance
		mc   Machine
		now  time.Time // when the sweep looks; t0 when unset
		when time.Time
		ev   EventKind
		none bool
	}{
		{name: "created, never stepped: started", inst: at("", 0), mc: mc, when: t0.Add(time.Minute), ev: Start},
		{name: "schedule stalled: resumed", inst: at(PhaseSchedule, 0), mc: mc, when: t0.Add(time.Minute), ev: Resume},
		{name: "cast near the timeout: timed out first", inst: at(PhaseCast, 9*time.Minute+30*time.Second), mc: mc, when: t0.Add(10 * time.Minute), ev: TimedOut},
		{name: "schedule stalled and past the timeout: timed out, not resumed", inst: at(PhaseSchedule, 0), mc: mc, now: t0.Add(11 * time.Minute),
			when: t0.Add(10 * time.Minute), ev: TimedOut},
		{name: "schedule stalled, timeout to come: resumed", inst: at(PhaseSchedule, 0), mc: mc, now: t0.Add(2 * time.Minute), when: t0.Add(time.Minute), ev: Resume},
		{name: "spawn waits for the agent until the timeout", inst: at(PhaseSpawn, 0), mc: mc, when: t0.Add(10 * time.Minute), ev: TimedOut},
		{name: "spawn without a timeout: nothing", inst: at(PhaseSpawn, 0), mc: Machine{StallAfter: time.Minute}, none: true},
		{name: "release repeats past the timeout", inst: at(PhaseRelease, 20*time.Minute), mc: mc, when: t0.Add(21 * time.Minute), ev: Resume},
		{name: "ended: nothing", inst: records.Instance{VMState: records.VMActive}, mc: mc, none: true},
		{name: "being deleted: nothing", inst: func() records.Instance { i := at(PhaseCast, 0); i.TaskState = records.TaskDeleting; return i }(), mc: mc, none: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := tc.now
			if now.IsZero() {
				now = t0
			}
			when, ev, ok := tc.mc.Deadline(tc.inst, now)
			if tc.none {
				if ok {
					t.Fatalf("deadline %s %s, want none", when, ev.Kind)
				}
				return
			}
			if !ok || !when.Equal(tc.when) || ev.Kind != tc.ev {
				t.Fatalf("deadline %v %s %s, want %s %s", ok, when, ev.Kind, tc.when, tc.ev)
			}
			// What fires must be a legal step.
			if _, _, err := tc.mc.Step(tc.inst, ev, when); err != nil {
				t.Fatalf("the deadline's event is refused: %v", err)
			}
		})
	}
}
