package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"keel/internal/clock"
)

// A toy flow: a job counts up to its goal, one step at a time; its
// deadline is a minute after its last save.
type job struct {
	ID, Owner     string
	Count, Goal   int
	Version       int64
	Updated       time.Time
	WaitsOutsider bool // Deadline fires, Due says no
}

type jobEvent string

type counter struct{}

func (counter) Step(j job, ev jobEvent, now time.Time) (job, []string, error) {
	if j.Count >= j.Goal {
		return j, nil, errors.New("done")
	}
	j.Count++
	return j, []string{string(ev)}, nil
}

func (counter) Deadline(j job, _ time.Time) (time.Time, jobEvent, bool) {
	if j.Count >= j.Goal {
		return time.Time{}, "", false
	}
	return j.Updated.Add(time.Minute), "late", true
}

func (counter) Resume(j job) (jobEvent, bool) { return "resume", j.Count < j.Goal }

var errConflict = errors.New("conflict")

// jobs is the records' store, versioned.
type jobs struct {
	mu   sync.Mutex
	byID map[string]job
	fed  []string // "id:event", in order
	// beforeSave runs before every save (a racing replica's chance).
	beforeSave func()
}

func (s *jobs) flow(clk clock.Clock) *Flow[job, jobEvent, string] {
	return &Flow[job, jobEvent, string]{
		Name: "job", Machine: counter{},
		List: func(context.Context) ([]job, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			var out []job
			for _, j := range s.byID {
				out = append(out, j)
			}
			slices.SortFunc(out, func(a, b job) int { return strings.Compare(a.ID, b.ID) })
			return out, nil
		},
		Get: func(_ context.Context, j job) (job, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.byID[j.ID], nil
		},
		Save: func(_ context.Context, j job) (job, error) {
			if s.beforeSave != nil {
				s.beforeSave()
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.byID[j.ID].Version != j.Version {
				return j, errConflict
			}
			j.Version++
			s.byID[j.ID] = j
			return j, nil
		},
		Key:     func(j job) string { return "job/" + j.ID },
		Owner:   func(j job) string { return j.Owner },
		Version: func(j job) int64 { return j.Version },
		Owned: func(j job, owner string, now time.Time) job {
			j.Owner, j.Updated = owner, now
			return j
		},
		Conflict: func(err error) bool { return errors.Is(err, errConflict) },
		Perform:  func(context.Context, job, string) (jobEvent, bool, error) { return "", false, nil },
		Stamp: func(j job, now time.Time) job {
			j.Updated = now
			return j
		},
		Saved: func(_, next job, ev jobEvent) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.fed = append(s.fed, fmt.Sprintf("%s:%s", next.ID, ev))
		},
		Due: func(_ context.Context, j job, _ jobEvent) bool { return !j.WaitsOutsider },
	}
}

func (s *jobs) fedAndReset() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.fed
	s.fed = nil
	return out
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newDriver(owner string, live ...string) (*Driver, *clock.Virtual) {
	clk := clock.NewVirtual(t0)
	return &Driver{Owner: owner, Clock: clk, Log: slog.New(slog.DiscardHandler),
		Live: func(context.Context) (map[string]bool, error) {
			m := map[string]bool{owner: true}
			for _, l := range live {
				m[l] = true
			}
			return m, nil
		}}, clk
}

func TestRecoverTakesWhatThisReplicaMay(t *testing.T) {
	s := &jobs{byID: map[string]job{
		"done":     {ID: "done", Count: 2, Goal: 2},
		"unowned":  {ID: "unowned", Goal: 2},
		"mine":     {ID: "mine", Owner: "a", Goal: 2},
		"dead":     {ID: "dead", Owner: "x", Goal: 2},
		"alive":    {ID: "alive", Owner: "b", Goal: 2},
		"finished": {ID: "finished", Owner: "x", Count: 1, Goal: 1},
	}}
	d, clk := newDriver("a", "b")
	Register(d, s.flow(clk))
	n, err := d.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.fedAndReset(), []string{"dead:resume", "mine:resume", "unowned:resume"}; !slices.Equal(got, want) {
		t.Fatalf("recovery fed %v, want %v", got, want)
	}
	if n != 3 {
		t.Fatalf("recovered %d, want 3", n)
	}
	for _, id := range []string{"dead", "unowned", "mine"} {
		if o := s.byID[id].Owner; o != "a" {
			t.Errorf("%s owned by %q after recovery, want a", id, o)
		}
	}
	if o := s.byID["alive"].Owner; o != "b" {
		t.Errorf("a live replica's job owned by %q, want b still", o)
	}

	// Later, a take-over takes only dead replicas' flows.
	s.byID["later"] = job{ID: "later", Owner: "", Goal: 1}
	s.byID["dead2"] = job{ID: "dead2", Owner: "y", Goal: 1}
	if n, err := d.TakeOver(context.Background()); err != nil || n != 1 {
		t.Fatalf("take-over: %d, %v; want 1", n, err)
	}
	if got, want := s.fedAndReset(), []string{"dead2:resume"}; !slices.Equal(got, want) {
		t.Fatalf("take-over fed %v, want %v", got, want)
	}
}

