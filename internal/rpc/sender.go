package rpc

import (
	"context"
	"errors"
	"fmt"

	"keel/internal/bus"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// The servers answer an agent's report or store call only when it concerns
// the agent's own host: the sender is the host token of the subject it
// arrived on (keel.conductor.<host>.<method>), which the bus lets each
// agent identity publish with its own host only.

// ServedStore is what the servers read and write on the agents' behalf
// (ServeConductor): providers and allocations, host records and services,
// instances and migrations — never flavors, groups, quotas, plans or the
// identity directory, which no agent has a call for.
type ServedStore interface {
	store.Placement
	store.Hosts
	store.Instances
	store.Migrations
}

// forbidden is the error of a call about another host than its sender's.
func forbidden(format string, args ...any) error {
	return bus.WithCode(bus.CodeForbidden, fmt.Errorf(format, args...))
}

// sender is the host that sent the call being handled.
func sender(ctx context.Context) string { return bus.ConductorSender(bus.MessageSubject(ctx)) }

// sentBy refuses the call unless host is its sender.
func sentBy(ctx context.Context, host string) error {
	if from := sender(ctx); from == "" || from != host {
		return forbidden("host %q may not report or act for host %q", from, host)
	}
	return nil
}

// migrationOfSender refuses a copy report unless the sender is the host
// that does the migration's work: its source (a live copy, a cold move's
// disk), or for an evacuation its destination (the rebuild runs there; the
// source is down).
func migrationOfSender(ctx context.Context, st ServedStore, id int64) error {
	m, err := st.GetMigration(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil // the conductor answers a report of an unknown migration
	}
	if err != nil {
		return fmt.Errorf("checking the sender of a report of migration %d: %w", id, err)
	}
	worker := m.SourceHost
	if m.Type == records.MigrationTypeEvac {
		worker = m.DestHost
	}
	if from := sender(ctx); from == "" || from != worker {
		return forbidden("host %q may not report on %s %d, which %q carries out", from, m.Type, id, worker)
	}
	return nil
}

// writesOfSender refuses an agent's allocation writes unless each changes
// allocations on the sender's own provider tree only, except that it may
// drop what an instance that runs on the sender (its record says so)
// holds elsewhere. Each write must name the consumer generation the check
// read (or a new consumer), so the check and the write see the same
// allocations.
func writesOfSender(ctx context.Context, st ServedStore, writes []placement.AllocationWrite) error {
	from := sender(ctx)
	if from == "" {
		return forbidden("allocation writes from an unknown sender")
	}
	tree := newHostTree(st, from)
	for _, w := range writes {
		if w.AnyConsumerGeneration {
			return forbidden("host %q: an agent's allocation write must name the consumer generation", from)
		}
		old := map[string]placement.Resources{}
		c, err := st.GetConsumer(ctx, w.ConsumerUUID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if w.ConsumerGeneration != nil {
				continue // the write fails on its generation
			}
		case err != nil:
			return fmt.Errorf("checking an agent's write of %s: %w", w.ConsumerUUID, err)
		default:
			if w.ConsumerGeneration == nil || *w.ConsumerGeneration != c.Generation {
				continue // the write fails on its generation
			}
			old = c.Allocations
		}
		runsHere := -1 // unknown yet
		for _, p := range changedProviders(old, w.Allocations) {
			mine, err := tree.has(ctx, p)
			if err != nil {
				return err
			}
			if mine {
				continue
			}
			if _, kept := w.Allocations[p]; kept {
				return forbidden("host %q may not allocate on provider %s (another host's)", from, p)
			}
			if runsHere < 0 {
				runsHere = 0
				inst, err := st.GetInstance(ctx, w.ConsumerUUID)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("checking an agent's write of %s: %w", w.ConsumerUUID, err)
				}
				if err == nil && inst.Host == from {
					runsHere = 1
				}
			}
			if runsHere == 0 {
				return forbidden("host %q may not remove %s's allocation on provider %s (another host's)", from, w.ConsumerUUID, p)
			}
		}
	}
	return nil
}

// changedProviders are the providers whose allocation differs between old
// and new.
func changedProviders(old, new map[string]placement.Resources) []string {
	var out []string
	for p, r := range old {
		if n, ok := new[p]; !ok || !sameResources(r, n) {
			out = append(out, p)
		}
	}
	for p := range new {
		if _, ok := old[p]; !ok {
			out = append(out, p)
		}
	}
	return out
}

func sameResources(a, b placement.Resources) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
