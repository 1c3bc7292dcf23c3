package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"keel/internal/placement"
	"keel/internal/store"
	"keel/internal/store/sqlstore"
)

// providerSelect reads providers with their inventories and usage, one row
// per inventory (or one row with NULL inventory columns).
const providerSelect = `SELECT p.uuid, p.name, p.generation, p.parent_uuid, p.traits, p.aggregates,
	i.resource_class, i.total, i.reserved, i.min_unit, i.max_unit, i.step_size, i.allocation_ratio, i.used
	FROM providers p LEFT JOIN inventories i ON i.provider_uuid = p.uuid`

// scanProviders reads providerSelect rows into summaries, in row order of
// first appearance.
func scanProviders(rows *sql.Rows) ([]*store.ProviderSummary, error) {
	defer rows.Close()
	var (
		out  []*store.ProviderSummary
		last *store.ProviderSummary
	)
	for rows.Next() {
		var (
			uuid, name, traits, aggs                string
			parent                                  sql.NullString
			generation                              int64
			rc                                      sql.NullString
			total, reserved, minU, maxU, step, used sql.NullInt64
			ratio                                   sql.NullFloat64
		)
		if err := rows.Scan(&uuid, &name, &generation, &parent, &traits, &aggs, &rc, &total, &reserved, &minU, &maxU, &step, &ratio, &used); err != nil {
			return nil, fmt.Errorf("scanning provider: %w", err)
		}
		if last == nil || last.UUID != uuid {
			last = &store.ProviderSummary{
				Provider: placement.Provider{UUID: uuid, Name: name, Generation: generation, Inventories: placement.Inventories{}},
				Usage:    placement.Resources{},
			}
			last.ParentUUID = parent.String
			var err error
			if last.Traits, err = decodeNames(traits); err != nil {
				return nil, fmt.Errorf("provider %s traits: %w", uuid, err)
			}
			if last.Aggregates, err = decodeNames(aggs); err != nil {
				return nil, fmt.Errorf("provider %s aggregates: %w", uuid, err)
			}
			out = append(out, last)
		}
		if !rc.Valid {
			continue
		}
		class := placement.ResourceClass(rc.String)
		last.Inventories[class] = placement.Inventory{
			Total: total.Int64, Reserved: reserved.Int64, MinUnit: minU.Int64, MaxUnit: maxU.Int64,
			StepSize: step.Int64, AllocationRatio: ratio.Float64,
		}
		if used.Int64 != 0 {
			last.Usage[class] = used.Int64
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading providers: %w", err)
	}
	return out, nil
}

// decodeNames reads a JSON array of names; "[]" (the usual case) costs
// nothing.
func decodeNames(s string) ([]string, error) {
	if s == "[]" || s == "" {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, err
	}
	return out, nil
}

// encodeNames writes names (normalised) as a JSON array.
func encodeNames(names []string) string {
	b, _ := json.Marshal(placement.NormalizeNames(names))
	return string(b)
}

// loadProvider reads one provider inside a write transaction.
func (w *wtx) loadProvider(uuid string) (*store.ProviderSummary, error) {
	rows, err := w.query(qLoadProvider, uuid)
	if err != nil {
		return nil, fmt.Errorf("reading provider %s: %w", uuid, err)
	}
	ps, err := scanProviders(rows)
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", uuid, err)
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
	}
	return ps[0], nil
}

