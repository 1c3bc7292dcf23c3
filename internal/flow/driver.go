package flow

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"keel/internal/clock"
)

// Driver runs the recovery, the take-over and the deadlines of every
// registered flow, and holds the per-record locks their steps take.
type Driver struct {
	// Owner is this replica's name; empty turns ownership off (one
	// server: Recover resumes every flow in flight, the sweep drives the
	// unowned ones).
	Owner string
	// Live returns the replicas whose heartbeat is recent (this one
	// included); called only with an Owner.
	Live  func(ctx context.Context) (map[string]bool, error)
	Clock clock.Clock
	Log   *slog.Logger
	// Spawn, when set, runs the rest of a flow that recovery, a take-over
	// or the sweep feeds in the background from its first remote action
	// on (see Flow.Start), so a round never waits on an agent (at start,
	// the agents may not be back yet).
	Spawn func(rest func(run bool))
	// Retry, when set, picks the action errors whose step is repeated
	// soon rather than at its machine's stall deadline: an agent call
	// that got no answer (the agent restarting, reconnecting, cut off).
	// The sweep resumes such a flow once RetryMin has passed since the
	// failure, the wait doubling with each failure in a row up to
	// RetryMax (defaults 1 s and 30 s), for RetryFor after the first
	// failure of the row (default twice RetryMax); from then on, and
	// always before, the machine's own deadlines fire as they would
	// without (an action that times out still does), and a restart
	// resumes every flow anyway.
	Retry                        func(err error) bool
	RetryMin, RetryMax, RetryFor time.Duration

	flows []runner

	mu      sync.Mutex
	locks   map[string]*refMutex
	retries map[string]retry // by lock key
}

// retry is a row of failures of a flow's actions (Driver.Retry): when
// the first and the last were, when its step is repeated, and the wait
// that led there.
type retry struct {
	first, last, at time.Time
	wait            time.Duration
}

// runner is a registered Flow, whatever its types.
type runner interface {
	resume(ctx context.Context, d *Driver, live *liveSet, atStart bool) (int, error)
	sweep(ctx context.Context, d *Driver) (int, error)
}

// liveSet is the live replicas, read once per round and only when a
// record owned by another replica asks.
type liveSet struct {
	d    *Driver
	read bool
	live map[string]bool
	err  error
}

func (l *liveSet) get(ctx context.Context) (map[string]bool, error) {
	if !l.read {
		l.read = true
		l.live, l.err = l.d.Live(ctx)
	}
	return l.live, l.err
}

// Register adds f to d's flows; Recover, TakeOver and Sweep visit them in
// the order registered.
func Register[R, E, A any](d *Driver, f *Flow[R, E, A]) {
	d.flows = append(d.flows, f)
}

// Recover resumes, at start, every flow in flight that this replica may
// take: all of them without an owner; with one, the unowned ones, its
// own (a restart of this replica) and those of replicas whose heartbeat
// stopped, each taken over first. It returns how many it resumed.
func (d *Driver) Recover(ctx context.Context) (int, error) {
	return d.resume(ctx, true)
}

// TakeOver takes over and resumes the flows of replicas whose heartbeat
// stopped; it does nothing without an owner. It returns how many.
func (d *Driver) TakeOver(ctx context.Context) (int, error) {
	if d.Owner == "" {
		return 0, nil
	}
	return d.resume(ctx, false)
}

