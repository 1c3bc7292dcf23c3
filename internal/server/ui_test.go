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
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"keel/internal/client/clienttest"
	"keel/internal/config"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/testenv"
)

// updateScreenshot rewrites the docs' screenshot (docs/webview.png)
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
	for _, id := range ids {
		testenv.Poll(a.t, "server "+id+" ACTIVE", func() error {
			var out struct {
				Server struct {
					Status string `json:"status"`
				} `json:"server"`
			}
			a.do("GET", "/compute/v2.1/servers/"+id, nil, &out, http.StatusOK)
			switch out.Server.Status {
			case "ACTIVE":
				return nil
			case "ERROR":
				a.t.Fatalf("server %s: status ERROR", id)
			}
			return fmt.Errorf("status %s", out.Server.Status)
		})
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
	testenv.External(t, "Chromium (Debian's chromium)")
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
// it, bounded by the test's time (testenv.Context), not by a fixed one: a
// browser starved at a load of 30 redraws late, and that is not the page's
// fault. within is how soon the page does it on a quiet machine; a wait
// past it is logged, so a slow page still shows in the output.
func evalPoll[T any](t *testing.T, ctx context.Context, what, expr string, within time.Duration, ok func(T) bool) T {
	t.Helper()
	awaitingNow(t, what)
	start := time.Now()
	tctx := testenv.Context(t)
	for {
		// One evaluation may not hang past the test's time (a browser
		// starved under load): it ends with it and says so below.
		ectx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(tctx, cancel)
		v, err := chromedp.Run(ectx, chromedp.Evaluate[T](expr))
		stop()
		cancel()
		if err == nil && ok(v) {
			if took := time.Since(start); took > within {
				t.Logf("slow: %s took %s (within %s when quiet)", what, took.Round(time.Millisecond), within)
			}
			return v
		}
		if tctx.Err() != nil || ctx.Err() != nil {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			page, perr := chromedp.Run(pctx, chromedp.Evaluate[string](`document.body.innerText`))
			cancel()
			if perr != nil {
				page = fmt.Sprintf("(unread: %v)", perr)
			}
			t.Fatalf("awaiting %s: not so after %s, when the test's time ran out (last %v, err %v); the page reads:\n%s", what, time.Since(start).Round(time.Millisecond), v, err, page)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// awaited is what each browser test awaits now (evalPoll, or a step
// named with awaitingNow), so a failure anywhere — a t.Fatal in a helper,
// a timeout, a cleanup — says what the page was waiting for.
var awaited sync.Map // *testing.T → awaitedStep

type awaitedStep struct {
	what  string
	since time.Time
}

// awaitingNow records what t awaits from now on; the first call also has
// t's failure report it.
func awaitingNow(t *testing.T, what string) {
	if _, loaded := awaited.Swap(t, awaitedStep{what, time.Now()}); !loaded {
		began := time.Now()
		t.Cleanup(func() {
			if st, ok := awaited.LoadAndDelete(t); ok && t.Failed() {
				s := st.(awaitedStep)
				t.Logf("%s failed %s in, awaiting %s (for %s)", t.Name(), time.Since(began).Round(time.Millisecond),
					s.what, time.Since(s.since).Round(time.Millisecond))
			}
		})
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
	testenv.External(t, "Chromium (Debian's chromium)")
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
	// The browser's time is the test's (testenv.Context), not a fixed
	// minute: at a load of 50 the whole sequence took 64 s.
	ctx, cancelTimeout := context.WithCancel(ctx)
	defer cancelTimeout()
	defer context.AfterFunc(testenv.Context(t), cancelTimeout)()
	start := time.Now()
	awaitingNow(t, "the admin's login")
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
		t.Fatalf("reading the imbalance header: %v", err)
	}
	for _, want := range []string{"most loaded" + most, "least loaded" + least, fmt.Sprintf("empty hosts%d / 4", empty), "largest free slotr1.big"} {
		if !strings.Contains(cardText, want) {
			t.Errorf("imbalance header lacks %q: %s", want, cardText)
		}
	}

	// The detail panel (the most loaded host until one is hovered) shows
	// the host's measured CPU beside its vCPU claims: its guests' load
	// (the fake driver's default workload), as the agent reports it.
	evalPoll(t, ctx, "the detail panel's measured CPU", `(() => { const r = document.querySelector("#detail [data-measured]");
		return r ? r.dataset.measured : "" })()`, 20*time.Second, func(m string) bool { f, err := strconv.ParseFloat(m, 64); return err == nil && f > 0 && f <= 1 })
	// The imbalance header has the measured CPU's CV beside the claims':
	// every host reports (the fake driver's default workload on the three
	// with guests, 0 % on an empty one).
	evalPoll(t, ctx, "the imbalance header's measured CPU", `(() => { const c = document.querySelector('#imbalance [data-card="cv-measured"]');
		return c ? c.textContent : "" })()`, 20*time.Second, func(s string) bool {
		return regexp.MustCompile(`^imbalance measured CPU[0-9]+\.[0-9]{2}4 of 4 hosts measured$`).MatchString(s)
	})
	checkColourByMeasured(t, ctx, admin, wantFill)

	// A live migration h03 → h04: its arrow appears with progress, then
	// goes soon after the migration ends, without a reload.
	admin.do("POST", "/compute/v2.1/servers/"+mover+"/action",
		map[string]any{"os-migrateLive": map[string]any{"host": "h04", "block_migration": "auto"}}, nil, http.StatusAccepted)
	evalPoll(t, ctx, "the move's arrow h03 → h04 with progress", `(() => { const g = document.querySelector('#grid g.move[data-source="h03"][data-dest="h04"]');
		return g ? parseFloat(g.dataset.progress) : -1 })()`, 5*time.Second, func(p float64) bool { return p > 0 && p < 1 })
	// The ETA needs a second copy report (a rate): it reads seconds while
	// the move is still in flight.
	evalPoll(t, ctx, "the move's ETA in seconds while it is in flight", `(() => { const td = document.querySelector("#moves tbody tr:not(.finished) td:last-child");
		return td ? td.textContent : "gone" })()`, 3*time.Second, func(eta string) bool { return regexp.MustCompile(`^[0-9.]+ s$`).MatchString(eta) })
	shot := filepath.Join(t.ArtifactDir(), "webview.png")
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("taking the screenshot: %v", err)
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)
	awaitingNow(t, "the mover's migration completed (os-migrations)")
	testenv.Poll(t, "the mover's migration completed (os-migrations)", func() error {
		var out struct {
			Migrations []struct {
				Status string `json:"status"`
			} `json:"migrations"`
		}
		admin.do("GET", "/compute/v2.1/os-migrations?instance_uuid="+mover, nil, &out, http.StatusOK)
		if len(out.Migrations) == 1 && out.Migrations[0].Status == "completed" {
			return nil
		}
		return fmt.Errorf("migrations %+v", out.Migrations)
	})
	// The arrow fades in about 2 s on a quiet machine; evalPoll logs it
	// if it took longer.
	evalPoll(t, ctx, "the finished move's arrow fades and goes", `document.querySelectorAll('#grid g.move').length`, 3500*time.Millisecond,
		func(n int) bool { return n == 0 })
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
	evalPoll(t, ctx, "h03 up again", `document.querySelector('#grid g.host[data-host="h03"]').getAttribute("class")`, 5*time.Second,
		func(c string) bool { return strings.Contains(c, " up") })

	// A drain of h03 with two more small ones on it (one move at a
	// time): its plan in the Plans panel runs with moves done, running
	// and left, then ends done; h03 reads draining, then drained; the
	// moves say which plan started them.
	d1, d2 := admin.boot("drained-1", "2", "h03"), admin.boot("drained-2", "2", "h03")
	admin.waitActive(d1, d2)
	placed["h03"] = append(placed["h03"], clienttest.Flavors[1], clienttest.Flavors[1])
	flavorOf := map[string]records.Flavor{d1: clienttest.Flavors[1], d2: clienttest.Flavors[1], mine: clienttest.Flavors[0]}
	drainID := checkDrainPanel(t, ctx, admin, base, "h03", len(placed["h03"]))
	var shown struct {
		Plan struct {
			Moves []records.PlanMove `json:"moves"`
		} `json:"plan"`
	}
	admin.do("GET", fmt.Sprintf("/keel/v1/plans/%d", drainID), nil, &shown, http.StatusOK)
	placed["h03"] = nil
	for _, mv := range shown.Plan.Moves {
		f, ok := flavorOf[mv.Instance]
		if !ok || mv.State != records.MoveDone || mv.Result == "" || mv.Result == "h03" || mv.Result == "h02" {
			t.Fatalf("drain move %+v: want one of the known instances, done, off h03 and not onto disabled h02", mv)
		}
		placed[mv.Result] = append(placed[mv.Result], f)
	}
	wantFill = fills()
	for _, h := range []string{"h01", "h03", "h04"} {
		evalPoll(t, ctx, h+" coloured by its claims after the drain", `document.querySelector('#grid g.host[data-host="`+h+`"]').dataset.colour`,
			2*time.Second, func(c string) bool { return c == colour(wantFill[h]) })
	}
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
	if bytes.Contains(raw, []byte(`"plans"`)) || bytes.Contains(raw, []byte(`"plan"`)) {
		t.Errorf("the state sent to demo shows plans (admin only): %s", raw)
	}
	if n, err := chromedp.Run(mctx, chromedp.Evaluate[int](`document.querySelectorAll("#plans tbody tr[data-plan]").length`)); err != nil || n != 0 {
		t.Errorf("demo's page lists %d plans (%v), want none", n, err)
	}
	if !bytes.Contains(raw, []byte(mine)) || bytes.Contains(raw, []byte(mover)) {
		t.Errorf("the state sent to demo has the wrong instances: %s", raw)
	}

	checkManyHosts(t, ctx, base, 1000, 16)
	checkManyHosts(t, ctx, base, 10000, 7)
	checkMetrics(t, admin, placed, []string{"h01", "h04"})
}

// checkDrainPanel drains host (n instances) with one move at a time
// through the plans API and follows the plan in the browser's Plans
// panel until it is done; it returns the plan's ID. On the way: the
// docs' screenshot (a move of the drain in flight), and /metrics'
// plan gauges while it runs.
func checkDrainPanel(t *testing.T, ctx context.Context, admin *api, base, host string, n int) int64 {
	t.Helper()
	var created struct {
		Plan struct {
			ID int64 `json:"id"`
		} `json:"plan"`
	}
	admin.do("POST", "/keel/v1/plans", map[string]any{"drain": map[string]any{"hosts": []string{host}, "parallel": 1}}, &created, http.StatusAccepted)
	id := created.Plan.ID
	type row struct {
		State                        string
		Done, Running, Left, Total   int
		Text                         string
		HostClass, HostTag, MoveKind string
	}
	read := fmt.Sprintf(`(() => { const r = document.querySelector('#plans tbody tr[data-plan="%d"]');
		const g = document.querySelector('#grid g.host[data-host="%s"]');
		const k = document.querySelector('#moves tbody tr:not(.finished) td:nth-child(3)');
		if (!r || !g) return null;
		const tags = [...g.querySelectorAll("text")].map(t => t.textContent);
		return {State: r.dataset.state, Done: +r.dataset.done, Running: +r.dataset.running, Left: +r.dataset.left, Total: +r.dataset.total,
			Text: r.innerText, HostClass: g.getAttribute("class"), HostTag: tags[tags.length - 1] || "", MoveKind: k ? k.textContent : ""}; })()`, id, host)
	// Running, with a move in flight and at least one still to go.
	mid := evalPoll(t, ctx, "the drain's plan running in the Plans panel", read, 10*time.Second, func(r *row) bool {
		return r != nil && r.State == "running" && r.Running == 1 && r.Left >= 1 && r.MoveKind != ""
	})
	if mid.Total != n || mid.Done+mid.Running+mid.Left != n {
		t.Errorf("plan %d mid-drain: %+v, want %d moves in all", id, mid, n)
	}
	if !strings.Contains(mid.HostClass, "draining") || mid.HostTag != fmt.Sprintf("draining (plan %d)", id) {
		t.Errorf("%s while its drain runs: classes %q, tag %q; want it marked draining by plan %d", host, mid.HostClass, mid.HostTag, id)
	}
	if want := fmt.Sprintf("live-migration (plan %d)", id); mid.MoveKind != want {
		t.Errorf("the drain's move in the moves table: kind %q, want %q", mid.MoveKind, want)
	}
	if !strings.Contains(mid.Text, "1 running") || !strings.Contains(mid.Text, fmt.Sprintf("of %d", n)) {
		t.Errorf("the plan's row reads %q", mid.Text)
	}
	// /metrics while it runs: every move counted once, in some state.
	text := scrape(t, base, admin.token)
	sum := 0.0
	for _, st := range []string{"done", "running", "left", "failed", "skipped", "cancelled"} {
		v, ok := gaugeValue(text, "keel_plan_moves", fmt.Sprintf(`plan="%d",purpose="drain",state=%q`, id, st))
		if !ok {
			t.Errorf("no keel_plan_moves for plan %d, state %s:\n%s", id, st, grep(text, "keel_plan"))
		}
		sum += v
	}
	if sum != float64(n) {
		t.Errorf("keel_plan_moves for plan %d sum to %v, want %d", id, sum, n)
	}
	if v, _ := gaugeValue(text, "keel_plans", `purpose="drain",state="running"`); v != 1 {
		t.Errorf("keel_plans{purpose=drain,state=running} = %v, want 1", v)
	}
	// The screenshot once a move of the drain is well under way.
	evalPoll(t, ctx, "a drain move a fifth copied", `(() => { const g = document.querySelector('#grid g.move[data-source="`+host+`"]');
		return g && !/[0-9a-f]{8}-/.test(document.querySelector("#plans").innerText) ? parseFloat(g.dataset.progress) : -1 })()`,
		10*time.Second, func(p float64) bool { return p >= 0.2 })
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(t.ArtifactDir(), "webview-drain.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if updateScreenshot {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "webview.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	end := evalPoll(t, ctx, "the drain's plan done in the Plans panel", read, time.Duration(n)*10*time.Second, func(r *row) bool {
		return r != nil && r.State != "running"
	})
	if end.State != "done" || end.Done != n || end.Running != 0 || end.Left != 0 || !strings.Contains(end.Text, "took ") {
		t.Errorf("plan %d at its end: %+v, want done with %d moves done", id, end, n)
	}
	if !strings.Contains(end.HostClass, "drained") || strings.Contains(end.HostClass, "draining") || end.HostTag != fmt.Sprintf("drained (plan %d)", id) {
		t.Errorf("%s after its drain: classes %q, tag %q; want it marked drained by plan %d", host, end.HostClass, end.HostTag, id)
	}
	return id
}

// scrape reads /metrics with token.
func scrape(t *testing.T, base, token string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("X-Auth-Token", token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", res.Status)
	}
	return string(data)
}

// gaugeValue finds name{labels} in a scrape.
func gaugeValue(text, name, labels string) (float64, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name+"{"+labels+"}") + ` (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		return 0, false
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v, true
}

// checkManyHosts feeds a page n hosts and 50 moves (events as the stream
// sends them) and checks the grid still fits one screen with cells of at
// least minSize pixels, that a redraw after a claim changed 1 % of the
// hosts shows the new fills (drawing only those), and that a click on a
// cell selects its host; it logs how long each draw took.
func checkManyHosts(t *testing.T, ctx context.Context, base string, n int, minSize float64) {
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
		Changed         int // cells showing the changed hosts' new fill
		Reused          int // cells of unchanged hosts kept from the first draw
		Parts           string
	}
	r, err := chromedp.Run(tctx, chromedp.Evaluate[result](`((n) => {
		const hosts = [], moves = [];
		for (let i = 0; i < n; i++) {
			const f = (i * 37 % 100) / 100;
			hosts.push({name: "h" + String(i).padStart(4, "0"), zone: "nova", enabled: i % 97 != 0, up: i % 211 != 0, draining: false,
				fill: f, fill_class: "MEMORY_MB", running_vms: 3, instances: 3,
				resources: {MEMORY_MB: {total: 131072, reserved: 512, allocation_ratio: 1, capacity: 130560, used: Math.round(f * 130560)}}});
		}
		for (let i = 0; i < 50; i++) moves.push({id: i + 1, kind: "live-migration", instance_name: "vm" + i,
			source: hosts[i * 7].name, dest: hosts[n - 1 - i * 11].name, status: "running", phase: "copy",
			memory_total_bytes: 4 * 2 ** 30, memory_processed_bytes: (i % 10) * 2 ** 29, memory_remaining_bytes: 0, finished: false});
		onEvent("event: hello\ndata: " + JSON.stringify({admin: true, user: "x", project: "x"}));
		let t0 = performance.now();
		Object.assign(state, {hosts, moves, instances: [], imbalance: {cv: {}}, time: new Date().toISOString()});
		render();
		document.querySelector("#grid").getBoundingClientRect(); // the browser's layout, in the draw's time
		const first = performance.now() - t0;
		const before = new Map([...document.querySelectorAll("#grid g.host")].map((g) => [g.dataset.host, g]));
		// A claim's update: every 100th host fuller by a tenth.
		const hosts2 = hosts.map((hs, i) => i % 100 == 0 ? {...hs, fill: Math.min(1, hs.fill + 0.1)} : hs);
		t0 = performance.now();
		Object.assign(state, {hosts: hosts2});
		render();
		document.querySelector("#grid").getBoundingClientRect();
		const next = performance.now() - t0;
		const parts = {};
		for (const [name, f] of [["imbalance", renderImbalance], ["grid", renderGrid], ["detail", renderDetail], ["plans", renderPlans], ["moves", renderMoves]]) {
			const t = performance.now(); f(state); parts[name] = Math.round(performance.now() - t);
		}
		console.log(JSON.stringify(parts));
		let changed = 0, reused = 0;
		for (const g of document.querySelectorAll("#grid g.host")) {
			const i = +g.dataset.host.slice(1);
			if (i % 100 == 0) { if (g.dataset.fill === hosts2[i].fill.toFixed(4) && before.get(g.dataset.host) !== g) changed++; }
			else if (before.get(g.dataset.host) === g) reused++;
		}
		const cell = document.querySelector("#grid g.host rect.cell");
		return {Cells: document.querySelectorAll("#grid g.host").length, Arrows: document.querySelectorAll("#grid g.move").length,
			Size: +cell.getAttribute("width"), Height: document.querySelector("#grid").getBoundingClientRect().height, FirstMS: first, NextMS: next,
			Changed: changed, Reused: reused, Parts: JSON.stringify(parts)};
	})(`+strconv.Itoa(n)+`)`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d hosts, 50 moves: first draw %.0f ms, redraw after 1 %% changed %.0f ms (then, unchanged, per part in ms: %s), cells %.0f px, grid %.0f px high", n, r.FirstMS, r.NextMS, r.Parts, r.Size, r.Height)
	if r.Cells != n || r.Arrows != 50 || r.Size < minSize || r.Height > 900 {
		t.Errorf("at %d hosts: %+v (want %d cells of %.0f px or more, 50 arrows, a grid within one screen)", n, r, n, minSize)
	}
	if r.Changed != n/100 || r.Reused != n-n/100 {
		t.Errorf("at %d hosts, the redraw after a claim drew %d changed cells anew with their new fill and kept %d others, want %d and %d", n, r.Changed, r.Reused, n/100, n-n/100)
	}
	// A click on a cell selects its host: the detail panel shows it.
	sel := fmt.Sprintf("h%04d", n/2+1)
	if _, err := chromedp.Run(tctx, chromedp.Click(chromedp.CSS(`#grid g.host[data-host="`+sel+`"] rect.cell`))); err != nil {
		t.Fatalf("clicking host %s in the grid: %v", sel, err)
	}
	shown, err := chromedp.Run(tctx, chromedp.TextContent(chromedp.CSS("#detail h3")))
	if err != nil {
		t.Fatalf("reading the detail panel after a click on %s: %v", sel, err)
	}
	if shown != sel {
		t.Errorf("after a click on %s's cell the detail panel shows %q", sel, shown)
	}
	// The draw times are figures, not a bound: on a loaded machine (load
	// 40 seen) a redraw took 2.3 s; the page's
	// cost is measured by BenchmarkUIBuild and this log line.
	if png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100)); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(t.ArtifactDir(), fmt.Sprintf("webview-%d.png", n)), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkMetrics scrapes /metrics after TestWebView's sequence: the mover
// moved, h02 disabled, h03 drained (enabled: the hosts still enabled);
// then a recommended rebalance plan's gauges.
func checkMetrics(t *testing.T, admin *api, placed map[string][]records.Flavor, enabled []string) {
	t.Helper()
	base, token := admin.base, admin.token
	if res, err := http.Get(base + "/metrics"); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token: %v %v, want 401", res.Status, err)
	} else {
		res.Body.Close()
	}
	text := scrape(t, base, token)
	want := func(name, labels string, v float64) {
		t.Helper()
		got, ok := gaugeValue(text, name, labels)
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
	want("keel_plans", `purpose="drain",state="running"`, 0)
	// Imbalance over the enabled hosts.
	var xs []float64
	for _, h := range enabled {
		used := placement.Resources{}
		for _, f := range placed[h] {
			used = used.Add(f.Resources())
		}
		xs = append(xs, float64(used[placement.MemoryMB])/float64(131072-512))
	}
	mean, ss := 0.0, 0.0
	for _, x := range xs {
		mean += x / float64(len(xs))
	}
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	want("keel_imbalance_cv", `resourcetype="MEMORY_MB"`, math.Sqrt(ss/float64(len(xs)))/mean)

	// A recommended plan (stored, not started): its moves are all left.
	moves := []records.PlanMove{{Instance: "00000000-0000-4000-8000-000000000001", Source: "h01", Dest: "h03", RAMMB: 2048},
		{Instance: "00000000-0000-4000-8000-000000000002", Source: "h01", Dest: "h04", RAMMB: 512}}
	var created struct {
		Plan struct {
			ID int64 `json:"id"`
		} `json:"plan"`
	}
	admin.do("POST", "/keel/v1/plans", map[string]any{"rebalance": map[string]any{"moves": moves}}, &created, http.StatusCreated)
	text = scrape(t, base, token)
	l := fmt.Sprintf(`plan="%d",purpose="rebalance"`, created.Plan.ID)
	want("keel_plans", `purpose="rebalance",state="recommended"`, 1)
	want("keel_plan_moves", l+`,state="left"`, 2)
	want("keel_plan_moves", l+`,state="done"`, 0)
	want("keel_plan_memory_remaining_bytes", l, (2048+512)<<20)
	want("keel_plan_memory_copied_bytes", l, 0)
	if _, ok := gaugeValue(text, "keel_plan_eta_seconds", l); ok {
		t.Errorf("a plan not started has an ETA:\n%s", grep(text, "keel_plan"))
	}
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
	// The tokens live long enough for the requests below at a load of 50;
	// the streams end when they do, however late the test reads them.
	const ttl = 6 * time.Second
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2, Config: func(c *config.Config) { c.API.TokenTTL = ttl }})
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
	issued := time.Now()
	admin := login(t, base, "admin", cloud.Password)
	demo := login(t, base, "demo", cloud.Passwords["demo"])
	// A plan (recommended): admins see plans, members never.
	admin.do("POST", "/keel/v1/plans", map[string]any{"rebalance": map[string]any{"moves": []records.PlanMove{
		{Instance: "00000000-0000-4000-8000-000000000001", Source: "h01", Dest: "h02", RAMMB: 512}}}}, nil, http.StatusCreated)
	adminEvents, demoEvents := open(admin), open(demo)
	id := demo.boot("streamed", "1", "")

	// Each stream until its token expires (ttl after login).
	waitCtx := testenv.Context(t)
	collect := func(ch <-chan [2]string) (names []string, all string) {
		for {
			select {
			case ev, ok := <-ch:
				if !ok {
					return names, all
				}
				names = append(names, ev[0])
				all += ev[0] + " " + ev[1] + "\n"
			case <-waitCtx.Done():
				t.Fatalf("the stream did not end with its token (%s after login): %v", time.Since(issued).Round(time.Millisecond), names)
			}
		}
	}
	dn, dall := collect(demoEvents)
	an, aall := collect(adminEvents)
	if took := time.Since(issued); took < ttl {
		t.Errorf("the streams ended %s after login, before their tokens expired (%s)", took, ttl)
	} else {
		t.Logf("the streams ended %s after login (tokens expire after %s)", took.Round(time.Millisecond), ttl)
	}
	if dn[0] != "hello" || dn[len(dn)-1] != "expired" || slices.Contains(dn, "hosts") || slices.Contains(dn, "plans") {
		t.Errorf("demo's events: %v (want hello first, expired last, no hosts, no plans)", dn)
	}
	if strings.Contains(dall, `"plan`) || strings.Contains(dall, "rebalance") {
		t.Errorf("demo's stream carries plans:\n%s", dall)
	}
	if !slices.Contains(an, "plans") || !strings.Contains(aall, `"purpose":"rebalance","state":"recommended"`) {
		t.Errorf("admin's stream lacks the recommended plan: %v\n%s", an, aall)
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

// checkColourByMeasured switches the grid to measured CPU: every tile
// then takes its host's measured CPU (the ui state's hosts[].measured, as
// the agents report it) and its colour, and at least one host's colour
// differs from its claims'; switched back, every tile is coloured by its
// claims again.
func checkColourByMeasured(t *testing.T, ctx context.Context, admin *api, wantFill map[string]float64) {
	t.Helper()
	type tile struct {
		Host, By, Value, Colour string
	}
	tiles := `[...document.querySelectorAll("#grid g.host")].map(g => ({
		Host: g.dataset.host, By: document.querySelector("#grid").dataset.by, Value: g.dataset.value, Colour: g.dataset.colour}))`
	awaitingNow(t, "a click on the grid's \"measured CPU\" toggle")
	if err := click(ctx, `#colourby button[data-by="measured"]`); err != nil {
		t.Fatalf("clicking the measured CPU toggle: %v", err)
	}
	near := func(c string, v float64) bool { return c == colour(v) || c == colour(v-5e-5) || c == colour(v+5e-5) }
	type uiState struct {
		Hosts []struct {
			Name     string `json:"name"`
			Measured *struct {
				CPUPercent float64 `json:"cpu_percent"`
			} `json:"measured"`
		} `json:"hosts"`
	}
	// The tiles against the ui state read at the same time (a report may
	// land between the two: read both again until they agree).
	got := evalPoll(t, ctx, "every tile coloured by its measured CPU, as the ui state has it", tiles, 5*time.Second, func(ts []tile) bool {
		if len(ts) != 4 {
			return false
		}
		var st uiState
		admin.do("GET", "/keel/v1/ui/state", nil, &st, http.StatusOK)
		for _, c := range ts {
			v, err := strconv.ParseFloat(c.Value, 64)
			if c.By != "measured" || err != nil || v < 0 || v > 1 || !near(c.Colour, v) {
				return false
			}
			for _, h := range st.Hosts {
				if h.Name == c.Host && (h.Measured == nil || math.Abs(h.Measured.CPUPercent-v) > 1e-3) {
					awaitingNow(t, fmt.Sprintf("every tile's measured CPU as the ui state has it (last: host %s's tile shows %s, the state %+v)", c.Host, c.Value, h.Measured))
					return false
				}
			}
		}
		return true
	})
	differs := false
	for _, c := range got {
		if c.Colour != colour(wantFill[c.Host]) {
			differs = true
		}
	}
	if !differs {
		t.Errorf("tiles by measured CPU %+v: every colour is its claims' (%v): the toggle shows nothing new", got, wantFill)
	}
	awaitingNow(t, "a click on the grid's \"claims\" toggle")
	if err := click(ctx, `#colourby button[data-by="claims"]`); err != nil {
		t.Fatalf("clicking the claims toggle: %v", err)
	}
	evalPoll(t, ctx, "every tile coloured by its claims again", tiles, 5*time.Second, func(ts []tile) bool {
		for _, c := range ts {
			if c.By != "claims" || c.Colour != colour(wantFill[c.Host]) {
				return false
			}
		}
		return len(ts) == 4
	})
}

// click clicks the element sel names once it is visible, waiting as long
// as ctx (the test's time) allows.
func click(ctx context.Context, sel string) error {
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
		return fmt.Errorf("clicking %s: %w", sel, err)
	}
	return nil
}
