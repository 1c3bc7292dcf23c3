package computeapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"keel/internal/api/computeapi"
	"keel/internal/clock"
	"keel/internal/cloudtest"
	"keel/internal/records"
	"keel/internal/store"
)

// env is the API over a three-host in-process cloud on a virtual clock
// (cloudtest's, with one-second spawns).
type env struct {
	t   testing.TB
	clk *clock.Virtual
	st  store.Store
	srv *httptest.Server
	// cloud is the in-process cloud behind the API.
	cloud *cloudtest.Cloud
}

func newEnv(t testing.TB) *env { return newEnvOn(t, nil) }

// newEnvOn is newEnv on the store st (nil: cloudtest's memory store).
func newEnvOn(t testing.TB, st store.Store) *env {
	t.Helper()
	ctx := context.Background()
	c := cloudtest.New(t, cloudtest.Options{Hosts: 3, SpawnTime: time.Second, NoProgress: true, On: st})
	e := &env{t: t, clk: c.Clock, st: c.Backing, cloud: c}
	quiet := slog.New(slog.DiscardHandler)
	for _, f := range []records.Flavor{{ID: "1", Name: "m1.tiny", VCPUs: 1, RAMMB: 512, DiskGB: 1}, {ID: "2", Name: "m1.small", VCPUs: 1, RAMMB: 2048, DiskGB: 20}} {
		if _, err := e.st.CreateFlavor(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	cond := c.Cond
	api := computeapi.New(computeapi.Config{
		Store: e.st, Conductor: cond, Clock: e.clk, ServiceDownTime: time.Minute, BaseURL: "http://keel/compute", Log: quiet,
		Caller: func(r *http.Request) (computeapi.Caller, bool) {
			switch r.Header.Get("X-Auth-Token") {
			case "admin":
				return computeapi.Caller{UserID: "u-admin", ProjectID: "p-admin", Admin: true}, true
			case "member":
				return computeapi.Caller{UserID: "u-demo", ProjectID: "p-demo"}, true
			}
			return computeapi.Caller{}, false
		},
	})
	e.srv = httptest.NewServer(api)
	t.Cleanup(e.srv.Close)
	return e
}

// call sends a request and decodes the JSON answer (if any) into out.
func (e *env) call(method, path, token, version string, body any, out any) *http.Response {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	if token != "" {
		req.Header.Set("X-Auth-Token", token)
	}
	if version != "" {
		req.Header.Set("OpenStack-API-Version", "compute "+version)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			e.t.Fatalf("%s %s: %d %s: not JSON: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp
}

func TestVersionsAndMicroversionHeaders(t *testing.T) {
	e := newEnv(t)
	var v struct {
		Version struct{ ID, Version, MinVersion string } `json:"version"`
	}
	resp := e.call("GET", "/compute/v2.1/", "", "", nil, &v)
	if resp.StatusCode != 200 || v.Version.ID != "v2.1" || v.Version.Version != computeapi.MaxVersion.String() {
		t.Fatalf("version document: %d %+v", resp.StatusCode, v)
	}
	resp = e.call("GET", "/compute/v2.1/flavors", "member", "2.25", nil, nil)
	if resp.Header.Get("X-OpenStack-Nova-API-Version") != "2.25" || resp.Header.Get("OpenStack-API-Version") != "compute 2.25" || resp.Header.Get("X-OpenStack-Request-Id") == "" {
		t.Fatalf("headers: %v", resp.Header)
	}
	var fault map[string]map[string]any
	resp = e.call("GET", "/compute/v2.1/flavors", "member", "2.999", nil, &fault)
	if resp.StatusCode != 406 || fault["notAcceptable"]["code"] != 406.0 {
		t.Fatalf("out-of-range microversion: %d %v", resp.StatusCode, fault)
	}
}

func TestAuthAndPolicy(t *testing.T) {
	e := newEnv(t)
	var fault map[string]map[string]any
	if resp := e.call("GET", "/compute/v2.1/servers", "", "", nil, &fault); resp.StatusCode != 401 || fault["unauthorized"] == nil {
		t.Fatalf("no token: %d %v", resp.StatusCode, fault)
	}
	if resp := e.call("GET", "/compute/v2.1/os-hypervisors", "member", "", nil, &fault); resp.StatusCode != 403 || fault["forbidden"] == nil {
		t.Fatalf("member on an admin API: %d %v", resp.StatusCode, fault)
	}
}

func TestBootShowMigrateAndHypervisorsExactAtOnce(t *testing.T) {
	e := newEnv(t)
	var created struct{ Server struct{ ID string } }
	resp := e.call("POST", "/compute/v2.1/servers", "admin", "", map[string]any{"server": map[string]any{"name": "vm1", "flavorRef": "2", "networks": "none"}}, &created)
	if resp.StatusCode != 202 || created.Server.ID == "" {
		t.Fatalf("create: %d %+v", resp.StatusCode, created)
	}
	id := created.Server.ID
	var show struct{ Server map[string]any }
	e.call("GET", "/compute/v2.1/servers/"+id, "admin", "", nil, &show)
	if show.Server["status"] != "BUILD" {
		t.Fatalf("status before the spawn ends = %v, want BUILD", show.Server["status"])
	}
	e.clk.Advance(2 * time.Second)
	e.call("GET", "/compute/v2.1/servers/"+id, "admin", "", nil, &show)
	src, _ := show.Server["OS-EXT-SRV-ATTR:host"].(string)
	if show.Server["status"] != "ACTIVE" || src == "" {
		t.Fatalf("after the spawn: %v on %q", show.Server["status"], src)
	}

	if resp := e.call("POST", "/compute/v2.1/servers/"+id+"/action", "member", "", map[string]any{"os-migrateLive": map[string]any{"host": nil, "block_migration": "auto"}}, nil); resp.StatusCode != 404 {
		// As in Nova, another project's server does not exist for a member.
		t.Fatalf("member live-migrating admin's server: %d, want 404", resp.StatusCode)
	}
	if resp := e.call("POST", "/compute/v2.1/servers/"+id+"/action", "admin", "2.30", map[string]any{"os-migrateLive": map[string]any{"host": nil, "block_migration": "auto"}}, nil); resp.StatusCode != 202 {
		t.Fatalf("live migration: %d, want 202", resp.StatusCode)
	}
	var migs struct{ Migrations []map[string]any }
	e.call("GET", "/compute/v2.1/servers/"+id+"/migrations", "admin", "2.30", nil, &migs)
	if len(migs.Migrations) != 1 || migs.Migrations[0]["status"] != "queued" {
		t.Fatalf("the API answers once the migration is queued: %+v", migs)
	}
	e.clk.Advance(time.Millisecond) // the move goes on in the background
	e.call("GET", "/compute/v2.1/servers/"+id+"/migrations", "admin", "2.30", nil, &migs)
	if len(migs.Migrations) != 1 || migs.Migrations[0]["status"] != "running" {
		t.Fatalf("in-progress migrations: %+v", migs)
	}
	e.clk.Advance(10 * time.Second)
	e.call("GET", "/compute/v2.1/servers/"+id, "admin", "", nil, &show)
	dst, _ := show.Server["OS-EXT-SRV-ATTR:host"].(string)
	if show.Server["status"] != "ACTIVE" || dst == src || dst == "" {
		t.Fatalf("after the migration: %v on %q (was %q)", show.Server["status"], dst, src)
	}
	e.call("GET", "/compute/v2.1/os-migrations", "admin", "2.23", nil, &migs)
	if len(migs.Migrations) != 1 || migs.Migrations[0]["status"] != "completed" || migs.Migrations[0]["dest_compute"] != dst || migs.Migrations[0]["migration_type"] != "live-migration" {
		t.Fatalf("os-migrations: %+v", migs)
	}
	// Both hosts' records are exact the moment the migration completes.
	var hv struct{ Hypervisors []map[string]any }
	e.call("GET", "/compute/v2.1/os-hypervisors/detail", "admin", "", nil, &hv)
	used := map[string]float64{}
	for _, h := range hv.Hypervisors {
		used[h["hypervisor_hostname"].(string)] = h["memory_mb_used"].(float64)
		if h["state"] != "up" || h["status"] != "enabled" {
			t.Errorf("hypervisor %v state %v status %v", h["hypervisor_hostname"], h["state"], h["status"])
		}
	}
	if used[dst] != 512+2048 || used[src] != 512 {
		t.Fatalf("memory_mb_used after the move: %v; want %s=2560, %s=512", used, dst, src)
	}
}

func TestServicesDisableAndFlavorCreate(t *testing.T) {
	e := newEnv(t)
	var out struct{ Service map[string]any }
	resp := e.call("PUT", "/compute/v2.1/os-services/disable-log-reason", "admin", "", map[string]any{"host": "h1", "binary": "nova-compute", "disabled_reason": "maintenance"}, &out)
	if resp.StatusCode != 200 || out.Service["status"] != "disabled" || out.Service["disabled_reason"] != "maintenance" {
		t.Fatalf("disable: %d %+v", resp.StatusCode, out)
	}
	var svcs struct{ Services []map[string]any }
	e.call("GET", "/compute/v2.1/os-services?binary=nova-compute", "admin", "", nil, &svcs)
	if len(svcs.Services) != 3 || svcs.Services[0]["status"] != "disabled" || svcs.Services[1]["status"] != "enabled" {
		t.Fatalf("services: %+v", svcs)
	}
	// A disabled host is not chosen.
	for i := 0; i < 4; i++ {
		var created struct{ Server struct{ ID string } }
		e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "x", "flavorRef": "1"}}, &created)
		in, err := e.st.GetInstance(context.Background(), created.Server.ID)
		if err != nil || in.Host == "h1" {
			t.Fatalf("boot %d landed on %q (%v)", i, in.Host, err)
		}
	}
	var fl struct{ Flavor map[string]any }
	if resp := e.call("POST", "/compute/v2.1/flavors", "admin", "", map[string]any{"flavor": map[string]any{"name": "m1.big", "ram": 4096, "vcpus": 2, "disk": 40, "id": "7"}}, &fl); resp.StatusCode != 200 || fl.Flavor["id"] != "7" {
		t.Fatalf("flavor create: %d %+v", resp.StatusCode, fl)
	}
	var fault map[string]map[string]any
	if resp := e.call("POST", "/compute/v2.1/flavors", "admin", "", map[string]any{"flavor": map[string]any{"name": "m1.big", "ram": 1, "vcpus": 1, "disk": 0}}, &fault); resp.StatusCode != 409 {
		t.Fatalf("duplicate flavor: %d %v", resp.StatusCode, fault)
	}
	if resp := e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "x", "flavorRef": "nope"}}, &fault); resp.StatusCode != 400 || !strings.Contains(fmt.Sprint(fault), "nope") {
		t.Fatalf("unknown flavor: %d %v", resp.StatusCode, fault)
	}
	if resp := e.call("POST", "/compute/v2.1/servers", "member", "", "not an object", &fault); resp.StatusCode != 400 || fault["badRequest"] == nil {
		t.Fatalf("malformed body: %d %v", resp.StatusCode, fault)
	}
}

