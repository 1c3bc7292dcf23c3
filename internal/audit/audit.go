// Package audit checks the whole cloud's invariants — the guarantees keel
// makes about placement, whatever crashed meanwhile:
//
//   - no resource provider is over capacity;
//   - every ACTIVE instance with no task in progress holds exactly its
//     flavor, on its host's provider only;
//   - every migration consumer belongs to a migration still in progress;
//   - no capacity is held twice: an instance holds allocations only on the
//     host it runs on and the one it is being live-migrated to, and never
//     on the source while its migration's consumer holds the source too;
//   - every allocation belongs to an instance or an in-progress migration;
//   - nothing is stuck: no instance building, spawning or deleting past a
//     deadline, no migration in a non-final status whose record has not
//     changed for a deadline, no instance migrating with no migration
//     making progress for as long (the server's deadlines are the
//     conductor's [DEFAULT] instance_build_timeout and [keel]
//     migration_stall_timeout, plus the time its sweep takes to act);
//   - nothing is lost: every ACTIVE instance's guest is on its host, and
//     every guest belongs to an instance on that host (or to a migration
//     moving it there or away);
//   - no source slot (max_concurrent_live_migrations) is held by a
//     migration that has ended.
//
// The checks are one pure function, Plan: plain data in (providers,
// allocations, instances, migrations, the agents' guest lists, the
// conductor's slots, the time), findings out. Run gathers that data from
// the store, the agents and the conductor and calls it; Check is the
// store-only audit the simulator and the tests run after every scenario.
// `keel audit` and GET /keel/v1/audit print Run's findings.
//
// The data is read in several steps while the cloud keeps working, so the
// checks that compare two sources only report what holds in both
// readings around the slow one (the agents' guests, the slots): a guest
// removed by a delete that was already recorded is not taken for lost.
// The other checks are exact at rest; under load a transient finding can
// show (e.g. an instance being settled between two reads) — run the
// audit again to tell a transient from a real one.
package audit

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"keel/internal/compute"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Kinds of finding.
const (
	KindOverCapacity   = "over-capacity"       // a provider's usage above its capacity
	KindAllocation     = "allocation-mismatch" // an ACTIVE instance's allocation is not its flavor on its host
	KindNoProvider     = "no-provider"         // an ACTIVE instance's host has no resource provider
	KindEndedConsumer  = "ended-migration-consumer"
	KindUnknownConsume = "unknown-consumer" // allocations of no instance or migration
	KindHeldTwice      = "held-twice"       // an instance's capacity held where it does not run or move to, or twice on its source
	KindFailedHolds    = "failed-holds"     // an ERROR or DELETED instance still holds allocations
	KindStuckBuild     = "stuck-build"      // building/spawning past the build deadline
	KindStuckDelete    = "stuck-delete"     // deleting past the build deadline
	KindStuckMigrating = "stuck-migrating"  // a move's task (migrating, resize_*) with no migration progressing
	KindStuckMigration = "stuck-migration"  // a non-final migration with no progress
	KindLostGuest      = "lost-guest"       // an ACTIVE instance without its guest on its host
	KindStrayGuest     = "stray-guest"      // a guest with no instance, or on a host its instance neither runs on nor moves to/from
	KindEndedSlot      = "slot-of-ended-migration"
)

// Finding is one violation.
type Finding struct {
	Kind string `json:"kind"`
	// Subject is the instance, migration, consumer or host it is about.
	Subject string `json:"subject"`
	Text    string `json:"text"`
}

// Options are the deadlines; a zero deadline turns its check off.
type Options struct {
	// BuildTimeout: an instance building or spawning longer than this
	// since it was created, or deleting longer than this since its record
	// last changed, is stuck.
	BuildTimeout time.Duration
	// MigrationTimeout: a migration in a non-final status whose record has
	// not changed for this long is stuck (a queued one only if no
	// migration from its source has progressed meanwhile), and so is an
	// instance migrating that long with no migration of it progressing.
	MigrationTimeout time.Duration
}