// A flow whose resume needs what its record cannot tell (Due says no) is
// taken over but not fed: this replica's sweep feeds it when it is due.
func TestRecoverLeavesWhatIsNotDueToTheSweep(t *testing.T) {
	s := &jobs{byID: map[string]job{
		"waits": {ID: "waits", Owner: "x", Goal: 2, WaitsOutsider: true},
		"goes":  {ID: "goes", Owner: "x", Goal: 2},
	}}
	d, clk := newDriver("a")
	Register(d, s.flow(clk))
	if n, err := d.Recover(context.Background()); err != nil || n != 1 {
		t.Fatalf("recovered %d, %v; want 1", n, err)
	}
	if got, want := s.fedAndReset(), []string{"goes:resume"}; !slices.Equal(got, want) {
		t.Fatalf("recovery fed %v, want %v", got, want)
	}
	if o := s.byID["waits"].Owner; o != "a" {
		t.Fatalf("the job left for the sweep is owned by %q, want a (the sweep feeds only its own)", o)
	}
}

func TestRecoverWithoutOwnerResumesEverything(t *testing.T) {
	s := &jobs{byID: map[string]job{"a": {ID: "a", Owner: "x", Goal: 1}, "b": {ID: "b", Goal: 1}}}
	d, clk := newDriver("")
	Register(d, s.flow(clk))
	if n, err := d.Recover(context.Background()); err != nil || n != 2 {
		t.Fatalf("recovered %d, %v; want 2", n, err)
	}
	if n, err := d.TakeOver(context.Background()); err != nil || n != 0 {
		t.Fatalf("take-over without an owner: %d, %v; want 0", n, err)
	}
}

// Two replicas that read a dead replica's record before either writes:
// the versioned save lets exactly one take it over.
func TestTwoReplicasTakingOverOneWins(t *testing.T) {
	s := &jobs{byID: map[string]job{"j": {ID: "j", Owner: "dead", Goal: 5}}}
	var both sync.WaitGroup
	both.Add(2)
	var saves atomic.Int32
	s.beforeSave = func() {
		if saves.Add(1) <= 2 { // the two take-overs' saves, not the winner's step
			both.Done()
			both.Wait()
		}
	}
	var wg sync.WaitGroup
	won := make([]int, 2)
	for i, name := range []string{"b", "c"} {
		d, clk := newDriver(name, "b", "c")
		Register(d, s.flow(clk))
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := d.TakeOver(context.Background())
			if err != nil {
				t.Error(err)
			}
			won[i] = n
		}()
	}
	wg.Wait()
	if won[0]+won[1] != 1 {
		t.Fatalf("replicas took over %v, want exactly one between them", won)
	}
	if got := s.fedAndReset(); len(got) != 1 {
		t.Fatalf("fed %v, want one resume", got)
	}
}

func TestSweepFeedsPassedDeadlinesOnly(t *testing.T) {
	s := &jobs{byID: map[string]job{
		"due":      {ID: "due", Owner: "a", Goal: 3, Updated: t0},
		"fresh":    {ID: "fresh", Owner: "a", Goal: 3, Updated: t0.Add(50 * time.Second)},
		"others":   {ID: "others", Owner: "b", Goal: 3, Updated: t0},
		"done":     {ID: "done", Owner: "a", Count: 3, Goal: 3, Updated: t0},
		"outsider": {ID: "outsider", Owner: "a", Goal: 3, Updated: t0, WaitsOutsider: true},
		"locked":   {ID: "locked", Owner: "a", Goal: 3, Updated: t0},
	}}
	d, clk := newDriver("a", "b")
	Register(d, s.flow(clk))
	unlock := d.Lock("job/locked") // its step is in flight here
	clk.Advance(61 * time.Second)
	n, err := d.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.fedAndReset(), []string{"due:late"}; !slices.Equal(got, want) || n != 1 {
		t.Fatalf("sweep fed %v (%d), want %v", got, n, want)
	}
	unlock()
	if d.Locks() != 0 {
		t.Fatalf("%d locks left, want none", d.Locks())
	}
	// The deadline moves with the record: due's is a minute after its
	// step, fresh's and locked's have passed now.
	clk.Advance(50 * time.Second)
	if _, err := d.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := s.fedAndReset(), []string{"fresh:late", "locked:late"}; !slices.Equal(got, want) {
		t.Fatalf("second sweep fed %v, want %v", got, want)
	}
}

func TestSweepLeavesARecordThatMovedOn(t *testing.T) {
	s := &jobs{byID: map[string]job{"j": {ID: "j", Owner: "a", Goal: 3, Updated: t0}}}
	d, clk := newDriver("a")
	f := s.flow(clk)
	list := f.List
	f.List = func(ctx context.Context) ([]job, error) {
		rs, err := list(ctx)
		s.mu.Lock()
		j := s.byID["j"]
		j.Version++ // written by someone else after the sweep read it
		s.byID["j"] = j
		s.mu.Unlock()
		return rs, err
	}
	Register(d, f)
	clk.Advance(2 * time.Minute)
	if n, err := d.Sweep(context.Background()); err != nil || n != 0 {
		t.Fatalf("sweep fed %d, %v; want nothing", n, err)
	}
}

