package computeapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"keel/internal/audit"
	"keel/internal/placement"
	"keel/internal/records"
)

// TestServerRequestsRefusedAsNova: each malformed or impossible request is
// a 400 (or 404 for an unknown server) in Nova's fault shape, and creates
// nothing.
func TestServerRequestsRefusedAsNova(t *testing.T) {
	e := newEnv(t)
	ok := map[string]any{"name": "vm", "flavorRef": "1"}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for kk, vv := range ok {
			m[kk] = vv
		}
		m[k] = v
		return map[string]any{"server": m}
	}
	cases := []struct {
		what, method, path string
		body               any
		status             int
	}{
		{"numeric name", "POST", "/servers", with("name", 12345), 400},
		{"blank name", "POST", "/servers", with("name", "  "), 400},
		{"256-character name", "POST", "/servers", with("name", strings.Repeat("a", 256)), 400},
		{"unknown flavor", "POST", "/servers", with("flavorRef", "99"), 400},
		{"a network", "POST", "/servers", with("networks", []any{map[string]any{"uuid": "a-b-c"}}), 400},
		{"networks neither none nor auto", "POST", "/servers", with("networks", "public"), 400},
		{"unknown security group", "POST", "/servers", with("security_groups", []any{map[string]any{"name": "web"}}), 400},
		{"a key pair", "POST", "/servers", with("key_name", "mykey"), 400},
		{"bad IPv4 access address", "POST", "/servers", with("accessIPv4", "1.1.1.1.1"), 400},
		{"IPv6 as accessIPv4", "POST", "/servers", with("accessIPv4", "::1"), 400},
		{"min_count over max_count", "POST", "/servers", map[string]any{"server": map[string]any{"name": "vm", "flavorRef": "1", "min_count": 3, "max_count": 2}}, 400},
		{"zero max_count", "POST", "/servers", with("max_count", 0), 400},
		{"negative limit", "GET", "/servers?limit=-1", nil, 400},
		{"limit not a number", "GET", "/servers/detail?limit=ten", nil, 400},
		{"changes-since not a time", "GET", "/servers?changes-since=2011/01/01", nil, 400},
		{"unknown marker", "GET", "/servers?marker=nope", nil, 400},
		{"unknown flavor marker", "GET", "/flavors?marker=nope", nil, 400},
		{"bad minRam", "GET", "/flavors/detail?minRam=lots", nil, 400},
		{"update with an unknown field", "PUT", "/servers/" + "00000000-0000-0000-0000-000000000000", map[string]any{"server": map[string]any{"color": "red"}}, 400},
		{"update of an unknown server", "PUT", "/servers/00000000-0000-0000-0000-000000000000", map[string]any{"server": map[string]any{"name": "x"}}, 404},
		{"any action on an unknown server", "POST", "/servers/00000000-0000-0000-0000-000000000000/action", map[string]any{"pause": nil}, 404},
		{"actions of an unknown server", "GET", "/servers/00000000-0000-0000-0000-000000000000/os-instance-actions", nil, 404},
	}
	for _, c := range cases {
		var fault map[string]map[string]any
		resp := e.call(c.method, "/compute/v2.1"+c.path, "admin", "2.1", c.body, &fault)
		if resp.StatusCode != c.status || len(fault) != 1 {
			t.Errorf("%s: %d %v, want %d and one fault", c.what, resp.StatusCode, fault, c.status)
		}
	}
	var list struct{ Servers []any }
	e.call("GET", "/compute/v2.1/servers?all_tenants=1", "admin", "", nil, &list)
	if len(list.Servers) != 0 {
		t.Errorf("refused requests created %d servers", len(list.Servers))
	}
}