// Inputs is everything Plan reads.
type Inputs struct {
	Now       time.Time
	Providers []store.ProviderSummary
	// Consumers are the allocations, by provider UUID.
	Consumers map[string][]placement.Consumer
	Instances []records.Instance
	// Migrations are the migrations in a non-final status.
	Migrations []records.Migration
	// Guests are the agents' guest lists, by host: only hosts present
	// here are checked for lost and stray guests. GuestsCheck are the
	// instances and non-final migrations read again after the guests:
	// a guest finding is reported only if it holds against both readings.
	// Nil GuestsCheck means the one reading (tests of Plan).
	Guests      map[string][]compute.Guest
	GuestsCheck *Recheck
	// Slots are the conductor's source slots (source host → migration
	// IDs), as held in two readings around Ended; nil skips the check.
	Slots map[string][]int64
	// Ended are the final statuses of migrations named in Slots that are
	// not in Migrations (read by ID); a slot's migration absent from both
	// is taken as ended (its record is gone).
	Ended map[int64]records.MigrationStatus
}

// Recheck is a second reading of the records, taken after the guests.
type Recheck struct {
	Instances  []records.Instance
	Migrations []records.Migration
}

// Plan returns the findings, sorted by text.
func Plan(in Inputs, opt Options) []Finding {
	var out []Finding
	add := func(kind, subject, format string, args ...any) {
		out = append(out, Finding{Kind: kind, Subject: subject, Text: fmt.Sprintf(format, args...)})
	}
	rpOf := map[string]string{}   // host name → provider UUID
	nameOf := map[string]string{} // provider UUID → provider name
	where := Locate(in.Providers)
	for _, s := range in.Providers {
		if s.ParentUUID == "" {
			rpOf[s.Name] = s.UUID
		}
		nameOf[s.UUID] = s.Name
		for _, rc := range slices.Sorted(maps.Keys(s.Usage)) {
			inv, ok := s.Inventories[rc]
			if used := s.Usage[rc]; !ok || used > inv.Capacity() {
				add(KindOverCapacity, s.Name, "host %s is over capacity: %d %s used of %d", s.Name, used, rc, inv.Capacity())
			}
		}
	}
	moves := migrationsByInstance(in.Migrations)
	active := map[string]records.Migration{} // by migration UUID
	for _, m := range in.Migrations {
		active[m.UUID] = m
	}
	// By pointer into in.Instances: a copy of every instance would double
	// the audit's memory on a large cloud.
	byUUID := make(map[string]*records.Instance, len(in.Instances))
	for k := range in.Instances {
		byUUID[in.Instances[k].UUID] = &in.Instances[k]
	}
	held := map[string]map[string]placement.Resources{} // consumer → provider → resources
	types := map[string]placement.ConsumerType{}
	for _, p := range slices.Sorted(maps.Keys(in.Consumers)) {
		for _, c := range in.Consumers[p] {
			if held[c.UUID] == nil {
				held[c.UUID] = map[string]placement.Resources{}
			}
			held[c.UUID][p] = c.Allocations[p]
			types[c.UUID] = c.Type
		}
	}
	for _, c := range slices.Sorted(maps.Keys(held)) {
		allocs := held[c]
		inst, isInstance := byUUID[c]
		switch {
		case types[c] == placement.ConsumerMigration:
			if _, ok := active[c]; !ok {
				add(KindEndedConsumer, c, "migration consumer %s holds %s but its migration is not in progress", c, describe(allocs, nameOf))
			}
		case !isInstance:
			add(KindUnknownConsume, c, "consumer %s holds %s but no instance or migration has that id", c, describe(allocs, nameOf))
		case inst.VMState == records.VMError || inst.VMState == records.VMDeleted:
			add(KindFailedHolds, c, "instance %s is %s but still holds %s", c, inst.VMState, describe(allocs, nameOf))
		default:
			heldTwice(*inst, allocs, moves[c], held, where, nameOf, add)
		}
	}
	wants := map[flavorSize]placement.Resources{} // a flavor's total without extra specs, computed once
	for k := range in.Instances {
		i := &in.Instances[k]
		if i.VMState != records.VMActive || i.TaskState != records.TaskNone {
			continue
		}
		want := wantOf(i.Flavor, wants)
		allocs := held[i.UUID]
		_, known := rpOf[i.Host]
		switch {
		case !known:
			add(KindNoProvider, i.UUID, "instance %s runs on %q, which has no resource provider", i.UUID, i.Host)
		case len(allocs) == 0:
			add(KindAllocation, i.UUID, "instance %s on %s holds no allocation (want %s)", i.UUID, i.Host, want)
		case !where.OnHost(allocs, i.Host) || !sumEquals(allocs, want):
			add(KindAllocation, i.UUID, "instance %s on %s holds %s, want %s on %s's provider tree (and providers sharing with it) only", i.UUID, i.Host, describe(allocs, nameOf), want, i.Host)
		}
	}
	stuck(in, opt, moves, add)
	guests(in, moves, add)
	slots(in, active, add)
	sort.Slice(out, func(a, b int) bool { return out[a].Text < out[b].Text })
	return out
}