func TestTryLock(t *testing.T) {
	d, _ := newDriver("")
	unlock := d.Lock("k")
	if _, ok := d.TryLock("k"); ok {
		t.Fatal("TryLock took a held lock")
	}
	u2, ok := d.TryLock("other")
	if !ok {
		t.Fatal("TryLock refused a free key")
	}
	u2()
	unlock()
	if u, ok := d.TryLock("k"); !ok {
		t.Fatal("TryLock refused a released key")
	} else {
		u()
	}
}

// A flow's own executor takes over and sweeps that flow alone (the other
// registered flows wait for the driver's round), and the live replicas
// are read only when a record of another replica is there to take.
func TestOneFlowsTakeOverAndSweep(t *testing.T) {
	s := &jobs{byID: map[string]job{"dead": {ID: "dead", Owner: "x", Goal: 2, Updated: t0}}}
	other := &jobs{byID: map[string]job{"dead": {ID: "dead", Owner: "x", Goal: 2, Updated: t0}}}
	d, clk := newDriver("a")
	reads := 0
	live := d.Live
	d.Live = func(ctx context.Context) (map[string]bool, error) {
		reads++
		return live(ctx)
	}
	f := s.flow(clk)
	Register(d, f)
	Register(d, other.flow(clk))
	if n, err := f.TakeOver(context.Background(), d); err != nil || n != 1 {
		t.Fatalf("the flow's take-over: %d, %v; want 1", n, err)
	}
	if got, want := s.fedAndReset(), []string{"dead:resume"}; !slices.Equal(got, want) {
		t.Fatalf("take-over fed %v, want %v", got, want)
	}
	if got := other.fedAndReset(); len(got) != 0 || other.byID["dead"].Owner != "x" {
		t.Fatalf("the other flow was taken over too (fed %v, owner %q)", got, other.byID["dead"].Owner)
	}
	if reads != 1 {
		t.Fatalf("live replicas read %d times, want 1", reads)
	}
	if n, err := f.TakeOver(context.Background(), d); err != nil || n != 0 || reads != 1 {
		t.Fatalf("second take-over: %d, %v, %d reads of the live replicas; want 0, nothing to take, no read", n, err, reads)
	}
	clk.Advance(2 * time.Minute)
	if n, err := f.Sweep(context.Background(), d); err != nil || n != 1 {
		t.Fatalf("the flow's sweep: %d, %v; want 1", n, err)
	}
	if got, want := s.fedAndReset(), []string{"dead:late"}; !slices.Equal(got, want) {
		t.Fatalf("sweep fed %v, want %v", got, want)
	}
}

// TestSweepRepeatsAnActionThatGotNoAnswer: a step whose action reached
// nobody (the driver's Retry picks the error) is repeated by the sweep
// after RetryMin, then after twice that, and so on — not only at its
// machine's deadline a minute later; an action that fails otherwise waits
// for the deadline, and one that is done ends the repeats.
func TestSweepRepeatsAnActionThatGotNoAnswer(t *testing.T) {
	errNobody := errors.New("no agent answered")
	s := &jobs{byID: map[string]job{
		"j":     {ID: "j", Owner: "a", Goal: 9, Updated: t0},
		"other": {ID: "other", Owner: "a", Goal: 9, Updated: t0},
	}}
	d, clk := newDriver("a")
	d.Retry = func(err error) bool { return errors.Is(err, errNobody) }
	f := s.flow(clk)
	var failures atomic.Int32
	failures.Store(2) // j's first two tries reach nobody
	f.Perform = func(_ context.Context, j job, _ string) (jobEvent, bool, error) {
		if j.ID == "other" {
			return "", false, errors.New("refused") // not Retry's
		}
		if failures.Add(-1) >= 0 {
			return "", false, errNobody
		}
		return "", false, nil
	}
	Register(d, f)
	ctx := context.Background()
	for _, id := range []string{"j", "other"} {
		if _, err := f.Run(ctx, d, s.byID[id], "go"); err == nil {
			t.Fatalf("%s: the first try did not fail", id)
		}
	}
	s.fedAndReset()
	sweepAt := func(after time.Duration, want ...string) {
		t.Helper()
		clk.Advance(after)
		if _, err := d.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		if got := s.fedAndReset(); !slices.Equal(got, want) {
			t.Fatalf("at %s the sweep fed %v, want %v", clk.Now().Sub(t0), got, want)
		}
	}
	sweepAt(900 * time.Millisecond)                 // RetryMin (1 s) not yet passed
	sweepAt(200*time.Millisecond, "j:resume")       // 1.1 s: repeated, and fails again
	sweepAt(1900 * time.Millisecond)                // 3.0 s: the wait doubled to 2 s
	sweepAt(200*time.Millisecond, "j:resume")       // 3.2 s: repeated, and done now
	sweepAt(30 * time.Second)                       // done: no more repeats
	sweepAt(31*time.Second, "j:late", "other:late") // the deadlines, a minute after the last saves
}
