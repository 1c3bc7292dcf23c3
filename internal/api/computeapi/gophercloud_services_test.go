package computeapi_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/aggregates"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/hypervisors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/services"

	"keel/internal/bus"
	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/config"
	"keel/internal/notify"
	"keel/internal/testenv"
)

// TestGophercloudServiceDeleteAndReRegister deletes a compute service
// with gophercloud against a real keel whose agents run: refused (409,
// Nova's text) while the host has a server; once the server is gone, the
// disabled service of a host in an aggregate is deleted (204, and
// service.delete on keel's bus), and the agent, still running, registers
// its host again at its next heartbeat as a restarted nova-compute does
// (service.create): enabled, up, out of the aggregate, its hypervisor and
// provider back under the same UUID — and the scheduler places a server
// there again.
func TestGophercloudServiceDeleteAndReRegister(t *testing.T) {
	ctx := testenv.Context(t)
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2, Config: func(c *config.Config) { c.Default.ReportInterval = 200 * time.Millisecond }})
	cl := cloud.Connect(t)
	sc := computeAt(cl, "2.53")

	conn, err := bus.Connect(ctx, cloud.Server.BusURL(), cloud.Server.Credentials(), "service-delete-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var mu sync.Mutex
	var events []notify.Message
	sub, err := conn.Subscribe(bus.NotificationSubject("service.>"), func(data json.RawMessage) {
		var m notify.Message
		if json.Unmarshal(data, &m) == nil {
			mu.Lock()
			events = append(events, m)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	srv := boot(t, cl, sc, "vm1", "", servers.SchedulerHintOpts{})
	host := srv.Host
	service := func() (services.Service, bool) {
		t.Helper()
		pages, err := services.List(sc, services.ListOpts{Binary: "nova-compute", Host: host}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		svcs, err := services.ExtractServices(pages)
		if err != nil {
			t.Fatal(err)
		}
		if len(svcs) != 1 {
			return services.Service{}, false
		}
		return svcs[0], true
	}
	before, ok := service()
	if !ok {
		t.Fatalf("no service of %s", host)
	}
	hyp := func() (hypervisors.Hypervisor, bool) {
		t.Helper()
		pages, err := hypervisors.List(sc, hypervisors.ListOpts{}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hs, err := hypervisors.ExtractHypervisors(pages)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.HypervisorHostname == host {
				return h, true
			}
		}
		return hypervisors.Hypervisor{}, false
	}
	hypBefore, ok := hyp()
	if !ok {
		t.Fatalf("no hypervisor %s", host)
	}

	err = services.Delete(ctx, sc, before.ID).ExtractErr()
	if !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Fatalf("deleting the service of %s, which hosts vm1: %v, want 409", host, err)
	}
	var ue gophercloud.ErrUnexpectedResponseCode
	var fault map[string]map[string]any
	if !errors.As(err, &ue) || json.Unmarshal(ue.Body, &fault) != nil ||
		fault["conflictingRequest"]["message"] != "Unable to delete compute service that is hosting instances. Migrate or delete the instances first." {
		t.Errorf("409 body %s", ue.Body)
	}
	if err := servers.Delete(ctx, sc, srv.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.WaitServer(ctx, srv.ID, 20*time.Millisecond, func(s client.Server) bool { return s.Status == "DELETED" }); err != nil {
		t.Fatal(err)
	}

	if _, err := services.Update(ctx, sc, before.ID, services.UpdateOpts{Status: services.ServiceDisabled, DisabledReason: "retiring"}).Extract(); err != nil {
		t.Fatal(err)
	}
	ag, err := aggregates.Create(ctx, sc, aggregates.CreateOpts{Name: "rack1"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aggregates.AddHost(ctx, sc, ag.ID, aggregates.AddHostOpts{Host: host}).Extract(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	events = nil
	mu.Unlock()
	if err := services.Delete(ctx, sc, before.ID).ExtractErr(); err != nil {
		t.Fatalf("deleting the idle service of %s: %v", host, err)
	}

	// The agent's next heartbeat finds no service and registers again.
	var after services.Service
	for {
		if s, ok := service(); ok && s.State == "up" {
			if _, ok := hyp(); ok {
				after = s
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never registered again after its service was deleted", host)
		case <-time.After(50 * time.Millisecond):
		}
	}
	mu.Lock()
	var seen []string
	for _, m := range events {
		if d, _ := m.Payload.Data.(map[string]any); d["host"] == host {
			seen = append(seen, m.EventType)
		}
	}
	mu.Unlock()
	// The disable's service.update is published on its own and may reach
	// the subscriber after the reset above: what counts is that a
	// service.create follows the service.delete.
	del := slices.Index(seen, "service.delete")
	if del < 0 || !slices.Contains(seen[del+1:], "service.create") || slices.Contains(seen[:del], "service.create") {
		t.Errorf("service events of %s after the delete: %v, want service.delete then service.create", host, seen)
	}
	if after.ID != before.ID || after.Status != "enabled" || after.DisabledReason != "" {
		t.Errorf("registered again: %+v; want the same id, enabled, no reason", after)
	}
	agg, err := aggregates.Get(ctx, sc, ag.ID).Extract()
	if err != nil || slices.Contains(agg.Hosts, host) {
		t.Errorf("aggregate after the delete: %+v %v; want %s out of it", agg, err, host)
	}
	if h, _ := hyp(); h.ID != hypBefore.ID || h.VCPUs != hypBefore.VCPUs {
		t.Errorf("hypervisor registered again: id %s vcpus %d; want %s, %d", h.ID, h.VCPUs, hypBefore.ID, hypBefore.VCPUs)
	}
	again := boot(t, cl, sc, "vm2", "nova:"+host, servers.SchedulerHintOpts{})
	if again.Status != "ACTIVE" || again.Host != host {
		t.Errorf("a server forced onto %s registered again: %s on %s", host, again.Status, again.Host)
	}
}
