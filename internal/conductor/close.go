package conductor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"keel/internal/clock"
)

// errClosed is the outcome of a flow step the conductor did not start
// because it was closing: the record stays as saved, and the recovery of
// the next start (or the sweep of another replica) goes on with it.
var errClosed = errors.New("conductor closed: the flow is left for recovery")

// tasks tracks what the conductor starts on its own — the rest of a
// lifecycle action after Act answers, the plan executor's loop, the
// timers (a slot handed to a queued migration, the ticks of RunOwnership,
// RunPlans and RunRebalance) — so Close can wait for it.
type tasks struct {
	mu     sync.Mutex
	closed bool
	// closing is cancelled by close: the tasks' loops stop on it, and
	// the contexts of the effects in flight (agent calls) derive from it
	// (context, closable).
	closing     context.Context
	stopClosing context.CancelFunc
	wg          sync.WaitGroup
	timers      map[*taskTimer]struct{} // pending
}

type taskTimer struct {
	t    clock.Timer
	drop func() // called instead of the function when it will not run
}

func newTasks() *tasks {
	t := &tasks{timers: map[*taskTimer]struct{}{}}
	t.closing, t.stopClosing = context.WithCancel(context.Background())
	return t
}

// goDo runs f on its own goroutine, tracked; false (f not run) once
// closing.
func (t *tasks) goDo(f func()) bool {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return false
	}
	t.wg.Add(1)
	t.mu.Unlock()
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}

// afterFunc runs f once d has passed on clk, tracked; nothing once
// closing (a pending call is cancelled by close, one that fires after it
// does not run f).
func (t *tasks) afterFunc(clk clock.Clock, d time.Duration, f func()) {
	t.afterFuncOr(clk, d, f, nil)
}

// repeat runs f every d on clk until ctx ends or close.
func (t *tasks) repeat(ctx context.Context, clk clock.Clock, d time.Duration, f func()) {
	var tick func()
	tick = func() {
		if ctx.Err() != nil {
			return
		}
		f()
		if ctx.Err() == nil {
			t.afterFunc(clk, d, tick)
		}
	}
	t.afterFunc(clk, d, tick)
}

// handOff runs f(true) at the clock's current instant (at once on a real
// clock, at the next run of a virtual one: a script's steps stay in
// order), tracked; f(false) instead when the conductor closes first.
func (t *tasks) handOff(clk clock.Clock, f func(run bool)) {
	t.afterFuncOr(clk, 0, func() { f(true) }, func() { f(false) })
}

// afterFuncOr is afterFunc calling drop, when not nil, once f will not
// run.
func (t *tasks) afterFuncOr(clk clock.Clock, d time.Duration, f, drop func()) {
	if drop == nil {
		drop = func() {}
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		drop()
		return
	}
	defer t.mu.Unlock()
	t.wg.Add(1)
	tt := &taskTimer{drop: drop}
	// The callback takes t.mu first, so it sees tt registered below.
	tt.t = clk.AfterFunc(d, func() {
		t.mu.Lock()
		_, pending := t.timers[tt]
		delete(t.timers, tt)
		run := pending && !t.closed
		t.mu.Unlock()
		if !pending {
			return // close cancelled it, dropped it and counted it done
		}
		defer t.wg.Done()
		if run {
			f()
		} else {
			drop()
		}
	})
	t.timers[tt] = struct{}{}
}

// context is ctx, also cancelled once the conductor closes: a task that
// waits on an agent must not hold Close up.
func (t *tasks) context(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(t.closing, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// isClosed reports whether close has begun.
func (t *tasks) isClosed() bool { return t.closing.Err() != nil }

// closable is a flow's effect table (perform) that Close stops: an
// effect is not started once the conductor closes, and one in flight
// (an agent call) is cancelled by Close, its answer — whatever the cancel
// made of it — dropped. Either way the flow's loop stops with errClosed
// and the record stays in its step, saved before the effect, for the
// recovery of the next start or another replica's take-over (every step
// is repeatable). Whoever started the flow — a request, an agent's
// report on the bus, a task of the conductor — it does not hold Close up.
func closable[R, E, A any](t *tasks, perform func(context.Context, R, A) (E, bool, error)) func(context.Context, R, A) (E, bool, error) {
	return func(ctx context.Context, r R, a A) (E, bool, error) {
		var none E
		if t.isClosed() {
			return none, false, errClosed
		}
		ctx, cancel := t.context(ctx)
		defer cancel()
		ev, ok, err := perform(ctx, r, a)
		if t.isClosed() {
			return none, false, errClosed
		}
		return ev, ok, err
	}
}

// close refuses new work, cancels the pending timers and waits until what
// runs has returned, or ctx ends.
func (t *tasks) close(ctx context.Context) error {
	t.mu.Lock()
	var dropped []*taskTimer
	if !t.closed {
		t.closed = true
		t.stopClosing()
		for tt := range t.timers {
			if tt.t.Stop() {
				delete(t.timers, tt)
				dropped = append(dropped, tt)
			}
		}
	}
	t.mu.Unlock()
	for _, tt := range dropped {
		tt.drop()
		t.wg.Done()
	}
	idle := make(chan struct{})
	go func() {
		t.wg.Wait()
		close(idle)
	}()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the conductor's flows to stop: %w", ctx.Err())
	}
}

// handOff runs a flow's rest in the background (flow.Flow.Start's spawn,
// flow.Driver.Spawn), tracked by Close.
func (c *Conductor) handOff(rest func(run bool)) { c.tasks.handOff(c.clock, rest) }

// Close stops the conductor: it starts nothing more (ticks, queued
// slots, the rest of an action Act began, any flow's next effect; a flow
// not done is left in its record for the next start's Recover), cancels
// its pending timers and the effects in flight (an agent call returns at
// once, its answer dropped: see closable), and waits until every
// goroutine and timer it started has returned, or ctx ends (then it
// returns ctx's error and they may still run). Call it once the callers
// that feed the conductor stopped sending (the API, the bus's
// subscriptions unsubscribed) and before closing the store: once it
// returns nil, nothing the conductor started writes to the store; the
// callers' own goroutines (a request, a report's handler) return soon
// after, their flows' effects refused.
func (c *Conductor) Close(ctx context.Context) error {
	return c.tasks.close(ctx)
}
