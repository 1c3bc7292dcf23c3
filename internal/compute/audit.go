package compute

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"keel/internal/lifecycle"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// The periodic audit as the tracker runs it: gather the inputs, let
// PlanAudit (auditplan.go) decide, apply the plan.

// Drift is what one audit found different and healed.
type Drift struct {
	Host string    `json:"host"`
	At   time.Time `json:"at"`
	// Record lists host-record fields that differed from the hypervisor's
	// truth ("vcpus_used 28→30").
	Record []string `json:"record,omitempty"`
	// Untracked are guests running here that the tracker did not count
	// (e.g. arrivals under the legacy policy); Vanished the reverse.
	Untracked []string `json:"untracked,omitempty"`
	Vanished  []string `json:"vanished,omitempty"`
	// MissingAllocations: guests running here with no allocation for them
	// on this host (an allocation was written). OrphanAllocations:
	// allocations here with no guest and no operation in flight (removed).
	MissingAllocations []string `json:"missing_allocations,omitempty"`
	OrphanAllocations  []string `json:"orphan_allocations,omitempty"`
	// Stray are guests that belong to no instance on this host: an
	// incoming guest no migration is bringing any more, a copy left on the
	// source, or the guest of a deleted instance. The instance and
	// migration records are the truth: the audit removes them (never
	// giving them an allocation, which would take the instance's own).
	Stray []string `json:"stray,omitempty"`
	// Missing are instances recorded on this host, active, whose guest
	// this audit did not find, missing for less than the host's
	// lost_guest_timeout: reported, nothing released (a listing that
	// glitched, or a state file restored from an older copy, loses
	// nothing).
	Missing []string `json:"missing,omitempty"`
	// Lost are instances whose guest has been missing for
	// lost_guest_timeout. With a store that can (InstanceFaulter) the
	// audit puts each in ERROR with a fault saying so (Faulted lists
	// those), as Nova's power-state sync shows a guest the hypervisor no
	// longer has, and releases its allocation here.
	Lost []string `json:"lost,omitempty"`
	// Faulted are the Lost instances this audit put in ERROR (not counted
	// again by Count).
	Faulted []string `json:"faulted,omitempty"`
	// Found are instances an audit had put in ERROR as lost whose guest
	// runs here again: each is ACTIVE again with its allocation here,
	// but those in Fenced, for which this host had no room left — their
	// guest is stopped and they stay in ERROR saying so (not counted
	// again by Count).
	Found  []string `json:"found,omitempty"`
	Fenced []string `json:"fenced,omitempty"`
}

// Count is the number of differences found.
func (d Drift) Count() int {
	return len(d.Record) + len(d.Untracked) + len(d.Vanished) + len(d.MissingAllocations) + len(d.OrphanAllocations) + len(d.Stray) +
		len(d.Missing) + len(d.Lost) + len(d.Found)
}

func (d Drift) String() string {
	if d.Count() == 0 {
		return d.Host + ": no drift"
	}
	var parts []string
	add := func(name string, xs []string) {
		if len(xs) > 0 {
			parts = append(parts, fmt.Sprintf("%s [%s]", name, strings.Join(xs, ", ")))
		}
	}
	add("record", d.Record)
	add("untracked", d.Untracked)
	add("vanished", d.Vanished)
	add("missing allocations", d.MissingAllocations)
	add("orphan allocations", d.OrphanAllocations)
	add("stray guests", d.Stray)
	add("missing guests", d.Missing)
	add("lost guests", d.Lost)
	add("put in ERROR", d.Faulted)
	add("guests found again", d.Found)
	add("stopped for want of room", d.Fenced)
	return d.Host + ": " + strings.Join(parts, "; ")
}

