package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
)

// measure writes a host's record with cpu.percent (a fraction) measured
// now, and the instances it measured (uuid → CPUs busy).
func (c *cloud) measure(t *testing.T, host string, cpu float64, at time.Time, insts map[string]float64) {
	t.Helper()
	rec := records.HostRecord{Host: host, ProviderUUID: "rp-" + host,
		Metrics: []records.Metric{
			{Name: records.MetricCPUPercent, Value: cpu, Timestamp: at, Source: "test"},
			{Name: records.MetricCPUIdlePercent, Value: 1 - cpu, Timestamp: at, Source: "test"},
		}}
	for u, busy := range insts {
		rec.InstanceUsage = append(rec.InstanceUsage, records.InstanceUsage{UUID: u, VCPUsBusy: busy, Timestamp: at})
	}
	if err := c.st.PutHostRecord(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
}

func metricsConfig() Config {
	cfg := DefaultConfig()
	cfg.Weighers = []string{"MetricsWeigher"}
	cfg.Metrics.WeightSetting = []MetricWeight{{Name: records.MetricCPUPercent, Ratio: -1}}
	return cfg
}

// TestClaimAdjustsMeasuredLoad is keel's fix for MetricsWeigher's
// staleness: under the claim policy, consecutive boots see each other's
// expected load at once, so they spread by measured CPU; under legacy
// (Nova) every boot goes to the host that measured idlest.
func TestClaimAdjustsMeasuredLoad(t *testing.T) {
	for _, tc := range []struct {
		policy Policy
		want   string
	}{
		{PolicyLegacy, "h01 h01 h01 h01"},
		{PolicyClaim, "h01 h02 h01 h03"}, // 22.5 % vs 20 %, then 32.5 vs 22.5 vs 30, …
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			c := newCloud(t, 3)
			now := c.clk.Now()
			// 32 CPUs each: 10 %, 20 %, 30 % busy.
			c.measure(t, "h01", 0.10, now, nil)
			c.measure(t, "h02", 0.20, now, nil)
			c.measure(t, "h03", 0.30, now, nil)
			s := c.scheduler(t, metricsConfig(), tc.policy, 1)
			var got []string
			for i := range 4 {
				// 4 vCPUs a boot, all busy by its flavor: 12.5 points.
				r := placement.Resources{placement.VCPU: 4, placement.MemoryMB: 1024, placement.DiskGB: 10}
				uuid := "vm" + string(rune('a'+i))
				sel, err := s.Select(context.Background(), &Request{InstanceUUID: uuid, Resources: r}, storeClaim(c.st, uuid, r))
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, sel.Host)
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("boots went to %v, want %s", got, tc.want)
			}
		})
	}
}

// TestAssumedLoadEndsWithTheMeasurementThatSeesIt: the adjustment lasts
// until a measurement lists the instance on its new host (and no longer on
// its source); a measurement taken before the arrival keeps it.
func TestAssumedLoadEndsWithTheMeasurementThatSeesIt(t *testing.T) {
	c := newCloud(t, 2)
	now := c.clk.Now()
	c.measure(t, "h01", 0.50, now, map[string]float64{"vm": 8})
	c.measure(t, "h02", 0.10, now, nil)
	s := c.scheduler(t, metricsConfig(), PolicyClaim, 1)
	r := placement.Resources{placement.VCPU: 8, placement.MemoryMB: 1024, placement.DiskGB: 10}
	sel, err := s.Select(context.Background(), &Request{InstanceUUID: "vm", Resources: r, IgnoreHosts: []string{"h01"}}, storeClaim(c.st, "vm", r))
	if err != nil || sel.Host != "h02" {
		t.Fatalf("move: %v %v", sel.Host, err)
	}
	cpu := func(host string) (records.Metric, bool) {
		if err := s.View().Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s.View().byName[host].MeasuredMetric(records.MetricCPUPercent, c.clk.Now(), time.Minute)
	}
	// Its measured 8 CPUs of 32: h02 +0.25, h01 credited −0.25.
	if m, _ := cpu("h02"); m.Value != 0.35 || m.Source != SourceClaim {
		t.Errorf("h02 after the claim: %+v, want 0.35 from keel.claim", m)
	}
	if m, _ := cpu("h01"); m.Value != 0.25 {
		t.Errorf("h01 after the claim: %+v, want 0.25", m)
	}
	c.clk.Advance(10 * time.Second)
	c.measure(t, "h02", 0.12, c.clk.Now(), nil) // still copying: not there yet
	if m, _ := cpu("h02"); m.Value != 0.37 {
		t.Errorf("h02 measured before the arrival: %v, want 0.12 + 0.25", m.Value)
	}
	c.clk.Advance(10 * time.Second)
	c.measure(t, "h02", 0.36, c.clk.Now(), map[string]float64{"vm": 8})
	c.measure(t, "h01", 0.26, c.clk.Now(), nil)
	if m, _ := cpu("h02"); m.Value != 0.36 || m.Source != "test" {
		t.Errorf("h02 measured with the instance: %+v, want 0.36 as measured", m)
	}
	if m, _ := cpu("h01"); m.Value != 0.26 {
		t.Errorf("h01 measured without the instance: %v, want 0.26", m.Value)
	}
}

