package flow

import (
	"context"
	"fmt"
	"slices"
)

// Run feeds ev to r's flow under r's lock and performs what follows; see
// Drive.
func (f *Flow[R, E, A]) Run(ctx context.Context, d *Driver, r R, ev E) (R, error) {
	defer d.Lock(f.Key(r))()
	return f.Drive(ctx, d, r, []E{ev}, nil)
}

// Start is Run for a flow's first event, fed by a request: it steps and
// saves the flow and performs its actions in the caller as far as the
// store alone decides them (the intent, a schedule and claim), and hands
// the loop over, r's lock and the Scope with it, to spawn before the first
// action Remote picks (an agent call). The caller answers with the record
// as it is then; what follows is reported on the record. spawn runs its
// function later, exactly once, with true, or with false when it will not
// run the loop (closing): the record is then left in its step for
// Recover. Without Remote, Start is Run.
func (f *Flow[R, E, A]) Start(ctx context.Context, d *Driver, r R, ev E, spawn func(func(run bool))) (R, error) {
	unlock := d.Lock(f.Key(r))
	var rest func(run bool)
	cur, err := f.drive(ctx, d, r, []E{ev}, nil, func(resume func(run bool)) {
		rest = resume
	})
	if rest == nil {
		unlock()
		return cur, err
	}
	spawn(func(run bool) {
		defer unlock()
		rest(run)
	})
	return cur, err
}

// Drive is the driver's one loop, with r's lock held by the caller: it
// performs acts (the actions of a step already saved), then steps evs and
// the answers of the actions it performs in turn — each step read, stepped
// and saved with a version check (a conflict steps the event again from
// what is stored, up to three times), its actions performed through the
// flow's effect table (Perform) after the save (those Early picks before
// it) — until nothing is left, the flow is out of its hands (Gone, or another
// replica took the record over since the loop first read it), the
// machine refuses an event (its error, or what Refused makes of it), or an
// action cannot be done now (Perform's error: the record stays in its
// phase for the sweep).
func (f *Flow[R, E, A]) Drive(ctx context.Context, d *Driver, r R, evs []E, acts []A) (R, error) {
	return f.drive(ctx, d, r, evs, acts, nil)
}

// drive is Drive; with handOff it stops before the first remote action
// (Remote) and gives handOff the loop's rest, which owns the Scope from
// then on: called with true it goes on from there, with false it only
// releases.
func (f *Flow[R, E, A]) drive(ctx context.Context, d *Driver, r R, evs []E, acts []A, handOff func(rest func(run bool))) (R, error) {
	release := func() {}
	if f.Scope != nil {
		ctx, release = f.Scope(ctx)
	}
	handed := false
	defer func() {
		if !handed {
			release()
		}
	}()
	return f.loop(ctx, d, r, evs, len(evs), acts, func(cur R, evs []E, given int, acts []A) bool {
		if handOff == nil || f.Remote == nil || !slices.ContainsFunc(acts, f.Remote) {
			return false
		}
		handed = true
		handOff(func(run bool) {
			defer release()
			if !run {
				d.Log.Info("flow handed over left for recovery", "flow", f.Name, "key", f.Key(cur))
				return
			}
			if _, err := f.loop(ctx, d, cur, evs, given, acts, nil); err != nil {
				d.Log.Warn("flow handed over stopped", "flow", f.Name, "key", f.Key(cur), "err", err)
			}
		})
		return true
	})
}

// loop is Drive's loop after its Scope; given is how many of evs are the
// caller's (the rest answers). stop, when set, is asked before each
// batch of actions whether the loop stops there (handed over).
func (f *Flow[R, E, A]) loop(ctx context.Context, d *Driver, cur R, evs []E, given int, acts []A, stop func(cur R, evs []E, given int, acts []A) bool) (R, error) {
	var driver owner // who drove the record as this loop first read it
	for len(evs) > 0 || len(acts) > 0 {
		if len(acts) > 0 && stop != nil && stop(cur, evs, given, acts) {
			return cur, nil
		}
		for _, a := range acts {
			ev, ok, err := f.perform(ctx, d, cur, a)
			if err != nil {
				return cur, err
			}
			if ok {
				evs = append(evs, ev)
			}
		}
		acts = nil
		if len(evs) == 0 {
			break
		}
		ev := evs[0]
		evs = evs[1:]
		answer := given == 0
		if !answer {
			given--
		}
		next, more, gone, refused, err := f.step(ctx, d, cur, ev, &driver)
		if refused && f.Refused != nil {
			err = f.Refused(next, ev, answer, err)
		}
		if err != nil || gone || refused {
			return next, err
		}
		cur, acts = next, more
	}
	return cur, nil
}

