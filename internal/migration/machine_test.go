package migration

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"keel/internal/records"
)

// newMigration is a migration record as LiveMigrate creates it: nothing
// decided yet.
func newMigration() records.Migration {
	return records.Migration{
		ID: 7, UUID: "mig-7", InstanceUUID: "inst-1", Type: "live-migration", SourceHost: "src",
		MemoryTotalBytes: 8 << 30, MemoryRemainingBytes: 8 << 30,
	}
}

func requested(host string) func(*records.Migration) {
	return func(m *records.Migration) { m.RequestedHost = host }
}

// step is one line of a script: the event fed in and what must come out.
type step struct {
	ev         Event
	wantStatus records.MigrationStatus
	wantPhase  records.MigrationPhase
	// wantActions is compared exactly (kind, host, data), in order.
	wantActions []Action
	// wantIllegal expects the event to be refused with *IllegalError (the
	// record must then come back unchanged).
	wantIllegal bool
	check       func(t *testing.T, m records.Migration)
}

func act(kind ActionKind, host string) Action { return Action{Kind: kind, Host: host} }

// run replays a script from m, checking every step, and returns the last
// record.
func run(t *testing.T, mc Machine, m records.Migration, script []step) records.Migration {
	t.Helper()
	for i, s := range script {
		before := cloneMigration(m)
		next, acts, err := mc.Step(m, s.ev, time.Time{})
		if !reflect.DeepEqual(m, before) {
			t.Fatalf("step %d (%s): Step mutated its input:\n got %+v\nwant %+v", i, s.ev.Kind, m, before)
		}
		if s.wantIllegal {
			var ie *IllegalError
			if !errors.As(err, &ie) {
				t.Fatalf("step %d (%s) in phase %q: err = %v, want *IllegalError", i, s.ev.Kind, m.Phase, err)
			}
			if ie.Event != s.ev.Kind || ie.Phase != m.Phase || ie.Status != m.Status {
				t.Fatalf("step %d: IllegalError %+v does not name event %s, phase %q, status %q", i, ie, s.ev.Kind, m.Phase, m.Status)
			}
			if len(acts) != 0 {
				t.Fatalf("step %d: refused event still produced actions %v", i, acts)
			}
			if !reflect.DeepEqual(normalize(next), normalize(m)) {
				t.Fatalf("step %d: refused event changed the record:\n got %+v\nwant %+v", i, next, m)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d (%s) in phase %q: %v", i, s.ev.Kind, m.Phase, err)
		}
		if next.Status != s.wantStatus || next.Phase != s.wantPhase {
			t.Fatalf("step %d (%s): status/phase = %q/%q, want %q/%q", i, s.ev.Kind, next.Status, next.Phase, s.wantStatus, s.wantPhase)
		}
		if !sameActions(acts, s.wantActions) {
			t.Fatalf("step %d (%s): actions\n got %v\nwant %v", i, s.ev.Kind, acts, s.wantActions)
		}
		if s.check != nil {
			s.check(t, next)
		}
		// The agents' predicate (agent.go) holds where the machine casts
		// a copy, live or cold.
		for _, a := range acts {
			if (a.Kind == StartCopy || a.Kind == ResizeInstance) && !SourceCopying(next) {
				t.Fatalf("step %d (%s): %s cast from a record not SourceCopying (%q/%q)", i, s.ev.Kind, a.Kind, next.Phase, next.Status)
			}
		}
		m = next
	}
	return m
}

func sameActions(got, want []Action) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].Kind != want[i].Kind || got[i].Host != want[i].Host {
			return false
		}
		if len(got[i].Data) != 0 || len(want[i].Data) != 0 {
			if !reflect.DeepEqual(got[i].Data, want[i].Data) {
				return false
			}
		}
	}
	return true
}

func cloneMigration(m records.Migration) records.Migration {
	if m.TriedHosts != nil {
		m.TriedHosts = append([]string(nil), m.TriedHosts...)
	}
	return m
}

// normalize treats a nil and an empty TriedHosts alike.
func normalize(m records.Migration) records.Migration {
	if len(m.TriedHosts) == 0 {
		m.TriedHosts = nil
	}
	return m
}

func errContains(sub string) func(t *testing.T, m records.Migration) {
	return func(t *testing.T, m records.Migration) {
		t.Helper()
		if !strings.Contains(m.Error, sub) {
			t.Fatalf("error %q does not mention %q", m.Error, sub)
		}
	}
}

func all(checks ...func(t *testing.T, m records.Migration)) func(t *testing.T, m records.Migration) {
	return func(t *testing.T, m records.Migration) {
		t.Helper()
		for _, c := range checks {
			c(t, m)
		}
	}
}

func destIs(h string) func(t *testing.T, m records.Migration) {
	return func(t *testing.T, m records.Migration) {
		t.Helper()
		if m.DestHost != h {
			t.Fatalf("dest = %q, want %q", m.DestHost, h)
		}
	}
}

func triedAre(hosts ...string) func(t *testing.T, m records.Migration) {
	return func(t *testing.T, m records.Migration) {
		t.Helper()
		if len(m.TriedHosts) != len(hosts) || (len(hosts) > 0 && !reflect.DeepEqual(m.TriedHosts, hosts)) {
			t.Fatalf("tried hosts = %v, want %v", m.TriedHosts, hosts)
		}
	}
}

func attemptsAre(n int) func(t *testing.T, m records.Migration) {
	return func(t *testing.T, m records.Migration) {
		t.Helper()
		if m.Attempts != n {
			t.Fatalf("attempts = %d, want %d", m.Attempts, n)
		}
	}
}

func noOutcome(t *testing.T, m records.Migration) {
	t.Helper()
	if m.Outcome != "" {
		t.Fatalf("terminal record keeps outcome %q", m.Outcome)
	}
}

var prepData = map[string]string{"driver": "fake", "uri": "qemu+tcp://dst/system"}

