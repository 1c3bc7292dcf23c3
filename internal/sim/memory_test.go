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
	first := TuneGC(10)
	second := TuneGC(10)
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

// TestMemoryLimitGrowsWithHosts: the 10,000-host day keeps the 900 MiB
// limit; the 100,000-host day (several GB live) gets 76 KiB a host, and
// TuneGC sets it.
func TestMemoryLimitGrowsWithHosts(t *testing.T) {
	for _, c := range []struct {
		hosts int
		want  int64
	}{{12, DefaultMemoryLimit}, {10000, DefaultMemoryLimit}, {100000, 100000 * 76 << 10}} {
		if got := MemoryLimit(c.hosts); got != c.want {
			t.Errorf("MemoryLimit(%d) = %d MiB, want %d MiB", c.hosts, got>>20, c.want>>20)
		}
	}
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetMemoryLimit(-1)
	restore := TuneGC(100000)
	got := debug.SetMemoryLimit(-1)
	restore()
	if got != 100000*76<<10 {
		t.Errorf("TuneGC(100000) set a soft limit of %d MiB, want %d", got>>20, int64(100000*76<<10)>>20)
	}
	if after := debug.SetMemoryLimit(-1); after != before {
		t.Errorf("after the run the limit is %d, want %d back", after, before)
	}
}
