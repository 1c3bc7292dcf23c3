package scheduler

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"keel/internal/clock"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
	"keel/internal/testenv"
)

// The differential test runs Nova 26's own filters and weighers (Debian's
// python3-nova, through testdata/nova_oracle.py) and keel's scheduler on
// the same seeded random host states and requests, and requires the same
// passing hosts, the same order and the same weights (within 1e-9).
//
// keel builds its host view from claims; Nova's HostState from the
// compute_nodes rows. The test sets the weigher fields of keel's HostStates
// directly (free RAM and disk, vCPUs, I/O ops, instances, failed builds),
// so both rank the same view.

// diffHost is one host as both sides see it (the oracle's JSON).
type diffHost struct {
	Host               string              `json:"host"`
	FreeRAMMB          int64               `json:"free_ram_mb"`
	FreeDiskMB         int64               `json:"free_disk_mb"`
	VCPUsTotal         int64               `json:"vcpus_total"`
	VCPUsUsed          int64               `json:"vcpus_used"`
	CPUAllocationRatio float64             `json:"cpu_allocation_ratio"`
	NumIOOps           int64               `json:"num_io_ops"`
	NumInstances       int64               `json:"num_instances"`
	FailedBuilds       int64               `json:"failed_builds"`
	Disabled           bool                `json:"disabled"`
	ForcedDown         bool                `json:"forced_down"`
	LastSeenUp         int64               `json:"last_seen_up"` // Unix seconds
	Aggregates         []map[string]string `json:"aggregates"`
	Instances          []string            `json:"instances"`
	// Metrics are the host's measured values (compute_nodes.metrics).
	Metrics map[string]float64 `json:"metrics,omitempty"`
}

// diffMetrics are the case's [metrics] options (MetricsWeigher's).
type diffMetrics struct {
	WeightSetting       []string `json:"weight_setting"`
	Required            bool     `json:"required"`
	WeightOfUnavailable float64  `json:"weight_of_unavailable"`
}

type diffGroup struct {
	UUID    string         `json:"uuid"`
	Policy  string         `json:"policy"`
	Members []string       `json:"members"`
	Hosts   []string       `json:"hosts"`
	Rules   map[string]int `json:"rules,omitempty"`
}

type diffRequest struct {
	InstanceUUID string              `json:"instance_uuid"`
	Zone         string              `json:"availability_zone,omitempty"`
	ExtraSpecs   map[string]string   `json:"extra_specs"`
	Group        *diffGroup          `json:"group,omitempty"`
	Hints        map[string][]string `json:"hints,omitempty"`
}

type diffCase struct {
	Options         map[string]float64 `json:"options"`
	ServiceDownTime int                `json:"service_down_time"`
	Now             int64              `json:"now"`
	Filters         []string           `json:"filters"`
	Weighers        []string           `json:"weighers"`
	Hosts           []diffHost         `json:"hosts"`
	Request         diffRequest        `json:"request"`
	Metrics         *diffMetrics       `json:"metrics,omitempty"`
}

type diffAnswer struct {
	ImportError string               `json:"import_error"`
	Error       string               `json:"error"`
	Passed      []string             `json:"passed"`
	Weighed     [][2]json.RawMessage `json:"weighed"`
}

// novaFilters and novaWeighers are what the oracle runs.
var (
	novaFilters = []string{"ComputeFilter", "AvailabilityZoneFilter", "ServerGroupAffinityFilter",
		"ServerGroupAntiAffinityFilter", "SameHostFilter", "DifferentHostFilter", "NumInstancesFilter",
		"IoOpsFilter", "AggregateInstanceExtraSpecsFilter"}
	novaWeighers = []string{"RAMWeigher", "CPUWeigher", "DiskWeigher", "IoOpsWeigher", "BuildFailureWeigher",
		"ServerGroupSoftAffinityWeigher", "ServerGroupSoftAntiAffinityWeigher", "MetricsWeigher"}
)

// weigherOption is a weigher's multiplier option, read from the registry.
func weigherOption(name string) string {
	return weigherTable[weigherSlot(name)].Multiplier.Name
}

// aggregateOption is the aggregate metadata key of a weigher's multiplier.
func aggregateOption(name string) string {
	return weigherTable[weigherSlot(name)].Multiplier.aggregateKey()
}