// Audit is the periodic update_available_resource: it compares the
// driver's guests with the tracked instances, the allocations and the host
// record, heals what it safely can, and returns what it found.
//
// It reads the allocations first, then the migrations in flight, then the
// guests, counts the guests (PlanCount), then reads the records of the
// consumers and guests PlanAudit asks for, and applies PlanAudit's plan: a
// claim that commits after the first read is never seen (so never taken
// for an orphan), and a migration's record exists before its claim. Every
// allocation write names the consumer generation it read, so anything that
// changed meanwhile makes the write a conflict, which the audit skips. It
// never removes the allocation of an instance recorded on this host, and
// never allocates for a guest without an instance recorded here: those it
// reports (Lost, Stray) for an operator.
//
// The plan is made in two phases: the first PlanAudit names the instance
// and migration records it needs (only for consumers without a guest here
// and guests holding nothing here, so an audit with nothing to heal reads
// none), the tracker reads them — all after the guests and before any
// write, so no decision depends on the audit's own writes — and the second
// decides. Two reads stay with the writes they guard: a release of a
// consumer listed without its allocations reads it again and goes on only
// at the listed generation, and a claim reads the consumer and the
// provider tree it is shaped from right before it is written (the plan's
// releases and earlier claims change the tree's usage).
func (t *Tracker) Audit(ctx context.Context) (Drift, error) {
	d := Drift{Host: t.cfg.Host, At: t.clock.Now()}
	in, headers, err := t.gather(ctx)
	if err != nil {
		return d, err
	}
	t.mu.Lock()
	before := t.record
	t.countLocked(in.Guests, &d)
	in.Busy = make(map[string]bool, len(t.busy))
	for u := range t.busy {
		in.Busy[u] = true
	}
	in.Now, in.LostAfter, in.MissingSince = d.At, t.cfg.LostGuestTimeout, maps.Clone(t.missing)
	t.mu.Unlock()

	p := PlanAudit(in)
	if !p.Reads.Empty() {
		if err := t.readRecords(ctx, &in, p.Reads); err != nil {
			return d, err
		}
		p = PlanAudit(in)
	}
	if err := t.apply(ctx, p, headers, &d); err != nil {
		return d, err
	}
	t.keepMissing(in, p, d)
	if err := t.WriteRecord(ctx); err != nil {
		return d, err
	}
	after := t.Record()
	if before.Host != "" {
		d.Record = recordDiff(before, after)
	}
	sort.Strings(d.Untracked)
	sort.Strings(d.Vanished)
	return d, nil
}

// keepMissing remembers, for the next audit, since when each guest this
// one missed has been missing: the Missing ones, and the Lost ones it
// could not put in ERROR (the next audit tries again). Every other
// instance is forgotten — its guest is back, or something else happens
// to it.
func (t *Tracker) keepMissing(in AuditInputs, p AuditPlan, d Drift) {
	next := make(map[string]time.Time, len(p.Missing))
	keep := func(uuid string) {
		since, ok := in.MissingSince[uuid]
		if !ok {
			since = in.Now
		}
		next[uuid] = since
	}
	for _, uuid := range p.Missing {
		keep(uuid)
	}
	for _, c := range p.Lost {
		if !slices.Contains(d.Faulted, c.UUID) {
			keep(c.UUID)
		}
	}
	t.mu.Lock()
	t.missing = next
	t.mu.Unlock()
}

// gather reads the allocations on this host's provider, the migrations
// in flight and the guests, in that order; headers reports that the
// consumers came without their allocations (ConsumerLister).
func (t *Tracker) gather(ctx context.Context) (in AuditInputs, headers bool, err error) {
	in.Host = t.cfg.Host
	if l, ok := t.store.(ConsumerLister); ok {
		in.Consumers, err = l.ConsumerHeadersOn(ctx, t.cfg.ProviderUUID)
		headers = true
	} else {
		in.Consumers, err = t.store.ConsumersOn(ctx, t.cfg.ProviderUUID)
	}
	if err != nil {
		return in, headers, fmt.Errorf("audit of %s: listing allocations: %w", t.cfg.Host, err)
	}
	migs, err := t.store.ListMigrations(ctx, store.MigrationFilter{Host: t.cfg.Host, ActiveOnly: true})
	if err != nil {
		return in, headers, fmt.Errorf("audit of %s: listing migrations: %w", t.cfg.Host, err)
	}
	in.InFlight = make(map[string]bool, 2*len(migs))
	for _, m := range migs {
		in.InFlight[m.InstanceUUID] = true
		in.InFlight[m.UUID] = true
	}
	if in.Guests, err = t.driver.Guests(ctx); err != nil {
		return in, headers, fmt.Errorf("audit of %s: listing guests: %w", t.cfg.Host, err)
	}
	return in, headers, nil
}

// countLocked applies PlanCount to the tracked set, updated in place: an
// audit that finds nothing changed allocates nothing here.
func (t *Tracker) countLocked(guests []Guest, d *Drift) {
	d.Vanished, d.Untracked = PlanCount(t.tracked, t.busy, guests)
	for _, uuid := range d.Vanished {
		delete(t.tracked, uuid)
	}
	for i := range guests {
		if Counted(guests[i]) {
			t.tracked[guests[i].UUID] = guests[i].Flavor
		}
	}
}