// Script fragments shared by the cases.
var (
	toCheck = []step{
		{ev: Event{Kind: Start}, wantStatus: records.MigrationAccepted, wantPhase: PhaseSchedule,
			wantActions: []Action{act(ClaimDestination, "")}},
		{ev: Event{Kind: Claimed, Host: "dst"}, wantStatus: records.MigrationAccepted, wantPhase: PhaseCheck,
			wantActions: []Action{act(CheckDestination, "dst")}, check: all(destIs("dst"), attemptsAre(1))},
	}
	toQueue = append(toCheck[:len(toCheck):len(toCheck)],
		step{ev: Event{Kind: CheckPassed}, wantStatus: records.MigrationQueued, wantPhase: PhaseQueue,
			wantActions: []Action{act(AcquireSlot, "src")}})
	toPrepare = append(toQueue[:len(toQueue):len(toQueue)],
		step{ev: Event{Kind: SlotAcquired}, wantStatus: records.MigrationPreparing, wantPhase: PhasePrepare,
			wantActions: []Action{act(PreLiveMigration, "dst")}})
	toCopy = append(toPrepare[:len(toPrepare):len(toPrepare)],
		step{ev: Event{Kind: Prepared, Data: prepData}, wantStatus: records.MigrationRunning, wantPhase: PhaseCopy,
			wantActions: []Action{{Kind: StartCopy, Host: "src", Data: prepData}}})
	toPostSource = append(toCopy[:len(toCopy):len(toCopy)],
		step{ev: Event{Kind: Copied}, wantStatus: records.MigrationRunning, wantPhase: PhasePostSource,
			wantActions: []Action{act(ReleaseSlot, "src"), act(PostAtSource, "src")}})
	toPostDest = append(toPostSource[:len(toPostSource):len(toPostSource)],
		step{ev: Event{Kind: SourceDone}, wantStatus: records.MigrationRunning, wantPhase: PhasePostDest,
			wantActions: []Action{act(PostAtDest, "dst")}})
	completed = append(toPostDest[:len(toPostDest):len(toPostDest)],
		step{ev: Event{Kind: DestDone}, wantStatus: records.MigrationRunning, wantPhase: PhaseFinish,
			wantActions: []Action{act(FinishAllocations, "")}},
		step{ev: Event{Kind: Finished}, wantStatus: records.MigrationCompleted, wantPhase: PhaseDone,
			wantActions: []Action{act(SettleInstance, "dst")}, check: all(noOutcome, destIs("dst"), func(t *testing.T, m records.Migration) {
				if m.Error != "" || m.MemoryRemainingBytes != 0 || m.MemoryProcessedBytes != m.MemoryTotalBytes {
					t.Fatalf("completed migration: error %q, memory %d/%d remaining %d", m.Error, m.MemoryProcessedBytes, m.MemoryTotalBytes, m.MemoryRemainingBytes)
				}
			})})
)

func then(prefix []step, more ...step) []step {
	return append(prefix[:len(prefix):len(prefix)], more...)
}

// rollbackTo is the tail of every rollback after the destination was
// prepared: the destination is cleaned, then the allocations revert, and
// the instance settles on the source.
func rollbackTo(status, inStatus records.MigrationStatus, checks ...func(t *testing.T, m records.Migration)) []step {
	return []step{
		{ev: Event{Kind: DestRolledBack}, wantStatus: inStatus, wantPhase: PhaseRevert,
			wantActions: []Action{act(RevertAllocations, "")}},
		{ev: Event{Kind: Reverted}, wantStatus: status, wantPhase: PhaseDone,
			wantActions: []Action{act(SettleInstance, "src")}, check: all(append(checks, noOutcome)...)},
	}
}

