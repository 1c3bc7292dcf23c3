package memory_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store"
	"keel/internal/store/memory"
	"keel/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memory.New() })
}

// ConsumerHeadersOn lists what ConsumersOn lists, in its order, without
// the allocations; a consumer on two providers is listed on both.
func TestConsumerHeadersOnIsConsumersOnWithoutAllocations(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	for _, p := range []string{"rp-1", "rp-2"} {
		if _, err := s.CreateProvider(ctx, placement.Provider{UUID: p, Name: p, Inventories: placement.Inventories{placement.VCPU: placement.NewInventory(64)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range []struct {
		uuid string
		typ  placement.ConsumerType
		on   []string
	}{{"c", placement.ConsumerInstance, []string{"rp-1"}}, {"a", placement.ConsumerMigration, []string{"rp-1", "rp-2"}}, {"b", placement.ConsumerInstance, []string{"rp-2"}}} {
		allocs := map[string]placement.Resources{}
		for _, p := range c.on {
			allocs[p] = placement.Resources{placement.VCPU: int64(i + 1)}
		}
		if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: c.uuid, Type: c.typ, ProjectID: "p", UserID: "u", Allocations: allocs}); err != nil {
			t.Fatal(err)
		}
	}
	// a second write bumps a's generation
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "a", Type: placement.ConsumerMigration, AnyConsumerGeneration: true,
		Allocations: map[string]placement.Resources{"rp-1": {placement.VCPU: 5}, "rp-2": {placement.VCPU: 5}}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"rp-1", "rp-2", "rp-none"} {
		full, err := s.ConsumersOn(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		heads, err := s.ConsumerHeadersOn(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]placement.Consumer, len(full))
		for i, c := range full {
			c.Allocations = nil
			want[i] = c
		}
		if !reflect.DeepEqual(heads, want) {
			t.Errorf("%s: headers %+v, want %+v", p, heads, want)
		}
		if p == "rp-1" && (len(heads) != 2 || heads[0].UUID != "a" || heads[0].Generation != full[0].Generation || heads[0].Type != placement.ConsumerMigration) {
			t.Errorf("rp-1: headers %+v, want a (migration, its generation) then c", heads)
		}
	}
}

// Every field of an instance comes back as it was written, each set
// alone (the store keeps most of them apart from the few every instance
// has): a field added to records.Instance that the store drops fails here.
func TestInstanceFieldsRoundTrip(t *testing.T) {
	ctx := context.Background()
	n := 0
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		for i := 0; i < v.NumField(); i++ {
			f, sf := v.Field(i), v.Type().Field(i)
			name := path + sf.Name
			if name == "UUID" || name == "Version" {
				continue
			}
			if f.Kind() == reflect.Struct && f.Type() != reflect.TypeOf(time.Time{}) {
				walk(name+".", f)
				continue
			}
			setSample(t, name, f)
			n++
			in := instanceWith(t, name)
			s := memory.New()
			created, err := s.CreateInstance(ctx, in)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			in.Version = 1
			got, err := s.GetInstance(ctx, in.UUID)
			if err != nil || !reflect.DeepEqual(got, in) || !reflect.DeepEqual(created, in) {
				t.Errorf("%s: not kept (read back: %v, returned by create as written: %v)", name, err == nil && reflect.DeepEqual(got, in), reflect.DeepEqual(created, in))
			}
			// An update that clears it, then one that sets it again.
			blank := records.Instance{UUID: in.UUID, Version: 1}
			if _, err := s.UpdateInstance(ctx, blank); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got, _ := s.GetInstance(ctx, in.UUID); !reflect.DeepEqual(got, records.Instance{UUID: in.UUID, Version: 2}) {
				t.Errorf("%s: still there after an update that cleared it", name)
			}
			in.Version = 2
			if _, err := s.UpdateInstance(ctx, in); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			in.Version = 3
			list, err := s.ListInstances(ctx, "")
			if err != nil || len(list) != 1 || !reflect.DeepEqual(list[0], in) {
				t.Errorf("%s: not kept by an update, or not listed (%d listed, %v)", name, len(list), err)
			}
			f.SetZero()
		}
	}
	walk("", reflect.ValueOf(&sampleInstance).Elem())
	if n < 40 {
		t.Fatalf("only %d fields walked", n)
	}
}

// sampleInstance is the instance TestInstanceFieldsRoundTrip sets one
// field of at a time.
var sampleInstance records.Instance

// instanceWith is sampleInstance (with the one field set) under a UUID.
func instanceWith(t *testing.T, field string) records.Instance {
	t.Helper()
	in := sampleInstance
	in.UUID = "inst-" + field
	return in
}

