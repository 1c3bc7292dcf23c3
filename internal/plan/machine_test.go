package plan

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"keel/internal/records"
)

var t0 = time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)

func drain(moves ...records.PlanMove) records.Plan {
	for i := range moves {
		moves[i].State = records.MovePending
	}
	return records.Plan{ID: 7, Purpose: records.PlanDrain, State: records.PlanApproved, Hosts: []string{"h01"}, Moves: moves}
}

func mv(inst, src string, ram int64) records.PlanMove {
	return records.PlanMove{Instance: inst, Source: src, RAMMB: ram}
}

// run steps a script of events, failing on a refused one, and returns the
// plan and every action, in order.
func run(t *testing.T, m Machine, p records.Plan, evs ...Event) (records.Plan, []Action) {
	t.Helper()
	var all []Action
	for i, ev := range evs {
		ev.Now = t0.Add(time.Duration(i) * time.Second)
		next, acts, err := m.Step(p, ev)
		if err != nil {
			t.Fatalf("event %d (%s move %d): %v", i, ev.Kind, ev.Move, err)
		}
		p, all = next, append(all, acts...)
	}
	return p, all
}

func states(p records.Plan) string {
	var s []string
	for _, mv := range p.Moves {
		s = append(s, string(mv.State))
	}
	return strings.Join(s, ",")
}

func TestDrainRunsToDone(t *testing.T) {
	p, acts := run(t, Machine{}, drain(mv("a", "h01", 4096), mv("b", "h01", 2048)),
		Event{Kind: Run},
		Event{Kind: Begin, Move: 0}, Event{Kind: Begin, Move: 1},
		Event{Kind: Started, Move: 0, Migration: 11}, Event{Kind: Started, Move: 1, Migration: 12},
		Event{Kind: Progress, Move: 0, Bytes: 1 << 30},
		Event{Kind: Ended, Move: 1, Migration: 12, Status: records.MigrationCompleted, Host: "h05", Bytes: 2 << 30},
		Event{Kind: Ended, Move: 0, Migration: 11, Status: records.MigrationCompleted, Host: "h03", Bytes: 4 << 30},
	)
	if p.State != records.PlanDone || states(p) != "done,done" {
		t.Fatalf("plan %s moves %s, want done with done,done", p.State, states(p))
	}
	if p.Moves[0].Result != "h03" || p.Moves[1].Result != "h05" || p.Moves[0].BytesCopied != 4<<30 {
		t.Errorf("results %+v", p.Moves)
	}
	want := []Action{{Kind: StartMove, Move: 0}, {Kind: StartMove, Move: 1}, {Kind: Finished}}
	if !reflect.DeepEqual(acts, want) {
		t.Errorf("actions %+v, want %+v", acts, want)
	}
	if p.StartedAt != t0 || p.FinishedAt != t0.Add(7*time.Second) {
		t.Errorf("started %v finished %v", p.StartedAt, p.FinishedAt)
	}
}

func TestFailedMoveIsRetriedThenFails(t *testing.T) {
	p, acts := run(t, Machine{}, drain(mv("a", "h01", 4096), mv("b", "h01", 1024)),
		Event{Kind: Run},
		Event{Kind: Begin, Move: 0}, Event{Kind: Started, Move: 0, Migration: 1},
		Event{Kind: Ended, Move: 0, Migration: 1, Status: records.MigrationError, Reason: "destination h04 went down"},
	)
	if p.Moves[0].State != records.MovePending || p.Moves[0].Attempts != 1 || !strings.Contains(p.Moves[0].Reason, "h04 went down") {
		t.Fatalf("after the first failure: %+v", p.Moves[0])
	}
	p, acts2 := run(t, Machine{}, p,
		Event{Kind: Begin, Move: 0}, Event{Kind: Started, Move: 0, Migration: 2},
		Event{Kind: Ended, Move: 0, Migration: 2, Status: records.MigrationFailed, Reason: "copy failed"},
		Event{Kind: Begin, Move: 1}, Event{Kind: Started, Move: 1, Migration: 3},
		Event{Kind: Ended, Move: 1, Migration: 3, Status: records.MigrationCompleted, Host: "h02"},
	)
	if p.State != records.PlanFailed || states(p) != "failed,done" || p.Reason != "1 of 2 moves failed" {
		t.Fatalf("plan %s (%s) moves %s", p.State, p.Reason, states(p))
	}
	if !strings.Contains(p.Moves[0].Reason, "migration 2 ended failed: copy failed") {
		t.Errorf("failed move's reason %q", p.Moves[0].Reason)
	}
	if n := len(append(acts, acts2...)); n != 4 { // three starts and the end
		t.Errorf("%d actions, want 4", n)
	}
}