// TestMultiCreateAndListFilters: min_count/max_count boots several servers
// named name-1…, sharing a reservation id the list filters on; limit and
// marker page through them newest first; PUT changes what it names.
func TestMultiCreateAndListFilters(t *testing.T) {
	e := newEnv(t)
	var res struct {
		ReservationID string `json:"reservation_id"`
	}
	resp := e.call("POST", "/compute/v2.1/servers", "member", "2.1", map[string]any{"server": map[string]any{
		"name": "web", "flavorRef": "1", "min_count": 2, "max_count": "3", "return_reservation_id": true,
		"metadata": map[string]string{"tier": "front"}}}, &res)
	if resp.StatusCode != 202 || !strings.HasPrefix(res.ReservationID, "r-") {
		t.Fatalf("multi-create: %d %+v", resp.StatusCode, res)
	}
	e.call("POST", "/compute/v2.1/servers", "member", "2.1", map[string]any{"server": map[string]any{"name": "db", "flavorRef": "1"}}, nil)
	e.clk.Advance(2 * time.Second)

	type srv struct {
		ID, Name, Status string
		Metadata         map[string]string
		Reservation      *string `json:"OS-EXT-SRV-ATTR:reservation_id"`
		LaunchIndex      *int    `json:"OS-EXT-SRV-ATTR:launch_index"`
	}
	var list struct {
		Servers []srv
		Links   []map[string]string `json:"servers_links"`
	}
	e.call("GET", "/compute/v2.1/servers/detail?all_tenants=1&reservation_id="+res.ReservationID, "admin", "2.3", nil, &list)
	names := map[string]int{}
	for _, s := range list.Servers {
		if s.Status != "ACTIVE" || s.Metadata["tier"] != "front" || s.Reservation == nil || *s.Reservation != res.ReservationID || s.LaunchIndex == nil {
			t.Errorf("server of the reservation: %+v", s)
			continue
		}
		names[s.Name] = *s.LaunchIndex
	}
	if len(names) != 3 || names["web-1"] != 0 || names["web-3"] != 2 {
		t.Fatalf("reservation %s lists %v, want web-1…web-3 at launch indexes 0…2", res.ReservationID, names)
	}

	// Paging: two of four, then the rest after the marker.
	e.call("GET", "/compute/v2.1/servers?limit=2", "member", "", nil, &list)
	if len(list.Servers) != 2 || len(list.Links) != 1 || !strings.Contains(list.Links[0]["href"], "marker="+list.Servers[1].ID) {
		t.Fatalf("first page: %+v", list)
	}
	first := slices.Clone(list.Servers)
	list.Servers, list.Links = nil, nil
	e.call("GET", "/compute/v2.1/servers?marker="+first[1].ID, "member", "", nil, &list)
	if len(list.Servers) != 2 || list.Links != nil || list.Servers[0].ID == first[0].ID || list.Servers[1].ID == first[1].ID {
		t.Fatalf("second page: %+v after %+v", list.Servers, first)
	}
	e.call("GET", "/compute/v2.1/servers?name=^web-[12]$", "member", "", nil, &list)
	if len(list.Servers) != 2 {
		t.Errorf("name regex: %+v", list.Servers)
	}

	// PUT: the name and access address change; the 2.1 view has no
	// detail-only fields.
	var upd map[string]map[string]any
	if r := e.call("PUT", "/compute/v2.1/servers/"+first[0].ID, "member", "2.1", map[string]any{"server": map[string]any{"name": "renamed", "accessIPv6": "0:0:0:0:0:0:0:1"}}, &upd); r.StatusCode != 200 {
		t.Fatalf("update: %d", r.StatusCode)
	}
	if s := upd["server"]; s["name"] != "renamed" || s["accessIPv6"] != "::1" || s["key_name"] != nil || s["OS-EXT-STS:vm_state"] != nil {
		t.Errorf("update answered %v", s)
	}
	if r := e.call("PUT", "/compute/v2.1/servers/"+first[0].ID, "admin", "2.1", map[string]any{"server": map[string]any{"name": ""}}, nil); r.StatusCode != 400 {
		t.Errorf("empty name: %d, want 400", r.StatusCode)
	}
}