// readRecords reads the records a plan asked for into in.
func (t *Tracker) readRecords(ctx context.Context, in *AuditInputs, reads AuditReads) error {
	if in.Instances == nil {
		in.Instances = make(map[string]InstanceRead, len(reads.Instances)+len(reads.GuestInstances))
	}
	for _, uuid := range reads.Instances {
		if err := t.readInstance(ctx, in, uuid, false); err != nil {
			return err
		}
	}
	for _, uuid := range reads.GuestInstances {
		if err := t.readInstance(ctx, in, uuid, true); err != nil {
			return err
		}
	}
	if len(reads.Migrations) > 0 && in.Migrations == nil {
		in.Migrations = make(map[string]MigrationRead, len(reads.Migrations))
	}
	for _, uuid := range reads.Migrations {
		ms, err := t.store.ListMigrations(ctx, store.MigrationFilter{UUID: uuid, Host: t.cfg.Host})
		if err != nil {
			return fmt.Errorf("audit of %s: reading migration %s: %w", t.cfg.Host, uuid, err)
		}
		m := MigrationRead{Missing: len(ms) == 0}
		if len(ms) > 0 {
			m.Status = ms[0].Status
		}
		in.Migrations[uuid] = m
	}
	return nil
}

// readInstance reads one instance into in; foreignOK: a refusal to show
// it to this host is an answer (a guest's instance), not an error (a
// consumer's, which holds allocations here).
func (t *Tracker) readInstance(ctx context.Context, in *AuditInputs, uuid string, foreignOK bool) error {
	inst, err := t.store.GetInstance(ctx, uuid)
	switch {
	case errors.Is(err, store.ErrNotFound):
		in.Instances[uuid] = InstanceRead{Missing: true}
	case foreignOK && errors.Is(err, store.ErrForbidden):
		in.Instances[uuid] = InstanceRead{Foreign: true}
	case err != nil:
		return fmt.Errorf("audit of %s: reading instance %s: %w", t.cfg.Host, uuid, err)
	default:
		in.Instances[uuid] = InstanceRead{Instance: inst}
	}
	return nil
}

// apply carries out a plan and records in d what it did.
func (t *Tracker) apply(ctx context.Context, p AuditPlan, headers bool, d *Drift) error {
	for _, c := range p.Release {
		released, err := t.release(ctx, c, headers)
		if err != nil {
			return err
		}
		if released {
			d.OrphanAllocations = append(d.OrphanAllocations, c.UUID)
		}
	}
	for _, g := range p.Stray {
		t.removeStray(ctx, g, d)
	}
	claims := p.Claim
	for _, a := range p.Adopt {
		if t.adopt(ctx, a.Instance, d) && a.Claim {
			claims = append(claims, AuditClaim{Instance: a.Instance, Guest: a.Guest})
		}
	}
	for _, c := range claims {
		claimed, err := t.claim(ctx, c)
		if err != nil {
			return err
		}
		if claimed != claimSkipped {
			d.MissingAllocations = append(d.MissingAllocations, c.Instance.UUID)
		}
	}
	for _, c := range p.Found {
		if err := t.reclaim(ctx, c, d); err != nil {
			return err
		}
	}
	d.Missing = p.Missing
	for _, c := range p.Lost {
		d.Lost = append(d.Lost, c.UUID)
	}
	sort.Strings(d.OrphanAllocations)
	sort.Strings(d.MissingAllocations)
	sort.Strings(d.Stray)
	sort.Strings(d.Missing)
	sort.Strings(d.Lost)
	return t.faultLost(ctx, p.Lost, headers, d)
}

// release removes the allocation here of c, as listed, and reports
// whether it did: only if c is still at the listed generation. A consumer
// listed without its allocations (headers) is read again first, and left
// alone if it changed since (or is gone) — what the write naming that
// generation would find.
func (t *Tracker) release(ctx context.Context, c placement.Consumer, headers bool) (bool, error) {
	gen := c.Generation
	if headers {
		cur, err := t.store.GetConsumer(ctx, c.UUID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("audit of %s: reading allocations of %s: %w", t.cfg.Host, c.UUID, err)
		case cur.Generation != gen:
			return false, nil // it changed since we listed it: leave it to its owner
		}
		c = cur
	}
	_, err := t.store.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: c.UUID, ConsumerGeneration: &gen,
		Allocations: ReleaseHere(c, t.cfg.ProviderUUID), Type: c.Type})
	switch {
	case placement.IsConflict(err):
		return false, nil // it changed since we read it: leave it to its owner
	case err != nil:
		return false, fmt.Errorf("audit of %s: removing the allocation of %s: %w", t.cfg.Host, c.UUID, err)
	}
	return true, nil
}