// measureMem writes a host's record measured now with cpu.percent 0.5,
// keel.memory.total 32768 MiB and keel.memory.available avail, and the
// instances it measured (uuid → resident MiB, all idle).
func (c *cloud) measureMem(t *testing.T, host string, avail float64, at time.Time, insts map[string]int64) {
	t.Helper()
	rec := records.HostRecord{Host: host, ProviderUUID: "rp-" + host,
		Metrics: []records.Metric{
			{Name: records.MetricCPUPercent, Value: 0.5, Timestamp: at, Source: "test"},
			{Name: records.MetricMemoryTotal, Value: 32768, Timestamp: at, Source: "test"},
			{Name: records.MetricMemoryAvailable, Value: avail, Timestamp: at, Source: "test"},
		}}
	for u, mem := range insts {
		rec.InstanceUsage = append(rec.InstanceUsage, records.InstanceUsage{UUID: u, MemoryMB: mem, Timestamp: at})
	}
	if err := c.st.PutHostRecord(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
}

// TestClaimAdjustsMeasuredMemory: the host's memory as its kernel reports
// it (keel.memory.available) follows the claims as the CPU does — a boot
// takes its flavor's memory from its host at once, a move its measured
// resident memory from the destination and gives it back to the source —
// until measurements see the instance arrive and leave; an idle instance
// still measured on its source keeps the source's credit (a departure is
// not taken for an arrival), and weighing keel.memory.available spreads
// consecutive boots.
func TestClaimAdjustsMeasuredMemory(t *testing.T) {
	c := newCloud(t, 2)
	now := c.clk.Now()
	c.measureMem(t, "h01", 20000, now, map[string]int64{"vm": 6000})
	c.measureMem(t, "h02", 24000, now, nil)
	cfg := metricsConfig()
	cfg.Metrics.WeightSetting = []MetricWeight{{Name: records.MetricMemoryAvailable, Ratio: 1}}
	s := c.scheduler(t, cfg, PolicyClaim, 1)
	avail := func(host string) float64 {
		t.Helper()
		if err := s.View().Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		m, ok := s.View().byName[host].MeasuredMetric(records.MetricMemoryAvailable, c.clk.Now(), time.Minute)
		if !ok {
			t.Fatalf("%s: keel.memory.available unavailable", host)
		}
		return m.Value
	}
	// Two boots of 3000 MiB: h02 (24000 free) then h02 again (21000 >
	// 20000), then h01 (20000 > 18000).
	var got []string
	for i := range 3 {
		r := placement.Resources{placement.VCPU: 1, placement.MemoryMB: 3000, placement.DiskGB: 10}
		uuid := fmt.Sprint("boot", i)
		sel, err := s.Select(context.Background(), &Request{InstanceUUID: uuid, Resources: r}, storeClaim(c.st, uuid, r))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, sel.Host)
	}
	if strings.Join(got, " ") != "h02 h02 h01" {
		t.Errorf("boots weighed by keel.memory.available went to %v, want h02 h02 h01", got)
	}
	if a1, a2 := avail("h01"), avail("h02"); a1 != 17000 || a2 != 18000 {
		t.Errorf("after the boots: h01 %v, h02 %v MiB available, want 17000 and 18000", a1, a2)
	}
	// Move vm (6000 MiB resident, idle) to h02.
	r := placement.Resources{placement.VCPU: 1, placement.MemoryMB: 8192, placement.DiskGB: 10}
	if sel, err := s.Select(context.Background(), &Request{InstanceUUID: "vm", Resources: r, IgnoreHosts: []string{"h01"}}, storeClaim(c.st, "vm", r)); err != nil || sel.Host != "h02" {
		t.Fatalf("move: %v %v", sel.Host, err)
	}
	if a1, a2 := avail("h01"), avail("h02"); a1 != 23000 || a2 != 12000 {
		t.Errorf("after the move's claim: h01 %v, h02 %v MiB available, want 23000 and 12000", a1, a2)
	}
	// Still copying: h01 still measures vm (and the boot), h02 not yet.
	c.clk.Advance(10 * time.Second)
	c.measureMem(t, "h01", 17000, c.clk.Now(), map[string]int64{"vm": 6000, "boot2": 3000})
	c.measureMem(t, "h02", 18000, c.clk.Now(), map[string]int64{"boot0": 3000, "boot1": 3000})
	if a1, a2 := avail("h01"), avail("h02"); a1 != 23000 || a2 != 12000 {
		t.Errorf("measured while copying: h01 %v, h02 %v MiB available, want the move still assumed: 23000 and 12000", a1, a2)
	}
	// Landed: both measurements see it; nothing is assumed any more.
	c.clk.Advance(10 * time.Second)
	c.measureMem(t, "h01", 23100, c.clk.Now(), map[string]int64{"boot2": 3000})
	c.measureMem(t, "h02", 11900, c.clk.Now(), map[string]int64{"boot0": 3000, "boot1": 3000, "vm": 6000})
	if a1, a2 := avail("h01"), avail("h02"); a1 != 23100 || a2 != 11900 {
		t.Errorf("measured after the landing: h01 %v, h02 %v MiB available, want 23100 and 11900 as measured", a1, a2)
	}
}

