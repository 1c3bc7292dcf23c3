package compute_test

import (
	"reflect"
	"sort"
	"testing"
	"time"

	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/placement"
	"keel/internal/records"
)

// Plain-data builders for the planner's inputs: host h1, a second host h2.

func consumer(uuid string, typ placement.ConsumerType, gen int64) placement.Consumer {
	return placement.Consumer{UUID: uuid, Type: typ, Generation: gen}
}

func read(uuid, host string, vm records.VMState, task records.TaskState) compute.InstanceRead {
	return compute.InstanceRead{Instance: records.Instance{UUID: uuid, Host: host, Flavor: small, VMState: vm, TaskState: task}}
}

func guestOf(uuid string, state compute.GuestState) compute.Guest {
	return compute.Guest{UUID: uuid, Name: uuid, Flavor: small, State: state}
}

// faulted is an instance recorded on h1, in ERROR with fault.
func faulted(uuid, fault string) compute.InstanceRead {
	r := read(uuid, "h1", records.VMError, records.TaskNone)
	r.Instance.Fault = fault
	return r
}

var (
	missing = compute.InstanceRead{Missing: true}
	foreign = compute.InstanceRead{Foreign: true}
)

// planned is what a test compares of a plan: UUIDs in plan order.
type planned struct {
	Reads                                                   compute.AuditReads
	Release                                                 []placement.Consumer
	Missing, Lost, Stray, Adopt, AdoptClaim, Claimed, Found []string
}

func summarize(p compute.AuditPlan) planned {
	out := planned{Reads: p.Reads, Release: p.Release, Missing: p.Missing}
	for _, c := range p.Lost {
		out.Lost = append(out.Lost, c.UUID)
	}
	for _, c := range p.Found {
		out.Found = append(out.Found, c.Instance.UUID)
	}
	for _, g := range p.Stray {
		out.Stray = append(out.Stray, g.UUID)
	}
	for _, a := range p.Adopt {
		out.Adopt = append(out.Adopt, a.Instance.UUID)
		if a.Claim {
			out.AdoptClaim = append(out.AdoptClaim, a.Instance.UUID)
		}
		if a.Guest.UUID != a.Instance.UUID {
			panic("adoption of another instance's guest")
		}
	}
	for _, c := range p.Claim {
		out.Claimed = append(out.Claimed, c.Instance.UUID)
		if c.Guest.UUID != c.Instance.UUID {
			panic("claim for another instance's guest")
		}
	}
	return out
}

