package compute

import (
	"strings"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
)

// The audit's decisions, in pure code: plain data in (what the audit read),
// a plan out (what it is to write, remove, adopt and report). Nothing here
// reads or writes a store or a driver; audit.go gathers the inputs and
// applies the plan (see Tracker.Audit for the order of the reads and why
// every write stays safe against a race).

// AuditInputs is what one audit decides from, in the order it is read:
// the allocations on the host's provider, the migrations in flight, the
// driver's guests, the busy set when the tracked set was counted, and
// last the records the decision needs (AuditReads).
type AuditInputs struct {
	// Host is the host audited (an instance recorded elsewhere is not its
	// own).
	Host string
	// Consumers hold allocations on the host's provider, as listed. With
	// a ConsumerLister they came without their allocations; a release
	// then reads the consumer again (Tracker.Audit).
	Consumers []placement.Consumer
	// InFlight holds the UUIDs of the active migrations touching the host
	// and of their instances.
	InFlight map[string]bool
	// Guests are the driver's guests.
	Guests []Guest
	// Busy holds the instances with an operation in flight.
	Busy map[string]bool
	// Instances and Migrations are the records read for the consumers and
	// guests whose fate depends on them, the ones a plan's Reads names. A
	// record the plan needs and cannot find here has not been read: the
	// plan leaves its consumer or guest alone, and asks for it.
	Instances  map[string]InstanceRead
	Migrations map[string]MigrationRead
	// Now is when the audit began; MissingSince holds, for each instance
	// whose guest earlier audits missed (without one finding it between),
	// when the first of them began; LostAfter is how long a guest may be
	// missing before its instance is lost (HostConfig.LostGuestTimeout: 0
	// loses it at the first audit that misses it).
	Now          time.Time
	MissingSince map[string]time.Time
	LostAfter    time.Duration
}

// InstanceRead is an instance record as the audit read it.
type InstanceRead struct {
	Instance records.Instance
	// Missing: the store has no such instance. Foreign: the servers
	// refuse to show it to this host (store.ErrForbidden: it runs
	// elsewhere, nothing moves it here, nothing of it is allocated here).
	Missing, Foreign bool
}

// MigrationRead is what the audit read of the migration a migration
// consumer is named after, among those touching the host.
type MigrationRead struct {
	// Missing: no migration of that UUID touches this host.
	Missing bool
	Status  records.MigrationStatus
}

// AuditReads names records a plan needs before it can decide.
type AuditReads struct {
	// Instances of consumers here without a guest here (a refusal to
	// show one is an error: it holds allocations here).
	Instances []string
	// GuestInstances: instances of guests here (a refusal says the guest
	// is a copy left behind: InstanceRead.Foreign).
	GuestInstances []string
	// Migrations: the migrations migration consumers here are named
	// after.
	Migrations []string
}

// Empty reports whether nothing is to be read.
func (r AuditReads) Empty() bool {
	return len(r.Instances) == 0 && len(r.GuestInstances) == 0 && len(r.Migrations) == 0
}

// AuditPlan is what one audit does, in the order the tracker applies it:
// releases, stray removals, adoptions, claims, then the faults of the
// lost instances.
type AuditPlan struct {
	// Reads are the records the plan needed and the inputs lacked: read
	// them and plan again (nothing the plan decided depends on them).
	Reads AuditReads
	// Release are the consumers whose allocation here goes (orphans:
	// their instance is gone, in ERROR or recorded elsewhere, or their
	// migration is over), each as listed: the release names the listed
	// generation, so a consumer that changed since keeps its allocation.
	Release []placement.Consumer
	// Missing are instances recorded here, ACTIVE with no task, whose
	// guest is not here and has been missing for less than LostAfter
	// (since this audit, or since MissingSince): reported, their
	// allocation kept — a guest listing that glitched, or a state file
	// restored from an older copy, loses nothing.
	Missing []string
	// Lost are the consumers of the instances whose guest has been
	// missing for LostAfter, as listed: put in ERROR (InstanceFaulter),
	// then their allocation here is released, naming the listed
	// generation.
	Lost []placement.Consumer
	// Stray are guests that belong to no instance on this host: removed
	// (Destroy, or RollbackLiveMigrationAtDestination for an incoming
	// one), never given an allocation.
	Stray []Guest
	// Adopt are incoming guests whose instance the records settled here:
	// their arrival is finished (post_live_migration_at_destination) and
	// they are counted.
	Adopt []Adoption
	// Claim are guests of instances running here with nothing allocated
	// here: they get an allocation here (ClaimAllocation, from the
	// consumer and the provider tree as they are when it is written).
	Claim []AuditClaim
	// Found are running guests, holding nothing here, of instances an
	// audit put in ERROR as lost (their fault is LostFault's) and nothing
	// touched since: each instance is made ACTIVE again and its guest
	// claimed for here; if the host has no room left for the claim, the
	// guest is stopped and the instance stays in ERROR saying so
	// (FencedFault).
	Found []AuditClaim
}

