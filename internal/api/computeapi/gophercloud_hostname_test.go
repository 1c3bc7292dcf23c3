package computeapi_test

import (
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/hypervisors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"keel/internal/client/clienttest"
	"keel/internal/testenv"
)

// TestGophercloudAt291: gophercloud at keel's newest microversions sets
// and reads a server's hostname (2.90: its CreateOpts and UpdateOpts
// Hostname, refused at 2.89) and reads the hypervisors without their
// resource fields (2.88).
func TestGophercloudAt291(t *testing.T) {
	ctx := testenv.Context(t)
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2})
	cl := cloud.Connect(t)
	fl, err := cl.FindFlavor(ctx, "m1.tiny")
	if err != nil {
		t.Fatal(err)
	}
	opts := servers.CreateOpts{Name: "vm", FlavorRef: fl.ID, ImageRef: "7f3b0d5e-6a2c-4c1e-9a55-000000000001", Networks: "none", Hostname: "web-01"}
	if _, err := servers.Create(ctx, computeAt(cl, "2.89"), opts, nil).Extract(); err == nil {
		t.Errorf("create with a hostname at 2.89: no error, want a 400")
	}
	sc := computeAt(cl, "2.91")
	s, err := servers.Create(ctx, sc, opts, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	got, err := servers.Get(ctx, sc, s.ID).Extract()
	if err != nil || got.Hostname == nil || *got.Hostname != "web-01" {
		t.Fatalf("server after create: %+v (%v), want hostname web-01", got, err)
	}
	h := "web-02"
	if got, err = servers.Update(ctx, sc, s.ID, servers.UpdateOpts{Hostname: &h}).Extract(); err != nil || got.Hostname == nil || *got.Hostname != h {
		t.Errorf("update to web-02: %+v (%v)", got, err)
	}

	pages, err := hypervisors.List(sc, nil).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := hypervisors.ExtractHypervisors(pages)
	if err != nil || len(hs) != 2 {
		t.Fatalf("hypervisors at 2.91: %d, %v", len(hs), err)
	}
	for _, hv := range hs {
		if hv.HypervisorHostname == "" || hv.State != "up" || hv.VCPUs != 0 || hv.MemoryMB != 0 {
			t.Errorf("hypervisor at 2.91: %+v, want its name and state and no resource fields", hv)
		}
	}
}