func TestPlanAudit(t *testing.T) {
	ins := func(kv ...any) map[string]compute.InstanceRead {
		m := map[string]compute.InstanceRead{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1].(compute.InstanceRead)
		}
		return m
	}
	set := func(uuids ...string) map[string]bool {
		m := map[string]bool{}
		for _, u := range uuids {
			m[u] = true
		}
		return m
	}
	ci, cm := placement.ConsumerInstance, placement.ConsumerMigration
	cases := []struct {
		name string
		in   compute.AuditInputs
		want planned
	}{
		{name: "nothing listed, nothing to do", in: compute.AuditInputs{}},
		{name: "a consumer with its guest here is left alone, without a read",
			in: compute.AuditInputs{Consumers: []placement.Consumer{consumer("a", ci, 1)}, Guests: []compute.Guest{guestOf("a", compute.GuestRunning)}}},
		{name: "a consumer whose instance's migration is in flight is left alone",
			in: compute.AuditInputs{Consumers: []placement.Consumer{consumer("a", ci, 1)}, InFlight: set("a", "mig-a")}},
		{name: "a migration consumer in flight is left alone",
			in: compute.AuditInputs{Consumers: []placement.Consumer{consumer("mig-a", cm, 1)}, InFlight: set("a", "mig-a")}},
		{name: "a busy consumer is left alone",
			in: compute.AuditInputs{Consumers: []placement.Consumer{consumer("a", ci, 1)}, Busy: set("a")}},
		{name: "a consumer without a guest needs its instance read, and is kept meanwhile",
			in:   compute.AuditInputs{Consumers: []placement.Consumer{consumer("a", ci, 1)}},
			want: planned{Reads: compute.AuditReads{Instances: []string{"a"}}}},
		{name: "a migration consumer without a guest needs its migration read",
			in:   compute.AuditInputs{Consumers: []placement.Consumer{consumer("mig-a", cm, 1)}},
			want: planned{Reads: compute.AuditReads{Migrations: []string{"mig-a"}}}},
		{name: "the allocation of an instance that is gone is released at the listed generation",
			in:   compute.AuditInputs{Consumers: []placement.Consumer{consumer("gone", ci, 7)}, Instances: ins("gone", missing)},
			want: planned{Release: []placement.Consumer{consumer("gone", ci, 7)}}},
		{name: "the allocation of an instance in ERROR is released",
			in:   compute.AuditInputs{Host: "h1", Consumers: []placement.Consumer{consumer("a", ci, 2)}, Instances: ins("a", read("a", "h1", records.VMError, records.TaskNone))},
			want: planned{Release: []placement.Consumer{consumer("a", ci, 2)}}},
		{name: "the allocation of a DELETED instance is released",
			in:   compute.AuditInputs{Host: "h1", Consumers: []placement.Consumer{consumer("a", ci, 2)}, Instances: ins("a", read("a", "h1", records.VMDeleted, records.TaskNone))},
			want: planned{Release: []placement.Consumer{consumer("a", ci, 2)}}},
		{name: "the allocation here of an instance recorded on another host is released",
			in:   compute.AuditInputs{Host: "h1", Consumers: []placement.Consumer{consumer("a", ci, 3)}, Instances: ins("a", read("a", "h2", records.VMActive, records.TaskNone))},
			want: planned{Release: []placement.Consumer{consumer("a", ci, 3)}}},
		{name: "an instance being built keeps its allocation",
			in: compute.AuditInputs{Host: "h1", Consumers: []placement.Consumer{consumer("a", ci, 1)}, Instances: ins("a", read("a", "h1", records.VMBuilding, records.TaskSpawning))}},
		{name: "an instance with a task keeps its allocation, even recorded elsewhere",
			in: compute.AuditInputs{Host: "h1", Consumers: []placement.Consumer{consumer("a", ci, 1)}, Instances: ins("a", read("a", "h2", records.VMActive, records.TaskMigrating))}},
		{name: "an ACTIVE instance recorded here without its guest is lost and keeps its allocation",
			in:   compute.AuditInputs{Host: "h1", Consumers: []placement.Consumer{consumer("a", ci, 1)}, Instances: ins("a", read("a", "h1", records.VMActive, records.TaskNone))},
			want: planned{Lost: []string{"a"}}},
		{name: "an ACTIVE instance whose guest this audit misses first, with a deadline, is missing and keeps its allocation",
			in: compute.AuditInputs{Host: "h1", Now: clock.Epoch, LostAfter: 3 * time.Minute, Consumers: []placement.Consumer{consumer("a", ci, 1)},
				Instances: ins("a", read("a", "h1", records.VMActive, records.TaskNone))},
			want: planned{Missing: []string{"a"}}},
		{name: "a guest missing for less than the deadline is still missing",
			in: compute.AuditInputs{Host: "h1", Now: clock.Epoch, LostAfter: 3 * time.Minute, MissingSince: map[string]time.Time{"a": clock.Epoch.Add(-179 * time.Second)},
				Consumers: []placement.Consumer{consumer("a", ci, 1)}, Instances: ins("a", read("a", "h1", records.VMActive, records.TaskNone))},
			want: planned{Missing: []string{"a"}}},
		{name: "a guest missing for the deadline is lost, its consumer as listed",
			in: compute.AuditInputs{Host: "h1", Now: clock.Epoch, LostAfter: 3 * time.Minute, MissingSince: map[string]time.Time{"a": clock.Epoch.Add(-3 * time.Minute)},
				Consumers: []placement.Consumer{consumer("a", ci, 4)}, Instances: ins("a", read("a", "h1", records.VMActive, records.TaskNone))},
			want: planned{Lost: []string{"a"}}},
		{name: "the running guest of an instance put in ERROR as lost is found; a stopped one, or another ERROR's, is left alone",
			in: compute.AuditInputs{Host: "h1", Guests: []compute.Guest{guestOf("a", compute.GuestRunning), guestOf("b", compute.GuestStopped), guestOf("c", compute.GuestRunning)},
				Instances: ins("a", faulted("a", compute.LostFault("h1", clock.Epoch, clock.Epoch)), "b", faulted("b", compute.LostFault("h1", clock.Epoch, clock.Epoch)),
					"c", faulted("c", "No valid host was found"))},
			want: planned{Found: []string{"a"}}},
		{name: "a stopped instance recorded here without its guest is lost too",
			in:   compute.AuditInputs{Host: "h1", Consumers: []placement.Consumer{consumer("a", ci, 1)}, Instances: ins("a", read("a", "h1", records.VMStopped, records.TaskNone))},
			want: planned{Lost: []string{"a"}}},
		{name: "a consumer whose instance the servers refuse is kept",
			in: compute.AuditInputs{Host: "h1", Consumers: []placement.Consumer{consumer("a", ci, 1)}, Instances: ins("a", foreign)}},
		{name: "the allocation of a migration that is gone is released",
			in:   compute.AuditInputs{Consumers: []placement.Consumer{consumer("mig-a", cm, 4)}, Migrations: map[string]compute.MigrationRead{"mig-a": {Missing: true}}},
			want: planned{Release: []placement.Consumer{consumer("mig-a", cm, 4)}}},
		{name: "the allocations of finished migrations are released",
			in: compute.AuditInputs{Consumers: []placement.Consumer{consumer("m1", cm, 1), consumer("m2", cm, 1), consumer("m3", cm, 1)},
				Migrations: map[string]compute.MigrationRead{"m1": {Status: records.MigrationCompleted}, "m2": {Status: records.MigrationFailed}, "m3": {Status: records.MigrationError}}},
			want: planned{Release: []placement.Consumer{consumer("m1", cm, 1), consumer("m2", cm, 1), consumer("m3", cm, 1)}}},
		{name: "the allocation of a migration that started after the in-flight listing is kept",
			in: compute.AuditInputs{Consumers: []placement.Consumer{consumer("mig-a", cm, 1)}, Migrations: map[string]compute.MigrationRead{"mig-a": {Status: records.MigrationRunning}}}},

		{name: "a running guest holding allocations here is left alone, without a read",
			in: compute.AuditInputs{Consumers: []placement.Consumer{consumer("a", ci, 1)}, Guests: []compute.Guest{guestOf("a", compute.GuestRunning)}}},
		{name: "a guest whose migration is in flight is left alone, incoming or not",
			in: compute.AuditInputs{InFlight: set("a", "b"), Guests: []compute.Guest{guestOf("a", compute.GuestIncoming), guestOf("b", compute.GuestMigrating)}}},
		{name: "a busy running guest is left alone",
			in: compute.AuditInputs{Busy: set("a"), Guests: []compute.Guest{guestOf("a", compute.GuestRunning)}}},
		{name: "a busy incoming guest, or one holding allocations here, needs its instance read",
			in: compute.AuditInputs{Busy: set("a"), Consumers: []placement.Consumer{consumer("b", ci, 1)},
				Guests: []compute.Guest{guestOf("a", compute.GuestIncoming), guestOf("b", compute.GuestIncoming)}},
			want: planned{Reads: compute.AuditReads{GuestInstances: []string{"a", "b"}}}},
		{name: "a guest holding nothing here needs its instance read",
			in:   compute.AuditInputs{Guests: []compute.Guest{guestOf("a", compute.GuestRunning)}},
			want: planned{Reads: compute.AuditReads{GuestInstances: []string{"a"}}}},
		{name: "the guest of an instance that is gone is stray",
			in:   compute.AuditInputs{Host: "h1", Guests: []compute.Guest{guestOf("a", compute.GuestRunning)}, Instances: ins("a", missing)},
			want: planned{Stray: []string{"a"}}},
		{name: "a guest whose instance the servers refuse to this host is stray",
			in:   compute.AuditInputs{Host: "h1", Guests: []compute.Guest{guestOf("a", compute.GuestMigrating)}, Instances: ins("a", foreign)},
			want: planned{Stray: []string{"a"}}},
		{name: "guests of instances recorded elsewhere are stray, incoming or left behind",
			in: compute.AuditInputs{Host: "h1", Guests: []compute.Guest{guestOf("a", compute.GuestIncoming), guestOf("b", compute.GuestMigrating)},
				Instances: ins("a", read("a", "h2", records.VMActive, records.TaskNone), "b", read("b", "h2", records.VMActive, records.TaskNone))},
			want: planned{Stray: []string{"a", "b"}}},
		{name: "a guest whose instance is building or has a task is left to it",
			in: compute.AuditInputs{Host: "h1", Guests: []compute.Guest{guestOf("a", compute.GuestRunning), guestOf("b", compute.GuestIncoming)},
				Instances: ins("a", read("a", "h2", records.VMBuilding, records.TaskSpawning), "b", read("b", "h2", records.VMActive, records.TaskMigrating))}},
		{name: "an incoming guest of an instance settled here is adopted and claimed for",
			in:   compute.AuditInputs{Host: "h1", Guests: []compute.Guest{guestOf("a", compute.GuestIncoming)}, Instances: ins("a", read("a", "h1", records.VMActive, records.TaskNone))},
			want: planned{Adopt: []string{"a"}, AdoptClaim: []string{"a"}}},
		{name: "an incoming guest already holding allocations here is adopted, not claimed for",
			in: compute.AuditInputs{Host: "h1", Consumers: []placement.Consumer{consumer("a", ci, 1)}, Guests: []compute.Guest{guestOf("a", compute.GuestIncoming)},
				Instances: ins("a", read("a", "h1", records.VMPaused, records.TaskNone))},
			want: planned{Adopt: []string{"a"}}},
		{name: "the guest of an ACTIVE instance here holding nothing here is claimed for",
			in:   compute.AuditInputs{Host: "h1", Guests: []compute.Guest{guestOf("a", compute.GuestRunning)}, Instances: ins("a", read("a", "h1", records.VMActive, records.TaskNone))},
			want: planned{Claimed: []string{"a"}}},
		{name: "the guest of an instance here that is not ACTIVE gets no claim",
			in: compute.AuditInputs{Host: "h1", Guests: []compute.Guest{guestOf("a", compute.GuestRunning), guestOf("b", compute.GuestRunning)},
				Instances: ins("a", read("a", "h1", records.VMStopped, records.TaskNone), "b", read("b", "h1", records.VMError, records.TaskNone))}},
		{name: "every decision at once, in listing order",
			in: compute.AuditInputs{Host: "h1",
				Consumers: []placement.Consumer{consumer("gone", ci, 5), consumer("kept", ci, 1), consumer("lost", ci, 2), consumer("m-old", cm, 3), consumer("run", ci, 1)},
				Guests:    []compute.Guest{guestOf("run", compute.GuestRunning), guestOf("new", compute.GuestRunning), guestOf("in", compute.GuestIncoming), guestOf("x", compute.GuestRunning)},
				Busy:      set("kept"),
				Instances: ins("gone", missing, "lost", read("lost", "h1", records.VMActive, records.TaskNone),
					"new", read("new", "h1", records.VMActive, records.TaskNone), "in", read("in", "h1", records.VMActive, records.TaskNone), "x", missing),
				Migrations: map[string]compute.MigrationRead{"m-old": {Status: records.MigrationCompleted}}},
			want: planned{Release: []placement.Consumer{consumer("gone", ci, 5), consumer("m-old", cm, 3)}, Lost: []string{"lost"},
				Stray: []string{"x"}, Adopt: []string{"in"}, AdoptClaim: []string{"in"}, Claimed: []string{"new"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := summarize(compute.PlanAudit(tc.in)); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("plan\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// Planning twice, the records the first plan asked for read in between
// (as Tracker.Audit does), gives the plan made with everything read at
// once, and asks for nothing more.
func TestPlanAuditAgainWithTheReadsItAskedFor(t *testing.T) {
	in := compute.AuditInputs{Host: "h1",
		Consumers: []placement.Consumer{consumer("gone", placement.ConsumerInstance, 1), consumer("m", placement.ConsumerMigration, 1)},
		Guests:    []compute.Guest{guestOf("stray", compute.GuestRunning), guestOf("mine", compute.GuestRunning)}}
	first := compute.PlanAudit(in)
	want := compute.AuditReads{Instances: []string{"gone"}, Migrations: []string{"m"}, GuestInstances: []string{"stray", "mine"}}
	if !reflect.DeepEqual(first.Reads, want) || len(first.Release)+len(first.Stray)+len(first.Claim)+len(first.Lost)+len(first.Adopt) != 0 {
		t.Fatalf("first plan %+v, want only the reads %+v", first, want)
	}
	in.Instances = map[string]compute.InstanceRead{"gone": missing, "stray": missing, "mine": read("mine", "h1", records.VMActive, records.TaskNone)}
	in.Migrations = map[string]compute.MigrationRead{"m": {Missing: true}}
	second := summarize(compute.PlanAudit(in))
	if !second.Reads.Empty() || len(second.Release) != 2 || !reflect.DeepEqual(second.Stray, []string{"stray"}) || !reflect.DeepEqual(second.Claimed, []string{"mine"}) {
		t.Fatalf("second plan %+v", second)
	}
}

// Whatever was read, the plan never releases the allocation of a consumer
// whose guest is here or whose instance is recorded here and not in ERROR
// or DELETED, and never claims for or adopts a guest whose instance is not
// recorded here.
func TestPlanAuditNeverTakesFromAnInstanceRecordedHere(t *testing.T) {
	reads := []compute.InstanceRead{missing, foreign}
	for _, host := range []string{"h1", "h2"} {
		for _, vm := range []records.VMState{records.VMActive, records.VMBuilding, records.VMStopped, records.VMError, records.VMDeleted, records.VMPaused} {
			for _, task := range []records.TaskState{records.TaskNone, records.TaskMigrating, records.TaskDeleting} {
				reads = append(reads, read("a", host, vm, task))
			}
		}
	}
	states := []compute.GuestState{"", compute.GuestRunning, compute.GuestIncoming, compute.GuestMigrating, compute.GuestBuilding}
	for _, r := range reads {
		for _, gs := range states {
			for _, listed := range []bool{false, true} {
				for _, busy := range []bool{false, true} {
					in := compute.AuditInputs{Host: "h1", Instances: map[string]compute.InstanceRead{"a": r}}
					if gs != "" {
						in.Guests = []compute.Guest{guestOf("a", gs)}
					}
					if listed {
						in.Consumers = []placement.Consumer{consumer("a", placement.ConsumerInstance, 1)}
					}
					if busy {
						in.Busy = map[string]bool{"a": true}
					}
					p := compute.PlanAudit(in)
					here := !r.Missing && !r.Foreign && r.Instance.Host == "h1"
					if len(p.Release) > 0 && (gs != "" || here && r.Instance.VMState != records.VMError && r.Instance.VMState != records.VMDeleted) {
						t.Errorf("read %+v, guest %q, listed %v, busy %v: released", r, gs, listed, busy)
					}
					if (len(p.Claim) > 0 || len(p.Adopt) > 0) && !here {
						t.Errorf("read %+v, guest %q, listed %v, busy %v: claimed or adopted", r, gs, listed, busy)
					}
					if len(p.Stray) > 0 && here && r.Instance.TaskState == records.TaskNone {
						t.Errorf("read %+v, guest %q, listed %v, busy %v: its guest taken for a stray", r, gs, listed, busy)
					}
				}
			}
		}
	}
}

func TestPlanCount(t *testing.T) {
	cases := []struct {
		name                string
		tracked             []string
		busy                []string
		guests              []compute.Guest
		vanished, untracked []string
	}{
		{name: "a tracked instance with its guest stays", tracked: []string{"a"}, guests: []compute.Guest{guestOf("a", compute.GuestRunning)}},
		{name: "a migrating guest is still counted here", tracked: []string{"a"}, guests: []compute.Guest{guestOf("a", compute.GuestMigrating)}},
		{name: "a tracked instance without a guest vanishes", tracked: []string{"a"}, vanished: []string{"a"}},
		{name: "a busy tracked instance without a guest stays (a spawn in flight)", tracked: []string{"a"}, busy: []string{"a"}},
		{name: "a tracked instance whose guest is incoming vanishes", tracked: []string{"a"}, guests: []compute.Guest{guestOf("a", compute.GuestIncoming)}, vanished: []string{"a"}},
		{name: "a busy one whose guest is incoming stays", tracked: []string{"a"}, busy: []string{"a"}, guests: []compute.Guest{guestOf("a", compute.GuestIncoming)}},
		{name: "a guest not tracked is counted", guests: []compute.Guest{guestOf("a", compute.GuestRunning), guestOf("b", compute.GuestBuilding)}, untracked: []string{"a", "b"}},
		{name: "an incoming guest is not this host's yet", guests: []compute.Guest{guestOf("a", compute.GuestIncoming)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tracked := map[string]records.Flavor{}
			for _, u := range tc.tracked {
				tracked[u] = small
			}
			busy := map[string]int{}
			for _, u := range tc.busy {
				busy[u] = 1
			}
			vanished, untracked := compute.PlanCount(tracked, busy, tc.guests)
			sort.Strings(vanished)
			if !reflect.DeepEqual(vanished, tc.vanished) || !reflect.DeepEqual(untracked, tc.untracked) {
				t.Fatalf("vanished %v, untracked %v; want %v, %v", vanished, untracked, tc.vanished, tc.untracked)
			}
			if len(tracked) != len(tc.tracked) {
				t.Fatalf("PlanCount changed the tracked set: %v", tracked)
			}
		})
	}
}

func TestReleaseHereKeepsTheRest(t *testing.T) {
	c := placement.Consumer{UUID: "a", Allocations: map[string]placement.Resources{"rp-h1": small.Resources(), "rp-h2": large.Resources()}}
	got := compute.ReleaseHere(c, "rp-h1")
	if want := map[string]placement.Resources{"rp-h2": large.Resources()}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ReleaseHere = %v, want %v", got, want)
	}
	if len(c.Allocations) != 2 {
		t.Fatal("ReleaseHere changed the consumer's allocations")
	}
	if got := compute.ReleaseHere(placement.Consumer{Allocations: map[string]placement.Resources{"rp-h1": small.Resources()}}, "rp-h1"); got == nil || len(got) != 0 {
		t.Fatalf("ReleaseHere of the last allocation = %#v, want an empty map (the write then holds nothing)", got)
	}
}

func TestHeldInTree(t *testing.T) {
	parents := map[string]string{"numa0": "rp-h1", "gpu0": "numa0", "rp-h1": "", "numa-h2": "rp-h2", "loop1": "loop2", "loop2": "loop1"}
	cases := []struct {
		name string
		held []string
		want bool
	}{
		{name: "the host's own provider", held: []string{"rp-h1"}, want: true},
		{name: "a child", held: []string{"numa0"}, want: true},
		{name: "a grandchild", held: []string{"gpu0"}, want: true},
		{name: "another host's tree", held: []string{"numa-h2"}},
		{name: "a provider whose parent was not read", held: []string{"unknown"}},
		{name: "a cycle ends", held: []string{"loop1"}},
		{name: "one provider of several in the tree", held: []string{"numa-h2", "gpu0"}, want: true},
		{name: "nothing held"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			held := map[string]placement.Resources{}
			for _, p := range tc.held {
				held[p] = placement.Resources{"VCPU": 1}
			}
			if got := compute.HeldInTree("rp-h1", held, parents); got != tc.want {
				t.Fatalf("HeldInTree(%v) = %v, want %v", tc.held, got, tc.want)
			}
		})
	}
}

func TestClaimAllocation(t *testing.T) {
	q, err := placement.FlavorQuery(gpuSmall.Resources(), gpuSmall.ExtraSpecs)
	if err != nil || len(q.Groups) == 0 {
		t.Fatalf("query of gpu-small: %v, %+v", err, q)
	}
	host := placement.TreeProvider{UUID: "rp-h1", Inventories: hostConfig().Inventories()}
	gpu := func(free int64) placement.TreeProvider {
		return placement.TreeProvider{UUID: "rp-h1-gpu", ParentUUID: "rp-h1", Inventories: placement.Inventories{"VGPU": placement.NewInventory(2)},
			Usage: placement.Resources{"VGPU": 2 - free}}
	}
	const agg = "a66a66a6-0000-4000-8000-000000000001"
	host.Aggregates = []string{agg}
	pool := placement.TreeProvider{UUID: "rp-pool", Inventories: placement.Inventories{"IPV4_ADDRESS": placement.NewInventory(4)},
		Traits: []string{placement.SharesViaAggregate}, Aggregates: []string{agg}}
	g := compute.Guest{UUID: "a", Flavor: gpuSmall, State: compute.GuestRunning}
	flat := map[string]placement.Resources{"rp-h1": gpuSmall.Resources()}
	cases := []struct {
		name      string
		q         *placement.CandidateQuery
		providers []placement.TreeProvider
		held      map[string]placement.Resources
		want      map[string]placement.Resources
	}{
		{name: "no tree read: the flavor on the host's provider", want: flat},
		{name: "no query (a flavor without groups): the same", providers: []placement.TreeProvider{host, gpu(2), pool}, want: flat},
		{name: "the tree's shape when it fits", q: &q, providers: []placement.TreeProvider{host, gpu(2), pool},
			want: map[string]placement.Resources{"rp-h1": small.Resources(), "rp-h1-gpu": {"VGPU": 1}, "rp-pool": {"IPV4_ADDRESS": 1}}},
		{name: "the flavor on the host's provider when the tree is full", q: &q, providers: []placement.TreeProvider{host, gpu(0), pool}, want: flat},
		{name: "a GPU it holds itself is given back before the fit", q: &q, providers: []placement.TreeProvider{host, gpu(0), pool},
			held: map[string]placement.Resources{"rp-h1-gpu": {"VGPU": 1}},
			want: map[string]placement.Resources{"rp-h1": small.Resources(), "rp-h1-gpu": {"VGPU": 1}, "rp-pool": {"IPV4_ADDRESS": 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := compute.ClaimAllocation("rp-h1", g, tc.q, tc.providers, tc.held); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ClaimAllocation = %v, want %v", got, tc.want)
			}
		})
	}
}
