package bench

import (
	"testing"
	"time"
)

// TestSlowestPartsAveragesTheSlowestPercent: of 200 decisions, the two
// slowest (1 %) are averaged part by part; the others are left out.
func TestSlowestPartsAveragesTheSlowestPercent(t *testing.T) {
	var lat []time.Duration
	var parts [][numParts]time.Duration
	for i := 0; i < 200; i++ {
		p := [numParts]time.Duration{1, 2, 3, 4, 0}
		switch i {
		case 17:
			p = [numParts]time.Duration{100, 2, 900, 4, 0} // the claim is slow
		case 150:
			p = [numParts]time.Duration{100, 2, 3, 500, 1} // the apply is slow
		}
		parts = append(parts, p)
		lat = append(lat, p[0]+p[1]+p[2]+p[3]+p[4])
	}
	got := slowestParts(lat, parts)
	want := [numParts]time.Duration{100, 2, 451, 252, 0}
	if got != want {
		t.Fatalf("slowest parts %v, want %v", got, want)
	}
}
