package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Compute host aggregates, server groups, key pairs, quota limits and move
// plans.

// CreateAggregate implements store.Store.
func (r *Records) CreateAggregate(ctx context.Context, a records.Aggregate) (records.Aggregate, error) {
	if a.Name == "" {
		return records.Aggregate{}, &placement.InvalidError{Msg: "aggregate needs a name"}
	}
	err := r.db.Write(ctx, func(tx Tx) error {
		var err error
		// A taken name inserts nothing: ErrExists.
		if a.ID, err = insertID(tx, r.q.insertAggregate, a.Name); err != nil {
			return err
		}
		return r.putAggregate(tx, a)
	})
	if err != nil {
		return records.Aggregate{}, fmt.Errorf("creating aggregate %q: %w", a.Name, err)
	}
	return a, nil
}

// putAggregate writes an aggregate's row and notes the change; ErrExists if
// another aggregate has its name.
func (r *Records) putAggregate(tx Tx, a records.Aggregate) error {
	var taken int
	if err := tx.QueryRow(r.q.aggregateNameTaken, a.Name, a.ID).Scan(&taken); err != nil {
		return err
	}
	if taken > 0 {
		return fmt.Errorf("aggregate name %q: %w", a.Name, store.ErrExists)
	}
	if err := putJSON(tx, r.q.putAggregate, a, a.ID, a.Name); err != nil {
		return err
	}
	return tx.Note(store.ChangeAggregate, strconv.FormatInt(a.ID, 10))
}

// GetAggregate implements store.Store.
func (r *Records) GetAggregate(ctx context.Context, id int64) (records.Aggregate, error) {
	var a records.Aggregate
	if err := r.getJSON(ctx, &a, r.q.getAggregate, id); err != nil {
		return records.Aggregate{}, fmt.Errorf("aggregate %d: %w", id, err)
	}
	return a, nil
}

// ListAggregates implements store.Store.
func (r *Records) ListAggregates(ctx context.Context) ([]records.Aggregate, error) {
	out, err := listJSON[records.Aggregate](ctx, r, nil, r.q.listAggregates)
	if err != nil {
		return nil, fmt.Errorf("listing aggregates: %w", err)
	}
	return out, nil
}

// UpdateAggregate implements store.Store.
func (r *Records) UpdateAggregate(ctx context.Context, id int64, fn func(*records.Aggregate) error) (records.Aggregate, error) {
	a, err := updateJSON(ctx, r, r.q.lockAggregate, id, fn, func(tx Tx, a *records.Aggregate) error {
		a.ID = id
		return r.putAggregate(tx, *a)
	})
	if err != nil {
		return records.Aggregate{}, fmt.Errorf("updating aggregate %d: %w", id, err)
	}
	return a, nil
}

// DeleteAggregate implements store.Store.
func (r *Records) DeleteAggregate(ctx context.Context, id int64) error {
	err := r.db.Write(ctx, func(tx Tx) error {
		if err := deleteOne(tx.Exec(r.q.deleteAggregate, id)); err != nil {
			return err
		}
		return tx.Note(store.ChangeAggregate, strconv.FormatInt(id, 10))
	})
	if err != nil {
		return fmt.Errorf("deleting aggregate %d: %w", id, err)
	}
	return nil
}

// CreateServerGroup implements store.Store.
func (r *Records) CreateServerGroup(ctx context.Context, g records.ServerGroup) (records.ServerGroup, error) {
	if g.UUID == "" {
		return records.ServerGroup{}, &placement.InvalidError{Msg: "server group needs a uuid"}
	}
	if g.Members == nil {
		g.Members = []string{}
	}
	if err := r.insertJSON(ctx, r.q.insertGroup, g, g.UUID); err != nil {
		return records.ServerGroup{}, fmt.Errorf("creating server group %s: %w", g.UUID, err)
	}
	return g, nil
}

// GetServerGroup implements store.Store.
func (r *Records) GetServerGroup(ctx context.Context, uuid string) (records.ServerGroup, error) {
	var g records.ServerGroup
	if err := r.getJSON(ctx, &g, r.q.getGroup, uuid); err != nil {
		return records.ServerGroup{}, fmt.Errorf("server group %s: %w", uuid, err)
	}
	return g, nil
}

// ListServerGroups implements store.Store.
func (r *Records) ListServerGroups(ctx context.Context) ([]records.ServerGroup, error) {
	out, err := listJSON[records.ServerGroup](ctx, r, nil, r.q.listGroups)
	if err != nil {
		return nil, fmt.Errorf("listing server groups: %w", err)
	}
	return out, nil
}

// UpdateServerGroup implements store.Store: the row is read (and locked),
// fn applied and the result written in one transaction.
func (r *Records) UpdateServerGroup(ctx context.Context, uuid string, fn func(*records.ServerGroup) error) (records.ServerGroup, error) {
	g, err := updateJSON(ctx, r, r.q.lockGroup, uuid, fn, func(tx Tx, g *records.ServerGroup) error {
		g.UUID = uuid
		return putJSON(tx, r.q.putGroup, g, uuid)
	})
	if err != nil {
		return records.ServerGroup{}, fmt.Errorf("updating server group %s: %w", uuid, err)
	}
	return g, nil
}

// DeleteServerGroup implements store.Store.
func (r *Records) DeleteServerGroup(ctx context.Context, uuid string) error {
	if err := deleteOne(r.db.Exec(ctx, r.q.deleteGroup, uuid)); err != nil {
		return fmt.Errorf("deleting server group %s: %w", uuid, err)
	}
	return nil
}