func TestColdFallbackAfterLiveAttempts(t *testing.T) {
	p := drain(mv("a", "h01", 4096))
	p.Options.ColdFallback = true
	p, acts := run(t, Machine{MaxAttempts: 1}, p,
		Event{Kind: Run}, Event{Kind: Begin, Move: 0}, Event{Kind: Started, Move: 0, Migration: 1},
		Event{Kind: Ended, Move: 0, Migration: 1, Status: records.MigrationError, Reason: "cannot live-migrate"},
	)
	if p.Moves[0].State != records.MoveStarting || !p.Moves[0].Cold {
		t.Fatalf("move after the live failure: %+v", p.Moves[0])
	}
	if last := acts[len(acts)-1]; last != (Action{Kind: StartMove, Move: 0, Cold: true}) {
		t.Fatalf("last action %+v, want a cold start", last)
	}
	// A failed cold migration is not retried: the move fails.
	p, _ = run(t, Machine{MaxAttempts: 1}, p,
		Event{Kind: Started, Move: 0, Migration: 2},
		Event{Kind: Ended, Move: 0, Migration: 2, Status: records.MigrationError, Reason: "disk copy failed"})
	if p.State != records.PlanFailed || p.Moves[0].State != records.MoveFailed {
		t.Fatalf("plan %s move %s", p.State, p.Moves[0].State)
	}
}

func TestCancelLetsRunningFinishOrAborts(t *testing.T) {
	start := []Event{{Kind: Run}, {Kind: Begin, Move: 0}, {Kind: Started, Move: 0, Migration: 5}}
	for _, abort := range []bool{false, true} {
		p, _ := run(t, Machine{}, drain(mv("a", "h01", 1), mv("b", "h01", 1)), start...)
		p, acts := run(t, Machine{}, p, Event{Kind: Cancel, Abort: abort})
		if p.State != records.PlanRunning || !p.CancelRequested || states(p) != "running,cancelled" {
			t.Fatalf("abort=%v: plan %s moves %s", abort, p.State, states(p))
		}
		wantActs := []Action(nil)
		if abort {
			wantActs = []Action{{Kind: AbortMove, Move: 0, Migration: 5}}
		}
		if !reflect.DeepEqual(acts, wantActs) {
			t.Errorf("abort=%v: actions %+v, want %+v", abort, acts, wantActs)
		}
		if _, _, err := (Machine{}).Step(p, Event{Kind: Begin, Move: 1}); err == nil {
			t.Errorf("abort=%v: a move began in a cancelled plan", abort)
		}
		status := records.MigrationCompleted
		if abort {
			status = records.MigrationCancelled
		}
		p, _ = run(t, Machine{}, p, Event{Kind: Ended, Move: 0, Migration: 5, Status: status, Host: "h02"})
		if p.State != records.PlanCancelled {
			t.Errorf("abort=%v: plan ended %s, want cancelled", abort, p.State)
		}
		if want := map[bool]records.MoveState{false: records.MoveDone, true: records.MoveCancelled}[abort]; p.Moves[0].State != want {
			t.Errorf("abort=%v: running move ended %s, want %s", abort, p.Moves[0].State, want)
		}
	}
}

func TestResumeFindsStartingMoves(t *testing.T) {
	p, _ := run(t, Machine{}, drain(mv("a", "h01", 1), mv("b", "h01", 1), mv("c", "h01", 1)),
		Event{Kind: Run}, Event{Kind: Begin, Move: 0}, Event{Kind: Begin, Move: 1}, Event{Kind: Started, Move: 1, Migration: 9})
	p, acts := run(t, Machine{}, p, Event{Kind: Resume})
	if !reflect.DeepEqual(acts, []Action{{Kind: FindMigration, Move: 0}}) {
		t.Fatalf("resume actions %+v", acts)
	}
	p, _ = run(t, Machine{}, p, Event{Kind: Lost, Move: 0})
	if p.Moves[0].State != records.MovePending || p.Moves[0].Attempts != 0 {
		t.Fatalf("lost move %+v, want pending with no attempt counted", p.Moves[0])
	}
	p, _ = run(t, Machine{}, p, Event{Kind: Begin, Move: 2}, Event{Kind: Deferred, Move: 2, Reason: "arriving"})
	if p.Moves[2].State != records.MovePending || p.Moves[2].Attempts != 0 || p.Moves[2].Reason != "arriving" {
		t.Fatalf("deferred move %+v, want pending with no attempt counted", p.Moves[2])
	}
}