// heldTwice checks where an instance consumer holds capacity: only on its
// host, or — while it is being live-migrated — on the destination (the
// migration consumer holds the source then). A migration whose
// destination is not recorded yet (the claim and the record are two
// writes) allows one other host.
func heldTwice(inst records.Instance, allocs map[string]placement.Resources, moving []records.Migration,
	held map[string]map[string]placement.Resources, where Where, nameOf map[string]string, add func(kind, subject, format string, args ...any)) {
	allowed := map[string]bool{inst.Host: true}
	unrecorded := false
	for _, m := range moving {
		if m.DestHost != "" {
			allowed[m.DestHost] = true
		}
		unrecorded = unrecorded || m.DestHost == ""
	}
	var elsewhere []string
	elsewhereHosts := map[string]bool{}
	onOwn := 0 // providers held that are not shared
	for _, p := range slices.Sorted(maps.Keys(allocs)) {
		h, known := where.Host(p)
		if known && h == "" {
			continue // a sharing provider: any host of its aggregates uses it
		}
		onOwn++
		if !known {
			h = nameOf[p]
		}
		if !allowed[h] {
			elsewhere = append(elsewhere, p)
			elsewhereHosts[h] = true
		}
	}
	if unrecorded && len(elsewhereHosts) == 1 {
		elsewhere = nil
	}
	if inst.Host == "" && len(moving) == 0 && len(elsewhereHosts) <= 1 {
		// A boot's claim, before the host is recorded.
		elsewhere = nil
	}
	for _, p := range elsewhere {
		add(KindHeldTwice, inst.UUID, "instance %s holds %s on %s, where it neither runs (%q) nor is moving to", inst.UUID, allocs[p], nameOf[p], inst.Host)
	}
	for _, m := range moving {
		if m.SourceHost == m.DestHost {
			continue // a resize on its own host holds both flavors there until confirm
		}
		for p := range held[m.UUID] {
			if h, known := where.Host(p); known && h == "" {
				continue // a shared pool is held by both sides of a move, as in Placement
			}
			if _, both := allocs[p]; both {
				add(KindHeldTwice, inst.UUID, "instance %s and its migration %d's consumer both hold %s: the source is held twice", inst.UUID, m.ID, nameOf[p])
			}
		}
	}
}

// Where tells where providers are: each provider's host (the name of its
// tree's root; "" for a provider that shares its inventory,
// MISC_SHARES_VIA_AGGREGATE, or a tree whose root does), and which hosts
// a sharing provider shares with (as Placement anchors it: any provider
// of the host's tree in one of its aggregates).
type Where struct {
	hostOf   map[string]string   // provider UUID → host
	aggs     map[string][]string // sharing provider UUID → its aggregates
	hostAggs map[string][]string // host → its tree's aggregates (hosts in none are absent)
}

