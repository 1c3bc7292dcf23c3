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
// stream first: a few changed records are read by key, many with one
// listing), a deleted host gone, and no service that is not a compute's.
// It runs over a store that reads many hosts in one query
// (store.HostBatchReader) and over one that reads one host at a time.
func TestHostViewComputeHosts(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			st := memory.New()
			var vs hostViewStore = st
			if !batch {
				vs = struct{ hostViewStore }{st} // hides GetHostRecords, GetServices
			}
			testHostViewComputeHosts(t, st, newHostView(vs))
		})
	}
}

func testHostViewComputeHosts(t *testing.T, st *memory.Store, v *hostView) {
	ctx := context.Background()
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
	put := func(h string, used int64) {
		t.Helper()
		if err := st.PutHostRecord(ctx, records.HostRecord{Host: h, VCPUs: 8, VCPUsUsed: used}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 30; i >= 1; i-- {
		h := fmt.Sprintf("h%02d", i)
		put(h, 0)
		if err := st.PutService(ctx, records.Service{Host: h, Binary: "nova-compute", Zone: "nova"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutService(ctx, records.Service{Host: records.ServerServiceHost("ctl"), Binary: records.ServerBinary}); err != nil {
		t.Fatal(err)
	}
	check("first read")
	// Writes since the last read are in the next one.
	put("h02", 5)
	if _, err := st.UpdateService(ctx, "h03", func(s *records.Service) error {
		s.Disabled, s.DisabledReason = true, "maintenance"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	put("h00", 0)
	check("after a few writes") // read by key (in one query, or one each)
	put("h01", 2)
	check("after one write") // read alone
	for i := 1; i <= 20; i++ {
		put(fmt.Sprintf("h%02d", i), int64(i))
	}
	check("after many writes") // read with one listing
	if _, err := st.DeleteService(ctx, "h04"); err != nil {
		t.Fatal(err)
	}
	put("h05", 9)
	check("after a delete")
	recs, svcs, _ := v.ComputeHosts(ctx)
	if len(recs) != 30 || recs[0].Host != "h00" || recs[1].VCPUsUsed != 1 || recs[4].Host != "h05" || recs[4].VCPUsUsed != 9 ||
		!svcs["h03"].Disabled || svcs[records.ServerServiceHost("ctl")].Host != "" || svcs["h04"].Host != "" {
		t.Errorf("records %+v, services %+v: want h00 first, h01 using 1 vCPU, h04 gone, h05 9, h03 disabled, no server replica", recs, svcs)
	}
}