func TestForcedHostIsAdminOnly(t *testing.T) {
	e := newEnv(t)
	var created struct{ Server struct{ ID string } }
	if resp := e.call("POST", "/compute/v2.1/servers", "admin", "", map[string]any{"server": map[string]any{"name": "pinned", "flavorRef": "1", "availability_zone": "nova:h3"}}, &created); resp.StatusCode != 202 {
		t.Fatalf("forced boot: %d", resp.StatusCode)
	}
	if in, err := e.st.GetInstance(context.Background(), created.Server.ID); err != nil || in.Host != "h3" {
		t.Fatalf("forced boot landed on %q (%v), want h3", in.Host, err)
	}
	var fault map[string]map[string]any
	if resp := e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "x", "flavorRef": "1", "availability_zone": "nova:h3"}}, &fault); resp.StatusCode != 403 {
		t.Fatalf("member forcing a host: %d %v, want 403", resp.StatusCode, fault)
	}
}

func TestZonesLimitsAndStatistics(t *testing.T) {
	e := newEnv(t)
	fl, err := e.st.GetFlavor(context.Background(), "1")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if resp := e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "x", "flavorRef": "1"}}, nil); resp.StatusCode != 202 {
			t.Fatalf("boot: %d", resp.StatusCode)
		}
	}
	e.clk.Advance(2 * time.Second)

	var lim struct {
		Limits struct{ Absolute map[string]float64 }
	}
	e.call("GET", "/compute/v2.1/limits", "member", "2.60", nil, &lim)
	if a := lim.Limits.Absolute; a["totalInstancesUsed"] != 2 || a["totalRAMUsed"] != float64(2*fl.RAMMB) || a["maxTotalInstances"] != 10 || a["maxTotalCores"] != 20 {
		t.Errorf("member's limits: %v", a)
	}
	if _, ok := lim.Limits.Absolute["maxPersonality"]; ok {
		t.Errorf("maxPersonality at 2.60: %v", lim.Limits.Absolute)
	}
	e.call("GET", "/compute/v2.1/limits", "admin", "", nil, &lim)
	if a := lim.Limits.Absolute; a["totalInstancesUsed"] != 0 || a["maxPersonality"] != 5 {
		t.Errorf("admin's own project at 2.1: %v", a)
	}

	var st struct {
		HypervisorStatistics map[string]float64 `json:"hypervisor_statistics"`
	}
	e.call("GET", "/compute/v2.1/os-hypervisors/statistics", "admin", "2.87", nil, &st)
	if s := st.HypervisorStatistics; s["count"] != 3 || s["running_vms"] != 2 || s["vcpus_used"] != float64(2*fl.VCPUs) {
		t.Errorf("statistics: %v", s)
	}

	zone := func(token, path string) (int, []map[string]any) {
		var z struct{ AvailabilityZoneInfo []map[string]any }
		resp := e.call("GET", path, token, "", nil, &z)
		return resp.StatusCode, z.AvailabilityZoneInfo
	}
	if code, zs := zone("member", "/compute/v2.1/os-availability-zone"); code != 200 || len(zs) != 1 || zs[0]["zoneName"] != "nova" || zs[0]["hosts"] != nil ||
		zs[0]["zoneState"].(map[string]any)["available"] != true {
		t.Errorf("zones: %d %v", code, zs)
	}
	if code, _ := zone("member", "/compute/v2.1/os-availability-zone/detail"); code != 403 {
		t.Errorf("member's zone detail: %d, want 403", code)
	}
	for _, h := range []string{"h1", "h2", "h3"} {
		e.call("PUT", "/compute/v2.1/os-services/disable", "admin", "", map[string]any{"host": h, "binary": "nova-compute"}, nil)
	}
	if code, zs := zone("admin", "/compute/v2.1/os-availability-zone/detail"); code != 200 || len(zs) != 1 || zs[0]["zoneState"].(map[string]any)["available"] != false ||
		len(zs[0]["hosts"].(map[string]any)) != 3 {
		t.Errorf("zone with every host disabled: %d %v", code, zs)
	}
}

