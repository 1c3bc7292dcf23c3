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

// about is what a report or call from an agent names: a host, an
// instance (or a consumer named as one), a migration. A call of a kind
// that names a host or an instance names one even when it gives an empty
// string (which then is no host or instance of the sender's).
type about struct {
	Host, Instance           string
	namesHost, namesInstance bool
	Migration                int64 // 0: none named
}

// onHost is about host.
func onHost(host string) about { return about{Host: host, namesHost: true} }

// withInstance is a also about instance uuid.
func (a about) withInstance(uuid string) about {
	a.Instance, a.namesInstance = uuid, true
	return a
}

// concernsSender is the one check every report from an agent, and every
// call naming a host, passes before it is handled: everything it names
// must be what the store places on the sender's host.
//   - A host must be the sender.
//   - A migration must exist and be the sender's to carry out: its source
//     (a live copy, a cold move's disk), or for an evacuation its
//     destination (the rebuild runs there; the source is down).
//   - An instance that exists must concern the sender (instanceConcerns:
//     it runs there, moves to or from there, or holds an allocation
//     there). One that does not exist may be named only while no consumer
//     of its UUID holds anything outside the sender's tree, and not as a
//     migration's consumer: a report of a build whose instance was
//     deleted meanwhile releases what is left of it, which must be the
//     sender's own.
//
// Anything else is refused with code forbidden, so a report cannot free
// or change another host's allocations, instances or migrations.
func concernsSender(ctx context.Context, st ServedStore, a about) error {
	from := sender(ctx)
	if from == "" {
		return forbidden("a call from an unknown sender")
	}
	if a.namesHost && a.Host != from {
		return forbidden("host %q may not report or act for host %q", from, a.Host)
	}
	if a.Migration != 0 {
		if err := migrationOfSender(ctx, st, from, a.Migration); err != nil {
			return err
		}
	}
	if a.namesInstance {
		if a.Instance == "" {
			return forbidden("host %q: the call names no instance", from)
		}
		if err := instanceOfSender(ctx, st, from, a.Instance); err != nil {
			return err
		}
	}
	return nil
}

// migrationOfSender refuses a migration the sender does not carry out.
func migrationOfSender(ctx context.Context, st ServedStore, from string, id int64) error {
	m, err := st.GetMigration(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return forbidden("host %q may not report on migration %d: there is no such migration", from, id)
	}
	if err != nil {
		return fmt.Errorf("checking the sender of a report of migration %d: %w", id, err)
	}
	worker := m.SourceHost
	if m.Type == records.MigrationTypeEvac {
		worker = m.DestHost
	}
	if from != worker {
		return forbidden("host %q may not report on %s %d, which %q carries out", from, m.Type, id, worker)
	}
	return nil
}

// instanceOfSender refuses an instance (or a consumer named as one) that
// the store does not place on the sender's host.
func instanceOfSender(ctx context.Context, st ServedStore, from, uuid string) error {
	tree := newHostTree(st, from)
	inst, err := st.GetInstance(ctx, uuid)
	switch {
	case err == nil:
		ok, err := instanceConcerns(ctx, st, tree, inst)
		if err != nil {
			return err
		}
		if !ok {
			return forbidden("host %q may not report on instance %s (it neither runs, moves nor is allocated there)", from, uuid)
		}
		return nil
	case !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("checking the sender of a report of instance %s: %w", uuid, err)
	}
	c, err := st.GetConsumer(ctx, uuid)
	if errors.Is(err, store.ErrNotFound) {
		return nil // nothing of it anywhere: only the sender's own guest is at stake
	}
	if err != nil {
		return fmt.Errorf("checking the sender of a report of instance %s: %w", uuid, err)
	}
	ms, err := st.ListMigrations(ctx, store.MigrationFilter{UUID: uuid})
	if err != nil {
		return fmt.Errorf("checking the sender of a report of instance %s: %w", uuid, err)
	}
	if c.Type == placement.ConsumerMigration || len(ms) > 0 {
		return forbidden("host %q may not report on %s as an instance: it is a migration's consumer", from, uuid)
	}
	for p := range c.Allocations {
		mine, err := tree.has(ctx, p)
		if err != nil {
			return err
		}
		if !mine {
			return forbidden("host %q may not report on %s: no such instance, and its consumer holds resources on provider %s, outside the host's tree", from, uuid, p)
		}
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
