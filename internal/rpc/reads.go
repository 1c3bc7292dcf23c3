package rpc

import (
	"context"
	"errors"
	"fmt"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// The servers answer an agent's store reads only with records that
// concern the agent's host: consumers on its provider tree, instances that
// run there (or hold an allocation there, or move to or from it), and
// migrations to or from it. Anything else is refused with code forbidden,
// which the agent's side reads as store.ErrForbidden. A record that does
// not exist is ErrNotFound, as before.

// hostTree tells whether providers are in a host's provider tree, caching
// the answers of one call.
type hostTree struct {
	st   ServedStore
	host string
	own  map[string]bool
}

func newHostTree(st ServedStore, host string) *hostTree {
	return &hostTree{st: st, host: host, own: map[string]bool{}}
}

// has reports whether provider uuid is host's own provider or below it.
func (t *hostTree) has(ctx context.Context, uuid string) (bool, error) {
	if v, ok := t.own[uuid]; ok {
		return v, nil
	}
	p := uuid
	for range 16 { // provider trees are shallow
		pr, err := t.st.GetProvider(ctx, p)
		if errors.Is(err, store.ErrNotFound) {
			t.own[uuid] = false
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("checking whether provider %s is host %s's: %w", uuid, t.host, err)
		}
		if pr.ParentUUID == "" {
			t.own[uuid] = pr.Name == t.host
			return t.own[uuid], nil
		}
		p = pr.ParentUUID
	}
	t.own[uuid] = false
	return false, nil
}

// holdsIn reports whether c allocates anything in the tree.
func (t *hostTree) holdsIn(ctx context.Context, c placement.Consumer) (bool, error) {
	for p := range c.Allocations {
		if mine, err := t.has(ctx, p); err != nil || mine {
			return mine, err
		}
	}
	return false, nil
}

// senderOrForbidden is the call's sender; forbidden if it has none.
func senderOrForbidden(ctx context.Context, what string) (string, error) {
	from := sender(ctx)
	if from == "" {
		return "", forbidden("%s from an unknown sender", what)
	}
	return from, nil
}

// providerOfSender refuses consumers_on for a provider outside the
// sender's tree.
func providerOfSender(ctx context.Context, st ServedStore, uuid string) error {
	from, err := senderOrForbidden(ctx, "consumers_on")
	if err != nil {
		return err
	}
	mine, err := newHostTree(st, from).has(ctx, uuid)
	if err != nil {
		return err
	}
	if !mine {
		return forbidden("host %q may not list the consumers of provider %s (not in its tree)", from, uuid)
	}
	return nil
}

// movesWith reports whether a migration of instance uuid (an active one
// only, if activeOnly) has host for its source or destination.
func movesWith(ctx context.Context, st ServedStore, uuid, host string, activeOnly bool) (bool, error) {
	ms, err := st.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: uuid, Host: host, ActiveOnly: activeOnly})
	if err != nil {
		return false, fmt.Errorf("checking the migrations of %s: %w", uuid, err)
	}
	return len(ms) > 0, nil
}

// instanceConcerns reports whether inst concerns host: it runs there, an
// active migration moves it to or from there, it holds an allocation in
// host's tree (a boot scheduled there), or, while a task is still at work
// on it, any migration of it (ended or not) had host for an end — the
// record may say the move ended before the instance is settled, and the
// host's audit leaves a guest alone while its instance has a task, so it
// must be able to read it.
func instanceConcerns(ctx context.Context, st ServedStore, t *hostTree, inst records.Instance) (bool, error) {
	if inst.Host == t.host {
		return true, nil
	}
	busy := inst.TaskState != records.TaskNone || inst.VMState == records.VMBuilding
	if ok, err := movesWith(ctx, st, inst.UUID, t.host, !busy); err != nil || ok {
		return ok, err
	}
	c, err := st.GetConsumer(ctx, inst.UUID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking the allocations of %s: %w", inst.UUID, err)
	}
	return t.holdsIn(ctx, c)
}

// instanceForSender is get_instance for an agent: the instance if it
// concerns the sender's host.
func instanceForSender(ctx context.Context, st ServedStore, uuid string) (records.Instance, error) {
	from, err := senderOrForbidden(ctx, "get_instance")
	if err != nil {
		return records.Instance{}, err
	}
	inst, err := st.GetInstance(ctx, uuid)
	if err != nil {
		return records.Instance{}, err
	}
	ok, err := instanceConcerns(ctx, st, newHostTree(st, from), inst)
	if err != nil {
		return records.Instance{}, err
	}
	if !ok {
		return records.Instance{}, forbidden("host %q may not read instance %s (it neither runs, moves nor is allocated there)", from, uuid)
	}
	return inst, nil
}

// consumerForSender is get_consumer for an agent: the consumer if it
// allocates in the sender's tree, or is an instance that concerns the
// sender, or a migration to or from it.
func consumerForSender(ctx context.Context, st ServedStore, uuid string) (placement.Consumer, error) {
	from, err := senderOrForbidden(ctx, "get_consumer")
	if err != nil {
		return placement.Consumer{}, err
	}
	c, err := st.GetConsumer(ctx, uuid)
	if err != nil {
		return placement.Consumer{}, err
	}
	t := newHostTree(st, from)
	if ok, err := t.holdsIn(ctx, c); err != nil || ok {
		return c, err
	}
	inst, err := st.GetInstance(ctx, uuid)
	switch {
	case err == nil:
		if ok, err := instanceConcerns(ctx, st, t, inst); err != nil || ok {
			return c, err
		}
	case !errors.Is(err, store.ErrNotFound):
		return placement.Consumer{}, fmt.Errorf("checking consumer %s: %w", uuid, err)
	}
	ms, err := st.ListMigrations(ctx, store.MigrationFilter{UUID: uuid, Host: from})
	if err != nil {
		return placement.Consumer{}, fmt.Errorf("checking consumer %s: %w", uuid, err)
	}
	if len(ms) > 0 {
		return c, nil
	}
	return placement.Consumer{}, forbidden("host %q may not read the allocations of %s (not on its tree, nor of its instances or migrations)", from, uuid)
}

// migrationFilterOfSender limits list_migrations to the sender's
// migrations: a filter without a host gets the sender's, a filter naming
// another host is refused.
func migrationFilterOfSender(ctx context.Context, f store.MigrationFilter) (store.MigrationFilter, error) {
	from, err := senderOrForbidden(ctx, "list_migrations")
	if err != nil {
		return f, err
	}
	switch f.Host {
	case "":
		f.Host = from
	case from:
	default:
		return f, forbidden("host %q may not list the migrations of host %q", from, f.Host)
	}
	return f, nil
}

// migrationForSender is get_migration for an agent: the migration if the
// sender is its source or destination.
func migrationForSender(ctx context.Context, st ServedStore, id int64) (records.Migration, error) {
	from, err := senderOrForbidden(ctx, "get_migration")
	if err != nil {
		return records.Migration{}, err
	}
	m, err := st.GetMigration(ctx, id)
	if err != nil {
		return records.Migration{}, err
	}
	if m.SourceHost != from && m.DestHost != from {
		return records.Migration{}, forbidden("host %q may not read migration %d (from %q to %q)", from, id, m.SourceHost, m.DestHost)
	}
	return m, nil
}
