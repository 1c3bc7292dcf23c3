package sim

import (
	"runtime/debug"
	"testing"
)

// gcPercent reads the collector's GOGC setting.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestTuneGCRunsAtOnce: two runs at once share one tuning; the settings
// come back when the last one ends, not when the first does (which, with
// each run restoring what it saw, left the tuning in place for good when
// the runs ended in the order they started).
func TestTuneGCRunsAtOnce(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetGCPercent(123)
	defer debug.SetGCPercent(before)
	first := TuneGC()
	second := TuneGC()
	if got := gcPercent(); got != 400 {
		t.Fatalf("tuned: GOGC %d, want 400", got)
	}
	first()
	first() // twice is once
	if got := gcPercent(); got != 400 {
		t.Errorf("one run of two ended: GOGC %d, want still 400", got)
	}
	second()
	if got := gcPercent(); got != 123 {
		t.Errorf("both runs ended: GOGC %d, want 123 back", got)
	}
}
