package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"keel/internal/client/clienttest"
	"keel/internal/config"
	"keel/internal/placement"
	"keel/internal/records"
)

// updateScreenshot rewrites the README's screenshot (docs/webview.png)
// from the browser test: KEEL_UPDATE_SCREENSHOT=1 go test ./internal/server/ -run TestWebView
var updateScreenshot = os.Getenv("KEEL_UPDATE_SCREENSHOT") != ""

// bigFlavor fills a fake host's memory fast (48 of its 127.5 GiB).
var bigFlavor = records.Flavor{ID: "9", Name: "r1.big", VCPUs: 8, RAMMB: 49152, DiskGB: 100}

// api is a logged-in caller of the cloud's HTTP API.
type api struct {
	t     *testing.T
	base  string
	token string
}

func login(t *testing.T, base, user, password string) *api {
	t.Helper()
	body := fmt.Sprintf(`{"auth":{"identity":{"methods":["password"],"password":{"user":{"name":%q,"domain":{"id":"default"},"password":%q}}}}}`, user, password)
	res, err := http.Post(base+"/identity/v3/auth/tokens", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("login %s: %s %s", user, res.Status, b)
	}
	return &api{t: t, base: base, token: res.Header.Get("X-Subject-Token")}
}

// do sends a request (compute microversion 2.87) and decodes the answer
// into out (if not nil); it fails the test on an unexpected status.
func (a *api) do(method, path string, in, out any, want int) {
	a.t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, a.base+path, body)
	req.Header.Set("X-Auth-Token", a.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("OpenStack-API-Version", "compute 2.87")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		a.t.Fatalf("%s %s: %s %s", method, path, res.Status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			a.t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
}

// boot creates a server (on host, if not empty: an admin's zone:host)
// and returns its id.
func (a *api) boot(name, flavor, host string) string {
	a.t.Helper()
	s := map[string]any{"name": name, "flavorRef": flavor, "networks": "none", "imageRef": "7f3b0d5e-6a2c-4c1e-9a55-000000000001"}
	if host != "" {
		s["availability_zone"] = "nova:" + host // admin only, as in Nova
	}
	var out struct {
		Server struct{ ID string } `json:"server"`
	}
	a.do("POST", "/compute/v2.1/servers", map[string]any{"server": s}, &out, http.StatusAccepted)
	return out.Server.ID
}

func (a *api) waitActive(ids ...string) {
	a.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range ids {
		for {
			var out struct {
				Server struct {
					Status string `json:"status"`
				} `json:"server"`
			}
			a.do("GET", "/compute/v2.1/servers/"+id, nil, &out, http.StatusOK)
			if out.Server.Status == "ACTIVE" {
				break
			}
			if out.Server.Status == "ERROR" || time.Now().After(deadline) {
				a.t.Fatalf("server %s: status %s", id, out.Server.Status)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// colour is app.js's colour() for a fill.
func colour(fill float64) string {
	f := math.Max(0, math.Min(1, fill))
	return fmt.Sprintf("hsl(%d, 65%%, 46%%)", int(math.Round(120*(1-f))))
}

// chromium starts Debian's chromium headless (a fresh profile) and
// returns a browser context.
func chromium(t *testing.T) (context.Context, context.CancelFunc) {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the web view test needs a browser: apt-get install chromium (.ci/run does): %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true), chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		cancelBrowser()
		cancelAlloc()
		t.Fatalf("starting chromium: %v", err)
	}
	return bctx, func() { cancelBrowser(); cancelAlloc() }
}

// evalPoll evaluates expr (JavaScript returning a value) until ok accepts
// it or the time runs out.
func evalPoll[T any](t *testing.T, ctx context.Context, what, expr string, within time.Duration, ok func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
		if err == nil && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("%s: not within %s (last %v, err %v); the page reads:\n%s", what, within, v, err, page)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func browserLogin(t *testing.T, ctx context.Context, url, user, password string) {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS("#user")),
		chromedp.SendKeys(chromedp.CSS("#user"), user),
		chromedp.SendKeys(chromedp.CSS("#password"), password),
		chromedp.Click(chromedp.CSS("#loginform button[type=submit]")),
	); err != nil {
		t.Fatalf("logging in as %s: %v", user, err)
	}
}

// TestWebView drives the web view with a real browser: an admin sees
// every host coloured by its claims, a live migration's arrow with its
// progress (gone soon after it ends) and a host being disabled, all
// without a reload; a member sees their project's instances and no host
// names (and the server sends them none). Then /metrics: the per-host
// gauges under openstack-exporter's names.
func TestWebView(t *testing.T) {
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 4, Flavors: append(append([]records.Flavor(nil), clienttest.Flavors...), bigFlavor)})
	base := cloud.Server.URL()
	admin := login(t, base, "admin", cloud.Password)
	demo := login(t, base, "demo", cloud.Passwords["demo"])

	// Known placements: h01 two big ones, h02 one big and a small, h03
	// a small (to move) and demo's tiny one, h04 empty.
	placed := map[string][]records.Flavor{
		"h01": {bigFlavor, bigFlavor},
		"h02": {bigFlavor, clienttest.Flavors[1]},
		"h03": {clienttest.Flavors[1]},
	}
	var ids []string
	ids = append(ids, admin.boot("big-1", "9", "h01"), admin.boot("big-2", "9", "h01"), admin.boot("big-3", "9", "h02"),
		admin.boot("web-1", "2", "h02"))
	mover := admin.boot("mover", "2", "h03")
	ids = append(ids, mover)
	admin.waitActive(ids...)
	// demo (a member) cannot name a host; the scheduler picks one.
	mine := demo.boot("mine", "1", "")
	demo.waitActive(mine)
	var mineShown struct {
		Server map[string]any `json:"server"`
	}
	admin.do("GET", "/compute/v2.1/servers/"+mine, nil, &mineShown, http.StatusOK)
	mineHost, _ := mineShown.Server["OS-EXT-SRV-ATTR:host"].(string)
	placed[mineHost] = append(placed[mineHost], clienttest.Flavors[0])

	// What each host's colour must be: the largest used/capacity over
	// VCPU, MEMORY_MB and DISK_GB, from the flavors placed there.
	sums, err := cloud.Server.Store().ProviderSummaries(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	fills := func() map[string]float64 {
		out := map[string]float64{}
		for _, s := range sums {
			used := placement.Resources{}
			for _, f := range placed[s.Name] {
				used = used.Add(f.Resources())
			}
			out[s.Name] = 0
			for _, rc := range []placement.ResourceClass{placement.VCPU, placement.MemoryMB, placement.DiskGB} {
				out[s.Name] = math.Max(out[s.Name], float64(used[rc])/float64(s.Inventories[rc].Capacity()))
			}
		}
		return out
	}
	wantFill := fills()
	most, least, empty := "h01", "h01", 0
	for h, f := range wantFill {
		if f > wantFill[most] {
			most = h
		}
		if f < wantFill[least] || (f == wantFill[least] && h < least) {
			least = h
		}
		if f == 0 {
			empty++
		}
	}

	ctx, cancel := chromium(t)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	defer cancelTimeout()
	start := time.Now()
	browserLogin(t, ctx, base+"/keel/ui/", "admin", cloud.Password)

	type cell struct {
		Host, Colour, Fill, Class string
	}
	cells := evalPoll(t, ctx, "the grid shows 4 hosts", `[...document.querySelectorAll("#grid g.host")].map(g => ({
		Host: g.dataset.host, Colour: g.dataset.colour, Fill: g.dataset.fill, Class: g.getAttribute("class")}))`,
		5*time.Second, func(cs []cell) bool { return len(cs) == 4 })
	for _, c := range cells {
		f, _ := strconv.ParseFloat(c.Fill, 64)
		if math.Abs(f-wantFill[c.Host]) > 1e-3 || c.Colour != colour(wantFill[c.Host]) {
			t.Errorf("host %s: fill %s colour %s, want %.4f %s", c.Host, c.Fill, c.Colour, wantFill[c.Host], colour(wantFill[c.Host]))
		}
		if !strings.Contains(c.Class, "enabled") || !strings.Contains(c.Class, "up") {
			t.Errorf("host %s: classes %q, want enabled and up", c.Host, c.Class)
		}
	}
	cardText, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS("#imbalance")))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"most loaded" + most, "least loaded" + least, fmt.Sprintf("empty hosts%d / 4", empty), "largest free slotr1.big"} {
		if !strings.Contains(cardText, want) {
			t.Errorf("imbalance header lacks %q: %s", want, cardText)
		}
	}

	// A live migration h03 → h04: its arrow appears with progress, then
	// goes soon after the migration ends, without a reload.
	admin.do("POST", "/compute/v2.1/servers/"+mover+"/action",
		map[string]any{"os-migrateLive": map[string]any{"host": "h04", "block_migration": "auto"}}, nil, http.StatusAccepted)
	evalPoll(t, ctx, "the move's arrow h03 → h04 with progress", `(() => { const g = document.querySelector('#grid g.move[data-source="h03"][data-dest="h04"]');
		return g ? parseFloat(g.dataset.progress) : -1 })()`, 5*time.Second, func(p float64) bool { return p > 0 && p < 1 })
	eta, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#moves tbody tr:not(.finished) td:last-child")))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9.]+ s$`).MatchString(eta) {
		t.Errorf("the move's ETA reads %q, want seconds", eta)
	}
	shot := filepath.Join(t.ArtifactDir(), "webview.png")
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)
	if updateScreenshot {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "webview.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var done time.Time
	for deadline := time.Now().Add(10 * time.Second); ; {
		var out struct {
			Migrations []struct {
				Status string `json:"status"`
			} `json:"migrations"`
		}
		admin.do("GET", "/compute/v2.1/os-migrations?instance_uuid="+mover, nil, &out, http.StatusOK)
		if len(out.Migrations) == 1 && out.Migrations[0].Status == "completed" {
			done = time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("migration of mover: %+v", out.Migrations)
		}
		time.Sleep(20 * time.Millisecond)
	}
	evalPoll(t, ctx, "the finished move's arrow fades and goes", `document.querySelectorAll('#grid g.move').length`, 4*time.Second,
		func(n int) bool { return n == 0 })
	if gone := time.Since(done); gone > 3500*time.Millisecond {
		t.Errorf("the arrow went %s after the migration completed, want within about 2 s", gone)
	}
	// The mover's claim is on h04 now.
	placed["h03"] = placed["h03"][1:] // demo's tiny one stays, if it was there
	placed["h04"] = append(placed["h04"], clienttest.Flavors[1])
	wantFill = fills()
	for _, h := range []string{"h03", "h04"} {
		evalPoll(t, ctx, h+" coloured by its claims after the move", `document.querySelector('#grid g.host[data-host="`+h+`"]').dataset.colour`,
			2*time.Second, func(c string) bool { return c == colour(wantFill[h]) })
	}

	// Disabling a host marks it.
	var svcs struct {
		Services []struct {
			ID   string `json:"id"`
			Host string `json:"host"`
		} `json:"services"`
	}
	admin.do("GET", "/compute/v2.1/os-services?binary=nova-compute&host=h02", nil, &svcs, http.StatusOK)
	if len(svcs.Services) != 1 {
		t.Fatalf("os-services for h02: %+v", svcs)
	}
	admin.do("PUT", "/compute/v2.1/os-services/"+svcs.Services[0].ID, map[string]any{"status": "disabled", "disabled_reason": "maintenance"}, nil, http.StatusOK)
	evalPoll(t, ctx, "h02 marked disabled", `document.querySelector('#grid g.host[data-host="h02"]').getAttribute("class")`, 2*time.Second,
		func(c string) bool { return strings.Contains(c, "disabled") })
	// A boot while the page is open colours its host; a host forced down
	// turns dark.
	placed["h04"] = append(placed["h04"], bigFlavor)
	wantFill = fills()
	posted := time.Now()
	late := admin.boot("late", "9", "h04")
	evalPoll(t, ctx, "h04 coloured by a boot made while the page is open", `document.querySelector('#grid g.host[data-host="h04"]').dataset.colour`,
		2*time.Second, func(c string) bool { return c == colour(wantFill["h04"]) })
	t.Logf("a boot's claim showed on the page %s after its POST", time.Since(posted).Round(time.Millisecond))
	admin.waitActive(late)
	admin.do("GET", "/compute/v2.1/os-services?binary=nova-compute&host=h03", nil, &svcs, http.StatusOK)
	admin.do("PUT", "/compute/v2.1/os-services/"+svcs.Services[0].ID, map[string]any{"forced_down": true}, nil, http.StatusOK)
	evalPoll(t, ctx, "h03 marked down", `(() => { const g = document.querySelector('#grid g.host[data-host="h03"]');
		return g.getAttribute("class") + " " + g.querySelector("rect.cell").getAttribute("fill") })()`, 2*time.Second,
		func(c string) bool { return strings.Contains(c, " down") && strings.HasSuffix(c, " #39424d") })
	admin.do("PUT", "/compute/v2.1/os-services/"+svcs.Services[0].ID, map[string]any{"forced_down": false}, nil, http.StatusOK)
	t.Logf("admin part in the browser: %s", time.Since(start).Round(time.Millisecond))

	// A member in a second tab: their instance, no host names.
	mctx, mcancel := chromedp.NewContext(ctx)
	defer mcancel()
	browserLogin(t, mctx, base+"/keel/ui/", "demo", cloud.Passwords["demo"])
	rows := evalPoll(t, mctx, "demo's instances", `[...document.querySelectorAll("#myinstances tbody tr[data-instance]")].map(r => r.dataset.instance)`,
		5*time.Second, func(r []string) bool { return len(r) > 0 })
	if len(rows) != 1 || rows[0] != mine {
		t.Errorf("demo sees instances %v, want only %s", rows, mine)
	}
	text, err := chromedp.Run(mctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	hostCells, err := chromedp.Run(mctx, chromedp.Evaluate[int](`document.querySelectorAll("#grid g.host").length`))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`\bh0[1-4]\b`).FindString(text); m != "" || hostCells != 0 {
		t.Errorf("demo's page names host %q / shows %d host cells:\n%s", m, hostCells, text)
	}
	if png, err := chromedp.Run(mctx, chromedp.FullScreenshot(100)); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(t.ArtifactDir(), "webview-member.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	// The server, not the page, keeps hosts from a member.
	var raw json.RawMessage
	demo.do("GET", "/keel/v1/ui/state", nil, &raw, http.StatusOK)
	if m := regexp.MustCompile(`"h0[1-4]"`).Find(raw); m != nil || bytes.Contains(raw, []byte(`"hosts"`)) {
		t.Errorf("the state sent to demo names hosts: %s", raw)
	}
	if !bytes.Contains(raw, []byte(mine)) || bytes.Contains(raw, []byte(mover)) {
		t.Errorf("the state sent to demo has the wrong instances: %s", raw)
	}

	checkThousandHosts(t, ctx, base)
	checkMetrics(t, base, admin.token, placed)
}

// checkThousandHosts feeds a page 1,000 hosts and 50 moves (events as the
// stream sends them) and checks the grid still fits and draws quickly.
func checkThousandHosts(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	tctx, cancel := chromedp.NewContext(ctx)
	defer cancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(base+"/keel/ui/"), chromedp.WaitVisible(chromedp.CSS("#user"))); err != nil {
		t.Fatal(err)
	}
	type result struct {
		Cells, Arrows   int
		Size, Height    float64
		FirstMS, NextMS float64
	}
	r, err := chromedp.Run(tctx, chromedp.Evaluate[result](`(() => {
		const hosts = [], moves = [];
		for (let i = 0; i < 1000; i++) {
			const f = (i * 37 % 100) / 100;
			hosts.push({name: "h" + String(i).padStart(4, "0"), zone: "nova", enabled: i % 97 != 0, up: i % 211 != 0, draining: false,
				fill: f, fill_class: "MEMORY_MB", running_vms: 3, instances: 3,
				resources: {MEMORY_MB: {total: 131072, reserved: 512, allocation_ratio: 1, capacity: 130560, used: Math.round(f * 130560)}}});
		}
		for (let i = 0; i < 50; i++) moves.push({id: i + 1, kind: "live-migration", instance_name: "vm" + i,
			source: hosts[i * 7].name, dest: hosts[999 - i * 11].name, status: "running", phase: "copy",
			memory_total_bytes: 4 * 2 ** 30, memory_processed_bytes: (i % 10) * 2 ** 29, memory_remaining_bytes: 0, finished: false});
		onEvent("event: hello\ndata: " + JSON.stringify({admin: true, user: "x", project: "x"}));
		let t0 = performance.now();
		Object.assign(state, {hosts, moves, instances: [], imbalance: {cv: {}}, time: new Date().toISOString()});
		render();
		const first = performance.now() - t0;
		t0 = performance.now();
		render();
		const next = performance.now() - t0;
		const cell = document.querySelector("#grid g.host rect.cell");
		return {Cells: document.querySelectorAll("#grid g.host").length, Arrows: document.querySelectorAll("#grid g.move").length,
			Size: +cell.getAttribute("width"), Height: document.querySelector("#grid").getBoundingClientRect().height, FirstMS: first, NextMS: next};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("1,000 hosts, 50 moves: first draw %.0f ms, redraw %.0f ms, cells %.0f px, grid %.0f px high", r.FirstMS, r.NextMS, r.Size, r.Height)
	if r.Cells != 1000 || r.Arrows != 50 || r.Size < 16 || r.Height > 900 {
		t.Errorf("at 1,000 hosts: %+v (want 1000 cells of 16 px or more, 50 arrows, a grid within one screen)", r)
	}
	if r.NextMS > 2000 {
		t.Errorf("a redraw of 1,000 hosts took %.0f ms", r.NextMS)
	}
	if png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100)); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(t.ArtifactDir(), "webview-1000.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkMetrics scrapes /metrics after TestWebView's sequence: the mover
// now on h04, h02 disabled.
func checkMetrics(t *testing.T, base, token string, placed map[string][]records.Flavor) {
	t.Helper()
	if res, err := http.Get(base + "/metrics"); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token: %v %v, want 401", res.Status, err)
	} else {
		res.Body.Close()
	}
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("X-Auth-Token", token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(res.Body)
	res.Body.Close()
	text := string(data)
	gauge := func(name string, labels string) (float64, bool) {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name+"{"+labels+"}") + ` (\S+)$`)
		m := re.FindStringSubmatch(text)
		if m == nil {
			return 0, false
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v, true
	}
	want := func(name, labels string, v float64) {
		t.Helper()
		got, ok := gauge(name, labels)
		if !ok || math.Abs(got-v) > 1e-6*math.Max(1, math.Abs(v)) {
			t.Errorf("%s{%s} = %v (found %v), want %v", name, labels, got, ok, v)
		}
	}
	for _, h := range []string{"h01", "h02", "h03", "h04"} {
		used := placement.Resources{}
		for _, f := range placed[h] {
			used = used.Add(f.Resources())
		}
		for rc, total := range map[string]float64{"VCPU": 32, "MEMORY_MB": 131072, "DISK_GB": 2000} {
			l := fmt.Sprintf(`hostname=%q,resourcetype=%q`, h, rc)
			want("openstack_placement_resource_usage", l, float64(used[placement.ResourceClass(rc)]))
			want("openstack_placement_resource_total", l, total)
		}
		want("openstack_placement_resource_reserved", fmt.Sprintf(`hostname=%q,resourcetype="MEMORY_MB"`, h), 512)
		want("openstack_placement_resource_allocation_ratio", fmt.Sprintf(`hostname=%q,resourcetype="VCPU"`, h), 4)
		hv := fmt.Sprintf(`aggregates="",availability_zone="nova",hostname=%q`, h)
		want("openstack_nova_running_vms", hv, float64(len(placed[h])))
		want("openstack_nova_vcpus_used", hv, float64(used[placement.VCPU]))
		want("openstack_nova_vcpus_available", hv, 32)
		want("openstack_nova_memory_used_bytes", hv, float64(used[placement.MemoryMB]+512)*(1<<20))
	}
	if !regexp.MustCompile(`(?m)^openstack_nova_agent_state\{adminState="disabled",disabledReason="maintenance",hostname="h02",id="\d+",service="nova-compute",zone="nova"\} 1$`).MatchString(text) {
		t.Errorf("no agent_state for disabled, up h02:\n%s", grep(text, "openstack_nova_agent_state"))
	}
	want("keel_moves_in_flight", `kind="live-migration"`, 0)
	// Imbalance over the enabled hosts h01, h03, h04 (h02 is disabled).
	var xs []float64
	for _, h := range []string{"h01", "h03", "h04"} {
		used := placement.Resources{}
		for _, f := range placed[h] {
			used = used.Add(f.Resources())
		}
		xs = append(xs, float64(used[placement.MemoryMB])/float64(131072-512))
	}
	mean := (xs[0] + xs[1] + xs[2]) / 3
	ss := 0.0
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	want("keel_imbalance_cv", `resourcetype="MEMORY_MB"`, math.Sqrt(ss/3)/mean)
}

func grep(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// sseEvents reads server-sent events from r until it ends or stop is
// closed, sending each event's name and data.
func sseEvents(r io.Reader, out chan<- [2]string) {
	defer close(out)
	var event string
	var data []string
	buf := make([]byte, 0, 64<<10)
	sc := bufio.NewScanner(r)
	sc.Buffer(buf, 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if event != "" {
				out <- [2]string{event, strings.Join(data, "\n")}
			}
			event, data = "", nil
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
}

// TestWebViewStream reads /keel/v1/ui/events as a member and as an
// admin, without a browser: the member's stream never carries hosts or
// host names, the admin's does, a boot shows up in both, and a stream
// ends with "expired" when its token does.
func TestWebViewStream(t *testing.T) {
	t.Parallel()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2, Config: func(c *config.Config) { c.API.TokenTTL = 3 * time.Second }})
	base := cloud.Server.URL()
	open := func(a *api) <-chan [2]string {
		req, _ := http.NewRequest("GET", base+"/keel/v1/ui/events", nil)
		req.Header.Set("X-Auth-Token", a.token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("GET /keel/v1/ui/events: %s %s", res.Status, res.Header.Get("Content-Type"))
		}
		if !res.Uncompressed {
			t.Errorf("GET /keel/v1/ui/events with Accept-Encoding: gzip was not gzipped")
		}
		ch := make(chan [2]string, 64)
		go sseEvents(res.Body, ch)
		return ch
	}
	admin := login(t, base, "admin", cloud.Password)
	demo := login(t, base, "demo", cloud.Passwords["demo"])
	opened := time.Now()
	adminEvents, demoEvents := open(admin), open(demo)
	id := demo.boot("streamed", "1", "")

	// Each stream until its token expires (3 s after login).
	collect := func(ch <-chan [2]string) (names []string, all string) {
		timeout := time.After(6 * time.Second)
		for {
			select {
			case ev, ok := <-ch:
				if !ok {
					return names, all
				}
				names = append(names, ev[0])
				all += ev[0] + " " + ev[1] + "\n"
			case <-timeout:
				t.Fatalf("the stream did not end with its token: %v", names)
			}
		}
	}
	dn, dall := collect(demoEvents)
	an, aall := collect(adminEvents)
	if took := time.Since(opened); took > 5*time.Second {
		t.Errorf("the streams ended %s after they opened, the tokens expire after 3 s", took)
	}
	if dn[0] != "hello" || dn[len(dn)-1] != "expired" || slices.Contains(dn, "hosts") {
		t.Errorf("demo's events: %v (want hello first, expired last, no hosts)", dn)
	}
	if regexp.MustCompile(`"h0[12]"`).MatchString(dall) || !strings.Contains(dall, id) {
		t.Errorf("demo's stream names a host or lacks their instance %s:\n%s", id, dall)
	}
	if an[0] != "hello" || an[len(an)-1] != "expired" || !slices.Contains(an, "hosts") || !strings.Contains(aall, id) || !strings.Contains(aall, `"name":"h01"`) {
		t.Errorf("admin's events: %v\n%s", an, aall)
	}
	// The page is served without a token, under a strict policy.
	res, err := http.Get(base + "/keel/ui/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(page), `<script src="app.js"`) ||
		!strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("GET /keel/ui/: %s %v", res.Status, res.Header)
	}
	if bytes.Contains(page, []byte("http://")) || bytes.Contains(page, []byte("https://")) {
		t.Errorf("the page refers to another origin:\n%s", page)
	}
}
