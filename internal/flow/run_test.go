package flow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// runnable makes the toy flow one that Run drives: Perform answers each
// step's action with "more" until the goal is reached (or fails on the
// count failAt), and the events stepped are recorded in order.
func runnable(f *Flow[job, jobEvent, string], failAt int, stepped *[]string) {
	f.Perform = func(_ context.Context, j job, a string) (jobEvent, bool, error) {
		switch {
		case j.Count == failAt:
			return "", false, errors.New("agent away")
		case j.Count < j.Goal:
			return "more", true, nil
		}
		return "", false, nil
	}
	f.Stamp = func(j job, now time.Time) job {
		j.Updated = now
		return j
	}
	f.Gone = func(j job) bool { return j.WaitsOutsider }
	f.Saved = func(prev, next job, ev jobEvent) { *stepped = append(*stepped, string(ev)) }
}

func TestRunStepsSavesThenPerforms(t *testing.T) {
	s := &jobs{byID: map[string]job{"j": {ID: "j", Owner: "a", Goal: 3}}}
	d, clk := newDriver("a")
	f := s.flow(clk)
	var stepped []string
	runnable(f, -1, &stepped)
	// Another writer saves once between Run's read and its save: the
	// event is stepped again from what is stored, not lost nor doubled.
	raced := false
	s.beforeSave = func() {
		if !raced {
			raced = true
			s.mu.Lock()
			j := s.byID["j"]
			j.Version++
			s.byID["j"] = j
			s.mu.Unlock()
		}
	}
	got, err := f.Run(context.Background(), d, s.byID["j"], "go")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"go", "more", "more"}; !slices.Equal(stepped, want) {
		t.Fatalf("stepped %v, want %v", stepped, want)
	}
	if got.Count != 3 || s.byID["j"].Count != 3 || got.Updated != clk.Now() {
		t.Fatalf("after Run: returned %+v, stored %+v; want count 3, stamped now", got, s.byID["j"])
	}
	if d.Locks() != 0 {
		t.Fatalf("%d locks left after Run", d.Locks())
	}
}

func TestRunLeavesWhatCannotBeDoneNow(t *testing.T) {
	s := &jobs{byID: map[string]job{"j": {ID: "j", Owner: "a", Goal: 5}}}
	d, clk := newDriver("a")
	f := s.flow(clk)
	var stepped []string
	runnable(f, 2, &stepped)
	got, err := f.Run(context.Background(), d, s.byID["j"], "go")
	if err == nil || got.Count != 2 || s.byID["j"].Count != 2 {
		t.Fatalf("Run returned %+v, %v; want the error of the action after step 2, the record left at 2", got, err)
	}
	// The sweep's Run goes on from the stored record.
	runnable(f, -1, &stepped)
	if _, err := f.Run(context.Background(), d, s.byID["j"], "resume"); err != nil || s.byID["j"].Count != 5 {
		t.Fatalf("resumed Run: %v, count %d; want 5", err, s.byID["j"].Count)
	}
}

func TestRunStopsWhenTheRecordIsGone(t *testing.T) {
	s := &jobs{byID: map[string]job{"j": {ID: "j", Owner: "a", Goal: 3, WaitsOutsider: true}}}
	d, clk := newDriver("a")
	f := s.flow(clk)
	var stepped []string
	runnable(f, -1, &stepped)
	if _, err := f.Run(context.Background(), d, s.byID["j"], "go"); err != nil || len(stepped) != 0 || s.byID["j"].Count != 0 {
		t.Fatalf("Run on a gone record: %v, stepped %v, count %d; want nothing done", err, stepped, s.byID["j"].Count)
	}
}