// loadProviderState reads what placement.PlanWrites needs of one provider
// (generation, inventories, usage) inside a write transaction: the columns
// of providerSelect without names, traits and aggregates.
func (w *wtx) loadProviderState(uuid string) (placement.ProviderState, bool, error) {
	rows, err := w.query(qLoadProviderState, uuid)
	if err != nil {
		return placement.ProviderState{}, false, fmt.Errorf("reading provider %s: %w", uuid, err)
	}
	defer rows.Close()
	ps := placement.ProviderState{UUID: uuid, Inventories: placement.Inventories{}, Usage: placement.Resources{}}
	found := false
	for rows.Next() {
		var (
			rc                                      sql.NullString
			total, reserved, minU, maxU, step, used sql.NullInt64
			ratio                                   sql.NullFloat64
		)
		if err := rows.Scan(&ps.Generation, &rc, &total, &reserved, &minU, &maxU, &step, &ratio, &used); err != nil {
			return placement.ProviderState{}, false, fmt.Errorf("scanning provider %s: %w", uuid, err)
		}
		found = true
		if !rc.Valid {
			continue
		}
		class := placement.ResourceClass(rc.String)
		ps.Inventories[class] = placement.Inventory{
			Total: total.Int64, Reserved: reserved.Int64, MinUnit: minU.Int64, MaxUnit: maxU.Int64,
			StepSize: step.Int64, AllocationRatio: ratio.Float64,
		}
		if used.Int64 != 0 {
			ps.Usage[class] = used.Int64
		}
	}
	if err := rows.Err(); err != nil {
		return placement.ProviderState{}, false, fmt.Errorf("reading provider %s: %w", uuid, err)
	}
	return ps, found, nil
}

func (w *wtx) putInventory(provider string, rc placement.ResourceClass, inv placement.Inventory) error {
	_, err := w.exec(qPutInventory,
		provider, string(rc), inv.Total, inv.Reserved, inv.MinUnit, inv.MaxUnit, inv.StepSize, inv.AllocationRatio)
	if err != nil {
		return fmt.Errorf("writing inventory %s of %s: %w", rc, provider, err)
	}
	return nil
}