// TestFlavorFiltersAndHypervisorSearch: flavor minRam/minDisk/limit, and
// the pre-2.53 hypervisor search and servers lookups.
func TestFlavorFiltersAndHypervisorSearch(t *testing.T) {
	e := newEnv(t)
	var fl struct {
		Flavors []struct{ ID string }
		Links   []map[string]string `json:"flavors_links"`
	}
	e.call("GET", "/compute/v2.1/flavors?minRam=1024", "member", "", nil, &fl)
	if len(fl.Flavors) != 1 || fl.Flavors[0].ID != "2" {
		t.Errorf("minRam=1024: %+v", fl.Flavors)
	}
	e.call("GET", "/compute/v2.1/flavors/detail?limit=1", "member", "", nil, &fl)
	if len(fl.Flavors) != 1 || fl.Flavors[0].ID != "1" || len(fl.Links) != 1 {
		t.Errorf("limit=1: %+v", fl)
	}

	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "admin", "", map[string]any{"server": map[string]any{"name": "vm", "flavorRef": "1", "availability_zone": "nova:h2"}}, &created)
	var hs struct {
		Hypervisors []struct {
			Name    string `json:"hypervisor_hostname"`
			Servers []struct{ UUID, Name string }
		}
	}
	e.call("GET", "/compute/v2.1/os-hypervisors/h2/servers", "admin", "2.1", nil, &hs)
	if len(hs.Hypervisors) != 1 || hs.Hypervisors[0].Name != "h2" || len(hs.Hypervisors[0].Servers) != 1 || hs.Hypervisors[0].Servers[0].UUID != created.Server.ID {
		t.Errorf("servers on h2: %+v", hs)
	}
	e.call("GET", "/compute/v2.1/os-hypervisors/h/search", "admin", "2.1", nil, &hs)
	if len(hs.Hypervisors) != 3 {
		t.Errorf("search h: %+v", hs)
	}
	for _, c := range []struct {
		path, version, token string
		status               int
	}{
		{"/os-hypervisors/nope/search", "2.1", "admin", 404},
		{"/os-hypervisors/h1/search", "2.53", "admin", 404},
		{"/os-hypervisors/h1/search", "2.1", "member", 403},
		{"/os-hypervisors/nope/uptime", "2.1", "admin", 404},
		{"/os-hypervisors/h1/uptime", "2.88", "admin", 404}, // gone from 2.88
		{"/os-hypervisors/statistics", "2.88", "admin", 404},
		{"/os-hypervisors/statistics", "2.87", "admin", 200},
	} {
		if r := e.call("GET", "/compute/v2.1"+c.path, c.token, c.version, nil, nil); r.StatusCode != c.status {
			t.Errorf("%s at %s as %s: %d, want %d", c.path, c.version, c.token, r.StatusCode, c.status)
		}
	}
}