// oracle is one python process serving every case.
type oracle struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startOracle(t *testing.T) *oracle {
	t.Helper()
	testenv.External(t, "Nova 26's scheduler (Debian's python3-nova)")
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s is missing: install Debian's python3 and python3-nova (apt-get install python3-nova)", python)
	}
	cmd := exec.Command(python, "-W", "ignore", "testdata/nova_oracle.py")
	cmd.Stderr = io.Discard // Nova logs warnings (deprecated filter, hosts down)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the Nova oracle: %v", err)
	}
	o := &oracle{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	o.out.Buffer(make([]byte, 1<<20), 64<<20)
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait()
	})
	return o
}

func (o *oracle) ask(t *testing.T, c diffCase, seed uint64) diffAnswer {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.in.Write(append(b, '\n')); err != nil {
		t.Fatalf("writing to the Nova oracle: %v", err)
	}
	if !o.out.Scan() {
		t.Fatalf("the Nova oracle stopped answering: %v", o.out.Err())
	}
	var a diffAnswer
	if err := json.Unmarshal(o.out.Bytes(), &a); err != nil {
		t.Fatalf("decoding the Nova oracle's answer %q: %v", o.out.Text(), err)
	}
	if a.ImportError != "" {
		t.Fatalf("python3-nova is not importable (apt-get install python3-nova): %s", a.ImportError)
	}
	if a.Error != "" {
		t.Fatalf("Nova failed on the case (KEEL_DIFF_SEED=%d): %s\ncase: %s", seed, a.Error, caseText(c))
	}
	return a
}

// TestNovaDifferential compares keel's filters and weighers with Nova's on
// random cases.
func TestNovaDifferential(t *testing.T) {
	start := time.Now()
	o := startOracle(t)
	// A fixed seed replays the same cases in every run; KEEL_DIFF_SEED=N
	// replays another set, KEEL_DIFF_SEED=random draws one (printed).
	seed := uint64(20261130)
	switch s := os.Getenv("KEEL_DIFF_SEED"); s {
	case "":
	case "random":
		seed = uint64(time.Now().UnixNano())
	default:
		if _, err := fmt.Sscan(s, &seed); err != nil {
			t.Fatalf("KEEL_DIFF_SEED=%q: want a number or random", s)
		}
	}
	r := rand.New(rand.NewPCG(seed, 4))
	const cases = 2000
	var hostsSeen, passedSeen, weighedCases, nearTies int
	for i := 0; i < cases; i++ {
		c := randomCase(r, i)
		hostsSeen += len(c.Hosts)
		want := o.ask(t, c, seed)
		got := keelRun(t, c)
		passedSeen += len(want.Passed)
		if len(want.Passed) > 1 {
			weighedCases++
		}
		nt, err := compareRuns(c, want, got)
		if err != nil {
			t.Fatalf("case %d (rerun with KEEL_DIFF_SEED=%d): %v\ncase: %s", i, seed, err, caseText(c))
		}
		nearTies += nt
	}
	t.Logf("Nova differential: %d cases (%d with 2+ hosts to weigh), %d hosts, %d passed the filters, %d rank positions among weights equal within 1e-9, seed %d, %s",
		cases, weighedCases, hostsSeen, passedSeen, nearTies, seed, time.Since(start).Round(time.Millisecond))
	fmt.Printf("nova differential: %d cases agreed in %s (seed %d)\n", cases, time.Since(start).Round(time.Millisecond), seed)
}