// CreateProvider implements store.Store: sqlstore.NewProvider's checks,
// then sqlstore.CreateProvider's in the write transaction.
func (s *Store) CreateProvider(ctx context.Context, p placement.Provider) (placement.Provider, error) {
	p, err := sqlstore.NewProvider(p)
	if err != nil {
		return placement.Provider{}, err
	}
	err = s.write(ctx, func(w *wtx) error {
		return sqlstore.CreateProvider(w, p, func() error {
			var n int
			if err := w.queryRow(qProviderExists, p.UUID).Scan(&n); err != nil {
				return fmt.Errorf("checking provider %s: %w", p.UUID, err)
			}
			if n > 0 {
				return fmt.Errorf("provider %s: %w", p.UUID, store.ErrExists)
			}
			if err := w.queryRow(qProviderNameTaken, p.Name).Scan(&n); err != nil {
				return fmt.Errorf("checking provider name %q: %w", p.Name, err)
			}
			if n > 0 {
				return fmt.Errorf("provider name %q: %w", p.Name, store.ErrExists)
			}
			if _, err := w.exec(qInsertProvider, p.UUID, p.Name, p.Generation,
				sql.NullString{String: p.ParentUUID, Valid: p.ParentUUID != ""}, encodeNames(p.Traits), encodeNames(p.Aggregates)); err != nil {
				return fmt.Errorf("inserting provider %s: %w", p.UUID, err)
			}
			for _, rc := range slices.Sorted(maps.Keys(p.Inventories)) {
				if err := w.putInventory(p.UUID, rc, p.Inventories[rc]); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return placement.Provider{}, fmt.Errorf("creating provider: %w", err)
	}
	return p, nil
}

// GetProvider implements store.Store.
func (s *Store) GetProvider(ctx context.Context, uuid string) (placement.Provider, error) {
	rows, err := s.rquery(ctx, providerSelect+` WHERE p.uuid = ?`, uuid)
	if err != nil {
		return placement.Provider{}, fmt.Errorf("reading provider %s: %w", uuid, err)
	}
	ps, err := scanProviders(rows)
	if err != nil {
		return placement.Provider{}, fmt.Errorf("provider %s: %w", uuid, err)
	}
	if len(ps) == 0 {
		return placement.Provider{}, fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
	}
	return ps[0].Provider, nil
}

// ProviderSummaries implements store.Store. With nil uuids the providers
// come sorted by UUID; otherwise in the order asked for.
func (s *Store) ProviderSummaries(ctx context.Context, uuids []string) ([]store.ProviderSummary, error) {
	var (
		rows *sql.Rows
		err  error
	)
	if uuids == nil {
		rows, err = s.rquery(ctx, providerSelect+` ORDER BY p.uuid`)
	} else {
		if len(uuids) == 0 {
			return []store.ProviderSummary{}, nil
		}
		list, jerr := json.Marshal(uuids)
		if jerr != nil {
			return nil, fmt.Errorf("encoding provider list: %w", jerr)
		}
		rows, err = s.rquery(ctx, providerSelect+` WHERE p.uuid IN (SELECT value FROM json_each(?)) ORDER BY p.uuid`, string(list))
	}
	if err != nil {
		return nil, fmt.Errorf("reading provider summaries: %w", err)
	}
	ps, err := scanProviders(rows)
	if err != nil {
		return nil, fmt.Errorf("reading provider summaries: %w", err)
	}
	return sqlstore.InOrder(ps, uuids), nil
}

// SetInventories implements store.Store with sqlstore.SetInventories's
// edit. The usage of classes that stay is kept; removing a class in use is
// refused.
func (s *Store) SetInventories(ctx context.Context, uuid string, gen int64, invs placement.Inventories) (placement.Provider, error) {
	var out placement.Provider
	err := s.write(ctx, func(w *wtx) (err error) {
		out, err = sqlstore.EditProvider(w, uuid, sqlstore.SetInventories(gen, invs), func(cur *store.ProviderSummary, next placement.Provider) error {
			for _, rc := range slices.Sorted(maps.Keys(cur.Inventories)) {
				if _, keep := next.Inventories[rc]; keep {
					continue
				}
				if _, err := w.exec(qDeleteInventory, uuid, string(rc)); err != nil {
					return fmt.Errorf("removing inventory %s of %s: %w", rc, uuid, err)
				}
			}
			for _, rc := range slices.Sorted(maps.Keys(next.Inventories)) {
				if err := w.putInventory(uuid, rc, next.Inventories[rc]); err != nil {
					return err
				}
			}
			if _, err := w.exec(qSetProviderGeneration, next.Generation, uuid); err != nil {
				return fmt.Errorf("bumping generation of %s: %w", uuid, err)
			}
			return nil
		})
		return err
	})
	if err != nil {
		return placement.Provider{}, fmt.Errorf("setting inventories of %s: %w", uuid, err)
	}
	return out, nil
}

// DeleteProvider implements store.Store; sqlstore.DeleteProvider notes the
// change.
func (s *Store) DeleteProvider(ctx context.Context, uuid string) error {
	err := s.write(ctx, func(w *wtx) error {
		return sqlstore.DeleteProvider(w, uuid, func() error {
			var n int
			if err := w.queryRow(qProviderExists, uuid).Scan(&n); err != nil {
				return fmt.Errorf("checking provider %s: %w", uuid, err)
			}
			if n == 0 {
				return fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
			}
			var (
				rc   string
				used int64
			)
			err := w.queryRow(qProviderUsedClass, uuid).Scan(&rc, &used)
			switch {
			case err == nil:
				return &placement.InUseError{Provider: uuid, Class: placement.ResourceClass(rc), Used: used}
			case !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("checking usage of %s: %w", uuid, err)
			}
			// Usage is maintained with the allocations, but be strict: the
			// foreign key from allocations would refuse the delete anyway.
			if err := w.queryRow(qProviderHasAllocations, uuid).Scan(&n); err != nil {
				return fmt.Errorf("checking allocations on %s: %w", uuid, err)
			}
			if n > 0 {
				return &placement.InUseError{Provider: uuid}
			}
			var child string
			switch err := w.queryRow(qProviderChild, uuid).Scan(&child); {
			case err == nil:
				return fmt.Errorf("parent of %s: %w", child, store.ErrHasChildren)
			case !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("checking children of %s: %w", uuid, err)
			}
			if _, err := w.exec(qDeleteProvider, uuid); err != nil {
				return fmt.Errorf("deleting provider %s: %w", uuid, err)
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("deleting provider %s: %w", uuid, err)
	}
	return nil
}

// consumerSelect reads consumers with their allocations, one row per
// allocated class (or one row with NULL allocation columns).
const consumerSelect = `SELECT c.uuid, c.project_id, c.user_id, c.type, c.generation,
	a.provider_uuid, a.resource_class, a.used
	FROM consumers c LEFT JOIN allocations a ON a.consumer_uuid = c.uuid`

func scanConsumers(rows *sql.Rows) ([]placement.Consumer, error) {
	defer rows.Close()
	var out []placement.Consumer
	for rows.Next() {
		var (
			c        placement.Consumer
			typ      string
			prov, rc sql.NullString
			used     sql.NullInt64
		)
		if err := rows.Scan(&c.UUID, &c.ProjectID, &c.UserID, &typ, &c.Generation, &prov, &rc, &used); err != nil {
			return nil, fmt.Errorf("scanning consumer: %w", err)
		}
		if n := len(out); n == 0 || out[n-1].UUID != c.UUID {
			c.Type = placement.ConsumerType(typ)
			c.Allocations = map[string]placement.Resources{}
			out = append(out, c)
		}
		if !prov.Valid {
			continue
		}
		allocs := out[len(out)-1].Allocations
		if allocs[prov.String] == nil {
			allocs[prov.String] = placement.Resources{}
		}
		allocs[prov.String][placement.ResourceClass(rc.String)] = used.Int64
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading consumers: %w", err)
	}
	return out, nil
}

// GetConsumer implements store.Store.
func (s *Store) GetConsumer(ctx context.Context, uuid string) (placement.Consumer, error) {
	rows, err := s.rquery(ctx, consumerSelect+` WHERE c.uuid = ?`, uuid)
	if err != nil {
		return placement.Consumer{}, fmt.Errorf("reading consumer %s: %w", uuid, err)
	}
	cs, err := scanConsumers(rows)
	if err != nil {
		return placement.Consumer{}, fmt.Errorf("consumer %s: %w", uuid, err)
	}
	if len(cs) == 0 {
		return placement.Consumer{}, fmt.Errorf("consumer %s: %w", uuid, store.ErrNotFound)
	}
	return cs[0], nil
}

// ConsumersOn implements store.Store; consumers come sorted by UUID, each
// with all its allocations.
func (s *Store) ConsumersOn(ctx context.Context, providerUUID string) ([]placement.Consumer, error) {
	rows, err := s.rquery(ctx, consumerSelect+`
		WHERE c.uuid IN (SELECT consumer_uuid FROM allocations WHERE provider_uuid = ?)
		ORDER BY c.uuid`, providerUUID)
	if err != nil {
		return nil, fmt.Errorf("reading consumers on %s: %w", providerUUID, err)
	}
	cs, err := scanConsumers(rows)
	if err != nil {
		return nil, fmt.Errorf("consumers on %s: %w", providerUUID, err)
	}
	if cs == nil {
		cs = []placement.Consumer{}
	}
	return cs, nil
}

// loadConsumer reads one consumer inside a write transaction.
func (w *wtx) loadConsumer(uuid string) (placement.Consumer, bool, error) {
	rows, err := w.query(qLoadConsumer, uuid)
	if err != nil {
		return placement.Consumer{}, false, fmt.Errorf("reading consumer %s: %w", uuid, err)
	}
	cs, err := scanConsumers(rows)
	if err != nil || len(cs) == 0 {
		return placement.Consumer{}, false, err
	}
	return cs[0], true, nil
}

// WriteAllocations implements store.Store: it reads the state the writes
// touch, lets placement.PlanWrites decide, and persists the plan, all in
// one write transaction.
func (s *Store) WriteAllocations(ctx context.Context, writes ...placement.AllocationWrite) (placement.WritePlan, error) {
	var plan placement.WritePlan
	err := s.write(ctx, func(w *wtx) error {
		st := placement.WriteState{
			Providers: make(map[string]placement.ProviderState, 2),
			Consumers: make(map[string]placement.Consumer, len(writes)),
		}
		for _, wr := range writes {
			if _, done := st.Consumers[wr.ConsumerUUID]; done || wr.ConsumerUUID == "" {
				continue
			}
			c, ok, err := w.loadConsumer(wr.ConsumerUUID)
			if err != nil {
				return err
			}
			if ok {
				st.Consumers[wr.ConsumerUUID] = c
			}
		}
		load := func(uuid string) error {
			if _, done := st.Providers[uuid]; done {
				return nil
			}
			ps, ok, err := w.loadProviderState(uuid)
			if err != nil {
				return err
			}
			if ok { // if not, PlanWrites reports it if it matters
				st.Providers[uuid] = ps
			}
			return nil
		}
		for _, wr := range writes {
			for p := range wr.ProviderGenerations {
				if err := load(p); err != nil {
					return err
				}
			}
		}
		for _, p := range placement.ProvidersTouched(st.Consumers, writes) {
			if err := load(p); err != nil {
				return err
			}
		}
		var err error
		if plan, err = placement.PlanWrites(st, writes); err != nil {
			return err
		}
		return w.apply(st, plan)
	})
	if err != nil {
		return placement.WritePlan{}, fmt.Errorf("writing allocations: %w", err)
	}
	return plan, nil
}

// Reshape implements store.Store: in one write transaction the new
// inventories are written (the classes that go stay until the allocations
// have moved), the allocation plan is applied, then the classes that go
// are removed.
func (s *Store) Reshape(ctx context.Context, invs []placement.InventoryWrite, writes []placement.AllocationWrite) (placement.ReshapePlan, error) {
	var plan placement.ReshapePlan
	err := s.write(ctx, func(w *wtx) error {
		st := placement.WriteState{Providers: map[string]placement.ProviderState{}, Consumers: map[string]placement.Consumer{}}
		for _, wr := range writes {
			if _, done := st.Consumers[wr.ConsumerUUID]; done || wr.ConsumerUUID == "" {
				continue
			}
			c, ok, err := w.loadConsumer(wr.ConsumerUUID)
			if err != nil {
				return err
			}
			if ok {
				st.Consumers[wr.ConsumerUUID] = c
			}
		}
		load := func(uuid string) error {
			if _, done := st.Providers[uuid]; done {
				return nil
			}
			ps, ok, err := w.loadProviderState(uuid)
			if err != nil {
				return err
			}
			if ok {
				st.Providers[uuid] = ps
			}
			return nil
		}
		for _, iw := range invs {
			if err := load(iw.UUID); err != nil {
				return err
			}
		}
		for _, p := range placement.ProvidersTouched(st.Consumers, writes) {
			if err := load(p); err != nil {
				return err
			}
		}
		var err error
		if plan, err = placement.PlanReshape(st, invs, writes); err != nil {
			return err
		}
		for _, u := range slices.Sorted(maps.Keys(plan.Inventories)) {
			next := plan.Inventories[u]
			for _, rc := range slices.Sorted(maps.Keys(next)) {
				if err := w.putInventory(u, rc, next[rc]); err != nil {
					return err
				}
			}
		}
		if err := w.apply(st, plan.WritePlan); err != nil {
			return err
		}
		for _, u := range slices.Sorted(maps.Keys(plan.Inventories)) {
			for _, rc := range slices.Sorted(maps.Keys(st.Providers[u].Inventories)) {
				if _, stays := plan.Inventories[u][rc]; stays {
					continue
				}
				if _, err := w.exec(qDeleteInventory, u, string(rc)); err != nil {
					return fmt.Errorf("removing inventory %s of %s: %w", rc, u, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return placement.ReshapePlan{}, fmt.Errorf("reshaping: %w", err)
	}
	return plan, nil
}

// apply persists a plan decided against st.
func (w *wtx) apply(st placement.WriteState, plan placement.WritePlan) error {
	// Net usage change per provider and class.
	delta := map[string]map[placement.ResourceClass]int64{}
	add := func(p string, rc placement.ResourceClass, n int64) {
		if delta[p] == nil {
			delta[p] = map[placement.ResourceClass]int64{}
		}
		delta[p][rc] += n
	}
	for _, ch := range plan.Consumers {
		old, existed := st.Consumers[ch.UUID]
		if existed {
			for p, r := range old.Allocations {
				for rc, n := range r {
					add(p, rc, -n)
				}
			}
			if _, err := w.exec(qDeleteConsumerAllocations, ch.UUID); err != nil {
				return fmt.Errorf("removing allocations of %s: %w", ch.UUID, err)
			}
		}
		c := ch.New
		switch {
		case c == nil && existed:
			if _, err := w.exec(qDeleteConsumer, ch.UUID); err != nil {
				return fmt.Errorf("deleting consumer %s: %w", ch.UUID, err)
			}
			continue
		case c == nil:
			continue
		case existed:
			if _, err := w.exec(qUpdateConsumer,
				c.ProjectID, c.UserID, string(c.Type), c.Generation, c.UUID); err != nil {
				return fmt.Errorf("updating consumer %s: %w", c.UUID, err)
			}
		default:
			if _, err := w.exec(qInsertConsumer,
				c.UUID, c.ProjectID, c.UserID, string(c.Type), c.Generation); err != nil {
				return fmt.Errorf("inserting consumer %s: %w", c.UUID, err)
			}
		}
		for _, p := range slices.Sorted(maps.Keys(c.Allocations)) {
			r := c.Allocations[p]
			classes := slices.Sorted(maps.Keys(r))
			for len(classes) > 0 {
				n := min(len(classes), len(qInsertAllocations))
				args := make([]any, 0, 2+2*n)
				args = append(args, c.UUID, p)
				for _, rc := range classes[:n] {
					args = append(args, string(rc), r[rc])
					add(p, rc, r[rc])
				}
				if _, err := w.exec(qInsertAllocations[n-1], args...); err != nil {
					return fmt.Errorf("inserting allocations of %s on %s: %w", c.UUID, p, err)
				}
				classes = classes[n:]
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(delta)) {
		if err := w.addUsage(p, delta[p]); err != nil {
			return err
		}
	}
	for _, p := range slices.Sorted(maps.Keys(plan.Providers)) {
		if _, err := w.exec(qSetProviderGeneration, plan.Providers[p], p); err != nil {
			return fmt.Errorf("bumping generation of %s: %w", p, err)
		}
		if err := w.note(store.ChangeProvider, p); err != nil {
			return err
		}
	}
	return nil
}

// addUsage adds d (the net change per class; zeros are skipped) to the
// usage of provider p's inventories, one statement a class: an UPDATE of
// several rows at once (IN list or UPDATE … FROM) measured slower than
// these primary-key updates.
func (w *wtx) addUsage(p string, d map[placement.ResourceClass]int64) error {
	for _, rc := range slices.Sorted(maps.Keys(d)) {
		if d[rc] == 0 {
			continue
		}
		res, err := w.exec(qAddUsage, d[rc], p, string(rc))
		if isCapacityRefusal(err) {
			return &placement.CapacityError{Provider: p, Class: rc, Requested: d[rc], Reason: "refused by the store's capacity constraint"}
		}
		if err != nil {
			return fmt.Errorf("updating usage of %s on %s: %w", rc, p, err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("updating usage of %s on %s: %d rows (%v): inventory missing", rc, p, n, err)
		}
	}
	return nil
}

// isCapacityRefusal tells whether err is the store's capacity trigger
// (migration 0004) refusing a usage increase.
func isCapacityRefusal(err error) bool {
	return err != nil && strings.Contains(err.Error(), "inventories_within_capacity")
}
