package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"keel/internal/compute"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Reader is what the store-only audit (Check) reads.
type Reader interface {
	ProviderSummaries(ctx context.Context, uuids []string) ([]store.ProviderSummary, error)
	ConsumersOn(ctx context.Context, providerUUID string) ([]placement.Consumer, error)
	ListInstances(ctx context.Context, host string) ([]records.Instance, error)
	ListMigrations(ctx context.Context, f store.MigrationFilter) ([]records.Migration, error)
}

// StoreReader is what Run reads from the store: Reader's calls, services
// (which agents are up) and migrations by ID (a slot's).
type StoreReader interface {
	Reader
	ListServices(ctx context.Context) ([]records.Service, error)
	GetMigration(ctx context.Context, id int64) (records.Migration, error)
}

// GuestLister lists a host's guests as its driver sees them (an agent
// call: rpc.Agents implements it).
type GuestLister interface {
	ListGuests(ctx context.Context, host string) ([]compute.Guest, error)
}

// SlotHolder is a conductor that tells which migrations hold its source
// slots: source host → migration IDs.
type SlotHolder interface {
	HeldSlots(ctx context.Context) map[string][]int64
}

// Sources are where Run reads.
type Sources struct {
	Store StoreReader
	// Agents, if set, lists each up host's guests; nil skips the guest
	// checks.
	Agents GuestLister
	// Slots, if set, gives the conductor's slots; nil skips that check.
	Slots SlotHolder
	// ServiceDownTime is [DEFAULT] service_down_time: a host whose
	// service has not reported for longer is not asked for its guests.
	ServiceDownTime time.Duration
	// AgentTimeout bounds each agent's answer (default 10 s).
	AgentTimeout time.Duration
}

// Report is Run's result.
type Report struct {
	Findings []Finding `json:"findings"`
	// Unchecked says what could not be checked, and why (a host that is
	// down or did not answer, slots the conductor does not expose).
	Unchecked []string `json:"unchecked"`
}

// Violations are the findings' texts.
func (r Report) Violations() []string {
	out := make([]string, 0, len(r.Findings))
	for _, f := range r.Findings {
		out = append(out, f.Text)
	}
	return out
}

// Check is the store-only audit: the placement invariants with no deadline
// and no agent asked. It returns one line per violation, sorted; none
// means the store is consistent.
func Check(ctx context.Context, st Reader) ([]string, error) {
	in, err := readStore(ctx, st)
	if err != nil {
		return nil, err
	}
	return Report{Findings: Plan(in, Options{})}.Violations(), nil
}

// Run gathers the store's records, the agents' guests and the conductor's
// slots, and checks them at now with opt's deadlines.
func Run(ctx context.Context, src Sources, now time.Time, opt Options) (Report, error) {
	in, err := readStore(ctx, src.Store)
	if err != nil {
		return Report{}, err
	}
	in.Now = now
	var rep Report
	if src.Agents != nil {
		if err := readGuests(ctx, src, now, &in, &rep); err != nil {
			return Report{}, err
		}
	} else {
		rep.Unchecked = append(rep.Unchecked, "guests: no agent is asked")
	}
	if src.Slots != nil {
		if err := readSlots(ctx, src, &in); err != nil {
			return Report{}, err
		}
	} else {
		rep.Unchecked = append(rep.Unchecked, "slots: the conductor does not expose them")
	}
	rep.Findings = Plan(in, opt)
	if rep.Findings == nil {
		rep.Findings = []Finding{}
	}
	if rep.Unchecked == nil {
		rep.Unchecked = []string{}
	}
	return rep, nil
}

func readStore(ctx context.Context, st Reader) (Inputs, error) {
	var in Inputs
	var err error
	if in.Providers, err = st.ProviderSummaries(ctx, nil); err != nil {
		return in, fmt.Errorf("audit: reading providers: %w", err)
	}
	if in.Instances, err = st.ListInstances(ctx, ""); err != nil {
		return in, fmt.Errorf("audit: reading instances: %w", err)
	}
	if in.Migrations, err = st.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true}); err != nil {
		return in, fmt.Errorf("audit: reading migrations: %w", err)
	}
	in.Consumers = map[string][]placement.Consumer{}
	for _, s := range in.Providers {
		cs, err := st.ConsumersOn(ctx, s.UUID)
		if err != nil {
			return in, fmt.Errorf("audit: reading allocations on %s: %w", s.Name, err)
		}
		in.Consumers[s.UUID] = cs
	}
	return in, nil
}

// readGuests asks every up host for its guests, at once, then reads the
// instances and migrations again (Inputs.GuestsCheck).
func readGuests(ctx context.Context, src Sources, now time.Time, in *Inputs, rep *Report) error {
	svcs, err := src.Store.ListServices(ctx)
	if err != nil {
		return fmt.Errorf("audit: reading services: %w", err)
	}
	up := map[string]bool{}
	for _, s := range svcs {
		if s.IsCompute() {
			up[s.Host] = !s.ForcedDown && (src.ServiceDownTime <= 0 || now.Sub(s.UpdatedAt) <= src.ServiceDownTime)
		}
	}
	timeout := src.AgentTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 16)
		miss []string
	)
	in.Guests = map[string][]compute.Guest{}
	where := Locate(in.Providers)
	for _, p := range in.Providers {
		h := p.Name
		if h, _ := where.Host(p.UUID); p.ParentUUID != "" || h == "" {
			continue // a provider tree's child, or a sharing provider: no agent of its own
		}
		if !up[h] {
			miss = append(miss, fmt.Sprintf("guests on %s: its service is down", h))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			gs, err := src.Agents.ListGuests(cctx, h)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				miss = append(miss, fmt.Sprintf("guests on %s: %v", h, err))
				return
			}
			in.Guests[h] = gs
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("audit: listing guests: %w", err)
	}
	slices.Sort(miss)
	rep.Unchecked = append(rep.Unchecked, miss...)
	var re Recheck
	if re.Instances, err = src.Store.ListInstances(ctx, ""); err != nil {
		return fmt.Errorf("audit: reading instances again: %w", err)
	}
	if re.Migrations, err = src.Store.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true}); err != nil {
		return fmt.Errorf("audit: reading migrations again: %w", err)
	}
	in.GuestsCheck = &re
	return nil
}

// readSlots reads the slots twice around reading the migrations they name
// that Inputs.Migrations does not: a slot counts only if held both times.
func readSlots(ctx context.Context, src Sources, in *Inputs) error {
	first := src.Slots.HeldSlots(ctx)
	known := map[int64]bool{}
	for _, m := range in.Migrations {
		known[m.ID] = true
	}
	in.Ended = map[int64]records.MigrationStatus{}
	for _, ids := range first {
		for _, id := range ids {
			if known[id] {
				continue
			}
			m, err := src.Store.GetMigration(ctx, id)
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				return fmt.Errorf("audit: reading migration %d: %w", id, err)
			default:
				in.Ended[id] = m.Status
			}
		}
	}
	second := src.Slots.HeldSlots(ctx)
	in.Slots = map[string][]int64{}
	for h, ids := range first {
		for _, id := range ids {
			if slices.Contains(second[h], id) {
				in.Slots[h] = append(in.Slots[h], id)
			}
		}
	}
	return nil
}