func TestServerShowsTheImageItWasBootedFrom(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ ref, want string }{
		{"http://keel/image/v2/images/img-1", "img-1"}, {"img-2", "img-2"}, {"", ""},
	} {
		var created struct{ Server struct{ ID string } }
		e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "x", "flavorRef": "1", "imageRef": c.ref}}, &created)
		var show struct{ Server map[string]any }
		e.call("GET", "/compute/v2.1/servers/"+created.Server.ID, "member", "", nil, &show)
		img := show.Server["image"]
		if c.want == "" {
			if img != "" {
				t.Errorf("no imageRef: image = %v, want \"\"", img)
			}
			continue
		}
		if m, ok := img.(map[string]any); !ok || m["id"] != c.want {
			t.Errorf("imageRef %q: image = %v, want id %q", c.ref, img, c.want)
		}
	}
}

func TestServiceIDsAreUUIDsFrom253(t *testing.T) {
	e := newEnv(t)
	var svcs struct{ Services []map[string]any }
	e.call("GET", "/compute/v2.1/os-services", "admin", "2.53", nil, &svcs)
	ids := map[string]string{}
	for _, s := range svcs.Services {
		id, _ := s["id"].(string)
		if _, err := uuid.Parse(id); err != nil {
			t.Fatalf("service %v: id %q is not a UUID", s["host"], id)
		}
		ids[s["host"].(string)] = id
	}
	if len(ids) != 3 || ids["h1"] == ids["h2"] {
		t.Fatalf("ids: %v", ids)
	}
	var hv struct{ Hypervisors []map[string]any }
	e.call("GET", "/compute/v2.1/os-hypervisors/detail", "admin", "2.53", nil, &hv)
	for _, h := range hv.Hypervisors {
		if got := h["service"].(map[string]any)["id"]; got != ids[h["hypervisor_hostname"].(string)] {
			t.Errorf("hypervisor %v: service id %v, os-services says %v", h["hypervisor_hostname"], got, ids[h["hypervisor_hostname"].(string)])
		}
	}
	var out struct{ Service map[string]any }
	if resp := e.call("PUT", "/compute/v2.1/os-services/"+ids["h2"], "admin", "2.53", map[string]any{"status": "disabled"}, &out); resp.StatusCode != 200 || out.Service["host"] != "h2" || out.Service["status"] != "disabled" {
		t.Fatalf("disable by id: %d %v", resp.StatusCode, out)
	}
	if resp := e.call("PUT", "/compute/v2.1/os-services/"+uuid.NewString(), "admin", "2.53", map[string]any{"status": "disabled"}, nil); resp.StatusCode != 404 {
		t.Errorf("unknown service id: %d, want 404", resp.StatusCode)
	}
}