// owner is the replica a loop found driving its record at its first
// read (seen: read once).
type owner struct {
	name string
	seen bool
}

// takenOver reports whether cur, read again by a loop that first found
// it driven by was, is now another replica's: one that took the record
// over with a versioned save (it judged this replica dead) while the
// loop stepped it or performed its actions. The loop stops there rather
// than drive the record beside its new owner. Without ownership (the
// driver's Owner empty) nothing is ever taken over.
func (f *Flow[R, E, A]) takenOver(d *Driver, was *owner, cur R) bool {
	if d.Owner == "" || f.Owner == nil {
		return false
	}
	now := f.Owner(cur)
	if !was.seen {
		was.name, was.seen = now, true
		return false
	}
	return now != was.name && now != d.Owner
}

// step applies ev to the stored record and saves the result; gone when
// the record is out of the flow's hands (Gone, or taken over by another
// replica since the loop first read it, or while this step was saved:
// the save lost on the version), refused when the machine refused ev
// (err is its refusal).
func (f *Flow[R, E, A]) step(ctx context.Context, d *Driver, r R, ev E, was *owner) (next R, acts []A, gone, refused bool, err error) {
	for conflicts := 0; ; conflicts++ {
		cur, err := f.Get(ctx, r)
		if err != nil {
			return r, nil, false, false, fmt.Errorf("%s %s: %w", f.Name, f.Key(r), err)
		}
		if f.Gone != nil && f.Gone(cur) {
			return cur, nil, true, false, nil
		}
		if f.takenOver(d, was, cur) {
			d.Log.Info("flow taken over by another replica; this one stops driving it", "flow", f.Name, "key", f.Key(cur),
				"owner", f.Owner(cur), "was", was.name, "replica", d.Owner)
			return cur, nil, true, false, nil
		}
		now := d.Clock.Now()
		next, acts, err := f.Machine.Step(cur, ev, now)
		if err != nil {
			return cur, nil, false, true, err
		}
		next = f.Stamp(next, now)
		if acts, err = f.early(ctx, d, next, acts); err != nil {
			return cur, nil, false, false, err
		}
		saved, err := f.Save(ctx, next)
		if err != nil && f.Conflict(err) && conflicts < 3 {
			continue // changed meanwhile: step the same event from what is there
		}
		if err != nil {
			return cur, nil, false, false, fmt.Errorf("%s %s: saving: %w", f.Name, f.Key(r), err)
		}
		if f.Saved != nil {
			f.Saved(cur, saved, ev)
		}
		return saved, acts, false, false, nil
	}
}

// early performs the actions Early picks, before their step's save, and
// returns the others.
func (f *Flow[R, E, A]) early(ctx context.Context, d *Driver, next R, acts []A) ([]A, error) {
	if f.Early == nil {
		return acts, nil
	}
	rest := acts[:0:0]
	for _, a := range acts {
		if !f.Early(a) {
			rest = append(rest, a)
			continue
		}
		if _, _, err := f.perform(ctx, d, next, a); err != nil {
			return nil, err
		}
	}
	return rest, nil
}

// perform does one action through the flow's effect table; one that
// cannot be done now leaves its step for the sweep, which repeats it at
// its machine's deadline, or sooner when the driver's Retry picks the
// error.
func (f *Flow[R, E, A]) perform(ctx context.Context, d *Driver, r R, a A) (E, bool, error) {
	ev, ok, err := f.Perform(ctx, r, a)
	if err != nil {
		d.failed(f.Key(r), err)
		d.Log.Warn("flow step left for the sweep", "flow", f.Name, "key", f.Key(r), "action", a, "err", err)
		return ev, ok, err
	}
	d.performed(f.Key(r))
	return ev, ok, nil
}
