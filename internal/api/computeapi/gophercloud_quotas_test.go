package computeapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/limits"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/quotasets"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/identity"
)

func intp(n int) *int { return &n }

// refusal returns the HTTP status and body of a gophercloud error.
func refusal(err error) (int, string) {
	var e gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &e) {
		return e.Actual, string(e.Body)
	}
	return 0, fmt.Sprint(err)
}

// TestGophercloudQuotas drives Nova's quota API with gophercloud: the
// admin lowers demo's quotas, demo's boots stop at each limit with Nova's
// 403 and text, a limit below what is used is refused unless forced, the
// detail and limits documents count what demo holds, metadata items,
// server groups and group members are bounded, and deleting demo's quotas
// brings the defaults back. Boots racing for the last places never
// exceed the limit.
func TestGophercloudQuotas(t *testing.T) {
	ctx := context.Background()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2})
	admin := computeAt(cloud.Connect(t), "2.80")
	demoCl, err := client.Connect(ctx, client.Options{Cloud: "keel-demo", ConfigFile: cloud.CloudsYAML})
	if err != nil {
		t.Fatal(err)
	}
	demo := computeAt(demoCl, "2.80")
	demoProject := identity.ProjectID(identity.DefaultDomainID, "demo")

	defaults, err := quotasets.Get(ctx, demo, demoProject).Extract()
	if err != nil || defaults.Instances != 10 || defaults.Cores != 20 || defaults.RAM != 51200 || defaults.MetadataItems != 128 {
		t.Fatalf("demo's quotas at first: %+v, %v; want Nova's defaults", defaults, err)
	}
	// A member sees only its own project's quotas and sets none.
	if _, err := quotasets.Get(ctx, demo, identity.ProjectID(identity.DefaultDomainID, "alt_demo")).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
		t.Fatalf("demo reading alt_demo's quotas: %v, want 403", err)
	}
	if _, err := quotasets.Update(ctx, demo, demoProject, quotasets.UpdateOpts{Instances: intp(100)}).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
		t.Fatalf("demo raising its own quota: %v, want 403", err)
	}
	if _, err := quotasets.Update(ctx, admin, demoProject, quotasets.UpdateOpts{Instances: intp(2), Cores: intp(3)}).Extract(); err != nil {
		t.Fatal(err)
	}
	bootAs := func(sc *gophercloud.ServiceClient, name, flavor string, md map[string]string, hints servers.SchedulerHintOptsBuilder) (string, error) {
		s, err := servers.Create(ctx, sc, servers.CreateOpts{Name: name, FlavorRef: flavor, Networks: "none", Metadata: md}, hints).Extract()
		if err != nil {
			return "", err
		}
		return s.ID, nil
	}
	aID, err := bootAs(demo, "a", "1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bootAs(demo, "b", "1", nil, nil); err != nil {
		t.Fatal(err)
	}
	_, err = bootAs(demo, "c", "1", nil, nil)
	if st, body := refusal(err); st != 403 || !strings.Contains(body, "Quota exceeded for instances: Requested 1, but already used 2 of 2 instances") {
		t.Fatalf("third boot over instances=2: %d %s", st, body)
	}
	// Below what demo uses: refused, unless forced.
	if _, err := quotasets.Update(ctx, admin, demoProject, quotasets.UpdateOpts{Instances: intp(1)}).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Fatalf("instances=1 under 2 in use: %v, want 400", err)
	}
	if _, err := quotasets.Update(ctx, admin, demoProject, quotasets.UpdateOpts{Instances: intp(10)}).Extract(); err != nil {
		t.Fatal(err)
	}
	_, err = bootAs(demo, "big", "3", nil, nil) // m1.medium: 2 vcpus
	if st, body := refusal(err); st != 403 || !strings.Contains(body, "Quota exceeded for cores: Requested 2, but already used 2 of 3 cores") {
		t.Fatalf("boot over cores=3: %d %s", st, body)
	}
	detail, err := quotasets.GetDetail(ctx, admin, demoProject).Extract()
	if err != nil || detail.Instances.InUse != 2 || detail.Cores.InUse != 2 || detail.RAM.InUse != 1024 || detail.Cores.Limit != 3 {
		t.Fatalf("detail: %+v, %v", detail, err)
	}
	lim, err := limits.Get(ctx, demo, nil).Extract()
	if err != nil || lim.Absolute.MaxTotalCores != 3 || lim.Absolute.TotalCoresUsed != 2 || lim.Absolute.MaxTotalInstances != 10 || lim.Absolute.TotalInstancesUsed != 2 {
		t.Fatalf("limits: %+v, %v", lim.Absolute, err)
	}
	// Metadata items.
	if _, err := quotasets.Update(ctx, admin, demoProject, quotasets.UpdateOpts{MetadataItems: intp(2), Cores: intp(20)}).Extract(); err != nil {
		t.Fatal(err)
	}
	_, err = bootAs(demo, "md", "1", map[string]string{"a": "1", "b": "2", "c": "3"}, nil)
	if st, body := refusal(err); st != 403 || !strings.Contains(body, "metadata_items") {
		t.Fatalf("3 metadata items over 2: %d %s", st, body)
	}
	// Server groups and their members.
	if _, err := quotasets.Update(ctx, admin, demoProject, quotasets.UpdateOpts{ServerGroups: intp(1), ServerGroupMembers: intp(1)}).Extract(); err != nil {
		t.Fatal(err)
	}
	g, err := servergroups.Create(ctx, demo, servergroups.CreateOpts{Name: "g1", Policy: "anti-affinity"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	_, err = servergroups.Create(ctx, demo, servergroups.CreateOpts{Name: "g2", Policy: "anti-affinity"}).Extract()
	if st, body := refusal(err); st != 403 || !strings.Contains(body, "too many server groups") {
		t.Fatalf("second group over server_groups=1: %d %s", st, body)
	}
	if _, err := bootAs(demo, "m1", "1", nil, servers.SchedulerHintOpts{Group: g.ID}); err != nil {
		t.Fatal(err)
	}
	_, err = bootAs(demo, "m2", "1", nil, servers.SchedulerHintOpts{Group: g.ID})
	if st, body := refusal(err); st != 403 || !strings.Contains(body, "too many servers in group") {
		t.Fatalf("second member over server_group_members=1: %d %s", st, body)
	}
	// Refused boots leave no server behind.
	all, err := listServers(ctx, demo)
	if err != nil || len(all) != 3 {
		t.Fatalf("demo's servers after the refusals: %d (%v), want 3", len(all), err)
	}

	// A resize that adds cores past the quota is refused before it starts.
	if _, err := quotasets.Update(ctx, admin, demoProject, quotasets.UpdateOpts{Cores: intp(3)}).Extract(); err != nil {
		t.Fatal(err)
	}
	waitActive(t, demoCl, aID)
	err = servers.Resize(ctx, demo, aID, servers.ResizeOpts{FlavorRef: "3"}).ExtractErr()
	if st, body := refusal(err); st != 403 || !strings.Contains(body, "Quota exceeded for cores: Requested 1, but already used 3 of 3 cores") {
		t.Fatalf("resize past cores=3: %d %s", st, body)
	}
	if _, err := quotasets.Update(ctx, admin, demoProject, quotasets.UpdateOpts{Cores: intp(20)}).Extract(); err != nil {
		t.Fatal(err)
	}

	// Racing boots: 12 at once for the last 2 places never make more
	// than 5 servers.
	if _, err := quotasets.Update(ctx, admin, demoProject, quotasets.UpdateOpts{Instances: intp(5)}).Extract(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := bootAs(demo, fmt.Sprintf("race%d", i), "1", nil, nil)
			if st, body := refusal(err); err != nil && st != 403 {
				t.Errorf("racing boot: %d %s", st, body)
			}
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				accepted++
			}
		}()
	}
	wg.Wait()
	all, _ = listServers(ctx, demo)
	if accepted > 2 || len(all) != 3+accepted {
		t.Fatalf("racing boots: %d accepted, demo has %d servers; want at most 2 accepted and 3+accepted servers", accepted, len(all))
	}
	t.Logf("12 racing boots for 2 places: %d accepted", accepted)

	// Deleting demo's own quotas brings the defaults back.
	if err := quotasets.Delete(ctx, admin, demoProject).Err; err != nil {
		t.Fatal(err)
	}
	if q, err := quotasets.Get(ctx, demo, demoProject).Extract(); err != nil || q.Instances != 10 || q.MetadataItems != 128 {
		t.Fatalf("after delete: %+v, %v", q, err)
	}
	// The admin's own project is unlimited.
	if q, err := quotasets.Get(ctx, admin, identity.ProjectID(identity.DefaultDomainID, "admin")).Extract(); err != nil || q.Instances != -1 || q.Cores != -1 {
		t.Fatalf("admin project's quotas: %+v, %v; want -1", q, err)
	}
}

func listServers(ctx context.Context, sc *gophercloud.ServiceClient) ([]servers.Server, error) {
	pages, err := servers.List(sc, nil).AllPages(ctx)
	if err != nil {
		return nil, err
	}
	return servers.ExtractServers(pages)
}

func waitActive(t *testing.T, cl *client.Client, id string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s, err := cl.WaitServer(wctx, id, 20*time.Millisecond, func(s client.Server) bool { return s.Status != "BUILD" }); err != nil || s.Status != "ACTIVE" {
		t.Fatalf("server %s: %+v %v", id, s, err)
	}
}