func TestMachineScripts(t *testing.T) {
	mc := Machine{MaxAttempts: 3}
	cases := []struct {
		name   string
		mc     *Machine
		build  []func(*records.Migration)
		script []step
		final  records.MigrationStatus
	}{
		{name: "happy path", script: then(completed), final: records.MigrationCompleted},
		{name: "progress is recorded while copying", script: then(toCopy,
			step{ev: Event{Kind: Progress, Total: 100, Processed: 40, Remaining: 60}, wantStatus: records.MigrationRunning, wantPhase: PhaseCopy,
				check: func(t *testing.T, m records.Migration) {
					if m.MemoryTotalBytes != 100 || m.MemoryProcessedBytes != 40 || m.MemoryRemainingBytes != 60 {
						t.Fatalf("memory = %d/%d/%d, want 100/40/60", m.MemoryTotalBytes, m.MemoryProcessedBytes, m.MemoryRemainingBytes)
					}
				}},
			step{ev: Event{Kind: Copied}, wantStatus: records.MigrationRunning, wantPhase: PhasePostSource,
				wantActions: []Action{act(ReleaseSlot, "src"), act(PostAtSource, "src")},
				check: func(t *testing.T, m records.Migration) {
					if m.MemoryProcessedBytes != 100 || m.MemoryRemainingBytes != 0 {
						t.Fatalf("after copy memory = %d processed, %d remaining; want 100, 0", m.MemoryProcessedBytes, m.MemoryRemainingBytes)
					}
				}}),
		},
		{name: "a driver's final figures are kept (QEMU sends less than the RAM: zero pages)", script: then(toCopy,
			step{ev: Event{Kind: Progress, Total: 100, Processed: 30, Remaining: 0}, wantStatus: records.MigrationRunning, wantPhase: PhaseCopy},
			step{ev: Event{Kind: Copied}, wantStatus: records.MigrationRunning, wantPhase: PhasePostSource,
				wantActions: []Action{act(ReleaseSlot, "src"), act(PostAtSource, "src")},
				check: func(t *testing.T, m records.Migration) {
					if m.MemoryTotalBytes != 100 || m.MemoryProcessedBytes != 30 || m.MemoryRemainingBytes != 0 {
						t.Fatalf("after copy memory = %d/%d/%d; want the driver's 100/30/0", m.MemoryTotalBytes, m.MemoryProcessedBytes, m.MemoryRemainingBytes)
					}
				}}),
		},
		{name: "pre-check failure then next host", script: then(toCheck,
			step{ev: Event{Kind: CheckFailed, Err: "no shared storage"}, wantStatus: records.MigrationAccepted, wantPhase: PhaseRelease,
				wantActions: []Action{act(ReleaseDestination, "dst")}, check: all(triedAre("dst"), errContains("no shared storage"), errContains("dst"))},
			step{ev: Event{Kind: Released}, wantStatus: records.MigrationAccepted, wantPhase: PhaseSchedule,
				wantActions: []Action{act(ClaimDestination, "")}, check: all(destIs(""), triedAre("dst"))},
			step{ev: Event{Kind: Claimed, Host: "dst2"}, wantStatus: records.MigrationAccepted, wantPhase: PhaseCheck,
				wantActions: []Action{act(CheckDestination, "dst2")}, check: all(destIs("dst2"), attemptsAre(2))},
			step{ev: Event{Kind: CheckPassed}, wantStatus: records.MigrationQueued, wantPhase: PhaseQueue,
				wantActions: []Action{act(AcquireSlot, "src")}, check: triedAre("dst")},
		)},
		{name: "attempts exhausted ends in error", mc: &Machine{MaxAttempts: 2}, script: then(toCheck,
			step{ev: Event{Kind: CheckFailed, Err: "cpu mismatch"}, wantStatus: records.MigrationAccepted, wantPhase: PhaseRelease,
				wantActions: []Action{act(ReleaseDestination, "dst")}},
			step{ev: Event{Kind: Released}, wantStatus: records.MigrationAccepted, wantPhase: PhaseSchedule,
				wantActions: []Action{act(ClaimDestination, "")}},
			step{ev: Event{Kind: Claimed, Host: "dst2"}, wantStatus: records.MigrationAccepted, wantPhase: PhaseCheck,
				wantActions: []Action{act(CheckDestination, "dst2")}, check: attemptsAre(2)},
			step{ev: Event{Kind: CheckFailed, Err: "cpu mismatch again"}, wantStatus: records.MigrationAccepted, wantPhase: PhaseRelease,
				wantActions: []Action{act(ReleaseDestination, "dst2")}, check: triedAre("dst", "dst2")},
			step{ev: Event{Kind: Released}, wantStatus: records.MigrationError, wantPhase: PhaseDone,
				wantActions: []Action{act(SettleInstance, "src")},
				check:       all(noOutcome, errContains("after 2 attempts"), errContains("cpu mismatch again"), triedAre("dst", "dst2"))},
		), final: records.MigrationError},
		{name: "max attempts 0 still allows one attempt", mc: &Machine{}, script: then(toCheck,
			step{ev: Event{Kind: CheckFailed, Err: "nope"}, wantStatus: records.MigrationAccepted, wantPhase: PhaseRelease,
				wantActions: []Action{act(ReleaseDestination, "dst")}},
			step{ev: Event{Kind: Released}, wantStatus: records.MigrationError, wantPhase: PhaseDone,
				wantActions: []Action{act(SettleInstance, "src")}, check: errContains("after 1 attempts")},
		), final: records.MigrationError},
		{name: "requested host failing its check ends in error without retry", build: []func(*records.Migration){requested("dst")},
			script: []step{
				{ev: Event{Kind: Start}, wantStatus: records.MigrationAccepted, wantPhase: PhaseSchedule,
					wantActions: []Action{act(ClaimDestination, "dst")}},
				{ev: Event{Kind: Claimed, Host: "dst"}, wantStatus: records.MigrationAccepted, wantPhase: PhaseCheck,
					wantActions: []Action{act(CheckDestination, "dst")}},
				{ev: Event{Kind: CheckFailed, Err: "disabled"}, wantStatus: records.MigrationAccepted, wantPhase: PhaseRelease,
					wantActions: []Action{act(ReleaseDestination, "dst")}},
				{ev: Event{Kind: Released}, wantStatus: records.MigrationError, wantPhase: PhaseDone,
					wantActions: []Action{act(SettleInstance, "src")}, check: all(errContains("disabled"), destIs("dst"), attemptsAre(1))},
			}, final: records.MigrationError},
		{name: "no valid host ends in error", script: []step{
			{ev: Event{Kind: Start}, wantStatus: records.MigrationAccepted, wantPhase: PhaseSchedule,
				wantActions: []Action{act(ClaimDestination, "")}},
			{ev: Event{Kind: NoValidHost, Err: "No valid host was found"}, wantStatus: records.MigrationError, wantPhase: PhaseDone,
				wantActions: []Action{act(SettleInstance, "src")}, check: all(errContains("No valid host"), destIs(""), attemptsAre(0))},
		}, final: records.MigrationError},
		{name: "prepare failure rolls back the destination then reverts", script: then(toPrepare,
			append([]step{{ev: Event{Kind: PrepareFailed, Err: "volume attach failed"}, wantStatus: records.MigrationPreparing, wantPhase: PhaseRollbackDest,
				wantActions: []Action{act(ReleaseSlot, "src"), act(RollbackAtDest, "dst")},
				check: func(t *testing.T, m records.Migration) {
					if m.Outcome != records.MigrationFailed {
						t.Fatalf("outcome = %q, want failed", m.Outcome)
					}
				}}},
				rollbackTo(records.MigrationFailed, records.MigrationPreparing, errContains("volume attach failed"), errContains("pre_live_migration"))...)...),
			final: records.MigrationFailed},
		{name: "copy failure rolls back and ends failed", script: then(toCopy,
			append([]step{{ev: Event{Kind: CopyFailed, Err: "connection reset"}, wantStatus: records.MigrationRunning, wantPhase: PhaseRollbackDest,
				wantActions: []Action{act(ReleaseSlot, "src"), act(RollbackAtDest, "dst")}}},
				rollbackTo(records.MigrationFailed, records.MigrationRunning, errContains("connection reset"), errContains("src to dst"))...)...),
			final: records.MigrationFailed},
		{name: "abort while queued reverts without touching the destination", script: then(toQueue,
			step{ev: Event{Kind: Abort}, wantStatus: records.MigrationQueued, wantPhase: PhaseRevert,
				wantActions: []Action{act(RevertAllocations, "")}},
			step{ev: Event{Kind: SlotAcquired}, wantIllegal: true},
			step{ev: Event{Kind: Reverted}, wantStatus: records.MigrationCancelled, wantPhase: PhaseDone,
				wantActions: []Action{act(SettleInstance, "src")}, check: all(noOutcome, errContains("aborted"))},
		), final: records.MigrationCancelled},
		{name: "abort while preparing is honoured once prepared", script: then(toPrepare,
			append([]step{
				{ev: Event{Kind: Abort}, wantStatus: records.MigrationPreparing, wantPhase: PhasePrepare,
					check: func(t *testing.T, m records.Migration) {
						if !m.AbortRequested {
							t.Fatal("abort not recorded")
						}
					}},
				{ev: Event{Kind: Prepared, Data: prepData}, wantStatus: records.MigrationPreparing, wantPhase: PhaseRollbackDest,
					wantActions: []Action{act(ReleaseSlot, "src"), act(RollbackAtDest, "dst")}},
			}, rollbackTo(records.MigrationCancelled, records.MigrationPreparing, errContains("aborted"))...)...),
			final: records.MigrationCancelled},
		{name: "abort while preparing wins over a prepare failure", script: then(toPrepare,
			append([]step{
				{ev: Event{Kind: Abort}, wantStatus: records.MigrationPreparing, wantPhase: PhasePrepare},
				{ev: Event{Kind: PrepareFailed, Err: "boom"}, wantStatus: records.MigrationPreparing, wantPhase: PhaseRollbackDest,
					wantActions: []Action{act(ReleaseSlot, "src"), act(RollbackAtDest, "dst")}},
			}, rollbackTo(records.MigrationCancelled, records.MigrationPreparing)...)...),
			final: records.MigrationCancelled},
		{name: "abort while copying stops the copy and ends cancelled", script: then(toCopy,
			append([]step{
				{ev: Event{Kind: Abort}, wantStatus: records.MigrationRunning, wantPhase: PhaseCopy,
					wantActions: []Action{act(AbortCopy, "src")}},
				{ev: Event{Kind: CopyFailed, Err: "cancelled by driver"}, wantStatus: records.MigrationRunning, wantPhase: PhaseRollbackDest,
					wantActions: []Action{act(ReleaseSlot, "src"), act(RollbackAtDest, "dst")}},
			}, rollbackTo(records.MigrationCancelled, records.MigrationRunning, errContains("aborted"))...)...),
			final: records.MigrationCancelled},
		{name: "force complete is accepted in copy only", script: []step{
			{ev: Event{Kind: Start}, wantStatus: records.MigrationAccepted, wantPhase: PhaseSchedule,
				wantActions: []Action{act(ClaimDestination, "")}},
			{ev: Event{Kind: ForceComplete}, wantIllegal: true},
			{ev: Event{Kind: Claimed, Host: "dst"}, wantStatus: records.MigrationAccepted, wantPhase: PhaseCheck,
				wantActions: []Action{act(CheckDestination, "dst")}},
			{ev: Event{Kind: ForceComplete}, wantIllegal: true},
			{ev: Event{Kind: CheckPassed}, wantStatus: records.MigrationQueued, wantPhase: PhaseQueue,
				wantActions: []Action{act(AcquireSlot, "src")}},
			{ev: Event{Kind: ForceComplete}, wantIllegal: true},
			{ev: Event{Kind: SlotAcquired}, wantStatus: records.MigrationPreparing, wantPhase: PhasePrepare,
				wantActions: []Action{act(PreLiveMigration, "dst")}},
			{ev: Event{Kind: ForceComplete}, wantIllegal: true},
			{ev: Event{Kind: Prepared}, wantStatus: records.MigrationRunning, wantPhase: PhaseCopy,
				wantActions: []Action{act(StartCopy, "src")}},
			{ev: Event{Kind: ForceComplete}, wantStatus: records.MigrationRunning, wantPhase: PhaseCopy,
				wantActions: []Action{act(ForceCopy, "src")}},
			{ev: Event{Kind: Copied}, wantStatus: records.MigrationRunning, wantPhase: PhasePostSource,
				wantActions: []Action{act(ReleaseSlot, "src"), act(PostAtSource, "src")}},
			{ev: Event{Kind: ForceComplete}, wantIllegal: true},
		}},
		{name: "abort is refused in schedule, check and post phases", script: []step{
			{ev: Event{Kind: Start}, wantStatus: records.MigrationAccepted, wantPhase: PhaseSchedule,
				wantActions: []Action{act(ClaimDestination, "")}},
			{ev: Event{Kind: Abort}, wantIllegal: true},
			{ev: Event{Kind: Claimed, Host: "dst"}, wantStatus: records.MigrationAccepted, wantPhase: PhaseCheck,
				wantActions: []Action{act(CheckDestination, "dst")}},
			{ev: Event{Kind: Abort}, wantIllegal: true},
			{ev: Event{Kind: CheckFailed, Err: "x"}, wantStatus: records.MigrationAccepted, wantPhase: PhaseRelease,
				wantActions: []Action{act(ReleaseDestination, "dst")}},
			{ev: Event{Kind: Abort}, wantIllegal: true},
		}},
		{name: "abort is refused after the copy", script: then(toPostSource,
			step{ev: Event{Kind: Abort}, wantIllegal: true},
			step{ev: Event{Kind: SourceDone}, wantStatus: records.MigrationRunning, wantPhase: PhasePostDest,
				wantActions: []Action{act(PostAtDest, "dst")}},
			step{ev: Event{Kind: Abort}, wantIllegal: true},
			step{ev: Event{Kind: DestDone}, wantStatus: records.MigrationRunning, wantPhase: PhaseFinish,
				wantActions: []Action{act(FinishAllocations, "")}},
			step{ev: Event{Kind: Abort}, wantIllegal: true},
		)},
		{name: "abort is refused during a rollback", script: then(toCopy,
			step{ev: Event{Kind: CopyFailed, Err: "x"}, wantStatus: records.MigrationRunning, wantPhase: PhaseRollbackDest,
				wantActions: []Action{act(ReleaseSlot, "src"), act(RollbackAtDest, "dst")}},
			step{ev: Event{Kind: Abort}, wantIllegal: true},
			step{ev: Event{Kind: DestRolledBack}, wantStatus: records.MigrationRunning, wantPhase: PhaseRevert,
				wantActions: []Action{act(RevertAllocations, "")}},
			step{ev: Event{Kind: Abort}, wantIllegal: true},
		)},
		{name: "post-source failure still hands the guest to the destination, then ends in error there", script: then(toPostSource,
			step{ev: Event{Kind: StepFailed, Err: "source agent gone"}, wantStatus: records.MigrationRunning, wantPhase: PhasePostDest,
				wantActions: []Action{act(PostAtDest, "dst")}},
			step{ev: Event{Kind: DestDone}, wantStatus: records.MigrationRunning, wantPhase: PhaseFinish,
				wantActions: []Action{act(FinishAllocations, "")}},
			step{ev: Event{Kind: Finished}, wantStatus: records.MigrationError, wantPhase: PhaseDone,
				wantActions: []Action{act(SettleInstance, "dst")}, check: all(noOutcome, errContains("source agent gone"), errContains(string(PhasePostSource)))},
		), final: records.MigrationError},
		{name: "both post steps failing keeps both reasons", script: then(toPostSource,
			step{ev: Event{Kind: StepFailed, Err: "source agent gone"}, wantStatus: records.MigrationRunning, wantPhase: PhasePostDest,
				wantActions: []Action{act(PostAtDest, "dst")}},
			step{ev: Event{Kind: StepFailed, Err: "port binding failed"}, wantStatus: records.MigrationRunning, wantPhase: PhaseFinish,
				wantActions: []Action{act(FinishAllocations, "")}},
			step{ev: Event{Kind: Finished}, wantStatus: records.MigrationError, wantPhase: PhaseDone,
				wantActions: []Action{act(SettleInstance, "dst")}, check: all(noOutcome, errContains("source agent gone"), errContains("port binding failed"))},
		), final: records.MigrationError},
		{name: "post-dest failure ends in error on the destination", script: then(toPostDest,
			step{ev: Event{Kind: StepFailed, Err: "dest record write failed"}, wantStatus: records.MigrationRunning, wantPhase: PhaseFinish,
				wantActions: []Action{act(FinishAllocations, "")}},
			step{ev: Event{Kind: Finished}, wantStatus: records.MigrationError, wantPhase: PhaseDone,
				wantActions: []Action{act(SettleInstance, "dst")}, check: all(noOutcome, errContains("dest record write failed"), errContains(string(PhasePostDest)))},
		), final: records.MigrationError},
		{name: "events out of turn are refused", script: []step{
			{ev: Event{Kind: Claimed, Host: "dst"}, wantIllegal: true},
			{ev: Event{Kind: Start}, wantStatus: records.MigrationAccepted, wantPhase: PhaseSchedule,
				wantActions: []Action{act(ClaimDestination, "")}},
			{ev: Event{Kind: Start}, wantIllegal: true},
			{ev: Event{Kind: Copied}, wantIllegal: true},
			{ev: Event{Kind: Progress}, wantIllegal: true},
			{ev: Event{Kind: EventKind("bogus")}, wantIllegal: true},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMigration()
			for _, b := range tc.build {
				b(&m)
			}
			machine := mc
			if tc.mc != nil {
				machine = *tc.mc
			}
			last := run(t, machine, m, tc.script)
			if tc.final != "" && last.Status != tc.final {
				t.Fatalf("ended %q, want %q", last.Status, tc.final)
			}
			if records.MigrationTerminal(last.Status) {
				assertRefusesEverything(t, machine, last)
			}
		})
	}
}