func TestRefusedMoveIsSkippedOrFailsAndStopPolicy(t *testing.T) {
	p := drain(mv("a", "h01", 1), mv("b", "h01", 1), mv("c", "h01", 1))
	p.Options.StopOnFailure = true
	p, _ = run(t, Machine{}, p, Event{Kind: Run}, Event{Kind: Begin, Move: 0},
		Event{Kind: Refused, Move: 0, Skip: true, Reason: "instance a is on h09, not h01"})
	if p.Moves[0].State != records.MoveSkipped || p.State != records.PlanRunning {
		t.Fatalf("skipped: plan %s move %+v", p.State, p.Moves[0])
	}
	p, _ = run(t, Machine{}, p, Event{Kind: Begin, Move: 1}, Event{Kind: Refused, Move: 1, Reason: "no valid host"})
	if p.State != records.PlanFailed || states(p) != "skipped,failed,cancelled" || p.Reason != "stopped: move 1 failed" {
		t.Fatalf("plan %s (%s) moves %s", p.State, p.Reason, states(p))
	}
}

func TestIllegalEvents(t *testing.T) {
	p := drain(mv("a", "h01", 1))
	cases := []struct {
		name string
		p    records.Plan
		ev   Event
	}{
		{"begin before run", p, Event{Kind: Begin}},
		{"approve an approved plan", p, Event{Kind: Approve}},
		{"no such move", func() records.Plan { q := p; q.State = records.PlanRunning; return q }(), Event{Kind: Begin, Move: 3}},
		{"started a pending move", func() records.Plan { q := p; q.State = records.PlanRunning; return q }(), Event{Kind: Started}},
		{"ended plan", func() records.Plan { q := p; q.State = records.PlanDone; return q }(), Event{Kind: Cancel}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := (Machine{}).Step(c.p, c.ev)
			var ill *IllegalError
			if !errors.As(err, &ill) {
				t.Fatalf("err = %v, want an IllegalError", err)
			}
		})
	}
	// Step never changes its input's moves.
	q := p
	q.State = records.PlanRunning
	if _, _, err := (Machine{}).Step(q, Event{Kind: Begin}); err != nil || q.Moves[0].State != records.MovePending {
		t.Fatalf("input changed: %v %s", err, q.Moves[0].State)
	}
}

func TestSelectHonoursCapsAndPriority(t *testing.T) {
	running := func(id int64, purpose string, parallel int, moves ...records.PlanMove) records.Plan {
		p := drain(moves...)
		p.ID, p.Purpose, p.State, p.Options.Parallel = id, purpose, records.PlanRunning, parallel
		return p
	}
	reb := running(1, records.PlanRebalance, 0, records.PlanMove{Instance: "r", Source: "h05", Dest: "h06"})
	dr := running(2, records.PlanDrain, 3, mv("a", "h01", 1), mv("b", "h01", 1), mv("c", "h02", 1), mv("d", "h03", 1), mv("e", "h04", 1))
	cases := []struct {
		name string
		u    Usage
		caps Caps
		want []Pick
	}{
		{"per source 1: one per host, the plan's parallel 3", Usage{}, Caps{PerSource: 1},
			[]Pick{{2, 0}, {2, 2}, {2, 3}, {1, 0}}},
		{"total 2: the drain first", Usage{}, Caps{PerSource: 1, Total: 2}, []Pick{{2, 0}, {2, 2}}},
		{"busy source and full destination", Usage{BySource: map[string]int{"h01": 1}, ByDest: map[string]int{"h06": 2}, Total: 3},
			Caps{PerSource: 1, PerDest: 2}, []Pick{{2, 2}, {2, 3}, {2, 4}}},
		{"per source 2", Usage{}, Caps{PerSource: 2}, []Pick{{2, 0}, {2, 1}, {2, 2}, {1, 0}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Select([]records.Plan{reb, dr}, &c.u, c.caps)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("picks %v, want %v", got, c.want)
			}
		})
	}
	// A plan's moves already in flight count against its parallelism.
	dr.Moves[4].State = records.MoveRunning
	dr.Moves[3].State = records.MoveStarting
	if got := Select([]records.Plan{dr}, &Usage{}, Caps{}); !reflect.DeepEqual(got, []Pick{{2, 0}}) {
		t.Fatalf("with two in flight, picks %v", got)
	}
}