// CreateKeyPair implements store.Store: the row's id becomes the record's.
func (r *Records) CreateKeyPair(ctx context.Context, kp records.KeyPair) (records.KeyPair, error) {
	err := r.db.Write(ctx, func(tx Tx) error {
		var err error
		// A taken (user, name) inserts nothing: ErrExists.
		if kp.ID, err = insertID(tx, r.q.insertKeyPair, kp.UserID, kp.Name); err != nil {
			return err
		}
		return putJSON(tx, r.q.putKeyPair, kp, kp.ID)
	})
	if err != nil {
		return records.KeyPair{}, fmt.Errorf("creating key pair %q of user %s: %w", kp.Name, kp.UserID, err)
	}
	return kp, nil
}

// GetKeyPair implements store.Store.
func (r *Records) GetKeyPair(ctx context.Context, userID, name string) (records.KeyPair, error) {
	var kp records.KeyPair
	if err := r.getJSON(ctx, &kp, r.q.getKeyPair, userID, name); err != nil {
		return records.KeyPair{}, fmt.Errorf("key pair %q of user %s: %w", name, userID, err)
	}
	return kp, nil
}

// ListKeyPairs implements store.Store.
func (r *Records) ListKeyPairs(ctx context.Context, userID string) ([]records.KeyPair, error) {
	out, err := listJSON[records.KeyPair](ctx, r, nil, r.q.listKeyPairs, userID)
	if err != nil {
		return nil, fmt.Errorf("listing key pairs of user %s: %w", userID, err)
	}
	return out, nil
}

// DeleteKeyPair implements store.Store.
func (r *Records) DeleteKeyPair(ctx context.Context, userID, name string) error {
	if err := deleteOne(r.db.Exec(ctx, r.q.deleteKeyPair, userID, name)); err != nil {
		return fmt.Errorf("deleting key pair %q of user %s: %w", name, userID, err)
	}
	return nil
}

// GetQuotaLimits implements store.Store.
func (r *Records) GetQuotaLimits(ctx context.Context, project string) (map[string]int64, error) {
	out := map[string]int64{}
	if err := r.getJSON(ctx, &out, r.q.getQuota, project); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("reading quota limits of %q: %w", project, err)
	}
	return out, nil
}

// SetQuotaLimits implements store.Store: one statement merges the new
// limits into the row, so concurrent sets of different names both stay.
func (r *Records) SetQuotaLimits(ctx context.Context, project string, limits map[string]int64) (map[string]int64, error) {
	var out map[string]int64
	err := r.db.Write(ctx, func(tx Tx) error {
		data, err := encode(limits)
		if err != nil {
			return err
		}
		out = map[string]int64{}
		return scanJSON(tx.QueryRow(r.q.mergeQuota, project, data), &out)
	})
	if err != nil {
		return nil, fmt.Errorf("setting quota limits of %q: %w", project, err)
	}
	return out, nil
}

// DeleteQuotaLimits implements store.Store.
func (r *Records) DeleteQuotaLimits(ctx context.Context, project string) error {
	if _, err := r.db.Exec(ctx, r.q.deleteQuota, project); err != nil {
		return fmt.Errorf("deleting quota limits of %q: %w", project, err)
	}
	return nil
}

// CreatePlan implements store.Store. IDs come from the database, so they
// are never reused; the JSON copy carries the ID too.
func (r *Records) CreatePlan(ctx context.Context, p records.Plan) (records.Plan, error) {
	p.Version = 1
	err := r.db.Write(ctx, func(tx Tx) error {
		var err error
		if p.ID, err = insertID(tx, r.q.insertPlan, p.State, !records.PlanTerminal(p.State), p.Version); err != nil {
			return err
		}
		return putJSON(tx, r.q.setPlan, p, p.ID)
	})
	if err != nil {
		return records.Plan{}, fmt.Errorf("creating %s plan: %w", p.Purpose, err)
	}
	return p, nil
}

// GetPlan implements store.Store.
func (r *Records) GetPlan(ctx context.Context, id int64) (records.Plan, error) {
	var p records.Plan
	if err := r.getJSON(ctx, &p, r.q.getPlan, id); err != nil {
		return records.Plan{}, fmt.Errorf("plan %d: %w", id, err)
	}
	return p, nil
}

// UpdatePlan implements store.Store, as UpdateInstance does.
func (r *Records) UpdatePlan(ctx context.Context, p records.Plan) (records.Plan, error) {
	expected := p.Version
	p.Version++
	data, err := encode(p)
	if err != nil {
		return records.Plan{}, fmt.Errorf("plan %d: %w", p.ID, err)
	}
	err = r.updateVersioned(ctx, r.q.updatePlan, r.q.planVersion, p.ID, expected, func(cur int64) error {
		return store.VersionConflict(placement.PlanVersion, fmt.Sprint(p.ID), expected, cur)
	}, p.State, !records.PlanTerminal(p.State), p.Version, data)
	if err != nil {
		return records.Plan{}, versionedError(fmt.Sprintf("plan %d", p.ID), err)
	}
	return p, nil
}

// ListPlans implements store.Store.
func (r *Records) ListPlans(ctx context.Context, activeOnly bool) ([]records.Plan, error) {
	query := r.q.listPlans
	if activeOnly {
		query = r.q.listActivePlans
	}
	out, err := listJSON[records.Plan](ctx, r, nil, query)
	if err != nil {
		return nil, fmt.Errorf("listing plans: %w", err)
	}
	return out, nil
}