// setSample gives f a value other than its zero.
func setSample(t *testing.T, name string, f reflect.Value) {
	t.Helper()
	switch f.Kind() {
	case reflect.String:
		f.SetString("x")
	case reflect.Int, reflect.Int64:
		f.SetInt(7)
	case reflect.Bool:
		f.SetBool(true)
	case reflect.Struct: // time.Time
		f.Set(reflect.ValueOf(time.Unix(1700000000, 5).UTC()))
	case reflect.Pointer:
		f.Set(reflect.New(f.Type().Elem()))
	case reflect.Map:
		m := reflect.MakeMap(f.Type())
		m.SetMapIndex(reflect.ValueOf("k").Convert(f.Type().Key()), reflect.ValueOf("v").Convert(f.Type().Elem()))
		f.Set(m)
	case reflect.Slice:
		f.Set(reflect.Append(reflect.MakeSlice(f.Type(), 0, 1), reflect.ValueOf("a").Convert(f.Type().Elem())))
	default:
		t.Fatalf("field %s: no sample value for a %s", name, f.Type())
	}
}

// Instances of one flavor read back as they were written, each with a
// flavor of its own to change: changing one read's flavor changes no other
// instance's, nor the store's; a flavor with extra specs or projects is
// copied too.
func TestInstanceFlavorsAreCopies(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	plain := records.Flavor{ID: "f1", Name: "small", VCPUs: 1, RAMMB: 512, DiskGB: 1}
	special := records.Flavor{ID: "f2", Name: "special", VCPUs: 2, ExtraSpecs: map[string]string{"hw:cpu_policy": "dedicated"}, Projects: []string{"p1"}}
	for _, c := range []struct {
		uuid string
		f    records.Flavor
	}{{"a", plain}, {"b", plain}, {"c", special}} {
		if _, err := s.CreateInstance(ctx, records.Instance{UUID: c.uuid, Flavor: c.f}); err != nil {
			t.Fatal(err)
		}
	}
	special.ExtraSpecs["hw:cpu_policy"], special.Projects[0] = "changed", "changed" // the caller's copy, after the write
	a, _ := s.GetInstance(ctx, "a")
	a.Flavor.Name, a.Flavor.VCPUs = "changed", 99
	c, _ := s.GetInstance(ctx, "c")
	c.Flavor.ExtraSpecs["hw:cpu_policy"], c.Flavor.Projects[0] = "changed again", "changed again"
	for uuid, want := range map[string]records.Flavor{"a": plain, "b": plain,
		"c": {ID: "f2", Name: "special", VCPUs: 2, ExtraSpecs: map[string]string{"hw:cpu_policy": "dedicated"}, Projects: []string{"p1"}}} {
		got, err := s.GetInstance(ctx, uuid)
		if err != nil || !reflect.DeepEqual(got.Flavor, want) {
			t.Errorf("%s: flavor %+v (%v), want %+v", uuid, got.Flavor, err, want)
		}
	}
}

