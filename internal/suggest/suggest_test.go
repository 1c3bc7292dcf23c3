package suggest

import "testing"

func TestClosest(t *testing.T) {
	names := []string{"host_subset_size", "max_attempts", "duration", "count", "ram_weight_multiplier", "zone"}
	cases := []struct{ word, want string }{
		{"host_subset_sise", "host_subset_size"},
		{"host-subset-size", "host_subset_size"},
		{"Count", "count"},
		{"durration", "duration"},
		{"ram_weight_multiplyer", "ram_weight_multiplier"},
		{"zone2", "zone"},
		{"zone", ""},  // known: nothing to suggest
		{"bogus", ""}, // nothing near
		{"max_attempt", "max_attempts"},
	}
	for _, c := range cases {
		if got := Closest(c.word, names); got != c.want {
			t.Errorf("Closest(%q) = %q, want %q", c.word, got, c.want)
		}
	}
	// A tie goes to the first name in order.
	if got := Closest("ab", []string{"ac", "aa"}); got != "aa" {
		t.Errorf("tie: %q, want aa", got)
	}
}
