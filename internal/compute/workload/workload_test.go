package workload

import (
	"strings"
	"testing"
	"time"
)

func TestParseRefusesImpossibleModels(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{"", "empty workload"},
		{"steady cpu=1", `unknown workload kind "steady"`},
		{"constant cpu=-1", "cpu=-1: must not be negative"},
		{"constant cpu=150%", "above 100%"},
		{"constant", "needs cpu="},
		{"diurnal cpu=1", "needs peak="},
		{"diurnal cpu=2 peak=1", "peak=1 is below cpu=2"},
		{"bursty cpu=1 peak=2 every=1m for=2m", "for=2m0s is longer than every=1m0s"},
		{"bursty cpu=1 peak=2 chance=2", "want a probability"},
		{"constant cpu=1 peak=2", `workload constant has no setting "peak"`},
		{"constant cpu=x", "want a number"},
	} {
		_, err := Parse(c.line)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want %q", c.line, err, c.want)
		}
	}
	m, err := Parse("diurnal cpu=1 peak=6")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Check(4, 4096); err == nil || !strings.Contains(err.Error(), "peak=6 is above the flavor's 4 vCPUs") {
		t.Errorf("Check(4 vCPUs) = %v", err)
	}
	m, _ = Parse("constant cpu=1 mem=8192")
	if err := m.Check(4, 4096); err == nil || !strings.Contains(err.Error(), "mem=8192 is above the flavor's 4096 MiB") {
		t.Errorf("Check(4096 MiB) = %v", err)
	}
}

func TestDemand(t *testing.T) {
	day := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := Parse("diurnal cpu=10% peak=90% peak_at=14h")
	if err != nil {
		t.Fatal(err)
	}
	if cpu, mem := m.Demand(1, "a", 4, 2048, day.Add(14*time.Hour)); cpu != 3.6 || mem != 1024 {
		t.Errorf("diurnal at its peak = %v CPUs %v MiB, want 3.6 and 1024", cpu, mem)
	}
	if cpu, _ := m.Demand(1, "a", 4, 2048, day.Add(2*time.Hour)); cpu < 0.399 || cpu > 0.401 {
		t.Errorf("diurnal at its trough = %v, want 0.4", cpu)
	}
	b, _ := Parse("bursty cpu=0.5 peak=2 every=10m for=2m chance=0.5")
	busy, samples := 0, 0
	for s := time.Duration(0); s < 24*time.Hour; s += 10 * time.Second {
		c1, _ := b.Demand(7, "a", 2, 1024, day.Add(s))
		c2, _ := b.Demand(7, "a", 2, 1024, day.Add(s))
		if c1 != c2 {
			t.Fatalf("bursty is not deterministic at %v: %v then %v", s, c1, c2)
		}
		if c1 != 0.5 && c1 != 2 {
			t.Fatalf("bursty at %v = %v, want 0.5 or 2", s, c1)
		}
		if c1 == 2 {
			busy++
		}
		samples++
	}
	// chance 0.5 of a 2-minute burst per 10 minutes: about 10 % of the time.
	if f := float64(busy) / float64(samples); f < 0.06 || f > 0.14 {
		t.Errorf("bursty busy %.3f of the day, want about 0.10", f)
	}
	other := 0
	for s := time.Duration(0); s < 24*time.Hour; s += 10 * time.Second {
		c1, _ := b.Demand(7, "a", 2, 1024, day.Add(s))
		c2, _ := b.Demand(7, "b", 2, 1024, day.Add(s))
		if c1 != c2 {
			other++
		}
	}
	if other == 0 {
		t.Error("two guests burst at exactly the same times")
	}
}

func TestFor(t *testing.T) {
	if l, ok := For(map[string]string{Key: "constant cpu=1"}, map[string]string{Key: "constant cpu=2"}, "d"); !ok || l != "constant cpu=1" {
		t.Errorf("metadata should win: %q", l)
	}
	if l, ok := For(nil, map[string]string{Key: "constant cpu=2"}, "d"); !ok || l != "constant cpu=2" {
		t.Errorf("flavor next: %q", l)
	}
	if _, ok := For(nil, nil, ""); ok {
		t.Error("no model anywhere")
	}
}