// claimed is what claim did.
type claimed int

const (
	claimSkipped claimed = iota // held on this tree already, or changed since read
	claimWritten
	claimNoRoom // the store refused it for capacity
)

// claim writes the allocation of an instance running here with nothing
// allocated here, replacing whatever it holds elsewhere by mistake —
// unless that changed since it was read (the write names the generation),
// or it now holds something on this host's tree. The consumer and the
// tree are read here, right before the write: the plan's releases and
// earlier claims change the tree's usage.
func (t *Tracker) claim(ctx context.Context, c AuditClaim) (claimed, error) {
	uuid := c.Instance.UUID
	var (
		gen  *int64
		held map[string]placement.Resources
	)
	ps, trees := t.store.(ProviderLister)
	if cur, err := t.store.GetConsumer(ctx, uuid); err == nil {
		gen, held = &cur.Generation, cur.Allocations
		if trees && len(held) > 0 && HeldInTree(t.cfg.ProviderUUID, held, t.parents(ctx, ps, held)) {
			return claimSkipped, nil // its claim is on this host's provider tree
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return claimSkipped, fmt.Errorf("audit of %s: reading allocations of %s: %w", t.cfg.Host, uuid, err)
	}
	var (
		q         *placement.CandidateQuery
		providers []placement.TreeProvider
	)
	if trees {
		if fq, err := placement.FlavorQuery(c.Instance.Flavor.Resources(), c.Instance.Flavor.ExtraSpecs); err == nil && len(fq.Groups) > 0 {
			if sums, err := ps.ProviderSummaries(ctx, nil); err == nil {
				q, providers = &fq, store.TreeProviders(sums)
			}
		}
	}
	_, err := t.store.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID: uuid, ConsumerGeneration: gen, Type: placement.ConsumerInstance,
		ProjectID: c.Instance.ProjectID, UserID: c.Instance.UserID,
		Allocations: ClaimAllocation(t.cfg.ProviderUUID, c.Guest, q, providers, held),
	})
	switch {
	case placement.IsConflict(err):
		return claimSkipped, nil
	case placement.IsCapacity(err):
		return claimNoRoom, nil
	case err != nil:
		return claimSkipped, fmt.Errorf("audit of %s: writing missing allocation of %s: %w", t.cfg.Host, uuid, err)
	}
	return claimWritten, nil
}

// parents reads the parents of the providers allocations name, walking
// up each as far as this host's provider (HeldInTree's input). A
// provider it cannot read ends its walk.
func (t *Tracker) parents(ctx context.Context, ps ProviderLister, allocations map[string]placement.Resources) map[string]string {
	out := map[string]string{}
	for p := range allocations {
		for cur, depth := p, 0; cur != "" && cur != t.cfg.ProviderUUID && depth < maxTreeDepth; depth++ {
			next, ok := out[cur]
			if !ok {
				sums, err := ps.ProviderSummaries(ctx, []string{cur})
				if err != nil || len(sums) == 0 {
					break
				}
				next = sums[0].ParentUUID
				out[cur] = next
			}
			cur = next
		}
	}
	return out
}

// adopt finishes the arrival of an incoming guest whose instance is
// recorded here, and counts it.
func (t *Tracker) adopt(ctx context.Context, inst records.Instance, d *Drift) bool {
	finisher, ok := t.driver.(ArrivalFinisher)
	if !ok {
		return false
	}
	if err := finisher.PostLiveMigrationAtDestination(ctx, inst); err != nil {
		return false
	}
	t.mu.Lock()
	t.tracked[inst.UUID] = inst.Flavor
	t.mu.Unlock()
	d.Untracked = append(d.Untracked, inst.UUID)
	return true
}

// removeStray removes a guest that belongs to no instance on this host —
// the instance and migration records are the truth — and reports it.
func (t *Tracker) removeStray(ctx context.Context, g Guest, d *Drift) {
	d.Stray = append(d.Stray, g.UUID)
	cleaner, ok := t.driver.(GuestRemover)
	if !ok {
		return
	}
	var err error
	if g.State == GuestIncoming {
		err = cleaner.RollbackLiveMigrationAtDestination(ctx, g.UUID)
	} else {
		err = cleaner.Destroy(ctx, g.UUID)
	}
	if err != nil {
		d.Stray[len(d.Stray)-1] += " (removal failed: " + err.Error() + ")"
		return
	}
	t.mu.Lock()
	delete(t.tracked, g.UUID)
	delete(t.busy, g.UUID) // what marked it busy is over
	t.mu.Unlock()
}

