package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"keel/internal/placement"
	"keel/internal/store"
	"keel/internal/store/sqlstore"
)

// providerColumns are the columns scanProviders reads: providers with
// their inventories and usage, one row per inventory (or one row with NULL
// inventory columns).
const providerColumns = `SELECT p.uuid, p.name, p.generation, COALESCE(p.parent_uuid, ''), p.traits, p.aggregates,
	i.resource_class, i.total, i.reserved, i.min_unit, i.max_unit, i.step_size, i.allocation_ratio, i.used`

// providerSelect reads providers with their inventories.
const providerSelect = providerColumns + ` FROM providers p LEFT JOIN inventories i ON i.provider_uuid = p.uuid`

// providersIn reads the providers listed in $1. The join repeats the list
// for the inventories, so the planner looks them up by index rather than
// hash the whole table when it misjudges the list's length.
const providersIn = providerColumns + ` FROM providers p
	LEFT JOIN inventories i ON i.provider_uuid = p.uuid AND i.provider_uuid = ANY($1)
	WHERE p.uuid = ANY($1) ORDER BY p.uuid`

// scanProviders reads providerSelect rows, sorted by provider, into
// summaries.
func scanProviders(rows pgx.Rows) ([]*store.ProviderSummary, error) {
	defer rows.Close()
	var (
		out  []*store.ProviderSummary
		last *store.ProviderSummary
	)
	for rows.Next() {
		var (
			uuid, name, parent                      string
			traits, aggs                            []string
			generation                              int64
			rc                                      *string
			total, reserved, minU, maxU, step, used *int64
			ratio                                   *float64
		)
		if err := rows.Scan(&uuid, &name, &generation, &parent, &traits, &aggs, &rc, &total, &reserved, &minU, &maxU, &step, &ratio, &used); err != nil {
			return nil, fmt.Errorf("scanning provider: %w", err)
		}
		if last == nil || last.UUID != uuid {
			last = &store.ProviderSummary{
				Provider: placement.Provider{UUID: uuid, Name: name, Generation: generation, Inventories: placement.Inventories{}},
				Usage:    placement.Resources{},
			}
			last.ParentUUID = parent
			if len(traits) > 0 {
				last.Traits = traits
			}
			if len(aggs) > 0 {
				last.Aggregates = aggs
			}
			out = append(out, last)
		}
		if rc == nil {
			continue
		}
		class := placement.ResourceClass(*rc)
		last.Inventories[class] = placement.Inventory{
			Total: *total, Reserved: *reserved, MinUnit: *minU, MaxUnit: *maxU,
			StepSize: *step, AllocationRatio: *ratio,
		}
		if *used != 0 {
			last.Usage[class] = *used
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading providers: %w", err)
	}
	return out, nil
}

// inventoryColumns flattens inventories into arrays for unnest, in class
// order.
func inventoryColumns(invs placement.Inventories) (rcs []string, total, reserved, minU, maxU, step []int64, ratio []float64) {
	for _, rc := range slices.Sorted(maps.Keys(invs)) {
		inv := invs[rc]
		rcs = append(rcs, string(rc))
		total = append(total, inv.Total)
		reserved = append(reserved, inv.Reserved)
		minU = append(minU, inv.MinUnit)
		maxU = append(maxU, inv.MaxUnit)
		step = append(step, inv.StepSize)
		ratio = append(ratio, inv.AllocationRatio)
	}
	return
}

// qPutInventories writes a provider's inventories (all given classes in one
// statement), keeping the usage of the classes that stay.
const qPutInventories = `INSERT INTO inventories
	(provider_uuid, resource_class, total, reserved, min_unit, max_unit, step_size, allocation_ratio)
	SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::float8[])
	ON CONFLICT (provider_uuid, resource_class) DO UPDATE SET
		total = excluded.total, reserved = excluded.reserved, min_unit = excluded.min_unit,
		max_unit = excluded.max_unit, step_size = excluded.step_size, allocation_ratio = excluded.allocation_ratio`

func (w *wtx) putInventories(provider string, invs placement.Inventories) {
	if len(invs) == 0 {
		return
	}
	rcs, total, reserved, minU, maxU, step, ratio := inventoryColumns(invs)
	w.queue(qPutInventories, provider, rcs, total, reserved, minU, maxU, step, ratio)
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
			// One round trip: a taken UUID or name fails the INSERT, and the
			// server skips the rest.
			w.queue(`INSERT INTO providers (uuid, name, generation, parent_uuid, traits, aggregates) VALUES ($1, $2, $3, NULLIF($4, ''), $5, $6)`,
				p.UUID, p.Name, p.Generation, p.ParentUUID, p.Traits, p.Aggregates)
			w.putInventories(p.UUID, p.Inventories)
			return nil
		})
	})
	if isUniqueViolation(err, "providers") {
		var pe *pgconn.PgError
		errors.As(err, &pe)
		if pe.ConstraintName == "providers_name_key" {
			return placement.Provider{}, fmt.Errorf("creating provider: provider name %q: %w", p.Name, store.ErrExists)
		}
		return placement.Provider{}, fmt.Errorf("creating provider: provider %s: %w", p.UUID, store.ErrExists)
	}
	if err != nil {
		return placement.Provider{}, fmt.Errorf("creating provider %s: %w", p.UUID, err)
	}
	return p, nil
}