// Past the change stream's length (1<<18 entries) the oldest half is
// dropped: a reader that far behind is told to reload, one close behind
// reads each change after its own, in order.
func TestChangesTrimmed(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	const n = 1<<18 + 1<<17 + 5 // trimmed twice
	for i := 1; i <= n; i++ {
		if err := s.PutHostRecord(ctx, records.HostRecord{Host: "h" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if last, err := s.LastChange(ctx); err != nil || last != n {
		t.Fatalf("LastChange = %d, %v; want %d", last, err, n)
	}
	if _, err := s.Changes(ctx, 0, 10); !errors.Is(err, store.ErrChangesTrimmed) {
		t.Errorf("Changes from 0: %v, want ErrChangesTrimmed", err)
	}
	for _, since := range []int64{n - 1<<17, n - 1000, n - 1} {
		chs, err := s.Changes(ctx, since, 0)
		if err != nil || int64(len(chs)) != n-since {
			t.Fatalf("Changes since %d: %d changes, %v; want %d", since, len(chs), err, n-since)
		}
		for i, c := range chs {
			seq := since + 1 + int64(i)
			if c.Seq != seq || c.Kind != store.ChangeHost || c.Key != "h"+strconv.Itoa(int(seq)) {
				t.Fatalf("Changes since %d: #%d is %+v, want seq %d of h%d", since, i, c, seq, seq)
			}
		}
	}
}

// The scheduler's view takes the memory store's summaries shared.
var _ scheduler.SharingSource = (*memory.Store)(nil)

// Shared summaries are the summaries, and what they share stays as it was
// read when the store changes the provider's inventories, traits or
// aggregates.
func TestSharedProviderSummaries(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	p, err := s.CreateProvider(ctx, placement.Provider{UUID: "rp-1", Name: "h1", Inventories: placement.Inventories{placement.VCPU: placement.NewInventory(8)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "c", Allocations: map[string]placement.Resources{"rp-1": {placement.VCPU: 2}}}); err != nil {
		t.Fatal(err)
	}
	for _, uuids := range [][]string{nil, {"rp-1", "rp-none"}} {
		shared, err1 := s.SharedProviderSummaries(ctx, uuids)
		copied, err2 := s.ProviderSummaries(ctx, uuids)
		if err1 != nil || err2 != nil || !reflect.DeepEqual(shared, copied) || len(shared) != 1 {
			t.Fatalf("%v: shared %+v (%v), copied %+v (%v)", uuids, shared, err1, copied, err2)
		}
	}
	before, _ := s.SharedProviderSummaries(ctx, nil)
	want, _ := s.ProviderSummaries(ctx, nil)
	if _, err := s.SetInventories(ctx, "rp-1", before[0].Generation, placement.Inventories{placement.VCPU: placement.NewInventory(16), placement.MemoryMB: placement.NewInventory(1024)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetProviderTraits(ctx, "rp-1", p.Generation+2, []string{"HW_CPU_X86_AVX2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "c2", Allocations: map[string]placement.Resources{"rp-1": {placement.VCPU: 3}}}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, want) {
		t.Errorf("a shared summary changed with the store: %+v, read as %+v", before, want)
	}
	after, _ := s.SharedProviderSummaries(ctx, nil)
	if after[0].Inventories[placement.VCPU].Total != 16 || len(after[0].Traits) != 1 || after[0].Usage[placement.VCPU] != 5 {
		t.Errorf("after the changes: %+v", after[0])
	}
}

// An instance the store returned, or was given, is the caller's: changing
// anything it refers to (maps, slices, pointed-to records) changes nothing
// in the store. A reference field added to records.Instance that this
// test does not change fails it, so the list stays whole.
func TestInstanceRecordsAreCopies(t *testing.T) {
	ctx := context.Background()
	mutate := map[string]func(in *records.Instance){
		"Flavor.ExtraSpecs":   func(in *records.Instance) { in.Flavor.ExtraSpecs["k"] = "changed" },
		"Flavor.Projects":     func(in *records.Instance) { in.Flavor.Projects[0] = "changed" },
		"ResizeFlavor":        func(in *records.Instance) { in.ResizeFlavor.VCPUs = 99; in.ResizeFlavor.ExtraSpecs["k"] = "changed" },
		"Hints":               func(in *records.Instance) { in.Hints.SameHost[0] = "changed"; in.Hints.Group = "changed" },
		"Metadata":            func(in *records.Instance) { in.Metadata["k"] = "changed" },
		"Tags":                func(in *records.Instance) { in.Tags[0] = "changed" },
		"TrustedCerts":        func(in *records.Instance) { in.TrustedCerts[0] = "changed" },
		"Lifecycle.ActionOps": func(in *records.Instance) { in.ActionOps[0] = "changed" },
		"Lifecycle.Snapshot":  func(in *records.Instance) { in.Snapshot.ImageID = "changed" },
		"Lifecycle.Rescue":    func(in *records.Instance) { in.Rescue.ImageID = "changed" },
	}
	var refs []string
	var walk func(path string, typ reflect.Type)
	walk = func(path string, typ reflect.Type) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			switch f.Type.Kind() {
			case reflect.Struct:
				if f.Type != reflect.TypeOf(time.Time{}) {
					walk(path+f.Name+".", f.Type)
				}
			case reflect.Map, reflect.Slice, reflect.Pointer:
				refs = append(refs, path+f.Name)
			}
		}
	}
	walk("", reflect.TypeOf(records.Instance{}))
	for _, r := range refs {
		if mutate[r] == nil {
			t.Errorf("records.Instance.%s refers to shared memory: add it to this test (and copy it in cloneInstance)", r)
		}
	}
	sample := func() records.Instance {
		f := records.Flavor{ID: "f", VCPUs: 1, ExtraSpecs: map[string]string{"k": "v"}, Projects: []string{"p"}}
		rf := records.Flavor{ID: "g", VCPUs: 2, ExtraSpecs: map[string]string{"k": "v"}}
		in := records.Instance{UUID: "i1", Flavor: f, ResizeFlavor: &rf, Hints: &records.SchedulerHints{SameHost: []string{"a"}, Group: "g"},
			Metadata: map[string]string{"k": "v"}, Tags: []string{"t"}, TrustedCerts: []string{"c"}}
		in.ActionOps = []string{"stop"}
		in.Snapshot = &records.Snapshot{ImageID: "im"}
		in.Rescue = &records.Rescue{ImageID: "im", Bus: "virtio"}
		return in
	}
	for name, change := range mutate {
		s := memory.New()
		given := sample()
		created, err := s.CreateInstance(ctx, given)
		if err != nil {
			t.Fatal(err)
		}
		change(&given)
		change(&created)
		got, err := s.GetInstance(ctx, "i1")
		if err != nil {
			t.Fatal(err)
		}
		want := sample()
		want.Version = got.Version
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: changing what create was given or returned changed the store: %+v", name, got)
		}
		change(&got)
		again, _ := s.GetInstance(ctx, "i1")
		list, _ := s.ListInstances(ctx, "")
		if !reflect.DeepEqual(again, want) || len(list) != 1 || !reflect.DeepEqual(list[0], want) {
			t.Errorf("%s: changing what a read returned changed the store", name)
		}
	}
}