// Locate indexes every provider (ps: all of them, with their parents,
// traits and aggregates).
func Locate(ps []store.ProviderSummary) Where {
	byUUID := make(map[string]*store.ProviderSummary, len(ps))
	for i := range ps {
		byUUID[ps[i].UUID] = &ps[i]
	}
	shares := func(p *store.ProviderSummary) bool {
		_, ok := slices.BinarySearch(p.Traits, placement.SharesViaAggregate)
		return ok
	}
	w := Where{hostOf: make(map[string]string, len(ps)), aggs: map[string][]string{}, hostAggs: map[string][]string{}}
	for i := range ps {
		p := &ps[i]
		root := p
		for depth := 0; root.ParentUUID != "" && depth < 1000; depth++ {
			up := byUUID[root.ParentUUID]
			if up == nil {
				break
			}
			root = up
		}
		switch {
		case shares(p) || shares(root):
			w.hostOf[p.UUID] = ""
			if len(p.Aggregates) > 0 {
				w.aggs[p.UUID] = p.Aggregates
			}
		default:
			w.hostOf[p.UUID] = root.Name
			if len(p.Aggregates) > 0 {
				w.hostAggs[root.Name] = append(w.hostAggs[root.Name], p.Aggregates...)
			}
		}
	}
	return w
}

// Host is provider p's host ("" for a sharing provider) and whether p is
// known at all.
func (w Where) Host(p string) (string, bool) {
	h, ok := w.hostOf[p]
	return h, ok
}

// sharesWith reports whether sharing provider p shares with host.
func (w Where) sharesWith(p, host string) bool {
	for _, a := range w.aggs[p] {
		if slices.Contains(w.hostAggs[host], a) {
			return true
		}
	}
	return false
}

// OnHost reports whether every provider allocs names is in host's tree
// or a provider sharing with it; a provider Locate did not see is on no
// host.
func (w Where) OnHost(allocs map[string]placement.Resources, host string) bool {
	for p := range allocs {
		h, known := w.hostOf[p]
		if !known || (h == "" && !w.sharesWith(p, host)) || (h != "" && h != host) {
			return false
		}
	}
	return true
}

// HoldsFlavor reports whether allocs is what an instance of flavor f on
// host must hold when it is not moving: f's request in all (its extra
// specs' groups included), on host's provider tree and providers sharing
// with it only.
func (w Where) HoldsFlavor(allocs map[string]placement.Resources, host string, f records.Flavor) bool {
	return len(allocs) > 0 && w.OnHost(allocs, host) && sumEquals(allocs, wantOf(f, map[flavorSize]placement.Resources{}))
}