// Adoption is an incoming guest to adopt; Claim says whether an
// allocation is then to be written for it (it held none here when
// listed).
type Adoption struct {
	Instance records.Instance
	Guest    Guest
	Claim    bool
}

// AuditClaim is an instance running here (guest Guest) that is to get an
// allocation here.
type AuditClaim struct {
	Instance records.Instance
	Guest    Guest
}

// Counted reports whether the tracked set counts guest g: every guest but
// an incoming one, which is not this host's until
// post_live_migration_at_destination.
func Counted(g Guest) bool { return g.State != GuestIncoming }

// PlanCount is the audit's first decision, the tracked set: it becomes the
// counted guests (Counted) with their flavors, and also keeps the tracked
// instances with an operation in flight and no counted guest (a spawn in
// flight stays counted). vanished are the tracked instances to drop,
// untracked the counted guests not tracked yet. It reads the maps only; the
// tracker calls it and applies it under its lock, in one step, so a claim
// made meanwhile is never lost.
func PlanCount(tracked map[string]records.Flavor, busy map[string]int, guests []Guest) (vanished, untracked []string) {
	kept := 0 // tracked instances with a counted guest
	for i := range guests {
		if g := &guests[i]; Counted(*g) {
			if _, ok := tracked[g.UUID]; ok {
				kept++
			} else {
				untracked = append(untracked, g.UUID)
			}
		}
	}
	if kept == len(tracked) {
		return nil, untracked // every tracked instance has its guest (the common audit: no index built)
	}
	here := make(map[string]bool, len(guests))
	for i := range guests {
		if Counted(guests[i]) {
			here[guests[i].UUID] = true
		}
	}
	for uuid := range tracked {
		if !here[uuid] && busy[uuid] == 0 {
			vanished = append(vanished, uuid)
		}
	}
	return vanished, untracked
}

// PlanAudit decides what an audit heals from what it read. A consumer
// here whose guest is here, whose migration is in flight or whose
// instance is busy is left alone; so is a guest whose instance holds
// allocations here (but an incoming one), or is moving or busy (but an
// incoming one: a pre_live_migration that ran after its migration gave
// up leaves a busy incoming guest nobody brings). For the others it
// needs their records (Reads when they are not in the inputs), and
// then:
//
//   - a migration consumer whose migration is over or gone is released;
//   - an instance consumer whose instance is gone, in ERROR or DELETED, or
//     recorded on another host and not moving, is released; one recorded
//     here, ACTIVE, with no task, is Missing until its guest has been
//     missing for LostAfter, then Lost; one building or with a task is
//     left to that task;
//   - a guest with no instance, or whose instance is recorded elsewhere
//     (or the servers refuse it to this host), is Stray;
//   - a guest whose instance is building or has a task is left to it;
//   - an incoming guest whose instance is recorded here is adopted, and
//     claimed for if it held nothing here;
//   - the guest of an ACTIVE instance recorded here holding nothing here
//     is claimed for;
//   - the running guest of an instance recorded here that an audit put
//     in ERROR as lost is Found.
//
// It never releases the allocation of an instance recorded here but a
// Lost one's (after it is put in ERROR), and never claims for a guest
// without an instance recorded here.
func PlanAudit(in AuditInputs) AuditPlan {
	var p AuditPlan
	// One index of both lists: which UUIDs have a guest here, which hold
	// allocations here.
	const guestHere, heldHere = 1, 2
	idx := make(map[string]uint8, len(in.Guests)+len(in.Consumers)/4)
	for i := range in.Guests {
		idx[in.Guests[i].UUID] |= guestHere
	}
	for i := range in.Consumers {
		c := &in.Consumers[i]
		idx[c.UUID] |= heldHere
		if idx[c.UUID]&guestHere != 0 || in.InFlight[c.UUID] || in.Busy[c.UUID] {
			continue
		}
		switch in.consumerFate(c, &p.Reads) {
		case fateRelease:
			p.Release = append(p.Release, *c)
		case fateLost:
			if since, ok := in.MissingSince[c.UUID]; in.LostAfter <= 0 || (ok && !in.Now.Before(since.Add(in.LostAfter))) {
				p.Lost = append(p.Lost, *c)
			} else {
				p.Missing = append(p.Missing, c.UUID)
			}
		}
	}
	for i := range in.Guests {
		g := &in.Guests[i]
		held := idx[g.UUID]&heldHere != 0
		if (held && g.State != GuestIncoming) || in.InFlight[g.UUID] || (in.Busy[g.UUID] && g.State != GuestIncoming) {
			continue
		}
		r, ok := in.Instances[g.UUID]
		inst := r.Instance
		switch {
		case !ok:
			p.Reads.GuestInstances = append(p.Reads.GuestInstances, g.UUID)
		case r.Missing || r.Foreign:
			// No instance (a leftover of a delete this host missed), or
			// one that has nothing to do with this host (a copy left
			// behind).
			p.Stray = append(p.Stray, *g)
		case inst.VMState == records.VMBuilding || inst.TaskState != records.TaskNone:
			// Something is happening to it (a move settles last).
		case inst.Host != in.Host:
			// A migration that ended without rollback here, or a copy
			// left behind: the instance runs where its record says.
			p.Stray = append(p.Stray, *g)
		case g.State == GuestIncoming:
			// The migration settled the instance here but its last step
			// (post_live_migration_at_destination) never ran: finish it.
			p.Adopt = append(p.Adopt, Adoption{Instance: inst, Guest: *g, Claim: !held})
		case inst.VMState == records.VMActive:
			p.Claim = append(p.Claim, AuditClaim{Instance: inst, Guest: *g})
		case inst.VMState == records.VMError && IsLostFault(inst.Fault) && g.State == GuestRunning:
			p.Found = append(p.Found, AuditClaim{Instance: inst, Guest: *g})
		}
	}
	return p
}