// An action Early picks is performed before its step's save, on the
// record as stepped; one that cannot be done now leaves the step unsaved.
// An event the machine refuses is handed to Refused.
func TestRunPerformsEarlyActionsBeforeTheSave(t *testing.T) {
	s := &jobs{byID: map[string]job{"j": {ID: "j", Owner: "a", Goal: 2}}}
	d, clk := newDriver("a")
	f := s.flow(clk)
	var stepped []string
	runnable(f, -1, &stepped)
	var seen []string // what the early action saw: stepped count, stored count
	fail := true
	f.Early = func(a string) bool { return a == "settle" }
	f.Perform = func(_ context.Context, j job, a string) (jobEvent, bool, error) {
		if a != "settle" {
			return "", false, nil
		}
		s.mu.Lock()
		seen = append(seen, fmt.Sprintf("%d/%d", j.Count, s.byID[j.ID].Count))
		s.mu.Unlock()
		if fail {
			return "", false, errors.New("store away")
		}
		return "", false, nil
	}
	var refused []string
	f.Refused = func(j job, ev jobEvent, answer bool, err error) error {
		refused = append(refused, fmt.Sprintf("%s (answer %v): %v", ev, answer, err))
		return err
	}
	if _, err := f.Run(context.Background(), d, s.byID["j"], "settle"); err == nil || s.byID["j"].Count != 0 || len(stepped) != 0 {
		t.Fatalf("early action failing: %v, count %d, stepped %v; want the error, nothing saved", err, s.byID["j"].Count, stepped)
	}
	fail = false
	for _, ev := range []jobEvent{"settle", "other"} {
		if _, err := f.Run(context.Background(), d, s.byID["j"], ev); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"1/0", "1/0"}; !slices.Equal(seen, want) || s.byID["j"].Count != 2 {
		t.Fatalf("the early action saw %v (stepped/stored), count %d; want %v, before each save, then 2", seen, s.byID["j"].Count, want)
	}
	if _, err := f.Run(context.Background(), d, s.byID["j"], "late"); err == nil || !slices.Equal(refused, []string{"late (answer false): done"}) {
		t.Fatalf("a refused event: %v, Refused saw %v", err, refused)
	}
}

// An answer the machine refuses (the record moved on) stops the loop as
// Refused decides — quietly here — and Scope's state lives exactly as
// long as the loop.
func TestRunStopsOnARefusedAnswerAsRefusedSays(t *testing.T) {
	s := &jobs{byID: map[string]job{"j": {ID: "j", Owner: "a", Goal: 2}}}
	d, clk := newDriver("a")
	f := s.flow(clk)
	var stepped []string
	runnable(f, -1, &stepped)
	f.Perform = func(context.Context, job, string) (jobEvent, bool, error) { return "more", true, nil }
	var answers []bool
	f.Refused = func(_ job, _ jobEvent, answer bool, err error) error {
		answers = append(answers, answer)
		if answer {
			return nil
		}
		return err
	}
	type scopeKey struct{}
	open := 0
	f.Scope = func(ctx context.Context) (context.Context, func()) {
		open++
		return context.WithValue(ctx, scopeKey{}, open), func() { open-- }
	}
	if _, err := f.Run(context.Background(), d, s.byID["j"], "go"); err != nil || s.byID["j"].Count != 2 {
		t.Fatalf("Run: %v, count %d; want nil (the refused answer stops quietly), 2", err, s.byID["j"].Count)
	}
	if _, err := f.Run(context.Background(), d, s.byID["j"], "go"); err == nil {
		t.Fatal("the caller's event refused: want its error")
	}
	if !slices.Equal(answers, []bool{true, false}) || open != 0 {
		t.Fatalf("Refused saw answers %v, scope open %d; want [true false], 0", answers, open)
	}
}

