package audit_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"keel/internal/audit"
	"keel/internal/compute"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store/memory"
)

// slotReadings answers HeldSlots with each reading in turn.
type slotReadings struct{ readings []map[string][]int64 }

func (s *slotReadings) HeldSlots(context.Context) map[string][]int64 {
	r := s.readings[0]
	if len(s.readings) > 1 {
		s.readings = s.readings[1:]
	}
	return r
}

// guestsOf lists fixed guests per host; a host missing fails.
type guestsOf map[string][]compute.Guest

func (g guestsOf) ListGuests(_ context.Context, host string) ([]compute.Guest, error) {
	gs, ok := g[host]
	if !ok {
		return nil, fmt.Errorf("%s did not answer", host)
	}
	return gs, nil
}

// TestRunReadsSlotsTwiceAndSaysWhatItCouldNotCheck: a slot counts only if
// held in both readings around the migrations' records; a host whose
// service is down is not asked, one that fails to answer is named, and
// neither is taken for a host without guests.
func TestRunReadsSlotsTwiceAndSaysWhatItCouldNotCheck(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, id := range []string{"m-1", "m-2"} {
		if _, err := st.CreateMigration(ctx, records.Migration{UUID: id, InstanceUUID: "i", Status: records.MigrationCompleted}); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []string{"up", "down", "mute"} {
		seen := now
		if h == "down" {
			seen = now.Add(-time.Hour)
		}
		if err := st.PutService(ctx, records.Service{Host: h, Binary: "nova-compute", UpdatedAt: seen}); err != nil {
			t.Fatal(err)
		}
		createProvider(t, st, h)
	}
	rep, err := audit.Run(ctx, audit.Sources{
		Store:           st,
		Agents:          guestsOf{"up": {}, "down": {{UUID: "never-asked"}}},
		Slots:           &slotReadings{readings: []map[string][]int64{{"up": {1, 2}}, {"up": {2}}}},
		ServiceDownTime: time.Minute,
	}, now, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range rep.Findings {
		got = append(got, f.Kind+" "+f.Subject)
	}
	if !slices.Equal(got, []string{"slot-of-ended-migration 2"}) {
		t.Errorf("findings %q, want only migration 2's slot (1 was released between the readings)", got)
	}
	un := strings.Join(rep.Unchecked, "\n")
	if !strings.Contains(un, "guests on down: its service is down") || !strings.Contains(un, "guests on mute: mute did not answer") || strings.Contains(un, "on up") {
		t.Errorf("unchecked:\n%s", un)
	}
}

func createProvider(t *testing.T, st *memory.Store, host string) {
	t.Helper()
	if _, err := st.CreateProvider(context.Background(), placement.Provider{UUID: "rp-" + host, Name: host,
		Inventories: placement.Inventories{placement.VCPU: placement.NewInventory(8)}}); err != nil {
		t.Fatal(err)
	}
}