// lostFaultPrefix begins every fault LostFault writes: the mark of an
// instance an audit put in ERROR because its guest was gone, which an
// audit that finds the guest again may undo (and the servers let it undo
// no other).
const lostFaultPrefix = "the guest of this instance is gone from its host "

// IsLostFault reports whether fault is one LostFault wrote.
func IsLostFault(fault string) bool { return strings.HasPrefix(fault, lostFaultPrefix) }

type fate int

const (
	fateKeep fate = iota
	fateRelease
	fateLost
)

// consumerFate decides for a consumer here with no guest here and nothing
// in flight, or adds the record it needs to reads (and keeps it).
func (in *AuditInputs) consumerFate(c *placement.Consumer, reads *AuditReads) fate {
	if c.Type == placement.ConsumerMigration {
		m, ok := in.Migrations[c.UUID]
		switch {
		case !ok:
			reads.Migrations = append(reads.Migrations, c.UUID)
			return fateKeep
		case m.Missing || records.MigrationTerminal(m.Status):
			// A migration that started after the in-flight ones were
			// listed is still active: not an orphan.
			return fateRelease
		}
		return fateKeep
	}
	r, ok := in.Instances[c.UUID]
	inst := r.Instance
	switch {
	case !ok || r.Foreign:
		if !ok {
			reads.Instances = append(reads.Instances, c.UUID)
		}
		return fateKeep
	case r.Missing:
		return fateRelease // the instance is gone
	case inst.VMState == records.VMBuilding || inst.TaskState != records.TaskNone:
		return fateKeep // scheduled here, or being moved or deleted
	case inst.VMState == records.VMError || inst.VMState == records.VMDeleted:
		return fateRelease
	case inst.Host != in.Host:
		return fateRelease // it lives elsewhere, and is not moving
	}
	return fateLost
}

// ReleaseHere is what a consumer keeps when its allocation on provider
// goes: everything it holds elsewhere.
func ReleaseHere(c placement.Consumer, provider string) map[string]placement.Resources {
	rest := make(map[string]placement.Resources, len(c.Allocations))
	for p, r := range c.Allocations {
		if p != provider {
			rest[p] = r
		}
	}
	return rest
}

// HeldInTree reports whether allocations hold anything on root or a
// provider below it, parents giving each provider's parent as far as it
// was read (a NUMA cell, a GPU: placement's candidates may put a whole
// claim there). The audit then leaves a claim it would write alone.
func HeldInTree(root string, allocations map[string]placement.Resources, parents map[string]string) bool {
	for p := range allocations {
		for cur, depth := p, 0; cur != "" && depth < maxTreeDepth; depth++ {
			if cur == root {
				return true
			}
			next, ok := parents[cur]
			if !ok {
				break
			}
			cur = next
		}
	}
	return false
}

// maxTreeDepth bounds a walk up a provider tree (a corrupt tree with a
// cycle ends it).
const maxTreeDepth = 1000

// ClaimAllocation is the allocation the audit writes for guest g found
// running here without one, its consumer holding held: what keel's
// scheduler would claim for its flavor on the host's provider tree —
// children such as NUMA cells or GPUs, pools sharing with the host —
// through placement.Reclaim, given the flavor's query q and the tree's
// providers (nil q or nil providers: none read); the guest's flavor on the
// host's provider root otherwise, or when it does not fit (the store then
// refuses the write, as it refused before trees).
func ClaimAllocation(root string, g Guest, q *placement.CandidateQuery, providers []placement.TreeProvider, held map[string]placement.Resources) map[string]placement.Resources {
	if q != nil && providers != nil {
		if alloc, ok := placement.Reclaim(providers, *q, root, held); ok {
			return alloc
		}
	}
	return map[string]placement.Resources{root: g.Flavor.Resources()}
}