// faultLost puts the lost instances in ERROR, if the store can, and
// releases the allocation here of each it did.
func (t *Tracker) faultLost(ctx context.Context, lost []placement.Consumer, headers bool, d *Drift) error {
	f, ok := t.store.(InstanceFaulter)
	if !ok {
		return nil
	}
	for _, c := range lost {
		since, ok := t.missingSince(c.UUID)
		if !ok {
			since = d.At
		}
		done, err := f.FaultLostInstance(ctx, c.UUID, t.cfg.Host, LostFault(t.cfg.Host, since, d.At))
		if err != nil || !done {
			continue // the next audit finds it again
		}
		d.Faulted = append(d.Faulted, c.UUID)
		if _, err := t.release(ctx, c, headers); err != nil {
			return err // in ERROR: the next audit releases it
		}
	}
	return nil
}

// missingSince is when the audits began to miss uuid's guest, as the last
// audit left it.
func (t *Tracker) missingSince(uuid string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	since, ok := t.missing[uuid]
	return since, ok
}

// reclaim brings back an instance put in ERROR as lost whose guest runs
// here again: ACTIVE again, then claimed for here; if the host has no
// room left for it, its guest is fenced (stopped) and the instance put in
// ERROR again saying so. A store that cannot (no InstanceFaulter) leaves
// it as it is.
func (t *Tracker) reclaim(ctx context.Context, c AuditClaim, d *Drift) error {
	f, ok := t.store.(InstanceFaulter)
	if !ok {
		return nil
	}
	done, err := f.RestoreFoundInstance(ctx, c.Instance.UUID, t.cfg.Host)
	if err != nil || !done {
		return nil // the next audit finds it again, or it was changed meanwhile
	}
	d.Found = append(d.Found, c.Instance.UUID)
	c.Instance.VMState, c.Instance.Fault = records.VMActive, ""
	res, err := t.claim(ctx, c)
	if err != nil || res != claimNoRoom {
		return err
	}
	if done, err := f.FaultLostInstance(ctx, c.Instance.UUID, t.cfg.Host, FencedFault(t.cfg.Host, d.At)); err != nil || !done {
		return nil // changed meanwhile: the next audit sees it as it is
	}
	d.Fenced = append(d.Fenced, c.Instance.UUID)
	if l, ok := t.driver.(LifecycleDriver); ok {
		if err := l.Lifecycle(ctx, c.Instance, lifecycle.OpStop); err != nil {
			d.Fenced[len(d.Fenced)-1] += " (stopping it failed: " + err.Error() + ")"
		}
	}
	return nil
}

// LostFault is the fault an audit of host at at puts on a lost instance,
// its guest missing from the audits since since.
func LostFault(host string, since, at time.Time) string {
	return fmt.Sprintf("%s%s (missing from the host's periodic audits since %s, lost at %s); "+
		"its allocation is released — delete the instance, or rebuild it; if the guest runs on %s again, "+
		"the host's next audit claims it back and makes the instance ACTIVE", lostFaultPrefix, host,
		since.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339), host)
}

// FencedFault is the fault an audit of host at at puts on an instance
// whose lost guest ran there again when the host had no room left for
// its claim: the guest is stopped.
func FencedFault(host string, at time.Time) string {
	return fmt.Sprintf("the guest of this instance, lost, ran again on its host %s at %s, but %s has no room left for its claim: "+
		"the guest is stopped — delete the instance, or rebuild it", host, at.UTC().Format(time.RFC3339), host)
}

func recordDiff(a, b records.HostRecord) []string {
	var out []string
	cmp := func(name string, x, y int64) {
		if x != y {
			out = append(out, fmt.Sprintf("%s %d→%d", name, x, y))
		}
	}
	cmp("vcpus_used", a.VCPUsUsed, b.VCPUsUsed)
	cmp("memory_mb_used", a.MemoryMBUsed, b.MemoryMBUsed)
	cmp("local_gb_used", a.LocalGBUsed, b.LocalGBUsed)
	cmp("running_vms", a.RunningVMs, b.RunningVMs)
	return out
}
