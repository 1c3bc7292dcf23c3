package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"keel/internal/bus"
	"keel/internal/store"
)

// agentRefresh is how often a server reads the agents' credential records:
// the bound on how long a revoked agent's reports are still taken, and on
// when the embedded bus drops its connections.
const agentRefresh = time.Second

// agentRegistry is the servers' view of the agents' bus identities (store
// records written by keel agent enroll and revoke): the embedded bus asks
// it at each agent's connection, the conductor handlers ask it at each
// call.
type agentRegistry struct {
	st  store.IdentityStore
	log *slog.Logger

	mu      sync.Mutex
	known   map[string]store.AgentCredential
	onMoved func(host string) // a record changed (the embedded bus drops the host's connections)
}

var _ bus.AgentStates = (*agentRegistry)(nil)

// AgentState implements bus.AgentStates from the store itself, so that an
// agent enrolled a moment ago connects at once.
func (r *agentRegistry) AgentState(ctx context.Context, host string) (int64, bool, error) {
	c, err := r.st.GetAgentCredential(ctx, host)
	if errors.Is(err, store.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return c.Epoch, c.Revoked, nil
}

// revoked reports whether host's identity is revoked: as of the last
// refresh if it was not then (a revocation holds within agentRefresh),
// and as the store says now if it was (an agent enrolled again a moment
// ago is served at once). A store that cannot be read keeps it revoked.
func (r *agentRegistry) revoked(ctx context.Context, host string) bool {
	r.mu.Lock()
	was := r.known[host].Revoked
	r.mu.Unlock()
	if !was {
		return false
	}
	c, err := r.st.GetAgentCredential(ctx, host)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return true
	}
	if c.Revoked {
		return true
	}
	r.mu.Lock()
	if err == nil {
		r.known[host] = c
	} else {
		delete(r.known, host)
	}
	r.mu.Unlock()
	return false
}

// refresh reads every record and tells onMoved of each host whose record
// changed since the last read.
func (r *agentRegistry) refresh(ctx context.Context) error {
	list, err := r.st.ListAgentCredentials(ctx)
	if err != nil {
		return err
	}
	next := make(map[string]store.AgentCredential, len(list))
	for _, c := range list {
		next[c.Host] = c
	}
	r.mu.Lock()
	var moved []string
	if r.known != nil {
		for h, c := range next {
			if old, ok := r.known[h]; !ok || old.Epoch != c.Epoch || old.Revoked != c.Revoked {
				moved = append(moved, h)
			}
		}
	}
	r.known = next
	onMoved := r.onMoved
	r.mu.Unlock()
	for _, h := range moved {
		c := next[h]
		r.log.Info("agent bus identity changed", "host", h, "epoch", c.Epoch, "revoked", c.Revoked)
		if onMoved != nil {
			onMoved(h)
		}
	}
	return nil
}

// run refreshes every agentRefresh until ctx ends.
func (r *agentRegistry) run(ctx context.Context) {
	t := time.NewTicker(agentRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := r.refresh(rctx); err != nil && ctx.Err() == nil {
				r.log.Warn("reading the agents' bus identities", "err", err)
			}
			cancel()
		}
	}
}