func TestOrderAndSummary(t *testing.T) {
	moves := []records.PlanMove{mv("s", "h", 512), mv("l", "h", 8192), mv("m", "h", 2048), mv("l2", "h", 8192)}
	if err := Order(moves, "largest"); err != nil || moves[0].Instance != "l" || moves[1].Instance != "l2" || moves[3].Instance != "s" {
		t.Fatalf("largest: %v %+v", err, moves)
	}
	if err := Order(moves, "smallest"); err != nil || moves[0].Instance != "s" || moves[3].Instance != "l2" {
		t.Fatalf("smallest: %+v", moves)
	}
	if err := Order(moves, "random"); err == nil {
		t.Fatal("unknown order accepted")
	}
	p := records.Plan{State: records.PlanRunning, StartedAt: t0, Moves: []records.PlanMove{
		{State: records.MoveDone, RAMMB: 1024, BytesCopied: 1 << 30},
		{State: records.MoveRunning, RAMMB: 2048, BytesCopied: 1 << 30},
		{State: records.MovePending, RAMMB: 1024},
		{State: records.MoveFailed, RAMMB: 1024},
	}}
	s := Summarise(p, t0.Add(2*time.Second))
	if s.Done != 1 || s.Running != 1 || s.Left != 1 || s.Failed != 1 || s.BytesCopied != 2<<30 || s.BytesLeft != 2<<30 {
		t.Fatalf("summary %+v", s)
	}
	// 2 GiB in 2 s: 1 GiB/s, 2 GiB left: 2 s.
	if s.RateBytesPerSec != 1<<30 || s.ETA != 2*time.Second {
		t.Fatalf("rate %v eta %v", s.RateBytesPerSec, s.ETA)
	}
}

// TestRedirectRetriesElsewhere: a running move redirected (its
// destination is being drained) asks for its migration's abort once; the
// cancelled migration puts the move back to pending with no attempt
// counted, and it then runs to done; a redirected migration that
// completes anyway is done.
func TestRedirectRetriesElsewhere(t *testing.T) {
	m := Machine{MaxAttempts: 2}
	p, acts := run(t, m, drain(mv("a", "h01", 4096), mv("b", "h01", 2048)),
		Event{Kind: Run},
		Event{Kind: Begin, Move: 0}, Event{Kind: Started, Move: 0, Migration: 11},
		Event{Kind: Begin, Move: 1}, Event{Kind: Started, Move: 1, Migration: 12},
		Event{Kind: Redirect, Move: 0, Reason: "destination h02 is being drained"},
		Event{Kind: Redirect, Move: 0, Reason: "again"},
		Event{Kind: Redirect, Move: 1, Reason: "destination h02 is being drained"},
		Event{Kind: Ended, Move: 0, Migration: 11, Status: records.MigrationCancelled},
		Event{Kind: Ended, Move: 1, Migration: 12, Status: records.MigrationCompleted, Host: "h02"},
	)
	var aborts []int64
	for _, a := range acts {
		if a.Kind == AbortMove {
			aborts = append(aborts, a.Migration)
		}
	}
	if !reflect.DeepEqual(aborts, []int64{11, 12}) {
		t.Errorf("aborts %v, want one for each redirected migration (11, 12)", aborts)
	}
	if mv := p.Moves[0]; mv.State != records.MovePending || mv.Attempts != 0 || mv.Reason != "destination h02 is being drained" || mv.Redirect != "" {
		t.Fatalf("redirected and cancelled: %+v, want pending again, no attempt counted, the reason kept", mv)
	}
	if mv := p.Moves[1]; mv.State != records.MoveDone || mv.Result != "h02" || mv.Redirect != "" {
		t.Fatalf("redirected but completed: %+v, want done on h02", mv)
	}
	p, _ = run(t, m, p, Event{Kind: Begin, Move: 0}, Event{Kind: Started, Move: 0, Migration: 13},
		Event{Kind: Ended, Move: 0, Migration: 13, Status: records.MigrationCompleted, Host: "h03"})
	if p.State != records.PlanDone || p.Moves[0].Result != "h03" || p.Moves[0].Attempts != 1 {
		t.Fatalf("plan %s, move %+v: want done on h03 after one counted attempt", p.State, p.Moves[0])
	}
}

// A plan of one move that failed says so in the singular (issue 24 item
// 11: it said "1 of 1 moves failed").
func TestOneFailedMoveReason(t *testing.T) {
	p, _ := run(t, Machine{}, drain(mv("a", "h01", 4096)),
		Event{Kind: Run},
		Event{Kind: Begin, Move: 0}, Event{Kind: Started, Move: 0, Migration: 1},
		Event{Kind: Ended, Move: 0, Migration: 1, Status: records.MigrationFailed, Reason: "copy failed"},
		Event{Kind: Begin, Move: 0}, Event{Kind: Started, Move: 0, Migration: 2},
		Event{Kind: Ended, Move: 0, Migration: 2, Status: records.MigrationFailed, Reason: "copy failed"},
	)
	if p.State != records.PlanFailed || p.Reason != "1 of 1 move failed" {
		t.Fatalf("plan %s (%s) moves %s", p.State, p.Reason, states(p))
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int]string{0: "0 moves", 1: "1 move", 2: "2 moves"} {
		if got := Count(n, "move", "moves"); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
}