// Start steps and performs in its caller up to the first remote action,
// then hands the rest over with the record's lock and the loop's Scope:
// run, it finishes the flow; dropped (closing), it leaves the record in
// its step and releases both.
func TestStartHandsOverBeforeTheRemoteAction(t *testing.T) {
	for _, run := range []bool{true, false} {
		s := &jobs{byID: map[string]job{"j": {ID: "j", Owner: "a", Goal: 3}}}
		d, clk := newDriver("a")
		f := s.flow(clk)
		var stepped []string
		runnable(f, -1, &stepped)
		f.Remote = func(a string) bool { return a == "more" }
		scopes := 0
		f.Scope = func(ctx context.Context) (context.Context, func()) {
			scopes++
			return ctx, func() { scopes-- }
		}
		var rest func(bool)
		got, err := f.Start(context.Background(), d, s.byID["j"], "go", func(r func(bool)) { rest = r })
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"go", "more"}; !slices.Equal(stepped, want) || got.Count != 2 || rest == nil {
			t.Fatalf("Start stepped %v to count %d (handed over: %v); want %v, count 2, the remote action handed over", stepped, got.Count, rest != nil, want)
		}
		if d.Locks() != 1 || scopes != 1 {
			t.Fatalf("after the hand-over %d locks, %d scopes held; want the record's lock and the scope kept for the rest", d.Locks(), scopes)
		}
		if _, ok := d.TryLock("job/j"); ok {
			t.Fatal("the record's lock was free between Start and its rest")
		}
		rest(run)
		wantCount, wantStepped := 3, []string{"go", "more", "more"}
		if !run {
			wantCount, wantStepped = 2, []string{"go", "more"}
		}
		if s.byID["j"].Count != wantCount || !slices.Equal(stepped, wantStepped) {
			t.Fatalf("rest(%v): stored count %d, stepped %v; want %d, %v", run, s.byID["j"].Count, stepped, wantCount, wantStepped)
		}
		if d.Locks() != 0 || scopes != 0 {
			t.Fatalf("rest(%v) left %d locks, %d scopes held", run, d.Locks(), scopes)
		}
	}
}

// Without a remote action (or without Remote) Start is Run: nothing is
// handed over.
func TestStartWithoutARemoteActionIsRun(t *testing.T) {
	s := &jobs{byID: map[string]job{"j": {ID: "j", Owner: "a", Goal: 3}}}
	d, clk := newDriver("a")
	f := s.flow(clk)
	var stepped []string
	runnable(f, -1, &stepped)
	got, err := f.Start(context.Background(), d, s.byID["j"], "go", func(func(bool)) { t.Fatal("handed over with no remote action") })
	if err != nil || got.Count != 3 || d.Locks() != 0 {
		t.Fatalf("Start: count %d, %v, %d locks; want 3, nil, none", got.Count, err, d.Locks())
	}
}

// TestRunStopsWhenTakenOver: replica a's loop loses its save on the
// version because replica b took the record over meanwhile (b judged a
// dead): a stops driving it — no step saved over b's, no action
// performed — instead of stepping again from b's record beside b. The
// same when b's take-over comes while a performed its first action, and
// a's second save loses.
func TestRunStopsWhenTakenOver(t *testing.T) {
	for lost, at := range []string{"the first save", "the second save"} {
		t.Run(at, func(t *testing.T) {
			s := &jobs{byID: map[string]job{"j": {ID: "j", Owner: "a", Goal: 3}}}
			d, clk := newDriver("a")
			f := s.flow(clk)
			var stepped []string
			runnable(f, -1, &stepped)
			performed := 0
			perform := f.Perform
			f.Perform = func(ctx context.Context, j job, a string) (jobEvent, bool, error) {
				performed++
				return perform(ctx, j, a)
			}
			saves := 0
			s.beforeSave = func() {
				if saves++; saves == lost+1 {
					s.mu.Lock()
					j := s.byID["j"]
					j.Owner, j.Version = "b", j.Version+1 // b's take-over
					s.byID["j"] = j
					s.mu.Unlock()
				}
			}
			got, err := f.Run(context.Background(), d, s.byID["j"], "go")
			if err != nil {
				t.Fatal(err)
			}
			want, wantPerformed := []string{"go"}[:lost], lost
			if stored := s.byID["j"]; !slices.Equal(stepped, want) || performed != wantPerformed || stored.Owner != "b" ||
				stored.Count != len(want) || got.Owner != "b" {
				t.Fatalf("a's Run stepped %v and performed %d action(s); stored %+v, returned %+v; want %v stepped, %d performed, the record b's at count %d",
					stepped, performed, stored, got, want, wantPerformed, len(want))
			}
			if d.Locks() != 0 {
				t.Fatalf("%d locks left after Run", d.Locks())
			}
		})
	}
}