// caseText is a case's JSON, shortened for a failure message.
func caseText(c diffCase) string {
	b, _ := json.Marshal(c)
	if len(b) > 3000 {
		return string(b[:3000]) + "…"
	}
	return string(b)
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// randomCase draws hosts and a request. Values come from small sets so
// that ties, empty ranges and boundary values (at the I/O and instance
// limits, service_down_time exactly) are common.
func randomCase(r *rand.Rand, i int) diffCase {
	now := int64(1_800_000_000)
	c := diffCase{Now: now, ServiceDownTime: pick(r, 60, 30, 180), Options: map[string]float64{},
		Filters: []string{}, Weighers: []string{}} // sometimes none of either
	for _, f := range novaFilters {
		if r.IntN(3) > 0 {
			c.Filters = append(c.Filters, f)
		}
	}
	r.Shuffle(len(c.Filters), func(a, b int) { c.Filters[a], c.Filters[b] = c.Filters[b], c.Filters[a] })
	for _, w := range novaWeighers {
		if r.IntN(4) > 0 {
			c.Weighers = append(c.Weighers, w)
			m := pick(r, 1.0, 1.0, -1.0, 0.0, 2.5, 0.5, -3.0, 1000000.0, 10.0)
			if strings.HasPrefix(w, "ServerGroupSoft") {
				m = math.Abs(m) // nova.conf (and keel's) minimum is 0
			}
			c.Options[weigherOption(w)] = m
		}
	}
	c.Options["max_instances_per_host"] = float64(pick(r, 50, 5, 10))
	c.Options["max_io_ops_per_host"] = float64(pick(r, 8, 2, 4))

	// Aggregates of this case: some set an availability zone.
	type agg map[string]string
	aggs := []agg{}
	for k := r.IntN(4); k > 0; k-- {
		a := agg{}
		if r.IntN(2) == 0 {
			a["availability_zone"] = pick(r, "az1", "az2", "nova")
		}
		if r.IntN(2) == 0 {
			a["ssd"] = pick(r, "true", "false")
		}
		if r.IntN(2) == 0 {
			a["gpus"] = pick(r, "1", "2", "4", "0.5")
		}
		if r.IntN(2) == 0 {
			a["hv"] = pick(r, "kvm", "qemu", "kvm, qemu", "xen,kvm")
		}
		if r.IntN(3) == 0 {
			a["tier"] = pick(r, "gold", "silver", "bronze iron")
		}
		// Per-aggregate weigher multipliers (Nova reads the smallest of a
		// host's values; any value that is not a number voids them all).
		if i%4 == 0 && r.IntN(2) == 0 {
			w := pick(r, novaWeighers...)
			m := pick(r, "2.0", "0", "-1.5", " 3 ", "0.25", "1e2", "x", "1,2")
			if strings.HasPrefix(w, "ServerGroupSoft") && strings.HasPrefix(m, "-") {
				m = "1.5"
			}
			a[aggregateOption(w)] = m
		}
		aggs = append(aggs, a)
	}
	n := 1 + r.IntN(30)
	if i%97 == 0 {
		n = rankedMin + r.IntN(200) // keel's threshold walk over the rank orders
	}
	pool := make([]string, 12)
	for k := range pool {
		pool[k] = fmt.Sprintf("00000000-0000-4000-8000-%012d", k+1)
	}
	levels := 1 + r.IntN(6)
	for k := 0; k < n; k++ {
		h := diffHost{
			Host:               fmt.Sprintf("h%04d", k),
			FreeRAMMB:          int64(r.IntN(levels)*16384 - pick(r, 0, 0, 0, 2048)),
			FreeDiskMB:         int64(r.IntN(levels) * 102400),
			VCPUsTotal:         int64(pick(r, 8, 16, 32)),
			VCPUsUsed:          int64(r.IntN(levels) * 6),
			CPUAllocationRatio: pick(r, 1.0, 1.5, 4.0, 16.0),
			NumIOOps:           int64(pick(r, 0, 0, 0, 1, 1, 2, 3, 4, 8)),
			NumInstances:       int64(pick(r, 0, 0, 1, 1, 2, 3, 4, 5, 9, 10, 49, 50)),
			Disabled:           r.IntN(10) == 0,
			ForcedDown:         r.IntN(30) == 0,
			LastSeenUp:         now - int64(pick(r, 0, 0, 5, 5, 10, 30, 30, 59, 60, 61, 179, 180, 181, 400, -30, -61, -200)),
			Aggregates:         []map[string]string{},
			Instances:          []string{},
		}
		if r.IntN(5) == 0 {
			h.FailedBuilds = int64(1 + r.IntN(3))
		}
		for _, a := range aggs {
			if r.IntN(2) == 0 {
				h.Aggregates = append(h.Aggregates, a)
			}
		}
		c.Hosts = append(c.Hosts, h)
	}
	if slices.Contains(c.Weighers, "MetricsWeigher") {
		addMetrics(r, &c)
	}
	// Each pooled instance lives on at most one host.
	for _, u := range pool {
		if r.IntN(3) > 0 {
			h := &c.Hosts[r.IntN(n)]
			h.Instances = append(h.Instances, u)
		}
	}
	req := diffRequest{InstanceUUID: "ffffffff-0000-4000-8000-000000000000", ExtraSpecs: map[string]string{}}
	req.Zone = pick(r, "", "", "", "", "az1", "az2", "nova")
	for k := pick(r, 0, 0, 1, 1, 2, 3); k > 0; k-- {
		kv := pick(r,
			[2]string{"ssd", pick(r, "true", "false", "s== true")},
			[2]string{"aggregate_instance_extra_specs:gpus", pick(r, ">= 2", "= 1", "== 4", "!= 2", "<= 1", "2", "=")},
			[2]string{"aggregate_instance_extra_specs:hv", pick(r, "<in> kvm", "<all-in> kvm qemu", "<or> xen <or> qemu", "s< l", "s>= qemu", "kvm, qemu")},
			[2]string{"tier", pick(r, "<or> gold <or> silver", "<or> bronze", "gold", "s!= gold", "<in> iron")},
			[2]string{"hw:cpu_policy", "dedicated"},
			[2]string{"capabilities:cpu_info", "x86"},
		)
		req.ExtraSpecs[kv[0]] = kv[1]
	}
	if r.IntN(2) == 0 {
		g := &diffGroup{UUID: "eeeeeeee-0000-4000-8000-000000000000", Members: []string{}, Hosts: []string{},
			Policy: pick(r, "affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity")}
		for _, u := range pool {
			if r.IntN(2) == 0 {
				g.Members = append(g.Members, u)
			}
		}
		if g.Policy == "anti-affinity" && r.IntN(2) == 0 {
			g.Rules = map[string]int{"max_server_per_host": 1 + r.IntN(3)}
		}
		for _, h := range c.Hosts {
			for _, u := range h.Instances {
				if slices.Contains(g.Members, u) && !slices.Contains(g.Hosts, h.Host) {
					g.Hosts = append(g.Hosts, h.Host)
				}
			}
		}
		req.Group = g
	}
	for _, hint := range []string{"same_host", "different_host"} {
		if r.IntN(4) == 0 {
			uuids := []string{pick(r, pool...)}
			if r.IntN(3) == 0 {
				uuids = append(uuids, pick(r, pool...))
			}
			if req.Hints == nil {
				req.Hints = map[string][]string{}
			}
			req.Hints[hint] = uuids
		}
	}
	c.Request = req
	return c
}

// addMetrics gives a case with MetricsWeigher its [metrics] options and
// the hosts their measured values: some hosts lack some metrics (required
// then false: Nova raises ComputeHostMetricNotFound otherwise), ratios
// include 0, values repeat so ties are common.
func addMetrics(r *rand.Rand, c *diffCase) {
	names := []string{"cpu.percent", "cpu.idle.percent", "cpu.user.percent", "cpu.frequency"}
	m := &diffMetrics{WeightOfUnavailable: pick(r, -10000.0, -1.0, 0.0, 5.0)}
	for _, n := range names {
		if r.IntN(2) == 0 {
			m.WeightSetting = append(m.WeightSetting, fmt.Sprintf("%s=%s", n, pick(r, "1.0", "-1.0", "0", "2.5", "-0.5")))
		}
	}
	if len(m.WeightSetting) == 0 {
		m.WeightSetting = []string{"cpu.percent=-1.0"}
	}
	missing := false
	for k := range c.Hosts {
		h := &c.Hosts[k]
		h.Metrics = map[string]float64{}
		for _, n := range names {
			if r.IntN(8) == 0 {
				missing = true
				continue
			}
			v := pick(r, 0.0, 0.1, 0.25, 0.29, 0.5, 0.57, 0.75, 1.0) // 0.29 weighs 28 in Nova
			if n == "cpu.frequency" {
				v = pick(r, 2400.0, 3000.0)
			}
			h.Metrics[n] = v
		}
	}
	m.Required = !missing && r.IntN(2) == 0
	c.Metrics = m
}

// nopSource is a store with nothing in it and no changes: the test builds
// the view's hosts itself.
type nopSource struct{}

func (nopSource) ProviderSummaries(context.Context, []string) ([]store.ProviderSummary, error) {
	return nil, nil
}
func (nopSource) ListHostRecords(context.Context) ([]records.HostRecord, error) { return nil, nil }
func (nopSource) GetHostRecord(context.Context, string) (records.HostRecord, error) {
	return records.HostRecord{}, store.ErrNotFound
}
func (nopSource) ListServices(context.Context) ([]records.Service, error) { return nil, nil }
func (nopSource) GetService(context.Context, string) (records.Service, error) {
	return records.Service{}, store.ErrNotFound
}
func (nopSource) Changes(context.Context, int64, int) ([]store.Change, error) { return nil, nil }
func (nopSource) LastChange(context.Context) (int64, error)                   { return 0, nil }
func (nopSource) ListAggregates(context.Context) ([]records.Aggregate, error) { return nil, nil }

type keelResult struct {
	passed []string
	ranked []string
	weight map[string]float64
	tried  []string // Select's claims, in order
}

// keelRun builds keel's view and request from the case and runs Explain
// (every host's fate and weight) and Select (the fast path's order).
func keelRun(t *testing.T, c diffCase) keelResult { return keelRunWith(t, c, nil) }

// keelRunWith is keelRun with a last change to the scheduler's config.
func keelRunWith(t *testing.T, c diffCase, tweak func(*Config)) keelResult {
	t.Helper()
	ctx := context.Background()
	v := &View{src: nopSource{}, byName: map[string]*HostState{}, byUUID: map[string]*HostState{}}
	instanceHost := map[string]string{}
	byHost := map[string][]map[string]string{}
	for _, dh := range c.Hosts {
		h := &HostState{
			Name: dh.Host, ProviderUUID: "rp-" + dh.Host, Zone: "nova",
			HasService: true, Disabled: dh.Disabled, ForcedDown: dh.ForcedDown,
			LastSeenUp: time.Unix(dh.LastSeenUp, 0),
			FreeRAMMB:  dh.FreeRAMMB, FreeDiskMB: dh.FreeDiskMB, VCPUsTotal: dh.VCPUsTotal, VCPUsUsed: dh.VCPUsUsed,
			CPUAllocationRatio: dh.CPUAllocationRatio, NumIOOps: dh.NumIOOps, NumInstances: dh.NumInstances,
			FailedBuilds: dh.FailedBuilds,
		}
		if dh.Metrics != nil {
			h.HasRecord = true
			h.Record.Host = dh.Host
			for _, n := range slices.Sorted(maps.Keys(dh.Metrics)) {
				h.Record.Metrics = append(h.Record.Metrics, records.Metric{Name: n, Value: dh.Metrics[n], Timestamp: time.Unix(c.Now, 0)})
			}
		}
		v.add(h)
		byHost[dh.Host] = dh.Aggregates
		for _, u := range dh.Instances {
			instanceHost[u] = dh.Host
		}
	}
	v.setAggregates(byHost) // as loadAggregates does
	cfg := DefaultConfig()
	cfg.EnabledFilters = c.Filters
	cfg.Weighers = c.Weighers
	cfg.MaxAttempts = 4
	cfg.ServiceDownTime = time.Duration(c.ServiceDownTime) * time.Second
	for name, x := range c.Options { // the case names nova.conf options, as the registry
		cfg.Options[name] = x
	}
	if m := c.Metrics; m != nil {
		ws, err := ParseWeightSetting(m.WeightSetting)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Metrics = MetricsConfig{WeightSetting: ws, Required: m.Required, WeightOfUnavailable: m.WeightOfUnavailable}
	}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := New(cfg, v, clock.NewVirtual(time.Unix(c.Now, 0)), rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	req := &Request{InstanceUUID: c.Request.InstanceUUID, Resources: placement.Resources{},
		ExtraSpecs: c.Request.ExtraSpecs, Zone: c.Request.Zone}
	if g := c.Request.Group; g != nil {
		req.Group = &Group{Policy: g.Policy, Members: map[string]int{}, MaxServerPerHost: g.Rules["max_server_per_host"]}
		for _, u := range g.Members {
			if h, ok := instanceHost[u]; ok {
				req.Group.Members[h]++
			}
		}
	}
	hostsOf := func(uuids []string) []string {
		out := []string{}
		for _, u := range uuids {
			if h, ok := instanceHost[u]; ok && !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
		return out
	}
	if u, ok := c.Request.Hints["same_host"]; ok {
		req.SameHost = hostsOf(u)
	}
	if u, ok := c.Request.Hints["different_host"]; ok {
		req.DifferentHost = hostsOf(u)
	}
	exp, err := s.Explain(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	res := keelResult{weight: map[string]float64{}}
	ranked := make([]string, exp.Candidates)
	for _, h := range exp.Hosts {
		if h.RejectedBy == "" {
			res.passed = append(res.passed, h.Host)
			res.weight[h.Host] = h.Weight
			ranked[h.Rank-1] = h.Host
		}
	}
	res.ranked = ranked
	_, err = s.Select(ctx, req, func(_ context.Context, cand Candidate) (int64, error) {
		res.tried = append(res.tried, cand.Host)
		return 0, &placement.ConflictError{Kind: placement.ProviderGeneration}
	})
	if len(res.passed) > 0 && !IsNoValidHost(err) {
		t.Fatalf("Select: want NoValidHost after refused claims, got %v", err)
	}
	return res
}

// compareRuns checks keel's answer against Nova's. Hosts whose weights are
// equal within 1e-9 may come in either order (both sides break exact ties
// by host name; a last-bit difference in how the sums round can separate
// them on one side only); it returns how many rank positions that allowed.
func compareRuns(c diffCase, want diffAnswer, got keelResult) (int, error) {
	if fmt.Sprint(want.Passed) != fmt.Sprint(got.passed) {
		return 0, fmt.Errorf("filters: Nova passes %v, keel %v", want.Passed, got.passed)
	}
	if len(want.Weighed) != len(got.ranked) {
		return 0, fmt.Errorf("weighed %d hosts in Nova, %d in keel", len(want.Weighed), len(got.ranked))
	}
	names := make([]string, len(want.Weighed))
	weights := make([]float64, len(want.Weighed))
	for k, pair := range want.Weighed {
		if err := json.Unmarshal(pair[0], &names[k]); err != nil {
			return 0, err
		}
		if err := json.Unmarshal(pair[1], &weights[k]); err != nil {
			return 0, err
		}
		kw := got.weight[names[k]]
		if math.Abs(kw-weights[k]) > 1e-9 {
			return 0, fmt.Errorf("host %s: Nova weighs %.12g, keel %.12g", names[k], weights[k], kw)
		}
	}
	near := 0
	for k := range names {
		if names[k] == got.ranked[k] {
			continue
		}
		// Allowed only inside a run of weights equal within 1e-9.
		if math.Abs(got.weight[got.ranked[k]]-weights[k]) > 1e-9 {
			return 0, fmt.Errorf("rank %d: Nova has %s (%.12g), keel %s (%.12g); Nova's order %v, keel's %v",
				k+1, names[k], weights[k], got.ranked[k], got.weight[got.ranked[k]], names, got.ranked)
		}
		near++
	}
	// Select's fast path tries the same hosts, in the same order, as the
	// ranking (Nova picks the first with host_subset_size = 1): all
	// host_subset_size (1) + max_attempts (4) of them while the store
	// refuses.
	n := min(len(got.ranked), 5)
	if fmt.Sprint(got.tried) != fmt.Sprint(got.ranked[:n]) {
		a, b := append([]string(nil), got.tried...), append([]string(nil), got.ranked[:n]...)
		sort.Strings(a)
		sort.Strings(b)
		if near == 0 || strings.Join(a, ",") != strings.Join(b, ",") {
			return 0, fmt.Errorf("Select tried %v, the ranking starts %v", got.tried, got.ranked[:n])
		}
	}
	return near, nil
}

// TestNumInstancesWeigherFormula checks NumInstancesWeigher (Nova 28+, so
// not in the Nova 26 oracle) against its formula: multiplier ×
// (n − min)/(max − min) over the candidates' instance counts, 0 for all
// when they are equal.
func TestNumInstancesWeigherFormula(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 200; trial++ {
		c := diffCase{Now: 1_800_000_000, ServiceDownTime: 60, Options: map[string]float64{"max_instances_per_host": 50, "max_io_ops_per_host": 8}}
		n := 2 + r.IntN(12)
		counts := make([]int64, n)
		for k := range counts {
			counts[k] = int64(r.IntN(4) * 7)
			c.Hosts = append(c.Hosts, diffHost{Host: fmt.Sprintf("h%02d", k), NumInstances: counts[k], LastSeenUp: c.Now, VCPUsTotal: 8, CPUAllocationRatio: 1})
		}
		mult := pick(r, 1.0, -1.0, 2.5, -0.5)
		lo, hi := slices.Min(counts), slices.Max(counts)
		c.Weighers = []string{"NumInstancesWeigher"}
		got := keelRunWith(t, c, func(cfg *Config) { cfg.Options["num_instances_weight_multiplier"] = mult })
		for k, h := range c.Hosts {
			want := 0.0
			if hi > lo {
				want = mult * float64(counts[k]-lo) / float64(hi-lo)
			}
			if math.Abs(got.weight[h.Host]-want) > 1e-12 {
				t.Fatalf("trial %d host %s (%d instances, range %d..%d, multiplier %g): weight %g, want %g",
					trial, h.Host, counts[k], lo, hi, mult, got.weight[h.Host], want)
			}
		}
		for k := 1; k < len(got.ranked); k++ {
			if got.weight[got.ranked[k]] > got.weight[got.ranked[k-1]] {
				t.Fatalf("trial %d: ranked %v out of weight order", trial, got.ranked)
			}
		}
	}
}