func (d *Driver) resume(ctx context.Context, atStart bool) (int, error) {
	live := &liveSet{d: d}
	n := 0
	for _, f := range d.flows {
		k, err := f.resume(ctx, d, live, atStart)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Sweep feeds every flow this replica drives whose deadline has passed
// the deadline's event (see Machine.Deadline). A flow whose step is in
// flight in this process, or whose record changed since the sweep read
// it, is left alone. It returns how many flows it fed.
func (d *Driver) Sweep(ctx context.Context) (int, error) {
	ctx = context.WithoutCancel(ctx)
	n := 0
	for _, f := range d.flows {
		k, err := f.sweep(ctx, d)
		n += k
		if err != nil {
			return n, err
		}
	}
	d.pruneRetries(d.Clock.Now())
	return n, nil
}

// retryBounds are RetryMin, RetryMax and RetryFor, defaults filled in.
func (d *Driver) retryBounds() (lo, hi, span time.Duration) {
	lo, hi, span = d.RetryMin, d.RetryMax, d.RetryFor
	if lo <= 0 {
		lo = time.Second
	}
	if hi <= 0 {
		hi = 30 * time.Second
	}
	hi = max(hi, lo)
	if span <= 0 {
		span = 2 * hi
	}
	return lo, hi, span
}

// failed notes that an action of key's flow failed with err: when Retry
// picks err, the step is due again after a wait that doubles with each
// failure in a row.
func (d *Driver) failed(key string, err error) {
	if d.Retry == nil || !d.Retry(err) {
		return
	}
	lo, hi, _ := d.retryBounds()
	now := d.Clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.retries == nil {
		d.retries = map[string]retry{}
	}
	r, ok := d.retries[key]
	if !ok {
		r.first = now
	}
	r.wait = min(max(2*r.wait, lo), hi)
	r.last, r.at = now, now.Add(r.wait)
	d.retries[key] = r
}

// performed forgets key's failures: one of its actions was done.
func (d *Driver) performed(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.retries, key)
}

// retryDue reports whether key's flow has a failed step due again at
// now: its wait passed, within RetryFor of the row's first failure.
func (d *Driver) retryDue(key string, now time.Time) bool {
	_, _, span := d.retryBounds()
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.retries[key]
	return ok && !now.Before(r.at) && now.Sub(r.first) < span
}

// pruneRetries forgets the rows of failures with none for ten RetryFor
// (their record ended, went elsewhere, or no longer fails): a row that
// goes on past RetryFor, failing again at each of its machine's stall
// deadlines, is kept, so those deadlines alone feed it.
func (d *Driver) pruneRetries(now time.Time) {
	_, _, span := d.retryBounds()
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, r := range d.retries {
		if now.Sub(r.last) > 10*span {
			delete(d.retries, k)
		}
	}
}

// TakeOver is Driver.TakeOver for f alone: a flow's own executor calls it
// between the driver's rounds (a plan's executor takes a dead replica's
// plans over at its next tick). f need not be registered with d.
func (f *Flow[R, E, A]) TakeOver(ctx context.Context, d *Driver) (int, error) {
	if d.Owner == "" {
		return 0, nil
	}
	return f.resume(ctx, d, &liveSet{d: d}, false)
}

// Sweep is Driver.Sweep for f alone (see TakeOver).
func (f *Flow[R, E, A]) Sweep(ctx context.Context, d *Driver) (int, error) {
	return f.sweep(context.WithoutCancel(ctx), d)
}

// mayTake reports whether this replica may resume a flow owned by owner:
// one whose owner is dead, and at start also an unowned one or its own.
func (d *Driver) mayTake(ctx context.Context, owner string, live *liveSet, atStart bool) (bool, error) {
	switch {
	case owner == d.Owner, owner == "":
		return atStart, nil // a live replica already drives its own
	}
	l, err := live.get(ctx)
	if err != nil {
		return false, err
	}
	return !l[owner], nil
}

func (f *Flow[R, E, A]) resume(ctx context.Context, d *Driver, live *liveSet, atStart bool) (int, error) {
	rs, err := f.List(ctx)
	if err != nil {
		return 0, fmt.Errorf("recovering %ss: %w", f.Name, err)
	}
	n := 0
	for _, r := range rs {
		if _, ok := f.Machine.Resume(r); !ok {
			continue
		}
		if d.Owner != "" {
			if ok, err := d.mayTake(ctx, f.Owner(r), live, atStart); err != nil {
				return n, err
			} else if !ok {
				continue
			}
			if f.Owner(r) != d.Owner {
				var won bool
				if r, won, err = f.takeOver(ctx, d, r, live, atStart); err != nil {
					d.Log.Error("taking a flow over", "flow", f.Name, "key", f.Key(r), "owner", f.Owner(r), "err", err)
					continue
				} else if !won {
					continue
				}
			}
		}
		ev, _ := f.Machine.Resume(r)
		if f.Due != nil && !f.Due(ctx, r, ev) {
			continue // not now: this replica's sweep feeds it when it is due
		}
		d.Log.Info("resuming", "flow", f.Name, "key", f.Key(r), "event", ev, "at_start", atStart)
		if err := f.feed(ctx, d, r, ev); err != nil {
			d.Log.Error("resuming", "flow", f.Name, "key", f.Key(r), "err", err)
			continue
		}
		n++
	}
	return n, nil
}

// takeOver makes this replica the owner of r's flow with a versioned
// save; false when the record changed meanwhile (another replica took it,
// or the flow moved on or ended).
func (f *Flow[R, E, A]) takeOver(ctx context.Context, d *Driver, r R, live *liveSet, atStart bool) (R, bool, error) {
	unlock := d.Lock(f.Key(r))
	defer unlock()
	cur, err := f.Get(ctx, r)
	if err != nil {
		if f.Conflict(err) {
			return r, false, nil
		}
		return r, false, fmt.Errorf("reading %s %s: %w", f.Name, f.Key(r), err)
	}
	if _, ok := f.Machine.Resume(cur); !ok {
		return cur, false, nil
	}
	if ok, err := d.mayTake(ctx, f.Owner(cur), live, atStart); err != nil || !ok {
		return cur, false, err
	}
	prev := f.Owner(cur)
	saved, err := f.Save(ctx, f.Owned(cur, d.Owner, d.Clock.Now()))
	if err != nil {
		if f.Conflict(err) {
			d.Log.Info("another replica took the flow first", "flow", f.Name, "key", f.Key(r), "previous_owner", prev)
			return cur, false, nil
		}
		return cur, false, fmt.Errorf("taking %s %s over: %w", f.Name, f.Key(r), err)
	}
	d.Log.Info("took flow over", "flow", f.Name, "key", f.Key(r), "previous_owner", prev, "owner", d.Owner)
	return saved, true, nil
}

func (f *Flow[R, E, A]) sweep(ctx context.Context, d *Driver) (int, error) {
	rs, err := f.List(ctx)
	if err != nil {
		return 0, fmt.Errorf("sweeping %ss: %w", f.Name, err)
	}
	now, n := d.Clock.Now(), 0
	for _, r := range rs {
		if f.Owner(r) != d.Owner {
			continue
		}
		ev, when, repeat, ok := f.due(d, r, now)
		if !ok || (f.Due != nil && !f.Due(ctx, r, ev)) {
			continue
		}
		if !f.unchanged(ctx, d, r) {
			continue
		}
		if repeat {
			d.Log.Info("repeating a step whose action got no answer", "flow", f.Name, "key", f.Key(r), "event", ev)
		} else {
			d.Log.Info("deadline passed", "flow", f.Name, "key", f.Key(r), "event", ev, "deadline", when)
		}
		if err := f.feed(ctx, d, r, ev); err != nil {
			d.Log.Warn("feeding a deadline's event", "flow", f.Name, "key", f.Key(r), "err", err)
		}
		n++
	}
	return n, nil
}

// due returns the event the sweep feeds r's flow at now: its machine's
// deadline's, with when it passed, or (repeat) when a step whose action
// failed is due again (Driver.Retry), the resume after a restart.
func (f *Flow[R, E, A]) due(d *Driver, r R, now time.Time) (ev E, when time.Time, repeat, ok bool) {
	when, ev, ok = f.Machine.Deadline(r, now)
	if ok && now.After(when) {
		return ev, when, false, true
	}
	if !d.retryDue(f.Key(r), now) {
		return ev, when, false, false
	}
	ev, ok = f.Machine.Resume(r)
	return ev, when, true, ok
}

// unchanged reports whether r's step is not in flight in this process
// and its record is still the version the sweep read.
func (f *Flow[R, E, A]) unchanged(ctx context.Context, d *Driver, r R) bool {
	unlock, ok := d.TryLock(f.Key(r))
	if !ok {
		return false
	}
	defer unlock()
	cur, err := f.Get(ctx, r)
	return err == nil && f.Version(cur) == f.Version(r)
}

// Lock takes the lock of key in this process and returns its unlock.
func (d *Driver) Lock(key string) func() {
	m := d.ref(key)
	m.Lock()
	return func() { d.unref(key, m) }
}

// TryLock is Lock without waiting: false when key is locked.
func (d *Driver) TryLock(key string) (func(), bool) {
	d.mu.Lock()
	if d.locks[key] != nil {
		d.mu.Unlock()
		return nil, false
	}
	d.mu.Unlock()
	return d.Lock(key), true
}

// Locks returns how many keys are locked or waited for now.
func (d *Driver) Locks() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.locks)
}

func (d *Driver) ref(key string) *refMutex {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.locks == nil {
		d.locks = map[string]*refMutex{}
	}
	m := d.locks[key]
	if m == nil {
		m = &refMutex{}
		d.locks[key] = m
	}
	m.refs++
	return m
}

func (d *Driver) unref(key string, m *refMutex) {
	m.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if m.refs--; m.refs == 0 {
		delete(d.locks, key)
	}
}

// refMutex is a mutex counted by its users, dropped when none is left.
type refMutex struct {
	sync.Mutex
	refs int
}

// feed feeds ev to r's flow: Run, or Start with d's Spawn.
func (f *Flow[R, E, A]) feed(ctx context.Context, d *Driver, r R, ev E) error {
	if d.Spawn != nil {
		_, err := f.Start(ctx, d, r, ev, d.Spawn)
		return err
	}
	_, err := f.Run(ctx, d, r, ev)
	return err
}
