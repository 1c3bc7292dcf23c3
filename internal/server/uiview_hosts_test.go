package server

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"keel/internal/records"
	"keel/internal/store/memory"
)

// TestHostViewComputeHosts checks the host view as the hypervisor calls
// read it (computeapi.HostLister): every host record sorted by host and
// every compute service, equal to what the store lists, including a write
// committed just before the call (the view catches up with the change
// stream first: one changed record is read alone, several with one
// listing), and no service that is not a compute's.
func TestHostViewComputeHosts(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	v := newHostView(st)
	check := func(when string) {
		t.Helper()
		recs, svcs, err := v.ComputeHosts(ctx)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		want, err := st.ListHostRecords(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(recs, want) {
			t.Errorf("%s: records\n got %+v\nwant %+v", when, recs, want)
		}
		all, err := st.ListServices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantSvcs := map[string]records.Service{}
		for _, s := range all {
			if s.IsCompute() {
				wantSvcs[s.Host] = s
			}
		}
		if !reflect.DeepEqual(svcs, wantSvcs) {
			t.Errorf("%s: services\n got %+v\nwant %+v", when, svcs, wantSvcs)
		}
	}
	for i := 3; i >= 1; i-- {
		h := fmt.Sprintf("h%d", i)
		if err := st.PutHostRecord(ctx, records.HostRecord{Host: h, VCPUs: 8}); err != nil {
			t.Fatal(err)
		}
		if err := st.PutService(ctx, records.Service{Host: h, Binary: "nova-compute", Zone: "nova"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutService(ctx, records.Service{Host: "ctl", Binary: "nova-scheduler"}); err != nil {
		t.Fatal(err)
	}
	check("first read")
	// Writes since the last read are in the next one.
	if err := st.PutHostRecord(ctx, records.HostRecord{Host: "h2", VCPUs: 8, VCPUsUsed: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateService(ctx, "h3", func(s *records.Service) error {
		s.Disabled, s.DisabledReason = true, "maintenance"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutHostRecord(ctx, records.HostRecord{Host: "h0", VCPUs: 4}); err != nil {
		t.Fatal(err)
	}
	check("after writes") // two records changed: read with one listing
	if err := st.PutHostRecord(ctx, records.HostRecord{Host: "h1", VCPUs: 8, VCPUsUsed: 2}); err != nil {
		t.Fatal(err)
	}
	check("after one write") // one record changed: read alone
	recs, svcs, _ := v.ComputeHosts(ctx)
	if len(recs) != 4 || recs[0].Host != "h0" || recs[1].VCPUsUsed != 2 || recs[2].VCPUsUsed != 5 || !svcs["h3"].Disabled {
		t.Errorf("records %+v, services %+v: want h0 first, h1 using 2 vCPUs, h2 5, h3 disabled", recs, svcs)
	}
}