// TestResetState: an admin sets a server's vm_state to error or active;
// a member may not, an unknown state is a 400, and a server in a live
// migration is refused (409) until the migration ends.
func TestResetState(t *testing.T) {
	e := newEnv(t)
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm", "flavorRef": "1"}}, &created)
	id := created.Server.ID
	e.clk.Advance(2 * time.Second)
	reset := func(token, state string) int {
		t.Helper()
		return e.call("POST", "/compute/v2.1/servers/"+id+"/action", token, "", map[string]any{"os-resetState": map[string]any{"state": state}}, nil).StatusCode
	}
	status := func() string {
		t.Helper()
		var show struct{ Server map[string]any }
		e.call("GET", "/compute/v2.1/servers/"+id, "admin", "", nil, &show)
		return fmt.Sprint(show.Server["status"], " ", show.Server["OS-EXT-STS:vm_state"])
	}
	if got := reset("member", "error"); got != 403 {
		t.Errorf("member resetting: %d, want 403", got)
	}
	if got := reset("admin", "stopped"); got != 400 {
		t.Errorf("state stopped: %d, want 400", got)
	}
	if got := reset("admin", "error"); got != 202 || status() != "ERROR error" {
		t.Fatalf("reset to error: %d, then %s", got, status())
	}
	if got := reset("admin", "active"); got != 202 || status() != "ACTIVE active" {
		t.Fatalf("reset to active: %d, then %s", got, status())
	}
	// A resize's new flavor left on the record with no move open (quotas
	// count it) goes with the reset.
	cur, err := e.st.GetInstance(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	big := cur.Flavor
	big.ID, big.VCPUs = "big", 8
	cur.ResizeFlavor = &big
	if _, err := e.st.UpdateInstance(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	if got := reset("admin", "active"); got != 202 {
		t.Fatalf("reset with a stale resize flavor: %d", got)
	}
	if cur, _ = e.st.GetInstance(context.Background(), id); cur.ResizeFlavor != nil {
		t.Fatalf("the reset left resize flavor %s, which quotas count", cur.ResizeFlavor.ID)
	}
	if r := e.call("POST", "/compute/v2.1/servers/"+id+"/action", "admin", "2.30", map[string]any{"os-migrateLive": map[string]any{"host": nil, "block_migration": "auto"}}, nil); r.StatusCode != 202 {
		t.Fatalf("live migration: %d", r.StatusCode)
	}
	if got := reset("admin", "error"); got != 409 || status() != "MIGRATING active" {
		t.Errorf("reset during a live migration: %d, then %s; want 409 and no change", got, status())
	}
}

// TestResetStatePutsAllocationsRight: os-resetState on an instance a bug
// left migrating, holding two hosts, with an ended migration's consumer
// still on its source, puts the allocations right (the flavor on its host
// only for active, nothing for error), records a reset-state action
// saying what it corrected, and leaves the audit clean; a reset to active
// on a host with no room left is a 409 that changes nothing.
func TestResetStatePutsAllocationsRight(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm", "flavorRef": "1"}}, &created)
	id := created.Server.ID
	e.clk.Advance(2 * time.Second)
	inst, err := e.st.GetInstance(ctx, id)
	if err != nil || inst.VMState != records.VMActive || inst.Host == "" {
		t.Fatalf("booted instance: %+v, %v", inst, err)
	}
	host, rp := inst.Host, "rp-"+inst.Host
	other := map[string]string{"h1": "rp-h2", "h2": "rp-h3", "h3": "rp-h1"}[host]
	want := inst.Flavor.Resources()

	// What a bug leaves: the instance migrating, claimed on a second host,
	// its ended migration's consumer holding the source.
	m, err := e.st.CreateMigration(ctx, records.Migration{UUID: uuid.NewString(), InstanceUUID: id, SourceHost: host, Status: records.MigrationError})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.WriteAllocations(ctx,
		placement.AllocationWrite{ConsumerUUID: m.UUID, Type: placement.ConsumerMigration, Allocations: map[string]placement.Resources{rp: want}},
		placement.AllocationWrite{ConsumerUUID: id, AnyConsumerGeneration: true, Allocations: map[string]placement.Resources{rp: want, other: want}},
	); err != nil {
		t.Fatal(err)
	}
	inst.TaskState = records.TaskMigrating
	if _, err := e.st.UpdateInstance(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if v, err := audit.Check(ctx, e.st); err != nil || len(v) < 2 {
		t.Fatalf("audit of the broken state: %q, %v; want the ended migration's consumer and the second host", v, err)
	}

	var fault map[string]any
	reset := func(state string) *http.Response {
		t.Helper()
		fault = nil
		return e.call("POST", "/compute/v2.1/servers/"+id+"/action", "admin", "", map[string]any{"os-resetState": map[string]any{"state": state}}, &fault)
	}
	allocs := func(consumer string) map[string]placement.Resources {
		t.Helper()
		c, err := e.st.GetConsumer(ctx, consumer)
		if errors.Is(err, placement.ErrNotFound) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return c.Allocations
	}
	if r := reset("active"); r.StatusCode != 202 {
		t.Fatalf("reset to active: %d", r.StatusCode)
	}
	if got := allocs(id); len(got) != 1 || !got[rp].Equal(want) {
		t.Errorf("after reset to active the instance holds %v, want %v on %s only", got, want, host)
	}
	if got := allocs(m.UUID); got != nil {
		t.Errorf("the ended migration's consumer still holds %v", got)
	}
	if v, err := audit.Check(ctx, e.st); err != nil || len(v) != 0 {
		t.Errorf("audit after reset to active: %q, %v", v, err)
	}
	acts, err := e.st.ListInstanceActions(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	last := acts[len(acts)-1]
	if last.Action != "reset-state" || last.UserID == "" || !strings.Contains(last.Message, "allocations put right") ||
		!strings.Contains(last.Message, fmt.Sprintf("migration %d released", m.ID)) {
		t.Errorf("last action: %+v, want reset-state saying what was put right", last)
	}

	if r := reset("error"); r.StatusCode != 202 {
		t.Fatalf("reset to error: %d", r.StatusCode)
	}
	if got := allocs(id); got != nil {
		t.Errorf("after reset to error the instance holds %v, want nothing", got)
	}
	if v, err := audit.Check(ctx, e.st); err != nil || len(v) != 0 {
		t.Errorf("audit after reset to error: %q, %v", v, err)
	}

	// Fill the host; active no longer fits.
	sums, err := e.st.ProviderSummaries(ctx, []string{rp})
	if err != nil {
		t.Fatal(err)
	}
	free := sums[0].Inventories[placement.VCPU].Capacity() - sums[0].Usage[placement.VCPU]
	if _, err := e.st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: uuid.NewString(), Allocations: map[string]placement.Resources{rp: {placement.VCPU: free}}}); err != nil {
		t.Fatal(err)
	}
	if r := reset("active"); r.StatusCode != 409 || !strings.Contains(fmt.Sprint(fault), "does not fit") {
		t.Errorf("reset to active on a full host: %d %v, want 409", r.StatusCode, fault)
	}
	if got, _ := e.st.GetInstance(ctx, id); got.VMState != records.VMError || allocs(id) != nil {
		t.Errorf("a refused reset changed the instance: %s, %v", got.VMState, allocs(id))
	}
}

// TestFailedCreateActionGivesTheReason: a server no host can take ends in
// ERROR with a fault, and its create action carries that reason and an
// event whose result is Error.
func TestFailedCreateActionGivesTheReason(t *testing.T) {
	e := newEnv(t)
	e.call("POST", "/compute/v2.1/flavors", "admin", "", map[string]any{"flavor": map[string]any{"name": "huge", "id": "99", "ram": 1024, "vcpus": 64, "disk": 1}}, nil)
	// Past the default cores quota too: lift it, to reach the scheduler.
	if _, err := e.st.SetQuotaLimits(context.Background(), "p-demo", map[string]int64{"cores": -1}); err != nil {
		t.Fatal(err)
	}
	var created struct{ Server struct{ ID string } }
	resp := e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "big", "flavorRef": "99"}}, &created)
	if resp.StatusCode != 202 {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	reqID := resp.Header.Get("X-Openstack-Request-Id")
	var show struct{ Server map[string]any }
	e.call("GET", "/compute/v2.1/servers/"+created.Server.ID, "member", "", nil, &show)
	fault, _ := show.Server["fault"].(map[string]any)
	if show.Server["status"] != "ERROR" || fault == nil || fault["message"] == "" {
		t.Fatalf("server: %v", show.Server)
	}
	var act struct {
		InstanceAction struct {
			Action, Message string
			Events          []map[string]any
		}
	}
	e.call("GET", "/compute/v2.1/servers/"+created.Server.ID+"/os-instance-actions/"+reqID, "member", "2.51", nil, &act)
	a := act.InstanceAction
	if a.Action != "create" || a.Message != fault["message"] || len(a.Events) != 1 || a.Events[0]["result"] != "Error" || a.Events[0]["traceback"] != nil {
		t.Errorf("create action of a failed build: %+v (fault %v)", a, fault["message"])
	}
}