// GetProvider implements store.Store.
func (s *Store) GetProvider(ctx context.Context, uuid string) (placement.Provider, error) {
	rows, err := s.pool.Query(ctx, providerSelect+` WHERE p.uuid = $1`, uuid)
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
		rows pgx.Rows
		err  error
	)
	if uuids == nil {
		rows, err = s.pool.Query(ctx, providerSelect+` ORDER BY p.uuid`)
	} else {
		if len(uuids) == 0 {
			return []store.ProviderSummary{}, nil
		}
		rows, err = s.pool.Query(ctx, providersIn, uuids)
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

// lockProviders queues the statements that lock the providers whose UUIDs
// the SQL array expression set lists — sorted, so that writers never wait
// on each other in a cycle — and then read their inventories and usage
// into into. FOR UPDATE returns the newest version of each row it locks,
// and at READ COMMITTED the inventories read, a statement of its own, sees
// whatever the previous holders of the locks committed. Only the providers
// locked are kept: one created between the two statements is left out, as
// if it did not exist yet. Both statements are index lookups whatever the
// table statistics say.
func (w *wtx) lockProviders(into map[string]*store.ProviderSummary, set string, args ...any) {
	w.queue(`SELECT uuid, name, generation, COALESCE(parent_uuid, ''), traits, aggregates FROM providers WHERE uuid = ANY(`+set+`)
		ORDER BY uuid FOR UPDATE`, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			p := &store.ProviderSummary{Provider: placement.Provider{Inventories: placement.Inventories{}}, Usage: placement.Resources{}}
			if err := rows.Scan(&p.UUID, &p.Name, &p.Generation, &p.ParentUUID, &p.Traits, &p.Aggregates); err != nil {
				return fmt.Errorf("scanning provider: %w", err)
			}
			if len(p.Traits) == 0 {
				p.Traits = nil
			}
			if len(p.Aggregates) == 0 {
				p.Aggregates = nil
			}
			into[p.UUID] = p
		}
		return rows.Err()
	})
	w.queue(`SELECT provider_uuid, resource_class, total, reserved, min_unit, max_unit, step_size, allocation_ratio, used
		FROM inventories WHERE provider_uuid = ANY(`+set+`)`, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				prov, rc string
				inv      placement.Inventory
				used     int64
			)
			if err := rows.Scan(&prov, &rc, &inv.Total, &inv.Reserved, &inv.MinUnit, &inv.MaxUnit,
				&inv.StepSize, &inv.AllocationRatio, &used); err != nil {
				return fmt.Errorf("scanning inventory: %w", err)
			}
			p := into[prov]
			if p == nil {
				continue
			}
			p.Inventories[placement.ResourceClass(rc)] = inv
			if used != 0 {
				p.Usage[placement.ResourceClass(rc)] = used
			}
		}
		return rows.Err()
	})
}

// lockProvider locks and reads one provider; ErrNotFound if it does not
// exist.
func (w *wtx) lockProvider(uuid string) (*store.ProviderSummary, error) {
	ps := map[string]*store.ProviderSummary{}
	w.lockProviders(ps, `ARRAY[$1::text]`, uuid)
	if err := w.send(); err != nil {
		return nil, fmt.Errorf("reading provider %s: %w", uuid, err)
	}
	p, ok := ps[uuid]
	if !ok {
		return nil, fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
	}
	return p, nil
}