var allEvents = []EventKind{
	Start, Claimed, NoValidHost, CheckPassed, CheckFailed, Released, SlotAcquired, Prepared, PrepareFailed,
	Progress, Copied, CopyFailed, SourceDone, DestDone, Finished, StepFailed, DestRolledBack, Reverted, Abort, ForceComplete, Resume, Stalled, Reset,
}

// assertRefusesEverything checks that a terminal record takes no event.
func assertRefusesEverything(t *testing.T, mc Machine, m records.Migration) {
	t.Helper()
	for _, k := range allEvents {
		next, acts, err := mc.Step(m, Event{Kind: k, Host: "elsewhere", Err: "late"}, time.Time{})
		var ie *IllegalError
		if !errors.As(err, &ie) {
			t.Fatalf("terminal %s migration took %s: err %v", m.Status, k, err)
		}
		if len(acts) != 0 || next.Status != m.Status || next.Phase != m.Phase || next.DestHost != m.DestHost || next.Error != m.Error {
			t.Fatalf("terminal %s migration changed on %s: %+v, actions %v", m.Status, k, next, acts)
		}
	}
}

func TestMachineTerminalStatusesRefuseEveryEvent(t *testing.T) {
	for _, status := range []records.MigrationStatus{records.MigrationCompleted, records.MigrationError, records.MigrationFailed, records.MigrationCancelled} {
		for _, phase := range []records.MigrationPhase{PhaseDone, PhaseCopy, ""} { // even with an inconsistent phase
			t.Run(string(status)+"/"+string(phase), func(t *testing.T) {
				m := newMigration()
				m.Status, m.Phase, m.DestHost = status, phase, "dst"
				assertRefusesEverything(t, Machine{MaxAttempts: 3}, m)
			})
		}
	}
}