// TestServerAddresses: keel has no networks, so a server's address list is
// empty and any network is unknown; another project's server is not found.
func TestServerAddresses(t *testing.T) {
	e := newEnv(t)
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "admin", "", map[string]any{"server": map[string]any{"name": "vm", "flavorRef": "1"}}, &created)
	id := created.Server.ID
	var ips map[string]map[string]any
	if r := e.call("GET", "/compute/v2.1/servers/"+id+"/ips", "admin", "", nil, &ips); r.StatusCode != 200 || ips["addresses"] == nil || len(ips["addresses"]) != 0 {
		t.Errorf("ips: %d %v", r.StatusCode, ips)
	}
	for _, c := range []struct {
		path, token string
		status      int
	}{
		{"/servers/" + id + "/ips/public", "admin", 404},
		{"/servers/" + id + "/ips", "member", 404},
		{"/servers/nope/ips", "admin", 404},
	} {
		if r := e.call("GET", "/compute/v2.1"+c.path, c.token, "", nil, nil); r.StatusCode != c.status {
			t.Errorf("%s as %s: %d, want %d", c.path, c.token, r.StatusCode, c.status)
		}
	}
}

// TestMigrationPaging: from 2.59 os-migrations pages with limit and a
// migration's uuid as marker, newest first; before 2.59 both are ignored.
func TestMigrationPaging(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{"a", "b"} {
		var created struct{ Server struct{ ID string } }
		e.call("POST", "/compute/v2.1/servers", "admin", "", map[string]any{"server": map[string]any{"name": name, "flavorRef": "1"}}, &created)
		e.clk.Advance(2 * time.Second)
		if r := e.call("POST", "/compute/v2.1/servers/"+created.Server.ID+"/action", "admin", "2.30", map[string]any{"os-migrateLive": map[string]any{"host": nil, "block_migration": "auto"}}, nil); r.StatusCode != 202 {
			t.Fatalf("live-migrating %s: %d", name, r.StatusCode)
		}
	}
	type page struct {
		Migrations []struct {
			ID   int64
			UUID string
		}
		Links []map[string]string `json:"migrations_links"`
	}
	var all, first, rest page
	e.call("GET", "/compute/v2.1/os-migrations", "admin", "2.59", nil, &all)
	if len(all.Migrations) != 2 || all.Migrations[0].ID < all.Migrations[1].ID {
		t.Fatalf("all migrations, newest first: %+v", all)
	}
	e.call("GET", "/compute/v2.1/os-migrations?limit=1", "admin", "2.59", nil, &first)
	if len(first.Migrations) != 1 || first.Migrations[0].UUID != all.Migrations[0].UUID || len(first.Links) != 1 ||
		!strings.Contains(first.Links[0]["href"], "marker="+all.Migrations[0].UUID) {
		t.Fatalf("limit=1: %+v", first)
	}
	e.call("GET", "/compute/v2.1/os-migrations?marker="+first.Migrations[0].UUID, "admin", "2.59", nil, &rest)
	if len(rest.Migrations) != 1 || rest.Migrations[0].UUID != all.Migrations[1].UUID || rest.Links != nil {
		t.Fatalf("after the marker: %+v", rest)
	}
	var old page
	e.call("GET", "/compute/v2.1/os-migrations?limit=1", "admin", "2.58", nil, &old)
	if len(old.Migrations) != 2 {
		t.Errorf("limit at 2.58 (not yet paged): %d migrations, want 2", len(old.Migrations))
	}
	if r := e.call("GET", "/compute/v2.1/os-migrations?marker=nope", "admin", "2.59", nil, nil); r.StatusCode != 400 {
		t.Errorf("unknown marker: %d, want 400", r.StatusCode)
	}
}
