package rpc

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"keel/internal/records"
	"keel/internal/store"
)

// maxHeartbeatBatch bounds how many heartbeats one transaction records.
const maxHeartbeatBatch = 512

// heartbeatGather is how long the writer waits, once a heartbeat is
// pending, for others to join it: a heartbeat answers this much later
// (agents send one every report_interval, 10 s), and at a hundred
// heartbeats a second the server commits a few times per gather rather
// than a hundred times.
const heartbeatGather = 50 * time.Millisecond

// heartbeatWriteTimeout bounds one batch's write (its callers wait for
// it, each until its own deadline).
const heartbeatWriteTimeout = 30 * time.Second

// heartbeatRecorder records the agents' heartbeats. With a store that
// batches (store.ServiceBatch), the heartbeats that arrive within gather
// of the first pending one, or while a batch is being written, are
// written together, in one transaction (a server with thousands of agents
// commits a few times a second rather than once per heartbeat); with any
// other store, each heartbeat is its own UpdateService.
type heartbeatRecorder struct {
	st    ServedStore
	batch store.ServiceBatch // nil: one write per heartbeat

	mu      sync.Mutex
	gather  time.Duration
	pending []*heartbeat
	writing bool
}

// heartbeat is one agent's heartbeat waiting to be written.
type heartbeat struct {
	host string
	at   time.Time
	done chan error // buffered: the writer never waits for the caller
}

func newHeartbeatRecorder(st ServedStore) *heartbeatRecorder {
	b, _ := st.(store.ServiceBatch)
	return &heartbeatRecorder{st: st, batch: b, gather: heartbeatGather}
}

// seen applies a heartbeat at at to a service record.
func seen(at time.Time) func(*records.Service) error {
	return func(s *records.Service) error {
		if at.After(s.LastSeenUp) {
			s.LastSeenUp = at
		}
		s.UpdatedAt = at
		return nil
	}
}

// record writes host's heartbeat at at and returns once it is committed
// (or ctx ends).
func (r *heartbeatRecorder) record(ctx context.Context, host string, at time.Time) error {
	if r.batch == nil {
		_, err := r.st.UpdateService(ctx, host, seen(at))
		return err
	}
	hb := &heartbeat{host: host, at: at, done: make(chan error, 1)}
	r.mu.Lock()
	r.pending = append(r.pending, hb)
	if !r.writing {
		r.writing = true
		go r.write()
	}
	r.mu.Unlock()
	select {
	case err := <-hb.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// write writes what is pending, batch after batch, until nothing is.
func (r *heartbeatRecorder) write() {
	for {
		r.mu.Lock()
		gather := r.gather
		r.mu.Unlock()
		time.Sleep(gather)
		r.mu.Lock()
		n := min(len(r.pending), maxHeartbeatBatch)
		if n == 0 {
			r.writing = false
			r.mu.Unlock()
			return
		}
		batch := r.pending[:n:n]
		r.pending = slices.Clone(r.pending[n:])
		r.mu.Unlock()
		r.writeBatch(batch)
	}
}

// writeBatch writes one batch, sorted by host (stores that lock rows lock
// them in one order). If the batch fails as a whole — a host without a
// service record is enough — each heartbeat is written alone, so the
// failure reaches only the heartbeat it concerns.
func (r *heartbeatRecorder) writeBatch(batch []*heartbeat) {
	ctx, cancel := context.WithTimeout(context.Background(), heartbeatWriteTimeout)
	defer cancel()
	slices.SortStableFunc(batch, func(a, b *heartbeat) int { return strings.Compare(a.host, b.host) })
	if len(batch) > 1 {
		hosts := make([]string, len(batch))
		for i, hb := range batch {
			hosts[i] = hb.host
		}
		_, err := r.batch.UpdateServices(ctx, hosts, func(i int, s *records.Service) error { return seen(batch[i].at)(s) })
		if err == nil {
			for _, hb := range batch {
				hb.done <- nil
			}
			return
		}
	}
	for _, hb := range batch {
		_, err := r.st.UpdateService(ctx, hb.host, seen(hb.at))
		hb.done <- err
	}
}
