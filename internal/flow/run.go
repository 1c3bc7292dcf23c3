package flow

import (
	"context"
	"fmt"
)

// Run feeds ev to r's flow under r's lock and performs what follows; see
// Drive.
func (f *Flow[R, E, A]) Run(ctx context.Context, d *Driver, r R, ev E) (R, error) {
	defer d.Lock(f.Key(r))()
	return f.Drive(ctx, d, r, []E{ev}, nil)
}

// Drive is the driver's one loop, with r's lock held by the caller: it
// performs acts (the actions of a step already saved), then steps evs and
// the answers of the actions it performs in turn — each step read, stepped
// and saved with a version check (a conflict steps the event again from
// what is stored, up to three times), its actions performed through the
// flow's effect table (Perform) after the save (those Early picks before
// it) — until nothing is left, the flow is out of its hands (Gone), the
// machine refuses an event (its error, or what Refused makes of it), or an
// action cannot be done now (Perform's error: the record stays in its
// phase for the sweep).
func (f *Flow[R, E, A]) Drive(ctx context.Context, d *Driver, r R, evs []E, acts []A) (R, error) {
	if f.Scope != nil {
		var release func()
		ctx, release = f.Scope(ctx)
		defer release()
	}
	cur := r
	given := len(evs) // the first events are the caller's; the rest answers
	for len(evs) > 0 || len(acts) > 0 {
		for _, a := range acts {
			ev, ok, err := f.Perform(ctx, cur, a)
			if err != nil {
				d.Log.Warn("flow step left for the sweep", "flow", f.Name, "key", f.Key(cur), "action", a, "err", err)
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
		next, more, gone, refused, err := f.step(ctx, d, cur, ev)
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

// step applies ev to the stored record and saves the result; gone when
// the record is out of the flow's hands, refused when the machine
// refused ev (err is its refusal).
func (f *Flow[R, E, A]) step(ctx context.Context, d *Driver, r R, ev E) (next R, acts []A, gone, refused bool, err error) {
	for conflicts := 0; ; conflicts++ {
		cur, err := f.Get(ctx, r)
		if err != nil {
			return r, nil, false, false, fmt.Errorf("%s %s: %w", f.Name, f.Key(r), err)
		}
		if f.Gone != nil && f.Gone(cur) {
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
		if _, _, err := f.Perform(ctx, next, a); err != nil {
			d.Log.Warn("flow step left for the sweep", "flow", f.Name, "key", f.Key(next), "action", a, "err", err)
			return nil, err
		}
	}
	return rest, nil
}
