package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// hostDeleteQueries are DeleteService's statements. The two SQL stores
// keep placement's providers in tables of the same shape (providers with
// name and parent_uuid, allocations by provider_uuid, inventories going
// with their provider), so the removal of a host's tree is written here
// once, beside the records it goes with.
type hostDeleteQueries struct {
	countInstancesOn, countMovesOn                string
	lockRoot, lockNextChild, countHeld, deleteRow string
	lockNextAggregate                             string
	deleteService, deleteHostRecord               string
}

func newHostDeleteQueries(d *Dialect, w, lock func(string) string) hostDeleteQueries {
	return hostDeleteQueries{
		countInstancesOn: w(`SELECT COUNT(*) FROM instances WHERE host = $1`),
		countMovesOn: w(`SELECT COUNT(*) FROM migrations WHERE (source_host = $1 OR dest_host = $1) AND ` + d.active +
			` AND status <> '` + string(records.MigrationDone) + `'`),
		lockRoot:          lock(`SELECT uuid FROM providers WHERE name = $1 AND parent_uuid IS NULL`),
		lockNextChild:     lock(`SELECT uuid FROM providers WHERE parent_uuid = $1 AND uuid > $2 ORDER BY uuid LIMIT 1`),
		countHeld:         w(`SELECT COUNT(*) FROM allocations WHERE provider_uuid = $1`),
		deleteRow:         w(`DELETE FROM providers WHERE uuid = $1`),
		lockNextAggregate: lock(`SELECT id, data FROM aggregates WHERE id > $1 ORDER BY id LIMIT 1`),
		deleteService:     w(`DELETE FROM services WHERE host = $1`),
		deleteHostRecord:  w(`DELETE FROM host_records WHERE host = $1`),
	}
}

// DeleteService implements store.Hosts in one write transaction: the
// service row is locked first, then the checks, then the host's provider
// tree (locked root first, each provider's children in UUID order) is
// checked for allocations and deleted leaves first, then the host leaves
// its aggregates, then its host record and service row go.
func (r *Records) DeleteService(ctx context.Context, host string) (records.Service, error) {
	var sv records.Service
	err := r.db.Write(ctx, func(tx Tx) error {
		sv = records.Service{}
		if err := scanJSON(tx.QueryRow(r.q.lockService, host), &sv); err != nil {
			return fmt.Errorf("service %s: %w", host, err)
		}
		if err := r.checkHostIdle(tx, host); err != nil {
			return err
		}
		if err := r.deleteHostTree(tx, host); err != nil {
			return err
		}
		if err := r.leaveAggregates(tx, host); err != nil {
			return err
		}
		n, err := tx.Exec(r.q.hostDelete.deleteHostRecord, host)
		if err != nil {
			return fmt.Errorf("deleting the host record: %w", err)
		}
		if n > 0 {
			if err := tx.Note(store.ChangeHost, host); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(r.q.hostDelete.deleteService, host); err != nil {
			return fmt.Errorf("deleting the service row: %w", err)
		}
		return tx.Note(store.ChangeService, host)
	})
	if err != nil {
		return records.Service{}, fmt.Errorf("deleting service %s: %w", host, err)
	}
	return sv, nil
}

// checkHostIdle refuses while an instance is on host or a migration in
// progress involves it.
func (r *Records) checkHostIdle(tx Tx, host string) error {
	var n int64
	if err := tx.QueryRow(r.q.hostDelete.countInstancesOn, host).Scan(&n); err != nil {
		return fmt.Errorf("counting the instances on the host: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("%d instances: %w", n, store.ErrHostHasInstances)
	}
	if err := tx.QueryRow(r.q.hostDelete.countMovesOn, host).Scan(&n); err != nil {
		return fmt.Errorf("counting the migrations of the host: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("%d migrations: %w", n, store.ErrHostHasMigrations)
	}
	return nil
}

// deleteHostTree deletes the providers of host's tree if none holds
// allocations.
func (r *Records) deleteHostTree(tx Tx, host string) error {
	q := r.q.hostDelete
	var root string
	switch err := tx.QueryRow(q.lockRoot, host).Scan(&root); {
	case errors.Is(err, sql.ErrNoRows):
		return nil // never registered a provider, or it was deleted
	case err != nil:
		return fmt.Errorf("reading the host's provider: %w", err)
	}
	tree := []string{root}
	for i := 0; i < len(tree); i++ {
		after := ""
		for {
			var child string
			err := tx.QueryRow(q.lockNextChild, tree[i], after).Scan(&child)
			if errors.Is(err, sql.ErrNoRows) {
				break
			}
			if err != nil {
				return fmt.Errorf("reading the children of provider %s: %w", tree[i], err)
			}
			tree = append(tree, child)
			after = child
		}
	}
	for _, u := range tree {
		var n int64
		if err := tx.QueryRow(q.countHeld, u).Scan(&n); err != nil {
			return fmt.Errorf("checking allocations on provider %s: %w", u, err)
		}
		if n > 0 {
			return &placement.InUseError{Provider: u}
		}
	}
	slices.Reverse(tree) // children before their parents
	for _, u := range tree {
		if _, err := tx.Exec(q.deleteRow, u); err != nil {
			return fmt.Errorf("deleting provider %s: %w", u, err)
		}
		if err := tx.Note(store.ChangeProvider, u); err != nil {
			return err
		}
	}
	return nil
}

// leaveAggregates takes host out of every compute aggregate that lists
// it.
func (r *Records) leaveAggregates(tx Tx, host string) error {
	var after int64
	for {
		var (
			id   int64
			data []byte
		)
		err := tx.QueryRow(r.q.hostDelete.lockNextAggregate, after).Scan(&id, &data)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading aggregates: %w", err)
		}
		after = id
		var a records.Aggregate
		if err := decode(data, &a); err != nil {
			return fmt.Errorf("aggregate %d: %w", id, err)
		}
		i := slices.Index(a.Hosts, host)
		if i < 0 {
			continue
		}
		a.ID, a.Hosts = id, slices.Delete(a.Hosts, i, i+1)
		if err := putJSON(tx, r.q.putAggregate, a, a.ID, a.Name); err != nil {
			return fmt.Errorf("aggregate %d: %w", id, err)
		}
		if err := tx.Note(store.ChangeAggregate, strconv.FormatInt(id, 10)); err != nil {
			return err
		}
	}
}
