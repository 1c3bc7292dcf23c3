package cloudtest

import (
	"context"
	"fmt"

	"keel/internal/audit"
	"keel/internal/compute"
	"keel/internal/compute/fake"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Violations lists what breaks the invariants that hold after every
// scenario (none: the cloud is consistent):
//   - every provider's usage is the sum of its consumers' allocations, and
//     within capacity;
//   - no consumer holds allocations on two hosts' provider trees unless a
//     migration is active (a host's children and the providers sharing
//     with it are its own: audit.Where);
//
// and, once no migration is active:
//   - no migration consumer is left, and every settled instance holds
//     exactly its flavor's request on its host's provider tree (and
//     providers sharing with it: Where.HoldsFlavor);
//   - every guest on a hypervisor is running and belongs to an instance
//     recorded on that host;
//   - the host records (unless legacy) say what the allocations say;
//   - the conductor holds no lock, queue entry or slot;
//
// and, at any time, whatever keel's own audit (package audit, what `keel
// audit` runs) finds, each line prefixed "audit: ".
func (c *Cloud) Violations() []string {
	ctx := context.Background()
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	rep, err := audit.Run(ctx, audit.Sources{Store: c.Backing, Agents: guestLister(c.Drivers), Slots: c.Cond}, c.Clock.Now(), audit.Options{})
	if err != nil {
		return append(out, err.Error())
	}
	for _, f := range rep.Findings {
		bad("audit: %s", f.Text)
	}
	active, err := c.Backing.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
	if err != nil {
		return append(out, err.Error())
	}
	sums, err := c.Backing.ProviderSummaries(ctx, nil)
	if err != nil {
		return append(out, err.Error())
	}
	where := audit.Locate(sums)
	consumers := map[string]placement.Consumer{}
	for _, s := range sums {
		cs, err := c.Backing.ConsumersOn(ctx, s.UUID)
		if err != nil {
			return append(out, err.Error())
		}
		sum := placement.Resources{}
		for _, cons := range cs {
			sum.Add(cons.Allocations[s.UUID])
			consumers[cons.UUID] = cons
		}
		if !sum.Equal(s.Usage) {
			bad("provider %s: usage %v, but its consumers hold %v", s.Name, s.Usage, sum)
		}
		for _, rc := range sortedKeys(s.Usage) {
			if inv, ok := s.Inventories[rc]; !ok || s.Usage[rc] > inv.Capacity() {
				bad("provider %s over capacity: %d %s", s.Name, s.Usage[rc], rc)
			}
		}
	}
	for _, uuid := range sortedKeys(consumers) {
		if cons := consumers[uuid]; len(active) == 0 && len(where.Hosts(cons.Allocations)) > 1 {
			bad("consumer %s holds allocations on %v (hosts %v) with no migration active", cons.UUID, cons.Providers(), where.Hosts(cons.Allocations))
		}
	}
	if len(active) > 0 {
		return out
	}
	if locks, queued, slots := c.Cond.Remembered(); locks+queued+slots != 0 {
		bad("no migration is active, yet the conductor keeps %d locks, %d queued migrations, %d slots", locks, queued, slots)
	}
	insts, err := c.Backing.ListInstances(ctx, "")
	if err != nil {
		return append(out, err.Error())
	}
	byUUID := map[string]records.Instance{}
	for _, in := range insts {
		byUUID[in.UUID] = in
		building := in.VMState == records.VMBuilding && in.TaskState == records.TaskSpawning
		if in.TaskState != records.TaskNone && !building {
			bad("instance %s (%s) keeps task %q with no migration active", in.Name, in.VMState, in.TaskState)
		}
		if holdsClaim(in.VMState) || building {
			if got := c.Allocations(in.UUID); !where.HoldsFlavor(got, in.Host, in.Flavor) {
				bad("instance %s (%s) on %s holds %v", in.Name, in.VMState, in.Host, got)
			}
		}
	}
	for _, uuid := range sortedKeys(consumers) {
		cons := consumers[uuid]
		if cons.Type == placement.ConsumerMigration {
			bad("migration consumer %s still holds %v", uuid, cons.Allocations)
		} else if in, ok := byUUID[uuid]; !ok || (!holdsClaim(in.VMState) && in.VMState != records.VMBuilding) {
			bad("consumer %s holds %v but is no ACTIVE, BUILDING or powered-down instance", uuid, cons.Allocations)
		}
	}
	for _, h := range c.Hosts {
		gs, _ := c.Drivers[h].Guests(ctx)
		for _, g := range gs {
			in, ok := byUUID[g.UUID]
			okState := g.State == guestStates[in.VMState] || (g.State == compute.GuestBuilding && in.VMState == records.VMBuilding)
			if !ok || in.Host != h || !okState {
				bad("guest %s on %s is %s (instance %s on %q)", g.UUID, h, g.State, in.VMState, in.Host)
			}
		}
		if c.Opts.Legacy {
			continue
		}
		rec := c.Trackers[h].Record()
		if used := rec.Used(ReservedHostMemoryMB, 0); !used.Equal(c.Usage(h)) {
			bad("host record of %s says %v used, allocations say %v", h, used, c.Usage(h))
		}
		stored, err := c.Backing.GetHostRecord(ctx, h)
		if err != nil {
			bad("host record of %s: %v", h, err)
		} else if stored.RunningVMs != rec.RunningVMs || stored.VCPUsUsed != rec.VCPUsUsed {
			bad("stored record of %s differs from its tracker's", h)
		}
	}
	return out
}

// guestStates is the guest state a settled instance's vm_state implies;
// those instances hold their claim (a powered-down server keeps it).
var guestStates = map[records.VMState]compute.GuestState{
	records.VMActive:    compute.GuestRunning,
	records.VMStopped:   compute.GuestStopped,
	records.VMPaused:    compute.GuestPaused,
	records.VMSuspended: compute.GuestSuspended,
	records.VMRescued:   compute.GuestRescued,
	records.VMShelved:   compute.GuestStopped,
}

func holdsClaim(vmState records.VMState) bool { _, ok := guestStates[vmState]; return ok }

// guestLister asks the fake drivers for their guests, as the audit asks
// the agents.
type guestLister map[string]*fake.Driver

func (g guestLister) ListGuests(ctx context.Context, host string) ([]compute.Guest, error) {
	d, ok := g[host]
	if !ok {
		return nil, fmt.Errorf("no agent for host %q", host)
	}
	return d.Guests(ctx)
}