// Hosts lists, sorted, the hosts whose provider trees allocs holds
// something on (a sharing provider is no host's); a provider Locate did
// not see counts as a host of its own UUID.
func (w Where) Hosts(allocs map[string]placement.Resources) []string {
	var out []string
	for p := range allocs {
		h, known := w.hostOf[p]
		if !known {
			h = p
		}
		if h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

// flavorSize is what a flavor without extra specs claims from.
type flavorSize struct{ vcpus, ramMB, diskGB int64 }

// wantOf is what an instance of flavor f must hold in all: its resources,
// with its extra specs' groups added. Flavors without extra specs share
// one answer per size in memo (read only by the caller).
func wantOf(f records.Flavor, memo map[flavorSize]placement.Resources) placement.Resources {
	key := flavorSize{f.VCPUs, f.RAMMB, f.DiskGB}
	if len(f.ExtraSpecs) == 0 {
		if want, ok := memo[key]; ok {
			return want
		}
	}
	want := f.Resources()
	if q, err := placement.FlavorQuery(want, f.ExtraSpecs); err == nil {
		want = q.Total()
	}
	if len(f.ExtraSpecs) == 0 {
		memo[key] = want
	}
	return want
}

// sumEquals is sum(allocs).Equal(want), without the sum for an allocation
// on one provider.
func sumEquals(allocs map[string]placement.Resources, want placement.Resources) bool {
	if len(allocs) == 1 {
		for _, r := range allocs {
			return r.Equal(want)
		}
	}
	return sum(allocs).Equal(want)
}

// sum adds up an allocation over its providers.
func sum(allocs map[string]placement.Resources) placement.Resources {
	out := placement.Resources{}
	for _, r := range allocs {
		out.Add(r)
	}
	return out
}

func stuck(in Inputs, opt Options, moves map[string][]records.Migration, add func(kind, subject, format string, args ...any)) {
	past := func(t time.Time, d time.Duration) bool { return d > 0 && in.Now.Sub(t) > d }
	age := func(t time.Time) time.Duration { return in.Now.Sub(t).Round(time.Second) }
	for _, i := range in.Instances {
		switch {
		case (i.VMState == records.VMBuilding || i.TaskState == records.TaskSpawning) && past(i.BuildStarted(), opt.BuildTimeout):
			add(KindStuckBuild, i.UUID, "instance %s is still %s (task %q) %s after its boot began (the audit's build deadline: %s)", i.UUID, i.VMState, i.TaskState, age(i.BuildStarted()), opt.BuildTimeout)
		case i.TaskState == records.TaskDeleting && past(i.UpdatedAt, opt.BuildTimeout):
			add(KindStuckDelete, i.UUID, "instance %s has been deleting for %s (the audit's build deadline: %s)", i.UUID, age(i.UpdatedAt), opt.BuildTimeout)
		case moveTask(i.TaskState) && past(i.UpdatedAt, opt.MigrationTimeout):
			progressing := false
			for _, m := range moves[i.UUID] {
				progressing = progressing || !past(m.UpdatedAt, opt.MigrationTimeout)
			}
			if !progressing {
				add(KindStuckMigrating, i.UUID, "instance %s has been in task %s for %s with no migration of it progressing (the audit's migration deadline: %s)", i.UUID, i.TaskState, age(i.UpdatedAt), opt.MigrationTimeout)
			}
		}
	}
	// A queued migration waits for a slot on its source: it is stuck only
	// if nothing from that source has moved meanwhile.
	moved := map[string]bool{}
	for _, m := range in.Migrations {
		if m.Status != records.MigrationQueued && !past(m.UpdatedAt, opt.MigrationTimeout) {
			moved[m.SourceHost] = true
		}
	}
	for _, m := range in.Migrations {
		// A finished resize or cold migration waits for the user's
		// confirm or revert (or resize_confirm_window), as long as it takes.
		if !past(m.UpdatedAt, opt.MigrationTimeout) || m.Status == records.MigrationFinished || (m.Status == records.MigrationQueued && moved[m.SourceHost]) {
			continue
		}
		if m.Status == records.MigrationFinished || m.Status == records.MigrationDone {
			// Waiting by design: a resize in VERIFY_RESIZE for its user
			// (or resize_confirm_window), an evacuation for its dead
			// source to come back.
			continue
		}
		add(KindStuckMigration, fmt.Sprint(m.ID), "migration %d of instance %s (%s → %s) has been %s (phase %q) for %s without progress (the audit's migration deadline: %s)",
			m.ID, m.InstanceUUID, m.SourceHost, orUnset(m.DestHost), m.Status, m.Phase, age(m.UpdatedAt), opt.MigrationTimeout)
	}
}

// guests compares the agents' guests with the records (both readings when
// there are two).
func guests(in Inputs, moves map[string][]records.Migration, add func(kind, subject, format string, args ...any)) {
	if len(in.Guests) == 0 {
		return
	}
	type reading struct {
		insts map[string]records.Instance
		moves map[string][]records.Migration
	}
	readings := []reading{{insts: indexInstances(in.Instances), moves: moves}}
	if in.GuestsCheck != nil {
		readings = append(readings, reading{insts: indexInstances(in.GuestsCheck.Instances), moves: migrationsByInstance(in.GuestsCheck.Migrations)})
	}
	on := map[string]map[string]compute.Guest{} // host → uuid → guest
	for h, gs := range in.Guests {
		on[h] = map[string]compute.Guest{}
		for _, g := range gs {
			on[h][g.UUID] = g
		}
	}
	// lost: an ACTIVE instance with no task, the same record in every
	// reading, on a checked host without its guest.
	for _, i := range in.Instances {
		here, checked := on[i.Host]
		if !checked || i.VMState != records.VMActive || i.TaskState != records.TaskNone {
			continue
		}
		if _, ok := here[i.UUID]; ok {
			continue
		}
		same := true
		for _, r := range readings[1:] {
			j, ok := r.insts[i.UUID]
			same = same && ok && j.Version == i.Version
		}
		if same {
			add(KindLostGuest, i.UUID, "instance %s is active on %s but %s has no guest for it", i.UUID, i.Host, i.Host)
		}
	}
	// stray: a guest whose instance is gone, or is on another host with
	// no migration between the two, in every reading.
	for _, h := range slices.Sorted(maps.Keys(on)) {
		for _, u := range slices.Sorted(maps.Keys(on[h])) {
			why := ""
			for _, r := range readings {
				w := strayReason(h, u, r.insts, r.moves)
				if w == "" {
					why = ""
					break
				}
				if why == "" {
					why = w
				}
			}
			if why != "" {
				add(KindStrayGuest, u, "guest %s (%s) on %s: %s", u, on[h][u].State, h, why)
			}
		}
	}
}

func strayReason(host, uuid string, insts map[string]records.Instance, moves map[string][]records.Migration) string {
	i, ok := insts[uuid]
	switch {
	case !ok:
		return "no instance has that id"
	case i.VMState == records.VMDeleted:
		return "its instance is deleted"
	case i.Host == host || i.Host == "":
		return ""
	}
	for _, m := range moves[uuid] {
		if m.SourceHost == host || m.DestHost == host {
			return ""
		}
	}
	return fmt.Sprintf("its instance runs on %q and no migration moves it from or to %s", i.Host, host)
}

func slots(in Inputs, active map[string]records.Migration, add func(kind, subject, format string, args ...any)) {
	if in.Slots == nil {
		return
	}
	live := map[int64]bool{}
	for _, m := range active {
		live[m.ID] = true
	}
	for _, h := range slices.Sorted(maps.Keys(in.Slots)) {
		for _, id := range in.Slots[h] {
			if live[id] {
				continue
			}
			status, ok := in.Ended[id]
			if ok && !records.MigrationTerminal(status) {
				continue // started after Migrations was read
			}
			if !ok {
				status = "gone"
			}
			add(KindEndedSlot, fmt.Sprint(id), "migration %d holds a live-migration slot on %s but it has ended (%s)", id, h, status)
		}
	}
}

// moveTask reports whether an instance's task is a move's: a live
// migration, or a cold migration's or resize's.
func moveTask(task records.TaskState) bool {
	switch task {
	case records.TaskMigrating, records.TaskResizePrep, records.TaskResizeReverting, records.TaskResizeConfirming:
		return true
	}
	return false
}

func migrationsByInstance(ms []records.Migration) map[string][]records.Migration {
	out := map[string][]records.Migration{}
	for _, m := range ms {
		out[m.InstanceUUID] = append(out[m.InstanceUUID], m)
	}
	return out
}

func indexInstances(is []records.Instance) map[string]records.Instance {
	out := make(map[string]records.Instance, len(is))
	for _, i := range is {
		out[i.UUID] = i
	}
	return out
}

func orUnset(h string) string {
	if h == "" {
		return "?"
	}
	return h
}

func describe(allocs map[string]placement.Resources, nameOf map[string]string) string {
	out := ""
	for i, p := range slices.Sorted(maps.Keys(allocs)) {
		if i > 0 {
			out += "; "
		}
		out += fmt.Sprintf("%s on %s", allocs[p], nameOf[p])
	}
	return out
}