// TestMetricsUnavailable: a measurement older than max_age is unavailable;
// with required it fails the decision naming host and metric, without it
// weighs weight_of_unavailable, and MetricFilter skips the host.
func TestMetricsUnavailable(t *testing.T) {
	c := newCloud(t, 2)
	c.measure(t, "h01", 0.90, c.clk.Now().Add(-2*time.Minute), nil) // busy, but stale
	c.measure(t, "h02", 0.95, c.clk.Now(), nil)
	r := small()
	req := func() *Request { return &Request{InstanceUUID: "x", Resources: r} }

	cfg := metricsConfig()
	s := c.scheduler(t, cfg, PolicyClaim, 1)
	if _, err := s.Select(context.Background(), req(), storeClaim(c.st, "x", r)); err == nil ||
		!strings.Contains(err.Error(), "metric cpu.percent of host h01 is unavailable") {
		t.Errorf("required: %v", err)
	}
	cfg.Metrics.Required = false
	s = c.scheduler(t, cfg, PolicyClaim, 1)
	exp, err := s.Explain(context.Background(), req())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range exp.Hosts {
		in := h.Scores[0].Inputs[0]
		switch h.Host {
		case "h01":
			if h.Rank != 2 || !in.Unavailable || in.AgeSeconds != 120 {
				t.Errorf("h01: rank %d, input %+v: want last, unavailable, 120 s old", h.Rank, in)
			}
		case "h02":
			if h.Rank != 1 || in.Value != 0.95 || in.AgeSeconds != 0 {
				t.Errorf("h02: rank %d, input %+v", h.Rank, in)
			}
		}
	}
	cfg.EnabledFilters = append(cfg.EnabledFilters, "MetricFilter")
	s = c.scheduler(t, cfg, PolicyClaim, 1)
	exp, _ = s.Explain(context.Background(), req())
	if exp.Hosts[0].RejectedBy != "MetricFilter" || exp.Hosts[0].Reason != "metric cpu.percent unavailable" {
		t.Errorf("MetricFilter on h01: %+v", exp.Hosts[0])
	}
}

