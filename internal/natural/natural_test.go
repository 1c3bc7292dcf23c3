package natural

import (
	"slices"
	"testing"
)

func TestCompare(t *testing.T) {
	got := []string{"vm10", "vm2", "vm1", "web", "vm", "h010", "h9", "h01", "h1", "a2b10", "a2b9", "vm1a", ""}
	slices.SortFunc(got, Compare)
	want := []string{"", "a2b9", "a2b10", "h1", "h01", "h9", "h010", "vm", "vm1", "vm1a", "vm2", "vm10", "web"}
	if !slices.Equal(got, want) {
		t.Fatalf("sorted %q, want %q", got, want)
	}
	for _, s := range want {
		if Compare(s, s) != 0 || Less(s, s) {
			t.Errorf("%q does not equal itself", s)
		}
	}
	for i := range want {
		for j := i + 1; j < len(want); j++ {
			if Compare(want[i], want[j]) != -1 || Compare(want[j], want[i]) != 1 {
				t.Errorf("Compare(%q, %q) not antisymmetric", want[i], want[j])
			}
		}
	}
}
