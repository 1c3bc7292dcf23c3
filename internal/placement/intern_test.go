package placement

import (
	"strings"
	"testing"
	"unsafe"
)

// TestForestInternsClasses checks that a forest keeps one copy of each
// class's name, whatever copies its providers' inventories and the
// request were read from (each row a store reads is a new string), so a
// search's thousands of class comparisons match at the pointer.
func TestForestInternsClasses(t *testing.T) {
	ps := make([]CandidateProvider, 3)
	for i := range ps {
		ps[i] = CandidateProvider{UUID: strings.Repeat(string(rune('a'+i)), 4), Parent: -1, Root: i,
			Inventories: Inventories{ResourceClass(strings.Clone("VCPU")): NewInventory(8), ResourceClass(strings.Clone("DISK_GB")): NewInventory(100)}}
	}
	f := NewForest(ps)
	f.Update(2, Inventories{ResourceClass(strings.Clone("VCPU")): NewInventory(16)}, Resources{ResourceClass(strings.Clone("VCPU")): 1})
	q := sortedClasses(Resources{ResourceClass(strings.Clone("VCPU")): 2})
	want := unsafe.StringData(string(q[0]))
	for i := range ps {
		cs := f.class(i, "VCPU")
		if cs == nil {
			t.Fatalf("provider %d: no VCPU", i)
		}
		if unsafe.StringData(string(cs.rc)) != want {
			t.Errorf("provider %d: its VCPU is a copy of its own, not the request's interned name", i)
		}
	}
	if !f.fitsOne(2, q[0], 15) || f.fitsOne(2, q[0], 16) {
		t.Error("provider 2 after Update: want 15 VCPU to fit and 16 not (16 total, 1 used)")
	}
}