// SetInventories implements store.Store with sqlstore.SetInventories's
// edit. The usage of classes that stay is kept; removing a class in use is
// refused.
func (s *Store) SetInventories(ctx context.Context, uuid string, gen int64, invs placement.Inventories) (placement.Provider, error) {
	var out placement.Provider
	err := s.write(ctx, func(w *wtx) (err error) {
		out, err = sqlstore.EditProvider(w, uuid, sqlstore.SetInventories(gen, invs), func(_ *store.ProviderSummary, next placement.Provider) error {
			keep := make([]string, 0, len(next.Inventories))
			for rc := range next.Inventories {
				keep = append(keep, string(rc))
			}
			w.queue(`DELETE FROM inventories WHERE provider_uuid = $1 AND resource_class <> ALL($2::text[])`, uuid, keep)
			w.putInventories(uuid, next.Inventories)
			w.queue(`UPDATE providers SET generation = $1 WHERE uuid = $2`, next.Generation, uuid)
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
			cur, err := w.lockProvider(uuid)
			if err != nil {
				return err
			}
			for _, rc := range slices.Sorted(maps.Keys(cur.Usage)) {
				if n := cur.Usage[rc]; n > 0 {
					return &placement.InUseError{Provider: uuid, Class: rc, Used: n}
				}
			}
			// Usage follows the allocations, but be strict: the foreign key
			// from allocations would refuse the delete anyway.
			var held bool
			w.queue(`SELECT EXISTS (SELECT 1 FROM allocations WHERE provider_uuid = $1)`, uuid).QueryRow(func(row pgx.Row) error {
				return row.Scan(&held)
			})
			if err := w.send(); err != nil {
				return fmt.Errorf("checking allocations on %s: %w", uuid, err)
			}
			if held {
				return &placement.InUseError{Provider: uuid}
			}
			var child string
			w.queue(`SELECT COALESCE(min(uuid), '') FROM providers WHERE parent_uuid = $1`, uuid).QueryRow(func(row pgx.Row) error {
				return row.Scan(&child)
			})
			if err := w.send(); err != nil {
				return fmt.Errorf("checking children of %s: %w", uuid, err)
			}
			if child != "" {
				return fmt.Errorf("parent of %s: %w", child, store.ErrHasChildren)
			}
			w.queue(`DELETE FROM providers WHERE uuid = $1`, uuid)
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

// scanConsumers reads consumerSelect rows, sorted by consumer.
func scanConsumers(rows pgx.Rows) ([]placement.Consumer, error) {
	defer rows.Close()
	var out []placement.Consumer
	for rows.Next() {
		var (
			c        placement.Consumer
			typ      string
			prov, rc *string
			used     *int64
		)
		if err := rows.Scan(&c.UUID, &c.ProjectID, &c.UserID, &typ, &c.Generation, &prov, &rc, &used); err != nil {
			return nil, fmt.Errorf("scanning consumer: %w", err)
		}
		if n := len(out); n == 0 || out[n-1].UUID != c.UUID {
			c.Type = placement.ConsumerType(typ)
			c.Allocations = map[string]placement.Resources{}
			out = append(out, c)
		}
		if prov == nil {
			continue
		}
		allocs := out[len(out)-1].Allocations
		if allocs[*prov] == nil {
			allocs[*prov] = placement.Resources{}
		}
		allocs[*prov][placement.ResourceClass(*rc)] = *used
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading consumers: %w", err)
	}
	return out, nil
}

// GetConsumer implements store.Store.
func (s *Store) GetConsumer(ctx context.Context, uuid string) (placement.Consumer, error) {
	rows, err := s.pool.Query(ctx, consumerSelect+` WHERE c.uuid = $1`, uuid)
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
	rows, err := s.pool.Query(ctx, consumerSelect+`
		WHERE c.uuid IN (SELECT consumer_uuid FROM allocations WHERE provider_uuid = $1)
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

// lockConsumers queues the statements that lock the consumers (sorted)
// and read them with their allocations into cs. Only the consumers locked
// count: one created between the statements is left out, as if it did not
// exist yet (creating it again then fails on its primary key, and write
// tries again).
func (w *wtx) lockConsumers(cs map[string]placement.Consumer, uuids []string) {
	w.queue(`SELECT uuid, project_id, user_id, type, generation FROM consumers
		WHERE uuid = ANY($1) ORDER BY uuid FOR UPDATE`, uuids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				c   placement.Consumer
				typ string
			)
			if err := rows.Scan(&c.UUID, &c.ProjectID, &c.UserID, &typ, &c.Generation); err != nil {
				return fmt.Errorf("scanning consumer: %w", err)
			}
			c.Type = placement.ConsumerType(typ)
			c.Allocations = map[string]placement.Resources{}
			cs[c.UUID] = c
		}
		return rows.Err()
	})
	w.queue(`SELECT consumer_uuid, provider_uuid, resource_class, used FROM allocations
		WHERE consumer_uuid = ANY($1)`, uuids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				cu, p, rc string
				used      int64
			)
			if err := rows.Scan(&cu, &p, &rc, &used); err != nil {
				return fmt.Errorf("scanning allocation: %w", err)
			}
			c, ok := cs[cu]
			if !ok {
				continue
			}
			if c.Allocations[p] == nil {
				c.Allocations[p] = placement.Resources{}
			}
			c.Allocations[p][placement.ResourceClass(rc)] = used
		}
		return rows.Err()
	})
}

// WriteAllocations implements store.Store: it locks and reads the state the
// writes touch, lets placement.PlanWrites decide, and persists the plan,
// all in one transaction (see the package documentation).
func (s *Store) WriteAllocations(ctx context.Context, writes ...placement.AllocationWrite) (placement.WritePlan, error) {
	consumerSet := map[string]bool{}
	named := map[string]bool{}
	for _, wr := range writes {
		if wr.ConsumerUUID != "" {
			consumerSet[wr.ConsumerUUID] = true
		}
		for p := range wr.Allocations {
			named[p] = true
		}
		for p := range wr.ProviderGenerations {
			named[p] = true
		}
	}
	consumers := slices.Sorted(maps.Keys(consumerSet))
	providers := slices.Sorted(maps.Keys(named))

	var plan placement.WritePlan
	err := s.write(ctx, func(w *wtx) error {
		// Round trip 1: lock and read the consumers, then lock and read
		// the providers the writes name and those the consumers hold
		// allocations on. The consumers are locked by then, so their
		// allocations are those read.
		st := placement.WriteState{
			Providers: make(map[string]placement.ProviderState, len(providers)),
			Consumers: make(map[string]placement.Consumer, len(consumers)),
		}
		ps := make(map[string]*store.ProviderSummary, len(providers))
		w.lockConsumers(st.Consumers, consumers)
		w.lockProviders(ps, `$1::text[] || ARRAY(SELECT provider_uuid FROM allocations WHERE consumer_uuid = ANY($2))`,
			providers, consumers)
		if err := w.send(); err != nil {
			return fmt.Errorf("reading consumers and providers: %w", err)
		}
		for u, p := range ps {
			st.Providers[u] = placement.ProviderState{UUID: u, Generation: p.Generation, Inventories: p.Inventories, Usage: p.Usage}
		}
		// Never decide on a provider that is not locked. The check cannot
		// fail unless a consumer created between two statements of round
		// trip 1 was taken for locked; start again rather than lock out
		// of order.
		for _, p := range placement.ProvidersTouched(st.Consumers, writes) {
			if _, ok := st.Providers[p]; !ok && !named[p] {
				return errRelock
			}
		}
		var err error
		if plan, err = placement.PlanWrites(st, writes); err != nil {
			return err
		}
		// Round trip 2 (with the changes and COMMIT): the writes.
		w.apply(st, plan)
		return nil
	})
	if err != nil {
		if ce := capacityViolation(err); ce != nil {
			err = ce
		}
		return placement.WritePlan{}, fmt.Errorf("writing allocations: %w", err)
	}
	return plan, nil
}

// Reshape implements store.Store: like WriteAllocations, with the
// providers whose inventories change locked too; the new inventories are
// written first (the classes that go stay until the allocations have
// moved off them), then the allocation plan, then the classes that go are
// removed, all in one transaction.
func (s *Store) Reshape(ctx context.Context, invs []placement.InventoryWrite, writes []placement.AllocationWrite) (placement.ReshapePlan, error) {
	consumerSet := map[string]bool{}
	named := map[string]bool{}
	for _, iw := range invs {
		named[iw.UUID] = true
	}
	for _, wr := range writes {
		if wr.ConsumerUUID != "" {
			consumerSet[wr.ConsumerUUID] = true
		}
		for p := range wr.Allocations {
			named[p] = true
		}
	}
	consumers := slices.Sorted(maps.Keys(consumerSet))
	providers := slices.Sorted(maps.Keys(named))
	var plan placement.ReshapePlan
	err := s.write(ctx, func(w *wtx) error {
		st := placement.WriteState{
			Providers: make(map[string]placement.ProviderState, len(providers)),
			Consumers: make(map[string]placement.Consumer, len(consumers)),
		}
		ps := make(map[string]*store.ProviderSummary, len(providers))
		w.lockConsumers(st.Consumers, consumers)
		w.lockProviders(ps, `$1::text[] || ARRAY(SELECT provider_uuid FROM allocations WHERE consumer_uuid = ANY($2))`,
			providers, consumers)
		if err := w.send(); err != nil {
			return fmt.Errorf("reading consumers and providers: %w", err)
		}
		for u, p := range ps {
			st.Providers[u] = placement.ProviderState{UUID: u, Generation: p.Generation, Inventories: p.Inventories, Usage: p.Usage}
		}
		for _, p := range placement.ProvidersTouched(st.Consumers, writes) {
			if _, ok := st.Providers[p]; !ok && !named[p] {
				return errRelock
			}
		}
		var err error
		if plan, err = placement.PlanReshape(st, invs, writes); err != nil {
			return err
		}
		for _, u := range slices.Sorted(maps.Keys(plan.Inventories)) {
			w.putInventories(u, plan.Inventories[u])
		}
		w.apply(st, plan.WritePlan)
		for _, u := range slices.Sorted(maps.Keys(plan.Inventories)) {
			keep := make([]string, 0, len(plan.Inventories[u]))
			for rc := range plan.Inventories[u] {
				keep = append(keep, string(rc))
			}
			w.queue(`DELETE FROM inventories WHERE provider_uuid = $1 AND resource_class <> ALL($2::text[])`, u, keep)
		}
		return nil
	})
	if err != nil {
		if ce := capacityViolation(err); ce != nil {
			err = ce
		}
		return placement.ReshapePlan{}, fmt.Errorf("reshaping: %w", err)
	}
	return plan, nil
}

// capacityViolation turns a refusal by the inventories_within_capacity
// trigger (migration 0002) into the *placement.CapacityError PlanWrites
// would have returned, or returns nil for any other error.
func capacityViolation(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.ConstraintName != "inventories_within_capacity" {
		return nil
	}
	ce := &placement.CapacityError{Reason: "refused by the store's capacity constraint"}
	var rc string
	if _, serr := fmt.Sscan(pe.Detail, &ce.Provider, &rc, &ce.Used, &ce.Capacity); serr == nil {
		ce.Class = placement.ResourceClass(rc)
	}
	return ce
}

// apply queues the statements persisting a plan decided against st. Usage
// follows the allocations by trigger. Nothing here may need checking by the
// client: COMMIT follows in the same pipeline, so every guard is the
// server's (constraints, foreign keys).
//
// Every removal comes before any addition: usage only goes down, then only
// up, so the capacity trigger (which refuses an increase above capacity)
// sees no transient excess when a plan moves allocations between
// consumers on one provider (a migration's source).
func (w *wtx) apply(st placement.WriteState, plan placement.WritePlan) {
	for _, ch := range plan.Consumers {
		if _, existed := st.Consumers[ch.UUID]; !existed {
			continue
		}
		if ch.New == nil {
			// Its allocations go with it (ON DELETE CASCADE).
			w.queue(`DELETE FROM consumers WHERE uuid = $1`, ch.UUID)
		} else {
			w.queue(`DELETE FROM allocations WHERE consumer_uuid = $1`, ch.UUID)
		}
	}
	for _, ch := range plan.Consumers {
		_, existed := st.Consumers[ch.UUID]
		c := ch.New
		switch {
		case c == nil:
			continue
		case existed:
			w.queue(`UPDATE consumers SET project_id = $1, user_id = $2, type = $3, generation = $4 WHERE uuid = $5`,
				c.ProjectID, c.UserID, string(c.Type), c.Generation, c.UUID)
		default:
			// Fails with a unique violation if another writer created the
			// consumer meanwhile; write then tries again.
			w.queue(`INSERT INTO consumers (uuid, project_id, user_id, type, generation) VALUES ($1, $2, $3, $4, $5)`,
				c.UUID, c.ProjectID, c.UserID, string(c.Type), c.Generation)
		}
		var provs, rcs []string
		var used []int64
		for _, p := range slices.Sorted(maps.Keys(c.Allocations)) {
			r := c.Allocations[p]
			for _, rc := range slices.Sorted(maps.Keys(r)) {
				provs, rcs, used = append(provs, p), append(rcs, string(rc)), append(used, r[rc])
			}
		}
		if len(provs) > 0 {
			w.queue(`INSERT INTO allocations (consumer_uuid, provider_uuid, resource_class, used)
				SELECT $1, * FROM unnest($2::text[], $3::text[], $4::bigint[])`, c.UUID, provs, rcs, used)
		}
	}
	if len(plan.Providers) == 0 {
		return
	}
	provs := slices.Sorted(maps.Keys(plan.Providers))
	gens := make([]int64, len(provs))
	for i, p := range provs {
		gens[i] = plan.Providers[p]
		w.note(store.ChangeProvider, p)
	}
	w.queue(`UPDATE providers p SET generation = g.generation
		FROM unnest($1::text[], $2::bigint[]) AS g (uuid, generation) WHERE p.uuid = g.uuid`, provs, gens)
}
