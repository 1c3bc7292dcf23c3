package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"keel/internal/records"
	"keel/internal/store"
)

// groupTests cover compute host aggregates and server groups.
var groupTests = []subtest{
	{"Aggregates", testAggregates},
	{"AggregateChanges", testAggregateChanges},
	{"ServerGroups", testServerGroups},
	{"InstanceHints", testInstanceHints},
}

// testInstanceHints checks that an instance keeps its scheduler hints.
func testInstanceHints(t *testing.T, s store.Store) {
	ctx := context.Background()
	in := instance(1, "h1")
	in.Hints = &records.SchedulerHints{Group: uuidFor(0x59, 1), SameHost: []string{"a"}, DifferentHost: []string{"b", "c"}}
	if _, err := s.CreateInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetInstance(ctx, in.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hints == nil || fmt.Sprint(*got.Hints) != fmt.Sprint(*in.Hints) {
		t.Fatalf("hints read back %+v, want %+v", got.Hints, in.Hints)
	}
}

func testAggregates(t *testing.T, s store.Store) {
	ctx := context.Background()
	a, err := s.CreateAggregate(ctx, records.Aggregate{UUID: uuidFor(0xa99, 1), Name: "rack1", Metadata: map[string]string{"availability_zone": "az1"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID <= 0 {
		t.Fatalf("created aggregate has ID %d, want > 0", a.ID)
	}
	b, err := s.CreateAggregate(ctx, records.Aggregate{UUID: uuidFor(0xa99, 2), Name: "rack2"})
	if err != nil {
		t.Fatal(err)
	}
	if b.ID == a.ID {
		t.Fatalf("two aggregates got ID %d", a.ID)
	}
	if _, err := s.CreateAggregate(ctx, records.Aggregate{UUID: uuidFor(0xa99, 3), Name: "rack1"}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second aggregate named rack1: want ErrExists, got %v", err)
	}
	got, err := s.UpdateAggregate(ctx, a.ID, func(x *records.Aggregate) error {
		x.Hosts = append(x.Hosts, "h1", "h2")
		x.Metadata["ssd"] = "true"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Hosts) != "[h1 h2]" || got.Metadata["ssd"] != "true" || got.ID != a.ID {
		t.Fatalf("updated aggregate %+v", got)
	}
	read, err := s.GetAggregate(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(read.Hosts) != "[h1 h2]" || read.Zone() != "az1" || read.Metadata["ssd"] != "true" || read.UUID != a.UUID || read.Name != "rack1" {
		t.Fatalf("read back %+v", read)
	}
	// Renaming onto a taken name fails and changes nothing.
	if _, err := s.UpdateAggregate(ctx, b.ID, func(x *records.Aggregate) error { x.Name = "rack1"; return nil }); !errors.Is(err, store.ErrExists) {
		t.Fatalf("renaming rack2 to rack1: want ErrExists, got %v", err)
	}
	if r, _ := s.GetAggregate(ctx, b.ID); r.Name != "rack2" {
		t.Fatalf("a refused rename changed the name to %q", r.Name)
	}
	// An error from fn aborts.
	boom := errors.New("boom")
	if _, err := s.UpdateAggregate(ctx, a.ID, func(x *records.Aggregate) error { x.Hosts = nil; return boom }); !errors.Is(err, boom) {
		t.Fatalf("fn's error: got %v", err)
	}
	if r, _ := s.GetAggregate(ctx, a.ID); len(r.Hosts) != 2 {
		t.Fatalf("an aborted update changed hosts to %v", r.Hosts)
	}
	if _, err := s.UpdateAggregate(ctx, 9999, func(*records.Aggregate) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("updating a missing aggregate: want ErrNotFound, got %v", err)
	}
	list, err := s.ListAggregates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID {
		t.Fatalf("list %+v, want rack1 then rack2", list)
	}
	if err := s.DeleteAggregate(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAggregate(ctx, a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted aggregate: want ErrNotFound, got %v", err)
	}
	if err := s.DeleteAggregate(ctx, a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting twice: want ErrNotFound, got %v", err)
	}
	// The name is free again.
	if _, err := s.CreateAggregate(ctx, records.Aggregate{UUID: uuidFor(0xa99, 4), Name: "rack1"}); err != nil {
		t.Fatalf("reusing a deleted aggregate's name: %v", err)
	}
}

func testAggregateChanges(t *testing.T, s store.Store) {
	ctx := context.Background()
	before, err := s.LastChange(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.CreateAggregate(ctx, records.Aggregate{UUID: uuidFor(0xa99, 5), Name: "z"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateAggregate(ctx, a.ID, func(x *records.Aggregate) error { x.Hosts = []string{"h1"}; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAggregate(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	chs, err := s.Changes(ctx, before, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range chs {
		if c.Kind == store.ChangeAggregate && c.Key == strconv.FormatInt(a.ID, 10) {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d aggregate changes for create, update and delete, want 3 (%v)", n, chs)
	}
}

func testServerGroups(t *testing.T, s store.Store) {
	ctx := context.Background()
	g := records.ServerGroup{UUID: uuidFor(0x59, 1), Name: "web", ProjectID: "p1", UserID: "u1", Policy: records.PolicyAntiAffinity, MaxServerPerHost: 2}
	if _, err := s.CreateServerGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateServerGroup(ctx, g); !errors.Is(err, store.ErrExists) {
		t.Fatalf("creating twice: want ErrExists, got %v", err)
	}
	if _, err := s.CreateServerGroup(ctx, records.ServerGroup{UUID: uuidFor(0x59, 0), Name: "db", Policy: records.PolicyAffinity}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"i1", "i2", "i3"} {
		if _, err := s.UpdateServerGroup(ctx, g.UUID, func(x *records.ServerGroup) error { x.Members = append(x.Members, m); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.UpdateServerGroup(ctx, g.UUID, func(x *records.ServerGroup) error {
		x.Members = slices.DeleteFunc(x.Members, func(m string) bool { return m == "i2" })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Members) != "[i1 i3]" {
		t.Fatalf("members %v, want [i1 i3]", got.Members)
	}
	read, err := s.GetServerGroup(ctx, g.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(read.Members) != "[i1 i3]" || read.Policy != records.PolicyAntiAffinity || read.MaxServerPerHost != 2 || read.Name != "web" || read.ProjectID != "p1" {
		t.Fatalf("read back %+v", read)
	}
	list, err := s.ListServerGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "db" || list[1].Name != "web" || list[0].Members == nil {
		t.Fatalf("list %+v, want db then web, members never nil", list)
	}
	if _, err := s.UpdateServerGroup(ctx, uuidFor(0x59, 9), func(*records.ServerGroup) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("updating a missing group: want ErrNotFound, got %v", err)
	}
	if err := s.DeleteServerGroup(ctx, g.UUID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetServerGroup(ctx, g.UUID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted group: want ErrNotFound, got %v", err)
	}
	if err := s.DeleteServerGroup(ctx, g.UUID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting twice: want ErrNotFound, got %v", err)
	}
}