// TestMetricsRankedLikeExplain holds MetricsWeigher's place in the ranked
// walk (its value kept in the dense rows, refreshed as measurements age
// past max_age, as records arrive and as claims assume load) to Explain's
// reading of every candidate's measurement at the decision's time: on a
// cloud large enough for the walk, with measurements missing, stale,
// ageing out between decisions and replaced, and claims that move measured
// instances, every decision tries the hosts in Explain's order — and the
// walk, not the full pass, answers most of them.
func TestMetricsRankedLikeExplain(t *testing.T) {
	for _, required := range []bool{false, true} {
		t.Run(fmt.Sprintf("required=%v", required), func(t *testing.T) {
			ctx := context.Background()
			r := rand.New(rand.NewPCG(28, 5))
			n := rankedMin + 150
			c := newCloud(t, 0)
			names := make([]string, n)
			measureAt := func(i int, age time.Duration) {
				name := names[i]
				insts := map[string]float64{}
				for j := 0; j < r.IntN(3); j++ {
					insts[fmt.Sprintf("i-%s-%d", name, j)] = float64(r.IntN(5)) / 2
				}
				c.measure(t, name, float64(r.IntN(21))/20, c.clk.Now().Add(-age), insts)
			}
			for i := range names {
				names[i] = fmt.Sprintf("h%05d", i)
				c.addHost(t, names[i])
				if lv := r.IntN(6); lv > 0 {
					c.use(t, names[i], "u-"+names[i], placement.Resources{placement.VCPU: int64(4 * lv), placement.MemoryMB: int64(lv * 14000), placement.DiskGB: int64(lv * 200)})
				}
				// Required: every host measured, so decisions succeed
				// until measurements age out; otherwise one in ten has none.
				if required || r.IntN(10) > 0 {
					measureAt(i, time.Duration(r.IntN(50))*time.Second)
				}
			}
			cfg := DefaultConfig()
			if !slices.Contains(cfg.Weighers, "MetricsWeigher") {
				t.Fatalf("MetricsWeigher is not among the default weighers %v", cfg.Weighers)
			}
			dup := cfg
			dup.Weighers = append(slices.Clone(cfg.Weighers), "MetricsWeigher")
			if err := dup.Validate(); err == nil || !strings.Contains(err.Error(), "MetricsWeigher is listed twice") {
				t.Errorf("a weigher listed twice: Validate() = %v", err)
			}
			cfg.Metrics.WeightSetting = []MetricWeight{{Name: records.MetricCPUPercent, Ratio: -1}}
			cfg.Metrics.Required = required
			cfg.Metrics.WeightOfUnavailable = -50
			cfg.MaxAttempts = 5
			s := c.scheduler(t, cfg, PolicyClaim, 1)
			// Every row holds the value Explain would read at the rows' time.
			checkRows := func(trial int) {
				t.Helper()
				d := &s.view.dense
				for i, h := range s.view.hosts {
					v, missing := metricsValue(h, &d.metrics.cfg, d.metrics.mult, d.metrics.asOf)
					if row := &d.rows[h.idx]; row.raw[metricsSlot] != v || row.metricMissing != (missing != "") {
						t.Fatalf("trial %d, host %d %s: row holds %v (missing %v), the host weighs %v (missing %q)", trial, i, h.Name, row.raw[metricsSlot], row.metricMissing, v, missing)
					}
				}
			}
			failed := 0
			for trial := 0; trial < 40; trial++ {
				c.clk.Advance(3 * time.Second) // measurements age past max_age between decisions
				for _, name := range names {
					if trial%10 == 0 {
						c.addService(t, name) // heard from: only the measurements age
					}
				}
				for j := 0; j < 6; j++ {
					measureAt(r.IntN(n), time.Duration(r.IntN(20))*time.Second)
				}
				uuid := fmt.Sprintf("i-%s-0", names[r.IntN(n)]) // measured on its host, or a new one
				req := func() *Request {
					return &Request{InstanceUUID: uuid, Resources: placement.Resources{placement.VCPU: int64(1 + r.IntN(8)), placement.MemoryMB: int64(512 * (1 + r.IntN(32)))}}
				}
				q := req()
				exp, eerr := s.Explain(ctx, q)
				want := make([]string, cfg.HostSubsetSize+cfg.MaxAttempts)
				for _, h := range exp.Hosts {
					if h.Rank >= 1 && h.Rank <= len(want) {
						want[h.Rank-1] = h.Host
					}
				}
				var got []string
				_, err := s.Select(ctx, q, func(_ context.Context, cand Candidate) (int64, error) {
					got = append(got, cand.Host)
					return 0, &placement.ConflictError{Kind: placement.ProviderGeneration}
				})
				checkRows(trial)
				if eerr != nil {
					// Required and a weighed host's measurement aged out:
					// Select fails the same way.
					failed++
					if err == nil || err.Error() != eerr.Error() {
						t.Fatalf("trial %d: Explain fails with %v, Select with %v", trial, eerr, err)
					}
					continue
				}
				if !IsNoValidHost(err) {
					t.Fatalf("trial %d: want NoValidHost after refused claims, got %v", trial, err)
				}
				if fmt.Sprint(got) != fmt.Sprint(want[:min(len(want), exp.Candidates)]) {
					t.Fatalf("trial %d: Select tried %v, Explain ranks %v", trial, got, want)
				}
				// Half the time the claim succeeds: its load is assumed on
				// the chosen host and credited to the one it was measured on.
				if trial%2 == 0 {
					if _, err := s.Select(ctx, q, storeClaim(c.st, fmt.Sprint("claim-", trial), q.Resources)); err != nil {
						t.Fatalf("trial %d: claim: %v", trial, err)
					}
					checkRows(trial)
				}
			}
			if required && failed == 0 {
				t.Errorf("no decision met a measurement older than max_age: the test does not exercise required")
			}
			if !required && s.walks < 20 {
				t.Errorf("the ranked walk answered %d of the decisions, want most", s.walks)
			}
		})
	}
}
