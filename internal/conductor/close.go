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
	done   chan struct{} // closed by close
	wg     sync.WaitGroup
	timers map[*taskTimer]struct{} // pending
}

type taskTimer struct{ t clock.Timer }

func newTasks() *tasks {
	return &tasks{done: make(chan struct{}), timers: map[*taskTimer]struct{}{}}
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
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.wg.Add(1)
	tt := &taskTimer{}
	// The callback takes t.mu first, so it sees tt registered below.
	tt.t = clk.AfterFunc(d, func() {
		t.mu.Lock()
		_, pending := t.timers[tt]
		delete(t.timers, tt)
		run := pending && !t.closed
		t.mu.Unlock()
		if !pending {
			return // close cancelled it and counted it done
		}
		defer t.wg.Done()
		if run {
			f()
		}
	})
	t.timers[tt] = struct{}{}
}

// context is ctx, also cancelled once the conductor closes: a task that
// waits on an agent must not hold Close up.
func (t *tasks) context(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-t.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// close refuses new work, cancels the pending timers and waits until what
// runs has returned, or ctx ends.
func (t *tasks) close(ctx context.Context) error {
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		close(t.done)
		for tt := range t.timers {
			if tt.t.Stop() {
				delete(t.timers, tt)
				t.wg.Done()
			}
		}
	}
	t.mu.Unlock()
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

// Close stops the conductor: it starts nothing more (ticks, queued
// slots, the rest of an action Act began; a flow not started is left in
// its record for the next start's Recover), cancels its pending timers
// and waits until every goroutine and timer it started has returned, or
// ctx ends (then it returns ctx's error and they may still run). Call it
// after the callers that feed the conductor stopped (the API, the bus's
// reports) and before closing the store: once it returns nil, nothing the
// conductor started writes to the store.
func (c *Conductor) Close(ctx context.Context) error {
	return c.tasks.close(ctx)
}
