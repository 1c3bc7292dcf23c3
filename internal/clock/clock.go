// Package clock gives keel's core its time from outside: services pass the
// wall clock, the simulator and tests pass a Virtual clock they advance
// themselves, so the same code runs deterministically in both.
package clock

import (
	"container/heap"
	"sync"
	"time"
)

// Clock tells the time and runs functions later.
type Clock interface {
	Now() time.Time
	// AfterFunc runs f once d has passed (on its own goroutine for the wall
	// clock; inside Advance/Run for a virtual one). The returned Timer
	// cancels it.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop cancels the call; it reports whether it was still pending.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

// Now implements Clock.
func (Real) Now() time.Time { return time.Now() }

// AfterFunc implements Clock.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Virtual is a discrete-event clock: time moves only when Advance or Run
// moves it, and due functions run in time order (ties in scheduling order)
// on the caller's goroutine.
type Virtual struct {
	mu    sync.Mutex
	now   time.Time
	seq   uint64
	queue eventQueue
}

// Epoch is where virtual clocks start unless told otherwise:
// 2026-01-01T00:00:00Z, so t=0 in a scenario prints readably.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// NewVirtual returns a virtual clock at start.
func NewVirtual(start time.Time) *Virtual { return &Virtual{now: start} }

// Now implements Clock.
func (v *Virtual) Now() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now
}

// AfterFunc implements Clock. A negative d counts as zero.
func (v *Virtual) AfterFunc(d time.Duration, f func()) Timer {
	if d < 0 {
		d = 0
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seq++
	e := &event{at: v.now.Add(d), seq: v.seq, f: f, clock: v}
	heap.Push(&v.queue, e)
	return e
}

// Pending returns how many calls are scheduled.
func (v *Virtual) Pending() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.queue)
}

// Step runs the next due call, moving time to it, if one is due at or
// before until; it reports whether it ran one.
func (v *Virtual) Step(until time.Time) bool {
	v.mu.Lock()
	if len(v.queue) == 0 || v.queue[0].at.After(until) {
		v.mu.Unlock()
		return false
	}
	e := heap.Pop(&v.queue).(*event)
	e.index = -1
	if e.at.After(v.now) {
		v.now = e.at
	}
	v.mu.Unlock()
	e.f()
	return true
}

// Advance runs every call due up to now+d, in order, then sets the time to
// now+d.
func (v *Virtual) Advance(d time.Duration) {
	until := v.Now().Add(d)
	v.RunUntil(until)
}

// RunUntil runs every call due at or before until (including calls those
// calls schedule), then sets the time to until.
func (v *Virtual) RunUntil(until time.Time) {
	for v.Step(until) {
	}
	v.mu.Lock()
	if until.After(v.now) {
		v.now = until
	}
	v.mu.Unlock()
}

type event struct {
	at    time.Time
	seq   uint64
	f     func()
	index int
	clock *Virtual
}

func (e *event) Stop() bool {
	v := e.clock
	v.mu.Lock()
	defer v.mu.Unlock()
	if e.index < 0 {
		return false
	}
	heap.Remove(&v.queue, e.index)
	e.index = -1
	return true
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}
func (q *eventQueue) Push(x any) {
	e := x.(*event)
	e.index = len(*q)
	*q = append(*q, e)
}
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}