func TestIllegalErrorSaysWhat(t *testing.T) {
	m := newMigration()
	m.Status, m.Phase = records.MigrationRunning, PhasePostDest
	_, _, err := Machine{}.Step(m, Event{Kind: Abort}, time.Time{})
	if err == nil {
		t.Fatal("abort in post-dest accepted")
	}
	for _, want := range []string{string(Abort), string(PhasePostDest), string(records.MigrationRunning)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestStepDoesNotAliasTriedHosts: the record returned must not share the
// input's TriedHosts array, or appending to one (a later CheckFailed)
// would write into the other.
func TestStepDoesNotAliasTriedHosts(t *testing.T) {
	mc := Machine{MaxAttempts: 5}
	m := newMigration()
	m.Status, m.Phase, m.DestHost, m.Attempts = records.MigrationAccepted, PhaseCheck, "b", 2
	// Spare capacity so that an in-place append would not reallocate.
	m.TriedHosts = make([]string, 1, 8)
	m.TriedHosts[0] = "a"
	spare := m.TriedHosts[:2]

	next, _, err := mc.Step(m, Event{Kind: CheckFailed, Err: "x"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.TriedHosts) != 1 || spare[1] != "" {
		t.Fatalf("input's backing array written: %v / %q", m.TriedHosts, spare[1])
	}
	if !reflect.DeepEqual(next.TriedHosts, []string{"a", "b"}) {
		t.Fatalf("tried = %v, want [a b]", next.TriedHosts)
	}
	next.TriedHosts[0] = "changed"
	if m.TriedHosts[0] != "a" {
		t.Fatal("output shares the input's TriedHosts array")
	}

	// Even a step that does not touch TriedHosts returns its own copy.
	q := newMigration()
	q.Status, q.Phase, q.DestHost, q.TriedHosts = records.MigrationQueued, PhaseQueue, "b", []string{"a"}
	out, _, err := mc.Step(q, Event{Kind: SlotAcquired}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	out.TriedHosts[0] = "changed"
	if q.TriedHosts[0] != "a" {
		t.Fatal("output shares the input's TriedHosts array")
	}
}

// TestMachineRandomEvents is a property test: any sequence of events,
// legal or not, never panics, a refused event leaves the record as it
// was, a terminal record stays terminal, and every record has a known
// status and phase.
func TestMachineRandomEvents(t *testing.T) {
	knownPhases := map[records.MigrationPhase]bool{"": true, PhaseSchedule: true, PhaseCheck: true, PhaseRelease: true, PhaseQueue: true,
		PhasePrepare: true, PhaseCopy: true, PhasePostSource: true, PhasePostDest: true, PhaseFinish: true,
		PhaseRollbackDest: true, PhaseRevert: true, PhaseDone: true}
	knownStatuses := map[records.MigrationStatus]bool{"": true, records.MigrationAccepted: true, records.MigrationQueued: true,
		records.MigrationPreparing: true, records.MigrationRunning: true, records.MigrationCompleted: true,
		records.MigrationError: true, records.MigrationFailed: true, records.MigrationCancelled: true}
	hosts := []string{"", "a", "b", "c", "src"}

	for seed := uint64(0); seed < 300; seed++ {
		rnd := rand.New(rand.NewPCG(seed, 99))
		mc := Machine{MaxAttempts: rnd.IntN(4)}
		m := newMigration()
		if rnd.IntN(3) == 0 {
			m.RequestedHost = "b"
		}
		var trace []string
		terminal := false
		for i := 0; i < 60; i++ {
			// Mostly legal events, so that runs get deep into the machine.
			var ev Event
			if legal := legalEvents(m.Phase); len(legal) > 0 && rnd.IntN(4) != 0 {
				ev.Kind = legal[rnd.IntN(len(legal))]
			} else {
				ev.Kind = allEvents[rnd.IntN(len(allEvents))]
			}
			ev.Host = hosts[rnd.IntN(len(hosts))]
			ev.Err = fmt.Sprintf("err%d", i)
			trace = append(trace, string(ev.Kind))

			before := cloneMigration(m)
			next, acts, err := stepNoPanic(t, mc, m, ev, seed, trace)
			if !reflect.DeepEqual(m, before) {
				t.Fatalf("seed %d %v: input mutated", seed, trace)
			}
			if err != nil {
				if !reflect.DeepEqual(normalize(next), normalize(m)) {
					t.Fatalf("seed %d %v: refused event changed the record", seed, trace)
				}
				continue
			}
			if terminal {
				t.Fatalf("seed %d %v: terminal record took an event", seed, trace)
			}
			if !knownStatuses[next.Status] || !knownPhases[next.Phase] {
				t.Fatalf("seed %d %v: unknown status/phase %q/%q", seed, trace, next.Status, next.Phase)
			}
			if records.MigrationTerminal(next.Status) != (next.Phase == PhaseDone) {
				t.Fatalf("seed %d %v: status %q with phase %q", seed, trace, next.Status, next.Phase)
			}
			if records.MigrationTerminal(next.Status) {
				terminal = true
				if len(acts) != 1 || acts[0].Kind != SettleInstance {
					t.Fatalf("seed %d %v: terminal step actions %v, want one settle-instance", seed, trace, acts)
				}
				if next.Outcome != "" {
					t.Fatalf("seed %d %v: terminal record keeps outcome %q", seed, trace, next.Outcome)
				}
			}
			if next.Attempts > max(mc.MaxAttempts, 1) {
				t.Fatalf("seed %d %v: %d attempts with max %d", seed, trace, next.Attempts, mc.MaxAttempts)
			}
			// The agents' predicate (agent.go) agrees with the machine: a
			// step that casts the copy leaves the record SourceCopying, and
			// a SourceCopying record takes the copy's end either way.
			if slices.ContainsFunc(acts, func(a Action) bool { return a.Kind == StartCopy }) && !SourceCopying(next) {
				t.Fatalf("seed %d %v: start-copy cast from a record not SourceCopying (%q/%q)", seed, trace, next.Phase, next.Status)
			}
			if SourceCopying(next) {
				for _, end := range []EventKind{Copied, CopyFailed} {
					if _, _, err := mc.Step(next, Event{Kind: end}, time.Time{}); err != nil {
						t.Fatalf("seed %d %v: a SourceCopying record refuses %s: %v", seed, trace, end, err)
					}
				}
			}
			m = next
		}
	}
}

func stepNoPanic(t *testing.T, mc Machine, m records.Migration, ev Event, seed uint64, trace []string) (next records.Migration, acts []Action, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("seed %d %v: Step panicked: %v", seed, trace, r)
		}
	}()
	return mc.Step(m, ev, time.Time{})
}

// legalEvents lists the events the transition table accepts in a phase.
func legalEvents(phase records.MigrationPhase) []EventKind {
	var out []EventKind
	for _, k := range allEvents {
		if _, ok := transitions[transitionKey{phase, k}]; ok {
			out = append(out, k)
		}
	}
	return out
}

// TestResumeAfterARestart: each phase's answer to Resume (recovery after a
// restart of the server), then the rest of the way to a terminal status.
func TestResumeAfterARestart(t *testing.T) {
	mc := Machine{MaxAttempts: 3}
	at := func(phase records.MigrationPhase, status records.MigrationStatus) records.Migration {
		m := newMigration()
		m.Phase, m.Status, m.DestHost = phase, status, "dst"
		return m
	}
	rollBack := []step{
		{ev: Event{Kind: Reverted}, wantStatus: records.MigrationError, wantPhase: PhaseDone, wantActions: []Action{act(SettleInstance, "src")}},
	}
	cases := []struct {
		name   string
		m      records.Migration
		script []step
	}{
		{"no step saved (recorded with its task, then the server died): end it", at("", ""), append([]step{
			{ev: Event{Kind: Resume}, wantStatus: "", wantPhase: PhaseRevert, wantActions: []Action{act(RevertAllocations, "")}},
		}, rollBack...)},
		{"schedule: give back a claim that may have committed", at(PhaseSchedule, records.MigrationAccepted), append([]step{
			{ev: Event{Kind: Resume}, wantStatus: records.MigrationAccepted, wantPhase: PhaseRevert, wantActions: []Action{act(RevertAllocations, "")}},
		}, rollBack...)},
		{"queue: never started, roll back", at(PhaseQueue, records.MigrationQueued), append([]step{
			{ev: Event{Kind: Resume}, wantStatus: records.MigrationQueued, wantPhase: PhaseRevert, wantActions: []Action{act(RevertAllocations, "")}},
		}, rollBack...)},
		{"prepare: undo what the destination set up", at(PhasePrepare, records.MigrationPreparing), append([]step{
			// The slot is freed too: a no-op after a restart, and what a
			// stalled migration on a live replica needs.
			{ev: Event{Kind: Resume}, wantStatus: records.MigrationPreparing, wantPhase: PhaseRollbackDest, wantActions: []Action{act(ReleaseSlot, "src"), act(RollbackAtDest, "dst")}},
			{ev: Event{Kind: DestRolledBack}, wantStatus: records.MigrationPreparing, wantPhase: PhaseRevert, wantActions: []Action{act(RevertAllocations, "")}},
		}, rollBack...)},
		{"copy: count the slot again and ask the source for its copy", at(PhaseCopy, records.MigrationRunning), []step{
			{ev: Event{Kind: Resume}, wantStatus: records.MigrationRunning, wantPhase: PhaseCopy, wantActions: []Action{act(HoldSlot, "src"), act(CheckCopy, "src")}},
			{ev: Event{Kind: Copied}, wantStatus: records.MigrationRunning, wantPhase: PhasePostSource,
				wantActions: []Action{act(ReleaseSlot, "src"), act(PostAtSource, "src")}},
		}},
		{"post at source: repeat it", at(PhasePostSource, records.MigrationRunning), []step{
			{ev: Event{Kind: Resume}, wantStatus: records.MigrationRunning, wantPhase: PhasePostSource, wantActions: []Action{act(PostAtSource, "src")}},
			{ev: Event{Kind: SourceDone}, wantStatus: records.MigrationRunning, wantPhase: PhasePostDest, wantActions: []Action{act(PostAtDest, "dst")}},
		}},
		{"post at destination: repeat it", at(PhasePostDest, records.MigrationRunning), []step{
			{ev: Event{Kind: Resume}, wantStatus: records.MigrationRunning, wantPhase: PhasePostDest, wantActions: []Action{act(PostAtDest, "dst")}},
		}},
		{"finish: repeat it and complete", at(PhaseFinish, records.MigrationRunning), []step{
			{ev: Event{Kind: Resume}, wantStatus: records.MigrationRunning, wantPhase: PhaseFinish, wantActions: []Action{act(FinishAllocations, "")}},
			{ev: Event{Kind: Finished}, wantStatus: records.MigrationCompleted, wantPhase: PhaseDone, wantActions: []Action{act(SettleInstance, "dst")}},
		}},
		{"rollback at destination: repeat it", at(PhaseRollbackDest, records.MigrationRunning), []step{
			{ev: Event{Kind: Resume}, wantStatus: records.MigrationRunning, wantPhase: PhaseRollbackDest, wantActions: []Action{act(RollbackAtDest, "dst")}},
		}},
		{"revert: repeat it", at(PhaseRevert, records.MigrationRunning), []step{
			{ev: Event{Kind: Resume}, wantStatus: records.MigrationRunning, wantPhase: PhaseRevert, wantActions: []Action{act(RevertAllocations, "")}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { run(t, mc, tc.m, tc.script) })
	}
}

// TestStalledAndReset: the sweep's Stalled in the copy, and an operator's
// Reset in every phase, each to its end with the allocations put right.
func TestStalledAndReset(t *testing.T) {
	mc := Machine{MaxAttempts: 3}
	at := func(phase records.MigrationPhase, status records.MigrationStatus) records.Migration {
		m := newMigration()
		m.Phase, m.Status, m.DestHost = phase, status, "dst"
		return m
	}
	back := []step{
		{ev: Event{Kind: DestRolledBack}, wantStatus: records.MigrationRunning, wantPhase: PhaseRevert, wantActions: []Action{act(RevertAllocations, "")}},
		{ev: Event{Kind: Reverted}, wantStatus: records.MigrationError, wantPhase: PhaseDone, wantActions: []Action{act(SettleInstance, "src")}},
	}
	cases := []struct {
		name   string
		m      records.Migration
		script []step
		reason string
	}{
		{"stalled copy: abort, free the slot, roll back", at(PhaseCopy, records.MigrationRunning), append([]step{
			{ev: Event{Kind: Stalled, Err: "none for 5m0s"}, wantStatus: records.MigrationRunning, wantPhase: PhaseRollbackDest,
				wantActions: []Action{act(AbortCopy, "src"), act(ReleaseSlot, "src"), act(RollbackAtDest, "dst")}},
		}, back...), "no progress report from the source src: none for 5m0s"},
		{"reset while queued", at(PhaseQueue, records.MigrationQueued), []step{
			{ev: Event{Kind: Reset}, wantStatus: records.MigrationQueued, wantPhase: PhaseRevert, wantActions: []Action{act(ReleaseSlot, "src"), act(RevertAllocations, "")}},
			{ev: Event{Kind: Reverted}, wantStatus: records.MigrationError, wantPhase: PhaseDone, wantActions: []Action{act(SettleInstance, "src")}},
		}, resetByOperator},
		{"reset while preparing", at(PhasePrepare, records.MigrationPreparing), []step{
			{ev: Event{Kind: Reset}, wantStatus: records.MigrationPreparing, wantPhase: PhaseRollbackDest, wantActions: []Action{act(ReleaseSlot, "src"), act(RollbackAtDest, "dst")}},
			{ev: Event{Kind: DestRolledBack}, wantStatus: records.MigrationPreparing, wantPhase: PhaseRevert, wantActions: []Action{act(RevertAllocations, "")}},
			{ev: Event{Kind: Reverted}, wantStatus: records.MigrationError, wantPhase: PhaseDone, wantActions: []Action{act(SettleInstance, "src")}},
		}, resetByOperator},
		{"reset during the copy", at(PhaseCopy, records.MigrationRunning), append([]step{
			{ev: Event{Kind: Reset}, wantStatus: records.MigrationRunning, wantPhase: PhaseRollbackDest,
				wantActions: []Action{act(AbortCopy, "src"), act(ReleaseSlot, "src"), act(RollbackAtDest, "dst")}},
		}, back...), resetByOperator},
		{"reset after the copy finishes on the destination", at(PhasePostSource, records.MigrationRunning), []step{
			{ev: Event{Kind: Reset}, wantStatus: records.MigrationRunning, wantPhase: PhaseFinish, wantActions: []Action{act(FinishAllocations, "")}},
			{ev: Event{Kind: Finished}, wantStatus: records.MigrationError, wantPhase: PhaseDone, wantActions: []Action{act(SettleInstance, "dst")}},
		}, resetByOperator},
		{"reset while reverting repeats the revert", at(PhaseRevert, records.MigrationRunning), []step{
			{ev: Event{Kind: Reset}, wantStatus: records.MigrationRunning, wantPhase: PhaseRevert, wantActions: []Action{act(RevertAllocations, "")}},
			{ev: Event{Kind: Reverted}, wantStatus: records.MigrationError, wantPhase: PhaseDone, wantActions: []Action{act(SettleInstance, "src")}},
		}, resetByOperator},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			end := run(t, mc, tc.m, tc.script)
			if !strings.Contains(end.Error, tc.reason) {
				t.Fatalf("error %q does not say %q", end.Error, tc.reason)
			}
		})
	}
	// Stalled is accepted only in the copy.
	for _, phase := range []records.MigrationPhase{PhaseQueue, PhasePrepare, PhasePostSource, PhaseRevert} {
		if _, _, err := mc.Step(at(phase, records.MigrationRunning), Event{Kind: Stalled}, time.Time{}); err == nil {
			t.Errorf("Stalled accepted in %s", phase)
		}
	}
}

// TestColdMoveScripts: the cold migration / resize machine as data — the
// happy paths to confirmed and reverted, a failure before the guest ran
// on the destination, and what Resume does in each waiting phase.
func TestColdMoveScripts(t *testing.T) {
	mc := Machine{MaxAttempts: 3}
	small, medium := records.Flavor{ID: "s", RAMMB: 1}, records.Flavor{ID: "m", RAMMB: 2}
	fresh := func(from records.VMState) records.Migration {
		m := newMigration()
		m.Type, m.OldFlavor, m.NewFlavor, m.OldVMState = records.MigrationTypeResize, &small, &medium, from
		return m
	}
	settle := func(host string, f *records.Flavor, vm records.VMState) Action {
		a := Action{Kind: SettleInstance, Host: host, Flavor: f, VMState: vm}
		if vm == records.VMResized {
			a.PowerState = records.PowerRunning
		}
		return a
	}
	toVerify := []step{
		{ev: Event{Kind: Start}, wantStatus: records.MigrationAccepted, wantPhase: PhaseSchedule, wantActions: []Action{act(ClaimDestination, "")}},
		{ev: Event{Kind: Claimed, Host: "dst"}, wantStatus: records.MigrationPreMigrating, wantPhase: PhasePrepResize, wantActions: []Action{act(PrepResize, "dst")}},
		{ev: Event{Kind: Prepared}, wantStatus: records.MigrationMigrating, wantPhase: PhaseResizeSource, wantActions: []Action{act(ResizeInstance, "src")}},
		{ev: Event{Kind: Resume}, wantStatus: records.MigrationMigrating, wantPhase: PhaseResizeSource, wantActions: []Action{act(CheckCopy, "src")}},
		{ev: Event{Kind: Copied}, wantStatus: records.MigrationPostMigrating, wantPhase: PhaseFinishResize, wantActions: []Action{act(FinishResize, "dst")}},
		{ev: Event{Kind: DestDone}, wantStatus: records.MigrationFinished, wantPhase: PhaseVerify, wantActions: []Action{settle("dst", &medium, records.VMResized)}},
		{ev: Event{Kind: Resume}, wantStatus: records.MigrationFinished, wantPhase: PhaseVerify},
		{ev: Event{Kind: Abort}, wantIllegal: true},
	}
	confirm := append(append([]step{}, toVerify...),
		step{ev: Event{Kind: Confirm}, wantStatus: records.MigrationConfirming, wantPhase: PhaseConfirmSource, wantActions: []Action{act(ConfirmAtSource, "src")}},
		step{ev: Event{Kind: SourceDone}, wantStatus: records.MigrationConfirming, wantPhase: PhaseFinish, wantActions: []Action{act(FinishAllocations, "")}},
		step{ev: Event{Kind: Finished}, wantStatus: records.MigrationConfirmed, wantPhase: PhaseDone, wantActions: []Action{settle("dst", nil, records.VMActive)}},
	)
	revert := append(append([]step{}, toVerify...),
		step{ev: Event{Kind: RevertResize}, wantStatus: records.MigrationReverting, wantPhase: PhaseRevertDest, wantActions: []Action{act(RevertAtDest, "dst")}},
		step{ev: Event{Kind: DestRolledBack}, wantStatus: records.MigrationReverting, wantPhase: PhaseRevertSource, wantActions: []Action{act(FinishRevertAtSource, "src")}},
		step{ev: Event{Kind: SourceDone}, wantStatus: records.MigrationReverting, wantPhase: PhaseRevert, wantActions: []Action{act(RevertAllocations, "")}},
		step{ev: Event{Kind: Reverted}, wantStatus: records.MigrationReverted, wantPhase: PhaseDone, wantActions: []Action{settle("src", &small, records.VMActive)}},
	)
	failed := append(append([]step{}, toVerify[:3]...),
		step{ev: Event{Kind: CopyFailed, Err: "disk"}, wantStatus: records.MigrationMigrating, wantPhase: PhaseRollbackDest, wantActions: []Action{act(RevertAtDest, "dst")}},
		step{ev: Event{Kind: DestRolledBack}, wantStatus: records.MigrationMigrating, wantPhase: PhaseRestartSource, wantActions: []Action{act(FinishRevertAtSource, "src")}},
		step{ev: Event{Kind: StepFailed, Err: "no start"}, wantStatus: records.MigrationMigrating, wantPhase: PhaseRevertLost, wantActions: []Action{act(RevertAllocations, "")}},
		step{ev: Event{Kind: Reverted}, wantStatus: records.MigrationError, wantPhase: PhaseDone, wantActions: []Action{settle("src", &small, records.VMError)}},
	)
	// A copy the source never started (the server was killed before its
	// cast) is reported ended by the source when the resumed move asks
	// (CheckCopy): rolled back, interrupted — keel's restart, not the move.
	interrupted := func(want bool) func(t *testing.T, m records.Migration) {
		return func(t *testing.T, m records.Migration) {
			if m.Interrupted != want {
				t.Fatalf("interrupted %v, want %v", m.Interrupted, want)
			}
		}
	}
	failed[3].check = interrupted(false)
	neverStarted := append(append([]step{}, toVerify[:4]...),
		step{ev: Event{Kind: CopyFailed, Err: "no copy", Restarted: true}, wantStatus: records.MigrationMigrating, wantPhase: PhaseRollbackDest,
			wantActions: []Action{act(RevertAtDest, "dst")}, check: interrupted(true)},
		step{ev: Event{Kind: DestRolledBack}, wantStatus: records.MigrationMigrating, wantPhase: PhaseRestartSource, wantActions: []Action{act(FinishRevertAtSource, "src")}},
		step{ev: Event{Kind: SourceDone}, wantStatus: records.MigrationMigrating, wantPhase: PhaseRevert, wantActions: []Action{act(RevertAllocations, "")}},
		step{ev: Event{Kind: Reverted}, wantStatus: records.MigrationFailed, wantPhase: PhaseDone, wantActions: []Action{settle("src", &small, records.VMActive)},
			check: interrupted(true)},
	)
	for name, script := range map[string][]step{"confirm": confirm, "revert": revert, "failed copy, guest lost": failed, "copy never started": neverStarted} {
		t.Run(name, func(t *testing.T) {
			end := run(t, mc, fresh(records.VMActive), script)
			assertRefusesEverything(t, mc, end)
		})
	}
	// A stopped server: VERIFY_RESIZE powered off, and stopped again
	// after a confirm, a revert or a rolled-back copy.
	stopped := func(script []step) []step {
		out := append([]step{}, script...)
		for i, s := range out {
			if len(s.wantActions) == 1 && s.wantActions[0].Kind == SettleInstance {
				a := s.wantActions[0]
				switch a.VMState {
				case records.VMResized:
					a.PowerState = records.PowerShutdown
				case records.VMActive:
					a.VMState = records.VMStopped
				}
				out[i].wantActions = []Action{a}
			}
		}
		return out
	}
	failedStopped := append(append([]step{}, toVerify[:3]...),
		step{ev: Event{Kind: CopyFailed, Err: "disk"}, wantStatus: records.MigrationMigrating, wantPhase: PhaseRollbackDest, wantActions: []Action{act(RevertAtDest, "dst")}},
		step{ev: Event{Kind: DestRolledBack}, wantStatus: records.MigrationMigrating, wantPhase: PhaseRestartSource, wantActions: []Action{act(FinishRevertAtSource, "src")}},
		step{ev: Event{Kind: SourceDone}, wantStatus: records.MigrationMigrating, wantPhase: PhaseRevert, wantActions: []Action{act(RevertAllocations, "")}},
		step{ev: Event{Kind: Reverted}, wantStatus: records.MigrationFailed, wantPhase: PhaseDone, wantActions: []Action{settle("src", &small, records.VMStopped)}},
	)
	for name, script := range map[string][]step{"stopped confirm": stopped(confirm), "stopped revert": stopped(revert), "stopped failed copy": failedStopped, "stopped, guest lost": failed} {
		t.Run(name, func(t *testing.T) {
			end := run(t, mc, fresh(records.VMStopped), script)
			assertRefusesEverything(t, mc, end)
		})
	}
}

// TestDeadline: the move machines own their timeouts; a Stalled copy's
// reason says how long it went without a report, from the record's last
// save to the step's time.
func TestDeadline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mc := Machine{MaxAttempts: 3, CopyStallTimeout: 4 * time.Second, ConfirmWindow: time.Hour, StallAfter: time.Minute}
	mig := func(typ string, phase records.MigrationPhase, status records.MigrationStatus) records.Migration {
		return records.Migration{ID: 1, Type: typ, Phase: phase, Status: status, SourceHost: "h1", DestHost: "h2", UpdatedAt: t0}
	}
	for _, tc := range []struct {
		name   string
		m      records.Migration
		mc     Machine
		when   time.Time
		ev     EventKind
		reason string
		none   bool
	}{
		{name: "live copy without a report: stalled", m: mig(records.MigrationTypeLive, PhaseCopy, records.MigrationRunning), mc: mc,
			when: t0.Add(4 * time.Second), ev: Stalled, reason: "none for 5s (migration_stall_timeout)"},
		{name: "no stall timeout: the copy waits", m: mig(records.MigrationTypeLive, PhaseCopy, records.MigrationRunning), mc: Machine{StallAfter: time.Minute}, none: true},
		{name: "rebuild without a report: stalled", m: mig(records.MigrationTypeEvac, PhaseRebuild, records.MigrationPreMigrating), mc: mc,
			when: t0.Add(4 * time.Second), ev: Stalled, reason: "no report from the destination for 5s"},
		{name: "verify past the window: confirmed", m: mig(records.MigrationTypeResize, PhaseVerify, records.MigrationFinished), mc: mc,
			when: t0.Add(time.Hour), ev: Confirm},
		{name: "verify without a window: the user's", m: mig(records.MigrationTypeResize, PhaseVerify, records.MigrationFinished), mc: Machine{StallAfter: time.Minute}, none: true},
		{name: "evacuated source: every sweep", m: mig(records.MigrationTypeEvac, PhaseAwaitSource, records.MigrationDone), mc: mc, ev: SourceBack},
		{name: "prepare stalled: resumed", m: mig(records.MigrationTypeLive, PhasePrepare, records.MigrationPreparing), mc: mc,
			when: t0.Add(time.Minute), ev: Resume},
		{name: "no step saved: resumed", m: mig(records.MigrationTypeLive, "", ""), mc: mc,
			when: t0.Add(time.Minute), ev: Resume, reason: "before the memory copy began"},
		{name: "cold move, no step saved: resumed", m: mig(records.MigrationTypeCold, "", ""), mc: mc,
			when: t0.Add(time.Minute), ev: Resume, reason: "before the memory copy began"},
		{name: "evacuation, no step saved: resumed", m: mig(records.MigrationTypeEvac, "", ""), mc: mc,
			when: t0.Add(time.Minute), ev: Resume, reason: "before the memory copy began"},
		{name: "ended: nothing", m: mig(records.MigrationTypeLive, PhaseDone, records.MigrationCompleted), mc: mc, none: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			when, ev, ok := tc.mc.Deadline(tc.m, t0.Add(5*time.Second))
			if tc.none {
				if ok {
					t.Fatalf("deadline %s %s, want none", when, ev.Kind)
				}
				return
			}
			if !ok || !when.Equal(tc.when) || ev.Kind != tc.ev {
				t.Fatalf("deadline %v %s %s, want %s %s", ok, when, ev.Kind, tc.when, tc.ev)
			}
			next, _, err := tc.mc.Step(tc.m, ev, t0.Add(5*time.Second))
			if err != nil {
				t.Fatalf("the deadline's event is refused: %v", err)
			}
			if !strings.Contains(next.Error, tc.reason) {
				t.Fatalf("error %q does not say %q", next.Error, tc.reason)
			}
		})
	}
}
