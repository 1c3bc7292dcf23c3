package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// RequestIDHeader carries a call's request id. A call sent again with the
// same id (after the connection was lost while waiting for the answer) is
// not handled a second time: the handler's first answer is sent again, or,
// if it is still running, sent when it returns.
const RequestIDHeader = "Keel-Request-Id"

// DedupeWindow is how long a handled request's answer is kept for a
// repeated call with the same id; dedupeMax bounds how many are kept (the
// oldest finished ones go first), so a flood of calls cannot exhaust
// memory.
const (
	DedupeWindow = 10 * time.Minute
	dedupeMax    = 200_000
)

type requestIDKey struct{}

type attemptKey struct{}

// WithAttempt returns a context whose calls wait at most d for an answer
// (while the handler still gets the whole of ctx's deadline): past d a
// call fails wrapping ErrUnavailable and ErrNoAnswerYet, and the caller may
// send it again with the same request id, which waits for the first run's
// answer rather than running the handler again. It is how a caller gets
// past an answer lost without its own connection breaking (the NATS
// cluster node the handler's agent used went down).
func WithAttempt(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, attemptKey{}, d)
}

func attemptTimeout(ctx context.Context) time.Duration {
	d, _ := ctx.Value(attemptKey{}).(time.Duration)
	return d
}

// WithRequestID returns a context whose calls carry id as their request
// id. Give every attempt of one logical call the same id, and different
// calls different ids (NewRequestID).
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id WithRequestID put in ctx, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// NewRequestID returns a random request id.
func NewRequestID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// dedupe remembers the requests a connection's handlers received, by
// subject and request id, with their answers.
type dedupe struct {
	mu      sync.Mutex
	entries map[dedupeKey]*dedupeEntry
	order   []dedupeKey // in order of arrival, for expiry
	now     func() time.Time
}

type dedupeKey struct{ subject, id string }

type dedupeEntry struct {
	arrived time.Time
	done    chan struct{} // closed once reply is set
	reply   []byte
}

// claim registers a request. It returns the entry and true if this is the
// first time the request arrives (the caller must handle it and call
// finish), or the existing entry and false for a repeat.
func (d *dedupe) claim(subject, id string) (*dedupeEntry, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	// Expire the oldest entries; a request still being handled stays.
	for len(d.order) > 0 {
		e := d.entries[d.order[0]]
		if e != nil && ((now.Sub(e.arrived) < DedupeWindow && len(d.order) < dedupeMax) || !e.finished()) {
			break
		}
		delete(d.entries, d.order[0])
		d.order = d.order[1:]
	}
	k := dedupeKey{subject, id}
	if e, ok := d.entries[k]; ok {
		return e, false
	}
	if d.entries == nil {
		d.entries = map[dedupeKey]*dedupeEntry{}
	}
	e := &dedupeEntry{arrived: now, done: make(chan struct{})}
	d.entries[k] = e
	d.order = append(d.order, k)
	return e, true
}

func (e *dedupeEntry) finished() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// finish records the answer and wakes the repeats waiting for it.
func (e *dedupeEntry) finish(reply []byte) {
	e.reply = reply
	close(e.done)
}

// size is the number of requests remembered (for tests).
func (d *dedupe) size() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.entries)
}
