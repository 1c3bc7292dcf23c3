package rpc

import (
	"context"
	"time"

	"keel/internal/records"
	"keel/internal/store"
)

// heartbeatRecorder records the agents' heartbeats. With a store that
// batches (store.ServiceBatch), the heartbeats that arrive together are
// written in one transaction (groupCommit: a server with thousands of
// agents commits a few times a second rather than once per heartbeat);
// with any other store, each heartbeat is its own UpdateService.
type heartbeatRecorder struct {
	*groupCommit[heartbeat]
	batch store.ServiceBatch // nil: one write per heartbeat
}

// heartbeat is one agent's heartbeat.
type heartbeat struct {
	host string
	at   time.Time
}

func newHeartbeatRecorder(st ServedStore) *heartbeatRecorder {
	b, _ := st.(store.ServiceBatch)
	g := &groupCommit[heartbeat]{
		key: func(hb heartbeat) string { return hb.host },
		// A host's heartbeats queued together (the writer behind, the
		// agent repeating) are one write: the newest is the one that
		// counts.
		coalesce: true,
		gather:   batchGather,
		writeOne: func(ctx context.Context, hb heartbeat) error {
			_, err := st.UpdateService(ctx, hb.host, seen(hb.at))
			return err
		},
	}
	if b != nil {
		g.writeMany = func(ctx context.Context, hbs []heartbeat) error {
			hosts := make([]string, len(hbs))
			for i, hb := range hbs {
				hosts[i] = hb.host
			}
			_, err := b.UpdateServices(ctx, hosts, func(i int, s *records.Service) error { return seen(hbs[i].at)(s) })
			return err
		}
	}
	return &heartbeatRecorder{groupCommit: g, batch: b}
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
	return r.add(ctx, heartbeat{host: host, at: at})
}
